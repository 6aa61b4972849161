"""The `cpu` backend: numpy, and the reference every other backend is tested against.
(Registered as 'cpu' by tensorlite/__init__.py, which imports this module lazily.)

A `CpuStorage` is a flat 1-D numpy array (`data`) of one tensorlite dtype. Every op
reads its operands through their Layouts as read-only `as_strided` views (strides
converted from elements to bytes, the layout's offset in elements) and returns a
fresh, C-contiguous flat array; only `copy_strided_src`, `copy2d` and `const_set`
write in place.

Numerics (the rules the GPU backend is compared against):
- float16/bfloat16 are computed in float32 and rounded back once (round to nearest
  even), matching "accumulate f16/bf16 in f32"; float32 and float64 compute in their own
  type, except that matmul/conv/reductions of integers accumulate in int64 (erf of float32 is
  a float32 polynomial within 2 ulp of the rounded float64 erf; sdpa_backward runs in f32 too).
- integer arithmetic wraps around like numpy (and like C on the GPU).
- float -> integer casts truncate toward zero; float -> uint8/uint32 goes through int64
  first, so negative values wrap modulo 2**bits (deterministic, unlike a direct C cast).
- sdpa returns 0 for a query row whose keys are all masked out, as torch does.
"""
from __future__ import annotations

import ctypes
import math
import os
import sys

import numpy as np
from numpy.lib.stride_tricks import as_strided, sliding_window_view

from tensorlite import dtype as dtypes, fused_unary, op_table, threads
from tensorlite.backend import (BackendDevice, BackendStorage, ConvParams, PoolParams, adam_bias_corrections,
                                adam_state_dtype, batch_of_one, check_adam_scalar, check_cross_entropy, sdpa_layout,
                                sdpa_mode)
from tensorlite.dtype import cast_array
from tensorlite.errors import (ArgumentError, DeviceError, DTypeError, IndexOutOfRange, OutOfMemoryError, ShapeError,
                               storage_error, unsupported_dtype)
from tensorlite.layout import Layout


def _keep_freed_arrays():
    """Have glibc reuse freed arrays of up to 32 MiB (M_MMAP_THRESHOLD) and give free memory back to
    the OS only past 256 MiB (M_TRIM_THRESHOLD). By default an op's result of a few MB is often a
    fresh mmap whose pages fault in on first touch, which costs more than an elementwise op itself
    (the first-run benchmarks' steps: 10-50% faster). Skipped off glibc and where the user set these."""
    if not sys.platform.startswith("linux") or any(k in os.environ for k in ("MALLOC_MMAP_THRESHOLD_",
                                                                             "MALLOC_TRIM_THRESHOLD_")):
        return
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - glibc only (musl's mallopt does nothing)
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD (32 MiB is glibc's maximum)
        libc.mallopt(-1, 256 << 20)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


_keep_freed_arrays()
_F32 = np.dtype(np.float32)
_HALF_TYPES = (dtypes.float16, dtypes.bfloat16)

try:  # numpy >= 2 keeps its floating-point error settings in a context variable (np.errstate sets it)
    from numpy._core.umath import _extobj_contextvar as _ERRSTATE, _make_extobj  # noqa: PLC2701 - see quietly
    _IGNORE_ALL = _make_extobj(all="ignore")
except (ImportError, TypeError):  # numpy 1.x (or a numpy that changed them): the same through np.seterr
    class _SetErr:
        def set(self, value):
            return np.seterr(all="ignore")

        def reset(self, token):
            np.seterr(**token)
    _ERRSTATE, _IGNORE_ALL = _SetErr(), None
_SET_ERRSTATE, _RESET_ERRSTATE = _ERRSTATE.set, _ERRSTATE.reset  # bound once: quietly runs per op


def _mul_add(x, mul, add):
    out = np.multiply(x, mul)
    out += add
    return out


def quietly(fn, *args):
    """fn(*args) with numpy's floating-point warnings off (overflow to inf, 0/0 to nan: the values
    are the answer, as on the GPU). Setting numpy's error state directly costs about a tenth of
    `with np.errstate(all="ignore")` (0.7 us), which was a tiny op's largest share."""
    token = _SET_ERRSTATE(_IGNORE_ALL)
    try:
        return fn(*args)
    finally:
        _RESET_ERRSTATE(token)


# =====================================================================================
# Helpers: views through layouts, compute dtypes, error messages
# =====================================================================================

def _strided(data: np.ndarray, layout: Layout, writeable: bool = False) -> np.ndarray:
    """A numpy view of `data` (flat) addressed by `layout`."""
    n = layout.numel()
    if n == 0:
        return np.empty(layout.shape, data.dtype)
    if layout.is_contiguous():  # most operands: a slice and a reshape, several times cheaper than as_strided
        end = layout.offset + n
        if end > data.size:
            raise IndexOutOfRange(f"layout {layout} addresses past the end of a storage of {data.size} elements")
        view = data[layout.offset:end].reshape(layout.shape)
        if not writeable:
            view.flags.writeable = False
        return view
    if layout.extent() > data.size:
        raise IndexOutOfRange(f"layout {layout} addresses past the end of a storage of "
                              f"{data.size} elements")
    base = data[layout.offset:]
    strides = tuple(s * data.itemsize for s in layout.strides)
    return as_strided(base, layout.shape, strides, writeable=writeable)


def _accumulate_dtype(dt) -> np.dtype:
    """Type for sums of products (matmul, conv): halves in f32, integers in int64."""
    return dt.np if dt in (dtypes.float32, dtypes.float64) else (
        _F32 if dt in _HALF_TYPES else np.dtype(np.int64))


# ---- elementwise tables ------------------------------------------------------------

def _sigmoid(x):
    e = np.exp(-np.abs(x))  # never overflows
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(x.dtype)


_MATH_ERF = np.frompyfunc(math.erf, 1, 1)


def erf_fallback(x) -> np.ndarray:
    """float64 erf of an array of any shape by math.erf per element (~100 ns each): what
    the cpu backend uses when scipy is not installed."""
    # frompyfunc gives an object array, or a bare Python float for 0-d input
    return np.asarray(_MATH_ERF(x), dtype=np.float64)


_erf_f64 = None


# erf on float32 in float32 arithmetic (within 2 ulp of the rounded float64 erf; 3x faster than
# scipy's float64 erf): erf(x) = x * P(x^2) for |x| < 1, 1 - exp(Q(|x|)) for 1 <= |x| <= 4 (erf
# rounds to 1 past that). Least-squares fits to erf(x)/x (relative) and log(erfc(x)) (erfc-weighted).
_ERF_P = tuple(np.float32(c) for c in (7.843558e-05, -0.00080038223, 0.005187146, -0.026852868, 0.11283551,
                                        -0.3761262, 1.1283791))
_ERF_Q = tuple(-np.float32(c) for c in (2.1832097e-05, -0.00044308635, 0.0042134183, -0.025232673, 0.10845819,
                                         0.63318205, 1.1295981, -0.00019236625))


def _horner(coefs, t, out):
    np.multiply(t, coefs[0], out=out)
    out += coefs[1]
    for c in coefs[2:]:
        out *= t
        out += c
    return out


def erf_f32(x: np.ndarray) -> np.ndarray:
    """erf of a C-contiguous float32 array, computed in float32 (NaN stays NaN, erf(-0) = -0). The
    polynomial of |x| < 1 runs over every element, the exp of 1 <= |x| only over those (a gather and
    a scatter): GELU's inputs mostly lie below 1, so this is half the passes of both over all."""
    flat = x.reshape(-1)
    a = np.abs(flat)
    t = a * a
    with np.errstate(over="ignore", invalid="ignore"):  # |x| >= 1 overflows here; replaced below
        y = _horner(_ERF_P, t, np.empty_like(t))
        y *= a  # NaN propagates
    big = np.flatnonzero(a >= 1)
    if big.size:
        u = np.minimum(a[big], np.float32(4))
        y[big] = np.subtract(np.float32(1), np.exp(_horner(_ERF_Q, u, np.empty_like(u))))
    bits = y.view(np.int32)
    bits |= np.bitwise_and(flat.view(np.int32), np.int32(-2 ** 31), out=a.view(np.int32))  # erf's sign: x's
    return y.reshape(x.shape)


def _erf(x):
    """erf of x's (compute) dtype: erf_f32 on float32; float64 by scipy's vectorised erf when
    scipy is installed (optional), else erf_fallback."""
    global _erf_f64
    if x.dtype == _F32:
        return erf_f32(np.asarray(x, order="C"))  # C order for the sign-bit view; 0-d stays 0-d
    if _erf_f64 is None:
        try:
            from scipy.special import erf as _erf_f64
        except ImportError:
            _erf_f64 = erf_fallback
    return _erf_f64(x.astype(np.float64)).astype(x.dtype)


# The elementwise ops come from the op table (tensorlite/op_table.py): numpy's function where
# the row names one; below, the ops numpy lacks, and the integer/bool forms where numpy's
# float form does not fit (numpy's floor of an integer is a float, its square of a bool an int).
_pool = None  # (ThreadPoolExecutor, its size): remade when tl.set_num_threads asks for more threads


def _drop_pool():  # a forked child has the parent's pool object but none of its threads
    global _pool
    _pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drop_pool)


def _in_parallel(tasks) -> None:
    """Run the callables `tasks` on tl.get_num_threads() threads: numpy releases the GIL inside a
    ufunc's loop (and a BLAS call), so formulas over separate blocks run side by side. numpy's BLAS
    runs on one thread meanwhile (each task's products on all would oversubscribe the cores). Each
    worker keeps the caller's numpy error settings (they are per thread); an exception in a task
    is raised here."""
    global _pool
    n = threads.get_num_threads()
    if len(tasks) < 2 or n < 2:
        for task in tasks:
            task()
        return
    if _pool is None or _pool[1] < n:
        from concurrent.futures import ThreadPoolExecutor
        if _pool is not None:
            _pool[0].shutdown(wait=False)
        _pool = (ThreadPoolExecutor(n, thread_name_prefix="tensorlite-cpu"), n)
    err = np.geterr()

    def run(task):
        with np.errstate(**err):
            task()
    with threads.blas_limited(1):
        for f in [_pool[0].submit(run, t) for t in tasks]:
            f.result()


def _blockwise(fn, block=1 << 16):
    """fn (an elementwise formula of many numpy passes) over blocks of `block` elements that stay
    in cache (15-25% faster than whole arrays of a few MB). On several cores each takes a share of
    the blocks, 4x larger: the threads hand the GIL to each other between numpy calls, and longer
    calls make that rarer (a formula at 1M elements: 25-30% faster on 2 cores, 64k blocks: none)."""
    def run(x):
        n = threads.get_num_threads()
        step = block if n < 2 else 4 * block
        if x.size <= step:  # 1-d: a ufunc of a 0-d array returns a scalar, which `out=` refuses
            return fn(x.reshape(-1)).reshape(x.shape)
        flat = np.ascontiguousarray(x).reshape(-1)
        out = np.empty_like(flat)

        def blocks(lo, hi):  # one core's blocks: [lo, hi), a multiple of `step` apart
            def task():
                for i in range(lo, hi, step):
                    out[i:i + step] = fn(flat[i:i + step])
            return task
        n_blocks = -(-flat.size // step)
        bounds = [0] + [min(flat.size, -(-n_blocks * k // n) * step) for k in range(1, n + 1)]
        _in_parallel([blocks(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo])
        return out.reshape(x.shape)
    return run


def _fused(formula):
    """A fused unary's numpy formula (tensorlite/fused_unary.py: formula(x, ops)) over blocks, given
    this backend's float ops for what numpy lacks (erf, sigmoid)."""
    return _blockwise(lambda x: formula(x, UNARY_FLOAT))  # UNARY_FLOAT: bound below, read at the call


_ZEROS = {}  # numpy dtype -> a 0-d zero of it, relu's other operand (a new one per call: 40% of a tiny relu)


def _relu(x):
    zero = _ZEROS.get(x.dtype)
    if zero is None:
        zero = _ZEROS[x.dtype] = np.zeros((), x.dtype)
    return np.maximum(x, zero)


_UNARY_NUMPY_LACKS = {
    "relu": _relu,
    "sigmoid": _sigmoid, "erf": _blockwise(_erf),
    **{u.name: _fused(u.cpu_forward) for u in fused_unary.UNARIES},
}
_IDENTITY = lambda x: x  # noqa: E731 - floor/ceil/round of integers
_UNARY_NONFLOAT = {"sqr": lambda x: x * x, "floor": _IDENTITY, "ceil": _IDENTITY, "round": _IDENTITY,
                   "trunc": _IDENTITY, "sign": lambda x: np.where(x > 0, 1, np.where(x < 0, -1, 0)).astype(x.dtype)}


def _unary_table(is_float: bool, is_bool: bool) -> dict:
    """op name -> numpy implementation, for the ops the op table defines on that dtype class."""
    table = {}
    for op in op_table.UNARY:
        if op_table.defined_for(op, is_float, is_bool):
            own = None if is_float else _UNARY_NONFLOAT.get(op.name)
            table[op.name] = own or op.numpy or _UNARY_NUMPY_LACKS[op.name]
    return table


UNARY_FLOAT, UNARY_INT, UNARY_BOOL = _unary_table(True, False), _unary_table(False, False), _unary_table(False, True)


# d op / dx for unary_backward (backend.UNARY_BACKWARD_OPS), on the compute dtype
UNARY_DERIVATIVE = {u.name: _fused(u.cpu_derivative) for u in fused_unary.UNARIES}
CMP = {op.name: op.numpy for op in op_table.COMPARE}
# the ufuncs' reduce itself (np.sum / np.max add a Python wrapper's 0.5 us to a tiny reduction)
REDUCE = {"sum": np.add.reduce, "min": np.minimum.reduce, "max": np.maximum.reduce, "argmin": np.argmin,
          "argmax": np.argmax}


# =====================================================================================
# Convolution and pooling geometry (NCHW; 1-D ops are 2-D ops with height 1)
# =====================================================================================

def _windows(x: np.ndarray, k, stride, dilation) -> np.ndarray:
    """(b, c, H, W) padded input -> (b, c, oh, ow, kh, kw) strided windows (no copy)."""
    span = tuple(d * (kk - 1) + 1 for kk, d in zip(k, dilation))
    w = sliding_window_view(x, span, axis=(2, 3))
    return w[:, :, ::stride[0], ::stride[1], ::dilation[0], ::dilation[1]]


def _as_slice(idx: np.ndarray):
    """A 1-D index array as the equal slice where its ids step evenly upward (a narrow's gradient)."""
    if idx.ndim == 1 and idx.size > 1:
        step = int(idx[1] - idx[0])
        if step > 0 and (np.diff(idx) == step).all():
            return slice(int(idx[0]), int(idx[-1]) + 1, step)
    return idx


def _window_reduce(ufunc, x: np.ndarray, k, stride, dilation) -> np.ndarray:
    """ufunc (np.add, np.maximum) over each window of a padded (b, c, H, W), one strided slice per
    kernel offset in scan order (reducing the 6-D window view is 10x slower)."""
    win = _windows(x, k, stride, dilation)
    out = np.array(win[..., 0, 0])
    for i in range(k[0]):
        for j in range(k[1]):
            if i or j:
                ufunc(out, win[..., i, j], out=out)
    return out


def _window_max_by_rows(x: np.ndarray, k, stride, dilation, out_hw) -> np.ndarray:
    """The window max of a padded (b, c, H, W) array of a total order without ties in value
    (integer keys, where the order of the comparisons cannot matter): over each row's kw
    offsets first (whole rows: long strided loops), then over the kh rows of each window."""
    (sh, sw), (dh, dw), (oh, ow) = stride, dilation, out_hw
    rows = None
    for j in range(k[1]):
        v = x[:, :, :, j * dw:j * dw + (ow - 1) * sw + 1:sw]
        rows = np.array(v) if rows is None else np.maximum(rows, v, out=rows)
    out = None
    for i in range(k[0]):
        v = rows[:, :, i * dh:i * dh + (oh - 1) * sh + 1:sh]
        out = np.array(v) if out is None else np.maximum(out, v, out=out)
    return out


def _max_pool_winner_keys(x: np.ndarray, p: PoolParams, out_hw) -> np.ndarray:
    """Each max-pool window's winner (the element PyTorch's rule picks, see max_pool2d_backward's
    contract) as its position iy * w + ix in its (h, w) plane, for a float32 (b, c, h, w) x with
    h * w < 2**31.

    One int64 key per element makes the rule a plain window max: the high 32 bits order the
    values (float32 bits as two's complement integers, -0 = +0; NaN above +inf), the low 32 bits
    break ties by the element's row-major position in its plane, which within any window is the
    scan order: reversed (the first maximum wins) for numbers, as is for NaN (the last NaN wins).
    Padding is the lowest key, below a real -inf. Contiguous integer passes and a window max:
    ~10x faster than tracking the running max and its offset through the strided windows."""
    h, w = x.shape[2:]
    bits = np.ascontiguousarray(x).view(np.int32)
    if bits.size and bits.min() < 0:  # sign bits (skipped after a relu): sign-magnitude -> two's complement
        sign = bits >> 31
        bits = bits & np.int32(0x7FFFFFFF)
        bits ^= sign
        bits -= sign  # -0 and +0 both become 0
    pos = np.arange(h * w, dtype=np.int64).reshape(h, w)
    has_nan = bool(np.isnan(x.max())) if x.size else False  # one fast reduction; NaN is rare
    if has_nan:
        nan = np.isnan(x)
        bits = np.where(nan, np.iinfo(np.int32).max, bits)
    keys = bits.astype(np.int64)
    keys <<= 32
    tie = 0xFFFFFFFF - pos  # a larger key for an earlier position
    if has_nan:
        keys |= np.where(nan, pos, tie)
    else:
        keys |= tie
    best = _window_max_by_rows(_pad_hw(keys, p.padding, np.iinfo(np.int64).min), p.kernel, p.stride, p.dilation,
                               out_hw)
    nan_won = (best >> 32) == np.iinfo(np.int32).max if has_nan else None
    low = np.bitwise_and(best, 0xFFFFFFFF, out=best)
    return np.subtract(0xFFFFFFFF, low, out=low) if nan_won is None else np.where(nan_won, low, 0xFFFFFFFF - low)


def _max_pool_winner_scan(x: np.ndarray, p: PoolParams, out_hw) -> np.ndarray:
    """_max_pool_winner_keys for any float dtype (float64 values do not fit a key beside their
    position): PyTorch's scan itself, one kernel offset at a time over the strided windows. A
    value replaces the running max (-inf at the first unpadded element) when greater or NaN."""
    b, c, h, w = x.shape
    k, stride, pad, dil = p.kernel, p.stride, p.padding, p.dilation
    win = _windows(_pad_hw(x, pad, -np.inf), k, stride, dil)  # (b, c, oh, ow, kh, kw); padding never wins
    starts = [np.arange(n) * s - pp for n, s, pp in zip(out_hw, stride, pad)]  # windows' first rows / cols
    # each window's first unpadded element: ceil(-start / d) kernel steps past a start in the padding
    firsts = [np.maximum(0, -(st // d)) for st, d in zip(starts, dil)]
    best = np.full((b, c) + tuple(out_hw), -np.inf, x.dtype)
    arg = np.empty(best.shape, np.int64)
    arg[...] = firsts[0][:, None] * k[1] + firsts[1][None, :]
    take, nan = np.empty(best.shape, bool), np.empty(best.shape, bool)
    for off in range(k[0] * k[1]):
        v = win[..., off // k[1], off % k[1]]
        np.greater(v, best, out=take)
        take |= np.not_equal(v, v, out=nan)  # NaN: the only value unequal to itself
        np.copyto(best, v, where=take)
        np.copyto(arg, off, where=take)
    rows = starts[0][:, None] + (arg // k[1]) * dil[0]
    cols = starts[1][None, :] + (arg % k[1]) * dil[1]
    return rows * w + cols


def _windows_holding_input(n, out, k, stride, pad, dilation) -> np.ndarray:
    """Along one axis of n input elements: whether each of the `out` pooling windows covers at
    least one of them (not padding alone)."""
    pos = (np.arange(out) * stride - pad)[:, None] + np.arange(k) * dilation
    return ((pos >= 0) & (pos < n)).any(axis=1)


def _row_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """sum(a * b) over the last dim, kept as a dim of 1: einsum's dot, without the product array
    (2x faster than (a * b).sum(-1) on rows of a few hundred)."""
    return np.einsum("...i,...i->...", a, b)[..., None]


def _normalized(x: np.ndarray, eps: float, center: bool):
    """(x_hat, rstd) of layer_norm (center) or rms_norm over the last dim: x_hat = (x - mean) *
    rstd a fresh array, rstd = 1 / sqrt(mean((x - mean)^2) + eps) of shape (..., 1)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        xc = x - x.mean(axis=-1, keepdims=True) if center else np.array(x)
        rstd = 1.0 / np.sqrt(_row_dot(xc, xc) / x.shape[-1] + eps)
        xc *= rstd
    return xc, rstd


def _pad_hw(x: np.ndarray, padding, value=0) -> np.ndarray:
    ph, pw = padding
    if not ph and not pw:
        return x
    out = np.full(x.shape[:2] + (x.shape[2] + 2 * ph, x.shape[3] + 2 * pw), value, x.dtype)
    out[:, :, ph:ph + x.shape[2], pw:pw + x.shape[3]] = x
    return out


def _conv2d(x: np.ndarray, w: np.ndarray, p: ConvParams) -> np.ndarray:
    """x (b, c_in, h, w), w (c_out, c_in/g, kh, kw) -> (b, c_out, oh, ow): im2col (one copy) and
    one GEMM per group. The columns' inner dim is the larger of the output's pixels (oh, ow) and
    the kernel's (kh, kw), so the copy runs along rows (the weight gradient is a conv whose
    kernel is larger than its output)."""
    b, c_in = x.shape[:2]
    c_out, g = w.shape[0], p.groups
    kh, kw = w.shape[2:]
    win = _windows(_pad_hw(x, p.padding), (kh, kw), p.stride, p.dilation)  # (b, c_in, oh, ow, kh, kw)
    oh, ow = win.shape[2:4]
    wg = w.reshape(g, c_out // g, -1)
    if kh * kw <= oh * ow:  # (c_out/g, K) @ (K, b*oh*ow) per group
        cols = win.transpose(1, 4, 5, 0, 2, 3).reshape(g, -1, b * oh * ow)
        return np.matmul(wg, cols).reshape(c_out, b, oh, ow).transpose(1, 0, 2, 3)
    cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(b * oh * ow, g, -1).transpose(1, 0, 2)  # (b*oh*ow, K) per group
    out = np.matmul(cols, wg.transpose(0, 2, 1))  # (g, b*oh*ow, c_out/g)
    return out.transpose(1, 0, 2).reshape(b, oh, ow, c_out).transpose(0, 3, 1, 2)


def _conv_transpose2d(x: np.ndarray, w: np.ndarray, p: ConvParams) -> np.ndarray:
    """x (b, c_in, h, w), w (c_in, c_out/g, kh, kw): each input pixel scatters
    x * kernel into the output (one GEMM per group, then col2im), then `padding` is cropped
    from both sides."""
    b, c_in, h, wd = x.shape
    g = p.groups
    kh, kw = w.shape[2:]
    c_out = w.shape[1] * g
    oh, ow = p.out_size((h, wd), (kh, kw), transposed=True)
    (sh, sw), (dh, dw), (ph, pw) = p.stride, p.dilation, p.padding
    wt = w.reshape(g, c_in // g, -1).transpose(0, 2, 1)  # (g, c_out/g * kh * kw, c_in/g)
    # uncropped canvas; output_padding may reach past it, so leave room for that too
    full_h, full_w = max((h - 1) * sh + dh * (kh - 1) + 1, ph + oh), max((wd - 1) * sw + dw * (kw - 1) + 1, pw + ow)
    if sh == sw == 1 and np.isfinite(w).all():
        # The input placed on the canvas's own (b, full_h, full_w) grid (zeros around it): kernel offset
        # (i, j) then moves every column by one flat shift, so col2im is kh * kw adds of whole
        # contiguous rows instead of strided 4-d windows (the GEMM's extra zero columns cost less).
        # Not with an inf/NaN weight: the grid's zeros times it would be NaN where no pixel lands.
        n = b * full_h * full_w
        grid = np.zeros((c_in, b, full_h, full_w), x.dtype)
        grid[:, :, :h, :wd] = x.transpose(1, 0, 2, 3)
        cols = np.matmul(wt, grid.reshape(g, c_in // g, n)).reshape(c_out, kh, kw, n)
        canvas = np.zeros((c_out, n + dh * (kh - 1) * full_w + dw * (kw - 1)), cols.dtype)
        for i in range(kh):
            for j in range(kw):
                shift = i * dh * full_w + j * dw  # no wrap: a real pixel's target stays in its row and image
                canvas[:, shift:shift + n] += cols[:, i, j]
        full = canvas[:, :n].reshape(c_out, b, full_h, full_w)
    else:
        xt = x.reshape(b, g, c_in // g, h * wd).transpose(1, 2, 0, 3).reshape(g, c_in // g, b * h * wd)
        cols = np.matmul(wt, xt).reshape(c_out, kh, kw, b, h, wd)
        full = np.zeros((c_out, b, full_h, full_w), cols.dtype)
        for i in range(kh):
            for j in range(kw):
                full[:, :, i * dh:i * dh + (h - 1) * sh + 1:sh, j * dw:j * dw + (wd - 1) * sw + 1:sw] += cols[:, i, j]
    return full[:, :, ph:ph + oh, pw:pw + ow].transpose(1, 0, 2, 3)


# =====================================================================================
# Storage
# =====================================================================================

class CpuStorage(BackendStorage):
    __slots__ = ("data", "dtype", "device")

    def __init__(self, data: np.ndarray, dtype, device: "CpuDevice"):
        self.data, self.dtype, self.device = data, dtype, device

    def __repr__(self):
        return f"CpuStorage({self.data.size} x {self.dtype.name})"

    def addr(self, offset):
        return self.data.ctypes.data + offset * self.dtype.itemsize

    # ---- plumbing ---------------------------------------------------------------------
    def _read(self, layout: Layout, compute: bool = False) -> np.ndarray:
        """Read-only view through layout; `compute` upcasts f16/bf16 to f32 (a copy)."""
        v = _strided(self.data, layout)
        try:
            return v.astype(_F32) if compute and self.dtype in _HALF_TYPES else v
        except MemoryError:
            raise self.device._oom(layout.shape, dtypes.float32) from None

    def _whole(self, layout: Layout):
        """self.data itself where `layout` reads all of it in order (most operands: an op's output)
        and computes in its own dtype, else None. A ufunc's operand needs no view then, and a
        result of such operands is already the flat array a storage holds: no reshape either way."""
        data = self.data
        if layout.offset == 0 and data.size == math.prod(layout.shape) and layout.is_contiguous() and \
                self.dtype not in _HALF_TYPES:
            return data
        return None

    def _operand(self, layout: Layout, flat: bool = False) -> np.ndarray:
        """The operand of a function that never writes it (a ufunc, a reduction, the op table's
        rows: tests/test_cpu_fast_paths.py): self.data itself where _whole gives it, flat or shaped
        as the layout (a plain view: the read-only flag costs a tiny op 0.3 us), else _read's view."""
        x = self._whole(layout)
        if x is None:
            return self._read(layout, compute=True)
        return x if flat else x.reshape(layout.shape)

    def _new(self, arr: np.ndarray, dtype=None) -> "CpuStorage":
        """Wrap a result: cast to dtype (default self's), C-contiguous, flattened."""
        dtype = self.dtype if dtype is None else dtype
        if type(arr) is np.ndarray and arr.ndim == 1 and arr.dtype == dtype.np and arr.flags.c_contiguous:
            return CpuStorage(arr, dtype, self.device)  # a ufunc's result over _whole operands
        try:
            return CpuStorage(np.ascontiguousarray(cast_array(np.asarray(arr), dtype)).reshape(-1),
                              dtype, self.device)
        except MemoryError:
            raise self.device._oom(np.shape(arr), dtype) from None

    def _new_in(self, arr: np.ndarray, layout: Layout) -> "CpuStorage":
        """Wrap a result of layout.shape stored as the dense (non-contiguous) `layout` says."""
        order = sorted(range(arr.ndim), key=lambda i: -layout.strides[i])  # outermost first
        return self._new(np.transpose(arr, order))

    def _ids(self, op, ids: "CpuStorage", ids_layout: Layout, size: int, layout: Layout) -> np.ndarray:
        """Index operand as int64, bounds-checked against `size`."""
        if ids.dtype not in (dtypes.int64, dtypes.uint32, dtypes.uint8):
            raise storage_error(DTypeError, op, "ids must be int64, uint32 or uint8",
                                self=(self, layout), ids=(ids, ids_layout))
        idx = ids._read(ids_layout).astype(np.int64)
        bad = (idx < 0) | (idx >= size)
        if bad.any():
            raise storage_error(IndexOutOfRange, op, f"index {int(idx[bad].flat[0])} is out of range for a dim "
                                f"of size {size}", self=(self, layout), ids=(ids, ids_layout))
        return idx

    def _require_float(self, op, layout):
        if not self.dtype.is_floating_point:
            raise unsupported_dtype(op, self=(self, layout))

    # ---- elementwise ------------------------------------------------------------------
    def affine(self, layout, mul, add):
        x = self._operand(layout, flat=True)
        if not self.dtype.is_floating_point:
            # integral coefficients stay exact (wrapping) in int64; others go through f64
            exact = float(mul).is_integer() and float(add).is_integer()
            x = x.astype(np.int64 if exact else np.float64)
            mul, add = (int(mul), int(add)) if exact else (mul, add)
        # one pass for a scale or a shift alone (x * s + 0 would also turn x * s = -0 into +0)
        if add == 0:
            return self._new(quietly(np.multiply, x, mul))
        return self._new(quietly(np.add, x, add) if mul == 1 else quietly(_mul_add, x, mul, add))

    def powf(self, layout, e):
        self._require_float("powf", layout)
        with np.errstate(all="ignore"):
            return self._new(np.power(self._read(layout, compute=True), e))

    def elu(self, layout, alpha):
        self._require_float("elu", layout)
        x = self._read(layout, compute=True)
        with np.errstate(all="ignore"):
            return self._new(np.where(x > 0, x, alpha * np.expm1(x)))

    def unary_impl(self, op, layout):
        dt = self.dtype
        table = UNARY_FLOAT if dt.is_floating_point else UNARY_BOOL if dt is dtypes.bool_ else UNARY_INT
        if op not in table:
            if op not in op_table.UNARY_BY_NAME:
                raise ArgumentError(f"unary_impl: unknown op {op!r}; expected one of {sorted(op_table.UNARY_BY_NAME)}")
            raise unsupported_dtype(op, self=(self, layout))
        out = quietly(table[op], self._operand(layout, flat=True))
        return CpuStorage(out, dt, self.device) if out.dtype is dt.np and out.ndim == 1 else self._new(out)

    def binary_impl(self, op, rhs, lhs_layout, rhs_layout):
        row = op_table.BINARY_BY_NAME.get(op)
        if row is None:
            raise ArgumentError(f"binary_impl: unknown op {op!r}; expected one of {sorted(op_table.BINARY_BY_NAME)}")
        if not op_table.defined_for(row, self.dtype.is_floating_point, self.dtype is dtypes.bool_):
            raise unsupported_dtype(op, lhs=(self, lhs_layout), rhs=(rhs, rhs_layout))
        a, b = self._whole(lhs_layout), rhs._whole(rhs_layout)  # flat, as _operand's; both, or both read
        if a is None or b is None or lhs_layout.shape != rhs_layout.shape:
            a, b = self._read(lhs_layout, compute=True), rhs._read(rhs_layout, compute=True)
        out = quietly(row.numpy, a, b)
        return CpuStorage(out, self.dtype, self.device) if out.dtype == self.dtype.np and out.ndim == 1 \
            else self._new(out)

    def cmp(self, op, rhs, lhs_layout, rhs_layout):
        a, b = self._read(lhs_layout, compute=True), rhs._read(rhs_layout, compute=True)
        return self._new(CMP[op](a, b), dtypes.bool_)

    def where_cond(self, layout, t, t_layout, f, f_layout):
        cond = self._read(layout)
        cond = cond if cond.dtype == np.bool_ else cond != 0
        return t._new(np.where(cond, t._read(t_layout), f._read(f_layout)))

    def to_dtype(self, layout, dtype):
        return self._new(self._read(layout), dtypes.get(dtype))

    def reduce_op(self, op, layout, dims):
        dims = tuple(dims)
        if op != "sum" and any(layout.shape[d] == 0 for d in dims):
            raise storage_error(ShapeError, op, f"cannot reduce over an empty dim (dims={dims})",
                                self=(self, layout))
        x = self._operand(layout)
        if op in ("argmin", "argmax"):
            if len(dims) != 1:
                raise storage_error(ShapeError, op, f"takes exactly one dim, got {dims}", self=(self, layout))
            return self._new(REDUCE[op](x, axis=dims[0], keepdims=True), dtypes.int64)
        # integer sums keep their dtype (wrapping); np.sum would otherwise widen them
        kwargs = {"dtype": x.dtype} if op == "sum" else {}
        return self._new(REDUCE[op](x, axis=dims, keepdims=True, **kwargs).reshape(-1))  # flat: _new's fast path

    # ---- sorting, scans, searches -----------------------------------------------------
    def sort(self, layout, descending):
        x = self._read(layout, compute=True)
        if descending:  # stable descending: sort the reversed row ascending, reverse back (NaN first)
            idx = (x.shape[-1] - 1 - np.argsort(x[..., ::-1], axis=-1, kind="stable"))[..., ::-1]
        else:
            idx = np.argsort(x, axis=-1, kind="stable")  # numpy sorts NaN last, as PyTorch
        return self._new(np.take_along_axis(self._read(layout), idx, -1)), self._new(idx, dtypes.int64)

    def cumulative(self, op, layout, reverse=False):
        x = self._read(layout, compute=True)
        acc = x.dtype if self.dtype.is_floating_point else np.int64
        x = x[..., ::-1] if reverse else x
        with np.errstate(all="ignore"):
            out = (np.cumsum if op == "sum" else np.cumprod)(x, axis=-1, dtype=acc)
        return self._new(out[..., ::-1] if reverse else out,
                         self.dtype if self.dtype.is_floating_point else dtypes.int64)

    def repeat_ids(self, layout):
        counts = self._read(layout)
        if self.dtype is dtypes.bool_:  # a mask: its True positions (numpy's repeat is ~15x slower)
            ids = np.flatnonzero(counts)
        elif counts.size and counts.min() < 0:
            return None, 0
        else:
            ids = np.repeat(np.arange(counts.size), counts.astype(np.int64, copy=False))
        return self._new(ids, dtypes.int64), ids.size

    def searchsorted(self, layout, values, values_layout, right):
        if values.dtype is not self.dtype:
            raise storage_error(DTypeError, "searchsorted", "values must have the dtype of the sequence",
                                sorted_sequence=(self, layout), values=(values, values_layout))
        seq, v = self._read(layout, compute=True), values._read(values_layout, compute=True)
        row = seq[0] if seq.shape[0] == 1 else None
        if row is not None and (row[1:] >= row[:-1]).all() and not (row.dtype.kind == "f" and np.isnan(row).any()):
            # one sorted row without NaN: numpy's search gives the same answer, without a pass per step
            return self._new(np.searchsorted(row, v[0], "right" if right else "left"), dtypes.int64)
        lo, hi = np.zeros(v.shape, np.int64), np.full(v.shape, seq.shape[-1], np.int64)
        rows = np.arange(v.shape[0])[:, None]
        while (lo < hi).any():  # PyTorch's binary search, all values at once: a NaN compares false
            mid = (lo + hi) >> 1
            x = seq[rows, np.minimum(mid, seq.shape[-1] - 1)]
            go = (lo < hi) & ~((x > v) if right else (x >= v))
            lo, hi = np.where(go, mid + 1, lo), np.where((lo < hi) & ~go, mid, hi)
        return self._new(lo, dtypes.int64)

    # ---- indexing ---------------------------------------------------------------------
    def index_select(self, ids, layout, ids_layout, dim):
        idx = self._ids("index_select", ids, ids_layout, layout.shape[dim], layout)
        return self._new(np.take(self._read(layout), idx, axis=dim))

    def gather(self, layout, ids, ids_layout, dim):
        idx = self._ids("gather", ids, ids_layout, layout.shape[dim], layout)
        x = self._read(layout)
        # torch allows ids smaller than self in the other dims: only that corner is read
        x = x[tuple(slice(None) if d == dim else slice(0, n) for d, n in enumerate(idx.shape))]
        return self._new(np.take_along_axis(x, idx, axis=dim))

    def _scatter(self, op, layout, ids, ids_layout, src, src_layout, dim, positions, at=np.add.at):
        """Copy of self (in its compute dtype) with the values that `positions(idx, src)`
        returns combined by `at` at the index tuple it returns (np.add.at sums repeated ids)."""
        idx = self._ids(op, ids, ids_layout, layout.shape[dim], layout)
        out = np.array(self._read(layout, compute=True))
        try:
            where, values = positions(idx, src._read(src_layout, compute=True))
            with np.errstate(all="ignore"):
                at(out, where, values)
        except (IndexError, ValueError) as e:
            raise storage_error(ShapeError, op, str(e), self=(self, layout), ids=(ids, ids_layout),
                                src=(src, src_layout)) from None
        return self._new(out)

    def scatter_add(self, layout, ids, ids_layout, src, src_layout, dim):
        return self.scatter(layout, ids, ids_layout, src, src_layout, dim, "sum")

    _SCATTER_AT = {None: lambda out, where, v: out.__setitem__(where, v), "sum": np.add.at, "prod": np.multiply.at,
                   "amax": np.maximum.at, "amin": np.minimum.at}

    def scatter(self, layout, ids, ids_layout, src, src_layout, dim, reduce=None):
        def positions(idx, values):
            grid = list(np.indices(idx.shape, sparse=True))
            grid[dim] = idx
            # like torch, src may be larger than ids: only its leading corner is used
            return tuple(grid), values[tuple(slice(0, n) for n in idx.shape)]
        return self._scatter("scatter_add" if reduce == "sum" else "scatter", layout, ids, ids_layout, src,
                             src_layout, dim, positions, self._SCATTER_AT[reduce])

    def index_add(self, layout, ids, ids_layout, src, src_layout, dim):
        def positions(idx, values):
            return (slice(None),) * dim + (_as_slice(idx),), values

        def add(out, where, values):  # np.add.at is ~100x slower than a += through a slice or distinct ids
            idx = where[dim]
            if isinstance(idx, slice) or np.unique(idx).size == idx.size:
                out[where] += values
            else:  # repeated ids: sum each id's rows (in their order), then add once
                order = np.argsort(idx, kind="stable")
                sidx = idx[order]
                first = np.flatnonzero(np.concatenate(([True], sidx[1:] != sidx[:-1])))
                # in values' dtype, as np.add.at sums (bool: any; integers wrap)
                sums = np.add.reduceat(np.take(values, order, axis=dim), first, axis=dim, dtype=values.dtype)
                out[where[:dim] + (sidx[first],)] += sums
        return self._scatter("index_add", layout, ids, ids_layout, src, src_layout, dim, positions, add)

    # ---- matmul, conv, pooling --------------------------------------------------------
    def matmul(self, rhs, bmnk, lhs_layout, rhs_layout):
        b, m, n, k = bmnk
        if lhs_layout.shape != (b, m, k) or rhs_layout.shape != (b, k, n):
            raise storage_error(ShapeError, "matmul", f"expected (b, m, k) x (b, k, n) for bmnk={bmnk}",
                                lhs=(self, lhs_layout), rhs=(rhs, rhs_layout))
        acc = _accumulate_dtype(self.dtype)
        return self._new(np.matmul(self._read(lhs_layout).astype(acc, copy=False),
                                   rhs._read(rhs_layout).astype(acc, copy=False)))

    def matmul_add_bias(self, rhs, mnk, lhs_layout, rhs_layout, bias, bias_layout):
        if self.dtype not in (dtypes.float32, dtypes.float64) or bias.dtype is not self.dtype:
            # 16-bit: the contract's product rounded to the dtype, then the add (as the GPU's unfused path)
            return super().matmul_add_bias(rhs, mnk, lhs_layout, rhs_layout, bias, bias_layout)
        m, n, k = mnk
        out = self.matmul(rhs, (1, m, n, k), batch_of_one(lhs_layout), batch_of_one(rhs_layout))
        out.data.reshape(m, n)[...] += _strided(bias.data, bias_layout)  # in place on the fresh product
        return out

    def matmul_row_sums(self, rhs, mnk, lhs_layout, rhs_layout):
        if self.dtype not in (dtypes.float32, dtypes.float64):
            return super().matmul_row_sums(rhs, mnk, lhs_layout, rhs_layout)
        m, n, k = mnk
        # lhs is F.linear's transposed output gradient: its row sums as a product with ones (BLAS),
        # not numpy's sum along the strided axis (3x slower)
        sums = np.matmul(self._read(lhs_layout), np.ones(k, self.dtype.np))
        return self.matmul(rhs, (1, m, n, k), batch_of_one(lhs_layout), batch_of_one(rhs_layout)), self._new(sums)

    def _conv(self, fn, layout, kernel, kernel_layout, params, one_d):
        acc = _accumulate_dtype(self.dtype)
        x, w = self._read(layout).astype(acc, copy=False), kernel._read(kernel_layout).astype(acc, copy=False)
        if one_d:  # (b, c, l) -> (b, c, 1, l)
            x, w, params = x[:, :, None], w[:, :, None], params.as_2d()
        out = fn(x, w, params)
        return self._new(out[:, :, 0] if one_d else out)

    def conv1d(self, layout, kernel, kernel_layout, params):
        return self._conv(_conv2d, layout, kernel, kernel_layout, params, True)

    def conv2d(self, layout, kernel, kernel_layout, params):
        return self._conv(_conv2d, layout, kernel, kernel_layout, params, False)

    def conv_transpose1d(self, layout, kernel, kernel_layout, params):
        return self._conv(_conv_transpose2d, layout, kernel, kernel_layout, params, True)

    def conv_transpose2d(self, layout, kernel, kernel_layout, params):
        return self._conv(_conv_transpose2d, layout, kernel, kernel_layout, params, False)

    def avg_pool2d(self, layout, params: PoolParams):
        work = _accumulate_dtype(self.dtype) if self.dtype.is_floating_point else np.float64
        x = self._read(layout).astype(work)
        sums = _window_reduce(np.add, _pad_hw(x, params.padding), params.kernel, params.stride, (1, 1))
        if params.count_include_pad:
            count = params.kernel[0] * params.kernel[1]
        else:  # divide by the number of real (unpadded) elements in each window
            ones = _pad_hw(np.ones((1, 1) + x.shape[2:], x.dtype), params.padding)
            count = _windows(ones, params.kernel, params.stride, (1, 1)).sum(axis=(-2, -1))
        return self._new(sums / count)

    def max_pool2d(self, layout, params: PoolParams):
        x = self._read(layout, compute=True)
        lowest = -np.inf if x.dtype.kind == "f" else (False if x.dtype.kind == "b" else np.iinfo(x.dtype).min)
        return self._new(_window_reduce(np.maximum, _pad_hw(x, params.padding, lowest), params.kernel, params.stride,
                                        params.dilation))

    def max_pool2d_backward(self, layout, params: PoolParams, grad, grad_layout):
        x = self._float_read("max_pool2d_backward", layout)
        out_hw = params.out_size(*layout.shape[2:]) if layout.ndim == 4 else None
        if grad.dtype is not self.dtype or out_hw is None or tuple(grad_layout.shape) != layout.shape[:2] + out_hw:
            raise storage_error(DTypeError if grad.dtype is not self.dtype else ShapeError, "max_pool2d_backward",
                                "expected a 4-d (b, c, h, w) input and a grad of max_pool2d's output shape "
                                "(b, c, oh, ow) and the input's dtype",
                                self=(self, layout), grad=(grad, grad_layout))
        g = grad._read(grad_layout, compute=True).reshape(-1)
        b, c, h, w = x.shape
        winner = _max_pool_winner_keys if x.dtype == _F32 and h * w < 2 ** 31 else _max_pool_winner_scan
        planes = x.reshape(b * c, 1, h, w)
        won = np.empty((b * c, 1) + out_hw, np.int64)
        step = max(1, (1 << 16) // max(1, h * w))  # planes of ~64k elements at a time: the int64 passes stay in cache
        for i in range(0, b * c, step):
            won[i:i + step] = winner(planes[i:i + step], params, out_hw)
        won += (np.arange(b * c, dtype=np.int64) * (h * w)).reshape(-1, 1, 1, 1)  # position in x.reshape(-1)
        won = won.reshape(-1)
        # a window of padding alone (a dilated kernel over a small input) has no winner: its
        # gradient goes nowhere, as PyTorch's (its output is -inf)
        holds = [_windows_holding_input(n, o, kk, s, pp, d) for n, o, kk, s, pp, d in
                 zip((h, w), out_hw, params.kernel, params.stride, params.padding, params.dilation)]
        if not (holds[0].all() and holds[1].all()):
            keep = np.broadcast_to(np.outer(*holds), (b * c,) + out_hw).reshape(-1)
            won, g = won[keep], g[keep]
        span = [d * (kk - 1) + 1 for kk, d in zip(params.kernel, params.dilation)]
        if all(s >= sp for s, sp in zip(params.stride, span)):  # disjoint windows: each input wins at most once
            out = np.zeros(x.size, g.dtype)
            out[won] = g
        else:  # an element may win several windows: their gradients add up (in float64)
            out = np.bincount(won, weights=g, minlength=x.size)
        return self._new(out.reshape(x.shape))

    def upsample_nearest2d(self, layout, out_h, out_w):
        x = self._read(layout)
        h, w = x.shape[2:]
        rows = np.arange(out_h) * h // out_h  # floor(dst * in / out), exact in integers
        cols = np.arange(out_w) * w // out_w
        return self._new(x[:, :, rows[:, None], cols[None, :]])

    # ---- copies -----------------------------------------------------------------------
    def copy_strided_src(self, dst, dst_offset, src_layout):
        n = src_layout.numel()
        dst.data[dst_offset:dst_offset + n] = cast_array(self._read(src_layout), dst.dtype).reshape(-1)

    def copy2d(self, dst, d1, d2, src_stride1, dst_stride1, src_offset, dst_offset):
        src = self._read(Layout((d1, d2), (src_stride1, 1), src_offset))
        _strided(dst.data, Layout((d1, d2), (dst_stride1, 1), dst_offset), writeable=True)[...] = \
            cast_array(src, dst.dtype)

    def const_set(self, value, layout):
        _strided(self.data, layout, writeable=True)[...] = cast_array(np.asarray(value), self.dtype)

    def to_cpu(self, layout):
        return np.array(self._read(layout), order="C", copy=True)

    # ---- fused nn ops: computed in f32 (f64 for f64) and cast back ----------------------
    def _float_read(self, op, layout):
        self._require_float(op, layout)
        return self._read(layout, compute=True)

    def softmax_last_dim(self, layout):
        x = self._float_read("softmax_last_dim", layout)
        e = np.exp(x - x.max(axis=-1, keepdims=True)) if x.size else x
        return self._new(e / e.sum(axis=-1, keepdims=True))

    def log_softmax(self, layout):
        x = self._float_read("log_softmax", layout)
        if x.size:
            shifted = x - x.max(axis=-1, keepdims=True)
            x = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        return self._new(x)

    def layer_norm(self, layout, weight, w_layout, bias, b_layout, eps):
        y, _ = _normalized(self._float_read("layer_norm", layout), eps, True)
        if weight is not None:
            y *= weight._read(w_layout, compute=True)
        if bias is not None:
            y += bias._read(b_layout, compute=True)
        return self._new(y)

    def rms_norm(self, layout, weight, w_layout, eps):
        y, _ = _normalized(self._float_read("rms_norm", layout), eps, False)
        if weight is not None:
            y *= weight._read(w_layout, compute=True)
        return self._new(y)

    def rope(self, layout, cos, cos_layout, sin, sin_layout, variant):
        x = self._float_read(variant, layout)
        c, s = cos._read(cos_layout, compute=True), sin._read(sin_layout, compute=True)
        # cos/sin are (b, t, d/2): insert the head axis where x has it
        c, s = (c[:, :, None], s[:, :, None]) if variant == "rope_thd" else (c[:, None], s[:, None])
        half = x.shape[-1] // 2
        if variant == "rope_i":
            a, b = x[..., 0::2], x[..., 1::2]
            out = np.stack([a * c - b * s, a * s + b * c], axis=-1).reshape(x.shape)
        elif variant in ("rope", "rope_thd"):
            a, b = x[..., :half], x[..., half:]
            out = np.concatenate([a * c - b * s, b * c + a * s], axis=-1)
        else:
            raise ArgumentError(f"rope: unknown variant {variant!r}; expected 'rope', 'rope_i' or 'rope_thd'")
        return self._new(out)

    # ---- backward of the fused ops, fused cross-entropy, AdamW --------------------------
    def _grad_read(self, op, layout, grad, grad_layout):
        """(x, grad) in the compute dtype; grad must have self's dtype and layout's shape."""
        x = self._float_read(op, layout)
        if grad.dtype is not self.dtype or tuple(grad_layout.shape) != tuple(layout.shape):
            raise storage_error(DTypeError if grad.dtype is not self.dtype else ShapeError, op,
                                "grad must have the input's shape and dtype", self=(self, layout),
                                grad=(grad, grad_layout))
        return x, grad._read(grad_layout, compute=True)

    def softmax_last_dim_backward(self, layout, grad, grad_layout):
        y, g = self._grad_read("softmax_backward", layout, grad, grad_layout)
        return self._new(y * (g - (g * y).sum(axis=-1, keepdims=True)))

    def log_softmax_backward(self, layout, grad, grad_layout):
        y, g = self._grad_read("log_softmax_backward", layout, grad, grad_layout)
        return self._new(g - np.exp(y) * g.sum(axis=-1, keepdims=True))

    def _norm_backward(self, op, layout, grad, grad_layout, weight, w_layout, eps, center, weight_grad, bias_grad):
        x, g = self._grad_read(op, layout, grad, grad_layout)
        n = x.shape[-1]
        xhat, rstd = _normalized(x, eps, center)
        with np.errstate(invalid="ignore", divide="ignore"):
            gw = g if weight is None else g * weight._read(w_layout, compute=True)
            # dx = rstd * (gw - xhat * mean(gw * xhat) - mean(gw)), the last term for layer_norm only
            dx = np.multiply(xhat, _row_dot(gw, xhat) / n)
            np.subtract(gw, dx, out=dx)
            if center:
                dx -= gw.mean(axis=-1, keepdims=True)
            dx *= rstd
        rows = math.prod(x.shape[:-1])  # not -1: a last dim of 0 leaves numpy nothing to infer
        dw = self._new(np.einsum("ij,ij->j", g.reshape(rows, n), xhat.reshape(rows, n))) if weight_grad else None
        db = self._new(g.reshape(rows, n).sum(0)) if bias_grad else None
        return self._new(dx), dw, db

    def layer_norm_backward(self, layout, grad, grad_layout, weight, w_layout, eps, weight_grad, bias_grad):
        return self._norm_backward("layer_norm_backward", layout, grad, grad_layout, weight, w_layout, eps, True,
                                   weight_grad, bias_grad)

    def rms_norm_backward(self, layout, grad, grad_layout, weight, w_layout, eps, weight_grad):
        return self._norm_backward("rms_norm_backward", layout, grad, grad_layout, weight, w_layout, eps, False,
                                   weight_grad, False)[:2]

    def rope_backward(self, layout, cos, cos_layout, sin, sin_layout, variant):
        neg = self._new(-sin._read(sin_layout, compute=True), sin.dtype)  # rotate by -theta
        return self.rope(layout, cos, cos_layout, neg, Layout.contiguous(sin_layout.shape), variant)

    def _ce_operands(self, op, layout, target, target_layout):
        """(x as (R, C) in the compute dtype, int64 targets (R,), the loss dtype)."""
        x = self._float_read(op, layout)
        check_cross_entropy(op, self, layout, target, target_layout)
        t = target._read(target_layout).reshape(-1)
        acc = dtypes.float64 if self.dtype is dtypes.float64 else dtypes.float32
        return x.reshape(math.prod(x.shape[:-1]), x.shape[-1]), t, acc

    def cross_entropy(self, layout, target, target_layout, weight, w_layout, ignore_index):
        x, t, acc = self._ce_operands("cross_entropy", layout, target, target_layout)
        n_cls = x.shape[1]
        ignored = t == ignore_index
        bad = ~ignored & ((t < 0) | (t >= n_cls))
        if bad.any():
            raise storage_error(IndexOutOfRange, "cross_entropy", f"target {int(t[bad][0])} is out of range for "
                                f"{n_cls} classes", self=(self, layout), target=(target, target_layout))
        if weight is not None and (weight.dtype is not self.dtype or tuple(w_layout.shape) != (n_cls,)):
            raise storage_error(ShapeError, "cross_entropy", f"weight must be ({n_cls},) of the logits' dtype",
                                self=(self, layout), weight=(weight, w_layout))
        safe = np.where(ignored, 0, t)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            m = x.max(axis=1, initial=-np.inf)
            lse = m + np.log(np.exp(x - m[:, None]).sum(axis=1))
            wt = np.ones(len(t), x.dtype) if weight is None else weight._read(w_layout, compute=True)[safe]
            wt = np.where(ignored, 0, wt).astype(x.dtype)
            picked = x[np.arange(len(t)), safe] if n_cls else np.zeros(len(t), x.dtype)
            loss = np.where(ignored, 0, wt * (lse - picked))
        return self._new(loss, acc), self._new(lse, acc), self._new(wt, acc)

    def cross_entropy_backward(self, layout, target, target_layout, lse, wt, grad, grad_layout):
        x, t, acc = self._ce_operands("cross_entropy_backward", layout, target, target_layout)
        if grad.dtype is not acc or lse.dtype is not acc or wt.dtype is not acc \
                or grad_layout.numel() != len(t) or lse.data.size != len(t) or wt.data.size != len(t):
            raise storage_error(DTypeError, "cross_entropy_backward", f"lse, wt and grad must be {acc.name} with one "
                                "value per row, as cross_entropy returned them", self=(self, layout),
                                grad=(grad, grad_layout))
        g = grad._read(grad_layout).reshape(-1)
        w = wt.data
        with np.errstate(invalid="ignore", over="ignore"):
            p = np.exp(x - lse.data[:, None])
            rows = np.nonzero(w != 0)[0]
            p[rows, t[rows]] -= 1  # ignored rows (wt 0) keep no onehot: their targets may be anything
            d = np.where((w != 0)[:, None], (g * w)[:, None] * p, 0)
        return self._new(d.reshape(layout.shape))

    def unary_backward(self, op, layout, grad, grad_layout):
        if op not in UNARY_DERIVATIVE:
            raise ArgumentError(f"unary_backward: op must be one of {sorted(UNARY_DERIVATIVE)}, got {op!r}")
        x, g = self._grad_read(f"{op}_backward", layout, grad, grad_layout)
        with np.errstate(all="ignore"):
            return self._new(g * UNARY_DERIVATIVE[op](x))

    def adamw_step(self, layout, grad, grad_layout, exp_avg, exp_avg_sq, max_exp_avg_sq, lr, betas, eps,
                   weight_decay, step, decoupled=True, maximize=False):
        p, g = self._grad_read("adamw_step", layout, grad, grad_layout)
        # capturable: the step count and lr are read from their memory at the update, as the kernel's
        lr, step = (check_adam_scalar("adamw_step", k, v, self, layout) for k, v in (("lr", lr), ("step", step)))
        lr, step = (float(v[0]._read(v[1]).reshape(-1)[0]) if isinstance(v, tuple) else v for v in (lr, step))
        sdt = adam_state_dtype(self.dtype)
        n = layout.numel()
        states = [exp_avg, exp_avg_sq] + ([max_exp_avg_sq] if max_exp_avg_sq is not None else [])
        if any(st.dtype is not sdt or st.data.size != n for st in states):
            raise storage_error(DTypeError, "adamw_step", f"state buffers must be {sdt.name} with {n} elements",
                                self=(self, layout), exp_avg=(exp_avg, Layout((exp_avg.data.size,))))
        a = sdt.np.type  # scalars round to the state dtype, as the kernel does
        # In place, one scratch buffer: each line rounds as the out-of-place formula beside it did
        # (a step over many small parameters is otherwise mostly fresh temporaries).
        in_place = self.dtype is sdt and layout.is_contiguous()
        p = _strided(self.data, layout, writeable=True).reshape(-1) if in_place else p.astype(sdt.np).reshape(-1)
        g = g.reshape(-1)
        b1, b2 = betas
        step_size, bc2_sqrt = adam_bias_corrections(lr, betas, step)
        w1 = a(1.0 - b1)
        m, v = exp_avg.data, exp_avg_sq.data
        tmp = np.empty(n, sdt.np)
        with np.errstate(all="ignore"):
            if maximize or (weight_decay and not decoupled):
                g = g.astype(sdt.np)  # a copy: the gradient itself stays as it is
                if maximize:
                    np.negative(g, out=g)
                if weight_decay and not decoupled:
                    g += np.multiply(p, a(weight_decay), out=tmp)  # g + wd * p
            if decoupled:
                p *= a(1.0 - lr * weight_decay)
            np.subtract(g, m, out=tmp)
            if w1 < 0.5:  # torch's lerp: m + w1 * (g - m), else g - (g - m) * (1 - w1)
                tmp *= w1
                m += tmp
            else:
                tmp *= a(1) - w1
                np.subtract(g, tmp, out=m)
            v *= a(b2)  # v * b2 + (1 - b2) * g * g
            np.multiply(g, a(1.0 - b2), out=tmp)
            tmp *= g
            v += tmp
            if max_exp_avg_sq is not None:
                v = np.maximum(max_exp_avg_sq.data, v, out=max_exp_avg_sq.data)
            np.sqrt(v, out=tmp)  # p - step_size * (m / (sqrt(v) / bc2 + eps))
            tmp /= a(bc2_sqrt)
            tmp += a(eps)
            np.divide(m, tmp, out=tmp)
            tmp *= a(step_size)
            p -= tmp
        if not in_place:
            _strided(self.data, layout, writeable=True)[...] = cast_array(p.reshape(layout.shape), self.dtype)

    def _sdpa_operands(self, op, layout, k, k_layout, v, v_layout, mask, mask_layout, scale):
        """(q, k, v, the mask as an array or None, scale, GQA group size) in the compute dtype."""
        q = self._float_read(op, layout)
        kk, vv = k._read(k_layout, compute=True), v._read(v_layout, compute=True)
        hq, hk = q.shape[1], kk.shape[1]
        if hk == 0 or hq % hk:
            raise storage_error(ShapeError, "sdpa", "query heads must be a multiple of key/value heads",
                                q=(self, layout), k=(k, k_layout), v=(v, v_layout))
        m = None if mask is None else mask._read(mask_layout, compute=True)
        return q, kk, vv, m, 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale, hq // hk

    def sdpa(self, layout, k, k_layout, v, v_layout, mask, mask_layout, scale, is_causal, return_lse=False):
        mode = sdpa_mode()  # read (and validated) on every device, though the cpu has no kernels
        q, kk, vv, m, scale, groups = self._sdpa_operands("sdpa", layout, k, k_layout, v, v_layout, mask,
                                                          mask_layout, scale)
        out = np.empty(q.shape[:-1] + vv.shape[-1:], q.dtype)
        lse = np.empty(q.shape[:-1], q.dtype)

        def rows(lo, hi):
            def task():
                out[lo:hi], lse[lo:hi] = _sdpa_forward(q[lo:hi], kk[lo:hi], vv[lo:hi], _batch_rows(m, lo, hi, len(q)),
                                                       scale, is_causal, groups)
            return task
        scores = q.size * kk.shape[2] // max(1, q.shape[-1])
        _in_parallel([rows(lo, hi) for lo, hi in _batch_shares(q.shape[0], scores)])
        out = self._new_in(out, sdpa_layout(layout, vv.shape[-1]))
        if not return_lse:
            return out
        if mode == "gemm":  # the switch forces the composite backward everywhere
            return out, None
        return out, self._new(lse, dtypes.float64 if self.dtype is dtypes.float64 else dtypes.float32)

    def sdpa_backward(self, layout, k, k_layout, v, v_layout, out, out_layout, grad, grad_layout, lse, mask,
                      mask_layout, scale, is_causal):
        # in the compute dtype (f32 for f32/f16/bf16, as lse), the reference the fused GPU backward is held to
        q, kk, vv, m, scale, groups = self._sdpa_operands("sdpa_backward", layout, k, k_layout, v, v_layout, mask,
                                                          mask_layout, scale)
        b, hq, L, d = q.shape
        if grad.dtype is not self.dtype or out.dtype is not self.dtype or lse.data.size != b * hq * L \
                or tuple(out_layout.shape) != (b, hq, L, vv.shape[-1]) or grad_layout.shape != out_layout.shape:
            raise storage_error(ShapeError, "sdpa_backward", "out and grad must be (b, hq, L, dv) of q's dtype, "
                                "lse (b, hq, L) as sdpa(return_lse=True) returned it",
                                q=(self, layout), out=(out, out_layout), grad=(grad, grad_layout))
        o, g = (st._read(lay, compute=True) for st, lay in ((out, out_layout), (grad, grad_layout)))
        row_lse = lse.data.astype(q.dtype, copy=False).reshape(b, hq, L, 1)
        dq, dk, dv = np.empty(q.shape, q.dtype), np.empty(kk.shape, q.dtype), np.empty(vv.shape, q.dtype)

        def rows(lo, hi):
            def task():
                dq[lo:hi], dk[lo:hi], dv[lo:hi] = _sdpa_backward(
                    q[lo:hi], kk[lo:hi], vv[lo:hi], o[lo:hi], g[lo:hi], row_lse[lo:hi],
                    _batch_rows(m, lo, hi, b), scale, is_causal, groups)
            return task
        _in_parallel([rows(lo, hi) for lo, hi in _batch_shares(b, q.size * kk.shape[2] // max(1, d))])
        return (self._new_in(dq, sdpa_layout(layout)), self._new_in(dk, sdpa_layout(k_layout)),
                self._new_in(dv, sdpa_layout(v_layout)))


def _batch_shares(b: int, work: int):
    """[lo, hi) batch ranges, one per core where the work (elements of the scores) pays for a thread:
    attention's many small GEMMs and row passes release the GIL, so halves of a batch run side by side."""
    n = min(b, threads.get_num_threads()) if work >= 1 << 18 else 1
    bounds = [b * i // n for i in range(n + 1)]
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo] or [(0, b)]


def _batch_rows(m, lo, hi, b):
    """The mask's rows for batch entries [lo, hi) (a mask broadcast over the batch: all of it)."""
    return m if m is None or m.ndim < 4 or m.shape[0] != b else m[lo:hi]


def _sdpa_scores(q, kk, m, scale, is_causal, groups):
    """Scaled, masked scores (b, hq, L, S) with -inf where dropped (m: the mask array or None)."""
    if groups > 1:
        kk = np.repeat(kk, groups, axis=1)  # GQA
    scores = q @ kk.swapaxes(-1, -2)
    scores *= scale
    keep = np.tri(*scores.shape[-2:], dtype=bool) if is_causal else None  # top-left aligned: i sees j <= i
    if m is not None:
        if m.dtype == np.bool_:
            keep = m if keep is None else keep & m
        else:
            scores = scores + m
    if keep is not None:
        np.copyto(scores, -np.inf, where=~keep)  # in place (np.where's copy is slower)
    return scores


def _sdpa_forward(q, kk, vv, m, scale, is_causal, groups):
    """(softmax(scores) @ v, logsumexp of each row) over a batch share; 0 and -inf for a row
    whose keys are all masked (torch returns zeros there)."""
    scores = _sdpa_scores(q, kk, m, scale, is_causal, groups)
    vv = np.repeat(vv, groups, axis=1) if groups > 1 else vv
    row_max = scores.max(axis=-1, keepdims=True, initial=-np.inf)  # initial: S may be 0
    dead = np.isneginf(row_max)
    with np.errstate(invalid="ignore", divide="ignore"):
        scores -= np.where(dead, 0, row_max)
        p = np.exp(scores, out=scores)
        total = p.sum(axis=-1, keepdims=True)
        p /= np.where(dead, 1, total)
        lse = np.where(dead, -np.inf, row_max + np.log(np.where(dead, 1, total)))[..., 0]
    return p @ vv, lse


def _sdpa_backward(q, kk, vv, o, g, row_lse, m, scale, is_causal, groups):
    """(dq, dk, dv) over a batch share, p recomputed from the scores and the forward's logsumexp."""
    scores = _sdpa_scores(q, kk, m, scale, is_causal, groups)
    with np.errstate(invalid="ignore"):
        scores -= np.where(np.isneginf(row_lse), np.inf, row_lse)  # dead rows (lse -inf): p = 0, no gradient
        p = np.exp(scores, out=scores)
    kx, vx = (np.repeat(t, groups, axis=1) if groups > 1 else t for t in (kk, vv))
    ds = g @ vx.swapaxes(-1, -2)
    ds -= _row_dot(g, o)
    ds *= p  # through the softmax
    ds *= scale
    dq = ds @ kx
    dkx, dvx = ds.swapaxes(-1, -2) @ q, p.swapaxes(-1, -2) @ g

    def per_kv_head(t):  # the query heads that share a kv head add their gradients
        return t.reshape(t.shape[0], t.shape[1] // groups, groups, *t.shape[2:]).sum(2)
    return dq, per_kv_head(dkx), per_kv_head(dvx)


# =====================================================================================
# Device
# =====================================================================================

class CpuDevice(BackendDevice):
    name = "cpu"

    def __init__(self, ordinal: int = 0):
        if ordinal != 0:
            raise DeviceError(f"cpu has only ordinal 0, got cpu:{ordinal}")
        self.ordinal, self._total = 0, None
        self.set_seed(0)

    def _wrap(self, arr: np.ndarray, dtype) -> CpuStorage:
        return CpuStorage(arr, dtypes.get(dtype), self)

    def _alloc(self, make, shape, dtype):
        """make() -> a new host array, numpy's MemoryError as OutOfMemoryError naming the size."""
        try:
            return make()
        except MemoryError:
            raise self._oom(shape, dtype) from None

    @staticmethod
    def _oom(shape, dtype) -> OutOfMemoryError:
        return OutOfMemoryError(f"cpu: out of memory allocating a {tuple(shape)} {dtype.name} array "
                                f"({math.prod(shape) * dtype.itemsize} bytes)")

    def zeros(self, shape, dtype):
        dtype = dtypes.get(dtype)
        return self._wrap(self._alloc(lambda: np.zeros(math.prod(shape), dtype.np), shape, dtype), dtype)

    def alloc_uninit(self, shape, dtype):
        dtype = dtypes.get(dtype)
        return self._wrap(self._alloc(lambda: np.empty(math.prod(shape), dtype.np), shape, dtype), dtype)

    def from_cpu(self, array):
        array = np.asarray(array)
        dtype = dtypes.get(array.dtype)  # e.g. int32 is stored as int64
        return self._wrap(self._alloc(lambda: np.array(array, dtype.np, order="C", copy=True).reshape(-1),
                                      array.shape, dtype), dtype)

    def wrap_memory(self, owner, numel, dtype):
        data = np.asarray(owner).view(dtype.np) if numel else np.empty(0, dtype.np)
        return CpuStorage(data, dtype, self)  # the array's base is `owner`: alive while the storage is

    def total_memory(self):
        """The host's physical memory (None where the OS does not say)."""
        if self._total is None:
            try:
                self._total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            except (AttributeError, ValueError, OSError):
                self._total = 0
        return self._total or None

    def set_seed(self, seed):
        self._rng = np.random.Generator(np.random.Philox(int(seed)))

    # Philox's state as 13 uint64 words: counter (4), key (2), buffer (4), buffer_pos, has_uint32, uinteger
    def get_rng_state(self) -> bytes:
        st = self._rng.bit_generator.state
        words = [*st["state"]["counter"], *st["state"]["key"], *st["buffer"], st["buffer_pos"], st["has_uint32"],
                 st["uinteger"]]
        return np.array(words, np.uint64).tobytes()

    def set_rng_state(self, state: bytes) -> None:
        if len(state) != 13 * 8:
            raise ArgumentError(f"set_rng_state: a cpu generator state has {13 * 8} bytes, got {len(state)}")
        w = np.frombuffer(state, np.uint64)
        bits = np.random.Philox()
        bits.state = {"bit_generator": "Philox", "state": {"counter": w[0:4].copy(), "key": w[4:6].copy()},
                      "buffer": w[6:10].copy(), "buffer_pos": int(w[10]), "has_uint32": int(w[11]),
                      "uinteger": int(w[12])}
        self._rng = np.random.Generator(bits)

    def rand_uniform(self, shape, dtype, lo, hi):
        dtype = dtypes.get(dtype)
        return self._wrap(self._alloc(lambda: cast_array(self._rng.uniform(lo, hi, math.prod(shape)), dtype), shape,
                                      dtype), dtype)

    def rand_normal(self, shape, dtype, mean, std):
        dtype = dtypes.get(dtype)
        return self._wrap(self._alloc(lambda: cast_array(self._rng.normal(mean, std, math.prod(shape)), dtype), shape,
                                      dtype), dtype)

    def synchronize(self):
        pass  # numpy is synchronous

    def memory_stats(self):
        return {}

