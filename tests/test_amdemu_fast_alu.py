"""The executor's fast forms of frequent ALU pseudocode (backends/rocm/amdemu/fastalu.py)
against the translated pseudocode they replace, instruction by instruction.

Every instruction of every kernels/*.hip code object for the architecture TENSORLITE_AMDEMU
names (default gfx90a) that takes a fast form is prepared twice, with and without the fast
forms, and both runs start from the same random registers (special float and integer
patterns among them), SCC and EXEC masks, for all waves at once and for a subset of them:
every register, SCC and the PC must come out bit for bit the same. Emulated only.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from tensorlite.backends.rocm import compiler, get_platform
from tensorlite.backends.rocm.amdemu import executor as X
from tensorlite.backends.rocm.amdemu import fastalu
from tensorlite.backends.rocm.amdemu.decode import decode, mnemonic
from tensorlite.backends.rocm.amdemu.memory import HostMemory
from tensorlite.errors import BackendError, BackendUnavailable

pytestmark = pytest.mark.amdemu
ARCH = os.environ.get("TENSORLITE_AMDEMU", "").strip() or "gfx90a"
SPECIAL = np.array([0, 1, 2, 31, 32, 63, 64, 0xFFFFFFFF, 0x80000000, 0x7FFFFFFF, 0x3F800000, 0xBF800000,
                    0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0x00000001, 0x807FFFFF, 0x00800000],
                   np.uint32)


def _programs():
    plat = get_platform("amdemu")
    plat.arch = ARCH
    try:
        plat.init()
    except BackendUnavailable as e:
        pytest.skip(f"the emulated platform is unavailable here: {e}")
    return [(source, compiler.compile_source(plat, source, ARCH)) for source in compiler.list_kernel_sources()]


def _instructions(prog, rng, seen, kernels=24, length=400):
    """(pc, offset) of instructions of the code object whose bytes no earlier one had: a
    linear sweep of `length` from the entry of each of `kernels` kernels picked at random."""
    names = sorted(prog.kernels)
    for name in rng.choice(names, min(kernels, len(names)), replace=False):
        offset = prog.kernels[name].descriptor.entry - prog.base
        for _ in range(length):
            try:
                inst = decode(prog.image, offset, prog.arch)
            except BackendError:
                break
            key = prog.image[offset:offset + inst.size()]
            if key not in seen:
                seen.add(key)
                yield prog.bias + prog.base + offset, offset
            offset += inst.size()
            if inst.op.name == "S_CODE_END" if hasattr(inst, "op") else False:
                break


def _state(prog, kernel, rng, nwaves=3):
    ex = X.Dispatch(prog, kernel)
    st = X.WaveState(prog, kernel, nwaves, ex.lanes, 256, 256 if prog.family == "cdna" else 1, 1, 64,
                     prog.memory, prog.arch)
    for a in (st.sgpr, st.vgpr):
        flat = a.reshape(-1)
        flat[:] = rng.integers(0, 1 << 32, flat.size, dtype=np.uint64).astype(np.uint32)
        pick = rng.random(flat.size) < 0.4
        flat[pick] = rng.choice(SPECIAL, int(pick.sum()))
    st.sgpr[:, 124:126] = rng.integers(0, 64, (nwaves, 2))  # M0 / NULL: small, as kernels keep them
    st.sgpr[0, 126:128] = 0xFFFFFFFF                       # one wave with every lane on
    st.sgpr[1, 126:128] = 0
    st.scc[:] = rng.integers(0, 2, nwaves)
    return ex, st


def _copy(st):
    return [a.copy() for a in (st.sgpr, st.vgpr, st.scc, st.pc)]


@pytest.fixture(scope="module")
def programs():
    memory = HostMemory()
    return [X.Program(image, memory, ARCH) for _source, image in _programs()]


def test_fast_forms_agree_with_the_pseudocode(programs, monkeypatch):
    rng = np.random.default_rng(7)
    checked, seen = {}, set()
    for prog in programs:
        kernel = next(iter(prog.kernels.values()))
        for pc, offset in _instructions(prog, rng, seen):
            ex, st = _state(prog, kernel, rng)
            try:
                fast = prog.decode_and_prepare(pc, offset, ex)
            except X.UnsupportedInstruction:
                continue
            if fast.run.__module__ != fastalu.__name__ or checked.get(fast.name, 0) >= 60:
                continue
            with monkeypatch.context() as m:
                m.setattr(fastalu, "prepare", lambda *a: None)
                slow = prog.decode_and_prepare(pc, offset, ex)
            for w in (slice(None), np.array([0, 2])):
                results = []
                for ins in (slow, fast):
                    ex, st = _state(prog, kernel, np.random.default_rng(len(checked)))
                    st.pc[:] = pc
                    st.group = w
                    with np.errstate(all="ignore"):
                        ins.run(st, w)
                    results.append(_copy(st))
                for name, a, b in zip(("SGPRs", "VGPRs", "SCC", "PC"), *results):
                    assert np.array_equal(a, b), (mnemonic(fast.inst),
                                                   name, np.argwhere(a != b)[:4])
            checked[fast.name] = checked.get(fast.name, 0) + 1
    assert len(checked) >= 20, sorted(checked)  # the forms cover the frequent opcodes
