"""torch.nn.parallel's name for data parallelism across processes: `DistributedDataParallel`
(defined in tensorlite.distributed.ddp; see tensorlite.distributed for launching).

>>> from tensorlite.nn.parallel import DistributedDataParallel
>>> DistributedDataParallel.__module__
'tensorlite.distributed.ddp'
"""
from ..distributed.ddp import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
