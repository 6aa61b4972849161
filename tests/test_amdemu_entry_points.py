"""Every kernel entry point once, on the emulated AMD architecture TENSORLITE_AMDEMU names,
compared with `cpu`: the families and dtypes that the backend-swap files in
tests/amdemu_suite.txt leave out (casts between every dtype pair, integer and bool kernels
that the Tensor API routes elsewhere, the fused nn kernels and their backward, AdamW,
random numbers, attention). Small shapes: every launch is interpreted instruction by
instruction. The coverage check (backends/rocm/amdemu/coverage.py) lists what still never ran.

Where the Tensor API never sends a dtype to a kernel (sum of bool promotes to int64, abs of
bool...), the storage contract is called directly: the entry point exists in the code
object, so it must compute what `cpu` computes.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorlite as tl
from tensorlite import dtype as D, op_table
from tensorlite.backend import REDUCE_OPS
from tensorlite.backends.rocm.kernel_table import unary_ops
from tensorlite.backends.rocm.ops import matmul as matmul_ops, sort as gpu_sort
from tensorlite.custom_op import storage_and_layout as sl  # (storage, layout): what the storage contract takes
from tensorlite.layout import Layout
from tensorlite.nn import functional as F

from conftest import assert_close, random_array

pytestmark = pytest.mark.amdemu


@pytest.fixture(scope="module")
def emu():
    """The emulated device of this process (its architecture: TENSORLITE_AMDEMU)."""
    status = dict(tl.backend.available()).get("amdemu")
    if status is not True:  # e.g. "opt-in: set TENSORLITE_AMDEMU=gfx90a, gfx940 or gfx1100"
        pytest.skip(f"backend 'amdemu' unavailable: {status}")
    return "amdemu"


def _pair(a, emu):
    return tl.tensor(a, device="cpu"), tl.tensor(a, device=emu)


def _storage_result(st, shape):
    return np.asarray(st.to_cpu(Layout.contiguous(tuple(shape))))


def _same(got, ref, dtype, terms=1):
    assert_close(tl.tensor(got) if isinstance(got, np.ndarray) else got, _np(ref), dtype, terms, check_dtype=False)


def _name(x):
    """'cpu' or 'amdemu': the registry name of a tensor's device."""
    return str(x.device).split(":")[0]


def _np(x):
    return x.numpy() if isinstance(x, tl.Tensor) else np.asarray(x)


# ---- casts, unary, reductions: every dtype, through the storage where the API promotes ----

def test_cast_every_pair(emu, rng):
    for src in D.ALL:
        a = random_array(rng, (3, 5), src, 0.0, 3.0)
        c, e = _pair(a, emu)
        for dst in D.ALL:
            _same(e.to(dst), c.to(dst), dst)
        # a strided view cast to its own dtype: the cast kernel as a gather (contiguous: a copy)
        _same(e.mT.to(src), c.mT.to(src), src)


@pytest.mark.parametrize("dst", D.FLOATS, ids=lambda d: d.name)
def test_cast_many(emu, rng, dst):
    arrays = [random_array(rng, s, src, -2, 2) for s, src in (((4,), dst), ((2, 3), D.float32), ((5,), D.float64),
                                                               ((3,), D.float16), ((2,), D.bfloat16))]
    cpu = tl.foreach_to([tl.tensor(a) for a in arrays], dst)
    got = tl.foreach_to([tl.tensor(a, device=emu) for a in arrays], dst)
    for g, c in zip(got, cpu):
        _same(g, c, dst)
    # the storage batches same-dtype casts too (foreach_to hands the tensors back as they are)
    same = [tl.tensor(random_array(rng, (3,), dst), device=emu) for _ in range(2)]
    pairs = [sl(t) for t in same]
    for t, out in zip(same, type(pairs[0][0]).to_dtype_many(pairs, dst)):
        _same(_storage_result(out, (3,)), t, dst)


@pytest.mark.parametrize("dtype", D.ALL, ids=lambda d: d.name)
def test_unary_affine_and_reductions_every_dtype(emu, rng, dtype):
    a = random_array(rng, (3, 6), dtype, 0.5, 3.0)
    c, e = _pair(a, emu)
    (cs, lay), (es, _) = sl(c), sl(e)
    for op in unary_ops(dtype.short):  # the ops with a u<op>_<dtype> entry point
        _same(_storage_result(es.unary_impl(op, lay), a.shape), _storage_result(cs.unary_impl(op, lay), a.shape), dtype)
    mul, add = (1.0, 1.0) if dtype is D.bool_ else (2.0, 1.0)
    _same(_storage_result(es.affine(lay, mul, add), a.shape), _storage_result(cs.affine(lay, mul, add), a.shape), dtype)
    if dtype.is_floating_point:
        _same(_storage_result(es.powf(lay, 1.5), a.shape), _storage_result(cs.powf(lay, 1.5), a.shape), dtype)
        _same(_storage_result(es.elu(lay, 0.7), a.shape), _storage_result(cs.elu(lay, 0.7), a.shape), dtype)
    for op in REDUCE_OPS:
        shape = (3, 1)
        out_dtype = D.int64 if op.startswith("arg") else dtype
        _same(_storage_result(es.reduce_op(op, lay, (1,)), shape),
              _storage_result(cs.reduce_op(op, lay, (1,)), shape), out_dtype, terms=6)


@pytest.mark.parametrize("dtype", [d for d in D.ALL if not d.is_floating_point and d is not D.bool_],
                         ids=lambda d: d.name)
def test_shifts_every_integer_dtype_with_counts_out_of_range(emu, dtype):
    """b<bitwise_left_shift|bitwise_right_shift>_<int>: counts < 0 and >= the width (0, or the
    sign for >>), where C's shift is undefined: the kernel's guard against cpu (numpy)."""
    counts = np.array([0, 1, 3, 7, 8, 9, 31, 33, 63, 64, 70, -1, -3], dtype=np.int64)
    a = np.repeat(np.array([1, 5, 100, -1, -100], dtype=np.int64), len(counts)).astype(dtype.np)
    b = np.tile(counts, 5).astype(dtype.np)
    (ca, ea), (cb, eb) = _pair(a, emu), _pair(b, emu)
    for op in (lambda x, y: x << y, lambda x, y: x >> y):
        _same(op(ea, eb), op(ca, cb), dtype)


# ---- binary ops, comparisons, where: every row on every dtype it has a kernel for --------

# (left shape, right shape): two contiguous operands (the mapped path), and a row broadcast on
# the right or on the left (the periodic path, the operands swapped for the left): 12 elements,
# so 8-bit vectors of 8 meet a period of 4 that does not divide them (element-wise wrap)
_BROADCASTS = (((3, 4), (3, 4)), ((3, 4), (4,)), ((4,), (3, 4)))


def _operands(emu, rng, dtype, lshape, rshape):
    """((cpu storage, layout), (emulated storage, layout)) for a left and a right operand,
    their layouts broadcast to the output's shape; the right one never 0 (fmod's divisor)."""
    shape = np.broadcast_shapes(lshape, rshape)
    lo, hi = (-3, 3) if dtype.is_floating_point else (-40, 40)
    a, b = random_array(rng, lshape, dtype, lo, hi), random_array(rng, rshape, dtype, -3, 3)
    if dtype is not D.bool_:
        b = np.where(b == 0, np.ones((), b.dtype), b)
    out = []
    for v in (a, b):
        c, e = _pair(v, emu)
        layout = sl(c)[1].broadcast_as(shape)
        out.append(((sl(c)[0], layout), (sl(e)[0], layout)))
    return out, shape


@pytest.mark.parametrize("dtype", D.ALL, ids=lambda d: d.name)
def test_binary_and_compare_every_dtype(emu, rng, dtype):
    # b<op>_<t> and <cmp>_<t> through the storage contract (the Tensor API promotes some
    # dtypes elsewhere). clang-19's gfx942 code of the periodic path gave b - a for a - b in
    # some int8/uint8 bytes (kernels/binary.hip says why); this holds it.
    ops = [r.name for r in op_table.BINARY if op_table.defined_for(r, dtype.is_floating_point, dtype is D.bool_)]
    for lshape, rshape in _BROADCASTS:
        ((ca, la), (ea, _)), ((cb, lb), (eb, _)) = _operands(emu, rng, dtype, lshape, rshape)[0]
        shape = la.shape
        for op, call, out_dtype in [(op, "binary_impl", dtype) for op in ops] + \
                [(op.name, "cmp", D.bool_) for op in op_table.COMPARE]:
            got, ref = (_storage_result(getattr(x, call)(op, y, la, lb), shape) for x, y in ((ea, eb), (ca, cb)))
            try:
                _same(got, ref, out_dtype, terms=2)
            except AssertionError as e:
                raise AssertionError(f"{op} of {lshape} and {rshape} ({dtype.name}): {e}") from None


@pytest.mark.parametrize("dtype", D.ALL, ids=lambda d: d.name)
def test_where_every_dtype(emu, rng, dtype):
    cond = rng.random((3, 4)) < 0.5
    x, y = random_array(rng, (3, 4), dtype), random_array(rng, (4,), dtype)
    (cc, ce), (xc, xe), (yc, ye) = _pair(cond, emu), _pair(x, emu), _pair(y, emu)
    _same(tl.where(ce, xe, ye), tl.where(cc, xc, yc), dtype)


# ---- sorting, scans, searches: every dtype --------------------------------------------

@pytest.mark.parametrize("dtype", D.ALL, ids=lambda d: d.name)
def test_sort_scan_search_every_dtype(emu, rng, dtype, monkeypatch):
    # sort_block_<t> sorts chunks in shared memory; rows longer than a chunk merge in global
    # memory (sort_step_<t>): a chunk of 16 takes a row of 37 there. cumsum/cumprod_<t> both
    # ways, searchsorted_<t> both sides. Small integers: ties, which a stable sort must keep
    monkeypatch.setattr(gpu_sort, "SORT_CHUNK", 16)
    a = random_array(rng, (2, 37), dtype, -3, 3)
    if dtype.is_floating_point:
        a = np.round(a.astype(np.float32)).astype(dtype.np)
    c, e = _pair(a, emu)
    for descending in (False, True):
        (ve, ie), (vc, ic) = tl.sort(e, -1, descending, stable=True), tl.sort(c, -1, descending, stable=True)
        _same(ve, vc, dtype)
        _same(ie, ic, D.int64)
    (cs, lay), (es, _) = sl(c[:, :9]), sl(e[:, :9])
    for op in ("sum", "prod"):
        for reverse in (False, True):
            _same(_storage_result(es.cumulative(op, lay, reverse), (2, 9)),
                  _storage_result(cs.cumulative(op, lay, reverse), (2, 9)),
                  dtype if dtype.is_floating_point else D.int64, terms=9)
    seq = np.sort(a[:, :8], -1)
    values = random_array(rng, (2, 5), dtype, -3, 3)
    (sc, se), (vc, ve) = _pair(seq, emu), _pair(values, emu)
    for right in (False, True):
        _same(tl.searchsorted(se, ve, right=right), tl.searchsorted(sc, vc, right=right), D.int64)


# ---- index ops: every (index dtype, data dtype) ------------------------------------------

@pytest.mark.parametrize("dtype", D.ALL, ids=lambda d: d.name)
def test_index_ops_every_dtype(emu, rng, dtype):
    a = random_array(rng, (4, 3), dtype, 0.0, 3.0)
    src = random_array(rng, (4, 2), dtype, 0.0, 3.0)
    c, e = _pair(a, emu)
    sc, se = _pair(src, emu)
    s3c, s3e = _pair(random_array(rng, (3, 3), dtype, 0.0, 3.0), emu)
    for ids_dtype in (D.int64, D.uint32, D.uint8):
        ids = np.array([[2, 0], [1, 1], [0, 2], [2, 2]]).astype(ids_dtype.np)
        ic, ie = _pair(ids, emu)
        row_ids = np.array([3, 0, 3]).astype(ids_dtype.np)
        rc, re_ = _pair(row_ids, emu)
        _same(tl.index_select(e, 0, re_), tl.index_select(c, 0, rc), dtype)
        _same(tl.gather(e, 1, ie), tl.gather(c, 1, ic), dtype)
        if dtype is not D.bool_:  # sums of bools: the storage contract is called (the API refuses them)
            _same(tl.scatter_add(e, 1, ie, se), tl.scatter_add(c, 1, ic, sc), dtype)
            _same(tl.index_add(e, 0, re_, s3e), tl.index_add(c, 0, rc, s3c), dtype)
        else:
            (es, el), (cs, cl) = sl(e), sl(c)
            got = es.scatter_add(el, *sl(ie), *sl(se), 1)
            ref = cs.scatter_add(cl, *sl(ic), *sl(sc), 1)
            _same(_storage_result(got, a.shape), _storage_result(ref, a.shape), dtype)
            got = es.index_add(el, *sl(re_), *sl(s3e), 0)
            ref = cs.index_add(cl, *sl(rc), *sl(s3c), 0)
            _same(_storage_result(got, a.shape), _storage_result(ref, a.shape), dtype)


def test_index_ops_refuse_ids_out_of_range(emu):
    """Each index kernel's bound check, per ids dtype: an id past the dim is reported (IndexError
    naming the op), never read or written (a removed check in gather survived the tour before)."""
    x = tl.tensor(np.zeros((3, 4), np.float32), device=emu)
    src, rows = (tl.tensor(np.ones(shape, np.float32), device=emu) for shape in ((2, 1), (2, 4)))
    calls = {"index_select": lambda ids: x.index_select(0, ids), "gather": lambda ids: x.gather(0, ids.reshape(2, 1)),
             "scatter_add": lambda ids: x.scatter_add(0, ids.reshape(2, 1), src),
             "index_add": lambda ids: x.index_add(0, ids, rows)}
    for ids_dtype in (D.int64, D.uint32, D.uint8):
        ids = tl.tensor(np.array([0, 3]).astype(ids_dtype.np), device=emu)   # 3 is past dim 0
        for op, call in calls.items():
            with pytest.raises(IndexError, match=op):
                call(ids)


@pytest.mark.parametrize("dtype", D.ALL, ids=lambda d: d.name)
def test_scatter_every_dtype(emu, rng, dtype):
    # scatter_<t> (torch.scatter, a new tensor) and scatter_set_<t> (index_copy_, in place):
    # distinct ids per column, so that no two writes meet
    a, src = random_array(rng, (4, 3), dtype, 0.0, 3.0), random_array(rng, (2, 3), dtype, 0.0, 3.0)
    ids = np.array([[3, 0, 1], [1, 2, 3]])
    (c, e), (sc, se), (ic, ie) = _pair(a, emu), _pair(src, emu), _pair(ids, emu)
    _same(tl.scatter(e, 0, ie, se), tl.scatter(c, 0, ic, sc), dtype)
    rows = tl.tensor([3, 1], device=emu), tl.tensor([3, 1])
    _same(e.index_copy_(0, rows[0], se), c.index_copy_(0, rows[1], sc), dtype)


# ---- matmul, convolution, pooling, copies: every dtype, through the storage -------------

@pytest.mark.parametrize("dtype", D.ALL, ids=lambda d: d.name)
def test_conv_pool_copy_every_dtype(emu, rng, dtype):
    from tensorlite.backend import ConvParams, PoolParams
    x = random_array(rng, (1, 2, 5, 5), dtype, 0.0, 2.0)
    k = random_array(rng, (3, 2, 2, 2), dtype, 0.0, 2.0)
    (xc, xe), (kc, ke) = _pair(x, emu), _pair(k, emu)
    terms = 8
    conv = ConvParams((1, 1), (1, 1), (1, 1))
    for name, call, shape in (
            ("conv2d", lambda s, t, u: sl(s)[0].conv2d(sl(s)[1], *sl(u), conv), (1, 3, 6, 6)),
            ("conv_transpose2d", lambda s, t, u: sl(s)[0].conv_transpose2d(
                sl(s)[1], *sl(t), ConvParams((2, 2), (0, 0), (1, 1), 1, (0, 0))), (1, 2, 12, 12)),
            ("max_pool2d", lambda s, t, u: sl(s)[0].max_pool2d(sl(s)[1], PoolParams((2, 2), (2, 2))), (1, 2, 2, 2)),
            ("avg_pool2d", lambda s, t, u: sl(s)[0].avg_pool2d(sl(s)[1], PoolParams((3, 3), (1, 1), (1, 1))),
             (1, 2, 5, 5)),
            ("upsample_nearest2d", lambda s, t, u: sl(s)[0].upsample_nearest2d(sl(s)[1], 7, 3), (1, 2, 7, 3))):
        if name == "conv_transpose2d":  # kernel (c_in, c_out, kh, kw): the input's 3 channels in
            y = random_array(rng, (1, 3, 6, 6), dtype, 0.0, 2.0)
            yc, ye = _pair(y, emu)
            got, ref = call(ye, ke, None), call(yc, kc, None)
        elif name == "conv2d":
            got, ref = call(xe, None, ke), call(xc, None, kc)
        else:
            got, ref = call(xe, None, None), call(xc, None, None)
        _same(_storage_result(got, shape), _storage_result(ref, shape), dtype, terms)
    if dtype.is_floating_point:  # max_pool2d_backward_<t>: overlapping windows add, padding skipped
        params = PoolParams((3, 3), (2, 2), (1, 1))
        g = random_array(rng, (1, 2, 3, 3), dtype)
        (gc, ge) = _pair(g, emu)
        got, ref = (sl(s)[0].max_pool2d_backward(sl(s)[1], params, *sl(t)) for s, t in ((xe, ge), (xc, gc)))
        _same(_storage_result(got, x.shape), _storage_result(ref, x.shape), dtype, terms=4)
    # copies: cat (copy2d) and fill (const_set)
    a, b = random_array(rng, (2, 3), dtype), random_array(rng, (2, 2), dtype)
    (ac, ae), (bc, be) = _pair(a, emu), _pair(b, emu)
    _same(tl.cat([ae, be], 1), tl.cat([ac, bc], 1), dtype)
    fill = True if dtype is D.bool_ else 3
    _same(tl.full((2, 5), fill, dtype=dtype, device=emu), tl.full((2, 5), fill, dtype=dtype), dtype)
    # a strided fill takes the const_set kernel (a contiguous one of equal bytes is a memset)
    strided = Layout((2, 2), (3, 1), 1)
    for t in (ac, ae):
        sl(t)[0].const_set(fill, strided)
    _same(ae, ac, dtype)


# ---- fused nn kernels and their backward: every float dtype ------------------------------

def _forward_backward(emu, rng, dtype, shapes, program, terms=1):
    """program(*tensors) -> tensor, on cpu and on the emulated device from the same inputs;
    the outputs and the inputs' gradients (of a fixed random projection) agree."""
    arrays = [random_array(rng, s, dtype, -1.5, 1.5) for s in shapes]
    results = []
    for dev in ("cpu", emu):
        xs = [tl.tensor(a, device=dev, requires_grad=True) for a in arrays]
        out = program(*xs)
        proj = tl.tensor(np.linspace(-1, 1, out.numel()).reshape(out.shape), dtype=dtype, device=dev)
        (out * proj).sum().backward()
        results.append((out, [x.grad for x in xs]))
    (out_c, grads_c), (out_e, grads_e) = results
    _same(out_e, out_c, dtype, terms)
    for ge, gc in zip(grads_e, grads_c):
        _same(ge, gc, dtype, terms)


FUSED = {  # name: (input shapes, program). Norm backward rows: 37 (fit), 64 (fit, whole 16-byte
    # vectors), 4100 (longer than the fit kernels take: row kernel + column sums)
    "softmax": ([(3, 40)], lambda x: F.softmax(x, -1)),
    "log_softmax": ([(3, 40)], lambda x: F.log_softmax(x, -1)),
    "layer_norm_fit": ([(3, 37), (37,), (37,)], lambda x, w, b: F.layer_norm(x, (37,), w, b)),
    "layer_norm_fit_vec": ([(2, 64), (64,), (64,)], lambda x, w, b: F.layer_norm(x, (64,), w, b)),
    "layer_norm_long": ([(2, 4100), (4100,), (4100,)], lambda x, w, b: F.layer_norm(x, (4100,), w, b)),
    "rms_norm_fit": ([(3, 37), (37,)], lambda x, w: F.rms_norm(x, (37,), w)),
    "rms_norm_fit_vec": ([(2, 64), (64,)], lambda x, w: F.rms_norm(x, (64,), w)),
    "rms_norm_long": ([(2, 4100), (4100,)], lambda x, w: F.rms_norm(x, (4100,), w)),
    "gelu": ([(3, 7)], lambda x: F.gelu(x, approximate="tanh")),
    "gelu_erf": ([(3, 7)], lambda x: F.gelu(x)),
    "silu": ([(3, 7)], lambda x: F.silu(x)),
    "silu_mul": ([(3, 7), (3, 7)], lambda g, u: F.silu_mul(g, u)),
}


@pytest.mark.parametrize("dtype", D.FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(FUSED))
def test_fused_forward_backward(emu, rng, name, dtype):
    shapes, program = FUSED[name]
    _forward_backward(emu, rng, dtype, shapes, program, terms=shapes[0][-1])


@pytest.mark.parametrize("dtype", D.FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("cols, start", [(64, 0), (37, 0), (64, 1)], ids=["vectors", "odd", "misaligned"])
def test_add_rms_norm(emu, rng, dtype, cols, start):
    # add_rms_norm_<t> (no gradient: the fused kernel): 16-byte runs, and the element path
    # for rows that are not whole vectors or start off alignment
    a, r = (random_array(rng, (3, cols + start), dtype) for _ in range(2))
    w = random_array(rng, (cols,), dtype)
    with tl.no_grad():
        (n_e, s_e), (n_c, s_c) = (F.add_rms_norm(*(tl.tensor(v, dtype=dtype, device=dev)[..., start:] if v.ndim == 2
                                                   else tl.tensor(v, dtype=dtype, device=dev) for v in (a, r)),
                                                 cols, tl.tensor(w, dtype=dtype, device=dev)) for dev in (emu, "cpu"))
    _same(s_e, s_c, dtype)
    _same(n_e, n_c, dtype, terms=cols)


@pytest.mark.parametrize("stream, half", [(t, t) for t in D.FLOATS] + [(D.float32, D.float16), (D.float32, D.bfloat16)],
                         ids=lambda d: d.name)
def test_add_layer_norm(emu, rng, stream, half):
    # add_layer_norm_<t> / _f32_<h> and their backward add_layer_norm_bwd_* (contiguous rows of
    # whole vectors, both outputs used): the residual of `half`, the normed output cast to it
    arrays = [random_array(rng, s, dt, -1.5, 1.5) for s, dt in (((3, 64), stream), ((3, 64), half), ((64,), stream),
                                                                 ((64,), stream))]
    results = []
    for dev in ("cpu", emu):
        x, r, w, b = (tl.tensor(a, device=dev, requires_grad=True) for a in arrays)
        normed, total = F.add_layer_norm(x, r, 64, w, b, dtype=half)
        proj = tl.tensor(np.linspace(-1, 1, 3 * 64).reshape(3, 64), dtype=stream, device=dev)
        ((normed.to(stream) * proj).sum() + (total * proj).sum()).backward()
        results.append((normed, total, x.grad, r.grad, w.grad, b.grad))
    for got, ref in zip(*results):
        _same(got, ref, got.dtype, terms=64)


@pytest.mark.parametrize("dtype", D.FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("start", [0, 1], ids=["vectors", "misaligned"])
def test_rms_norm_linear(emu, rng, dtype, start):
    # gemv1_norm_<t> and gemv1_norm_silu_<t> (one row, no gradient: the fused kernels): 16-byte
    # runs, and the element path for a row that starts off alignment
    a, w = random_array(rng, (1, 64 + start), dtype), random_array(rng, (6, 64), dtype)
    g = random_array(rng, (64,), dtype)
    for gated in (False, True):
        with tl.no_grad():
            got, ref = (F.rms_norm_linear(tl.tensor(a, dtype=dtype, device=dev)[:, start:], 64,
                                          tl.tensor(g, dtype=dtype, device=dev), tl.tensor(w, dtype=dtype, device=dev),
                                          eps=1e-5, gated=gated) for dev in (emu, "cpu"))
        _same(got, ref, dtype, terms=64)


@pytest.mark.parametrize("dtype", D.FLOATS, ids=lambda d: d.name)
def test_few_rows_times_a_row_major_weight(emu, rng, dtype, monkeypatch):
    # gemv1_<t> (one row) and gemv_<t> (2-4 rows, when GEMV_MAX_ROWS lets them: as in
    # test_tensor_matmul), whole 16-byte runs and, offset by one element, none
    monkeypatch.setattr(matmul_ops, "GEMV_MAX_ROWS", 4)
    a, w = random_array(rng, (3, 65), dtype), random_array(rng, (5, 65), dtype)
    for rows in (1, 3):
        for start in (0, 1):
            with tl.no_grad():
                got, ref = (F.linear(tl.tensor(a, device=dev)[:rows, start:start + 64],
                                     tl.tensor(w, device=dev)[:, start:start + 64]) for dev in (emu, "cpu"))
            _same(got, ref, dtype, terms=64)


@pytest.mark.parametrize("dtype", D.FLOATS, ids=lambda d: d.name)
def test_int8_weight_products(emu, rng, dtype):
    # gemv1_q8_<t>, gemv_q8_<t> (with the residual), gemv1_q8_norm_<t>, gemv1_q8_norm_silu_<t>:
    # weight-only int8 (F.linear_int8, F.rms_norm_linear's scale), whole runs and, offset by one
    # element, none
    q = rng.integers(-127, 128, (6, 65)).astype(np.int8)
    scale, a, g = (random_array(rng, shape, dtype) for shape in ((6,), (3, 65), (64,)))
    res = random_array(rng, (3, 6), dtype)
    for start in (0, 1):
        for rows in (1, 3):
            with tl.no_grad():
                got, ref = (F.linear_int8(tl.tensor(a, dtype=dtype, device=dev)[:rows, start:start + 64],
                                          tl.tensor(q, device=dev)[:, start:start + 64],
                                          tl.tensor(scale, dtype=dtype, device=dev),
                                          residual=tl.tensor(res, dtype=dtype, device=dev)[:rows])
                            for dev in (emu, "cpu"))
            _same(got, ref, dtype, terms=64)
        for gated in (False, True):
            with tl.no_grad():
                got, ref = (F.rms_norm_linear(tl.tensor(a, dtype=dtype, device=dev)[:1, start:start + 64], 64,
                                              tl.tensor(g, dtype=dtype, device=dev),
                                              tl.tensor(q, device=dev)[:, start:start + 64], eps=1e-5, gated=gated,
                                              scale=tl.tensor(scale, dtype=dtype, device=dev))
                            for dev in (emu, "cpu"))
            _same(got, ref, dtype, terms=64)


@pytest.mark.parametrize("dtype", D.FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("variant", ["rope", "rope_i", "rope_thd"])
def test_rope_forward_backward(emu, rng, variant, dtype):
    theta = rng.uniform(0, 2 * np.pi, (5, 4))
    tables = {dev: [tl.tensor(f(theta), dtype=dtype, device=dev) for f in (np.cos, np.sin)] for dev in ("cpu", emu)}
    fn = getattr(F, variant)
    _forward_backward(emu, rng, dtype, [(2, 3, 5, 8) if variant != "rope_thd" else (2, 5, 3, 8)],
                      lambda x: fn(x, *tables[_name(x)]))


@pytest.mark.parametrize("dtype", D.FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("mode,reverse", [("LSTM", False), ("GRU", True), ("RNN_TANH", False), ("RNN_RELU", True)])
def test_rnn_cell_forward_backward(emu, rng, mode, reverse, dtype):
    """rnn_cell_<t> and rnn_cell_bwd_<t> (kernels/rnn.hip): one recurrent layer of 3 steps, batch
    2, hidden 4, its output and final states, against cpu's (its numpy layer; the half types its
    step-by-step ops)."""
    G = {"LSTM": 4, "GRU": 3}.get(mode, 1) * 4
    shapes = [(3, 2, 3), (2, 4)] + ([(2, 4)] if mode == "LSTM" else []) + [(G, 3), (G,), (G, 4), (G,)]

    def layer(x, h0, *rest):
        c0, rest = (rest[0], rest[1:]) if mode == "LSTM" else (None, rest)
        outs = F.rnn_layer(mode, x, h0, c0, *rest, reverse=reverse)
        return tl.cat([o.reshape(-1) for o in outs if o is not None])
    _forward_backward(emu, rng, dtype, shapes, layer, terms=8)


@pytest.mark.parametrize("dtype", D.FLOATS, ids=lambda d: d.name)
def test_rope_kv_cache(emu, rng, dtype):
    """A decode step's rope and cache write (b 2, 3 query and 1 key/value heads, 2 positions of 6)."""
    theta = rng.uniform(0, 2 * np.pi, (2, 4))
    qkv, kc, vc = (random_array(rng, shape, dtype, -1, 1) for shape in ((2, 5, 2, 8), (2, 1, 6, 8), (2, 1, 6, 8)))
    got = {}
    for dev in ("cpu", emu):
        cos, sin = (tl.tensor(f(theta), dtype=dtype, device=dev) for f in (np.cos, np.sin))
        caches = [tl.tensor(c, device=dev) for c in (kc, vc)]
        q = F.rope_kv_cache(tl.tensor(qkv, device=dev), cos, sin, *caches, tl.tensor([4, 1], device=dev))
        got[dev] = [q, *caches]
    for e, c in zip(got[emu], got["cpu"]):
        _same(e, c, dtype, terms=2)


@pytest.mark.parametrize("dtype", D.FLOATS, ids=lambda d: d.name)
def test_cross_entropy_forward_backward(emu, rng, dtype):
    target = rng.integers(0, 11, 6)
    targets = {dev: tl.tensor(target, device=dev) for dev in ("cpu", emu)}
    _forward_backward(emu, rng, dtype, [(6, 11)],
                      lambda x: F.cross_entropy(x, targets[_name(x)]).reshape(1), terms=11)


@pytest.mark.parametrize("capturable", [False, True], ids=["host", "capturable"])  # adamw[_many]_cap: device t, lr
@pytest.mark.parametrize("amsgrad", [False, True])  # batched (adamw_many) / one by one (adamw)
@pytest.mark.parametrize("dtype", D.FLOATS, ids=lambda d: d.name)
def test_adamw(emu, rng, dtype, amsgrad, capturable):
    arrays = [random_array(rng, s, dtype) for s in ((5,), (2, 3))]
    grads = [random_array(rng, a.shape, dtype) for a in arrays]
    final = {}
    for dev in ("cpu", emu):
        params = [tl.tensor(a, device=dev, requires_grad=True) for a in arrays]
        lr = tl.tensor(0.1, device=dev) if capturable else 0.1
        opt = tl.optim.AdamW(params, lr=lr, weight_decay=0.01, amsgrad=amsgrad, capturable=capturable)
        for _ in range(2):
            for p, g in zip(params, grads):
                p.grad = tl.tensor(g, device=dev)
            opt.step()
        final[dev] = params
    for pe, pc in zip(final[emu], final["cpu"]):
        _same(pe, pc, dtype, terms=4)


# ---- random numbers: statistics (the streams differ from cpu's by design) ----------------

@pytest.mark.parametrize("dtype", D.FLOATS, ids=lambda d: d.name)
def test_random(emu, dtype):
    tl.manual_seed(3)
    u = tl.rand(4096, dtype=dtype, device=emu).numpy().astype(np.float64)
    n = tl.randn(4096, dtype=dtype, device=emu).numpy().astype(np.float64)
    assert u.min() >= 0.0 and u.max() <= 1.0 and abs(u.mean() - 0.5) < 0.03 and abs(u.std() - 0.2887) < 0.03
    assert abs(n.mean()) < 0.06 and abs(n.std() - 1.0) < 0.06
    assert len(np.unique(u)) > (100 if dtype in (D.float16, D.bfloat16) else 4000)


# ---- attention: the flash kernels per padded head dim, the score-matrix path, backward ----

@pytest.mark.parametrize("dtype", D.FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("d", [32, 64, 128])
def test_attention_forward_backward(emu, rng, d, dtype, monkeypatch):
    # no mask: the flash kernels (f64: the score-matrix path); causal: the same kernels masked;
    # an additive mask under TENSORLITE_SDPA=gemm: the score matrix with attn_softmax
    mask = rng.uniform(-1, 0, (6, 6))
    masks = {dev: tl.tensor(mask, dtype=dtype, device=dev) for dev in ("cpu", emu)}
    shapes = [(1, 2, 6, d), (1, 2, 6, d), (1, 2, 6, d)]
    _forward_backward(emu, rng, dtype, shapes, lambda q, k, v: F.scaled_dot_product_attention(q, k, v), terms=d)
    _forward_backward(emu, rng, dtype, shapes,
                      lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), terms=d)
    if d == 32:
        monkeypatch.setenv("TENSORLITE_SDPA", "gemm")
        _forward_backward(emu, rng, dtype, shapes,
                          lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=masks[_name(q)]), terms=d)


@pytest.mark.parametrize("dtype", [D.float16, D.bfloat16], ids=lambda d: d.name)
def test_attention_full_tiles(emu, rng, dtype):
    # 32 query rows against 64 keys at head dim 64: whole tiles (a warp's 32 rows, a key tile of
    # 64), so that the matrix-core forward takes its unmasked full-tile path, which the 6 x 6
    # above never enters (a wrong scale constant there survived the tour before; clang-19's gfx11
    # bf16 code lost lane / 16 of every output column there: attention.hip, flash_fwd_mma);
    # causal: the same tiles cut by the diagonal
    for causal in (False, True):
        _forward_backward(emu, rng, dtype, [(1, 1, 32, 64), (1, 1, 64, 64), (1, 1, 64, 64)],
                          lambda q, k, v, c=causal: F.scaled_dot_product_attention(q, k, v, is_causal=c), terms=64)


@pytest.mark.parametrize("d, dv", [(32, 16), (64, 64), (100, 128)])  # attn_decode_part32/64/128
@pytest.mark.parametrize("dtype", [D.float32, D.float16, D.bfloat16], ids=lambda d: d.name)
def test_attention_decode(emu, rng, dtype, d, dv):
    # a forward of few query rows without gradients: the split-key decode kernels (attn_decode_*),
    # GQA, keys ending mid-chunk, and a bool mask that drops one query row's every key
    q, k, v = (random_array(rng, s, dtype, -1.5, 1.5) for s in ((1, 4, 2, d), (1, 2, 70, d), (1, 2, 70, dv)))
    keep = rng.random((1, 1, 2, 70)) < 0.7
    keep[:, :, 1] = False
    with tl.no_grad():
        got, ref = (F.scaled_dot_product_attention(*(tl.tensor(a, dtype=dtype, device=dev) for a in (q, k, v)),
                                                   attn_mask=tl.tensor(keep, device=dev)) for dev in (emu, "cpu"))
    _same(got, ref, dtype, terms=70)


@pytest.mark.parametrize("dtype", [D.float32, D.float16, D.bfloat16], ids=lambda d: d.name)
def test_attention_rescale_of_a_row_in_the_upper_lanes(emu, rng, dtype):
    # Only query row 11 of a 16-row tile meets a larger score in the second key tile: its
    # output must be rescaled. On a wave64 matrix-core tile that row sits in lanes 32-47;
    # the kernel's "did any row grow" vote was __any, which hiprtc built to test lanes 0-31
    # only, so the rescale was skipped (found here; tl_warp_any is now a full-width ballot).
    d, S = 64, 80
    q = np.zeros((1, 1, 16, d))
    q[0, 0, 11] = 1.0
    k = rng.uniform(-0.1, 0.1, (1, 1, S, d))
    k[0, 0, 70] = 0.5  # row 11's score there: 64 * 0.5 / sqrt(64) = 4; its others are near 0
    v = rng.uniform(-1, 1, (1, 1, S, d))
    got = F.scaled_dot_product_attention(*(tl.tensor(a, dtype=dtype, device=emu) for a in (q, k, v)))
    ref = F.scaled_dot_product_attention(*(tl.tensor(a, dtype=dtype) for a in (q, k, v)))
    _same(got, ref, dtype, terms=S)
