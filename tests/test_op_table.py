"""The elementwise op table (tensorlite/op_table.py) is the one declaration of each op: the
frontend, autograd, the storage contract's op lists, every backend and the GPU kernel
table agree with its rows."""
from __future__ import annotations

import numpy as np
import pytest

import tensorlite as tl
from tensorlite import backend, op_table
from tensorlite import dtype as dtypes
from tensorlite.backends.rocm import kernel_table
from tensorlite.custom_op import storage_and_layout
from tensorlite.errors import DTypeError

from conftest import assert_close, random_array

DTYPE_CLASSES = {"float": dtypes.float32, "integer": dtypes.int64, "bool": dtypes.bool_}
# gradients are checked inside each op's domain: (0.2, 1.5) unless named here
DOMAIN = {"asin": (-0.9, 0.9), "acos": (-0.9, 0.9), "atanh": (-0.9, 0.9), "acosh": (1.1, 3.0)}


def test_contract_op_lists_are_the_rows():
    assert backend.UNARY_OPS == tuple(op.name for op in op_table.UNARY)
    assert backend.BINARY_OPS == tuple(op.name for op in op_table.BINARY)
    assert backend.CMP_OPS == tuple(op.name for op in op_table.COMPARE)
    assert set(backend.UNARY_BACKWARD_OPS) == {op.name for op in op_table.UNARY if op.grad == op_table.FUSED}
    assert len({op.method for op in op_table.UNARY}) == len(op_table.UNARY), "two rows share a method name"


@pytest.mark.parametrize("row", op_table.UNARY, ids=lambda r: r.name)
def test_every_unary_row_is_a_method_a_function_and_a_kernel_per_dtype(row):
    assert callable(getattr(tl.Tensor, row.method))
    assert hasattr(tl, row.method) == row.top_level
    for t in kernel_table.ALL:
        has_kernel = f"u{row.name}_{t}" in kernel_table.KERNELS["unary.hip"]
        assert has_kernel == op_table.defined_for(row, t in kernel_table.FLOATS, t == "bool"), t


@pytest.mark.parametrize("cls", DTYPE_CLASSES)
@pytest.mark.parametrize("row", op_table.UNARY, ids=lambda r: r.name)
def test_unary_rows_say_which_dtypes_a_backend_takes(device, rng, row, cls):
    """The storage runs the op on a dtype class exactly where the row says so (DTypeError
    elsewhere); the Tensor method casts integers to float where the row has no integer form."""
    dt = DTYPE_CLASSES[cls]
    a = random_array(rng, (3, 5), dt)
    x = tl.tensor(a, device=device)
    st, lay = storage_and_layout(x)
    if op_table.defined_for(row, cls == "float", cls == "bool"):
        out = st.unary_impl(row.name, lay)
        assert out.dtype is dt
    else:
        with pytest.raises(DTypeError, match=row.name):
            st.unary_impl(row.name, lay)
        if row.integers:  # an integer op without a bool form (neg): an error, as PyTorch's
            with pytest.raises(DTypeError, match=row.name):
                getattr(x, row.method)()
            return
        y = getattr(x, row.method)()  # the frontend's promotion: computed in the default float
        assert y.dtype is tl.get_default_dtype()
        assert_close(y, getattr(x.float(), row.method)().numpy())


@pytest.mark.parametrize("row", [r for r in op_table.UNARY if r.grad is not None], ids=lambda r: r.name)
def test_unary_rows_with_a_gradient_differentiate(device, rng, row):
    """Each row's autograd rule against a central difference of the op itself (float64)."""
    a = rng.uniform(*DOMAIN.get(row.name, (0.2, 1.5)), (7,))  # inside the op's domain (log, sqrt, recip, ...)
    x = tl.tensor(a, dtype=tl.float64, device=device, requires_grad=True)
    getattr(x, row.method)().sum().backward()
    h = 1e-6
    f = lambda v: getattr(tl.tensor(v, dtype=tl.float64), row.method)().numpy()  # noqa: E731
    numeric = (f(a + h) - f(a - h)) / (2 * h)
    np.testing.assert_allclose(x.grad.numpy(), numeric, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("row", op_table.BINARY, ids=lambda r: r.name)
def test_every_binary_row_is_a_method_and_a_kernel_per_dtype(row):
    if row.method_too:
        assert callable(getattr(tl.Tensor, row.method))
        assert hasattr(tl, row.method)
    else:  # a fused op PyTorch lacks: nn.functional's only
        assert not hasattr(tl.Tensor, row.method) and not hasattr(tl, row.method)
        assert callable(getattr(tl.nn.functional, row.method))
    for t in kernel_table.ALL:
        has_kernel = f"b{row.name}_{t}" in kernel_table.KERNELS["binary.hip"]
        assert has_kernel == op_table.defined_for(row, t in kernel_table.FLOATS, t == "bool"), t
