"""Reductions over dim=int/tuple/None with keepdim, on every device, against numpy (float64)."""
import numpy as np
import pytest

import tensorlite as tl
from conftest import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, as_f64, assert_close, random_array

SHAPE = (3, 4, 5)
DIMS = [None, 0, -1, 1, (0, 2), (2, 0), (0, 1, 2), (-2,)]


def _axis(dim):
    return dim if dim is None or isinstance(dim, int) else tuple(dim)


def _terms(shape, dim):
    """How many values each output element accumulates."""
    if dim is None:
        return int(np.prod(shape))
    dims = (dim,) if isinstance(dim, int) else dim
    return int(np.prod([shape[d] for d in dims]))


def _numpy_logsumexp(a, axis, keepdims):
    m = np.max(a, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis) if axis is not None else out.reshape(())


FLOAT_REDUCTIONS = {
    "sum": lambda a, axis, keepdims: np.sum(a, axis=axis, keepdims=keepdims),
    "mean": lambda a, axis, keepdims: np.mean(a, axis=axis, keepdims=keepdims),
    "prod": lambda a, axis, keepdims: np.prod(a, axis=axis, keepdims=keepdims),
    "var": lambda a, axis, keepdims: np.var(a, axis=axis, keepdims=keepdims, ddof=1),
    "std": lambda a, axis, keepdims: np.std(a, axis=axis, keepdims=keepdims, ddof=1),
    "logsumexp": _numpy_logsumexp,
    "amax": lambda a, axis, keepdims: np.max(a, axis=axis, keepdims=keepdims),
    "amin": lambda a, axis, keepdims: np.min(a, axis=axis, keepdims=keepdims),
}


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", DIMS, ids=str)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(FLOAT_REDUCTIONS))
def test_float_reductions(device, rng, name, dtype, dim, keepdim):
    # prod: values near 1 keep the product of 60 numbers well inside every dtype's range
    lo, hi = (0.7, 1.3) if name == "prod" else (-2, 2)
    a = random_array(rng, SHAPE, dtype, lo, hi)
    x = tl.tensor(a, device=device)
    expected = FLOAT_REDUCTIONS[name](as_f64(a), _axis(dim), keepdim)
    got = getattr(x, name)(dim=dim, keepdim=keepdim)
    assert_close(got, expected, dtype, terms=_terms(SHAPE, dim))
    got = getattr(tl, name)(x, dim, keepdim=keepdim)
    assert_close(got, expected, dtype, terms=_terms(SHAPE, dim))


@pytest.mark.parametrize("name", list(FLOAT_REDUCTIONS))
def test_reduction_of_non_contiguous_input(device, rng, name):
    a = random_array(rng, (6, 5, 4), tl.float32, 0.7, 1.3)
    x = tl.tensor(a, device=device).permute(2, 0, 1)[:, 1::2]
    ref_in = as_f64(a).transpose(2, 0, 1)[:, 1::2]
    for dim in (None, 1, (0, 2)):
        expected = FLOAT_REDUCTIONS[name](ref_in, _axis(dim), False)
        assert_close(getattr(x, name)(dim=dim), expected, tl.float32, terms=_terms(ref_in.shape, dim))
    e = tl.tensor(a, device=device)[:, :1].expand(6, 7, 4)     # stride-0 dim
    ref_e = np.broadcast_to(as_f64(a)[:, :1], (6, 7, 4))
    assert_close(getattr(e, name)(dim=1), FLOAT_REDUCTIONS[name](ref_e, 1, False), tl.float32, terms=7)


def test_reductions_without_dim_return_0d(device, rng):
    a = random_array(rng, (4, 3), tl.float32)
    x = tl.tensor(a, device=device)
    for name in ("sum", "mean", "prod", "var", "std", "max", "min"):
        got = getattr(x, name)()
        assert got.shape == (), name
    assert_close(x.max(), as_f64(a).max(), tl.float32)
    assert_close(x.min(), as_f64(a).min(), tl.float32)
    assert_close(x.logsumexp(dim=(0, 1)), _numpy_logsumexp(as_f64(a), None, False), tl.float32, terms=12)


@pytest.mark.parametrize("dtype", INT_DTYPES + (tl.bool,), ids=lambda d: d.name)
def test_integer_sum_and_prod_count_in_int64(device, rng, dtype):
    a = random_array(rng, SHAPE, dtype, 0, 3)
    x = tl.tensor(a, device=device)
    for dim in (None, 1, (0, 2)):
        got = x.sum(dim=dim)
        assert got.dtype is tl.int64
        assert_close(got, np.sum(a.astype(np.int64), axis=_axis(dim)), tl.int64)
    for dim in (1, -1):  # at most 5 factors <= 3: no overflow
        got = x.prod(dim=dim)
        assert got.dtype is tl.int64
        assert_close(got, np.prod(a.astype(np.int64), axis=dim), tl.int64)
    got = x[0, 0].prod()
    assert got.dtype is tl.int64
    assert_close(got, np.prod(a[0, 0].astype(np.int64)), tl.int64)


def test_sum_with_dtype_argument(device, rng):
    a = random_array(rng, (5, 6), tl.float16)
    got = tl.tensor(a, device=device).sum(dim=1, dtype=tl.float64)
    assert_close(got, as_f64(a).sum(axis=1), tl.float64, terms=6)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_min_with_dim_return_values_and_indices(device, rng, dtype, keepdim):
    a = random_array(rng, SHAPE, dtype, 0, 4)
    x = tl.tensor(a, device=device)
    for dim in (0, 1, -1):
        for name, np_val, np_arg in (("max", np.max, np.argmax), ("min", np.min, np.argmin)):
            values, indices = getattr(x, name)(dim, keepdim=keepdim)
            assert values.dtype is dtype and indices.dtype is tl.int64
            assert_close(values, np_val(a, axis=dim, keepdims=keepdim), dtype)
            assert_close(indices, np_arg(a, axis=dim, keepdims=keepdim), tl.int64)
            assert getattr(x, name)(dim=dim).values.shape == np_val(a, axis=dim).shape


@pytest.mark.parametrize("dtype", [tl.float32, tl.bfloat16, tl.int64, tl.uint8], ids=lambda d: d.name)
@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax_argmin_pick_first_of_ties(device, rng, dtype, keepdim):
    a = rng.integers(0, 3, SHAPE).astype(dtype.np)  # many ties
    x = tl.tensor(a, device=device)
    for dim in (0, 1, 2, -1):
        assert_close(x.argmax(dim, keepdim=keepdim), np.argmax(a, axis=dim, keepdims=keepdim), tl.int64)
        assert_close(x.argmin(dim=dim, keepdim=keepdim), np.argmin(a, axis=dim, keepdims=keepdim), tl.int64)
        assert_close(tl.argmax(x, dim), np.argmax(a, axis=dim), tl.int64)
    # no dim: index into the flattened tensor
    assert_close(x.argmax(), np.argmax(a), tl.int64)
    assert_close(x.argmin(), np.argmin(a), tl.int64)
    assert_close(x.T.argmax(), np.argmax(a.T), tl.int64)


def test_max_min_propagate_nan(device):
    x = tl.tensor([[1.0, float("nan"), 3.0], [4.0, 5.0, -1.0]], device=device)
    assert np.isnan(x.max().item())
    got = x.max(1).values.numpy()
    assert np.isnan(got[0]) and got[1] == 5.0


def test_var_std_correction(device, rng):
    a = random_array(rng, (4, 6), tl.float64)
    x = tl.tensor(a, device=device)
    assert_close(x.var(1, correction=0), a.var(axis=1), tl.float64, terms=6)
    assert_close(x.var(1, unbiased=False), a.var(axis=1), tl.float64, terms=6)
    assert_close(x.std(0, keepdim=True), a.std(axis=0, ddof=1, keepdims=True), tl.float64, terms=4)
    assert_close(x.std(), a.std(ddof=1), tl.float64, terms=24)


def test_mean_of_integers_is_float(device, rng):
    a = random_array(rng, (3, 4), tl.int64, -5, 5)
    got = tl.tensor(a, device=device).mean(dim=0)
    assert got.dtype.is_floating_point
    assert_close(got, a.mean(axis=0), got.dtype, terms=3, check_dtype=False)


def test_logsumexp_is_stable_for_large_values(device):
    a = np.array([[1000.0, 1000.0], [-1000.0, -999.0]], np.float32)
    got = tl.tensor(a, device=device).logsumexp(1)
    assert_close(got, [1000 + np.log(2), -999 + np.log1p(np.exp(-1.0))], tl.float32)
    inf = tl.tensor([[-np.inf, -np.inf], [np.inf, 1.0]], device=device).logsumexp(1)
    np.testing.assert_array_equal(inf.numpy(), [-np.inf, np.inf])


# ------------------------------------------------------------------- empty / size 1
def test_empty_reductions_follow_pytorch(device):
    e = tl.zeros((0, 3), device=device)
    assert_close(e.sum(), 0.0, tl.float32)
    assert_close(e.sum(0), np.zeros(3), tl.float32)
    assert e.sum(1).shape == (0,)
    assert e.sum(0, keepdim=True).shape == (1, 3)
    assert_close(e.prod(0), np.ones(3), tl.float32)
    assert np.isnan(e.mean().item())
    assert e.max(1).values.shape == (0,)
    assert_close(e.logsumexp(0), np.full(3, -np.inf), tl.float32)
    with pytest.raises(tl.TensorliteError):
        e.max()
    with pytest.raises(tl.TensorliteError):
        e.argmax()
    with pytest.raises(tl.TensorliteError):
        e.max(0)


def test_size_one_and_0d_reductions(device, rng):
    a = random_array(rng, (1, 5, 1), tl.float32)
    x = tl.tensor(a, device=device)
    assert_close(x.sum(0), a.sum(axis=0), tl.float32)
    assert_close(x.max(2).values, a.max(axis=2), tl.float32)
    assert_close(x.mean((0, 2), keepdim=True), a.mean(axis=(0, 2), keepdims=True), tl.float32)
    s = tl.tensor(2.5, device=device)
    assert_close(s.sum(), 2.5, tl.float32)
    assert_close(s.sum(0), 2.5, tl.float32)
    assert_close(s.argmax(), 0, tl.int64)
    assert_close(s.max(), 2.5, tl.float32)


def test_large_reduction_accumulates_accurately(device, rng):
    a = random_array(rng, (3, 20000), tl.float16, 0, 1)
    got = tl.tensor(a, device=device).sum(1)
    # accumulated in f32, rounded once: within a few f16 ulps of the exact sum
    np.testing.assert_allclose(got.numpy().astype(np.float64), as_f64(a).sum(1), rtol=2e-3)
    got = tl.tensor(a, device=device).to(tl.float32).mean()
    np.testing.assert_allclose(got.item(), as_f64(a).mean(), rtol=1e-5)


@pytest.mark.parametrize("shape, dims, cut", [((3000, 70), 0, None), ((100, 500), 0, None),
                                              ((40, 30, 96), (0, 1), None), ((700, 3, 90), (0, 1), 2)],
                         ids=["chunked", "one-chunk", "merged-dims", "unmergeable-dims"])
@pytest.mark.parametrize("dtype", [tl.float32, tl.bfloat16], ids=lambda d: d.name)
def test_reductions_over_outer_dims(device, rng, shape, dims, cut, dtype):
    # Reductions over non-innermost dims (a bias gradient: sum over the batch) take the GPU's
    # column kernel: warps across the kept columns, the reduced range split over blocks.
    # cut: keep the first `cut` of dim 1, so the reduced dims cannot merge into one.
    a = random_array(rng, shape, dtype, -2, 2)
    a[5, ...] = a[9, ...]  # ties: argmax/argmin must pick the first occurrence
    x, ref = tl.tensor(a, device=device), as_f64(a)
    if cut:
        x, ref = x[:, :cut], ref[:, :cut]
    axis = dims if isinstance(dims, int) else tuple(dims)
    assert_close(x.sum(dims), ref.sum(axis), dtype, terms=_terms(ref.shape, dims))
    assert_close(x.amax(dims), ref.max(axis), dtype)
    assert_close(x.amin(dims), ref.min(axis), dtype)
    if isinstance(dims, int):
        np.testing.assert_array_equal(x.argmax(dims).numpy(), ref.argmax(axis))
        np.testing.assert_array_equal(x.argmin(dims).numpy(), ref.argmin(axis))


# Column reductions (the GPU's reduce_cols): 16-byte loads of neighbouring columns where
# every row is aligned, else one load per element; a partial last vector; the reduced range
# split over blocks whose last one combines the partials (n_chunks > 1) and resets its
# counter for the next launch. (shape, dims, view): view slices the input first.
COLUMN_CASES = {
    "vector-chunked": ((2000, 256), 0, None),
    "odd-columns": ((1500, 129), 0, None),                          # rows not aligned
    "misaligned-view": ((900, 136), 0, np.s_[1:, 1:]),              # aligned stride, odd offset
    "narrowed-columns": ((1200, 264), 0, np.s_[:, :259]),           # aligned rows, odd count
    "3d-dim0": ((600, 6, 40), 0, None),
    "3d-dim1": ((12, 300, 64), 1, None),                            # strided outer, still vectors
    "3d-dims01": ((50, 40, 72), (0, 1), None),
    "3d-transposed-dim0": ((80, 96, 70), 0, "T12"),                  # outer strides (1, 96)
    "short-columns": ((5, 3000), 0, None),                          # few rows, many columns
}


@pytest.mark.parametrize("case", list(COLUMN_CASES))
@pytest.mark.parametrize("dtype", [tl.float32, tl.bfloat16, tl.float16, tl.int64, tl.uint8],
                         ids=lambda d: d.name)
def test_column_reductions(device, rng, case, dtype):
    shape, dims, view = COLUMN_CASES[case]
    a = random_array(rng, shape, dtype, -3, 3) if dtype.is_floating_point else random_array(rng, shape, dtype, 0, 9)
    if dtype.is_floating_point:
        a[3, ...] = a[1, ...]  # ties: argmax/argmin must pick the first occurrence
        a[2, 3] = a[4, 3] = np.nan  # NaN wins max/min and their arg*, first occurrence
    x, ref = tl.tensor(a, device=device), (as_f64(a) if dtype.is_floating_point else a.astype(np.int64))
    if view == "T12":
        x, ref = x.transpose(1, 2), ref.transpose(0, 2, 1)
    elif view is not None:
        x, ref = x[view], ref[view]
    axis = dims if isinstance(dims, int) else tuple(dims)
    terms = _terms(ref.shape, dims)
    first = x.sum(dims)
    assert_close(first, ref.sum(axis), dtype if dtype.is_floating_point else tl.int64, terms=terms)
    assert_close(x.sum(dims, keepdim=True), ref.sum(axis, keepdims=True),
                 dtype if dtype.is_floating_point else tl.int64, terms=terms)
    assert_close(x.amax(dims), ref.max(axis), dtype)
    assert_close(x.amin(dims, keepdim=True), ref.min(axis, keepdims=True), dtype)
    if isinstance(dims, int):
        assert_close(x.argmax(dims), ref.argmax(axis), tl.int64)
        assert_close(x.argmin(dims, keepdim=True), np.expand_dims(ref.argmin(axis), axis), tl.int64)
    # a full reduction in between (the chunked row kernel shares the counters), then the
    # same column sum again: bit for bit the same (fixed order; counters back at 0)
    assert_close(x.to(tl.float64).sum(), ref.sum(), tl.float64, terms=ref.size)
    assert x.sum(dims).numpy().tobytes() == first.numpy().tobytes()
