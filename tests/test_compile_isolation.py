"""hiprtc compiles in a child process (backends/rocm/compile_worker.py): a compiler that
crashes, aborts or hangs raises CompileError in the caller, which goes on compiling; and
the disk cache stays whole when several processes compile the same cold family at once.

The faults are real ones in the child: CrashingHiprtc is the rocm platform with its hiprtc
call replaced by a segmentation fault (a read of address 0), an abort or a hang, and the
child rebuilds it from its class and constructor arguments as it rebuilds HipPlatform. Run
in this process, the same compile would kill pytest.

Needs Debian's libamdhip64-dev (HIP 5.2, which carries hiprtc); no GPU.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import sys
import time

import pytest

from tensorlite.backends.rocm import compile_worker, compiler, get_platform, kernel_table
from tensorlite.backends.rocm.amdemu.codeobject import CodeObject
from tensorlite.backends.rocm.hip import HipPlatform
from tensorlite.errors import BackendUnavailable, CompileError

ARCH = "gfx90a"
FAMILY = "where.hip"  # the smallest family: about 2 s of hiprtc
TINY_SOURCE = 'extern "C" __global__ void scale_f32(float* x, float s) { x[threadIdx.x] *= s; }\n'


class CrashingHiprtc(HipPlatform):
    """The rocm platform whose hiprtc call faults: "segv" reads address 0, "abort" calls
    abort(), "hang" sleeps; with `once` (a file path) only the first compile faults (it
    leaves the file behind) and later ones run hiprtc."""

    def __init__(self, root=None, fault="segv", once=None):
        super().__init__(root)
        self.fault, self.once = fault, once

    def _rtc_compile(self, *args, **kwargs):
        if self.once is None or not os.path.exists(self.once):
            if self.once is not None:
                open(self.once, "w").close()
            if self.fault == "segv":
                ctypes.string_at(0)
            elif self.fault == "abort":
                os.abort()
            elif self.fault == "hang":
                time.sleep(600)
        return super()._rtc_compile(*args, **kwargs)


@pytest.fixture
def hiprtc():
    plat = get_platform("rocm")
    try:
        plat.rtc_version()
    except BackendUnavailable as e:
        pytest.skip(f"libamdhip64/hiprtc is not installed: {e}")
    return plat


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh disk cache and an empty memory cache."""
    path = tmp_path / "cache"
    monkeypatch.setenv("TENSORLITE_CACHE_DIR", str(path))
    monkeypatch.delenv(compile_worker.ISOLATION_ENV, raising=False)
    compiler.clear_memory_cache()
    return path


def entries(cache_dir):
    return sorted((cache_dir / "kernels").iterdir())


@pytest.mark.parametrize("fault, ended", [("segv", "killed by SIGSEGV"), ("abort", "killed by SIGABRT")])
def test_a_crashing_compiler_raises_compile_error_and_the_backend_goes_on(hiprtc, cache_dir, fault, ended):
    with pytest.raises(CompileError) as info:
        compiler.compile_text(CrashingHiprtc(fault=fault), TINY_SOURCE, "tiny.hip", ARCH)
    message = str(info.value)
    assert "tiny.hip for gfx90a with hiprtc" in message and "--offload-arch=gfx90a" in message
    assert f"attempt 1: {ended}" in message and f"attempt 2: {ended}" in message  # retried once
    assert "Fatal Python error" in message  # the child's faulthandler report, as the compiler's log
    assert not entries(cache_dir)  # nothing cached
    code = compiler.compile_text("rocm", TINY_SOURCE, "tiny.hip", ARCH)  # this process compiles on
    assert "scale_f32" in CodeObject.parse(code).kernels


def test_a_crash_is_retried_once(hiprtc, cache_dir, tmp_path):
    code = compiler.compile_text(CrashingHiprtc(once=str(tmp_path / "crashed")), TINY_SOURCE, "tiny.hip", ARCH)
    assert (tmp_path / "crashed").exists() and "scale_f32" in CodeObject.parse(code).kernels
    assert len(entries(cache_dir)) == 1


def test_a_hanging_compiler_is_stopped_at_the_timeout(hiprtc, cache_dir, monkeypatch):
    monkeypatch.setenv(compile_worker.TIMEOUT_ENV, "3")
    t0 = time.monotonic()
    with pytest.raises(CompileError) as info:
        compiler.compile_text(CrashingHiprtc(fault="hang"), TINY_SOURCE, "tiny.hip", ARCH)
    assert str(info.value).count(f"no result within 3 s ({compile_worker.TIMEOUT_ENV})") == 2
    assert time.monotonic() - t0 < 60


def test_a_compiler_error_is_raised_with_its_log_and_not_retried(hiprtc, cache_dir, monkeypatch):
    spawned = []
    real_popen = compile_worker.subprocess.Popen
    monkeypatch.setattr(compile_worker.subprocess, "Popen", lambda *a, **k: spawned.append(1) or real_popen(*a, **k))
    with pytest.raises(CompileError) as info:
        compiler.compile_text("rocm", TINY_SOURCE + "this is not C++;\n", "broken.hip", ARCH)
    assert "hiprtcCompileProgram failed for 'broken.hip'" in str(info.value) and "error" in str(info.value)
    assert spawned == [1]


def test_a_warm_cache_spawns_no_child(hiprtc, cache_dir, monkeypatch):
    spawned = []
    real_popen = compile_worker.subprocess.Popen
    monkeypatch.setattr(compile_worker.subprocess, "Popen", lambda *a, **k: spawned.append(1) or real_popen(*a, **k))
    code = compiler.compile_text("rocm", TINY_SOURCE, "tiny.hip", ARCH)
    assert spawned == [1]  # cold: compiled in a child
    compiler.clear_memory_cache()  # a new process: only the disk cache remains
    assert compiler.compile_text("rocm", TINY_SOURCE, "tiny.hip", ARCH) == code
    assert spawned == [1]


def test_isolation_can_be_turned_off(hiprtc, cache_dir, monkeypatch):
    assert compile_worker.recipe(hiprtc) == ("tensorlite.backends.rocm.hip", "HipPlatform", {"root": None})
    monkeypatch.setenv(compile_worker.ISOLATION_ENV, "0")
    assert compile_worker.recipe(hiprtc) is None


# ---- several processes, one cold family ----------------------------------------------

# compiles the family, then watches the cache while the others write: every entry it sees
# (temp files aside) must be whole
COMPILE_AT_ONCE = r"""
import hashlib, os, sys, time
from tensorlite.backends.rocm import compiler
while not os.path.exists(sys.argv[1]):  # start together
    time.sleep(0.01)
code = compiler.compile_source("rocm", sys.argv[2], "gfx90a")
torn, end = [], time.monotonic() + 3
while time.monotonic() < end:
    for p in compiler.cache_dir().iterdir():
        if not p.name.startswith(".tmp-") and compiler.load_cached(p) is None and p.exists():
            torn.append(p.name)
    time.sleep(0.002)
print(hashlib.sha256(code).hexdigest(), len(torn))
"""


def test_four_processes_compiling_one_cold_family_leave_one_whole_entry(hiprtc, cache_dir, tmp_path):
    go = tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    procs = [subprocess.Popen([sys.executable, "-c", COMPILE_AT_ONCE, str(go), FAMILY], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    time.sleep(0.5)
    go.touch()
    results = [p.communicate(timeout=600) + (p.returncode,) for p in procs]
    assert [rc for _, _, rc in results] == [0] * 4, [err[-2000:] for _, err, _ in results]
    digests = {out.split()[0] for out, _, _ in results}
    assert [int(out.split()[1]) for out, _, _ in results] == [0] * 4  # no reader saw a partial entry
    [entry] = entries(cache_dir)  # one entry, no temp file left behind
    code = compiler.load_cached(entry)
    assert code is not None and digests == {hashlib.sha256(code).hexdigest()}
    assert set(kernel_table.KERNELS[FAMILY]) <= set(CodeObject.parse(code).kernels)


@pytest.mark.parametrize("keep", [0, 20, 0.5], ids=["empty", "cut-in-header", "half"])
def test_a_truncated_entry_is_detected_and_recompiled(hiprtc, cache_dir, keep):
    code = compiler.compile_text("rocm", TINY_SOURCE, "tiny.hip", ARCH)
    [entry] = entries(cache_dir)
    blob = entry.read_bytes()
    entry.write_bytes(blob[:int(keep * len(blob)) if isinstance(keep, float) else keep])
    assert compiler.load_cached(entry) is None
    compiler.clear_memory_cache()
    assert compiler.compile_text("rocm", TINY_SOURCE, "tiny.hip", ARCH) == code
    assert compiler.load_cached(entry) == code
