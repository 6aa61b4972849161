"""scaled_dot_product_attention forward and backward on every device against float64
composite autograd on cpu (F.sdpa_slow), and the TENSORLITE_SDPA switch.

On GPUs the default ('auto') path for f32/f16/bf16 and head dims <= 128 is the flash
kernel pair (kernels/attention.hip); 'gemm' is the scores-in-memory path with the
composite backward. On cpu, sdpa_backward is the numpy reference the GPU backward is held
to (computed in the compute dtype: float32 for f32/f16/bf16, float64 for f64); here it is
itself held to the float64 composite autograd.
"""
import numpy as np
import pytest

import tensorlite as tl
import tensorlite.nn.functional as F
from conftest import random_array, shares_storage
from tensorlite.layout import Layout
from tensorlite.backend import get_device, sdpa_layout
from tensorlite.custom_op import storage_and_layout

HALF_AND_F32 = [tl.float32, tl.float16, tl.bfloat16]
# max |got - ref| / max |ref| per dtype (outputs round to the dtype; sums run in f32)
REL_TOL = {"float32": 2e-5, "float16": 6e-3, "bfloat16": 4e-2, "float64": 1e-10}

# name -> (b, hq, hk, L, S, is_causal, mask kind, transposed (b, t, h, d) views, scale)
CASES = {
    "plain_multi_tile": (1, 2, 2, 70, 75, False, None, False, None),
    "causal_gqa": (2, 4, 2, 67, 67, True, None, False, None),
    "causal_L_gt_S": (1, 2, 1, 40, 23, True, None, False, 0.3),
    "bottom_right_gqa": (1, 4, 1, 19, 83, "bottom_right", None, False, None),
    "bool_mask_dead_rows": (2, 2, 1, 21, 37, False, "bool", False, None),
    "additive_causal": (1, 2, 2, 33, 33, True, "additive", False, 0.2),
    "transposed_views": (2, 4, 2, 17, 29, "bottom_right", "bool", True, None),
    # every 16x16 tile full, no mask: the matrix-core kernels' unmasked fast path alone
    "full_tiles": (2, 2, 1, 128, 128, False, None, False, 0.125),
}


def _leaf(rng, b, h, t, d, dtype, device, transposed):
    """(leaf tensor, the (b, h, t, d) operand built from it, its values as float64 (b, h, t, d))."""
    shape = (b, t, h, d) if transposed else (b, h, t, d)
    a = random_array(rng, shape, dtype)
    leaf = tl.tensor(a, dtype=dtype, device=device, requires_grad=True)
    a64 = a.astype(np.float64)
    if transposed:
        return leaf, leaf.transpose(1, 2), a64.transpose(0, 2, 1, 3)
    return leaf, leaf, a64


def _mask(rng, kind, b, hq, L, S, dtype, device):
    """(mask for `device`, the same for the float64 reference) or (None, None)."""
    if kind is None:
        return None, None
    if kind == "bool":
        keep = rng.random((b, 1, L, S)) < 0.6
        keep[:, :, 1] = False  # a row with no key: zeros, and no gradient
        return tl.tensor(keep, device=device), tl.tensor(keep)
    add = random_array(rng, (L, S), dtype)
    add[2, :] = -np.inf  # an additive mask can drop a whole row too
    return tl.tensor(add, dtype=dtype, device=device), tl.tensor(add.astype(np.float64))


def _rel_err(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert got.shape == ref.shape
    assert np.isfinite(got).all(), "non-finite values"
    return np.abs(got - ref).max(initial=0) / max(np.abs(ref).max(initial=0), 1e-30)


def _run(case, dtype, d, dv, device, rng):
    """Forward + backward of F.scaled_dot_product_attention on `device` and of the float64
    composite on cpu; returns [(what, got, ref)]."""
    b, hq, hk, L, S, causal, mask_kind, transposed, scale = case
    (ql, q, q64), (kl, k, k64), (vl, v, v64) = (_leaf(rng, b, h, t, e, dtype, device, transposed)
                                                for h, t, e in ((hq, L, d), (hk, S, d), (hk, S, dv)))
    mask, mask64 = _mask(rng, mask_kind, b, hq, L, S, dtype, device)
    w = rng.standard_normal((b, hq, L, dv))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale)
    (out * tl.tensor(w, dtype=dtype, device=device)).sum().backward()

    refs = [tl.tensor(a, requires_grad=True) for a in (q64, k64, v64)]
    ref = F.sdpa_slow(*refs, attn_mask=mask64, is_causal=causal, scale=scale)
    (ref * tl.tensor(w)).sum().backward()

    def grad_of(leaf):
        g = leaf.grad.numpy().astype(np.float64)
        return g.transpose(0, 2, 1, 3) if transposed else g
    return [("out", out.numpy(), ref.numpy())] + [
        (f"d{name}", grad_of(leaf), r.grad.numpy()) for name, leaf, r in zip("qkv", (ql, kl, vl), refs)]


def _check(results, dtype):
    for what, got, ref in results:
        err = _rel_err(got, ref)
        assert err < REL_TOL[dtype.name], f"{what}: relative error {err:.2e} ({dtype.name})"


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype", HALF_AND_F32, ids=lambda t: t.name)
def test_sdpa_forward_backward_match_float64_composite(device, rng, dtype, d, name):
    _check(_run(CASES[name], dtype, d, d, device, rng), dtype)


@pytest.mark.parametrize("d,dv", [(8, 8), (40, 24), (96, 128)])
def test_sdpa_other_head_dims(device, rng, d, dv):
    """Head dims that the kernels pad (to 32, 64, 128), with dv != d."""
    _check(_run(CASES["causal_gqa"], tl.float32, d, dv, device, rng), tl.float32)


@pytest.mark.parametrize("name", ["plain_multi_tile", "causal_gqa", "bool_mask_dead_rows", "transposed_views"])
@pytest.mark.parametrize("dtype", [tl.float16, tl.bfloat16], ids=lambda t: t.name)
def test_sdpa_sm80_kernels_on_hopper(device, rng, monkeypatch, dtype, name):
    """On sm_90a the half-precision forward and backward run the wgmma kernels (flash_*_wg*),
    which the tests above cover there; TENSORLITE_WGMMA=0 selects the mma.sync kernels of
    other NVIDIA GPUs, held to the same reference on the same device."""
    arch = getattr(get_device(device), "arch", None)
    if arch != "sm_90a":
        pytest.skip(f"needs a Hopper GPU (sm_90a), where both kernel families run; {device}: {arch or 'no GPU arch'}")
    monkeypatch.setenv("TENSORLITE_WGMMA", "0")
    _check(_run(CASES[name], dtype, 128, 128, device, rng), dtype)


@pytest.mark.parametrize("name", ["plain_multi_tile", "causal_gqa", "causal_L_gt_S"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype", [tl.float16, tl.bfloat16], ids=lambda t: t.name)
@pytest.mark.parametrize("switch,variant", [("1", "ws"), ("pingpong", "wsp")])
def test_sdpa_warp_specialised_forward_on_hopper(device, rng, monkeypatch, switch, variant, dtype, d, name):
    """TENSORLITE_ATTN_HOPPER=1 (=pingpong) selects the warp-specialised forward flash_fwd_ws*
    (flash_fwd_wsp*) on sm_90a for the unmasked cases at complete head dims; forward and
    backward (which reads its lse) held to the same reference."""
    arch = getattr(get_device(device), "arch", None)
    if arch != "sm_90a":
        pytest.skip(f"needs a Hopper GPU (sm_90a), where flash_fwd_ws runs; {device}: {arch or 'no GPU arch'}")
    from tensorlite.backends.rocm.ops import attention
    looked_up, lookup = [], attention.kernel_for

    def recording(dev, kernel, *args, **kwargs):
        looked_up.append(kernel)
        return lookup(dev, kernel, *args, **kwargs)
    monkeypatch.setattr(attention, "kernel_for", recording)
    monkeypatch.setenv("TENSORLITE_ATTN_HOPPER", switch)
    _check(_run(CASES[name], dtype, d, d, device, rng), dtype)
    assert f"flash_fwd_{variant}{d}_{dtype.short}" in looked_up, looked_up


# few query rows, no gradient: the split-key decode kernels on GPUs (attn_decode_*), the
# flash or score-matrix paths elsewhere; keys span several 16/32-key chunks and end
# mid-chunk; head dims (d, dv) padded to each kernel width (32, 64, 128), whole or not
DECODE_CASES = {
    "one_query_gqa": (2, 8, 2, 1, 200, False, None, False, None, (64, 40)),
    "32_rows_bool_mask": (1, 32, 4, 4, 130, False, "bool", False, None, (64, 40)),
    "bottom_right_views": (1, 4, 4, 3, 70, "bottom_right", None, True, 0.3, (64, 40)),
    "additive_dead_row": (1, 4, 2, 3, 65, True, "additive", False, None, (64, 40)),
    "head_dim_128": (1, 4, 2, 2, 75, False, "bool", False, None, (128, 128)),
    "head_dims_24_32": (1, 6, 3, 2, 40, True, None, False, None, (24, 32)),
}


@pytest.mark.parametrize("name", sorted(DECODE_CASES))
@pytest.mark.parametrize("dtype", HALF_AND_F32, ids=lambda t: t.name)
def test_sdpa_decode_forward_matches_float64_composite(device, rng, dtype, name):
    b, hq, hk, L, S, causal, mask_kind, transposed, scale, (d, dv) = DECODE_CASES[name]
    (_, q, q64), (_, k, k64), (_, v, v64) = (_leaf(rng, b, h, t, e, dtype, device, transposed)
                                             for h, t, e in ((hq, L, d), (hk, S, d), (hk, S, dv)))
    mask, mask64 = _mask(rng, mask_kind, b, hq, L, S, dtype, device)
    with tl.no_grad():
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale)
    ref = F.sdpa_slow(*(tl.tensor(a) for a in (q64, k64, v64)), attn_mask=mask64, is_causal=causal, scale=scale)
    _check([("out", out.numpy(), ref.numpy())], dtype)


def _forbid(monkeypatch, cls, name):
    def boom(*args, **kwargs):
        raise AssertionError(f"{cls.__name__}.{name} called against TENSORLITE_SDPA")
    monkeypatch.setattr(cls, name, boom)


@pytest.mark.parametrize("mode", ["flash", "gemm", "auto"])
@pytest.mark.parametrize("dtype", [tl.float32, tl.bfloat16], ids=lambda t: t.name)
def test_sdpa_switch_forces_the_path(device, rng, monkeypatch, mode, dtype):
    monkeypatch.setenv("TENSORLITE_SDPA", mode)
    cls = type(storage_and_layout(tl.zeros(1, device=device))[0])
    if hasattr(cls, "sdpa_flash"):  # a GPU storage: the other path must not run
        if mode == "flash":
            _forbid(monkeypatch, cls, "sdpa_gemm")
        elif mode == "gemm":
            _forbid(monkeypatch, cls, "sdpa_flash")
            _forbid(monkeypatch, cls, "sdpa_backward")
    elif mode == "gemm":  # cpu: the switch turns its fused backward off too
        _forbid(monkeypatch, cls, "sdpa_backward")
    for name in ("causal_gqa", "transposed_views", "additive_causal"):
        _check(_run(CASES[name], dtype, 64, 64, device, rng), dtype)


def test_sdpa_switch_rejects_unknown_values(device, monkeypatch):
    monkeypatch.setenv("TENSORLITE_SDPA", "fast")
    q = tl.zeros(1, 1, 2, 4, device=device)
    with pytest.raises(ValueError, match="TENSORLITE_SDPA"):
        F.scaled_dot_product_attention(q, q, q)


def test_forced_flash_outside_the_kernels_raises_on_gpus(device, rng, monkeypatch):
    """f64 and head dims > 128 are not flash cases: 'flash' says so on GPUs; 'auto' falls
    back to the GEMM path (and the cpu, which has no kernels, computes every case)."""
    cases = [(tl.float64, 16, tl.DTypeError), (tl.float32, 160, tl.ShapeError)]
    for dtype, d, error in cases:
        q = tl.tensor(random_array(rng, (1, 2, 5, d), dtype), device=device)
        monkeypatch.setenv("TENSORLITE_SDPA", "auto")
        expected = F.scaled_dot_product_attention(q, q, q, is_causal=True).numpy().astype(np.float64)
        ref = F.sdpa_slow(*(tl.tensor(q.numpy().astype(np.float64)),) * 3, is_causal=True).numpy()
        assert _rel_err(expected, ref) < REL_TOL[dtype.name] * 10
        monkeypatch.setenv("TENSORLITE_SDPA", "flash")
        if device == "cpu":
            np.testing.assert_array_equal(F.scaled_dot_product_attention(q, q, q, is_causal=True).numpy(), expected)
        else:
            with pytest.raises(error, match="TENSORLITE_SDPA=flash"):
                F.scaled_dot_product_attention(q, q, q, is_causal=True)


def test_additive_mask_that_requires_grad_takes_the_composite_backward(device, rng):
    b, hq, L, S, d = 1, 2, 9, 11, 64
    arrays = [random_array(rng, s, tl.float32) for s in ((b, hq, L, d), (b, 1, S, d), (b, 1, S, d), (L, S))]
    grads = []
    for dev, dt in ((device, tl.float32), ("cpu", tl.float64)):
        ts = [tl.tensor(a, dtype=dt, device=dev, requires_grad=True) for a in arrays]
        out = F.scaled_dot_product_attention(*ts[:3], attn_mask=ts[3], is_causal=True)
        (out * out).sum().backward()
        grads.append([t.grad.numpy() for t in ts])
    for i, (got, ref) in enumerate(zip(*grads)):
        assert _rel_err(got, ref) < 1e-4, f"gradient {i}"


def test_lse_and_backward_contract(device, rng):
    """Storage level: lse is the logsumexp of the kept scaled scores (-inf for a row with no
    key); sdpa_backward gives q/k/v-shaped gradients (GQA summed) equal to cpu's."""
    b, hq, hk, L, S, d = 1, 4, 2, 6, 9, 32
    qa, ka, va = (random_array(rng, s, tl.float32) for s in ((b, hq, L, d), (b, hk, S, d), (b, hk, S, d)))
    keep = rng.random((L, S)) < 0.7
    keep[3] = False
    results = {}
    for dev in dict.fromkeys((device, "cpu")):
        q, k, v = (tl.tensor(a, device=dev) for a in (qa, ka, va))
        m = tl.tensor(keep, device=dev)
        mlay = Layout((L, S)).broadcast_as((b, hq, L, S))
        (qs, ql), (ks, kl), (vs, vl), (ms, _) = (storage_and_layout(t) for t in (q, k, v, m))
        out, lse = qs.sdpa(ql, ks, kl, vs, vl, ms, mlay, 0.25, False, return_lse=True)
        assert lse is not None and lse.dtype is tl.float32
        g = tl.tensor(random_array(np.random.default_rng(1), (b, hq, L, d), tl.float32), device=dev)
        gs, gl = storage_and_layout(g)
        grads = qs.sdpa_backward(ql, ks, kl, vs, vl, out, Layout((b, hq, L, d)), gs, gl, lse, ms, mlay, 0.25, False)
        shapes = [(b, hq, L, d), (b, hk, S, d), (b, hk, S, d)]
        results[dev] = [st.to_cpu(Layout(sh)) for st, sh in zip((lse,) + tuple(grads), [(b, hq, L)] + shapes)]
    kx = np.repeat(ka, hq // hk, axis=1).astype(np.float64)
    scores = np.where(keep, qa.astype(np.float64) @ kx.swapaxes(-1, -2) * 0.25, -np.inf)
    with np.errstate(divide="ignore"):
        expected_lse = np.log(np.exp(scores).sum(-1))
    for dev, (lse, *grads) in results.items():
        np.testing.assert_allclose(lse, expected_lse, rtol=1e-5, err_msg=dev)
        assert np.isneginf(lse[0, :, 3]).all()
        np.testing.assert_array_equal(grads[0][0, :, 3], 0.0)  # the dead row: no gradient
        for got, ref in zip(grads, results["cpu"][1:]):
            assert _rel_err(got, ref) < 1e-5


@pytest.mark.parametrize("L,S", [(0, 5), (4, 0)])
def test_sdpa_empty_queries_or_keys(device, L, S):
    q = tl.randn(1, 2, L, 64, device=device, requires_grad=True)
    k = tl.randn(1, 2, S, 64, device=device, requires_grad=True)
    v = tl.randn(1, 2, S, 64, device=device, requires_grad=True)
    out = F.scaled_dot_product_attention(q, k, v)
    assert out.shape == (1, 2, L, 64)
    np.testing.assert_array_equal(out.numpy(), 0.0)
    out.sum().backward()
    for t in (q, k, v):
        assert t.grad.shape == t.shape
        np.testing.assert_array_equal(t.grad.numpy(), 0.0)


def _mma_or_skip(device, monkeypatch, dtype):
    """(the attention ops module, the kernel names it looks up from now on) when `device` has
    the tensor-core kernels for `dtype` operands, else skip."""
    if device == "cpu":
        pytest.skip("cpu has no flash kernels")
    from tensorlite.backends.rocm.ops import attention
    dev = get_device(device)
    if not attention.flash_mma(dev, tl.bfloat16, 64):
        pytest.skip(f"{dev.arch} has no tensor-core MMA path (needs sm_80+, gfx90a/gfx94x or RDNA3/4's WMMA)")
    if not attention.flash_mma(dev, dtype, 64):
        pytest.skip(f"{dev.arch}'s matrix cores take no {dtype.name} operands (RDNA's WMMA: 16-bit only)")
    names = []
    real_kernel = attention.kernel_for

    def spy(dev, name, op, **operands):
        names.append(name)
        return real_kernel(dev, name, op, **operands)
    monkeypatch.setattr(attention, "kernel_for", spy)
    return attention, names


def _flash_paths(attention, device, op, dp, dtype):
    """The flash_{op} kernels a case can run on `device`: path -> (the tensor-core selector's
    answer, TENSORLITE_WGMMA, the kernel expected) for the scalar and mma.sync kernels and, on
    Hopper with f16/bf16, the wgmma one; and the tensor-core kernel the default selection picks."""
    hopper = attention.flash_wgmma(get_device(device), dtype)
    paths = {"scalar": (False, "1", f"flash_{op}{dp}_{dtype.short}"),
             "mma": (True, "0", f"flash_{op}_mma{dp}_{dtype.short}")}
    if hopper:
        paths["wg"] = (True, "1", f"flash_{op}_wg{dp}_{dtype.short}")
    return paths, paths["wg" if hopper else "mma"][2]


@pytest.mark.parametrize("d,dv,dtype", [(64, 64, tl.bfloat16), (128, 128, tl.float16), (40, 24, tl.bfloat16),
                                        (96, 128, tl.float16), (64, 64, tl.float32), (40, 24, tl.float32)], ids=str)
def test_sdpa_mma_forward_is_selected_and_matches_the_scalar_kernel(device, rng, monkeypatch, d, dv, dtype):
    """On devices with tensor cores the f16/bf16 forward with padded head dim 64/128 runs
    flash_fwd_mma* (on Hopper flash_fwd_wg*, or flash_fwd_mma* with TENSORLITE_WGMMA=0), and
    so does f32 at 64 (3xTF32 / f32 MFMA, to f32's tolerance); each
    tensor-core kernel's output and lse match the scalar flash kernel (forced through the
    selector) and the float64 reference, over several key and query tiles, causal skipping,
    GQA, masks, dead rows and transposed views. (Hopper's default for unmasked complete head
    dims, flash_fwd_wsp*, is held by test_sdpa_warp_specialised_forward_on_hopper: off here
    but in the default selection at the end.)"""
    attention, names = _mma_or_skip(device, monkeypatch, dtype)
    monkeypatch.setenv("TENSORLITE_ATTN_HOPPER", "0")
    real_selector = attention.flash_mma
    dp = 64 if max(d, dv) <= 64 else 128
    paths, tensor_core = _flash_paths(attention, device, "fwd", dp, dtype)
    for b, hq, hk, L, S, causal, mask_kind, transposed in ((2, 4, 2, 150, 150, True, None, False),
                                                           (1, 2, 1, 37, 200, False, "bool", True),
                                                           (1, 2, 2, 70, 70, True, "additive", False),
                                                           (1, 2, 1, 100, 230, True, None, False)):
        (_, q, q64), (_, k, k64), (_, v, v64) = (_leaf(rng, b, h, t, e, dtype, device, transposed)
                                                 for h, t, e in ((hq, L, d), (hk, S, d), (hk, S, dv)))
        mask, mask64 = _mask(rng, mask_kind, b, hq, L, S, dtype, device)
        ms, mlay = storage_and_layout(mask)
        mlay = None if mask is None else mlay.broadcast_as((b, hq, L, S))
        (qs, ql), (ks, kl), (vs, vl) = (storage_and_layout(t) for t in (q, k, v))
        runs = {}
        for path, (mma, wgmma, expected) in paths.items():
            monkeypatch.setattr(attention, "flash_mma", lambda dev, dt, p, on=mma: on)
            monkeypatch.setenv("TENSORLITE_WGMMA", wgmma)
            names.clear()
            out, lse = qs.sdpa(ql, ks, kl, vs, vl, ms, mlay, None, causal, return_lse=True)
            assert names == [expected]
            runs[path] = (out.to_cpu(sdpa_layout(ql, dv)).astype(np.float64),  # out in q's memory order
                          lse.to_cpu(Layout((b, hq, L))))
        ref = F.sdpa_slow(tl.tensor(q64), tl.tensor(k64), tl.tensor(v64), attn_mask=mask64, is_causal=causal).numpy()
        scalar = runs.pop("scalar")
        dead = np.isneginf(scalar[1])
        for path, (got, lse) in runs.items():
            assert _rel_err(got, ref) < REL_TOL[dtype.name], path
            assert _rel_err(got, scalar[0]) < REL_TOL[dtype.name], path
            np.testing.assert_array_equal(np.isneginf(lse), dead, err_msg=path)
            np.testing.assert_allclose(lse[~dead], scalar[1][~dead], rtol=2e-3, atol=2e-3, err_msg=path)
    # the default selector picks the tensor-core kernel for this case, and for f32 the scalar
    # one at head dim 128 and where the matrix cores take no f32 (RDNA)
    monkeypatch.setattr(attention, "flash_mma", real_selector)
    monkeypatch.delenv("TENSORLITE_WGMMA")
    monkeypatch.delenv("TENSORLITE_ATTN_HOPPER", raising=False)
    if tensor_core.startswith("flash_fwd_wg") and d == dv == dp:  # unmasked, complete head dims
        tensor_core = f"flash_fwd_wsp{dp}_{dtype.short}"
    f32_mma = attention.flash_mma(get_device(device), tl.float32, dp)
    for dt, expected in ((dtype, tensor_core), (tl.float32, f"flash_fwd_mma{dp}_f32" if f32_mma else
                                                            f"flash_fwd{dp}_f32")):
        x = tl.tensor(random_array(rng, (1, 2, 20, d), dt), device=device)
        y = tl.tensor(random_array(rng, (1, 2, 20, dv), dt), device=device)
        names.clear()
        F.scaled_dot_product_attention(x, x, y, is_causal=True)
        assert names == [expected]


@pytest.mark.parametrize("d,dv,dtype", [(64, 64, tl.bfloat16), (128, 128, tl.float16), (80, 80, tl.bfloat16),
                                        (40, 24, tl.float16), (96, 128, tl.bfloat16), (64, 64, tl.float32),
                                        (40, 24, tl.float32)], ids=str)
def test_sdpa_mma_backward_is_selected_and_matches_the_scalar_kernel(device, rng, monkeypatch, d, dv, dtype):
    """On devices with tensor cores the f16/bf16 backward with padded head dim 64/128 runs
    flash_bwd_mma* (on Hopper flash_bwd_wg*, or flash_bwd_mma* with TENSORLITE_WGMMA=0), and
    so does f32 at 64; each
    tensor-core kernel's gradients match the scalar flash_bwd (forced through the selector)
    and the float64 composite, over several key and query tiles, causal skipping with
    L != S, GQA, bool and additive masks with all-masked rows, and transposed views."""
    attention, names = _mma_or_skip(device, monkeypatch, dtype)
    real_selector = attention.flash_mma
    dp = 64 if max(d, dv) <= 64 else 128
    paths, tensor_core = _flash_paths(attention, device, "bwd", dp, dtype)
    cases = [(2, 4, 2, 150, 150, True, None, False, None),       # GQA, partial last tiles
             (1, 2, 1, 90, 40, True, None, True, 0.3),          # causal L > S, transposed views
             (1, 2, 2, 45, 170, True, "bool", False, None),     # causal L < S + bool mask, dead row
             (1, 4, 1, 37, 200, False, "bool", True, None),     # bool mask, dead row, GQA 4:1
             (1, 2, 2, 70, 70, True, "additive", False, 0.2)]   # additive mask with a -inf row
    for case in cases:
        seed = int(rng.integers(1 << 31))
        runs = {}
        for path, (mma, wgmma, expected) in paths.items():
            monkeypatch.setattr(attention, "flash_mma", lambda dev, dt, p, on=mma: on)
            monkeypatch.setenv("TENSORLITE_WGMMA", wgmma)
            names.clear()
            runs[path] = _run(case, dtype, d, dv, device, np.random.default_rng(seed))
            bwd = [n for n in names if n.startswith("flash_bwd") and not n.startswith("flash_bwd_pre")]
            assert bwd == [expected], names
        scalar = runs.pop("scalar")
        for path, run in runs.items():
            _check(run, dtype)
            for (what, got, _), (_, want, ref) in zip(run, scalar):
                err = np.abs(got.astype(np.float64) - want).max() / max(np.abs(ref).max(), 1e-30)
                assert err < REL_TOL[dtype.name], f"{what}: {path} vs scalar {err:.2e} in case {case}"
    # the default selector picks the tensor-core kernel for this case, and for f32 the scalar
    # one at head dim 128 and where the matrix cores take no f32 (RDNA)
    monkeypatch.setattr(attention, "flash_mma", real_selector)
    monkeypatch.delenv("TENSORLITE_WGMMA")
    monkeypatch.delenv("TENSORLITE_ATTN_HOPPER", raising=False)
    if tensor_core.startswith("flash_fwd_wg") and d == dv == dp:  # unmasked, complete head dims
        tensor_core = f"flash_fwd_wsp{dp}_{dtype.short}"
    f32_mma = attention.flash_mma(get_device(device), tl.float32, dp)
    for dt, expected in ((dtype, tensor_core), (tl.float32, f"flash_bwd_mma{dp}_f32" if f32_mma else
                                                            f"flash_bwd{dp}_f32")):
        x = tl.tensor(random_array(rng, (1, 2, 20, d), dt), device=device, requires_grad=True)
        y = tl.tensor(random_array(rng, (1, 2, 20, dv), dt), device=device, requires_grad=True)
        names.clear()
        F.scaled_dot_product_attention(x, x, y, is_causal=True).sum().backward()
        assert expected in names and not any(n.startswith("flash_bwd") and n != expected
                                              and not n.startswith("flash_bwd_pre") for n in names), names


def _copy_spy(device, monkeypatch):
    """A list that records every same-dtype copy the GPU storage makes from now on (strided
    copy kernels and contiguous device copies); None on cpu."""
    if device == "cpu":
        return None
    from tensorlite.backends.rocm import storage as gpu_storage
    cls, copies = gpu_storage.GpuStorage, []
    real_to_dtype, real_copy = cls.to_dtype, cls.copy_strided_src

    def to_dtype(self, layout, dtype):
        if tl.dtype.get(dtype) is self.dtype:
            copies.append(("to_dtype", layout))
        return real_to_dtype(self, layout, dtype)

    def copy_strided_src(self, dst, dst_offset, src_layout):
        if dst.dtype is self.dtype:
            copies.append(("copy_strided_src", src_layout))
        return real_copy(self, dst, dst_offset, src_layout)
    monkeypatch.setattr(cls, "to_dtype", to_dtype)
    monkeypatch.setattr(cls, "copy_strided_src", copy_strided_src)
    return copies


@pytest.mark.parametrize("dtype", HALF_AND_F32, ids=lambda t: t.name)
@pytest.mark.parametrize("hk", [4, 2], ids=["mha", "gqa"])
def test_sdpa_on_head_views_copies_nothing(device, rng, monkeypatch, dtype, hk):
    """A transformer's heads, x.reshape(b, t, h, d).transpose(1, 2), go into the kernels as
    views; the output is laid out (b, t, h, d) so that out.transpose(1, 2).reshape(b, t, h*d)
    is a view, and the backward's dO (a view of that) and dq/dk/dv (in the same order, so the
    heads' reshape gradients are views) need no copy either: no same-dtype copy anywhere in
    forward + backward. Values against the float64 composite."""
    b, hq, t, d = 2, 4, 70, 64
    leaves = [tl.tensor(random_array(rng, (b, t, h * d), dtype), dtype=dtype, device=device, requires_grad=True)
              for h in (hq, hk, hk)]
    w = tl.tensor(random_array(rng, (b, t, hq * d), dtype), dtype=dtype, device=device)
    copies = _copy_spy(device, monkeypatch)
    q, k, v = (x.reshape(b, t, x.shape[2] // d, d).transpose(1, 2) for x in leaves)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    y = out.transpose(1, 2).reshape(b, t, hq * d)
    assert shares_storage(y, out) and y.is_contiguous(), out.stride()
    (y * w).sum().backward()
    if copies is not None:
        assert copies == [], copies
    for x in leaves:
        assert x.grad.is_contiguous()

    refs = [tl.tensor(x.numpy().astype(np.float64).reshape(b, t, -1, d).transpose(0, 2, 1, 3), requires_grad=True)
            for x in leaves]
    ref = F.sdpa_slow(*refs, is_causal=True)
    (ref.transpose(1, 2).reshape(b, t, hq * d) * tl.tensor(w.numpy().astype(np.float64))).sum().backward()
    results = [("out", y.numpy(), ref.transpose(1, 2).reshape(b, t, hq * d).numpy())]
    results += [(f"d{n}", x.grad.numpy(), r.grad.numpy().transpose(0, 2, 1, 3).reshape(x.shape))
                for n, x, r in zip("qkv", leaves, refs)]
    _check(results, dtype)


@pytest.mark.parametrize("dtype", HALF_AND_F32, ids=lambda t: t.name)
def test_sdpa_on_unaligned_head_views(device, rng, dtype):
    """Head views at an odd element offset (rows off 16 bytes: the tensor-core kernels read
    a contiguous copy, the host decides; the scalar kernels' 16-byte tile loads fall back to
    element loads per block) with an odd or a 16-byte row stride give the same values."""
    b, hq, hk, t, d = 1, 4, 2, 45, 64
    results = []
    for h, extra, start in ((hq, 1, 1), (hk, 3, 3), (hk, 4, 1)):
        base = tl.tensor(random_array(rng, (b, t, h * d + extra), dtype), dtype=dtype, device=device)
        leaf = base[:, :, start:start + h * d].detach()
        leaf.requires_grad = True
        results.append(leaf)
    ql, kl, vl = results
    q, k, v = (x.reshape(b, t, x.shape[2] // d, d).transpose(1, 2) for x in results)
    assert storage_and_layout(q)[1].offset % 2 == 1
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    w = random_array(rng, (b, hq, t, d), dtype)
    (out * tl.tensor(w, dtype=dtype, device=device)).sum().backward()
    refs = [tl.tensor(x.numpy().astype(np.float64).reshape(b, t, -1, d).transpose(0, 2, 1, 3), requires_grad=True)
            for x in (ql, kl, vl)]
    ref = F.sdpa_slow(*refs, is_causal=True)
    (ref * tl.tensor(w.astype(np.float64))).sum().backward()
    _check([("out", out.numpy(), ref.numpy())] + [
        (f"d{n}", x.grad.numpy(), r.grad.numpy().transpose(0, 2, 1, 3).reshape(x.shape))
        for n, x, r in zip("qkv", (ql, kl, vl), refs)], dtype)


def _np_attention(q, k, v, scale, causal):
    """float64 numpy attention (b, h, L/S, d) with top-left causal masking: (out, lse)."""
    s = np.einsum("bhld,bhsd->bhls", q, k) * scale
    if causal:
        L, S = s.shape[-2:]
        s = np.where(np.arange(S)[None, :] > np.arange(L)[:, None], -np.inf, s)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - m)
    lse = (m + np.log(e.sum(-1, keepdims=True)))[..., 0]
    return np.einsum("bhls,bhsd->bhld", e / e.sum(-1, keepdims=True), v), lse


# name -> (L, S, causal, scale, keys' scores along the sequence)
SOFTMAX_CASES = {
    "rising": (130, 300, False, None, "rising"),        # the running max grows in every key tile
    "falling": (130, 300, False, None, "falling"),      # it never grows after the first tile
    "falling_steep": (70, 300, False, 4.0, "falling"),  # exponents far below -126 (flushed to 0)
    "negative_scale": (97, 161, True, -0.7, "random"),
    "exact_tiles": (256, 256, True, None, "random"),    # no partial query or key tile
    "one_row_tails": (129, 257, True, 0.5, "random"),   # one-row last query and key tiles
}


@pytest.mark.parametrize("name", sorted(SOFTMAX_CASES))
@pytest.mark.parametrize("d,dtype", [(64, tl.bfloat16), (128, tl.float16), (128, tl.bfloat16)], ids=str)
def test_sdpa_forward_online_softmax_edges(device, rng, name, d, dtype):
    """The flash forward's online softmax and tile pipeline (on GPUs with tensor cores the
    MMA kernel for these dtypes and head dims) against float64 numpy, out and lse: a running
    max that grows in every key tile or never after the first (the output's rescale is
    skipped then), exponents that underflow, a negative scale, and sequences that are exact
    multiples of the tiles or end one row into a tile (many key tiles: the K/V stages
    alternate)."""
    L, S, causal, scale, scores = SOFTMAX_CASES[name]
    b, h = 1, 2
    q = random_array(rng, (b, h, L, d), dtype, -1.0, 1.0)
    k = random_array(rng, (b, h, S, d), dtype, -1.0, 1.0)
    v = random_array(rng, (b, h, S, d), dtype)
    if scores != "random":  # q >= 0 and keys near ramp_j * (1, ..., 1): every row's scores follow the ramp
        q = np.abs(q)
        ramp = np.linspace(0.0, 3.0, S) if scores == "rising" else np.linspace(3.0, 0.0, S)
        k = (ramp[None, None, :, None] + 0.05 * k.astype(np.float64)).astype(k.dtype)
    ts = [tl.tensor(a, dtype=dtype, device=device) for a in (q, k, v)]
    (qs, ql), (ks, kl), (vs, vl) = (storage_and_layout(t) for t in ts)
    out, lse = qs.sdpa(ql, ks, kl, vs, vl, None, None, scale, causal, return_lse=True)
    out = out.to_cpu(sdpa_layout(ql, d))
    lse = lse.to_cpu(Layout((b, h, L)))
    ref, ref_lse = _np_attention(*(a.astype(np.float64) for a in (q, k, v)),
                                 1.0 / np.sqrt(d) if scale is None else scale, causal)
    assert _rel_err(out, ref) < REL_TOL[dtype.name], name
    np.testing.assert_allclose(lse, ref_lse, rtol=2e-3, atol=2e-3)
