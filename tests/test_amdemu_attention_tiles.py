"""The matrix-core attention's tiles per AMD architecture, on the emulated device that
TENSORLITE_AMDEMU names: gfx950 (CDNA4) gives a workgroup 160 KiB of LDS, the others 64 KiB
(matrix_cores_amd.h TL_MMA_LDS_KIB), and attention.hip sizes its tiles from that: at head dim 128
the forward takes 64 keys a tile where 160 KiB hold them (else 32), the backward 8 warps of 16 keys
(else 4). Each case launches what the kernels were built for (grid, block, LDS: the host's mirror
in backends/rocm/ops/attention.py) and computes what `cpu` computes, forward and backward, over
several key and query tiles with partial last ones, causal and not, GQA. Emulated, no speed here.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorlite as tl
from tensorlite import dtype as D
from tensorlite.backend import get_device
from tensorlite.nn import functional as F

from conftest import assert_close, random_array

pytestmark = pytest.mark.amdemu

KIB = 1024
# per head dim, 16-bit operands: (forward LDS, backward warps, backward LDS) of attention.hip's
# MmaFwdTile / MmaBwdTile (BM 128 query rows a forward block, rows padded by 8 elements)
TILES = {
    # 160 KiB: Q + one K and one V tile of 64 keys; 8 warps (128 keys) a backward block
    "gfx950": {64: (36 * KIB, 8, 73 * KIB), 128: (68 * KIB, 8, 157 * KIB // 2)},
    # 64 KiB: 32 keys at head dim 128; 4 warps (64 keys)
    "lds64": {64: (36 * KIB, 4, 55 * KIB), 128: (51 * KIB, 4, 113 * KIB // 2)},
}


@pytest.fixture(scope="module")
def emu():
    """The emulated device of this process (its architecture: TENSORLITE_AMDEMU)."""
    status = dict(tl.backend.available()).get("amdemu")
    if status is not True:
        pytest.skip(f"backend 'amdemu' unavailable: {status}")
    return "amdemu"


def _launches(dev, monkeypatch, rewrite=None):
    """[(kernel name, grid, block, shared_mem)] of the matrix-core attention launches on dev from
    now on; rewrite(name, shared_mem) -> the shared_mem to launch with instead."""
    seen, real = [], dev.launch

    def launch(func, grid, block, args, shared_mem=0):
        if func.name.startswith(("flash_fwd_mma", "flash_bwd_mma")):
            seen.append((func.name, grid, tuple(block), shared_mem))
            if rewrite is not None:
                shared_mem = rewrite(func.name, shared_mem)
        return real(func, grid, block, args, shared_mem=shared_mem)
    monkeypatch.setattr(dev, "launch", launch)
    return seen


def _mfma_or_skip(dev):
    from tensorlite.backends.rocm.ops import attention
    if not attention.flash_mma(dev, D.float16, 128):
        pytest.skip(f"the emulated {dev.arch} has no matrix-core attention")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype", [D.float16, D.bfloat16], ids=lambda t: t.name)
def test_attention_tiles_follow_the_lds(emu, rng, monkeypatch, dtype, d, causal):
    dev = get_device(emu)
    _mfma_or_skip(dev)
    b, hq, hk = 1, 2, 1
    L, S = (130, 130) if causal else (100, 150)  # more than one 64-key tile, partial last ones
    arrays = [random_array(rng, (b, h, t, d), dtype, -1.5, 1.5) for h, t in ((hq, L), (hk, S), (hk, S))]
    seen = _launches(dev, monkeypatch)
    results = []
    for where in ("cpu", emu):
        q, k, v = (tl.tensor(a, device=where, requires_grad=True) for a in arrays)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        proj = tl.tensor(np.linspace(-1, 1, out.numel()).reshape(out.shape), dtype=dtype, device=where)
        (out * proj).sum().backward()
        results.append([out, q.grad, k.grad, v.grad])
    for got, ref in zip(results[1], results[0]):
        assert_close(got, ref.numpy(), dtype, max(d, S), check_dtype=False)
    fwd_lds, warps, bwd_lds = TILES["gfx950" if dev.arch == "gfx950" else "lds64"][d]
    wave = dev.warp_size
    assert seen == [(f"flash_fwd_mma{d}_{dtype.short}", b * hq * -(-L // 128), (wave, 4), fwd_lds),
                    (f"flash_bwd_mma{d}_{dtype.short}", b * hk * -(-S // (16 * warps)), (wave, warps), bwd_lds)]


def test_gfx950_forward_uses_its_64_key_tile(emu, rng, monkeypatch):
    """The kernel's side of the forward tile (the host's is above): given only the LDS of the
    32-key tile (51 KiB at head dim 128), gfx950's flash_fwd_mma128 reaches past it."""
    dev = get_device(emu)
    if dev.arch != "gfx950":
        pytest.skip(f"gfx950's 160 KiB tile: the emulated architecture is {dev.arch} (TENSORLITE_AMDEMU=gfx950)")
    q, k, v = (tl.tensor(random_array(rng, (1, 1, t, 128), D.float16), device=emu) for t in (32, 100, 100))
    _launches(dev, monkeypatch, lambda name, smem: TILES["lds64"][128][0] if name.startswith("flash_fwd") else smem)
    with pytest.raises(Exception, match="LDS access .* beyond the workgroup's 52224 bytes"):
        F.scaled_dot_product_attention(q, k, v).numpy()
