"""RDNA4 (gfx12: gfx1200, gfx1201) in the wave executor: what its code objects hold that
RDNA3's do not. `prepare(ins, ex)` prepares such an instruction and returns True, or returns
False and leaves it to the executor's own preparers (most of RDNA4 is RDNA3 under new
encodings: the ALU runs from the rdna4 pseudocode tables like any other).

What differs, after AMD's "RDNA4 Instruction Set Architecture" guide and LLVM's gfx12
disassembly of this project's kernels:
- SMEM: a 24-bit signed byte offset (`ioffset`), `soffset` NULL (124) when unused, and
  sub-dword loads (S_LOAD_U8/I8/U16/I16: zero or sign extended into one SGPR).
- VGLOBAL / VSCRATCH / VFLAT: 96-bit encodings naming their fields vaddr, vsrc (store data),
  vdst, saddr, sve and ioffset (24-bit signed). The addressing is GFX11's, so they run through
  the executor's memory preparer under a view that names the fields GFX11's way. An atomic
  returns the old value when bit 0 of its temporal hint is set (TH_ATOMIC_RETURN), where GFX11
  had the GLC bit: the view names that bit `glc`. FLAT with an
  SGPR base (new on GFX12) is refused, as the compiler has not been seen to emit it.
- The wait counters are split (s_wait_loadcnt, s_wait_storecnt, s_wait_dscnt, s_wait_kmcnt,
  ..., s_wait_alu): every access completes at once in the lock-step executor, so they order
  nothing here, like s_waitcnt.
- The workgroup barrier is split: s_barrier_signal -1 (SOP1) arrives, s_barrier_wait -1
  (SOPP) waits for every wave's arrival. Parking waves at the wait is exact for code that
  signals and then waits before its next barrier (what LLVM emits: the pair, adjacent).
- Cache controls (global_inv, global_wb, global_wbinv) and s_prefetch_* are no-ops.

Workgroup ids arrive in TTMP registers ("architected SGPRs", gfx12): `init_registers`.
Nothing here runs on, or says anything about, AMD hardware.
"""
from __future__ import annotations

import re

import numpy as np

from .memory_ops import prepare_memory
from .wave import UnsupportedInstruction, advance, field, n_waves, sext

# the SOPP waits of gfx12 and the cache/prefetch hints: nothing to do in lock step
_NO_OPS = {"S_WAIT_LOADCNT", "S_WAIT_STORECNT", "S_WAIT_SAMPLECNT", "S_WAIT_BVHCNT", "S_WAIT_EXPCNT",
           "S_WAIT_DSCNT", "S_WAIT_KMCNT", "S_WAIT_LOADCNT_DSCNT", "S_WAIT_STORECNT_DSCNT", "S_WAIT_ALU",
           "S_WAIT_IDLE", "S_SLEEP_VAR", "GLOBAL_INV", "GLOBAL_WB", "GLOBAL_WBINV", "S_PREFETCH_INST",
           "S_PREFETCH_INST_PC_REL", "S_PREFETCH_DATA", "S_BUFFER_PREFETCH_DATA", "S_PREFETCH_DATA_PC_REL"}

# VGLOBAL/VSCRATCH/VFLAT field -> GFX11's name, as memory_ops.prepare_memory reads them
_MEM_FIELDS = {"addr": "vaddr", "data": "vsrc", "offset": "ioffset"}
_MEM_FORMATS = {"VGLOBAL": "GLOBAL", "VSCRATCH": "SCRATCH", "VFLAT": "FLAT"}
_ALIAS = {}

NULL = 124
WORKGROUP_BARRIER = -1
TTMP7, TTMP9 = 108 + 7, 108 + 9


def prepare(ins, ex) -> bool:
    if ex.family != "rdna4":
        return False
    name, fmt = ins.name, ins.fmt
    if name in _NO_OPS:
        ins.run = advance(ins)
    elif name in ("S_BARRIER_SIGNAL", "S_BARRIER_WAIT"):
        _prepare_barrier(ins)
    elif fmt == "SMEM":
        _prepare_smem(ins)
    elif fmt in _MEM_FORMATS:
        if fmt == "VFLAT" and field(ins.inst, "saddr") != NULL:
            raise UnsupportedInstruction(f"{name} (VFLAT) with an SGPR base address")
        ins.inst, ins.fmt = _gfx11_view(ins.inst), _MEM_FORMATS[fmt]
        prepare_memory(ins, ex)
    else:
        return False
    return True


def _gfx11_view(inst):
    """The same instruction bits under a class whose field names are GFX11's (addr, data,
    offset) and whose name is GFX11's format (GLOBAL, SCRATCH, FLAT)."""
    cls = type(inst)
    view = _ALIAS.get(cls)
    if view is None:
        attrs = {new: getattr(cls, old) for new, old in _MEM_FIELDS.items()}
        th = cls.th
        attrs["glc"] = type(th)(th.lo, th.lo)   # TH_ATOMIC_RETURN
        attrs.update(__module__=cls.__module__, __qualname__=_MEM_FORMATS[cls.__name__],
                     __doc__=f"{cls.__name__} under GFX11's field names")
        view = _ALIAS[cls] = type(_MEM_FORMATS[cls.__name__], (cls,), attrs)
    out = object.__new__(view)
    out.__dict__.update(inst.__dict__)
    return out


def _prepare_barrier(ins):
    inst = ins.inst
    number = field(inst, "ssrc0") if ins.name == "S_BARRIER_SIGNAL" else field(inst, "simm16")
    # SOP1's ssrc0 is an operand encoding (193 = the inline constant -1); SOPP's simm16 16 bits
    value = {"S_BARRIER_SIGNAL": {193: -1}.get(number), "S_BARRIER_WAIT": sext(number, 16)}[ins.name]
    if value != WORKGROUP_BARRIER:
        raise UnsupportedInstruction(f"{ins.name} of barrier {value if value is not None else number} "
                                       "(only the workgroup barrier, -1, is emulated)")
    if ins.name == "S_BARRIER_SIGNAL":
        ins.run = advance(ins)
        return
    ins.control, ins.writes_exec = True, False   # it parks the waves, as S_BARRIER does

    def run(st, w):
        st.barrier[w] = True
        st.pc[w] += ins.size
    ins.run = run


_SMEM = re.compile(r"^S_(BUFFER_)?LOAD_(B32|B64|B96|B128|B256|B512|U8|I8|U16|I16)$")
_SMEM_SIZE = {"B32": 4, "B64": 8, "B96": 12, "B128": 16, "B256": 32, "B512": 64, "U8": 1, "I8": 1, "U16": 2, "I16": 2}


def _prepare_smem(ins):
    inst, name = ins.inst, ins.name
    m = _SMEM.match(name)
    if not m:
        raise UnsupportedInstruction(f"{name} (SMEM)")
    size, kind = _SMEM_SIZE[m.group(2)], m.group(2)
    buffer = bool(m.group(1))
    sbase, sdata = field(inst, "sbase") << 1, field(inst, "sdata")
    const = sext(field(inst, "ioffset"), 24)
    soffset = field(inst, "soffset")
    ins.writes_exec = sdata + max(1, size // 4) > 126

    def run(st, w):
        base = st.read_s64(w, sbase)
        if buffer:
            base = base & np.uint64((1 << 48) - 1)
        off = np.full(n_waves(st, w), const, np.int64)
        if soffset != NULL:
            off += st.sgpr[w, soffset].astype(np.int64)
        addr = (base.astype(np.int64) + off).astype(np.uint64)
        if size >= 4:  # dword loads ignore the address's low two bits
            addr &= ~np.uint64(3)
        raw = st.memory.gather(addr, size, name)
        if size >= 4:
            st.sgpr[w, sdata:sdata + size // 4] = raw.view(np.uint32)
        else:
            v = raw.view(np.uint8 if size == 1 else np.uint16).reshape(-1).astype(np.int64)
            if kind.startswith("I"):
                v = sext(v, 8 * size)
            st.sgpr[w, sdata] = (v & 0xFFFFFFFF).astype(np.uint32)
    ins.run = run


def init_registers(st, kd, wid):
    """gfx12 hands a wave its workgroup ids in TTMP9 (x) and TTMP7 (y in bits 0-15, z in
    16-31), whatever the descriptor's SGPR enables say (LLVM's "architected SGPRs")."""
    st.sgpr[:, TTMP9] = wid[:, 0].astype(np.uint32)
    st.sgpr[:, TTMP7] = (wid[:, 1] | (wid[:, 2] << 16)).astype(np.uint32)
