"""Samplers: the order a DataLoader reads indices in (SequentialSampler, RandomSampler) and
their grouping into batches (BatchSampler), as torch.utils.data.sampler."""
from __future__ import annotations

import itertools
import numbers
from typing import Iterator, List

from ...errors import ArgumentError
from ...ops.creation import randperm


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
