"""The compiled launch shim (backends/rocm/launch_shim.py) passes a launch to the driver exactly
as cffi's ABI mode does: tested on any machine with a C compiler, through the null platform
over a C library that exports cuLaunchKernel and records its arguments."""
import os
import shutil
import subprocess

import cffi
import numpy as np
import pytest

from tensorlite.errors import BackendError
from tensorlite.layout import Layout
from tensorlite.backends.rocm import launch_shim
from tensorlite.backends.rocm.device import GpuDevice
from tensorlite.backends.rocm.null import LAUNCH_DECL, NullPlatform

RECORDER = LAUNCH_DECL.strip().rstrip(";") + """ {
    seen_dims[0] = gx; seen_dims[1] = gy; seen_dims[2] = gz; seen_dims[3] = bx; seen_dims[4] = by;
    seen_dims[5] = bz; seen_dims[6] = shared_mem;
    seen_ptrs[0] = f; seen_ptrs[1] = stream; seen_ptrs[2] = params; seen_ptrs[3] = extra;
    seen_first_arg = params ? *(long long*)params[0] : -1;
    return status;
}
"""
RECORDER_STATE = "unsigned int seen_dims[7]; void* seen_ptrs[4]; long long seen_first_arg; int status;"


@pytest.fixture(scope="module")
def recorder_lib(tmp_path_factory):
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        pytest.skip("no C compiler (cc) to build the recording cuLaunchKernel library")
    work = tmp_path_factory.mktemp("shim")
    src, lib = work / "recorder.c", work / "librecorder.so"
    src.write_text(RECORDER_STATE + "\n" + RECORDER)
    subprocess.run([cc, "-O1", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, capture_output=True)
    return str(lib)


def _device(lib, monkeypatch, tmp_path, shim: bool):
    monkeypatch.setenv("TENSORLITE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TENSORLITE_LAUNCH_SHIM", "1" if shim else "0")
    return GpuDevice(NullPlatform(lib), 0)


def _recorded(lib):
    ffi = cffi.FFI()
    ffi.cdef(" ".join("extern " + d + ";" for d in RECORDER_STATE.split(";") if d.strip()))
    rec = ffi.dlopen(lib)  # the same loaded library: its globals are the ones the launch wrote
    ptrs = [int(ffi.cast("uintptr_t", p)) for p in rec.seen_ptrs]
    return list(rec.seen_dims), ptrs, rec.seen_first_arg, rec


def _launch_once(dev, grid, block, shared):
    kernel = dev.function("binary.hip", "badd_f32")
    dev.launch(kernel, grid, block, [("int64", 1234), ("ptr", 0)], shared_mem=shared)
    return kernel


@pytest.mark.parametrize("grid, block, shared", [(7, 256, 0), ((3, 2, 1), (32, 4), 4096)])
def test_the_shim_passes_what_abi_mode_passes(recorder_lib, monkeypatch, tmp_path, grid, block, shared):
    if not launch_shim.installed():
        pytest.skip("the compiled launch shim is not installed (no C compiler or cffi at install)")
    seen = []
    for shim in (True, False):
        dev = _device(recorder_lib, monkeypatch, tmp_path, shim)
        assert (dev._launch_fn is not dev.platform.launch_function()) == shim
        _launch_once(dev, grid, block, shared)
        dims, ptrs, first_arg, _ = _recorded(recorder_lib)
        stream = int(dev.platform.ffi.cast("uintptr_t", dev.stream))
        assert ptrs[1] == stream and ptrs[2] != 0 and ptrs[3] == 0  # extra is NULL either way
        assert first_arg == 1234
        seen.append(dims)
    g = (grid, 1, 1) if isinstance(grid, int) else grid
    b = (block, 1, 1) if isinstance(block, int) else tuple(block) + (1,)
    assert seen[0] == seen[1] == [*g, *b, shared]


def test_a_failed_launch_through_the_shim_raises_and_the_device_stays_usable(recorder_lib, monkeypatch, tmp_path):
    if not launch_shim.installed():
        pytest.skip("the compiled launch shim is not installed (no C compiler or cffi at install)")
    dev = _device(recorder_lib, monkeypatch, tmp_path, True)
    *_, rec = _recorded(recorder_lib)
    rec.status = 700  # CUDA_ERROR_ILLEGAL_ADDRESS's code: the shim must hand the status back
    try:
        with pytest.raises(BackendError, match=r"badd_f32.*grid=\(5, 1, 1\).*\(700\)"):
            _launch_once(dev, 5, 128, 0)
    finally:
        rec.status = 0
    _launch_once(dev, 9, 128, 0)
    assert _recorded(recorder_lib)[0][:4] == [9, 1, 1, 128]
    x = dev.from_cpu(np.ones(4, np.float32))  # and whole ops still go through
    x.affine(Layout.contiguous((4,)), 2.0, 0.0)


def test_python_launchers_are_called_directly(monkeypatch):
    """The emulated and null platforms' Python launchers take no shim."""
    platform = NullPlatform()
    fn, last = platform.launch_call()
    assert callable(fn) and not isinstance(fn, platform.ffi.CData) and last == platform.ffi.NULL
