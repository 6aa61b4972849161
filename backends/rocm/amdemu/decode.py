"""Instruction decoder of the emulated AMD GPU platform.

The instruction tables are tinygrad's (`tinygrad==0.14.0`: `tinygrad/runtime/autogen/amd/`,
generated from AMD's machine-readable ISA descriptions), imported at the point of use; a
missing tinygrad is `BackendUnavailable`. This module picks the table set for an arch, walks
code bytes, and fixes up the places where the tables' ISA is not the arch's:

- `cdna` tables describe CDNA4 (gfx950). gfx90a (CDNA2) and gfx940 (CDNA3) share almost all
  of its encodings, but some opcode numbers mean another instruction there: remapped to the
  CDNA4 instruction that is the arch's one, or to a `LegacyOp` where CDNA4 has none
  (`_FIXUPS`), or refused (`_REFUSE`).
- `rdna3` tables describe gfx11 (gfx1100) directly.
- Where tinygrad 0.14.0's decoder itself goes wrong, decode does it right or refuses: the
  formats its decoder list leaves out (MUBUF/MTBUF/MIMG/EXP/LDSDIR on rdna3, MTBUF on cdna),
  RDNA3's DPP8 marker (src0 233/234), gfx950's 16-byte VOP3PX2 (never on gfx90a/gfx940), and
  marker operands (SDWA/DPP/literal) of encodings the tables have no class for.

Every rule here was found, and is kept honest, by tests/test_amdemu_decode.py: LLVM's
disassembler on all of this project's kernels for gfx90a, gfx940 and gfx1100, and on one
instruction word per opcode of every format.

API
- `FAMILY`, `family(arch)`: which tinygrad table set an arch uses ('cdna', 'rdna3');
  `BackendError` for an unsupported arch. Feature suffixes are ignored ('gfx90a:xnack-').
- `decode(code, offset, arch)`: the instruction at `code[offset:]` (bytes or memoryview), a
  tinygrad `Inst`: format = `type(inst).__name__` (VOP2, VOP3, VOP1_SDWA, VOP2_DPP16, SOPP,
  SMEM, DS, GLOBAL, MUBUF...), opcode = `inst.op`, fields as attributes, `inst.size()` in
  bytes including any literal, `inst._literal`; plus `inst.arch` and `inst.raw_op` (the opcode
  number as the arch numbers it; None for VOPD). Decodes are cached by instruction bytes
  (identical bytes decode identically), so the objects are shared: treat them as read-only.
  `BackendError` for bytes that are no instruction, and for instructions that the tables
  cannot represent faithfully, naming LLVM's mnemonic and the arch: the interpreter never
  silently mis-executes.
- `mnemonic(inst, arch=None, llvm=19)`: LLVM's mnemonic, as `llvm-objdump-19 -d --mcpu=<arch>` prints it
  (`v_add_co_u32_e32`, `v_cndmask_b32_e64`, `v_or_b32_sdwa`, `s_waitcnt`, `global_load_dword`,
  `buffer_store_dword`, `v_mfma_f32_16x16x16f16` on gfx90a, `v_mfma_f32_16x16x16_f16` on gfx94x;
  VOPD as `v_dual_x::v_dual_y`); `arch` defaults to the one the instruction was decoded for;
  `llvm=15`: the spelling of ROCm 5.4.2's LLVM 15, which differs for gfx940's MFMAs.
- `LegacyOp`, `legacy_pcode(op)`: instructions of gfx90a/gfx940 that CDNA4 lacks. A decoded
  instruction whose `op` is a LegacyOp has the fields (and operand sizes) of the CDNA4
  instruction with the same layout; the interpreter implements it itself.

Where `decode` remaps an opcode, the instruction's other fields come from the original bytes
and `inst.to_bytes()` gives the CDNA4 encoding, not the original bytes.

Nothing here runs on, or says anything about, AMD hardware.
"""
from __future__ import annotations

import enum
import re
from typing import Dict, Optional, Tuple

from tensorlite.errors import BackendError, BackendUnavailable

_NEED_TINYGRAD = ("the emulated AMD platform needs tinygrad==0.14.0 (its AMD instruction tables): "
                  "pip install tinygrad==0.14.0")

FAMILY = {
    # CDNA2, CDNA3. gfx942 (MI300X/MI325X) is gfx940's ISA (LLVM: the same features but for
    # the target id; checked against llvm-objdump-19 on this project's kernels).
    "gfx90a": "cdna", "gfx940": "cdna", "gfx942": "cdna",
    # CDNA4 (MI350X/MI355X): the tables' own ISA.
    "gfx950": "cdna",
    # RDNA3: gfx1101..gfx1103 share gfx1100's encodings (checked by the opcode sweep); RDNA3.5
    # gfx1151 (Strix Halo) too: LLVM gives gfx115x gfx11's encodings, a few new instructions
    # (s_singleuse_vdst, v_dual_... unchanged) and no new formats.
    "gfx1100": "rdna3", "gfx1101": "rdna3", "gfx1102": "rdna3", "gfx1103": "rdna3", "gfx1151": "rdna3",
    # RDNA4 (RX 9070, R9700): its own encodings (VGLOBAL, VSCRATCH, VFLAT, VBUFFER, new SMEM
    # and VOP3 layouts, split wait counters), tinygrad's rdna4 tables.
    "gfx1200": "rdna4", "gfx1201": "rdna4",
}

# The ISA revision whose fix-ups (below) apply to an arch.
_ISA = {"gfx90a": "gfx90a", "gfx940": "gfx940", "gfx942": "gfx940", "gfx950": "gfx950",
        "gfx1100": "gfx11", "gfx1101": "gfx11", "gfx1102": "gfx11", "gfx1103": "gfx11", "gfx1151": "gfx11",
        "gfx1200": "gfx12", "gfx1201": "gfx12"}


def _base_arch(arch: str) -> str:
    """'gfx90a:sramecc+:xnack-' -> 'gfx90a'."""
    return str(arch).split(":", 1)[0].strip()


def family(arch: str) -> str:
    """The tinygrad table set ('cdna', 'rdna3') that describes `arch`'s instructions."""
    fam = FAMILY.get(_base_arch(arch))
    if fam is None:
        raise BackendError(f"the emulated AMD platform does not support arch {arch!r}; "
                           f"supported: {', '.join(sorted(FAMILY))}")
    return fam


# ---- tinygrad, imported at the point of use ----------------------------------------------

class _Tables:
    """tinygrad's decoder pieces for one family."""

    def __init__(self, fam: str):
        try:
            from tinygrad.renderer import amd as tg_amd
            from tinygrad.renderer.amd import dsl
            ins = __import__(f"tinygrad.runtime.autogen.amd.{fam}.ins", fromlist=["*"])
        except ImportError as e:
            raise BackendUnavailable(_NEED_TINYGRAD) from e
        self.family = fam
        self.dsl = dsl
        self.ins = ins
        formats = list(tg_amd._load_formats()[fam])
        # tinygrad's decoder list leaves out formats its own code never emits (MUBUF, MTBUF,
        # MIMG, EXP, LDSDIR on rdna3; MTBUF on cdna) although its tables describe them; the
        # compiler does emit them (buffer_gl0_inv...). Their encoding bits are unique, so they
        # go first.
        base = [c for c in vars(ins).values() if isinstance(c, type) and c.__bases__ == (dsl.Inst,)
                and c.__module__ == ins.__name__]
        formats = [c for c in base if c not in formats and c.__name__ != "VOP3PX2"] + formats
        if fam == "cdna":
            # VOP3PX2 (the 16-byte scaled MFMA) exists on gfx950 only. tinygrad tries it first
            # and recognises it by bits of the *third* dword, so on gfx90a/gfx940 any 8-byte
            # instruction followed by a VOP3P word with opcode 45/46 would be misread as one.
            formats = [f for f in formats if f.__name__ != "VOP3PX2"]
        self.formats = formats
        self.matches = tg_amd._matches
        self._spec = {}
        # Which format an instruction has depends on its first dword alone when every format's
        # identifying fields (fixed encoding bits, opcode) lie there: then detection is cached
        # by that dword.
        ident = (dsl.FixedBitField, dsl.EnumBitField)
        self._by_word0 = {} if all(f.lo < 32 for cls in formats for _, f in cls._fields
                                   if isinstance(f, ident)) else None

    _VARIANTS = ("_LIT", "_DPP8", "_DPP16", "_SDWA")

    def from_bytes(self, cls, data: bytes):
        """`cls.from_bytes(data)`, with tinygrad's choice of variant class (`Inst._variant_suffix`:
        the first operand field holding 255 -> _LIT, 249 -> _SDWA on cdna / _DPP8 on rdna3,
        250 -> _DPP16; VOPD with FMAMK/FMAAK -> _LIT) made from the raw field values, without
        building a register object per field (most of the cost of a decode)."""
        spec = self._spec.get(cls)
        if spec is None:
            srcs = [(f.lo, f.mask, f._valid_range[0]) for _, f in cls._fields if isinstance(f, self.dsl.SrcField)]
            spec = self._spec[cls] = (any(v in cls.__name__ for v in self._VARIANTS), srcs,
                                      [n for n in ("opx", "opy") if hasattr(cls, n)])
        is_variant, srcs, vopd_ops = spec
        if is_variant:
            return cls.from_bytes(data)
        raw = int.from_bytes(data[:cls._base_size], "little")
        suffix = None
        for name in vopd_ops:
            inst = object.__new__(cls)
            inst._raw = raw
            if any(x in getattr(inst, name).name for x in ("FMAMK", "FMAAK")):
                suffix = "_LIT"
        if suffix is None:
            for lo, mask, base in srcs:
                off = ((raw >> lo) & mask) + base
                if off == 255:
                    suffix = "_LIT"
                elif off == 249:
                    suffix = "_SDWA" if self.family == "cdna" else "_DPP8"
                elif off == 250:
                    suffix = "_DPP16"
                if suffix:
                    break
        if suffix and (var := getattr(self.ins, cls.__name__ + suffix, None)) is not None:
            return var.from_bytes(data)
        inst = object.__new__(cls)
        inst._raw = raw
        return inst

    def detect(self, data: bytes):
        cache = self._by_word0
        if cache is not None:
            cls = cache.get(data[:4], False)
            if cls is not False:
                return cls
        found = None
        for cls in self.formats:
            if self.matches(data, cls):
                found = cls
                break
        if cache is not None:
            cache[bytes(data[:4])] = found
        return found


_TABLES: Dict[str, _Tables] = {}


def _tables(fam: str) -> _Tables:
    t = _TABLES.get(fam)
    if t is None:
        t = _TABLES[fam] = _Tables(fam)
    return t


# ---- per-ISA fix-ups ------------------------------------------------------------------------
#
# Found by comparing, for every opcode number of every format, tinygrad's decode with LLVM's
# disassembler (llvm-mc-14 for gfx90a; for gfx940 the LLVM 15 of ROCm 5.4.2's comgr, which
# also agrees with LLVM 14 on gfx90a), and by the kernel cross-check of
# tests/test_amdemu_decode.py.

class LegacyOp(enum.Enum):
    """Instructions of gfx90a/gfx940 that CDNA4 (so tinygrad's cdna tables) does not have, their
    opcode number reused or left empty. `value` is (opcode space, opcode number). The
    interpreter implements these itself; `legacy_pcode(op)` gives the documented pseudocode
    where the semantics are plain arithmetic."""
    V_MAC_F32_E32 = ("VOP2Op", 0x16)
    V_MADMK_F32 = ("VOP2Op", 0x17)
    V_MADAK_F32 = ("VOP2Op", 0x18)
    V_MAC_F32_E64 = ("VOP3Op", 0x116)
    V_MAD_LEGACY_F32 = ("VOP3Op", 0x1C0)
    V_MAD_F32 = ("VOP3Op", 0x1C1)
    V_FMA_MIX_F32 = ("VOP3POp", 0x20)
    V_FMA_MIXLO_F16 = ("VOP3POp", 0x21)
    V_FMA_MIXHI_F16 = ("VOP3POp", 0x22)
    BUFFER_INVL2 = ("MUBUFOp", 0x29)
    BUFFER_WBINVL1 = ("MUBUFOp", 0x3E)
    BUFFER_WBINVL1_VOL = ("MUBUFOp", 0x3F)

    def __repr__(self):
        return f"LegacyOp.{self.name}"


# V_MAC/V_MAD/V_MADMK/V_MADAK_F32 multiply and add *without* fusing: the product is rounded to
# f32 before the add (unlike V_FMA*). Dialect of tinygrad's str_pcode.PCODE.
_LEGACY_PCODE = {
    "V_MAC_F32_E32": "D0.f32 = S0.f32 * S1.f32 + D0.f32",
    "V_MAC_F32_E64": "D0.f32 = S0.f32 * S1.f32 + D0.f32",
    "V_MADMK_F32": "D0.f32 = S0.f32 * SIMM32.f32 + S1.f32",
    "V_MADAK_F32": "D0.f32 = S0.f32 * S1.f32 + SIMM32.f32",
    "V_MAD_F32": "D0.f32 = S0.f32 * S1.f32 + S2.f32",
}


def legacy_pcode(op) -> Optional[str]:
    """AMD's pseudocode for a `LegacyOp` where it is plain arithmetic, else None (V_MAD_LEGACY_F32's
    DX9 zero rules and the cache-control instructions are the interpreter's own business).
    V_FMA_MIX* are gfx9's fused mixed-precision FMAs: the same instruction as RDNA3's, whose
    pseudocode tinygrad's rdna3 tables carry (CDNA4's V_MAD_MIX* at those opcodes do not fuse)."""
    if op.name.startswith("V_FMA_MIX"):
        try:
            from tinygrad.runtime.autogen.amd.rdna3.enum import VOP3POp
            from tinygrad.runtime.autogen.amd.rdna3.str_pcode import PCODE
        except ImportError as e:
            raise BackendUnavailable(_NEED_TINYGRAD) from e
        return PCODE[getattr(VOP3POp, op.name)]
    return _LEGACY_PCODE.get(op.name)


# (ISA revision, opcode space, opcode number as the arch numbers it) ->
#   ("remap", name)          the arch's instruction is CDNA4's instruction `name`
#   ("legacy", name, layout) the arch's instruction is LegacyOp `name`, whose fields sit where
#                            those of CDNA4's `layout` instruction do
_FIXUPS: Dict[Tuple[str, str, int], tuple] = {}


def _fix(isas, space, number, kind, *names):
    for isa in isas:
        _FIXUPS[(isa, space, number)] = (kind,) + names


# gfx90a: V_MAC_F32 (VOP2 0x16, VOP3 0x116), V_MADMK_F32/V_MADAK_F32 (VOP2 0x17/0x18),
# V_MAD_LEGACY_F32/V_MAD_F32 (VOP3 0x1C0/0x1C1). gfx940 dropped them all (LLVM: invalid
# encodings) and took V_FMAMK_F32/V_FMAAK_F32 for 0x17/0x18, as CDNA4 did; CDNA4 put
# V_DOT2C_F32_BF16 at 0x16.
_fix(["gfx90a"], "VOP2Op", 0x16, "legacy", "V_MAC_F32_E32", "V_DOT2C_F32_BF16_E32")
_fix(["gfx90a"], "VOP3Op", 0x116, "legacy", "V_MAC_F32_E64", "V_DOT2C_F32_BF16_E64")
_fix(["gfx90a"], "VOP2Op", 0x17, "legacy", "V_MADMK_F32", "V_FMAMK_F32_E32")
_fix(["gfx90a"], "VOP2Op", 0x18, "legacy", "V_MADAK_F32", "V_FMAAK_F32_E32")
_fix(["gfx90a"], "VOP3Op", 0x1C0, "legacy", "V_MAD_LEGACY_F32", "V_MAD_I32_I24_E64")
_fix(["gfx90a"], "VOP3Op", 0x1C1, "legacy", "V_MAD_F32", "V_MAD_I32_I24_E64")
# VOP3P 0x20..0x22: gfx9's V_FMA_MIX_F32/V_FMA_MIXLO_F16/V_FMA_MIXHI_F16 (fused); CDNA4's guide
# (so the tables) has V_MAD_MIX_* there, documented as multiply-then-add. LLVM gives gfx950 the
# fused ones too (fma-mix-insts, what it selects for a mixed-precision fma): so does decode.
_fix(["gfx90a", "gfx940", "gfx950"], "VOP3POp", 0x20, "legacy", "V_FMA_MIX_F32", "V_MAD_MIX_F32")
_fix(["gfx90a", "gfx940", "gfx950"], "VOP3POp", 0x21, "legacy", "V_FMA_MIXLO_F16", "V_MAD_MIXLO_F16")
_fix(["gfx90a", "gfx940", "gfx950"], "VOP3POp", 0x22, "legacy", "V_FMA_MIXHI_F16", "V_MAD_MIXHI_F16")
# MUBUF: gfx90a's BUFFER_INVL2 at 0x29 is CDNA3/CDNA4's BUFFER_INV (scope bits instead);
# BUFFER_WBINVL1/BUFFER_WBINVL1_VOL at 0x3E/0x3F (LLVM decodes them for gfx940 too) are gone
# from CDNA4.
_fix(["gfx90a"], "MUBUFOp", 0x29, "legacy", "BUFFER_INVL2", "BUFFER_INV")
_fix(["gfx90a", "gfx940"], "MUBUFOp", 0x3E, "legacy", "BUFFER_WBINVL1", "BUFFER_WBL2")
_fix(["gfx90a", "gfx940"], "MUBUFOp", 0x3F, "legacy", "BUFFER_WBINVL1_VOL", "BUFFER_INV")
# VOP3P 0x63..0x67: gfx90a's bf16 "_1k" MFMAs, which CDNA3/CDNA4 moved to 0x5D..0x61 (and
# renamed) unchanged; on gfx940 0x64/0x66 are sparse SMFMACs, as on CDNA4.
_fix(["gfx90a"], "VOP3POp", 0x63, "remap", "V_MFMA_F32_32X32X4_2B_BF16")
_fix(["gfx90a"], "VOP3POp", 0x64, "remap", "V_MFMA_F32_16X16X4_4B_BF16")
_fix(["gfx90a"], "VOP3POp", 0x65, "remap", "V_MFMA_F32_4X4X4_16B_BF16")
_fix(["gfx90a"], "VOP3POp", 0x66, "remap", "V_MFMA_F32_32X32X8_BF16")
_fix(["gfx90a"], "VOP3POp", 0x67, "remap", "V_MFMA_F32_16X16X16_BF16")

# (ISA revision, opcode space, opcode number) -> LLVM's mnemonic: instructions that the tables
# would decode as another instruction and that have no counterpart there to remap to.
_REFUSE: Dict[Tuple[str, str, int], str] = {}
# gfx90a's K=8/16 i8 MFMAs and its first (non-"_1k") bf16 MFMAs: gone from CDNA3/CDNA4, where
# 0x54/0x55 are gfx950's f16 MFMAs (16x16x32, 32x32x16) and 0x68..0x6D sparse SMFMACs or unused.
for _num, _name in [(0x54, "v_mfma_i32_32x32x8i8"), (0x55, "v_mfma_i32_16x16x16i8"),
                    (0x68, "v_mfma_f32_32x32x2bf16"), (0x69, "v_mfma_f32_16x16x2bf16"),
                    (0x6B, "v_mfma_f32_4x4x2bf16"), (0x6C, "v_mfma_f32_32x32x4bf16"),
                    (0x6D, "v_mfma_f32_16x16x8bf16")]:
    _REFUSE[("gfx90a", "VOP3POp", _num)] = _name
# MUBUF 0x71: LLVM decodes it as buffer_wbinvl1 for every gfx9 (SI/CI's opcode of it); no table
# knows it.
_REFUSE[("gfx90a", "MUBUFOp", 0x71)] = "buffer_wbinvl1"
_REFUSE[("gfx940", "MUBUFOp", 0x71)] = "buffer_wbinvl1"
# MUBUF 0x71/0x72: gfx10's numbers of buffer_gl0_inv/buffer_gl1_inv, which LLVM 15's decoder
# still accepts for gfx11; gfx11 numbers them 0x2B/0x2C (what the compiler emits, and what the
# rdna3 tables know).
_REFUSE[("gfx11", "MUBUFOp", 0x71)] = "buffer_gl0_inv"
_REFUSE[("gfx11", "MUBUFOp", 0x72)] = "buffer_gl1_inv"


# ---- decoding -------------------------------------------------------------------------------

_SIZES = {"cdna": (4, 8), "rdna3": (4, 8, 12), "rdna4": (4, 8, 12)}


class _ArchDecoder:
    def __init__(self, arch: str):
        self.arch = arch
        self.family = family(arch)
        self.isa = _ISA[arch]
        self.t = _tables(self.family)
        self.sizes = _SIZES[self.family]
        self.cache = {n: {} for n in self.sizes}       # size -> {instruction bytes: Inst}
        self.fixups = {(space, num): v for (isa, space, num), v in _FIXUPS.items() if isa == self.isa}
        self.refuse = {(space, num): v for (isa, space, num), v in _REFUSE.items() if isa == self.isa}
        self._sub: Dict[type, type] = {}

    # A subclass of a format whose `op` (a LegacyOp) is set per instance; its operand sizes are
    # those of the CDNA4 instruction whose field layout it shares.
    def _legacy_class(self, cls):
        sub = self._sub.get(cls)
        if sub is None:
            operands_table = self.t.dsl.OPERANDS
            sub = type(cls.__name__, (cls,), {
                "op": property(lambda self: self._legacy_op),
                "operands": property(lambda self: operands_table.get(self._layout_op, {})),
                "__module__": cls.__module__, "__qualname__": cls.__qualname__,
                "__doc__": f"{cls.__name__} whose op is a LegacyOp (an instruction tinygrad's tables lack)"})
            self._sub[cls] = sub
        return sub

    def decode_uncached(self, data: bytes, offset: int):
        t = self.t
        cls = t.detect(data)
        fix = None
        if cls is None:
            # opcodes the tables leave empty: try the fix-ups for each format whose encoding
            # bits match and whose opcode number has a fix-up
            for cand in t.formats:
                fields = dict(cand._fields)
                if "op" not in fields or not self._encoding_matches(data, cand):
                    continue
                f = fields["op"]
                num = self._field(data, f)
                key = (f._enum.__name__, num)
                if key in self.refuse:
                    self._refuse(key, data, offset)
                if key in self.fixups:
                    fix, cls = (key, self.fixups[key]), cand
                    break
            if cls is None:
                raise BackendError(f"{self.arch}: no instruction decodes from bytes "
                                   f"{data[:8].hex(' ', 4)} at offset {offset:#x}")
        f = dict(cls._fields).get("op")
        if f is None:  # VOPD: two opcodes (opx, opy), no fix-ups
            inst = self._from_bytes(cls, data, offset)
            inst.raw_op, inst.arch = None, self.arch
            return inst
        num = self._field(data, f)
        key = (f._enum.__name__, num)
        if fix is None:
            if key in self.refuse:
                self._refuse(key, data, offset)
            if key in self.fixups:
                fix = (key, self.fixups[key])
        if fix is None:
            inst = self._from_bytes(cls, data, offset)
        else:
            kind, name, *rest = fix[1]
            enum_cls = f._enum
            target = getattr(enum_cls, name if kind == "remap" else rest[0])
            patched = self._set_field(data, f, target.value)
            pcls = t.detect(patched)
            if pcls is None:
                raise BackendError(f"{self.arch}: internal fix-up of {name} did not decode "
                                   f"(bytes {data[:8].hex(' ', 4)}, offset {offset:#x})")
            inst = self._from_bytes(pcls, patched, offset)
            if kind == "legacy":
                inst.__class__ = self._legacy_class(type(inst))
                inst._legacy_op, inst._layout_op = LegacyOp[name], target
        inst.raw_op = num
        inst.arch = self.arch
        return inst

    def _from_bytes(self, cls, data: bytes, offset: int):
        inst = self.t.from_bytes(cls, data)
        name = type(inst).__name__
        if not name.startswith(("VOP", "SOP")):
            return inst
        fields = dict(type(inst)._fields)
        src0 = fields.get("src0")
        raw0 = self._field(data, src0) if isinstance(src0, self.t.dsl.SrcField) else None
        if self.family != "cdna" and name.startswith("VOP"):
            # RDNA3 marks DPP8 by src0 = 233 (234: DPP8 with FI, fetch inactive lanes); tinygrad
            # 0.14.0 expects gfx9's SDWA marker 249 there, so it reads a DPP8 instruction as
            # the plain one with an operand "DPP8", 4 bytes short. 249 is no operand on RDNA3.
            if raw0 in (233, 234) and not name.endswith("_DPP8"):
                dpp8 = getattr(self.t.ins, name + "_DPP8", None)
                if dpp8 is None:
                    self._no_variant(inst, "_DPP8", data, offset)
                inst = object.__new__(dpp8)
                inst._raw = int.from_bytes(data[:dpp8._size()], "little")
                return inst
            if raw0 == 249:
                raise BackendError(f"{self.arch}: no instruction decodes from bytes {data[:8].hex(' ', 4)} "
                                   f"at offset {offset:#x} (src0 249 is no RDNA3 operand)")
        # A marker operand whose variant class the tables lack (gfx9's VOPC with DPP, RDNA3's
        # VOPC-in-VOP3 with DPP, gfx9's VOP3 with a literal...): tinygrad keeps the plain class,
        # which would run with the marker as an operand and the wrong length.
        if name.startswith("VOP") and not name.startswith("VOPD") and (
                (raw0 == 250 and not name.endswith("_DPP16"))
                or (raw0 == 249 and self.family == "cdna" and not name.endswith(("_SDWA", "_SDWA_SDST")))):
            self._no_variant(inst, "_SDWA" if raw0 == 249 else "_DPP16", data, offset)
        if not name.endswith("_LIT") and any(self._is_literal(data, f) for f in fields.values()):
            self._no_variant(inst, "_LIT", data, offset)
        return inst

    def _is_literal(self, data, f) -> bool:
        """Does operand field `f` hold the literal-constant marker (255)? A VGPR field's 255 is v255."""
        dsl = self.t.dsl
        return (isinstance(f, dsl.SrcField) and not isinstance(f, dsl.VGPRField)
                and f._valid_range[0] + self._field(data, f) == 255)

    def _no_variant(self, inst, suffix, data, offset):
        name = type(inst).__name__
        base = re.sub(r"_e(32|64)$", "", inst.op.name.lower())
        vop3 = name.startswith("VOP3")
        what = {"_SDWA": f"{base}_sdwa", "_DPP16": f"{base}_e64_dpp" if vop3 else f"{base}_dpp",
                "_DPP8": f"{base}_e64_dpp" if vop3 else f"{base}_dpp",
                "_LIT": f"{_mnemonic(inst, self.arch)} with a literal constant"}[suffix]
        raise BackendError(f"{self.arch}: {what} (bytes {data[:12].hex(' ', 4)} at offset {offset:#x}): "
                           f"tinygrad's {self.family} tables have no {name}{suffix} encoding; the emulated "
                           f"AMD platform cannot run it")

    @staticmethod
    def _field(data: bytes, f) -> int:
        word = int.from_bytes(data[(f.lo // 32) * 4:(f.lo // 32) * 4 + 4], "little")
        return (word >> (f.lo % 32)) & f.mask

    @staticmethod
    def _set_field(data: bytes, f, value: int) -> bytes:
        i = (f.lo // 32) * 4
        word = int.from_bytes(data[i:i + 4], "little")
        word = (word & ~(f.mask << (f.lo % 32))) | (value << (f.lo % 32))
        return data[:i] + word.to_bytes(4, "little") + data[i + 4:]

    def _encoding_matches(self, data: bytes, cls) -> bool:
        FixedBitField = self.t.dsl.FixedBitField
        for _, f in cls._fields:
            if isinstance(f, FixedBitField):
                i = (f.lo // 32) * 4
                if len(data) < i + 4:
                    return False
                word = int.from_bytes(data[i:i + 4], "little")
                if ((word >> (f.lo % 32)) & f.mask) != f.default:
                    return False
        return True

    def _refuse(self, key, data, offset):
        raise BackendError(
            f"{self.arch}: {self.refuse[key]} (bytes {data[:8].hex(' ', 4)} at offset {offset:#x}) "
            f"has no counterpart in tinygrad's {self.family} tables (its opcode {key[0]} {key[1]:#x} "
            f"means another instruction there, or none); the emulated AMD platform cannot run it")

    def decode(self, code, offset: int):
        for n in self.sizes:
            hit = self.cache[n].get(bytes(code[offset:offset + n]))
            if hit is not None:
                return hit
        end = min(len(code), offset + 16)
        data = bytes(code[offset:end])
        if len(data) < 4:
            raise BackendError(f"{self.arch}: code ends inside an instruction at offset {offset:#x}")
        try:
            inst = self.decode_uncached(data + b"\0" * (16 - len(data)), offset)
            for name, f in type(inst)._fields:   # every opcode field names an opcode (VOPD's opy...)
                if isinstance(f, self.t.dsl.EnumBitField):
                    getattr(inst, name)
        except BackendError:
            raise
        except Exception as e:  # tinygrad's own decode failures: ValueError for an opcode its enum lacks...
            raise BackendError(f"{self.arch}: no instruction decodes from bytes {data[:8].hex(' ', 4)} "
                               f"at offset {offset:#x} ({type(e).__name__}: {e})") from None
        size = inst.size()
        if offset + size > len(code):
            raise BackendError(f"{self.arch}: the {mnemonic(inst)} at offset {offset:#x} needs {size} bytes, "
                               f"the code has {len(code) - offset}")
        # The decode depends on these `size` bytes only, so any equal bytes decode the same.
        self.cache.setdefault(size, {})[data[:size]] = inst
        if size not in self.sizes:
            self.sizes = tuple(sorted(set(self.sizes) | {size}))
        return inst


_DECODERS: Dict[str, _ArchDecoder] = {}


def _decoder(arch: str) -> _ArchDecoder:
    d = _DECODERS.get(arch)
    if d is None:
        base = _base_arch(arch)
        family(base)  # BackendError for an unsupported arch
        d = _DECODERS.get(base) or _ArchDecoder(base)
        _DECODERS[base] = _DECODERS[arch] = d
    return d


def decode(code, offset: int, arch: str):
    """The instruction at `code[offset:]` (bytes or memoryview) for `arch`; see the module doc."""
    return _decoder(arch).decode(code, offset)


# ---- LLVM mnemonics -------------------------------------------------------------------------

# VOP3 opcodes below this are VOPC/VOP2/VOP1 instructions in their 64-bit encoding, which LLVM
# names with "_e64"; the others are VOP3-only and carry no suffix.
_VOP3_NATIVE = {"cdna": 0x1C0, "rdna3": 0x200, "rdna4": 0x200}

# VOP1/VOP2 instructions that LLVM prints without "_e32": those it has no VOP3 (e64) encoding
# for (LLVM's view, which is not always the tables': on gfx9 it knows no v_readfirstlane_b32_e64).
_NO_E32 = {
    "cdna": {"v_nop", "v_readfirstlane_b32", "v_swap_b32", "v_accvgpr_mov_b32", "v_clrexcp",
             "v_fmamk_f32", "v_fmaak_f32", "v_madmk_f32", "v_madak_f32", "v_madmk_f16", "v_madak_f16"},
    "rdna3": {"v_nop", "v_readfirstlane_b32", "v_swap_b32", "v_swap_b16", "v_swaprel_b32", "v_permlane64_b32",
              "v_pipeflush", "v_dot2acc_f32_f16", "v_pk_fmac_f16",
              "v_fmamk_f32", "v_fmaak_f32", "v_fmamk_f16", "v_fmaak_f16"},
}

_NO_E32["rdna4"] = _NO_E32["rdna3"]

# Same instruction, other spelling: LLVM keeps gfx9's names where RDNA3's documents (and so the
# rdna3 tables) renamed them.
_RENAME = {"rdna3": {"v_cvt_pk_norm_i16_f32": "v_cvt_pknorm_i16_f32",
                     "v_cvt_pk_norm_u16_f32": "v_cvt_pknorm_u16_f32"}}

# The MFMAs that gfx908 introduced: LLVM names them gfx908's way on gfx90a (no block count,
# the input type glued to the shape: v_mfma_f32_32x32x1f32), where tinygrad's tables use CDNA4's
# names (V_MFMA_F32_32X32X1_2B_F32), and so does the LLVM 15 of ROCm 5.4.2 on gfx940. The MFMAs
# that gfx90a added (bf16 "_1k", f64) get the same treatment on gfx90a only. LLVM 19 names every
# MFMA of gfx940/gfx942 as AMD's CDNA3 guide (and so the tables) do: v_mfma_f32_16x16x16_f16.
_MFMA_GFX908 = {"V_MFMA_F32_32X32X1_2B_F32", "V_MFMA_F32_16X16X1_4B_F32", "V_MFMA_F32_4X4X1_16B_F32",
                "V_MFMA_F32_32X32X2_F32", "V_MFMA_F32_16X16X4_F32", "V_MFMA_F32_32X32X4_2B_F16",
                "V_MFMA_F32_16X16X4_4B_F16", "V_MFMA_F32_4X4X4_16B_F16", "V_MFMA_F32_32X32X8_F16",
                "V_MFMA_F32_16X16X16_F16", "V_MFMA_I32_32X32X4_2B_I8", "V_MFMA_I32_16X16X4_4B_I8",
                "V_MFMA_I32_4X4X4_16B_I8"}


def _mfma_gfx908_style(name: str) -> str:
    """v_mfma_f32_32x32x1_2b_f32 -> v_mfma_f32_32x32x1f32; the bf16 ones get gfx90a's "_1k"."""
    short = re.sub(r"_\d+b(?=_)", "", name)
    short = re.sub(r"_(f32|f16|bf16|i8|f64)$", r"\1", short)
    return short + "_1k" if name.endswith("_bf16") else short


def mnemonic(inst, arch: Optional[str] = None, llvm: int = 19) -> str:
    """LLVM's mnemonic of a decoded instruction (see the module doc), as LLVM `llvm` (major
    version) spells it: 19, or 15 (ROCm 5.4.2's comgr), which names gfx940's first MFMAs gfx908's way."""
    own = getattr(inst, "arch", None)
    if llvm != 19:
        return _mnemonic(inst, _base_arch(arch or own or ""), llvm)
    if arch is None or _base_arch(arch) == own:
        cached = getattr(inst, "_llvm_mnemonic", None)
        if cached is None:
            cached = _mnemonic(inst, own or "")
            if own:
                inst._llvm_mnemonic = cached
        return cached
    return _mnemonic(inst, _base_arch(arch))


def _mnemonic(inst, arch: str, llvm: int = 19) -> str:
    fmt = type(inst).__name__
    if fmt.startswith("VOPD"):
        return f"{inst.opx.name.lower()}::{inst.opy.name.lower()}"
    if not hasattr(type(inst), "op"):  # EXP: the one format without an opcode
        return fmt.lower()
    name = inst.op.name.lower()
    fam = FAMILY.get(arch) or next((f for f in ("cdna", "rdna4") if f in type(inst).__module__), "rdna3")
    base = re.sub(r"_e(32|64)$", "", name)
    base = _RENAME.get(fam, {}).get(base, base)
    if fmt.startswith(("VOP1", "VOP2", "VOPC")):
        if fmt.endswith(("_SDWA", "_SDWA_SDST")):
            return base + "_sdwa"
        if "_DPP" in fmt:
            return base + "_dpp"
        return base if base in _NO_E32[fam] else base + "_e32"
    if fmt.startswith("VOP3") and "_DPP" in fmt:  # RDNA3's VOP3/VOP3P/VOP3SD with DPP
        return base + "_e64_dpp"
    if fmt.startswith(("VOP3SD", "VOP3_SDST", "VOP3")) and not fmt.startswith("VOP3P"):
        raw = getattr(inst, "raw_op", inst.op.value if isinstance(inst.op.value, int) else 0x1FF)
        if raw < _VOP3_NATIVE[fam]:
            return base + "_e64"
        return base
    if fmt.startswith("VOP3P"):
        if base in ("v_accvgpr_read", "v_accvgpr_write"):
            return base + "_b32"
        if base.startswith("v_mfma_") and (_ISA.get(arch) == "gfx90a" or (llvm < 19 and inst.op.name in _MFMA_GFX908)):
            return _mfma_gfx908_style(base)
        return base
    return base
