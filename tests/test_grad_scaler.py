"""tl.amp.GradScaler against torch.amp.GradScaler (where torch is installed): the same
parameters and scales through clean steps, a step with an inf gradient (skipped, the scale
backed off), and growth after growth_interval clean steps; on every device."""
import numpy as np
import pytest

import tensorlite as tl


def _train(fw, device, steps, poison_at):
    """Parameters and scales of SGD with a GradScaler over `steps` steps of (w * x).sum();
    at step `poison_at` the loss is multiplied by inf (every gradient inf or nan)."""
    w = fw.nn.Parameter(fw.tensor([1.0, -2.0, 0.5], device=device))
    x = fw.tensor([0.5, 0.25, -1.0], device=device)
    opt = fw.optim.SGD([w], lr=0.01)
    scaler = fw.amp.GradScaler(device if fw is tl else "cpu", init_scale=8.0, growth_interval=2)
    scales = []
    for i in range(steps):
        opt.zero_grad()
        loss = (w * x * (i + 1)).sum() * (float("inf") if i == poison_at else 1.0)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    return w.detach().cpu().numpy() if fw is not tl else w.numpy(), scales


def test_grad_scaler_matches_torch(device):
    torch = pytest.importorskip("torch")
    ours = _train(tl, device, 6, poison_at=2)
    theirs = _train(torch, "cpu", 6, poison_at=2)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-6)
    assert ours[1] == theirs[1] == [8.0, 16.0, 8.0, 8.0, 16.0, 16.0]


def test_grad_scaler_semantics(device):
    w = tl.nn.Parameter(tl.tensor([1.0, 2.0], device=device))
    opt = tl.optim.SGD([w], lr=0.5)
    scaler = tl.amp.GradScaler(device, init_scale=4.0)
    scaler.scale((w * w).sum()).backward()
    assert w.grad.tolist() == [8.0, 16.0]  # scaled
    scaler.unscale_(opt)
    assert w.grad.tolist() == [2.0, 4.0]  # true gradients, e.g. for clipping
    with pytest.raises(ValueError, match="unscale_"):
        scaler.unscale_(opt)
    scaler.step(opt)  # no second unscale
    assert w.tolist() == [0.0, 0.0]
    scaler.update()
    state = scaler.state_dict()
    assert state == {"scale": 4.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000,
                     "_growth_tracker": 1}
    other = tl.amp.GradScaler(device)
    other.load_state_dict(state)
    assert other.get_scale() == 4.0 and other.state_dict() == state
    off = tl.amp.GradScaler(device, enabled=False)
    assert off.get_scale() == 1.0 and off.scale(w) is w and off.state_dict() == {}
    for bad in (dict(growth_factor=1.0), dict(backoff_factor=1.5), dict(growth_interval=0)):
        with pytest.raises(ValueError, match="GradScaler"):
            tl.amp.GradScaler(device, **bad)
