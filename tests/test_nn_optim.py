"""Optimizers against hand-computed numpy updates, gradient clipping, and training a tiny
model on every device."""
import numpy as np
import pytest

import tensorlite as tl
import tensorlite.nn.functional as F
from tensorlite import nn, optim
from tensorlite.nn.utils import clip_grad_norm_, clip_grad_value_
from conftest import assert_close, numpy_adam, tolerance


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


# ---- against torch.optim: trajectories, parameter groups, state_dict ---------------------

TORCH_CASES = [  # (name, kwargs): each runs on tensorlite and torch with the same gradients
    ("SGD", dict(lr=0.1)), ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.8, nesterov=True, maximize=True)),
    ("RMSprop", dict()), ("RMSprop", dict(lr=0.02, alpha=0.9, eps=1e-6, weight_decay=0.1, momentum=0.5)),
    ("RMSprop", dict(lr=0.01, centered=True, momentum=0.9, maximize=True)),
    ("Adagrad", dict()), ("Adagrad", dict(lr=0.1, lr_decay=0.05, weight_decay=0.02, initial_accumulator_value=0.3,
                                          eps=1e-6, maximize=True)),
    ("Adam", dict(lr=0.05, weight_decay=0.1, amsgrad=True)), ("Adam", dict(lr=0.02, betas=(0.8, 0.9), maximize=True)),
    ("Adam", dict(lr=0.02, weight_decay=0.1, decoupled_weight_decay=True)), ("AdamW", dict(lr=0.03, amsgrad=True)),
    ("AdamW", dict(lr=0.01, weight_decay=0.2, maximize=True)),
]
CASE_IDS = [f"{name}-{i}" for i, (name, _) in enumerate(TORCH_CASES)]


def torch_trajectory(torch, name, kwargs, p0s, grads):
    ps = [torch.nn.Parameter(torch.tensor(p)) for p in p0s]
    opt = getattr(torch.optim, name)(ps, **kwargs)
    out = []
    for gs in grads:
        for p, g in zip(ps, gs):
            p.grad = torch.tensor(g)
        opt.step()
        out.append([p.detach().numpy().copy() for p in ps])
    return out


def tl_run(name, kwargs, ps, grads, device, opt=None):
    opt = opt or getattr(optim, name)(ps, **kwargs)
    out = []
    for gs in grads:
        for p, g in zip(ps, gs):
            p.grad = tl.tensor(g, device=device)
        opt.step()
        out.append([p.numpy() for p in ps])
    return opt, out


@pytest.mark.parametrize("name,kwargs", TORCH_CASES, ids=CASE_IDS)
def test_optimizer_trajectory_matches_torch(device, rng, name, kwargs):
    torch = pytest.importorskip("torch")
    p0s = [rng.standard_normal((3, 4)), rng.standard_normal(5)]
    grads = [[rng.standard_normal(p.shape) for p in p0s] for _ in range(5)]
    ps = [nn.Parameter(tl.tensor(p, device=device)) for p in p0s]
    _, got = tl_run(name, kwargs, ps, grads, device)
    for step_got, step_ref in zip(got, torch_trajectory(torch, name, kwargs, p0s, grads)):
        for g, r in zip(step_got, step_ref):
            assert_close(g, r)


@pytest.mark.parametrize("dtype", [tl.float32, tl.float16, tl.bfloat16], ids=str)
@pytest.mark.parametrize("name,kwargs", [TORCH_CASES[i] for i in (1, 5, 7, 8)], ids=str)
def test_low_precision_parameters(device, rng, dtype, name, kwargs):
    """Half and single precision parameters keep their dtype; two steps agree with torch's float64."""
    torch = pytest.importorskip("torch")
    p0 = rng.standard_normal((3, 5)).astype(dtype.np).astype(np.float64)  # representable in dtype
    grads = [[rng.standard_normal((3, 5))] for _ in range(2)]
    p = nn.Parameter(tl.tensor(p0, dtype=dtype, device=device))
    _, got = tl_run(name, kwargs, [p], [[g[0].astype(np.float32)] for g in grads], device)
    assert p.dtype is dtype
    ref = torch_trajectory(torch, name, kwargs, [p0], [[g[0].astype(np.float32).astype(np.float64)] for g in grads])
    rtol = 1e-5 if dtype is tl.float32 else 8 * tolerance(dtype)[0]
    np.testing.assert_allclose(got[-1][0].astype(np.float64), ref[-1][0], rtol=rtol, atol=rtol)


@pytest.mark.parametrize("name,kwargs", TORCH_CASES, ids=CASE_IDS)
def test_state_dict_resumes_identically(device, rng, name, kwargs):
    """A state saved mid-run (tl.save / tl.load) and loaded into a fresh optimizer continues exactly."""
    import io
    p0s = [rng.standard_normal((2, 3)), rng.standard_normal(4)]
    grads = [[rng.standard_normal(p.shape) for p in p0s] for _ in range(5)]
    _, ref = tl_run(name, kwargs, [nn.Parameter(tl.tensor(p, device=device)) for p in p0s], grads, device)
    ps = [nn.Parameter(tl.tensor(p, device=device)) for p in p0s]
    opt, _ = tl_run(name, kwargs, ps, grads[:2], device)
    buf = io.BytesIO()
    tl.save({"params": [p.detach() for p in ps], "opt": opt.state_dict()}, buf)
    buf.seek(0)
    saved = tl.load(buf)
    qs = [nn.Parameter(t) for t in saved["params"]]
    opt2 = getattr(optim, name)(qs, lr=123.0)  # the saved lr wins
    opt2.load_state_dict(saved["opt"])
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    _, got = tl_run(name, kwargs, qs, grads[2:], device, opt2)
    for g, r in zip(got[-1], ref[-1]):
        np.testing.assert_array_equal(g, r)


@pytest.mark.parametrize("name,kwargs", TORCH_CASES[1:2] + TORCH_CASES[4:5] + TORCH_CASES[7:9], ids=str)
def test_state_dict_layout_is_torchs(rng, name, kwargs):
    torch = pytest.importorskip("torch")
    shapes = [(2, 3), (4,), (3,)]
    ps = [nn.Parameter(tl.tensor(rng.standard_normal(s))) for s in shapes]
    tps = [torch.nn.Parameter(torch.tensor(p.numpy())) for p in ps]
    groups = lambda xs: [{"params": xs[:2]}, {"params": xs[2:], "lr": 0.5}]  # noqa: E731
    opt, topt = getattr(optim, name)(groups(ps), **kwargs), getattr(torch.optim, name)(groups(tps), **kwargs)
    for p, tp in zip(ps[:2], tps[:2]):  # the last parameter has no gradient
        p.grad, tp.grad = tl.ones(p.shape, dtype=p.dtype), torch.ones(tp.shape, dtype=tp.dtype)
    opt.step(), topt.step()
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert [g["params"] for g in sd["param_groups"]] == [g["params"] for g in tsd["param_groups"]] == [[0, 1], [2]]
    assert sorted(sd["state"]) == sorted(tsd["state"])
    for i, buffers in tsd["state"].items():
        assert set(sd["state"][i]) == set(buffers)
        for k, v in buffers.items():
            if k == "step":
                assert sd["state"][i][k] == v.item()
            else:
                assert_close(sd["state"][i][k], v.numpy(), check_dtype=False)
    for g, tg in zip(sd["param_groups"], tsd["param_groups"]):
        assert {k: v for k, v in tg.items() if k in g} == g  # torch's extra keys: foreach, fused, ...


def test_param_groups_api():
    a, b, c = (nn.Parameter(tl.ones(2)) for _ in range(3))
    opt = optim.RMSprop([a], lr=0.1)
    assert opt.defaults["alpha"] == 0.99 and opt.defaults["lr"] == 0.1
    opt.add_param_group({"params": b, "momentum": 0.5})  # a lone Tensor is a group of one
    assert opt.param_groups[1]["params"] == [b] and opt.param_groups[1]["momentum"] == 0.5
    assert opt.param_groups[1]["lr"] == 0.1
    with pytest.raises(ValueError, match="more than once"):
        opt.add_param_group({"params": [a, c]})
    with pytest.raises(ValueError, match="more than once"):
        optim.SGD([c, c])
    with pytest.raises(ValueError, match="iterable of Tensors or of dicts, got a Tensor"):
        optim.SGD(c)
    with pytest.raises(ValueError, match="'params' entry"):
        opt.add_param_group({"lr": 0.1})
    model = nn.Linear(2, 1)
    named = optim.SGD(model.named_parameters(), lr=0.1)
    assert named.param_groups[0]["params"] == [model.weight, model.bias]
    assert named.state_dict()["param_groups"][0]["param_names"] == ["weight", "bias"]  # as torch's
    ada = optim.Adagrad([{"params": [a]}, {"params": [b], "initial_accumulator_value": 0.5}])
    assert ada.state_dict()["state"][1]["sum"].tolist() == [0.5, 0.5]  # Adagrad's state starts at construction


def test_torch_implementation_switches():
    p = nn.Parameter(tl.ones(2))
    for make in (lambda: optim.AdamW([p], fused=True, foreach=False, capturable=True),
                 lambda: optim.SGD([p], fused=True),
                 lambda: optim.Adagrad([p], foreach=True), lambda: optim.RMSprop([p], capturable=True)):
        assert make().param_groups[0]["params"] == [p]  # accepted: one implementation here
    with pytest.raises(ValueError, match="differentiable=True .* not supported"):
        optim.Adam([p], differentiable=True)
    with pytest.raises(TypeError, match="momentun"):
        optim.SGD([p], momentun=0.9)  # a misspelt setting is not swallowed


def test_load_state_dict_errors():
    a, b = nn.Parameter(tl.ones(2)), nn.Parameter(tl.ones(3))
    sd = optim.SGD([a, b], momentum=0.9).state_dict()
    with pytest.raises(ValueError, match="1 parameter groups in the state, 2 in the optimizer"):
        optim.SGD([{"params": [a]}, {"params": [b]}]).load_state_dict(sd)
    with pytest.raises(ValueError, match="group 0 has 2 parameters in the state, 1 in the optimizer"):
        optim.SGD([a]).load_state_dict(sd)
    with pytest.raises(KeyError, match="'state' and 'param_groups'"):
        optim.SGD([a]).load_state_dict({"param_groups": []})
    sd["state"][7] = {"momentum_buffer": tl.ones(2)}
    with pytest.raises(KeyError, match="parameter 7, which no group lists"):
        optim.SGD([a, b]).load_state_dict(sd)


def test_adamw_bf16_state_stays_float32_through_load():
    p = nn.Parameter(tl.ones(3, dtype=tl.bfloat16))
    opt = optim.AdamW([p])
    p.grad = tl.ones(3, dtype=tl.bfloat16)
    opt.step()
    opt2 = optim.AdamW([p])
    opt2.load_state_dict(opt.state_dict())
    assert opt2.state[p]["exp_avg"].dtype == tl.float32
    assert opt2.state[p]["exp_avg"] is not opt.state[p]["exp_avg"]  # a copy: the buffers change in place


def test_sgd_momentum_buffer_is_not_the_gradient():
    p = nn.Parameter(tl.ones(2))
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = tl.ones(2)
    opt.step()
    with tl.no_grad():
        p.grad.mul_(0.0)  # clip_grad_norm_ and friends write the gradient in place
    assert opt.state[p]["momentum_buffer"].tolist() == [1.0, 1.0]


# ---- capturable Adam / AdamW: step counts and lr on the device ----------------------------

CAPTURABLE_CASES = [("AdamW", dict(betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)),
                    ("AdamW", dict(amsgrad=True, maximize=True)),
                    ("Adam", dict(weight_decay=0.05)), ("Adam", dict(decoupled_weight_decay=True, amsgrad=True))]


@pytest.mark.parametrize("name,kwargs", CAPTURABLE_CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CAPTURABLE_CASES)])
def test_capturable_adam_equals_host_counted_and_torch_under_a_schedule(device, rng, name, kwargs):
    """capturable=True with a Tensor lr that a schedule updates in place gives the trajectory of the
    host-counted optimizer with a float lr, and torch's; one parameter misses its gradient at one
    step (its count must not advance: the per-parameter increment), one is a transposed view."""
    torch = pytest.importorskip("torch")
    p0s = [rng.standard_normal((3, 4)), rng.standard_normal(5), rng.standard_normal((4, 2))]
    grads = [[rng.standard_normal(p.shape) for p in p0s] for _ in range(5)]
    grads[2][1] = None
    make_sched = lambda m, o: m.lr_scheduler.CosineAnnealingLR(o, T_max=4, eta_min=0.01)  # noqa: E731

    def run(mod, ps, lr, wrap, **extra):
        opt = getattr(mod, name)(ps, lr=lr, **kwargs, **extra)
        sched, out = make_sched(mod, opt), []
        for gs in grads:
            for p, g in zip(ps, gs):
                p.grad = None if g is None else wrap(g)
            opt.step()
            sched.step()
            out.append([p.detach().numpy().astype(np.float64) for p in ps])
        return opt, out

    t_ps = [torch.nn.Parameter(torch.tensor(p, dtype=torch.float32)) for p in p0s]
    _, want = run(torch.optim, t_ps, 0.05, lambda g: torch.tensor(g, dtype=torch.float32))

    def tl_params():
        ps = [nn.Parameter(tl.tensor(p, dtype=tl.float32, device=device)) for p in p0s[:2]]
        return ps + [nn.Parameter(tl.tensor(p0s[2].T.copy(), dtype=tl.float32, device=device).mT)]
    wrap = lambda g: tl.tensor(g, dtype=tl.float32, device=device)  # noqa: E731
    _, host = run(optim, tl_params(), 0.05, wrap)
    lr = tl.tensor(0.05, device=device)
    opt, got = run(optim, tl_params(), lr, wrap, capturable=True)
    assert opt.param_groups[0]["lr"] is lr    # scheduled in place: 0.01 + 0.04 * (1 + cos(5 pi / 4)) / 2
    assert lr.item() == pytest.approx(0.01 + 0.02 * (1 + np.cos(np.pi * 5 / 4)), rel=1e-6)
    for step_got, step_host, step_want in zip(got, host, want):
        for g, h, w in zip(step_got, step_host, step_want):
            np.testing.assert_allclose(g, h, rtol=2e-6, atol=2e-7)
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)
    counts = [opt.state[p]["step"] for p in opt.param_groups[0]["params"]]
    assert [(c.shape, c.dtype, str(c.device)) for c in counts] == [((), tl.float32, str(lr.device))] * 3
    assert [c.item() for c in counts] == [5.0, 4.0, 5.0]


def test_capturable_state_dict_is_torchs_and_resumes(device, rng):
    """state['step'] is a 0-d float32 tensor on the parameter's device (torch's layout); a state saved
    mid-run and loaded into a fresh capturable optimizer continues exactly; a host-counted state loaded
    into a capturable optimizer keeps its own setting (torch: the saved param_groups win)."""
    torch = pytest.importorskip("torch")
    import io
    p0s = [rng.standard_normal((2, 3)), rng.standard_normal(4)]
    grads = [[rng.standard_normal(p.shape) for p in p0s] for _ in range(4)]
    make = lambda ps: optim.AdamW(ps, lr=tl.tensor(0.05, device=device), capturable=True)  # noqa: E731
    ps = [nn.Parameter(tl.tensor(p, device=device)) for p in p0s]
    _, ref = tl_run("AdamW", {}, ps, grads, device, make(ps))
    ps = [nn.Parameter(tl.tensor(p, device=device)) for p in p0s]
    opt, _ = tl_run("AdamW", {}, ps, grads[:2], device, make(ps))
    sd = opt.state_dict()
    tps = [torch.nn.Parameter(torch.tensor(p)) for p in p0s]
    tsd = torch.optim.AdamW(tps, lr=torch.tensor(0.05), capturable=True).state_dict()
    assert set(tsd["param_groups"][0]) - {"foreach", "differentiable", "fused"} == set(sd["param_groups"][0])
    assert sd["param_groups"][0]["capturable"] is True
    for i in (0, 1):
        step = sd["state"][i]["step"]
        assert isinstance(step, tl.Tensor) and step.shape == () and step.dtype is tl.float32 and step.item() == 2.0
        assert str(step.device) == str(ps[i].device)
    buf = io.BytesIO()
    tl.save({"params": [p.detach() for p in ps], "opt": sd}, buf)
    buf.seek(0)
    saved = tl.load(buf)
    qs = [nn.Parameter(t.to(device)) for t in saved["params"]]
    opt2 = optim.AdamW(qs, lr=tl.tensor(9.0, device=device), capturable=True)
    opt2.load_state_dict(saved["opt"])
    assert opt2.param_groups[0]["lr"].item() == pytest.approx(0.05) and str(opt2.param_groups[0]["lr"].device) == \
        str(qs[0].device)
    assert str(opt2.state[qs[0]]["step"].device) == str(qs[0].device)
    _, got = tl_run("AdamW", {}, qs, grads[2:], device, opt2)
    for g, r in zip(got[-1], ref[-1]):
        np.testing.assert_array_equal(g, r)
    assert [opt2.state[q]["step"].item() for q in qs] == [4.0, 4.0]
    host = optim.AdamW([nn.Parameter(tl.tensor(p, device=device)) for p in p0s])
    host.load_state_dict(sd)  # the saved groups say capturable: the counts stay on the device
    assert host.param_groups[0]["capturable"] and isinstance(host.state[host.param_groups[0]["params"][0]]["step"],
                                                              tl.Tensor)
    old, _ = tl_run("AdamW", {}, [nn.Parameter(tl.tensor(p, device=device)) for p in p0s], grads[:1], device)
    old_sd = old.state_dict()
    del old_sd["param_groups"][0]["capturable"]   # saved before the setting existed: host counts
    back = optim.AdamW(qs, capturable=True)
    back.load_state_dict(old_sd)
    assert back.param_groups[0]["capturable"] is False and back.state[qs[0]]["step"] == 1


def test_capturable_adamw_rejects_an_lr_it_cannot_read(device):
    p = nn.Parameter(tl.ones(3, device=device))
    p.grad = tl.ones(3, device=device)
    with pytest.raises(tl.DTypeError, match="adamw_step.*lr must be one float32 element"):
        optim.AdamW([p], lr=tl.tensor(0.1, dtype=tl.float64, device=device), capturable=True).step()
    with pytest.raises(ValueError, match="Tensor lr must be 1-element"):
        optim.AdamW([p], lr=tl.ones(2), capturable=True)
    if device != "cpu":
        with pytest.raises(tl.DeviceError, match="adamw_step.*lr must be on the parameter's device"):
            optim.AdamW([p], lr=tl.tensor(0.1), capturable=True).step()
    host = optim.AdamW([p], lr=tl.tensor(0.25, device=device))   # without capturable: read on the host, as torch
    host.step()
    assert host.state[p]["step"] == 1 and p.tolist() == pytest.approx([1 - 0.25 * (1 + 0.01)] * 3, rel=1e-5)


def test_zero_grad_without_set_to_none_writes_in_place():
    p = nn.Parameter(tl.ones(2))
    opt = optim.SGD([p], lr=0.1)
    p.grad = g = tl.tensor([3.0, 4.0])
    opt.zero_grad(set_to_none=False)
    assert p.grad is g and g.tolist() == [0.0, 0.0]   # torch's: the same tensor, zeroed
