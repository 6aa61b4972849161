"""Fused backward ops, fused cross-entropy, activation derivatives and the AdamW step.

Each storage op runs on every device (backend-swap) on contiguous, transposed, strided
(with offset) and broadcast operands in f32/f16/bf16 (and f64), against a float64 numpy
reference computed from the same rounded inputs; the nn.functional paths that use them
are held to their composites (`*_slow`, the former composite derivatives) and to torch.
Finite differences for these ops live in test_autograd_nn.py (gradcheck on cpu)."""
import math

import numpy as np
import pytest

import tensorlite as tl
import tensorlite.nn.functional as F
from tensorlite import nn, optim
from tensorlite.custom_op import storage_and_layout
from tensorlite.backends.rocm.ops import fused as fused_ops
from tensorlite.errors import IndexOutOfRange
from tensorlite.layout import Layout
from conftest import as_f64, numpy_adam, random_array, shares_storage, tolerance

HALF = [tl.float16, tl.bfloat16]
DTYPES = [tl.float32, tl.float16, tl.bfloat16]
VIEWS = ["contiguous", "transposed", "strided", "broadcast"]


def view_of(a, kind, dtype, device):
    """A tensor with a's values whose layout is `kind` (the values are a's, rounded to dtype)."""
    a = np.asarray(a)
    if kind == "contiguous" or a.ndim < 2:
        return tl.tensor(a, dtype=dtype, device=device)
    if kind == "transposed":  # last two dims swapped in memory
        return tl.tensor(np.ascontiguousarray(a.swapaxes(-1, -2)), dtype=dtype, device=device).transpose(-1, -2)
    if kind == "strided":  # every other element of the last dim, starting at an offset
        big = np.zeros(a.shape[:-1] + (2 * a.shape[-1] + 1,), a.dtype)
        big[..., 1::2] = a
        return tl.tensor(big, dtype=dtype, device=device).narrow(-1, 1, a.shape[-1], 2)
    if kind == "broadcast":  # the first row repeated (stride 0 over dim 0)
        return tl.tensor(a[:1], dtype=dtype, device=device).expand(*a.shape)
    if kind == "misaligned":  # contiguous rows that start one element into their buffer
        flat = np.concatenate([np.zeros(1, a.dtype), a.reshape(-1)])
        return tl.tensor(flat, dtype=dtype, device=device).narrow(0, 1, a.size).reshape(*a.shape)
    raise ValueError(kind)


def values(a, kind, dtype):
    """The float64 values view_of(a, kind, dtype, ...) holds."""
    a = as_f64(np.asarray(a).astype(dtype.np))
    return np.broadcast_to(a[:1], a.shape).copy() if kind == "broadcast" and a.ndim >= 2 else a


def close(got, ref, dtype, terms=1, scale=1.0):
    rtol, atol = tolerance(dtype, terms)
    got = np.asarray(got.numpy() if isinstance(got, tl.Tensor) else got).astype(np.float64)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol * scale)


def _read(st, shape):
    """The values of a storage the contract returned, read as a contiguous `shape`."""
    return st.to_cpu(Layout.contiguous(tuple(shape)))


# ---- softmax / log_softmax backward -------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES + [tl.float64])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape", [(3, 5, 7), (4, 1500)])  # the long rows span several warps
def test_softmax_backward_storage(device, rng, dtype, log, shape):
    x = rng.uniform(-3, 3, shape)
    y = np.log(np.exp(x) / np.exp(x).sum(-1, keepdims=True)) if log else np.exp(x) / np.exp(x).sum(-1, keepdims=True)
    g = random_array(rng, shape, tl.float64)
    for yk, gk in (("contiguous", "strided"), ("transposed", "broadcast"), ("strided", "transposed")):
        yt, gt = view_of(y, yk, dtype, device), view_of(g, gk, dtype, device)
        yv, gv = values(y, yk, dtype), values(g, gk, dtype)
        (ys, yl), (gs, gl) = storage_and_layout(yt), storage_and_layout(gt)
        op = ys.log_softmax_backward if log else ys.softmax_last_dim_backward
        got = _read(op(yl, gs, gl), shape)
        ref = gv - np.exp(yv) * gv.sum(-1, keepdims=True) if log else yv * (gv - (gv * yv).sum(-1, keepdims=True))
        assert got.dtype == dtype.np
        close(got, ref, dtype, terms=shape[-1] if log else 8, scale=4)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("fn, slow", [(F.softmax, F.softmax_slow), (F.log_softmax, F.log_softmax_slow)])
def test_softmax_grads_half_close_to_float64_composite(device, rng, dtype, fn, slow):
    a, w = rng.uniform(-2, 2, (6, 33)), rng.standard_normal((6, 33))
    grads = []
    for dt, f in ((dtype, fn), (tl.float64, slow)):
        x = tl.tensor(a.astype(dtype.np), dtype=dt, device=device, requires_grad=True)
        (f(x, 1) * tl.tensor(w, dtype=dt, device=device)).sum().backward()
        grads.append(as_f64(x.grad.numpy()))
    assert x.grad is not None
    close(grads[0], grads[1], dtype, terms=33)


# ---- layer_norm / rms_norm backward --------------------------------------------------------

def np_norm_backward(x, g, w, eps, center):
    xc = x - x.mean(-1, keepdims=True) if center else x
    rstd = 1 / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps)
    xhat = xc * rstd
    gw = g if w is None else g * w
    inner = gw - xhat * (gw * xhat).mean(-1, keepdims=True) - (gw.mean(-1, keepdims=True) if center else 0)
    n = x.shape[-1]
    return rstd * inner, (g * xhat).reshape(-1, n).sum(0), g.reshape(-1, n).sum(0)


@pytest.mark.parametrize("dtype", DTYPES + [tl.float64])
@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("shape, views", [((3, 4, 24), ("contiguous", "contiguous")),
                                          ((700, 40), ("transposed", "strided")),   # many row chunks
                                          ((5, 1300), ("strided", "broadcast")),     # rows over several warps
                                          # GPU: aligned whole-vector rows of 2-4 warps, several per block
                                          ((1000, 520), ("contiguous", "broadcast")),
                                          ((37, 203), ("contiguous", "contiguous")),  # partial last vector
                                          ((6, 64), ("misaligned", "contiguous")),
                                          ((7, 1), ("contiguous", "misaligned")),     # rows of one element
                                          ((3, 5000), ("contiguous", "contiguous")),  # longer than the fit path
                                          ((2, 17000), ("contiguous", "contiguous"))])  # longer than 1024 x 16
def test_norm_backward_storage(device, rng, dtype, rms, shape, views):
    n = shape[-1]
    x, g = rng.uniform(-2, 2, shape) + 0.5, rng.standard_normal(shape)
    w = rng.uniform(0.5, 1.5, n)
    xt, gt = view_of(x, views[0], dtype, device), view_of(g, views[1], dtype, device)
    xv, gv = values(x, views[0], dtype), values(g, views[1], dtype)
    wt = view_of(np.stack([w, w]), "strided", dtype, device)[0]  # 1-d, stride 2, offset 1
    wv = as_f64(w.astype(dtype.np))
    eps = 1e-5
    rows = int(np.prod(shape[:-1]))
    for with_w, want_w, want_b in ((True, True, True), (False, True, False), (True, False, True)):
        st, lay = storage_and_layout(wt if with_w else None)
        (xs, xl), (gs, gl) = storage_and_layout(xt), storage_and_layout(gt)
        if rms:
            dx, dw = xs.rms_norm_backward(xl, gs, gl, st, lay, eps, want_w)
            db = None
        else:
            dx, dw, db = xs.layer_norm_backward(xl, gs, gl, st, lay, eps, want_w, want_b)
        rdx, rdw, rdb = np_norm_backward(xv, gv, wv if with_w else None, eps, not rms)
        close(_read(dx, shape), rdx, dtype, terms=16, scale=8)
        assert (dw is None) == (not want_w) and (db is None) == (rms or not want_b)
        if dw is not None:
            close(_read(dw, (n,)), rdw, dtype, terms=rows, scale=4)
        if db is not None:
            close(_read(db, (n,)), rdb, dtype, terms=rows, scale=4)


def test_norm_backward_of_no_rows_gives_zero_parameter_grads(device):
    x = tl.zeros(0, 6, device=device)
    xs, xl = storage_and_layout(x)
    dx, dw, db = xs.layer_norm_backward(xl, xs, xl, None, None, 1e-5, True, True)
    assert _read(dx, (0, 6)).shape == (0, 6)
    np.testing.assert_array_equal(_read(dw, (6,)), 0)
    np.testing.assert_array_equal(_read(db, (6,)), 0)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("rms", [False, True])
def test_norm_grads_half_close_to_float64_composite(device, rng, dtype, rms):
    a, wa, ba, gw = (rng.uniform(-2, 2, (9, 40)), rng.uniform(0.5, 1.5, 40), rng.uniform(-1, 1, 40),
                     rng.standard_normal((9, 40)))
    grads = []
    for dt, slow in ((dtype, False), (tl.float64, True)):
        ts = [tl.tensor(v.astype(dtype.np), dtype=dt, device=device, requires_grad=True) for v in (a, wa, ba)]
        if rms:
            out = (F.rms_norm_slow if slow else F.rms_norm)(ts[0], 40, ts[1], 1e-5)
        else:
            out = (F.layer_norm_slow if slow else F.layer_norm)(ts[0], 40, ts[1], ts[2])
        (out * tl.tensor(gw, dtype=dt, device=device)).sum().backward()
        grads.append([as_f64(t.grad.numpy()) for t in ts[:2 if rms else 3]])
    for i, (h, ref) in enumerate(zip(*grads)):
        close(h, ref, dtype, terms=40 if i == 0 else 9 * 4, scale=4)


def test_norm_grads_only_for_parameters_that_need_them(device, rng):
    x = tl.tensor(rng.standard_normal((4, 8)).astype(np.float32), device=device, requires_grad=True)
    w, b = tl.ones(8, device=device), tl.zeros(8, device=device, requires_grad=True)
    F.layer_norm(x, 8, w, b).sum().backward()
    assert w.grad is None and b.grad is not None
    np.testing.assert_allclose(b.grad.numpy(), 4.0, rtol=1e-6)


# ---- rope backward ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", ["rope", "rope_i", "rope_thd"])
@pytest.mark.parametrize("h", [3, 4])
@pytest.mark.parametrize("heads_per_thread", ["by-size", "most"])
def test_rope_backward_is_the_inverse_rotation(device, rng, dtype, variant, h, heads_per_thread, monkeypatch):
    # "most": a GPU thread rotates 4 heads where h allows even in this small launch (ROPE_SPREAD_BELOW)
    if heads_per_thread == "most":
        monkeypatch.setattr(fused_ops, "ROPE_SPREAD_BELOW", 0)
    b, t, d = 2, 5, 8
    shape = (b, t, h, d) if variant == "rope_thd" else (b, h, t, d)
    theta = rng.uniform(0, 2 * np.pi, (t, d // 2))
    c, s = (tl.tensor(f(theta), dtype=dtype, device=device) for f in (np.cos, np.sin))
    g = rng.standard_normal(shape)
    gt = view_of(g, "transposed", dtype, device)
    cb, sb = c.unsqueeze(0).expand(b, t, d // 2), s.unsqueeze(0).expand(b, t, d // 2)
    (gs, gl), (cs, cl), (ss, sl) = (storage_and_layout(v) for v in (gt, cb, sb))
    got = _read(gs.rope_backward(gl, cs, cl, ss, sl, variant), shape)
    cv, sv = as_f64(c.numpy()), as_f64(s.numpy())
    cv, sv = (cv[None, :, None], sv[None, :, None]) if variant == "rope_thd" else (cv[None, None], sv[None, None])
    gv = values(g, "transposed", dtype)
    if variant == "rope_i":
        a0, a1 = gv[..., 0::2], gv[..., 1::2]
        ref = np.stack([a0 * cv + a1 * sv, -a0 * sv + a1 * cv], -1).reshape(shape)
    else:
        a0, a1 = gv[..., :d // 2], gv[..., d // 2:]
        ref = np.concatenate([a0 * cv + a1 * sv, a1 * cv - a0 * sv], -1)
    close(got, ref, dtype, terms=2)
    # the composite's gradient (autograd through rope_slow) agrees
    x = tl.tensor(rng.standard_normal(shape), dtype=dtype, device=device, requires_grad=True)
    getattr(F, f"{variant}_slow")(x, c, s).backward(gt)
    close(x.grad, ref, dtype, terms=4, scale=2)


# ---- cross entropy ----------------------------------------------------------------------------

def np_cross_entropy(x, t, w, ignore_index):
    """(loss rows, d loss_rows.sum() / dx) in float64, classes on the last dim."""
    x2, t2 = x.reshape(-1, x.shape[-1]), t.reshape(-1)
    valid = t2 != ignore_index
    safe = np.where(valid, t2, 0)
    lse = np.log(np.exp(x2 - x2.max(1, keepdims=True)).sum(1)) + x2.max(1)
    wt = np.where(valid, 1.0 if w is None else w[safe], 0.0)
    loss = wt * (lse - x2[np.arange(len(t2)), safe])
    p = np.exp(x2 - lse[:, None])
    p[np.arange(len(t2)), safe] -= 1
    return loss.reshape(t.shape), (wt[:, None] * p).reshape(x.shape), wt


@pytest.mark.parametrize("dtype", DTYPES + [tl.float64])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("kind", ["contiguous", "transposed"])
def test_cross_entropy_storage(device, rng, dtype, weighted, kind):
    n, c = 37, 1100 if kind == "contiguous" else 13   # long rows span several warps
    x = rng.uniform(-4, 4, (n, c))
    t = rng.integers(0, c, n)
    t[::5] = -7
    w = rng.uniform(0.5, 2, c) if weighted else None
    xt = view_of(x, kind, dtype, device)
    tt = tl.tensor(t, device=device)
    wtt = None if w is None else view_of(np.stack([w, w]), "strided", dtype, device)[1]
    (xs, xl), (ts, tly) = storage_and_layout(xt), storage_and_layout(tt)
    loss, lse, wts = xs.cross_entropy(xl, ts, tly, *storage_and_layout(wtt), -7)
    acc = tl.float64 if dtype is tl.float64 else tl.float32
    assert loss.dtype is acc and lse.dtype is acc and wts.dtype is acc
    xv, wv = values(x, kind, dtype), None if w is None else as_f64(w.astype(dtype.np))
    rloss, rgrad, rwt = np_cross_entropy(xv, t, wv, -7)
    close(_read(loss, (n,)), rloss, acc, terms=c)
    close(_read(wts, (n,)), rwt, acc)
    g = rng.standard_normal(n)
    for gt in (tl.tensor(g, dtype=acc, device=device), tl.tensor(g[:1], dtype=acc, device=device).expand(n)):
        gv = as_f64(gt.numpy())
        gs, gl = storage_and_layout(gt)
        dx = xs.cross_entropy_backward(xl, ts, tly, lse, wts, gs, gl)
        close(_read(dx, (n, c)), rgrad * gv[:, None], dtype, terms=4)


@pytest.mark.parametrize("kwargs", [dict(), dict(reduction="sum"), dict(reduction="none"), dict(ignore_index=2),
                                    dict(weight=True), dict(weight=True, ignore_index=0, reduction="sum")])
@pytest.mark.parametrize("shape", [(6, 5), (3, 5, 4), (5,)])
def test_cross_entropy_fused_matches_composite(device, rng, kwargs, shape):
    kw = dict(kwargs)
    x = rng.standard_normal(shape)
    t = rng.integers(0, 5, shape[:1] + shape[2:] if len(shape) > 1 else ())
    if kw.pop("weight", False):
        kw["weight"] = tl.tensor(rng.uniform(0.5, 2, 5), device=device)
    results = []
    for fn in (F.cross_entropy, F.cross_entropy_slow):
        xt = tl.tensor(x, device=device, requires_grad=True)
        out = fn(xt, tl.tensor(t, device=device), **kw)
        w = tl.tensor(rng.standard_normal(out.shape) if not results else results[0][2], device=device)
        (out * w).sum().backward()
        results.append((out.numpy(), xt.grad.numpy(), w.numpy()))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_fused_half_precision(device, rng, dtype, reduction):
    x = rng.uniform(-3, 3, (300, 10)).astype(dtype.np)
    t = rng.integers(0, 10, 300)
    t[:40] = -100
    xt = tl.tensor(x, dtype=dtype, device=device, requires_grad=True)
    out = F.cross_entropy(xt, tl.tensor(t, device=device), reduction=reduction)
    assert out.dtype == dtype
    out.sum().backward()
    rloss, rgrad, rwt = np_cross_entropy(as_f64(x), t, None, -100)
    if reduction == "mean":
        close(out, rloss.sum() / rwt.sum(), dtype, terms=4)
        close(xt.grad, rgrad / rwt.sum(), dtype, scale=0.1)
    else:
        close(out, rloss, dtype, terms=4)
        close(xt.grad, rgrad, dtype, terms=4)


def test_cross_entropy_fused_matches_torch_grads(device, rng):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    x, t, w = rng.standard_normal((7, 6, 3)), rng.integers(0, 6, (7, 3)), rng.uniform(0.5, 2, 6)
    t[0, 0] = 4
    for kw in (dict(), dict(reduction="sum", ignore_index=4), dict(reduction="none")):
        tx = torch.tensor(x, requires_grad=True)
        ref = torch.nn.functional.cross_entropy(tx, torch.tensor(t), weight=torch.tensor(w), **kw)
        ref.sum().backward()
        xt = tl.tensor(x, device=device, requires_grad=True)
        got = F.cross_entropy(xt, tl.tensor(t, device=device), weight=tl.tensor(w, device=device), **kw)
        got.sum().backward()
        np.testing.assert_allclose(got.numpy(), ref.detach().numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(xt.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_cross_entropy_fused_edge_cases(device):
    x = tl.tensor([[1.0, 2.0, 3.0], [0.5, 0.5, -1.0]], device=device, requires_grad=True)
    all_ignored = F.cross_entropy(x, tl.tensor([-100, -100], device=device))
    assert math.isnan(float(all_ignored.numpy()))  # 0 / 0, as torch
    with pytest.raises(IndexOutOfRange, match="cross_entropy.*target 3"):
        F.cross_entropy(x, tl.tensor([0, 3], device=device))
    with pytest.raises(IndexOutOfRange, match="target -1"):
        F.cross_entropy(x, tl.tensor([-1, 0], device=device))
    # uint8 targets take the fused path too
    loss = F.cross_entropy(x, tl.tensor(np.array([2, 0], np.uint8), device=device), reduction="sum")
    loss.backward()
    xs = np.array([[1.0, 2.0, 3.0], [0.5, 0.5, -1.0]])
    rloss, rgrad, _ = np_cross_entropy(xs, np.array([2, 0]), None, -100)
    np.testing.assert_allclose(loss.numpy(), rloss.sum(), rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), rgrad, rtol=1e-5, atol=1e-7)


# ---- gelu / silu backward ---------------------------------------------------------------------

def composite_derivative(op, x):
    """The Tensor-op derivatives these ops had before the fused kernel (float64 numpy)."""
    if op == "silu":
        s = 1 / (1 + np.exp(-x))
        return s * (1 + x * (1 - s))
    if op == "gelu_erf":
        erf = np.vectorize(math.erf)
        return 0.5 * erf(x * 0.7071067811865476) + 0.5 + x * np.exp(-x * x * 0.5) * 0.3989422804014327
    inner = (x + x * x * x * 0.044715) * 0.7978845608028654
    t = np.tanh(inner)
    return (t + 1) * 0.5 + x * 0.5 * (1 - t * t) * 0.7978845608028654 * (1 + x * x * 0.134145)


@pytest.mark.parametrize("dtype", DTYPES + [tl.float64])
@pytest.mark.parametrize("op", ["gelu_tanh", "gelu_erf", "silu"])
def test_unary_backward_storage(device, rng, dtype, op):
    x, g = rng.uniform(-6, 6, (9, 130)), rng.standard_normal((9, 130))
    for xk, gk in (("contiguous", "contiguous"), ("transposed", "strided"), ("strided", "broadcast")):
        xt, gt = view_of(x, xk, dtype, device), view_of(g, gk, dtype, device)
        (xs, xl), (gs, gl) = storage_and_layout(xt), storage_and_layout(gt)
        got = _read(xs.unary_backward(op, xl, gs, gl), x.shape)
        ref = values(g, gk, dtype) * composite_derivative(op, values(x, xk, dtype))
        # the tanh form's formula cancels in its left tail (1 + tanh(u) for x near -5): an absolute
        # error of a few eps there, which this test's inputs (seeded by its id) may reach
        close(got, ref, dtype, terms=4, scale=4.0 if op == "gelu_tanh" else 1.0)


@pytest.mark.parametrize("op", ["gelu_tanh", "gelu_erf", "silu"])
def test_unary_backward_against_finite_differences(op, rng):
    x = rng.uniform(-5, 5, 200)
    h = 1e-6
    f = {"gelu_tanh": lambda v: F.gelu(v, approximate="tanh"), "gelu_erf": F.gelu, "silu": F.silu}[op]
    xt = tl.tensor(x, requires_grad=True)
    f(xt).sum().backward()
    fd = (f(tl.tensor(x + h)).numpy() - f(tl.tensor(x - h)).numpy()) / (2 * h)
    np.testing.assert_allclose(xt.grad.numpy(), fd, rtol=1e-6, atol=1e-8)


def test_unary_backward_rejects_other_ops(device):
    xs, xl = storage_and_layout(tl.ones(3, device=device))
    with pytest.raises(ValueError, match="unary_backward"):
        xs.unary_backward("tanh", xl, xs, xl)


# ---- AdamW step -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES + [tl.float64])
@pytest.mark.parametrize("cfg", [dict(), dict(amsgrad=True), dict(maximize=True), dict(adam=True)])
def test_adamw_step_matches_reference(device, rng, dtype, cfg):
    cfg = dict(cfg)
    decoupled = not cfg.pop("adam", False)
    p0 = rng.standard_normal((5, 7)).astype(dtype.np)
    grads = [rng.standard_normal((5, 7)) for _ in range(4)]
    p = nn.Parameter(view_of(p0, "transposed", dtype, device))  # made contiguous by the first step
    cls = optim.AdamW if decoupled else optim.Adam
    opt = cls([p], lr=0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1, **cfg)
    for i, g in enumerate(grads):
        gt = view_of(g, "strided" if i % 2 else "contiguous", dtype, device)
        p.grad = gt
        opt.step()
        grads[i] = values(g, "strided" if i % 2 else "contiguous", dtype)
    ref = numpy_adam(as_f64(p0), grads, 0.01, (0.8, 0.95), 1e-6, 0.1, decoupled, **cfg)[-1]
    state = opt.state[p]
    assert state["step"] == 4
    assert state["exp_avg"].dtype == (tl.float64 if dtype is tl.float64 else tl.float32)
    if dtype is tl.float64:
        np.testing.assert_allclose(p.numpy(), ref, rtol=1e-12, atol=1e-14)
    else:  # f32 math; half parameters round once per step
        rtol = 1e-5 if dtype is tl.float32 else 4 * tolerance(dtype)[0]
        np.testing.assert_allclose(as_f64(p.numpy()), ref, rtol=rtol, atol=rtol)


def test_adamw_many_parameters_in_one_step(device, rng):
    # adamw_steps batches a group's contiguous parameters (a GPU: up to 24 per launch, in
    # 2048-element chunks); mixed dtypes, sizes across chunk edges, an empty parameter and
    # a strided gradient (the one-by-one path) all in one group.
    shapes = [(5000,), (3, 7), (0,), (2048,), (1,)] + [(i + 1, 3) for i in range(25)]
    dtypes_ = [tl.float32 if i % 3 else tl.bfloat16 for i in range(len(shapes))]
    p0 = [rng.standard_normal(s).astype(dt.np) for s, dt in zip(shapes, dtypes_)]
    params = [nn.Parameter(tl.tensor(a, dtype=dt, device=device)) for a, dt in zip(p0, dtypes_)]
    opt = optim.AdamW(params, lr=0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)
    grads = [[rng.standard_normal(s) for s in shapes] for _ in range(2)]
    for step in grads:
        for i, (p, g, dt) in enumerate(zip(params, step, dtypes_)):
            p.grad = view_of(g, "strided" if i == 1 else "contiguous", dt, device)
        opt.step()
    for i, (p, a, dt) in enumerate(zip(params, p0, dtypes_)):
        gs = [values(step[i], "strided" if i == 1 else "contiguous", dt) for step in grads]
        ref = numpy_adam(as_f64(a), gs, 0.01, (0.8, 0.95), 1e-6, 0.1, True)[-1]
        rtol = 1e-5 if dt is tl.float32 else 4 * tolerance(dt)[0]
        np.testing.assert_allclose(as_f64(p.numpy()), ref, rtol=rtol, atol=rtol, err_msg=f"parameter {i}")
        assert opt.state[p]["step"] == 2


def test_adamw_updates_in_place(device, rng):
    p = nn.Parameter(tl.tensor(rng.standard_normal(6), device=device))
    view, storage = p.detach(), p.data_ptr_id()
    opt = optim.AdamW([p], lr=0.1)
    p.grad = tl.tensor(rng.standard_normal(6), device=device)
    opt.step()
    m = opt.state[p]["exp_avg"]
    p.grad = tl.tensor(rng.standard_normal(6), device=device)
    opt.step()  # the moment buffers, too, are updated in place
    assert p.data_ptr_id() == storage and shares_storage(m, opt.state[p]["exp_avg"])
    np.testing.assert_array_equal(view.numpy(), p.numpy())  # views see the update
    saved = opt.state_dict()
    opt2 = optim.AdamW([p], lr=0.1)
    opt2.load_state_dict(saved)
    before = saved["state"][0]["exp_avg"].numpy().copy()
    p.grad = tl.tensor(rng.standard_normal(6), device=device)
    opt2.step()  # the loaded buffers are copies: the saved state does not change
    np.testing.assert_array_equal(saved["state"][0]["exp_avg"].numpy(), before)


def test_adamw_step_torch_bfloat16_params_with_float32_state(rng):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    p0 = rng.standard_normal(64).astype(np.float32)
    grads = [rng.standard_normal(64).astype(np.float32) for _ in range(3)]
    p = nn.Parameter(tl.tensor(p0, dtype=tl.bfloat16))
    opt = optim.AdamW([p], lr=0.05, weight_decay=0.1)
    tp = torch.nn.Parameter(torch.tensor(p0).bfloat16().float())  # torch in f32 from the same start
    topt = torch.optim.AdamW([tp], lr=0.05, weight_decay=0.1)
    for g in grads:
        p.grad = tl.tensor(g, dtype=tl.bfloat16)
        tp.grad = torch.tensor(g).bfloat16().float()
        opt.step()
        topt.step()
    np.testing.assert_allclose(as_f64(p.numpy()), tp.detach().double().numpy(), rtol=2e-2, atol=2e-2)
