"""Assignment through indices and the scatter family on every device, against numpy (values of
every dtype) and against cpu, which is checked against PyTorch where it is installed (semantics,
gradients; conftest.on_cpu_and): x[idx] = v with index tensors, masks,
non-adjacent indices; x[:, idx] += 1; index_put(_), scatter(_), scatter_reduce(_), index_copy(_),
index_fill(_), masked_scatter(_), masked_fill_, take_along_dim; the index ops on 0-d tensors;
the errors of bad input."""
import numpy as np
import pytest

import tensorlite as tl
from conftest import ALL_DTYPES, assert_close, on_cpu_and, optional_torch, random_array

torch = optional_torch()  # None without PyTorch: only the torch checks use it

ALL = tl.dtype.ALL
SHAPE = (3, 4, 5)
# index expressions over SHAPE, as numpy arrays (int64 ids, bool masks): no index repeats
CASES = {
    "one_index": lambda r: (np.array([2, 0]),),
    "dim1": lambda r: (slice(None), np.array([3, 0, 1])),
    "2d_index_then_slice": lambda r: (np.array([[0, 2]]), slice(1, 3)),
    "non_adjacent": lambda r: (np.array([0, 2]), slice(None), np.array([1, 3])),
    "broadcast_pair": lambda r: (np.array([1]), np.array([0, 2, 3])),
    "negative_ids": lambda r: (Ellipsis, np.array([-1, 0])),
    "int_then_index": lambda r: (0, np.array([1, 2]), slice(None)),
    "none_then_index": lambda r: (None, np.array([0, 1])),
    "mask_all_dims": lambda r: (r.random(SHAPE) < 0.5,),
    "mask_then_index": lambda r: (r.random(SHAPE[:2]) < 0.5, np.array([4])),
    "mask_middle": lambda r: (slice(None), r.random(SHAPE[1]) < 0.5),
    "index_mask_non_adjacent": lambda r: (np.array([2]), slice(None), r.random(SHAPE[2]) < 0.5),
}


def _tl_index(idx, device):
    return tuple(tl.tensor(i, device=device) if isinstance(i, np.ndarray) else i for i in idx)


def _torch(a):
    """A numpy array as a torch tensor (bf16 through f32; uint32, which torch can't index, as int64)."""
    a = np.asarray(a)
    if a.dtype.name == "bfloat16":
        return torch.tensor(a.astype(np.float32)).to(torch.bfloat16)
    return torch.tensor(a.astype(np.int64) if a.dtype == np.uint32 else a)


def _back(t, dtype):
    return (t.float() if t.dtype == torch.bfloat16 else t).detach().numpy().astype(dtype.np)


# ---- x[idx] and x[idx] = v ----------------------------------------------------------------

@pytest.mark.parametrize("case", CASES)
def test_getitem_advanced(device, rng, case):
    a = random_array(rng, SHAPE, tl.float32)
    idx = CASES[case](rng)
    got = tl.tensor(a, device=device)[_tl_index(idx, device)]
    assert_close(got, a[idx], tl.float32)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("value", ["scalar", "full", "broadcast"])
def test_setitem_advanced(device, rng, case, value):
    _check_setitem(device, rng, tl.float32, CASES[case](rng), value)


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: d.name)
@pytest.mark.parametrize("case", ["non_adjacent", "mask_all_dims"])
def test_setitem_every_dtype(device, rng, dtype, case):
    _check_setitem(device, rng, dtype, CASES[case](rng), "full")
    _check_setitem(device, rng, dtype, CASES[case](rng), "scalar")


def _check_setitem(device, rng, dtype, idx, value):
    a = random_array(rng, SHAPE, dtype)
    shape = a[idx].shape
    v = random_array(rng, shape if value == "full" else shape[-1:], dtype) if value != "scalar" else \
        random_array(rng, (), dtype)[()].item()
    x = tl.tensor(a, device=device)
    view = x[1:]  # a view of x sees the write
    x[_tl_index(idx, device)] = tl.tensor(v, device=device) if value != "scalar" else v
    a[idx] = v
    assert_close(x, a, dtype)
    assert_close(view, a[1:], dtype)


def test_setitem_into_a_view_and_value_cast(device, rng):
    a = random_array(rng, (4, 6), tl.float32)
    x = tl.tensor(a, device=device)
    x.T[tl.tensor([5, 0], device=device), 1:3] = tl.tensor([[1, 2], [3, 4]], device=device)  # int64 -> float32
    a.T[[5, 0], 1:3] = [[1, 2], [3, 4]]
    assert_close(x, a, tl.float32)


@pytest.mark.parametrize("index_dtype", [tl.int64, tl.int32, tl.uint32, tl.uint8], ids=lambda d: d.name)
def test_index_tensor_dtypes(device, rng, index_dtype):
    a = random_array(rng, (4, 5), tl.float32)
    x, i = tl.tensor(a, device=device), tl.tensor([3, 1], dtype=index_dtype, device=device)
    j = tl.tensor([[4], [0]], dtype=index_dtype, device=device)
    assert_close(x[i], a[[3, 1]], tl.float32)
    assert_close(x[i, j], a[[3, 1], [[4], [0]]], tl.float32)
    x[:, i] = 1.0
    x[i, j.T] = tl.tensor([[2.0, 3.0]], device=device)
    a[:, [3, 1]] = 1.0
    a[[3, 1], [[4, 0]]] = [[2.0, 3.0]]
    assert_close(x, a, tl.float32)


def test_python_bools_index_as_0d_masks(device, rng):
    a = random_array(rng, (2, 3), tl.float32)
    idxs = (True, False, (0, True), (None, True, 1), (slice(None), False))

    def against_torch(got):
        for idx, g in zip(idxs, got):
            assert_close(g, torch.tensor(a)[idx].numpy(), tl.float32)
    on_cpu_and(device, lambda dev: [tl.tensor(a, device=dev)[idx] for idx in idxs], against_torch)

    def write(dev):
        x = tl.tensor(a, device=dev)
        x[True, 1] = 5.0
        return x

    def write_against_torch(got):
        t = torch.tensor(a)
        t[True, 1] = 5.0
        assert_close(got, t.numpy(), tl.float32)
    on_cpu_and(device, write, write_against_torch)


def test_augmented_assignment_does_not_accumulate(device, rng):
    a = random_array(rng, (3, 4), tl.float32)
    m = a > 0

    def run(dev):
        x = tl.tensor(a, device=dev)
        x[:, tl.tensor([1, 1, 3], device=dev)] += 1  # read, add, write back: the repeat adds once (PyTorch)
        after_add = x.clone()
        x[tl.tensor(m, device=dev)] *= 2
        return after_add, x

    def against_torch(got):
        t = torch.tensor(a)
        t[:, torch.tensor([1, 1, 3])] += 1
        assert_close(got[0], t.numpy(), tl.float32)
        t[torch.tensor(m)] *= 2
        assert_close(got[1], t.numpy(), tl.float32)
    on_cpu_and(device, run, against_torch)


def test_setitem_gradients(device, rng):
    a, v, w = (random_array(rng, s, tl.float64) for s in ((3, 4, 5), (2, 4), (3, 4, 5)))
    idx = (np.array([0, 2]), slice(None), np.array([1, 3]))

    def run(dev):
        x, xv = tl.tensor(a, device=dev, requires_grad=True), tl.tensor(v, device=dev, requires_grad=True)
        h = x * 1
        h[_tl_index(idx, dev)] = xv * 3
        h[tl.tensor(a > 1, device=dev)] = 0.0
        (h * tl.tensor(w, device=dev)).sum().backward()
        return h, x.grad, xv.grad

    def against_torch(got):
        tx, tv = torch.tensor(a, requires_grad=True), torch.tensor(v, requires_grad=True)
        th = tx * 1
        th[torch.tensor([0, 2]), :, torch.tensor([1, 3])] = tv * 3
        th[torch.tensor(a > 1)] = 0.0
        (th * torch.tensor(w)).sum().backward()
        for g, ref in zip(got, (th.detach(), tx.grad, tv.grad)):
            assert_close(g, ref.numpy(), tl.float64)
    on_cpu_and(device, run, against_torch)


def test_getitem_advanced_gradient_and_result_is_not_a_view(device, rng):
    a = random_array(rng, SHAPE, tl.float64)

    def grad(dev):
        x = tl.tensor(a, device=dev, requires_grad=True)
        y = (x * 1)[tl.tensor([1, 1], device=dev), :, tl.tensor([0, 4], device=dev)]
        y += 1  # a new tensor, not a view: the in-place op records (PyTorch)
        (y * y).sum().backward()
        return x.grad

    def against_torch(got):
        tx = torch.tensor(a, requires_grad=True)
        ty = (tx * 1)[torch.tensor([1, 1]), :, torch.tensor([0, 4])]
        ty += 1
        (ty * ty).sum().backward()
        assert_close(got, tx.grad.numpy(), tl.float64)
    on_cpu_and(device, grad, against_torch)


# ---- index_put ----------------------------------------------------------------------------

@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put(device, rng, accumulate):
    a, w = random_array(rng, (4, 3), tl.float64), random_array(rng, (4, 3), tl.float64)
    ids = np.array([3, 0, 3, 1]) if accumulate else np.array([3, 0, 1])  # repeats only where they add
    v = random_array(rng, (len(ids), 3), tl.float64)

    def run(dev):
        x, xv = tl.tensor(a, device=dev, requires_grad=True), tl.tensor(v, device=dev, requires_grad=True)
        out = x.index_put((tl.tensor(ids, device=dev),), xv, accumulate=accumulate)
        (out * tl.tensor(w, device=dev)).sum().backward()
        # in place, with None for a whole dim and a broadcast value
        y = tl.tensor(a, device=dev)
        assert y.index_put_((None, tl.tensor([2, 0], device=dev)), tl.tensor(5.0, dtype=tl.float64, device=dev),
                            accumulate) is y
        return out, x.grad, xv.grad, y

    def against_torch(got):
        tx, tv = torch.tensor(a, requires_grad=True), torch.tensor(v, requires_grad=True)
        tout = tx.index_put((torch.tensor(ids),), tv, accumulate=accumulate)
        assert_close(got[0], tout.detach().numpy(), tl.float64, terms=2)
        (tout * torch.tensor(w)).sum().backward()
        assert_close(got[1], tx.grad.numpy(), tl.float64)
        assert_close(got[2], tv.grad.numpy(), tl.float64)
        ty = torch.tensor(a).index_put_((torch.arange(4)[:, None], torch.tensor([2, 0])),  # torch takes no None here
                                        torch.tensor(5.0, dtype=torch.float64), accumulate)
        assert_close(got[3], ty.numpy(), tl.float64)
    on_cpu_and(device, run, against_torch)


# ---- scatter, scatter_reduce ------------------------------------------------------------

def _unique_ids(rng, shape, size, dim):
    """Ids along dim with no repeats within a line (scatter's duplicate writes are unordered)."""
    lines = np.moveaxis(np.zeros(shape, np.int64), dim, -1)
    for pos in np.ndindex(lines.shape[:-1]):
        lines[pos] = rng.permutation(size)[:shape[dim]]
    return np.moveaxis(lines, -1, dim)


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: d.name)
def test_scatter_every_dtype(device, rng, dtype):
    a, src = random_array(rng, (4, 5), dtype, 0, 3), random_array(rng, (3, 6), dtype, 0, 3)
    ids = _unique_ids(rng, (3, 5), 4, 0)   # src larger than index: its corner is read
    rep = rng.integers(0, 4, (3, 5))  # repeats: the reductions combine them
    reductions = [(reduce, include_self)
                  for reduce in ("sum", "prod", "amax", "amin") + (("mean",) if dtype is not tl.bool else ())
                  for include_self in (True, False)]

    def scatter(dev):
        x, i, s = tl.tensor(a, device=dev), tl.tensor(ids, device=dev), tl.tensor(src, device=dev)
        return x.scatter(0, i, s), x.scatter(0, i, 1)

    def scatter_against_torch(got):
        ta, ti, ts = _torch(a), torch.tensor(ids), _torch(src)
        assert_close(got[0], _back(ta.scatter(0, ti, ts), dtype), dtype)
        assert_close(got[1], _back(ta.scatter(0, ti, 1), dtype), dtype)
    on_cpu_and(device, scatter, scatter_against_torch)

    def scatter_reduce(dev):
        x, r, s = tl.tensor(a, device=dev), tl.tensor(rep, device=dev), tl.tensor(src, device=dev)
        return [x.scatter_reduce(0, r, s, reduce, include_self=include_self) for reduce, include_self in reductions]

    def scatter_reduce_against_torch(got):
        for (reduce, include_self), g in zip(reductions, got):
            ref = _torch(a).scatter_reduce(0, torch.tensor(rep), _torch(src), reduce, include_self=include_self)
            if dtype is tl.uint32:  # its reference ran in int64: wrap as uint32 does
                ref = ref % 2 ** 32
            assert_close(g, _back(ref, dtype), dtype, terms=4)
    on_cpu_and(device, scatter_reduce, scatter_reduce_against_torch, terms=4)


@pytest.mark.parametrize("index_dtype", [tl.int64, tl.uint32, tl.uint8], ids=lambda d: d.name)
def test_scatter_index_dtypes_and_strided_operands(device, rng, index_dtype):
    a, src = random_array(rng, (5, 4), tl.float32), random_array(rng, (4, 6), tl.float32)
    ids = _unique_ids(rng, (4, 3), 5, 1)

    def run(dev):
        x = tl.tensor(a, device=dev).T                        # (4, 5) transposed self
        s = tl.tensor(src, device=dev)[:, ::2]                 # (4, 3) strided src
        i = tl.tensor(ids.T.copy().astype(index_dtype.np), device=dev).T  # non-contiguous index
        return x.scatter(1, i, s), x.scatter_reduce(1, i % 2, s, "amax")

    def against_torch(got):
        ref = torch.tensor(a).T.scatter(1, torch.tensor(ids), torch.tensor(src)[:, ::2])
        assert_close(got[0], ref.numpy(), tl.float32)
        ref = torch.tensor(a).T.scatter_reduce(1, torch.tensor(ids % 2), torch.tensor(src)[:, ::2], "amax")
        assert_close(got[1], ref.numpy(), tl.float32)
    on_cpu_and(device, run, against_torch)


def test_scatter_reduce_nan_propagates(device):
    a, src, ids = np.array([1.0, 2.0, 3.0], np.float32), np.array([np.nan, 5.0, 0.5], np.float32), np.array([0, 0, 2])
    reductions = ("amax", "amin")

    def run(dev):
        x = tl.tensor(a, device=dev)
        return [x.scatter_reduce(0, tl.tensor(ids, device=dev), tl.tensor(src, device=dev), reduce)
                for reduce in reductions]

    def against_torch(got):
        for reduce, g in zip(reductions, got):
            ref = torch.tensor(a).scatter_reduce(0, torch.tensor(ids), torch.tensor(src), reduce)
            assert_close(g, ref.numpy(), tl.float32)
    on_cpu_and(device, run, against_torch)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_gradients(device, rng, reduce, include_self):
    # small integers: ties for amax/amin and zeros for prod, the cases PyTorch's formulas treat apart
    a = rng.integers(0, 3, (3, 5)).astype(np.float64)
    src = rng.integers(0, 3, (4, 5)).astype(np.float64)
    ids, w = rng.integers(0, 3, (4, 5)), random_array(rng, (3, 5), tl.float64)

    def run(dev):
        x, s = tl.tensor(a, device=dev, requires_grad=True), tl.tensor(src, device=dev, requires_grad=True)
        out = x.scatter_reduce(0, tl.tensor(ids, device=dev), s, reduce, include_self=include_self)
        (out * tl.tensor(w, device=dev)).sum().backward()
        return out, x.grad, s.grad

    def against_torch(got):
        tx, ts = torch.tensor(a, requires_grad=True), torch.tensor(src, requires_grad=True)
        tout = tx.scatter_reduce(0, torch.tensor(ids), ts, reduce, include_self=include_self)
        (tout * torch.tensor(w)).sum().backward()
        for g, ref in zip(got, (tout.detach(), tx.grad, ts.grad)):
            assert_close(g, ref.numpy(), tl.float64)
    on_cpu_and(device, run, against_torch)


def test_scatter_gradients_and_in_place(device, rng):
    a, src, w = (random_array(rng, s, tl.float64) for s in ((4, 3), (2, 3), (4, 3)))
    ids = _unique_ids(rng, (2, 3), 4, 0)

    def run(dev):
        x, s = tl.tensor(a, device=dev, requires_grad=True), tl.tensor(src, device=dev, requires_grad=True)
        h = x * 2
        h.scatter_(0, tl.tensor(ids, device=dev), s).scatter_(1, tl.tensor([[0], [2]], device=dev), 7.0)
        h.scatter_reduce_(0, tl.tensor(ids, device=dev), s * s, "amin", include_self=False)
        (h * tl.tensor(w, device=dev)).sum().backward()
        old = tl.scatter(tl.tensor(a, device=dev), 0, tl.tensor(ids, device=dev), src=tl.tensor(src, device=dev),
                         reduce="multiply")
        return h, x.grad, s.grad, old

    def against_torch(got):
        tx, ts = torch.tensor(a, requires_grad=True), torch.tensor(src, requires_grad=True)
        th = tx * 2
        th.scatter_(0, torch.tensor(ids), ts).scatter_(1, torch.tensor([[0], [2]]), 7.0)
        th.scatter_reduce_(0, torch.tensor(ids), ts * ts, "amin", include_self=False)
        (th * torch.tensor(w)).sum().backward()
        old = torch.tensor(a).scatter_reduce(0, torch.tensor(ids), torch.tensor(src), "prod")
        for g, ref in zip(got, (th.detach(), tx.grad, ts.grad, old)):
            assert_close(g, ref.numpy(), tl.float64)
    on_cpu_and(device, run, against_torch)


# ---- index_copy, index_fill, masked_scatter, masked_fill_, take_along_dim -------------------

@pytest.mark.parametrize("dtype", [tl.float32, tl.bfloat16, tl.int64, tl.uint8, tl.bool], ids=lambda d: d.name)
def test_index_copy_and_fill_values(device, rng, dtype):
    a, src = random_array(rng, (3, 5), dtype), random_array(rng, (3, 2), dtype)

    def run(dev):
        x, i = tl.tensor(a, device=dev), tl.tensor([4, 1], device=dev)
        copied, filled = x.index_copy(1, i, tl.tensor(src, device=dev)), x.index_fill(1, i, 1)
        assert x.index_fill_(0, tl.tensor([2], device=dev), 0) is x
        return copied, filled, x

    def against_torch(got):
        ta, ti = _torch(a), torch.tensor([4, 1])
        assert_close(got[0], _back(ta.index_copy(1, ti, _torch(src)), dtype), dtype)
        assert_close(got[1], _back(ta.index_fill(1, ti, 1), dtype), dtype)
        assert_close(got[2], _back(ta.index_fill_(0, torch.tensor([2]), 0), dtype), dtype)
    on_cpu_and(device, run, against_torch)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_index_copy_in_place_writes_only_the_indexed_positions(device, rng, dtype):
    """index_copy_ without autograd writes through the storage's scatter_set (a KV cache's
    per-token write): every dtype, ids of another integer dtype, a view at an offset."""
    a, src = random_array(rng, (2, 7, 3), dtype), random_array(rng, (2, 2, 3), dtype)
    base = tl.tensor(np.concatenate([a, a]), device=device)
    x = base[2:]                                   # contiguous, at an offset in its storage
    ids = tl.tensor(np.array([5, 1], np.uint8), device=device)
    assert x.index_copy_(1, ids, tl.tensor(src, device=device)) is x
    want = a.copy()
    want[:, [5, 1]] = src
    assert_close(x, want, dtype)
    assert_close(base[:2], a, dtype)               # the rest of the storage is untouched
    t = tl.tensor(a, device=device).transpose(0, 2)   # (3, 7, 2), not contiguous: the general in-place path
    s2 = random_array(rng, (3, 1, 2), dtype)
    t.index_copy_(1, tl.tensor([6], device=device), tl.tensor(s2, device=device))
    want = a.transpose(2, 1, 0).copy()
    want[:, [6]] = s2
    assert_close(t, want, dtype)


def test_index_copy_fill_masked_scatter_gradients(device, rng):
    a, src, w = (random_array(rng, s, tl.float64) for s in ((4, 3), (2, 3), (4, 3)))
    mask = np.zeros(12, bool)
    mask[rng.choice(12, 5, replace=False)] = True  # 5 of source's 6 elements are taken
    mask = mask.reshape(4, 3)

    def run(dev):
        x, s = tl.tensor(a, device=dev, requires_grad=True), tl.tensor(src, device=dev, requires_grad=True)
        v = tl.tensor(2.5, dtype=tl.float64, device=dev, requires_grad=True)
        out = x.index_copy(0, tl.tensor([3, 0], device=dev), s).index_fill(1, tl.tensor([2, 2], device=dev), v)
        out = out.masked_scatter(tl.tensor(mask, device=dev), s * 2)
        (out * tl.tensor(w, device=dev)).sum().backward()
        return out, x.grad, s.grad, v.grad

    def against_torch(got):
        tx, ts, tv = (torch.tensor(t, requires_grad=True) for t in (a, src, np.float64(2.5)))
        tout = tx.index_copy(0, torch.tensor([3, 0]), ts).index_fill(1, torch.tensor([2, 2]), tv)
        tout = tout.masked_scatter(torch.tensor(mask), ts * 2)
        (tout * torch.tensor(w)).sum().backward()
        for g, ref in zip(got, (tout.detach(), tx.grad, ts.grad, tv.grad)):
            assert_close(g, ref.numpy(), tl.float64)
    on_cpu_and(device, run, against_torch)


def test_masked_scatter_broadcast_mask_and_masked_fill_(device, rng):
    a, src = random_array(rng, (3, 4), tl.float32), random_array(rng, (13,), tl.float32)
    row = np.array([True, False, True, True])

    def run(dev):
        x = tl.tensor(a, device=dev)
        got = x.masked_scatter(tl.tensor(row, device=dev), tl.tensor(src, device=dev))
        assert x.masked_scatter_(tl.tensor(row, device=dev), tl.tensor(src, device=dev)) is x
        assert_close(x, got.numpy(), tl.float32)
        return got
    on_cpu_and(device, run, lambda got: assert_close(
        got, torch.tensor(a).masked_scatter(torch.tensor(row), torch.tensor(src)).numpy(), tl.float32))
    leaf = tl.tensor(a, device=device, requires_grad=True)
    h = leaf * 1
    h.masked_fill_(tl.tensor(row, device=device), -1.0)
    h.sum().backward()
    assert_close(h, np.where(row, -1.0, a), tl.float32)
    assert_close(leaf.grad, np.broadcast_to(np.where(row, 0.0, 1.0), a.shape), tl.float32)


@pytest.mark.parametrize("dim", [None, 0, 1, -1])
def test_take_along_dim(device, rng, dim):
    a = random_array(rng, (3, 4), tl.float64)
    ids = rng.integers(0, 3, (2, 4)) if dim == 0 else rng.integers(0, 4, (3, 1) if dim is not None else (5,))
    w = random_array(rng, ids.shape, tl.float64)  # the result has the indices' shape in each case here

    def run(dev):
        x = tl.tensor(a, device=dev, requires_grad=True)
        out = tl.take_along_dim(x, tl.tensor(ids, device=dev), dim)
        (out * tl.tensor(w, device=dev)).sum().backward()
        # indices broadcast against x outside dim
        broadcast = x.detach().take_along_dim(tl.tensor([[0, 3]], device=dev), 1) if dim == 1 else None
        return out, x.grad, broadcast

    def against_torch(got):
        tx = torch.tensor(a, requires_grad=True)
        tout = torch.take_along_dim(tx, torch.tensor(ids), dim)
        assert_close(got[0], tout.detach().numpy(), tl.float64)
        (tout * torch.tensor(w)).sum().backward()
        assert_close(got[1], tx.grad.numpy(), tl.float64)
        if dim == 1:
            assert_close(got[2], torch.take_along_dim(torch.tensor(a), torch.tensor([[0, 3]]), 1).numpy(), tl.float64)
    on_cpu_and(device, run, against_torch)


# ---- the index ops on 0-d tensors, as PyTorch ----------------------------------------------

def test_index_ops_on_0d_self(device):
    x = tl.tensor(3.0, device=device)
    zero, one = tl.tensor(0, device=device), tl.tensor([0], device=device)
    src, five = tl.tensor(2.0, device=device), tl.tensor(5.0, device=device)
    assert x.index_select(0, one).shape == () and x.index_select(0, one).item() == 3.0
    assert x.gather(0, zero).item() == 3.0 and x.gather(0, tl.tensor([0, 0], device=device)).tolist() == [3.0, 3.0]
    assert x.scatter_add(0, zero, src).item() == 5.0 and x.index_add(0, one, src).item() == 5.0
    assert x.scatter(0, zero, five).item() == 5.0 and x.scatter(-1, zero, 7.0).item() == 7.0
    assert x.scatter_reduce(0, zero, src, "amax").item() == 3.0 and x.index_copy(0, zero, src).item() == 2.0
    assert x.index_fill(0, one, 9.0).shape == () and x.index_fill(0, one, 9.0).item() == 9.0
    # a 0-d index keeps the dim (PyTorch's index_select)
    assert tl.tensor([[1, 2], [3, 4]], device=device).index_select(0, tl.tensor(1, device=device)).tolist() == [[3, 4]]
    with pytest.raises(tl.IndexOutOfRange, match="dimension 1 out of range"):
        x.gather(1, zero)


# ---- errors -----------------------------------------------------------------------------------

def test_errors(device):
    x = tl.zeros(3, 4, device=device)
    i = tl.tensor([0, 5], device=device)
    with pytest.raises(tl.IndexOutOfRange, match="index 5 is out of bounds for a dim of size 4"):
        x[tl.tensor([0, 1], device=device), i] = 1.0  # 0 * 4 + 5 is in range of the 12 elements: still caught
    with pytest.raises(tl.IndexOutOfRange, match="index -4 is out of bounds for a dim of size 3"):
        x[tl.tensor([-4], device=device), tl.tensor([0], device=device)]
    with pytest.raises(tl.IndexOutOfRange, match="index 3 is out of bounds for a dim of size 3"):
        x[tl.tensor([3], device=device)] = 1.0
    with pytest.raises(tl.ShapeError, match=r"values do not broadcast to the indexed shape \(2, 4\)"):
        x[tl.tensor([0, 1], device=device)] = tl.ones(3, device=device)
    with pytest.raises(tl.DTypeError, match="index tensors must be integer or bool"):
        x[tl.tensor([0.5], device=device)] = 1.0
    with pytest.raises(tl.IndexOutOfRange, match="mask shape does not match"):
        x[tl.tensor([True, False], device=device)] = 1.0
    with pytest.raises(tl.IndexOutOfRange, match="negative steps"):
        x[::-1] = 1.0
    assert x.tolist() == [[0.0] * 4] * 3  # every refusal left x as it was
    ids = tl.tensor([[0, 1]], device=device)
    with pytest.raises(tl.IndexOutOfRange, match="out of range"):
        x.scatter(1, tl.tensor([[4]], device=device), 1.0)
    with pytest.raises(tl.DTypeError, match="src must have the dtype of self"):
        x.scatter(1, ids, tl.ones(1, 2, dtype=tl.int64, device=device))
    with pytest.raises(tl.ShapeError, match="index must have self's number of dims"):
        x.scatter(1, tl.tensor([0, 1], device=device), 1.0)
    with pytest.raises(tl.ShapeError, match="sizes no larger than src's"):
        x.scatter_reduce(1, ids, tl.ones(1, 1, device=device), "sum")
    with pytest.raises(tl.ArgumentError, match="reduce must be 'sum', 'prod', 'mean', 'amax' or 'amin'"):
        x.scatter_reduce(1, ids, tl.ones(1, 2, device=device), "max")
    with pytest.raises(tl.DTypeError, match="index must be an int64, uint32 or uint8 tensor"):
        x.index_copy(0, tl.tensor([0.0], device=device), tl.ones(1, 4, device=device))
    with pytest.raises(tl.ShapeError, match=r"a source of shape \(2, 4\)"):
        x.index_copy(0, tl.tensor([0, 1], device=device), tl.ones(1, 4, device=device))
    with pytest.raises(tl.DTypeError, match="value must be a number or a 0-d tensor"):
        x.index_fill(0, tl.tensor([0], device=device), tl.ones(2, device=device))
    with pytest.raises(tl.DTypeError, match="values must have the dtype of self"):
        x.index_put((tl.tensor([0], device=device),), tl.tensor([1], device=device))
    with pytest.raises(tl.ShapeError, match="source has fewer elements than mask's 9 True values"):
        x.masked_scatter(tl.tensor([True, True, True, False], device=device), tl.ones(2, device=device))
    with pytest.raises(tl.DTypeError, match="bool mask"):
        x.masked_scatter(tl.ones(3, 4, device=device), tl.ones(12, device=device))
    with pytest.raises(tl.ShapeError, match="same number of dims"):
        tl.take_along_dim(x, tl.tensor([0], device=device), 1)
    with pytest.raises(tl.DTypeError, match="mean of bool"):
        tl.ones(2, dtype=tl.bool, device=device).scatter_reduce(0, tl.tensor([0], device=device),
                                                                 tl.ones(1, dtype=tl.bool, device=device), "mean")


def test_in_place_on_a_leaf_that_requires_grad_is_refused(device):
    w = tl.zeros(3, device=device, requires_grad=True)
    with pytest.raises(tl.TensorliteError, match="leaf tensor that requires grad"):
        w[tl.tensor([0], device=device)] = 1.0
    with pytest.raises(tl.TensorliteError, match="leaf tensor that requires grad"):
        w.scatter_(0, tl.tensor([0], device=device), 1.0)
    with tl.no_grad():
        w.index_put_((tl.tensor([1], device=device),), tl.tensor([2.0], device=device))
    assert w.tolist() == [0.0, 2.0, 0.0]
