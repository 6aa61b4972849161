"""A collective library whose collectives never finish, on the null platform (a device that
runs nothing): what a rank sees when a peer is lost mid-collective. Used by
tests/test_dist_watchdog.py and by the scripts it runs in a subprocess.

- `HangingNccl`: NCCL's cdefs (nccl.cdefs) with a stand-in for the library. Each call is kept
  in `calls` as (name, args); a collective "enqueues" work that never finishes; until
  ncclCommAbort, ncclCommGetAsyncError reports `async_code` (ncclInProgress by default: busy,
  no error); ncclCommAbort ends the work, as NCCL's abort ends its kernels.
- `hang(platform, fake)`: the null platform's waits follow the fake: an event query says
  "not done" while a collective hangs, and a stream / event synchronize (what a host read and
  tl.synchronize do) blocks until ncclCommAbort, as a GPU's would -- for at most `cap_s`, then
  raises, so that a missing abort fails a test instead of hanging it.
"""
from __future__ import annotations

import threading

import cffi

from tensorlite.backends.rocm import nccl

COLLECTIVES = ("ncclAllReduce", "ncclBroadcast", "ncclAllGather", "ncclReduceScatter")


class HangingNccl(nccl.CollectiveLibrary):
    def __init__(self, async_code: str = "ncclInProgress"):
        self.vendor, self.path, self.stream_type = "nccl", "libnccl (a fake whose collectives never finish)", \
            "cudaStream_t"
        self.ffi = cffi.FFI()
        self.ffi.cdef(nccl.cdefs("nccl"))
        self.calls = []
        self.hung = False                   # a collective was enqueued and never finished
        self.aborted = threading.Event()    # ncclCommAbort was called
        enums = {}
        for name in ("ncclDataType_t", "ncclRedOp_t", "ncclResult_t"):
            enums.update(self.ffi.typeof(name).relements)
        self.async_code = enums[async_code]
        self._strings = {}
        outer = self

        class Lib:
            def __getattr__(self, name):
                if name in enums:
                    return enums[name]
                return lambda *args: outer.call(name, *args)
        self.lib = Lib()

    def call(self, name, *args):
        self.calls.append((name, args))
        if name in COLLECTIVES:
            self.hung = True
        elif name == "ncclCommAbort":
            self.aborted.set()
        elif name == "ncclCommGetAsyncError":
            args[1][0] = self.async_code
        elif name in ("ncclGetErrorString", "ncclGetLastError"):
            text = f"fake {name}({args[0] if name == 'ncclGetErrorString' else ''})".encode()
            return self._strings.setdefault(text, self.ffi.new("char[]", text))
        return 0

    def names(self):
        return [name for name, _ in self.calls]

    def unique_id(self) -> bytes:
        return bytes(128)


def hang(platform, fake, cap_s: float = 30.0) -> None:
    """Make the null platform's event queries and synchronizes wait for `fake`'s collectives."""
    def running():
        return fake.hung and not fake.aborted.is_set()

    def block(*_):
        if running() and not fake.aborted.wait(cap_s):
            raise AssertionError(f"a host wait behind the hung collective was not released by ncclCommAbort "
                                 f"within {cap_s} s")

    platform.event_query = lambda event: not running()
    platform.stream_synchronize = block
    platform.event_synchronize = block


def null_device_with_hanging_nccl(async_code: str = "ncclInProgress"):
    """(the fake, the null GpuDevice's name) in a process of its own (the subprocess scripts):
    registers backend 'null' and makes the fake its collective library."""
    import tensorlite as tl
    from tensorlite.backends.rocm.device import GpuDevice
    from tensorlite.backends.rocm.null import NullPlatform
    tl.backend.register("null", lambda i: GpuDevice(NullPlatform(), i))
    fake = HangingNccl(async_code)
    nccl.set_collective_library("null", fake)
    hang(tl.backend.get_device("null").platform, fake)
    return fake, "null"
