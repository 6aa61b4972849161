"""Learning-rate schedules step by step against torch.optim.lr_scheduler (the same lr and momentum
sequences), state_dict resumption, and a schedule driving the optimizers on every device."""
import io

import numpy as np
import pytest

import tensorlite as tl
from tensorlite import nn, optim
from tensorlite.optim import lr_scheduler as sched_tl
from conftest import assert_close

torch = pytest.importorskip("torch")
sched_torch = torch.optim.lr_scheduler

SGD2 = lambda o, ps: o.SGD([{"params": ps[:1]}, {"params": ps[1:], "lr": 0.5}], lr=0.1, momentum=0.9)  # noqa: E731
ADAM2 = lambda o, ps: o.Adam([{"params": ps[:1]}, {"params": ps[1:], "lr": 0.02}], lr=0.01)  # noqa: E731
CASES = {  # id: (optimizer factory, schedule factory, steps); factories take torch's or tensorlite's module
    "step": (SGD2, lambda m, o: m.StepLR(o, step_size=3, gamma=0.5), 10),
    "multistep": (SGD2, lambda m, o: m.MultiStepLR(o, milestones=[2, 5, 5], gamma=0.3), 8),
    "exponential": (SGD2, lambda m, o: m.ExponentialLR(o, gamma=0.9), 6),
    "cosine": (SGD2, lambda m, o: m.CosineAnnealingLR(o, T_max=4, eta_min=0.01), 13),
    "lambda": (SGD2, lambda m, o: m.LambdaLR(o, [lambda e: 0.95 ** e, lambda e: 1 / (e + 1)]), 6),
    "multiplicative": (SGD2, lambda m, o: m.MultiplicativeLR(o, lambda e: 0.9 if e % 2 else 0.8), 6),
    "linear-warmup": (SGD2, lambda m, o: m.LinearLR(o, start_factor=0.25, total_iters=4), 7),
    "linear-decay": (SGD2, lambda m, o: m.LinearLR(o, start_factor=1.0, end_factor=0.1, total_iters=5), 7),
    "constant": (SGD2, lambda m, o: m.ConstantLR(o, factor=0.5, total_iters=3), 5),
    "polynomial": (SGD2, lambda m, o: m.PolynomialLR(o, total_iters=6, power=2.0), 8),
    "onecycle-cos": (SGD2, lambda m, o: m.OneCycleLR(o, max_lr=[1.0, 2.0], total_steps=20), 19),
    "onecycle-linear-3phase": (ADAM2, lambda m, o: m.OneCycleLR(o, max_lr=0.1, epochs=3, steps_per_epoch=5,
                                                                anneal_strategy="linear", three_phase=True,
                                                                pct_start=0.25), 15),
    "onecycle-no-momentum": (lambda o, ps: o.Adagrad(ps), lambda m, o: m.OneCycleLR(
        o, max_lr=0.3, total_steps=10, cycle_momentum=False, div_factor=10.0, final_div_factor=100.0), 10),
    "sequential": (SGD2, lambda m, o: m.SequentialLR(o, [m.LinearLR(o, start_factor=0.25, total_iters=3),
                                                         m.CosineAnnealingLR(o, T_max=5)], milestones=[3]), 10),
    "chained": (SGD2, lambda m, o: m.ChainedScheduler([m.ConstantLR(o, factor=0.5, total_iters=2),
                                                       m.ExponentialLR(o, gamma=0.9)]), 5),
    "sequential-3": (ADAM2, lambda m, o: m.SequentialLR(o, [m.ConstantLR(o, factor=0.1, total_iters=2),
                                                            m.ExponentialLR(o, gamma=0.7),
                                                            m.StepLR(o, step_size=2)], milestones=[2, 5]), 9),
}


def lr_sequence(module, optim_module, params, opt_factory, sched_factory, steps, chained=None):
    """(lr, momentum) of every group after construction and after each step, with get_last_lr()."""
    opt = opt_factory(optim_module, params)
    scheds = [sched_factory(module, opt)] + ([chained(module, opt)] if chained else [])
    seen = []
    for i in range(steps + 1):
        if i:
            opt.step()  # no gradients: a no-op, in the order torch asks for
            for s in scheds:
                s.step()
        groups = [(g["lr"], g.get("momentum"), tuple(g.get("betas", ()))) for g in opt.param_groups]
        seen.append((groups, [float(x) for x in scheds[-1].get_last_lr()]))
    return seen


def both(opt_factory, sched_factory, steps, chained=None):
    tps = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))]
    ps = [nn.Parameter(tl.zeros(2)), nn.Parameter(tl.zeros(3))]
    return (lr_sequence(sched_tl, optim, ps, opt_factory, sched_factory, steps, chained),
            lr_sequence(sched_torch, torch.optim, tps, opt_factory, sched_factory, steps, chained))


@pytest.mark.parametrize("case", list(CASES))
def test_schedule_matches_torch(case):
    got, ref = both(*CASES[case])
    assert got == ref  # the same float arithmetic: identical, not close


def test_chained_schedules_compose_as_torchs():
    got, ref = both(SGD2, lambda m, o: m.LinearLR(o, start_factor=0.5, total_iters=3), 8,
                    chained=lambda m, o: m.ExponentialLR(o, gamma=0.9))
    assert got == ref


@pytest.mark.parametrize("kwargs", [dict(), dict(mode="max", threshold_mode="abs", threshold=0.1, patience=1,
                                                 cooldown=2, factor=0.5, min_lr=[0.02, 0.1])])
def test_reduce_on_plateau_matches_torch(kwargs):
    metrics = [1.0, 0.9, 0.95, 0.95, 0.96, 0.97, 0.8, 0.8, 0.8, 1.2, 1.2, 1.2, 1.2] * 2
    seqs = []
    for m, o, ps in ((sched_tl, optim, [nn.Parameter(tl.zeros(1)), nn.Parameter(tl.zeros(1))]),
                     (sched_torch, torch.optim, [torch.nn.Parameter(torch.zeros(1)) for _ in range(2)])):
        opt = SGD2(o, ps)
        s = m.ReduceLROnPlateau(opt, **kwargs)
        seq = []
        for x in metrics:
            opt.step()
            s.step(x)
            seq.append(([g["lr"] for g in opt.param_groups], s.get_last_lr(), s.num_bad_epochs, s.cooldown_counter))
        seqs.append(seq)
    assert seqs[0] == seqs[1]
    assert seqs[0][-1][0] != seqs[0][0][0]  # it did reduce


@pytest.mark.parametrize("case", ["step", "multistep", "cosine", "onecycle-linear-3phase", "sequential", "lambda",
                                  "chained"])
def test_state_dict_resumes(case):
    """Save optimizer + schedule mid-run (tl.save), rebuild both, load, continue: the same sequence."""
    opt_factory, sched_factory, steps = CASES[case]
    ref = lr_sequence(sched_tl, optim, [nn.Parameter(tl.zeros(2)), nn.Parameter(tl.zeros(3))], opt_factory,
                      sched_factory, steps)
    ps = [nn.Parameter(tl.zeros(2)), nn.Parameter(tl.zeros(3))]
    opt = opt_factory(optim, ps)
    s = sched_factory(sched_tl, opt)
    for _ in range(4):
        opt.step()
        s.step()
    buf = io.BytesIO()
    tl.save({"opt": opt.state_dict(), "sched": s.state_dict()}, buf)
    buf.seek(0)
    saved = tl.load(buf)
    opt2 = opt_factory(optim, ps)
    s2 = sched_factory(sched_tl, opt2)  # as torch: build the schedule, then load both states
    opt2.load_state_dict(saved["opt"])
    s2.load_state_dict(saved["sched"])
    got = [s2.get_last_lr()]
    for _ in range(steps - 4):
        opt2.step()
        s2.step()
        got.append(s2.get_last_lr())
    assert got == [r[1] for r in ref[4:]]


def test_onecycle_drives_adamw_like_torch(device, rng):
    """The betas a schedule sets reach the fused AdamW step: the trajectory is torch's."""
    p0, grads = rng.standard_normal((3, 3)), rng.standard_normal((8, 3, 3))
    p, tp = nn.Parameter(tl.tensor(p0, device=device)), torch.nn.Parameter(torch.tensor(p0))
    opt, topt = optim.AdamW([p], lr=0.1), torch.optim.AdamW([tp], lr=0.1)
    s = sched_tl.OneCycleLR(opt, max_lr=0.5, total_steps=8)
    ts = sched_torch.OneCycleLR(topt, max_lr=0.5, total_steps=8)
    for g in grads:
        p.grad, tp.grad = tl.tensor(g, device=device), torch.tensor(g)
        opt.step(), topt.step()
        s.step(), ts.step()
        assert_close(p, tp.detach().numpy())
    assert opt.param_groups[0]["betas"] == topt.param_groups[0]["betas"]


def test_step_lr_drives_sgd(device, rng):
    p0, grads = rng.standard_normal(4), rng.standard_normal((6, 4))
    p = nn.Parameter(tl.tensor(p0, device=device))
    opt = optim.SGD([p], lr=1.0)
    s = sched_tl.StepLR(opt, step_size=2, gamma=0.5)
    expected = p0.copy()
    for i, g in enumerate(grads):
        p.grad = tl.tensor(g, device=device)
        opt.step()
        s.step()
        expected -= 0.5 ** (i // 2) * g
    assert_close(p, expected)


def test_errors():
    opt = optim.SGD([nn.Parameter(tl.zeros(1))], lr=0.1)
    with pytest.raises(ValueError, match="is not an Optimizer"):
        sched_tl.StepLR(object(), step_size=1)
    with pytest.raises(KeyError, match="no 'initial_lr'.*last_epoch=3"):
        sched_tl.StepLR(opt, step_size=1, last_epoch=3)
    with pytest.raises(ValueError, match="start_factor must be in"):
        sched_tl.LinearLR(opt, start_factor=0.0)
    with pytest.raises(ValueError, match="factor must be in"):
        sched_tl.ConstantLR(opt, factor=2.0)
    with pytest.raises(ValueError, match="expected 1 values of lr_lambda"):
        sched_tl.LambdaLR(opt, [lambda e: 1.0, lambda e: 1.0])
    with pytest.raises(ValueError, match="total_steps or"):
        sched_tl.OneCycleLR(opt, max_lr=1.0)
    with pytest.raises(ValueError, match="pct_start"):
        sched_tl.OneCycleLR(opt, max_lr=1.0, total_steps=10, pct_start=1)
    with pytest.raises(ValueError, match="anneal_strategy"):
        sched_tl.OneCycleLR(opt, max_lr=1.0, total_steps=10, anneal_strategy="exp")
    with pytest.raises(ValueError, match="momentum or betas"):
        sched_tl.OneCycleLR(optim.Adagrad([nn.Parameter(tl.zeros(1))]), max_lr=1.0, total_steps=10)
    s = sched_tl.OneCycleLR(opt, max_lr=1.0, total_steps=2)
    s.step(), s.step()
    with pytest.raises(ValueError, match="tried to step 3 times; total_steps is 2"):
        s.step()
    with pytest.raises(ValueError, match="expected 1 milestones for 2 schedulers"):
        sched_tl.SequentialLR(opt, [sched_tl.StepLR(opt, 1), sched_tl.StepLR(opt, 1)], milestones=[])
    other = optim.SGD([nn.Parameter(tl.zeros(1))])
    with pytest.raises(ValueError, match="same optimizer"):
        sched_tl.SequentialLR(opt, [sched_tl.StepLR(other, 1)], milestones=[])
    with pytest.raises(ValueError, match="ChainedScheduler: expected at least one scheduler"):
        sched_tl.ChainedScheduler([])
    with pytest.raises(ValueError, match="factor should be < 1.0"):
        sched_tl.ReduceLROnPlateau(opt, factor=1.0)
    with pytest.raises(ValueError, match="mode must be"):
        sched_tl.ReduceLROnPlateau(opt, mode="up")
    fresh = optim.SGD([nn.Parameter(tl.zeros(1))], lr=0.5)
    with pytest.warns(UserWarning, match="deprecated"):
        sched_tl.ExponentialLR(fresh, gamma=0.5).step(3)
    np.testing.assert_allclose(fresh.param_groups[0]["lr"], 0.5 * 0.5 ** 3)  # the closed form at epoch 3
