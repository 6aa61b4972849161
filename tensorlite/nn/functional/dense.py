"""linear: x @ weight.T + bias as one autograd node, as torch.nn.functional.linear.
(Not linear.py: the package would then have a submodule and a function both named `linear`.)"""
from __future__ import annotations

from ... import amp
from ...autograd import register_double_backward
from ...backend import batch_of_one
from ...custom_op import custom_op, result, storage_and_layout
from ...errors import ShapeError, describe
from .common import as_rows


def linear(x, weight, bias=None):
    """x @ weight.T + bias as ONE autograd node: the leading dims of x fold into one GEMM, and
    the backward is one GEMM each for dx = g @ weight and dweight = g.T @ x (written
    contiguous, as the optimizer wants it) plus a column sum for dbias (the bias add and that
    sum ride on the GEMMs where the backend's BLAS has epilogues). A training step runs
    dozens of these, so the node saves the views, broadcasts and reshapes (and their
    backward nodes) of the matmul + add composite, which is the fallback for operands that
    need type promotion."""
    x, weight, bias = amp.low_precision(x, weight, bias)
    (xs, xl), (ws, wl), (bs, bl) = storage_and_layout(x), storage_and_layout(weight), storage_and_layout(bias)
    x_shape, w_shape = xl.shape, wl.shape  # not the properties: dozens of calls per step
    if not x_shape or len(w_shape) != 2 or x_shape[-1] != w_shape[-1] or \
            (bias is not None and bl.shape != (w_shape[0],)):
        raise ShapeError(f"{describe('linear', input=x, weight=weight, bias=bias)}: expected input (..., in_features), "
                         f"weight (out_features, in_features) and bias (out_features,)")
    dt = x.dtype
    if not dt.is_floating_point or weight.dtype is not dt or (bias is not None and bias.dtype is not dt) or \
            weight._device is not x._device or (bias is not None and bias._device is not x._device):
        y = x @ weight.mT  # promotion / device errors as matmul and add report them
        return y if bias is None else y + bias
    (n, k), lead = w_shape, x_shape[:-1]
    xs, xl = as_rows(xs, xl, dt)
    m = xl.shape[0]
    if bias is None:
        out = xs.matmul(ws, (1, m, n, k), batch_of_one(xl), batch_of_one(wl.transpose(0, 1)))
    else:  # the GPU backend adds the bias in the GEMM's epilogue where the BLAS has one
        out = xs.matmul_add_bias(ws, (m, n, k), xl, wl.transpose(0, 1), bs, bl)
    y = result(out, lead + (n,), dt)

    def grad(g):
        gs, gl = as_rows(*storage_and_layout(g._cast(dt)), dt)
        dx = dw = db = None
        if x.requires_grad:
            dx = result(gs.matmul(ws, (1, m, k, n), batch_of_one(gl), batch_of_one(wl)), x_shape, dt)
        want_db = bias is not None and bias.requires_grad
        if weight.requires_grad and want_db:  # one call: the GPU backend sums g in the GEMM's epilogue
            dws, dbs = gs.matmul_row_sums(xs, (n, k, m), gl.transpose(0, 1), xl)
            dw, db = result(dws, (n, k), dt), result(dbs, (n,), dt)
        elif weight.requires_grad:
            dw = result(gs.matmul(xs, (1, n, k, m), batch_of_one(gl.transpose(0, 1)), batch_of_one(xl)), (n, k), dt)
        elif want_db:
            db = result(gs.reduce_op("sum", gl, (0,)), (n,), dt)
        return (dx, dw) if bias is None else (dx, dw, db)
    return custom_op(y, (x, weight) if bias is None else (x, weight, bias), grad, "linear", (x, weight))


def _linear_twice(node, g):  # linear's backward kernels (GEMMs, a row sum) in Tensor ops
    x, w, b = (node.inputs + (None,))[:3]
    g = g._cast(x.dtype)
    g2, x2 = g.reshape(-1, g.shape[-1]), x.reshape(-1, x.shape[-1])
    return ((g @ w) if x.requires_grad else None, (g2.mT @ x2) if w.requires_grad else None,
            g2.sum(0) if b is not None and b.requires_grad else None)[:len(node.inputs)]


register_double_backward("linear", _linear_twice)  # a second derivative (create_graph=True)
