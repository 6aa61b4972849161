"""Property-based tests: random shapes (including 0 and 1), layouts made by permute, slice
with steps and offsets, and expand (stride 0), and broadcasting pairs. Every op family must
agree with numpy on such non-contiguous inputs, on every device.

TL_HYPOTHESIS_EXAMPLES raises the number of examples per test (default kept small so the
whole suite stays within CI's time limit)."""
import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorlite as tl
from conftest import as_f64, assert_close, random_array

EXAMPLES = int(os.environ.get("TL_HYPOTHESIS_EXAMPLES", "30"))
PROPERTY = settings(max_examples=EXAMPLES, deadline=None, derandomize=False,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

dims = st.integers(0, 4)
sizes = st.integers(0, 5)
shapes = st.lists(sizes, min_size=0, max_size=4).map(tuple)
nonempty_shapes = st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple)
seeds = st.integers(0, 2 ** 32 - 1)
float_dtypes = st.sampled_from([tl.float32, tl.float64, tl.float16, tl.bfloat16])
float32_only = st.just(tl.float32)


@st.composite
def layouts(draw, shape):
    """A recipe that turns `shape` into a non-trivial layout: the storage is allocated in a
    permuted order, each dim is sliced with an offset and a step, and some size-1 dims are
    expanded (stride 0)."""
    n = len(shape)
    return dict(
        perm=draw(st.permutations(range(n))),
        steps=[draw(st.integers(1, 3)) for _ in range(n)],
        offsets=[draw(st.integers(0, 2)) for _ in range(n)],
        expanded=[draw(st.booleans()) and draw(st.booleans()) for _ in range(n)],
    )


def build(recipe, shape, dtype, device, seed, low=-2.0, high=2.0):
    """(tensor with the recipe's layout, the numpy array of its values)."""
    rng = np.random.default_rng(seed)
    inner = [1 if e else s for s, e in zip(shape, recipe["expanded"])]
    full = [o + max(s, 1) * st_ for s, o, st_ in zip(inner, recipe["offsets"], recipe["steps"])]
    perm = recipe["perm"]
    inverse = list(np.argsort(perm))
    base = random_array(rng, [full[p] for p in perm], dtype, low, high)
    index = tuple(slice(o, o + s * st_, st_) for s, o, st_ in zip(inner, recipe["offsets"], recipe["steps"]))
    ref = np.broadcast_to(base.transpose(inverse)[index], shape)
    t = tl.tensor(base, device=device).permute(*inverse)[index].expand(*shape) if shape else \
        tl.tensor(base, device=device)
    return t, ref


@st.composite
def strided(draw, shape_strategy=shapes, dtype_strategy=float32_only):
    shape = draw(shape_strategy)
    return shape, draw(layouts(shape)), draw(dtype_strategy), draw(seeds)


@st.composite
def broadcast_pair(draw):
    """Two shapes that broadcast: b is a suffix of a with some dims set to 1, maybe with
    extra leading dims; randomly swapped."""
    a = draw(shapes)
    k = draw(st.integers(0, len(a)))
    b = tuple(1 if draw(st.booleans()) else s for s in a[len(a) - k:])
    if k == len(a) and draw(st.booleans()):  # b gets a leading dim that a lacks or has as 1
        b = (draw(st.integers(1, 3)),) + b
        a = (1,) + a if draw(st.booleans()) else a
    return (a, b) if draw(st.booleans()) else (b, a)


def _terms(shape, axis):
    if axis is None:
        return int(np.prod(shape))
    return int(np.prod([shape[d] for d in axis]))


# --------------------------------------------------------------------------- layouts
@PROPERTY
@given(case=strided(dtype_strategy=st.sampled_from([tl.float32, tl.bfloat16, tl.int64, tl.bool])))
def test_layout_values_round_trip(device, case):
    shape, recipe, dtype, seed = case
    x, ref = build(recipe, shape, dtype, device, seed)
    assert x.shape == shape
    assert_close(x, ref, dtype)
    c = x.contiguous()
    assert c.is_contiguous()
    assert_close(c, ref, dtype)
    assert_close(x.reshape(-1), ref.reshape(-1), dtype)
    assert_close(x.to("cpu"), ref, dtype)


@PROPERTY
@given(case=strided(shape_strategy=nonempty_shapes), data=st.data())
def test_views_of_views(device, case, data):
    shape, recipe, dtype, seed = case
    x, ref = build(recipe, shape, dtype, device, seed)
    d = data.draw(st.integers(0, len(shape) - 1))
    n = shape[d]
    start = data.draw(st.integers(-n, n))
    stop = data.draw(st.integers(-n, n))
    step = data.draw(st.sampled_from([1, 2, 3, -1, -2]))
    index = (slice(None),) * d + (slice(start, stop, step),)
    assert_close(x[index], ref[index], dtype)
    assert_close(x.transpose(0, d).unsqueeze(1), np.expand_dims(ref.swapaxes(0, d), 1), dtype)
    if len(shape) > 1:
        assert_close(x.flatten(0, 1), ref.reshape((-1,) + shape[2:]), dtype)
    assert_close(x.T, ref.transpose(), dtype)


# -------------------------------------------------------------------------- unary
UNARY = {"exp": np.exp, "abs": np.abs, "neg": np.negative, "floor": np.floor, "tanh": np.tanh,
         "sigmoid": lambda a: 1 / (1 + np.exp(-a)), "relu": lambda a: np.maximum(a, 0), "square": np.square}


@PROPERTY
@given(case=strided(dtype_strategy=float_dtypes), name=st.sampled_from(sorted(UNARY)))
def test_unary_on_strided(device, case, name):
    shape, recipe, dtype, seed = case
    x, ref = build(recipe, shape, dtype, device, seed)
    assert_close(getattr(x, name)(), UNARY[name](as_f64(ref)), dtype)


# ------------------------------------------------------------------------- binary
BINARY = {"add": (lambda x, y: x + y, np.add), "sub": (lambda x, y: x - y, np.subtract),
          "mul": (lambda x, y: x * y, np.multiply), "div": (lambda x, y: x / y, np.divide),
          "maximum": (tl.maximum, np.maximum), "minimum": (tl.minimum, np.minimum)}
CMP = {"lt": (lambda x, y: x < y, np.less), "eq": (lambda x, y: x == y, np.equal),
       "ge": (lambda x, y: x >= y, np.greater_equal)}


@PROPERTY
@given(pair=broadcast_pair(), ra=st.data(), name=st.sampled_from(sorted(BINARY)), dtype=float_dtypes, seed=seeds)
def test_binary_broadcasting_on_strided(device, pair, ra, name, dtype, seed):
    sa, sb = pair
    x, a = build(ra.draw(layouts(sa)), sa, dtype, device, seed)
    y, b = build(ra.draw(layouts(sb)), sb, dtype, device, seed + 1, 0.5, 2.0)  # divisor away from 0
    op, ref = BINARY[name]
    assert_close(op(x, y), ref(as_f64(a), as_f64(b)), dtype)


@PROPERTY
@given(pair=broadcast_pair(), ra=st.data(), name=st.sampled_from(sorted(CMP)), seed=seeds)
def test_comparisons_on_strided(device, pair, ra, name, seed):
    sa, sb = pair
    x, a = build(ra.draw(layouts(sa)), sa, tl.int64, device, seed, 0, 2)  # small ints: ties happen
    y, b = build(ra.draw(layouts(sb)), sb, tl.int64, device, seed + 1, 0, 2)
    op, ref = CMP[name]
    assert_close(op(x, y), ref(a, b), tl.bool)


@PROPERTY
@given(pair=broadcast_pair(), ra=st.data(), seed=seeds)
def test_where_on_strided(device, pair, ra, seed):
    sa, sb = pair
    c, cr = build(ra.draw(layouts(sa)), sa, tl.bool, device, seed)
    x, a = build(ra.draw(layouts(sb)), sb, tl.float32, device, seed + 1)
    y, b = build(ra.draw(layouts(sa)), sa, tl.float32, device, seed + 2)
    assert_close(tl.where(c, x, y), np.where(cr, a, b), tl.float32)
    if np.broadcast_shapes(sa, sb) == sb:  # masked_fill's mask broadcasts to self's shape
        assert_close(x.masked_fill(c, -7.5), np.where(cr, -7.5, a), tl.float32)
    assert_close(tl.where(c, -7.5, x), np.where(cr, -7.5, a), tl.float32)


# --------------------------------------------------------------------- reductions
@st.composite
def reduce_case(draw):
    shape, recipe, dtype, seed = draw(strided(dtype_strategy=float_dtypes))
    ndim = len(shape)
    axis = draw(st.one_of(st.none(), st.lists(st.integers(0, max(ndim - 1, 0)), min_size=1, max_size=ndim,
                                              unique=True).map(tuple))) if ndim else None
    return shape, recipe, dtype, seed, axis, draw(st.booleans())


@PROPERTY
@given(case=reduce_case(), name=st.sampled_from(["sum", "mean", "logsumexp", "var", "amax", "prod"]))
def test_reductions_on_strided(device, case, name):
    shape, recipe, dtype, seed, axis, keepdim = case
    n = _terms(shape, axis)
    if (name in ("mean", "logsumexp", "amax") and n == 0) or (name == "var" and n < 2) \
            or (name == "amax" and 0 in shape) or (name == "prod" and n > 40):
        return  # undefined, an error, or (prod) past f16's range: example-based tests cover it
    low, high = (0.9, 1.1) if name == "prod" else (-2.0, 2.0)
    x, ref = build(recipe, shape, dtype, device, seed, low, high)
    r = as_f64(ref)
    expected = {
        "sum": lambda: r.sum(axis=axis, keepdims=keepdim),
        "mean": lambda: r.mean(axis=axis, keepdims=keepdim),
        "var": lambda: r.var(axis=axis, ddof=1, keepdims=keepdim),
        "amax": lambda: r.max(axis=axis, keepdims=keepdim),
        "prod": lambda: r.prod(axis=axis, keepdims=keepdim),
        "logsumexp": lambda: np.log(np.exp(r).sum(axis=axis, keepdims=keepdim)),
    }[name]()
    dim = axis if axis is None or len(axis) > 1 else axis[0]
    assert_close(getattr(x, name)(dim=dim, keepdim=keepdim), expected, dtype, terms=n)


@PROPERTY
@given(case=strided(shape_strategy=nonempty_shapes, dtype_strategy=st.sampled_from([tl.float32, tl.int64])),
       data=st.data())
def test_argmax_and_max_with_dim_on_strided(device, case, data):
    shape, recipe, dtype, seed = case
    x, ref = build(recipe, shape, dtype, device, seed, 0, 3)
    d = data.draw(st.integers(-len(shape), len(shape) - 1))
    keepdim = data.draw(st.booleans())
    assert_close(x.argmax(d, keepdim=keepdim), np.argmax(ref, axis=d, keepdims=keepdim), tl.int64)
    values, indices = x.min(d, keepdim=keepdim)
    assert_close(values, np.min(ref, axis=d, keepdims=keepdim), dtype)
    assert_close(indices, np.argmin(ref, axis=d, keepdims=keepdim), tl.int64)


# ------------------------------------------------------------------------- matmul
@st.composite
def matmul_case(draw):
    m, k, n = (draw(st.integers(0, 5)) for _ in range(3))
    batch = draw(st.lists(st.integers(1, 3), max_size=2))
    batch_b = [1 if draw(st.booleans()) else s for s in batch]
    if draw(st.booleans()):
        batch, batch_b = batch_b, batch
    sa, sb = tuple(batch) + (m, k), tuple(batch_b) + (k, n)
    if draw(st.booleans()):  # a 1-D operand, PyTorch rules
        sa = (k,) if draw(st.booleans()) else sa
        sb = (k,) if sa != (k,) and draw(st.booleans()) else sb
    return sa, sb, draw(layouts(sa)), draw(layouts(sb)), draw(float_dtypes), draw(seeds)


@PROPERTY
@given(case=matmul_case())
def test_matmul_on_strided(device, case):
    sa, sb, la, lb, dtype, seed = case
    x, a = build(la, sa, dtype, device, seed)
    y, b = build(lb, sb, dtype, device, seed + 1)
    assert_close(x @ y, np.matmul(as_f64(a), as_f64(b)), dtype, terms=sa[-1])


# ---------------------------------------------------------------------- index ops
@PROPERTY
@given(case=strided(shape_strategy=nonempty_shapes, dtype_strategy=float_dtypes), data=st.data())
def test_index_ops_on_strided(device, case, data):
    shape, recipe, dtype, seed = case
    x, ref = build(recipe, shape, dtype, device, seed)
    rng = np.random.default_rng(seed)
    d = data.draw(st.integers(0, len(shape) - 1))
    ids = rng.integers(0, shape[d], size=data.draw(st.integers(0, 6)))
    it = tl.tensor(ids, device=device)
    assert_close(x.index_select(d, it), np.take(ref, ids, axis=d), dtype)
    gshape = list(shape)
    gshape[d] = data.draw(st.integers(0, 4))
    gids = rng.integers(0, shape[d], size=gshape)
    assert_close(x.gather(d, tl.tensor(gids, device=device)), np.take_along_axis(ref, gids, axis=d), dtype)
    src = random_array(rng, gshape, dtype)
    expected = as_f64(ref).copy()
    np.add.at(expected, tuple(gids if j == d else np.indices(gshape)[j] for j in range(len(shape))), as_f64(src))
    got = x.scatter_add(d, tl.tensor(gids, device=device), tl.tensor(src, device=device))
    assert_close(got, expected, dtype, terms=gshape[d] + 1)
    isrc = random_array(rng, shape[:d] + (len(ids),) + shape[d + 1:], dtype)
    expected = as_f64(ref).copy()
    np.add.at(expected, (slice(None),) * d + (ids,), as_f64(isrc))
    assert_close(x.index_add(d, it, tl.tensor(isrc, device=device)), expected, dtype, terms=len(ids) + 1)


@PROPERTY
@given(shape=nonempty_shapes, data=st.data(), seed=seeds)
def test_cat_and_stack_on_strided(device, shape, data, seed):
    d = data.draw(st.integers(0, len(shape) - 1))
    pieces, refs = [], []
    for i in range(data.draw(st.integers(1, 3))):
        s = list(shape)
        s[d] = data.draw(st.integers(0, 3))
        t, r = build(data.draw(layouts(tuple(s))), tuple(s), tl.float32, device, seed + i)
        pieces.append(t)
        refs.append(r)
    assert_close(tl.cat(pieces, d), np.concatenate(refs, axis=d), tl.float32)
    same = [build(data.draw(layouts(shape)), shape, tl.float32, device, seed + 7 + i) for i in range(2)]
    sd = data.draw(st.integers(0, len(shape)))
    assert_close(tl.stack([t for t, _ in same], sd), np.stack([r for _, r in same], axis=sd), tl.float32)


@PROPERTY
@given(case=strided(dtype_strategy=st.sampled_from([tl.float32, tl.float16, tl.bfloat16, tl.int64, tl.uint8,
                                                    tl.bool])),
       target=st.sampled_from([tl.float32, tl.float64, tl.bfloat16, tl.int64, tl.uint8, tl.bool]))
def test_casts_on_strided(device, case, target):
    shape, recipe, dtype, seed = case
    x, ref = build(recipe, shape, dtype, device, seed, 0, 200)
    got = x.to(target)
    if target is tl.bool:
        expected = as_f64(ref) != 0
    elif target.is_floating_point:
        expected = as_f64(ref).astype(target.np)
    else:
        expected = np.trunc(as_f64(ref)).astype(target.np)
    np.testing.assert_array_equal(got.numpy(), expected)
    assert got.dtype is target


# -------------------------------------------------------------------- conv / pool
@st.composite
def conv_case(draw):
    groups = draw(st.sampled_from([1, 2]))
    cin, cout = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride, padding, dilation = draw(st.integers(1, 2)), draw(st.integers(0, 2)), draw(st.integers(1, 2))
    hw = tuple(draw(st.integers(dilation * (kk - 1) + 1, 6)) for kk in k)
    sx = (draw(st.integers(0, 2)), cin) + hw
    return sx, (cout, cin // groups) + k, stride, padding, dilation, groups, draw(layouts(sx)), draw(seeds)


@PROPERTY
@given(case=conv_case())
def test_conv2d_and_pools_on_strided(device, case):
    from test_tensor_conv_pool import conv_ref, pool_ref
    sx, sw, stride, padding, dilation, groups, lx, seed = case
    x, xr = build(lx, sx, tl.float32, device, seed)
    w = random_array(np.random.default_rng(seed), sw, tl.float32)
    got = tl.conv2d(x, tl.tensor(w, device=device), stride=stride, padding=padding, dilation=dilation,
                    groups=groups)
    expected = conv_ref(as_f64(xr), as_f64(w), None, stride, padding, dilation, groups)
    assert_close(got, expected, tl.float32, terms=sw[1] * sw[2] * sw[3])
    k = min(sx[2], sx[3], 2)
    assert_close(tl.max_pool2d(x, k), pool_ref(as_f64(xr), "max", k), tl.float32)
    assert_close(tl.avg_pool2d(x, k), pool_ref(as_f64(xr), "avg", k), tl.float32, terms=k * k)


# ------------------------------------------------------- advanced indexing / setitem
@PROPERTY
@given(case=strided(shape_strategy=nonempty_shapes), data=st.data())
def test_index_tensors_and_masks_on_strided(device, case, data):
    shape, recipe, dtype, seed = case
    x, ref = build(recipe, shape, dtype, device, seed)
    rng = np.random.default_rng(seed)
    d = data.draw(st.integers(0, len(shape) - 1))
    ids = rng.integers(-shape[d], shape[d], size=data.draw(st.sampled_from([(0,), (3,), (2, 2)])))
    index = (slice(None),) * d + (ids,)
    got = x[(slice(None),) * d + (tl.tensor(ids, device=device),)]
    assert_close(got, ref[index], dtype)
    mask = rng.random(shape) < 0.5
    assert_close(x[tl.tensor(mask, device=device)], ref[mask], dtype)


@PROPERTY
@given(shape=nonempty_shapes, dtype=st.sampled_from([tl.float32, tl.bfloat16, tl.int64]), seed=seeds,
       data=st.data())
def test_setitem_scalar_through_strided_views(device, shape, dtype, seed, data):
    rng = np.random.default_rng(seed)
    a = random_array(rng, shape, dtype)
    x = tl.tensor(a, device=device)
    view_of_x = x.permute(*reversed(range(len(shape))))
    ref = a.copy()
    d = data.draw(st.integers(0, len(shape) - 1))
    n = shape[d]
    start, stop = data.draw(st.integers(0, n)), data.draw(st.integers(0, n))
    step = data.draw(st.integers(1, 3))
    index = (slice(None),) * d + (slice(start, stop, step),)
    value = 3 if dtype is tl.int64 else 3.25
    x[index] = value
    ref[index] = value
    assert_close(x, ref, dtype)
    assert_close(view_of_x, ref.transpose(), dtype)  # an earlier view sees the write
