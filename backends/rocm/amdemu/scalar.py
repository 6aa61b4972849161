"""The scalar instructions run by hand rather than from pseudocode: the program's end, the
barrier and the trap (control: they move the waves), the waits and hints (nothing to do in
lock step), s_getreg, s_bitset."""
from __future__ import annotations

import numpy as np

from .wave import PRIVATE_BASE, SHARED_BASE, KernelFault, Operand, UnsupportedInstruction, advance, field, finish, \
    read_operand


def prepare(ins, ex) -> bool:
    """False if `ins` is none of this module's."""
    inst, name = ins.inst, ins.name
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
        run = advance(ins)
    elif name == "S_TRAP":
        def run(st, w):
            raise KernelFault("s_trap: a device-side abort")  # _run adds the kernel and the address
    elif name == "S_GETREG_B32":
        simm = field(inst, "simm16")
        hw, off, size = simm & 0x3F, (simm >> 6) & 0x1F, ((simm >> 11) & 0x1F) + 1
        sdst = field(inst, "sdst")
        values = {1: ex.mode_register, 2: 0, 4: 0,  # MODE, STATUS, HW_ID
                  15: ((SHARED_BASE >> 48) << 16) | (PRIVATE_BASE >> 48)}  # SH_MEM_BASES (gfx9)
        if hw not in values:
            raise UnsupportedInstruction(f"s_getreg_b32 of hardware register {hw}")
        value = (values[hw] >> off) & ((1 << size) - 1)

        def run(st, w):
            st.sgpr[w, sdst] = value
    elif name in ("S_BITSET0_B32", "S_BITSET1_B32", "S_BITSET0_B64", "S_BITSET1_B64"):
        # D0[S0[4:0] (5:0 for B64)] = 0 or 1: an indexed bit assignment, which pcode.py does not translate
        sdst, bits = field(inst, "sdst"), 64 if name.endswith("B64") else 32
        src = Operand(field(inst, "ssrc0"), 32, None, field(inst, "literal"))
        one = name.startswith("S_BITSET1")

        def run(st, w):
            bit = np.uint64(1) << (read_operand(st, w, src, False) & np.uint64(bits - 1))
            old = st.read_s64(w, sdst) if bits == 64 else st.sgpr[w, sdst].astype(np.uint64)
            new = (old | bit) if one else (old & ~bit)
            if bits == 64:
                st.write_s64(w, sdst, new)
            else:
                st.sgpr[w, sdst] = new.astype(np.uint32)
    else:
        return False
    return finish(ins, run, "sdst" if name == "S_GETREG_B32" else None)
