"""AMD HSA code objects (the ELF images hiprtc produces) read for the emulated platform:
the kernel descriptors, the AMDGPU metadata note, the symbols and a loadable memory image.

Layouts and rules follow LLVM's "User Guide for AMDGPU Backend" (AMDGPUUsage); comments
name the section or table each comes from. Code object v3 and later are read (the msgpack
metadata note and the 64-byte kernel descriptor); v2's YAML note and amd_kernel_code_t
are refused. Every field decoded here was checked against llvm-readelf's view of this
project's own code objects (tests/test_amdemu_codeobject.py keeps checking the ones that
can drift: sizes, entry points, user SGPR counts).
"""
from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass
from typing import NamedTuple

from tensorlite.errors import BackendError

__all__ = ["msgpack_decode", "ArchTraits", "arch_traits", "KernelDescriptor", "KernelInfo", "CodeObject",
           "Symbol", "Segment", "Relocation", "apply_relocations"]


# ---- msgpack (the subset the AMDGPU metadata note uses) ------------------------------------

_MSGPACK_SCALARS = {0xCA: "f", 0xCB: "d", 0xCC: "B", 0xCD: "H", 0xCE: "I", 0xCF: "Q",
                    0xD0: "b", 0xD1: "h", 0xD2: "i", 0xD3: "q"}
_MSGPACK_LENGTHS = {0xC4: "B", 0xC5: "H", 0xC6: "I",   # bin 8/16/32 -> bytes
                    0xD9: "B", 0xDA: "H", 0xDB: "I"}   # str 8/16/32 -> str
_MSGPACK_CONTAINERS = {0xDC: ("H", False), 0xDD: ("I", False), 0xDE: ("H", True), 0xDF: ("I", True)}
_MSGPACK_CONSTANTS = {0xC0: None, 0xC2: False, 0xC3: True}


def msgpack_decode(buf: bytes, pos: int = 0):
    """Decode one msgpack value at `pos`; returns (value, position after it).

    Maps become dicts, arrays lists, str str, bin bytes. Extension types and the reserved
    byte 0xC1 raise ValueError: the metadata note never uses them."""
    b = buf[pos]
    pos += 1

    def take(fmt):
        return struct.unpack_from(">" + fmt, buf, pos)[0], pos + struct.calcsize(fmt)

    def sequence(n, p, is_map):
        items = []
        for _ in range(2 * n if is_map else n):
            v, p = msgpack_decode(buf, p)
            items.append(v)
        return (dict(zip(items[::2], items[1::2])) if is_map else items), p

    if b <= 0x7F:                      # positive fixint
        return b, pos
    if b >= 0xE0:                      # negative fixint
        return b - 0x100, pos
    if b <= 0x8F:                      # fixmap
        return sequence(b & 0x0F, pos, True)
    if b <= 0x9F:                      # fixarray
        return sequence(b & 0x0F, pos, False)
    if b <= 0xBF:                      # fixstr
        n = b & 0x1F
        return bytes(buf[pos:pos + n]).decode(), pos + n
    if b in _MSGPACK_CONSTANTS:
        return _MSGPACK_CONSTANTS[b], pos
    if b in _MSGPACK_SCALARS:
        return take(_MSGPACK_SCALARS[b])
    if b in _MSGPACK_LENGTHS:
        n, pos = take(_MSGPACK_LENGTHS[b])
        raw = bytes(buf[pos:pos + n])
        return (raw.decode() if b >= 0xD9 else raw), pos + n
    if b in _MSGPACK_CONTAINERS:
        fmt, is_map = _MSGPACK_CONTAINERS[b]
        n, pos = take(fmt)
        return sequence(n, pos, is_map)
    raise ValueError(f"msgpack: unsupported type byte 0x{b:02x} at {pos - 1}")


# ---- targets ----------------------------------------------------------------------------

# EF_AMDGPU_MACH values (AMDGPUUsage "AMDGPU ELF Header", table "AMDGPU EF_AMDGPU_MACH
# Values"); gfx90a (0x3f), gfx940 (0x40), gfx942, gfx1151, gfx1201 seen in this project's code objects.
EF_AMDGPU_MACH = 0x0FF
_MACHS = {0x036: "gfx1030", 0x03F: "gfx90a", 0x040: "gfx940", 0x041: "gfx1100", 0x046: "gfx1101",
          0x047: "gfx1102", 0x048: "gfx1200", 0x04A: "gfx1151", 0x04B: "gfx941", 0x04C: "gfx942",
          0x04E: "gfx1201", 0x04F: "gfx950"}
# Code object v4+ feature fields of e_flags (same table): xnack 0x300, sramecc 0xc00.
_FEATURE_FIELDS = {"xnack": 8, "sramecc": 10}
_FEATURE_SETTINGS = ("unsupported", "any", "off", "on")


class ArchTraits(NamedTuple):
    """What a processor's code objects assume of it (AMDGPUUsage "Processors" table,
    column "Target Properties", and the compute_pgm_rsrc tables)."""
    major: int                        # 9 for gfx90a/gfx94x/gfx950, 10 for gfx10xx, 11 for gfx11xx
    unified_vgpr_file: bool           # VGPRs and AGPRs in one file; rsrc3 = ACCUM_OFFSET, TG_SPLIT
    architected_flat_scratch: bool    # no private segment buffer; CP sets FLAT_SCRATCH itself
    packed_workitem_ids: bool         # work-item ids x|y<<10|z<<20 in VGPR0, not v0, v1, v2
    lds_bytes: int = 64 * 1024        # LDS a workgroup may allocate (AMDGPUUsage "Memory Spaces")


def arch_traits(arch: str) -> ArchTraits:
    """Traits of a processor named gfx<major><minor><stepping> (minor and stepping one hex
    digit each), for the processors in the EF_AMDGPU_MACH map."""
    if arch not in _MACHS.values():
        raise BackendError(f"no AMDGPU target traits known for {arch!r} (known: {sorted(_MACHS.values())})")
    major = int(arch[3:-2])
    cdna3 = major == 9 and arch[-2] in "45"  # gfx94x (CDNA3) and gfx950 (CDNA4), which builds on it
    return ArchTraits(major=major, unified_vgpr_file=arch == "gfx90a" or cdna3,
                      architected_flat_scratch=cdna3 or major >= 11,
                      packed_workitem_ids=arch == "gfx90a" or cdna3 or major >= 11,
                      lds_bytes=160 * 1024 if arch == "gfx950" else 64 * 1024)


# ---- kernel descriptor ------------------------------------------------------------------

# AMDGPUUsage "Code Object V3 Kernel Descriptor": 64 bytes, little endian; the reserved
# bytes (12, 24..43, 60..63) are skipped.
_KD = struct.Struct("<III4xq20xIIIHH4x")
_KD_WORDS = ("group_segment_fixed_size", "private_segment_fixed_size", "kernarg_size",
             "kernel_code_entry_byte_offset", "compute_pgm_rsrc3", "compute_pgm_rsrc1", "compute_pgm_rsrc2",
             "kernel_code_properties", "kernarg_preload")

# (attribute, word, first bit, width); names are the doc's field names in lower case.
_KD_FIELDS = (
    # kernel_code_properties (descriptor bits 448-463)
    ("enable_sgpr_private_segment_buffer", "kernel_code_properties", 0, 1),
    ("enable_sgpr_dispatch_ptr", "kernel_code_properties", 1, 1),
    ("enable_sgpr_queue_ptr", "kernel_code_properties", 2, 1),
    ("enable_sgpr_kernarg_segment_ptr", "kernel_code_properties", 3, 1),
    ("enable_sgpr_dispatch_id", "kernel_code_properties", 4, 1),
    ("enable_sgpr_flat_scratch_init", "kernel_code_properties", 5, 1),
    ("enable_sgpr_private_segment_size", "kernel_code_properties", 6, 1),
    ("enable_wavefront_size32", "kernel_code_properties", 10, 1),   # GFX10+
    ("uses_dynamic_stack", "kernel_code_properties", 11, 1),        # set by code object v5+ only
    # kernarg_preload (descriptor bits 464-479; GFX90A, GFX940)
    ("kernarg_preload_spec_length", "kernarg_preload", 0, 7),
    ("kernarg_preload_spec_offset", "kernarg_preload", 7, 9),
    # table "compute_pgm_rsrc1 for GFX6-GFX12"
    ("granulated_workitem_vgpr_count", "compute_pgm_rsrc1", 0, 6),
    ("granulated_wavefront_sgpr_count", "compute_pgm_rsrc1", 6, 4),
    ("priority", "compute_pgm_rsrc1", 10, 2),
    ("float_round_mode_32", "compute_pgm_rsrc1", 12, 2),
    ("float_round_mode_16_64", "compute_pgm_rsrc1", 14, 2),
    ("float_denorm_mode_32", "compute_pgm_rsrc1", 16, 2),      # 0 flush src+dst ... 3 no flush
    ("float_denorm_mode_16_64", "compute_pgm_rsrc1", 18, 2),
    ("priv", "compute_pgm_rsrc1", 20, 1),
    ("enable_dx10_clamp", "compute_pgm_rsrc1", 21, 1),
    ("debug_mode", "compute_pgm_rsrc1", 22, 1),
    ("enable_ieee_mode", "compute_pgm_rsrc1", 23, 1),
    ("bulky", "compute_pgm_rsrc1", 24, 1),
    ("cdbg_user", "compute_pgm_rsrc1", 25, 1),
    ("fp16_ovfl", "compute_pgm_rsrc1", 26, 1),                 # GFX9+
    ("wgp_mode", "compute_pgm_rsrc1", 29, 1),                  # GFX10+ (reserved, 0, before)
    ("mem_ordered", "compute_pgm_rsrc1", 30, 1),               # GFX10+
    ("fwd_progress", "compute_pgm_rsrc1", 31, 1),              # GFX10+
    # table "compute_pgm_rsrc2 for GFX6-GFX12"
    ("enable_private_segment", "compute_pgm_rsrc2", 0, 1),
    ("user_sgpr_count", "compute_pgm_rsrc2", 1, 5),
    ("enable_trap_handler", "compute_pgm_rsrc2", 6, 1),
    ("enable_sgpr_workgroup_id_x", "compute_pgm_rsrc2", 7, 1),
    ("enable_sgpr_workgroup_id_y", "compute_pgm_rsrc2", 8, 1),
    ("enable_sgpr_workgroup_id_z", "compute_pgm_rsrc2", 9, 1),
    ("enable_sgpr_workgroup_info", "compute_pgm_rsrc2", 10, 1),
    ("enable_vgpr_workitem_id", "compute_pgm_rsrc2", 11, 2),   # 0 x, 1 x,y, 2 x,y,z
    ("enable_exception_address_watch", "compute_pgm_rsrc2", 13, 1),
    ("enable_exception_memory", "compute_pgm_rsrc2", 14, 1),
    ("granulated_lds_size", "compute_pgm_rsrc2", 15, 9),       # must be 0: CP uses the packet's
    ("enable_exception_ieee_754_fp_invalid_operation", "compute_pgm_rsrc2", 24, 1),
    ("enable_exception_fp_denormal_source", "compute_pgm_rsrc2", 25, 1),
    ("enable_exception_ieee_754_fp_division_by_zero", "compute_pgm_rsrc2", 26, 1),
    ("enable_exception_ieee_754_fp_overflow", "compute_pgm_rsrc2", 27, 1),
    ("enable_exception_ieee_754_fp_underflow", "compute_pgm_rsrc2", 28, 1),
    ("enable_exception_ieee_754_fp_inexact", "compute_pgm_rsrc2", 29, 1),
    ("enable_exception_int_divide_by_zero", "compute_pgm_rsrc2", 30, 1),
)
# compute_pgm_rsrc3 means different things per family; fields of the other family are None.
_RSRC3_UNIFIED = (   # table "compute_pgm_rsrc3 for GFX90A, GFX940"
    ("granulated_accum_offset", "compute_pgm_rsrc3", 0, 6),
    ("tg_split", "compute_pgm_rsrc3", 16, 1),
)
_RSRC3_GFX10_11 = (  # table "compute_pgm_rsrc3 for GFX10-GFX11" (all but the first reserved on GFX10)
    ("shared_vgpr_count", "compute_pgm_rsrc3", 0, 4),
    ("inst_pref_size", "compute_pgm_rsrc3", 4, 6),
    ("trap_on_start", "compute_pgm_rsrc3", 10, 1),
    ("trap_on_end", "compute_pgm_rsrc3", 11, 1),
    ("image_op", "compute_pgm_rsrc3", 31, 1),
)

# AMDGPUUsage "Initial Kernel Execution State", table "SGPR Register Set Up Order": the
# user SGPRs in order, with their enable bit and size; enabled ones are dense from s0.
_USER_SGPRS = (("private_segment_buffer", 4), ("dispatch_ptr", 2), ("queue_ptr", 2),
               ("kernarg_segment_ptr", 2), ("dispatch_id", 2), ("flat_scratch_init", 2),
               ("private_segment_size", 1))


class KernelDescriptor:
    """The 64-byte kernel descriptor `<kernel>.kd` decoded for the processor `arch`.

    The raw words keep the doc's names (`compute_pgm_rsrc1`, `kernel_code_properties`, ...);
    every bit field of them is an attribute named after its doc field in lower case
    (`enable_sgpr_dispatch_ptr`, `user_sgpr_count`, `float_denorm_mode_32`, ...).
    `address` is the descriptor's own virtual address, which the entry offset is relative to.
    """
    SIZE = _KD.size
    __slots__ = ("arch", "address", *_KD_WORDS,
                 *(f[0] for f in _KD_FIELDS + _RSRC3_UNIFIED + _RSRC3_GFX10_11))

    def __init__(self, raw: bytes, address: int, arch: str):
        if len(raw) != self.SIZE:
            raise BackendError(f"kernel descriptor at 0x{address:x}: {len(raw)} bytes, expected {self.SIZE}")
        traits = arch_traits(arch)
        self.arch, self.address = arch, address
        for name, value in zip(_KD_WORDS, _KD.unpack(raw)):
            setattr(self, name, value)
        for name, *_bits in _RSRC3_UNIFIED + _RSRC3_GFX10_11:
            setattr(self, name, None)
        rsrc3 = _RSRC3_UNIFIED if traits.unified_vgpr_file else _RSRC3_GFX10_11 if traits.major >= 10 else ()
        for name, word, shift, width in _KD_FIELDS + rsrc3:
            setattr(self, name, (getattr(self, word) >> shift) & ((1 << width) - 1))

    def __repr__(self):
        fields = ", ".join(f"{f[0]}={getattr(self, f[0])}" for f in _KD_FIELDS + _RSRC3_UNIFIED + _RSRC3_GFX10_11
                           if getattr(self, f[0]))
        return (f"KernelDescriptor({self.arch} @0x{self.address:x} -> entry 0x{self.entry:x}, "
                f"lds={self.group_segment_fixed_size}, scratch={self.private_segment_fixed_size}, "
                f"kernarg={self.kernarg_size}, {fields})")

    @property
    def entry(self) -> int:
        """Virtual address of the kernel's first instruction."""
        return self.address + self.kernel_code_entry_byte_offset

    @property
    def wavefront_size(self) -> int:
        return 32 if self.enable_wavefront_size32 else 64

    @property
    def vgpr_alloc_count(self) -> int:
        """VGPRs a wave of this kernel gets: (GRANULATED_WORKITEM_VGPR_COUNT + 1) x granule.

        Granule per the rsrc1 table: 8 on GFX90A/GFX940 (the count covers the unified file,
        align(arch VGPRs, 4) + AGPRs), 8 on GFX10-GFX11 in wave32, 4 in wave64 and on
        other GFX9. This is the encoding granule, so the count covers every register the
        code names; hardware may round its allocation up further."""
        traits = arch_traits(self.arch)
        granule = 8 if traits.unified_vgpr_file or (traits.major >= 10 and self.enable_wavefront_size32) else 4
        return (self.granulated_workitem_vgpr_count + 1) * granule

    @property
    def accum_offset(self) -> int | None:
        """Index of AGPR0 in the unified register file (ACCUM_OFFSET: (value + 1) * 4);
        None where there is no unified file."""
        return None if self.granulated_accum_offset is None else (self.granulated_accum_offset + 1) * 4

    @property
    def sgpr_alloc_count(self) -> int:
        """SGPRs a wave gets, VCC, FLAT_SCRATCH and XNACK_MASK included (rsrc1 table,
        GRANULATED_WAVEFRONT_SGPR_COUNT). GFX9: the doc encodes 2 * (ceil(n / 16) - 1) and
        LLVM writes ceil(n / 8) - 1; (field // 2 + 1) * 16 covers n either way. GFX10+:
        128, always; the doc reserves the field there, though LLVM 15 still fills it in."""
        if arch_traits(self.arch).major >= 10:
            return 128
        return (self.granulated_wavefront_sgpr_count // 2 + 1) * 16

    def user_sgpr_layout(self) -> tuple:
        """((name, first SGPR, count), ...) of the user SGPRs this kernel enables, in the
        order CP writes them from s0 (table "SGPR Register Set Up Order")."""
        if self.kernarg_preload_spec_length:
            # The set-up order table puts preloaded kernargs before Private Segment Size,
            # "Preloaded Kernel Arguments" after the last other user SGPR: no guess here.
            raise BackendError(f"kernel descriptor at 0x{self.address:x} preloads "
                               f"{self.kernarg_preload_spec_length} kernarg dwords into SGPRs: not supported")
        layout, sgpr = [], 0
        for name, count in _USER_SGPRS:
            if getattr(self, f"enable_sgpr_{name}"):
                layout.append((name, sgpr, count))
                sgpr += count
        return tuple(layout)

    @property
    def user_sgprs_enabled(self) -> int:
        """User SGPRs the enable bits and the kernarg preload ask for. USER_SGPR_COUNT must
        be at least this, and is more on GFX11 in wave32: LLVM pads it until user and system
        SGPRs make 16 (its UserSGPRInit16Bug), so the system SGPRs move up with it."""
        return (sum(count for name, count in _USER_SGPRS if getattr(self, f"enable_sgpr_{name}"))
                + self.kernarg_preload_spec_length)

    def system_sgpr_layout(self) -> tuple:
        """((name, SGPR), ...) of the system SGPRs, dense from s[USER_SGPR_COUNT] (same
        table; not from the last enabled user SGPR, see user_sgprs_enabled). The scratch
        wavefront offset is only given where scratch is not architected: there CP sets
        FLAT_SCRATCH instead (rsrc2 ENABLE_PRIVATE_SEGMENT)."""
        names = [f"workgroup_id_{d}" for d in "xyz" if getattr(self, f"enable_sgpr_workgroup_id_{d}")]
        if self.enable_sgpr_workgroup_info:
            names.append("workgroup_info")
        if self.enable_private_segment and not arch_traits(self.arch).architected_flat_scratch:
            names.append("private_segment_wavefront_offset")
        return tuple((name, self.user_sgpr_count + i) for i, name in enumerate(names))


# ---- metadata ---------------------------------------------------------------------------

@dataclass(frozen=True)
class KernelInfo:
    """One kernel: its descriptor and its entry of the metadata's `amdhsa.kernels` (AMDGPUUsage
    "Code Object V3 Metadata" and later, table "AMDHSA Code Object V3 Kernel Metadata Map").
    `args` are the metadata's argument maps with the leading dots dropped from their keys
    (offset, size, value_kind, and name, address_space... where present); `meta` is the raw map."""
    name: str
    symbol: str
    descriptor: KernelDescriptor
    args: tuple
    kernarg_segment_size: int
    kernarg_segment_align: int
    wavefront_size: int
    group_segment_fixed_size: int
    private_segment_fixed_size: int
    sgpr_count: int
    vgpr_count: int
    agpr_count: int | None
    max_flat_workgroup_size: int
    uses_dynamic_stack: bool | None
    meta: dict

    _REQUIRED = (".name", ".symbol", ".kernarg_segment_size", ".kernarg_segment_align", ".wavefront_size",
                 ".group_segment_fixed_size", ".private_segment_fixed_size", ".sgpr_count", ".vgpr_count",
                 ".max_flat_workgroup_size")

    @classmethod
    def from_metadata(cls, meta: dict, descriptor: KernelDescriptor) -> "KernelInfo":
        missing = [k for k in cls._REQUIRED if k not in meta]
        if missing:
            raise BackendError(f"AMDGPU metadata of kernel {meta.get('.name', '?')!r} lacks {missing}")
        args = tuple({k.lstrip("."): v for k, v in a.items()} for a in meta.get(".args", ()))
        for a in args:
            if not {"offset", "size", "value_kind"} <= a.keys():
                raise BackendError(f"kernel {meta['.name']!r}: argument without offset/size/value_kind: {a}")
        fields = {k[1:]: meta[k] for k in cls._REQUIRED}
        return cls(descriptor=descriptor, args=args, agpr_count=meta.get(".agpr_count"),
                   uses_dynamic_stack=meta.get(".uses_dynamic_stack"), meta=meta, **fields)

    @property
    def hidden_args(self) -> tuple:
        """Arguments the runtime fills in (value_kind hidden_*: global offsets, block counts,
        group sizes, hostcall buffer, ...); code object v4+ lists only those the kernel uses."""
        return tuple(a for a in self.args if a["value_kind"].startswith("hidden_"))

    @property
    def explicit_args(self) -> tuple:
        """The arguments of the kernel's signature, in kernarg order."""
        return tuple(a for a in self.args if not a["value_kind"].startswith("hidden_"))


# ---- ELF --------------------------------------------------------------------------------

# ELF64 structures (System V gABI) and the AMDGPU values of AMDGPUUsage "ELF Code Object".
_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_RELA = struct.Struct("<QQq")
_NHDR = struct.Struct("<III")
EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64
ET_DYN = 3
PT_LOAD = 1
SHT_SYMTAB, SHT_RELA, SHT_NOTE, SHT_REL, SHT_DYNSYM = 2, 4, 7, 9, 11
SHF_ALLOC = 0x2
SHN_UNDEF = 0
_SYMBOL_TYPES = {1: "OBJECT", 2: "FUNC"}
NT_AMDGPU_METADATA = 32
# EI_ABIVERSION under ELFOSABI_AMDGPU_HSA -> code object version ("AMDGPU ELF Header")
_ABI_VERSIONS = {1: 3, 2: 4, 3: 5, 4: 6}
# amdhsa.version of each code object version's note; v6 keeps v5's [1, 2] (LLVM's
# AMDGPUMetadata.h: VersionMinorV6 = 2), so only the ELF header tells v5 from v6.
_METADATA_VERSIONS = {3: [1, 0], 4: [1, 1], 5: [1, 2], 6: [1, 2]}
# AMDGPUUsage "Relocation Records" (numbers as in LLVM's ELFRelocs/AMDGPU.def)
R_AMDGPU_NONE, R_AMDGPU_ABS64, R_AMDGPU_RELATIVE64 = 0, 3, 13
_RELOCATION_NAMES = {0: "R_AMDGPU_NONE", 1: "R_AMDGPU_ABS32_LO", 2: "R_AMDGPU_ABS32_HI", 3: "R_AMDGPU_ABS64",
                     4: "R_AMDGPU_REL32", 5: "R_AMDGPU_REL64", 6: "R_AMDGPU_ABS32", 7: "R_AMDGPU_GOTPCREL",
                     8: "R_AMDGPU_GOTPCREL32_LO", 9: "R_AMDGPU_GOTPCREL32_HI", 10: "R_AMDGPU_REL32_LO",
                     11: "R_AMDGPU_REL32_HI", 13: "R_AMDGPU_RELATIVE64", 14: "R_AMDGPU_REL16"}


class Symbol(NamedTuple):
    vaddr: int
    size: int
    type: str          # "FUNC" or "OBJECT"


class Segment(NamedTuple):
    """A PT_LOAD program header: `filesz` bytes from `offset` at `vaddr`, zeros up to `memsz`."""
    vaddr: int
    memsz: int
    offset: int
    filesz: int
    flags: int         # PF_X 1, PF_W 2, PF_R 4


class Relocation(NamedTuple):
    """A dynamic relocation: `offset` is a virtual address; `symbol` a name, or None."""
    offset: int
    type: int
    symbol: str | None
    addend: int


class _Section(NamedTuple):
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    entsize: int


def _unpack(layout: struct.Struct, image: bytes, offset: int, what: str):
    if offset < 0 or offset + layout.size > len(image):
        raise BackendError(f"AMD code object truncated: {what} at offset {offset} lies past its "
                           f"{len(image)} bytes")
    return layout.unpack_from(image, offset)


def _cstring(image: bytes, offset: int) -> str:
    end = image.find(b"\0", offset)
    if end < 0:
        raise BackendError(f"AMD code object: unterminated string at offset {offset}")
    return image[offset:end].decode()


def apply_relocations(memory: bytearray, base_vaddr: int, load_bias: int, relocations, symbols: dict) -> None:
    """Apply dynamic relocations to `memory` (which holds vaddr `base_vaddr` at index 0) for
    an image loaded with vaddr 0 at `load_bias` (B in "Relocation Records"): RELATIVE64
    writes B + A, ABS64 writes S + A with S = B + the symbol's vaddr. Any other type raises:
    the loader only does what it has been written and checked for."""
    for r in relocations:
        if r.type == R_AMDGPU_NONE:
            continue
        if r.type == R_AMDGPU_RELATIVE64:
            value = load_bias + r.addend
        elif r.type == R_AMDGPU_ABS64:
            if r.symbol not in symbols:
                raise BackendError(f"R_AMDGPU_ABS64 at 0x{r.offset:x} names {r.symbol!r}, "
                                   "which this code object does not define")
            value = load_bias + symbols[r.symbol].vaddr + r.addend
        else:
            name = _RELOCATION_NAMES.get(r.type, f"type {r.type}")
            raise BackendError(f"AMD code object relocation {name} at 0x{r.offset:x} is not implemented "
                               "(only R_AMDGPU_RELATIVE64 and R_AMDGPU_ABS64 are)")
        at = r.offset - base_vaddr
        if not 0 <= at <= len(memory) - 8:
            raise BackendError(f"relocation at 0x{r.offset:x} lies outside the loaded segments")
        struct.pack_into("<Q", memory, at, value & 0xFFFF_FFFF_FFFF_FFFF)


class CodeObject:
    """An AMDHSA code object (ELF64, EM_AMDGPU, code object v3+), parsed once.

    arch                  the processor from e_flags' EF_AMDGPU_MACH ('gfx90a', ...)
    target                the metadata's amdhsa.target ('amdgcn-amd-amdhsa--gfx90a', ...)
    target_features       {'xnack': 'any'|'on'|'off'|'unsupported', 'sramecc': ...} from e_flags
    code_object_version   3, 4, 5 or 6 (EI_ABIVERSION, checked against amdhsa.version)
    metadata              the decoded NT_AMDGPU_METADATA note
    kernels               name -> KernelInfo, for every kernel of the metadata
    symbols               name -> Symbol(vaddr, size, type) of the defined FUNC and OBJECT
                          symbols (kernels, called functions, kernel descriptors)
    segments              the PT_LOAD segments; memory_image() lays them out
    relocations           the dynamic relocations memory_image() applies
    text                  (start, end) virtual addresses of .text
    """

    def __init__(self, image: bytes):
        self.image = image = bytes(image)
        if len(image) < _EHDR.size or image[:4] != b"\x7fELF":
            raise BackendError("not an ELF image, so not an AMD code object")
        if image[4] != 2 or image[5] != 1:
            raise BackendError(f"AMD code objects are 64-bit little-endian ELF; this one has "
                               f"EI_CLASS {image[4]}, EI_DATA {image[5]}")
        (ident, e_type, machine, _version, _entry, phoff, shoff, flags, _ehsize, phentsize, phnum,
         shentsize, shnum, shstrndx) = _EHDR.unpack_from(image)
        if machine != EM_AMDGPU:
            raise BackendError(f"ELF e_machine {machine} is not EM_AMDGPU ({EM_AMDGPU}): not an AMD code object")
        if ident[7] != ELFOSABI_AMDGPU_HSA or ident[8] not in _ABI_VERSIONS:
            raise BackendError(f"not an AMDHSA code object v3+: EI_OSABI {ident[7]}, EI_ABIVERSION {ident[8]} "
                               f"(expected {ELFOSABI_AMDGPU_HSA} and one of {sorted(_ABI_VERSIONS)})")
        if e_type != ET_DYN:
            raise BackendError(f"ELF e_type {e_type} is not ET_DYN: an unlinked object, not a loadable code object")
        self.code_object_version = _ABI_VERSIONS[ident[8]]
        mach = flags & EF_AMDGPU_MACH
        if mach not in _MACHS:
            raise BackendError(f"EF_AMDGPU_MACH 0x{mach:03x} names a processor this loader does not know "
                               f"(known: {sorted(_MACHS.values())})")
        self.arch = _MACHS[mach]
        self.target_features = {name: _FEATURE_SETTINGS[(flags >> shift) & 3]
                                for name, shift in _FEATURE_FIELDS.items()}

        self.segments = tuple(Segment(vaddr, memsz, offset, filesz, pflags)
                              for p_type, pflags, offset, vaddr, _paddr, filesz, memsz, _align
                              in (_unpack(_PHDR, image, phoff + i * phentsize, "program header")
                                  for i in range(phnum))
                              if p_type == PT_LOAD)
        if not self.segments:
            raise BackendError("AMD code object has no PT_LOAD segment")
        for seg in self.segments:
            if seg.filesz > seg.memsz or seg.offset + seg.filesz > len(image):
                raise BackendError(f"PT_LOAD segment at 0x{seg.vaddr:x} overruns the file or its memsz")
        self._sections = self._read_sections(shoff, shentsize, shnum, shstrndx)

        all_symbols = self._read_symbols()
        self.symbols = {}
        for name, sym in all_symbols:   # a global wins over a local of the same name
            self.symbols.setdefault(name, sym)
        functions = sorted({(s.vaddr, s.size, n) for n, s in all_symbols if s.type == "FUNC" and s.size})
        self._function_starts = [start for start, _size, _name in functions]
        self._functions = functions
        self.relocations = self._read_relocations()
        text = [s for s in self._sections if s.name == ".text"]
        self.text = (text[0].addr, text[0].addr + text[0].size) if text else None

        self.metadata = self._read_metadata()
        self.target = self.metadata.get("amdhsa.target")
        if not self.target or self.target.split("--")[-1].split(":")[0] != self.arch:
            raise BackendError(f"metadata target {self.target!r} disagrees with e_flags' processor {self.arch}")
        want = _METADATA_VERSIONS[self.code_object_version]
        if self.metadata.get("amdhsa.version") != want:
            raise BackendError(f"metadata amdhsa.version {self.metadata.get('amdhsa.version')} is not {want} "
                               f"of code object v{self.code_object_version} (the ELF header's)")
        self.kernels = self._read_kernels()

    @classmethod
    def parse(cls, image: bytes) -> "CodeObject":
        return cls(image)

    def __repr__(self):
        return (f"CodeObject({self.target}, v{self.code_object_version}, {len(self.kernels)} kernels, "
                f"{len(self.image)} bytes)")

    # -- reading ----------------------------------------------------------------------

    def _read_sections(self, shoff, shentsize, shnum, shstrndx) -> list:
        if not shnum:
            raise BackendError("AMD code object has no section headers (symbols and notes are read from them)")
        raw = [_unpack(_SHDR, self.image, shoff + i * shentsize, "section header") for i in range(shnum)]
        names_at = raw[shstrndx][4]
        return [_Section(_cstring(self.image, names_at + name), typ, flags, addr, offset, size, link, entsize)
                for name, typ, flags, addr, offset, size, link, _info, _align, entsize in raw]

    def _symbol_table(self, section: _Section):
        """(name, st_info, st_shndx, value, size) of every entry of a SYMTAB/DYNSYM section."""
        strings = self._sections[section.link].offset
        for pos in range(section.offset, section.offset + section.size, section.entsize or _SYM.size):
            st_name, info, _other, shndx, value, size = _unpack(_SYM, self.image, pos, "symbol")
            yield _cstring(self.image, strings + st_name), info, shndx, value, size

    def _read_symbols(self) -> list:
        """[(name, Symbol)] of defined FUNC/OBJECT symbols, .dynsym first then .symtab (which
        repeats the globals and adds locals such as device-library helpers)."""
        out, seen = [], set()
        for sec in [s for s in self._sections if s.type == SHT_DYNSYM] + [s for s in self._sections
                                                                          if s.type == SHT_SYMTAB]:
            for name, info, shndx, value, size in self._symbol_table(sec):
                kind = _SYMBOL_TYPES.get(info & 0xF)
                if kind and name and shndx != SHN_UNDEF and (name, value) not in seen:
                    seen.add((name, value))
                    out.append((name, Symbol(value, size, kind)))
        return out

    def _read_relocations(self) -> tuple:
        """Relocations of the allocated (dynamic) RELA sections; the symbol index is into the
        section's linked symbol table. Non-allocated ones only matter to static linkers."""
        relocations = []
        for sec in self._sections:
            if not sec.flags & SHF_ALLOC or sec.type not in (SHT_RELA, SHT_REL):
                continue
            if sec.type == SHT_REL:
                raise BackendError(f"AMD code object section {sec.name} holds REL relocations (AMDGPU uses RELA)")
            table = [name for name, *_rest in self._symbol_table(self._sections[sec.link])] if sec.link else []
            for pos in range(sec.offset, sec.offset + sec.size, sec.entsize or _RELA.size):
                offset, info, addend = _unpack(_RELA, self.image, pos, "relocation")
                index = info >> 32
                relocations.append(Relocation(offset, info & 0xFFFF_FFFF, table[index] if index else None, addend))
        return tuple(relocations)

    def _read_metadata(self) -> dict:
        """The msgpack map of the one NT_AMDGPU_METADATA note (owner "AMDGPU") of the SHT_NOTE
        sections (AMDGPUUsage "Note Records", "Code Object V3 Note Records")."""
        found = []
        for sec in self._sections:
            pos, end = sec.offset, sec.offset + sec.size
            while sec.type == SHT_NOTE and pos < end:
                namesz, descsz, ntype = _unpack(_NHDR, self.image, pos, "note header")
                desc = pos + _NHDR.size + ((namesz + 3) & ~3)
                owner = self.image[pos + _NHDR.size:pos + _NHDR.size + namesz].rstrip(b"\0")
                if owner == b"AMDGPU" and ntype == NT_AMDGPU_METADATA:
                    blob = self.image[desc:desc + descsz]
                    try:
                        meta, used = msgpack_decode(blob)
                    except (ValueError, IndexError, struct.error, UnicodeDecodeError) as e:
                        raise BackendError(f"AMDGPU metadata note does not decode: {e}") from None
                    if used != descsz or not isinstance(meta, dict):
                        raise BackendError(f"AMDGPU metadata note: {used} of {descsz} bytes decode to a "
                                           f"{type(meta).__name__}, expected one map filling the note")
                    found.append(meta)
                pos = desc + ((descsz + 3) & ~3)
        if len(found) != 1:
            raise BackendError(f"AMD code object has {len(found)} NT_AMDGPU_METADATA notes, expected 1 "
                               "(code object v2 and older are not supported)")
        return found[0]

    def _read_kernels(self) -> dict:
        """Kernels of amdhsa.kernels, each with the descriptor its `.symbol` names; every
        `*.kd` OBJECT symbol must belong to one of them and vice versa."""
        descriptors = {n: s for n, s in self.symbols.items() if s.type == "OBJECT" and n.endswith(".kd")}
        kernels, named = {}, set()
        for meta in self.metadata.get("amdhsa.kernels", ()):
            name, symbol = meta.get(".name"), meta.get(".symbol")
            if symbol not in descriptors:
                raise BackendError(f"metadata kernel {name!r} names descriptor {symbol!r}, "
                                   "which is no OBJECT symbol of the code object")
            if name in kernels or symbol in named:
                raise BackendError(f"metadata lists kernel {name!r} / {symbol!r} twice")
            kd = descriptors[symbol]
            if kd.size != KernelDescriptor.SIZE or kd.vaddr % 64:
                raise BackendError(f"descriptor {symbol} is {kd.size} bytes at 0x{kd.vaddr:x}; "
                                   f"expected {KernelDescriptor.SIZE} bytes, 64-byte aligned")
            descriptor = KernelDescriptor(self.read(kd.vaddr, kd.size), kd.vaddr, self.arch)
            kernels[name] = KernelInfo.from_metadata(meta, descriptor)
            named.add(symbol)
        orphans = sorted(set(descriptors) - named)
        if orphans:
            raise BackendError(f"kernel descriptors without metadata: {orphans[:5]}"
                               f"{' ...' if len(orphans) > 5 else ''} ({len(orphans)})")
        return kernels

    def read(self, vaddr: int, size: int) -> bytes:
        """Loaded bytes at a virtual address, from the file (zeros past filesz), unrelocated."""
        for seg in self.segments:
            if seg.vaddr <= vaddr and vaddr + size <= seg.vaddr + seg.memsz:
                start = vaddr - seg.vaddr
                data = self.image[seg.offset + start:seg.offset + min(start + size, seg.filesz)]
                return data + bytes(size - len(data))
        raise BackendError(f"0x{vaddr:x} (+{size}) lies in no PT_LOAD segment")

    # -- using ------------------------------------------------------------------------

    def memory_image(self, load_bias: int = 0) -> tuple:
        """(base_vaddr, memory): every PT_LOAD segment laid out at its p_vaddr in one
        bytearray that holds vaddr `base_vaddr` at index 0 (zeros between segments and past
        each p_filesz), with the dynamic relocations applied for an image whose vaddr 0
        sits at address `load_bias`. Instructions and descriptors are then read as
        memory[vaddr - base_vaddr]."""
        base = min(s.vaddr for s in self.segments)
        memory = bytearray(max(s.vaddr + s.memsz for s in self.segments) - base)
        for seg in self.segments:
            at = seg.vaddr - base
            memory[at:at + seg.filesz] = self.image[seg.offset:seg.offset + seg.filesz]
        apply_relocations(memory, base, load_bias, self.relocations, self.symbols)
        return base, memory

    def function_at(self, vaddr: int) -> str | None:
        """Name of the FUNC symbol whose [vaddr, vaddr + size) holds `vaddr`, else None."""
        # functions do not overlap; of aliases at one start, the largest sorts last
        i = bisect.bisect_right(self._function_starts, vaddr) - 1
        if i >= 0:
            start, size, name = self._functions[i]
            if vaddr < start + size:
                return name
        return None
