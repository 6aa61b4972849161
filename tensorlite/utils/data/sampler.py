"""Samplers: the order a DataLoader reads indices in (SequentialSampler, RandomSampler) and
their grouping into batches (BatchSampler), as torch.utils.data.sampler."""
from __future__ import annotations

import itertools
import numbers
from typing import Iterator, List

from ...errors import ArgumentError
from ...ops.creation import randint, randperm


class SequentialSampler:
    """0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler:
    """Random indices (seed with tl.manual_seed, or give a tl.Generator), as torch's: without replacement, a new
    permutation each epoch (num_samples > len: whole permutations, then part of one); with
    replacement, num_samples independent draws (default len(data_source))."""

    def __init__(self, data_source, replacement: bool = False, num_samples=None, generator=None):
        if not isinstance(replacement, bool):
            raise ArgumentError(f"replacement should be a boolean value, but got replacement={replacement!r}")
        if num_samples is not None and (isinstance(num_samples, bool) or not isinstance(num_samples, numbers.Integral)
                                        or num_samples <= 0):
            raise ArgumentError(f"num_samples should be a positive integer value, but got num_samples={num_samples!r}")
        self.data_source, self.replacement, self._num_samples = data_source, replacement, num_samples
        self.generator = generator

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else int(self._num_samples)

    def __iter__(self) -> Iterator[int]:
        n, wanted = len(self.data_source), self.num_samples
        if self.replacement:
            return iter(randint(0, n, (wanted,), generator=self.generator).tolist() if n else [])
        whole, part = divmod(wanted, n) if n else (0, 0)
        return itertools.chain.from_iterable([*(randperm(n, generator=self.generator).tolist() for _ in range(whole)),
                                             randperm(n, generator=self.generator).tolist()[:part]])

    def __len__(self):
        return self.num_samples


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
