"""nn.functional forward results against float64 numpy references on every device and
float dtype, the fused ops against their composite `*_slow` references (forward and
gradients), and PyTorch's semantics where torch is installed."""
import math

import numpy as np
import pytest

import tensorlite as tl
import tensorlite.nn.functional as F
from tensorlite.backends.rocm.ops import fused as fused_ops
from conftest import as_f64, assert_close, make_tensor, random_array, tolerance

FLOATS = [tl.float32, tl.float16, tl.bfloat16]


# ---- numpy float64 references --------------------------------------------------------

def np_softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_layer_norm(x, k, w=None, b=None, eps=1e-5):
    axes = tuple(range(x.ndim - k, x.ndim))
    y = (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


def np_rms_norm(x, k, w=None, eps=1e-6):
    axes = tuple(range(x.ndim - k, x.ndim))
    return x / np.sqrt((x * x).mean(axes, keepdims=True) + eps) * (1 if w is None else w)


def np_rope(x, cos, sin, variant):
    """cos/sin (b, t, d/2); x (b, h, t, d) or (b, t, h, d) for rope_thd."""
    c, s = (cos[:, :, None], sin[:, :, None]) if variant == "rope_thd" else (cos[:, None], sin[:, None])
    out = np.empty_like(x)
    if variant == "rope_i":
        a, b = x[..., 0::2], x[..., 1::2]
        out[..., 0::2], out[..., 1::2] = a * c - b * s, a * s + b * c
    else:
        h = x.shape[-1] // 2
        a, b = x[..., :h], x[..., h:]
        out[..., :h], out[..., h:] = a * c - b * s, b * c + a * s
    return out


def np_sdpa(q, k, v, keep=None, additive=None, scale=None):
    groups = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, groups, 1), np.repeat(v, groups, 1)
    s = q @ k.swapaxes(-1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if additive is not None:
        s = s + additive
    if keep is not None:
        s = np.where(keep, s, -np.inf)
    return np_softmax(s, -1) @ v


np_erf = np.vectorize(math.erf)


# ---- forward vs references -----------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_and_log_softmax(device, rng, dtype, dim):
    x, a = make_tensor(rng, (3, 4, 5), dtype, device, -4, 4)
    ref = np_softmax(as_f64(a), dim)
    assert_close(F.softmax(x, dim), ref, dtype, terms=5)
    assert_close(F.log_softmax(x, dim), np.log(ref), dtype, terms=5)


def test_softmax_of_integers_is_float(device):
    y = F.softmax(tl.tensor([[1, 2, 3]], device=device), -1)
    assert y.dtype == tl.float32
    np.testing.assert_allclose(y.numpy(), np_softmax(np.array([[1.0, 2, 3]]), -1), rtol=1e-6)


@pytest.mark.parametrize("dtype", FLOATS)
def test_layer_norm(device, rng, dtype):
    x, a = make_tensor(rng, (2, 3, 4, 6), dtype, device)
    w, wa = make_tensor(rng, (4, 6), dtype, device)
    b, ba = make_tensor(rng, (4, 6), dtype, device)
    ref = np_layer_norm(as_f64(a), 2, as_f64(wa), as_f64(ba))
    assert_close(F.layer_norm(x, (4, 6), w, b), ref, dtype, terms=24)
    assert_close(F.layer_norm(x, 6), np_layer_norm(as_f64(a), 1), dtype, terms=6)


def test_norms_over_the_last_dim_add_one_node(device, rng):
    """Normalising the last dim with 1-d parameters reshapes nothing: one node whose inputs
    are the tensors themselves (no reshape views, and their backward nodes, around it)."""
    x = make_tensor(rng, (2, 3, 6), tl.float32, device)[0].requires_grad_()
    w, b = (make_tensor(rng, (6,), tl.float32, device)[0].requires_grad_() for _ in range(2))
    y, r = F.layer_norm(x, 6, w, b), F.rms_norm(x, (6,), w)
    assert y.grad_fn.name == "layer_norm" and all(a is t for a, t in zip(y.grad_fn.inputs, (x, w, b)))
    assert r.grad_fn.name == "rms_norm" and all(a is t for a, t in zip(r.grad_fn.inputs, (x, w)))
    assert F.layer_norm(x, (3, 6)).grad_fn.name == "reshape"  # merged dims: a view back to x's shape


@pytest.mark.parametrize("dtype", FLOATS)
def test_rms_norm(device, rng, dtype):
    x, a = make_tensor(rng, (3, 2, 8), dtype, device)
    w, wa = make_tensor(rng, (8,), dtype, device)
    assert_close(F.rms_norm(x, 8, w, eps=1e-6), np_rms_norm(as_f64(a), 1, as_f64(wa)), dtype, terms=8)
    default_eps = {tl.float32: 2.0 ** -23, tl.float16: 2.0 ** -10, tl.bfloat16: 2.0 ** -7}[dtype]
    assert_close(F.rms_norm(x, (2, 8)), np_rms_norm(as_f64(a), 2, eps=default_eps), dtype, terms=16)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("view", ["contiguous", "misaligned", "transposed"])
def test_add_rms_norm_is_the_add_then_the_norm(device, rng, dtype, view):
    """F.add_rms_norm: (rms_norm(x + r), x + r), the sum rounded to the dtype first; one kernel
    on GPUs for contiguous operands (aligned or not), the two ops for others and with autograd."""
    x, a = make_tensor(rng, (6, 48 + 1), dtype, device)
    r, b = make_tensor(rng, (6, 48 + 1), dtype, device)
    w, wa = make_tensor(rng, (48,), dtype, device)
    pick = {"contiguous": lambda t: t[:, :48].reshape(-1)[:5 * 48].reshape(5, 48),
            "misaligned": lambda t: t.reshape(-1)[1:1 + 5 * 48].reshape(5, 48),  # one element in
            "transposed": lambda t: t[:, :6].transpose(1, 0)}[view]
    x, r, a, b = pick(x), pick(r), pick(as_f64(a)), pick(as_f64(b))
    with tl.no_grad():
        normed, total = F.add_rms_norm(x, r, x.shape[-1], w if view != "transposed" else None, eps=1e-6)
    summed = (x + r).numpy().astype(np.float64)  # the sum in the dtype, as the unfused add
    assert np.array_equal(total.numpy().astype(np.float64), summed) and total.dtype is dtype
    assert_close(normed, np_rms_norm(summed, 1, as_f64(wa) if view != "transposed" else None), dtype,
                 terms=x.shape[-1])
    # with autograd: the add and the norm, gradients as theirs
    xg, rg = x.detach().requires_grad_(), r.detach().requires_grad_()
    normed, total = F.add_rms_norm(xg, rg, x.shape[-1])
    (normed.sum() + 2 * total.sum()).backward()
    xr, rr = x.detach().requires_grad_(), r.detach().requires_grad_()
    s = xr + rr
    (F.rms_norm(s, x.shape[-1]).sum() + 2 * s.sum()).backward()
    assert_close(xg.grad, xr.grad.numpy().astype(np.float64), dtype, terms=x.shape[-1])
    assert_close(rg.grad, rr.grad.numpy().astype(np.float64), dtype, terms=x.shape[-1])
    with pytest.raises(tl.ShapeError, match="add_rms_norm"):
        F.add_rms_norm(x, r[:, :4], 4)
    with pytest.raises(tl.DTypeError, match="add_rms_norm"):
        F.add_rms_norm(x, r.double(), x.shape[-1])


@pytest.mark.parametrize("stream, half", [(tl.float32, None), (tl.float32, tl.bfloat16), (tl.float32, tl.float16),
                                          (tl.bfloat16, None), (tl.float64, None)], ids=str)
@pytest.mark.parametrize("view", ["contiguous", "odd", "misaligned"])
def test_add_layer_norm_is_the_add_norm_and_cast(device, rng, stream, half, view):
    """F.add_layer_norm(x, r, ..., dtype=half): (layer_norm(x + r) cast to half, x + r in the
    stream's dtype), values and gradients equal to the ops it replaces, with both outputs used
    and with only the normed one. One kernel each way on GPUs for contiguous rows (odd rows:
    the forward's element path, the backward's ops; misaligned: the ops)."""
    cols = {"contiguous": 64, "odd": 37, "misaligned": 64}[view]
    rdt = half or stream
    ax, ar = random_array(rng, (5, 3, cols), stream), random_array(rng, (5, 3, cols), rdt)
    aw, ab = random_array(rng, (cols,), stream), random_array(rng, (cols,), stream)
    proj_n, proj_t = (np.linspace(-1, 1, ax.size).reshape(ax.shape) * k for k in (1.0, 0.5))

    def leaves():
        def one(a, dt):
            if view != "misaligned" or a.ndim == 1:
                return tl.tensor(a, dtype=dt, device=device).requires_grad_()
            flat = tl.tensor(np.concatenate([np.zeros(1, a.dtype), a.reshape(-1)]), dtype=dt, device=device)
            leaf = flat.requires_grad_()
            return leaf, leaf[1:].reshape(a.shape)
        return [one(a, dt) for a, dt in ((ax, stream), (ar, rdt), (aw, stream), (ab, stream))]

    def tensors(ls):
        return [t[1] if isinstance(t, tuple) else t for t in ls]

    def grads(ls):
        return [(t[0].grad[1:].reshape(t[1].shape) if isinstance(t, tuple) else t.grad) for t in ls]

    for use_total in (True, False):
        fused_leaves, ref_leaves = leaves(), leaves()
        x, r, w, b = tensors(fused_leaves)
        normed, total = F.add_layer_norm(x, r, cols, w, b, eps=1e-5, dtype=half)
        assert normed.dtype is rdt and total.dtype is stream and normed.shape == total.shape == x.shape
        xr, rr, wr, br = tensors(ref_leaves)
        total_r = xr + rr.to(stream)
        normed_r = F.layer_norm(total_r, (cols,), wr, br, eps=1e-5).to(rdt)
        assert np.array_equal(total.numpy(), total_r.numpy())  # the sum rounded once, to the stream's dtype
        assert_close(normed, normed_r.numpy().astype(np.float64), rdt, terms=cols)
        for n_, t_ in ((normed, total), (normed_r, total_r)):
            loss = (n_.to(stream) * tl.tensor(proj_n, dtype=stream, device=device)).sum()
            if use_total:
                loss = loss + (t_ * tl.tensor(proj_t, dtype=stream, device=device)).sum()
            loss.backward()
        for got, ref, dt in zip(grads(fused_leaves), grads(ref_leaves), (stream, rdt, stream, stream)):
            assert got.dtype is dt
            assert_close(got, ref.numpy().astype(np.float64), dt, terms=4 * cols)


def test_add_layer_norm_rejects_bad_operands(device):
    x, r = tl.ones(2, 4, device=device), tl.ones(2, 4, dtype=tl.bfloat16, device=device)
    with pytest.raises(tl.ShapeError, match="add_layer_norm.*one shape"):
        F.add_layer_norm(x, r[:, :2], 4)
    with pytest.raises(tl.DTypeError, match="add_layer_norm.*floating"):
        F.add_layer_norm(x, r.long(), 4)
    with pytest.raises(tl.DTypeError, match="add_layer_norm.*dtype must be a floating"):
        F.add_layer_norm(x, r, 4, dtype=tl.int32)
    with pytest.raises(tl.ShapeError, match="add_layer_norm"):
        F.add_layer_norm(x, r, 3)
    with pytest.raises(tl.DTypeError, match="add_layer_norm"):  # weight of the sum's dtype
        F.add_layer_norm(x, r, 4, tl.ones(4, dtype=tl.bfloat16, device=device))
    normed, total = F.add_layer_norm(r, r, 4, dtype=tl.float32)  # two half operands: a half sum
    assert total.dtype is tl.bfloat16 and normed.dtype is tl.float32


def np_silu(x):
    return x / (1 + np.exp(-x))


@pytest.mark.parametrize("dtype", FLOATS + [tl.float64])
@pytest.mark.parametrize("view", ["row", "misaligned", "rows", "strided-weight"])
def test_rms_norm_linear_is_the_norm_then_the_linear(device, rng, dtype, view):
    """F.rms_norm_linear: linear(rms_norm(x)), or SwiGLU's silu(g) * u of its halves with
    `gated`; one GEMV on GPUs for a single row (16-byte runs where aligned, one element at a
    time otherwise), the ops for several rows, a weight not row-major, and with autograd."""
    k, n = 264, 38
    x, a = make_tensor(rng, (3, k + 1), dtype, device)
    w, wa = make_tensor(rng, (n, k + 1), dtype, device, -0.5, 0.5)
    g, ga = make_tensor(rng, (k,), dtype, device)
    rows = {"row": 1, "misaligned": 1, "rows": 3, "strided-weight": 1}[view]
    start = 1 if view == "misaligned" else 0
    x, a = x[:rows, start:start + k].reshape(1, rows, k), as_f64(a)[:rows, start:start + k]
    w, wa = w[:, :k], as_f64(wa)[:, :k]
    if view == "strided-weight":  # W^T not a row-major weight's transpose
        w = tl.tensor(np.ascontiguousarray(wa.T.astype(dtype.np)), device=device).transpose(0, 1)
    for weight, ref_g in [(g, as_f64(ga)), (None, None)]:
        normed = np_rms_norm(a, 1, ref_g, eps=1e-5)
        ref = normed @ wa.T
        with tl.no_grad():
            got = F.rms_norm_linear(x, k, weight, w, eps=1e-5)
            gated = F.rms_norm_linear(x, k, weight, w, eps=1e-5, gated=True)
        assert got.shape == (1, rows, n) and gated.shape == (1, rows, n // 2)
        assert_close(got[0], ref, dtype, terms=k)
        assert_close(gated[0], np_silu(ref[:, :n // 2]) * ref[:, n // 2:], dtype, terms=k)
    # with autograd: the ops, gradients as theirs
    xg, gg = x.detach().requires_grad_(), g.detach().requires_grad_()
    F.rms_norm_linear(xg, k, gg, w, eps=1e-5, gated=True).sum().backward()
    xr, gr = x.detach().requires_grad_(), g.detach().requires_grad_()
    F.silu_mul(*F.linear(F.rms_norm(xr, k, gr, eps=1e-5), w).chunk(2, -1)).sum().backward()
    assert_close(xg.grad, xr.grad.numpy().astype(np.float64), dtype, terms=k)
    assert_close(gg.grad, gr.grad.numpy().astype(np.float64), dtype, terms=k)
    with pytest.raises(tl.ShapeError, match="rms_norm_linear"):
        F.rms_norm_linear(x, k, g, w[:, :k - 1])
    with pytest.raises(tl.ShapeError, match="rms_norm_linear"):
        F.rms_norm_linear(x, k, g, w[:n - 1], gated=True)
    with pytest.raises(tl.ShapeError, match="rms_norm_linear"):  # the norm over more than the last dim
        F.rms_norm_linear(x, (rows, k), None, w)
    with pytest.raises(tl.DTypeError, match="rms_norm_linear"):
        with tl.no_grad():
            F.rms_norm_linear(x, k, g, w.double() if dtype is not tl.float64 else w.float())


@pytest.mark.parametrize("dtype", FLOATS)
def test_add_rms_norm_of_rows_longer_than_registers(device, rng, dtype):
    # on GPUs, rows past what a block holds in registers (65536 elements of a 16-bit type) are
    # re-read by 16-byte vectors from the sum the kernel wrote
    x, a = make_tensor(rng, (2, 66048), dtype, device)
    r, b = make_tensor(rng, (2, 66048), dtype, device)
    with tl.no_grad():
        normed, total = F.add_rms_norm(x, r, 66048, eps=1e-6)
    summed = (x + r).numpy().astype(np.float64)
    assert np.array_equal(total.numpy().astype(np.float64), summed)
    assert_close(normed, np_rms_norm(summed, 1), dtype, terms=66048)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("rows, cols, start", [(5, 1000, 0), (5, 1000, 1), (2, 40000, 0), (3, 4096, 0), (80, 512, 0)],
                         ids=["vectors", "misaligned", "longer-than-registers", "hidden-4096", "many-rows"])
def test_row_ops_on_long_and_misaligned_rows(device, rng, dtype, rows, cols, start):
    # The GPU row kernels read aligned contiguous rows by 16-byte vectors and keep rows that
    # fit in registers; a view starting one element in, and rows too long to keep, take
    # the element-wise and the re-reading paths. A few rows are spread over a thread per
    # vector, many rows hold several vectors per thread (launch.py SPREAD_ROWS_BELOW).
    x, a = make_tensor(rng, (rows, cols + start), dtype, device, -4, 4)
    x, a = x[:, start:], as_f64(a)[:, start:]
    w, wa = make_tensor(rng, (cols,), dtype, device)
    b, ba = make_tensor(rng, (cols,), dtype, device)
    ref = np_softmax(a, -1)
    assert_close(F.softmax(x, -1), ref, dtype, terms=8)
    assert_close(F.log_softmax(x, -1), np.log(ref), dtype, terms=8)
    assert_close(F.layer_norm(x, cols, w, b), np_layer_norm(a, 1, as_f64(wa), as_f64(ba)), dtype, terms=8)
    assert_close(F.rms_norm(x, cols, w, eps=1e-6), np_rms_norm(a, 1, as_f64(wa)), dtype, terms=8)
    normed, total = F.add_rms_norm(x, x, cols, w, eps=1e-6)
    summed = as_f64((2 * x).numpy())  # the sum rounded to the dtype first, as the kernel does
    assert_close(total, summed, dtype)
    assert_close(normed, np_rms_norm(summed, 1, as_f64(wa)), dtype, terms=8)


def _strided_rows(a, dtype, device, layout):
    """`a` as a tensor whose rows are contiguous ('rows') or strided (a transposed view)."""
    if layout == "strided":
        return tl.tensor(np.ascontiguousarray(a.T), dtype=dtype, device=device).transpose(0, 1)
    return tl.tensor(a, dtype=dtype, device=device)


@pytest.mark.parametrize("dtype", FLOATS + [tl.float64])
@pytest.mark.parametrize("layout, cols", [("rows", 64), ("strided", 64), ("rows", 1), ("rows", 20)],
                         ids=["vectors", "strided", "one-element", "short"])
def test_row_ops_on_special_values(device, rng, dtype, layout, cols):
    # Each GPU thread reduces its share of a row first, then the shares merge: a share of
    # nothing but -inf, rows of -inf (NaN, as torch), +inf and NaN must come out as on cpu.
    # Short rows put several rows in a block (some past the last row).
    a = random_array(rng, (11, cols), dtype, -4, 4)
    a[1] = -np.inf
    a[2, 1:] = -np.inf          # one finite element: the other threads' shares are all -inf
    a[3, ::2] = -np.inf
    a[4, cols // 2] = np.inf
    a[5, cols - 1] = np.nan
    x = _strided_rows(a, dtype, device, layout)
    w, wa = make_tensor(rng, (cols,), dtype, device)
    b, ba = make_tensor(rng, (cols,), dtype, device)
    ref = as_f64(a)
    with np.errstate(invalid="ignore", divide="ignore"):  # the references and the cpu backend
        sm = np_softmax(ref, -1)
        assert_close(F.softmax(x, -1), sm, dtype, terms=8)
        assert_close(F.log_softmax(x, -1), np.log(sm), dtype, terms=8)
        assert_close(F.layer_norm(x, cols, w, b), np_layer_norm(ref, 1, as_f64(wa), as_f64(ba)), dtype, terms=8)
        assert_close(F.rms_norm(x, cols, w, eps=1e-6), np_rms_norm(ref, 1, as_f64(wa)), dtype, terms=8)


@pytest.mark.parametrize("layout", ["rows", "strided", "strided-weight"])
def test_layer_norm_is_accurate_far_from_zero(device, rng, layout):
    # mean 1000, spread 4: a variance from sum(x^2)/n - mean^2 in float32 is off by
    # percents; deviations from each part's own mean (merged exactly) are not.
    a = rng.uniform(-4, 4, (6, 256)).astype(np.float32) + np.float32(1000)
    x = _strided_rows(a, tl.float32, device, "strided" if layout == "strided" else "rows")
    wa = rng.uniform(0.5, 2, 512).astype(np.float32)
    w = tl.tensor(wa, device=device)
    w = w[::2] if layout == "strided-weight" else w[:256]   # a strided weight takes the general path
    ref = np_layer_norm(as_f64(a), 1, as_f64(wa[::2] if layout == "strided-weight" else wa[:256]))
    np.testing.assert_allclose(F.layer_norm(x, 256, w).numpy(), ref, rtol=0, atol=2e-3)


def test_row_kernels_get_the_threads_to_hold_a_row():
    # fused.hip's RowRegs holds row_vectors(n) 16-byte vectors per thread; any row that
    # fits 1024 threads must get enough of them, however many rows there are.
    from tensorlite.backends.rocm.launch import launch_rows, row_vector, row_vectors
    from tensorlite.backends.rocm.device import Kernel

    class Dev:
        warp_size, props, launches = 32, {"multiprocessor_count": 132}, []

        def launch(self, kernel, grid, block, args):
            self.launches.append((grid, block))

    dev = Dev()
    for dtype in (tl.float32, tl.bfloat16, tl.float64):
        n = 16 // dtype.itemsize
        held = row_vectors(n)
        for n_rows in (1, 100, 3000, 20000):
            for row_len in (n, 64 * n, 4096, 8192, 1024 * held * n):
                launch_rows(dev, Kernel(None, "softmax_x", "fused.hip"), n_rows, row_len, [],
                            vector=row_vector(dtype, row_len, 1), held=True)
                grid, (tpr, rpb) = dev.launches[-1]
                assert tpr * held * n >= row_len and tpr * rpb <= 1024 and grid >= 1, \
                    (dtype, n_rows, row_len, tpr, rpb)


@pytest.mark.parametrize("dtype", FLOATS)
def test_activations(device, rng, dtype):
    x, a = make_tensor(rng, (4, 7), dtype, device, -4, 4)
    a = as_f64(a)
    cdf = 0.5 * (1 + np_erf(a / math.sqrt(2)))
    tanh_gelu = 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3)))
    sig = 1 / (1 + np.exp(-a))
    for got, ref in [(F.gelu(x), a * cdf), (F.gelu(x, approximate="tanh"), tanh_gelu), (F.silu(x), a * sig),
                     (F.relu(x), np.maximum(a, 0)), (F.sigmoid(x), sig), (F.tanh(x), np.tanh(a))]:
        assert_close(got, ref, dtype, terms=4)
    with pytest.raises(ValueError, match="approximate"):
        F.gelu(x, approximate="fast")


@pytest.mark.parametrize("dtype", FLOATS + [tl.float64])
def test_silu_mul_on_halves_of_one_product(device, rng, dtype):
    """F.silu_mul(gate, up) = silu(gate) * up, rounded once; gate and up are the two halves of
    one (rows, 2n) product (Llama's fused gate/up projection), so strided views; and broadcast."""
    y, a = make_tensor(rng, (5, 2 * 9), dtype, device, -6, 6)
    a = as_f64(a)
    gate, up = a[:, :9], a[:, 9:]
    assert_close(F.silu_mul(y[:, :9], y[:, 9:]), gate / (1 + np.exp(-gate)) * up, dtype, terms=4)
    assert_close(F.silu_mul(y[:, :9], y[0, 9:]), gate / (1 + np.exp(-gate)) * up[0], dtype, terms=4)
    assert F.silu_mul(y, y.double()).dtype is tl.float64  # types promote as `*`'s


def test_silu_mul_gradients(device, rng):
    """Both gradients against a central difference of the op itself (float64)."""
    a, b = rng.uniform(-4, 4, (6,)), rng.uniform(-2, 2, (6,))
    x = tl.tensor(a, device=device, requires_grad=True)
    y = tl.tensor(b, device=device, requires_grad=True)
    F.silu_mul(x, y).sum().backward()
    h = 1e-6
    f = lambda u, v: F.silu_mul(tl.tensor(u, device=device), tl.tensor(v, device=device)).numpy()  # noqa: E731
    np.testing.assert_allclose(x.grad.numpy(), (f(a + h, b) - f(a - h, b)) / (2 * h), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(y.grad.numpy(), (f(a, b + h) - f(a, b - h)) / (2 * h), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("variant", ["rope", "rope_i", "rope_thd"])
@pytest.mark.parametrize("per_batch", [False, True])
@pytest.mark.parametrize("d, transposed", [(8, False), (32, False), (32, True)],
                         ids=["d8", "d32", "d32-transposed-view"])
@pytest.mark.parametrize("h", [3, 4, 6])
def test_rope_variants(device, rng, dtype, variant, per_batch, d, transposed, h, monkeypatch):
    # d 32: the GPU kernel rotates runs of pairs with vector loads; a transposed view of x
    # (the other of (b, h, t, d) / (b, t, h, d)) takes the strided path. h 4 / 6 / 3: a
    # GPU thread rotates 4 / 2 / 1 heads, which only launches of many pairs do unless told
    # (ROPE_SPREAD_BELOW; test_rope_of_a_decode_step takes the one-head path).
    monkeypatch.setattr(fused_ops, "ROPE_SPREAD_BELOW", 0)
    b, t = 2, 5
    shape = (b, t, h, d) if variant == "rope_thd" else (b, h, t, d)
    if transposed:
        x, a = make_tensor(rng, (shape[0], shape[2], shape[1], d), dtype, device)
        x, a = x.transpose(1, 2), a.transpose(0, 2, 1, 3)
    else:
        x, a = make_tensor(rng, shape, dtype, device)
    theta = rng.uniform(0, 2 * np.pi, (b, t, d // 2) if per_batch else (t, d // 2))
    cos, sin = (tl.tensor(f(theta), dtype=dtype, device=device) for f in (np.cos, np.sin))
    c64, s64 = (np.broadcast_to(as_f64(t_.numpy()), (b, t, d // 2)) for t_ in (cos, sin))
    assert_close(getattr(F, variant)(x, cos, sin), np_rope(as_f64(a), c64, s64, variant), dtype, terms=2)


@pytest.mark.parametrize("dtype", FLOATS)
def test_rope_of_a_decode_step(device, rng, dtype):
    # one position of q and k side by side (Llama's decode: 32 + 8 heads): a GPU thread takes one head
    b, h, d = 1, 40, 64
    y, a = make_tensor(rng, (b, 1, h * d + 16), dtype, device)  # k and q of a fused product, v's columns after
    x = y[..., :h * d].reshape(b, 1, h, d).transpose(1, 2)
    theta = rng.uniform(0, 2 * np.pi, (1, d // 2))
    cos, sin = (tl.tensor(f(theta), dtype=dtype, device=device) for f in (np.cos, np.sin))
    c64, s64 = (np.broadcast_to(as_f64(t_.numpy()), (b, 1, d // 2)) for t_ in (cos, sin))
    ref = np_rope(as_f64(a)[..., :h * d].reshape(b, 1, h, d).transpose(0, 2, 1, 3), c64, s64, "rope")
    assert_close(F.rope(x, cos, sin), ref, dtype, terms=2)


def _decode_step_operands(rng, dtype, device, b, t, hq, hkv, d, S):
    """A q/k/v product's heads as Llama's attention views them (b, hq + 2*hkv, t, d), tables,
    caches holding earlier values, and the new positions."""
    h = hq + 2 * hkv
    y, a = make_tensor(rng, (b, t, h * d), dtype, device)
    qkv, a = y.reshape(b, t, h, d).transpose(1, 2), as_f64(a).reshape(b, t, h, d).transpose(0, 2, 1, 3)
    theta = rng.uniform(0, 2 * np.pi, (t, d // 2))
    cos, sin = (tl.tensor(f(theta), dtype=dtype, device=device) for f in (np.cos, np.sin))
    kc, ka = make_tensor(rng, (b, hkv, S, d), dtype, device)
    vc, va = make_tensor(rng, (b, hkv, S, d), dtype, device)
    positions = rng.permutation(S)[:t]
    return qkv, a, cos, sin, kc, as_f64(ka), vc, as_f64(va), positions


@pytest.mark.parametrize("dtype", FLOATS + [tl.float64])
@pytest.mark.parametrize("b, t, hq, hkv, d", [(1, 1, 4, 2, 64), (2, 3, 6, 2, 16), (2, 2, 3, 1, 6)],
                         ids=["decode", "batch-prefill", "odd-half"])
def test_rope_kv_cache(device, rng, dtype, b, t, hq, hkv, d):
    """Rotated queries returned; rotated keys and the values written at the positions, every
    other cache row untouched: against float64 rope and index_copy. d 6: runs of one pair."""
    S = 7
    qkv, a, cos, sin, kc, ka, vc, va, positions = _decode_step_operands(rng, dtype, device, b, t, hq, hkv, d, S)
    c64, s64 = (np.broadcast_to(as_f64(t_.numpy()), (b, t, d // 2)) for t_ in (cos, sin))
    rotated = np_rope(a[:, :hq + hkv], c64, s64, "rope")
    ka[:, :, positions], va[:, :, positions] = rotated[:, hq:], a[:, hq + hkv:]
    for ids in (tl.tensor(positions, device=device), tl.tensor(positions.astype(np.int32), device=device)):
        q = F.rope_kv_cache(qkv, cos, sin, kc, vc, ids)
        assert q.shape == (b, hq, t, d)
        assert_close(q, rotated[:, :hq], dtype, terms=2)
        assert_close(kc, ka, dtype, terms=2)
        assert_close(vc, va, dtype)


def test_rope_kv_cache_records_autograd_and_checks_positions(device, rng):
    qkv, a, cos, sin, kc, ka, vc, va, positions = _decode_step_operands(rng, tl.float64, device, 1, 2, 2, 1, 4, 5)
    x = qkv.detach().requires_grad_()
    q = F.rope_kv_cache(x, cos, sin, kc, vc, tl.tensor(positions, device=device))
    (q.sum() + kc.sum() + vc.sum()).backward()  # the composite's gradient: rope's transpose, index_copy's
    g = np.ones((1, 4, 2, 4))
    g[:, :3] = np_rope(g[:, :3], *(np.broadcast_to(-t_.numpy() if i else t_.numpy(), (1, 2, 2))
                                   for i, t_ in enumerate((cos, sin))), "rope")
    assert_close(x.grad, g, tl.float64)
    with pytest.raises(tl.IndexOutOfRange, match="index 5 is out of range"):
        F.rope_kv_cache(qkv, cos, sin, kc, vc, tl.tensor([0, 5], device=device))
    with pytest.raises(tl.ShapeError, match="positions must be"):
        F.rope_kv_cache(qkv, cos, sin, kc, vc, tl.tensor([0], device=device))
    with pytest.raises(tl.ShapeError, match="caches"):
        F.rope_kv_cache(qkv, cos, sin, kc, vc[:, :, :4], tl.tensor(positions, device=device))
    with pytest.raises(tl.DTypeError, match="v_cache"):
        F.rope_kv_cache(qkv, cos, sin, kc, vc.float(), tl.tensor(positions, device=device))
    if device != "cpu":
        with pytest.raises(tl.DeviceError, match="positions must be on qkv's device"):
            F.rope_kv_cache(qkv, cos, sin, kc, vc, tl.tensor(positions))


def test_rope_shape_errors(device):
    x = tl.zeros(1, 2, 3, 4, device=device)
    with pytest.raises(tl.ShapeError, match=r"rope\(x: shape=\(1, 2, 3, 4\)"):
        F.rope(x, tl.zeros(4, 2, device=device), tl.zeros(4, 2, device=device))
    with pytest.raises(tl.ShapeError, match="even"):
        F.rope_i(tl.zeros(1, 2, 3, 5, device=device), tl.zeros(3, 2, device=device), tl.zeros(3, 2, device=device))


@pytest.mark.parametrize("dtype", FLOATS)
def test_sdpa_masks_causal_and_gqa(device, rng, dtype):
    q, qa = make_tensor(rng, (2, 4, 3, 8), dtype, device)
    k, ka = make_tensor(rng, (2, 2, 5, 8), dtype, device)
    v, va = make_tensor(rng, (2, 2, 5, 6), dtype, device)
    q64, k64, v64 = as_f64(qa), as_f64(ka), as_f64(va)
    keep = rng.random((2, 1, 3, 5)) < 0.7
    keep[..., 0] = True
    additive, add_a = make_tensor(rng, (3, 5), dtype, device)
    tol_terms = 5
    assert_close(F.scaled_dot_product_attention(q, k, v), np_sdpa(q64, k64, v64), dtype, terms=tol_terms)
    got = F.scaled_dot_product_attention(q, k, v, attn_mask=tl.tensor(keep, device=device), scale=0.2)
    assert_close(got, np_sdpa(q64, k64, v64, keep=keep, scale=0.2), dtype, terms=tol_terms)
    got = F.scaled_dot_product_attention(q, k, v, attn_mask=additive)
    assert_close(got, np_sdpa(q64, k64, v64, additive=as_f64(add_a)), dtype, terms=tol_terms)
    top_left = np.tril(np.ones((3, 5), bool))
    bottom_right = np.tril(np.ones((3, 5), bool), k=2)
    assert_close(F.scaled_dot_product_attention(q, k, v, is_causal=True), np_sdpa(q64, k64, v64, keep=top_left),
                 dtype, terms=tol_terms)
    got = F.scaled_dot_product_attention(q, k, v, attn_mask=tl.tensor(keep, device=device), is_causal="bottom_right")
    assert_close(got, np_sdpa(q64, k64, v64, keep=keep & bottom_right), dtype, terms=tol_terms)
    got = F.scaled_dot_product_attention(q, k, v, attn_mask=additive, is_causal="bottom_right")
    assert_close(got, np_sdpa(q64, k64, v64, keep=bottom_right, additive=as_f64(add_a)), dtype, terms=tol_terms)


def test_causal_mask_helper_alignment(device):
    np.testing.assert_array_equal(F.causal_mask(2, 4, device=device).numpy(), np.tril(np.ones((2, 4), bool)))
    np.testing.assert_array_equal(F.causal_mask(2, 4, bottom_right=True, device=device).numpy(),
                                  [[True, True, True, False], [True, True, True, True]])


def test_kv_cache_decoding_matches_full_causal_attention(device, rng):
    """The last query of a full causal pass equals one decode step over the cached keys."""
    q, _ = make_tensor(rng, (1, 2, 6, 4), tl.float32, device)
    k, _ = make_tensor(rng, (1, 1, 6, 4), tl.float32, device)
    v, _ = make_tensor(rng, (1, 1, 6, 4), tl.float32, device)
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    for start in (4, 5):  # two new queries, then one (the usual decode step)
        step = F.scaled_dot_product_attention(q[:, :, start:], k, v, is_causal="bottom_right")
        assert_close(step, full.numpy()[:, :, start:], tl.float32, terms=6)


def test_sdpa_errors(device):
    q = tl.zeros(1, 3, 2, 4, device=device)
    kv = tl.zeros(1, 2, 2, 4, device=device)
    with pytest.raises(tl.ShapeError, match="multiple of key/value heads"):
        F.scaled_dot_product_attention(q, kv, kv)
    with pytest.raises(ValueError, match="is_causal"):
        F.scaled_dot_product_attention(q, q, q, is_causal="diagonal")
    with pytest.raises(tl.ShapeError, match="broadcast"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=tl.zeros(3, 3, dtype=tl.bool, device=device))


@pytest.mark.parametrize("dtype", [tl.float32, tl.float64])
def test_losses_linear_embedding(device, rng, dtype):
    logits, la = make_tensor(rng, (6, 5), dtype, device, -3, 3)
    target = np.array([0, 4, 2, -100, 1, 4])
    t = tl.tensor(target, device=device)
    lsm = np.log(np_softmax(as_f64(la), 1))
    valid = target != -100
    nll = -lsm[np.arange(6), np.where(valid, target, 0)]
    assert_close(F.cross_entropy(logits, t), nll[valid].mean(), dtype, terms=6)
    assert_close(F.cross_entropy(logits, t, reduction="sum"), nll[valid].sum(), dtype, terms=6)
    assert_close(F.cross_entropy(logits, t, reduction="none"), np.where(valid, nll, 0), dtype, terms=6)
    a, aa = make_tensor(rng, (3, 4), dtype, device)
    b, ba = make_tensor(rng, (3, 4), dtype, device)
    assert_close(F.mse_loss(a, b), ((as_f64(aa) - as_f64(ba)) ** 2).mean(), dtype, terms=12)
    w, wa = make_tensor(rng, (5, 4), dtype, device)
    bias, bias_a = make_tensor(rng, (5,), dtype, device)
    x, xa = make_tensor(rng, (2, 3, 4), dtype, device)
    assert_close(F.linear(x, w, bias), as_f64(xa) @ as_f64(wa).T + as_f64(bias_a), dtype, terms=4)
    tokens = np.array([[4, 0], [2, 2]])
    assert_close(F.embedding(tl.tensor(tokens, device=device), w), as_f64(wa)[tokens], dtype)
    assert_close(F.normalize(x, dim=-1), as_f64(xa) / np.linalg.norm(as_f64(xa), axis=-1, keepdims=True), dtype,
                 terms=4)


@pytest.mark.parametrize("dtype", [tl.float32, tl.bfloat16])
@pytest.mark.parametrize("case", ["3d", "1d", "no_bias", "strided"])
def test_linear_node_forward_and_grads(device, rng, dtype, case):
    """F.linear is one autograd node (GEMMs on the folded rows, a column sum for the bias):
    its output and all three gradients against numpy, also for operands that are views
    (a transposed input the rows cannot be folded from, a transposed weight, a strided bias)."""
    shape = {"3d": (2, 3, 4), "1d": (4,), "no_bias": (5, 4), "strided": (4, 3, 2)}[case]
    x, xa = make_tensor(rng, shape, dtype, device)
    w, wa = make_tensor(rng, (4, 5) if case == "strided" else (5, 4), dtype, device)
    b, ba = make_tensor(rng, (10,) if case == "strided" else (5,), dtype, device)
    if case == "strided":  # x (2, 3, 4) not foldable into rows by a view; w.T; every other bias element
        x, xa, w, wa, b, ba = x.permute(2, 1, 0), xa.transpose(2, 1, 0), w.mT, wa.T, b[::2], ba[::2]
    b = None if case == "no_bias" else b
    for t in (x, w) + ((b,) if b is not None else ()):
        t.requires_grad = True
    g, ga = make_tensor(rng, shape[:-1] + (5,) if case != "strided" else (2, 3, 5), dtype, device)
    y = F.linear(x, w, b)
    assert y.grad_fn is not None and y.grad_fn.name == "linear"
    x64, w64 = as_f64(xa), as_f64(wa)
    expected = x64 @ w64.T + (0 if b is None else as_f64(ba))
    assert_close(y, expected, dtype, terms=4)
    y.backward(g)
    g64 = as_f64(ga).reshape(-1, 5)
    assert_close(x.grad, (g64 @ w64).reshape(x.shape), dtype, terms=5)
    assert_close(w.grad, g64.T @ x64.reshape(-1, 4), dtype, terms=g64.shape[0])
    if b is not None:
        assert_close(b.grad, g64.sum(0), dtype, terms=g64.shape[0])


@pytest.mark.parametrize("dtype", [tl.float32, tl.bfloat16])
def test_linear_bias_rides_on_the_blas_epilogue_where_it_can(device, rng, monkeypatch, dtype):
    """Where the BLAS has bias epilogues (cuda: cuBLASLt) the bias add and the bias gradient
    run inside the GEMMs: no add or sum kernel. A bias view off its buffer's start adds by
    kernel; TENSORLITE_BLAS_EPILOGUE=0 turns both off. Values against numpy on every path."""
    x, xa = make_tensor(rng, (64, 48), dtype, device)
    w, wa = make_tensor(rng, (40, 48), dtype, device)
    bias_buf, bias_a = make_tensor(rng, (41,), dtype, device)
    g, ga = make_tensor(rng, (64, 40), dtype, device)
    names, fused = None, False
    if device != "cpu":
        from tensorlite.backend import get_device
        dev = get_device(device)
        fused = bool(getattr(dev.platform, "ltlib", False))
        names = []

        def spying(real):  # every launch (kernel lookups are cached per plan)
            def spy(func, *args, **kwargs):
                names.append(func.name)
                return real(func, *args, **kwargs)
            return spy
        # every launch goes through launch_values (launch() calls it; the elementwise ops directly)
        monkeypatch.setattr(dev, "launch_values", spying(dev.launch_values))
    for start, switch in ((0, None), (1, None), (0, "0")):
        if switch is None:
            monkeypatch.delenv("TENSORLITE_BLAS_EPILOGUE", raising=False)
        else:
            monkeypatch.setenv("TENSORLITE_BLAS_EPILOGUE", switch)
        xl, wl, bl = (t.detach() for t in (x, w, bias_buf[start:start + 40]))
        for t in (xl, wl, bl):
            t.requires_grad = True
        if names is not None:
            names.clear()
        y = F.linear(xl, wl, bl)
        y.backward(g)
        x64, w64, g64 = as_f64(xa), as_f64(wa), as_f64(ga)
        assert_close(y, x64 @ w64.T + as_f64(bias_a[start:start + 40]), dtype, terms=48)
        assert_close(xl.grad, g64 @ w64, dtype, terms=40)
        assert_close(wl.grad, g64.T @ x64, dtype, terms=64)
        assert_close(bl.grad, g64.sum(0), dtype, terms=64)
        if names is not None:
            on = fused and switch is None
            assert any(n.startswith("badd_") for n in names) == (not on or start != 0), (start, switch, names)
            assert any(n.startswith("reduce_sum_") for n in names) == (not on), (start, switch, names)


def test_linear_errors_and_promotion(device):
    x, w = tl.ones((2, 4), device=device), tl.ones((3, 5), device=device)
    with pytest.raises(tl.ShapeError, match=r"linear.*\(2, 4\).*\(3, 5\)"):
        F.linear(x, w)
    with pytest.raises(tl.ShapeError, match="bias"):
        F.linear(x, tl.ones((3, 4), device=device), tl.ones((4,), device=device))
    # mixed dtypes take the composite path and promote, as x @ w.T + b does
    y = F.linear(x.double(), tl.ones((3, 4), device=device), tl.ones((3,), device=device))
    assert y.dtype is tl.float64 and np.allclose(y.numpy(), 5.0)


def test_cross_entropy_errors(device):
    logits = tl.zeros(3, 4, device=device)
    with pytest.raises(tl.ShapeError, match=r"cross_entropy\(input: shape=\(3, 4\)"):
        F.cross_entropy(logits, tl.tensor([0, 1], device=device))
    with pytest.raises(ValueError, match="reduction"):
        F.cross_entropy(logits, tl.tensor([0, 1, 2], device=device), reduction="avg")


def test_dropout_training_and_eval(device):
    tl.manual_seed(0)
    x = tl.ones(100, 100, device=device)
    y = F.dropout(x, 0.3)
    kept = y.numpy() != 0
    assert 0.67 < kept.mean() < 0.73
    np.testing.assert_allclose(y.numpy()[kept], 1 / 0.7, rtol=1e-6)
    assert F.dropout(x, 0.3, training=False) is x
    np.testing.assert_array_equal(F.dropout(x, 1.0).numpy(), 0.0)
    with pytest.raises(ValueError, match="probability"):
        F.dropout(x, 1.5)


def test_norm_shape_and_dtype_errors(device):
    x = tl.zeros(2, 3, device=device)
    with pytest.raises(tl.ShapeError, match="normalized_shape"):
        F.layer_norm(x, (4,))
    with pytest.raises(tl.ShapeError, match="weight must have shape"):
        F.rms_norm(x, 3, tl.ones(2, device=device))
    with pytest.raises(tl.DTypeError, match="dtype of the input"):
        F.layer_norm(x, 3, tl.ones(3, dtype=tl.float64, device=device))


# ---- fused ops against their composite references ------------------------------------

FUSED = {
    "softmax_last": (F.softmax, F.softmax_slow, [(3, 4, 7)], dict(dim=-1)),
    "softmax_dim1": (F.softmax, F.softmax_slow, [(3, 4, 7)], dict(dim=1)),
    "log_softmax": (F.log_softmax, F.log_softmax_slow, [(5, 9)], dict(dim=-1)),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (3, 8), w, b), lambda x, w, b: F.layer_norm_slow(x, (3, 8), w, b),
                   [(2, 3, 8), (3, 8), (3, 8)], {}),
    "rms_norm": (lambda x, w: F.rms_norm(x, 8, w, 1e-5), lambda x, w: F.rms_norm_slow(x, 8, w, 1e-5),
                 [(4, 8), (8,)], {}),
    "rope": (F.rope, F.rope_slow, [(2, 3, 4, 8), (4, 4), (4, 4)], {}),
    "rope_i": (F.rope_i, F.rope_i_slow, [(2, 3, 4, 8), (2, 4, 4), (2, 4, 4)], {}),
    "rope_thd": (F.rope_thd, F.rope_thd_slow, [(2, 4, 3, 8), (4, 4), (4, 4)], {}),
    "sdpa": (F.scaled_dot_product_attention, F.sdpa_slow, [(2, 4, 5, 8), (2, 2, 7, 8), (2, 2, 7, 8)], {}),
    "sdpa_causal": (F.scaled_dot_product_attention, F.sdpa_slow, [(1, 2, 6, 4)] * 3, dict(is_causal=True)),
    "sdpa_bottom_right": (F.scaled_dot_product_attention, F.sdpa_slow, [(1, 2, 3, 4), (1, 1, 6, 4), (1, 1, 6, 4)],
                          dict(is_causal="bottom_right")),
}


@pytest.mark.parametrize("name", sorted(FUSED))
def test_fused_matches_slow_forward_and_grads(name, device, rng):
    fused, slow, shapes, kwargs = FUSED[name]
    arrays = [rng.uniform(-2, 2, s).astype(np.float32) for s in shapes]
    results = []
    for fn in (fused, slow):
        ts = [tl.tensor(a, device=device, requires_grad=True) for a in arrays]
        out = fn(*ts, **kwargs)
        if not results:
            w = tl.tensor(rng.standard_normal(out.shape).astype(np.float32), device=device)
        (out * w).sum().backward()
        results.append([out.numpy()] + [t.grad.numpy() for t in ts])
    for i, (f, s) in enumerate(zip(*results)):
        np.testing.assert_allclose(f, s, rtol=1e-4, atol=1e-5, err_msg="forward" if i == 0 else f"grad {i - 1}")


@pytest.mark.parametrize("dtype", [tl.float16, tl.bfloat16])
@pytest.mark.parametrize("name", ["softmax_dim1", "layer_norm", "rms_norm", "rope_i", "sdpa"])
def test_fused_half_precision_close_to_slow_float32(name, device, rng, dtype):
    fused, slow, shapes, kwargs = FUSED[name]
    arrays = [rng.uniform(-2, 2, s) for s in shapes]
    half = fused(*[tl.tensor(a, dtype=dtype, device=device) for a in arrays], **kwargs)
    # the reference sees the same rounded inputs, computed in float64
    ref = slow(*[tl.tensor(a.astype(dtype.np), dtype=dtype, device=device).double() for a in arrays], **kwargs)
    assert half.dtype == dtype
    rtol, atol = tolerance(dtype, terms=8)
    np.testing.assert_allclose(half.numpy().astype(np.float64), ref.numpy(), rtol=rtol, atol=atol)


# ---- PyTorch semantics (when torch is installed) --------------------------------------

def _torch():
    return pytest.importorskip("torch", reason="torch is not installed")


@pytest.mark.parametrize("kwargs", [dict(), dict(reduction="sum", ignore_index=2), dict(label_smoothing=0.15),
                                    dict(weight=True), dict(weight=True, label_smoothing=0.1, ignore_index=0),
                                    dict(reduction="none")])
def test_cross_entropy_matches_torch(device, rng, kwargs):
    torch = _torch()
    logits = rng.standard_normal((4, 5, 3))
    target = rng.integers(0, 5, (4, 3))
    kw = dict(kwargs)
    weight = rng.uniform(0.5, 2, 5) if kw.pop("weight", False) else None
    ref = torch.nn.functional.cross_entropy(torch.tensor(logits), torch.tensor(target), **kw,
                                            weight=None if weight is None else torch.tensor(weight))
    got = F.cross_entropy(tl.tensor(logits, device=device), tl.tensor(target, device=device), **kw,
                          weight=None if weight is None else tl.tensor(weight, device=device))
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-10, atol=1e-12)
    probs = np_softmax(rng.standard_normal((4, 5, 3)), 1)
    ref = torch.nn.functional.cross_entropy(torch.tensor(logits), torch.tensor(probs), label_smoothing=0.1)
    got = F.cross_entropy(tl.tensor(logits, device=device), tl.tensor(probs, device=device), label_smoothing=0.1)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-10)


@pytest.mark.parametrize("mask_kind, is_causal", [(None, False), (None, True), ("bool", False), ("float", False)])
def test_sdpa_matches_torch(device, rng, mask_kind, is_causal):
    torch = _torch()  # (torch rejects attn_mask together with is_causal, so those are not compared)
    q, k, v = rng.standard_normal((2, 4, 5, 8)), rng.standard_normal((2, 2, 5, 8)), rng.standard_normal((2, 2, 5, 8))
    m = None if mask_kind is None else (rng.random((5, 5)) < 0.7) | np.eye(5, dtype=bool)
    if mask_kind == "float":
        m = rng.standard_normal((1, 4, 5, 5))
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(torch.tensor(t) for t in (q, k, v)), attn_mask=None if m is None else torch.tensor(m), is_causal=is_causal,
        enable_gqa=True)
    got = F.scaled_dot_product_attention(*(tl.tensor(t, device=device) for t in (q, k, v)),
                                         attn_mask=None if m is None else tl.tensor(m, device=device),
                                         is_causal=is_causal)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("dtype", [tl.float16, tl.bfloat16])
def test_cross_entropy_half_precision_averages_in_float32(device, rng, dtype):
    logits, la = make_tensor(rng, (600, 7), dtype, device, -3, 3)
    target = rng.integers(0, 7, 600)
    target[:50] = -100  # 550 counted targets: not representable in bf16
    loss = F.cross_entropy(logits, tl.tensor(target, device=device))
    lsm = np.log(np_softmax(as_f64(la), 1))
    valid = target != -100
    assert loss.dtype == dtype
    assert_close(loss, -lsm[np.arange(600)[valid], target[valid]].mean(), dtype, terms=4)
