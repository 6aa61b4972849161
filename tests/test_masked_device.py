"""The ops whose output size depends on data: x[mask], x[mask] = v, index_put with a mask,
masked_select, masked_scatter, repeat_interleave with a repeats tensor, nonzero. On every device
against cpu, the reference (and cpu against numpy's boolean indexing where it has one).

On a GPU their ids are built on the device (tensorlite/ops/index.py repeat_ids: a running sum
and a binary search) and the one host read is the count; the tests on the null platform at the
end show that: a host copy of the mask (or of the repeats) would be a read of its size."""
import numpy as np
import pytest

import tensorlite as tl
from conftest import assert_same, on_cpu_and, random_array


def _mask(rng, shape, kind="random"):
    if kind == "empty":
        return np.zeros(shape, bool)
    if kind == "all":
        return np.ones(shape, bool)
    return rng.random(shape) < 0.5


def _on(dev, *arrays):
    return [tl.tensor(a, device=dev) for a in arrays]


# ---- x[mask] -------------------------------------------------------------------------------
# name: (x's shape, [(mask shape, kind)], x[...] as fn(x, *masks) and the same on numpy arrays)
GETITEM = {
    "random": ((3, 5), [((3, 5), "random")], lambda x, m: x[m]),
    "empty": ((3, 5), [((3, 5), "empty")], lambda x, m: x[m]),
    "all": ((3, 5), [((3, 5), "all")], lambda x, m: x[m]),
    "leading_dims": ((4, 3, 2), [((4, 3), "random")], lambda x, m: x[m]),
    "middle_dim": ((2, 4, 3), [((4,), "random")], lambda x, m: x[:, m]),
    "after_ellipsis": ((2, 3, 4), [((4,), "random")], lambda x, m: x[..., m]),
    "with_a_slice": ((4, 3), [((4,), "random")], lambda x, m: x[m, 1:]),
    "transposed": ((5, 3), [((3, 5), "random")], lambda x, m: x.T[m]),
    "strided": ((6, 4), [((3, 4), "random")], lambda x, m: x[::2][m]),
    "two_masks": ((3, 3), [((3,), "all"), ((3,), "all")], lambda x, a, b: x[a, b]),  # their ids pair up
    "empty_x": ((0, 3), [((0,), "random")], lambda x, m: x[m]),
    "long": ((2500,), [((2500,), "random")], lambda x, m: x[m]),  # more than a block of the scan
}
DTYPES = ("float32", "float16", "int64", "int32", "uint8", "bool")


@pytest.mark.parametrize("case, dtype", [(c, "float32") for c in GETITEM] + [("random", d) for d in DTYPES[1:]])
def test_getitem_with_a_mask(device, rng, case, dtype):
    shape, masks, fn = GETITEM[case]
    a = random_array(rng, shape, getattr(tl, dtype))
    ms = [_mask(rng, s, k) for s, k in masks]
    got = on_cpu_and(device, lambda dev: fn(*_on(dev, a, *ms)), exact=True)
    assert got.dtype is getattr(tl, dtype)
    np.testing.assert_array_equal(got.numpy(), fn(a, *ms))


@pytest.mark.parametrize("value", [True, False])
def test_getitem_with_a_0d_mask(device, rng, value):
    a = random_array(rng, (2, 3), tl.float32)
    got = on_cpu_and(device, lambda dev: tl.tensor(a, device=dev)[tl.tensor(value, device=dev)], exact=True)
    assert got.shape == ((1, 2, 3) if value else (0, 2, 3))


def test_nonzero(device, rng):
    a = random_array(rng, (3, 4), tl.int64, -1, 1)
    on_cpu_and(device, lambda dev: tuple(tl.tensor(x, device=dev).nonzero() for x in
                                         (a, np.zeros(5), np.ones(5), np.array(2.0), np.zeros((0, 3)))),
               exact=True)
    got = on_cpu_and(device, lambda dev: tl.tensor(a, device=dev).nonzero(as_tuple=True), exact=True)
    assert_same(got, tuple(tl.tensor(t) for t in np.nonzero(a)))


# ---- x[mask] = v, index_put ---------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
@pytest.mark.parametrize("kind", ["random", "empty", "all"])
def test_setitem_with_a_mask(device, rng, dtype, kind):
    dt = getattr(tl, dtype)
    a, m = random_array(rng, (4, 3), dt), _mask(rng, (4, 3), kind)
    v = random_array(rng, (int(m.sum()),), dt)
    row, rows = _mask(rng, (4,)), random_array(rng, (3,), dt)

    def run(dev):
        x, mt, vt, rt, rv = _on(dev, a, m, v, row, rows)
        y = x.clone()
        y[mt] = vt                       # one value per True element
        z = x.T.clone().T                # not contiguous
        z[rt] = rv                       # a row broadcast to every selected row
        put = x.index_put((mt,), vt)
        assert x.index_put_((rt,), rv[None]) is x
        return y, z, put, x
    y, z, put, x = on_cpu_and(device, run, exact=True)
    want_y, want_z = a.copy(), a.copy()
    want_y[m], want_z[row] = v, rows
    np.testing.assert_array_equal(y.numpy(), want_y)
    np.testing.assert_array_equal(z.numpy(), want_z)
    np.testing.assert_array_equal(put.numpy(), want_y)
    np.testing.assert_array_equal(x.numpy(), want_z)


def test_index_put_with_a_mask_accumulates(device, rng):
    a, m = random_array(rng, (4, 3), tl.int64), _mask(rng, (4,))
    v = random_array(rng, (int(m.sum()), 3), tl.int64)
    got = on_cpu_and(device, lambda dev: tl.tensor(a, device=dev).index_put(
        (tl.tensor(m, device=dev),), tl.tensor(v, device=dev), accumulate=True), exact=True)
    want = a.copy()
    want[m] += v
    np.testing.assert_array_equal(got.numpy(), want)


# ---- masked_select ------------------------------------------------------------------------
@pytest.mark.parametrize("x_shape, m_shape, kind, dtype", [
    ((2, 3), (2, 3), "random", "float32"), ((2, 3), (3,), "random", "int64"), ((2, 1), (2, 3), "random", "bool"),
    ((3,), (2, 3), "random", "float16"), ((2, 3), (2, 3), "empty", "float32"), ((2, 3), (1, 3), "all", "uint8")])
def test_masked_select(device, rng, x_shape, m_shape, kind, dtype):
    a, m = random_array(rng, x_shape, getattr(tl, dtype)), _mask(rng, m_shape, kind)
    got = on_cpu_and(device, lambda dev: tl.masked_select(*_on(dev, a, m)), exact=True)
    shape = np.broadcast_shapes(a.shape, m.shape)
    np.testing.assert_array_equal(got.numpy(), np.broadcast_to(a, shape)[np.broadcast_to(m, shape)])


# ---- masked_scatter -----------------------------------------------------------------------
@pytest.mark.parametrize("m_shape, kind, dtype, transposed", [
    ((3, 4), "random", "float32", False), ((4,), "random", "int64", False), ((3, 1), "random", "bool", False),
    ((3, 4), "empty", "float16", False), ((3, 4), "all", "float32", True), ((3, 4), "random", "int32", True)])
def test_masked_scatter(device, rng, m_shape, kind, dtype, transposed):
    dt = getattr(tl, dtype)
    a, m, src = random_array(rng, (4, 3) if transposed else (3, 4), dt), _mask(rng, m_shape, kind), \
        random_array(rng, (14,), dt)                               # more source than True values

    def run(dev):
        x, mt, s = _on(dev, a, m, src)
        return (x.T if transposed else x).masked_scatter(mt, s)
    got = on_cpu_and(device, run, exact=True)
    want = (a.T if transposed else a).copy()
    full = np.broadcast_to(m, want.shape)
    want[full] = src[:int(full.sum())]
    np.testing.assert_array_equal(got.numpy(), want)


# ---- repeat_interleave with a repeats tensor ------------------------------------------------
@pytest.mark.parametrize("reps, reps_dtype, dim, transposed, dtype", [
    ([1, 0, 2], "int64", 1, False, "float32"), ([0, 0, 0], "int64", 1, False, "float32"),
    ([3, 1], "int32", 0, False, "int64"), ([2, 0, 1], "uint8", 1, True, "bool"),
    ([1, 2, 0, 3, 1, 1], "int64", None, False, "float16"), ([4], "int64", 0, False, "float32")])
def test_repeat_interleave_with_a_repeats_tensor(device, rng, reps, reps_dtype, dim, transposed, dtype):
    a = random_array(rng, (3, 2) if transposed else (2, 3), getattr(tl, dtype))
    r = np.array(reps, getattr(tl, reps_dtype).np)

    def run(dev):
        x, rt = _on(dev, a, r)
        return (x.T if transposed else x).repeat_interleave(rt, dim)
    got = on_cpu_and(device, run, exact=True)
    x = a.T if transposed else a
    np.testing.assert_array_equal(got.numpy(), np.repeat(x, r if r.size > 1 else int(r[0]), axis=dim))


def test_repeat_interleave_of_a_repeats_tensor_alone(device):
    got = on_cpu_and(device, lambda dev: (tl.repeat_interleave(tl.tensor([2, 0, 3, 1], device=dev)),
                                          tl.tensor([5, 6], device=dev).repeat_interleave(
                                              tl.tensor([1, 2], device=dev), output_size=3)), exact=True)
    assert got[0].tolist() == [0, 0, 2, 2, 2, 3] and got[1].tolist() == [5, 6, 6]


# ---- gradients -------------------------------------------------------------------------------
def test_gradients(device, rng):
    a, w = random_array(rng, (4, 3), tl.float64), random_array(rng, (4, 3), tl.float64)
    m, row, src = _mask(rng, (4, 3)), _mask(rng, (3,)), random_array(rng, (13,), tl.float64)
    m[0, 0] = True
    vals = random_array(rng, (int(m.sum()),), tl.float64)

    def run(dev):
        x, wt, mt, rt, st, vt = _on(dev, a, w, m, row, src, vals)
        for t in (x, st, vt):
            t.requires_grad = True
        grads = []
        for loss in (lambda: (x[mt] * wt[mt]).sum(),                        # x[mask]: a scatter into zeros
                     lambda: (tl.masked_select(x[:1], rt) ** 2).sum(),      # broadcast: the grad of x[:1]
                     lambda: (x.masked_scatter(mt, st) * wt).sum(),         # x off the mask, source's head
                     lambda: (x.repeat_interleave(tl.tensor([2, 0, 1], device=dev), 1) ** 2).sum()):
            x.grad = st.grad = None
            loss().backward()
            grads += [x.grad, st.grad]
        x.grad = None
        y = x * 1
        y[mt] = vt * 3                                                      # x's grad off the mask, v's on it
        (y * wt).sum().backward()
        return grads + [x.grad, vt.grad]
    got = on_cpu_and(device, run)
    assert_same(got[0], tl.tensor(np.where(m, w, 0.0)))
    assert_same(got[4], tl.tensor(np.where(m, 0.0, w)))
    assert_same(got[5], tl.tensor(np.concatenate([w[m], np.zeros(13 - int(m.sum()))])))
    assert_same(got[8], tl.tensor(np.where(m, 0.0, w)))
    assert_same(got[9], tl.tensor(w[m] * 3))


# ---- bad input keeps its errors --------------------------------------------------------------
def test_errors(device):
    x = tl.zeros(3, 4, device=device)
    with pytest.raises(tl.IndexOutOfRange, match=r"__getitem__.*mask shape does not match"):
        x[tl.ones(4, 3, dtype=tl.bool, device=device)]
    with pytest.raises(tl.IndexOutOfRange, match=r"__setitem__.*mask shape does not match"):
        x[tl.ones(4, dtype=tl.bool, device=device)] = tl.ones(4, device=device)
    with pytest.raises(tl.DTypeError, match="masked_select.*mask must be a bool tensor"):
        tl.masked_select(x, tl.ones(4, device=device))
    with pytest.raises(tl.ShapeError, match="masked_select.*do not broadcast"):
        tl.masked_select(x, tl.ones(3, dtype=tl.bool, device=device))
    with pytest.raises(tl.DTypeError, match="masked_scatter.*bool mask"):
        x.masked_scatter(tl.ones(3, 4, dtype=tl.int64, device=device), tl.ones(12, device=device))
    with pytest.raises(tl.ShapeError, match="masked_scatter.*fewer elements than mask's 6 True values"):
        x.masked_scatter(tl.tensor([True, False, True, False], device=device), tl.ones(5, device=device))
    with pytest.raises(tl.ArgumentError, match="repeat_interleave.*non-negative"):
        x.repeat_interleave(tl.tensor([1, -1, 0, 2], device=device), 1)
    with pytest.raises(tl.ArgumentError, match="repeat_interleave.*output_size 4 is not the 3 elements"):
        x.repeat_interleave(tl.tensor([1, 0, 2], device=device), 0, output_size=4)


def test_operands_on_another_device_are_refused(gpu_device):
    x, m = tl.zeros(3, device=gpu_device), tl.tensor([True, False, True])
    with pytest.raises(tl.DeviceError, match="index on another device"):
        x[m]
    with pytest.raises(tl.DeviceError, match="masked_select"):
        tl.masked_select(x, m)
    with pytest.raises(tl.DeviceError, match="masked_scatter"):
        x.masked_scatter(m, tl.ones(3, device=gpu_device))
    with pytest.raises(tl.DeviceError, match="repeat_interleave"):
        x.repeat_interleave(tl.tensor([1, 0, 2]))


# ---- on a GPU: one small read, the count ------------------------------------------------------
OPS = {
    "getitem": lambda x, m, r: x[m],
    "setitem": lambda x, m, r: x.__setitem__(m, tl.ones(1, device=x.device)),
    "index_put": lambda x, m, r: x.index_put((m,), tl.ones(1, device=x.device)),
    "masked_select": lambda x, m, r: tl.masked_select(x, m[:1]),
    "masked_scatter": lambda x, m, r: x.masked_scatter(m, tl.ones(x.numel(), device=x.device)),
    "repeat_interleave": lambda x, m, r: x.repeat_interleave(r, 1),
    "nonzero": lambda x, m, r: m.nonzero(),
}


@pytest.mark.parametrize("op", OPS)
def test_gpu_path_reads_only_the_count(null_backend, monkeypatch, op):
    """On the null platform (nothing runs; here every read gives int64 3s: a count of 3, and
    repeats that are >= 0) the op launches kernels and reads back 8 or 16 bytes once: no copy
    of the mask (640 bytes) or of the repeats (256), and no error-flag read for the gather (the
    searched ids are known to be in range)."""
    from tensorlite import backend
    platform = backend.get_device("null").platform
    x = tl.zeros(20, 32, device="null")
    m, r = tl.ones(20, 32, dtype=tl.bool, device="null"), tl.ones(32, dtype=tl.int64, device="null")
    reads, read = [], platform.dtoh_async
    threes = np.full(4096, 3, np.int64).tobytes()

    def counted_read(dst_host, src, nbytes, stream):
        read(dst_host, src, nbytes, stream)
        reads.append(nbytes)
        platform.ffi.memmove(platform.ffi.cast("void*", dst_host), threes[:nbytes], nbytes)
    monkeypatch.setattr(platform, "dtoh_async", counted_read)
    launches = platform.counts["launch"]
    OPS[op](x, m, r)
    assert platform.counts["launch"] > launches
    assert reads in ([8], [16]), f"{op}: device-to-host reads of {reads} bytes"
