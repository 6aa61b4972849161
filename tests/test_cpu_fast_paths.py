"""The cpu backend's fast paths for tiny ops (issue 47): an elementwise op whose operands are whole
storages hands the storages' own arrays to numpy (no read-only view) and sets numpy's error state
directly, and an op's autograd node holds its output only where the gradient reads it. Each gives
what the general path gives, leaves its operands and numpy's settings alone, and frees its output
by reference counting."""
import gc
import weakref

import numpy as np
import pytest

import tensorlite as tl
from tensorlite import op_table

from conftest import random_array

_DTYPES = {"float32": (True, False), "float64": (True, False), "int64": (False, False), "bool": (False, True)}


def _pair(rng, dtype):
    """(whole, view): equal values, one a whole storage, the other a strided view of a larger one."""
    x = random_array(rng, (3, 4), getattr(tl, dtype), *((0.1, 0.9) if dtype.startswith("float") else (1, 9)))
    whole = tl.tensor(x)
    big = tl.tensor(np.concatenate([x, x], axis=1))  # x is every row's first 4 columns
    return whole, big[:, :4]


@pytest.mark.parametrize("dtype", list(_DTYPES))
def test_unary_ops_on_whole_storages_agree_with_views_and_leave_the_operand(rng, dtype):
    is_float, is_bool = _DTYPES[dtype]
    for row in op_table.UNARY:
        if not op_table.defined_for(row, is_float, is_bool):
            continue
        whole, view = _pair(rng, dtype)
        before = whole.numpy().copy()
        got, ref = getattr(whole, row.method)(), getattr(view, row.method)()
        np.testing.assert_array_equal(got.numpy(), ref.numpy(), err_msg=row.name)
        np.testing.assert_array_equal(whole.numpy(), before, err_msg=f"{row.name} wrote its operand")


@pytest.mark.parametrize("dtype", list(_DTYPES))
def test_binary_ops_on_whole_storages_agree_with_views_and_leave_the_operands(rng, dtype):
    is_float, is_bool = _DTYPES[dtype]
    for row in op_table.BINARY:
        if not op_table.defined_for(row, is_float, is_bool) or (row.integers is False and not is_float):
            continue
        (a, av), (b, bv) = _pair(rng, dtype), _pair(rng, dtype)
        if row.name.endswith("shift"):
            b, bv = b % 8, bv % 8
        before = a.numpy().copy(), b.numpy().copy()
        fn = getattr(tl.nn.functional, row.method) if not row.method_too else getattr(tl, row.method)
        got, ref = fn(a, b), fn(av, bv)
        assert got.dtype is ref.dtype
        np.testing.assert_array_equal(got.numpy(), ref.numpy(), err_msg=row.name)
        for t, v in zip((a, b), before):
            np.testing.assert_array_equal(t.numpy(), v, err_msg=f"{row.name} wrote an operand")


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_reductions_on_whole_storages_agree_with_views_and_leave_the_operand(rng, dtype):
    whole, view = _pair(rng, dtype)
    before = whole.numpy().copy()
    cases = {"sum": lambda t: t.sum(), "sum(0)": lambda t: t.sum(0), "sum(-1, keepdim)": lambda t: t.sum(-1, True),
             "amax(1)": lambda t: t.amax(1), "amin": lambda t: t.amin(), "argmax(0)": lambda t: t.argmax(0),
             "mean(1)": lambda t: t.mean(1) if dtype != "int64" else t.sum(1)}
    for name, fn in cases.items():
        got, ref = fn(whole), fn(view)
        assert got.shape == ref.shape and got.dtype is ref.dtype, name
        np.testing.assert_array_equal(got.numpy(), ref.numpy(), err_msg=name)
        np.testing.assert_array_equal(whole.numpy(), before, err_msg=f"{name} wrote its operand")


def test_overflow_gives_inf_and_leaves_numpys_error_state():
    x = tl.tensor([3e38, 1.0], dtype=tl.float32)
    settings = np.geterr()
    with np.errstate(all="raise"):  # a user's setting: tensorlite's ops never raise or warn through it
        assert (x + x).tolist()[0] == float("inf")
        assert (x * 2).tolist()[0] == float("inf")
        assert np.isnan(((x + x) - x.exp()).numpy()[0])  # inf - inf
        with pytest.raises(FloatingPointError):
            np.float32(3e38) * np.float32(10)  # and it is still in force around them
    assert np.geterr() == settings


def test_scaling_keeps_the_sign_of_zero():
    # x * 2 is one multiply (as torch's): x * 2 + 0 would turn -0 into +0
    y = (tl.tensor([-0.0, 1.5]) * 2).numpy()
    assert np.signbit(y[0]) and y[1] == 3.0
    assert np.signbit((tl.tensor([0.0]) * -1.0).numpy()[0])


@pytest.mark.parametrize("op", [lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a.relu(),
                                lambda a, b: a.sin(), lambda a, b: a * 2],
                         ids=["add", "mul", "relu", "sin", "scale"])
def test_an_unused_result_that_records_is_freed_at_once(op):
    # a node whose gradient does not read the op's output must not hold it: out -> node -> out is a
    # cycle, which only the garbage collector frees (all a forward's activations, without a backward)
    a, b = tl.ones(2, 3, requires_grad=True), tl.ones(2, 3)
    gc.disable()
    try:
        out = op(a, b)
        assert out.requires_grad
        ref = weakref.ref(out)
        del out
        assert ref() is None
    finally:
        gc.enable()


def test_gradients_through_the_fast_paths(rng):
    a = tl.tensor(random_array(rng, (2, 3), tl.float32), requires_grad=True)
    b = tl.tensor(random_array(rng, (2, 3), tl.float32), requires_grad=True)
    ((a * b).relu() + a.exp() * 2).sum().backward()
    x, y = a.detach().numpy(), b.detach().numpy()
    np.testing.assert_allclose(a.grad.numpy(), y * (x * y > 0) + 2 * np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), x * (x * y > 0), rtol=1e-6)
