"""Every GPU kernel family compiled by the second AMD compile path, clang-19
(backends/rocm/clang.py), for the AMD targets people run today -- gfx942 (MI300X, wave64),
gfx1151 (Strix Halo, wave32), gfx1201 (RX 9070, wave32) -- and for gfx90a and gfx1100, which
hiprtc also compiles (a second compiler's code for the same target).

- each kernels/*.hip compiles for each target, through compiler.py's cache (the same entries
  the emulated platform then loads);
- the code object is for that target, is code object v5, its kernels are exactly the entry
  points kernel_table.KERNELS declares, each with the target's wavefront size;
- on gfx942 the matrix-core attention kernels (flash_*_mma*) hold MFMA instructions and no
  other kernel does (llvm-objdump-19);
- the compiler's refusals: a compile error names the family, target and compiler with its
  log; gfx950 (unknown to LLVM 19) and a missing clang-19 say what is missing;
- how the emulated platform picks a compiler per architecture.

Needs Debian's clang-19, lld-19 and llvm-19, the HIP headers of PyPI's triton and the ROCm
5.4.2 device libraries of pytorch-triton-rocm==2.1.0; skipped, naming what is missing, where
they are not installed. Nothing here runs on AMD hardware.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from tensorlite.backends.rocm import compiler, kernel_table
from tensorlite.backends.rocm.amdemu import platform as amdemu
from tensorlite.backends.rocm.amdemu.codeobject import CodeObject
from tensorlite.backends.rocm.clang import ClangAmdCompiler
from tensorlite.backends.rocm.hip import AmdArchitectures
from tensorlite.errors import BackendUnavailable, CompileError

TARGETS = ("gfx942", "gfx1151", "gfx1201", "gfx90a", "gfx1100")
SOURCES = sorted(kernel_table.KERNELS)
CASES = [(arch, src) for arch in TARGETS for src in SOURCES]


def _clang_or_skip():
    clang = amdemu.clang_compiler()
    try:
        clang.tools()
    except BackendUnavailable as e:
        pytest.skip(str(e))
    return clang


@pytest.fixture(scope="session")
def code_objects():
    """{(arch, source): CodeObject} of every family for every target, compiled once a session
    in parallel processes (each clang-19 compile is its own); the disk cache makes reruns fast."""
    clang = _clang_or_skip()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        images = pool.map(lambda case: compiler.compile_source(clang, case[1], case[0]), CASES)
        return {case: CodeObject.parse(image) for case, image in zip(CASES, images)}


@pytest.mark.parametrize("arch,source", CASES, ids=[f"{a}-{s}" for a, s in CASES])
def test_compiles_with_every_entry_point(code_objects, arch, source):
    co = code_objects[arch, source]
    assert co.arch == arch and co.target.startswith(f"amdgcn-amd-amdhsa--{arch}")
    assert co.code_object_version == 5  # hidden kernel arguments after the explicit ones
    assert set(co.kernels) == set(kernel_table.KERNELS[source]), \
        f"{source} for {arch}: the code object's kernels differ from the entry points the family declares"
    wave = AmdArchitectures.wavefront_size(arch)
    wrong = {name: k.wavefront_size for name, k in co.kernels.items()
             if k.wavefront_size != wave or k.descriptor.wavefront_size != wave}
    assert not wrong, f"{source} for {arch}: kernels not of wave{wave}: {wrong}"


def _mfma_per_kernel(image: bytes, arch: str, tmp_path) -> dict:
    objdump = shutil.which("llvm-objdump-19")
    if objdump is None:
        pytest.skip("llvm-objdump-19 is not installed (apt-get install llvm-19)")
    path = tmp_path / f"attention-{arch}.hsaco"
    path.write_bytes(image)
    text = subprocess.run([objdump, "-d", f"--mcpu={arch}", str(path)], check=True, capture_output=True,
                          text=True).stdout
    counts, current = {}, None
    for line in text.splitlines():
        label = re.match(r"^[0-9a-f]+ <([\w.]+)>:", line)
        if label:
            current = label.group(1)
            counts.setdefault(current, 0)
        elif current and re.search(r"\bv_mfma_", line):
            counts[current] += 1
    return counts


def test_gfx942_attention_runs_on_mfma(code_objects, tmp_path):
    """The MFMA tier is compiled in for gfx942 (compat.h: matrix_cores_amd.h): every
    flash_*_mma* kernel holds v_mfma instructions, and no other kernel does."""
    clang = _clang_or_skip()
    counts = _mfma_per_kernel(compiler.compile_source(clang, "attention.hip", "gfx942"), "gfx942", tmp_path)
    mma = {k for k in code_objects["gfx942", "attention.hip"].kernels if re.match(r"flash_(fwd|bwd)_mma", k)}
    assert mma, "no matrix-core attention entry points in attention.hip"
    assert {k for k in mma if not counts.get(k)} == set(), "MMA kernels without v_mfma on gfx942"
    others = {k: n for k, n in counts.items() if n and k not in mma}
    assert not others, f"v_mfma outside the MMA attention kernels: {others}"


def test_compile_error_names_family_target_and_compiler():
    clang = _clang_or_skip()
    with pytest.raises(CompileError, match=r"clang-19 failed to compile broken\.hip for gfx1201[\s\S]*"
                                           r"broken\.hip:2:[\s\S]*undeclared"):
        clang.rtc_compile('extern "C" __global__ void k(int* p) {\n  *p = not_declared;\n}\n', "broken.hip", {},
                          clang.rtc_options("gfx1201"))


def test_refusals_name_what_is_missing(monkeypatch):
    with pytest.raises(BackendUnavailable, match="clang-19 cannot compile for gfx950.*LLVM 20"):
        ClangAmdCompiler(amdemu.rocm542_root()).rtc_options("gfx950")
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda tool: None if tool == "clang-19" else real_which(tool))
    with pytest.raises(BackendUnavailable, match=r"apt-get install clang-19"):
        ClangAmdCompiler(amdemu.rocm542_root()).tools()
    monkeypatch.setattr(shutil, "which", real_which)
    with pytest.raises(BackendUnavailable, match=r"ocml\.bc.*pytorch-triton-rocm==2\.1\.0"):
        ClangAmdCompiler("/nonexistent").tools()


def test_compiler_chosen_per_architecture(monkeypatch):
    monkeypatch.delenv(amdemu.COMPILER_ENV, raising=False)
    assert amdemu.parse_target("gfx90a") == ("gfx90a", "hiprtc", "gfx90a")
    assert amdemu.parse_target("gfx1201") == ("gfx1201", "clang", "gfx1201")
    assert amdemu.parse_target("gfx1100-clang") == ("gfx1100", "clang", "gfx1100-clang")
    with pytest.raises(BackendUnavailable, match="no hiprtc here compiles gfx942"):
        amdemu.parse_target("gfx942-hiprtc")
    with pytest.raises(BackendUnavailable, match="emulated architectures are"):
        amdemu.parse_target("gfx950")
    monkeypatch.setenv(amdemu.COMPILER_ENV, "clang")
    plat = amdemu.AmdEmuPlatform("gfx940")
    assert (plat.arch, plat.target, plat.cache_name) == ("gfx940", "gfx940-clang", ClangAmdCompiler.cache_name)
    assert plat.compiler is amdemu.clang_compiler() and plat.RTC_THREAD_SAFE
    monkeypatch.setenv(amdemu.COMPILER_ENV, "hiprtc")
    plat = amdemu.AmdEmuPlatform("gfx90a")
    assert (plat.compiler_name, plat.cache_name) == ("hiprtc", "rocm")  # hiprtc's: the rocm platform's entries
