"""cat, stack, index_select, gather, scatter_add, index_add on every device, against
direct numpy references (np.take / loops)."""
import itertools

import numpy as np
import pytest

import tensorlite as tl
from conftest import FLOAT_DTYPES, as_f64, assert_close, random_array

DATA_DTYPES = FLOAT_DTYPES + (tl.int64, tl.uint32)
INDEX_DTYPES = (tl.int64, tl.uint32, tl.uint8)
SHAPE = (4, 5, 3)


def _ids(rng, n, high, dtype, shape=None):
    """Random indices in [0, high) with repeats (scatter/index_add must accumulate them)."""
    return rng.integers(0, high, size=shape if shape is not None else (n,)).astype(dtype.np)


def _ref_dtype(dtype):
    return np.float64 if dtype.is_floating_point else dtype.np


# ----------------------------------------------------------------------------- cat
@pytest.mark.parametrize("dtype", DATA_DTYPES + (tl.bool,), ids=lambda d: d.name)
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_cat(device, rng, dtype, dim):
    sizes = [2, 0, 3, 1]
    arrays = []
    for s in sizes:
        shape = list(SHAPE)
        shape[dim] = s
        arrays.append(random_array(rng, shape, dtype))
    got = tl.cat([tl.tensor(a, device=device) for a in arrays], dim)
    assert got.dtype is dtype
    assert_close(got, np.concatenate(arrays, axis=dim), dtype)


def test_cat_non_contiguous_and_single(device, rng):
    a = random_array(rng, (4, 6), tl.float32)
    x = tl.tensor(a, device=device)
    got = tl.cat([x.T, x.T[:, ::2], x[:2].T.contiguous()], dim=1)
    assert_close(got, np.concatenate([a.T, a.T[:, ::2], a[:2].T], axis=1), tl.float32)
    assert_close(tl.cat([x[1:3]]), a[1:3], tl.float32)
    e = x[:1].expand(3, 6)
    assert_close(tl.cat([e, x], 0), np.concatenate([np.broadcast_to(a[:1], (3, 6)), a]), tl.float32)


def test_cat_promotes_dtypes(device):
    got = tl.cat([tl.tensor([1, 2], device=device), tl.tensor([0.5], device=device)])
    assert got.dtype is tl.float32
    assert_close(got, [1.0, 2.0, 0.5], tl.float32)


# ----------------------------------------------------------------------------- stack
@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_stack(device, rng, dim):
    arrays = [random_array(rng, (3, 2), tl.float32) for _ in range(4)]
    tensors = [tl.tensor(a, device=device) for a in arrays]
    assert_close(tl.stack(tensors, dim), np.stack(arrays, axis=dim), tl.float32)
    assert_close(tl.stack([t.T for t in tensors], dim), np.stack([a.T for a in arrays], axis=dim), tl.float32)


def test_stack_of_empty_and_0d(device, rng):
    assert tl.stack([tl.zeros((0, 2), device=device)] * 3, 1).shape == (0, 3, 2)
    s = [tl.tensor(float(v), device=device) for v in (1.5, -2.0)]
    assert_close(tl.stack(s), [1.5, -2.0], tl.float32)


# ---------------------------------------------------------------------- index_select
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("dtype", DATA_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_select(device, rng, dtype, index_dtype, dim):
    a = random_array(rng, SHAPE, dtype)
    ids = _ids(rng, 7, SHAPE[dim], index_dtype)
    x, i = tl.tensor(a, device=device), tl.tensor(ids, device=device)
    expected = np.take(a, ids.astype(np.int64), axis=dim)
    assert_close(x.index_select(dim, i), expected, dtype)
    assert_close(tl.index_select(x, dim, i), expected, dtype)
    # strided source and strided index (ids below 3 fit every dim of the transposed view)
    small = ids % 3
    i_strided = tl.tensor(small, device=device)[::2]
    assert_close(x.transpose(0, 2).index_select(dim, i_strided),
                 np.take(a.transpose(2, 1, 0), small[::2].astype(np.int64), axis=dim), dtype)


def test_index_select_empty_index(device, rng):
    a = random_array(rng, SHAPE, tl.float32)
    got = tl.tensor(a, device=device).index_select(1, tl.tensor(np.zeros(0, np.int64), device=device))
    assert got.shape == (4, 0, 3)


# ---------------------------------------------------------------------------- gather
def _gather_ref(a, dim, ids):
    out = np.empty(ids.shape, a.dtype)
    for pos in itertools.product(*map(range, ids.shape)):
        src = list(pos)
        src[dim] = ids[pos]
        out[pos] = a[tuple(src)]
    return out


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("dtype", DATA_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(device, rng, dtype, index_dtype, dim):
    a = random_array(rng, SHAPE, dtype)
    ishape = list(SHAPE)
    ishape[dim] = 6                    # more picks than the dim holds: repeats
    ishape[(dim + 1) % 3] -= 1         # smaller than self outside `dim`, as PyTorch allows
    ids = _ids(rng, 0, SHAPE[dim], index_dtype, shape=ishape)
    x, i = tl.tensor(a, device=device), tl.tensor(ids, device=device)
    expected = _gather_ref(a, dim % 3, ids.astype(np.int64))
    assert_close(x.gather(dim, i), expected, dtype)
    assert_close(tl.gather(x, dim, i), expected, dtype)


def test_gather_strided_operands(device, rng):
    a = random_array(rng, (5, 6), tl.float32)
    ids = rng.integers(0, 5, size=(6, 4))
    got = tl.tensor(a, device=device).T.gather(1, tl.tensor(ids, device=device))   # transposed self
    assert_close(got, _gather_ref(a.T, 1, ids), tl.float32)
    ids_t = tl.tensor(ids.T.copy(), device=device).T            # non-contiguous index
    assert_close(tl.tensor(a, device=device).T.gather(1, ids_t), _gather_ref(a.T, 1, ids), tl.float32)


# ----------------------------------------------------------------------- scatter_add
def _scatter_add_ref(a, dim, ids, src):
    out = a.copy()
    for pos in itertools.product(*map(range, ids.shape)):
        dst = list(pos)
        dst[dim] = ids[pos]
        out[tuple(dst)] += src[pos]
    return out


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("dtype", DATA_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_add(device, rng, dtype, index_dtype, dim):
    a = random_array(rng, SHAPE, dtype, 0, 3)
    sshape = list(SHAPE)
    sshape[dim] = 7                    # more sources than slots: collisions accumulate
    src = random_array(rng, sshape, dtype, 0, 3)
    ids = _ids(rng, 0, SHAPE[dim], index_dtype, shape=sshape)
    x = tl.tensor(a, device=device)
    got = x.scatter_add(dim, tl.tensor(ids, device=device), tl.tensor(src, device=device))
    ref_src = as_f64(src) if dtype.is_floating_point else src
    expected = _scatter_add_ref(as_f64(a) if dtype.is_floating_point else a, dim % 3, ids.astype(np.int64), ref_src)
    assert_close(got, expected, dtype, terms=8)
    np.testing.assert_array_equal(x.numpy(), a)  # out of place: self unchanged


def test_scatter_add_strided_self_and_src(device, rng):
    a = random_array(rng, (6, 4), tl.float32)
    src = random_array(rng, (4, 5), tl.float32)
    ids = rng.integers(0, 4, size=(5, 4))
    x = tl.tensor(a, device=device).T                      # (4, 6) transposed
    s = tl.tensor(src, device=device)[:, ::1].T            # (5, 4) transposed
    i = tl.tensor(ids, device=device)
    got = x.scatter_add(0, i, s)
    assert_close(got, _scatter_add_ref(as_f64(a.T), 0, ids, as_f64(src.T)), tl.float32, terms=6)


# ------------------------------------------------------------------------- index_add
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("dtype", DATA_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_add(device, rng, dtype, index_dtype, dim):
    a = random_array(rng, SHAPE, dtype, 0, 3)
    ids = _ids(rng, 8, SHAPE[dim], index_dtype)
    sshape = list(SHAPE)
    sshape[dim] = 8
    src = random_array(rng, sshape, dtype, 0, 3)
    got = tl.tensor(a, device=device).index_add(dim, tl.tensor(ids, device=device), tl.tensor(src, device=device))
    expected = a.astype(_ref_dtype(dtype)).copy()
    np.add.at(expected, (slice(None),) * (dim % 3) + (ids.astype(np.int64),), src.astype(_ref_dtype(dtype)))
    assert_close(got, expected, dtype, terms=9)


def test_index_add_alpha_and_offset_views(device, rng):
    # a source that is a view with a non-zero offset (the candle CUDA pitfall)
    a = random_array(rng, (5, 3), tl.float32)
    big = random_array(rng, (9, 3), tl.float32)
    ids = np.array([4, 0, 4, 2])
    src = tl.tensor(big, device=device)[3:7]
    base = tl.tensor(random_array(rng, (8, 3), tl.float32), device=device)
    x = tl.tensor(a, device=device)
    got = x.index_add(0, tl.tensor(ids, device=device), src, alpha=2.0)
    expected = a.astype(np.float64).copy()
    np.add.at(expected, ids, 2.0 * as_f64(big[3:7]))
    assert_close(got, expected, tl.float32, terms=3)
    # a self that is an offset view, too
    got = base[2:7].index_add(0, tl.tensor(ids, device=device), src)
    expected = as_f64(base.numpy()[2:7]).copy()
    np.add.at(expected, ids, as_f64(big[3:7]))
    assert_close(got, expected, tl.float32, terms=3)


def test_index_ops_on_empty(device, rng):
    x = tl.tensor(random_array(rng, (3, 4), tl.float32), device=device)
    none = tl.tensor(np.zeros(0, np.int64), device=device)
    assert_close(x.index_add(0, none, tl.zeros((0, 4), device=device)), x.numpy(), tl.float32)
    assert x.gather(1, tl.zeros((3, 0), dtype=tl.int64, device=device)).shape == (3, 0)
    assert_close(x.scatter_add(1, tl.zeros((3, 0), dtype=tl.int64, device=device), tl.zeros((3, 0), device=device)),
                 x.numpy(), tl.float32)


def test_scatter_add_src_larger_than_index_and_its_gradient(device, rng):
    torch = pytest.importorskip("torch")
    a, src = random_array(rng, (3, 4), tl.float64), random_array(rng, (2, 5), tl.float64)
    ids = rng.integers(0, 3, (2, 4))
    x, s = tl.tensor(a, device=device, requires_grad=True), tl.tensor(src, device=device, requires_grad=True)
    got = x.scatter_add(0, tl.tensor(ids, device=device), s)  # only src's leading (2, 4) corner is read (PyTorch)
    assert_close(got, torch.tensor(a).scatter_add(0, torch.tensor(ids), torch.tensor(src)).numpy(), tl.float64)
    got.sum().backward()
    expected = np.zeros((2, 5))
    expected[:, :4] = 1.0
    assert_close(s.grad, expected, tl.float64)


def test_index_add_and_index_select_with_a_0d_index(device, rng):
    a = random_array(rng, (3, 2), tl.float32)
    x, i = tl.tensor(a, device=device), tl.tensor(1, device=device)
    assert_close(x.index_select(0, i), a[1:2], tl.float32)  # the dim is kept, as PyTorch's
    expected = a.copy()
    expected[1] += 1.0
    assert_close(x.index_add(0, i, tl.ones(1, 2, device=device)), expected, tl.float32)
