"""NCCL (NVIDIA, `cuda` platform) and RCCL (AMD, `rocm` platform) through cffi's ABI mode:
one cdef set (RCCL implements NCCL's API under the same names), the library each platform
loads, and a `Communicator` per device that enqueues collectives on a stream of the device
(the compute stream by default; tensorlite.distributed passes its communication stream).

The cdefs follow the upstream headers exactly: NVIDIA's `src/nccl.h.in` (repository
NVIDIA/nccl) and ROCm's `src/nccl.h.in` (repository ROCm/rccl, installed as `rccl/rccl.h`).
The stream type of the collectives (`cudaStream_t` / `hipStream_t`) is the only per-vendor
part below. `ncclResult_t` lists the codes up to `ncclInProgress = 7`, which every NCCL from
2.14 and RCCL share; the codes after it differ between releases (NCCL 2.28 ends there,
`ncclNumResults = 8`, as RCCL does; 2.32 adds `ncclTimeout = 8`), so they are left out: error
names come from `ncclGetErrorString`. `ncclRedOp_t` spells the header's `ncclMaxRedOp` as the value its
expression `0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))` has (the dummy enum is an
int: 0x7fffffff); cffi cannot evaluate sizeof in a cdef.

Libraries: NCCL from PyPI's `nvidia-nccl-cu13` wheel (`site-packages/nvidia/nccl/lib/
libnccl.so.2`), `$NCCL_HOME`, the CUDA roots or the loader path; RCCL (`librccl.so.1`) from
`$ROCM_PATH` / `/opt/rocm` or the loader path. Nothing is loaded at import time: a missing
library raises `BackendUnavailable` naming it and where it was looked for, when a collective
first needs it.

Only this file (with hip.py, cuda.py, blas.py and dnn.py) names vendor functions;
`tensorlite.distributed` calls `collective_library(platform_name)` and the Communicator's
vendor-neutral methods.
"""
from __future__ import annotations

import threading

import cffi

from tensorlite.errors import ArgumentError, BackendError, DTypeError

from . import dlopen_first, env_lib_dirs, nvidia_wheel_lib_dirs

UNIQUE_ID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES in both headers

# The shared part, as both headers declare it ({stream}: the vendor's stream type)
COMMON_CDEFS = """
typedef enum { ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3,
               ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7 } ncclResult_t;
typedef struct ncclComm* ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4, ncclNumOps = 5,
               ncclMaxRedOp = 0x7fffffff } ncclRedOp_t;
typedef enum { ncclInt8 = 0, ncclChar = 0, ncclUint8 = 1, ncclInt32 = 2, ncclInt = 2, ncclUint32 = 3,
               ncclInt64 = 4, ncclUint64 = 5, ncclFloat16 = 6, ncclHalf = 6, ncclFloat32 = 7, ncclFloat = 7,
               ncclFloat64 = 8, ncclDouble = 8, ncclBfloat16 = 9, ncclFloat8e4m3 = 10, ncclFloat8e5m2 = 11,
               ncclNumTypes = 12 } ncclDataType_t;
ncclResult_t ncclGetVersion(int* version);
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
const char* ncclGetErrorString(ncclResult_t result);
const char* ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, {stream} stream);
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, {stream} stream);
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, {stream} stream);
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, {stream} stream);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
"""

# The per-vendor part (before COMMON_CDEFS): the stream type
NCCL_TYPES = """
typedef struct CUstream_st* cudaStream_t;
"""
RCCL_TYPES = """
typedef struct ihipStream_t* hipStream_t;
"""


def cdefs(vendor: str) -> str:
    """The complete cdef text of 'nccl' or 'rccl' (what the header check compiles)."""
    types, stream = {"nccl": (NCCL_TYPES, "cudaStream_t"), "rccl": (RCCL_TYPES, "hipStream_t")}[vendor]
    return types + COMMON_CDEFS.replace("{stream}", stream)


# tensorlite dtype name -> ncclDataType_t. int16 and bool have no NCCL type: the frontend moves
# them as bytes and reduces them widened (see tensorlite/distributed/collectives.py)
DTYPES = {"int8": "ncclInt8", "uint8": "ncclUint8", "int32": "ncclInt32", "uint32": "ncclUint32",
          "int64": "ncclInt64", "float16": "ncclFloat16", "float32": "ncclFloat32", "float64": "ncclFloat64",
          "bfloat16": "ncclBfloat16"}
# tensorlite.distributed.ReduceOp name -> ncclRedOp_t
OPS = {"sum": "ncclSum", "product": "ncclProd", "max": "ncclMax", "min": "ncclMin", "avg": "ncclAvg"}

# platform -> (vendor, library description, sonames, directories to search)
_ROCM_DIRS, _ROCM_DEFAULTS = ("ROCM_PATH", "HIP_PATH"), ("/opt/rocm",)
_CUDA_DIRS, _CUDA_DEFAULTS = ("NCCL_HOME", "CUDA_HOME", "CUDA_PATH"), ("/usr/local/cuda",)
_LIBRARIES = {
    "cuda": ("nccl", "libnccl (NCCL; pip install nvidia-nccl-cu13)", ("libnccl.so.2", "libnccl.so"),
             lambda: nvidia_wheel_lib_dirs() + env_lib_dirs(_CUDA_DIRS, _CUDA_DEFAULTS)),
    "rocm": ("rccl", "librccl (RCCL)", ("librccl.so.1", "librccl.so"),
             lambda: env_lib_dirs(_ROCM_DIRS, _ROCM_DEFAULTS)),
}
_LOADED = {}


class CollectiveLibrary:
    """NCCL or RCCL, loaded: `ffi`, `lib`, `path`, `vendor`, `version()`, `unique_id()`."""

    def __init__(self, platform_name: str):
        self.vendor, what, sonames, dirs = _LIBRARIES[platform_name]
        self.ffi = cffi.FFI()
        self.ffi.cdef(cdefs(self.vendor))
        self.stream_type = "cudaStream_t" if self.vendor == "nccl" else "hipStream_t"
        self.lib, self.path = dlopen_first(self.ffi, what, sonames, dirs())

    def error(self, call: str, code: int, comm=None) -> BackendError:
        """The BackendError of a failed call: the library's name for the code, and its last error message."""
        name = self.ffi.string(self.lib.ncclGetErrorString(code)).decode(errors="replace")
        detail = ""
        try:  # ncclGetLastError is missing from RCCL before 5.7
            last = self.lib.ncclGetLastError(comm if comm is not None else self.ffi.NULL)
            if last != self.ffi.NULL and self.ffi.string(last):
                detail = f": {self.ffi.string(last).decode(errors='replace')}"
        except AttributeError:
            pass
        return BackendError(f"{call} failed: {name} ({int(code)}){detail} [{self.path}]")

    def check(self, call: str, code: int, comm=None) -> None:
        if code:
            raise self.error(call, code, comm)

    def version(self) -> int:
        """NCCL_VERSION_CODE of the loaded library (2.30.7 -> 23007)."""
        v = self.ffi.new("int*")
        self.check("ncclGetVersion", self.lib.ncclGetVersion(v))
        return int(v[0])

    def unique_id(self) -> bytes:
        """A fresh ncclUniqueId (what rank 0 makes and every rank passes to ncclCommInitRank)."""
        uid = self.ffi.new("ncclUniqueId*")
        self.check("ncclGetUniqueId", self.lib.ncclGetUniqueId(uid))
        return bytes(self.ffi.buffer(uid.internal, UNIQUE_ID_BYTES))

    def datatype(self, op: str, dtype) -> int:
        name = DTYPES.get(dtype.name)
        if name is None:
            raise DTypeError(f"{op}: {self.vendor.upper()} has no data type for {dtype.name}")
        return getattr(self.lib, name)

    def redop(self, op: str, reduce_op: str) -> int:
        name = OPS.get(reduce_op)
        if name is None:
            raise ArgumentError(f"{op}: {self.vendor.upper()} has no reduction {reduce_op!r}; "
                                f"expected one of {sorted(OPS)}")
        return getattr(self.lib, name)


def has_collective_library(platform_name: str) -> bool:
    """Whether a GPU platform has a collective library ('cuda': NCCL, 'rocm': RCCL; not amdemu
    or null, whose collectives tensorlite.distributed stages through the host, unless one was
    set with set_collective_library)."""
    return platform_name in _LIBRARIES or _LOADED.get(platform_name) is not None


def set_collective_library(platform_name: str, library) -> None:
    """Make `library` (a CollectiveLibrary, or a stand-in with its `ffi`, `lib`, `vendor`,
    `path`, `stream_type` and methods) the collective library of a platform: a fake one on the
    null platform in tests (tests/distributed/hanging_nccl.py). None: back to the default."""
    if library is None:
        _LOADED.pop(platform_name, None)
    else:
        _LOADED[platform_name] = library


def collective_library(platform_name: str):
    """The loaded CollectiveLibrary of a GPU platform ('cuda': NCCL, 'rocm': RCCL), None for a
    platform that has none (amdemu, null); BackendUnavailable (naming the library and where it
    was looked for) where it cannot be loaded."""
    lib = _LOADED.get(platform_name)
    if lib is None and platform_name not in _LIBRARIES:
        return None
    if lib is None:
        lib = _LOADED[platform_name] = CollectiveLibrary(platform_name)
    return lib


class Communicator:
    """One rank's NCCL/RCCL communicator on one GpuDevice: collectives on device addresses,
    enqueued on `stream` (a stream of the device; None: its compute stream); the host does not
    wait for them. One communicator's collectives must reach the GPU in one order on every
    rank: its user enqueues them all on one stream at a time.

    `unique_id`: the 128 bytes of rank 0's `CollectiveLibrary.unique_id()`, the same on every
    rank (tensorlite.distributed broadcasts it over MPI). ncclCommInitRank blocks until every
    rank has called it.

    Threads: `abort()` and `async_error()` may be called from another thread (tensorlite.distributed's
    watchdog) while this one enqueues; a lock keeps a collective from being enqueued on a
    communicator that abort() is freeing. After abort() every call raises BackendError."""

    def __init__(self, library: CollectiveLibrary, device, nranks: int, rank: int, unique_id: bytes):
        if len(unique_id) != UNIQUE_ID_BYTES:
            raise ArgumentError(f"Communicator: a unique id has {UNIQUE_ID_BYTES} bytes, got {len(unique_id)}")
        self.library, self.device, self.nranks, self.rank = library, device, nranks, rank
        ffi, lib = library.ffi, library.lib
        uid = ffi.new("ncclUniqueId*")
        ffi.memmove(uid.internal, unique_id, UNIQUE_ID_BYTES)
        comm = ffi.new("ncclComm_t*")
        device.activate()  # the communicator belongs to the thread's current device
        library.check(f"ncclCommInitRank(nranks={nranks}, rank={rank}) on {device}",
                      lib.ncclCommInitRank(comm, nranks, uid[0], rank))
        self.comm = comm[0]
        self._streams = {}  # device stream -> the library's cdata of it
        self.unjoined = 0   # collectives on a side stream whose Work was not waited for (tensorlite.distributed)
        self._lock = threading.Lock()  # held by each call on self.comm; abort() takes it (see abort)
        self.aborted = None  # why abort() freed the communicator, once it has

    def _gone(self, call: str) -> BackendError:
        why = f"it was aborted ({self.aborted})" if self.aborted else "it was destroyed"
        return BackendError(f"{call}: {self!r} can no longer be used: {why}")

    def __repr__(self):
        return f"Communicator({self.library.vendor}, rank {self.rank} of {self.nranks}, {self.device})"

    def _call(self, name: str, stream, *args):
        dev = self.device
        key = dev.stream if stream is None else stream
        lib_stream = self._streams.get(key)
        if lib_stream is None:
            lib_stream = self._streams[key] = self.library.ffi.cast(self.library.stream_type, dev.stream_handle(key))
        dev.activate()
        dev.platform.drain_launches()  # the kernel launches queued before go first (launch_shim.py)
        with self._lock:
            if self.comm is None:
                raise self._gone(f"{name} on {dev}")
            self.library.check(f"{name} on {dev}", getattr(self.library.lib, name)(*args, self.comm, lib_stream),
                               self.comm)

    def all_reduce(self, send: int, recv: int, count: int, dtype, reduce_op: str, stream=None) -> None:
        """recv[:count] = reduce_op over the ranks of send[:count] (send == recv: in place)."""
        lib = self.library
        self._call("ncclAllReduce", stream, _ptr(lib, send), _ptr(lib, recv), count,
                   lib.datatype("all_reduce", dtype), lib.redop("all_reduce", reduce_op))

    def broadcast(self, send: int, recv: int, count: int, dtype, root: int, stream=None) -> None:
        """recv[:count] = root's send[:count] on every rank."""
        lib = self.library
        self._call("ncclBroadcast", stream, _ptr(lib, send), _ptr(lib, recv), count, lib.datatype("broadcast", dtype),
                   root)

    def all_gather(self, send: int, recv: int, count: int, dtype, stream=None) -> None:
        """recv[i * count:(i + 1) * count] = rank i's send[:count]."""
        lib = self.library
        self._call("ncclAllGather", stream, _ptr(lib, send), _ptr(lib, recv), count,
                   lib.datatype("all_gather", dtype))

    def reduce_scatter(self, send: int, recv: int, count: int, dtype, reduce_op: str, stream=None) -> None:
        """recv[:count] = reduce_op over the ranks of send[rank * count:(rank + 1) * count]."""
        lib = self.library
        self._call("ncclReduceScatter", stream, _ptr(lib, send), _ptr(lib, recv), count,
                   lib.datatype("reduce_scatter", dtype), lib.redop("reduce_scatter", reduce_op))

    def async_error(self, blocking: bool = True):
        """ncclCommGetAsyncError: 0 (ncclSuccess) while the communicator is healthy, ncclInProgress
        (7) while a nonblocking one is still initializing, else the error that broke it. With
        blocking=False (a watchdog's poll): None at once where another thread is in a call on
        the communicator. BackendError once it has been aborted or destroyed."""
        if not self._lock.acquire(blocking):
            return None
        try:
            if self.comm is None:
                raise self._gone("ncclCommGetAsyncError")
            err = self.library.ffi.new("ncclResult_t*")
            self.library.check("ncclCommGetAsyncError", self.library.lib.ncclCommGetAsyncError(self.comm, err))
            return int(err[0])
        finally:
            self._lock.release()

    def destroy(self) -> None:
        """Free the communicator after its queued work (ncclCommDestroy, which waits for that work
        on the device: a collective that never finishes makes it hang, so abort() such a one);
        idempotent, and nothing after abort()."""
        with self._lock:
            comm, self.comm = self.comm, None
        if comm is not None:
            self.device.activate()
            self.library.check("ncclCommDestroy", self.library.lib.ncclCommDestroy(comm))

    def abort(self, reason: str = "abort() was called", lock_wait_s: float = 1.0) -> None:
        """Free the communicator, abandoning its queued work (ncclCommAbort): its kernels waiting
        for peers return, so the streams that wait for them run on (on data the collective never
        finished). Idempotent. Callable from any thread: it waits up to `lock_wait_s` for a call
        of another thread on the communicator to return, then aborts anyway (as torch's watchdog
        aborts from its thread): a call stuck behind a collective that never ends would
        otherwise never return."""
        locked = self._lock.acquire(timeout=lock_wait_s)
        try:
            comm, self.comm = self.comm, None
            if comm is not None:
                self.aborted = reason
        finally:
            if locked:
                self._lock.release()
        if comm is not None:
            self.device.activate()  # the communicator's device, current in this thread too
            self.library.lib.ncclCommAbort(comm)  # its status says nothing more: the communicator is gone either way


def _ptr(library, addr: int):
    return library.ffi.cast("void*", addr)
