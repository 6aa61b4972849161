"""RDNA's wave matrix products in the wave executor: V_WMMA_F32_16X16X16_F16 and _BF16 on a
32-lane wave, for RDNA3 / RDNA3.5 (gfx11: gfx1100, gfx1151) and RDNA4 (gfx12: gfx1201), whose
operand layouts differ.

D = A B + C for 16x16 matrices, A and B 16-bit (f16 or bf16), C and D f32. Where each element
lives, after AMD's RDNA3 and RDNA4 ISA guides ("Wave Matrix Multiply Accumulate") and AMD's
matrix instruction calculator (`-a rdna3|rdna4 -i v_wmma_f32_16x16x16_f16 -w 32`); lane l, and
"half" s of a source operand: 16-bit half s % 2 of its VGPR s // 2:
- gfx11: A[i][k] in lanes i and i + 16, half k (of 8 VGPRs); B[k][j] likewise in lanes j and
  j + 16. Both half-waves must hold the same values: a kernel whose halves differ has a bug
  (the hardware reads one of them), and the executor says so. C/D[i][j] in lane j + 16 (i % 2),
  VGPR i // 2.
- gfx12: A[i][k] in lane i + 16 ((k // 4) % 2), half 4 (k // 8) + k % 4 (of 4 VGPRs): the
  half-waves split K. B[k][j] likewise with j. C/D[i][j] in lane j + 16 (i // 8), VGPR i % 8.
The products of 16-bit values are exact in f32; they are summed with C in float64 and rounded
once to f32 (the hardware's order of additions is not documented; the MFMA emulation does the
same). The wave must run with every lane on (EXEC all ones, as the ISA requires). Modifiers
(neg, clamp, op_sel) and the other WMMA types (16-bit results, integer, fp8) are refused by
name. Emulated semantics only: nothing here says anything about AMD hardware or its speed.
"""
from __future__ import annotations

import re

import numpy as np

from .wave import KernelFault, Operand, UnsupportedInstruction, read_operand

# the instruction fields the executor reads for prepare (executor.py's hook)
FIELDS = ("src0", "src1", "src2", "vdst", "neg", "neg_hi", "opsel", "clmp")

LANES = 32


def _layouts():
    """{family: (lane, half) of A[i][k] as (16, 16) arrays, (lane, vgpr) of D[i][j])}; B[k][j]
    is at A's place for (j, k). gfx11's A also sits in lane + 16 (checked, not read)."""
    i, k = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")
    return {
        "rdna3": ((i, k), (k + 16 * (i % 2), i // 2)),
        "rdna4": ((i + 16 * ((k // 4) % 2), 4 * (k // 8) + k % 4), (k + 16 * (i // 8), i % 8)),
    }


LAYOUTS = _layouts()
SOURCE_VGPRS = {"rdna3": 8, "rdna4": 4}  # VGPRs of an A or B operand


def source_halves(regs: np.ndarray) -> np.ndarray:
    """(n, V, 32) uint32 VGPRs -> (n, 2 V, 32) uint16 halves: half s is VGPR s // 2's bits
    16 (s % 2) .. +15."""
    lo, hi = regs & np.uint32(0xFFFF), regs >> np.uint32(16)
    return np.stack([lo, hi], axis=2).reshape(regs.shape[0], -1, regs.shape[2]).astype(np.uint16)


def to_f32(halves: np.ndarray, bf16: bool) -> np.ndarray:
    if bf16:
        return (halves.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return halves.view(np.float16).astype(np.float32)


def operand_matrix(regs: np.ndarray, family: str, bf16: bool) -> np.ndarray:
    """A (n, 16, 16) as A[i][k] from an A operand's VGPRs (n, V, 32); for a B operand the
    result is B^T (B[k][j] at [j][k])."""
    (lane, half), _ = LAYOUTS[family]
    return to_f32(source_halves(regs)[:, half, lane], bf16)


def accumulator_matrix(regs: np.ndarray, family: str) -> np.ndarray:
    """C (n, 16, 16) from the 8 VGPRs (n, 8, 32) of a C/D operand."""
    _, (lane, reg) = LAYOUTS[family]
    return regs.view(np.float32)[:, reg, lane]


def accumulator_regs(d: np.ndarray, family: str) -> np.ndarray:
    """The 8 VGPRs (n, 8, 32) uint32 that hold D (n, 16, 16)."""
    _, (lane, reg) = LAYOUTS[family]
    out = np.empty((d.shape[0], 8, LANES), np.float32)
    out[:, reg, lane] = d
    return out.view(np.uint32)


def halves_disagree(regs: np.ndarray) -> bool:
    """gfx11: whether some wave's A or B operand differs between lanes l and l + 16."""
    return bool((regs[:, :, :16] != regs[:, :, 16:]).any())


def product(a_regs, b_regs, c, family: str, bf16: bool) -> np.ndarray:
    """D = A B + C (n, 16, 16) f32 from the A and B operands' VGPRs and C (n, 16, 16)."""
    a = operand_matrix(a_regs, family, bf16).astype(np.float64)
    bt = operand_matrix(b_regs, family, bf16).astype(np.float64)
    return (np.matmul(a, bt.transpose(0, 2, 1)) + c).astype(np.float32)


def prepare(ins, ex, fields) -> bool:
    """Prepare V_WMMA_F32_16X16X16_{F16,BF16} (`fields`: FIELDS of the instruction)."""
    name = ins.name
    m = re.match(r"V_WMMA_F32_16X16X16_(F16|BF16)$", name)
    if not m or ex.family not in LAYOUTS or ex.lanes != LANES:
        raise UnsupportedInstruction(f"{name} ({ex.family}, wave{ex.lanes})")
    if any(fields[f] for f in ("neg", "neg_hi", "opsel", "clmp")):
        raise UnsupportedInstruction(f"{name} with neg/op_sel/clamp modifiers")
    family, bf16 = ex.family, m.group(1) == "BF16"
    nv = SOURCE_VGPRS[family]
    a0, b0, c_code, d0 = fields["src0"] - 256, fields["src1"] - 256, fields["src2"], fields["vdst"]
    if a0 < 0 or b0 < 0 or c_code == 255:
        raise UnsupportedInstruction(f"{name} with a scalar A or B operand, or a literal C")

    def run(st, w):
        if not st.exec_mask(w).all():
            raise KernelFault(f"{name} with lanes off (EXEC must be all ones)")
        a_regs, b_regs = st.vgpr[w, a0:a0 + nv, :], st.vgpr[w, b0:b0 + nv, :]
        if family == "rdna3" and (halves_disagree(a_regs) or halves_disagree(b_regs)):
            raise KernelFault(f"{name}: lanes 16-31 of A or B differ from lanes 0-15 (gfx11 needs copies)")
        if c_code >= 256:
            c = accumulator_matrix(st.vgpr[w, c_code - 256:c_code - 248, :], family)
        else:  # an inline constant or literal: every element of C
            value = read_operand(st, w, Operand(c_code, 32, 32), False)
            c = np.broadcast_to(np.asarray(value, np.uint64).astype(np.uint32).view(np.float32).reshape(-1, 1, 1),
                                (a_regs.shape[0], 16, 16))
        st.vgpr[w, d0:d0 + 8, :] = accumulator_regs(product(a_regs, b_regs, c, family, bf16), family)

    ins.run = run
    ins.writes_exec = False
    return True
