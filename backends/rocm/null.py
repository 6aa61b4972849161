"""A platform whose device runs nothing, for any machine without a GPU.

Allocations are address ranges, copies, memsets and compiles are dropped, reads from the
device return zeros, launches go to a no-op (or to a C function with cuLaunchKernel's
signature, so that cffi's share of a real launch is measured too). GpuDevice and
GpuStorage run over it unchanged, so the host side of any op sequence can be timed
(benchmarks/profile_step.py, benchmarks/profile_dispatch.py) and the storage's host-side
bookkeeping tested in CI (tests/test_null_device.py). `counts` tallies the device calls
by kind ("launch", "htod", "dtoh", "dtod", "memset").
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

    def init(self):
        return 1

    def activate(self, ordinal):
        pass

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
        self.counts["htod"] += 1

    def dtod_async(self, dst, src, nbytes, stream):
        if not self._recorded(stream, self.dtod_async, dst, src, nbytes, None):
            self.counts["dtod"] += 1

    def memset_d8_async(self, dst, byte, nbytes, stream):
        if not self._recorded(stream, self.memset_d8_async, dst, byte, nbytes, None):
            self.counts["memset"] += 1

    def dtoh_async(self, dst_host, src, nbytes, stream):
        self.counts["dtoh"] += 1
        self.ffi.memmove(self.ffi.cast("void*", dst_host), bytes(nbytes), nbytes)

    def _nothing(self, *args):
        return None

    free = stream_synchronize = event_record = event_synchronize = event_destroy = _nothing
    function_allow_shared = module_load = event_create = _nothing

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
            return 0
        return launch

    def capture_begin(self, stream):
        if self._stub is not None:
            raise CaptureError("the null platform captures graphs only with its Python launcher (stub_lib=None)")
        super().capture_begin(stream)

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
