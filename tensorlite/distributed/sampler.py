"""DistributedSampler: each rank's share of a dataset's indices, as
torch.utils.data.distributed.DistributedSampler."""
from __future__ import annotations

import math

import numpy as np

from ..errors import ArgumentError, DTypeError


class DistributedSampler:
    """The indices of `dataset` (anything with a len()) that rank `rank` of `num_replicas`
    reads in one epoch, with torch's semantics: every rank gets the same number of indices,
    `len(self)`; without drop_last the list is padded by repeating its start so that it divides
    evenly, with drop_last its tail is cut instead; rank r takes every num_replicas-th index
    from r. With shuffle the order is a permutation drawn from seed + epoch (the same on every
    rank; call set_epoch(e) at the start of each epoch for a new one). The permutation is
    numpy's (`default_rng(seed + epoch)`), not torch's: the same seed shuffles differently
    from PyTorch. num_replicas and rank default to the process group's.

    >>> from tensorlite.distributed import DistributedSampler
    >>> list(DistributedSampler(range(10), num_replicas=3, rank=1, shuffle=False))
    [1, 4, 7, 0]
    >>> len(DistributedSampler(range(10), num_replicas=3, rank=1, drop_last=True))
    3
    """

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False):
        if num_replicas is None or rank is None:
            from ._world import world
            w = world()
            num_replicas = w.size if num_replicas is None else num_replicas
            rank = w.rank if rank is None else rank
        for name, v in (("num_replicas", num_replicas), ("rank", rank), ("seed", seed)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise DTypeError(f"DistributedSampler: {name} must be an integer, got {v!r}")
        if num_replicas < 1:
            raise ArgumentError(f"DistributedSampler: num_replicas must be at least 1, got {num_replicas}")
        if not 0 <= rank < num_replicas:
            raise ArgumentError(f"DistributedSampler: invalid rank {rank}, rank should be in the interval "
                                f"[0, {num_replicas - 1}]")
        try:
            n = len(dataset)
        except TypeError:
            raise DTypeError(f"DistributedSampler: the dataset must have a len(), got "
                             f"{type(dataset).__name__}") from None
        self.dataset, self.num_replicas, self.rank = dataset, int(num_replicas), int(rank)
        self.shuffle, self.seed, self.drop_last, self.epoch = bool(shuffle), int(seed), bool(drop_last), 0
        if self.drop_last and n % self.num_replicas:
            self.num_samples = math.ceil((n - self.num_replicas) / self.num_replicas)  # cut the uneven tail
        else:
            self.num_samples = math.ceil(n / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:
            indices = np.random.default_rng(self.seed + self.epoch).permutation(n).tolist()
        else:
            indices = list(range(n))
        if not self.drop_last:
            pad = self.total_size - n
            if pad > 0 and n > 0:  # repeat the start, as many times as it takes (a tiny dataset)
                indices += (indices * math.ceil(pad / n))[:pad]
        else:
            indices = indices[:self.total_size]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose permutation the next iteration uses (shuffle=True); call it on every rank."""
        self.epoch = int(epoch)
