"""CDNA's matrix product on 16-bit operands, V_MFMA_F32_16X16X16_{F16,BF16} (gfx942) and
CDNA4's V_MFMA_F32_16X16X32_{F16,BF16} (gfx950), in the emulated AMD platform
(backends/rocm/amdemu/executor.py), against numpy. The registers are filled and read here from
the hardware's layouts, written out independently of the executor's tables: 16x16xK, P = K / 4
16-bit values a lane (K 16: 4 in two VGPRs; K 32: 8 in four, AMD's CDNA4 ISA guide), A[i][k]
in lane i + 16 (k / P), value k % P (VGPR (k % P) / 2, half k % 2); B[k][j] in lane
j + 16 (k / P), value k % P; C/D[i][j] in lane j + 16 (i / 4), VGPR i % 4. (One product
cannot tell the order of K within a lane's values: a permutation of K shared by A and B leaves
A B unchanged. What it pins is which lanes and VGPRs hold a row or column, all K of them, and
the accumulator's places; and that A and B must share the order.) The gfx942 words are
llvm-mc-19's (`-mcpu=gfx942 -show-encoding`); the gfx950 ones (LLVM 19 knows no gfx950) come
from a code object triton's LLVM generated, as LLVM 22's disassembler (rocm-llvm-python's
librocmllvm) prints them in each comment. Nothing here runs on, or says anything about, AMD
hardware.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

pytestmark = pytest.mark.amdemu
pytest.importorskip("tinygrad.renderer.amd", reason="the emulated AMD platform needs tinygrad==0.14.0 "
                                                    "(its AMD instruction tables): pip install tinygrad==0.14.0")

from tensorlite.backends.rocm.amdemu import decode as D, executor as X  # noqa: E402
from tensorlite.backends.rocm.amdemu.memory import HostMemory  # noqa: E402

LANES = 64
# (arch, K, bf16) -> (instruction word, first VGPR of A, of B, of C/D)
WORDS = {
    ("gfx942", 16, False): ("0000cdd3040d0204", 4, 6, 0),   # v_mfma_f32_16x16x16_f16 v[0:3], v[4:5], v[6:7], v[0:3]
    ("gfx942", 16, True): ("0000e1d3040d0204", 4, 6, 0),    # v_mfma_f32_16x16x16_bf16 (the same operands)
    ("gfx950", 32, False): ("0000d4d306150204", 6, 10, 0),  # v_mfma_f32_16x16x32_f16 v[0:3], v[6:9], v[10:13], v[0:3]
    ("gfx950", 32, True): ("0000b5d306150204", 6, 10, 0),   # v_mfma_f32_16x16x32_bf16 (the same operands)
}
NAMES = {16: "v_mfma_f32_16x16x16", 32: "v_mfma_f32_16x16x32"}


def prepared(hexbytes: str, arch: str, waves: int = 2):
    """(instruction, wave state) for one instruction of `arch`, decoded and prepared as a
    Program does (decode_and_prepare, on an image of just this instruction)."""
    code = bytes.fromhex(hexbytes)
    ex = SimpleNamespace(family="cdna", arch=arch, lanes=LANES, kernel_name="test", mode_register=0)
    image = SimpleNamespace(image=code, arch=arch, base=0, code=SimpleNamespace(function_at=lambda vaddr: None))
    ins = X.Program.decode_and_prepare(image, 0, 0, ex)
    assert ins.size == len(code)
    st = X.WaveState(None, None, waves, LANES, 16, 4, 1, 64, HostMemory(), arch)
    st.write_mask(slice(None), 126, np.full(waves, 0xFFFFFFFFFFFFFFFF, np.uint64))
    return ins, st


def _put16(st, wave, reg, half, lane, bits):
    word = int(st.vgpr[wave, reg, lane])
    st.vgpr[wave, reg, lane] = (word & ~(0xFFFF << 16 * half)) | (int(bits) << 16 * half)


def put_source(st, wave, first, m, k_dim, b_operand):
    """16-bit matrix m as the A operand (m[i][k], 16 x K) or the B operand (m[k][j], K x 16)
    from VGPR `first`, where the hardware reads it."""
    per = k_dim // 4
    for outer in range(16):          # A's row i, B's column j
        for k in range(k_dim):
            bits = m[k][outer] if b_operand else m[outer][k]
            _put16(st, wave, first + (k % per) // 2, k % 2, outer + 16 * (k // per), bits)


def put_acc(st, wave, first, c):
    for i in range(16):
        for j in range(16):
            st.vgpr[wave, first + i % 4, j + 16 * (i // 4)] = np.float32(c[i, j]).view(np.uint32)


def get_acc(st, wave, first):
    return np.array([[st.vgpr[wave, first + i % 4, j + 16 * (i // 4)].view(np.float32) for j in range(16)]
                     for i in range(16)], np.float32)


def sixteen_bit(rng, shape, bf16):
    """(bit patterns, their values as float64) of a random matrix."""
    x = rng.standard_normal(shape).astype(np.float32)
    if bf16:
        bits = (x.view(np.uint32) >> 16).astype(np.uint16)
        return bits, (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    h = x.astype(np.float16)
    return h.view(np.uint16), h.astype(np.float64)


@pytest.mark.parametrize("arch,k_dim,bf16", sorted(WORDS), ids=[f"{a}-k{k}-{'bf16' if b else 'f16'}"
                                                                  for a, k, b in sorted(WORDS)])
def test_mfma_is_a_b_plus_c_in_the_hardware_layout(arch, k_dim, bf16, rng):
    """Two waves, each its own A (16 x K), B (K x 16), C: D = A B + C, read from where the
    hardware puts D."""
    word, a0, b0, c0 = WORDS[arch, k_dim, bf16]
    ins, st = prepared(word, arch)
    assert D.mnemonic(D.decode(bytes.fromhex(word), 0, arch)) == f"{NAMES[k_dim]}_{'bf16' if bf16 else 'f16'}"
    want = []
    for wave in range(2):
        (a_bits, a), (b_bits, b) = sixteen_bit(rng, (16, k_dim), bf16), sixteen_bit(rng, (k_dim, 16), bf16)
        c = rng.standard_normal((16, 16)).astype(np.float32)
        put_source(st, wave, a0, a_bits, k_dim, False)
        put_source(st, wave, b0, b_bits, k_dim, True)
        put_acc(st, wave, c0, c)
        want.append(a @ b + c)
    ins.run(st, slice(None))
    for wave in range(2):
        np.testing.assert_allclose(get_acc(st, wave, c0), want[wave], rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("bf16", [False, True], ids=["f16", "bf16"])
def test_k32_reads_all_four_vgprs_in_both_operands(bf16, rng):
    """The K-32 product is not two K-16 ones of the same registers: a B whose second K half
    (the lanes' VGPRs 2-3) is placed as the first gives another product, as the hardware's would
    (what a kernel that concatenated B's halves the other way round than A's would compute)."""
    word, a0, b0, c0 = WORDS["gfx950", 32, bf16]
    ins, st = prepared(word, "gfx950", waves=1)
    (a_bits, a), (b_bits, b) = sixteen_bit(rng, (16, 32), bf16), sixteen_bit(rng, (32, 16), bf16)
    put_source(st, 0, a0, a_bits, 32, False)
    # B's rows k and k +- 4 (values 0-3 and 4-7 of a lane) swapped
    swap = np.array([k + 4 if k % 8 < 4 else k - 4 for k in range(32)])
    put_source(st, 0, b0, b_bits[swap], 32, True)
    ins.run(st, slice(None))
    got = get_acc(st, 0, c0)
    np.testing.assert_allclose(got, a @ b[swap], rtol=1e-6, atol=1e-5)
    assert np.abs(got - a @ b).max() > 1.0
