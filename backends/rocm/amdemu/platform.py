"""The `amdemu` platform: the GPU backend's runtime replaced by host memory and the
instruction executor, for one emulated AMD architecture per process.

`TENSORLITE_AMDEMU` names the architecture (see ARCHS) and switches the platform on: it is
opt-in because emulation is slow (a kernel of a few thousand threads takes tens of
milliseconds). Everything above the runtime is the `rocm` platform's own: GpuDevice,
GpuStorage, launch geometry and kernel sources. The code objects come from one of two
compilers (ARCHS gives each architecture's default):
- hiprtc, the rocm platform's own compile path: Debian's HIP 5.2 for gfx90a, a ROCm 5.4.2 for
  gfx940 and gfx1100 (Debian's hiprtc 5.2 aborts on those targets): `rocm542_root()` says where;
- clang-19 (`..clang`), for the targets no hiprtc here compiles (gfx942, gfx1151, gfx1201; gfx950
  with the code generation of triton's LLVM, `..triton_llvm`), and
  for the others on request: `TENSORLITE_AMDEMU_COMPILER=clang` or the spelling `gfx90a-clang`.
  A second compiler's code for the same target exposes undefined behaviour that one compiler hides.

No BLAS or DNN library exists here (rocBLAS and MIOpen cannot be had): matmuls run the
portable `gemm_<t>` kernel (HAS_BLAS), convolutions and pooling the portable kernels.
"""
from __future__ import annotations

import importlib.util
import itertools
import os
import threading

import numpy as np

from tensorlite.errors import BackendError, BackendUnavailable

from .. import PlatformBase
from ..graph import RecordedGraphs
from ..hip import AmdArchitectures
from .codeobject import arch_traits
from .memory import HostMemory

# emulated architecture -> the compiler its code objects come from unless told otherwise
ARCHS = {"gfx90a": "hiprtc", "gfx940": "hiprtc", "gfx1100": "hiprtc",
         "gfx942": "clang", "gfx950": "clang", "gfx1151": "clang", "gfx1201": "clang"}
COMPILERS = ("hiprtc", "clang")
HIPRTC_ARCHS = ("gfx90a", "gfx940", "gfx1100")  # what a hiprtc here compiles (5.4.2 crashes on gfx942)
ENV = "TENSORLITE_AMDEMU"
COMPILER_ENV = "TENSORLITE_AMDEMU_COMPILER"  # clang | hiprtc: every architecture's compiler in this process
COVERAGE_ENV = "TENSORLITE_AMDEMU_COVERAGE"  # a folder: each process records the kernels it ran there
ROCM_ENV = "TENSORLITE_AMDEMU_ROCM"       # where the ROCm 5.4.2 that compiles gfx940/gfx1100 lives
_TRITON_ROCM = ("triton", "third_party", "rocm")   # inside PyPI's pytorch-triton-rocm==2.1.0
_CLANG = {}                               # rocm root -> its ClangAmdCompiler (one per process)
_CLANG_LOCK = threading.Lock()


def parse_target(spelling: str):
    """(architecture, compiler, label) of a TENSORLITE_AMDEMU value: `gfx90a` (ARCHS' compiler,
    or $TENSORLITE_AMDEMU_COMPILER's) or `gfx90a-clang` / `gfx942-hiprtc`. The label names the
    pair where the compiler is not the architecture's default (coverage records, device name)."""
    arch, _, compiler = spelling.strip().partition("-")
    if arch not in ARCHS:
        raise BackendUnavailable(f"{ENV}={spelling!r}: emulated architectures are {', '.join(ARCHS)} "
                                 f"(a suffix -clang or -hiprtc picks the compiler)")
    compiler = compiler or os.environ.get(COMPILER_ENV, "").strip() or ARCHS[arch]
    if compiler not in COMPILERS:
        raise BackendUnavailable(f"{spelling!r} / {COMPILER_ENV}: the compilers are {', '.join(COMPILERS)}, "
                                 f"not {compiler!r}")
    if compiler == "hiprtc" and arch not in HIPRTC_ARCHS:
        raise BackendUnavailable(f"no hiprtc here compiles {arch} (hiprtc 5.2 aborts, 5.4.2 crashes or does not "
                                 f"know it): it is compiled by clang")
    return arch, compiler, arch if compiler == ARCHS[arch] else f"{arch}-{compiler}"


def rocm542_root():
    """The ROCm 5.4.2 folder (lib/ holds its hiprtc and comgr) that compiles gfx940 and gfx1100, or None.

    $TENSORLITE_AMDEMU_ROCM names it: a ROCm root, or a `pip install --target` folder of
    pytorch-triton-rocm==2.1.0. That wheel is a toolchain here, never imported: installed into
    an environment it shadows the `triton` package that PyTorch imports, and breaks PyTorch.
    Without the variable, a pytorch-triton-rocm installed in the environment is found (not imported).
    Its device libraries (ocml, ockl) are also what clang-19 links in.
    """
    candidates = []
    if os.environ.get(ROCM_ENV):
        base = os.path.expanduser(os.environ[ROCM_ENV])
        candidates += [base, os.path.join(base, *_TRITON_ROCM)]
    else:
        spec = importlib.util.find_spec("triton")
        if spec is not None and spec.submodule_search_locations:
            candidates.append(os.path.join(list(spec.submodule_search_locations)[0], *_TRITON_ROCM[1:]))
    for root in candidates:
        if os.path.isfile(os.path.join(root, "lib", "libamdhip64.so")):
            return root
    return None


def clang_compiler():
    """The clang-19 compiler (..clang.ClangAmdCompiler) with ROCm 5.4.2's device libraries;
    one per process, so its per-target files are made once."""
    from ..clang import ClangAmdCompiler
    root = rocm542_root()
    with _CLANG_LOCK:
        if root not in _CLANG:
            _CLANG[root] = ClangAmdCompiler(root)
        return _CLANG[root]


class _Kernel:
    __slots__ = ("program", "name")

    def __init__(self, program, name):
        self.program, self.name = program, name


class AmdEmuPlatform(RecordedGraphs, AmdArchitectures, PlatformBase):
    name = runtime_name = "amdemu"
    CALLS = {"launch": "emulated launch"}
    HAS_BLAS = False         # rocBLAS cannot be had: matmuls run the portable gemm_<t> kernel
    EXACT_BUFFERS = True     # no size-class slack: a kernel reading past a tensor's end faults (memory.py)

    def __init__(self, arch: str = None):
        """`arch`: a TENSORLITE_AMDEMU spelling (parse_target); default: that variable."""
        super().__init__()
        self.arch = self.compiler_name = self.target = None
        if arch:
            self.arch, self.compiler_name, self.target = parse_target(arch)
        elif os.environ.get(ENV, "").strip():
            try:
                self.arch, self.compiler_name, self.target = parse_target(os.environ[ENV])
            except BackendUnavailable:
                pass  # init() says why, as the device is opened
        self.memory = HostMemory()
        self._compiler = None
        self.launched = set()   # entry points run in this process (for the coverage check)
        self._streams = itertools.count(1)  # streams are only names here: work completes at once
        self._coverage_folder = os.environ.get(COVERAGE_ENV) or None

    def _record_launch(self, name: str):
        """Note an entry point's first run; with TENSORLITE_AMDEMU_COVERAGE set, append it to
        this platform object's file at once (a file per object: a process may hold several of
        one architecture). At once, not at exit: pytest-xdist kills a worker that takes over 10 s
        to exit (a loaded machine), and an exit hook would then lose the whole record."""
        if name in self.launched:
            return
        self.launched.add(name)
        if self._coverage_folder:
            os.makedirs(self._coverage_folder, exist_ok=True)
            path = os.path.join(self._coverage_folder, f"{self.target}.{os.getpid()}.{id(self):x}.txt")
            with open(path, "a") as f:
                f.write(name + "\n")

    # ---- devices --------------------------------------------------------------------
    def init(self) -> int:
        if not self.arch and os.environ.get(ENV, "").strip():
            self.arch, self.compiler_name, self.target = parse_target(os.environ[ENV])
        if not self.arch:
            raise BackendUnavailable(f"the emulated AMD platform is opt-in: set {ENV} to one of {', '.join(ARCHS)}")
        try:
            import tinygrad.runtime.autogen.amd.cdna.str_pcode  # noqa: F401
        except ImportError:
            raise BackendUnavailable("the emulated AMD platform needs tinygrad==0.14.0 (AMD's instruction "
                                     "tables): pip install tinygrad==0.14.0") from None
        self.compiler.rtc_version()  # a missing compiler says so now, not at the first kernel
        return 1

    @property
    def compiler(self):
        """What compiles for self.arch: clang_compiler(), or the hiprtc platform (HipPlatform)."""
        if self._compiler is None and self.compiler_name == "clang":
            self._compiler = clang_compiler()
        if self._compiler is None:
            from ..hip import HipPlatform
            root = None
            if self.arch != "gfx90a":
                root = rocm542_root()
                if root is None:
                    raise BackendUnavailable(f"compiling for {self.arch} needs a hiprtc 5.4.2 (Debian's 5.2 aborts "
                                             f"on it): set {ROCM_ENV} to a ROCm 5.4.2 root or to a folder made by "
                                             "`pip install --no-deps --target DIR pytorch-triton-rocm==2.1.0`")
            self._compiler = HipPlatform(root)
        return self._compiler

    def device_properties(self, ordinal):
        return {"name": f"emulated AMD {self.arch}, {self.compiler_name}'s code (an interpreter of AMD's ISA, "
                        "not hardware)", "arch": self.arch,
                "gcn_arch_name": self.arch, "warp_size": self.wavefront_size(self.arch),
                # few multiprocessors: launch geometry sized from them keeps grids small
                "multiprocessor_count": 2, "max_threads_per_block": 1024,
                "max_shared_memory_per_block": arch_traits(self.arch).lds_bytes, "total_memory": 1 << 34,
                "l2_cache_size": 0, "compute_capability": (0, 0)}

    def activate(self, ordinal):
        pass

    def error_name(self, code):
        return f"emulated error {int(code)}"

    # ---- memory: host arrays at their own addresses ---------------------------------
    def malloc(self, nbytes):
        return self.memory.alloc(nbytes)

    def free(self, ptr):
        self.memory.free(ptr)

    def mem_get_info(self):
        return (1 << 34) - self.memory.total, 1 << 34

    def htod_async(self, dst, src_host, nbytes, stream):
        self.memory.view(dst, nbytes)[:] = np.frombuffer(self.ffi.buffer(self.ffi.cast("char*", src_host), nbytes),
                                                         np.uint8)

    def dtoh_async(self, dst_host, src, nbytes, stream):
        self.ffi.memmove(self.ffi.cast("char*", dst_host), self.memory.view(src, nbytes).tobytes(), nbytes)

    def dtod_async(self, dst, src, nbytes, stream):
        if not self._recorded(stream, self.dtod_async, dst, src, nbytes, None):
            self.memory.view(dst, nbytes)[:] = self.memory.view(src, nbytes).copy()

    def memset_d8_async(self, dst, byte, nbytes, stream):
        if not self._recorded(stream, self.memset_d8_async, dst, byte, nbytes, None):
            self.memory.view(dst, nbytes)[:] = byte

    # ---- streams and events: everything completes at once ---------------------------
    def _nothing(self, *args):
        return None

    # Work runs when enqueued, in the order enqueued: whatever a stream waits for has finished,
    # so a stream waiting on an event is satisfied at once and every event has completed
    # (event_record and stream_wait_event: RecordedGraphs', which only track a capture's streams)
    stream_synchronize = event_synchronize = event_destroy = _nothing

    def stream_create(self):
        return next(self._streams)

    def event_create(self):
        return object()

    sync_event_create = event_create

    def event_query(self, event):
        return True

    def event_elapsed_ms(self, start, stop):
        return 0.0

    # ---- modules and launches -------------------------------------------------------
    def module_load(self, image):
        from .executor import Program
        return Program(bytes(image), self.memory, self.arch)

    def module_get_function(self, module, name):
        if name not in module.kernels:
            raise BackendError(f"no kernel {name!r} in the code object")
        return _Kernel(module, name)

    def function_max_threads(self, function):
        return int(function.program.kernels[function.name].max_flat_workgroup_size or 1024)

    def function_allow_shared(self, function, nbytes):
        pass

    def launch_function(self):
        from .executor import launch

        def execute(kernel, grid, block, shared_mem, args):
            launch(kernel.program, kernel.name, grid, block, shared_mem, args, self.memory)
            self._record_launch(kernel.name)

        def run(kernel, gx, gy, gz, bx, by, bz, shared_mem, stream, params, extra):
            info = kernel.program.kernels[kernel.name]
            args = bytearray(max(info.kernarg_segment_size, 8))
            for i, arg in enumerate(info.explicit_args):  # read now: `params` is refilled by the next launch
                off, size = arg["offset"], arg["size"]
                args[off:off + size] = self.ffi.buffer(params[i], size)[:]
            call = (kernel, (gx, gy, gz), (bx, by, bz), shared_mem, bytes(args))
            if not self._recorded(stream, execute, *call):
                execute(*call)
            return 0
        return run

    # ---- the compiler: hiprtc (the rocm platform's, sharing its disk cache) or clang --
    @property
    def cache_name(self):
        return getattr(self.compiler, "cache_name", self.compiler.name)

    @property
    def RTC_THREAD_SAFE(self):  # hiprtc 5.x crashes compiling two programs at once; clang does not
        return self.compiler.RTC_THREAD_SAFE

    def rtc_version(self):
        return self.compiler.rtc_version()

    def rtc_options(self, arch):
        return self.compiler.rtc_options(arch)

    def rtc_compile(self, source, name, headers, options, log=None):
        return self.compiler.rtc_compile(source, name, headers, options, log)

    # ---- no BLAS, no DNN library ----------------------------------------------------
    def blas_create(self, stream, workspace_ptr=0, workspace_bytes=0):
        raise BackendUnavailable("no BLAS on the emulated AMD platform: rocBLAS cannot be had here")
