"""torch.optim's other optimizers (Adadelta, Adamax, ASGD, NAdam, RAdam, Rprop, LBFGS; RMSprop and
Adagrad too) against torch on CPU: a small two-layer model from the same initial weights, trained
for ten steps on every device in float64 (to ~1e-10) and float32; state_dict layout and resumption,
lr schedules, the accepted implementation switches, the settings torch refuses, and SparseAdam's
refusal. The SGD/Adam/AdamW trajectories are in test_nn_optim.py."""
import io

import numpy as np
import pytest

import tensorlite as tl
from tensorlite import nn, optim
from conftest import needs_torch, optional_torch

ZOO = [  # (name, kwargs): every case sets lr; the second parameter group runs at lr / 2
    ("Adadelta", dict(lr=1.0)),
    ("Adadelta", dict(lr=0.5, rho=0.8, eps=1e-5, weight_decay=0.1, maximize=True)),
    ("Adamax", dict(lr=0.02)),
    ("Adamax", dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05, maximize=True)),
    ("ASGD", dict(lr=0.05)),
    ("ASGD", dict(lr=0.05, lambd=1e-2, alpha=0.5, t0=3, weight_decay=0.01)),  # averaging from step 4
    ("ASGD", dict(lr=0.02, t0=0, maximize=True)),
    ("NAdam", dict(lr=0.01)),
    ("NAdam", dict(lr=0.01, betas=(0.8, 0.95), weight_decay=0.1, momentum_decay=0.01)),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
    ("RAdam", dict(lr=0.01)),  # rho_t > 5 from step 6: both branches
    ("RAdam", dict(lr=0.01, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1)),
    ("RAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
    ("Rprop", dict(lr=0.01)),
    ("Rprop", dict(lr=0.02, etas=(0.3, 1.5), step_sizes=(1e-3, 0.05), maximize=True)),
    ("RMSprop", dict(lr=0.01, centered=True, momentum=0.5, weight_decay=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1)),
]
ZOO_IDS = [f"{name}-{i}" for i, (name, _) in enumerate(ZOO)]
STEPS = 10


def initial_weights(seed=0):
    """A 4-5-2 tanh network's weights and its data, as float64 numpy arrays."""
    r = np.random.default_rng(seed)
    weights = [r.standard_normal(s) * 0.5 for s in ((5, 4), (5,), (2, 5), (2,))]
    return weights, r.standard_normal((8, 4)), r.standard_normal((8, 2))


def make_params(lib, weights, dtype, device=None):
    kw = {} if device is None else {"device": device}
    return [lib.nn.Parameter(lib.tensor(w, dtype=dtype, **kw)) for w in weights]


def loss_of(params, x, y):
    w1, b1, w2, b2 = params
    return (((x @ w1.T + b1).tanh() @ w2.T + b2 - y) ** 2).mean()


def groups(params, kwargs):
    return [{"params": params[:2]}, {"params": params[2:], "lr": kwargs["lr"] / 2}]


def train(lib, opt, params, x, y, steps, schedule=None):
    """`steps` optimizer steps on the model's loss; the parameters (float64 numpy) after each."""
    out = []
    for _ in range(steps):
        opt.zero_grad()
        loss_of(params, x, y).backward()
        opt.step()
        if schedule is not None:
            schedule.step()
        out.append([np.array(p.detach().cpu().double().numpy()) for p in params])  # copies: p changes in place
    return out


def run_both(device, name, kwargs, dtype_name, steps=STEPS, make_schedule=None, **extra):
    """(tensorlite's trajectory on device, torch's on CPU, the two optimizers) from the same weights."""
    torch = optional_torch()
    weights, x, y = initial_weights()
    runs = []
    for lib, dev in ((tl, device), (torch, None)):
        dtype = getattr(lib, dtype_name)
        params = make_params(lib, weights, dtype, dev)
        xs, ys = (lib.tensor(a, dtype=dtype, **({} if dev is None else {"device": dev})) for a in (x, y))
        opt = getattr(lib.optim, name)(groups(params, kwargs), **kwargs, **(extra if lib is tl else {}))
        schedule = None if make_schedule is None else make_schedule(lib.optim.lr_scheduler, opt)
        runs.append((train(lib, opt, params, xs, ys, steps, schedule), opt))
    (got, opt), (want, topt) = runs
    return got, want, opt, topt


TOL = {"float64": dict(rtol=1e-10, atol=1e-12), "float32": dict(rtol=2e-4, atol=2e-5)}


def assert_trajectories(got, want, dtype_name):
    for step, (g_step, w_step) in enumerate(zip(got, want), start=1):
        for i, (g, w) in enumerate(zip(g_step, w_step)):
            np.testing.assert_allclose(g, w, **TOL[dtype_name], err_msg=f"parameter {i} after step {step}")


@needs_torch("the optimizers' trajectories")
@pytest.mark.parametrize("dtype_name", ["float64", "float32"])
@pytest.mark.parametrize("name,kwargs", ZOO, ids=ZOO_IDS)
def test_trajectory_matches_torch(device, name, kwargs, dtype_name):
    """Ten steps on the model, two parameter groups: every parameter after every step is torch's."""
    got, want, opt, _ = run_both(device, name, kwargs, dtype_name)
    assert_trajectories(got, want, dtype_name)
    assert all(p.dtype is getattr(tl, dtype_name) for g in opt.param_groups for p in g["params"])
    moved = max(np.abs(a - b).max() for a, b in zip(got[-1], initial_weights()[0]))
    assert moved > 1e-3  # the case trains: a comparison of parameters that stayed put would prove nothing


@needs_torch("the state_dict layout")
@pytest.mark.parametrize("name,kwargs", ZOO, ids=ZOO_IDS)
def test_state_is_torchs(name, kwargs):
    """After ten float64 steps: torch's state keys, buffers and scalars (step, eta, mu, mu_product)
    equal, and torch's param_groups settings (less its foreach/fused/differentiable switches)."""
    _, _, opt, topt = run_both("cpu", name, kwargs, "float64")
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert sorted(sd["state"]) == sorted(tsd["state"]) == [0, 1, 2, 3]
    for i, buffers in tsd["state"].items():
        assert set(sd["state"][i]) == set(buffers)
        for k, v in buffers.items():
            mine = sd["state"][i][k]
            if isinstance(mine, tl.Tensor):
                np.testing.assert_allclose(mine.numpy(), v.numpy(), rtol=1e-9, atol=1e-12, err_msg=k)
            else:  # a host number where torch keeps a 0-d tensor: the same value, to the bit
                assert mine == v.item(), k
    for g, tg in zip(sd["param_groups"], tsd["param_groups"]):
        assert set(tg) - set(g) <= {"foreach", "fused", "differentiable"}
        assert g == {k: v for k, v in tg.items() if k in g}


@pytest.mark.parametrize("name,kwargs", ZOO, ids=ZOO_IDS)
def test_state_dict_resumes_identically(device, name, kwargs):
    """Four steps, state_dict through tl.save / tl.load into a fresh optimizer (its own lr replaced
    by the saved one), four more: the parameters of an uninterrupted run, bit for bit."""
    weights, x, y = initial_weights()
    xs, ys = (tl.tensor(a, device=device) for a in (x, y))
    params = make_params(tl, weights, tl.float64, device)
    want = train(tl, getattr(optim, name)(groups(params, kwargs), **kwargs), params, xs, ys, 8)
    params = make_params(tl, weights, tl.float64, device)
    opt = getattr(optim, name)(groups(params, kwargs), **kwargs)
    train(tl, opt, params, xs, ys, 4)
    buf = io.BytesIO()
    tl.save({"params": [p.detach() for p in params], "opt": opt.state_dict()}, buf)
    buf.seek(0)
    saved = tl.load(buf)
    fresh = [nn.Parameter(t.to(device)) for t in saved["params"]]
    opt2 = getattr(optim, name)(groups(fresh, {**kwargs, "lr": 123.0}), **{**kwargs, "lr": 123.0})
    opt2.load_state_dict(saved["opt"])
    assert [g["lr"] for g in opt2.param_groups] == [kwargs["lr"], kwargs["lr"] / 2]
    got = train(tl, opt2, fresh, xs, ys, 4)
    for g, w in zip(got[-1], want[-1]):
        np.testing.assert_array_equal(g, w)


SCHEDULED = [("Adadelta", dict(lr=1.0)), ("ASGD", dict(lr=0.05, t0=2)), ("NAdam", dict(lr=0.01)),
             ("RAdam", dict(lr=0.01)), ("Adamax", dict(lr=0.02))]


@needs_torch("schedules driving the optimizers")
@pytest.mark.parametrize("name,kwargs", SCHEDULED, ids=[n for n, _ in SCHEDULED])
def test_lr_schedule_drives_them_as_torchs(device, name, kwargs):
    """StepLR then CosineAnnealing (SequentialLR) over the groups' lr: torch's trajectory."""
    def schedule(m, o):
        return m.SequentialLR(o, [m.StepLR(o, step_size=2, gamma=0.5), m.CosineAnnealingLR(o, T_max=4)],
                              milestones=[4])
    got, want, opt, topt = run_both(device, name, kwargs, "float64", make_schedule=schedule)
    assert_trajectories(got, want, "float64")
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([g["lr"] for g in topt.param_groups], rel=1e-12)


@pytest.mark.parametrize("name,kwargs", [ZOO[1], ZOO[3], ZOO[5], ZOO[9], ZOO[12], ZOO[14]], ids=str)
def test_implementation_switches_change_nothing(device, name, kwargs):
    """foreach=True, capturable=True (and fused where torch has it) are accepted and give the same
    parameters, bit for bit: there is one implementation (outside a graph capture)."""
    weights, x, y = initial_weights()
    xs, ys = (tl.tensor(a, device=device) for a in (x, y))
    runs = []
    for extra in ({}, {"foreach": True, "capturable": True}, {"foreach": False}):
        params = make_params(tl, weights, tl.float64, device)
        runs.append(train(tl, getattr(optim, name)(groups(params, kwargs), **kwargs, **extra), params, xs, ys, 3))
    for other in runs[1:]:
        for g, w in zip(other[-1], runs[0][-1]):
            np.testing.assert_array_equal(g, w)


def test_settings_torch_refuses():
    p = nn.Parameter(tl.ones(2))
    refused = [(optim.Adadelta, dict(rho=1.5), "rho"), (optim.Adadelta, dict(lr=-1.0), "lr"),
               (optim.Adamax, dict(betas=(0.9, 1.0)), "betas"), (optim.Adamax, dict(eps=-1e-8), "eps"),
               (optim.ASGD, dict(weight_decay=-0.1), "weight_decay"), (optim.NAdam, dict(momentum_decay=-1.0),
                                                                       "momentum_decay"),
               (optim.RAdam, dict(betas=(-0.1, 0.9)), "betas"), (optim.Rprop, dict(etas=(1.2, 0.5)), "etas"),
               (optim.LBFGS, dict(lr=-1.0), "lr"), (optim.LBFGS, dict(line_search_fn="backtracking"), "strong_wolfe"),
               (optim.NAdam, dict(lr=tl.ones(2)), "1-element")]
    for cls, kwargs, what in refused:
        with pytest.raises(ValueError, match=what):
            cls([p], **kwargs)
    for cls in (optim.Adadelta, optim.Adamax, optim.ASGD, optim.NAdam, optim.RAdam, optim.Rprop):
        with pytest.raises(ValueError, match="differentiable=True .* not supported"):
            cls([p], differentiable=True)
    with pytest.raises(TypeError, match="momentun"):
        optim.NAdam([p], momentun=0.9)  # a misspelt setting is not swallowed
    with pytest.raises(ValueError, match="parameter groups"):
        optim.LBFGS([{"params": [p]}, {"params": [nn.Parameter(tl.ones(1))]}])
    with pytest.raises(ValueError, match="needs a closure"):
        optim.LBFGS([p]).step(None)


def test_sparse_adam_refuses_naming_adam():
    with pytest.raises(tl.TensorliteError, match="no sparse gradients.*use optim.Adam"):
        optim.SparseAdam([nn.Parameter(tl.ones(2))], lr=0.01)


def test_tensor_lr_is_read_each_step():
    """A 1-element Tensor lr (torch accepts one) works and follows a schedule written in place."""
    p = nn.Parameter(tl.tensor([1.0, 2.0], dtype=tl.float64))
    q = nn.Parameter(tl.tensor([1.0, 2.0], dtype=tl.float64))
    lr = tl.tensor(0.1, dtype=tl.float64)
    a, b = optim.NAdam([p], lr=lr), optim.NAdam([q], lr=0.1)
    for _ in range(3):
        for param, opt in ((p, a), (q, b)):
            param.grad = tl.tensor([0.5, -1.0], dtype=tl.float64)
            opt.step()
        lr.fill_(0.05)
        b.param_groups[0]["lr"] = 0.05
    np.testing.assert_array_equal(p.numpy(), q.numpy())


LOW_PRECISION = [("Adadelta", dict(lr=1.0)), ("Adamax", dict(lr=0.01, eps=1e-3, weight_decay=0.05)),
                 ("ASGD", ZOO[5][1]), ("NAdam", dict(lr=0.01, eps=1e-3, momentum_decay=0.01)),
                 ("RAdam", dict(lr=0.01, betas=(0.8, 0.9), eps=1e-3)), ("Rprop", dict(lr=0.01))]


@needs_torch("half-precision updates")
@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
@pytest.mark.parametrize("name,kwargs", LOW_PRECISION, ids=[n for n, _ in LOW_PRECISION])
def test_half_precision_parameters(device, name, kwargs, dtype_name):
    """float16 / bfloat16 parameters keep their dtype, and so does their state (as torch's); three steps
    agree with torch's run in the same dtype to a few of the dtype's rounding steps (eps >= 1e-3 where
    it is added to a root: float16's 1e-8 is 0, and torch's update is then nan, as tensorlite's)."""
    got, want, opt, _ = run_both(device, name, kwargs, dtype_name, steps=3)
    dtype = getattr(tl, dtype_name)
    for g in opt.param_groups:
        for p in g["params"]:
            assert p.dtype is dtype
            assert all(v.dtype is dtype for v in opt.state[p].values() if isinstance(v, tl.Tensor))
    tol = 4 * (2.0 ** -10 if dtype_name == "float16" else 2.0 ** -7)
    for g, w in zip(got[-1], want[-1]):
        assert np.isfinite(g).all() and np.isfinite(w).all()
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", ["Adadelta", "Adamax", "ASGD", "NAdam", "RAdam", "Rprop"])
def test_step_inside_a_graph_capture_is_refused(gpu_device, name):
    """capturable=True is accepted, but the step counts stay host numbers: a step inside a capture
    (whose replays would repeat its counts) raises, and eagerly the optimizer runs."""
    p = nn.Parameter(tl.ones(3, device=gpu_device))
    opt = getattr(optim, name)([p], lr=0.1, capturable=True)
    (p * p).sum().backward()
    opt.step()
    with pytest.raises(tl.CaptureError, match=f"{name}.step inside a graph capture.*outside the captured code"):
        with tl.graphs.graph(tl.graphs.Graph(), device=gpu_device):
            opt.step()
    assert opt.state[p]["step"] == 1 and not tl.graphs.is_capturing(gpu_device)


# ---- LBFGS: step(closure) ---------------------------------------------------------------

LBFGS_CASES = [dict(), dict(line_search_fn="strong_wolfe"), dict(lr=0.5, max_iter=4, history_size=3),
               dict(history_size=2, max_iter=7, max_eval=9, line_search_fn="strong_wolfe")]


def lbfgs_run(lib, kwargs, dtype_name, steps, device=None, opt=None, params=None):
    """`steps` LBFGS steps on the model: (the losses step() returned, the parameters after each, opt)."""
    weights, x, y = initial_weights(1)
    dtype = getattr(lib, dtype_name)
    kw = {} if device is None else {"device": device}
    params = params or make_params(lib, weights, dtype, device)
    xs, ys = lib.tensor(x, dtype=dtype, **kw), lib.tensor(y, dtype=dtype, **kw)
    opt = opt or lib.optim.LBFGS(params, **kwargs)

    def closure():
        opt.zero_grad()
        loss = loss_of(params, xs, ys)
        loss.backward()
        return loss
    losses, out = [], []
    for _ in range(steps):
        losses.append(opt.step(closure).item())
        out.append([p.detach().cpu().numpy().astype(np.float64) for p in params])
    return losses, out, opt


@needs_torch("LBFGS's iterations and line search")
@pytest.mark.parametrize("dtype_name", ["float64", "float32"])
@pytest.mark.parametrize("kwargs", LBFGS_CASES, ids=[str(k) for k in LBFGS_CASES])
def test_lbfgs_matches_torch(device, kwargs, dtype_name):
    """Three step(closure) calls (up to max_iter iterations each). float64: torch's losses, parameters (to
    ~1e-10: an emulated GPU's reductions differ from torch's in the last bits, which tens of iterations
    amplify) and evaluation counts. float32: torch's own float32 run ends up to 1e-3 from its float64 one,
    so the check is that tensorlite's is as close to torch's float64 trajectory as torch's float32 one
    is, within a factor of 10."""
    torch = optional_torch()
    losses, got, opt = lbfgs_run(tl, kwargs, dtype_name, 3, device)
    t_losses, want, topt = lbfgs_run(torch, kwargs, "float64", 3)
    if dtype_name == "float64":  # up to 60 iterations on reductions summed in another order: to ~1e-10
        np.testing.assert_allclose(losses, t_losses, rtol=1e-9, atol=1e-10)
        for g_step, w_step in zip(got, want):
            for g, w in zip(g_step, w_step):
                np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-10)
    else:
        _, torch32, _ = lbfgs_run(torch, kwargs, "float32", 3)
        for step, (g_step, t32_step, w_step) in enumerate(zip(got, torch32, want), start=1):
            ours = max(np.abs(g - w).max() for g, w in zip(g_step, w_step))
            torchs = max(np.abs(t - w).max() for t, w in zip(t32_step, w_step))
            assert ours <= 10 * torchs + 1e-6, f"step {step}: {ours:.3g} from float64, torch's float32 {torchs:.3g}"
    assert losses[-1] < 0.5 * losses[0]
    state, t_state = opt.state[opt.param_groups[0]["params"][0]], topt.state[topt.param_groups[0]["params"][0]]
    assert set(state) == set(t_state)
    if dtype_name == "float64":
        assert (state["func_evals"], state["n_iter"]) == (t_state["func_evals"], t_state["n_iter"])
        assert len(state["old_dirs"]) == len(t_state["old_dirs"]) <= opt.param_groups[0]["history_size"]
        np.testing.assert_allclose(state["d"].numpy(), t_state["d"].numpy(), rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("kwargs", LBFGS_CASES[1:3], ids=[str(k) for k in LBFGS_CASES[1:3]])
def test_lbfgs_state_dict_resumes_identically(device, kwargs):
    """Two steps, the state (its histories: lists of tensors) through tl.save / tl.load into a fresh
    LBFGS, two more: the parameters of four uninterrupted steps, bit for bit."""
    _, want, _ = lbfgs_run(tl, kwargs, "float64", 4, device)
    _, _, opt = lbfgs_run(tl, kwargs, "float64", 2, device)
    buf = io.BytesIO()
    tl.save({"params": [p.detach() for p in opt.param_groups[0]["params"]], "opt": opt.state_dict()}, buf)
    buf.seek(0)
    saved = tl.load(buf)
    fresh = [nn.Parameter(t.to(device)) for t in saved["params"]]
    opt2 = optim.LBFGS(fresh, **kwargs)
    opt2.load_state_dict(saved["opt"])
    assert opt2.state[fresh[0]]["old_dirs"][0] is not opt.state[opt.param_groups[0]["params"][0]]["old_dirs"][0]
    _, got, _ = lbfgs_run(tl, kwargs, "float64", 2, device, opt2, fresh)
    for g, w in zip(got[-1], want[-1]):
        np.testing.assert_array_equal(g, w)


LINE_SEARCH_CASES = {  # objective, LBFGS settings: the model above leaves most of the line search unvisited
    "rosenbrock": (lambda x: ((1 - x[:-1]) ** 2).sum() + 100 * ((x[1:] - x[:-1] ** 2) ** 2).sum(), dict()),
    "rosenbrock-lr30": (lambda x: ((1 - x[:-1]) ** 2).sum() + 100 * ((x[1:] - x[:-1] ** 2) ** 2).sum(),
                        dict(lr=30, history_size=3)),
    "rosenbrock-max-eval": (lambda x: ((1 - x[:-1]) ** 2).sum() + 100 * ((x[1:] - x[:-1] ** 2) ** 2).sum(),
                            dict(lr=300, max_eval=8)),
    "smooth-abs-lr1000": (lambda x: ((x * x + 0.01) ** 0.5).sum(), dict(lr=1000)),  # zooms away from a bracket end
    "wavy-lr100": (lambda x: (x * x).sum() + 2 * (3 * x).cos().sum(), dict(lr=100, tolerance_change=1e-4)),
}


def line_search_run(lib, fn, kwargs, **device):
    """Four LBFGS(line_search_fn='strong_wolfe') steps on fn from a fixed start: x after each."""
    x = lib.nn.Parameter(lib.tensor([-1.5, 2.0, 0.5, -0.7], dtype=lib.float64, **device))
    opt = lib.optim.LBFGS([x], line_search_fn="strong_wolfe", **kwargs)

    def closure():
        opt.zero_grad()
        loss = fn(x)
        loss.backward()
        return loss
    return [(opt.step(closure), x.detach().cpu().numpy().copy())[1] for _ in range(4)]


@needs_torch("LBFGS's strong-Wolfe line search")
@pytest.mark.parametrize("case", list(LINE_SEARCH_CASES))
def test_lbfgs_line_search_matches_torch(device, case):
    """The strong-Wolfe search through its bracketing and zoom branches (steep valleys, steps of
    lr=30..1000 that overshoot, an evaluation budget): torch's iterates to ~1e-10 in float64."""
    fn, kwargs = LINE_SEARCH_CASES[case]
    got, want = line_search_run(tl, fn, kwargs, device=device), line_search_run(optional_torch(), fn, kwargs)
    for step, (g, w) in enumerate(zip(got, want), start=1):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-10, err_msg=f"after step {step}")


def test_lbfgs_stops_at_an_optimum():
    """A gradient within tolerance_grad: step() evaluates once and moves nothing, as torch's."""
    x = nn.Parameter(tl.tensor([1.0, 2.0], dtype=tl.float64))
    opt = optim.LBFGS([x])
    calls = []

    def closure():
        calls.append(1)
        opt.zero_grad()
        loss = ((x - tl.tensor([1.0, 2.0], dtype=tl.float64)) ** 2).sum()
        loss.backward()
        return loss
    assert opt.step(closure).item() == 0.0
    assert len(calls) == 1 and x.tolist() == [1.0, 2.0] and opt.state[x]["func_evals"] == 1
