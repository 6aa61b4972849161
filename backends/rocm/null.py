"""A platform whose device runs nothing, for any machine without a GPU.

Allocations are address ranges, copies, memsets and compiles are dropped, reads from the
device return zeros, launches go to a no-op (or to a C function with cuLaunchKernel's
signature, so that cffi's share of a real launch is measured too). GpuDevice and
GpuStorage run over it unchanged, so the host side of any op sequence can be timed
(benchmarks/profile_step.py, benchmarks/profile_dispatch.py) and the storage's host-side
bookkeeping tested in CI (tests/test_null_device.py). `counts` tallies the device calls
by kind ("launch", "htod", "dtoh", "dtod", "memset", and the stream and event calls
"event_record", "stream_wait_event", "event_synchronize", "stream_synchronize"). Set `log` to a
list and every stream-ordered call is appended to it as (kind, args), streams as integers, in
the order the host issued them: what a test needs to check how work is ordered across streams
(events are integers too; a wait is satisfied at once, as nothing runs).
"""
from __future__ import annotations

import collections
import itertools

from tensorlite.errors import CaptureError

from . import PlatformBase
from .graph import RecordedGraphs

# The launch entry point's C declaration (what a stub library must export).
LAUNCH_DECL = """
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;
int cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                   unsigned int by, unsigned int bz, unsigned int shared_mem, CUstream stream,
                   void** params, void** extra);
"""


class NullPlatform(RecordedGraphs, PlatformBase):
    """Looks like an H100-class device (sm_90, 132 multiprocessors) to the storage code, so
    it takes the same kernel paths as there. `stub_lib`: a shared library exporting
    cuLaunchKernel (LAUNCH_DECL) that launches go through; None: a Python no-op."""
    name = runtime_name = "null"
    CALLS = {"launch": "cuLaunchKernel"}

    def __init__(self, stub_lib: str = None):
        super().__init__(LAUNCH_DECL)
        self._next = 1 << 32
        self._stub = self.ffi.dlopen(stub_lib) if stub_lib else None
        self.counts = collections.Counter()
        self._streams = itertools.count(1)
        self._events = itertools.count(1)
        self.log = None  # a list: the stream-ordered calls, in order (see the module's docstring)

    def _note(self, kind, stream, *args):
        """Count a call of `kind`; with a log, append it (the stream first where it has one). The
        calls of a real platform that work on streams drain the launch queues (PlatformBase.call)."""
        if self.launch_queues:
            self.drain_launches()
        self.counts[kind] += 1
        if self.log is not None:
            self.log.append((kind, args if stream is False else (self.stream_id(stream),) + args))

    def stream_id(self, stream) -> int:
        """A stream as the integer `log` names it by (GpuDevice.stream_handle's); 0: the stream
        a graph replays on (its recorded calls carry no stream)."""
        return 0 if stream is None else int(self.ffi.cast("uintptr_t", stream))

    def init(self):
        return 1

    def activate(self, ordinal):
        self.thread.ordinal = ordinal  # nothing to make current; kept as the real platforms keep it

    def device_properties(self, ordinal):
        return {"name": "null GPU", "arch": "sm_90", "warp_size": 32, "multiprocessor_count": 132,
                "max_threads_per_block": 1024, "max_shared_memory_per_block": 48 * 1024,
                "total_memory": 1 << 40}

    def malloc(self, nbytes):
        self._next += -self._next % 256
        ptr, self._next = self._next, self._next + max(int(nbytes), 1)
        return ptr

    def mem_get_info(self):
        return 1 << 40, 1 << 40

    def htod_async(self, dst, src_host, nbytes, stream):
        self._note("htod", stream, dst, nbytes)

    def dtod_async(self, dst, src, nbytes, stream):
        if not self._recorded(stream, self.dtod_async, dst, src, nbytes, None):
            self._note("dtod", stream, dst, src, nbytes)

    def memset_d8_async(self, dst, byte, nbytes, stream):
        if not self._recorded(stream, self.memset_d8_async, dst, byte, nbytes, None):
            self._note("memset", stream, dst, nbytes)

    def dtoh_async(self, dst_host, src, nbytes, stream):
        self._note("dtoh", stream, src, nbytes)
        self.ffi.memmove(self.ffi.cast("void*", dst_host), bytes(nbytes), nbytes)

    # ---- streams and events: nothing runs, so every wait is satisfied at once; noted in order
    def event_create(self):
        return next(self._events)

    sync_event_create = event_create

    def event_record(self, event, stream):
        super().event_record(event, stream)
        self._note("event_record", stream, event)

    def stream_wait_event(self, stream, event):
        super().stream_wait_event(stream, event)
        self._note("stream_wait_event", stream, event)

    def event_synchronize(self, event):
        self._note("event_synchronize", False, event)

    def stream_synchronize(self, stream):
        self._note("stream_synchronize", stream)

    def event_query(self, event):
        return True

    def _nothing(self, *args):
        return None

    free = event_destroy = function_allow_shared = module_load = _nothing

    def event_elapsed_ms(self, start, stop):
        return 0.0

    def stream_create(self):
        return self.ffi.cast("CUstream", next(self._streams))

    def module_get_function(self, module, name):
        return self.ffi.cast("CUfunction", 1 << 12)

    def function_max_threads(self, function):
        return 1024

    def launch_function(self):
        if self._stub is not None:
            return self._stub.cuLaunchKernel  # graphs cannot be captured through the stub (capture_begin)

        def launch(f, gx, gy, gz, bx, by, bz, shared_mem, stream, params, extra):
            if not self._recorded(stream, launch, f, gx, gy, gz, bx, by, bz, shared_mem, None, params, extra):
                self.counts["launch"] += 1
                if self.log is not None:
                    self.log.append(("launch", (self.stream_id(stream),)))
            return 0
        return launch

    def capture_begin(self, stream):
        if self._stub is not None:
            raise CaptureError("the null platform captures graphs only with its Python launcher (stub_lib=None)")
        super().capture_begin(stream)

    def error_name(self, code):
        return "a stub library's status"

    def rtc_version(self):
        return "null 0"

    def rtc_options(self, arch):
        return []

    def rtc_compile(self, source, name, headers, options):
        return b"null"

    def blas_create(self, stream, workspace_ptr=0, workspace_bytes=0):
        return None

    def blas_gemm(self, *args):
        pass
