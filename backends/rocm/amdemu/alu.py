"""The ALU instructions (SOP*, VOP*) through AMD's pseudocode: the text of an opcode translated
once (pcode.py), or its fast form (fastalu.py), run over the waves and lanes with the
encoding's operand selection and modifiers (VOP3 neg/abs/opsel, SDWA, packed halves, clamp);
RDNA3's dual-issue VOPD too."""
from __future__ import annotations

import re
from typing import Dict

import numpy as np

from . import fastalu
from . import pcode as P
from .pcode_types import Lanes, T
from .wave import Instr, Operand, UnsupportedInstruction, apply_float_mods, field, n_waves, operand_reader, \
    read_operand, write_vgpr


def _float_kind(fmt_name: str):
    """Operand format name -> (float width or None, packed halves)."""
    m = re.match(r"FMT_NUM_(PK2_)?(BF|F)(16|32|64)$", fmt_name)
    if not m:
        return None, False
    return int(m.group(3)), bool(m.group(1))


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
        ttbl = field(inst, "omod", 0) << 6 | field(inst, "abs", 0) << 3 | field(inst, "neg", 0)
        text = re.sub(r"^D\.", "D0.", re.sub(r"^TTBL = .*$", f"TTBL = {ttbl}U;", text, flags=re.M), flags=re.M)
    text = _FORCED_RNE.sub("", text) if "ROUND_MODE = ROUND_NEAREST_EVEN" in text else text
    try:
        fn = P.compile_pcode(name, text, vector)
    except P.Untranslatable as e:
        raise UnsupportedInstruction(f"{name} ({fmt}): {e}") from None
    opinfo = inst.operands
    bits = inst.op_bits
    lit = field(inst, "literal")
    sdwa, dpp = fmt.endswith(("_SDWA", "_SDWA_SDST")), "_DPP" in fmt
    if dpp:
        raise UnsupportedInstruction(f"{name}: DPP operands")
    vop3 = fmt.startswith(("VOP3", "VOP3SD"))
    packed = fmt.startswith("VOP3P")
    neg, abs_ = (0, 0) if bitop3 else (field(inst, "neg", 0), field(inst, "abs", 0))
    neg_hi = field(inst, "neg_hi", 0)
    opsel = field(inst, "opsel", 0)
    opsel_hi = (field(inst, "opsel_hi", 3) | (field(inst, "opsel_hi2", 1) << 2)) if packed else 0
    clamp = field(inst, "clmp", 0)
    if field(inst, "omod", 0) and not bitop3:
        raise UnsupportedInstruction(f"{name}: output modifier (omod)")

    # sources, in the order S0, S1, S2
    srcs = []
    for fname in ("src0", "vsrc0", "ssrc0", "src1", "vsrc1", "ssrc1", "src2"):
        if fname not in opinfo:
            continue
        code = field(inst, fname)
        if code is None and fname.startswith("vsrc"):  # RDNA3's VOP3 of a VGPR-only VOP1 source:
            code = field(inst, fname[1:])               # the 9-bit src field (VGPRs from 256)
        elif fname == "vsrc1":
            code += 256
        if sdwa and fname == "src0":
            code = field(inst, "vsrc0") + (0 if field(inst, "s0", 0) else 256)
        if sdwa and fname == "vsrc1" and field(inst, "s1", 0):
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
    dst_code = field(inst, dst_field) if dst_field else None
    if dst_field == "vdst" and not dst_is_sgpr:
        dst_code = dst_code + 256 if dst_code < 256 else dst_code
    sdst_carry = field(inst, "sdst") if fmt.startswith("VOP3SD") else None
    if fmt == "VOPC_SDWA_SDST":
        sdst_carry = field(inst, "sdst") if field(inst, "sd", 0) else 106
        dst_is_sgpr, dst_code = True, (field(inst, "sdst") if field(inst, "sd", 0) else 106)
    zero_high16 = family == "cdna" and vector and not dst_is_sgpr and dst_bits == 16 and not sdwa
    wave_ieee = T(np.uint64(1), "u", 1)
    simm16 = field(inst, "simm16")
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
    sdwa_sel = [(field(inst, "src0_sel", 6), field(inst, "src0_sext", 0)),
                (field(inst, "src1_sel", 6), field(inst, "src1_sext", 0))] if sdwa else None
    sdwa_mods = [(field(inst, "src0_neg", 0), field(inst, "src0_abs", 0)),
                 (field(inst, "src1_neg", 0), field(inst, "src1_abs", 0))] if sdwa else None
    dst_sel = (field(inst, "dst_sel", 6), field(inst, "dst_unused", 0)) if sdwa and dst_field else None
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
        n = n_waves(st, w)
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


def prepare_vopd(ins, ex):
    """RDNA3 VOPD: two VOP2-like operations issued together; both read their operands before
    either writes. Each half runs its VOP1/VOP2 namesake's pseudocode."""
    inst = ins.inst
    by_name = tables(ex.family)
    lit = field(inst, "literal")
    vdstx = field(inst, "vdstx")
    halves, texts = [], []
    for op, src0, src1, vdst in ((inst.opx, field(inst, "srcx0"), field(inst, "vsrcx1"), vdstx),
                                 (inst.opy, field(inst, "srcy0"), field(inst, "vsrcy1"),
                                  (field(inst, "vdsty") << 1) | ((vdstx & 1) ^ 1))):
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
        n = n_waves(st, w)
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
