"""Optimizers against hand-computed numpy updates, gradient clipping, and training a tiny
model on every device."""
import numpy as np
import pytest

import tensorlite as tl
import tensorlite.nn.functional as F
from tensorlite import nn, optim
from tensorlite.nn.utils import clip_grad_norm_, clip_grad_value_
from conftest import numpy_adam


def run_steps(opt_factory, p0, grads, device="cpu"):
    """Apply the optimizer for len(grads) steps with the given gradients; returns the trajectory."""
    p = nn.Parameter(tl.tensor(p0, device=device))
    opt = opt_factory([p])
    out = []
    for g in grads:
        p.grad = tl.tensor(g, device=device)
        opt.step()
        out.append(p.numpy().astype(np.float64))
    return p, opt, out


def grads_for(rng, n, shape):
    return [rng.standard_normal(shape) for _ in range(n)]


def test_sgd_plain(device, rng):
    p0, gs = rng.standard_normal(5), grads_for(rng, 2, 5)
    _, _, traj = run_steps(lambda ps: optim.SGD(ps, lr=0.1), p0, gs, device)
    np.testing.assert_allclose(traj[-1], p0 - 0.1 * gs[0] - 0.1 * gs[1], rtol=1e-12)


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_momentum_weight_decay(device, rng, nesterov):
    lr, mu, wd, damp = 0.05, 0.9, 0.01, 0.0 if nesterov else 0.2
    p0, gs = rng.standard_normal((2, 3)), grads_for(rng, 3, (2, 3))
    _, opt, traj = run_steps(lambda ps: optim.SGD(ps, lr=lr, momentum=mu, dampening=damp, weight_decay=wd,
                                                  nesterov=nesterov), p0, gs, device)
    p, buf = p0.copy(), None
    for g, got in zip(gs, traj):
        d = g + wd * p
        buf = d if buf is None else mu * buf + (1 - damp) * d
        p = p - lr * (d + mu * buf if nesterov else buf)
        np.testing.assert_allclose(got, p, rtol=1e-12)
    assert "momentum_buffer" in next(iter(opt.state.values()))


def test_sgd_maximize_and_validation(rng):
    p0, gs = rng.standard_normal(3), grads_for(rng, 1, 3)
    _, _, traj = run_steps(lambda ps: optim.SGD(ps, lr=0.5, maximize=True), p0, gs)
    np.testing.assert_allclose(traj[0], p0 + 0.5 * gs[0])
    with pytest.raises(ValueError, match="nesterov"):
        optim.SGD([nn.Parameter(tl.zeros(1))], nesterov=True)
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([])
    x = tl.zeros(2, requires_grad=True)
    with pytest.raises(tl.TensorliteError, match="leaf"):
        optim.SGD([x * 2])


@pytest.mark.parametrize("amsgrad", [False, True])
def test_adamw_matches_hand_computed(device, rng, amsgrad):
    p0, gs = rng.standard_normal((3, 4)), grads_for(rng, 4, (3, 4))
    _, opt, traj = run_steps(lambda ps: optim.AdamW(ps, lr=0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1,
                                                    amsgrad=amsgrad), p0, gs, device)
    for got, ref in zip(traj, numpy_adam(p0, gs, 0.01, (0.8, 0.95), 1e-6, 0.1, True, amsgrad)):
        np.testing.assert_allclose(got, ref, rtol=1e-10)
    assert next(iter(opt.state.values()))["step"] == 4


def test_adamw_step_that_fails_counts_nothing(device, rng):
    p0, gs = rng.standard_normal((3, 4)), grads_for(rng, 1, (3, 4))
    p = nn.Parameter(tl.tensor(p0, device=device))
    opt = optim.AdamW([p], lr=0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)
    p.grad = tl.zeros((4, 3), dtype=p.dtype, device=device)   # the wrong shape: the update raises
    with pytest.raises(tl.ShapeError):
        opt.step()
    assert opt.state[p].get("step", 0) == 0
    p.grad = tl.tensor(gs[0], device=device)
    opt.step()                                                # the first update is bias-corrected as step 1
    assert opt.state[p]["step"] == 1
    np.testing.assert_allclose(p.numpy(), numpy_adam(p0, gs, 0.01, (0.8, 0.95), 1e-6, 0.1, True, False)[0],
                               rtol=1e-10)


def test_adamw_defaults_are_torchs():
    opt = optim.AdamW([nn.Parameter(tl.zeros(1))])
    g = opt.param_groups[0]
    assert (g["lr"], g["betas"], g["eps"], g["weight_decay"], g["amsgrad"]) == (1e-3, (0.9, 0.999), 1e-8, 1e-2, False)


def test_adam_adds_l2_to_gradient(rng):
    p0, gs = rng.standard_normal(6), grads_for(rng, 3, 6)
    _, _, traj = run_steps(lambda ps: optim.Adam(ps, lr=0.02, weight_decay=0.05), p0, gs)
    for got, ref in zip(traj, numpy_adam(p0, gs, 0.02, (0.9, 0.999), 1e-8, 0.05, False)):
        np.testing.assert_allclose(got, ref, rtol=1e-10)


def test_adamw_matches_torch(rng):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    p0, gs = rng.standard_normal(8), grads_for(rng, 5, 8)
    _, _, traj = run_steps(lambda ps: optim.AdamW(ps, lr=0.03), p0, gs)
    tp = torch.nn.Parameter(torch.tensor(p0))
    topt = torch.optim.AdamW([tp], lr=0.03)
    for g, got in zip(gs, traj):
        tp.grad = torch.tensor(g)
        topt.step()
        np.testing.assert_allclose(got, tp.detach().numpy(), rtol=1e-12)


def test_param_groups_skip_missing_grads_and_zero_grad():
    a, b, c = (nn.Parameter(tl.ones(2)) for _ in range(3))
    opt = optim.SGD([{"params": [a]}, {"params": [b, c], "lr": 0.5}], lr=0.1)
    a.grad, b.grad = tl.ones(2), tl.ones(2)
    opt.step()
    np.testing.assert_allclose(a.numpy(), 0.9)
    np.testing.assert_allclose(b.numpy(), 0.5)
    np.testing.assert_allclose(c.numpy(), 1.0)  # no gradient: untouched
    opt.zero_grad(set_to_none=False)
    assert not a.grad.numpy().any() and c.grad is None
    opt.zero_grad()
    assert a.grad is None and b.grad is None


def test_optimizer_state_dict_round_trip(rng):
    p0, gs = rng.standard_normal(4), grads_for(rng, 4, 4)
    _, _, ref = run_steps(lambda ps: optim.AdamW(ps, lr=0.1), p0, gs)
    p, opt, _ = run_steps(lambda ps: optim.AdamW(ps, lr=0.1), p0, gs[:2])
    q = nn.Parameter(tl.tensor(p.numpy()))
    opt2 = optim.AdamW([q], lr=0.5)
    opt2.load_state_dict(opt.state_dict())
    assert opt2.param_groups[0]["lr"] == 0.1
    for g in gs[2:]:
        q.grad = tl.tensor(g)
        opt2.step()
    np.testing.assert_allclose(q.numpy(), ref[-1], rtol=1e-12)


def test_step_with_closure():
    p = nn.Parameter(tl.tensor([3.0]))
    opt = optim.SGD([p], lr=0.25)

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss
    assert opt.step(closure).item() == 9.0
    np.testing.assert_allclose(p.numpy(), [1.5])


# ---- gradient clipping -----------------------------------------------------------------

def test_clip_grad_norm(device, rng):
    ps = [nn.Parameter(tl.zeros(s, device=device)) for s in ((3, 2), (4,))]
    gs = [rng.standard_normal(p.shape).astype(np.float32) for p in ps]
    for p, g in zip(ps, gs):
        p.grad = tl.tensor(g, device=device)
    norm = np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in gs))
    total = clip_grad_norm_(ps, max_norm=norm / 2)
    np.testing.assert_allclose(total.item(), norm, rtol=1e-6)
    for p, g in zip(ps, gs):
        np.testing.assert_allclose(p.grad.numpy(), g / 2, rtol=1e-5)
    before = [p.grad.numpy() for p in ps]
    clip_grad_norm_(ps, max_norm=10 * norm)  # below the limit: unchanged
    for p, b in zip(ps, before):
        np.testing.assert_allclose(p.grad.numpy(), b, rtol=1e-6)
    inf_norm = clip_grad_norm_(ps, max_norm=1e9, norm_type="inf")
    np.testing.assert_allclose(inf_norm.item(), max(np.abs(b).max() for b in before), rtol=1e-6)


def test_clip_grad_norm_nonfinite_and_value():
    p = nn.Parameter(tl.zeros(2))
    p.grad = tl.tensor([float("inf"), 1.0])
    with pytest.raises(tl.TensorliteError, match="non-finite"):
        clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    p.grad = tl.tensor([-3.0, 0.5])
    clip_grad_value_([p], 1.0)
    np.testing.assert_array_equal(p.grad.numpy(), [-1.0, 0.5])


# ---- training --------------------------------------------------------------------------

@pytest.mark.parametrize("make_opt", [lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9),
                                      lambda ps: optim.AdamW(ps, lr=0.05, weight_decay=0.0)], ids=["sgd", "adamw"])
def test_tiny_regression_trains_down(device, rng, make_opt):
    tl.manual_seed(0)
    x = rng.standard_normal((64, 3))
    y = x @ np.array([[1.5], [-2.0], [0.5]]) + 0.3 + 0.01 * rng.standard_normal((64, 1))
    xt, yt = (tl.tensor(a, dtype=tl.float32, device=device) for a in (x, y))
    model = nn.Linear(3, 1).to(device)
    opt = make_opt(model.parameters())
    losses = []
    for _ in range(150):
        opt.zero_grad()
        loss = F.mse_loss(model(xt), yt)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 1e-3 * losses[0] and losses[-1] < 1e-3
    np.testing.assert_allclose(model.weight.numpy().ravel(), [1.5, -2.0, 0.5], atol=0.02)
    np.testing.assert_allclose(model.bias.numpy(), [0.3], atol=0.02)


def test_tiny_classifier_trains_down(device, rng):
    tl.manual_seed(1)
    x = rng.standard_normal((128, 2))
    labels = (x[:, 0] * x[:, 1] > 0).astype(np.int64)  # XOR-like: needs the hidden layer
    model = nn.Sequential(nn.Linear(2, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 2)).to(device)
    opt = optim.AdamW(model.parameters(), lr=0.02)
    xt, yt = tl.tensor(x, dtype=tl.float32, device=device), tl.tensor(labels, device=device)
    for _ in range(200):
        opt.zero_grad()
        loss = F.cross_entropy(model(xt), yt)
        loss.backward()
        clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    accuracy = (model(xt).argmax(-1).numpy() == labels).mean()
    assert loss.item() < 0.15 and accuracy > 0.95
