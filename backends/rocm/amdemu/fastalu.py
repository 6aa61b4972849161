"""Fast forms of the most frequent ALU pseudocode texts (an executor speed-up, same semantics).

The executor runs an ALU instruction through its opcode's translated pseudocode (pcode.py),
whose typed values cost tens of numpy calls per instruction. The few dozen texts below make
up most of what kernels execute (moves, integer adds and shifts, 64-bit address arithmetic,
f32 multiply-adds, compares, EXEC masking, branches); each is written here once more, by
hand, as numpy on the raw register contents: uint32 arrays for 32-bit operands, uint64 for
64-bit ones, lanes in the last axis. They are keyed by the pseudocode text itself, so a
form applies to every opcode and family with that exact text, and nowhere else.

`prepare` returns a run for an instruction whose text has a form and whose encoding uses
nothing a form leaves out (SDWA, DPP, op_sel, clamp, 16-bit operands...), else None: the
executor then runs the pseudocode. tests/test_amdemu_fast_alu.py checks every form against
the translated pseudocode, instruction by instruction, on random registers and EXEC masks.

To add a form: the text as the tables hold it (`normalize` drops comments, spacing and `;`)
and a function in the table of its kind.
"""
from __future__ import annotations

import re

import numpy as np

U32, U64 = np.uint32, np.uint64
_M32 = U64(0xFFFFFFFF)


def normalize(text: str) -> str:
    """A pseudocode text without comments, blank space differences or statement `;`."""
    key = _NORMAL.get(text)
    if key is None:
        lines = [" ".join(line.split()).rstrip(";").strip() for line in re.sub(r"//[^\n]*", "", text).split("\n")]
        key = _NORMAL[text] = "\n".join(line for line in lines if line)
    return key


_NORMAL = {}  # pseudocode text -> normalized (a few hundred opcodes' texts)


def _f32(x):
    return x.view(np.float32)


def _fma32(a, b, c):
    # as pcode.f_fma: the product and sum in f64, one rounding to f32 at the end
    r = _f32(a).astype(np.float64) * _f32(b).astype(np.float64) + _f32(c).astype(np.float64)
    return r.astype(np.float32).view(U32)


def _carry(t):
    return (t >> U64(32)).astype(bool)


# ---- VALU: D0 = f(S0, S1, S2) per lane (uint32 or uint64 in, the destination's width out) ----
VALU = {
    "D0.b32 = S0.b32": lambda a: a,
    "D0.u32 = S0.u32 + S1.u32": lambda a, b: a + b,
    "D0.u32 = S0.u32 - S1.u32": lambda a, b: a - b,
    "D0.u32 = S1.u32 - S0.u32": lambda a, b: b - a,
    "D0.u32 = S0.u32 * S1.u32": lambda a, b: a * b,
    "D0.u32 = 32'U((64'U(S0.u32) * 64'U(S1.u32)) >> 32U)":
        lambda a, b: ((a.astype(U64) * b.astype(U64)) >> U64(32)).astype(U32),
    "D0.u32 = (S0.u32 & S1.u32)": lambda a, b: a & b,
    "D0.u32 = (S0.u32 | S1.u32)": lambda a, b: a | b,
    "D0.u32 = (S0.u32 ^ S1.u32)": lambda a, b: a ^ b,
    "D0.u32 = (S1.u32 << S0[4 : 0].u32)": lambda a, b: b << (a & U32(31)),
    "D0.u32 = (S1.u32 >> S0[4 : 0].u32)": lambda a, b: b >> (a & U32(31)),
    "D0.i32 = (S1.i32 >> S0[4 : 0].u32)":
        lambda a, b: (b.astype(np.int32) >> (a & U32(31)).astype(np.int32)).astype(U32),
    "D0.u64 = (S1.u64 << S0[5 : 0].u32)": lambda a, b: b << (a & U32(63)).astype(U64),
    "D0.u32 = S0.u32 + S1.u32 + S2.u32": lambda a, b, c: a + b + c,
    "D0.u32 = ((S0.u32 << S1.u32[4 : 0].u32) | S2.u32)": lambda a, b, c: (a << (b & U32(31))) | c,
    "D0.u32 = ((S0.u32 << S1.u32[4 : 0].u32) + S2.u32)": lambda a, b, c: (a << (b & U32(31))) + c,
    "D0.u32 = (S0.u32 << S1.u32[4 : 0].u32) + S2.u32": lambda a, b, c: (a << (b & U32(31))) + c,
    "D0.u32 = ((S0.u32 & S1.u32) | S2.u32)": lambda a, b, c: (a & b) | c,
    "D0.u32 = (S0.u32 | S1.u32 | S2.u32)": lambda a, b, c: a | b | c,
    "D0.f32 = S0.f32 + S1.f32": lambda a, b: (_f32(a) + _f32(b)).view(U32),
    "D0.f32 = S0.f32 - S1.f32": lambda a, b: (_f32(a) - _f32(b)).view(U32),
    "D0.f32 = S1.f32 - S0.f32": lambda a, b: (_f32(b) - _f32(a)).view(U32),
    "D0.f32 = S0.f32 * S1.f32": lambda a, b: (_f32(a) * _f32(b)).view(U32),
    "D0.f32 = fma(S0.f32, S1.f32, S2.f32)": _fma32,
}

# ... with the instruction's 32-bit literal (SIMM32, the last argument)
VALU_K = {
    "D0.f32 = fma(S0.f32, S1.f32, SIMM32.f32)": lambda a, b, k: _fma32(a, b, k),
    "D0.f32 = fma(S0.f32, SIMM32.f32, S1.f32)": lambda a, b, k: _fma32(a, k, b),
}

# ... that also read their destination (D0 is the last argument)
VALU_D = {
    "D0.f32 = fma(S0.f32, S1.f32, D0.f32)": _fma32,
}

# ... that read the lane's number (first argument: the lane numbers, uint64 (L,))
VALU_LANE = {
    "ThreadMask = (1LL << laneId.u32) - 1LL\nMaskedValue = (S0.u32 & ThreadMask[31 : 0].u32)\ntmp = S1.u32\n"
    "for i in 0 : 31 do\ntmp += MaskedValue[i] == 1'1U ? 1U : 0U\nendfor\nD0.u32 = tmp":
        lambda lane, a, b: b + np.bitwise_count(a & ((U64(1) << lane) - U64(1)).astype(U32)).astype(U32),
    "ThreadMask = (1LL << laneId.u32) - 1LL\nMaskedValue = (S0.u32 & ThreadMask[63 : 32].u32)\ntmp = S1.u32\n"
    "for i in 0 : 31 do\ntmp += MaskedValue[i] == 1'1U ? 1U : 0U\nendfor\nD0.u32 = tmp":
        lambda lane, a, b: b + np.bitwise_count(a & (((U64(1) << lane) - U64(1)) >> U64(32)).astype(U32)).astype(U32),
}

# packed f32 (VOP3P): one function per 32-bit half, after op_sel / op_sel_hi / neg / neg_hi
PACKED = {
    "declare tmp : 64'B\ntmp[31 : 0].f32 = fma(S0[31 : 0].f32, S1[31 : 0].f32, S2[31 : 0].f32)\n"
    "tmp[63 : 32].f32 = fma(S0[63 : 32].f32, S1[63 : 32].f32, S2[63 : 32].f32)\nD0.b64 = tmp": _fma32,
    "declare tmp : 64'B\ntmp[31 : 0].f32 = S0[31 : 0].f32 + S1[31 : 0].f32\n"
    "tmp[63 : 32].f32 = S0[63 : 32].f32 + S1[63 : 32].f32\nD0.b64 = tmp": lambda a, b: (_f32(a) + _f32(b)).view(U32),
    "declare tmp : 64'B\ntmp[31 : 0].f32 = S0[31 : 0].f32 * S1[31 : 0].f32\n"
    "tmp[63 : 32].f32 = S0[63 : 32].f32 * S1[63 : 32].f32\nD0.b64 = tmp": lambda a, b: (_f32(a) * _f32(b)).view(U32),
}
# V_PK_MOV_B32: D0's low half is the half of S0 op_sel[0] picks, its high half that of S1 by op_sel[1]
PK_MOV = ("tmp0.u32 = S0.u32[OPSEL[0].i32 * 32 + 31 : OPSEL[0].i32 * 32]\n"
          "tmp1.u32 = S1.u32[OPSEL[1].i32 * 32 + 31 : OPSEL[1].i32 * 32]\nD0.u32[31 : 0] = tmp0.u32\n"
          "D0.u32[63 : 32] = tmp1.u32")

# ---- compares: the lane's bit of the result mask ------------------------------------------
_CMP = {"==": np.equal, "<>": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
        ">=": np.greater_equal}
_AS = {"u32": lambda x: x, "i32": lambda x: x.astype(np.int32), "u64": lambda x: x,
       "i64": lambda x: x.astype(np.int64), "f32": _f32}
VCMP = {}
for _t in _AS:
    for _op, _fn in _CMP.items():
        # integer compares only: a float compare's text also names its NaN cases elsewhere
        if _t != "f32" or _op not in ("<>",):
            VCMP[f"D0.u64[laneId] = S0.{_t} {_op} S1.{_t}"] = (lambda f, c: lambda a, b: c(f(a), f(b)))(_AS[_t], _fn)
del _t, _op, _fn

# ---- lane selects and carries ----------------------------------------------------------------
CNDMASK = {"D0.u32 = VCC.u64[laneId] ? S1.u32 : S0.u32": lambda a, b, bit: np.where(bit, b, a)}

# (S0, S1, carry-in bits or None) -> (D0, carry-out bits)
CARRY = {
    "tmp = 64'U(S0.u32) + 64'U(S1.u32)\nVCC.u64[laneId] = tmp >= 0x100000000ULL ? 1'1U : 1'0U\nD0.u32 = tmp.u32":
        lambda a, b, c: (lambda t: (t.astype(U32), _carry(t)))(a.astype(U64) + b),
    "tmp = 64'U(S0.u32) + 64'U(S1.u32) + VCC.u64[laneId].u64\n"
    "VCC.u64[laneId] = tmp >= 0x100000000ULL ? 1'1U : 1'0U\nD0.u32 = tmp.u32":
        lambda a, b, c: (lambda t: (t.astype(U32), _carry(t)))(a.astype(U64) + b + c),
    "tmp = S0.u32 - S1.u32\nVCC.u64[laneId] = S1.u32 > S0.u32 ? 1'1U : 1'0U\nD0.u32 = tmp.u32":
        lambda a, b, c: (a - b, b > a),
    "tmp = S1.u32 - S0.u32\nVCC.u64[laneId] = S0.u32 > S1.u32 ? 1'1U : 1'0U\nD0.u32 = tmp.u32":
        lambda a, b, c: (b - a, a > b),
    "tmp = S0.u32 - S1.u32 - VCC.u64[laneId].u32\n"
    "VCC.u64[laneId] = 64'U(S1.u32) + VCC.u64[laneId].u64 > 64'U(S0.u32) ? 1'1U : 1'0U\nD0.u32 = tmp.u32":
        lambda a, b, c: (a - b - c.astype(U32), b.astype(U64) + c > a),
    "tmp = S1.u32 - S0.u32 - VCC.u64[laneId].u32\n"
    "VCC.u64[laneId] = 64'U(S0.u32) + VCC.u64[laneId].u64 > 64'U(S1.u32) ? 1'1U : 1'0U\nD0.u32 = tmp.u32":
        lambda a, b, c: (b - a - c.astype(U32), a.astype(U64) + c > b),
}

# ---- SALU: (S0, S1, SCC) per wave -> (D0 or None, SCC or None) --------------------------------
_NZ = lambda d: (d != 0).astype(U32)  # noqa: E731


def _logic(f):
    return lambda a, b, scc: (lambda d: (d, _NZ(d)))(f(a, b))


SALU = {
    "D0.b32 = S0.b32": lambda a, b, scc: (a, None),
    "D0.b64 = S0.b64": lambda a, b, scc: (a, None),
    "D0.u64 = (S0.u64 | S1.u64)\nSCC = D0.u64 != 0ULL": _logic(lambda a, b: a | b),
    "D0.u64 = (S0.u64 & S1.u64)\nSCC = D0.u64 != 0ULL": _logic(lambda a, b: a & b),
    "D0.u64 = (S0.u64 ^ S1.u64)\nSCC = D0.u64 != 0ULL": _logic(lambda a, b: a ^ b),
    "D0.u64 = (S0.u64 & ~S1.u64)\nSCC = D0.u64 != 0ULL": _logic(lambda a, b: a & ~b),
    "D0.u64 = (S0.u64 | ~S1.u64)\nSCC = D0.u64 != 0ULL": _logic(lambda a, b: a | ~b),
    "D0.u32 = (S0.u32 & S1.u32)\nSCC = D0.u32 != 0U": _logic(lambda a, b: a & b),
    "D0.u32 = (S0.u32 | S1.u32)\nSCC = D0.u32 != 0U": _logic(lambda a, b: a | b),
    "D0.u32 = (S0.u32 ^ S1.u32)\nSCC = D0.u32 != 0U": _logic(lambda a, b: a ^ b),
    "D0.u32 = (S0.u32 & ~S1.u32)\nSCC = D0.u32 != 0U": _logic(lambda a, b: a & ~b),
    "D0.u32 = (S0.u32 >> S1[4 : 0].u32)\nSCC = D0.u32 != 0U": _logic(lambda a, b: a >> (b & U32(31))),
    "D0.u32 = (S0.u32 << S1[4 : 0].u32)\nSCC = D0.u32 != 0U": _logic(lambda a, b: a << (b & U32(31))),
    "D0.u64 = (S0.u64 << S1[5 : 0].u32)\nSCC = D0.u64 != 0ULL":
        _logic(lambda a, b: a << (b & U32(63)).astype(U64)),
    "D0.i32 = S0.i32 * S1.i32": lambda a, b, scc: (a * b, None),
    "D0.u32 = 32'U((64'U(S0.u32) * 64'U(S1.u32)) >> 32U)":
        lambda a, b, scc: (((a.astype(U64) * b.astype(U64)) >> U64(32)).astype(U32), None),
    "D0.i32 = 32'I(signext(S0.i32) >> S1[4 : 0].u32)\nSCC = D0.i32 != 0":
        _logic(lambda a, b: (a.astype(np.int32) >> (b & U32(31)).astype(np.int32)).astype(U32)),
    "D0.u64 = SCC ? S0.u64 : S1.u64": lambda a, b, scc: (np.where(scc != 0, a, b), None),
    "D0.u32 = SCC ? S0.u32 : S1.u32": lambda a, b, scc: (np.where(scc != 0, a, b), None),
    "tmp = 64'U(S0.u32) + 64'U(S1.u32)\nSCC = tmp >= 0x100000000ULL ? 1'1U : 1'0U\nD0.u32 = tmp.u32":
        lambda a, b, scc: (lambda t: (t.astype(U32), (t >> U64(32)).astype(U32)))(a.astype(U64) + b),
    "tmp = 64'U(S0.u32) + 64'U(S1.u32) + SCC.u64\nSCC = tmp >= 0x100000000ULL ? 1'1U : 1'0U\nD0.u32 = tmp.u32":
        lambda a, b, scc: (lambda t: (t.astype(U32), (t >> U64(32)).astype(U32)))(a.astype(U64) + b + scc),
    "tmp = S0.i32 + S1.i32\nSCC = ((S0.u32[31] == S1.u32[31]) && (S0.u32[31] != tmp.u32[31]))\nD0.i32 = tmp.i32":
        lambda a, b, scc: (lambda t: (t, ((~(a ^ b) & (a ^ t)) >> U32(31))))(a + b),
    "tmp = S0.i32 - S1.i32\nSCC = ((S0.u32[31] != S1.u32[31]) && (S0.u32[31] != tmp.u32[31]))\nD0.i32 = tmp.i32":
        lambda a, b, scc: (lambda t: (t, (((a ^ b) & (a ^ t)) >> U32(31))))(a - b),
}

# compares: SCC only
SCMP = {}
for _t in ("u32", "i32", "u64"):
    for _op, _fn in _CMP.items():
        SCMP[f"SCC = S0.{_t} {_op} S1.{_t}"] = (lambda f, c: lambda a, b: c(f(a), f(b)).astype(U32))(_AS[_t], _fn)
del _t, _op, _fn

# EXEC = f(S0, EXEC); D0 = the old EXEC; SCC = EXEC != 0 (the u64 texts of wave64, u32 of wave32)
SAVEEXEC = {}
for _t, _z in (("u64", "0ULL"), ("u32", "0U")):
    for _expr, _fn in (("S0.{t} & EXEC.{t}", lambda s, e: s & e), ("S0.{t} & ~EXEC.{t}", lambda s, e: s & ~e),
                       ("S0.{t} | EXEC.{t}", lambda s, e: s | e)):
        SAVEEXEC[f"saveexec = EXEC.{_t}\nEXEC.{_t} = ({_expr.format(t=_t)})\nD0.{_t} = saveexec.{_t}\n"
                 f"SCC = EXEC.{_t} != {_z}"] = _fn
del _t, _z, _expr, _fn

# branches: which register's test takes the jump (PC + 4 + 4 * SIMM16, else PC + 4)
_JUMP = "PC = PC + signext(SIMM16.i16 * 16'4) + 4LL"
BRANCH = {_JUMP: None}
for _reg, _v in (("SCC", "0"), ("SCC", "1"), ("VCCZ.u1", "0"), ("VCCZ.u1", "1"), ("EXECZ.u1", "0"),
                 ("EXECZ.u1", "1")):
    BRANCH[f"if {_reg} == 1'{_v}U then\n{_JUMP}\nelse\nPC = PC + 4LL\nendif"] = (_reg.split(".")[0], int(_v))
del _reg, _v


_TABLES = (VALU, VALU_K, VALU_D, VALU_LANE, PACKED, VCMP, CNDMASK, CARRY, SALU, SCMP, SAVEEXEC, BRANCH)


def write_lanes(st, w, file, reg, value, mask):
    """file[w, reg] = value (uint32, broadcast to the lanes) where mask is set."""
    if isinstance(w, slice):
        np.copyto(file[w, reg], value, where=mask, casting="unsafe")
    else:
        old = file[w, reg]
        np.copyto(old, value, where=mask, casting="unsafe")
        file[w, reg] = old


def lane_bits(st, m):
    """A wave mask per wave (uint64 (n,)) -> its bits per lane, bool (n, L)."""
    return ((m[:, None] >> st.lane) & U64(1)).astype(bool)


def has_form(text: str) -> bool:
    """Whether some instruction with this pseudocode may take a fast form."""
    key = normalize(text)
    return any(key in table for table in _TABLES) or key == PK_MOV


def prepare(ins, text, d):
    """A run for `ins` from its pseudocode's fast form, or None. `d` holds what the executor
    read from the encoding: `readers` (per source, a function (st, w) -> raw bits, or None
    where a source needs the general reader), the destination and mask operands."""
    key = normalize(text)
    readers = d.readers
    if d.modified or any(r is None for r in readers):
        return None
    if d.packed:
        return _prepare_packed(key, d)
    if d.vector:
        return _prepare_vector(ins, key, d)
    return _prepare_scalar(ins, key, d)


def _vcc_bits(st, w):
    return lane_bits(st, st.read_s64(w, 106))


def prepare_dual(halves, lit):
    """A run for RDNA3's VOPD from the fast forms of its two halves, or None. `halves`:
    (pseudocode text, reader of S0, reader of S1, destination VGPR) per half; `lit` the
    literal (SIMM32) or None. Both halves read before either writes."""
    forms = []
    for text, r0, r1, vdst in halves:
        key = normalize(text)
        extra = None  # what the form takes after its sources: D0, SIMM32 or VCC's lane bits
        if key in VALU:
            fn = VALU[key]
        elif key in VALU_D:
            fn, extra = VALU_D[key], (lambda st, w, vdst=vdst: st.vgpr[w, vdst])
        elif key in VALU_K and lit is not None:
            k = U32(lit)
            fn, extra = VALU_K[key], (lambda st, w, k=k: k)
        elif key in CNDMASK:
            fn, extra = CNDMASK[key], _vcc_bits
        else:
            return None
        nsrc = fn.__code__.co_argcount - (extra is not None)
        if r0 is None or r1 is None or nsrc > 2:
            return None
        forms.append((fn, extra, [r0, r1][:nsrc], vdst))

    def run(st, w):
        results = []
        for fn, extra, rs, vdst in forms:
            args = [r(st, w) for r in rs]
            if extra is not None:
                args.append(extra(st, w))
            v = fn(*args)
            if np.may_share_memory(v, st.vgpr):  # a register's view: the other half may write it
                v = v.copy()
            results.append((vdst, v))
        e = st.exec_mask(w)
        for vdst, v in results:
            write_lanes(st, w, st.vgpr, vdst, v, e)
    return run


def _prepare_packed(key, d):
    readers, vdst = d.readers, d.vdst
    if vdst is None or d.dst_bits != 64 or any(r is None for r in readers):
        return None
    if key == PK_MOV and len(readers) == 2:
        sel0, sel1 = U64(32 * (d.opsel & 1)), U64(32 * ((d.opsel >> 1) & 1))

        def run(st, w):
            e = st.exec_mask(w)
            lo, hi = readers[0](st, w) >> sel0, readers[1](st, w) >> sel1
            write_lanes(st, w, st.vgpr, vdst, lo & _M32, e)
            write_lanes(st, w, st.vgpr, vdst + 1, hi & _M32, e)
        return run
    fn = PACKED.get(key)
    if fn is None or fn.__code__.co_argcount != len(readers):
        return None
    # per source: (shift of the half the low result takes, of the high one's, sign flips)
    picks = [(U64(32 * ((d.opsel >> i) & 1)), U64(32 * ((d.opsel_hi >> i) & 1)),
              U32(((d.neg >> i) & 1) << 31), U32(((d.neg_hi >> i) & 1) << 31)) for i in range(len(readers))]

    def run(st, w):
        los, his = [], []
        for r, (s_lo, s_hi, n_lo, n_hi) in zip(readers, picks):
            v = r(st, w)
            los.append(((v >> s_lo) & _M32).astype(U32) ^ n_lo)
            his.append(((v >> s_hi) & _M32).astype(U32) ^ n_hi)
        e = st.exec_mask(w)
        write_lanes(st, w, st.vgpr, vdst, fn(*los), e)
        write_lanes(st, w, st.vgpr, vdst + 1, fn(*his), e)
    return run


def _prepare_vector(ins, key, d):
    readers, vdst = d.readers, d.vdst
    if key in VALU_K:
        if vdst is None or d.dst_bits != 32 or len(readers) != 2 or d.lit is None:
            return None
        fn, k = VALU_K[key], U32(d.lit)

        def run(st, w):
            v = fn(readers[0](st, w), readers[1](st, w), k)
            write_lanes(st, w, st.vgpr, vdst, v, st.exec_mask(w))
        return run
    if key in VALU_LANE:
        if vdst is None or d.dst_bits != 32:
            return None
        fn = VALU_LANE[key]

        def run(st, w):
            v = fn(st.lane, *[r(st, w) for r in readers])
            write_lanes(st, w, st.vgpr, vdst, v, st.exec_mask(w))
        return run
    if key in VALU or key in VALU_D:
        if vdst is None or d.dst_bits not in (32, 64):
            return None
        fn, reads_d = (VALU[key], False) if key in VALU else (VALU_D[key], True)
        if fn.__code__.co_argcount != len(readers) + reads_d:
            return None
        hi = d.dst_bits == 64

        def run(st, w):
            args = [r(st, w) for r in readers]
            if reads_d:
                args.append(st.vgpr[w, vdst])
            v = fn(*args)
            e = st.exec_mask(w)
            if hi:
                write_lanes(st, w, st.vgpr, vdst, (v & _M32), e)
                write_lanes(st, w, st.vgpr, vdst + 1, (v >> U64(32)), e)
            else:
                write_lanes(st, w, st.vgpr, vdst, v, e)
        return run
    if key in VCMP:
        if len(readers) != 2 or d.mask_dst is None:
            return None
        fn, target = VCMP[key], d.mask_dst

        def run(st, w):
            bits = fn(readers[0](st, w), readers[1](st, w))
            e = st.exec_mask(w)
            st.write_mask(w, target, st.pack_lanes(w, bits & e))
        return run
    if key in CNDMASK or key in CARRY:
        if vdst is None or d.dst_bits != 32 or len(readers) != 2:
            return None
        mask_in = d.mask_in
        if key in CNDMASK:
            fn = CNDMASK[key]

            def run(st, w):
                v = fn(readers[0](st, w), readers[1](st, w), lane_bits(st, mask_in(st, w)))
                write_lanes(st, w, st.vgpr, vdst, v, st.exec_mask(w))
            return run
        fn, carry_dst = CARRY[key], d.carry_dst
        uses_cin = "VCC.u64[laneId]" in key.split("\n")[0]

        def run(st, w):
            cin = lane_bits(st, mask_in(st, w)) if uses_cin else None
            v, cout = fn(readers[0](st, w), readers[1](st, w), cin)
            e = st.exec_mask(w)
            write_lanes(st, w, st.vgpr, vdst, v, e)
            st.write_mask(w, carry_dst, st.pack_lanes(w, cout & e))
        return run
    return None


def _prepare_scalar(ins, key, d):
    readers, sdst = d.readers, d.sdst
    if key in SALU:
        if sdst is None or d.dst_bits not in (32, 64) or len(readers) > 2:
            return None
        fn, wide = SALU[key], d.dst_bits == 64
        ra = readers[0]
        rb = readers[1] if len(readers) > 1 else None
        writes_scc = "SCC =" in key

        def run(st, w):
            v, scc = fn(ra(st, w), rb(st, w) if rb is not None else None, st.scc[w])
            if wide:
                st.write_s64(w, sdst, v)
            else:
                st.sgpr[w, sdst] = v
            if writes_scc:
                st.scc[w] = scc
        return run
    if key in SCMP:
        if len(readers) != 2:
            return None
        fn = SCMP[key]

        def run(st, w):
            st.scc[w] = fn(readers[0](st, w), readers[1](st, w))
        return run
    if key in SAVEEXEC:
        if sdst is None or len(readers) != 1:
            return None
        fn, reader = SAVEEXEC[key], readers[0]
        wide = "EXEC.u64" in key
        if not wide and d.lanes != 32:  # a 32-bit form in wave64 keeps EXEC's high half: not here
            return None

        def run(st, w):
            old = st.read_s64(w, 126)
            new = fn(reader(st, w).astype(U64), old)
            if wide:  # D0 first, then EXEC: the order the pseudocode's results are written in
                st.write_s64(w, sdst, old)
            else:
                st.sgpr[w, sdst] = (old & _M32).astype(U32)
            st.write_s64(w, 126, new)
            st.scc[w] = (new != 0).astype(U32)
        return run
    if key in BRANCH and d.simm16 is not None:
        test = BRANCH[key]
        jump = 4 + 4 * (d.simm16 - (1 << 16) if d.simm16 & 0x8000 else d.simm16)

        def run(st, w):
            if test is None:
                st.pc[w] += jump
                return
            reg, want = test
            if reg == "SCC":
                taken = st.scc[w] == want
            else:
                taken = (st.read_s64(w, 106 if reg == "VCCZ" else 126) == 0) == bool(want)
            st.pc[w] += np.where(taken, jump, 4)
        return run
    return None
