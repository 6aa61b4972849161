"""Sorting, scans and searches (tensorlite/sorting.py) on every device against cpu, and cpu against
PyTorch where it is installed (conftest.on_cpu_and):
sort/argsort/msort/topk/kthvalue/median (stable, descending, ties, NaN, rows longer than a
block), cumsum/cumprod (every dtype, rows longer than a tile, gradients with zeros),
searchsorted/bucketize, unique, bincount, nonzero, multinomial, and bad input."""
import numpy as np
import pytest

import tensorlite as tl
from tensorlite import dtype as D
from tensorlite.backends.rocm.ops import sort as gpu_sort

from conftest import ALL_DTYPES, FLOAT_DTYPES, assert_close, on_cpu_and, optional_torch, random_array

torch = optional_torch()  # None without PyTorch: only the torch checks use it


def _t(a):
    """A numpy array (bf16, u32 included) as a torch tensor (u32 as int64: the same order)."""
    a = np.asarray(a)
    if a.dtype == D.bfloat16.np:
        return torch.tensor(a.astype(np.float32)).to(torch.bfloat16)
    return torch.tensor(a.astype(np.int64) if a.dtype == np.uint32 else a)


def _n(t):
    return (t.float() if t.dtype == torch.bfloat16 else t).detach().numpy()


def _with_ties(rng, shape, dtype, nan=True):
    """Small integers (many ties) in `dtype`; floats get a few NaNs."""
    a = random_array(rng, shape, dtype, -3, 3)
    if dtype.is_floating_point:
        a = np.round(a.astype(np.float32))
        if nan:
            a.flat[rng.choice(a.size, max(1, a.size // 9), replace=False)] = np.nan
        a = a.astype(dtype.np)
    return a


def _same_sort(got, ref):
    v, i = got
    assert i.dtype is tl.int64
    np.testing.assert_array_equal(i.numpy(), ref.indices.numpy())
    np.testing.assert_array_equal(v.numpy().astype(np.float64), _n(ref.values).astype(np.float64))


# ---- sort and what is made of it -------------------------------------------------------

@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_sort_is_stable_with_ties_and_nan(device, rng, dtype, descending):
    a = _with_ties(rng, (3, 4, 7), dtype)
    dims = (-1, 1)  # the last dim, and strided rows

    def run(dev):
        x = tl.tensor(a, device=dev)
        return [tl.sort(x, dim=dim, descending=descending, stable=True) for dim in dims], x.argsort(0, descending)

    def against_torch(got):
        for dim, sorted_ in zip(dims, got[0]):
            _same_sort(sorted_, torch.sort(_t(a), dim=dim, descending=descending, stable=True))
        np.testing.assert_array_equal(got[1].numpy(), torch.argsort(_t(a), dim=0, descending=descending, stable=True))
    on_cpu_and(device, run, against_torch, exact=True)


@pytest.mark.parametrize("dtype, n", [(d, 37) for d in ALL_DTYPES] + [(D.float32, 200), (D.int64, 256)],
                         ids=lambda v: getattr(v, "name", str(v)))
def test_sort_rows_longer_than_a_block_merge_in_global_memory(device, rng, monkeypatch, dtype, n):
    # the GPU sorts chunks of SORT_CHUNK in shared memory and merges them with global-memory
    # steps: a small chunk takes rows of a few dozen elements through that path
    monkeypatch.setattr(gpu_sort, "SORT_CHUNK", 16)
    a = _with_ties(rng, (2, n), dtype)
    orders = (False, True)

    def against_torch(got):
        for descending, sorted_ in zip(orders, got):
            _same_sort(sorted_, torch.sort(_t(a), descending=descending, stable=True))
    on_cpu_and(device, lambda dev: [tl.tensor(a, device=dev).sort(descending=d) for d in orders], against_torch,
               exact=True)


def test_sort_beyond_the_shared_memory_capacity(device, rng):
    n = gpu_sort.SORT_CAP + 1
    a = _with_ties(rng, (1, n), D.float32)
    on_cpu_and(device, lambda dev: tl.tensor(a, device=dev).sort(descending=True),
               lambda got: _same_sort(got, torch.sort(_t(a), descending=True, stable=True)), exact=True)


def test_sort_of_0d_empty_and_single(device):
    v, i = tl.tensor(2.5, device=device).sort()
    assert v.shape == () and v.item() == 2.5 and i.item() == 0
    v, i = tl.zeros(3, 0, device=device).sort()
    assert v.shape == (3, 0) and i.shape == (3, 0) and i.dtype is tl.int64
    assert tl.tensor([[7]], device=device).sort(0).indices.tolist() == [[0]]
    assert tl.msort(tl.tensor([[2, 0], [1, 3]], device=device)).tolist() == [[1, 0], [2, 3]]


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES + (D.int64, D.uint8), ids=lambda d: d.name)
def test_topk(device, rng, dtype, largest):
    a = rng.permutation(36).reshape(4, 9).astype(dtype.np)  # distinct: the indices are unique
    b = np.array([1.0, np.nan, 3.0], np.float32)
    cases = ((-1, 3), (0, 2), (1, 9), (1, 0))

    def run(dev):
        x = tl.tensor(a, device=dev)
        return [x.topk(k, dim, largest=largest) for dim, k in cases], tl.topk(tl.tensor(b, device=dev), 2)

    def against_torch(got):
        for (dim, k), top in zip(cases, got[0]):
            _same_sort(top, torch.topk(_t(a), k, dim, largest=largest))
        _same_sort(got[1], torch.topk(torch.tensor(b), 2))
    on_cpu_and(device, run, against_torch, exact=True)


def test_kthvalue_and_median(device, rng):
    a = np.stack([rng.permutation(7) for _ in range(3)]).astype(np.float32)
    b = np.array([[1.0, np.nan, 3.0, np.nan, 0.0], [4.0, 2.0, 1.0, 3.0, 5.0], [2.0, 1.0, 4.0, 3.0, 0.5]], np.float32)
    kth = [(k, keepdim) for k in (1, 4, 7) for keepdim in (False, True)]
    med = ((1, False), (0, True), (-1, True))

    def run(dev):
        x, y = tl.tensor(a, device=dev), tl.tensor(b, device=dev)
        assert np.isnan(y.median().item())
        return {"kthvalue": [x.kthvalue(k, 1, keepdim) for k, keepdim in kth],
                "median": [y.median(dim, keepdim) for dim, keepdim in med], "median_all": y[1:].median().item(),
                "nanmedian": y.nanmedian(1), "nanmedian_all": y.nanmedian().item()}

    def against_torch(got):
        ta, tb = torch.tensor(a), torch.tensor(b)
        for (k, keepdim), kv in zip(kth, got["kthvalue"]):
            _same_sort(kv, torch.kthvalue(ta, k, 1, keepdim))
        for (dim, keepdim), m in zip(med, got["median"]):
            _same_sort(m, torch.median(tb, dim, keepdim))
        assert got["median_all"] == torch.median(tb[1:]).item()
        _same_sort(got["nanmedian"], torch.nanmedian(tb, 1))
        assert got["nanmedian_all"] == torch.nanmedian(tb).item()
    on_cpu_and(device, run, against_torch, exact=True)
    even = tl.tensor([[4, 1, 3, 2]], device=device)  # the lower median, as PyTorch
    assert even.median().item() == 2 and even.median(1).indices.tolist() == [3]
    assert tl.tensor(3.0, device=device).median(0).values.item() == 3.0


def test_sort_topk_kthvalue_median_gradients(device, rng):
    a = rng.permutation(24).reshape(4, 6).astype(np.float32) / 4
    g = rng.standard_normal((4, 6)).astype(np.float32)
    cases = [
        (lambda m, t: m.sort(1, descending=True).values * t, True),
        (lambda m, t: m.sort(0).values * t, True),
        (lambda m, t: m.topk(3, 1).values * t[:, :3], True),
        (lambda m, t: m.kthvalue(2, 0).values * t[0], True),
        (lambda m, t: m.median(1).values * t[:, 0], True),
        (lambda m, t: m.median() * t[0, 0], True),
    ]
    for fn, _ in cases:
        def grad(dev, fn=fn):
            x = tl.tensor(a, device=dev, requires_grad=True)
            fn(x, tl.tensor(g, device=dev)).sum().backward()
            return x.grad

        def against_torch(got, fn=fn):
            tx = torch.tensor(a, requires_grad=True)
            fn(tx, torch.tensor(g)).sum().backward()
            assert_close(got, tx.grad.numpy())
        on_cpu_and(device, grad, against_torch)


# ---- scans -----------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_cumsum_cumprod_every_dtype(device, rng, dtype, op):
    lo, hi = (0.5, 1.5) if op == "cumprod" else (-2, 2)
    a = random_array(rng, (3, 4, 6), dtype, lo, hi)
    terms = 6 if dtype.is_floating_point else 1
    dims = (-1, 0)

    def run(dev):
        x = tl.tensor(a, device=dev)
        got = [getattr(x, op)(dim) for dim in dims]
        want = D.int64 if not dtype.is_floating_point else dtype  # integers and bool promote, as PyTorch
        assert all(g.dtype is want for g in got)
        return got

    def against_torch(got):
        for dim, scan in zip(dims, got):
            assert_close(scan, _n(getattr(torch, op)(_t(a), dim)), terms=terms)
    on_cpu_and(device, run, against_torch, terms=terms)
    on_cpu_and(device, lambda dev: getattr(tl, op)(tl.tensor(a, device=dev), 2, dtype=tl.float64),
               lambda got: assert_close(got, _n(getattr(torch, op)(_t(a), 2, dtype=torch.float64))))


@pytest.mark.parametrize("dtype", [D.float32, D.bfloat16, D.int64], ids=lambda d: d.name)
def test_scans_of_rows_longer_than_a_tile_carry_across_tiles(device, rng, dtype):
    a = random_array(rng, (2, 1500), dtype, -1, 1)

    def against_torch(got):
        ref = torch.cumsum(_t(a).double() if dtype.is_floating_point else _t(a), 1)
        # bf16 rounds each output once from an f32 running sum: compare with the f64 sum
        assert_close(got, _n(ref).astype(dtype.np) if dtype is D.int64 else _n(ref),
                     dtype, terms=1500, check_dtype=False)
    on_cpu_and(device, lambda dev: tl.tensor(a, device=dev).cumsum(1), against_torch, terms=1500)
    p = np.exp(rng.uniform(-0.01, 0.01, (2, 1500))).astype(np.float32)
    assert_close(tl.tensor(p, device=device).cumprod(1), np.cumprod(p.astype(np.float64), 1), terms=1500)


def _check_scan_gradient(device, op, a, g, dim, terms):
    """d sum(x.op(dim) * g) / dx in float32 on device against cpu, and cpu against PyTorch's in a's dtype."""
    def grad(dev):
        x = tl.tensor(a, dtype=tl.float32, device=dev, requires_grad=True)
        (getattr(x, op)(dim) * tl.tensor(g, dtype=tl.float32, device=dev)).sum().backward()
        return x.grad

    def against_torch(got):
        tx = torch.tensor(a, requires_grad=True)
        (getattr(tx, op)(dim) * torch.tensor(g)).sum().backward()
        assert_close(got, tx.grad.numpy(), terms=terms)
    on_cpu_and(device, grad, against_torch, terms=terms)


def test_cumsum_gradient(device, rng):
    a = random_array(rng, (3, 5), D.float32)
    g = random_array(rng, (3, 5), D.float32)
    for dim in (0, 1):
        _check_scan_gradient(device, "cumsum", a, g, dim, terms=5)


@pytest.mark.parametrize("zeros", [(), (2,), (0, 4), (3, 3)], ids=str)
def test_cumprod_gradient_with_and_without_zeros(device, rng, zeros):
    a = rng.uniform(0.5, 1.5, (2, 6)) * rng.choice([-1, 1], (2, 6))
    for j in zeros:
        a[0, j] = 0.0
    g = rng.standard_normal((2, 6))
    for dim in (1, 0):
        _check_scan_gradient(device, "cumprod", a, g, dim, terms=6)


# ---- searches --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_searchsorted_every_dtype(device, rng, dtype):
    seq = np.sort(random_array(rng, (3, 8), dtype, 0, 6), axis=-1)
    vals = random_array(rng, (3, 5), dtype, 0, 6)
    s, v = tl.tensor(seq, device=device), tl.tensor(vals, device=device)
    ref = {side: np.stack([np.searchsorted(seq[r].astype(np.float64), vals[r].astype(np.float64), side)
                           for r in range(3)]) for side in ("left", "right")}
    assert_close(tl.searchsorted(s, v), ref["left"])
    assert_close(tl.searchsorted(s, v, right=True), ref["right"])
    assert_close(tl.searchsorted(s, v, side="right"), ref["right"])
    flat = np.searchsorted(seq[0].astype(np.float64), vals.astype(np.float64), "left")  # 1-D sequence, any values
    assert_close(tl.searchsorted(s[0], v), flat)
    assert_close(tl.searchsorted(s.mT.contiguous().mT, v.mT.contiguous().mT), ref["left"])  # strided operands


def test_searchsorted_nan_scalar_sorter_and_bucketize(device, rng):
    seq = np.array([[1.0, 2.0, np.nan], [0.0, 5.0, 7.0]], np.float32)
    vals = np.array([[3.0, np.nan, 1.0], [5.0, -1.0, 8.0]], np.float32)
    unsorted = np.array([5.0, 1.0, 3.0], np.float32)
    sorter = np.argsort(unsorted)
    x = rng.uniform(-1, 6, (4, 3)).astype(np.float32)
    b = np.array([0.0, 1.0, 2.5, 4.0], np.float32)
    sides = (False, True)

    def run(dev):
        s, v = tl.tensor(seq, device=dev), tl.tensor(vals, device=dev)
        return {"nan": [tl.searchsorted(s, v, right=right) for right in sides],
                "sorter": tl.searchsorted(tl.tensor(unsorted, device=dev), tl.tensor([2.0, 6.0], device=dev),
                                          sorter=tl.tensor(sorter, device=dev)),
                "bucketize": [tl.bucketize(tl.tensor(x, device=dev), tl.tensor(b, device=dev), right=right)
                              for right in sides]}

    def against_torch(got):
        for right, found in zip(sides, got["nan"]):
            np.testing.assert_array_equal(found.numpy(), torch.searchsorted(torch.tensor(seq), torch.tensor(vals),
                                                                            right=right).numpy())
        assert got["sorter"].tolist() == torch.searchsorted(torch.tensor(unsorted), torch.tensor([2.0, 6.0]),
                                                            sorter=torch.tensor(sorter)).tolist()
        for right, found in zip(sides, got["bucketize"]):
            np.testing.assert_array_equal(found.numpy(),
                                          torch.bucketize(torch.tensor(x), torch.tensor(b), right=right).numpy())
    on_cpu_and(device, run, against_torch)
    s1 = tl.tensor([1, 3, 5], device=device)
    assert tl.searchsorted(s1, 3).tolist() == 1 and tl.searchsorted(s1, 4.5).tolist() == 2  # promotes
    assert tl.searchsorted(s1[:0], tl.tensor([1, 9], device=device)).tolist() == [0, 0]
    assert tl.searchsorted(s1, tl.zeros(2, 0, dtype=tl.int64, device=device)).shape == (2, 0)


# ---- unique, bincount, nonzero ---------------------------------------------------------

@pytest.mark.parametrize("dtype", [D.float32, D.int64, D.bool_, D.bfloat16], ids=lambda d: d.name)
def test_unique(device, rng, dtype):
    a = _with_ties(rng, (4, 5), dtype, nan=False)
    dims = (None, 0, 1)

    def run(dev):
        x = tl.tensor(a, device=dev)
        return ([(tl.unique(x, return_inverse=True, return_counts=True, dim=dim),
                  x.unique_consecutive(return_inverse=True, return_counts=True, dim=dim)) for dim in dims],
                x.unique())

    def against_torch(got):
        t = _t(a)
        for dim, (unique, consecutive) in zip(dims, got[0]):
            ref = torch.unique(t, return_inverse=True, return_counts=True, dim=dim)
            for g, r in zip(unique, ref):
                np.testing.assert_array_equal(g.numpy().astype(np.float64), _n(r).astype(np.float64))
            ref = torch.unique_consecutive(t, return_inverse=True, return_counts=True, dim=dim)
            for g, r in zip(consecutive, ref):
                np.testing.assert_array_equal(g.numpy().astype(np.float64), _n(r).astype(np.float64))
        assert got[1].shape == torch.unique(t).shape
    on_cpu_and(device, run, against_torch, exact=True)
    assert tl.unique(tl.zeros(0, device=device)).shape == (0,)


def test_bincount(device, rng):
    a = rng.integers(0, 6, 20)
    w = rng.standard_normal(20).astype(np.float32)
    dtypes = (D.int64, D.uint8, D.uint32)

    def run(dev):
        counts = [(tl.tensor(a.astype(dt.np), device=dev).bincount(),
                   tl.bincount(tl.tensor(a.astype(dt.np), device=dev), minlength=9)) for dt in dtypes]
        weighted = tl.bincount(tl.tensor(a, device=dev), tl.tensor(w, device=dev))
        assert weighted.dtype is tl.float32
        return counts, weighted

    def against_torch(got):
        for plain, long in got[0]:
            assert plain.tolist() == torch.bincount(torch.tensor(a)).tolist()
            assert long.tolist() == torch.bincount(torch.tensor(a), minlength=9).tolist()
        assert_close(got[1], torch.bincount(torch.tensor(a), torch.tensor(w)).numpy(), terms=20)
    on_cpu_and(device, run, against_torch, terms=20)
    assert tl.bincount(tl.tensor(a, device=device), tl.tensor(w, device=device).half()).dtype is tl.float64
    assert tl.bincount(tl.zeros(0, dtype=tl.int64, device=device), minlength=2).tolist() == [0, 0]


@pytest.mark.parametrize("dtype", [D.float32, D.int64, D.bool_, D.uint8], ids=lambda d: d.name)
def test_nonzero_and_argwhere(device, rng, dtype):
    a = random_array(rng, (3, 4, 5), dtype, -1, 1)
    a = a * (rng.random(a.shape) < 0.5).astype(a.dtype)

    def run(dev):
        x = tl.tensor(a, device=dev)
        return x.nonzero(), tl.nonzero(x, as_tuple=True), tl.argwhere(x.mT)

    def against_torch(got):
        np.testing.assert_array_equal(got[0].numpy(), torch.nonzero(_t(a)).numpy())
        for g, r in zip(got[1], torch.nonzero(_t(a), as_tuple=True)):
            np.testing.assert_array_equal(g.numpy(), r.numpy())
        np.testing.assert_array_equal(got[2].numpy(), torch.argwhere(_t(a).mT).numpy())
    on_cpu_and(device, run, against_torch)
    assert tl.tensor(5, device=device).nonzero().shape == (1, 0)
    assert tl.zeros(2, 3, device=device).nonzero().shape == (0, 2)


# ---- multinomial -----------------------------------------------------------------------

def test_multinomial(device):
    tl.manual_seed(7)
    p = tl.tensor([[1.0, 2.0, 0.0, 5.0], [0.0, 0.0, 3.0, 0.0]], device=device)
    draws = p.multinomial(4000, replacement=True)
    assert draws.shape == (2, 4000) and draws.dtype is tl.int64
    freq = np.bincount(draws[0].numpy(), minlength=4) / 4000
    np.testing.assert_allclose(freq, [1 / 8, 2 / 8, 0, 5 / 8], atol=0.03)
    assert (draws[1].numpy() == 2).all()
    s = tl.multinomial(p[:1].expand(1000, 4), 3).numpy()  # without replacement: distinct, no zero-probability one
    assert (np.sort(s, 1) == [0, 1, 3]).all()
    np.testing.assert_allclose(np.bincount(s[:, 0], minlength=4) / 1000, [1 / 8, 2 / 8, 0, 5 / 8], atol=0.04)
    assert tl.multinomial(p[0], 3).shape == (3,)
    assert tl.multinomial(tl.tensor([0.0, 1.0], device=device).half(), 1).tolist() == [1]


# ---- bad input -------------------------------------------------------------------------

def test_bad_input_raises_naming_the_op(device):
    x = tl.tensor([[1.0, 2.0, 3.0]], device=device)
    with pytest.raises(tl.IndexOutOfRange, match="sort.*dimension 2 out of range"):
        x.sort(2)
    with pytest.raises(tl.IndexOutOfRange, match="topk.*k=4 out of range"):
        x.topk(4)
    with pytest.raises(tl.IndexOutOfRange, match="kthvalue.*k=0 out of range"):
        x.kthvalue(0)
    with pytest.raises(tl.IndexOutOfRange, match="median.*empty"):
        tl.zeros(2, 0, device=device).median(1)
    with pytest.raises(tl.DTypeError, match="sort: input must be a tensor"):
        tl.sort([3, 1])
    with pytest.raises(tl.ShapeError, match="searchsorted.*leading dims"):
        tl.searchsorted(tl.zeros(2, 3, device=device), tl.zeros(3, 3, device=device))
    with pytest.raises(tl.ArgumentError, match="side must be"):
        tl.searchsorted(x[0], x, right=True, side="left")
    with pytest.raises(tl.DTypeError, match="bincount only supports"):
        tl.bincount(x[0])
    with pytest.raises(tl.ArgumentError, match="non-negative.*got -2"):
        tl.bincount(tl.tensor([1, -2], device=device))
    with pytest.raises(tl.ShapeError, match="weights must have the shape"):
        tl.bincount(tl.tensor([1, 2], device=device), tl.ones(3, device=device))
    with pytest.raises(tl.ArgumentError, match="inf, nan or element < 0"):
        tl.multinomial(tl.tensor([1.0, -1.0], device=device), 1)
    with pytest.raises(tl.ArgumentError, match="sum of probabilities <= 0"):
        tl.multinomial(tl.zeros(2, 3, device=device), 1)
    with pytest.raises(tl.ArgumentError, match="cannot sample 4 > 3"):
        tl.multinomial(x, 4)
    with pytest.raises(tl.ArgumentError, match="num_samples must be an integer >= 1"):
        tl.multinomial(x, 0)
    with pytest.raises(tl.DTypeError, match="floating tensor of probabilities"):
        tl.multinomial(tl.tensor([1, 2], device=device), 1)
    with pytest.raises(tl.ArgumentError, match="multinomial: generator must be a tl.Generator"):
        tl.multinomial(x, 1, generator=object())
    with pytest.raises(tl.IndexOutOfRange, match="unique.*dimension 1 out of range"):
        tl.unique(x[0], dim=1)
