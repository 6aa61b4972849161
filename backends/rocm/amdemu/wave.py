"""What every preparer of the wave executor shares: the prepared instruction (`Instr`), the
registers of a batch of waves (`WaveState`), how an operand is read (`read_operand`, the
faster `operand_reader`) and a VGPR written, the instruction fields, and the executor's errors.
See executor.py for the state's layout and the scheduler."""
from __future__ import annotations

import numpy as np

from tensorlite.errors import BackendError

from .pcode_types import FLOAT_DTYPE, UINT_DTYPE


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


def field(inst, name, default=None):
    f = getattr(type(inst), name, None)
    if f is None:
        return default
    return (inst._raw >> f.lo) & f.mask


def sext(value, bits):
    sign = 1 << (bits - 1)
    return (value ^ sign) - sign


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
            return np.zeros((n_waves(st, w), 1) if vector else n_waves(st, w), np.uint64)
        if code == 125 and st.m0 != 125:
            raise KernelFault("read of a reserved scalar register (125)")
        v = st.sgpr[w, code].astype(np.uint64)
        if nregs >= 2:
            v = v | (st.sgpr[w, code + 1].astype(np.uint64) << np.uint64(32))
    elif 128 <= code <= 208 or code in _FLOAT_CONST or code in (248, 255):
        v = np.full(n_waves(st, w), constant_operand(op), np.uint64)
    elif code == 253:
        v = st.scc[w].astype(np.uint64)
    elif code == 251:  # VCCZ
        v = (st.read_s64(w, 106) == 0).astype(np.uint64)
    elif code == 252:  # EXECZ
        v = (st.read_s64(w, 126) == 0).astype(np.uint64)
    elif code in (235, 236, 237, 238):  # src_shared_base/limit, src_private_base/limit
        addr = (SHARED_BASE if code < 237 else PRIVATE_BASE) + (APERTURE - 1 if code in (236, 238) else 0)
        v = np.full(n_waves(st, w), addr >> 32 if bits <= 32 else addr, np.uint64)  # 32-bit reads: the high half
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
        return int(np.array(_FLOAT_CONST[code], FLOAT_DTYPE[fb]).view(UINT_DTYPE[fb]))
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


def n_waves(st, w):
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


def advance(ins):
    """The run of an instruction that changes nothing the executor models (its PC advances)."""
    ins.writes_exec = False
    return _nothing


def _nothing(st, w):
    pass

def finish(ins, run, sgpr_dst=None) -> bool:
    """Give a hand-written instruction its run (True: prepared). It changes EXEC only through an
    SGPR it writes, the one its field `sgpr_dst` names (None: it writes none), unless it is a
    control instruction (those say so themselves)."""
    ins.run = run
    if not ins.control:
        ins.writes_exec = sgpr_dst is not None and field(ins.inst, sgpr_dst) in (125, 126, 127)
    return True
