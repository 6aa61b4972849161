"""Distances between tensors: pairwise_distance and cosine_similarity, as torch.nn.functional's."""
from __future__ import annotations

from ... import dtype as dtypes
from ...custom_op import normalize_dim
from ...errors import ArgumentError, ShapeError, TensorliteError, describe
from ...ops.linalg import p_norm  # ||x||_p with PyTorch's gradient, also tl.linalg's
from ...layout import broadcast_shapes
from ...ops.elementwise import maximum
from .common import upcast


def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
    """||x1 - x2 + eps||_p over the last dim.

    >>> import tensorlite as tl; x = tl.tensor([[3.0, 4.0]])
    >>> round(tl.nn.functional.pairwise_distance(x, x * 0).item(), 4)
    5.0"""
    if not (isinstance(p, (int, float)) and p > 0):
        raise ArgumentError(f"pairwise_distance: p must be a positive number or inf, got {p!r}")
    try:
        d = p_norm(upcast(x1) - upcast(x2) + eps, p, -1)
    except TensorliteError as e:
        raise type(e)(f"pairwise_distance: {e}") from None
    return (d if keepdim else d.squeeze(-1))._cast(dtypes.promote_types(x1.dtype, x2.dtype))


def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8):
    """sum(x1 * x2) / (max(||x1||, eps) * max(||x2||, eps)) along dim (the inputs broadcast).

    >>> import tensorlite as tl; x = tl.tensor([[1.0, 0.0]])
    >>> tl.nn.functional.cosine_similarity(x, x * 2).tolist()
    [1.0]"""
    shape = broadcast_shapes(x1.shape, x2.shape)
    if shape is None:
        raise ShapeError(f"{describe('cosine_similarity', x1=x1, x2=x2)}: shapes do not broadcast")
    d = normalize_dim(dim, len(shape), "cosine_similarity", x1)
    a, b = (upcast(t).broadcast_to(shape) for t in (x1, x2))
    # the norms clamped at eps without cutting their gradient (PyTorch clamps them under no_grad)
    na, nb = (n + (maximum(n.detach(), eps) - n.detach()) for n in (p_norm(a, 2, d), p_norm(b, 2, d)))
    return ((a / na) * (b / nb)).sum(d)._cast(dtypes.promote_types(x1.dtype, x2.dtype))
