"""The cross-lane instructions: ds_bpermute / ds_permute / ds_swizzle (LDS hardware, no memory),
v_readlane / v_readfirstlane / v_writelane, and RDNA3's M0-indexed v_movrel* moves."""
from __future__ import annotations

import numpy as np

from .wave import KernelFault, Operand, UnsupportedInstruction, field, finish, n_waves, read_operand

# the ones that write an SGPR, and the field naming it (the others write none)
_SGPR_DST = {"V_READLANE_B32": "vdst", "V_READFIRSTLANE_B32": "vdst", "V_READFIRSTLANE_B32_E32": "vdst"}


def prepare_lane_permute(ins, ex):
    """DS_BPERMUTE_B32, DS_PERMUTE_B32, DS_SWIZZLE_B32: lanes exchange a VGPR through the LDS crossbar,
    no LDS memory (prepare_memory hands them here)."""
    inst, name = ins.inst, ins.name
    addr_reg, data0, vdst = field(inst, "addr"), field(inst, "data0"), field(inst, "vdst")
    offset = field(inst, "offset0") | (field(inst, "offset1") << 8)
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


def prepare(ins, ex) -> bool:
    """The lane reads and writes and the indexed moves; False if `ins` is none of them."""
    inst, name, L = ins.inst, ins.name, ex.lanes
    if name in ("V_READLANE_B32", "V_READFIRSTLANE_B32", "V_READFIRSTLANE_B32_E32", "V_WRITELANE_B32"):
        src0 = field(inst, "src0")
        src1 = field(inst, "src1", None)
        vdst = field(inst, "vdst")
        lit = field(inst, "literal")

        def run(st, w):
            n = n_waves(st, w)
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
    elif name.startswith(("V_MOVRELS_B32", "V_MOVRELD_B32", "V_MOVRELSD_B32")):
        # VGPR-indexed moves (a private array kept in registers): the source and/or destination
        # register number plus M0, per wave. gfx11 only (gfx9 uses s_set_gpr_idx instead).
        kind = name.split("_")[1]
        src, vdst = field(inst, "src0"), field(inst, "vdst")
        if src < 256 and kind != "MOVRELD":
            raise UnsupportedInstruction(f"{name} with a scalar source")
        lit = field(inst, "literal")

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
    else:
        return False
    return finish(ins, run, _SGPR_DST.get(name))
