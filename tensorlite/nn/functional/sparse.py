"""Lookups by integer ids: embedding and one_hot, as torch.nn.functional's."""
from __future__ import annotations

from ... import dtype as dtypes
from ...errors import ArgumentError, DTypeError, ShapeError, describe
from ...ops.creation import arange, tensor
from ...ops.elementwise import where
from ...ops.joins import stack
from ...tensor import Tensor


def embedding(input, weight, padding_idx=None):
    """Rows of weight at the ids in `input` (any shape); the padding_idx row gets no gradient."""
    if not isinstance(weight, Tensor) or weight.ndim != 2:
        raise ShapeError(f"{describe('embedding', weight=weight)}: weight must be 2-D (num_embeddings, dim)")
    ids = input if isinstance(input, Tensor) else tensor(input, dtype=dtypes.int64, device=weight._device)
    out = weight.index_select(0, ids.reshape(-1)).reshape(ids.shape + (weight.shape[-1],))
    if padding_idx is not None:
        if not (isinstance(padding_idx, int) and -weight.shape[0] <= padding_idx < weight.shape[0]):
            raise ArgumentError(f"{describe('embedding', weight=weight)}: padding_idx {padding_idx!r} is not a row")
        padding_idx = padding_idx % weight.shape[0]
        out = where((ids != padding_idx).unsqueeze(-1), out, out.detach())
    return out


def one_hot(tensor, num_classes: int = -1):
    """int64 (*, num_classes) with 1 at each index of `tensor` (int64); num_classes=-1 takes max + 1 (a host read).

    >>> import tensorlite as tl; tl.nn.functional.one_hot(tl.tensor([0, 2])).tolist()
    [[1, 0, 0], [0, 0, 1]]"""
    t = tensor
    if not isinstance(t, Tensor) or t.dtype is not dtypes.int64:
        raise DTypeError(f"{describe('one_hot', tensor=t)}: one_hot is only applicable to index (int64) tensors")
    if t.numel() == 0 and num_classes == -1:
        raise ArgumentError(f"{describe('one_hot', tensor=t)}: can not infer the number of classes of an empty tensor")
    lo, hi = stack([t.amin(), t.amax()]).tolist() if t.numel() else (0, -1)  # one host read
    if lo < 0:
        raise ArgumentError(f"{describe('one_hot', tensor=t)}: class values must be non-negative, got {lo}")
    if num_classes != -1 and not (isinstance(num_classes, int) and hi < num_classes):
        raise ArgumentError(f"{describe('one_hot', tensor=t)}: class values must be smaller than num_classes "
                            f"{num_classes!r}, got {hi}")
    n = hi + 1 if num_classes == -1 else num_classes
    return (t.unsqueeze(-1) == arange(n, device=t._device))._cast(dtypes.int64)
