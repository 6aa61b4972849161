"""Small pieces of PyTorch's API that real programs used and tensorlite lacked (issue 45):
Tensor.nelement, RNNBase.flatten_parameters, numpy's axis= / keepdims= on reductions, the
shift operators on integer tensors, and torch.cuda's seeding calls on a machine without CUDA.
Each is compared with torch itself where torch is installed."""
from __future__ import annotations

import numpy as np
import pytest

import tensorlite as tl
from tensorlite.backends.cpu import CpuDevice

torch = pytest.importorskip("torch")


def test_nelement_is_numel():
    x = tl.zeros(2, 3, 4)
    assert x.nelement() == torch.zeros(2, 3, 4).nelement() == 24
    assert tl.tensor(5.0).nelement() == 1 and tl.zeros(0, 3).nelement() == 0


@pytest.mark.parametrize("cls", ["RNN", "LSTM", "GRU"])
def test_flatten_parameters_is_a_no_op(cls):
    tl.manual_seed(0)
    m = getattr(tl.nn, cls)(4, 5, num_layers=2)
    before = {k: v.numpy().copy() for k, v in m.state_dict().items()}
    x = tl.randn(3, 2, 4)
    out = m(x)[0].numpy()
    assert m.flatten_parameters() is None
    assert getattr(torch.nn, cls)(4, 5).flatten_parameters() is None  # torch's returns None too
    assert {k: v.numpy() for k, v in m.state_dict().items()}.keys() == before.keys()
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])
    np.testing.assert_array_equal(m(x)[0].numpy(), out)


# every reduction below takes axis= in torch 2.x (checked: the torch calls in the test itself)
REDUCTIONS = ["sum", "mean", "amax", "amin", "max", "min", "prod", "std", "var", "argmax", "argmin", "all",
              "any", "logsumexp", "count_nonzero", "median", "nanmedian", "cumsum", "cumprod"]
KEEPDIM = {"count_nonzero", "cumsum", "cumprod"}  # no keepdim argument


def _values(r):
    r = r[0] if isinstance(r, tuple) else r  # (values, indices)
    return r.numpy() if hasattr(r, "numpy") else np.asarray(r)


@pytest.mark.parametrize("name", REDUCTIONS)
def test_reductions_take_numpy_axis_and_keepdims_as_torch(name):
    a = np.arange(1, 13, dtype=np.float32).reshape(3, 4) / 4
    if name in ("all", "any"):
        a = a > 1.5
    x, t = tl.tensor(a), torch.tensor(a)
    for method in (True, False):
        fn = getattr(x, name) if method else (lambda *args, **kw: getattr(tl, name)(x, *args, **kw))
        ref = getattr(t, name) if method else (lambda *args, **kw: getattr(torch, name)(t, *args, **kw))
        np.testing.assert_allclose(_values(fn(axis=1)), _values(ref(axis=1)), rtol=1e-6)
        np.testing.assert_allclose(_values(fn(axis=0)), _values(fn(dim=0)), rtol=0)
        if name not in KEEPDIM:
            got, want = _values(fn(axis=1, keepdims=True)), _values(ref(axis=1, keepdims=True))
            assert got.shape == want.shape == (3, 1)
            np.testing.assert_allclose(got, want, rtol=1e-6)
    with pytest.raises(TypeError):  # torch: "got an unexpected keyword argument"; tl: ArgumentError
        ref(dim=0, axis=0)
    with pytest.raises(tl.ArgumentError, match=f"{name}: give dim= or axis="):
        fn(dim=0, axis=0)


def test_var_mean_takes_axis():
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    for got, want in zip(tl.var_mean(tl.tensor(a), axis=1), torch.var_mean(torch.tensor(a), axis=1)):
        np.testing.assert_allclose(got.numpy(), want.numpy())


INT_DTYPES = [tl.int8, tl.int16, tl.int32, tl.int64, tl.uint8]


@pytest.mark.parametrize("dt", INT_DTYPES, ids=lambda d: d.name)
def test_shift_operators_match_torch_including_counts_out_of_range(device, dt):
    a = np.array([0, 1, 5, 100, -1, -8, -100, 127], dtype=np.int64)
    counts = np.array([0, 1, 3, 7, 8, 9, 31, 33, 63, 64, 70, -1, -3], dtype=np.int64)
    a = np.repeat(a, len(counts)).astype(dt.np)  # uint8: the negatives wrap, as torch's
    b = np.tile(counts, len(a) // len(counts)).astype(dt.np)
    x, y = tl.tensor(a, device=device), tl.tensor(b, device=device)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    for got, want in [(x << y, ta << tb), (x >> y, ta >> tb), (x << 2, ta << 2), (x >> 1, ta >> 1),
                      (3 << y.abs() if dt.is_signed else 3 << y, 3 << (tb.abs() if dt.is_signed else tb)),
                      (tl.bitwise_left_shift(x, y), torch.bitwise_left_shift(ta, tb)),
                      (x.bitwise_right_shift(y), ta.bitwise_right_shift(tb)),
                      (x.__rlshift__(y), tb << ta), (x.__rrshift__(y), tb >> ta)]:
        assert got.dtype.name == str(want.dtype).replace("torch.", ""), (got.dtype, want.dtype)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    z = x.clone()
    z <<= 1
    z >>= 2
    np.testing.assert_array_equal(z.numpy(), ((ta << 1) >> 2).numpy())


def test_shifts_refuse_floats_and_bools_as_torch():
    for a in (tl.tensor([1.5]), tl.tensor([True])):
        with pytest.raises(tl.DTypeError, match="bitwise_left_shift"):
            a << a
    with pytest.raises(RuntimeError):
        torch.tensor([1.5]) << torch.tensor([1.5])


class _FakeCuda(CpuDevice):
    """A `cuda` device whose generator is the cpu's: tl.cuda's seeding seen from the device."""
    name = "cuda"

    def __init__(self, ordinal=0):
        super().__init__(0)
        self.ordinal = ordinal

    class platform:
        @staticmethod
        def init():
            return 2


def test_cuda_seeding_without_cuda_is_ignored_and_leaves_the_cpu_stream_alone():
    """As torch.cuda's: manual_seed / manual_seed_all are silently ignored without CUDA."""
    if tl.cuda.is_available():
        pytest.skip("a CUDA device is available here (the fake-device test covers seeding)")
    assert tl.cuda.device_count() == 0 and tl.cuda.is_available() is False
    tl.manual_seed(0)
    want = tl.rand(4).numpy()
    tl.manual_seed(0)
    assert tl.cuda.manual_seed(123) is None and tl.cuda.manual_seed_all(123) is None
    np.testing.assert_array_equal(tl.rand(4).numpy(), want)


def test_cuda_manual_seed_seeds_each_gpu_and_outlives_the_global_seed():
    with tl.backends.scoped_registry():
        tl.backends.register("cuda", _FakeCuda)
        assert tl.cuda.is_available() and tl.cuda.device_count() == 2
        tl.manual_seed(1)
        tl.manual_seed(7)
        want = tl.rand(5).numpy()  # the cpu stream seeded 7
        tl.manual_seed(1)
        tl.cuda.manual_seed_all(7)  # before either GPU's first use: tl.manual_seed(1) must not replace it
        for d in ("cuda:0", "cuda:1"):
            np.testing.assert_array_equal(tl.rand(5, device=d).numpy(), want)
        tl.cuda.manual_seed(7)
        np.testing.assert_array_equal(tl.rand(5, device="cuda:0").numpy(), want)
        assert not np.array_equal(tl.rand(5, device="cuda:1").numpy(), want)  # cuda:1 went on
