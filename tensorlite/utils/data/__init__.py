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

The submodules are torch.utils.data's: dataset, sampler, dataloader, and distributed
(DistributedSampler, imported from there only: it loads tensorlite.distributed).
"""
from .dataloader import DataLoader, default_collate  # noqa: F401
from .dataset import ConcatDataset, Dataset, Subset, TensorDataset, random_split  # noqa: F401
from .sampler import BatchSampler, RandomSampler, SequentialSampler  # noqa: F401
