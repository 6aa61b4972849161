"""nn.Parameter: a Tensor that a Module registers as trainable, as torch.nn.parameter.Parameter."""
from __future__ import annotations

from ..ops.creation import empty
from ..tensor import Tensor


class Parameter(Tensor):
    """A Tensor that a Module registers as trainable (requires_grad=True by default).
    It shares the storage of the tensor it wraps."""
    __slots__ = ()

    def __new__(cls, data=None, requires_grad: bool = True):
        src = empty(0) if data is None else data.detach()
        p = Tensor.__new__(cls)
        p._storage, p._layout, p.dtype, p._device = src._storage, src._layout, src.dtype, src._device
        p.requires_grad, p.grad, p._node, p._base = bool(requires_grad), None, None, None
        return p

    def __init__(self, data=None, requires_grad: bool = True):
        pass  # everything happens in __new__ (Tensor.__init__ forbids direct construction)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()
