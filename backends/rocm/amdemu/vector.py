"""The vector instructions run by hand rather than from pseudocode (pcode.py does not translate
them, or not exactly): v_mad_u64_u32 and its kin, v_perm_b32, v_mac_f32 (two roundings), the
mixed-precision v_fma_mix*, and v_trig_preop_f64 (2/pi's bits)."""
from __future__ import annotations

import numpy as np

from . import fastalu
from .wave import Operand, UnsupportedInstruction, apply_float_mods, field, finish, n_waves, operand_reader, \
    read_operand, write_vgpr

# the ones that write an SGPR, and the field naming it (the others write none)
_SGPR_DST = {"V_MAD_U64_U32": "sdst", "V_MAD_I64_I32": "sdst", "V_MAD_CO_U64_U32": "sdst", "V_MAD_CO_I64_I32": "sdst"}


def prepare(ins, ex) -> bool:
    """False if `ins` is none of this module's."""
    inst, name, L = ins.inst, ins.name, ex.lanes
    if name in ("V_MAD_U64_U32", "V_MAD_I64_I32", "V_MAD_CO_U64_U32", "V_MAD_CO_I64_I32"):  # gfx12 adds _CO
        lit = field(inst, "literal")  # gfx11's VOP3 takes a literal (v_mad_u64_u32 v[2:3], null, s33, 0x..., v[0:1])
        ops = [Operand(field(inst, f), b, None, lit) for f, b in (("src0", 32), ("src1", 32), ("src2", 64))]
        vdst, sdst = field(inst, "vdst"), field(inst, "sdst")
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
    elif name in ("V_PERM_B32", "V_PERM_B32_E64"):
        ops = [Operand(field(inst, f), 32, None, field(inst, "literal")) for f in ("src0", "src1", "src2")]
        vdst = field(inst, "vdst")

        def run(st, w):
            s0, s1, sel = (np.broadcast_to(read_operand(st, w, o, True), (n_waves(st, w), L)) for o in ops)
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
    elif name in ("V_FMA_MIX_F32", "V_FMA_MIXLO_F16", "V_FMA_MIXHI_F16", "V_MAD_MIX_F32", "V_MAD_MIXLO_F16",
                  "V_MAD_MIXHI_F16"):
        return _prepare_fma_mix(ins, ex)
    elif name == "V_TRIG_PREOP_F64":
        return _prepare_trig_preop(ins)
    elif name in ("V_MAC_F32", "V_MAC_F32_E32", "V_MAC_F32_E64"):
        vop3 = ins.fmt.startswith("VOP3")
        lit = field(inst, "literal")
        s0 = Operand(field(inst, "src0"), 32, 32, lit)
        s1 = Operand(field(inst, "src1") if vop3 else field(inst, "vsrc1") + 256, 32, 32, lit)
        vdst = field(inst, "vdst")
        neg, abs_ = field(inst, "neg", 0), field(inst, "abs", 0)

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
    return finish(ins, run, _SGPR_DST.get(name))


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
    lit = field(inst, "literal")
    s0, s1 = Operand(field(inst, "src0"), 64, 64, lit), Operand(field(inst, "src1"), 32, None, lit)
    vdst = field(inst, "vdst")
    if field(inst, "omod", 0) or field(inst, "clmp", 0):
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
    lit = field(inst, "literal")
    codes = [field(inst, f) for f in ("src0", "src1", "src2")]
    opsel, opsel_hi = field(inst, "opsel", 0), field(inst, "opsel_hi", 0) | (field(inst, "opsel_hi2", 0) << 2)
    neg, absm = field(inst, "neg", 0), field(inst, "neg_hi", 0)  # mix ops use neg_hi as abs
    clamp, vdst = field(inst, "clmp", 0), field(inst, "vdst")
    # an inline float constant is f16 where the operand is (op_sel_hi): LLVM 23's gfx950 code
    # has v_fma_mix_f32 v1, v2, -1.0, v1 op_sel_hi:[0,1,1] (0xBC00, not -1.0f's low half 0)
    operands = [Operand(code, 32, 16 if (opsel_hi >> i) & 1 else 32, lit) for i, code in enumerate(codes)]
    readers = [operand_reader(o, True, ex.arch) for o in operands]
    if any(r is None for r in readers):  # SCC, VCCZ...: the general reader
        readers = [lambda st, w, o=o: np.broadcast_to(read_operand(st, w, o, True), (n_waves(st, w), st.L))
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
