"""A second AMD compile path: LLVM's own clang (Debian's clang-19) compiling a kernel family
to an AMD code object, for the emulated AMD platform and the compile tests. The `rocm`
platform never uses it (it compiles with hiprtc on the user's ROCm).

One compile is

    clang-19 -x hip --cuda-device-only -nogpulib --no-gpu-bundle-output --offload-arch=<arch>
        -O3 -std=c++17 -include hip/hip_runtime.h -include hip/hip_fp16.h -I<HIP headers>
        -Xclang -mlink-builtin-bitcode -Xclang {ocml.bc, ockl.bc, oclc-<arch>.bc} -c <family>.hip

- HIP headers: the HIP 7.1 device headers that PyPI's `triton` wheel ships in
  triton/backends/amd/include (found, never imported: `hip_include_dir`). clang does not
  include them by itself here, as hiprtc does.
- Device libraries: ocml/ockl of ROCm 5.4.2 (pytorch-triton-rocm==2.1.0's lib/bitcode, the
  folder that also holds the emulated platform's hiprtc 5.4.2). Newer ones (triton's ROCm
  7.1) are LLVM 20 bitcode, which clang-19 refuses.
- `__oclc_*`: the control constants the device libraries read (ISA version, wave size, ABI,
  float modes). ROCm ships one bitcode per value; 5.4.2 has none for gfx942/gfx1151/gfx12, so
  they are written here per target and assembled with llvm-as-19.
- `--no-gpu-bundle-output`: the code object itself instead of a clang offload bundle (the same
  ELF `clang-offload-bundler-19 --unbundle` extracts, one process less).

clang emits code object v5 (hidden kernel arguments after the explicit ones); hiprtc 5.x v4.

gfx950 (MI350X/MI355X), which clang-19 does not know (LLVM 20 added it), is compiled in two
steps (triton_llvm.py): clang-19 makes the LLVM IR, for gfx942 but with gfx950's predefined
macros and `__oclc_*` constants, and the LLVM 23 inside PyPI's `triton` (the wheel whose HIP
headers are used already) retargets it, generates the code and links the code object.
"""
from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading

from tensorlite.errors import BackendUnavailable, CompileError

from . import triton_llvm
from .hip import AmdArchitectures, isa_version

LLVM_MAJOR = 19
CLANG = f"clang-{LLVM_MAJOR}"
LLVM_AS = f"llvm-as-{LLVM_MAJOR}"
# Processors this clang does not know, whose IR it makes for another (triton_llvm.RETARGET)
# and triton's LLVM compiles. The option names the processor and that LLVM (the cache key holds
# the options); it is ours, not clang's: rtc_compile takes it out.
RETARGET = triton_llvm.RETARGET
CODEGEN_OPTION = "--tensorlite-codegen="
HEADERS_ENV = "TENSORLITE_HIP_HEADERS"   # a folder holding hip/hip_runtime.h, or one holding triton/
_TRITON_INCLUDE = ("triton", "backends", "amd", "include")
_DEVICE_LIBS = ("ocml.bc", "ockl.bc")
_BITCODE_DIRS = (("lib", "bitcode"), ("amdgcn", "bitcode"))  # pip-installed toolchain, ROCm root
# Float modes as HIP compiles by default: denormals kept, no finite-only or unsafe math,
# correctly rounded f32 sqrt/div (clang's -fhip-fp32-correctly-rounded-divide-sqrt default).
_OCLC_FLAGS = {"__oclc_daz_opt": 0, "__oclc_finite_only_opt": 0, "__oclc_unsafe_math_opt": 0,
               "__oclc_correctly_rounded_sqrt32": 1}
_OCLC_ABI_VERSION = 500  # code object v5, clang-19's default


def _has_hip_runtime(include_dir: str) -> bool:
    return os.path.isfile(os.path.join(include_dir, "hip", "hip_runtime.h"))


def hip_include_dir():
    """The folder of HIP device headers (holding hip/hip_runtime.h), or None: $TENSORLITE_HIP_HEADERS
    (that folder, or one holding triton/, e.g. a `pip install --target` folder of triton), else
    the `triton` package of this environment (PyTorch's dependency), located without importing it."""
    import importlib.util
    candidates = []
    if os.environ.get(HEADERS_ENV):
        base = os.path.expanduser(os.environ[HEADERS_ENV])
        candidates += [base, os.path.join(base, *_TRITON_INCLUDE)]
    else:
        spec = importlib.util.find_spec("triton")  # finds the package; its __init__ does not run
        if spec is not None and spec.submodule_search_locations:
            for loc in spec.submodule_search_locations:
                candidates.append(os.path.join(loc, *_TRITON_INCLUDE[1:]))
    return next((c for c in candidates if _has_hip_runtime(c)), None)


def device_library_dir(rocm_root):
    """The folder holding ocml.bc and ockl.bc under a ROCm (5.4.2) root, or None."""
    for sub in _BITCODE_DIRS:
        folder = os.path.join(rocm_root or "", *sub)
        if rocm_root and all(os.path.isfile(os.path.join(folder, f)) for f in _DEVICE_LIBS):
            return folder
    return None


def _run(argv, what):
    """(returncode, stdout, stderr) of a tool; BackendUnavailable if it cannot be started."""
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as e:
        raise BackendUnavailable(f"{what}: cannot run {argv[0]}: {e}") from None
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class ClangAmdCompiler(AmdArchitectures):
    """kernels/<family>.hip -> AMD code object through clang-19, with the interface compiler.py
    takes from a platform (rtc_version, rtc_options, rtc_compile, cache_name, CODE_SUFFIX)."""
    name = cache_name = f"clang{LLVM_MAJOR}-amdgcn"  # its own disk-cache entries, never hiprtc's
    RTC_THREAD_SAFE = True  # every compile is its own process in its own folder

    def __init__(self, rocm_root: str = None):
        """`rocm_root`: the ROCm 5.4.2 folder whose ocml/ockl bitcode is linked in."""
        self.rocm_root = rocm_root
        self._lock = threading.Lock()
        self._tools = None     # (clang path, llvm-as path, include dir, bitcode dir), once checked
        self._version = None
        self._oclc = {}        # arch -> path of its __oclc_* bitcode
        self._scratch = None   # this process's private folder for the __oclc_* files

    # ---- what must be installed -------------------------------------------------------
    def tools(self):
        """(clang, llvm-as, HIP include dir, device-library dir); BackendUnavailable naming
        whatever is missing and how to install it."""
        if self._tools is not None:
            return self._tools
        missing = []
        clang, llvm_as = shutil.which(CLANG), shutil.which(LLVM_AS)
        if clang is None:
            missing.append(f"{CLANG} (apt-get install {CLANG})")
        elif not os.path.exists(os.path.join(os.path.dirname(os.path.realpath(clang)), "ld.lld")):
            missing.append(f"lld-{LLVM_MAJOR}, the linker {CLANG} runs (apt-get install lld-{LLVM_MAJOR})")
        if llvm_as is None:
            missing.append(f"{LLVM_AS} (apt-get install llvm-{LLVM_MAJOR})")
        include = hip_include_dir()
        if include is None:
            missing.append("HIP device headers (hip/hip_runtime.h): PyPI's triton ships them in "
                           f"triton/backends/amd/include; `pip install --no-deps --target DIR triton` and set "
                           f"{HEADERS_ENV}=DIR")
        bitcode = device_library_dir(self.rocm_root)
        if bitcode is None:
            missing.append("ROCm 5.4.2's device libraries (ocml.bc, ockl.bc): `pip install --no-deps --target DIR "
                           "pytorch-triton-rocm==2.1.0` and set TENSORLITE_AMDEMU_ROCM=DIR"
                           + (f" ({self.rocm_root} has none)" if self.rocm_root else ""))
        if missing:
            raise BackendUnavailable(f"compiling AMD code objects with {CLANG} needs: " + "; ".join(missing))
        self._tools = (clang, llvm_as, include, bitcode)
        return self._tools

    def rtc_version(self) -> str:
        """The compiler, headers and device libraries that shape the code (the cache key's
        compiler part; no paths, so caches may travel between machines)."""
        if self._version is None:
            clang, _, include, bitcode = self.tools()
            rc, out, err = _run([clang, "--version"], CLANG)
            first = out.decode(errors="replace").splitlines()[0] if rc == 0 and out else f"{CLANG} (no version)"
            with open(os.path.join(include, "hip", "hip_version.h"), errors="replace") as f:
                hip = hashlib.sha256(f.read().encode()).hexdigest()[:12]
            libs = hashlib.sha256("".join(_sha256(os.path.join(bitcode, n)) for n in _DEVICE_LIBS).encode())
            self._version = f"{first}; HIP headers {hip}; ocml/ockl {libs.hexdigest()[:12]}"
        return self._version

    def libtriton(self) -> str:
        """libtriton.so of the triton whose HIP headers are used, for the processors clang-19 does
        not know (RETARGET); BackendUnavailable if that triton has none."""
        path = triton_llvm.libtriton_path(self.tools()[2])
        if path is None:
            raise BackendUnavailable(f"compiling for {', '.join(RETARGET)} needs the LLVM inside PyPI's triton "
                                     f"(triton/_C/libtriton.so beside the HIP headers {self.tools()[2]}): "
                                     f"`pip install --no-deps --target DIR triton==3.8.0` and set {HEADERS_ENV}=DIR")
        return path

    def rtc_options(self, arch: str):
        frontend = ["--offload-arch=" + RETARGET.get(arch, arch)]
        if arch in RETARGET:  # LLVM IR text for triton's LLVM, the source seeing arch's macros
            version = triton_llvm.libtriton_version(self.libtriton())
            frontend = [f"{CODEGEN_OPTION}{arch} ({version})", *frontend, "-emit-llvm", "-S",
                        *triton_llvm.frontend_macros(arch)]
        return ["-x", "hip", "--cuda-device-only", "-nogpulib", "--no-gpu-bundle-output", *frontend,
                "-O3", "-std=c++17", "-include", "hip/hip_runtime.h", "-include", "hip/hip_fp16.h"]

    # ---- the per-target control constants ---------------------------------------------
    def oclc_bitcode(self, arch: str) -> str:
        """Path of the `__oclc_*` bitcode for `arch` (written and assembled once per process)."""
        with self._lock:
            path = self._oclc.get(arch)
            if path is not None:
                return path
            clang, llvm_as, _, _ = self.tools()
            if self._scratch is None:
                self._scratch = tempfile.mkdtemp(prefix="tensorlite-clang-")
                atexit.register(shutil.rmtree, self._scratch, True)
            # the target's data layout, so that linking it into the kernel's module says nothing
            rc, out, err = _run([clang, "-target", "amdgcn-amd-amdhsa", f"-mcpu={RETARGET.get(arch, arch)}",
                                 "-nogpulib", "-x", "c",
                                 "-S", "-emit-llvm", "-o", "-", os.devnull], CLANG)
            layout = [ln for ln in out.decode(errors="replace").splitlines() if ln.startswith("target datalayout")]
            if rc or not layout:
                raise CompileError(f"{CLANG} gave no data layout for {arch}:\n{err}")
            values = {"__oclc_ISA_version": ("i32", isa_version(arch)),
                      "__oclc_ABI_version": ("i32", _OCLC_ABI_VERSION),
                      "__oclc_wavefrontsize64": ("i8", int(self.wavefront_size(arch) == 64))}
            values.update((k, ("i8", v)) for k, v in _OCLC_FLAGS.items())
            lines = [layout[0], 'target triple = "amdgcn-amd-amdhsa"']
            lines += [f"@{k} = linkonce_odr hidden local_unnamed_addr addrspace(4) constant {t} {v}"
                      for k, (t, v) in values.items()]
            ll, path = os.path.join(self._scratch, f"oclc-{arch}.ll"), os.path.join(self._scratch, f"oclc-{arch}.bc")
            with open(ll, "w") as f:
                f.write("\n".join(lines) + "\n")
            rc, _, err = _run([llvm_as, ll, "-o", path], LLVM_AS)
            if rc:
                raise CompileError(f"{LLVM_AS} failed on the __oclc_* constants for {arch}:\n{err}")
            self._oclc[arch] = path
            return path

    def link_options(self, arch: str):
        """-I and the device-library bitcode for `arch` (paths: kept out of the cache key)."""
        _, _, include, bitcode = self.tools()
        out = [f"-I{include}"]
        for lib in [os.path.join(bitcode, n) for n in _DEVICE_LIBS] + [self.oclc_bitcode(arch)]:
            out += ["-Xclang", "-mlink-builtin-bitcode", "-Xclang", lib]
        return out

    # ---- compiling ------------------------------------------------------------------
    def rtc_compile(self, source: str, name: str, headers: dict, options, log: list = None) -> bytes:
        """Compile `source` (kernels/<name>, with kernels/*.h given as `headers`) with `options`
        (rtc_options(arch)) to a code object. A failed compile raises CompileError naming the
        family, the target and the compiler, with its log."""
        codegen = [o for o in options if o.startswith(CODEGEN_OPTION)]
        arch = codegen[0][len(CODEGEN_OPTION):].split()[0] if codegen else \
            next(o.split("=", 1)[1] for o in options if o.startswith("--offload-arch="))
        clang_options = [o for o in options if o not in codegen]
        clang = self.tools()[0]
        with tempfile.TemporaryDirectory(prefix="tensorlite-clang-") as folder:
            for header, text in headers.items():  # beside the source: #include "compat.h" resolves
                with open(os.path.join(folder, header), "w") as f:
                    f.write(text)
            src, obj = os.path.join(folder, os.path.basename(name)), os.path.join(folder, "out.hsaco")
            out = os.path.join(folder, "out.ll") if codegen else obj
            with open(src, "w") as f:
                f.write(source)
            stage = [] if codegen else ["-c"]  # (the options' -S -emit-llvm stop clang at the IR)
            rc, _, err = _run([clang, *clang_options, *self.link_options(arch), *stage, src, "-o", out], CLANG)
            err = err.replace(folder + os.sep, "").strip()
            if not rc and codegen:  # triton's LLVM: retarget, generate, link (its own process)
                rc, _, err2 = _run([sys.executable, "-I", triton_llvm.__file__, arch, self.libtriton(), out, obj],
                                   "triton's LLVM")
                err = "\n".join(e for e in (err, err2.replace(folder + os.sep, "").strip()) if e)
            if log is not None:
                log.append(err)
            if rc or not os.path.isfile(obj):
                what = f"{CLANG} and triton's LLVM" if codegen else CLANG
                raise CompileError(f"{what} failed to compile {name} for {arch} (exit {rc}; options "
                                   f"{' '.join(options)}):\n{err or '(empty log)'}")
            with open(obj, "rb") as f:
                return f.read()
