"""RDNA's wave matrix product, V_WMMA_F32_16X16X16_{F16,BF16}, in the emulated AMD platform
(backends/rocm/amdemu/wmma.py), per target layout: gfx1100 and gfx1151 (RDNA3 / RDNA3.5: A and B
rows in both half-waves) and gfx1201 (RDNA4: the half-waves split K), against numpy. The
registers are filled and read here from the formulas of AMD's matrix instruction calculator
(`matrix_calculator.py -a rdna3|rdna4 -i v_wmma_f32_16x16x16_f16 -w 32 --register-layout`),
written out independently of the executor's tables. (One product cannot tell the order of K
within a lane's slots: a permutation of K shared by A and B leaves A B unchanged. What it pins is
which lanes hold a row or column, the half-wave copies or split, and the accumulator's places.)
The instruction words are llvm-mc-19's
(`-mcpu=<arch> -show-encoding`) for the assembly in each comment. Then the attention code
objects: their matrix-core kernels hold WMMA (llvm-objdump-19). The attention kernels
themselves run against cpu in tests/test_nn_attention.py. Nothing here runs on, or says
anything about, AMD hardware.
"""
from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest
from disasm_util import opcode_counts

pytestmark = pytest.mark.amdemu
pytest.importorskip("tinygrad.renderer.amd", reason="the emulated AMD platform needs tinygrad==0.14.0 "
                                                    "(its AMD instruction tables): pip install tinygrad==0.14.0")

from tensorlite.backends.rocm.amdemu import decode as D, executor as X, wmma  # noqa: E402
from tensorlite.backends.rocm.amdemu.memory import HostMemory  # noqa: E402

LANES = 32
# llvm-mc-19 encodings (the same words on gfx11 and gfx12, where A and B take 8 and 4 VGPRs):
F16 = "104040cc0011421c"       # v_wmma_f32_16x16x16_f16 v[16:23], v[0:7 | 0:3], v[8:15 | 8:11], v[16:23]
BF16 = "104041cc0011421c"      # v_wmma_f32_16x16x16_bf16 (the same operands)
C_ONE = "104040cc0011ca1b"     # ... , 1.0 (C an inline constant)
NEG_A = "104040cc0011423c"     # ... , v[16:23] neg_lo:[1,0,0]
F16_OUT = "104042cc0011421c"   # v_wmma_f16_16x16x16_f16 (16-bit D)
A0, B0, C0 = 0, 8, 16          # first VGPR of A, B, C/D above
TARGETS = {"gfx1100": "rdna3", "gfx1151": "rdna3", "gfx1201": "rdna4"}


def prepared(hexbytes: str, arch: str, waves: int = 2):
    """(instruction, wave state) for one instruction of `arch`, prepared by the executor."""
    code = bytes.fromhex(hexbytes)
    inst = D.decode(code, 0, arch)
    ins = X.Instr(inst, 0, inst.size())
    ex = SimpleNamespace(family=TARGETS[arch], arch=arch, lanes=LANES, kernel_name="test", mode_register=0)
    # the fields as the executor reads them from the word: operand encodings (VGPRs from 256), vdst's VGPR
    fields = {f: getattr(inst, f) for f in wmma.FIELDS}
    fields = {f: v - 256 if f == "vdst" else v for f, v in
              ((f, v if isinstance(v, int) else v.offset) for f, v in fields.items())}
    assert wmma.prepare(ins, ex, fields), D.mnemonic(inst)
    st = X.WaveState(None, None, waves, LANES, 24, 1, 1, 64, HostMemory(), arch)
    st.write_mask(slice(None), 126, np.full(waves, 0xFFFFFFFF, np.uint64))
    return ins, st


def _put16(st, wave, reg, half, lane, bits):
    word = int(st.vgpr[wave, reg, lane])
    st.vgpr[wave, reg, lane] = (word & ~(0xFFFF << 16 * half)) | (int(bits) << 16 * half)


def put_source(st, wave, first, m, family, b_operand):
    """16-bit matrix m (16 x 16 bit patterns) as the A operand (m[i][k]) or the B operand
    (m[k][j]) from VGPR `first`, where the calculator places it."""
    for outer in range(16):          # A's row i, B's column j
        for k in range(16):
            bits = m[k][outer] if b_operand else m[outer][k]
            if family == "rdna3":    # lanes outer and outer + 16, VGPR k // 2, half k % 2
                for lane in (outer, outer + 16):
                    _put16(st, wave, first + k // 2, k % 2, lane, bits)
            else:                    # lane outer + 16 ((k / 4) % 2), VGPR 2 (k / 8) + (k / 2) % 2
                _put16(st, wave, first + 2 * (k // 8) + (k // 2) % 2, k % 2, outer + 16 * ((k // 4) % 2), bits)


def c_place(family, i, j):
    """(VGPR offset, lane) of C/D[i][j]."""
    return (i // 2, j + 16 * (i % 2)) if family == "rdna3" else (i % 8, j + 16 * (i // 8))


def put_acc(st, wave, first, c, family):
    for i in range(16):
        for j in range(16):
            r, lane = c_place(family, i, j)
            st.vgpr[wave, first + r, lane] = np.float32(c[i, j]).view(np.uint32)


def get_acc(st, wave, first, family):
    d = np.zeros((16, 16), np.float32)
    for i in range(16):
        for j in range(16):
            r, lane = c_place(family, i, j)
            d[i, j] = st.vgpr[wave, first + r, lane].view(np.float32)
    return d


def sixteen_bit(rng, bf16):
    """(bit patterns, their values as float64) of a random 16 x 16 matrix."""
    x = rng.standard_normal((16, 16)).astype(np.float32)
    if bf16:
        bits = (x.view(np.uint32) >> 16).astype(np.uint16)
        return bits, (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    h = x.astype(np.float16)
    return h.view(np.uint16), h.astype(np.float64)


@pytest.mark.parametrize("arch", sorted(TARGETS))
@pytest.mark.parametrize("bf16", [False, True], ids=["f16", "bf16"])
def test_wmma_is_a_b_plus_c_in_the_targets_layout(arch, bf16, rng):
    """Two waves, each its own A, B, C: D = A B + C, read from where the calculator puts D."""
    family = TARGETS[arch]
    ins, st = prepared(BF16 if bf16 else F16, arch)
    want = []
    for wave in range(2):
        (a_bits, a), (b_bits, b) = sixteen_bit(rng, bf16), sixteen_bit(rng, bf16)
        c = rng.standard_normal((16, 16)).astype(np.float32)
        put_source(st, wave, A0, a_bits, family, False)
        put_source(st, wave, B0, b_bits, family, True)
        put_acc(st, wave, C0, c, family)
        want.append(a @ b + c)
    ins.run(st, slice(None))
    for wave in range(2):
        np.testing.assert_allclose(get_acc(st, wave, C0, family), want[wave], rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("arch", sorted(TARGETS))
def test_wmma_inline_constant_accumulator(arch, rng):
    family = TARGETS[arch]
    ins, st = prepared(C_ONE, arch, waves=1)
    (a_bits, a), (b_bits, b) = sixteen_bit(rng, False), sixteen_bit(rng, False)
    put_source(st, 0, A0, a_bits, family, False)
    put_source(st, 0, B0, b_bits, family, True)
    ins.run(st, slice(None))
    np.testing.assert_allclose(get_acc(st, 0, C0, family), a @ b + 1.0, rtol=1e-6, atol=1e-5)


def test_gfx11_operands_must_be_copied_in_both_half_waves(rng):
    """RDNA3 reads A and B rows from lanes 0-15 and 16-31 alike: a kernel that fills only one
    half-wave (RDNA4's layout on RDNA3) is a bug the executor names."""
    ins, st = prepared(F16, "gfx1100", waves=1)
    bits, _ = sixteen_bit(rng, False)
    put_source(st, 0, A0, bits, "rdna3", False)
    put_source(st, 0, B0, bits, "rdna3", True)
    st.vgpr[0, A0 + 3, 20] ^= 1
    with pytest.raises(X.KernelFault, match="lanes 16-31"):
        ins.run(st, slice(None))


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201"])
def test_wmma_needs_every_lane_on(arch):
    ins, st = prepared(F16, arch, waves=1)
    st.write_mask(slice(None), 126, np.full(1, 0xFFFF, np.uint64))
    with pytest.raises(X.KernelFault, match="EXEC"):
        ins.run(st, slice(None))


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201"])
@pytest.mark.parametrize("word,what", [(NEG_A, "modifiers"), (F16_OUT, "V_WMMA_F16_16X16X16_F16")])
def test_wmma_forms_not_implemented_are_refused_by_name(arch, word, what):
    with pytest.raises(X.UnsupportedInstruction, match=what):
        prepared(word, arch)


# ---- the attention code objects ---------------------------------------------------------------

@pytest.mark.parametrize("target", ["gfx1100", "gfx1151", "gfx1201"])
def test_attention_tiles_are_wmma_on_rdna(target, tmp_path):
    """The f16/bf16 matrix-core attention kernels (flash_*_mma*) hold WMMA on every RDNA target
    (hiprtc 5.4.2 for gfx1100, clang-19 for gfx1151/gfx1201), no other kernel does, and the f32
    ones are empty (WMMA takes no f32 operands: the storage takes flash_fwd64_f32 there)."""
    from tensorlite.backends.rocm import compiler
    from tensorlite.backends.rocm.amdemu.platform import AmdEmuPlatform
    from tensorlite.errors import BackendUnavailable
    plat = AmdEmuPlatform(target)
    try:
        image = compiler.compile_source(plat.compiler, "attention.hip", plat.arch)
    except BackendUnavailable as e:
        pytest.skip(str(e))
    counts = opcode_counts(image, plat.arch, tmp_path, "v_wmma_")
    mma = {k for k in counts if re.fullmatch(r"flash_(fwd|bwd)_mma(64|128)_(f16|bf16)", k)}
    assert len(mma) == 8 and all(counts[k][0] for k in mma), counts
    assert not {k for k, (n, _) in counts.items() if n and k not in mma}
    assert counts["flash_fwd_mma64_f32"] == counts["flash_bwd_mma64_f32"] == [0, 1]  # s_endpgm alone
