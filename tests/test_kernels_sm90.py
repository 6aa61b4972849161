"""Every GPU kernel compiled for NVIDIA sm_90a (the H100: cuda.py builds for the arch-specific
target on cc 9.0, for wgmma) without a GPU or driver, through the
cuda platform's own compile path (NVRTC via backends/rocm/compiler.py), and checked against
the dispatch table: the sm_90a counterpart of test_kernels_gfx90a.py.

This is what compiles the CUDA-only code (kernels/nvidia.h and tensor_cores_nvidia.h, inline PTX: mma.sync,
ldmatrix, cp.async, red, wgmma) where no NVIDIA GPU is lent: NVRTC's output is a CUBIN, so ptxas
has checked the PTX too.

- each kernels/*.hip compiles for sm_90a (in parallel threads: NVRTC releases the GIL);
- the CUBIN is an sm_90a ELF and every entry point of `kernel_table.KERNELS` is a kernel in it
  (a FUNC symbol marked as a CUDA entry), so a missing instantiation fails here.

Needs NVRTC (libnvrtc.so.13 or .12, e.g. `pip install "nvidia-cuda-nvrtc==13.0.*"`, the H100's version, as .ci/run); the
module is skipped where it cannot be loaded. With TENSORLITE_SM90_REPORT=<path>, a per-kernel
resource table (registers, stack, shared, local bytes; from `cuobjdump --dump-resource-usage`,
e.g. the nvidia-cuda-cuobjdump wheel) is written to <path>.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import struct
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor

import pytest

from tensorlite.backends.rocm import compiler, get_platform, nvidia_wheel_lib_dirs
from tensorlite.backends.rocm import kernel_table, launch
from tensorlite.errors import BackendUnavailable, CompileError

ARCH = "sm_90a"
SOURCES = compiler.list_kernel_sources()  # every file, so one missing from KERNELS is compiled too

try:
    PLATFORM = get_platform("cuda")
    _ = PLATFORM.rtc  # only NVRTC: no libcuda, no GPU
except BackendUnavailable as e:
    pytest.skip(f"NVRTC cannot be loaded (pip install 'nvidia-cuda-nvrtc==13.0.*'): {e}", allow_module_level=True)

_EM_CUDA = 190


def _compile(source):
    try:
        return compiler.compile_source(PLATFORM, source, ARCH)
    except CompileError as e:  # reported by that source's own test
        return e


@pytest.fixture(scope="module")
def cubins():
    """{source: CUBIN bytes or the CompileError}, compiled in parallel threads: a cold cache
    is about 115 s of NVRTC (13.5) in all, about 60 s on 2 cores."""
    workers = min(len(SOURCES), os.cpu_count() or 1) if PLATFORM.RTC_THREAD_SAFE else 1
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(zip(SOURCES, pool.map(_compile, SOURCES)))


def cuda_entry_points(elf: bytes) -> set:
    """Names of the kernels (__global__ functions) in a CUBIN: FUNC symbols marked
    STO_CUDA_ENTRY; device helpers NVRTC leaves out of line ($__internal_...) are not."""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names = set()
    for _name, typ, _flags, _addr, off, size, link, _info, _align, entsize in secs:
        if typ != 2:  # SHT_SYMTAB
            continue
        strtab = secs[link][4]
        for pos in range(off, off + size, entsize or 24):
            st_name, st_info, st_other = struct.unpack_from("<IBB", elf, pos)
            if st_info & 0xF == 2 and st_other & 0x10:  # STT_FUNC, STO_CUDA_ENTRY
                names.add(elf[strtab + st_name:elf.index(b"\0", strtab + st_name)].decode())
    return names


def _elf_arch(elf: bytes) -> int:
    """The SM number of a CUBIN (an EM_CUDA ELF): e_flags bits 8-15 in ELF ABI version 8
    (NVRTC 13.5 writes it), bits 0-7 in version 7 (NVRTC 12.9)."""
    assert elf[:4] == b"\x7fELF" and elf[4] == 2, "not a 64-bit ELF"
    machine, = struct.unpack_from("<H", elf, 0x12)
    flags, = struct.unpack_from("<I", elf, 0x30)
    assert machine == _EM_CUDA, f"ELF machine {machine}, expected EM_CUDA ({_EM_CUDA})"
    return (flags >> 8) & 0xFF if elf[8] >= 8 else flags & 0xFF  # elf[8]: EI_ABIVERSION


@pytest.mark.parametrize("source", SOURCES, ids=[f"{ARCH}-{s}" for s in SOURCES])
def test_compiles_with_every_entry_point(cubins, source):
    code = cubins[source]
    if isinstance(code, CompileError):
        pytest.fail(f"{source} does not compile for {ARCH} ({PLATFORM.rtc_version()}):\n{code}", pytrace=False)
    assert _elf_arch(code) == int(ARCH[3:].rstrip("a")), f"{source}: CUBIN is not for {ARCH}"
    assert source in kernel_table.KERNELS, f"{source} is not in kernel_table.KERNELS"
    missing = sorted(set(kernel_table.KERNELS[source]) - cuda_entry_points(code))
    assert not missing, f"{source} for {ARCH}: {len(missing)} entry points missing, e.g. {missing[:10]}"


def test_wgmma_products_stay_asynchronous():
    """ptxas serializes every wgmma of a kernel, leaving only an info line under -v, when it
    cannot prove the pipeline safe (products issued in a branch that may not run, registers
    of an unfinished product touched): flash_fwd_wg* and flash_bwd_wg* would then lose the
    overlap of their products with the rest of the work, without any error. The
    warp-specialised forward (flash_fwd_ws*, flash_fwd_wsp*) must also not spill: its consumer warpgroups
    hold S, P and O in the registers the producer gives up (setmaxnreg), and ptxas spills
    instead of failing when they do not fit."""
    src, headers = compiler.read_kernel_source("attention.hip")
    log = []
    PLATFORM.rtc_compile(src, "attention.hip", headers, PLATFORM.rtc_options(ARCH) + ["-Xptxas", "-v"], log=log)
    text = "\n".join(log)
    ws = [f"flash_fwd_{ws}{dp}_{t}" for ws in ("ws", "wsp") for dp in (64, 128) for t in ("f16", "bf16")]
    for kernel in ["flash_fwd_wg128_bf16", "flash_bwd_wg128_bf16"] + ws:
        assert f"Compiling entry function '{kernel}'" in text, f"no ptxas -v report for {kernel}"
    serialized = [line for line in text.splitlines() if "wgmma.mma_async instructions are serialized" in line]
    assert not serialized, "\n".join(serialized)
    for kernel in ws:  # ptxas's lines after "Compiling entry function": properties, then the spills
        report = text.split(f"Compiling entry function '{kernel}'")[-1].split("Compiling entry function")[0]
        spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
        assert spills and spills.groups() == ("0", "0"), f"{kernel} spills: {spills and spills.group(0)}"


def _ptx_entries(source) -> dict:
    """{entry point: its PTX body} of `source` compiled for compute_90a."""
    ptx_platform = type(PLATFORM)()
    ptx_platform.RTC_CODE = "PTX"
    src, headers = compiler.read_kernel_source(source)
    ptx = ptx_platform.rtc_compile(src, source, headers, ["-arch=compute_90a", "-std=c++17"]).decode()
    return dict(re.findall(r"\.entry (\w+)\((.*?)(?=\.entry |\Z)", ptx, re.S))


def test_f32_attention_takes_tf32_tiles():
    """The f32 matrix-core attention (flash_*_mma64_f32, which cuda's storage launches for f32 at
    head dim 64) is 3xTF32 on mma.sync: compat.h gives f32 operands their fragments unless the
    vendor header says it has none (TL_MMA_NO_F32, RDNA's WMMA). A kernel left empty there still
    compiles and is still an entry point, so only its code shows it (issue 43's break: 18 f32
    attention failures on the H200)."""
    bodies = _ptx_entries("attention.hip")
    for kernel in ("flash_fwd_mma64_f32", "flash_bwd_mma64_f32"):
        assert kernel in bodies, f"attention.hip: no PTX entry {kernel}"
        tf32 = re.findall(r"mma\.sync\.aligned\.m16n8k8\S*\.tf32", bodies[kernel])
        assert tf32, f"{kernel} for {ARCH} has no tf32 mma.sync: its f32 tiles are compiled out"
    for kernel in ("flash_fwd_mma64_bf16", "flash_bwd_mma64_bf16"):
        assert "mma.sync.aligned.m16n8k16" in bodies[kernel], f"{kernel} for {ARCH} has no bf16 mma.sync"


def test_dependent_launches_wait_before_touching_memory():
    """A kernel that a graph capture launches as a programmatic dependent (launch.py
    DEPENDENT_LAUNCH) may start while the kernel before it still writes: in its PTX,
    griddepcontrol.wait must come before every load, store or atomic outside the kernel's
    parameters and shared memory (generic addresses included)."""
    memory_op = re.compile(r"^\s*(?:@!?%\w+\s+)?(?:ld|st|atom|red|cp\.async)\.(?!param|shared|local|const)", re.M)
    checked = 0
    for source in SOURCES:
        names = [n for n in kernel_table.KERNELS.get(source, ()) if launch.dependent_launch(source, n)]
        if not names:
            continue
        bodies = _ptx_entries(source)
        for name in names:
            body = bodies.get(name)
            assert body is not None, f"{source}: no PTX entry {name}"
            wait = body.find("griddepcontrol.wait")
            first = memory_op.search(body)
            assert wait >= 0, f"{source}:{name} is a dependent launch but never waits (compat.h tl_dependent_start)"
            assert first is None or wait < first.start(), \
                f"{source}:{name} touches memory before griddepcontrol.wait: {first.group(0).strip()!r}"
            checked += 1
    assert checked > 0


# ---- optional: resource table (TENSORLITE_SM90_REPORT=<path>) ------------------------------

def _cuobjdump():
    found = shutil.which("cuobjdump")
    candidates = [os.path.join(os.path.dirname(d), "bin", "cuobjdump") for d in nvidia_wheel_lib_dirs()]
    candidates += [os.path.join(os.environ[v], "bin", "cuobjdump") for v in ("CUDA_HOME", "CUDA_PATH")
                   if os.environ.get(v)]
    candidates += glob.glob("/usr/local/cuda*/bin/cuobjdump")
    return found or next((c for c in candidates if os.access(c, os.X_OK)), None)


def _resource_usage(tool, cubin: bytes) -> dict:
    """{kernel: {"REG": n, "STACK": n, "SHARED": n, "LOCAL": n}} from cuobjdump."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True,
                             check=True).stdout
    usage, fn = {}, None
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("Function "):
            fn = line[len("Function "):].rstrip(":")
        elif fn and line.startswith("REG:"):
            fields = dict(f.split(":", 1) for f in line.split() if ":" in f)
            usage[fn] = {k: int(fields[k]) for k in ("REG", "STACK", "SHARED", "LOCAL")}
            fn = None
    return usage


if os.environ.get("TENSORLITE_SM90_REPORT"):  # only collected when asked for: the suite stays quiet
    def test_write_resource_report(cubins):
        tool = _cuobjdump()
        assert tool, "TENSORLITE_SM90_REPORT is set but cuobjdump was not found (PATH, nvidia/*/bin " \
                     "of an NVIDIA wheel such as nvidia-cuda-cuobjdump, CUDA_HOME/bin)"
        rows = []
        for source in SOURCES:
            if isinstance(cubins[source], bytes):
                usage = _resource_usage(tool, cubins[source])
                missing = sorted(set(kernel_table.KERNELS.get(source, ())) - set(usage))
                assert not missing, f"cuobjdump reports no resources for {source}: {missing[:10]}"
                rows += [(source, k, u) for k, u in usage.items()]
        rows.sort(key=lambda r: (-r[2]["REG"], r[0], r[1]))
        with open(os.environ["TENSORLITE_SM90_REPORT"], "w") as f:
            f.write(f"# {ARCH}, {PLATFORM.rtc_version()}, options {' '.join(PLATFORM.rtc_options(ARCH))}\n")
            f.write("source\tkernel\tregs\tstack\tshared\tlocal\n")
            for source, k, u in rows:
                f.write(f"{source}\t{k}\t{u['REG']}\t{u['STACK']}\t{u['SHARED']}\t{u['LOCAL']}\n")
