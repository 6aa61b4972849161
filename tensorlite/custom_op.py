"""Writing an op outside tensor.py: nn.functional's fused ops, or your own (candle's CustomOp idea).

An op runs methods of the storage contract (tensorlite.backend.BackendStorage) on its
inputs' storages and layouts, wraps the fresh result, and records how to differentiate it:

    from tensorlite.custom_op import custom_op, result, storage_and_layout

    def softmax_last(x):
        st, lay = storage_and_layout(x)
        y = result(st.softmax_last_dim(lay), x.shape, x.dtype)

        def backward(g):  # one gradient per input (None where an input has none)
            (ys, yl), (gs, gl) = storage_and_layout(y), storage_and_layout(g)
            return (result(ys.softmax_last_dim_backward(yl, gs, gl), y.shape, y.dtype),)
        return custom_op(y, (x,), backward, "softmax")

`custom_op` records the backward only where an input requires grad and grad mode is on;
the backward runs under no_grad, or with grad mode on for create_graph=True (higher
derivatives): a storage method's result there (made by `result`) refuses to be differentiated
again, naming the op; write the backward in Tensor ops to make it differentiable twice, or keep
the kernel and register the backward in Tensor ops for create_graph too
(tensorlite.autograd.register_double_backward, as softmax and linear do). Every backend
implements the contract, so such an op runs on every device. The fused unaries (GELU, SiLU)
are units of tensorlite/fused_unary.py.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

from .autograd import attach, mark_if_fused_backward
from .layout import Layout
from ._core import norm_dim, wrap

if TYPE_CHECKING:
    from .tensor import Tensor


def storage_and_layout(t: Optional[Tensor]):
    """(storage, layout) of a tensor, the pair contract methods take; (None, None) for None."""
    return (None, None) if t is None else (t._storage, t._layout)


def result(storage, shape: Sequence[int], dtype, layout: Optional[Layout] = None) -> Tensor:
    """A tensor over `storage`, a contract method's fresh result of `shape` and `dtype`: stored
    contiguously, or as the dense `layout` where the method says so (e.g. sdpa_layout)."""
    t = wrap(storage, tuple(shape), dtype)
    if layout is not None:
        t._layout = layout
    return mark_if_fused_backward(t)  # a fused backward kernel's result is not differentiable again


# custom_op(out, inputs, backward, name) -> out: `out` (computed from `inputs`) with
# `backward(grad_out) -> one gradient per input` recorded for autograd under `name` (where an
# input requires grad and grad mode is on). It is autograd's own recording call, under the name
# that says what it is for here.
custom_op = attach


# normalize_dim(dim, ndim, op, x=None) -> dim in [0, ndim) (negative dims count from the end);
# IndexOutOfRange naming `op` and x otherwise: the check every op of tensor.py makes.
normalize_dim = norm_dim
