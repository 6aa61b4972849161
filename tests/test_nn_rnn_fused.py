"""nn.RNN / LSTM / GRU as one autograd node per layer and direction (nn.functional.rnn_layer):
outputs, final states and the gradients of the input, the initial states and every parameter
against torch's CPU modules at float32 and float64, a float64 gradient check against finite
differences, the node count, and the in-place check on what the fused backward reads."""
import numpy as np
import pytest

import tensorlite as tl
from tensorlite import nn
from tensorlite.nn import functional as F
from tensorlite.autograd import Node

from gradcheck_util import gradcheck

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")

CASES = {  # (module name, args, kwargs, give the initial states)
    "lstm": ("LSTM", (3, 4), {}, False),
    "lstm_2layer_bidir_h0": ("LSTM", (3, 4, 2), {"bidirectional": True}, True),
    "lstm_batch_first_proj_h0": ("LSTM", (3, 5, 2), {"batch_first": True, "proj_size": 2}, True),
    "lstm_bidir_proj_nobias": ("LSTM", (3, 5), {"bidirectional": True, "proj_size": 3, "bias": False}, False),
    "gru_2layer_bidir_h0": ("GRU", (3, 4, 2), {"bidirectional": True}, True),
    "gru_nobias_batch_first": ("GRU", (3, 4), {"bias": False, "batch_first": True}, False),
    "rnn_tanh_2layer_h0": ("RNN", (3, 4, 2), {}, True),
    "rnn_relu_bidir": ("RNN", (3, 4), {"nonlinearity": "relu", "bidirectional": True}, False),
}
TOL = {"float32": 2e-5, "float64": 1e-11}


def build(lib, case, dtype):
    name, args, kwargs, _ = CASES[case]
    m = getattr(lib.nn, name)(*args, **kwargs)
    return m.to(getattr(torch, dtype)) if lib is torch else m.to(dtype=getattr(tl, dtype))


def inputs(m, case, rng, dtype, L=6, N=3):
    """x, and (h0[, c0]) where the case gives them."""
    D = 2 if m.bidirectional else 1
    x = rng.standard_normal((N, L, m.input_size) if m.batch_first else (L, N, m.input_size)).astype(dtype)
    if not CASES[case][3]:
        return [x]
    h0 = rng.standard_normal((D * m.num_layers, N, m.proj_size or m.hidden_size)).astype(dtype)
    c0 = rng.standard_normal((D * m.num_layers, N, m.hidden_size)).astype(dtype)
    return [x, h0] + ([c0] if m.mode == "LSTM" else [])


def flat(out):
    return [t for o in out for t in flat(o)] if isinstance(out, (tuple, list)) else [out]


def run(m, xs, weights, lib, device=None):
    """Outputs of m(x[, states]) and the gradients of sum(outputs * weights): inputs first, then parameters."""
    kw = {} if device is None else {"device": device}
    ts = [lib.tensor(a, requires_grad=True, **kw) for a in xs]
    out = m(ts[0]) if len(ts) == 1 else m(ts[0], ts[1] if len(ts) == 2 else tuple(ts[1:]))
    outs = flat(out)
    sum((o * lib.tensor(w, **kw)).sum() for o, w in zip(outs, weights)).backward()
    grads = [t.grad for t in ts] + [p.grad for _, p in m.named_parameters()]
    return [o.detach().numpy() if lib is torch else o.numpy() for o in outs], [g.numpy() for g in grads]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", list(CASES))
def test_fused_layers_match_torch(device, rng, case, dtype):
    tm, m = build(torch, case, dtype), build(tl, case, dtype)
    m.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    m.to(device)
    xs = inputs(tm, case, rng, dtype)
    with torch.no_grad():
        shapes = [tuple(o.shape) for o in flat(tm(*([torch.tensor(xs[0])] + (
            [] if len(xs) == 1 else [torch.tensor(xs[1]) if len(xs) == 2 else tuple(map(torch.tensor, xs[1:]))]))))]
    weights = [rng.standard_normal(s).astype(dtype) for s in shapes]
    t_outs, t_grads = run(tm, xs, weights, torch)
    outs, grads = run(m, xs, weights, tl, device)
    names = ["input", "h0", "c0"][:len(xs)] + [k for k, _ in m.named_parameters()]
    tol = TOL[dtype]
    for i, (o, t) in enumerate(zip(outs, t_outs)):
        assert o.dtype == t.dtype
        np.testing.assert_allclose(o, t, rtol=tol, atol=tol, err_msg=f"output {i}")
    for name, g, t in zip(names, grads, t_grads):
        np.testing.assert_allclose(g, t, rtol=tol, atol=tol, err_msg=f"gradient of {name}")


def nodes_of(t):
    """Names of the autograd nodes that t's backward runs (a multi-output op's once)."""
    names, seen, todo = [], set(), [t._node]
    while todo:
        n = todo.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        if type(n) is Node:
            hub = len(n.inputs) == 1 and n.inputs[0] is not None and not isinstance(n.inputs[0], tl.Tensor)
            if not hub:  # a multi-output op's output hands its gradient to the op's one node: not counted
                names.append(n.name)
            todo.extend(e if type(e) is Node else getattr(e, "_node", None) for e in n.edges if e is not None)
    return names


@pytest.mark.parametrize("kind,kwargs", [("LSTM", {"bidirectional": True}), ("GRU", {}), ("RNN", {})])
def test_one_node_per_layer_and_direction(kind, kwargs):
    m = getattr(nn, kind)(3, 4, num_layers=2, **kwargs)
    out, _ = m(tl.randn(7, 2, 3))
    names = nodes_of(out)
    layers = [n for n in names if n.startswith("rnn_layer")]
    assert len(layers) == 2 * (2 if m.bidirectional else 1), names
    assert len(names) < 4 * len(layers), names  # no node per step: cat, getitem and the layers' hubs only


@pytest.mark.parametrize("mode,proj,reverse", [("LSTM", False, False), ("LSTM", True, True), ("GRU", False, True),
                                               ("RNN_TANH", False, False), ("RNN_RELU", False, True)])
def test_gradcheck_float64(rng, mode, proj, reverse):
    """rnn_layer's gradients of every operand against finite differences at float64."""
    H, P, G = 3, 2 if proj else 3, {"LSTM": 4, "GRU": 3}.get(mode, 1) * 3
    shapes = [(4, 2, 2), (2, P)] + ([(2, H)] if mode == "LSTM" else []) + [(G, 2), (G,), (G, P), (G,)] + \
        ([(P, H)] if proj else [])

    def fn(x, h0, *rest):
        c0, rest = (rest[0], rest[1:]) if mode == "LSTM" else (None, rest)
        w_ih, b_ih, w_hh, b_hh, *w_hr = rest
        out, h, c = F.rnn_layer(mode, x, h0, c0, w_ih, b_ih, w_hh, b_hh, *w_hr, reverse=reverse)
        return tl.cat([out.reshape(-1), h.reshape(-1)] + ([c.reshape(-1)] if c is not None else []))
    arrays = [rng.standard_normal(s) for s in shapes]
    if mode == "RNN_RELU":  # no pre-activation within the differences' step of the kink
        arrays[0] += np.sign(arrays[0])
    gradcheck(fn, arrays, rng, rtol=1e-6, atol=1e-8)


def test_inplace_change_of_a_weight_before_backward_raises():
    m = nn.LSTM(3, 4)
    out, _ = m(tl.randn(5, 2, 3))
    with tl.no_grad():
        m.weight_hh_l0.mul_(2)
    with pytest.raises(tl.TensorliteError, match="rnn_layer\\(LSTM\\).*modified by an in-place operation"):
        out.sum().backward()


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_gradient_of_gradient_matches_torch(rng, kind):
    """create_graph=True through the fused layer (its backward recomputed as Tensor ops), as torch."""
    tm = getattr(torch.nn, kind)(3, 4, 2, bidirectional=True).double()
    m = getattr(nn, kind)(3, 4, 2, bidirectional=True, dtype=tl.float64)
    m.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    xa = rng.standard_normal((5, 2, 3))
    found = []
    for lib, mod in ((torch, tm), (tl, m)):
        x = lib.tensor(xa, requires_grad=True)
        out, _ = mod(x)
        g, = lib.autograd.grad((out * out).sum(), [x], create_graph=True)
        (g * g).sum().backward()
        found.append([g.detach().numpy(), x.grad.numpy(), mod.weight_hh_l0.grad.numpy()])
    for name, a, b in zip(("first gradient", "input's", "weight_hh_l0's"), *found):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_empty_batch(kind):
    """A batch of 0 sequences: outputs and gradients of 0 rows, every parameter's gradient zeros, as torch."""
    m = getattr(nn, kind)(3, 4, 2, bidirectional=True)
    x = tl.randn(5, 0, 3, requires_grad=True)
    out, h = m(x)
    assert tuple(out.shape) == (5, 0, 8) and tuple((h[0] if kind == "LSTM" else h).shape) == (4, 0, 4)
    out.sum().backward()
    assert tuple(x.grad.shape) == (5, 0, 3)
    assert all(not p.grad.numpy().any() for p in m.parameters())


@pytest.mark.parametrize("dtype,tol", [("float16", 2e-2), ("bfloat16", 6e-2)])
@pytest.mark.parametrize("case", ["lstm_batch_first_proj_h0", "gru_2layer_bidir_h0", "rnn_relu_bidir"])
def test_half_types_on_gpus_match_float32(gpu_device, rng, case, dtype, tol):
    """The GPU layer (one cell kernel a step, kernels/rnn.hip) at float16 / bfloat16: outputs and
    gradients near cpu's at float32 from the same (rounded) weights and inputs."""
    m = build(tl, case, "float32")
    half = getattr(tl, dtype)
    m.load_state_dict({k: v.to(half).float() for k, v in m.state_dict().items()})  # values both can hold
    xs = [np.asarray(tl.tensor(a).to(half).float().numpy()) for a in inputs(m, case, rng, "float32", L=4, N=2)]
    with tl.no_grad():
        shapes = [tuple(o.shape) for o in flat(m(*([tl.tensor(xs[0])] + (
            [] if len(xs) == 1 else [tl.tensor(xs[1]) if len(xs) == 2 else tuple(map(tl.tensor, xs[1:]))]))))]
    weights = [rng.standard_normal(s).astype("float32") for s in shapes]
    ref_outs, ref_grads = run(m, xs, weights, tl)
    m.zero_grad()
    m.to(device=gpu_device, dtype=half)
    outs, grads = run(m, [tl.tensor(a).to(half).numpy() for a in xs], weights, tl, gpu_device)
    for i, (o, r) in enumerate(zip(outs, ref_outs)):
        np.testing.assert_allclose(o.astype("float32"), r, rtol=tol, atol=tol, err_msg=f"output {i}")
    for i, (g, r) in enumerate(zip(grads, ref_grads)):
        scale = max(1.0, float(np.abs(r).max()))
        np.testing.assert_allclose(g.astype("float32"), r, rtol=tol, atol=tol * scale, err_msg=f"gradient {i}")


@pytest.mark.parametrize("mode,proj,reverse", [("LSTM", False, False), ("LSTM", True, True), ("GRU", False, True),
                                               ("RNN_TANH", False, False), ("RNN_RELU", False, True)])
def test_device_plan_on_the_contract_reference(rng, mode, proj, reverse):
    """The GPUs' plan (nn/functional/rnn_steps.py: matmuls and the storage's rnn_cell a step) run on
    cpu storages, whose rnn_cell / rnn_cell_backward are the contract's numpy reference, gives
    what the cpu layer gives: outputs, final states and every gradient."""
    from tensorlite.nn.functional import rnn_steps
    H, P = 4, 3 if proj else 4
    G = {"LSTM": 4, "GRU": 3}.get(mode, 1) * H
    shapes = [(5, 3, 2), (3, P), (3, H) if mode == "LSTM" else None, (G, 2), (G,), (G, P), (G,),
              (P, H) if proj else None]
    ts = [None if s is None else tl.tensor(rng.standard_normal(s), requires_grad=True) for s in shapes]
    outs = [o for o in F.rnn_layer(mode, *ts, reverse=reverse) if o is not None]
    projections = [tl.tensor(rng.standard_normal(tuple(o.shape))) for o in outs]
    present = [t for t in ts if t is not None]
    want = tl.autograd.grad([sum((o * p).sum() for o, p in zip(outs, projections))], present)
    plain = [None if t is None else t.detach() for t in ts]
    out, h_n, c_n, kept = rnn_steps.forward(mode, *plain, reverse)
    got = rnn_steps.backward(mode, plain, out, kept, projections + [None] * (3 - len(projections)),
                             [t is not None for t in ts], reverse)
    for name, a, b in zip(("output", "h_n", "c_n"), (out, h_n, c_n), outs):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-12, err_msg=name)
    for i, (a, b) in enumerate(zip([g for g in got if g is not None], want)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-11, err_msg=f"gradient {i}")


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_gpu_layer_is_a_kernel_and_a_gemm_a_step(null_backend, monkeypatch, kind):
    """On GPUs (the null platform counts what would run) a step forward is one GEMM (h W_hh^T) and
    one cell kernel (kernels/rnn.hip), a step back one kernel and one GEMM: device work that grows
    with the steps, not with the steps times the cell's ops (step by step, an LSTM step launched
    11 kernels forward and 32 back)."""
    platform = tl.backend.get_device("null").platform
    gemms, gemm = [], platform.blas_gemm
    monkeypatch.setattr(platform, "blas_gemm", lambda *args: (gemms.append(1), gemm(*args))[1])

    def counts(steps):  # (launches, GEMMs) forward, then backward
        m = getattr(nn, kind)(8, 16).to("null")
        x = tl.zeros(steps, 2, 8, device="null", requires_grad=True)
        marks = [(platform.counts["launch"], len(gemms))]
        out, _ = m(x)
        marks.append((platform.counts["launch"], len(gemms)))
        out.sum().backward()
        marks.append((platform.counts["launch"], len(gemms)))
        return [later - earlier for before, after in zip(marks, marks[1:]) for earlier, later in zip(before, after)]
    short, long = counts(4), counts(8)
    assert [b - a for a, b in zip(short, long)] == [4, 4, 4, 4], (short, long)
