"""Data parallelism across processes, with torch.distributed's names: MPI launches the ranks
and carries the host side (`cpu` collectives, bootstrapping, checks); NCCL (`cuda`) and RCCL
(`rocm`) carry device collectives on the device's stream. No transport of tensorlite's own.

    mpiexec -n 4 python train.py      # mpiexec: the system's MPI, or PyPI's `mpich` wheel

    import tensorlite.distributed as dist
    dist.init()                                    # MPI's COMM_WORLD; without a launcher: one rank
    device = dist.device()                         # 'cuda:<local rank>' (or rocm, or cpu)
    model = dist.DistributedDataParallel(GPT().to(device))
    sampler = dist.DistributedSampler(dataset, shuffle=True, seed=0)

Collectives: all_reduce (ReduceOp SUM, AVG, PRODUCT, MAX, MIN), broadcast, all_gather,
all_gather_into_tensor, reduce_scatter, reduce_scatter_tensor, barrier; every dtype (see
collectives.py for bool, int16 and the 16-bit floats on MPI). Failure handling: before each
collective the ranks compare a description of the call (CollectiveMismatchError on every rank
where it differs); every host wait has a deadline ($TENSORLITE_DIST_TIMEOUT, default 300 s;
DistributedTimeoutError); an uncaught exception on one rank aborts the whole job (MPI_Abort)
after printing its traceback.

>>> import tensorlite as tl, tensorlite.distributed as dist
>>> dist.init()                      # no launcher here: rank 0 of a world of one
>>> x = tl.tensor([1.0, 2.0])
>>> dist.all_reduce(x, op=dist.ReduceOp.AVG); x.tolist()
[1.0, 2.0]
"""
from ._world import (WORLD, CollectiveMismatchError, DistributedError, DistributedTimeoutError,  # noqa: F401
                     destroy_process_group, device, get_backend, get_local_rank, get_rank, get_world_size, init,
                     is_available, is_initialized, launched_by_mpi, local_rank, rank, world_size)
from .collectives import (ReduceOp, Work, all_gather, all_gather_into_tensor, all_reduce, barrier,  # noqa: F401
                          broadcast, device_collectives, reduce_scatter, reduce_scatter_tensor)
from .ddp import DistributedDataParallel  # noqa: F401
from .sampler import DistributedSampler  # noqa: F401


class group:  # noqa: N801 (torch.distributed.group)
    """torch.distributed.group: `group.WORLD`, the default (and only) process group."""
    WORLD = WORLD


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1):  # noqa: F811 (torch's names)
    """torch's name for init(): `backend` None, 'mpi', 'gloo', 'nccl' or 'rccl' (host and device collectives
    follow each tensor's device anyway); `world_size` / `rank`, where given, must be what the
    MPI launcher made. Unlike init(), a second call raises, as torch's does.

    >>> import tensorlite.distributed as dist
    >>> dist.destroy_process_group(); dist.init_process_group("mpi"); dist.get_world_size()
    1
    """
    from ..errors import ArgumentError
    if backend is not None and str(backend).lower() not in ("mpi", "nccl", "rccl", "gloo"):
        raise ArgumentError(f"init_process_group: unknown backend {backend!r}; expected None, 'mpi', 'gloo', "
                            "'nccl' or 'rccl'")
    if init_method not in (None, "env://"):
        raise ArgumentError(f"init_process_group: init_method {init_method!r} is not supported: MPI's launcher "
                            "(mpiexec) starts and connects the ranks")
    if is_initialized():
        raise DistributedError("init_process_group: the default process group is already initialized")
    init(timeout)
    for what, given, actual in (("world_size", world_size, get_world_size()), ("rank", rank, get_rank())):
        if given not in (-1, None) and given != actual:
            destroy_process_group()
            raise ArgumentError(f"init_process_group: {what}={given} but the MPI launcher made {what} {actual}")


def new_group(*args, **kwargs):
    """Not supported: tensorlite has one process group, the world (torch.distributed.new_group)."""
    raise DistributedError("new_group: tensorlite.distributed has only the default group (the MPI world)")
