"""CDNA's matrix cores in the wave executor: V_MFMA_* (D = A B + C on a wave64) and the moves
to, from and between the accumulation registers (V_ACCVGPR_*)."""
from __future__ import annotations

import re

import numpy as np

from .wave import Operand, UnsupportedInstruction, field, finish, n_waves, read_operand, write_vgpr


def prepare(ins, ex) -> bool:
    """False if `ins` is none of this module's."""
    inst, name = ins.inst, ins.name
    if name.startswith("V_MFMA_"):
        return _prepare_mfma(ins, ex)
    elif name.startswith("V_ACCVGPR_"):
        src0, vdst = field(inst, "src0"), field(inst, "vdst")
        lit = field(inst, "literal")
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
    else:
        return False
    return finish(ins, run)


def _prepare_mfma(ins, ex):
    """V_MFMA_F32_16X16X16{F16,BF16}, V_MFMA_F32_16X16X32_{F16,BF16} (CDNA4) and
    V_MFMA_F32_16X16X4F32: D = A B + C on a wave64, one 16x16xK block. Lane and register layout
    after AMD's CDNA3 / CDNA4 ISA guides (matrix fused multiply-add sections) and the matrix
    instruction calculator: 16-bit operands, P = K / 4 values a lane (K 16: 4 in two VGPRs,
    K 32: 8 in four): A[i][k] in lane i + 16 (k / P), half k % P of its VGPRs; B[k][j] in lane
    j + 16 (k / P), half k % P. K 4 (f32): A[i][k] in lane i + 16 k of its VGPR, B[k][j] in
    lane j + 16 k. C/D[i][j] in lane j + 16 (i / 4), register i % 4."""
    inst, name = ins.inst, ins.name
    m = re.match(r"V_MFMA_F32_16X16X(?:(16|32)_?(F16|BF16)(_1K)?|4_?(F32))$", name)
    if not m or ex.lanes != 64:
        raise UnsupportedInstruction(f"{name}")
    if any(field(inst, f, 0) for f in ("cbsz", "abid", "blgp")):
        raise UnsupportedInstruction(f"{name} with broadcast controls (cbsz/abid/blgp)")
    bf16, f32 = m.group(2) == "BF16", m.group(4) == "F32"
    a_code, b_code, c_code, vdst = (field(inst, f) for f in ("src0", "src1", "src2", "vdst"))
    acc_cd = bool(field(inst, "acc_cd", 0))
    acc_ab = field(inst, "acc", 0)           # bit 0: A from AGPRs, bit 1: B
    kk = int(m.group(1) or 16)                # K of a 16-bit product
    a_lane, a_half = _MFMA16_A[kk]
    per = kk // 4                             # 16-bit values a lane: 4 or 8

    def halves(st, w, code, from_agpr):
        file = st.agpr if from_agpr else st.vgpr
        r = code - 256
        regs = [file[w, r + q, :].astype(np.uint64) for q in range(per // 2)]
        h = [x for reg in regs for x in (reg & np.uint64(0xFFFF), reg >> np.uint64(16))]
        return np.stack(h, axis=-1)  # (n, 64, per)

    def to_f32(h):
        if bf16:
            return (h << np.uint64(16)).astype(np.uint32).view(np.float32)
        return h.astype(np.uint16).view(np.float16).astype(np.float32)

    def floats(st, w, code, from_agpr):
        file = st.agpr if from_agpr else st.vgpr
        return file[w, code - 256, :].astype(np.uint32).view(np.float32)  # (n, 64)

    def run(st, w):
        n = n_waves(st, w)
        if f32:
            A = floats(st, w, a_code, acc_ab & 1)[:, _A4_LANE]  # (n, 16, 4): A[i][k]
            B = floats(st, w, b_code, acc_ab & 2)[:, _B4_LANE]  # (n, 4, 16): B[k][j]
        else:
            A = to_f32(halves(st, w, a_code, acc_ab & 1))[:, a_lane, a_half]  # (n, 16, K): A[i][k]
            B = to_f32(halves(st, w, b_code, acc_ab & 2))[:, a_lane.T, a_half.T]  # B[k][j]
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
# A[i][k] of a 16-bit MFMA of K 16 / 32: (lane, half) = (i + 16 (k / P), k % P), P = K / 4;
# B[k][j] is at the transpose's places (lane j + 16 (k / P))
_MFMA16_A = {kk: (i + 16 * (k // (kk // 4)), k % (kk // 4))
             for kk in (16, 32) for i, k in [np.meshgrid(np.arange(16), np.arange(kk), indexing="ij")]}
_A4_LANE = np.arange(16)[:, None] + 16 * np.arange(4)[None, :]  # A[i][k] of a K-4 MFMA: lane i + 16 k
_B4_LANE = _A4_LANE.T                                             # B[k][j]: lane j + 16 k
_I, _J2 = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")
_D_LANE, _D_REG = _J2 + 16 * (_I // 4), _I % 4            # C[i][j]
