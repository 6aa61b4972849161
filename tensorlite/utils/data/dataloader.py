"""DataLoader and default_collate, as torch.utils.data.dataloader."""
from __future__ import annotations

import numbers

import numpy as np

from ...errors import ArgumentError, DTypeError, ShapeError
from ...ops.creation import tensor
from ...ops.joins import stack
from ...tensor import Tensor
from .dataset import TensorDataset
from .sampler import BatchSampler, RandomSampler, SequentialSampler


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
    (None: samples one by one, uncollated), in order or shuffled each epoch (from `generator` where
    given, a tl.Generator), from `sampler` or
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
        self.dataset, self.num_workers, self.drop_last = dataset, int(num_workers), bool(drop_last)
        self.sampler = sampler if sampler is not None else \
            RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
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
