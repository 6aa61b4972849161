"""AMD's instruction pseudocode translated to numpy (backends/rocm/amdemu/pcode.py), checked
op by op against values worked out by hand from the ISA documents' semantics.

Needs tinygrad==0.14.0 (it carries the pseudocode text); nothing here runs on AMD hardware.
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tinygrad.runtime.autogen.amd.cdna.str_pcode",
                    reason="tinygrad==0.14.0 (AMD's instruction tables) is not installed")
pytestmark = pytest.mark.amdemu

from tinygrad.runtime.autogen.amd.cdna.enum import SOP1Op, SOP2Op, SOPPOp, VOP1Op, VOP2Op, VOP3Op, VOP3SDOp  # noqa: E402
from tinygrad.runtime.autogen.amd.cdna.str_pcode import PCODE  # noqa: E402

from tensorlite.backends.rocm.amdemu import pcode as P  # noqa: E402
from tensorlite.backends.rocm.amdemu.pcode_types import T  # noqa: E402

LANES = 4


def u32(values, bits=32):
    return T(np.asarray(values, np.uint64).reshape(1, -1), "u", bits)


def f32(values):
    return u32(np.asarray(values, np.float32).view(np.uint32))


def scalar(values, bits=32):
    return T(np.asarray(values, np.uint64), "u", bits)


def run(op, vector=True, **env):
    fn = P.compile_pcode(op.name, PCODE[op], vector)
    env.setdefault("laneId", T(np.arange(LANES, dtype=np.uint64).reshape(1, -1), "u", 32))
    env.setdefault("WAVE_MODE_IEEE", T(np.uint64(1), "u", 1))
    env.setdefault("D0", u32([0] * LANES))
    return fn(env)


def words(t):
    return t.bits().astype(np.uint32).ravel()


def lanes(t):
    return np.broadcast_to(t.a, (1, LANES)).ravel().tolist()


def test_carry_chain():
    vcc = T(np.zeros((1, 1), np.uint64), "u", 64)
    e = run(VOP2Op.V_ADD_CO_U32_E32, S0=u32([1, 0xFFFFFFFF, 5, 0x80000000]), S1=u32([2, 1, 7, 0x80000000]), VCC=vcc)
    assert words(e["D0"]).tolist() == [3, 0, 12, 0]
    assert lanes(e["VCC"]) == [False, True, False, True]
    e = run(VOP2Op.V_ADDC_CO_U32_E32, S0=u32([1, 0xFFFFFFFF, 5, 0x80000000]), S1=u32([2, 0, 7, 0x80000000]),
            VCC=T(np.array([[0b1010]], np.uint64), "u", 64))
    assert words(e["D0"]).tolist() == [3, 0, 12, 1]
    assert lanes(e["VCC"]) == [False, True, False, True]


def test_float_ops_and_ieee_max():
    e = run(VOP2Op.V_MUL_F32_E32, S0=f32([1.5, 2, -3, np.inf]), S1=f32([2, 0.25, 3, 0]))
    got = words(e["D0"]).view(np.float32)
    assert got[:3].tolist() == [3.0, 0.5, -9.0] and np.isnan(got[3])
    e = run(VOP2Op.V_MAX_F32_E32, S0=f32([1.5, np.nan, -3, -0.0]), S1=f32([2, 0.25, 3, 0.0]))
    got = words(e["D0"]).view(np.float32)
    assert got.tolist() == [2.0, 0.25, 3.0, 0.0] and not np.signbit(got[3])  # max(-0, +0) is +0


def test_rdna3_lambda_definitions():
    # RDNA3's V_MAX_F32 defines GT_NEG_ZERO = lambda(a, b) (...) and calls it: inlined as a macro
    from tinygrad.runtime.autogen.amd.rdna3.enum import VOP2Op as RDNA3VOP2
    from tinygrad.runtime.autogen.amd.rdna3.str_pcode import PCODE as RDNA3
    op = RDNA3VOP2.V_MAX_F32_E32
    assert "lambda" in RDNA3[op]
    fn = P.compile_pcode(op.name, RDNA3[op], True)
    e = fn({"S0": f32([1.5, np.nan, -3, -0.0]), "S1": f32([2, 0.25, 3, 0.0]), "D0": u32([0] * LANES),
            "WAVE_MODE_IEEE": T(np.uint64(1), "u", 1), "laneId": T(np.arange(LANES, dtype=np.uint64)[None], "u", 32)})
    got = words(e["D0"]).view(np.float32)
    assert got.tolist() == [2.0, 0.25, 3.0, 0.0] and not np.signbit(got[3])


def test_class_and_bit_scans():
    e = run(VOP3Op.V_CMP_CLASS_F32_E64, S0=f32([1.5, np.nan, -np.inf, -0.0]), S1=u32([1 << 8, 2, 1 << 2, 1 << 5]),
            D0=u32([0] * LANES, 64))
    assert lanes(e["D0"]) == [True, True, True, True]
    e = run(VOP3Op.V_CMP_CLASS_F32_E64, S0=f32([1.5, np.nan, -np.inf, -0.0]), S1=u32([1 << 3, 1, 1 << 9, 1 << 6]),
            D0=u32([0] * LANES, 64))
    assert lanes(e["D0"]) == [False, False, False, False]
    e = run(VOP1Op.V_FFBH_U32_E32, S0=u32([1, 0x80000000, 0, 0x00010000]))
    assert words(e["D0"]).view(np.int32).tolist() == [31, 0, -1, 15]


def test_bitfields():
    e = run(VOP3Op.V_BFE_U32_E64, S0=u32([0xABCD] * 4), S1=u32([4, 8, 0, 12]), S2=u32([4, 4, 16, 4]))
    assert words(e["D0"]).tolist() == [0xC, 0xB, 0xABCD, 0xA]
    e = run(VOP3Op.V_ALIGNBIT_B32_E64, S0=u32([0x12345678] * 4), S1=u32([0x9ABCDEF0] * 4), S2=u32([0, 4, 8, 16]))
    assert words(e["D0"]).tolist() == [0x9ABCDEF0, 0x89ABCDEF, 0x789ABCDE, 0x56789ABC]
    e = run(VOP3Op.V_LSHLREV_B64, S0=u32([1, 32, 63, 4]), S1=u32([3, 1, 1, 0xF0000000], 64), D0=u32([0] * 4, 64))
    assert e["D0"].bits().ravel().tolist() == [6, 1 << 32, 1 << 63, 0xF00000000]


def test_scalar_ops_and_branches():
    e = run(SOP2Op.S_ADD_U32, vector=False, S0=scalar([0xFFFFFFFF, 3]), S1=scalar([1, 4]), SCC=scalar([0, 0], 1),
            D0=scalar([0, 0]))
    assert e["D0"].a.tolist() == [0, 7] and e["SCC"].a.tolist() == [1, 0]
    e = run(SOP1Op.S_AND_SAVEEXEC_B64, vector=False, S0=scalar([0xF0F0], 64), EXEC=scalar([0xFF], 64),
            SCC=scalar([0], 1), D0=scalar([0], 64))
    assert (int(e["D0"].a[0]), int(e["EXEC"].a[0]), int(e["SCC"].a[0])) == (0xFF, 0xF0, 1)
    e = run(SOPPOp.S_CBRANCH_SCC1, vector=False, SCC=scalar([1, 0], 1), PC=scalar([100, 100], 64),
            SIMM16=scalar([0xFFFE, 0xFFFE], 16))
    assert e["PC"].a.tolist() == [96, 104]  # taken: PC + 4 + 4 * (-2); not taken: PC + 4


def test_conversions_and_rounding():
    e = run(VOP1Op.V_CVT_F16_F32_E32, S0=f32([1.5, 65504, 1e6, 3.140625]))
    assert (words(e["D0"]) & 0xFFFF).tolist() == [0x3E00, 0x7BFF, 0x7C00, 0x4248]
    e = run(VOP1Op.V_RNDNE_F32_E32, S0=f32([0.5, 1.5, 2.5, -2.5]))
    assert words(e["D0"]).view(np.float32).tolist() == [0.0, 2.0, 2.0, -2.0]


def test_division_helpers():
    e = run(VOP3Op.V_DIV_FIXUP_F32_E64, S0=f32([0.5, 1, 2, 3]), S1=f32([2, 0, 1, np.inf]), S2=f32([1, 1, 2, np.inf]))
    got = words(e["D0"]).view(np.float32)
    assert got[:3].tolist() == [0.5, np.inf, 2.0] and np.isnan(got[3])
    e = run(VOP3SDOp.V_DIV_SCALE_F32, S0=f32([2, 2, 2, 2]), S1=f32([2, 1e-40, 3, 4]), S2=f32([1, 1, 2, 3]),
            VCC=T(np.zeros((1, 1), np.uint64), "u", 64))
    got = words(e["D0"]).view(np.float32)
    assert got.tolist() == [2.0] * 4          # the operand passes (S0 != S1: no scaling in any lane)
    assert lanes(e["VCC"]) == [False, True, False, False]  # but lane 1's quotient would overflow: flagged


def test_lane_count():
    e = run(VOP3Op.V_MBCNT_LO_U32_B32, S0=u32([0xFFFFFFFF] * 4), S1=u32([10] * 4))
    assert words(e["D0"]).tolist() == [10, 11, 12, 13]


def test_untranslatable_is_refused():
    with pytest.raises(P.Untranslatable):
        P.compile_pcode("V_READLANE_B32", PCODE[VOP3Op.V_READLANE_B32], True)
