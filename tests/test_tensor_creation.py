"""Creation functions and Tensor attributes, on every device, against numpy."""
import numpy as np
import pytest

import tensorlite as tl
from conftest import ALL_DTYPES, FLOAT_DTYPES, assert_close, random_array


def dev_name(t):
    """'cuda:0' -> 'cuda' (the registry name a test parametrizes over)."""
    return str(t.device).split(":")[0]


# ---------------------------------------------------------------------------- tl.tensor
@pytest.mark.parametrize("data, dtype", [
    ([1.5, -2.0, 3.25], tl.float32),       # Python floats -> default float dtype
    ([[1, 2], [3, -4]], tl.int64),         # Python ints -> int64
    ([True, False, True], tl.bool),        # Python bools -> bool
    (2.5, tl.float32),                     # a scalar makes a 0-d tensor
    (7, tl.int64),
    ([[1, 2.5], [3, 4]], tl.float32),      # mixed int/float -> float
])
def test_tensor_from_python_infers_dtype(device, data, dtype):
    t = tl.tensor(data, device=device)
    assert t.dtype is dtype
    assert dev_name(t) == device
    expected = np.array(data, dtype=dtype.np)
    assert t.shape == expected.shape
    assert_close(t, expected, dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_tensor_from_numpy_keeps_dtype_and_values(device, rng, dtype):
    a = random_array(rng, (3, 4), dtype)
    t = tl.tensor(a, device=device)
    assert t.dtype is dtype
    assert_close(t, a, dtype)
    f = tl.from_numpy(a)
    assert f.dtype is dtype and dev_name(f) == "cpu"
    assert_close(f, a, dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_tensor_from_numpy_scalar_keeps_dtype(device, dtype):
    scalar = np.ones((), dtype.np)[()]       # a numpy scalar, not an array
    t = tl.tensor(scalar, device=device)
    assert t.dtype is dtype and t.shape == ()


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_tensor_explicit_dtype_casts(device, rng, dtype):
    a = random_array(rng, (5,), tl.float64, low=0.0, high=5.0)
    t = tl.tensor(a.tolist(), dtype=dtype, device=device)
    assert t.dtype is dtype
    assert_close(t, a.astype(dtype.np), dtype)


def test_from_numpy_non_contiguous_and_empty(rng):
    a = rng.standard_normal((4, 6)).astype(np.float32)[::2, 1::2].T
    assert_close(tl.from_numpy(a), a, tl.float32)
    e = tl.from_numpy(np.zeros((0, 3), np.float32))
    assert e.shape == (0, 3) and e.numel() == 0


def test_tensor_of_a_tensor_copies_values(device, rng):
    a = rng.standard_normal(4).astype(np.float32)
    t = tl.tensor(tl.tensor(a, device=device), dtype=tl.float64, device=device)
    assert t.dtype is tl.float64 and dev_name(t) == device
    assert_close(t, a.astype(np.float64), tl.float64)


# ------------------------------------------------------------------ constant creators
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_zeros_ones_full(device, dtype):
    for shape in [(2, 3), (0, 4), (1,), ()]:
        z = tl.zeros(shape, dtype=dtype, device=device)
        o = tl.ones(*shape, dtype=dtype, device=device) if shape else tl.ones((), dtype=dtype, device=device)
        f = tl.full(shape, 1, dtype=dtype, device=device)
        for t, value in ((z, 0), (o, 1), (f, 1)):
            assert t.shape == shape and t.dtype is dtype and dev_name(t) == device
            assert_close(t, np.full(shape, value, dtype=dtype.np), dtype)


def test_full_infers_dtype_from_fill_value(device):
    assert tl.full((2,), 1.5, device=device).dtype is tl.float32
    assert tl.full((2,), 3, device=device).dtype is tl.int64
    assert tl.full((2,), True, device=device).dtype is tl.bool
    assert_close(tl.full((2, 2), -2.5, device=device), np.full((2, 2), -2.5, np.float32))


def test_default_dtype_is_float32(device):
    assert tl.zeros(2, device=device).dtype is tl.float32
    assert tl.ones(2, device=device).dtype is tl.float32
    assert tl.rand(2, device=device).dtype is tl.float32
    assert tl.randn(2, device=device).dtype is tl.float32


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_empty_has_shape_and_dtype(device, dtype):
    t = tl.empty((3, 0, 2), dtype=dtype, device=device)
    assert t.shape == (3, 0, 2) and t.dtype is dtype and t.numel() == 0
    t = tl.empty(2, 5, dtype=dtype, device=device)
    assert t.shape == (2, 5) and t.dtype is dtype and dev_name(t) == device


@pytest.mark.parametrize("args, kwargs", [
    ((5,), {}), ((2, 9), {}), ((9, 2, -2), {}), ((0, 1, 0.125), {}), ((-1.5, 2.0, 0.5), {}),
    ((3,), {"dtype": tl.float64}), ((4, 4), {}),  # empty range
])
def test_arange(device, args, kwargs):
    t = tl.arange(*args, device=device, **kwargs)
    expected = np.arange(*args)
    want = kwargs.get("dtype") or (tl.int64 if all(isinstance(a, int) for a in args) else tl.float32)
    assert t.dtype is want
    assert_close(t, expected.astype(want.np), want)


@pytest.mark.parametrize("start, end, steps", [(0.0, 1.0, 5), (-3, 7, 11), (2.0, -2.0, 4), (1.0, 1.0, 1), (0, 1, 0)])
def test_linspace(device, start, end, steps):
    t = tl.linspace(start, end, steps, device=device)
    assert t.dtype is tl.float32
    assert_close(t, np.linspace(start, end, steps).astype(np.float32), tl.float32)


@pytest.mark.parametrize("n, m", [(3, None), (2, 4), (4, 2), (1, None), (0, None)])
def test_eye(device, n, m):
    t = tl.eye(n, m, device=device) if m is not None else tl.eye(n, device=device)
    assert t.dtype is tl.float32
    assert_close(t, np.eye(n, m, dtype=np.float32), tl.float32)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_like_creators_take_shape_dtype_device(device, rng, dtype):
    x = tl.tensor(random_array(rng, (2, 3), dtype), device=device)
    for t, value in ((tl.zeros_like(x), 0), (tl.ones_like(x), 1), (tl.full_like(x, 1), 1)):
        assert t.shape == (2, 3) and t.dtype is dtype and dev_name(t) == device
        assert_close(t, np.full((2, 3), value, dtype.np), dtype)
    t = tl.zeros_like(x, dtype=tl.float64)
    assert t.dtype is tl.float64
    e = tl.empty_like(x)
    assert e.shape == (2, 3) and e.dtype is dtype and dev_name(e) == device


def test_like_of_non_contiguous_is_plain(device, rng):
    x = tl.tensor(rng.standard_normal((3, 4)).astype(np.float32), device=device).T
    t = tl.ones_like(x)
    assert t.shape == (4, 3)
    assert_close(t, np.ones((4, 3), np.float32))


# ----------------------------------------------------------------------- random
def test_manual_seed_reproduces_every_generator(device):
    def draw():
        return (tl.rand(7, 3, device=device).numpy(), tl.randn(11, device=device).numpy(),
                tl.randint(0, 100, (13,), device=device).numpy())
    tl.manual_seed(1234)
    first = draw()
    tl.manual_seed(1234)
    second = draw()
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    tl.manual_seed(4321)
    third = draw()
    assert not np.array_equal(first[1], third[1])


def test_consecutive_draws_differ(device):
    tl.manual_seed(0)
    a, b = tl.randn(64, device=device).numpy(), tl.randn(64, device=device).numpy()
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
def test_rand_distribution(device, dtype):
    tl.manual_seed(7)
    t = tl.rand(100_000, dtype=dtype, device=device)
    assert t.dtype is dtype and t.shape == (100_000,)
    a = t.numpy().astype(np.float64)
    assert a.min() >= 0.0 and a.max() <= 1.0
    assert abs(a.mean() - 0.5) < 0.01
    assert abs(a.std() - (1 / 12) ** 0.5) < 0.01


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
def test_randn_distribution(device, dtype):
    tl.manual_seed(8)
    a = tl.randn(100_000, dtype=dtype, device=device).numpy().astype(np.float64)
    assert abs(a.mean()) < 0.02
    assert abs(a.std() - 1.0) < 0.02
    assert 0.66 < np.mean(np.abs(a) < 1.0) < 0.70  # ~68% within one sigma
    assert np.isfinite(a).all()


def test_randint_range_and_coverage(device):
    tl.manual_seed(9)
    t = tl.randint(-3, 5, (100_000,), device=device)
    assert t.dtype is tl.int64
    a = t.numpy()
    assert a.min() == -3 and a.max() == 4
    counts = np.bincount(a + 3)
    assert counts.min() > 100_000 / 8 * 0.9
    assert tl.randint(10, (4, 5), device=device).shape == (4, 5)  # randint(high, size)


def test_randperm_is_a_uniform_permutation(device):
    tl.manual_seed(3)
    perms = np.stack([tl.randperm(6, device=device).numpy() for _ in range(600)])
    assert perms.dtype == np.int64 and (np.sort(perms, 1) == np.arange(6)).all()
    # each value lands in each place about 1/6 of the time
    counts = np.stack([(perms == v).sum(0) for v in range(6)])
    assert counts.min() > 600 / 6 * 0.6 and counts.max() < 600 / 6 * 1.4
    assert tl.randperm(0, device=device).shape == (0,)
    assert tl.randperm(4, dtype=tl.int32, device=device).dtype is tl.int32
    with pytest.raises(tl.ArgumentError, match="randperm"):
        tl.randperm(-1)


def test_random_shapes_and_empty(device):
    assert tl.rand(2, 3, device=device).shape == (2, 3)
    assert tl.randn((4,), device=device).shape == (4,)
    assert tl.rand(0, 3, device=device).numel() == 0


# --------------------------------------------------------------------- attributes
def test_basic_attributes(device, rng):
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    t = tl.tensor(a, device=device)
    assert t.shape == (2, 3, 4) and tuple(t.shape) == (2, 3, 4)
    assert t.ndim == 3 and t.dim() == 3
    assert t.numel() == 24
    assert t.stride() == (12, 4, 1) and t.stride(1) == 4 and t.stride(-1) == 1
    assert t.dtype is tl.float32
    assert dev_name(t) == device
    assert t.is_contiguous()
    assert len(t) == 2


def test_numpy_array_and_tolist(device, rng):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    t = tl.tensor(a, device=device)
    n = t.numpy()
    assert isinstance(n, np.ndarray) and n.dtype == np.float32
    np.testing.assert_array_equal(n, a)
    np.testing.assert_array_equal(np.asarray(t), a)
    np.testing.assert_array_equal(np.asarray(t, dtype=np.float64), a.astype(np.float64))
    assert t.tolist() == a.tolist()
    i = tl.tensor([[1, 2], [3, 4]], device=device)
    assert i.tolist() == [[1, 2], [3, 4]] and isinstance(i.tolist()[0][0], int)
    assert tl.tensor(2.5, device=device).tolist() == 2.5


@pytest.mark.parametrize("value, pytype", [(2.5, float), (-3, int), (True, bool)])
def test_item_returns_python_scalar(device, value, pytype):
    t = tl.tensor([[value]], device=device)
    got = t.item()
    assert type(got) is pytype and got == value
    assert type(float(tl.tensor(1.5, device=device))) is float
    assert int(tl.tensor(4, device=device)) == 4


def test_item_of_many_elements_raises(device):
    with pytest.raises((ValueError, RuntimeError)):
        tl.tensor([1.0, 2.0], device=device).item()


def test_to_dtype_and_device(device, rng):
    a = rng.standard_normal((3, 2)).astype(np.float32)
    t = tl.tensor(a, device=device)
    d = t.to(tl.float64)
    assert d.dtype is tl.float64 and dev_name(d) == device
    assert_close(d, a.astype(np.float64), tl.float64)
    c = t.to("cpu")
    assert dev_name(c) == "cpu"
    np.testing.assert_array_equal(c.numpy(), a)
    back = c.to(device)
    assert dev_name(back) == device
    np.testing.assert_array_equal(back.numpy(), a)
    both = t.to(device, tl.float16)
    assert both.dtype is tl.float16 and dev_name(both) == device
    assert t.to(tl.float32) is t or np.array_equal(t.to(tl.float32).numpy(), a)


def test_to_carries_non_contiguous_views(device, rng):
    a = rng.standard_normal((4, 5)).astype(np.float32)
    t = tl.tensor(a, device=device).T[1:4]
    np.testing.assert_array_equal(t.to("cpu").numpy(), a.T[1:4])
    np.testing.assert_array_equal(tl.tensor(a).T[1:4].to(device).numpy(), a.T[1:4])


def test_contiguous_and_is_contiguous(device, rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    t = tl.tensor(a, device=device)
    assert t.contiguous() is t
    tt = t.T
    assert not tt.is_contiguous()
    c = tt.contiguous()
    assert c.is_contiguous() and c.stride() == (3, 1)
    np.testing.assert_array_equal(c.numpy(), a.T)


def test_repr_shows_values_and_what_is_not_default(device):
    """torch's rules: dtype= only for a dtype other than the default float, int64 and bool;
    device= only off the cpu (tests/test_torch_api_gaps.py compares the text with torch's)."""
    t = tl.tensor([[1.5, -2.25], [3.0, 4.0]], device=device)
    on = "" if device == "cpu" else f", device='{t.device}'"  # 'cuda:0', as torch prints it
    assert repr(t) == f"tensor([[ 1.5000, -2.2500],\n        [ 3.0000,  4.0000]]{on})"
    assert repr(tl.ones(2, dtype=tl.bfloat16, device=device)) == f"tensor([1., 1.]{on}, dtype=tensorlite.bfloat16)"
    assert repr(tl.tensor([1, 2], device=device)) == f"tensor([1, 2]{on})"
    assert repr(tl.zeros((0, 3), device=device)) == f"tensor([]{on}, size=(0, 3))"  # empty tensors print


def test_str_and_len_of_0d(device):
    t = tl.tensor(3.5, device=device)
    assert t.shape == () and t.ndim == 0 and t.numel() == 1
    assert "3.5" in str(t)
    with pytest.raises(TypeError):
        len(t)
