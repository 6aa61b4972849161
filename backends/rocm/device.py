"""GpuDevice: one GPU of a platform (rocm or cuda), its stream, caching allocator and kernels.

Every operation is enqueued on the device's compute stream (`stream`); the host waits only
in `dtoh` (reading data back) and `synchronize()`. Because the allocator knows only that
stream, a block freed to the cache can be handed out again at once: any later use is
ordered after every earlier use on that stream. The one other stream that runs tensor
memory, `communication_stream()` (collectives, tensorlite.distributed), is ordered against
it by events, and its users keep the buffers it touches alive until the compute stream
has been made to wait for it (see tensorlite/distributed/collectives.py).
"""
from __future__ import annotations

import struct
import threading

import numpy as np
from math import prod
from threading import get_ident
from operator import itemgetter
from typing import Dict, Tuple

from tensorlite import dtype as dtypes
from tensorlite.backend import BackendDevice
from tensorlite.dtype import DType
from tensorlite.errors import (ArgumentError, BackendError, BackendUnavailable, CaptureError, CompileError,
                               OutOfMemoryError)

from . import ThreadState, get_platform, launch_shim
from .compiler import compile_source
from .launch import dependent_launch

GpuStorage = None  # backends.rocm.storage.GpuStorage, imported lazily (it imports this module)
_new_object = object.__new__

# ---- caching allocator ----------------------------------------------------------------

_SMALL_LIMIT = 1 << 20      # blocks up to 1 MiB are rounded to 512 B ...
_SMALL_ROUND = 512
_LARGE_ROUND = 2 << 20      # ... larger ones to 2 MiB, so sizes of similar tensors share a class
RANGE_SCAN_LIMIT = 1 << 22  # integer uploads up to this many elements get a host-side (min, max)


def size_class(nbytes: int, exact: bool = False) -> int:
    """The block size the caching allocator takes for nbytes; `exact` (a platform's
    EXACT_BUFFERS): nbytes itself, so that a kernel reading past a tensor's end meets no slack."""
    if exact:
        return max(nbytes, 1)
    step = _SMALL_ROUND if nbytes <= _SMALL_LIMIT else _LARGE_ROUND
    return max(step, -(-nbytes // step) * step)


class Buffer:
    """A device allocation from a CachingAllocator; returns to the cache when collected."""
    __slots__ = ("ptr", "nbytes", "size", "_allocator", "__weakref__")

    def __init__(self, ptr: int, nbytes: int, size: int, allocator):
        self.ptr, self.nbytes, self.size, self._allocator = ptr, nbytes, size, allocator

    def __del__(self):
        alloc = self._allocator
        if alloc is not None:
            self._allocator = None
            try:  # CachingAllocator.release, inlined: every op's temporaries come back here
                size = self.size
                alloc.allocated -= size
                free = alloc._free.get(size)
                if free is None:
                    alloc._free[size] = [self.ptr]
                else:
                    free.append(self.ptr)
            except Exception:  # interpreter shutdown: the runtime reclaims the memory anyway
                pass

    def __repr__(self):
        return f"Buffer(ptr=0x{self.ptr:x}, nbytes={self.nbytes})"


class CachingAllocator:
    """Size-class free lists over the platform's malloc/free.

    allocated: bytes in live Buffers (by size class); reserved: allocated + cached;
    peak: the highest `allocated` since creation (or reset_peak)."""

    def __init__(self, device: "GpuDevice", exact: bool = False):
        """`exact`: blocks of the size asked, no size classes (size_class)."""
        self.device = device
        self.platform = device.platform
        self.total = getattr(device, "props", {}).get("total_memory")  # bytes; None where unknown
        self.exact = exact
        # the size classes' steps (inlined in alloc); 1: exact sizes
        self._small, self._large = (1, 1) if exact else (_SMALL_ROUND, _LARGE_ROUND)
        self._free: Dict[int, list] = {}
        self.allocated = self.reserved = self.peak = 0
        self.num_allocs = self.num_cache_hits = 0

    def alloc(self, nbytes: int) -> Buffer:
        if nbytes <= 0:
            return Buffer(0, 0, 0, None)
        # size_class and Buffer.__init__, inlined: this runs for every op's output
        step = self._small if nbytes <= _SMALL_LIMIT else self._large
        size = -(-nbytes // step) * step
        cached = self._free.get(size)
        if cached:
            ptr = cached.pop()
            self.num_cache_hits += 1
        else:
            ptr = self._malloc(size, nbytes)
        self.num_allocs += 1
        allocated = self.allocated = self.allocated + size
        if allocated > self.peak:
            self.peak = allocated
        buf = _new_object(Buffer)
        buf.ptr, buf.nbytes, buf.size, buf._allocator = ptr, nbytes, size, self
        return buf

    def _malloc(self, size: int, nbytes: int) -> int:
        dev = self.device
        if self.total is not None and size > self.total:  # fail at once: a driver may take long to refuse it
            raise OutOfMemoryError(f"{dev}: out of memory allocating {nbytes} bytes, more than the device's "
                                   f"{self.total} bytes")
        dev.activate()
        try:
            ptr = self.platform.malloc(size)
        except OutOfMemoryError:
            # give cached blocks of other sizes back, then try once more; not while capturing: that
            # waits for the stream, and the cache then holds blocks the graph being captured reads
            if dev.capture is None:
                self.empty_cache()
            try:
                ptr = self.platform.malloc(size)
            except OutOfMemoryError as e:
                try:
                    free, total = self.platform.mem_get_info()
                    device_mem = f"; device free {free} of {total} bytes"
                except BackendError:
                    device_mem = ""
                raise OutOfMemoryError(
                    f"{dev}: out of memory allocating {nbytes} bytes (size class {size}): "
                    f"allocated={self.allocated} reserved={self.reserved} peak={self.peak}{device_mem} ({e})"
                ) from None
        self.reserved += size
        return ptr

    def fresh(self, nbytes: int) -> Buffer:
        """A block new from the platform, never a cached one (which work captured into a graph
        may write), counted as allocated like any other."""
        size = size_class(nbytes, self.exact)
        buf = Buffer(self._malloc(size, nbytes), nbytes, size, self)
        self.num_allocs += 1
        self.allocated += size
        self.peak = max(self.peak, self.allocated)
        return buf

    def cached_blocks(self, size: int) -> list:
        """The addresses of the free blocks of size class `size` held for reuse (a copy)."""
        return list(self._free.get(size, ()))

    def release(self, ptr: int, size: int) -> None:
        """Return a block to its free list (Buffer.__del__ does the same inline)."""
        self.allocated -= size
        self._free.setdefault(size, []).append(ptr)

    def empty_cache(self) -> None:
        """Return every cached (unused) block to the runtime."""
        dev = self.device
        dev.activate()
        self.platform.stream_synchronize(dev.stream)  # no queued work may still touch them
        free_lists, self._free = self._free, {}
        for size, ptrs in free_lists.items():
            for ptr in ptrs:
                self.platform.free(ptr)
                self.reserved -= size

    def stats(self) -> Dict[str, int]:
        return {"allocated": self.allocated, "reserved": self.reserved, "peak": self.peak,
                "cached": self.reserved - self.allocated, "num_allocs": self.num_allocs,
                "num_cache_hits": self.num_cache_hits}


# ---- kernels and their arguments ------------------------------------------------------

class Kernel:
    """A loaded kernel entry point (what GpuDevice.function returns). Its C signature is
    fixed, so the argument packing plan is built on its first launch (one per thread; see
    ArgLayout for why a plan's buffer may be reused)."""
    __slots__ = ("handle", "name", "source", "layouts", "max_threads", "shared_allowed", "dependent")

    def __init__(self, handle, name: str, source: str, max_threads: int = 1024):
        self.handle, self.name, self.source = handle, name, source
        self.dependent = dependent_launch(source, name)  # may start before the kernel it follows (launch.py)
        self.layouts: Dict[int, "ArgLayout"] = {}  # thread id -> plan
        self.max_threads = max_threads  # per block: the kernel's registers may allow fewer than the device
        self.shared_allowed = 48 * 1024  # dynamic shared memory a launch may ask without opting in

    def __repr__(self):
        return f"Kernel({self.source}:{self.name})"


# ctype -> (struct code, size); every slot is aligned to its size (by-value structs to 8)
_SCALARS = {"int32": ("i", 4), "uint32": ("I", 4), "int64": ("q", 8), "uint64": ("Q", 8),
            "float": ("f", 4), "double": ("d", 8), "ptr": ("Q", 8)}


class ArgLayout:
    """Packing plan for one signature: a precompiled struct, and a reusable C buffer plus
    the `void*[]` of slot addresses that the launch API takes.

    Reusing the buffer is safe because the platforms' launch calls copy the
    argument values into the launch (or the captured graph node, or the launch queue's
    record: launch_shim.py) before they return, and
    a plan belongs to one thread (Kernel.layouts is keyed by thread id): the next launch
    can only refill it after the previous call has returned. Nothing may launch between
    the refill and the call on the same thread (no Python code runs there but finalizers,
    and none of ours launches)."""
    __slots__ = ("signature", "nargs", "nbytes", "fmt", "pack_into", "buffer", "cbuf", "params")

    def __init__(self, ffi, signature):
        fmt, offsets, pos = "<", [], 0
        for item in signature:
            if isinstance(item, tuple):  # ('bytes', length)
                code, size, align = f"{item[1]}s", item[1], 8
            else:
                try:
                    code, size = _SCALARS[item]
                except KeyError:
                    raise BackendError(f"launch: unknown kernel argument type {item!r}; expected one of "
                                       f"{sorted(_SCALARS)} or ('bytes', b'...')") from None
                align = size
            pad = -pos % align
            fmt += "x" * pad + code
            pos += pad
            offsets.append(pos)
            pos += size
        self.signature, self.nargs, self.nbytes, self.fmt = signature, len(signature), pos, fmt
        self.pack_into = struct.Struct(fmt).pack_into   # bound once: no format-cache lookup per launch
        self.cbuf = ffi.new("char[]", max(pos, 1))
        self.buffer = ffi.buffer(self.cbuf)
        self.params = ffi.new("void*[]", [self.cbuf + off for off in offsets]) if offsets else ffi.NULL

    @staticmethod
    def signature_of(args):
        return tuple(c if c != "bytes" else ("bytes", len(v)) for c, v in args)


_second = itemgetter(1)


def launch_args(signature, values) -> list:
    """launch_values' arguments as launch()'s (ctype, value) pairs, each struct's length checked
    against the signature's (for stand-in devices that record launches as pairs)."""
    values = tuple(values)
    if len(values) != len(signature):
        raise BackendError(f"launch: {len(values)} argument values for the {len(signature)} of {signature}")
    pairs = []
    for ctype, v in zip(signature, values):
        if isinstance(ctype, tuple):
            if len(v) != ctype[1]:
                raise BackendError(f"launch: a struct of {len(v)} bytes where {signature} has {ctype[1]}")
            ctype = "bytes"
        pairs.append((ctype, v))
    return pairs


def _dim3(d, what: str) -> Tuple[int, int, int]:
    if type(d) is tuple and len(d) == 2:  # the row kernels' 2-d blocks, checked without copies
        x, y = d
        if type(x) is int and type(y) is int and x > 0 and y > 0:
            return x, y, 1
    if isinstance(d, int):
        t = (d, 1, 1)
    else:
        t = tuple(map(int, d))
        t += (1, 1, 1)[len(t):]
        if len(t) != 3:
            raise BackendError(f"launch: {what} must be an int or a 1..3-tuple, got {d!r}")
    if min(t) <= 0:
        raise BackendError(f"launch: {what} {t} has an empty dimension")
    return t


# ---- the device -----------------------------------------------------------------------

class Event:
    """A device event, as torch.cuda.Event. For timing: e0.record(); ...; e1.record();
    e1.synchronize(); e0.elapsed_ms(e1). For ordering streams (enable_timing=False, cheaper):
    e.record(s1); e.wait(s2) makes work enqueued on s2 afterwards wait for the work enqueued on
    s1 before the record, on the device (the host does not wait). `stream` None: the device's
    compute stream. Unlike torch's, timing is on by default (dev.event() is the benchmarks' timer)."""

    def __init__(self, device: "GpuDevice", enable_timing: bool = True):
        self.device = device
        device.activate()
        plat = device.platform
        self.handle = plat.event_create() if enable_timing else plat.sync_event_create()

    def record(self, stream=None):
        self.device.platform.event_record(self.handle, self.device.stream if stream is None else stream)
        return self

    def wait(self, stream=None) -> None:
        self.device.platform.stream_wait_event(self.device.stream if stream is None else stream, self.handle)

    def query(self) -> bool:
        """Whether the work recorded before has finished (the host does not wait)."""
        return self.device.platform.event_query(self.handle)

    def synchronize(self):
        self.device.platform.event_synchronize(self.handle)

    def elapsed_ms(self, end: "Event") -> float:
        return self.device.platform.event_elapsed_ms(self.handle, end.handle)

    def __del__(self):
        try:
            self.device.platform.event_destroy(self.handle)
        except Exception:
            pass


class GpuDevice(BackendDevice):
    def __init__(self, platform, ordinal: int):
        self.platform = platform
        self.name = platform.name
        self.ordinal = ordinal
        count = platform.init()
        if not 0 <= ordinal < count:
            raise BackendUnavailable(f"{platform.runtime_name}: no device {platform.name}:{ordinal} "
                                     f"({count} device(s) visible)")
        platform.activate(ordinal)
        self.props = platform.device_properties(ordinal)
        self.arch: str = self.props["arch"]
        self.warp_size: int = self.props["warp_size"]
        self.stream = platform.stream_create()
        self._comm_stream = None   # communication_stream(), made on first use
        self._sync_events = []     # sync_event()'s pool
        # EXACT_BUFFERS: PlatformBase's flag (a stand-in platform of the tests may lack it)
        self.allocator = CachingAllocator(self, getattr(platform, "EXACT_BUFFERS", False))
        self.alloc = self.allocator.alloc  # GpuDevice.alloc without the extra call, for every op's output
        self._modules: Dict[str, object] = {}
        self._functions: Dict[Tuple[str, str], Kernel] = {}
        self.kernels: Dict[str, Kernel] = {}  # kernel_table.kernel_for's, by entry name
        self._blas = None
        self.has_blas = platform.HAS_BLAS  # False: float GEMMs run the portable kernel
        # bound once: launch() runs for every op
        self._launch_fn, self._launch_last = platform.launch_call()  # launch_shim.py
        self._start_launch_queue()
        # programmatic dependent launch, used while capturing (None where the device has none)
        self._launch_dependent = platform.dependent_launch_function(self.arch)
        self._activate = platform.activate
        # the platform's record of the device current in each thread: a launch activates only when
        # it is another (a stand-in platform of the tests may keep none: then every launch activates)
        self._current = getattr(platform, "thread", None) or ThreadState()
        self._seed, self._rng_offset = 0, 0
        self._lock = threading.RLock()
        self._error_flag = None    # run_checked's flag (a Buffer of 4 bytes, made on first use)
        self.capture = None        # graph.Capture while the stream is being captured
        self.pending_checks = {}   # replayed graphs whose error flag the next host read checks (graph.py)

    def __repr__(self):
        return f"GpuDevice({self}, {self.props['name']!r}, arch={self.arch})"

    def activate(self):
        self.platform.activate(self.ordinal)

    # ---- memory -------------------------------------------------------------------
    def alloc(self, nbytes: int) -> Buffer:  # shadowed per instance by allocator.alloc (see __init__)
        return self.allocator.alloc(nbytes)

    def htod(self, dst_ptr: int, array) -> None:
        """Host -> device, enqueued on the stream. Safe to drop `array` on return: the runtime
        has staged pageable host memory by then."""
        if not array.flags.c_contiguous:
            raise BackendError(f"htod: host array must be C-contiguous (shape {array.shape}, strides {array.strides})")
        if array.nbytes:
            self.activate()
            if self.capture is not None:  # becomes a constant of the graph (graph.Capture.constant)
                self.capture.constant(dst_ptr, array)
                return
            self.platform.htod_async(dst_ptr, array.ctypes.data, array.nbytes, self.stream)

    def fresh_zeros(self, nbytes: int) -> Buffer:
        """nbytes of new device memory (never a cached block, which work captured into a graph
        may write) at zero on return: zeroed on the upload stream, which no capture records."""
        from .graph import upload_stream
        buf = self.allocator.fresh(nbytes)
        side = upload_stream(self)
        self.platform.memset_d8_async(buf.ptr, 0, nbytes, side)
        self.platform.stream_synchronize(side)
        return buf

    def dtoh(self, array, src_ptr: int) -> None:
        """Device -> host numpy array (C-contiguous, writable); waits for the stream."""
        if not (array.flags.c_contiguous and array.flags.writeable):
            raise BackendError("dtoh: host array must be C-contiguous and writable")
        if array.nbytes:
            if self.capture is not None:
                self._refuse_in_capture(f"reading {array.nbytes} bytes back to the host")
            self.activate()
            self.platform.dtoh_async(array.ctypes.data, src_ptr, array.nbytes, self.stream)
            self.platform.stream_synchronize(self.stream)
            if self.pending_checks:
                self._check_replays()

    def dtod(self, dst_ptr: int, src_ptr: int, nbytes: int) -> None:
        if nbytes:
            self.activate()
            self.platform.dtod_async(dst_ptr, src_ptr, nbytes, self.stream)

    def memset(self, ptr: int, byte: int, nbytes: int) -> None:
        if nbytes:
            self.activate()
            self.platform.memset_d8_async(ptr, byte & 0xFF, nbytes, self.stream)

    def memory_stats(self) -> Dict[str, int]:
        return self.allocator.stats()

    def reset_peak_memory_stats(self) -> None:
        self.allocator.peak = self.allocator.allocated

    def empty_cache(self) -> None:
        if self.capture is not None:
            self._refuse_in_capture("empty_cache")
        self.allocator.empty_cache()

    def total_memory(self):
        return self.props.get("total_memory")

    def wrap_memory(self, owner, numel, dtype):
        self._storage((0,), dtype)  # binds GpuStorage
        return GpuStorage(self, owner, dtype, numel)  # `owner` serves as the buffer: its ptr is the memory

    def stream_handle(self, stream=None) -> int:
        """A stream of this device (the compute stream by default) as an integer, for libraries
        with their own cdefs (NCCL, cuDNN)."""
        return int(self.platform.ffi.cast("uintptr_t", self.stream if stream is None else stream))

    def communication_stream(self):
        """The device's stream for collectives (tensorlite.distributed), made on first use: NCCL /
        RCCL kernels there wait for the peer ranks without holding up the compute stream. Nothing
        orders it with the compute stream but events (sync_event), and the caching allocator
        knows only the compute stream: a buffer used here must stay alive until the compute
        stream has waited for this one."""
        stream = self._comm_stream
        if stream is None:
            self.activate()
            stream = self._comm_stream = self.platform.stream_create()
        return stream

    def sync_event(self) -> Event:
        """An event without timing, from the device's pool (torch's event cache); give it back
        with recycle_event once every wait on it is enqueued: a wait holds on to the record it
        was enqueued after, so the event may be recorded again then."""
        pool = self._sync_events
        return pool.pop() if pool else Event(self, enable_timing=False)

    def recycle_event(self, event: Event) -> None:
        self._sync_events.append(event)

    def mem_get_info(self) -> Tuple[int, int]:
        self.activate()
        return self.platform.mem_get_info()

    def synchronize(self) -> None:
        if self.capture is not None:
            self._refuse_in_capture("waiting for the device (synchronize)")
        self.activate()
        self.platform.stream_synchronize(self.stream)
        if self._comm_stream is not None:  # as torch.cuda.synchronize: collectives not waited for too
            self.platform.stream_synchronize(self._comm_stream)
        if self.pending_checks:
            self._check_replays()

    # ---- graphs (graph.py) ----------------------------------------------------------
    def _refuse_in_capture(self, what: str):
        raise CaptureError(f"{self}: {what} inside a graph capture: a graph cannot wait for the host. Read "
                           "results after the capture (.item(), .tolist(), .numpy(), printing, boolean masks, "
                           "nonzero, unique and other ops whose output size depends on the data all read back)")

    def _check_replays(self) -> None:
        graphs, self.pending_checks = list(self.pending_checks), {}
        for graph in graphs:
            graph.check_flag()

    def run_checked(self, op: str, launch, report, check: bool = True) -> None:
        """Run `launch(flag_ptr)`, a kernel of `op` that flags a bad input in a 4-byte device
        flag instead of touching memory out of range, and call `report()` (which raises) if
        it did. That waits for the device; `check=False` (the host knows the input is good)
        launches without waiting. While capturing, the flag is the graph's, read after each
        replay at the next host read or synchronize."""
        capture = self.capture
        if capture is not None:
            capture.checks.append(op)
            launch(capture.flag.ptr)
            return
        flag = self._error_flag
        if flag is None:
            flag = self._error_flag = self.alloc(4)
        if not check:
            launch(flag.ptr)  # never flags; a checked launch zeroes the flag before its own
            return
        self.memset(flag.ptr, 0, 4)
        launch(flag.ptr)
        host = np.zeros(1, np.int32)
        self.dtoh(host, flag.ptr)
        if host[0]:
            report()

    def event(self, enable_timing: bool = True) -> Event:
        return Event(self, enable_timing)

    # ---- kernels ------------------------------------------------------------------
    def function(self, source: str, name: str) -> Kernel:
        """Entry point `name` of kernels/<source>, compiled for self.arch on first use."""
        kernel = self._functions.get((source, name))
        if kernel is None:
            kernel = self._load_function(source, name)
        return kernel

    def warmup(self, sources=None) -> Dict[str, int]:
        """Compile (in parallel where the compiler allows) and load kernel families ahead of
        first use; returns {source: code size}. Without it each family compiles on first use."""
        from .compiler import precompile
        sizes = precompile(self.platform, self.arch, sources)
        with self._lock:
            for source in sizes:
                if source not in self._modules:
                    self.activate()
                    self._modules[source] = self.platform.module_load(compile_source(self.platform, source, self.arch))
        return sizes

    def _load_function(self, source: str, name: str) -> Kernel:
        with self._lock:
            module = self._modules.get(source)
            if module is None:
                try:
                    image = compile_source(self.platform, source, self.arch)
                except CompileError as e:
                    raise CompileError(f"while compiling kernel {name!r} of {source} for {self.arch}: {e}") from None
                self.activate()
                module = self._modules[source] = self.platform.module_load(image)
            self.activate()
            try:
                handle = self.platform.module_get_function(module, name)
            except BackendError as e:
                raise BackendError(f"kernel {name!r} not found in {source} ({e})") from None
            kernel = self._functions[(source, name)] = Kernel(handle, name, source,
                                                              self.platform.function_max_threads(handle))
            return kernel

    def launch(self, func: Kernel, grid, block, args, shared_mem: int = 0) -> None:
        """Enqueue `func` on the stream. args: (ctype, value) pairs, ctype one of int32, uint32,
        int64, uint64, float, double, ptr, or ('bytes', b'...') for a by-value struct.

        This is every op's hot path: the packing plan comes from the kernel (built on its
        first launch in this thread), values go straight into its reusable C buffer, and
        plain positive ints for grid and block skip the 3-tuple normalisation. Only the
        argument count is checked against the plan per launch: a kernel has one C signature
        (tests/test_kernels_gfx90a.py checks every storage launch against the compiled one)."""
        layout = func.layouts.get(get_ident())
        if layout is None or layout.nargs != len(args):
            layout = self._layout_for(func, ArgLayout.signature_of(args))
        self.launch_values(func, grid, block, layout.signature, map(_second, args), shared_mem)

    def launch_values(self, func: Kernel, grid, block, signature, values, shared_mem: int = 0) -> None:
        """launch() with the argument types apart from the values: `signature` as
        ArgLayout.signature_of gives it (a constant of the caller's: the plan is found by
        identity), `values` in its order. The elementwise ops launch so (no pairs built per call)."""
        layout = func.layouts.get(get_ident())
        if layout is None or layout.signature is not signature:
            layout = self._layout_for(func, signature)
        if self._current.ordinal != self.ordinal:
            self._activate(self.ordinal)
        if shared_mem > func.shared_allowed:
            self._allow_shared(func, shared_mem)
        if layout.nargs:
            try:
                layout.pack_into(layout.buffer, 0, *values)
            except struct.error as e:
                raise BackendError(f"launch {func.name}: bad argument values for {layout.signature}: {e}") from None
        if self.capture is not None:
            if func.dependent and self._launch_dependent is not None:
                return self._launch_as_dependent(func, grid, block, shared_mem, layout)
            queue = None  # a capture records the launches of its own thread, at once
        else:
            queue = self._queue
        if type(grid) is int and type(block) is int and grid > 0 and block > 0:
            gx, gy, gz, bx, by, bz = grid, 1, 1, block, 1, 1
        else:  # the row kernels' blocks are 2-d, their grids plain ints
            gx, gy, gz = (grid, 1, 1) if type(grid) is int and grid > 0 else _dim3(grid, "grid")
            bx, by, bz = _dim3(block, "block")
        if queue is not None:
            status = self._put(queue.queue, func.handle, gx, gy, gz, bx, by, bz, shared_mem, self.stream,
                               layout.params, layout.nargs, layout.cbuf, layout.nbytes, self._launch_last)
            if status == 0:
                return
            if status > 0:  # queued; an earlier launch failed
                return queue.raise_failed()
            queue.drain(help=True)  # not queued: the launches before go first
        err = self._launch_fn(func.handle, gx, gy, gz, bx, by, bz, shared_mem, self.stream, layout.params,
                              self._launch_last)
        if err:
            self._launch_failed("launch", func, (gx, gy, gz), (bx, by, bz), shared_mem, err)

    def _launch_as_dependent(self, func: Kernel, grid, block, shared_mem: int, layout: "ArgLayout") -> None:
        """launch()'s call while capturing a kernel of launch.py's DEPENDENT_LAUNCH: in the graph,
        its launch and scheduling overlap the kernel before it."""
        grid, block = _dim3(grid, "grid"), _dim3(block, "block")
        err = self._launch_dependent(func.handle, *grid, *block, shared_mem, self.stream, layout.params)
        if err:
            self._launch_failed("launch_dependent", func, grid, block, shared_mem, err)

    def _launch_failed(self, call: str, func: Kernel, grid, block, shared_mem: int, err, when: str = "") -> None:
        """Raise the failed launch's error; grid and block are 3-tuples."""
        raise BackendError(f"{self.platform.CALLS[call]}({func.source}:{func.name}, grid={grid}, "
                           f"block={block}, shared_mem={shared_mem}) failed{when}: "
                           f"{self.platform.error_name(err)} ({int(err)})")

    def _queued_launch_failed(self, status: int, f: int, dims) -> None:
        """LaunchQueue's report of a failed launch: f its function's address, dims (grid, block, shared)."""
        ffi = self.platform.ffi
        func = next((k for k in list(self._functions.values()) if int(ffi.cast("uintptr_t", k.handle)) == f),
                    Kernel(f, f"function 0x{f:x}", "?"))
        self._launch_failed("launch", func, tuple(dims[:3]), tuple(dims[3:6]), dims[6], status,
                            " (a queued launch, reported at the next launch or device call)")

    def _start_launch_queue(self) -> None:
        """Launches through a LaunchQueue (launch_shim.py) where the compiled shim calls a C
        launch function; every other call of the platform that works on a stream drains it."""
        self._queue = None
        if self._launch_last == self.platform.ffi.NULL or not launch_shim.queue_enabled():
            return
        self._queue = launch_shim.LaunchQueue(self.ordinal, self.activate, self._queued_launch_failed)
        self._put = self._queue.put
        self.platform.launch_queues.append(self._queue)

    def _allow_shared(self, func: Kernel, nbytes: int) -> None:
        """Opt `func` in to `nbytes` of dynamic shared memory (once per kernel and size)."""
        with self._lock:
            if nbytes > func.shared_allowed:
                self.platform.function_allow_shared(func.handle, nbytes)
                func.shared_allowed = nbytes

    def _layout_for(self, func: Kernel, signature) -> ArgLayout:
        """This thread's plan for `func` (made on its first launch here), after checking that
        `signature` is the one every launch of `func` has had."""
        known = next(iter(func.layouts.values()), None)
        if known is not None and known.signature != signature:
            raise BackendError(f"launch {func.source}:{func.name}: argument types {signature} differ from "
                               f"an earlier launch {known.signature}; a kernel has one C signature")
        layout = func.layouts.get(get_ident())
        if layout is None or layout.signature != signature:
            layout = func.layouts[get_ident()] = ArgLayout(self.platform.ffi, signature)
        return layout

    @property
    def blas(self):
        if self._blas is None:
            from .blas import Blas
            self._blas = Blas(self)
        return self._blas

    # ---- BackendDevice ------------------------------------------------------------
    def _storage(self, shape, dtype):
        """(GpuStorage of `shape` with uninitialised contents, its Buffer)."""
        global GpuStorage
        if GpuStorage is None:  # storage.py imports this module: bind it on first use
            from .storage import GpuStorage
        if type(dtype) is not DType:
            dtype = dtypes.get(dtype)
        numel = prod(shape)
        buffer = self.alloc(numel * dtype.itemsize)  # the allocator's, or a graph pool's while capturing
        return GpuStorage(self, buffer, dtype, numel), buffer

    def alloc_uninit(self, shape, dtype):
        return self._storage(shape, dtype)[0]

    def zeros(self, shape, dtype):
        st, buffer = self._storage(shape, dtype)
        self.memset(buffer.ptr, 0, buffer.nbytes)
        return st

    def from_cpu(self, array):
        import numpy as np
        array = np.ascontiguousarray(array)
        st, buffer = self._storage(array.shape, array.dtype)
        self.htod(buffer.ptr, array)
        if array.dtype.kind in "iu" and 0 < array.size <= RANGE_SCAN_LIMIT:
            # bound ids on the host (GpuStorage.value_range): index ops then need not wait
            st.value_range = (int(array.min()), int(array.max()))
        return st

    def graph_pool(self):
        from .graph import GraphPool
        return GraphPool(self)

    def capture_begin(self, pool=None):
        from .graph import capture_begin
        return capture_begin(self, pool)

    def capture_end(self, previous=None):
        from .graph import capture_end
        return capture_end(self, previous)

    def capture_abort(self) -> None:
        from .graph import capture_abort
        capture_abort(self)

    def set_seed(self, seed: int) -> None:
        self._seed, self._rng_offset = int(seed) & 0xFFFFFFFFFFFFFFFF, 0

    def get_rng_state(self) -> bytes:  # Philox's key and stream offset, as torch.cuda's 16 bytes
        return np.array([self._seed, self._rng_offset], np.uint64).tobytes()

    def set_rng_state(self, state: bytes) -> None:
        if len(state) != 16:
            raise ArgumentError(f"set_rng_state: a {self} generator state has 16 bytes, got {len(state)}")
        self._seed, self._rng_offset = (int(w) for w in np.frombuffer(state, np.uint64))

    def _random(self, shape, dtype, kind, a, b):
        from .ops.random import random_fill
        if self.capture is not None:
            raise CaptureError(f"{self}: random numbers inside a graph capture would repeat on every replay "
                               "(the generator's offset is a kernel argument): draw them before the capture "
                               "and copy them into a static input")
        st = self.alloc_uninit(shape, dtype)
        if prod(shape):
            random_fill(st, kind, float(a), float(b), self._seed, self._rng_offset)
            # one Philox stream per call: the offset is the counter's upper half (kernels/random.hip)
            self._rng_offset += 1
        return st

    def rand_uniform(self, shape, dtype, lo: float, hi: float):
        return self._random(shape, dtype, "uniform", lo, hi)

    def rand_normal(self, shape, dtype, mean: float, std: float):
        return self._random(shape, dtype, "normal", mean, std)


_DEVICES: Dict[Tuple[str, int], GpuDevice] = {}
_DEVICES_LOCK = threading.Lock()


def open_device(platform_name: str, ordinal: int = 0) -> GpuDevice:
    """The GpuDevice for platform 'rocm' or 'cuda' and `ordinal`, created once.
    Raises BackendUnavailable naming the missing library or device."""
    key = (platform_name, int(ordinal))
    dev = _DEVICES.get(key)
    if dev is None:
        with _DEVICES_LOCK:
            dev = _DEVICES.get(key)
            if dev is None:
                dev = _DEVICES[key] = GpuDevice(get_platform(platform_name), key[1])
    return dev
