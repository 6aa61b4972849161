"""RDNA4 (gfx1201) instructions of the emulated AMD platform that RDNA3 does not have, one at a
time (backends/rocm/amdemu/rdna4.py): SMEM's 24-bit signed offset and sub-dword loads, the
96-bit VGLOBAL encoding, the split barrier, the split wait counters, workgroup ids in TTMP
registers. The instruction words are llvm-mc-19's (`-mcpu=gfx1201 -show-encoding`) for the
assembly in each comment. The whole kernels run in the entry-point tour
(TENSORLITE_AMDEMU=gfx1201). Nothing here runs on, or says anything about, AMD hardware.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

pytestmark = pytest.mark.amdemu
pytest.importorskip("tinygrad.renderer.amd", reason="the emulated AMD platform needs tinygrad==0.14.0 "
                                                    "(its AMD instruction tables): pip install tinygrad==0.14.0")

from tensorlite.backends.rocm.amdemu import decode as D, executor as X, rdna4  # noqa: E402
from tensorlite.backends.rocm.amdemu.memory import HostMemory  # noqa: E402

ARCH, LANES = "gfx1201", 32


def prepared(hexbytes: str, waves: int = 1):
    """(instruction, wave state) for one gfx1201 instruction, prepared by rdna4.prepare."""
    code = bytes.fromhex(hexbytes)
    inst = D.decode(code, 0, ARCH)
    assert inst.size() == len(code)
    ins = X.Instr(inst, 0, inst.size())
    ex = SimpleNamespace(family="rdna4", arch=ARCH, lanes=LANES, kernel_name="test", mode_register=0)
    assert rdna4.prepare(ins, ex), f"rdna4.prepare left {D.mnemonic(inst)} to the executor"
    memory = HostMemory()
    st = X.WaveState(None, None, waves, LANES, 16, 1, 1, 64, memory, ARCH)
    st.write_mask(slice(None), 126, np.full(waves, 0xFFFFFFFF, np.uint64))
    return ins, st


def buffer(st, values):
    arr = np.asarray(values, np.uint8)
    addr = st.memory.alloc(len(arr))
    st.memory.view(addr, len(arr))[:] = arr
    return addr


def set_s64(st, reg, value):
    st.write_s64(slice(None), reg, np.full(st.W, value, np.uint64))


def test_smem_signed_24_bit_offset():
    # s_load_b32 s2, s[0:1], -0x8: RDNA3's 21-bit field would read this as +0x1ffff8 bytes
    ins, st = prepared("800000f4f8fffff8")
    data = np.arange(32, dtype=np.uint8)
    set_s64(st, 0, buffer(st, data) + 16)
    ins.run(st, slice(None))
    assert st.sgpr[0, 2] == int(data[8:12].view(np.uint32)[0])


def test_smem_sub_dword_loads():
    raw = np.array([0x00, 0x7F, 0xFE, 0xFF, 0x00, 0x00, 0x00, 0x00], np.uint8)
    # s_load_i16 s3, s[0:1], 0x2: 0xfffe sign extended
    ins, st = prepared("c04001f4020000f8")
    set_s64(st, 0, buffer(st, raw))
    ins.run(st, slice(None))
    assert st.sgpr[0, 3] == 0xFFFFFFFE
    # s_load_u8 s4, s[0:1], s5 offset:0x1: byte 1 + s5 = byte 3, zero extended (no dword alignment)
    ins, st = prepared("002101f40100000a")
    set_s64(st, 0, buffer(st, raw))
    st.sgpr[0, 5] = 2
    ins.run(st, slice(None))
    assert st.sgpr[0, 4] == 0xFF


def test_vglobal_addressing():
    # global_load_b32 v1, v0, s[0:1] offset:-4: SGPR base + VGPR offset + 24-bit signed offset
    ins, st = prepared("000005ee0100000000fcffff")
    words = np.arange(100, 100 + LANES + 1, dtype=np.uint32)
    base = buffer(st, words.view(np.uint8))
    set_s64(st, 0, base)
    st.vgpr[0, 0, :] = 4 + 4 * np.arange(LANES)
    ins.run(st, slice(None))
    np.testing.assert_array_equal(st.vgpr[0, 1, :], words[:LANES])
    # global_store_b32 v0, v1, s[0:1] offset:8: the data register is the encoding's vsrc
    ins, st2 = prepared("008006ee0000800000080000")
    out = st2.memory.alloc(4 * (LANES + 2))
    set_s64(st2, 0, out)
    st2.vgpr[0, 0, :] = 4 * np.arange(LANES)
    st2.vgpr[0, 1, :] = 7 * np.arange(LANES)
    ins.run(st2, slice(None))
    np.testing.assert_array_equal(st2.memory.view(out, 4 * (LANES + 2)).view(np.uint32)[2:], 7 * np.arange(LANES))
    # global_load_b32 v3, v[6:7], off offset:16: no SGPR base, a 64-bit VGPR address
    ins, st3 = prepared("7c0005ee0300000006100000")
    base = buffer(st3, words.view(np.uint8))
    st3.vgpr[0, 6, :] = (base - 16 + 4 * np.arange(LANES)) & 0xFFFFFFFF
    st3.vgpr[0, 7, :] = (base - 16) >> 32
    ins.run(st3, slice(None))
    np.testing.assert_array_equal(st3.vgpr[0, 3, :], words[:LANES])


def test_vglobal_atomic_returns_by_temporal_hint():
    # global_atomic_cmpswap_b32 v0, v1, v[2:3], s[0:1] th:TH_ATOMIC_RETURN: GFX12 has no GLC bit;
    # without the old value in v0 the compiler's compare-and-swap loop never ends
    ins, st = prepared("00000dee0000100101000000")
    cell = buffer(st, np.array([5, 0, 0, 0], np.uint8))
    set_s64(st, 0, cell)
    st.write_mask(slice(None), 126, np.full(1, 1, np.uint64))   # one lane
    st.vgpr[0, 1, 0], st.vgpr[0, 2, 0], st.vgpr[0, 3, 0] = 0, 9, 5  # offset, new value, compare value
    ins.run(st, slice(None))
    assert st.memory.view(cell, 4).view(np.uint32)[0] == 9 and st.vgpr[0, 0, 0] == 5
    # global_atomic_add_u32 v1, v2, s[0:1]: no return, v-registers untouched
    ins, st = prepared("00400dee0000000101000000")
    cell = buffer(st, np.array([5, 0, 0, 0], np.uint8))
    set_s64(st, 0, cell)
    st.write_mask(slice(None), 126, np.full(1, 1, np.uint64))
    st.vgpr[0, 1, 0], st.vgpr[0, 2, 0] = 0, 3
    before = st.vgpr.copy()
    ins.run(st, slice(None))
    assert st.memory.view(cell, 4).view(np.uint32)[0] == 8 and (st.vgpr == before).all()


def test_split_barrier_and_waits():
    # s_barrier_signal -1 arrives (nothing to wait for), s_barrier_wait -1 parks the wave
    signal, st = prepared("c14e80be", waves=2)
    signal.run(st, slice(None))
    assert not signal.control and not st.barrier.any()
    wait, st = prepared("ffff94bf", waves=2)
    wait.run(st, np.array([1]))
    assert wait.control and st.barrier.tolist() == [False, True] and st.pc.tolist() == [0, 4]
    # s_wait_loadcnt / kmcnt / dscnt / storecnt_dscnt / s_wait_alu: every access has completed
    for word in ("0000c0bf", "0000c7bf", "0000c6bf", "0000c9bf", "fdff88bf"):
        ins, st = prepared(word)
        before = st.sgpr.copy()
        ins.run(st, slice(None))
        assert not ins.control and (st.sgpr == before).all()


def test_named_barrier_is_refused():
    # s_barrier_signal 0 (a named barrier, not the workgroup's): refused, naming it
    code = bytes.fromhex("804e80be")
    ins = X.Instr(D.decode(code, 0, ARCH), 0, 4)
    ex = SimpleNamespace(family="rdna4", arch=ARCH, lanes=LANES, kernel_name="test", mode_register=0)
    with pytest.raises(X.UnsupportedInstruction, match="S_BARRIER_SIGNAL of barrier"):
        rdna4.prepare(ins, ex)


def test_workgroup_ids_in_ttmp():
    st = X.WaveState(None, None, 2, LANES, 8, 1, 2, 64, HostMemory(), ARCH)
    rdna4.init_registers(st, None, np.array([[3, 5, 7], [70000, 1, 2]]))
    assert st.sgpr[:, 108 + 9].tolist() == [3, 70000]                    # ttmp9: x
    assert st.sgpr[:, 108 + 7].tolist() == [5 | 7 << 16, 1 | 2 << 16]    # ttmp7: y | z << 16


def test_wave32_vcc_pair_is_scalar_data():
    # s_lshl_b64 vcc, s[18:19], 1 in wave32 (clang-19's gfx1151 attention backward): VCC_HI is an
    # ordinary SGPR there and takes the high half (writing VCC_LO alone put a stale high address
    # half into a global load); a lane mask still writes one register
    st = X.WaveState(None, None, 1, LANES, 8, 1, 1, 64, HostMemory(), ARCH)
    st.sgpr[0, 107] = 0xDEAD
    st.write_s64(slice(None), 106, np.array([0x0000562D_3A0AFF00], np.uint64))
    assert st.sgpr[0, 106] == 0x3A0AFF00 and st.sgpr[0, 107] == 0x562D
    st.write_mask(slice(None), 106, np.array([0xFFFF_FFFF_0000_0001], np.uint64))
    assert st.sgpr[0, 106] == 1 and st.sgpr[0, 107] == 0x562D
