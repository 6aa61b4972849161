"""The emulated AMD platform's instruction decoder (backends/rocm/amdemu/decode.py), checked
against LLVM's AMDGPU disassembler on this project's own kernels.

For gfx90a, gfx940 and gfx1100 (hiprtc), and for every emulated architecture compiled by
clang-19 (gfx942, gfx1151 and gfx1201 among them), every kernels/*.hip is compiled through
the project's compile path (`compiler.compile_source`), the code objects' .text is
disassembled by LLVM, and the same bytes are walked with `decode`: every instruction must
start at the same offset, have the same length and the same mnemonic (`decode.mnemonic`,
LLVM's spelling). A failure names the kernel, offset, bytes, our mnemonic and LLVM's.

The reference disassembler:
- clang-19's code: Debian's `llvm-objdump-19 -d --mcpu=<arch>` (the LLVM that compiled it);
- hiprtc's code: Debian's `llvm-objdump-14 -d --mcpu=<arch>` where LLVM 14 knows the arch (gfx90a);
- LLVM 14 knows neither gfx940 nor gfx1100 ("Disassembly not yet supported for subtarget"),
  so for those the disassembler of the comgr library shipped next to the hiprtc that
  compiles them (ROCm 5.4.2 in PyPI's pytorch-triton-rocm==2.1.0: AMD's LLVM 15 fork, the
  compiler that produced these very bytes) is called per instruction through cffi.
- LLVM 19 does not know gfx950 (whose code triton's LLVM 23 generates: backends/rocm/triton_llvm.py),
  and triton's libtriton has no disassembler: for it LLVM's C disassembler API in
  `librocmllvm.so` of PyPI's rocm-llvm-python==7.2.2.562.46 (AMD's LLVM 22 of ROCm 7.2) is
  called per instruction through ctypes (`pip install --no-deps --target DIR` it and set
  $TENSORLITE_ROCM_LLVM=DIR).

Compilers: gfx90a through the process's own platform (Debian's HIP 5.2 hiprtc, as
tests/test_kernels_gfx90a.py does); gfx940/gfx1100 need hiprtc 5.4.2, which the platform
finds through $ROCM_PATH, and since the platform is cached per process they are compiled in
a subprocess with ROCM_PATH pointing at that ROCm (`amdemu.platform.rocm542_root`).

`test_opcode_sweep` additionally decodes one instruction word for every opcode number of
every format and compares with LLVM wherever LLVM decodes the word.

Nothing here runs on AMD hardware.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = pytest.mark.amdemu

_NEED_TINYGRAD = ("the emulated AMD platform needs tinygrad==0.14.0 (its AMD instruction tables): "
                  "pip install tinygrad==0.14.0")
pytest.importorskip("tinygrad.renderer.amd", reason=_NEED_TINYGRAD)

from tensorlite.errors import BackendError, BackendUnavailable  # noqa: E402
from tensorlite.backends.rocm import compiler, get_platform  # noqa: E402
from tensorlite.backends.rocm.amdemu import decode as D  # noqa: E402
from tensorlite.backends.rocm.amdemu.codeobject import CodeObject  # noqa: E402
from tensorlite.backends.rocm.amdemu.platform import ARCHS as EMULATED, ROCM_ENV, clang_compiler, \
    rocm542_root  # noqa: E402
from tensorlite.backends.rocm.clang import RETARGET  # noqa: E402

ARCHS = ("gfx90a", "gfx940", "gfx1100")   # hiprtc's
CLANG_ARCHS = tuple(EMULATED)             # clang-19's: every emulated architecture
OBJDUMP = "llvm-objdump-14"
OBJDUMP_CLANG = "llvm-objdump-19"
ROCM_LLVM_ENV = "TENSORLITE_ROCM_LLVM"     # a folder holding rocm/llvm/librocmllvm.so (rocm-llvm-python)
ROCM_LLVM_LIB = ("rocm", "llvm", "librocmllvm.so")
MAX_REPORTED = 25


# ---- the compilers ------------------------------------------------------------------------

def _rocm542_root():
    """The ROCm 5.4.2 (hiprtc and comgr) the platform compiles gfx940/gfx1100 with, or None."""
    root = rocm542_root()
    return Path(root) if root else None


_COMPILE_SCRIPT = r"""
import sys
from pathlib import Path
from tensorlite.errors import BackendUnavailable
from tensorlite.backends.rocm import compiler, get_platform
arch, out = sys.argv[1], Path(sys.argv[2])
plat = get_platform("rocm")
try:
    plat.rtc
except BackendUnavailable as e:
    print(f"hiprtc unavailable: {e}")
    sys.exit(3)
for src in compiler.list_kernel_sources():
    (out / (src + ".co")).write_bytes(compiler.compile_source(plat, src, arch))
"""

_CODE = {}


def clang_code_objects(arch: str) -> dict:
    """{kernel source: code object} for every kernels/*.hip compiled for `arch` by clang-19."""
    key = (arch, "clang")
    if key not in _CODE:
        clang = clang_compiler()
        try:
            clang.tools()
        except BackendUnavailable as e:
            pytest.skip(str(e))
        _CODE[key] = {src: compiler.compile_source(clang, src, arch) for src in compiler.list_kernel_sources()}
    return _CODE[key]


def code_objects(arch: str, tmp_root: Path) -> dict:
    """{kernel source: code object} for every kernels/*.hip compiled for `arch` by hiprtc."""
    if arch in _CODE:
        return _CODE[arch]
    sources = compiler.list_kernel_sources()
    if arch == "gfx90a":
        plat = get_platform("rocm")
        try:
            _ = plat.rtc
        except BackendUnavailable as e:
            pytest.skip(f"libamdhip64/hiprtc is not installed: {e}")
        objs = {src: compiler.compile_source(plat, src, arch) for src in sources}
    else:
        root = _rocm542_root()
        if root is None:
            pytest.skip(f"{arch} needs the hiprtc of ROCm 5.4.2 (PyPI's pytorch-triton-rocm==2.1.0 ships it; "
                        f"{ROCM_ENV} names its folder); it is not installed")
        out = tmp_root / f"co-{arch}"
        out.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, ROCM_PATH=str(root))
        env.pop("HIP_PATH", None)
        r = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT, arch, str(out)], env=env,
                           capture_output=True, text=True, timeout=3600)
        if r.returncode == 3:
            pytest.skip(f"{arch}: {r.stdout.strip()}")
        assert r.returncode == 0, f"compiling for {arch} with ROCM_PATH={root} failed:\n{r.stderr[-4000:]}"
        objs = {src: (out / (src + ".co")).read_bytes() for src in sources}
    _CODE[arch] = objs
    return objs


# ---- the code object: .text and its function symbols ---------------------------------------

def text_of(elf: bytes):
    """(the code object, the vaddr of its .text, the bytes of .text)."""
    co = CodeObject(elf)
    start, end = co.text
    return co, start, co.read(start, end - start)


# ---- LLVM's view ---------------------------------------------------------------------------

def _normalise_llvm(text: str) -> str:
    """LLVM's mnemonic from its instruction text; VOPD pairs as 'v_dual_x::v_dual_y'. The LLVM 15
    of ROCm 5.4.2 prints gfx11's 32-bit VOPC with DPP without the "_dpp" it gives every other DPP
    instruction (`v_cmp_f_f32 vcc_lo, v1, v1 quad_perm:...`): added back here."""
    text = text.strip()
    if "::" in text:
        x, y = text.split("::", 1)
        return f"{x.split()[0]}::{y.split()[0]}"
    if not text:
        return ""
    mn = text.split()[0]
    if (mn.startswith("v_cmp") and not mn.endswith("_dpp") and "_e64" not in mn
            and re.search(r"\b(dpp8:|quad_perm:|row_|wave_|bound_ctrl)", text)):
        mn += "_dpp"
    return mn


_OBJDUMP_LINE = re.compile(r"^\s+(\S.*?)\s*//\s*([0-9A-Fa-f]+):((?: [0-9A-Fa-f]{8})+)\s*(?:<.*>)?$")


def objdump_instructions(arch: str, path: Path, objdump: str = OBJDUMP):
    """[(vaddr, size, mnemonic, text)] of `objdump`'s disassembly of .text, or None when that
    LLVM does not know `arch`."""
    r = subprocess.run([objdump, "-d", f"--mcpu={arch}", str(path)], capture_output=True, text=True)
    if "is not a recognized processor" in r.stderr:
        return None
    assert r.returncode == 0, f"{objdump} failed on {path}: {r.stderr[-2000:]}"
    out = []
    for line in r.stdout.splitlines():
        m = _OBJDUMP_LINE.match(line)
        if m:
            text, addr, words = m.groups()
            out.append((int(addr, 16), 4 * len(words.split()), _normalise_llvm(text), text))
    return out


class Comgr:
    """The disassembler of ROCm 5.4.2's libamd_comgr (AMD's LLVM 15), one instruction a call."""

    CDEFS = """
    typedef int amd_comgr_status_t;
    typedef struct { uint64_t handle; } amd_comgr_disassembly_info_t;
    amd_comgr_status_t amd_comgr_create_disassembly_info(const char *isa_name,
        uint64_t (*read_memory)(uint64_t, char *, uint64_t, void *),
        void (*print_instruction)(const char *, void *),
        void (*print_address_annotation)(uint64_t, void *),
        amd_comgr_disassembly_info_t *info);
    amd_comgr_status_t amd_comgr_disassemble_instruction(amd_comgr_disassembly_info_t info,
        uint64_t address, void *user_data, uint64_t *size);
    amd_comgr_status_t amd_comgr_destroy_disassembly_info(amd_comgr_disassembly_info_t info);
    """

    def __init__(self, root: Path, arch: str):
        import cffi
        self.ffi = ffi = cffi.FFI()
        ffi.cdef(self.CDEFS)
        self.lib = ffi.dlopen(str(root / "lib" / "libamd_comgr.so"))
        self.buf, self.text = b"", []

        @ffi.callback("uint64_t(uint64_t, char *, uint64_t, void *)")
        def read(addr, to, size, _user):
            n = max(0, min(size, len(self.buf) - addr))
            if n:
                ffi.memmove(to, self.buf[addr:addr + n], n)
            return n

        @ffi.callback("void(const char *, void *)")
        def printed(s, _user):
            self.text.append(ffi.string(s).decode())

        @ffi.callback("void(uint64_t, void *)")
        def annotation(_addr, _user):
            pass

        self._callbacks = (read, printed, annotation)
        self.info = ffi.new("amd_comgr_disassembly_info_t*")
        status = self.lib.amd_comgr_create_disassembly_info(
            f"amdgcn-amd-amdhsa--{arch}".encode(), read, printed, annotation, self.info)
        assert status == 0, f"comgr does not know {arch} (status {status})"
        self.size = ffi.new("uint64_t*")

    def disassemble(self, data: bytes):
        """(size, mnemonic, text) of the instruction at data[0:], or (None, '<invalid>', '')."""
        self.buf, self.text = data, []
        status = self.lib.amd_comgr_disassemble_instruction(self.info[0], 0, self.ffi.NULL, self.size)
        text = " ".join(t.strip() for t in self.text)
        if status != 0 or not text or text.split()[0] == "v_illegal":
            return None, "<invalid>", text
        return int(self.size[0]), _normalise_llvm(text), text

    def close(self):
        self.lib.amd_comgr_destroy_disassembly_info(self.info[0])


class LlvmC:
    """LLVM's C disassembler API (LLVMCreateDisasmCPU, LLVMDisasmInstruction) in a shared library
    that exports it: librocmllvm.so of rocm-llvm-python (AMD's LLVM 22), one instruction a call;
    `disassemble` as Comgr's."""

    def __init__(self, path: Path, arch: str):
        import ctypes
        self.ctypes = ctypes
        self.lib = lib = ctypes.CDLL(str(path))
        for part in ("TargetInfo", "TargetMC", "Disassembler"):
            getattr(lib, f"LLVMInitializeAMDGPU{part}")()
        lib.LLVMCreateDisasmCPU.restype = ctypes.c_void_p
        lib.LLVMCreateDisasmCPU.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int,
                                            ctypes.c_void_p, ctypes.c_void_p]
        lib.LLVMDisasmInstruction.restype = ctypes.c_size_t
        lib.LLVMDisasmInstruction.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_uint64,
                                              ctypes.c_char_p, ctypes.c_size_t]
        lib.LLVMDisasmDispose.argtypes = [ctypes.c_void_p]
        self.dc = lib.LLVMCreateDisasmCPU(b"amdgcn-amd-amdhsa", arch.encode(), None, 0, None, None)
        assert self.dc, f"{path} cannot disassemble {arch}"
        self.out = ctypes.create_string_buffer(512)

    def disassemble(self, data: bytes):
        """(size, mnemonic, text) of the instruction at data[0:], or (None, '<invalid>', '')."""
        size = self.lib.LLVMDisasmInstruction(self.dc, data, len(data), 0, self.out, len(self.out))
        text = self.out.value.decode().strip()
        if not size or not text or text.split()[0] == "v_illegal":
            return None, "<invalid>", text
        return int(size), _normalise_llvm(text), text

    def close(self):
        self.lib.LLVMDisasmDispose(self.dc)


def rocm_llvm_library():
    """librocmllvm.so under $TENSORLITE_ROCM_LLVM, or None."""
    base = os.environ.get(ROCM_LLVM_ENV)
    path = Path(os.path.expanduser(base)).joinpath(*ROCM_LLVM_LIB) if base else None
    return path if path is not None and path.is_file() else None


# ---- the cross-check -----------------------------------------------------------------------

def _ours(code, pos: int, arch: str, llvm: int = 19):
    """(size, mnemonic as LLVM `llvm` spells it) of our decode, or (None, 'BackendError: ...')."""
    try:
        inst = D.decode(code, pos, arch)
        return inst.size(), D.mnemonic(inst, llvm=llvm)
    except BackendError as e:
        return None, f"BackendError: {e}"


class Mismatches:
    def __init__(self, arch):
        self.arch, self.items, self.count, self.kinds = arch, [], 0, {}

    def add(self, source, co, vaddr, data, ours, llvm, text):
        self.count += 1
        key = ("BackendError" if ours[1].startswith("BackendError") else ours[1], llvm[1])
        self.kinds[key] = self.kinds.get(key, 0) + 1
        if len(self.items) < MAX_REPORTED:
            func = co.function_at(vaddr)
            kernel = f"{func}+{vaddr - co.symbols[func].vaddr:#x}" if func else "?"
            self.items.append(f"{source} {kernel} (vaddr {vaddr:#x}) bytes {data.hex(' ', 4)}: "
                              f"ours {ours[1]!r} ({ours[0]} bytes), LLVM {llvm[1]!r} ({llvm[0]} bytes): {text}")

    def check(self, total):
        if self.count:
            kinds = "; ".join(f"ours {o!r} vs LLVM {m!r}: {n}" for (o, m), n in
                              sorted(self.kinds.items(), key=lambda kv: -kv[1])[:20])
            pytest.fail(f"{self.arch}: {self.count} of {total} instructions decode differently from LLVM "
                        f"({kinds})\n" + "\n".join(self.items))


def crosscheck_objdump(arch, source, elf, ref, bad: Mismatches) -> int:
    co, text_addr, code = text_of(elf)
    assert ref, f"llvm-objdump printed no instructions for {source}"
    # LLVM's instructions tile .text (checked below); ours must start where each of LLVM's does
    # and have its length, so comparing at LLVM's offsets compares the two walks. After a
    # length mismatch this goes on at LLVM's next instruction, so one error does not cascade.
    prev_end = ref[0][0]
    for vaddr, size, mn, line in ref:
        assert vaddr == prev_end, f"{source}: LLVM skipped .text bytes at {prev_end:#x}"
        prev_end = vaddr + size
        pos = vaddr - text_addr
        ours = _ours(code, pos, arch)
        if ours != (size, mn):
            bad.add(source, co, vaddr, bytes(code[pos:pos + max(size, ours[0] or 0)]), ours, (size, mn), line)
    end = ref[-1][0] + ref[-1][1] - text_addr
    assert ref[0][0] == text_addr and end == len(code), \
        f"{source}: LLVM disassembled .text[{ref[0][0] - text_addr:#x}:{end:#x}] of {len(code):#x} bytes"
    return len(ref)


def crosscheck_comgr(arch, source, elf, dis, seen: dict, bad: Mismatches, version: int = 15) -> int:
    """Walk .text with our decoder; ask LLVM (`dis`: Comgr, or LlvmC with `version` 19, whose
    spellings LLVM 22's are) about each distinct instruction's bytes once (the bytes LLVM sees
    start with that instruction and run on with the code that follows it, so a longer LLVM
    decode shows as a length mismatch)."""
    co, text_addr, code = text_of(elf)
    pos, n = 0, 0
    while pos < len(code):
        ours = _ours(code, pos, arch, llvm=version)  # comgr 5.4.2 is AMD's LLVM 15
        key = bytes(code[pos:pos + (ours[0] or 4)])
        llvm = seen.get(key)
        if llvm is None:
            llvm = seen[key] = dis.disassemble(bytes(code[pos:pos + 16]))
        if ours != llvm[:2]:
            bad.add(source, co, text_addr + pos, bytes(code[pos:pos + max(ours[0] or 0, llvm[0] or 4)]),
                    ours, llvm[:2], llvm[2])
        pos += ours[0] or llvm[0] or 4
        n += 1
    return n


@pytest.mark.parametrize("arch", ARCHS)
def test_decode_matches_llvm(arch, tmp_path_factory, capsys):
    if shutil.which(OBJDUMP) is None:
        pytest.skip(f"{OBJDUMP} (Debian's llvm-14) is not installed")
    objs = code_objects(arch, tmp_path_factory.getbasetemp())
    tmp = tmp_path_factory.mktemp(f"dis-{arch}")
    paths = {}
    for src, elf in objs.items():
        paths[src] = tmp / (src + ".co")
        paths[src].write_bytes(elf)
    t0 = time.perf_counter()
    bad, total = Mismatches(arch), 0
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        refs = list(pool.map(lambda src: objdump_instructions(arch, paths[src]), list(objs)))
    if all(ref is not None for ref in refs):
        how = f"{OBJDUMP} --mcpu={arch}"
        for (src, elf), ref in zip(objs.items(), refs):
            total += crosscheck_objdump(arch, src, elf, ref, bad)
    else:
        root = _rocm542_root()
        if root is None or not (root / "lib" / "libamd_comgr.so").is_file():
            pytest.skip(f"LLVM 14 cannot disassemble {arch}, and ROCm 5.4.2's comgr (pytorch-triton-rocm) "
                        "is not installed")
        how = f"comgr ({root / 'lib' / 'libamd_comgr.so'}) for {arch}"
        dis, seen = Comgr(root, arch), {}
        try:
            for src, elf in objs.items():
                total += crosscheck_comgr(arch, src, elf, dis, seen, bad)
        finally:
            dis.close()
    took = time.perf_counter() - t0
    with capsys.disabled():
        print(f"\n[amdemu decode] {arch}: {total} instructions in {len(objs)} code objects checked "
              f"against {how} in {took:.1f} s")
    assert total > 0
    bad.check(total)


@pytest.mark.parametrize("arch", CLANG_ARCHS)
def test_decode_matches_llvm_clang(arch, tmp_path_factory, capsys):
    """clang-19's code objects against llvm-objdump-19 (gfx950's, from triton's LLVM, against
    rocm-llvm-python's LLVM 22): every instruction of every kernel."""
    if arch in RETARGET:
        lib = rocm_llvm_library()
        if lib is None:
            pytest.skip(f"LLVM 19 cannot disassemble {arch}; rocm-llvm-python's librocmllvm.so can, and "
                        f"{ROCM_LLVM_ENV} names no folder holding it")
        how = f"LLVM 22's C disassembler ({lib})"
    elif shutil.which(OBJDUMP_CLANG) is None:
        pytest.skip(f"{OBJDUMP_CLANG} (Debian's llvm-19) is not installed")
    else:
        how = f"{OBJDUMP_CLANG} --mcpu={arch}"
    objs = clang_code_objects(arch)
    tmp = tmp_path_factory.mktemp(f"dis-clang-{arch}")
    t0 = time.perf_counter()
    bad, total = Mismatches(arch), 0
    if arch in RETARGET:
        dis, seen = LlvmC(lib, arch), {}
        try:
            for src, elf in objs.items():
                total += crosscheck_comgr(arch, src, elf, dis, seen, bad, version=19)
        finally:
            dis.close()
    else:
        for src, elf in objs.items():
            path = tmp / (src + ".co")
            path.write_bytes(elf)
            ref = objdump_instructions(arch, path, OBJDUMP_CLANG)
            assert ref is not None, f"{OBJDUMP_CLANG} does not know {arch}"
            total += crosscheck_objdump(arch, src, elf, ref, bad)
    with capsys.disabled():
        print(f"\n[amdemu decode] {arch} (clang-19): {total} instructions in {len(objs)} code objects checked "
              f"against {how} in {time.perf_counter() - t0:.1f} s")
    assert total > 0
    bad.check(total)


# ---- every opcode of every format ----------------------------------------------------------

def _words(*dw):
    return b"".join(d.to_bytes(4, "little") for d in dw)


_V = lambda n: 256 + n  # noqa: E731 - a VGPR operand
# the 32-bit VOP encodings' first word per format (both families), and how many opcodes each has
_VOP32 = (("VOP1", lambda op: 0x7E000000 | op << 9, 256),
          ("VOP2", lambda op: op << 25 | 4 << 9, 64),
          ("VOPC", lambda op: 0x7C000000 | op << 17 | 4 << 9, 256))


def _sweep_shared():
    """The encodings gfx9 and gfx11 share: the scalar SOP formats and 32-bit VOP1/VOP2/VOPC."""
    T = {}
    for op in range(256):
        T[("SOP1", op)] = [_words(0xBE800000 | op << 8 | 2 << 16 | 4)]
    for op in range(0x60):
        T[("SOP2", op)] = [_words(0x80000000 | op << 23 | 2 << 16 | 6 << 8 | 4)]
    for op in range(0x20):
        T[("SOPK", op)] = [_words(0xB0000000 | op << 23 | 2 << 16 | 0x10)]
    for op in range(0x80):
        T[("SOPC", op)] = [_words(0xBF000000 | op << 16 | 6 << 8 | 4)]
        T[("SOPP", op)] = [_words(0xBF800000 | op << 16)]
    for space, word0, ops in _VOP32:
        for op in range(ops):
            T[(space, op)] = [_words(word0(op) | _V(2))]
    return T


def _sweep_cdna():
    """{(format, opcode): [candidate encodings]} for gfx9: LLVM insists that fields an
    instruction does not use are zero, so each opcode gets variants with operands zeroed."""
    V = _V
    T = _sweep_shared()
    for op in range(256):
        T[("SMEM", op)] = [_words(0xC0000000 | op << 18 | 1 << 17 | 4 << 6 | 2, 0x10), _words(0xC0000000 | op << 18, 0)]
        T[("DS", op)] = [_words(0xD8000000 | op << 17, 2 | d0 << 8 | d1 << 16 | vd << 24)
                         for vd in (8, 0) for d0 in (4, 0) for d1 in (6, 0)]
    # SDWA (src0 = 0xF9: sels DWORD) and DPP (src0 = 0xFA: quad_perm identity, all rows/banks)
    for space, word0, ops in _VOP32:
        for op in range(ops):
            T[(space + "_SDWA", op)] = [_words(word0(op) | 0xF9, 2 | 6 << 8 | 6 << 16 | 6 << 24),
                                        _words(word0(op) | 0xF9, 2 | 6 << 16 | 6 << 24)]
            T[(space + "_DPP", op)] = [_words(word0(op) | 0xFA, 0xFF00E402)]
    for op in range(0x380):  # 0x380.. is VOP3P's encoding
        T[("VOP3", op)] = [_words(0xD0000000 | op << 16, V(2) | s1 << 9 | s2 << 18)
                           for s2 in (V(8), 0) for s1 in (V(4), 0)]
    for op in range(128):
        T[("VOP3P", op)] = [_words(0xD3800000 | op << 16 | h2 << 14 | acc << 15, V(2) | V(4) << 9 | s2 << 18 | h << 27)
                            for acc in (0, 1) for s2 in (V(8), 0) for h2 in (1, 0) for h in (3, 0)]
        for seg, name in ((0, "FLAT"), (1, "SCRATCH"), (2, "GLOBAL")):
            T[(name, op)] = [_words(0xDC000000 | op << 18 | seg << 14, 2 | d << 8 | sa << 16 | vd << 24)
                             for sa in ((0, 0x7F) if seg else (0,)) for vd in (8, 0) for d in (4, 0)]
        T[("MUBUF", op)] = [_words(0xE0000000 | op << 18 | offen << 12, va | d << 8 | 1 << 16 | so << 24)
                            for offen, va in ((1, 2), (0, 0)) for d in (4, 0) for so in (0x80, 0)]
    return T


def _sweep_rdna3():
    V = _V
    T = _sweep_shared()
    for op in range(256):
        T[("DS", op)] = [_words(0xD8000000 | op << 18, 2 | d0 << 8 | d1 << 16 | vd << 24)
                         for vd in (8, 0) for d0 in (4, 0) for d1 in (6, 0)]
        T[("SMEM", op)] = [_words(0xF4000000 | op << 18 | 4 << 6 | 2, 0xF8000010),
                           _words(0xF4000000 | op << 18, 0xF8000000)]
    for op in range(0x80):
        T[("VOP3P", op)] = [_words(0xCC000000 | op << 16 | h2 << 14, V(2) | V(4) << 9 | s2 << 18 | h << 27)
                            for s2 in (V(8), 0) for h2 in (1, 0) for h in (3, 0)]
        for seg, name in ((0, "FLAT"), (1, "SCRATCH"), (2, "GLOBAL")):
            T[(name, op)] = [_words(0xDC000000 | op << 18 | seg << 16, 2 | d << 8 | sa << 16 | vd << 24)
                             for sa in ((0x7C, 0) if seg else (0x7C,)) for vd in (8, 0) for d in (4, 0)]
        T[("MUBUF", op)] = [_words(0xE0000000 | op << 18, va | d << 8 | 1 << 16 | so << 24 | offen << 22)
                            for offen, va in ((1, 2), (0, 0)) for d in (4, 0) for so in (0x80, 0x7C)]
    for op in range(0x400):
        T[("VOP3", op)] = [_words(0xD4000000 | op << 16, V(2) | s1 << 9 | s2 << 18)
                           for s2 in (V(8), 0) for s1 in (V(4), 0)]
    # DPP16 (src0 = 0xFA: quad_perm identity, all rows/banks) and DPP8 (src0 = 0xE9, 0xEA with FI)
    dpp16, dpp8 = 0xFF00E402, 0x00FAC688 | 2
    for space, word0, ops in _VOP32:
        for op in range(ops):
            T[(space + "_DPP16", op)] = [_words(word0(op) | 0xFA, dpp16)]
            T[(space + "_DPP8", op)] = [_words(word0(op) | m, dpp8) for m in (0xE9, 0xEA)]
    for op in range(0x400):
        T[("VOP3_DPP16", op)] = [_words(0xD4000000 | op << 16, 0xFA | s1 << 9 | s2 << 18, dpp16)
                                 for s2 in (V(8), 0) for s1 in (V(4), 0)]
        T[("VOP3_DPP8", op)] = [_words(0xD4000000 | op << 16, 0xE9 | s1 << 9 | s2 << 18, dpp8)
                                for s2 in (V(8), 0) for s1 in (V(4), 0)]
    return T


def _llvm_mc_sweep(arch, cands):
    """{encoding: (size, mnemonic, text)} for those of `cands` llvm-mc-14 decodes; each line is
    followed by two s_nop markers so a line's output can be told from the next one's."""
    marks = _words(0xBF800005, 0xBF800006)
    inp = "\n".join(" ".join(f"0x{b:02x}" for b in c + marks) for c in cands) + "\n"
    r = subprocess.run(["llvm-mc-14", "--disassemble", "-arch=amdgcn", f"-mcpu={arch}"],
                       input=inp, capture_output=True, text=True)
    invalid = {int(m.group(1)) - 1 for m in re.finditer(r"<stdin>:(\d+):\d+: warning: invalid instruction encoding",
                                                        r.stderr)}
    groups, cur = [], []
    for line in r.stdout.splitlines():
        line = line.strip()
        if not line or line.startswith("."):
            continue
        if line == "s_nop 6":
            groups.append(cur)
            cur = []
        elif line != "s_nop 5":
            cur.append(line)
    assert len(groups) == len(cands), "llvm-mc-14's output does not line up with its input"
    return {c: (None, _normalise_llvm(g[0]), g[0]) for i, (c, g) in enumerate(zip(cands, groups))
            if i not in invalid and g}


@pytest.mark.parametrize("arch", ARCHS + ("gfx1101", "gfx1102", "gfx1103", "gfx950"))
def test_opcode_sweep(arch):
    """Wherever LLVM decodes an opcode's instruction word, we decode the same instruction (or
    refuse with a BackendError that names LLVM's mnemonic)."""
    table = _sweep_cdna() if D.family(arch) == "cdna" else _sweep_rdna3()
    cands = [c for cs in table.values() for c in cs]
    root = _rocm542_root()
    if arch in RETARGET and rocm_llvm_library() is None:
        pytest.skip(f"only rocm-llvm-python's librocmllvm.so here disassembles {arch}; {ROCM_LLVM_ENV} names none")
    if arch in RETARGET or (shutil.which("llvm-mc-14") is None or not llvm14_knows_mc(arch)) and \
            root is not None and (root / "lib" / "libamd_comgr.so").is_file():
        llvm = 19 if arch in RETARGET else 15
        dis = LlvmC(rocm_llvm_library(), arch) if arch in RETARGET else Comgr(root, arch)
        ref = {}
        try:
            pad = _words(0xBF800005) * 4  # literal-taking instructions read the next dword
            for c in cands:
                size, mn, text = dis.disassemble(c + pad)
                if size in (len(c), len(c) + 4):
                    ref[c] = (size, mn, text)
        finally:
            dis.close()
    elif shutil.which("llvm-mc-14") and llvm14_knows_mc(arch):
        ref, llvm = _llvm_mc_sweep(arch, cands), 14
    else:
        pytest.skip(f"neither llvm-mc-14 nor ROCm 5.4.2's comgr can disassemble {arch}")
    bad, checked = [], 0
    for key, cs in table.items():
        c = next((c for c in cs if c in ref), None)
        if c is None:
            continue
        size, mn, text = ref[c]
        if "_" in key[0] and not mn.endswith(("_sdwa", "_dpp")):
            continue  # LLVM: this opcode has no SDWA/DPP form (it reads the word as the plain one)
        checked += 1
        try:
            inst = D.decode(c + bytes(16), 0, arch)
            ours = D.mnemonic(inst, llvm=llvm)
            if ours != mn or (size is not None and inst.size() != size):
                bad.append(f"{key[0]} opcode {key[1]:#x} ({c.hex(' ', 4)}): ours {ours!r} ({inst.size()} bytes), "
                           f"LLVM {mn!r} ({size} bytes): {text}")
        except BackendError as e:
            if mn not in str(e):
                bad.append(f"{key[0]} opcode {key[1]:#x} ({c.hex(' ', 4)}): ours refused ({e}), LLVM {text!r}")
    assert checked > 500, f"LLVM decoded only {checked} opcodes: the sweep's encodings are off"
    assert not bad, f"{arch}: {len(bad)} of {checked} opcodes decode differently from LLVM:\n" + "\n".join(bad)


def llvm14_knows_mc(arch: str) -> bool:
    r = subprocess.run(["llvm-mc-14", "--disassemble", "-arch=amdgcn", f"-mcpu={arch}"],
                       input="0x00 0x00 0x80 0xbf\n", capture_output=True, text=True)
    return r.returncode == 0 and "is not a recognized processor" not in r.stderr


# ---- the API -------------------------------------------------------------------------------

def test_family_and_unsupported_arch():
    assert D.family("gfx90a") == "cdna" and D.family("gfx940") == "cdna"
    assert D.family("gfx1100") == "rdna3" and D.family("gfx90a:sramecc+:xnack-") == "cdna"
    assert (D.family("gfx942"), D.family("gfx1151"), D.family("gfx1201")) == ("cdna", "rdna3", "rdna4")
    assert D.family("gfx950") == "cdna"  # CDNA4: the tables' own ISA
    for bad in ("gfx906", "gfx1030", "sm_90", "gfx908"):
        with pytest.raises(BackendError, match=bad):
            D.family(bad)
        with pytest.raises(BackendError):
            D.decode(b"\0\0\x80\xbf", 0, bad)


def test_decode_basics():
    # s_nop 0; v_mov_b32 with a literal; v_mfma of gfx90a's bf16_1k (remapped); v_mac_f32 (legacy)
    code = bytes.fromhex("000080bf" "ff02047effffff00" "0080e7d3040d0202" "ff06042c0000804f")
    seq = []
    pos = 0
    while pos < len(code):
        inst = D.decode(code, pos, "gfx90a")
        seq.append((pos, inst.size(), D.mnemonic(inst)))
        pos += inst.size()
    assert seq == [(0, 4, "s_nop"), (4, 8, "v_mov_b32_e32"), (12, 8, "v_mfma_f32_16x16x16bf16_1k"),
                   (20, 8, "v_mac_f32_e32")]
    lit = D.decode(code, 4, "gfx90a")
    assert type(lit).__name__ == "VOP1_LIT" and lit._literal == 0xFFFFFF
    mfma = D.decode(code, 12, "gfx90a")
    assert mfma.op.name == "V_MFMA_F32_16X16X16_BF16" and mfma.raw_op == 0x67
    mac = D.decode(memoryview(code), 20, "gfx90a")
    assert mac.op is D.LegacyOp.V_MAC_F32_E32 and mac._literal == 0x4F800000
    assert D.legacy_pcode(mac.op) == "D0.f32 = S0.f32 * S1.f32 + D0.f32"
    # the same bytes mean other instructions on gfx940 (bf16_1k's opcode is unused there)
    with pytest.raises(BackendError, match="gfx940"):
        D.decode(code, 12, "gfx940")
    # refused: gfx90a's i8 MFMA whose opcode is an f16 MFMA on CDNA4
    with pytest.raises(BackendError, match="v_mfma_i32_32x32x8i8"):
        D.decode(bytes.fromhex("0040d4d30209221c"), 0, "gfx90a")
    # truncated code
    with pytest.raises(BackendError, match="needs 8 bytes"):
        D.decode(code[:8], 4, "gfx90a")
    # VOP2 0x18 with a literal: v_madak_f32 (multiply, round, add) on gfx90a, v_fmaak_f32 (fused) on gfx940
    madak = bytes.fromhex("02090030" "0000803f")
    assert D.decode(madak, 0, "gfx90a").op is D.LegacyOp.V_MADAK_F32
    assert D.mnemonic(D.decode(madak, 0, "gfx90a")) == "v_madak_f32"
    assert D.decode(madak, 0, "gfx940").op.name == "V_FMAAK_F32_E32"
    assert D.mnemonic(D.decode(madak, 0, "gfx940")) == "v_fmaak_f32"
    # VOP3P 0x20: gfx9's fused v_fma_mix_f32, not CDNA4's unfused V_MAD_MIX_F32
    mix = D.decode(bytes.fromhex("0000a0d3" "02092204"), 0, "gfx940")
    assert mix.op is D.LegacyOp.V_FMA_MIX_F32 and "fma(" in D.legacy_pcode(mix.op)


def test_decode_rdna3_dpp():
    # DPP8 (src0 = 233): tinygrad alone reads it as a 4-byte v_mov_b32_e32 with operand "DPP8"
    dpp8 = D.decode(bytes.fromhex("e902007e" "89c6fa00"), 0, "gfx1100")
    assert (type(dpp8).__name__, dpp8.size(), D.mnemonic(dpp8)) == ("VOP1_DPP8", 8, "v_mov_b32_dpp")
    vop3 = D.decode(bytes.fromhex("000003d5" "e9040000" "89c6fa00"), 0, "gfx1100")
    assert (type(vop3).__name__, vop3.size(), D.mnemonic(vop3)) == ("VOP3_DPP8", 12, "v_add_f32_e64_dpp")
    # a VOPC in VOP3 encoding with DPP: the tables have no such class, so decode refuses it
    with pytest.raises(BackendError, match="v_cmp_f_f16_e64_dpp"):
        D.decode(bytes.fromhex("000000d4" "fa080200" "02e400ff"), 0, "gfx1100")
    # garbage is a BackendError, never another exception
    with pytest.raises(BackendError):
        D.decode(bytes.fromhex("0000e0cb" "ffffffff"), 0, "gfx1100")


def test_missing_tinygrad_is_backend_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "tinygrad.renderer.amd", None)  # makes the import fail
    monkeypatch.setattr(D, "_TABLES", {})
    monkeypatch.setattr(D, "_DECODERS", {})
    with pytest.raises(BackendUnavailable, match=r"pip install tinygrad==0\.14\.0"):
        D.decode(b"\0\0\x80\xbf", 0, "gfx90a")
