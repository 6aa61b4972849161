"""The wave executor: runs one kernel dispatch of an AMD code object on the host.

State is held for a batch of waves at once (numpy arrays with a leading wave axis):
scalar registers `sgpr[W, 128]` indexed by the ISA's operand encoding (VCC at 106, M0 at
124 on gfx9 and 125 on gfx11, EXEC at 126), vector registers `vgpr[W, NV, L]` and accumulation registers
`agpr[W, NA, L]` (L = 64 or 32 lanes), SCC and the PC per wave. Waves at the same PC
execute each instruction together, vectorised over waves and lanes, under their EXEC
masks; the scheduler always runs the waves at the lowest PC (a straight line of them
until another wave's PC is reached), parks waves at `s_barrier`
until every live wave of their workgroup has arrived, and retires them at `s_endpgm`.
LDS is one byte array per workgroup, private memory (scratch) a host buffer addressed the
way the hardware swizzles it per lane.

Instruction semantics come from AMD's pseudocode (pcode.py) for the ALU (its most frequent
texts through hand-written numpy forms of the same semantics, fastalu.py); memory,
cross-lane, matrix and control instructions are implemented here (`_SPECIAL`, `_memory`).
An instruction neither covers raises `UnsupportedInstruction` naming the mnemonic and
the kernel.
"""
from __future__ import annotations

import re
from typing import Dict

import numpy as np

from tensorlite.errors import BackendError

from . import fastalu
from . import pcode as P
from .pcode_types import Lanes, T, f32_to_bf16_bits
from .codeobject import arch_traits
from .decode import decode
from .memory import MemoryFault


class UnsupportedInstruction(BackendError):
    """The executor does not implement an instruction the kernel reached."""


class KernelFault(BackendError):
    """A kernel did something the emulated device refuses (a wild address, a trap)."""


# ---- apertures of the flat address space (what src_shared_base / src_private_base read) ----
SHARED_BASE = 0x1000_0000_0000_0000 >> 32 << 32
PRIVATE_BASE = 0x2000_0000_0000_0000 >> 32 << 32
APERTURE = 1 << 32

_FLOAT_CONST = {240: 0.5, 241: -0.5, 242: 1.0, 243: -1.0, 244: 2.0, 245: -2.0, 246: 4.0, 247: -4.0}
_INV_2PI = {16: 0x3118, 32: 0x3E22F983, 64: 0x3FC45F306DC9C882}
_FDT = {16: np.float16, 32: np.float32, 64: np.float64}
_UDT = {16: np.uint16, 32: np.uint32, 64: np.uint64}


def _field(inst, name, default=None):
    f = getattr(type(inst), name, None)
    if f is None:
        return default
    return (inst._raw >> f.lo) & f.mask


def _float_kind(fmt_name: str):
    """Operand format name -> (float width or None, packed halves)."""
    m = re.match(r"FMT_NUM_(PK2_)?(BF|F)(16|32|64)$", fmt_name)
    if not m:
        return None, False
    return int(m.group(3)), bool(m.group(1))


class Instr:
    """A decoded instruction prepared for execution: `run(st, w)` executes it for the
    waves `w` (an index array or slice) and returns nothing.

    The executor advances the PC past an instruction after its run, and runs a straight
    line of them without looking at `st.pc` (it holds the PC itself): `run` must not touch
    `st.pc`, `st.done` or `st.barrier`, unless the preparer sets `control`, for the
    instructions that branch, read the PC, end the wave or wait at a barrier. Those run
    with `st.pc[w]` at their own address and leave it where the waves go next.
    `writes_exec` (default True) may be cleared by a preparer that knows the instruction
    leaves EXEC alone: the executor then keeps its EXEC lane mask across it."""
    __slots__ = ("inst", "pc", "size", "name", "fmt", "run", "is_branch", "control", "writes_exec")

    def __init__(self, inst, pc, size, name=None):
        self.inst, self.pc, self.size = inst, pc, size
        self.name = name or (inst.op.name if hasattr(inst, "op") else type(inst).__name__)
        self.fmt = type(inst).__name__
        self.is_branch = False
        self.control = False
        self.writes_exec = True

    def copy_to(self, pc):
        """This prepared instruction at another address (the same bytes elsewhere)."""
        ins = Instr(self.inst, pc, self.size, self.name)
        ins.run, ins.is_branch, ins.control, ins.writes_exec = self.run, self.is_branch, self.control, \
            self.writes_exec
        return ins


class WaveState:
    """Registers and memories of a batch of waves (see the module docstring)."""

    def __init__(self, prog, kernel, nwaves, lanes, nvgpr, nagpr, nwg, lds_bytes, memory, arch):
        self.prog, self.kernel, self.memory, self.arch = prog, kernel, memory, arch
        self.W, self.L = nwaves, lanes
        # gfx9 encodes M0 as 124 (125 reserved); gfx11/gfx12 M0 as 125 and NULL (reads 0) as 124
        self.m0, self.null = (125, 124) if arch.startswith(("gfx11", "gfx12")) else (124, None)
        self.sgpr = np.zeros((nwaves, 128), np.uint32)
        self.vgpr = np.zeros((nwaves, max(nvgpr, 1), lanes), np.uint32)
        self.agpr = np.zeros((nwaves, max(nagpr, 1), lanes), np.uint32)
        self.scc = np.zeros(nwaves, np.uint32)
        self.pc = np.zeros(nwaves, np.int64)
        self.done = np.zeros(nwaves, bool)
        self.barrier = np.zeros(nwaves, bool)
        self.wg = np.zeros(nwaves, np.int64)            # workgroup of each wave (in this batch)
        self.lds = np.zeros((max(nwg, 1), max(lds_bytes, 4)), np.uint8)
        self.lane = np.arange(lanes, dtype=np.uint64)
        self.scratch_base = np.zeros(nwaves, np.uint64)  # host address of each wave's private memory
        self.scratch_lane_bytes = 0
        # the waves the executor runs now and their EXEC lane mask, kept until EXEC may change
        self.group, self.group_exec = None, None

    # ---- masks --------------------------------------------------------------------------
    def exec_mask(self, w):
        """EXEC of waves `w` as bool (n, L). Do not write into it: it may be the cached one."""
        if w is self.group and self.group_exec is not None:
            return self.group_exec
        e = self.sgpr[w, 126].astype(np.uint64) | (self.sgpr[w, 127].astype(np.uint64) << np.uint64(32))
        mask = ((e[:, None] >> self.lane[None, :]) & np.uint64(1)).astype(bool)
        if w is self.group:
            self.group_exec = mask
        return mask

    def read_s64(self, w, r):
        lo = self.sgpr[w, r].astype(np.uint64)
        if self.L == 32 and r in (106, 126):  # wave32: VCC and EXEC are their low halves
            return lo
        return lo | (self.sgpr[w, r + 1].astype(np.uint64) << np.uint64(32))

    def write_s64(self, w, r, v):
        """A 64-bit scalar result: both SGPRs of the pair, in wave32 VCC_HI (EXEC_HI) too, an
        ordinary register there (clang-19's gfx1151 code computes an address in `s_lshl_b64
        vcc, ...`); lane masks go through write_mask."""
        v = np.asarray(v, np.uint64)
        self.sgpr[w, r] = (v & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        self.sgpr[w, r + 1] = (v >> np.uint64(32)).astype(np.uint32)

    def write_mask(self, w, r, v):
        """A lane mask (a compare's or a carry's result): an SGPR pair in wave64, ONE SGPR in
        wave32 (`v_cmp_eq_u32_e64 s4, ...` leaves s5 alone: the compiler keeps values there)."""
        if self.L == 32:
            self.sgpr[w, r] = (np.asarray(v, np.uint64) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        else:
            self.write_s64(w, r, v)

    def pack_lanes(self, w, bits):
        """bool (n, L) -> one mask per wave (uint64)."""
        return (bits.astype(np.uint64) << self.lane[None, :]).sum(axis=1, dtype=np.uint64)


# ---- operands --------------------------------------------------------------------------------

class Operand:
    """How to read one source operand: encoded register/constant, width, float kind."""
    __slots__ = ("code", "bits", "fbits", "lit", "is_vgpr", "is_agpr")

    def __init__(self, code, bits, fbits=None, lit=None, agpr=False):
        self.code, self.bits, self.fbits, self.lit = code, bits, fbits, lit
        self.is_vgpr = code >= 256
        self.is_agpr = agpr


def read_operand(st: WaveState, w, op: Operand, vector: bool):
    """The operand's raw bits as uint64: shape (n, L) for VGPRs, (n, 1) or (n,) otherwise."""
    code, bits = op.code, op.bits
    nregs = max(1, bits // 32)
    if code >= 256:
        file = st.agpr if op.is_agpr else st.vgpr
        r = code - 256
        v = file[w, r, :].astype(np.uint64)
        if nregs >= 2:
            v = v | (file[w, r + 1, :].astype(np.uint64) << np.uint64(32))
        return v if bits >= 32 else v & np.uint64((1 << bits) - 1)
    if code <= 127:
        if code == st.null:
            return np.zeros((_n(st, w), 1) if vector else _n(st, w), np.uint64)
        if code == 125 and st.m0 != 125:
            raise KernelFault("read of a reserved scalar register (125)")
        v = st.sgpr[w, code].astype(np.uint64)
        if nregs >= 2:
            v = v | (st.sgpr[w, code + 1].astype(np.uint64) << np.uint64(32))
    elif 128 <= code <= 208 or code in _FLOAT_CONST or code in (248, 255):
        v = np.full(_n(st, w), constant_operand(op), np.uint64)
    elif code == 253:
        v = st.scc[w].astype(np.uint64)
    elif code == 251:  # VCCZ
        v = (st.read_s64(w, 106) == 0).astype(np.uint64)
    elif code == 252:  # EXECZ
        v = (st.read_s64(w, 126) == 0).astype(np.uint64)
    elif code in (235, 236, 237, 238):  # src_shared_base/limit, src_private_base/limit
        addr = (SHARED_BASE if code < 237 else PRIVATE_BASE) + (APERTURE - 1 if code in (236, 238) else 0)
        v = np.full(_n(st, w), addr >> 32 if bits <= 32 else addr, np.uint64)  # 32-bit reads: the high half
    else:
        raise UnsupportedInstruction(f"source operand encoding {code}")
    if bits < 64:
        v = v & np.uint64((1 << bits) - 1)
    return v[:, None] if vector else v


def constant_operand(op: Operand) -> int:
    """The bits of an inline constant or literal operand (before masking to its width)."""
    code, bits = op.code, op.bits
    if 128 <= code <= 208:
        iv = code - 128 if code <= 192 else 192 - code
        return iv & ((1 << 64) - 1)
    if code in _FLOAT_CONST or code == 248:
        fb = op.fbits or (64 if bits == 64 else 32)
        if code == 248:
            return _INV_2PI[fb]
        return int(np.array(_FLOAT_CONST[code], _FDT[fb]).view(_UDT[fb]))
    lit = op.lit
    if bits == 64 and op.fbits == 64:
        lit = lit << 32                      # a 32-bit literal of an f64 operand is its high half
    return lit


def operand_reader(op: Operand, vector: bool, arch: str, neg=0, abs_=0):
    """A function (st, w) -> the raw bits of a 32- or 64-bit source operand, as uint32 or
    uint64 (VGPRs (n, L); SGPRs (n, 1) in vector instructions, else (n,); constants a
    numpy scalar), with VOP3's neg/abs applied to its sign bit; what read_operand reads.
    None where that reader is needed (SCC, VCCZ, apertures, AGPRs, 16-bit operands)."""
    code, bits = op.code, op.bits
    if bits not in (32, 64) or op.is_agpr:
        return None
    null = 124 if arch.startswith("gfx11") else None
    wide = bits == 64
    dt = np.uint64 if wide else np.uint32
    if code >= 256:
        r = code - 256
        if wide:
            def read(st, w):
                return st.vgpr[w, r].astype(np.uint64) | (st.vgpr[w, r + 1].astype(np.uint64) << np.uint64(32))
        else:
            def read(st, w):
                return st.vgpr[w, r]
    elif code <= 127 and code != null:
        if code == 125 and not arch.startswith("gfx11"):
            return None  # reserved: read_operand says so
        if wide:
            def read(st, w):
                v = st.sgpr[w, code].astype(np.uint64) | (st.sgpr[w, code + 1].astype(np.uint64) << np.uint64(32))
                return v[:, None] if vector else v
        elif vector:
            def read(st, w):
                return st.sgpr[w, code][:, None]
        else:
            def read(st, w):
                return st.sgpr[w, code]
    elif code == null or 128 <= code <= 208 or code in _FLOAT_CONST or code in (248, 255):
        value = dt(0 if code == null else constant_operand(op) & ((1 << bits) - 1))
        value = dt(apply_float_mods(np.uint64(value), op.fbits or bits, neg, abs_))
        return lambda st, w: value
    else:
        return None
    if not (neg or abs_):
        return read
    sign = dt(1 << ((op.fbits or bits) - 1))
    if abs_ and neg:
        return lambda st, w: (read(st, w) & ~sign) ^ sign
    if abs_:
        return lambda st, w: read(st, w) & ~sign
    return lambda st, w: read(st, w) ^ sign


def _n(st, w):
    return st.W if isinstance(w, slice) else len(w)


def apply_float_mods(v, fbits, neg, abs_, packed=False, neg_hi=0):
    """VOP3 abs/neg on a float operand's bit pattern (per 16-bit half when packed)."""
    if fbits is None or not (neg or abs_ or neg_hi):
        return v
    if packed:
        sign_lo, sign_hi = np.uint64(1 << (fbits - 1)), np.uint64(1 << (2 * fbits - 1))
        if neg:
            v = v ^ sign_lo
        if neg_hi:
            v = v ^ sign_hi
        return v
    sign = np.uint64(1 << (fbits - 1))
    if abs_:
        v = v & ~sign
    if neg:
        v = v ^ sign
    return v


def write_vgpr(st, w, reg, value, bits, mask, agpr=False):
    """Write `bits` (32/64/96/128) of value (uint64 (n, L), or a list of 32-bit words)
    into consecutive registers from `reg`, lanes under `mask` (n, L) only."""
    file = st.agpr if agpr else st.vgpr
    words = value if isinstance(value, list) else \
        [value & np.uint64(0xFFFFFFFF)] + ([value >> np.uint64(32)] if bits > 32 else [])
    for i, word in enumerate(words):
        old = file[w, reg + i, :]
        file[w, reg + i, :] = np.where(mask, np.asarray(word, np.uint64).astype(np.uint32), old)


# ---- the pseudocode tables of each instruction family --------------------------------------

_TABLES: Dict[str, tuple] = {}


def tables(family: str):
    """tinygrad's pseudocode texts for 'cdna' or 'rdna3', by opcode name."""
    t = _TABLES.get(family)
    if t is None:
        import importlib
        pc = importlib.import_module(f"tinygrad.runtime.autogen.amd.{family}.str_pcode").PCODE
        t = _TABLES[family] = {op.name: text for op, text in pc.items()}
    return t


def _pcode_of(family, op):
    """The pseudocode of an opcode; VOP3 forms of VOP1/VOP2/VOPC opcodes share their text."""
    by_name = tables(family)
    for name in (op.name, op.name + "_E64", op.name + "_E32", op.name.replace("_E64", "_E32"),
                 op.name.replace("_E32", "_E64")):
        if name in by_name:
            return by_name[name]
    return None


# ---- ALU instructions through their pseudocode -----------------------------------------------

_VECTOR_PREFIX = ("VOP",)
# gfx950's packed conversions (V_CVT_PK_F16_F32, ...) save MODE's round mode, round to nearest
# even and restore it: the interpreter rounds every conversion so, and the lines go.
_FORCED_RNE = re.compile(r"^(prev_mode = ROUND_MODE|ROUND_MODE = ROUND_NEAREST_EVEN|ROUND_MODE = prev_mode);?\n?",
                         re.M)
_SDWA_SEL = {0: (0, 8), 1: (8, 8), 2: (16, 8), 3: (24, 8), 4: (0, 16), 5: (16, 16), 6: (0, 32)}


def _sdwa_select(v, sel, sext):
    lo, width = _SDWA_SEL[sel]
    x = (v >> np.uint64(lo)) & np.uint64((1 << width) - 1)
    if sext and width < 32:
        sign = np.uint64(1 << (width - 1))
        x = ((x ^ sign) - sign) & np.uint64(0xFFFFFFFF)
    return x


class _FastSpec:
    """What fastalu.prepare reads of an ALU instruction's encoding (see there)."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


def prepare_alu(ins: Instr, ex) -> None:
    inst, family = ins.inst, ex.family
    fmt = ins.fmt
    op = inst.op
    name = op.name
    text = _pcode_of(family, op)
    vector = fmt.startswith(_VECTOR_PREFIX)
    if text is None:
        raise UnsupportedInstruction(f"{name} ({fmt}): no pseudocode in the {family} tables")
    # gfx950's V_BITOP3: its truth table, not source and output modifiers, fills the OMOD, ABS
    # and NEG fields (TTBL = {OMOD, ABS, NEG}); it goes into the text as a constant, and the
    # text's result `D` is the destination D0
    bitop3 = name.startswith("V_BITOP3_")
    if bitop3:
        ttbl = _field(inst, "omod", 0) << 6 | _field(inst, "abs", 0) << 3 | _field(inst, "neg", 0)
        text = re.sub(r"^D\.", "D0.", re.sub(r"^TTBL = .*$", f"TTBL = {ttbl}U;", text, flags=re.M), flags=re.M)
    text = _FORCED_RNE.sub("", text) if "ROUND_MODE = ROUND_NEAREST_EVEN" in text else text
    try:
        fn = P.compile_pcode(name, text, vector)
    except P.Untranslatable as e:
        raise UnsupportedInstruction(f"{name} ({fmt}): {e}") from None
    opinfo = inst.operands
    bits = inst.op_bits
    lit = _field(inst, "literal")
    sdwa, dpp = fmt.endswith(("_SDWA", "_SDWA_SDST")), "_DPP" in fmt
    if dpp:
        raise UnsupportedInstruction(f"{name}: DPP operands")
    vop3 = fmt.startswith(("VOP3", "VOP3SD"))
    packed = fmt.startswith("VOP3P")
    neg, abs_ = (0, 0) if bitop3 else (_field(inst, "neg", 0), _field(inst, "abs", 0))
    neg_hi = _field(inst, "neg_hi", 0)
    opsel = _field(inst, "opsel", 0)
    opsel_hi = (_field(inst, "opsel_hi", 3) | (_field(inst, "opsel_hi2", 1) << 2)) if packed else 0
    clamp = _field(inst, "clmp", 0)
    if _field(inst, "omod", 0) and not bitop3:
        raise UnsupportedInstruction(f"{name}: output modifier (omod)")

    # sources, in the order S0, S1, S2
    srcs = []
    for fname in ("src0", "vsrc0", "ssrc0", "src1", "vsrc1", "ssrc1", "src2"):
        if fname not in opinfo:
            continue
        code = _field(inst, fname)
        if code is None and fname.startswith("vsrc"):  # RDNA3's VOP3 of a VGPR-only VOP1 source:
            code = _field(inst, fname[1:])               # the 9-bit src field (VGPRs from 256)
        elif fname == "vsrc1":
            code += 256
        if sdwa and fname == "src0":
            code = _field(inst, "vsrc0") + (0 if _field(inst, "s0", 0) else 256)
        if sdwa and fname == "vsrc1" and _field(inst, "s1", 0):
            code -= 256
        fb, pk = _float_kind(opinfo[fname][0].name)
        srcs.append((fname, Operand(code, bits.get(fname, opinfo[fname][1]), fb, lit), pk))
    vcc_src = next((i for i, (f, o, _) in enumerate(srcs) if opinfo[f][0].name == "FMT_NUM_M64" or
                    (f == "src2" and opinfo[f][0].name == "FMT_NUM_M64")), None)
    mask_src = srcs.pop(vcc_src) if vcc_src is not None else None
    # destination
    dst_field = "vdst" if "vdst" in opinfo else ("sdst" if "sdst" in opinfo else None)
    if dst_field and opinfo[dst_field][2].name == "OPR_EXEC":  # gfx11 V_CMPX: EXEC is the only result
        dst_field = None
    dst_bits = bits.get(dst_field, 32) if dst_field else 0
    dst_fmt = opinfo[dst_field][0].name if dst_field else ""
    dst_is_sgpr = dst_field and (opinfo[dst_field][2].name in ("OPR_SREG", "OPR_SDST") or not vector)
    dst_code = _field(inst, dst_field) if dst_field else None
    if dst_field == "vdst" and not dst_is_sgpr:
        dst_code = dst_code + 256 if dst_code < 256 else dst_code
    sdst_carry = _field(inst, "sdst") if fmt.startswith("VOP3SD") else None
    if fmt == "VOPC_SDWA_SDST":
        sdst_carry = _field(inst, "sdst") if _field(inst, "sd", 0) else 106
        dst_is_sgpr, dst_code = True, (_field(inst, "sdst") if _field(inst, "sd", 0) else 106)
    zero_high16 = family == "cdna" and vector and not dst_is_sgpr and dst_bits == 16 and not sdwa
    wave_ieee = T(np.uint64(1), "u", 1)
    simm16 = _field(inst, "simm16")
    assigned, used = fn.assigned, fn.used
    # only what the pseudocode reads is built per execution (the dict costs more than most ops)
    reads_vcc = "VCC" in used
    reads_exec = bool({"EXEC", "EXECZ"} & used)
    pcode_opsel = "OPSEL" in text
    sopk = fmt.startswith("SOPK")
    # SOPK's constant: CDNA's pseudocode calls it S1 in compares (S0 the register) and S0
    # elsewhere; RDNA3's calls it SIMM16 and S0 is always the register (S_CMPK_LG_U32 s0, 0)
    sopk_register_s0 = sopk and ("S1" in text or "SIMM16" in text)
    is_branch = "PC" in assigned
    ins.is_branch = is_branch
    ins.control = is_branch or "PC" in used
    sgpr_dsts = {dst_code if dst_is_sgpr else None, sdst_carry}
    ins.writes_exec = "EXEC" in assigned or bool(sgpr_dsts & {125, 126, 127})
    lanes = ex.lanes
    sdwa_sel = [(_field(inst, "src0_sel", 6), _field(inst, "src0_sext", 0)),
                (_field(inst, "src1_sel", 6), _field(inst, "src1_sext", 0))] if sdwa else None
    sdwa_mods = [(_field(inst, "src0_neg", 0), _field(inst, "src0_abs", 0)),
                 (_field(inst, "src1_neg", 0), _field(inst, "src1_abs", 0))] if sdwa else None
    dst_sel = (_field(inst, "dst_sel", 6), _field(inst, "dst_unused", 0)) if sdwa and dst_field else None
    sdwa_dwords = [Operand(o.code, 32, o.fbits, o.lit) for _, o, _ in srcs[:2]] if sdwa else None

    fast = fastalu.has_form(text) and fastalu.prepare(ins, text, _FastSpec(
        vector=vector, lanes=lanes, simm16=simm16, lit=lit,
        modified=bool(sdwa or (opsel or neg_hi) and not packed or clamp or sopk or zero_high16),
        packed=packed, opsel=opsel, opsel_hi=opsel_hi, neg=neg, neg_hi=neg_hi,
        readers=[operand_reader(o, vector, ex.arch, 0 if packed else (neg >> i) & 1, 0 if packed else (abs_ >> i) & 1)
                 for i, (_f, o, _pk) in enumerate(srcs)],
        dst_bits=dst_bits,
        vdst=dst_code - 256 if dst_field and vector and not dst_is_sgpr else None,
        sdst=dst_code if dst_field and not vector and dst_code is not None and dst_code <= 127 else None,
        mask_dst=(sdst_carry if sdst_carry is not None else 106) if not dst_field else
        (dst_code if dst_is_sgpr else 106),
        carry_dst=sdst_carry if sdst_carry is not None else 106,
        mask_in=(lambda st, w: read_operand(st, w, mask_src[1], False)) if mask_src is not None else
        (lambda st, w: st.read_s64(w, 106))))
    if fast:
        ins.run = fast
        return

    def run(st, w):
        n = _n(st, w)
        E = {}
        for i, (_fname, o, _pk) in enumerate(srcs):
            v = read_operand(st, w, o, vector)
            if packed and not pcode_opsel:
                half = o.bits // 2
                hmask = np.uint64((1 << half) - 1)
                lo_v = (v >> np.uint64(half)) & hmask if (opsel >> i) & 1 else v & hmask
                hi_v = (v >> np.uint64(half)) & hmask if (opsel_hi >> i) & 1 else v & hmask
                v = lo_v | (hi_v << np.uint64(half))
                if o.fbits:
                    v = apply_float_mods(v, o.fbits, (neg >> i) & 1, 0, True, (neg_hi >> i) & 1)
            elif sdwa and i < 2:  # select from the whole dword, not the operand's 16 bits
                sel, sext = sdwa_sel[i]
                v = _sdwa_select(read_operand(st, w, sdwa_dwords[i], vector), sel, sext)
                v = apply_float_mods(v, o.fbits, sdwa_mods[i][0], sdwa_mods[i][1])
            else:
                if vop3 and o.bits == 16 and (opsel >> i) & 1:
                    v = read_operand(st, w, Operand(o.code, 32, o.fbits, o.lit), vector) >> np.uint64(16)
                # neg/abs on an untyped operand (v_cndmask_b32_e64 v3, -v3, ...) flip/clear its sign bit
                v = apply_float_mods(v, o.fbits or o.bits, (neg >> i) & 1, (abs_ >> i) & 1)
            E[f"S{i}"] = T(v, "u", max(o.bits, 32))
        if sopk:
            k = T(np.full(n, simm16, np.uint64), "u", 16)
            if sopk_register_s0:
                E["S0"], E["S1"] = T(st.sgpr[w, dst_code].astype(np.uint64), "u", 32), k
            else:
                E["S0"] = k
        if mask_src is not None:
            E["VCC"] = T(read_operand(st, w, mask_src[1], False).reshape(n, 1) if vector
                           else read_operand(st, w, mask_src[1], False), "u", 64)
        elif reads_vcc:
            vcc = st.read_s64(w, 106)
            E["VCC"] = T(vcc.reshape(n, 1) if vector else vcc, "u", 64)
        if not dst_field and vector:
            E["D0"] = Lanes(np.zeros((n, lanes), bool))
        if dst_field:
            if zero_high16:
                old = np.zeros((n, lanes), np.uint64)
            else:
                old = read_operand(st, w, Operand(dst_code, dst_bits), vector) if dst_code is not None and \
                    (dst_code >= 256 or dst_code <= 127) else np.zeros((n, 1), np.uint64)
            E["D0"] = T(old, "u", max(dst_bits, 32))
        if reads_exec:
            ex_bits = st.read_s64(w, 126)
            E["EXEC"] = T(ex_bits.reshape(n, 1) if vector else ex_bits, "u", 64)
            E["EXECZ"] = T((ex_bits == 0).astype(np.uint64), "u", 1)
        if "SCC" in used:
            E["SCC"] = T(st.scc[w].astype(np.uint64), "u", 1)
        if "VCCZ" in used:
            E["VCCZ"] = T((st.read_s64(w, 106) == 0).astype(np.uint64), "u", 1)
        if "laneId" in used:
            E["laneId"] = T(st.lane[None, :], "u", 32)
        E["WAVE_MODE_IEEE"] = wave_ieee
        if "M0" in used:
            E["M0"] = T(st.sgpr[w, st.m0].astype(np.uint64), "u", 32)
        if simm16 is not None:
            E["SIMM16"] = T(np.full(n, simm16, np.uint64), "u", 16)
        if pcode_opsel:
            E["OPSEL"] = T(np.uint64(opsel), "u", 3)
            E["OPSEL_HI"] = T(np.uint64(opsel_hi), "u", 3)
        if lit is not None:
            E["SIMM32"] = T(np.full(n if not vector else (n, 1), lit, np.uint64), "u", 32)
        if ins.control:
            E["PC"] = T(st.pc[w].astype(np.uint64), "u", 64)
        fn(E)
        emask = st.exec_mask(w) if vector else None
        # results
        d0 = E.get("D0")
        if "D0" in assigned and isinstance(d0, Lanes) and not dst_field:  # VOPC: D0 is VCC (or SDWA's
            # sdst); gfx11's V_CMPX assigns EXEC only and leaves VCC alone
            st.write_mask(w, sdst_carry if sdst_carry is not None else 106,
                          st.pack_lanes(w, np.broadcast_to(d0.a, (n, lanes)) & emask))
        elif dst_field and d0 is not None:
            if isinstance(d0, Lanes):
                m = st.pack_lanes(w, np.broadcast_to(d0.a, (n, lanes)) & emask)
                st.write_mask(w, dst_code if dst_is_sgpr else 106, m)
            elif vector and not dst_is_sgpr:
                v = np.broadcast_to(d0.bits(), (n, lanes))
                if clamp and dst_fmt.startswith("FMT_NUM_F") and dst_bits == 32:
                    f = v.astype(np.uint32).view(np.float32)
                    v = np.clip(f, 0.0, 1.0).astype(np.float32).view(np.uint32).astype(np.uint64)
                elif clamp and dst_fmt.startswith(("FMT_NUM_F16", "FMT_NUM_PK2_F16")):
                    raise UnsupportedInstruction(f"{name}: clamp on a 16-bit result")
                if dst_sel is not None:
                    sel, unused = dst_sel
                    lo, width = _SDWA_SEL[sel]
                    fm = np.uint64(((1 << width) - 1) << lo)
                    placed = (v << np.uint64(lo)) & fm
                    if unused == 2:
                        prev = read_operand(st, w, Operand(dst_code, 32), True)
                        v = (prev & ~fm) | placed
                    elif unused == 1 and width < 32:
                        sign = (placed >> np.uint64(lo + width - 1)) & np.uint64(1)
                        v = placed | (np.uint64(0xFFFFFFFF) & ~(fm | np.uint64((1 << lo) - 1)) * sign)
                    else:
                        v = placed
                elif vop3 and dst_bits == 16 and (opsel >> 3) & 1:
                    prev = read_operand(st, w, Operand(dst_code, 32), True)
                    v = (prev & np.uint64(0xFFFF)) | ((v & np.uint64(0xFFFF)) << np.uint64(16))
                    write_vgpr(st, w, dst_code - 256, v, 32, emask)
                    v = None
                if v is not None:
                    write_vgpr(st, w, dst_code - 256, v, dst_bits, emask)
            else:
                v = d0.bits().reshape(-1)
                if vector:  # a VALU op writing an SGPR (v_readfirstlane-like results are uniform)
                    v = np.broadcast_to(d0.bits(), (n, lanes))[:, 0]
                if dst_bits >= 64 and vector:  # a lane mask
                    st.write_mask(w, dst_code, v)
                elif dst_bits >= 64:
                    st.write_s64(w, dst_code, v)
                elif dst_code is not None and dst_code <= 127:
                    st.sgpr[w, dst_code] = (v & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        vcc = E.get("VCC")
        if isinstance(vcc, Lanes):
            m = st.pack_lanes(w, np.broadcast_to(vcc.a, (n, lanes)) & emask)
            st.write_mask(w, sdst_carry if sdst_carry is not None else 106, m)
        elif "VCC" in assigned and not vector:
            st.write_s64(w, 106, vcc.bits())
        execv = E.get("EXEC")
        if isinstance(execv, Lanes):
            st.write_mask(w, 126, st.pack_lanes(w, np.broadcast_to(execv.a, (n, lanes)) & emask))
        elif "EXEC" in assigned:
            st.write_s64(w, 126, execv.bits().reshape(-1))
        if "SCC" in assigned:
            st.scc[w] = E["SCC"].bits().reshape(-1).astype(np.uint32)
        if is_branch:
            st.pc[w] = E["PC"].bits().reshape(-1).astype(np.int64)
        elif ins.control:
            st.pc[w] += ins.size
    ins.run = run


# ---- memory instructions -------------------------------------------------------------------

# access size in bytes and sign extension, by the name's data-type part (both families' names)
_SIZES = {"UBYTE": (1, False), "SBYTE": (1, True), "USHORT": (2, False), "SSHORT": (2, True),
          "U8": (1, False), "I8": (1, True), "U16": (2, False), "I16": (2, True), "BYTE": (1, False),
          "SHORT": (2, False), "B8": (1, False), "B16": (2, False), "DWORD": (4, False), "B32": (4, False),
          "DWORDX2": (8, False), "B64": (8, False), "DWORDX3": (12, False), "B96": (12, False),
          "DWORDX4": (16, False), "B128": (16, False), "DWORDX8": (32, False), "DWORDX16": (64, False)}
_MEM = re.compile(r"^(?:GLOBAL|FLAT|SCRATCH|BUFFER|DS|S)_(LOAD|STORE|READ|WRITE)(2ST64|2|_2ADDR_STRIDE64|_2ADDR)?_"
                  r"(?:LDS_)?([A-Z0-9]+?)(_D16_HI|_D16)?$")

# gfx11 names its 16-bit-half accesses GLOBAL_LOAD_D16_HI_B16 where gfx9 says GLOBAL_LOAD_SHORT_D16_HI
_GFX11_D16 = re.compile(r"^(\w+?_(?:LOAD|STORE))_D16(_HI)?_([A-Z0-9]+)$")


def _sext(value, bits):
    sign = 1 << (bits - 1)
    return (value ^ sign) - sign


_U32 = np.uint64(0xFFFFFFFF)


class Space:
    """Where a memory instruction's addresses point: 'global', 'lds', 'private'."""
    GLOBAL, LDS, PRIVATE = "global", "lds", "private"


def _bytes_to_words(data):
    """(n, L, size) uint8 -> list of uint64 (n, L) 32-bit words (little endian, zero padded)."""
    size = data.shape[-1]
    pad = -size % 4
    if pad:
        data = np.concatenate([data, np.zeros(data.shape[:-1] + (pad,), np.uint8)], axis=-1)
    words = np.ascontiguousarray(data).view(np.uint32)
    return [words[..., i].astype(np.uint64) for i in range(words.shape[-1])]


def _words_to_bytes(words, size):
    arr = np.stack([np.asarray(x, np.uint64).astype(np.uint32) for x in words], axis=-1)
    return np.ascontiguousarray(arr).view(np.uint8)[..., :size]


def mem_access(st, w, space, addrs, active, size, data=None):
    """Load (data None: returns (n, L, size) bytes, zeros where inactive) or store `data`
    ((n, L, size) bytes) at per-lane addresses (n, L) of `space`, lanes in `active`."""
    n, L = addrs.shape
    out = np.zeros((n, L, size), np.uint8) if data is None else None
    if not np.any(active):
        return out
    if space == Space.LDS:
        lds_bytes = st.lds.shape[1]
        a = addrs.astype(np.int64)
        if np.any(active & (a + size > lds_bytes)):
            bad = int(a[active & (a + size > lds_bytes)][0])
            raise KernelFault(f"LDS access of {size} bytes at {bad} beyond the workgroup's {lds_bytes} bytes")
        wg = st.wg[w] if not isinstance(w, slice) else st.wg
        flat = (wg[:, None] * lds_bytes + a)[active]
        cols = np.arange(size)
        lds = st.lds.reshape(-1)
        if data is None:
            out[active] = lds[flat[:, None] + cols]
        else:
            lds[flat[:, None] + cols] = data[active]
        return out
    if space == Space.PRIVATE:
        if st.scratch_lane_bytes == 0:
            raise KernelFault("private memory access in a kernel launched without scratch")
        if np.any(active & (addrs + np.uint64(size) > np.uint64(st.scratch_lane_bytes))):
            raise KernelFault(f"private access beyond the {st.scratch_lane_bytes} bytes of scratch per lane")
        base = (st.scratch_base[w] if not isinstance(w, slice) else st.scratch_base)[:, None]
        lane = st.lane[None, :]
        if size % 4 == 0:  # whole dwords, each swizzled on its own: all of them in one access
            a = addrs[..., None] + np.arange(0, size, 4, dtype=np.uint64)
            phys = base[..., None] + (a >> np.uint64(2)) * np.uint64(4 * L) + lane[..., None] * np.uint64(4) + \
                (a & np.uint64(3))
            if data is None:
                out[active] = st.memory.gather(phys[active].reshape(-1), 4, "private load").reshape(-1, size)
            else:
                st.memory.scatter(phys[active].reshape(-1), data[active].reshape(-1, 4), "private store")
            return out
        chunks = []
        for off in range(0, size, 4):  # element size 4: each dword of a lane is swizzled on its own
            a = addrs + np.uint64(off)
            phys = base + (a >> np.uint64(2)) * np.uint64(4 * L) + lane * np.uint64(4) + (a & np.uint64(3))
            chunk = min(4, size - off)
            if data is None:
                chunks.append(st.memory.gather(phys[active], chunk, "private load"))
            else:
                st.memory.scatter(phys[active], data[active][:, off:off + chunk], "private store")
        if data is None:
            out[active] = np.concatenate(chunks, axis=1)
        return out
    if data is None:
        out[active] = st.memory.gather(addrs[active].astype(np.uint64), size)
    else:
        st.memory.scatter(addrs[active].astype(np.uint64), data[active])
    return out


def flat_access(st, w, addrs, active, size, data=None):
    """FLAT: each lane's address picks LDS, private or global memory by its aperture."""
    shared = (addrs >= np.uint64(SHARED_BASE)) & (addrs < np.uint64(SHARED_BASE + APERTURE))
    private = (addrs >= np.uint64(PRIVATE_BASE)) & (addrs < np.uint64(PRIVATE_BASE + APERTURE))
    out = None
    for space, sel, base in ((Space.GLOBAL, ~(shared | private), 0), (Space.LDS, shared, SHARED_BASE),
                             (Space.PRIVATE, private, PRIVATE_BASE)):
        act = active & sel
        if np.any(act):
            r = mem_access(st, w, space, addrs - np.uint64(base), act, size, data)
            if data is None:
                out = r if out is None else np.where(act[..., None], r, out)
    if data is None and out is None:
        out = np.zeros(addrs.shape + (size,), np.uint8)
    return out


def _atomic_value(kind, old, src, cmp, bits):
    """The new memory value of one lane's atomic (Python ints of `bits` bits)."""
    m = (1 << bits) - 1
    integer = {
        "ADD": lambda: (old + src) & m, "SUB": lambda: (old - src) & m, "SWAP": lambda: src,
        "CMPSWAP": lambda: src if old == cmp else old,
        "SMIN": lambda: src if _sext(src, bits) < _sext(old, bits) else old,
        "SMAX": lambda: src if _sext(src, bits) > _sext(old, bits) else old,
        "UMIN": lambda: min(old, src), "UMAX": lambda: max(old, src),
        "AND": lambda: old & src, "OR": lambda: old | src, "XOR": lambda: old ^ src,
        "INC": lambda: 0 if old >= src else old + 1, "DEC": lambda: src if old == 0 or old > src else old - 1}
    for alias, kinds in (("SMIN", ("MIN_I32", "MIN_I64")), ("SMAX", ("MAX_I32", "MAX_I64")),
                         ("UMIN", ("MIN_U32", "MIN_U64")), ("UMAX", ("MAX_U32", "MAX_U64"))):
        if kind in kinds:
            kind = alias
    if kind in integer:
        return integer[kind]()
    if kind in ("ADD_F32", "ADD_F64"):
        dt, ut = (np.float32, np.uint32) if bits == 32 else (np.float64, np.uint64)
        r = np.array(old, ut).view(dt) + np.array(src, ut).view(dt)
        return int(np.array(r, dt).view(ut))
    if kind in ("MIN_F64", "MAX_F64", "MIN_F32", "MAX_F32"):
        dt, ut = (np.float32, np.uint32) if bits == 32 else (np.float64, np.uint64)
        a, b = np.array(old, ut).view(dt), np.array(src, ut).view(dt)
        r = (np.fmin if "MIN" in kind else np.fmax)(a, b)
        return int(np.array(r, dt).view(ut))
    if kind in ("PK_ADD_F16", "PK_ADD_BF16"):
        halves = []
        for s in (0, 16):
            a, b = (old >> s) & 0xFFFF, (src >> s) & 0xFFFF
            if kind == "PK_ADD_F16":
                r = int(np.array(np.array(a, np.uint16).view(np.float16) + np.array(b, np.uint16).view(np.float16),
                                 np.float16).view(np.uint16))
            else:
                f = np.array([a << 16, b << 16], np.uint32).view(np.float32)
                r = int(f32_to_bf16_bits(np.array([f[0] + f[1]], np.float32))[0])
            halves.append(r << s)
        return halves[0] | halves[1]
    raise UnsupportedInstruction(f"atomic {kind}")


_ATOMIC = re.compile(r"^(?:GLOBAL|FLAT|BUFFER|DS)_(?:ATOMIC_)?([A-Z0-9_]+?)(_RTN)?(_X2|_U64|_B64|_I64|_F64)?"
                     r"(_RTN)?$")
_ATOMIC_KINDS = ("CMPSWAP", "SWAP", "ADD", "SUB", "SMIN", "UMIN", "SMAX", "UMAX", "AND", "OR", "XOR", "INC", "DEC",
                 "ADD_F32", "ADD_F64", "MIN_F64", "MAX_F64", "PK_ADD_F16", "PK_ADD_BF16", "MIN_F32", "MAX_F32",
                 "MIN_I32", "MAX_I32", "MIN_U32", "MAX_U32", "ADD_U32", "SUB_U32", "CMPSWAP_B32", "SWAP_B32",
                 "AND_B32", "OR_B32", "XOR_B32", "ADD_U64", "CMPSWAP_B64", "RSUB")


def run_atomic(st, w, space, kind, bits, addrs, active, src_words, cmp_words, access=None):
    """Lane by lane, in wave then lane order (an order the hardware may also take):
    returns the old values as 32-bit word lists."""
    size = bits // 8
    n, L = addrs.shape
    old_out = [np.zeros((n, L), np.uint64) for _ in range(bits // 32)]
    access = access or (lambda a, act, d=None: mem_access(st, w, space, a, act, size, d))
    for i, j in zip(*np.nonzero(active)):
        one = np.zeros((n, L), bool)
        one[i, j] = True
        raw = access(addrs, one)[i, j]
        old = int.from_bytes(raw.tobytes(), "little")
        src = sum(int(x[i, j]) << (32 * k) for k, x in enumerate(src_words))
        cmp = sum(int(x[i, j]) << (32 * k) for k, x in enumerate(cmp_words)) if cmp_words else None
        new = _atomic_value(kind, old, src, cmp, bits)
        buf = np.zeros((n, L, size), np.uint8)
        buf[i, j] = np.frombuffer(new.to_bytes(size, "little"), np.uint8)
        access(addrs, one, buf)
        for k in range(bits // 32):
            old_out[k][i, j] = (old >> (32 * k)) & 0xFFFFFFFF
    return old_out


def _vreg_words(st, w, code, count, agpr=False):
    file = st.agpr if agpr else st.vgpr
    return [file[w, code + k, :].astype(np.uint64) for k in range(count)]


def prepare_memory(ins: Instr, ex) -> None:
    inst, fmt, name = ins.inst, ins.fmt, ins.name
    acc = bool(_field(inst, "acc", 0))
    if fmt == "SMEM":
        return _prepare_smem(ins, ex)
    ins.writes_exec = False  # the others write VGPRs and memory
    if name in ("BUFFER_WBINVL1", "BUFFER_WBINVL1_VOL", "BUFFER_WBL2", "BUFFER_INV", "BUFFER_GL0_INV",
                "BUFFER_GL1_INV"):
        ins.run = _advance(ins)
        return
    if fmt == "DS" and name in ("DS_BPERMUTE_B32", "DS_PERMUTE_B32", "DS_SWIZZLE_B32"):
        return _prepare_lane_permute(ins, ex)
    m = _MEM.match(_GFX11_D16.sub(r"\1_\3_D16\2", name))
    atomic = None
    if m is None:
        am = _ATOMIC.match(name)
        if am is None:
            raise UnsupportedInstruction(f"{name} ({fmt})")
        kind = am.group(1)
        wide = bool(am.group(3))
        if am.group(3) == "_F64":  # GLOBAL_ATOMIC_ADD_F64 (gfx940) is a float add, not ADD_X2's integer one
            kind += "_F64"
        kind = {"ADD_U32": "ADD", "SUB_U32": "SUB", "CMPSWAP_B32": "CMPSWAP", "SWAP_B32": "SWAP",
                "AND_B32": "AND", "OR_B32": "OR", "XOR_B32": "XOR", "ADD_U64": "ADD",
                "CMPSWAP_B64": "CMPSWAP"}.get(kind, kind)
        if kind not in _ATOMIC_KINDS:
            raise UnsupportedInstruction(f"{name} ({fmt})")
        if kind in ("ADD_F64", "MIN_F64", "MAX_F64"):
            wide = True
        returns = bool(am.group(2) or am.group(4)) if fmt == "DS" else \
            bool(_field(inst, "sc0", 0) or _field(inst, "glc", 0))
        atomic = (kind, 64 if wide else 32, returns)
        is_load, size, signed, d16 = False, (8 if wide else 4), False, None
    else:
        is_load = m.group(1) in ("LOAD", "READ")
        try:
            size, signed = _SIZES[m.group(3)]
        except KeyError:
            raise UnsupportedInstruction(f"{name} ({fmt}): data type {m.group(3)}") from None
        d16 = m.group(4)
        two = m.group(2)
    space_of = {"DS": Space.LDS, "GLOBAL": Space.GLOBAL, "SCRATCH": Space.PRIVATE}.get(fmt.split("_")[0])
    lanes = ex.lanes

    if fmt == "DS":
        off0, off1 = _field(inst, "offset0"), _field(inst, "offset1")
        addr_reg, vdst = _field(inst, "addr"), _field(inst, "vdst")
        d0, d1 = _field(inst, "data0"), _field(inst, "data1")
        pairs = atomic is None and two is not None
        scale = (64 if "ST64" in (two or "") or "STRIDE64" in (two or "") else 1) * size

        # the LDS address is the 32-bit sum of the VGPR and the offset: LLVM folds an offset
        # into a negative base (LLVM 23's gfx950 code: v22 = v9 - 128, ds_read_b128 v22 offset:12672)
        def addresses(st, w):
            base = st.vgpr[w, addr_reg, :].astype(np.uint64)
            if pairs:
                return [(base + np.uint64(off0 * scale)) & _U32, (base + np.uint64(off1 * scale)) & _U32]
            return [(base + np.uint64(off0 | (off1 << 8))) & _U32]
        data_regs = [d0, d1]
    else:
        saddr = _field(inst, "saddr", 0x7F)
        off_field = type(inst).offset
        offset = _field(inst, "offset")
        if fmt in ("GLOBAL", "SCRATCH") or ex.family != "cdna":
            offset = _sext(offset, off_field.hi - off_field.lo + 1)
        addr_reg, vdst, dreg = _field(inst, "addr") if fmt != "MUBUF" else _field(inst, "vaddr"), \
            _field(inst, "vdst") if fmt != "MUBUF" else _field(inst, "vdata"), \
            _field(inst, "data") if fmt != "MUBUF" else _field(inst, "vdata")
        data_regs = [dreg, dreg + size // 4 if size >= 4 else dreg]
        # FLAT (segment 0) has no SGPR base: its address is always the VGPR pair
        saddr_off = fmt == "FLAT" or (saddr in (0x7F, 124, 125) if ex.family == "cdna" else saddr == 124)
        sve = _field(inst, "sve", 0)

        if fmt == "MUBUF":
            offen, idxen = _field(inst, "offen"), _field(inst, "idxen")
            srsrc, soffset = _field(inst, "srsrc") << 2, _field(inst, "soffset")
            if _field(inst, "lds", 0):
                raise UnsupportedInstruction(f"{name}: buffer load to LDS")

            def addresses(st, w):
                return [_buffer_address(st, w, srsrc, soffset, offen, idxen, addr_reg, offset, size)]
        elif fmt == "SCRATCH":
            # gfx90a: the VGPR address is used when there is no SGPR one; gfx940 and gfx11 say
            # so with the SVE bit (neither register: the offset alone addresses the lane's memory)
            use_vaddr = saddr_off if ex.arch == "gfx90a" else bool(sve)

            def addresses(st, w):
                n = _n(st, w)
                a = np.zeros((n, lanes), np.uint64)
                if not saddr_off:
                    a = a + st.sgpr[w, saddr].astype(np.uint64)[:, None]
                if use_vaddr:
                    a = a + st.vgpr[w, addr_reg, :].astype(np.uint64)
                return [(a + np.uint64(offset & ((1 << 64) - 1))) & np.uint64(0xFFFFFFFF)]
        else:
            def addresses(st, w):
                if saddr_off:
                    a = st.vgpr[w, addr_reg, :].astype(np.uint64) | \
                        (st.vgpr[w, addr_reg + 1, :].astype(np.uint64) << np.uint64(32))
                else:
                    a = st.read_s64(w, saddr)[:, None] + st.vgpr[w, addr_reg, :].astype(np.uint64)
                return [a + np.uint64(offset & ((1 << 64) - 1))]

    def access(st, w, addrs, active, nbytes, data=None):
        if fmt == "FLAT":
            return flat_access(st, w, addrs, active, nbytes, data)
        if fmt == "MUBUF":  # the descriptor's swizzle is already in the address, per dword
            return mem_access(st, w, Space.GLOBAL, addrs, active, nbytes, data)
        return mem_access(st, w, space_of, addrs, active, nbytes, data)

    def run(st, w):
        active = st.exec_mask(w)
        addr_list = addresses(st, w)
        if atomic is not None:
            kind, bits, returns = atomic
            nw = bits // 32
            if fmt == "DS":
                src = _vreg_words(st, w, data_regs[0], nw)
                cmp = _vreg_words(st, w, data_regs[1], nw) if kind == "CMPSWAP" else None
                if kind == "CMPSWAP":  # DS_CMPST: data0 is the compare value, data1 the new one
                    src, cmp = cmp, src
            else:
                words = _vreg_words(st, w, data_regs[0], nw * (2 if kind == "CMPSWAP" else 1), acc)
                src, cmp = words[:nw], (words[nw:] if kind == "CMPSWAP" else None)
            old = run_atomic(st, w, space_of, kind, bits, addr_list[0], active, src, cmp,
                             access=lambda a, act, d=None: access(st, w, a, act, bits // 8, d))
            if returns:
                write_vgpr(st, w, vdst, old, bits, active, acc)
            return
        if is_load:
            if fmt == "MUBUF" and size > 4:
                parts = [access(st, w, _buffer_address(st, w, srsrc, soffset, offen, idxen, addr_reg, offset + k, 4),
                                active, 4) for k in range(0, size, 4)]
                raw = np.concatenate(parts, axis=-1)
            else:
                parts = [access(st, w, a, active, size) for a in addr_list]
                raw = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)
            if size % 4 == 0:  # whole dwords: straight into the registers
                dwords = np.ascontiguousarray(raw).view(np.uint32)
                file = st.agpr if acc else st.vgpr
                for k in range(dwords.shape[-1]):
                    fastalu.write_lanes(st, w, file, vdst + k, dwords[..., k], active)
                return
            words = _bytes_to_words(raw)
            if size < 4:
                v = words[0] & np.uint64((1 << (8 * size)) - 1)
                if signed:
                    v = np.asarray(_sext(v.astype(np.int64), 8 * size)).astype(np.uint64) & np.uint64(0xFFFFFFFF)
                if d16:
                    prev = st.vgpr[w, vdst, :].astype(np.uint64) if not acc else st.agpr[w, vdst, :].astype(np.uint64)
                    if d16 == "_D16_HI":
                        v = (prev & np.uint64(0xFFFF)) | ((v & np.uint64(0xFFFF)) << np.uint64(16))
                    else:
                        v = (prev & np.uint64(0xFFFF0000)) | (v & np.uint64(0xFFFF))
                words = [v]
            write_vgpr(st, w, vdst, words, 32 * len(words), active, acc)
        else:
            nw = max(1, size // 4)
            regs = [data_regs[0]] if fmt != "DS" or not (two) else [data_regs[0], data_regs[1]]
            for a, reg in zip(addr_list, regs):
                if size % 4 == 0:  # whole dwords: the registers' bytes, lane by lane
                    file = st.agpr if acc else st.vgpr
                    data = np.ascontiguousarray(np.moveaxis(file[w, reg:reg + nw], 1, -1)).view(np.uint8)
                else:
                    words = _vreg_words(st, w, reg, nw, acc)
                    if d16 == "_D16_HI":
                        words = [w_ >> np.uint64(16) for w_ in words]
                    data = _words_to_bytes(words, size)
                if fmt == "MUBUF" and size > 4:
                    for k in range(0, size, 4):
                        access(st, w, _buffer_address(st, w, srsrc, soffset, offen, idxen, addr_reg, offset + k, 4),
                               active, 4, data[..., k:k + 4])
                else:
                    access(st, w, a, active, size, data)
    ins.run = run


def _buffer_address(st, w, srsrc, soffset_code, offen, idxen, vaddr, inst_offset, size):
    """MUBUF addressing (gfx9 buffer resource: base, stride, swizzle, ADD_TID, index stride,
    element size) for each lane."""
    d0, d1, d3 = (st.sgpr[w, srsrc + k].astype(np.uint64) for k in (0, 1, 3))
    base = d0 | ((d1 & np.uint64(0xFFFF)) << np.uint64(32))
    stride = (d1 >> np.uint64(16)) & np.uint64(0x3FFF)
    swizzle = (d1 >> np.uint64(31)) & np.uint64(1)
    elem = np.uint64(2) << ((d3 >> np.uint64(19)) & np.uint64(3))
    istride = np.uint64(8) << ((d3 >> np.uint64(21)) & np.uint64(3))
    add_tid = (d3 >> np.uint64(23)) & np.uint64(1)
    soff = read_operand(st, w, Operand(soffset_code, 32), False)
    n = _n(st, w)
    lanes = st.lane[None, :]
    v0 = st.vgpr[w, vaddr, :].astype(np.uint64)
    v1 = st.vgpr[w, vaddr + 1, :].astype(np.uint64)
    index = (v0 if idxen else np.zeros((n, st.L), np.uint64)) + add_tid[:, None] * lanes
    voff = (v1 if idxen else v0) if offen else np.zeros((n, st.L), np.uint64)
    offset = voff + np.uint64(inst_offset)
    sw = swizzle[:, None].astype(bool)
    e, s = elem[:, None], istride[:, None]
    swz = (index // s * stride[:, None] + offset // e * e) * s + index % s * e + offset % e
    lin = index * stride[:, None] + offset
    return base[:, None] + soff[:, None] + np.where(sw, swz, lin)


def _prepare_smem(ins, ex):
    inst, name = ins.inst, ins.name
    if name in ("S_DCACHE_WB", "S_DCACHE_INV", "S_DCACHE_WB_VOL", "S_DCACHE_INV_VOL", "S_GL1_INV"):
        ins.run = _advance(ins)
        return
    m = re.match(r"^S_(BUFFER_)?LOAD_(DWORD(?:X\d+)?|B32|B64|B128|B256|B512)$", name)
    if not m:
        raise UnsupportedInstruction(f"{name} (SMEM)")
    size = {"DWORD": 4, "B32": 4, "DWORDX2": 8, "B64": 8, "DWORDX4": 16, "B128": 16, "DWORDX8": 32, "B256": 32,
            "DWORDX16": 64, "B512": 64}[m.group(2)]
    buffer = bool(m.group(1))
    sbase, sdata = _field(inst, "sbase") << 1, _field(inst, "sdata")
    ins.writes_exec = sdata + size // 4 > 126
    offset_f, soffset = _field(inst, "offset"), _field(inst, "soffset", 124)
    if ex.family == "cdna":
        imm, soe = _field(inst, "imm", 1), _field(inst, "soffset_en", 0)
        const = _sext(offset_f, 21) if imm else None
        sreg = None if imm else offset_f & 0x7F
        sreg2 = soffset if soe else None
    else:
        const, sreg, sreg2 = _sext(offset_f, 21), None, (None if soffset == 124 else soffset)

    def run(st, w):
        base = st.read_s64(w, sbase) & np.uint64((1 << 48) - 1) if buffer else st.read_s64(w, sbase)
        off = np.zeros(_n(st, w), np.int64)
        if const is not None:
            off += const
        for r in (sreg, sreg2):
            if r is not None:
                off += st.sgpr[w, r].astype(np.int64)
        addr = (base.astype(np.int64) + off).astype(np.uint64) & ~np.uint64(3)
        raw = st.memory.gather(addr, size, f"{name}")
        words = raw.view(np.uint32)
        st.sgpr[w, sdata:sdata + size // 4] = words
    ins.run = run


def _advance(ins):
    """The run of an instruction that changes nothing the executor models (its PC advances)."""
    ins.writes_exec = False
    return _nothing


def _nothing(st, w):
    pass


# ---- cross-lane, matrix and control instructions ---------------------------------------------

def _prepare_lane_permute(ins, ex):
    inst, name = ins.inst, ins.name
    addr_reg, data0, vdst = _field(inst, "addr"), _field(inst, "data0"), _field(inst, "vdst")
    offset = _field(inst, "offset0") | (_field(inst, "offset1") << 8)
    L = ex.lanes

    def run(st, w):
        active = st.exec_mask(w)
        src = st.vgpr[w, data0, :]
        n = src.shape[0]
        rows = np.arange(n)[:, None]
        if name == "DS_SWIZZLE_B32":
            i = np.arange(L)
            if offset & 0x8000:  # quad permute: 2-bit lane selects within each group of 4
                sel = np.array([(offset >> (2 * k)) & 3 for k in range(4)])
                j = (i & ~3) | sel[i & 3]
            else:  # bit masks within groups of 32 lanes
                and_m, or_m, xor_m = offset & 0x1F, (offset >> 5) & 0x1F, (offset >> 10) & 0x1F
                j = (i & ~0x1F) | ((((i & 0x1F) & and_m) | or_m) ^ xor_m)
            j = np.broadcast_to(j, (n, L))
            val = np.where(active[rows, j], src[rows, j], 0)
            st.vgpr[w, vdst, :] = np.where(active, val, st.vgpr[w, vdst, :])
        else:
            lane = ((st.vgpr[w, addr_reg, :].astype(np.int64) + offset) // 4) % L
            if name == "DS_BPERMUTE_B32":  # pull: each active lane reads its chosen lane (0 if inactive)
                val = np.where(active[rows, lane], src[rows, lane], 0)
                st.vgpr[w, vdst, :] = np.where(active, val, st.vgpr[w, vdst, :])
            else:  # DS_PERMUTE_B32, push: each active lane writes to its chosen lane
                out = np.zeros_like(src)
                for k in range(L):  # in lane order: the highest lane wins a collision
                    sel = active[:, k]
                    out[np.nonzero(sel)[0], lane[sel, k]] = src[sel, k]
                st.vgpr[w, vdst, :] = np.where(active, out, st.vgpr[w, vdst, :])
    ins.run = run
    ins.writes_exec = False


# the special instructions that write an SGPR, and the field naming it (the others write none)
_SPECIAL_SGPR_DST = {"S_GETREG_B32": "sdst", "V_READLANE_B32": "vdst", "V_READFIRSTLANE_B32": "vdst",
                     "V_READFIRSTLANE_B32_E32": "vdst", "V_MAD_U64_U32": "sdst", "V_MAD_I64_I32": "sdst",
                     "V_MAD_CO_U64_U32": "sdst", "V_MAD_CO_I64_I32": "sdst"}


def _prepare_special(ins, ex):
    """Instructions run here rather than from pseudocode; returns False if `ins` is not one."""
    inst, name, L = ins.inst, ins.name, ex.lanes
    if name in ("S_ENDPGM", "S_BARRIER", "S_TRAP"):
        ins.control, ins.writes_exec = True, False
    if name == "S_ENDPGM":
        def run(st, w):
            st.done[w] = True
    elif name == "S_BARRIER":
        def run(st, w):
            st.barrier[w] = True
            st.pc[w] += ins.size
    elif name in ("S_WAITCNT", "S_NOP", "S_SETPRIO", "S_SLEEP", "S_CLAUSE", "S_DELAY_ALU", "S_WAITCNT_VSCNT",
                  "S_WAITCNT_VMCNT", "S_WAITCNT_EXPCNT", "S_WAITCNT_LGKMCNT", "S_SENDMSG", "S_ICACHE_INV",
                  "S_INST_PREFETCH", "S_SETREG_B32", "S_SETREG_IMM32_B32", "S_TTRACEDATA", "S_CODE_END",
                  "S_WAITCNT_DEPCTR", "S_SET_INST_PREFETCH_DISTANCE", "V_NOP", "V_NOP_E32"):
        # waits order nothing here (every access completes at once); s_setreg changes only
        # MODE's float modes, which the executor does not model (IEEE, denormals kept); v_nop:
        # clang-19's gfx1151 code pads WMMA hazards with it
        run = _advance(ins)
    elif name == "S_TRAP":
        def run(st, w):
            raise KernelFault("s_trap: a device-side abort")  # _run adds the kernel and the address
    elif name == "S_GETREG_B32":
        simm = _field(inst, "simm16")
        hw, off, size = simm & 0x3F, (simm >> 6) & 0x1F, ((simm >> 11) & 0x1F) + 1
        sdst = _field(inst, "sdst")
        values = {1: ex.mode_register, 2: 0, 4: 0,  # MODE, STATUS, HW_ID
                  15: ((SHARED_BASE >> 48) << 16) | (PRIVATE_BASE >> 48)}  # SH_MEM_BASES (gfx9)
        if hw not in values:
            raise UnsupportedInstruction(f"s_getreg_b32 of hardware register {hw}")
        value = (values[hw] >> off) & ((1 << size) - 1)

        def run(st, w):
            st.sgpr[w, sdst] = value
    elif name in ("V_READLANE_B32", "V_READFIRSTLANE_B32", "V_READFIRSTLANE_B32_E32", "V_WRITELANE_B32"):
        src0 = _field(inst, "src0")
        src1 = _field(inst, "src1", None)
        vdst = _field(inst, "vdst")
        lit = _field(inst, "literal")

        def run(st, w):
            n = _n(st, w)
            rows = np.arange(n)
            if name == "V_WRITELANE_B32":
                val = read_operand(st, w, Operand(src0, 32, None, lit), False)
                lane = (read_operand(st, w, Operand(src1, 32, None, lit), False) % L).astype(np.int64)
                regs = st.vgpr[w, vdst, :]
                regs[rows, lane] = val.astype(np.uint32)
                st.vgpr[w, vdst, :] = regs
            else:
                if name == "V_READLANE_B32":
                    lane = (read_operand(st, w, Operand(src1, 32, None, lit), False) % L).astype(np.int64)
                else:
                    e = st.exec_mask(w)
                    lane = np.where(e.any(axis=1), e.argmax(axis=1), 0)
                if src0 >= 256:
                    val = st.vgpr[w, src0 - 256, :][rows, lane]
                else:
                    val = read_operand(st, w, Operand(src0, 32, None, lit), False).astype(np.uint32)
                st.sgpr[w, vdst] = val
    elif name in ("V_MAD_U64_U32", "V_MAD_I64_I32", "V_MAD_CO_U64_U32", "V_MAD_CO_I64_I32"):  # gfx12 adds _CO
        lit = _field(inst, "literal")  # gfx11's VOP3 takes a literal (v_mad_u64_u32 v[2:3], null, s33, 0x..., v[0:1])
        ops = [Operand(_field(inst, f), b, None, lit) for f, b in (("src0", 32), ("src1", 32), ("src2", 64))]
        vdst, sdst = _field(inst, "vdst"), _field(inst, "sdst")
        signed = "I64" in name

        def run(st, w):
            a, b, c = (read_operand(st, w, o, True) for o in ops)
            e = st.exec_mask(w)
            if signed:
                a = a.astype(np.int64) << 32 >> 32
                b = b.astype(np.int64) << 32 >> 32
                p = a * b
                cs = c.astype(np.int64)
                r = p + cs
                carry = ((p ^ r) & (cs ^ r)) < 0
                r = r.astype(np.uint64)
            else:
                p = a * b
                r = p + c
                carry = r < c
            r = np.broadcast_to(r, e.shape)
            write_vgpr(st, w, vdst, r, 64, e)
            st.write_mask(w, sdst, st.pack_lanes(w, np.broadcast_to(carry, e.shape) & e))
    elif name in ("S_BITSET0_B32", "S_BITSET1_B32", "S_BITSET0_B64", "S_BITSET1_B64"):
        # D0[S0[4:0] (5:0 for B64)] = 0 or 1: an indexed bit assignment, which pcode.py does not translate
        sdst, bits = _field(inst, "sdst"), 64 if name.endswith("B64") else 32
        src = Operand(_field(inst, "ssrc0"), 32, None, _field(inst, "literal"))
        one = name.startswith("S_BITSET1")

        def run(st, w):
            bit = np.uint64(1) << (read_operand(st, w, src, False) & np.uint64(bits - 1))
            old = st.read_s64(w, sdst) if bits == 64 else st.sgpr[w, sdst].astype(np.uint64)
            new = (old | bit) if one else (old & ~bit)
            if bits == 64:
                st.write_s64(w, sdst, new)
            else:
                st.sgpr[w, sdst] = new.astype(np.uint32)
    elif name.startswith(("V_MOVRELS_B32", "V_MOVRELD_B32", "V_MOVRELSD_B32")):
        # VGPR-indexed moves (a private array kept in registers): the source and/or destination
        # register number plus M0, per wave. gfx11 only (gfx9 uses s_set_gpr_idx instead).
        kind = name.split("_")[1]
        src, vdst = _field(inst, "src0"), _field(inst, "vdst")
        if src < 256 and kind != "MOVRELD":
            raise UnsupportedInstruction(f"{name} with a scalar source")
        lit = _field(inst, "literal")

        def run(st, w):
            waves = np.arange(st.W)[w]
            for wave in waves:
                m0 = int(st.sgpr[wave, st.m0])
                s_reg = src - 256 + (m0 if kind in ("MOVRELS", "MOVRELSD") else 0)
                d_reg = vdst + (m0 if kind in ("MOVRELD", "MOVRELSD") else 0)
                if max(s_reg, d_reg) >= st.vgpr.shape[1]:
                    raise KernelFault(f"{name}: v{max(s_reg, d_reg)} (M0 = {m0}) beyond the wave's VGPRs")
                value = st.vgpr[wave, s_reg, :] if src >= 256 else \
                    read_operand(st, [wave], Operand(src, 32, None, lit), False).astype(np.uint32)
                e = st.exec_mask([wave])[0]
                st.vgpr[wave, d_reg, e] = np.broadcast_to(value, e.shape)[e]
    elif name in ("V_PERM_B32", "V_PERM_B32_E64"):
        ops = [Operand(_field(inst, f), 32, None, _field(inst, "literal")) for f in ("src0", "src1", "src2")]
        vdst = _field(inst, "vdst")

        def run(st, w):
            s0, s1, sel = (np.broadcast_to(read_operand(st, w, o, True), (_n(st, w), L)) for o in ops)
            data = s1 | (s0 << np.uint64(32))  # bytes 0-3 from S1, 4-7 from S0
            out = np.zeros_like(s0)
            for k in range(4):
                sb = (sel >> np.uint64(8 * k)) & np.uint64(0xFF)
                byte = (data >> (np.minimum(sb, 7) * np.uint64(8))) & np.uint64(0xFF)
                sign_src = (data >> ((np.clip(sb, 8, 11) - np.uint64(8)) * np.uint64(16) + np.uint64(15))) & \
                    np.uint64(1)
                byte = np.where(sb < 8, byte, np.where(sb < 12, sign_src * np.uint64(0xFF),
                                                       np.where(sb == 12, 0, 0xFF)).astype(np.uint64))
                out |= byte << np.uint64(8 * k)
            write_vgpr(st, w, vdst, out, 32, st.exec_mask(w))
    elif name.startswith("V_ACCVGPR_"):
        src0, vdst = _field(inst, "src0"), _field(inst, "vdst")
        lit = _field(inst, "literal")
        kind = name[len("V_ACCVGPR_"):].split("_")[0]

        def run(st, w):
            e = st.exec_mask(w)
            if kind == "READ":   # VGPR <- AGPR
                v = st.agpr[w, src0 - 256, :].astype(np.uint64)
                write_vgpr(st, w, vdst, v, 32, e)
            else:                # AGPR <- VGPR / constant (WRITE), AGPR <- AGPR (MOV)
                v = st.agpr[w, src0 - 256, :].astype(np.uint64) if kind == "MOV" else \
                    np.broadcast_to(read_operand(st, w, Operand(src0, 32, None, lit), True), e.shape)
                write_vgpr(st, w, vdst, v, 32, e, agpr=True)
    elif ins.fmt.startswith("VOPD"):
        return _prepare_vopd(ins, ex)
    elif name.startswith("V_MFMA_"):
        return _prepare_mfma(ins, ex)
    elif name.startswith(("V_WMMA_", "V_SWMMAC_")):
        return wmma.prepare(ins, ex, {f: _field(inst, f, 0) for f in wmma.FIELDS})
    elif name in ("V_FMA_MIX_F32", "V_FMA_MIXLO_F16", "V_FMA_MIXHI_F16", "V_MAD_MIX_F32", "V_MAD_MIXLO_F16",
                  "V_MAD_MIXHI_F16"):
        return _prepare_fma_mix(ins, ex)
    elif name == "V_TRIG_PREOP_F64":
        return _prepare_trig_preop(ins)
    elif name in ("V_MAC_F32", "V_MAC_F32_E32", "V_MAC_F32_E64"):
        vop3 = ins.fmt.startswith("VOP3")
        lit = _field(inst, "literal")
        s0 = Operand(_field(inst, "src0"), 32, 32, lit)
        s1 = Operand(_field(inst, "src1") if vop3 else _field(inst, "vsrc1") + 256, 32, 32, lit)
        vdst = _field(inst, "vdst")
        neg, abs_ = _field(inst, "neg", 0), _field(inst, "abs", 0)

        def run(st, w):
            e = st.exec_mask(w)
            a = apply_float_mods(read_operand(st, w, s0, True), 32, neg & 1, abs_ & 1)
            b = apply_float_mods(read_operand(st, w, s1, True), 32, (neg >> 1) & 1, (abs_ >> 1) & 1)
            d = st.vgpr[w, vdst, :]
            f = lambda x: np.broadcast_to(x, e.shape).astype(np.uint32).view(np.float32)  # noqa: E731
            with np.errstate(all="ignore"):
                r = (f(a) * f(b)).astype(np.float32) + d.view(np.float32)  # mad: two roundings
            write_vgpr(st, w, vdst, r.astype(np.float32).view(np.uint32).astype(np.uint64), 32, e)
    else:
        return False
    ins.run = run
    if not ins.control:
        sgpr = _SPECIAL_SGPR_DST.get(name)
        ins.writes_exec = sgpr is not None and _field(inst, sgpr) in (125, 126, 127)
    return True


def _prepare_vopd(ins, ex):
    """RDNA3 VOPD: two VOP2-like operations issued together; both read their operands before
    either writes. Each half runs its VOP1/VOP2 namesake's pseudocode."""
    inst = ins.inst
    by_name = tables(ex.family)
    lit = _field(inst, "literal")
    vdstx = _field(inst, "vdstx")
    halves, texts = [], []
    for op, src0, src1, vdst in ((inst.opx, _field(inst, "srcx0"), _field(inst, "vsrcx1"), vdstx),
                                 (inst.opy, _field(inst, "srcy0"), _field(inst, "vsrcy1"),
                                  (_field(inst, "vdsty") << 1) | ((vdstx & 1) ^ 1))):
        base = op.name.replace("V_DUAL_", "V_")
        text = by_name.get(base + "_E32")
        if text is None:
            raise UnsupportedInstruction(f"{op.name} (VOPD): no pseudocode for {base}")
        try:
            fn = P.compile_pcode(base + "_E32", text, True)
        except P.Untranslatable as e:
            raise UnsupportedInstruction(f"{op.name} (VOPD): {e}") from None
        halves.append((fn, Operand(src0, 32, 32, lit), Operand(src1 + 256, 32, 32, lit), vdst))
        texts.append(text)
    ins.writes_exec = False
    fast = fastalu.prepare_dual([(text, operand_reader(s0, True, ex.arch), operand_reader(s1, True, ex.arch), vdst)
                                 for text, (_fn, s0, s1, vdst) in zip(texts, halves)], lit)
    if fast is not None:
        ins.run = fast
        return True

    def run(st, w):
        n = _n(st, w)
        e = st.exec_mask(w)
        results = []
        for fn, s0, s1, vdst in halves:
            E = {"S0": T(read_operand(st, w, s0, True), "u", 32), "S1": T(read_operand(st, w, s1, True), "u", 32),
                 "D0": T(st.vgpr[w, vdst, :].astype(np.uint64), "u", 32),
                 "VCC": T(st.read_s64(w, 106).reshape(n, 1), "u", 64), "laneId": T(st.lane[None, :], "u", 32),
                 "WAVE_MODE_IEEE": T(np.uint64(1), "u", 1),
                 "SIMM32": T(np.full((n, 1), lit or 0, np.uint64), "u", 32)}
            with np.errstate(all="ignore"):
                fn(E)
            results.append((vdst, np.broadcast_to(E["D0"].bits(), e.shape)))
        for vdst, v in results:
            write_vgpr(st, w, vdst, v, 32, e)
    ins.run = run
    ins.writes_exec = False
    return True


def _two_over_pi_chunks():
    """[53 bits of 2/pi's binary fraction from bit k (k = 0: the first bit after the point)]
    for k = 0..1201, as float64 integers: V_TRIG_PREOP_F64's table (its pseudocode names the
    fraction's first 1201 bits). pi from Machin's formula in integers, with guard bits."""
    guard = 1201 + 64

    def atan_inv(x):  # atan(1/x) * 2**guard
        total, term, k, x2 = 0, (1 << guard) // x, 0, x * x
        while term:
            total += term // (2 * k + 1) if k % 2 == 0 else -(term // (2 * k + 1))
            term //= x2
            k += 1
        return total
    pi = 16 * atan_inv(5) - 4 * atan_inv(239)
    frac = ((2 << (2 * guard)) // pi) >> (guard - 1201)   # floor(2/pi * 2**1201): the 1201 bits
    padded = frac << 53                                     # bits past the 1201st read as 0
    return np.array([float((padded >> (1201 - k)) & ((1 << 53) - 1)) for k in range(1202)])


_TWO_OVER_PI = None


def _prepare_trig_preop(ins):
    """D = 53 bits of 2/pi from bit S1[4:0] * 53 (later for a large S0: + exponent - 1077),
    scaled to their place (2**(-53 - shift), + 128 when S0's exponent >= 1968): the pieces
    of 2/pi that the f64 sin/cos range reduction of ocml multiplies with."""
    global _TWO_OVER_PI
    if _TWO_OVER_PI is None:
        _TWO_OVER_PI = _two_over_pi_chunks()
    inst = ins.inst
    lit = _field(inst, "literal")
    s0, s1 = Operand(_field(inst, "src0"), 64, 64, lit), Operand(_field(inst, "src1"), 32, None, lit)
    vdst = _field(inst, "vdst")
    if _field(inst, "omod", 0) or _field(inst, "clmp", 0):
        raise UnsupportedInstruction(f"{ins.name} with omod/clamp")

    def run(st, w):
        e = st.exec_mask(w)
        x = np.broadcast_to(read_operand(st, w, s0, True), e.shape)   # only S0's exponent matters
        seg = np.broadcast_to(read_operand(st, w, s1, True), e.shape) & np.uint64(31)
        exponent = ((x >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64)
        shift = seg.astype(np.int64) * 53 + np.maximum(exponent - 1077, 0)
        scale = -53 - shift + np.where(exponent >= 1968, 128, 0)
        r = np.ldexp(_TWO_OVER_PI[np.minimum(shift, 1201)], scale)
        write_vgpr(st, w, vdst, r.astype(np.float64).view(np.uint64), 64, e)
    ins.run = run
    return True


def _prepare_fma_mix(ins, ex):
    inst, name = ins.inst, ins.name
    lit = _field(inst, "literal")
    codes = [_field(inst, f) for f in ("src0", "src1", "src2")]
    opsel, opsel_hi = _field(inst, "opsel", 0), _field(inst, "opsel_hi", 0) | (_field(inst, "opsel_hi2", 0) << 2)
    neg, absm = _field(inst, "neg", 0), _field(inst, "neg_hi", 0)  # mix ops use neg_hi as abs
    clamp, vdst = _field(inst, "clmp", 0), _field(inst, "vdst")
    # an inline float constant is f16 where the operand is (op_sel_hi): LLVM 23's gfx950 code
    # has v_fma_mix_f32 v1, v2, -1.0, v1 op_sel_hi:[0,1,1] (0xBC00, not -1.0f's low half 0)
    operands = [Operand(code, 32, 16 if (opsel_hi >> i) & 1 else 32, lit) for i, code in enumerate(codes)]
    readers = [operand_reader(o, True, ex.arch) for o in operands]
    if any(r is None for r in readers):  # SCC, VCCZ...: the general reader
        readers = [lambda st, w, o=o: np.broadcast_to(read_operand(st, w, o, True), (_n(st, w), st.L))
                   for o in operands]

    def run(st, w):
        e = st.exec_mask(w)
        vals = []
        for i, reader in enumerate(readers):
            raw = reader(st, w)
            if (opsel_hi >> i) & 1:  # an f16 operand, from the half op_sel picks
                h = raw >> (16 * ((opsel >> i) & 1))
                v = h.astype(np.uint16).view(np.float16).astype(np.float64)
            else:
                v = raw.astype(np.uint32).view(np.float32).astype(np.float64)
            if (absm >> i) & 1:
                v = np.abs(v)
            if (neg >> i) & 1:
                v = -v
            vals.append(v)
        with np.errstate(all="ignore"):
            r = vals[0] * vals[1] + vals[2]
        if clamp:
            r = np.clip(r, 0.0, 1.0)
        if name.endswith("MIX_F32"):
            fastalu.write_lanes(st, w, st.vgpr, vdst, r.astype(np.float32).view(np.uint32), e)
            return
        else:
            h = r.astype(np.float32).astype(np.float16).view(np.uint16).astype(np.uint64)
            prev = st.vgpr[w, vdst, :].astype(np.uint64)
            out = (prev & np.uint64(0xFFFF0000)) | h if "MIXLO" in name else \
                (prev & np.uint64(0xFFFF)) | (h << np.uint64(16))
        write_vgpr(st, w, vdst, out, 32, e)
    ins.run = run
    ins.writes_exec = False
    return True


def _prepare_mfma(ins, ex):
    """V_MFMA_F32_16X16X16{F16,BF16} and V_MFMA_F32_16X16X4F32: D = A B + C on a wave64, one
    16x16xK block. Lane and register layout after AMD's CDNA3 ISA guide (matrix fused
    multiply-add section) and the matrix instruction calculator: K 16: A[i][k] in lane
    i + 16 (k / 4), half k % 4 of its two VGPRs; B[k][j] in lane j + 16 (k / 4), half k % 4.
    K 4 (f32): A[i][k] in lane i + 16 k of its VGPR, B[k][j] in lane j + 16 k. C/D[i][j] in
    lane j + 16 (i / 4), register i % 4."""
    inst, name = ins.inst, ins.name
    m = re.match(r"V_MFMA_F32_16X16X(?:16_?(F16|BF16)(_1K)?|4_?(F32))$", name)
    if not m or ex.lanes != 64:
        raise UnsupportedInstruction(f"{name}")
    if any(_field(inst, f, 0) for f in ("cbsz", "abid", "blgp")):
        raise UnsupportedInstruction(f"{name} with broadcast controls (cbsz/abid/blgp)")
    bf16, f32 = m.group(1) == "BF16", m.group(3) == "F32"
    a_code, b_code, c_code, vdst = (_field(inst, f) for f in ("src0", "src1", "src2", "vdst"))
    acc_cd = bool(_field(inst, "acc_cd", 0))
    acc_ab = _field(inst, "acc", 0)           # bit 0: A from AGPRs, bit 1: B
    # element (i, k) of A lives at lane i + 16 * (k // 4), half k % 4
    ik_i, ik_k = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")
    a_lane, a_half = ik_i + 16 * (ik_k // 4), ik_k % 4

    def halves(st, w, code, from_agpr):
        file = st.agpr if from_agpr else st.vgpr
        r = code - 256
        lo, hi = file[w, r, :].astype(np.uint64), file[w, r + 1, :].astype(np.uint64)
        h = [lo & np.uint64(0xFFFF), lo >> np.uint64(16), hi & np.uint64(0xFFFF), hi >> np.uint64(16)]
        return np.stack(h, axis=-1)  # (n, 64, 4)

    def to_f32(h):
        if bf16:
            return (h << np.uint64(16)).astype(np.uint32).view(np.float32)
        return h.astype(np.uint16).view(np.float16).astype(np.float32)

    def floats(st, w, code, from_agpr):
        file = st.agpr if from_agpr else st.vgpr
        return file[w, code - 256, :].astype(np.uint32).view(np.float32)  # (n, 64)

    def run(st, w):
        n = _n(st, w)
        if f32:
            A = floats(st, w, a_code, acc_ab & 1)[:, _A4_LANE]  # (n, 16, 4): A[i][k]
            B = floats(st, w, b_code, acc_ab & 2)[:, _B4_LANE]  # (n, 4, 16): B[k][j]
        else:
            A = to_f32(halves(st, w, a_code, acc_ab & 1))[:, a_lane, a_half]  # (n, 16, 16): A[i][k]
            B = to_f32(halves(st, w, b_code, acc_ab & 2))[:, _B_LANE, _B_HALF]  # B[k][j]
        if c_code >= 256:
            cfile = st.agpr if acc_cd else st.vgpr
            cregs = np.stack([cfile[w, c_code - 256 + r, :] for r in range(4)], axis=-1).view(np.float32)
            C = cregs[:, _D_LANE, _D_REG]         # C[i][j]
        else:
            C = np.zeros((n, 16, 16), np.float32) + np.float32(
                read_operand(st, w, Operand(c_code, 32, 32), False)[0].astype(np.uint32).view(np.float32)) \
                if c_code != 128 else np.zeros((n, 16, 16), np.float32)
        D = (np.matmul(A.astype(np.float64), B.astype(np.float64)) + C).astype(np.float32)
        e = st.exec_mask(w)
        dfile_agpr = acc_cd
        for r in range(4):
            # lane l, register r holds D[r + 4 (l // 16)][l % 16]
            vals = D[:, _OUT_I[r], _OUT_J].view(np.uint32).astype(np.uint64)
            write_vgpr(st, w, (vdst & 0xFF) + r, vals, 32, e, agpr=dfile_agpr)
    ins.run = run
    ins.writes_exec = False
    return True


_L64 = np.arange(64)
_OUT_J = _L64 % 16
_OUT_I = [r + 4 * (_L64 // 16) for r in range(4)]
_K, _J = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")
_B_LANE, _B_HALF = _J + 16 * (_K // 4), _K % 4           # B[k][j]
_A4_LANE = np.arange(16)[:, None] + 16 * np.arange(4)[None, :]  # A[i][k] of a K-4 MFMA: lane i + 16 k
_B4_LANE = _A4_LANE.T                                             # B[k][j]: lane j + 16 k
_I, _J2 = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")
_D_LANE, _D_REG = _J2 + 16 * (_I // 4), _I % 4            # C[i][j]


# ---- programs and dispatches -----------------------------------------------------------------

class Program:
    """A code object loaded into emulated memory: its image at a host address, a decode
    cache of prepared instructions by PC, and the kernels by name."""

    def __init__(self, image: bytes, memory, arch: str = None):
        from .codeobject import CodeObject
        from .decode import family
        self.code = CodeObject(image)
        self.arch = arch or self.code.arch
        if self.code.arch != self.arch:
            raise BackendError(f"code object is for {self.code.arch}, the emulated device is {self.arch}")
        self.family = family(self.arch)
        self.memory = memory
        base, size = min(s.vaddr for s in self.code.segments), \
            max(s.vaddr + s.memsz for s in self.code.segments) - min(s.vaddr for s in self.code.segments)
        self.host = memory.alloc(size)
        self.bias = self.host - base               # host address of vaddr 0
        _base, img = self.code.memory_image(self.bias)
        view = memory.view(self.host, size)
        view[:] = np.frombuffer(bytes(img), np.uint8)
        self.image = bytes(img)
        self.base = base
        self.kernels = self.code.kernels
        self.instrs: Dict[int, Instr] = {}   # prepared instructions by host address

    def free(self):
        self.memory.free(self.host)

    def instr(self, pc: int, ex) -> Instr:
        ins = self.instrs.get(pc)
        if ins is None:
            ins = self.instrs[pc] = self._prepare(pc, ex)
        return ins

    def _prepare(self, pc, ex) -> Instr:
        offset = pc - self.bias - self.base
        if not 0 <= offset < len(self.image):
            raise KernelFault(f"kernel {ex.kernel_name}: jump to 0x{pc:x}, outside its code object")
        # Most instructions recur (in other kernels, other code objects): a prepared one is reused
        # by its bytes and what preparing it read from the dispatch. Its size follows from its
        # first 8 bytes (encoding, literal operands), so those find the bytes to look up.
        head = (self.arch, self.image[offset:offset + 8])
        size = _SIZE_OF_HEAD.get(head)
        key = (self.arch, ex.lanes, ex.mode_register, self.image[offset:offset + size]) if size else None
        known = _PREPARED.get(key) if key else None
        if known is not None:
            return known.copy_to(pc)
        ins = self.decode_and_prepare(pc, offset, ex)
        _SIZE_OF_HEAD[head] = ins.size
        _PREPARED[(self.arch, ex.lanes, ex.mode_register, self.image[offset:offset + ins.size])] = ins
        return ins

    def decode_and_prepare(self, pc, offset, ex) -> Instr:
        """The instruction at image offset `offset` (host address pc), decoded and prepared
        anew (no cache)."""
        try:
            inst = decode(self.image, offset, self.arch)
        except BackendError as e:
            raise UnsupportedInstruction(f"kernel {ex.kernel_name} at vaddr 0x{offset + self.base:x}: {e}") from None
        ins = Instr(inst, pc, inst.size())
        fmt = ins.fmt
        try:
            if rdna4.prepare(ins, ex) or _prepare_special(ins, ex):
                pass
            elif fmt in ("SMEM", "DS", "GLOBAL", "FLAT", "SCRATCH", "MUBUF") or fmt.startswith(("DS", "GLOBAL")):
                prepare_memory(ins, ex)
            elif fmt.startswith(("SOP", "VOP")):
                if fmt.startswith("VINTERP"):
                    raise UnsupportedInstruction(f"{ins.name} ({fmt})")
                prepare_alu(ins, ex)
            else:
                raise UnsupportedInstruction(f"{ins.name} ({fmt})")
        except UnsupportedInstruction as e:
            where = self.code.function_at(offset + self.base) or ex.kernel_name
            raise UnsupportedInstruction(f"the emulator does not implement {e} (kernel {ex.kernel_name}, "
                                         f"function {where}, vaddr 0x{offset + self.base:x}, {self.arch})") from None
        return ins


_SIZE_OF_HEAD: Dict[tuple, int] = {}   # (arch, first 8 bytes) -> instruction size
_PREPARED: Dict[tuple, Instr] = {}     # (arch, lanes, MODE, instruction bytes) -> a prepared Instr


class Dispatch:
    """What an instruction's preparation may ask of the launch (lanes, family, modes)."""

    def __init__(self, prog, kernel):
        self.family, self.arch, self.kernel_name = prog.family, prog.arch, kernel.name
        kd = kernel.descriptor
        self.lanes = kd.wavefront_size
        rsrc1 = kd.compute_pgm_rsrc1
        # MODE register as CP sets it from rsrc1: round (12:15) and denorm (16:19) modes,
        # DX10 clamp (21) -> MODE[8], IEEE (23) -> MODE[9]
        self.mode_register = ((rsrc1 >> 12) & 0xFF) | (((rsrc1 >> 21) & 1) << 8) | (((rsrc1 >> 23) & 1) << 9)


MAX_WAVES_PER_BATCH = 256
MAX_STEPS = 50_000_000


def launch(prog: Program, name: str, grid, block, shared_mem: int, kernarg_values: bytes, memory):
    """Run kernel `name` over grid x block (3-tuples) with its explicit kernel arguments
    already laid out in `kernarg_values` (the metadata's offsets); returns when every
    wave has ended."""
    kernel = prog.kernels.get(name)
    if kernel is None:
        raise BackendError(f"no kernel {name!r} in the code object")
    kd = kernel.descriptor
    ex = Dispatch(prog, kernel)
    L = ex.lanes
    gx, gy, gz = grid
    bx, by, bz = block
    threads = bx * by * bz
    if threads > 1024:
        raise BackendError(f"{name}: block {block} has more than 1024 threads")
    waves_per_wg = -(-threads // L)
    nwg = gx * gy * gz
    lds_bytes = kd.group_segment_fixed_size + int(shared_mem)
    lds_limit = arch_traits(prog.arch).lds_bytes
    if lds_bytes > lds_limit:
        raise BackendError(f"{name}: {lds_bytes} bytes of LDS per workgroup exceed the {lds_limit // 1024} KiB "
                           f"a workgroup of {prog.arch} has")
    lane_scratch = -(-kd.private_segment_fixed_size // 4) * 4
    if kernel.uses_dynamic_stack:
        lane_scratch += 16 * 1024  # a dynamic stack grows at run time: give it room (checked by bounds)

    # kernarg segment: explicit arguments, then the hidden ones the metadata asks for
    ksize = max(kernel.kernarg_segment_size, len(kernarg_values), 8)
    kern = memory.alloc(ksize + 64)
    kview = memory.view(kern, ksize)
    kview[:len(kernarg_values)] = np.frombuffer(kernarg_values, np.uint8)
    hidden = {"hidden_block_count_x": (gx, 4), "hidden_block_count_y": (gy, 4), "hidden_block_count_z": (gz, 4),
              "hidden_group_size_x": (bx, 2), "hidden_group_size_y": (by, 2), "hidden_group_size_z": (bz, 2),
              "hidden_remainder_x": (0, 2), "hidden_remainder_y": (0, 2), "hidden_remainder_z": (0, 2),
              "hidden_grid_dims": (sum(1 for d in (gy, gz) if d > 1) + 1, 2),
              "hidden_dynamic_lds_size": (int(shared_mem), 4),
              "hidden_shared_base": (SHARED_BASE >> 32, 4), "hidden_private_base": (PRIVATE_BASE >> 32, 4)}
    for arg in kernel.hidden_args:
        kind, off, size = arg["value_kind"], arg["offset"], arg["size"]
        value, _ = hidden.get(kind, (0, size))  # global offsets, queues, hostcall, heap: none here
        kview[off:off + size] = np.frombuffer(int(value).to_bytes(size, "little"), np.uint8)
    # the dispatch packet (hsa_kernel_dispatch_packet_t), which code object v4 reads blockDim from
    pkt = memory.alloc(64)
    pv = memory.view(pkt, 64)
    header = np.zeros(64, np.uint8)
    fields = [(2, 2, 3), (4, 2, bx), (6, 2, by), (8, 2, bz), (12, 4, gx * bx), (16, 4, gy * by), (20, 4, gz * bz),
              (24, 4, lane_scratch), (28, 4, lds_bytes), (40, 8, kern)]
    for off, size, value in fields:
        header[off:off + size] = np.frombuffer(int(value).to_bytes(size, "little"), np.uint8)
    pv[:] = header

    user = {n: (first, count) for n, first, count in kd.user_sgpr_layout()}
    system = dict(kd.system_sgpr_layout())
    nvgpr = kd.vgpr_alloc_count
    acc = kd.accum_offset
    nagpr = (nvgpr - acc) if acc is not None and nvgpr > acc else (256 if prog.family == "cdna" else 0)
    nvgpr = max(nvgpr, 8)
    wgs_per_batch = max(1, MAX_WAVES_PER_BATCH // waves_per_wg)
    scratch_host = None
    try:
        for first in range(0, nwg, wgs_per_batch):
            ids = np.arange(first, min(nwg, first + wgs_per_batch))
            nb = len(ids)
            W = nb * waves_per_wg
            st = WaveState(prog, kernel, W, L, min(nvgpr, 512), max(nagpr, 1), nb, lds_bytes, memory, prog.arch)
            st.wg = np.repeat(np.arange(nb), waves_per_wg)
            wave_in_wg = np.tile(np.arange(waves_per_wg), nb)
            wg_id = ids[st.wg]
            wid = np.stack([wg_id % gx, (wg_id // gx) % gy, wg_id // (gx * gy)], axis=1)
            if lane_scratch:
                if scratch_host is None:
                    scratch_bytes = MAX_WAVES_PER_BATCH * L * lane_scratch + 256
                    scratch_host = memory.alloc(scratch_bytes)
                st.scratch_lane_bytes = lane_scratch
                st.scratch_base = np.uint64(scratch_host) + np.arange(W, dtype=np.uint64) * np.uint64(L * lane_scratch)
            _init_registers(st, kd, user, system, wid, wave_in_wg, threads, (bx, by, bz), kern, pkt,
                            scratch_host, lane_scratch)
            if prog.family == "rdna4":
                rdna4.init_registers(st, kd, wid)
            st.pc[:] = prog.bias + kd.entry
            with np.errstate(all="ignore"):  # the ISA defines inf/nan/wraparound results: no warnings
                _run(st, prog, ex)
    finally:
        memory.free(kern)
        memory.free(pkt)
        if scratch_host is not None:
            memory.free(scratch_host)


def _init_registers(st, kd, user, system, wid, wave_in_wg, threads, block, kern, pkt, scratch_host, lane_scratch):
    L, W = st.L, st.W
    bx, by, _bz = block

    def put64(name, value):
        if name in user:
            r = user[name][0]
            st.sgpr[:, r] = np.uint32(value & 0xFFFFFFFF)
            st.sgpr[:, r + 1] = np.uint32(value >> 32)
    put64("dispatch_ptr", pkt)
    put64("kernarg_segment_ptr", kern)
    put64("queue_ptr", 0)
    put64("dispatch_id", 0)
    if "private_segment_buffer" in user:  # gfx9: the per-lane swizzled scratch descriptor
        r = user["private_segment_buffer"][0]
        base = scratch_host or 0
        st.sgpr[:, r] = np.uint32(base & 0xFFFFFFFF)
        st.sgpr[:, r + 1] = np.uint32((base >> 32) & 0xFFFF) | np.uint32(1 << 31)     # swizzle enable
        st.sgpr[:, r + 2] = np.uint32(0xFFFFFFFF)                                     # num_records
        index_stride = 3 if L == 64 else 2
        st.sgpr[:, r + 3] = np.uint32((1 << 19) | (index_stride << 21) | (1 << 23))   # element 4 B, ADD_TID
    wave_offset = np.arange(W, dtype=np.uint64) * np.uint64(L * lane_scratch)
    if "flat_scratch_init" in user:
        r = user["flat_scratch_init"][0]
        st.sgpr[:, r] = ((np.uint64(scratch_host or 0) + wave_offset) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        st.sgpr[:, r + 1] = np.uint32(lane_scratch)
    if "private_segment_size" in user:
        st.sgpr[:, user["private_segment_size"][0]] = np.uint32(lane_scratch)
    for d, axis in (("x", 0), ("y", 1), ("z", 2)):
        if f"workgroup_id_{d}" in system:
            st.sgpr[:, system[f"workgroup_id_{d}"]] = wid[:, axis].astype(np.uint32)
    if "workgroup_info" in system:
        st.sgpr[:, system["workgroup_info"]] = np.uint32(0)
    if "private_segment_wavefront_offset" in system:
        st.sgpr[:, system["private_segment_wavefront_offset"]] = wave_offset.astype(np.uint32)
    if scratch_host:  # architected flat scratch (gfx940, gfx11): FLAT_SCRATCH is the wave's base
        fs = np.uint64(scratch_host) + wave_offset
        st.sgpr[:, 102] = (fs & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        st.sgpr[:, 103] = (fs >> np.uint64(32)).astype(np.uint32)
    # work-item ids: thread t of the workgroup is lane t % L of wave t // L, packed x | y << 10 | z << 20
    t = wave_in_wg[:, None] * L + np.arange(L)[None, :]
    x, y, z = t % bx, (t // bx) % by, t // (bx * by)
    st.vgpr[:, 0, :] = (x | (y << 10) | (z << 20)).astype(np.uint32)
    live = t < threads
    ex = st.pack_lanes(slice(None), live)
    st.write_mask(slice(None), 126, ex)


def _run(st, prog, ex):
    """The scheduler: the waves at the lowest PC run next, together. They run a straight
    line of instructions without a look at the others, as long as no other wave's PC is
    passed (then the lowest PC is theirs still): the order of the instructions is the one
    a step-by-step scheduler takes."""
    steps = 0
    instrs = prog.instrs
    while True:
        runnable = ~st.done & ~st.barrier
        if not runnable.any():
            if st.done.all():
                return
            st.barrier[:] = False   # every live wave of every workgroup waits: release them
            continue
        pcs = st.pc if runnable.all() else st.pc[runnable]
        pc = int(pcs.min())
        at = pcs == pc
        if at.all():
            w = slice(None) if pcs is st.pc else np.nonzero(runnable)[0]
            limit = None
        else:
            w = np.nonzero(runnable & (st.pc == pc))[0]
            limit = int(pcs[~at].min())  # the next PC another wave waits at
        st.group, st.group_exec = w, None
        while True:
            ins = instrs.get(pc) or prog.instr(pc, ex)
            steps += 1
            try:
                if ins.control:
                    st.pc[w] = pc
                    ins.run(st, w)
                    break
                ins.run(st, w)
            except (MemoryFault, KernelFault) as e:
                from .decode import mnemonic
                vaddr = pc - prog.bias
                raise type(e)(f"{e} (kernel {ex.kernel_name}, {mnemonic(ins.inst)} at vaddr 0x{vaddr:x}, "
                              f"function {prog.code.function_at(vaddr)}, {prog.arch})") from None
            if ins.writes_exec:
                st.group_exec = None
            pc += ins.size
            if limit is not None and pc >= limit:
                st.pc[w] = pc
                break
        st.group = st.group_exec = None
        if steps > MAX_STEPS:
            raise KernelFault(f"kernel {ex.kernel_name} ran more than {MAX_STEPS} steps (an endless loop?)")


from . import rdna4, wmma  # noqa: E402 - their preparers use this module's
