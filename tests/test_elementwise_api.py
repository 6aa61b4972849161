"""The elementwise API a PyTorch user reaches for (issue 24): the op table's newer rows (inverse
and hyperbolic functions, log1p/expm1/..., trunc/frac/rsqrt, atan2/fmod/hypot, the bitwise
ops), the composites beside them (isnan/isinf/isfinite, isclose/allclose, lerp, logical ops,
any/all/count_nonzero), the int8/int16/int32 dtypes and numpy operands, on every device against
cpu, and cpu against PyTorch where it is installed (conftest.on_cpu_and)."""
from __future__ import annotations

import numpy as np
import pytest

import tensorlite as tl
from tensorlite import dtype as D, op_table
from tensorlite.errors import ArgumentError, DTypeError

from conftest import assert_close, needs_torch, on_cpu_and, optional_torch, random_array
from gradcheck_util import check_device_grads, gradcheck

torch = optional_torch()  # None without PyTorch: only the torch checks use it

INTS = (D.int8, D.int16, D.int32, D.int64, D.uint8, D.uint32)
NEW_INTS = (D.int8, D.int16, D.int32)
# the rows added for issue 24, each with a domain inside which PyTorch's function is finite
UNARY_DOMAIN = {
    "log1p": (-0.9, 2), "expm1": (-2, 2), "log2": (0.1, 3), "log10": (0.1, 3), "exp2": (-2, 2),
    "tan": (-1.2, 1.2), "atan": (-3, 3), "asin": (-0.9, 0.9), "acos": (-0.9, 0.9), "sinh": (-2, 2),
    "cosh": (-2, 2), "asinh": (-3, 3), "acosh": (1.1, 3), "atanh": (-0.9, 0.9), "rsqrt": (0.2, 3),
    "frac": (-3, 3), "trunc": (-3, 3),
}
NEW_UNARY = [op_table.UNARY_BY_NAME[n] for n in UNARY_DOMAIN]
BINARY_NEW = ("atan2", "fmod", "hypot", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift",
              "bitwise_right_shift")


def _torch(a):
    """A torch tensor of a numpy array's values (bf16 through float32; uint32 as int64)."""
    a = np.asarray(a)
    if a.dtype == D.bfloat16.np:
        return torch.tensor(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a.astype(np.int64) if a.dtype == np.uint32 else a))


def _tdtype(dt):
    return getattr(torch, dt.name) if dt is not D.bool_ else torch.bool


def _wide(a):
    """Reference values: floats in float64, integers in int64 (the result is cast back, wrapping)."""
    a = np.asarray(a)
    return torch.from_numpy(a.astype(np.float64 if a.dtype.kind == "f" or a.dtype == D.bfloat16.np else
                                     np.int64 if a.dtype.kind in "iu" else np.bool_))


def _ref(values, dt):
    v = values.numpy()
    return v.astype(np.float64) if dt.is_floating_point else v.astype(dt.np)


# ---- unary rows ------------------------------------------------------------------------

@pytest.mark.parametrize("dt", D.FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("row", NEW_UNARY, ids=lambda r: r.name)
def test_new_unary_rows_match_torch(device, rng, row, dt):
    a = random_array(rng, (3, 4), dt, *UNARY_DOMAIN[row.name])

    def run(dev):
        x = tl.tensor(a, device=dev)
        got = getattr(x, row.method)()
        assert_close(getattr(tl, row.method)(x), got.numpy().astype(np.float64), dt)
        y = tl.tensor(a, device=dev)  # the in-place form writes the tensor's memory
        assert getattr(y, row.method + "_")() is y
        assert_close(y, got.numpy().astype(np.float64), dt)
        return got
    on_cpu_and(device, run, lambda got: assert_close(got, _ref(getattr(torch, row.method)(_wide(a)), dt), dt))


@pytest.mark.parametrize("dt", INTS + (D.bool_,), ids=lambda d: d.name)
def test_integer_unary_rows_match_torch(device, rng, dt):
    a = random_array(rng, (3, 4), dt, -50, 50)

    def run(dev):
        x = tl.tensor(a, device=dev)
        assert_close(x.trunc(), a, dt)
        assert_close(x.fix(), a, dt)
        assert_close(x.bitwise_not(), (~x).numpy(), dt)
        if dt is not D.bool_:  # float-only rows compute in the default float, as PyTorch's
            got = x.abs().log1p()
            assert got.dtype is tl.float32
            assert_close(got, np.log1p(np.abs(a.astype(np.float64))), tl.float32)
        return ~x
    on_cpu_and(device, run, lambda inverted: assert_close(inverted, _ref(torch.bitwise_not(_wide(a)), dt), dt))


@pytest.mark.parametrize("row", NEW_UNARY, ids=lambda r: r.name)
def test_new_unary_rows_gradients(device, rng, row):
    a = rng.uniform(*UNARY_DOMAIN[row.name], (2, 3))
    fn = lambda x: getattr(x, row.method)()  # noqa: E731
    if row.grad is None:  # piecewise constant: no gradient flows, as PyTorch's
        x = tl.tensor(a, device=device, requires_grad=True)
        assert not fn(x).requires_grad
        return
    gradcheck(fn, [a], rng)
    check_device_grads(fn, [a], device, rng)


def test_bitwise_not_of_floats_raises(device):
    with pytest.raises(DTypeError, match="bitwise_not"):
        ~tl.tensor([1.0, 2.0], device=device)


# ---- binary rows -----------------------------------------------------------------------

def _operands(rng, dt, name, shape=(3, 4), rshape=(4,)):
    lo, hi = (0.5, 3) if name == "fmod" and not dt.is_floating_point else (-3, 3)
    a = random_array(rng, shape, dt, -40, 40) if not dt.is_floating_point else random_array(rng, shape, dt, -3, 3)
    b = random_array(rng, rshape, dt, lo, hi)
    if name == "fmod":
        b = np.where(b == 0, np.ones((), b.dtype), b)
    return a, b


@pytest.mark.parametrize("dt", D.ALL, ids=lambda d: d.name)
@pytest.mark.parametrize("name", BINARY_NEW + ("add", "sub", "mul", "maximum", "minimum"))
def test_binary_rows_match_torch_on_every_dtype(device, rng, name, dt):
    """Every binary row on every dtype it has a kernel for (broadcast operands), against torch's
    op in a wide dtype cast back (integers wrap); elsewhere an error naming the op."""
    row = op_table.BINARY_BY_NAME[name]
    a, b = _operands(rng, dt, name)
    if not op_table.defined_for(row, dt.is_floating_point, dt is D.bool_):
        if row.integers:  # else the Tensor computes in the default float, as PyTorch
            with pytest.raises(DTypeError, match=name):
                getattr(tl.tensor(a, device=device), row.method)(tl.tensor(b, device=device))
        return

    def run(dev):
        x, y = tl.tensor(a, device=dev), tl.tensor(b, device=dev)
        got = getattr(x, row.method)(y)
        assert_close(getattr(tl, row.method)(x, y), got.numpy().astype(np.float64) if dt.is_floating_point else
                     got.numpy(), dt)
        return got

    def against_torch(got):
        fn = getattr(torch, row.method)
        ref = fn(_torch(a), _torch(b)) if dt is D.bool_ else fn(_wide(a), _wide(b))
        assert_close(got, _ref(ref, dt), dt)
    on_cpu_and(device, run, against_torch)


@pytest.mark.parametrize("dt", NEW_INTS + (D.bool_,), ids=lambda d: d.name)
def test_comparisons_and_where_on_new_dtypes(device, rng, dt):
    a, b = random_array(rng, (3, 4), dt, -5, 5), random_array(rng, (3, 4), dt, -5, 5)
    ops = ("eq", "ne", "lt", "le", "gt", "ge")

    def run(dev):
        x, y = tl.tensor(a, device=dev), tl.tensor(b, device=dev)
        assert_close(tl.where(x > y, x, y), np.where(a > b, a, b), dt)
        return [getattr(x, op)(y) for op in ops]

    def against_torch(got):
        for op, compared in zip(ops, got):
            assert_close(compared, getattr(torch, op)(_torch(a), _torch(b)).numpy(), tl.bool)
    on_cpu_and(device, run, against_torch)


@pytest.mark.parametrize("name", ["atan2", "fmod", "hypot"])
def test_binary_rows_gradients(device, rng, name):
    a = rng.uniform(0.5, 3, (2, 3)) * rng.choice([-1, 1], (2, 3))
    b = rng.uniform(0.7, 2, (3,)) * rng.choice([-1, 1], (3,))
    if name == "fmod":  # away from the jumps of trunc(a / b)
        a = np.trunc(a / b) * b + 0.3 * b
    fn = lambda x, y: getattr(x, name)(y)  # noqa: E731
    gradcheck(fn, [a, b], rng)
    check_device_grads(fn, [a, b], device, rng)


def test_integer_rows_in_float_and_integer_fmod(device):
    x = tl.tensor([3, -7, 5], dtype=tl.int32, device=device)
    assert x.atan2(x).dtype is tl.float32 and x.hypot(x).dtype is tl.float32
    assert_close(x.fmod(2), np.array([1, -1, 1], np.int32), tl.int32)
    assert_close(tl.fmod(x, tl.tensor([2.5], device=device)), np.array([0.5, -2.0, 0.0]), tl.float32)
    lo = tl.tensor([-128], dtype=tl.int8, device=device)
    assert lo.fmod(-1).tolist() == [0]  # MIN % -1: 0, not a trap
    with pytest.raises(ArgumentError, match="fmod.*division by zero"):
        x.fmod(tl.tensor([1, 0, 1], dtype=tl.int32, device=device))


def test_bitwise_operators_on_integers_and_bools(device, rng):
    a, b = random_array(rng, (3, 4), D.int16, -300, 300), random_array(rng, (4,), D.uint8, 0, 255)
    # each on tensorlite's tensors and on PyTorch's
    ops = (lambda x, y: x & y, lambda x, y: x | y, lambda x, y: x ^ y, lambda x, y: x & 7, lambda x, y: 5 | y,
           lambda x, y: ~x)

    def against_torch(got):
        for op, g in zip(ops, got):
            ref = op(_torch(a), _torch(b))
            assert g.dtype.name == str(ref.dtype).split(".")[1]
            assert_close(g, ref.numpy(), g.dtype)
    on_cpu_and(device, lambda dev: [op(tl.tensor(a, device=dev), tl.tensor(b, device=dev)) for op in ops],
               against_torch)
    x = tl.tensor(a, device=device)
    m = tl.tensor([True, False, True], device=device)
    assert (m & tl.tensor([True, True, False], device=device)).tolist() == [True, False, False]
    assert (m ^ True).tolist() == [False, True, False] and (~m).tolist() == [False, True, False]
    z = x.clone()
    z &= 0xF
    assert_close(z, a & 0xF, D.int16)
    with pytest.raises(DTypeError, match="bitwise_and"):
        tl.tensor([1.0], device=device) & tl.tensor([1.0], device=device)
    with pytest.raises(DTypeError, match="bitwise_or"):
        x | 1.5


@pytest.mark.parametrize("op", ["and", "or", "xor"])
def test_logical_ops_of_any_dtype(device, rng, op):
    a = random_array(rng, (3, 4), D.float32, -1, 1) * (rng.random((3, 4)) < 0.5)
    b = random_array(rng, (4,), D.int8, -2, 2)
    name = f"logical_{op}"

    def run(dev):
        x, y = tl.tensor(a, device=dev), tl.tensor(b, device=dev)
        got = getattr(x, name)(y)
        assert got.dtype is tl.bool
        return got, getattr(tl, name)(x, 0)

    def against_torch(got):
        assert_close(got[0], getattr(torch, name)(_torch(a), _torch(b)).numpy(), tl.bool)
        assert_close(got[1], getattr(torch, name)(_torch(a), torch.tensor(0)).numpy())
    on_cpu_and(device, run, against_torch)
    assert_close(tl.logical_not(tl.tensor(b, device=device)), np.logical_not(b))


# ---- composites ------------------------------------------------------------------------

@pytest.mark.parametrize("dt", D.ALL, ids=lambda d: d.name)
def test_isnan_isinf_isfinite(device, rng, dt):
    a = random_array(rng, (2, 5), dt, -3, 3)
    if dt.is_floating_point:
        a.flat[:4] = np.array([np.nan, np.inf, -np.inf, 0.0]).astype(dt.np)
    names = ("isnan", "isinf", "isfinite", "isposinf", "isneginf")

    def run(dev):
        x = tl.tensor(a, device=dev)
        tested = []
        for name in names:
            got = getattr(x, name)()
            assert got.dtype is tl.bool
            assert_close(getattr(tl, name)(x), got.numpy())
            tested.append(got)
        return tested

    def against_torch(got):
        for name, tested in zip(names, got):
            assert_close(tested, getattr(torch, name)(_torch(a)).numpy())
    on_cpu_and(device, run, against_torch)


@pytest.mark.parametrize("dt", [D.float32, D.float16, D.float64, D.int32, D.bool_], ids=lambda d: d.name)
@pytest.mark.parametrize("equal_nan", [False, True])
def test_isclose_allclose(device, rng, dt, equal_nan):
    a = random_array(rng, (3, 4), dt, -3, 3)
    b = a.copy()
    if dt.is_floating_point:
        b = (a.astype(np.float64) + rng.choice([0, 1e-6, 1e-3, 1], (3, 4)) * np.abs(a)).astype(dt.np)
        a.flat[:3] = np.array([np.nan, np.inf, 1.0]).astype(dt.np)
        b.flat[:3] = np.array([np.nan, np.inf, -np.inf]).astype(dt.np)
    elif dt is not D.bool_:
        b = (a + rng.integers(0, 2, (3, 4))).astype(dt.np)
    tolerances = ((1e-5, 1e-8), (1e-2, 0.5))

    def run(dev):
        x, y = tl.tensor(a, device=dev), tl.tensor(b, device=dev)
        return [(tl.isclose(x, y, rtol, atol, equal_nan), x.allclose(y, rtol=rtol, atol=atol, equal_nan=equal_nan))
                for rtol, atol in tolerances]

    def against_torch(got):
        for (rtol, atol), (close, all_close) in zip(tolerances, got):
            assert_close(close, torch.isclose(_torch(a), _torch(b), rtol, atol, equal_nan).numpy())
            assert all_close == torch.allclose(_torch(a), _torch(b), rtol, atol, equal_nan)
    on_cpu_and(device, run, against_torch)
    x, y = tl.tensor(a, device=device), tl.tensor(b, device=device)
    assert x.allclose(x, equal_nan=True) and tl.isclose(x, x, equal_nan=True).all().item()
    with pytest.raises(DTypeError, match="isclose.*same dtype"):
        tl.isclose(x, y.to(tl.float64 if dt is not D.float64 else tl.float32))


@pytest.mark.parametrize("dt", D.FLOATS, ids=lambda d: d.name)
def test_lerp(device, rng, dt):
    a, b, w = (random_array(rng, s, dt) for s in ((3, 4), (3, 4), (4,)))

    def run(dev):
        x, y, tw = (tl.tensor(v, device=dev) for v in (a, b, w))
        return tl.lerp(x, y, 0.3), x.lerp(y, tw)

    def against_torch(got):
        assert_close(got[0], _ref(torch.lerp(_wide(a), _wide(b), 0.3), dt), dt, terms=3)
        assert_close(got[1], _ref(torch.lerp(_wide(a), _wide(b), _wide(w)), dt), dt, terms=3)
    on_cpu_and(device, run, against_torch, terms=3)
    x, y = tl.tensor(a, device=device), tl.tensor(b, device=device)
    x.lerp_(y, 1.0)
    assert_close(x, b, dt, terms=3)
    with pytest.raises(DTypeError, match="lerp"):
        tl.lerp(tl.tensor([1, 2], device=device), tl.tensor([3, 4], device=device), 0.5)


def test_lerp_gradients(device, rng):
    a, b, w = rng.standard_normal((2, 3)), rng.standard_normal((2, 3)), rng.uniform(0, 1, (3,))
    for fn, arrays in ((lambda x, y, v: tl.lerp(x, y, v), [a, b, w]), (lambda x, y: x.lerp(y, 0.25), [a, b])):
        gradcheck(fn, arrays, rng)
        check_device_grads(fn, arrays, device, rng)


@pytest.mark.parametrize("dt", [D.float32, D.int8, D.uint8, D.int64, D.bool_], ids=lambda d: d.name)
def test_any_all_count_nonzero(device, rng, dt):
    a = random_array(rng, (3, 4, 2), dt, -2, 2) * (rng.random((3, 4, 2)) < 0.7)
    a = a.astype(dt.np)
    a[0] = np.ones((), dt.np)  # a slice with no zero: all() is True somewhere
    reductions = [(name, kw) for kw in ({}, {"dim": 1}, {"dim": -1, "keepdim": True}, {"dim": (0, 2)})
                  for name in ("any", "all")]
    count_dims = (None, 0, (1, 2))

    def run(dev):
        x = tl.tensor(a, device=dev)
        reduced, counted = [], []
        for name, kw in reductions:
            got = getattr(x, name)(**kw)
            assert got.dtype is tl.bool
            assert_close(getattr(tl, name)(x, **kw), got.numpy())
            reduced.append(got)
        for dim in count_dims:
            got = x.count_nonzero(dim)
            assert got.dtype is tl.int64
            counted.append(got)
        return reduced, counted

    def against_torch(got):
        t = _torch(a)
        for (name, kw), reduced in zip(reductions, got[0]):
            assert_close(reduced, getattr(torch, name)(t, **kw).bool().numpy())  # torch: uint8 for uint8
        for dim, counted in zip(count_dims, got[1]):
            assert_close(counted, torch.count_nonzero(t, dim).numpy())
    on_cpu_and(device, run, against_torch)
    empty = tl.zeros(0, 3, dtype=dt, device=device)
    assert not empty.any().item() and empty.all().item() and empty.all(0).tolist() == [True] * 3


# ---- the int8 / int16 / int32 dtypes -----------------------------------------------------

@needs_torch("tensorlite's type promotion against torch.promote_types")
def test_promotion_of_every_pair_matches_torch():
    names = [d for d in D.ALL if d is not D.uint32]  # torch does not promote uint32
    for a in names:
        for b in names:
            assert tl.promote_types(a, b).name == str(torch.promote_types(_tdtype(a), _tdtype(b))).split(".")[1], (a, b)


def test_promotion_of_uint32_and_the_dtype_aliases():
    assert tl.promote_types(tl.uint32, tl.int8) is tl.int64 and tl.promote_types(tl.uint32, tl.uint8) is tl.uint32
    assert (tl.int, tl.short, tl.int16, tl.int8) == (tl.int32, tl.int16, D.int16, D.int8)


@pytest.mark.parametrize("dt", NEW_INTS, ids=lambda d: d.name)
def test_new_integer_dtypes_work_like_torch(device, rng, dt):
    a, b = random_array(rng, (3, 4), dt, -100, 100), random_array(rng, (3, 4), D.uint8, 0, 200)
    # each on tensorlite's tensors and on PyTorch's (lib: tl or torch)
    ops = (lambda x, y, lib: x + y, lambda x, y, lib: x * 3, lambda x, y, lib: x - 1.5, lambda x, y, lib: x * y,
           lambda x, y, lib: -x, lambda x, y, lib: x.sum(), lambda x, y, lib: x.sum(0),
           lambda x, y, lib: x.max(1).values, lambda x, y, lib: x.argmin(1), lambda x, y, lib: x // 7,
           lambda x, y, lib: x % 7, lambda x, y, lib: x / 4, lambda x, y, lib: x.abs(),
           lambda x, y, lib: x.clamp(-5, 5), lambda x, y, lib: x.float(), lambda x, y, lib: x.half().int(),
           lambda x, y, lib: x.short(), lambda x, y, lib: x.char(), lambda x, y, lib: x.to(lib.float16) + x,
           lambda x, y, lib: x @ x.mT if dt is not D.int8 else x)

    def against_torch(got):
        for op, g in zip(ops, got):
            ref = op(_torch(a), _torch(b), torch)
            assert g.dtype.name == str(ref.dtype).split(".")[1], (g.dtype, ref.dtype)
            assert_close(g, ref.float().numpy() if ref.is_floating_point() else ref.numpy(), g.dtype, terms=4)
    on_cpu_and(device, lambda dev: [op(tl.tensor(a, device=dev), tl.tensor(b, device=dev), tl) for op in ops],
               against_torch, terms=4)
    x = tl.tensor(a, device=device)
    assert x.dtype is dt and tl.tensor(a.tolist(), dtype=dt).dtype is dt
    assert_close(x[1:, ::2].contiguous(), a[1:, ::2], dt)
    assert_close(tl.cat([x, x]), np.concatenate([a, a]), dt)
    assert tl.tensor([1, 2], device=device).int().dtype is tl.int32


def test_integer_data_out_of_range_raises():
    with pytest.raises(Exception, match="int8"):
        tl.tensor([300], dtype=tl.int8)
    assert tl.tensor(np.array([1, 2], np.int16)).dtype is tl.int16


# ---- numpy operands ---------------------------------------------------------------------

def test_ndarray_operands_on_either_side(device, rng):
    a, n = random_array(rng, (3, 4), D.float32), rng.standard_normal(4)
    # each on a tensorlite tensor and the ndarray, and on PyTorch's tensors of both (lib: tl or torch)
    ops = (lambda x, n, lib: x + n, lambda x, n, lib: n + x, lambda x, n, lib: n - x, lambda x, n, lib: x * n,
           lambda x, n, lib: n / x, lambda x, n, lib: n ** x.abs(), lambda x, n, lib: x // n,
           lambda x, n, lib: n % x, lambda x, n, lib: x < n, lambda x, n, lib: n >= x, lambda x, n, lib: n == x,
           lambda x, n, lib: lib.maximum(x, n))

    def run(dev):
        x = tl.tensor(a, device=dev)
        got = [op(x, n, tl) for op in ops]
        for g in got:
            assert isinstance(g, tl.Tensor) and str(g.device) == str(x.device)
        return got

    def against_torch(got):
        for op, g in zip(ops, got):
            ref = op(_torch(a), torch.from_numpy(n), torch)
            assert g.dtype.name == str(ref.dtype).split(".")[1], (g.dtype, ref.dtype)
            assert_close(g, ref.numpy(), g.dtype)
    on_cpu_and(device, run, against_torch)
    i = tl.tensor([1, 2, 3], dtype=tl.int32, device=device)
    assert (i & np.array([3, 3, 3], np.int8)).tolist() == [1, 2, 3]
    assert (np.array([1, 2, 4], np.int16) + i).dtype is tl.int32


@pytest.mark.parametrize("scalar", [np.float32(2.5), np.float64(-1.5), np.int64(3), np.int8(-2), np.uint8(7),
                                    np.bool_(True), np.float16(0.5)], ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("dt", [D.float16, D.int32, D.uint8, D.bool_], ids=lambda d: d.name)
def test_numpy_scalars_act_like_python_scalars(device, rng, dt, scalar):
    a = random_array(rng, (5,), dt, 1, 9)
    s = scalar.item()  # torch's reading of a numpy scalar: the Python scalar of its kind
    for op in (lambda u, v: u * v, lambda u, v: v * u, lambda u, v: u + v, lambda u, v: v - u,
               lambda u, v: u / v, lambda u, v: u > v, lambda u, v: v == u, lambda u, v: u != v):
        def run(dev, op=op):
            """op with the numpy scalar: as with the Python scalar (None where that is refused)."""
            x = tl.tensor(a, device=dev)
            try:
                same = op(x, s)
            except tl.TensorliteError:
                with pytest.raises(tl.TensorliteError):
                    op(x, scalar)
                return None
            got = op(x, scalar)
            assert isinstance(got, tl.Tensor), type(got)
            assert got.dtype is same.dtype
            assert_close(got, same.numpy(), got.dtype)
            return got

        def against_torch(got, op=op):
            try:
                ref = op(_torch(a), s)
            except RuntimeError:  # torch refuses subtraction with bools; tensorlite: as with a Python scalar
                return
            assert got is not None, "tensorlite refuses what PyTorch computes"
            assert got.dtype.name == str(ref.dtype).split(".")[1], (got.dtype, ref.dtype)
            assert_close(got, ref.float().numpy() if ref.is_floating_point() else ref.numpy(), got.dtype)
        on_cpu_and(device, run, against_torch)
