"""Unary, binary (broadcasting, scalars, reflected forms), comparisons, where, clamp and
masked_fill, on every device and dtype, against numpy computed in float64."""
import json
import math
import operator
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tensorlite as tl
from tensorlite.backends.cpu import erf_fallback
from conftest import (ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, as_f64, assert_close, make_tensor,
                      random_array)

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


# name -> (numpy reference on float64, input range). Ranges keep every function finite
# and well conditioned (log/sqrt on positives, reciprocal away from 0).
UNARY = {
    "exp": (np.exp, (-3, 3)),
    "log": (np.log, (0.1, 4)),
    "sin": (np.sin, (-4, 4)),
    "cos": (np.cos, (-4, 4)),
    "tanh": (np.tanh, (-3, 3)),
    "abs": (np.abs, (-3, 3)),
    "neg": (np.negative, (-3, 3)),
    "reciprocal": (np.reciprocal, (0.5, 3)),
    "square": (np.square, (-3, 3)),
    "sqrt": (np.sqrt, (0.01, 4)),
    "erf": (_erf, (-2, 2)),
    "relu": (lambda x: np.maximum(x, 0), (-3, 3)),
    "floor": (np.floor, (-4, 4)),
    "ceil": (np.ceil, (-4, 4)),
    "round": (np.rint, (-4, 4)),
    "sign": (np.sign, (-3, 3)),
    "sigmoid": (_sigmoid, (-5, 5)),
}

# candle's activations that PyTorch keeps in nn.functional (gelu = exact erf form,
# gelu_tanh = the tanh approximation)
ACTIVATIONS = {
    "gelu_tanh": (lambda x: x.gelu_tanh(), _gelu_tanh),
    "gelu_erf": (lambda x: x.gelu(), lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2)))),
    "silu": (lambda x: tl.silu(x), lambda x: x * _sigmoid(x)),
    "elu": (lambda x: tl.elu(x, 0.7), lambda x: np.where(x > 0, x, 0.7 * (np.exp(x) - 1))),
}


def _unary_input(rng, shape, dtype, name):
    lo, hi = UNARY[name][1]
    a = random_array(rng, shape, dtype, lo, hi)
    if name == "reciprocal":  # both signs, away from zero
        a = np.asarray(a.astype(np.float64) * np.where(rng.random(shape) < 0.5, -1, 1)).astype(dtype.np)
    return a


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_float(device, rng, name, dtype):
    a = _unary_input(rng, (5, 7), dtype, name)
    x = tl.tensor(a, device=device)
    ref = UNARY[name][0](as_f64(a))
    assert_close(getattr(x, name)(), ref, dtype)
    assert_close(getattr(tl, name)(x), ref, dtype)
    # strided input: the kernel must read through the layout
    assert_close(getattr(x.T[1:], name)(), ref.T[1:], dtype)


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_on_empty_and_0d(device, name):
    e = tl.zeros((0, 3), device=device)
    assert getattr(e, name)().shape == (0, 3)
    s = tl.tensor(0.75, device=device)
    assert_close(getattr(s, name)(), UNARY[name][0](np.float64(0.75)), tl.float32)


@pytest.mark.parametrize("shape", [(), (0, 3), (5,), (2, 3, 4)])
def test_cpu_erf_fallback_any_shape(rng, shape):
    # what the cpu backend's erf runs without scipy; called directly so it runs here too
    a = rng.uniform(-3, 3, shape).astype(np.float32)
    got = erf_fallback(a)
    assert isinstance(got, np.ndarray) and got.dtype == np.float64 and got.shape == shape
    np.testing.assert_array_equal(got, _erf(a.astype(np.float64)))


def test_cpu_erf_and_gelu_without_scipy():
    # a fresh process where `import scipy` fails, so the backend picks the fallback itself
    code = textwrap.dedent("""
        import json, sys
        sys.modules["scipy"] = None
        import tensorlite as tl
        print(json.dumps([[x.erf().tolist(), x.gelu().tolist()] for x in (tl.tensor(0.75), tl.tensor([[0.75, -1.5]]))]))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for (erf, gelu), a in zip(json.loads(out.stdout), (0.75, [[0.75, -1.5]]), strict=True):
        a = np.float32(a).astype(np.float64)
        assert_close(tl.tensor(erf), _erf(a), tl.float32)
        assert_close(tl.tensor(gelu), 0.5 * a * (1 + _erf(a / math.sqrt(2))), tl.float32)


def test_round_is_half_to_even(device):
    a = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49, 2.51], np.float32)
    assert_close(tl.tensor(a, device=device).round(), np.rint(a), tl.float32)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + (tl.int64,), ids=lambda d: d.name)
def test_affine(device, rng, dtype):
    a = random_array(rng, (3, 5), dtype, -4, 4)
    x = tl.tensor(a, device=device)
    mul, add = (3, -2) if dtype is tl.int64 else (1.5, -0.25)
    got = x.affine(mul, add)
    assert got.dtype is dtype
    assert_close(got, as_f64(a) * mul + add if dtype.is_floating_point else a * mul + add, dtype)
    assert_close(x.T.affine(mul, add), (as_f64(a) * mul + add).T.astype(dtype.np), dtype)


def test_neg_operator_and_abs_builtin(device, rng):
    x, a = make_tensor(rng, (4,), tl.float32, device)
    assert_close(-x, -a, tl.float32)
    assert_close(abs(x), np.abs(a), tl.float32)
    assert_close(+x, a, tl.float32)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activations(device, rng, name, dtype):
    fn, ref = ACTIVATIONS[name]
    a = random_array(rng, (4, 9), dtype, -4, 4)
    x = tl.tensor(a, device=device)
    assert_close(fn(x), ref(as_f64(a)), dtype)
    assert_close(fn(x.T), ref(as_f64(a).T), dtype)


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("name", ["abs", "square", "sign", "relu", "floor", "ceil", "round"])
def test_unary_integer_keeps_dtype(device, rng, name, dtype):
    a = random_array(rng, (3, 5), dtype, -5, 9)
    ref = {"abs": np.abs, "square": np.square, "sign": np.sign, "relu": lambda v: np.maximum(v, 0),
           "floor": np.floor, "ceil": np.ceil, "round": np.rint}[name](a)
    got = getattr(tl.tensor(a, device=device), name)()
    assert got.dtype is dtype
    assert_close(got, ref.astype(dtype.np), dtype)


def test_neg_int64(device, rng):
    x, a = make_tensor(rng, (6,), tl.int64, device, -9, 9)
    assert_close(-x, -a, tl.int64)


@pytest.mark.parametrize("dtype", [tl.int64, tl.uint8, tl.bool], ids=lambda d: d.name)
@pytest.mark.parametrize("name", ["exp", "sqrt", "sin", "sigmoid", "log"])
def test_unary_transcendental_on_integers_returns_float32(device, rng, name, dtype):
    a = random_array(rng, (7,), dtype, 1, 5)
    got = getattr(tl.tensor(a, device=device), name)()
    assert got.dtype is tl.float32
    with np.errstate(divide="ignore"):  # log(False) = -inf
        expected = UNARY[name][0](as_f64(a))
    assert_close(got, expected, tl.float32)


# ---------------------------------------------------------------------------- binary
BROADCAST_PAIRS = [
    ((3, 4), (3, 4)), ((3, 1), (1, 4)), ((4,), (2, 3, 4)), ((), (3,)), ((2, 1, 3), (4, 1)),
    ((0, 3), (1, 3)), ((1,), (0,)), ((5, 1, 1), (1,)), ((1, 1), ()),
]
BINARY = {
    "add": (operator.add, np.add), "sub": (operator.sub, np.subtract),
    "mul": (operator.mul, np.multiply), "div": (operator.truediv, np.true_divide),
    "maximum": (tl.maximum, np.maximum), "minimum": (tl.minimum, np.minimum),
}


def _operands(rng, sa, sb, dtype, name):
    a = random_array(rng, sa, dtype, -3, 3)
    b = random_array(rng, sb, dtype, -3, 3)
    if name == "div":  # divisor away from 0, both signs where the dtype has them
        b = random_array(rng, sb, dtype, 0.5 if dtype.is_floating_point else 1, 3)
        if dtype.is_signed:
            b = np.asarray(b * np.where(rng.random(sb) < 0.5, -1, 1)).astype(dtype.np)
    return a, b


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("sa, sb", BROADCAST_PAIRS, ids=str)
def test_binary_float_broadcasting(device, rng, name, dtype, sa, sb):
    a, b = _operands(rng, sa, sb, dtype, name)
    op, ref = BINARY[name]
    x, y = tl.tensor(a, device=device), tl.tensor(b, device=device)
    expected = ref(as_f64(a), as_f64(b))
    assert_close(op(x, y), expected, dtype)
    assert_close(op(y, x), ref(as_f64(b), as_f64(a)), dtype)


# bool subtraction is an error in PyTorch (checked in test_tensor_errors), so it is not a case here
@pytest.mark.parametrize("name, dtype", [(n, d) for n in ("add", "sub", "mul", "maximum", "minimum")
                                         for d in INT_DTYPES + (tl.bool,) if (n, d) != ("sub", tl.bool)],
                         ids=lambda v: getattr(v, "name", v))
def test_binary_integer_exact(device, rng, name, dtype):
    a, b = _operands(rng, (4, 1), (3,), dtype, name)
    op, ref = BINARY[name]
    got = op(tl.tensor(a, device=device), tl.tensor(b, device=device))
    expected = ref(a, b)
    if dtype is tl.bool and name in ("add", "mul"):
        expected = np.logical_or(a, b) if name == "add" else np.logical_and(a, b)
    assert got.dtype is dtype
    assert_close(got, expected.astype(dtype.np), dtype)


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: d.name)
def test_integer_true_division_gives_float32(device, rng, dtype):
    a, b = _operands(rng, (3, 4), (4,), dtype, "div")
    got = tl.tensor(a, device=device) / tl.tensor(b, device=device)
    assert_close(got, as_f64(a) / as_f64(b), tl.float32)
    got = tl.tensor(a, device=device) / 4
    assert_close(got, as_f64(a) / 4, tl.float32)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
def test_pow_float(device, rng, dtype):
    a = random_array(rng, (3, 4), dtype, 0.5, 2.0)
    e = random_array(rng, (4,), dtype, -2.0, 2.0)
    x, y = tl.tensor(a, device=device), tl.tensor(e, device=device)
    assert_close(x ** y, as_f64(a) ** as_f64(e), dtype)
    assert_close(x ** 2, as_f64(a) ** 2, dtype)
    assert_close(x ** 0.5, as_f64(a) ** 0.5, dtype)
    assert_close(x ** -1.5, as_f64(a) ** -1.5, dtype)
    assert_close(2.0 ** x, 2.0 ** as_f64(a), dtype)
    assert_close(tl.pow(x, 3), as_f64(a) ** 3, dtype)
    # negative base with an integral exponent stays real
    n = random_array(rng, (5,), dtype, -2.0, -0.5)
    assert_close(tl.tensor(n, device=device) ** 3, as_f64(n) ** 3, dtype)
    assert_close(tl.tensor(n, device=device) ** 2.0, as_f64(n) ** 2, dtype)


def test_pow_integer(device, rng):
    a = random_array(rng, (6,), tl.int64, -3, 3)
    x = tl.tensor(a, device=device)
    got = x ** 3
    assert got.dtype is tl.int64
    assert_close(got, a ** 3, tl.int64)
    e = random_array(rng, (6,), tl.int64, 0, 3)
    got = x ** tl.tensor(e, device=device)
    assert got.dtype is tl.int64
    assert_close(got, a ** e, tl.int64)
    assert_close(2 ** tl.tensor(e, device=device), 2 ** e, tl.int64)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + (tl.int64, tl.uint8), ids=lambda d: d.name)
def test_floor_divide_and_remainder_follow_python(device, rng, dtype):
    # Python/PyTorch semantics: the quotient rounds down, the remainder takes the divisor's sign.
    # Like every f16/bf16 op, the result is rounded once (PyTorch's bf16 remainder is within
    # one bf16 ulp of the exact value); many elements, so rare misroundings are caught.
    a = random_array(rng, (4000, 5), dtype, -9, 9)
    b = random_array(rng, (5,), dtype, 1, 4)
    if dtype.is_signed:
        b = np.asarray(b * np.where(rng.random(5) < 0.5, -1, 1)).astype(dtype.np)
    x, y = tl.tensor(a, device=device), tl.tensor(b, device=device)
    ref_a, ref_b = (as_f64(a), as_f64(b)) if dtype.is_floating_point else (a, b)
    for got, expected in ((x // y, np.floor_divide(ref_a, ref_b)), (x % y, np.remainder(ref_a, ref_b)),
                          (tl.floor_divide(x, 3), np.floor_divide(ref_a, 3)), (x % 3, np.remainder(ref_a, 3)),
                          (7 // y, np.floor_divide(7, ref_b)), (tl.remainder(x, y), np.remainder(ref_a, ref_b))):
        assert got.dtype is dtype
        assert_close(got, expected, dtype)


SCALAR_OPS = [
    ("x + s", lambda x, s: x + s), ("s + x", lambda x, s: s + x),
    ("x - s", lambda x, s: x - s), ("s - x", lambda x, s: s - x),
    ("x * s", lambda x, s: x * s), ("s * x", lambda x, s: s * x),
    ("x / s", lambda x, s: x / s), ("s / x", lambda x, s: s / x),
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("scalar", [2, -1.5, 0.25])
@pytest.mark.parametrize("label, fn", SCALAR_OPS, ids=[s[0] for s in SCALAR_OPS])
def test_binary_with_python_scalar(device, rng, label, fn, scalar, dtype):
    a = random_array(rng, (3, 5), dtype, 0.5, 3)  # positive: `s / x` stays finite
    got = fn(tl.tensor(a, device=device), scalar)
    assert_close(got, fn(as_f64(a), scalar), dtype)


@pytest.mark.parametrize("label, fn", SCALAR_OPS[:6], ids=[s[0] for s in SCALAR_OPS[:6]])
def test_integer_tensor_with_int_scalar_is_exact(device, rng, label, fn):
    a = random_array(rng, (3, 5), tl.int64, -9, 9)
    got = fn(tl.tensor(a, device=device), 3)
    assert got.dtype is tl.int64
    assert_close(got, fn(a, 3), tl.int64)


def test_numpy_scalar_and_0d_tensor_operands(device, rng):
    x, a = make_tensor(rng, (4,), tl.float32, device)
    assert_close(x * np.float32(2.5), a * 2.5, tl.float32)
    s = tl.tensor(1.25, device=device)
    assert_close(x + s, a + 1.25, tl.float32)
    assert_close(s - x, 1.25 - a, tl.float32)


# --------------------------------------------------------------------- comparisons
CMP = [("eq", operator.eq), ("ne", operator.ne), ("lt", operator.lt),
       ("le", operator.le), ("gt", operator.gt), ("ge", operator.ge)]


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("name, op", CMP, ids=[c[0] for c in CMP])
def test_comparisons_return_bool(device, rng, name, op, dtype):
    # small integer-valued inputs so that ties (eq/le/ge) really occur
    a = rng.integers(0, 3, (4, 1, 3)).astype(dtype.np)
    b = rng.integers(0, 3, (5, 1)).astype(dtype.np)
    x, y = tl.tensor(a, device=device), tl.tensor(b, device=device)
    for got, expected in ((op(x, y), op(a, b)), (op(x, 1), op(a, a.dtype.type(1))),
                          (op(1, x), op(a.dtype.type(1), a))):
        assert got.dtype is tl.bool
        assert_close(got, expected, tl.bool)
    method = getattr(x, name)
    assert_close(method(y), op(a, b), tl.bool)


def test_comparison_across_dtypes_promotes(device):
    x = tl.tensor([1, 2, 3], device=device)
    y = tl.tensor([1.0, 2.5, 2.0], device=device)
    assert_close(x == y, np.array([True, False, False]), tl.bool)
    assert_close(x > y, np.array([False, False, True]), tl.bool)
    assert_close(x < 2.5, np.array([True, True, False]), tl.bool)


def test_comparison_nan(device):
    x = tl.tensor([float("nan"), 1.0], device=device)
    assert_close(x == x, np.array([False, True]), tl.bool)
    assert_close(x != x, np.array([True, False]), tl.bool)


# ----------------------------------------------------------------------------- where
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_where_broadcasts_three_ways(device, rng, dtype):
    c = rng.random((3, 1, 4)) < 0.5
    a = random_array(rng, (5, 1), dtype)
    b = random_array(rng, (4,), dtype)
    got = tl.where(tl.tensor(c, device=device), tl.tensor(a, device=device), tl.tensor(b, device=device))
    assert got.dtype is dtype
    assert_close(got, np.where(c, a, b), dtype)


def test_where_scalars_and_promotion(device, rng):
    c = rng.random((3, 4)) < 0.5
    x, a = make_tensor(rng, (3, 4), tl.float32, device)
    ct = tl.tensor(c, device=device)
    assert_close(tl.where(ct, x, 0.0), np.where(c, a, 0.0), tl.float32)
    assert_close(tl.where(ct, -1.5, x), np.where(c, -1.5, a), tl.float32)
    assert_close(x.where(ct, 2.0), np.where(c, a, 2.0), tl.float32)
    i = tl.tensor(np.arange(12).reshape(3, 4), device=device)
    got = tl.where(ct, i, x)
    assert got.dtype is tl.float32
    assert_close(got, np.where(c, np.arange(12).reshape(3, 4), a), tl.float32)
    d = tl.where(ct, x.to(tl.float64), x)
    assert d.dtype is tl.float64


def test_where_with_non_contiguous_operands(device, rng):
    x, a = make_tensor(rng, (4, 6), tl.float32, device)
    c = a.T[::2] > 0
    got = tl.where(x.T[::2] > 0, x.T[::2], x.T[1::2])
    assert_close(got, np.where(c, a.T[::2], a.T[1::2]), tl.float32)


# ----------------------------------------------------------------------------- clamp
@pytest.mark.parametrize("dtype", FLOAT_DTYPES + (tl.int64, tl.uint8), ids=lambda d: d.name)
def test_clamp(device, rng, dtype):
    a = random_array(rng, (4, 5), dtype, 0, 9)
    x = tl.tensor(a, device=device)
    lo, hi = 2, 6
    for got, expected in ((x.clamp(lo, hi), np.clip(a, lo, hi)), (x.clamp(min=lo), np.maximum(a, lo)),
                          (x.clamp(max=hi), np.minimum(a, hi)), (tl.clamp(x, lo, hi), np.clip(a, lo, hi))):
        assert got.dtype is dtype
        assert_close(got, expected.astype(dtype.np), dtype)


def test_clamp_float_bounds_and_tensor_bounds(device, rng):
    x, a = make_tensor(rng, (3, 4), tl.float32, device)
    assert_close(x.clamp(-0.5, 0.75), np.clip(a, -0.5, 0.75), tl.float32)
    lo, lo_a = make_tensor(rng, (4,), tl.float32, device, -1, 0)
    assert_close(x.clamp(min=lo), np.maximum(a, lo_a), tl.float32)
    assert_close(x.clip(-1.0, 1.0), np.clip(a, -1, 1), tl.float32)


# ----------------------------------------------------------------------- masked_fill
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_masked_fill(device, rng, dtype):
    a = random_array(rng, (3, 4), dtype)
    m = rng.random((4,)) < 0.5
    x = tl.tensor(a, device=device)
    value = True if dtype is tl.bool else 1
    got = x.masked_fill(tl.tensor(m, device=device), value)
    assert got.dtype is dtype
    assert_close(got, np.where(m, np.asarray(value, dtype.np), a), dtype)
    fm = a.astype(np.float64) > 0.5
    got = tl.masked_fill(x, tl.tensor(fm, device=device), value)
    assert_close(got, np.where(fm, np.asarray(value, dtype.np), a), dtype)


def test_masked_fill_float_values(device, rng):
    x, a = make_tensor(rng, (2, 3, 4), tl.float32, device)
    m = a > 0
    got = x.masked_fill(tl.tensor(m, device=device), float("-inf"))
    assert_close(got, np.where(m, -np.inf, a), tl.float32)
    got = x.permute(2, 0, 1).masked_fill(tl.tensor(m.transpose(2, 0, 1), device=device), -2.5)
    assert_close(got, np.where(m, -2.5, a).transpose(2, 0, 1), tl.float32)


def test_copy_runs_writes_each_run_at_its_offset(device):
    """The storage contract's copy_runs (DDP's bucket buffers): runs of the destination's
    float dtype (one batched launch on GPUs), from a view's offset, of another dtype (cast),
    an empty one; elements outside every run keep their values."""
    a = tl.arange(8, dtype=tl.float32, device=device) + 1
    b = (tl.arange(12, dtype=tl.float32, device=device) * -1).reshape(3, 4)[1:]  # a view at offset 4
    c = tl.tensor([0.5, 1.5, 2.5], dtype=tl.float64, device=device)
    dst = tl.full((20,), 7.0, device=device)
    dst._storage.copy_runs([(a._storage, 2, 0, 5), (b._storage, b._layout.offset, 6, 8),
                            (c._storage, 0, 15, 3), (a._storage, 0, 19, 0)])
    want = np.full(20, 7.0, np.float32)
    want[0:5] = np.arange(8)[2:7] + 1
    want[6:14] = -np.arange(4, 12)
    want[15:18] = [0.5, 1.5, 2.5]
    np.testing.assert_array_equal(dst.numpy(), want)
