"""torch.utils.data.distributed's name for DistributedSampler (defined in
tensorlite.distributed.sampler; see tensorlite.distributed for launching).

>>> from tensorlite.utils.data.distributed import DistributedSampler
>>> DistributedSampler.__module__
'tensorlite.distributed.sampler'
"""
from ...distributed.sampler import DistributedSampler

__all__ = ["DistributedSampler"]
