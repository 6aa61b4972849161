"""Layout = (shape, strides in elements, offset in elements).

Every view op is a function from Layout to Layout; none touches storage. Strides may
be 0 (broadcast) but never negative: a negative-step slice copies (see Tensor).
"""
from __future__ import annotations

from math import prod
from typing import Optional, Sequence, Tuple

Shape = Tuple[int, ...]


def contiguous_strides(shape: Sequence[int]) -> Shape:
    """Row-major strides (in elements) of shape, as torch's contiguous tensors have.

    >>> from tensorlite.layout import contiguous_strides
    >>> contiguous_strides((2, 3, 4))
    (12, 4, 1)
    """
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def cached(cache: dict, key, make):
    """cache[key], made by make(key) on a miss: a memo (emptied past 4096 keys) of what every op
    output asks for again (contiguous strides here, contiguous Layouts in tensor.py)."""
    value = cache.get(key)
    if value is None:
        if len(cache) > 4096:
            cache.clear()
        value = cache[key] = make(key)
    return value


_STRIDES: dict = {}  # shape tuple -> contiguous_strides(shape)


class Layout:
    """A tensor's view of its storage: shape, strides and offset in elements (no negative strides).

    >>> from tensorlite.layout import Layout
    >>> Layout((2, 3)).transpose(0, 1).strides
    (1, 3)
    """
    # _contig: is_contiguous(), computed on first use (None until then); Layouts are never
    # mutated and contiguous ones are shared (one per shape), so most calls just read it
    __slots__ = ("shape", "strides", "offset", "_contig")

    def __init__(self, shape: Sequence[int], strides: Optional[Sequence[int]] = None, offset: int = 0):
        # tuples come from our own code (already ints); anything else is normalised
        self.shape = shape if type(shape) is tuple else tuple([int(s) for s in shape])
        if strides is None:  # the memo's hit inlined: every op output comes here
            strides = _STRIDES.get(self.shape) or cached(_STRIDES, self.shape, contiguous_strides)
            self.strides, self._contig = strides, True
        else:
            self.strides = strides if type(strides) is tuple else tuple([int(s) for s in strides])
            self._contig = None
        self.offset = offset if type(offset) is int else int(offset)

    @classmethod
    def contiguous(cls, shape: Sequence[int], offset: int = 0) -> "Layout":
        """The row-major Layout of shape, starting at offset."""
        return cls(shape, None, offset)

    def __repr__(self):
        return f"Layout(shape={self.shape}, strides={self.strides}, offset={self.offset})"

    def __eq__(self, other):
        return isinstance(other, Layout) and (self.shape, self.strides, self.offset) == (
            other.shape, other.strides, other.offset)

    def __hash__(self):
        return hash((self.shape, self.strides, self.offset))

    @property
    def ndim(self) -> int:
        """The number of dims."""
        return len(self.shape)

    def numel(self) -> int:
        """The number of elements."""
        return prod(self.shape)

    def is_contiguous(self) -> bool:
        """Row-major contiguous (dims of size 1 may have any stride; empty is contiguous)."""
        contig = self._contig
        if contig is None:
            contig = self._contig = self._is_contiguous()
        return contig

    def _is_contiguous(self) -> bool:
        if 0 in self.shape:
            return True
        acc = 1
        for n, s in zip(reversed(self.shape), reversed(self.strides)):
            if n != 1 and s != acc:
                return False
            acc *= n
        return True

    def extent(self) -> int:
        """One past the largest element index this layout touches (0 when empty)."""
        if self.numel() == 0:
            return 0
        return self.offset + sum((n - 1) * s for n, s in zip(self.shape, self.strides)) + 1

    # ---- view transforms -------------------------------------------------------------
    def permute(self, dims: Sequence[int]) -> "Layout":
        """The dims reordered (a Layout of the same storage)."""
        shape, strides = self.shape, self.strides
        return Layout(tuple([shape[d] for d in dims]), tuple([strides[d] for d in dims]), self.offset)

    def transpose(self, d0: int, d1: int) -> "Layout":
        """Dims d0 and d1 swapped."""
        shape, strides = list(self.shape), list(self.strides)
        shape[d0], shape[d1] = shape[d1], shape[d0]
        strides[d0], strides[d1] = strides[d1], strides[d0]
        return Layout(tuple(shape), tuple(strides), self.offset)

    def narrow(self, dim: int, start: int, length: int, step: int = 1) -> "Layout":
        """`length` indices of dim from start, every step-th."""
        shape, strides = list(self.shape), list(self.strides)
        shape[dim] = length
        strides[dim] = self.strides[dim] * step
        return Layout(shape, strides, self.offset + start * self.strides[dim])

    def index(self, dim: int, i: int) -> "Layout":
        """Drop `dim`, fixing it at index i."""
        shape = self.shape[:dim] + self.shape[dim + 1:]
        strides = self.strides[:dim] + self.strides[dim + 1:]
        return Layout(shape, strides, self.offset + i * self.strides[dim])

    def unsqueeze(self, dim: int) -> "Layout":
        """A size-1 dim inserted at dim."""
        inner = self.strides[dim] * self.shape[dim] if dim < self.ndim else 1
        return Layout(self.shape[:dim] + (1,) + self.shape[dim:],
                      self.strides[:dim] + (inner,) + self.strides[dim:], self.offset)

    def squeeze(self, dims: Sequence[int]) -> "Layout":
        """The given size-1 dims removed."""
        keep = [i for i in range(self.ndim) if i not in dims]
        return Layout([self.shape[i] for i in keep], [self.strides[i] for i in keep], self.offset)

    def broadcast_as(self, shape: Sequence[int]) -> Optional["Layout"]:
        """Stride-0 expansion to `shape` (numpy rules); None when not broadcastable."""
        shape = tuple(shape)
        extra = len(shape) - self.ndim
        if extra < 0:
            return None
        strides = [0] * extra
        for n, s, target in zip(self.shape, self.strides, shape[extra:]):
            if n != target and n != 1:
                return None
            strides.append(s if n != 1 else 0)
        return Layout(shape, strides, self.offset)

    def reshape(self, shape: Sequence[int]) -> Optional["Layout"]:
        """A view with the new shape if strides can express it, else None (caller copies)."""
        shape = shape if type(shape) is tuple else tuple(shape)
        if self.is_contiguous() or prod(shape) == 0:
            return Layout(shape, None, self.offset)
        # Merge runs of old dims that are contiguous with each other, then split them
        # into the new dims (the algorithm behind torch's computeStride).
        old = [(n, s) for n, s in zip(self.shape, self.strides) if n != 1]
        new_strides = [0] * len(shape)
        oi, ni = 0, 0
        while ni < len(shape) or oi < len(old):
            while ni < len(shape) and shape[ni] == 1:
                new_strides[ni] = 1
                ni += 1
            if oi == len(old):
                if ni < len(shape):
                    return None
                break
            # take a chunk of old dims that is internally contiguous
            size = old[oi][0]
            while oi + 1 < len(old) and old[oi][1] == old[oi + 1][0] * old[oi + 1][1]:
                oi += 1
                size *= old[oi][0]
            base_stride = old[oi][1]
            oi += 1
            # consume new dims whose product equals the chunk size
            acc, first = 1, ni
            while ni < len(shape) and acc < size:
                acc *= shape[ni]
                ni += 1
            if acc != size:
                return None
            s = base_stride
            for j in range(ni - 1, first - 1, -1):
                new_strides[j] = s
                s *= shape[j]
        return Layout(shape, new_strides, self.offset)


def broadcast_shapes(*shapes: Sequence[int]) -> Optional[Shape]:
    """numpy/PyTorch broadcasting of several shapes; None when incompatible."""
    nd = max((len(s) for s in shapes), default=0)
    out = []
    for sizes in zip(*[(1,) * (nd - len(s)) + tuple(s) for s in shapes]):  # dim by dim, right-aligned
        dim = 1
        for n in sizes:
            if n != 1 and n != dim:
                if dim != 1:
                    return None
                dim = n
        out.append(dim)
    return tuple(out)
