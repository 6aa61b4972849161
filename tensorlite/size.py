"""tl.Size: a tensor's shape, a tuple as torch.Size is.

It compares, hashes and unpacks as the tuple of its sizes (`x.shape == (2, 3)`), and prints as
`tensorlite.Size([2, 3])`: torch's form under tensorlite's name, as dtypes print `tensorlite.float32`.

>>> import tensorlite as tl
>>> s = tl.zeros(64, 1, 28, 28).shape
>>> s, s == (64, 1, 28, 28), s.numel()
(tensorlite.Size([64, 1, 28, 28]), True, 50176)
>>> s[1:], s + (5,)
(tensorlite.Size([1, 28, 28]), tensorlite.Size([64, 1, 28, 28, 5]))
"""
from __future__ import annotations

import operator
from math import prod

from .errors import DTypeError
from .layout import cached


class Size(tuple):
    """A shape: a tuple of ints with torch.Size's repr and numel(); slicing, + and * keep it a Size."""
    __slots__ = ()

    def __new__(cls, sizes=()):
        items = tuple(sizes)
        for i, n in enumerate(items):
            try:
                operator.index(n)  # ints and one-element integer tensors, as torch.Size takes
            except TypeError:
                raise DTypeError(f"tl.Size() takes an iterable of int (item {i} is {type(n).__name__})") from None
        return tuple.__new__(cls, [operator.index(n) for n in items])

    def __repr__(self):
        return f"tensorlite.Size([{', '.join(map(str, self))}])"

    def numel(self) -> int:
        """The number of elements a tensor of this shape has."""
        return prod(self)

    def __getitem__(self, i):
        r = tuple.__getitem__(self, i)
        return tuple.__new__(Size, r) if isinstance(i, slice) else r

    def __add__(self, other):
        return tuple.__new__(Size, tuple.__add__(self, other)) if isinstance(other, tuple) else NotImplemented

    def __radd__(self, other):
        return tuple.__new__(Size, tuple.__add__(other, self)) if isinstance(other, tuple) else NotImplemented

    def __mul__(self, n):
        return tuple.__new__(Size, tuple.__mul__(self, n))

    __rmul__ = __mul__

    def __reduce__(self):  # pickles as Size((2, 3))
        return (Size, (tuple(self),))


_SIZES: dict = {}  # shape tuple -> its Size (immutable, so shared): a new tuple subclass costs more than a lookup


def size_of(shape: tuple) -> Size:
    """The Size of a tuple of ints already checked (a Layout's shape), without Size()'s per-item check."""
    s = _SIZES.get(shape)
    return s if s is not None else cached(_SIZES, shape, lambda t: tuple.__new__(Size, t))
