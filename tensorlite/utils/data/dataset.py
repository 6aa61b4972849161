"""Map-style datasets: Dataset, TensorDataset, Subset, ConcatDataset and random_split, as
torch.utils.data.dataset."""
from __future__ import annotations

import bisect
import itertools
import math
import numbers
from typing import List, Sequence

from ...errors import ArgumentError, DTypeError, ShapeError
from ...ops.creation import randperm
from ...tensor import Tensor


class Dataset:
    """A map-style dataset: `dataset[i]` is sample i, `len(dataset)` their number (subclasses
    define both). `a + b` concatenates two datasets."""

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__ (a Dataset subclass's sample i)")

    def __add__(self, other):
        return ConcatDataset([self, other])


class TensorDataset(Dataset):
    """Sample i is (t[i] for t in tensors); every tensor has the same first dim."""

    def __init__(self, *tensors: Tensor):
        if not tensors or any(not isinstance(t, Tensor) for t in tensors):
            raise DTypeError("TensorDataset: expected one or more tensors")
        if any(t.ndim == 0 or t.shape[0] != tensors[0].shape[0] for t in tensors):
            raise ShapeError(f"TensorDataset: size mismatch between tensors: first dims "
                             f"{[t.shape[0] if t.ndim else None for t in tensors]}")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].shape[0]


class Subset(Dataset):
    """The samples of `dataset` at `indices`, in that order."""

    def __init__(self, dataset, indices: Sequence[int]):
        self.dataset, self.indices = dataset, [int(i) for i in indices]

    def __getitem__(self, index):
        if isinstance(index, list):
            return self.dataset[[self.indices[i] for i in index]]
        return self.dataset[self.indices[index]]

    def __len__(self):
        return len(self.indices)


class ConcatDataset(Dataset):
    """The samples of several datasets one after another."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ArgumentError("ConcatDataset: datasets should not be an empty iterable")
        self.cumulative_sizes = list(itertools.accumulate(len(d) for d in self.datasets))

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, index):
        if index < 0:
            if -index > len(self):
                raise IndexError(f"ConcatDataset: index {index} out of range for {len(self)} samples")
            index += len(self)
        d = bisect.bisect_right(self.cumulative_sizes, index)
        if d == len(self.datasets):
            raise IndexError(f"ConcatDataset: index {index} out of range for {len(self)} samples")
        return self.datasets[d][index - (self.cumulative_sizes[d - 1] if d else 0)]


def random_split(dataset, lengths: Sequence, generator=None) -> List[Subset]:
    """Disjoint random Subsets of the given lengths (ints summing to len(dataset), or fractions
    summing to 1, the remainder dealt one by one from the first, as torch's), drawn from `generator`
    (a tl.Generator) where given."""
    n = len(dataset)
    if lengths and all(isinstance(f, float) for f in lengths) and math.isclose(sum(lengths), 1.0):
        if any(f < 0 for f in lengths):
            raise ArgumentError(f"random_split: fractions must be non-negative, got {list(lengths)}")
        counts = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if any(isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0 for v in lengths) \
            or sum(lengths) != n:
        raise ArgumentError(f"random_split: sum of input lengths {list(lengths)} does not equal the length of the "
                            f"input dataset ({n})")
    order = randperm(n, generator=generator).tolist()
    return [Subset(dataset, order[end - k:end]) for k, end in zip(lengths, itertools.accumulate(lengths))]
