"""The GPU backend: one backend, several platforms (`rocm` through HIP, `cuda` through the
CUDA driver API; `amdemu`, AMD code objects run by an ISA interpreter; `null`, which runs
nothing), sharing storage, dispatch and kernel sources.

Only `hip.py` and `cuda.py` name vendor functions, libraries and architectures. Each
provides a *platform* object with the same small interface (runtime, rtc compiler, BLAS,
what an architecture offers the kernels), which `device.py`, `compiler.py`, `blas.py` and
the storage's ops use without knowing the vendor:

    name, runtime_name                     'rocm'/'cuda', 'libamdhip64'/'libcuda'
    ffi                                    the platform's cffi FFI (for kernel arguments)
    init() -> int                          device count; raises BackendUnavailable with the reason
    device_properties(ordinal) -> dict     name, arch, total_memory, warp_size, multiprocessor_count, ...
    activate(ordinal)                      make the device current on this thread
    malloc(nbytes) -> int / free(ptr)      malloc raises OutOfMemoryError on the vendor's OOM code
    mem_get_info() -> (free, total)
    htod_async / dtoh_async / dtod_async / memset_d8_async (ints for pointers and sizes, a stream)
    stream_create() / stream_synchronize(s)
    event_create() / event_record(e, s) / event_synchronize(e) / event_elapsed_ms(a, b) / event_destroy(e)
    sync_event_create() / stream_wait_event(s, e) / event_query(e) -> bool   ordering one stream after
                                           another without the host (events without timing)
    module_load(image) / module_get_function(module, name)
    launch(func, grid3, block3, shared_mem, stream, params)   params: a `void*[]` cdata
    rtc_version() -> str; rtc_options(arch) -> list; rtc_compile(source, name, headers, options[, log]) -> bytes
    blas_create(stream) -> handle; blas_gemm(handle, dtype_short, ...)
    capture_begin(s) / capture_end(s) -> graph / graph_instantiate(g) -> exec / graph_launch(exec, s) /
    graph_exec_update(exec, g) -> bool / graph_exec_destroy(exec) / graph_destroy(g)   (graph.py)
    matrix_cores(arch) -> "wgmma" | "mma" | "wmma" | None; MMA_STAGES; mma_lds_bytes(arch)
                                           what the attention kernels may use

Nothing here loads a library at import time: a missing library or device surfaces as
`BackendUnavailable` when a device is first opened.
"""
from __future__ import annotations

import glob
import os
import site
import sys
import threading
from typing import Iterable, List, Sequence, Tuple

import cffi

from tensorlite.errors import BackendError, BackendUnavailable, CompileError, OutOfMemoryError
from .launch_shim import through_shim

PLATFORMS = ("rocm", "cuda", "amdemu")
CAPTURE_MODE_RELAXED = 2  # cuStreamCaptureMode / hipStreamCaptureMode: CU_STREAM_CAPTURE_MODE_RELAXED
_PLATFORMS = {}
_LOCK = threading.Lock()


def get_platform(name: str):
    """The platform object for 'rocm' or 'cuda' (created once; loads no library yet)."""
    with _LOCK:
        plat = _PLATFORMS.get(name)
        if plat is None:
            if name == "rocm":
                from .hip import HipPlatform as cls
            elif name == "cuda":
                from .cuda import CudaPlatform as cls
            elif name == "amdemu":
                from .amdemu.platform import AmdEmuPlatform as cls
            else:
                raise BackendUnavailable(f"unknown GPU platform {name!r}; expected one of {PLATFORMS}")
            plat = _PLATFORMS[name] = cls()
        return plat


def open_device(platform_name: str, ordinal: int = 0):
    """The GpuDevice `platform_name:ordinal` (cached per ordinal)."""
    from . import device  # device.py imports this module
    return device.open_device(platform_name, ordinal)


# ---- library discovery ----------------------------------------------------------------

def site_dirs() -> List[str]:
    dirs = []
    try:
        dirs += site.getsitepackages()
    except Exception:  # virtualenvs without getsitepackages
        pass
    try:
        dirs.append(site.getusersitepackages())
    except Exception:
        pass
    dirs += [p for p in sys.path if p.endswith("site-packages") or p.endswith("dist-packages")]
    seen, out = set(), []
    for d in dirs:
        if d and d not in seen and os.path.isdir(d):
            seen.add(d)
            out.append(d)
    return out


def nvidia_wheel_lib_dirs() -> List[str]:
    """`site-packages/nvidia/*/lib` of pip-installed NVIDIA wheels (nvidia/cu13/lib, nvidia/cublas/lib, ...)."""
    out = []
    for sp in site_dirs():
        out += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib")))
    return out


def env_lib_dirs(env_vars: Sequence[str], defaults: Sequence[str]) -> List[str]:
    """<root>/lib and <root>/lib64 for each root named by env_vars (when set), then defaults."""
    roots = [os.environ[v] for v in env_vars if os.environ.get(v)] + list(defaults)
    out = []
    for root in roots:
        for sub in ("lib", "lib64", os.path.join("targets", "x86_64-linux", "lib")):
            d = os.path.join(root, sub)
            if os.path.isdir(d) and d not in out:
                out.append(d)
    return out


def dlopen_first(ffi, what: str, sonames: Sequence[str], dirs: Iterable[str]) -> Tuple[object, str]:
    """dlopen the first of `sonames` found in `dirs` (in order), then through the loader path.

    Returns (lib, path). Raises BackendUnavailable naming `what` and everything tried.
    """
    dirs = list(dirs)
    errors = []
    for d in dirs:
        for so in sonames:
            path = os.path.join(d, so)
            if os.path.exists(path):
                try:
                    return ffi.dlopen(path), path
                except OSError as e:
                    errors.append(f"{path}: {e}")
    for so in sonames:
        try:
            return ffi.dlopen(so), so
        except OSError as e:
            if "cannot open shared object file" not in str(e):  # found but broken: worth reporting
                errors.append(f"{so}: {e}".split("\n")[0])
    searched = ", ".join(dirs) if dirs else "(no extra directories)"
    raise BackendUnavailable(
        f"{what} not found: tried {', '.join(sonames)} in {searched} and the loader path"
        + (f" ({'; '.join(errors[:3])})" if errors else ""))



# ---- the vendor-neutral half of a platform -------------------------------------------

class ThreadState(threading.local):
    """A platform's state per thread: `ordinal`, the device activate() made current in the thread
    (None: none yet). GpuDevice's launches read it to skip activate() when theirs already is."""
    ordinal = None


class PlatformBase:
    """What hip.py and cuda.py share: the runtime wrappers, written once against a table
    (CALLS) of the vendor's function names. A subclass supplies the cdefs, library
    loading (`rt`, `rtc`, `blaslib`), error names, init, device properties, activation
    and the BLAS call."""
    name = runtime_name = ""
    CALLS: dict = {}         # generic op -> vendor function in `rt`
    HANDLES: dict = {}       # 'devptr', 'stream', 'event', 'module', 'function' -> C type
    STREAM_FLAGS = ()        # trailing arguments of the stream-create call
    EVENT_FLAGS = ()         # ... and of the event-create call
    SYNC_EVENT_FLAGS = ()    # ... and of sync_event_create's call (timing off)
    NOT_READY_CODE = 600     # CUDA_ERROR_NOT_READY / hipErrorNotReady: event_query's "not yet"
    BLAS_WORKSPACE = 0       # bytes of BLAS workspace to hand to the library (0: its own default)
    HAS_BLAS = True          # False: float GEMMs run the portable gemm_<t> kernel (ops/matmul.gemm)
    OOM_CODE = 2             # the runtime's out-of-memory error code
    RTC_PREFIX = ""          # the runtime compiler's function prefix
    RTC_CODE = ""            # the suffix of its code getter (<prefix>Get<code>)
    RTC_THREAD_SAFE = True   # may programs compile concurrently in several threads?
    CODE_SUFFIX = ".bin"     # file suffix of a compiled code object in the disk cache (compiler.py)
    MMA_STAGES = 1           # TL_MMA_STAGES of the vendor's tile header: K/V buffers of the matrix-core attention
    EXACT_BUFFERS = False    # True: the caching allocator hands out blocks of the exact size asked (no size classes)

    def __init__(self, *cdefs):
        self.ffi = cffi.FFI()
        for c in cdefs:
            self.ffi.cdef(c)
        self._rt = self._rtc = self._blas = None
        self._launch_fn = None
        self.launch_queues = []  # the devices' LaunchQueues (launch_shim.py): drained before any other call
        self._rtc_lock = threading.Lock()
        self.thread = ThreadState()  # the device made current in each thread
        self._device_count = None

    def matrix_cores(self, arch: str):
        """The matrix instructions the attention kernels may use in code built for `arch`
        (TL_HAS_WGMMA / TL_HAS_MMA, compat.h Part 3): "wgmma" (Hopper warpgroups), "mma" (NVIDIA
        mma.sync or AMD MFMA), "wmma" (AMD RDNA's WMMA: 16-bit operands only), or None. Vendor
        knowledge: each platform answers for its archs."""
        return None

    def mma_lds_bytes(self, arch: str) -> int:
        """Shared memory (LDS) a block may use in code built for `arch`, as the vendor's tile
        header says (TL_MMA_LDS_KIB; compat.h's 64 without matrix cores): the matrix-core
        attention's tile sizes follow from it (ops/attention.py mirrors them)."""
        return 64 * 1024

    # ---- checked calls --------------------------------------------------------------
    def check(self, call: str, code):
        if code:
            raise BackendError(f"{call} failed: {self.error_name(code)} ({int(code)})")

    def drain_launches(self) -> None:
        """Return once every queued kernel launch has reached the driver (launch_shim.py): a call
        that puts work on a stream, or waits for one, must come after the launches put before it."""
        current = self.thread.ordinal  # the device activate() made current in this thread
        for queue in self.launch_queues:
            queue.drain(help=queue.ordinal == current)

    # calls that neither put work on a stream nor wait for one: they need not wait for queued
    # launches (and finalizers, which swallow errors, make no call that reports a failed launch)
    CALLS_OFF_STREAM = frozenset({"stream_create", "event_create", "sync_event_create", "event_destroy",
                                  "module_load", "module_get_function", "func_get_attribute",
                                  "func_set_attribute", "mem_get_info", "graph_instantiate",
                                  "graph_exec_destroy", "graph_destroy"})

    def call(self, op: str, *args, what: str = None):
        if self.launch_queues and op not in self.CALLS_OFF_STREAM:
            self.drain_launches()
        fn = self.CALLS[op]
        self.check(what or fn, getattr(self.rt, fn)(*args))

    def out(self, op: str, handle: str, *args, what: str = None):
        """Call `op` with a fresh out-parameter (HANDLES[handle] or a C type) first; return its value."""
        p = self.ffi.new(self.HANDLES.get(handle, handle) + "*")
        self.call(op, p, *args, what=what)
        return p[0]

    def devptr(self, ptr: int):
        """A device address as the vendor's API takes it (an integer unless overridden)."""
        return ptr

    # ---- memory ---------------------------------------------------------------------
    def malloc(self, nbytes: int) -> int:
        p = self.ffi.new(self.HANDLES["devptr"] + "*")
        fn = self.CALLS["malloc"]
        err = getattr(self.rt, fn)(p, nbytes)
        if err == self.OOM_CODE:
            raise OutOfMemoryError(f"{fn}({nbytes}) failed: {self.error_name(err)}")
        self.check(f"{fn}({nbytes})", err)
        return int(self.ffi.cast("uintptr_t", p[0]))

    def free(self, ptr: int):
        self.call("free", self.devptr(ptr))

    def mem_get_info(self):
        free, total = self.ffi.new("size_t*"), self.ffi.new("size_t*")
        self.call("mem_get_info", free, total)
        return int(free[0]), int(total[0])

    def htod_async(self, dst: int, src_host: int, nbytes: int, stream):
        self.call("htod", self.devptr(dst), self.ffi.cast("void*", src_host), nbytes, stream)

    def dtoh_async(self, dst_host: int, src: int, nbytes: int, stream):
        self.call("dtoh", self.ffi.cast("void*", dst_host), self.devptr(src), nbytes, stream)

    def dtod_async(self, dst: int, src: int, nbytes: int, stream):
        self.call("dtod", self.devptr(dst), self.devptr(src), nbytes, stream)

    def memset_d8_async(self, dst: int, byte: int, nbytes: int, stream):
        self.call("memset_d8", self.devptr(dst), byte, nbytes, stream)

    # ---- streams, events, modules, launches -----------------------------------------
    def stream_create(self):
        return self.out("stream_create", "stream", *self.STREAM_FLAGS)

    def stream_synchronize(self, stream):
        self.call("stream_synchronize", stream)

    def event_create(self):
        return self.out("event_create", "event", *self.EVENT_FLAGS)

    def event_record(self, event, stream):
        self.call("event_record", event, stream)

    def event_synchronize(self, event):
        self.call("event_synchronize", event)

    def event_elapsed_ms(self, start, stop) -> float:
        return float(self.out("event_elapsed", "float", start, stop))

    def event_destroy(self, event):
        self.call("event_destroy", event)

    def sync_event_create(self):
        """An event for ordering streams only: timing off, which the vendors document as the
        cheapest to record and wait on (elapsed_ms refuses it)."""
        return self.out("sync_event_create", "event", *self.SYNC_EVENT_FLAGS)

    def stream_wait_event(self, stream, event):
        """Work enqueued on `stream` after this call waits for the work before the event's latest
        record (at the time of this call; a later record does not move it). The host does not wait."""
        self.call("stream_wait_event", stream, event, 0)

    def event_query(self, event) -> bool:
        """Whether the work before the event's latest record has finished (the host does not wait)."""
        fn = self.CALLS["event_query"]
        code = getattr(self.rt, fn)(event)
        if code == self.NOT_READY_CODE:
            return False
        self.check(fn, code)
        return True

    def module_load(self, image: bytes):
        return self.out("module_load", "module", self.ffi.from_buffer(image))

    def module_get_function(self, module, name: str):
        return self.out("module_get_function", "function", module, name.encode(),
                        what=f"{self.CALLS['module_get_function']}({name!r})")

    def function_max_threads(self, function) -> int:
        """The most threads a block of `function` may have (its registers can lower the
        device's limit); attribute 0 is MAX_THREADS_PER_BLOCK for both vendors."""
        return int(self.out("func_get_attribute", "int", 0, function))

    def function_allow_shared(self, function, nbytes: int) -> None:
        """Let `function` launch with `nbytes` of dynamic shared memory. CUDA caps it at 48 KiB
        unless raised (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8, up to the device's
        opt-in limit); AMD needs nothing (up to its 64 KiB of LDS), so platforms without the
        call skip it."""
        if "func_set_attribute" in self.CALLS:
            self.call("func_set_attribute", function, 8, int(nbytes))

    def launch_function(self):
        """The raw, unchecked launch entry point (the hot path; GpuDevice.launch checks the
        status): f(func, gx, gy, gz, bx, by, bz, shared_mem, stream, params, extra)."""
        if self._launch_fn is None:
            self._launch_fn = getattr(self.rt, self.CALLS["launch"])
        return self._launch_fn

    def dependent_launch_function(self, arch: str):
        """f(func, gx, gy, gz, bx, by, bz, shared_mem, stream, params) -> status launching a
        kernel as a programmatic dependent of the one before it (launch.py DEPENDENT_LAUNCH),
        or None where the platform or `arch` has no such launch (HIP has none)."""
        return None

    def launch_call(self):
        """(fn, last) for the hot path's fn(func, gx, gy, gz, bx, by, bz, shared_mem, stream,
        params, last): the compiled shim and the entry point's address where launch_function()
        is a C function and the shim is installed (launch_shim.py), else launch_function()
        itself and its `extra`, NULL."""
        fn = self.launch_function()
        return through_shim(self.ffi, fn) or (fn, self.ffi.NULL)

    # ---- graphs: stream capture, instantiate, launch, update (backends/rocm/graph.py) --
    def capture_begin(self, stream) -> None:
        # relaxed: GpuDevice itself refuses what a capture cannot record (graph.py), and the
        # side-stream upload of a captured constant must stay legal meanwhile
        self.call("capture_begin", stream, CAPTURE_MODE_RELAXED)

    def capture_end(self, stream):
        """End the capture of `stream`: its graph (raises if the capture was invalidated)."""
        graph = self.ffi.new(self.HANDLES["graph"] + "*")
        self.call("capture_end", stream, graph)
        return graph[0]

    def graph_instantiate(self, graph):
        return self.out("graph_instantiate", "graph_exec", graph, 0)

    def graph_launch(self, graph_exec, stream) -> None:
        self.call("graph_launch", graph_exec, stream)

    # graph_exec_update(exec, graph) -> bool (the vendor's own: its out-parameters differ): give
    # `exec` the parameters of `graph` (same topology); False where the graphs differ more

    def graph_exec_destroy(self, graph_exec) -> None:
        self.call("graph_exec_destroy", graph_exec)

    def graph_destroy(self, graph) -> None:
        self.call("graph_destroy", graph)

    # ---- runtime compiler -----------------------------------------------------------
    def _rtc_check(self, call, code):
        if code:
            text = getattr(self.rtc, self.RTC_PREFIX + "GetErrorString")(code)
            raise BackendError(f"{call} failed: {self.ffi.string(text).decode()} ({int(code)})")

    def rtc_version(self) -> str:
        major, minor = self.ffi.new("int*"), self.ffi.new("int*")
        call = self.RTC_PREFIX + "Version"
        self._rtc_check(call, getattr(self.rtc, call)(major, minor))
        return f"{self.RTC_PREFIX} {major[0]}.{minor[0]}"  # no path: caches may travel between machines

    def rtc_compile(self, source: str, name: str, headers: dict, options, log: list = None) -> bytes:
        """hiprtc/NVRTC: create, compile, read the log, fetch the code object. `log`: a list the
        compiler's log is appended to on success too (e.g. ptxas -v reports)."""
        if self.RTC_THREAD_SAFE:
            return self._rtc_compile(source, name, headers, options, log)
        with self._rtc_lock:
            return self._rtc_compile(source, name, headers, options, log)

    def _rtc_compile(self, source: str, name: str, headers: dict, options, log_out=None) -> bytes:
        ffi, prefix = self.ffi, self.RTC_PREFIX
        fn = lambda suffix: getattr(self.rtc, prefix + suffix)  # noqa: E731
        keep = []  # the C strings must outlive the calls

        def cstrs(items):
            arr = [ffi.new("char[]", s.encode()) for s in items]
            keep.extend(arr)
            return ffi.new("char*[]", arr) if arr else ffi.NULL

        prog = ffi.new(f"{prefix}Program*")
        self._rtc_check(f"{prefix}CreateProgram({name!r})",
                        fn("CreateProgram")(prog, source.encode(), name.encode(), len(headers),
                                            cstrs(headers.values()), cstrs(headers.keys())))
        try:
            err = fn("CompileProgram")(prog[0], len(options), cstrs(options))
            size = ffi.new("size_t*")
            self._rtc_check(f"{prefix}GetProgramLogSize", fn("GetProgramLogSize")(prog[0], size))
            log_buf = ffi.new("char[]", max(int(size[0]), 1))
            self._rtc_check(f"{prefix}GetProgramLog", fn("GetProgramLog")(prog[0], log_buf))
            log = ffi.string(log_buf).decode(errors="replace").strip()
            if log_out is not None:
                log_out.append(log)
            if err:
                raise CompileError(f"{prefix}CompileProgram failed for {name!r} "
                                   f"(options {' '.join(options)}):\n{log or '(empty log)'}")
            getter = f"Get{self.RTC_CODE}"
            self._rtc_check(f"{prefix}{getter}Size", fn(getter + "Size")(prog[0], size))
            code = ffi.new("char[]", int(size[0]))
            self._rtc_check(f"{prefix}{getter}", fn(getter)(prog[0], code))
            return ffi.buffer(code, int(size[0]))[:]
        finally:
            fn("DestroyProgram")(prog)
