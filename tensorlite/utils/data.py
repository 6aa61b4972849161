"""Datasets and the DataLoader, with torch.utils.data's names and semantics.

A DataLoader draws indices from a sampler (in order, or a permutation per epoch with
shuffle=True: `tl.randperm`, seeded by `tl.manual_seed`), groups them into batches and
collates each batch's samples into tensors (`default_collate`: tensors are stacked, numbers
and numpy arrays become tensors, tuples, lists and dicts are collated field by field).
Batches of a TensorDataset are gathered with one index op per tensor instead of stacking
their rows one by one (the same values). Loading runs in the calling process: `num_workers`
is accepted and changes nothing but speed.

>>> import tensorlite as tl
>>> from tensorlite.utils.data import DataLoader, TensorDataset
>>> ds = TensorDataset(tl.arange(10.0), tl.arange(10) % 2)
>>> [(x.tolist(), y.tolist()) for x, y in DataLoader(ds, batch_size=4)]
[([0.0, 1.0, 2.0, 3.0], [0, 1, 0, 1]), ([4.0, 5.0, 6.0, 7.0], [0, 1, 0, 1]), ([8.0, 9.0], [0, 1])]
"""
from __future__ import annotations

import bisect
import itertools
import math
import numbers
from typing import Iterator, List, Sequence

import numpy as np

from ..errors import ArgumentError, DTypeError, ShapeError
from ..tensor import Tensor, randperm, stack, tensor


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
    summing to 1, the remainder dealt one by one from the first, as torch's)."""
    if generator is not None:
        raise ArgumentError("random_split: tensorlite takes no generator (seed with tl.manual_seed)")
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
    order = randperm(n).tolist()
    return [Subset(dataset, order[end - k:end]) for k, end in zip(lengths, itertools.accumulate(lengths))]


class SequentialSampler:
    """0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler:
    """A new permutation of the indices at each iteration (tl.randperm; seed with tl.manual_seed)."""

    def __init__(self, data_source, replacement: bool = False, num_samples=None, generator=None):
        if generator is not None:
            raise ArgumentError("RandomSampler: tensorlite takes no generator (seed with tl.manual_seed)")
        if replacement or num_samples is not None:
            raise ArgumentError("RandomSampler: replacement and num_samples are not supported; a permutation of "
                                "the dataset is drawn each epoch")
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(randperm(len(self.data_source)).tolist())

    def __len__(self):
        return len(self.data_source)


class BatchSampler:
    """Lists of batch_size indices from `sampler` (the last one shorter unless drop_last)."""

    def __init__(self, sampler, batch_size: int, drop_last: bool):
        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size <= 0:
            raise ArgumentError(f"batch_size should be a positive integer value, but got batch_size={batch_size!r}")
        self.sampler, self.batch_size, self.drop_last = sampler, int(batch_size), bool(drop_last)

    def __iter__(self) -> Iterator[List[int]]:
        it = iter(self.sampler)
        while True:
            batch = list(itertools.islice(it, self.batch_size))
            if not batch or (self.drop_last and len(batch) < self.batch_size):
                return
            yield batch

    def __len__(self):
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


def default_collate(batch):
    """A list of samples as one batch: tensors stacked along a new first dim, numpy arrays and
    numbers made tensors, strings kept as a list, tuples / lists / dicts collated by field."""
    first = batch[0]
    if isinstance(first, Tensor):
        return stack(batch)
    if isinstance(first, np.ndarray):
        return tensor(np.stack(batch))
    if isinstance(first, (bool, numbers.Number, np.generic)):
        return tensor(np.asarray(batch))
    if isinstance(first, (str, bytes)):
        return list(batch)
    if isinstance(first, dict):
        return {k: default_collate([s[k] for s in batch]) for k in first}
    if isinstance(first, (tuple, list)):
        if any(len(s) != len(first) for s in batch):
            raise ShapeError("default_collate: each element in list of batch should be of equal size")
        fields = [default_collate(list(f)) for f in zip(*batch)]
        return type(first)(*fields) if hasattr(first, "_fields") else \
            (tuple(fields) if isinstance(first, tuple) else fields)
    raise DTypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
                     f"found {type(first).__name__}")


class DataLoader:
    """Batches of `dataset`, as torch.utils.data.DataLoader: batch_size samples at a time
    (None: samples one by one, uncollated), in order or shuffled each epoch, from `sampler` or
    `batch_sampler` where given, collated by `collate_fn` (default_collate). num_workers,
    pin_memory, prefetch_factor and persistent_workers are accepted; loading runs in this process."""

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, num_workers=0,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
                 generator=None, *, prefetch_factor=None, persistent_workers=False):
        if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None or drop_last):
            raise ArgumentError("DataLoader: batch_sampler option is mutually exclusive with batch_size, shuffle, "
                                "sampler, and drop_last")
        if sampler is not None and shuffle:
            raise ArgumentError("DataLoader: sampler option is mutually exclusive with shuffle")
        if isinstance(num_workers, bool) or not isinstance(num_workers, numbers.Integral) or num_workers < 0:
            raise ArgumentError(f"DataLoader: num_workers option should be non-negative, got {num_workers!r}")
        if generator is not None:
            raise ArgumentError("DataLoader: tensorlite takes no generator (seed with tl.manual_seed)")
        self.dataset, self.num_workers, self.drop_last = dataset, int(num_workers), bool(drop_last)
        self.sampler = sampler if sampler is not None else \
            RandomSampler(dataset) if shuffle else SequentialSampler(dataset)
        if batch_sampler is None and batch_size is not None:
            batch_sampler = BatchSampler(self.sampler, batch_size, drop_last)
        self.batch_sampler, self.batch_size = batch_sampler, batch_size if batch_sampler is not None else None
        self.collate_fn = collate_fn

    def __iter__(self):
        if self.batch_sampler is None:  # batch_size=None: the samples themselves
            for i in self.sampler:
                sample = self.dataset[i]
                yield sample if self.collate_fn is None else self.collate_fn(sample)
            return
        for indices in self.batch_sampler:
            yield self._batch(indices)

    def _batch(self, indices):
        if self.collate_fn is None and type(self.dataset) is TensorDataset:
            # one gather per tensor: what stacking the rows gives
            ids = tensor(np.asarray(indices, dtype=np.int64), device=self.dataset.tensors[0].device)
            return tuple(t[ids.to(t.device)] for t in self.dataset.tensors)  # to(): ids itself on ids' device
        samples = [self.dataset[i] for i in indices]
        return (self.collate_fn or default_collate)(samples)

    def __len__(self):
        return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)
