"""In-place ops (PyTorch's trailing underscore): a tensor's memory takes a result, its views see
it, and autograd records it on a stand-in for the tensor as it was (checked at backward by the
version counter); the writes into a tensor's memory, converted and broadcast.
"""
from __future__ import annotations

import builtins
from math import prod
from typing import TYPE_CHECKING

from .. import dtype as dtypes
from .._core import TensorBase, as_view, copy_of, same_device, wrap
from ..autograd import is_grad_enabled, no_grad, note_write
from ..errors import DTypeError, ShapeError, TensorliteError, describe
from ..layout import Layout, broadcast_shapes
from .views import broadcast_to, permute, select

if TYPE_CHECKING:
    from ..tensor import Tensor


def _as_rows(lay: Layout):
    """(rows, row_len, row_stride) if lay addresses equally spaced contiguous rows."""
    pairs = [(n, s) for n, s in zip(lay.shape, lay.strides) if n != 1]
    inner, k = 1, len(pairs)
    while k and pairs[k - 1][1] == inner:
        inner *= pairs[k - 1][0]
        k -= 1
    outer = pairs[:k]
    if not outer:
        return 1, inner, inner
    for (_, s0), (n1, s1) in zip(outer, outer[1:]):
        if s0 != n1 * s1:
            return None
    return prod(n for n, _ in outer), inner, outer[-1][1]


def refuse_inplace_on_graph(x: Tensor, op: str):
    """The in-place writes autograd cannot record (PyTorch refuses the first too)."""
    if x._node is None and x.requires_grad:
        raise TensorliteError(f"{describe(op, self=x)}: a leaf tensor that requires grad cannot be modified in "
                              "place while gradients are recorded; do it under tl.no_grad(), or out of place")
    if x._base is not None:
        raise TensorliteError(f"{describe(op, self=x)}: in-place op on a view while gradients are recorded "
                              "(tensorlite does not rewrite the base's history, as PyTorch does); apply it to "
                              "the base tensor, or out of place")


def snapshot(x: Tensor, copy: bool) -> Tensor:
    """A stand-in for x as it is now, with x's history: the input an in-place op records
    before x takes the op's history. `copy`: with its own copy of x's values (the op's
    backward may read them after the write)."""
    t = wrap(copy_of(x)._storage, x.shape, x.dtype) if copy else as_view(x, x._layout)
    t.requires_grad, t._node, t._base, t._base_node = x.requires_grad, x._node, None, None
    return t


def write(dst: Tensor, src, op: str) -> None:
    """dst's elements become src (a scalar, or a tensor broadcast to dst's shape and cast
    to its dtype), written through dst's layout; dst's storage version goes up."""
    lay = dst._layout
    if builtins.any(s == 0 and n > 1 for n, s in zip(lay.shape, lay.strides)):
        raise ShapeError(f"{describe(op, self=dst)}: more than one element of the written-to tensor refers to "
                         "a single memory location; clone() it first")
    if not isinstance(src, TensorBase):
        if dst.numel():
            dst._storage.const_set(src, lay)
    elif dst.numel():
        rows = _as_rows(lay)
        if rows is not None and src._layout.shape == lay.shape and src.dtype is dst.dtype \
                and src._device is dst._device and src._storage is not dst._storage and src._layout.is_contiguous():
            _copy_rows(dst, src, rows)  # the common case (a KV cache's new positions): one copy, no views
        else:
            _write_converted(dst, src, op, rows)
    note_write(dst._storage)


def _write_converted(dst: Tensor, src: Tensor, op: str, rows) -> None:
    """_write's general case: src broadcast and cast first, dst written in its memory order."""
    same_device(op, self=dst, src=src)
    lead = src.shape[:builtins.max(src.ndim - dst.ndim, 0)]
    if broadcast_shapes(src.shape[len(lead):], dst.shape) != dst.shape or builtins.any(n != 1 for n in lead):
        raise ShapeError(f"{describe(op, self=dst, src=src)}: src does not broadcast to the tensor's shape")
    with no_grad():
        if src.ndim > dst.ndim:  # leading size-1 dims beyond dst's (PyTorch drops them)
            src = src.reshape(src.shape[src.ndim - dst.ndim:])
        src = broadcast_to(src._cast(dst.dtype), dst.shape)
        if src._storage is dst._storage:  # overlapping memory: read it all before writing
            src = copy_of(src)
        if rows is None:  # not rows in dst's dim order (a transposed view): its memory order
            order = sorted(range(dst.ndim), key=lambda d: -dst._layout.strides[d])
            dst, src = permute(dst, order), permute(src, order)
            rows = _as_rows(dst._layout)
        _copy_rows(dst, src.contiguous(), rows)


def _copy_rows(dst: Tensor, src: Tensor, rows) -> None:
    """Contiguous src into dst as equally spaced rows (copy2d; rows = _as_rows(dst's layout)),
    dim 0 by dim 0 where dst's memory is not one such set (rows None)."""
    if rows is None:
        for i in range(dst.shape[0]):
            d = select(dst, 0, i)
            _copy_rows(d, select(src, 0, i), _as_rows(d._layout))
        return
    n, row_len, row_stride = rows
    src._storage.copy2d(dst._storage, n, row_len, row_len, row_stride, src._layout.offset, dst._layout.offset)


def inplace(x: Tensor, op: str, fn, *args, **kwargs) -> Tensor:
    """x's memory becomes fn(x, *args, **kwargs) (PyTorch's in-place ops; views of x see it).
    Where gradients are recorded, fn runs on a stand-in for x as it was and x takes the result's
    history; tensors saved from x before are caught at backward by the version check."""
    recording = is_grad_enabled() and (x.requires_grad or builtins.any(
        getattr(a, "requires_grad", False) for a in (*args, *kwargs.values())))
    if recording:
        refuse_inplace_on_graph(x, op)
    out = fn(snapshot(x, copy=True) if recording else x, *args, **kwargs)
    if out.shape != x.shape:
        raise ShapeError(f"{describe(op, self=x)}: the result's shape {tuple(out.shape)} (after broadcasting) is not "
                         "the tensor's")
    if out.dtype is not x.dtype:  # PyTorch's rule: no float into an integer, nothing but bool into bool
        if (out.dtype.is_floating_point and not x.dtype.is_floating_point) or x.dtype is dtypes.bool_:
            raise DTypeError(f"{describe(op, self=x)}: result type {out.dtype.name} can't be cast to the "
                             f"tensor's dtype {x.dtype.name} in place")
        out = out._cast(x.dtype)
    write(x, out, op)
    if out._node is not None:
        x._node, x.requires_grad = out._node, True
    return x


def inplace_method(name: str, fn):
    """The Tensor method `name` (add_, exp_, ...): fn(self, ...) in place (see _inplace)."""
    def method(self, *args, **kwargs):
        return inplace(self, name, fn, *args, **kwargs)
    method.__name__, method.__qualname__ = name, f"Tensor.{name}"
    method.__doc__ = f"In-place {fn.__name__}: this tensor's memory becomes the result (its views see it)."
    return method
