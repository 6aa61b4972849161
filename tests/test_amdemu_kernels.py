"""The project's own kernels, compiled for gfx90a, gfx940 and gfx1100 by the backend's hiprtc
path, executed by the emulated AMD platform (backends/rocm/amdemu) and compared with numpy.

A first, small set of ops end to end (launch geometry, kernel arguments, scratch, cross-lane
reductions); the whole backend-swap suite runs on the emulator with TENSORLITE_AMDEMU set
(see README). "Emulated" means: executed by an interpreter of AMD's documented instruction
semantics on the host. Nothing here runs on, or says anything about, AMD hardware.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorlite as tl
from tensorlite.errors import BackendUnavailable

pytestmark = pytest.mark.amdemu


@pytest.fixture(scope="module", params=["gfx90a", "gfx940", "gfx1100"])
def emu(request):
    """One emulated device per architecture (wave64 CDNA2, wave64 CDNA3, wave32 RDNA3)."""
    from tensorlite.backends.rocm.amdemu.platform import AmdEmuPlatform
    from tensorlite.backends.rocm.device import GpuDevice
    try:
        return GpuDevice(AmdEmuPlatform(request.param), 0)
    except BackendUnavailable as e:
        pytest.skip(f"emulated {request.param} unavailable: {e}")


def _data(rng, n=300):
    return rng.uniform(-2, 2, n).astype(np.float32)


def test_elementwise(emu, rng):
    a, b = _data(rng), _data(rng)
    x, y = tl.tensor(a, device=emu), tl.tensor(b, device=emu)
    np.testing.assert_allclose((x + y).numpy(), a + b, rtol=1e-6)
    np.testing.assert_allclose((x * y - x).numpy(), a * b - a, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(x.exp().numpy(), np.exp(a), rtol=2e-6)


def test_strided_broadcast(emu, rng):
    a, b = rng.uniform(-1, 1, (6, 5)).astype(np.float32), rng.uniform(-1, 1, (5,)).astype(np.float32)
    x, y = tl.tensor(a, device=emu), tl.tensor(b, device=emu)
    np.testing.assert_allclose((x.mT + y[:, None]).numpy(), a.T + b[:, None], rtol=1e-6)


def test_sum_reduction(emu, rng):
    # gfx1100: a VOP3 compare into an SGPR writes ONE register in wave32 (writing the pair
    # clobbered the block size the compiler kept in s5: the grid-stride loop never ended)
    a = _data(rng, 1000)
    np.testing.assert_allclose(tl.tensor(a, device=emu).sum().numpy(), a.astype(np.float64).sum(), rtol=1e-5)
    m = rng.uniform(-1, 1, (7, 40)).astype(np.float32)
    np.testing.assert_allclose(tl.tensor(m, device=emu).sum(1).numpy(), m.astype(np.float64).sum(1), rtol=1e-5)


def test_scalar_broadcast_division(emu):
    # gfx1100: V_CMPX writes EXEC only (gfx9 writes VCC too); writing VCC flipped a later
    # v_cndmask in the strided index code, so 3 / [2, 4, 8] read its operands swapped
    x = tl.tensor(np.array(3.0, np.float32), device=emu)
    y = tl.tensor(np.array([2.0, 4.0, 8.0], np.float32), device=emu)
    np.testing.assert_allclose((x / y).numpy(), [1.5, 0.75, 0.375], rtol=1e-6)


def test_unknown_address_is_an_error_not_a_crash(emu):
    from tensorlite.backends.rocm.amdemu.memory import MemoryFault
    with pytest.raises(MemoryFault, match="outside every allocation"):
        emu.platform.memory.view(8, 4)


def test_f64_atomic_add(emu, rng):
    # gfx940 adds f64 with GLOBAL_ATOMIC_ADD_F64: read as ADD_X2 (an integer add) it gave nan
    x = np.zeros((2, 3))
    ids = np.array([[0, 1, 1], [2, 2, 2]])
    src = rng.uniform(-1, 1, (2, 3))
    got = tl.scatter_add(tl.tensor(x, device=emu), 1, tl.tensor(ids, device=emu), tl.tensor(src, device=emu))
    ref = x.copy()
    np.add.at(ref, (np.arange(2)[:, None], ids), src)
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-12)


def test_a_read_past_a_tensor_end_faults_naming_the_kernel(emu):
    # The platform's buffers are of the size asked (EXACT_BUFFERS), with guard bytes on both
    # sides: a kernel reading one element past a tensor's end (here a layout planted one element
    # too long) faults, where the caching allocator's 512-byte size classes let it read spare bytes
    from tensorlite.backends.rocm.amdemu.memory import MemoryFault
    from tensorlite.custom_op import storage_and_layout
    from tensorlite.layout import Layout
    storage, _ = storage_and_layout(tl.tensor(np.arange(5, dtype=np.float32), device=emu))
    assert storage.buffer.nbytes == storage.buffer.size == 20
    with pytest.raises(MemoryFault, match=r"at offset 20 of the 20-byte allocation .*past its end.*kernel uexp_f32"):
        storage.unary_impl("exp", Layout.contiguous((6,)))


def test_guard_bytes_around_every_allocation():
    # no emulated device needed: the memory alone (a read just before or past a buffer, or one
    # that runs over its end, is outside every allocation, whatever numpy placed next to it)
    from tensorlite.backends.rocm.amdemu.memory import HostMemory, MemoryFault
    mem = HostMemory()
    bases = [mem.alloc(n) for n in (10, 1, 300)]
    for base, n in zip(bases, (10, 1, 300)):
        assert mem.gather(np.array([base + n - 1], np.uint64), 1).shape == (1, 1)
        for addr, size, where in ((base + n, 1, "past its end"), (base + n - 1, 2, "past its end"),
                                  (base - 1, 1, "bytes before")):
            with pytest.raises(MemoryFault, match=where):
                mem.gather(np.array([addr], np.uint64), size)
