"""The project's own kernels, compiled for gfx90a by the backend's hiprtc path, executed by
the emulated AMD platform (backends/rocm/amdemu) and compared with numpy.

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


@pytest.fixture(scope="module")
def emu():
    from tensorlite.backends.rocm.amdemu.platform import AmdEmuPlatform
    from tensorlite.backends.rocm.device import GpuDevice
    try:
        return GpuDevice(AmdEmuPlatform("gfx90a"), 0)
    except BackendUnavailable as e:
        pytest.skip(f"emulated gfx90a unavailable: {e}")


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
    a = _data(rng, 1000)
    np.testing.assert_allclose(tl.tensor(a, device=emu).sum().numpy(), a.astype(np.float64).sum(), rtol=1e-5)


def test_unknown_address_is_an_error_not_a_crash(emu):
    from tensorlite.backends.rocm.amdemu.memory import MemoryFault
    with pytest.raises(MemoryFault, match="outside every allocation"):
        emu.platform.memory.view(8, 4)
