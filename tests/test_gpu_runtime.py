"""The GPU runtime without a GPU: HIP bindings against the real headers, the no-device
path, the hiprtc/NVRTC compile path and its disk cache, the caching allocator's logic and
kernel-argument packing.

Needs Debian's libamdhip64-dev (HIP 5.2: runtime + hiprtc); skipped with that reason where
it is missing. The NVRTC checks need a libnvrtc (pip install nvidia-cuda-nvrtc).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import stat
import struct
import sys
import sysconfig
import tempfile
import warnings

import pytest

from tensorlite.errors import BackendError, BackendUnavailable, CompileError, DeviceError, OutOfMemoryError
from tensorlite.backends.rocm import compiler, get_platform, hip
from tensorlite.backends.rocm.device import ArgLayout, Buffer, CachingAllocator, size_class


def _hip_or_skip():
    plat = get_platform("rocm")
    try:
        _ = plat.rt
    except BackendUnavailable as e:
        pytest.skip(f"libamdhip64 is not installed: {e}")
    return plat


TINY_SOURCE = r"""
#include "tiny.h"
extern "C" __global__ void scale_f32(float* x, unsigned n, float s) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = TINY_SCALE(x[i], s);
}
"""
TINY_HEADERS = {"tiny.h": "#define TINY_SCALE(v, s) ((v) * (s))\n"}


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh disk cache and an empty in-memory cache for each test."""
    path = tmp_path / "cache"
    monkeypatch.setenv("TENSORLITE_CACHE_DIR", str(path))
    compiler.clear_memory_cache()
    return path


# ---- HIP cdefs vs /usr/include/hip ----------------------------------------------------

def _api_mode_module(tmp_path, cdefs, module_name):
    """Compile `cdefs` in cffi's API mode against the HIP headers, with a static assertion
    per function that its declared type equals the header's (cffi alone would let an
    `int` parameter silently stand for a `size_t`)."""
    import cffi
    if not os.path.exists("/usr/include/hip/hip_runtime.h"):
        pytest.skip("HIP headers not installed (/usr/include/hip/hip_runtime.h; apt install libamdhip64-dev)")
    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("no C compiler (cc) to build the cffi API-mode check")
    if not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
        pytest.skip("Python.h not found (python3-dev) for the cffi API-mode check")
    ffi = cffi.FFI()
    for c in cdefs:
        ffi.cdef(c)
    asserts = []
    for key, (tp, _quals) in ffi._parser._declarations.items():
        if key.startswith("function "):
            fn = key.split(" ", 1)[1]
            asserts.append(f'_Static_assert(__builtin_types_compatible_p(__typeof__(&{fn}), {tp.get_c_name("")}), '
                           f'"{fn}: the cdef signature differs from the HIP header");')
    ffi.set_source(module_name, "#include <hip/hip_runtime.h>\n#include <hip/hiprtc.h>\n" + "\n".join(asserts),
                   define_macros=[("__HIP_PLATFORM_AMD__", "1")], libraries=["amdhip64"])
    path = ffi.compile(tmpdir=str(tmp_path))
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # cffi checks struct layouts and enum values on load
    return ffi, module


def test_hip_cdefs_match_the_hip_headers(tmp_path):
    _hip_or_skip()
    ffi, module = _api_mode_module(tmp_path, [hip.RUNTIME_CDEFS, hip.HIPRTC_CDEFS], "_tl_hip_cdef_check")
    functions = [k for k in ffi._parser._declarations if k.startswith("function ")]
    assert len(functions) >= 30  # runtime + hiprtc, every one statically checked
    # the ABI-mode layout of hipDeviceProp_t (what hipGetDeviceProperties fills) is the header's
    abi = get_platform("rocm").ffi
    api = module.ffi
    assert abi.sizeof("hipDeviceProp_t") == api.sizeof("hipDeviceProp_t")
    for field in ("name", "totalGlobalMem", "warpSize", "multiProcessorCount", "arch", "gcnArchName",
                  "pageableMemoryAccessUsesHostPageTables"):
        assert abi.offsetof("hipDeviceProp_t", field) == api.offsetof("hipDeviceProp_t", field), field
    assert module.lib.hipErrorNoDevice == 100 and module.lib.hipErrorOutOfMemory == 2


def test_signature_drift_is_caught(tmp_path, capfd):
    """The check above is only worth having if a wrong cdef fails it: an `int` where the
    header has `size_t` compiles silently in plain cffi, but not past the static assertion."""
    import cffi
    _hip_or_skip()
    wrong = "typedef enum hipError_t { hipSuccess = 0 } hipError_t;\nhipError_t hipMalloc(void** ptr, int size);\n"
    with pytest.raises(cffi.VerificationError):
        _api_mode_module(tmp_path, [wrong], "_tl_hip_cdef_drift")
    assert "hipMalloc: the cdef signature differs from the HIP header" in capfd.readouterr().err


# ---- no device ----------------------------------------------------------------------

def test_rocm_reports_the_no_device_reason():
    plat = _hip_or_skip()
    try:
        count = plat.init()
    except BackendUnavailable as e:
        assert "hipErrorNoDevice" in str(e) and "libamdhip64" in str(e)
    else:
        pytest.skip(f"this machine has {count} AMD GPU(s); the no-device path cannot be exercised")
    tl = pytest.importorskip("tensorlite")
    reason = tl.backends.available()["rocm"]
    assert reason is not True and "hipErrorNoDevice" in str(reason)
    with pytest.raises(DeviceError) as info:  # BackendUnavailable is a DeviceError
        tl.tensor([1.0, 2.0]).to("rocm")
    assert "hipErrorNoDevice" in str(info.value)


# ---- the compile path ---------------------------------------------------------------

def test_hiprtc_compiles_for_gfx90a_without_a_gpu(cache_dir):
    _hip_or_skip()
    code = compiler.compile_text("rocm", TINY_SOURCE, "tiny.hip", "gfx90a", TINY_HEADERS)
    assert code[:4] == b"\x7fELF" and b"scale_f32" in code


def test_compile_error_carries_the_log_and_the_name(cache_dir):
    _hip_or_skip()
    with pytest.raises(CompileError) as info:
        compiler.compile_text("rocm", TINY_SOURCE + "\nthis is not C++;\n", "broken_kernel.hip", "gfx90a",
                              TINY_HEADERS)
    msg = str(info.value)
    assert "broken_kernel.hip" in msg and "error" in msg and "gfx90a" in msg


def test_nvrtc_compiles_for_sm90_without_a_gpu(cache_dir):
    plat = get_platform("cuda")
    try:
        _ = plat.rtc
    except BackendUnavailable as e:
        pytest.skip(f"no libnvrtc here: {e}")
    code = compiler.compile_text("cuda", TINY_SOURCE, "tiny.hip", "sm_90", TINY_HEADERS)
    assert code[:4] == b"\x7fELF" and b"scale_f32" in code
    assert any(p.suffix == ".cubin" for p in (cache_dir / "kernels").iterdir())


# ---- the disk cache -----------------------------------------------------------------

def _entries(cache_dir):
    return sorted(p for p in (cache_dir / "kernels").iterdir() if not p.name.startswith(".tmp-"))


def test_cache_directory_is_private_and_entries_are_hash_verified(cache_dir):
    _hip_or_skip()
    code = compiler.compile_text("rocm", TINY_SOURCE, "tiny.hip", "gfx90a", TINY_HEADERS)
    for d in (cache_dir, cache_dir / "kernels"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700
    [entry] = _entries(cache_dir)
    blob = entry.read_bytes()
    magic_end = blob.index(b"\n") + 1
    digest, payload = blob[magic_end:magic_end + 64], blob[magic_end + 65:]
    assert payload == code and digest.decode() == hashlib.sha256(code).hexdigest()


def test_cache_hit_skips_the_compiler(cache_dir, monkeypatch):
    plat = _hip_or_skip()
    code = compiler.compile_text("rocm", TINY_SOURCE, "tiny.hip", "gfx90a", TINY_HEADERS)
    compiler.clear_memory_cache()  # a new process: only the disk remains

    def no_compiler(*a, **k):
        raise AssertionError("compiled although a valid cache entry exists")
    monkeypatch.setattr(plat, "rtc_compile", no_compiler)
    assert compiler.compile_text("rocm", TINY_SOURCE, "tiny.hip", "gfx90a", TINY_HEADERS) == code


@pytest.mark.parametrize("damage", ["flip_payload_byte", "truncate", "garbage"])
def test_corrupt_cache_entry_is_recompiled(cache_dir, monkeypatch, damage):
    plat = _hip_or_skip()
    code = compiler.compile_text("rocm", TINY_SOURCE, "tiny.hip", "gfx90a", TINY_HEADERS)
    [entry] = _entries(cache_dir)
    blob = bytearray(entry.read_bytes())
    if damage == "flip_payload_byte":
        blob[-100] ^= 0xFF
    elif damage == "truncate":
        blob = blob[: len(blob) // 2]
    else:
        blob = bytearray(b"not a cache entry")
    entry.write_bytes(bytes(blob))
    compiler.clear_memory_cache()
    calls = []
    real = plat.rtc_compile
    monkeypatch.setattr(plat, "rtc_compile", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert compiler.compile_text("rocm", TINY_SOURCE, "tiny.hip", "gfx90a", TINY_HEADERS) == code
    assert calls == [1]
    assert compiler.load_cached(entry) == code  # rewritten, valid again


@pytest.mark.parametrize("where, mode, why", [("root", 0o777, "its group and others may write it (mode 777)"),
                                             ("root", 0o770, "its group may write it (mode 770)"),
                                             ("kernels", 0o757, "others may write it (mode 757)")],
                         ids=["root-777", "root-770", "kernels-757"])
def test_cache_directory_others_may_write_is_refused(tmp_path, monkeypatch, where, mode, why):
    """A cache directory that other users may write is not trusted (anyone could plant a code
    object whose embedded hash matches its payload): cache_dir() warns, naming it and why,
    writes nothing there and uses a private per-user directory under the system temp dir,
    itself checked the same way. No GPU or compiler needed."""
    if not hasattr(os, "getuid"):
        pytest.skip("no POSIX file ownership here")
    shared, tmp = tmp_path / "shared", tmp_path / "tmp"
    (shared / "kernels").mkdir(parents=True, mode=0o700)
    tmp.mkdir()
    refused = shared if where == "root" else shared / "kernels"
    os.chmod(shared, 0o700)
    os.chmod(refused, mode)
    monkeypatch.setenv("TENSORLITE_CACHE_DIR", str(shared))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))  # the system temp dir, for this test
    with pytest.warns(UserWarning) as record:
        path = compiler.cache_dir()
    [warning] = [str(w.message) for w in record]
    assert f"not using the kernel cache directory {shared}" in warning and f"{refused}: {why}" in warning
    assert path == tmp / f"tensorlite-{os.getuid()}" / "kernels" and str(path.parent) in warning
    for d in (path.parent, path):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700 and d.stat().st_uid == os.getuid()
    assert list(shared.iterdir()) == [shared / "kernels"] and not list((shared / "kernels").iterdir())
    # the fallback is checked the same way: writable by others, it is refused too (a fresh private directory)
    os.chmod(path.parent, 0o777)
    with pytest.warns(UserWarning) as record:
        fresh = compiler.cache_dir()
    [warning] = [str(w.message) for w in record]
    assert f"{refused}: {why}" in warning and f"the fallback {path.parent}: its group and others may write" in warning
    assert fresh.parent.parent == tmp and fresh.parent != path.parent and str(fresh.parent) in warning
    assert stat.S_IMODE(fresh.parent.stat().st_mode) == 0o700 and fresh.is_dir()
    # a private directory is used as it is, silently
    os.chmod(refused, 0o700)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compiler.cache_dir() == shared / "kernels"


def test_cache_key_covers_source_headers_and_arch(cache_dir):
    _hip_or_skip()
    compiler.compile_text("rocm", TINY_SOURCE, "tiny.hip", "gfx90a", TINY_HEADERS)
    compiler.compile_text("rocm", TINY_SOURCE, "tiny.hip", "gfx908", TINY_HEADERS)
    compiler.compile_text("rocm", TINY_SOURCE, "tiny.hip", "gfx90a",
                          {"tiny.h": "#define TINY_SCALE(v, s) ((v) + (s))\n"})
    compiler.compile_text("rocm", TINY_SOURCE + "\n// edited\n", "tiny.hip", "gfx90a", TINY_HEADERS)
    assert len(_entries(cache_dir)) == 4


def test_cache_writes_are_atomic(cache_dir, monkeypatch):
    """The entry appears only through os.replace of a complete temp file in the same
    directory; a failed write leaves neither a partial entry nor a temp file."""
    _hip_or_skip()
    seen = []
    real_replace = os.replace

    def spy_replace(src, dst):
        seen.append((os.path.dirname(src) == os.path.dirname(dst), compiler.load_cached(type(cache_dir)(src))))
        return real_replace(src, dst)
    monkeypatch.setattr(compiler.os, "replace", spy_replace)
    code = compiler.compile_text("rocm", TINY_SOURCE, "tiny.hip", "gfx90a", TINY_HEADERS)
    assert seen == [(True, code)]

    def failing_replace(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr(compiler.os, "replace", failing_replace)
    compiler.clear_memory_cache()
    other = compiler.compile_text("rocm", TINY_SOURCE, "tiny.hip", "gfx908", TINY_HEADERS)
    assert other[:4] == b"\x7fELF"  # still compiled and returned
    assert len(_entries(cache_dir)) == 1
    assert not [p for p in (cache_dir / "kernels").iterdir() if p.name.startswith(".tmp-")]


def test_every_kernel_source_is_found_by_the_compile_path():
    sources = compiler.list_kernel_sources()
    for name in sources:
        text, headers = compiler.read_kernel_source(name)
        assert text.strip() and all(isinstance(v, str) for v in headers.values())
    with pytest.raises(CompileError, match="not found"):
        compiler.read_kernel_source("no_such_family.hip")


# ---- caching allocator (logic, over a fake runtime) ----------------------------------

class _FakeRuntime:
    """malloc/free over a byte budget, so OOM and the retry can be exercised on a CPU."""
    name, runtime_name = "fake", "libfake"

    def __init__(self, capacity):
        self.capacity, self.used, self.live, self.next_ptr = capacity, 0, {}, 0x1000
        self.mallocs = self.frees = self.syncs = 0

    def malloc(self, nbytes):
        if self.used + nbytes > self.capacity:
            raise OutOfMemoryError(f"fakeMalloc({nbytes}) failed: fakeErrorOutOfMemory")
        ptr, self.next_ptr = self.next_ptr, self.next_ptr + nbytes
        self.live[ptr] = nbytes
        self.used += nbytes
        self.mallocs += 1
        return ptr

    def free(self, ptr):
        self.used -= self.live.pop(ptr)
        self.frees += 1

    def mem_get_info(self):
        return self.capacity - self.used, self.capacity

    def stream_synchronize(self, stream):
        self.syncs += 1


class _FakeDevice:
    capture = None  # GpuDevice's: no graph capture in progress

    def __init__(self, capacity):
        self.platform, self.stream = _FakeRuntime(capacity), object()

    def activate(self):
        pass

    def total_memory(self):
        return None  # unknown, as a runtime may answer: the allocator then asks malloc

    def __str__(self):
        return "fake:0"


def test_size_classes():
    assert [size_class(n) for n in (1, 512, 513, 1 << 20)] == [512, 512, 1024, 1 << 20]
    assert size_class((1 << 20) + 1) == 2 << 20 and size_class(255 << 20) == 256 << 20


def test_allocator_reuses_freed_blocks_and_tracks_stats():
    dev = _FakeDevice(1 << 30)
    alloc = CachingAllocator(dev)
    a = alloc.alloc(1000)
    ptr = a.ptr
    assert alloc.stats()["allocated"] == 1024 and alloc.stats()["reserved"] == 1024
    del a  # back to the cache, not to the runtime
    assert alloc.stats()["allocated"] == 0 and alloc.stats()["reserved"] == 1024
    b = alloc.alloc(700)  # same size class: the cached block comes back
    assert b.ptr == ptr and dev.platform.mallocs == 1 and alloc.num_cache_hits == 1
    c = alloc.alloc(3 << 20)
    assert alloc.stats()["peak"] == 1024 + (4 << 20)
    del b, c
    alloc.empty_cache()
    assert dev.platform.used == 0 and alloc.stats()["reserved"] == 0 and dev.platform.syncs == 1
    assert alloc.alloc(0).ptr == 0  # empty tensors take no memory


def test_allocator_frees_the_cache_and_retries_before_raising():
    dev = _FakeDevice(8 << 20)
    alloc = CachingAllocator(dev)
    blocks = [alloc.alloc(2 << 20) for _ in range(3)]  # 6 MiB in use
    del blocks  # ... now cached, still reserved from the runtime
    big = alloc.alloc(6 << 20)  # another size class: needs the cache emptied first
    assert big.ptr and dev.platform.frees == 3 and alloc.stats()["reserved"] == 6 << 20
    with pytest.raises(OutOfMemoryError) as info:
        alloc.alloc(4 << 20)
    msg = str(info.value)
    assert "fake:0" in msg and str(4 << 20) in msg and "allocated=" in msg and "peak=" in msg
    del big  # the allocator stays usable after an OOM
    assert alloc.alloc(4 << 20).ptr


def test_buffer_returns_to_its_allocator_once():
    dev = _FakeDevice(1 << 20)
    alloc = CachingAllocator(dev)
    buf = alloc.alloc(100)
    assert isinstance(buf, Buffer) and buf.nbytes == 100
    buf.__del__()
    buf.__del__()  # idempotent: a second release would hand the block out twice
    assert alloc.cached_blocks(512) == [buf.ptr]


# ---- kernel arguments ---------------------------------------------------------------

def test_kernel_argument_layout_follows_c_alignment():
    import cffi
    ffi = cffi.FFI()
    sig = ("ptr", "int32", ("bytes", 20), "float", "int64", "uint32", "double")
    layout = ArgLayout(ffi, sig)
    base = int(ffi.cast("uintptr_t", layout.cbuf))
    offsets = [int(ffi.cast("uintptr_t", layout.params[i])) - base for i in range(len(sig))]
    assert offsets == [0, 8, 16, 36, 40, 48, 56]
    values = (0xDEADBEEF0000, -7, bytes(range(20)), 1.5, -(2 ** 40), 2 ** 32 - 1, 0.25)
    struct.pack_into(layout.fmt, layout.buffer, 0, *values)
    raw = bytes(layout.buffer)
    assert struct.unpack_from("<Q", raw, 0)[0] == 0xDEADBEEF0000
    assert struct.unpack_from("<i", raw, 8)[0] == -7
    assert raw[16:36] == bytes(range(20))
    assert struct.unpack_from("<f", raw, 36)[0] == 1.5
    assert struct.unpack_from("<q", raw, 40)[0] == -(2 ** 40)
    assert struct.unpack_from("<I", raw, 48)[0] == 2 ** 32 - 1
    assert struct.unpack_from("<d", raw, 56)[0] == 0.25


class _LaunchPlatform:
    """What GpuDevice needs to launch, no GPU: the launch entry point reads the packed
    arguments through the params array during the call, as the driver does."""
    name, runtime_name = "fake", "no runtime"
    CALLS = {"launch": "fakeLaunchKernel", "launch_dependent": "fakeLaunchKernelEx"}
    HAS_BLAS = True

    def __init__(self, slot_sizes, status=0, dependent=False):
        import cffi
        self.ffi, self.slot_sizes, self.status = cffi.FFI(), slot_sizes, status
        self.calls = []
        self.dependent = dependent  # whether it offers a programmatic dependent launch

    def init(self):
        return 1

    def activate(self, ordinal):
        pass

    def device_properties(self, ordinal):
        return {"name": "fake", "arch": "fake", "warp_size": 64, "multiprocessor_count": 4}

    def stream_create(self):
        return "stream"

    def error_name(self, code):
        return "fakeErrorLaunchFailed"

    def launch_function(self):
        def launch(func, gx, gy, gz, bx, by, bz, shared_mem, stream, params, extra):
            slots = [bytes(self.ffi.buffer(params[i], n)) for i, n in enumerate(self.slot_sizes)]
            self.calls.append((func, (gx, gy, gz), (bx, by, bz), shared_mem, stream, slots))
            return self.status
        return launch

    def launch_call(self):  # a Python launcher: called directly (PlatformBase.launch_call)
        return self.launch_function(), self.ffi.NULL

    def dependent_launch_function(self, arch):  # records its launches with "dependent" in extra's place
        if not self.dependent:
            return None
        plain = self.launch_function()
        return lambda func, gx, gy, gz, bx, by, bz, shared_mem, stream, params: \
            plain(func, gx, gy, gz, bx, by, bz, shared_mem, "dependent:" + stream, params, None)


def _launch_device(slot_sizes, status=0):
    from tensorlite.backends.rocm.device import GpuDevice, Kernel
    dev = GpuDevice(_LaunchPlatform(slot_sizes, status), 0)
    return dev, Kernel("handle", "k_f32", "k.hip")


def test_capture_launches_the_declared_kernels_as_dependents():
    """Programmatic dependent launch (launch.py DEPENDENT_LAUNCH) only while capturing, only for
    the kernels declared to wait first (compat.h tl_dependent_start), only where the platform
    has it; every other launch is the plain one."""
    from tensorlite.backends.rocm.device import GpuDevice, Kernel
    for offered in (True, False):
        dev = GpuDevice(_LaunchPlatform([8], dependent=offered), 0)
        gemv, copy = Kernel("h1", "gemv1_bf16", "gemv.hip"), Kernel("h2", "copy_f32", "copy.hip")
        norm, softmax = Kernel("h3", "add_rms_norm_bf16", "fused.hip"), Kernel("h4", "softmax_f32", "fused.hip")
        assert gemv.dependent and norm.dependent and not copy.dependent and not softmax.dependent
        dev.launch(gemv, 3, 256, [("int64", 1)])
        dev.capture = object()  # as graph.Capture sets it while the stream is captured
        for k in (gemv, copy, norm, softmax):
            dev.launch(k, (3, 2), 256, [("int64", 1)])
        dev.capture = None
        streams = [(func, stream) for func, _, _, _, stream, _ in dev.platform.calls]
        dep = "dependent:stream" if offered else "stream"
        assert streams == [("h1", "stream"), ("h1", dep), ("h2", "stream"), ("h3", dep), ("h4", "stream")]
        assert dev.platform.calls[1][1:3] == ((3, 2, 1), (256, 1, 1))
    # a failed dependent launch names its call and the kernel; the device launches on afterwards
    dev = GpuDevice(_LaunchPlatform([8], status=719, dependent=True), 0)
    gemv = Kernel("h1", "gemv1_bf16", "gemv.hip")
    dev.capture = object()
    with pytest.raises(BackendError, match=r"fakeLaunchKernelEx\(gemv\.hip:gemv1_bf16, grid=\(3, 1, 1\)"):
        dev.launch(gemv, 3, 256, [("int64", 1)])
    dev.capture, dev.platform.status = None, 0
    dev.launch(gemv, 3, 256, [("int64", 1)])


def test_launch_packs_each_launch_into_the_reused_buffer():
    import threading
    strided = bytes(range(144))
    dev, k = _launch_device([8, 144, 4, 8, 8])
    calls = dev.platform.calls
    for n, scale in ((1000, 0.5), (2 ** 40 + 3, -2.25)):  # the second launch refills the first one's buffer
        dev.launch(k, 7, 256, [("int64", n), ("bytes", strided), ("float", scale), ("ptr", 0xABC000),
                               ("double", scale * 3)])
        func, grid, block, shared_mem, stream, slots = calls[-1]
        assert (func, grid, block, shared_mem, stream) == ("handle", (7, 1, 1), (256, 1, 1), 0, "stream")
        assert struct.unpack("<q", slots[0])[0] == n and slots[1] == strided
        assert struct.unpack("<f", slots[2])[0] == scale and struct.unpack("<Q", slots[3])[0] == 0xABC000
        assert struct.unpack("<d", slots[4])[0] == scale * 3
    # tuples are padded to three dims; another thread packs into a buffer of its own
    worker = threading.Thread(target=dev.launch, args=(k, (3, 2), (32, 4, 1), [("int64", 5), ("bytes", strided),
                                                                               ("float", 1.0), ("ptr", 1),
                                                                               ("double", 2.0)], 64))
    worker.start()
    worker.join()
    assert calls[-1][1:4] == ((3, 2, 1), (32, 4, 1), 64) and struct.unpack("<q", calls[-1][5][0])[0] == 5
    assert len({id(plan.cbuf) for plan in k.layouts.values()}) == 2


def test_launch_rejects_bad_geometry_values_and_signatures():
    from tensorlite.errors import BackendError
    dev, k = _launch_device([4])
    for grid, block in ((0, 32), (1, 0), ((2, 0), 32), (1, (1, 1, 1, 1))):
        with pytest.raises(BackendError, match="grid|block"):
            dev.launch(k, grid, block, [("int32", 1)])
    with pytest.raises(BackendError, match="k_f32: bad argument values"):
        dev.launch(k, 1, 32, [("int32", 2 ** 31)])
    with pytest.raises(BackendError, match="differ from an earlier launch"):
        dev.launch(k, 1, 32, [("int32", 1), ("int32", 1)])
    assert dev.platform.calls == []
    dev.platform.status = 719
    with pytest.raises(BackendError, match=r"fakeLaunchKernel\(k.hip:k_f32, grid=\(3, 1, 1\), block=\(64, 1, 1\), "
                                           r"shared_mem=0\) failed: fakeErrorLaunchFailed \(719\)"):
        dev.launch(k, 3, 64, [("int32", 1)])


def test_contiguity_fast_check_matches_layout():
    import itertools
    from tensorlite.layout import Layout
    from tensorlite.backends.rocm.launch import pack_strided
    layouts = [Layout(()), Layout((0, 3)), Layout((2, 0), (5, 7)), Layout((4, 1, 3), (3, 99, 1)),
               Layout((4, 3)).transpose(0, 1), Layout((1, 6)).broadcast_as((4, 6)), Layout((5, 8)).narrow(1, 2, 6),
               Layout((5, 8), None, 40).narrow(0, 1, 4), Layout((4, 3)).reshape((2, 6)),
               Layout((4, 3), (1, 4)).reshape((4, 1, 3)), Layout((3, 4)).permute((1, 0))]
    for lay in layouts:  # the flag a Layout keeps (set when built contiguous, else computed once)
        assert lay.is_contiguous() == lay._is_contiguous() == lay.is_contiguous(), lay
    for la, lb in itertools.product(layouts, repeat=2):
        if la.shape == lb.shape:
            packed = pack_strided(la, lb)
            # the kernels' contiguous flag (the third field of struct Strided)
            assert [struct.unpack_from("<qii", p)[2] for p in packed] == [la.is_contiguous(), lb.is_contiguous()]


def test_reduce_plans_are_reused_with_each_calls_offset(tmp_path, monkeypatch):
    """reduce_op plans its launch once per (op, dtype, shape, strides, dims); a reused plan
    launches what a fresh one would, with the call's own row offset (the outer Strided's
    first field) and pointers."""
    from tensorlite import dtype as dtypes
    from tensorlite.layout import Layout
    from tensorlite.backends.rocm.device import GpuDevice
    from tensorlite.backends.rocm.null import NullPlatform
    from tensorlite.backends.rocm.ops.reduce import reduce_plans
    monkeypatch.setenv("TENSORLITE_CACHE_DIR", str(tmp_path))
    dev = GpuDevice(NullPlatform(), 0)
    launches = []
    monkeypatch.setattr(dev, "launch", lambda func, grid, block, args, shared_mem=0:
                        launches.append((func.name, grid, block, [a for i, a in enumerate(args) if i != 5])))
    st = dev.alloc_uninit((24 * 16,), dtypes.float32)
    rows = Layout((12, 8), (16, 1))  # every other 8 elements: the outer layout is packed with its offset
    for offset in (0, 8, 8):
        st.reduce_op("sum", Layout(rows.shape, rows.strides, offset), (1,))
    assert len(reduce_plans(dev)) == 1
    assert [struct.unpack_from("<q", args[2][1])[0] for *_, args in launches] == [0, 8, 8]
    reduce_plans(dev).clear()
    st.reduce_op("sum", Layout(rows.shape, rows.strides, 8), (1,))
    assert launches[-1] == launches[1] and launches[0] != launches[1]


def test_unknown_platform_is_unavailable():
    with pytest.raises(BackendUnavailable, match="unknown GPU platform"):
        get_platform("opencl")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


# ---- cuBLASLt bias epilogues (argument plumbing, over a fake library) -----------------

def test_cublaslt_plan_is_built_once_per_shape_and_misalignment_falls_back():
    """blas_gemm_epilogue builds the descriptors and asks the heuristic once per GEMM shape,
    then only sets the bias pointer and runs; a pointer off the algorithms' 256-byte
    alignment, a case without an algorithm, or a missing library returns False with nothing
    run (the caller takes the unfused path). The cdefs themselves are only exercised on a
    real GPU (tests/test_nn_functional.py's linear tests on cuda)."""
    from tensorlite.backends.rocm.cuda import CudaPlatform
    platform = CudaPlatform()
    ffi, calls, algos = platform.ffi, [], []

    class FakeLt:  # every call succeeds; the heuristic returns len(algos) > 0 algorithms
        def __getattr__(self, name):
            def call(*args):
                calls.append(name)
                if name == "cublasLtMatmulAlgoGetHeuristic":
                    args[-1][0] = len(algos)
                return 0
            return call
    platform.ltlib = FakeLt()
    handle, stream, one = ffi.cast("cublasHandle_t", 4096), ffi.cast("CUstream", 0), ffi.new("float*", 1.0)

    def run(a=256, epilogue="bias", m=512):
        return platform.blas_gemm_epilogue(handle, stream, "bf16", True, False, m, 8192, 512, one, a, 512, 512, 512,
                                           one, 768, m, 1024, epilogue, 0, 0)
    algos.append("one")
    assert run() and run() and calls.count("cublasLtMatmulAlgoGetHeuristic") == 1
    assert calls.count("cublasLtMatmul") == 2
    calls.clear()
    assert not run(a=256 + 2) and calls == []           # misaligned A: nothing enqueued
    algos.clear()
    assert not run(epilogue="bgradb") and "cublasLtMatmul" not in calls  # no algorithm for the case
    platform.ltlib = False
    assert not run(m=256)


# CUDA's "maximum amount of shared memory per thread block" a kernel may opt into, KiB, by arch
# (the CUDA C++ Programming Guide's table of compute capabilities)
NVIDIA_OPT_IN_KIB = {"sm_80": 163, "sm_86": 99, "sm_87": 163, "sm_89": 99, "sm_90a": 227, "sm_100": 227,
                     "sm_120": 99}


@pytest.mark.parametrize("arch", NVIDIA_OPT_IN_KIB)
def test_matrix_core_attention_tiles_fit_each_nvidia_arch(arch):
    """The tensor-core attention's tiles (ops/attention.py's mirror of attention.hip, sized from
    tensor_cores_nvidia.h's TL_MMA_LDS_KIB) fit the shared memory a block may have on the arch:
    at 227 KiB for every arch, the two-stage 64-key forward at head dim 128 (102 KiB) could not
    launch on an RTX 3090 / 4090 / 5090 (99 KiB)."""
    from types import SimpleNamespace
    import tensorlite as tl
    from tensorlite.backends.rocm.ops.attention import mma_bwd_tile, mma_fwd_tile
    dev = SimpleNamespace(platform=get_platform("cuda"), arch=arch)
    for dtype, dp in ((tl.float16, 64), (tl.float16, 128), (tl.bfloat16, 64), (tl.bfloat16, 128), (tl.float32, 64)):
        (bn, fwd), (warps, bwd) = mma_fwd_tile(dev, dtype, dp), mma_bwd_tile(dev, dtype, dp)
        assert max(fwd, bwd) <= NVIDIA_OPT_IN_KIB[arch] * 1024, (arch, dtype, dp, fwd, bwd)
        assert warps == 8 and (bn == 64 or dp == 128 and NVIDIA_OPT_IN_KIB[arch] < 102), (arch, dtype, dp, bn, warps)
