"""Scaled dot-product attention and its backward (attention.hip).

Three tiers of flash kernels, chosen per call: the warpgroup kernels (flash_*_wg*, f16/bf16),
the matrix-core kernels (flash_*_mma*; f32 at head dim 64 too, except on RDNA's WMMA), and portable
ones for the rest (head dim 32, f32 at 128, GPUs without matrix cores); which tier a device has is its
platform's knowledge (`platform.matrix_cores`: "wgmma", "mma", "wmma" or None;
hip.py and cuda.py say for which architectures). Where no flash kernel covers the case (f64, head dims over 128)
or TENSORLITE_SDPA=gemm asks for it, scores go through `gemm`, a masked softmax and `gemm`.
A forward of a few query rows (a decode step) without lse takes the split-key decode
kernels (attn_decode_*) instead of the flash ones, which tile 64 query rows per block.
"""
from __future__ import annotations

import math
import os
import struct
from typing import Optional, TYPE_CHECKING, Tuple

from tensorlite import dtype as dtypes
from tensorlite.backend import sdpa_layout, sdpa_mode
from tensorlite.errors import DTypeError, ShapeError, storage_error, unsupported_dtype
from tensorlite.layout import Layout

from ..kernel_table import kernel_for
from ..launch import BLOCK, VIEW4, grid_for, launch_rows, ptr_or_null, view4
from .matmul import gemm, matrix_view

if TYPE_CHECKING:
    from ..storage import GpuStorage

# the entry points of this family's kernel source (kernel_table.py assembles every family's)
_FLASH_DTYPES = ("f32", "f16", "bf16")
KERNELS = {"attention.hip": tuple(f"flash_{op}{dp}_{t}" for op in ("fwd", "bwd") for dp in (32, 64, 128)
                                  for t in _FLASH_DTYPES)
           + tuple(f"flash_bwd_pre_{t}" for t in _FLASH_DTYPES)
           + tuple(f"flash_{op}_mma{dp}_{t}" for op in ("fwd", "bwd") for dp in (64, 128) for t in ("f16", "bf16"))
           + tuple(f"flash_{op}_mma64_f32" for op in ("fwd", "bwd"))
           + tuple(f"flash_{op}_wg{dp}_{t}" for op in ("fwd", "bwd") for dp in (64, 128) for t in ("f16", "bf16"))
           + tuple(f"flash_fwd_{ws}{dp}_{t}" for ws in ("ws", "wsp") for dp in (64, 128) for t in ("f16", "bf16"))
           + tuple(f"attn_decode_part{dp}_{t}" for dp in (32, 64, 128) for t in _FLASH_DTYPES)
           + tuple(f"attn_decode_combine_{t}" for t in _FLASH_DTYPES)}
_DEC_ROWS, _DEC_THREADS = 32, 128                # DEC_ROWS, DEC_THREADS in attention.hip
_DEC_MAX_L = 16                                  # query rows up to which a forward takes the decode kernels


class AttentionOps:
    __slots__ = ()  # a mixin of GpuStorage (storage.py), which holds the data: self is a GpuStorage

    def sdpa(self, layout, k, k_layout, v, v_layout, mask, mask_layout, scale, is_causal, return_lse=False):
        # TENSORLITE_SDPA (tensorlite.backend.sdpa_mode): the flash kernel where it covers the
        # case (f32/f16/bf16, head dims <= 128), else scores via GEMM + masked softmax + GEMM.
        mode = sdpa_mode()
        dp = _flash_dim(self, layout, v_layout)
        if mode == "flash" and dp is None:
            _flash_unsupported(self, layout, k, k_layout, v, v_layout)
        if mode == "auto" and not return_lse and _decode_fits(self, layout, k_layout, v_layout):
            return self.sdpa_decode(layout, k, k_layout, v, v_layout, mask, mask_layout, scale, is_causal)
        if mode != "gemm" and dp is not None:
            out, lse = self.sdpa_flash(dp, layout, k, k_layout, v, v_layout, mask, mask_layout, scale, is_causal,
                                       return_lse)
            return (out, lse) if return_lse else out
        out = self.sdpa_gemm(layout, k, k_layout, v, v_layout, mask, mask_layout, scale, is_causal)
        out = _in_sdpa_layout(out, sdpa_layout(layout, v_layout.shape[3]))
        return (out, None) if return_lse else out  # no lse: the caller differentiates the composite

    def sdpa_decode(self, layout, k, k_layout, v, v_layout, mask, mask_layout, scale, is_causal):
        """sdpa's forward for a few query rows (_decode_fits): per (batch, kv head, chunk of keys) a
        block scores every query row that reads the kv head, then one pass merges the chunks."""
        b, hq, L, d = layout.shape
        hk, S, dv = k_layout.shape[1], k_layout.shape[2], v_layout.shape[3]
        _check_sdpa(self, layout, k, k_layout, v, v_layout)
        scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
        dev = self.device
        out_layout = sdpa_layout(layout, dv)
        out = self._new(b * hq * L * dv)
        if out.numel == 0:
            return out
        if S == 0:  # no keys: zeros (as the cpu reference)
            dev.memset(out.buffer.ptr, 0, out.numel * self.dtype.itemsize)
            return out
        shape, mask_args = _flash_shape(self, b, hq, hk, L, S, d, dv, scale, is_causal, mask, mask_layout)
        dp = _flash_dim(self, layout, v_layout)
        n_chunks, n_rows = -(-S // _dec_chunk(self.dtype, dp)), b * hq * L
        part_o, part_ml = self._new(n_rows * n_chunks * dv, dtypes.float32), self._new(n_rows * n_chunks * 2,
                                                                                        dtypes.float32)
        t = self.dtype.short
        dev.launch(kernel_for(dev, f"attn_decode_part{dp}_{t}", "sdpa", q=(self, layout)), b * hk * n_chunks,
                   _DEC_THREADS,
                   [("bytes", shape), ("bytes", view4(layout)), ("bytes", view4(k_layout)), ("bytes", view4(v_layout)),
                    *mask_args, ("ptr", self.buffer.ptr), ("ptr", k.buffer.ptr), ("ptr", v.buffer.ptr),
                    ("int64", n_chunks), ("ptr", part_o.buffer.ptr), ("ptr", part_ml.buffer.ptr)])
        dev.launch(kernel_for(dev, f"attn_decode_combine_{t}", "sdpa", q=(self, layout)), grid_for(dev, n_rows * dv),
                   BLOCK, [("int64", n_rows), ("int64", hq), ("int64", L), ("int64", dv), ("int64", n_chunks),
                           ("bytes", view4(out_layout)), ("ptr", part_o.buffer.ptr), ("ptr", part_ml.buffer.ptr),
                           ("ptr", out.buffer.ptr)])
        return out

    def sdpa_flash(self, dp, layout, k, k_layout, v, v_layout, mask, mask_layout, scale, is_causal, want_lse):
        """sdpa's flash path (one of the three kernel tiers) at padded head dim `dp`: (out, lse or None)."""
        b, hq, L, d = layout.shape
        hk, S, dv = k_layout.shape[1], k_layout.shape[2], v_layout.shape[3]
        _check_sdpa(self, layout, k, k_layout, v, v_layout)
        scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
        dev = self.device
        out_layout = sdpa_layout(layout, dv)  # q's memory order (the contract)
        out = self._new(b * hq * L * dv)
        lse = self._new(b * hq * L, dtypes.float32) if want_lse else None
        if b * hq * L == 0:
            return out, lse
        if S == 0:  # no keys: zeros (as the cpu reference), lse = log(0)
            dev.memset(out.buffer.ptr, 0, out.numel * self.dtype.itemsize)
            if lse is not None:
                lse.const_set(float("-inf"), Layout((lse.numel,)))
            return out, lse
        shape, mask_args = _flash_shape(self, b, hq, hk, L, S, d, dv, scale, is_causal, mask, mask_layout)
        smem = 0
        mma = flash_mma(dev, self.dtype, dp)
        q, layout = _flash_operand(self, layout, dp, mma)
        k, k_layout = _flash_operand(k, k_layout, dp, mma)
        v, v_layout = _flash_operand(v, v_layout, dp, mma)
        hopper = flash_hopper(dev, self.dtype, dp, mask, (layout, k_layout, v_layout)) if mma else None
        if hopper:  # warp-specialised: a producer warpgroup and _WS_FWD_GROUPS consumer groups of 64 rows
            kernel = kernel_for(dev, f"flash_fwd_{hopper}{dp}_{self.dtype.short}", "sdpa", q=(self, layout))
            bm, block = 64 * _WS_FWD_GROUPS, (dev.warp_size, 4 * (_WS_FWD_GROUPS + 1))
            stages = _ws_fwd_stages(dp)
            # WsFwdTile::SMEM: Q, the K/V stages, their mbarriers, 1 KiB to align the tiles to 1 KiB
            smem = (bm + 2 * stages * _WS_FWD_BN) * dp * self.dtype.itemsize + 16 * stages + 1024
        elif mma and flash_wgmma(dev, self.dtype):  # warpgroups of 4 warps, 64 rows each
            kernel = kernel_for(dev, f"flash_fwd_wg{dp}_{self.dtype.short}", "sdpa", q=(self, layout))
            bm, block = 64 * _WG_FWD_GROUPS, (dev.warp_size, 4 * _WG_FWD_GROUPS)
            # WgFwdTile::SMEM: Q, the K/V stages, 1 KiB to align them to 1 KiB
            smem = (bm + 2 * _WG_FWD_STAGES * _WG_FWD_BN) * dp * self.dtype.itemsize + 1024
        elif mma:  # matrix cores: blocks of MMA_FWD_WARPS warps, 32 rows each (f32: 16)
            kernel = kernel_for(dev, f"flash_fwd_mma{dp}_{self.dtype.short}", "sdpa", q=(self, layout))
            bm, block = (16 if self.dtype.itemsize == 4 else 32) * _MMA_FWD_WARPS, (dev.warp_size, _MMA_FWD_WARPS)
            smem = mma_fwd_tile(dev, self.dtype, dp)[1]
        else:
            kernel = kernel_for(dev, f"flash_fwd{dp}_{self.dtype.short}", "sdpa", q=(self, layout))
            bm = 32 if self.dtype.itemsize == 4 and dp > 64 else 64   # FwdCfg::BM, BN in attention.hip
            bn = 32 if dp > 64 else 64
            block = (16, 16)
            smem = (bm + bn) * (dp + 4) * self.dtype.itemsize + bn * (bm + 4) * 4  # FwdTile::SMEM
        dev.launch(kernel, b * hq * (-(-L // bm)), block,
                   [("bytes", shape), ("bytes", view4(layout)), ("bytes", view4(k_layout)),
                    ("bytes", view4(v_layout)), ("bytes", view4(out_layout)), *mask_args, ("ptr", q.buffer.ptr),
                    ("ptr", k.buffer.ptr), ("ptr", v.buffer.ptr), ("ptr", out.buffer.ptr),
                    ("ptr", ptr_or_null(lse))],
                   shared_mem=smem)
        return out, lse

    def sdpa_backward(self, layout, k, k_layout, v, v_layout, out, out_layout, grad, grad_layout, lse, mask,
                      mask_layout, scale, is_causal):
        b, hq, L, d = layout.shape
        hk, S, dv = k_layout.shape[1], k_layout.shape[2], v_layout.shape[3]
        _check_sdpa(self, layout, k, k_layout, v, v_layout)
        dp = _flash_dim(self, layout, v_layout)
        if dp is None:
            _flash_unsupported(self, layout, k, k_layout, v, v_layout, "sdpa_backward")
        if grad.dtype is not self.dtype or out.dtype is not self.dtype or lse.dtype is not dtypes.float32 \
                or lse.numel != b * hq * L:
            raise storage_error(DTypeError, "sdpa_backward", "out and grad must have q's dtype, lse float32 (b, hq, L)",
                                q=(self, layout), out=(out, out_layout), grad=(grad, grad_layout))
        scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
        dev = self.device
        # results in the operands' memory order (the contract); dq32's flat cast below keeps it
        dq_layout, dk_layout, dv_layout = sdpa_layout(layout), sdpa_layout(k_layout), sdpa_layout(v_layout)
        dq32 = self._new(b * hq * L * d, dtypes.float32)
        dk, dvs = self._new(b * hk * S * d), self._new(b * hk * S * dv)
        run = b * hq * L > 0 and S > 0
        for st in ((dq32, dk, dvs) if not run else (dq32,)):  # dq: atomic sums; else empty L or S: zeros
            if st.numel:
                dev.memset(st.buffer.ptr, 0, st.numel * st.dtype.itemsize)
        if run:
            t = self.dtype.short
            n_rows = b * hq * L
            dr = self._new(n_rows, dtypes.float32)
            dev.launch(kernel_for(dev, f"flash_bwd_pre_{t}", "sdpa_backward", q=(self, layout)), -(-n_rows // 16),
                       (16, 16), [("int64", n_rows), ("int64", hq), ("int64", L), ("int64", dv),
                                  ("bytes", view4(out_layout)), ("bytes", view4(grad_layout)),
                                  ("ptr", out.buffer.ptr), ("ptr", grad.buffer.ptr), ("ptr", dr.buffer.ptr)])
            shape, mask_args = _flash_shape(self, b, hq, hk, L, S, d, dv, scale, is_causal, mask, mask_layout)
            mma = flash_mma(dev, self.dtype, dp)
            q, layout = _flash_operand(self, layout, dp, mma)
            k, k_layout = _flash_operand(k, k_layout, dp, mma)
            v, v_layout = _flash_operand(v, v_layout, dp, mma)
            grad, grad_layout = _flash_operand(grad, grad_layout, dp, mma)
            smem = 0
            if mma and flash_wgmma(dev, self.dtype):  # two warpgroups, 64 keys each
                kernel = kernel_for(dev, f"flash_bwd_wg{dp}_{t}", "sdpa_backward", q=(self, layout))
                bn, block, bm, st = _WG_BWD_BN, (dev.warp_size, 8), 8192 // dp, _WG_BWD_STAGES
                # WgBwdTile::SMEM: K, V, the Q/dO stages, dS^T, lse/Dr stages, 1 KiB alignment slack
                smem = (2 * bn * dp + st * 2 * bm * dp + bn * bm) * self.dtype.itemsize + 2 * st * bm * 4 + 1024
            elif mma:  # matrix cores: mma_bwd_tile's warps, 16 keys each
                kernel = kernel_for(dev, f"flash_bwd_mma{dp}_{t}", "sdpa_backward", q=(self, layout))
                warps, smem = mma_bwd_tile(dev, self.dtype, dp)
                bn, block = 16 * warps, (dev.warp_size, warps)
            else:
                kernel = kernel_for(dev, f"flash_bwd{dp}_{t}", "sdpa_backward", q=(self, layout))
                bn = (16 if dp > 64 else 32) if self.dtype.itemsize == 4 else (32 if dp > 64 else 64)  # BwdCfg::BN
                block = (16, 16)
            dev.launch(kernel, b * hk * (-(-S // bn)), block,
                       [("bytes", shape), ("bytes", view4(layout)), ("bytes", view4(k_layout)),
                        ("bytes", view4(v_layout)), ("bytes", view4(grad_layout)), ("bytes", view4(dq_layout)),
                        ("bytes", view4(dk_layout)), ("bytes", view4(dv_layout)), *mask_args,
                        ("ptr", q.buffer.ptr), ("ptr", k.buffer.ptr), ("ptr", v.buffer.ptr),
                        ("ptr", grad.buffer.ptr), ("ptr", lse.buffer.ptr), ("ptr", dr.buffer.ptr),
                        ("ptr", dq32.buffer.ptr), ("ptr", dk.buffer.ptr), ("ptr", dvs.buffer.ptr)],
                       shared_mem=smem)
        dq = dq32 if self.dtype is dtypes.float32 else dq32.to_dtype(Layout((dq32.numel,)), self.dtype)
        return dq, dk, dvs

    def sdpa_gemm(self, layout, k, k_layout, v, v_layout, mask, mask_layout, scale, is_causal):
        """sdpa's scores-in-memory path (gemm, masked softmax, gemm): a contiguous (b, hq, L, dv) output."""
        b, hq, L, d = layout.shape
        hk, S = k_layout.shape[1], k_layout.shape[2]
        dv = v_layout.shape[3]
        if hk == 0 or hq % hk:
            raise storage_error(ShapeError, "sdpa", "query heads must be a multiple of key/value heads",
                                q=(self, layout), k=(k, k_layout), v=(v, v_layout))
        if not self.dtype.is_floating_point:
            raise unsupported_dtype("sdpa", q=(self, layout))
        scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
        g = hq // hk
        out = self._new(b * hq * L * dv)
        if out.numel == 0:
            return out
        if S == 0:  # no keys: torch and the cpu reference give zeros
            self.device.memset(out.buffer.ptr, 0, out.numel * self.dtype.itemsize)
            return out
        # GQA without repeating k/v: query heads h = kv*g + j form (b*hk) batches of g*L rows
        qs, ql = matrix_view(self, layout, (b * hk, g * L, d))
        ks, kl = matrix_view(k, k_layout, (b * hk, S, d))
        vs, vl = matrix_view(v, v_layout, (b * hk, S, dv))
        scores = self._new(b * hq * L * S)
        gemm(qs, ql, ks, kl.transpose(1, 2), scores, 0, g * L * S, S, b * hk, g * L, S, d, alpha=scale)
        mask_args = [("int32", 0), ("bytes", VIEW4.pack(0, 0, 0, 0, 0)), ("ptr", 0)]
        if mask is not None:
            if mask.dtype is not dtypes.bool_ and mask.dtype is not self.dtype:
                mask, mask_layout = mask._contiguous(mask_layout, self.dtype)
            mask_args = [("int32", 1 if mask.dtype is dtypes.bool_ else 2), ("bytes", view4(mask_layout)),
                         ("ptr", mask.buffer.ptr)]
        dev = self.device
        kernel = kernel_for(dev, f"attn_softmax_{self.dtype.short}", "sdpa", q=(self, layout))
        n_rows = b * hq * L
        launch_rows(dev, kernel, n_rows, S, [("int64", n_rows), ("int64", S), ("int64", L), ("int64", hq),
                                             *mask_args, ("int32", int(bool(is_causal))),
                                             ("ptr", scores.buffer.ptr)])
        gemm(scores, Layout.contiguous((b * hk, g * L, S)), vs, vl, out, 0, g * L * dv, dv, b * hk, g * L, dv, S)
        return out


_ATTN_SHAPE = struct.Struct("<8qiif4x")          # struct AttnShape of attention.hip


def _dec_chunk(dtype, dp: int) -> int:
    """Keys per block of attn_decode_part<dp> (DecChunk in attention.hip): 32, or 16 for f32 at
    head dim 128 (shared memory)."""
    return 16 if dtype.itemsize == 4 and dp > 64 else 32


def _decode_fits(q: GpuStorage, layout: Layout, k_layout: Layout, v_layout: Layout) -> bool:
    """Whether the decode kernels take the case: f32/f16/bf16, a few query rows per kv head
    (at most _DEC_ROWS with the query heads that share it), head dims up to 128 (_flash_dim)."""
    if q.dtype not in (dtypes.float32, dtypes.float16, dtypes.bfloat16) or layout.ndim != 4:
        return False
    b, hq, L, d = layout.shape
    hk = k_layout.shape[1]
    return (0 < L <= _DEC_MAX_L and hk > 0 and hq % hk == 0 and hq // hk * L <= _DEC_ROWS
            and _flash_dim(q, layout, v_layout) is not None)


def _flash_dim(q: GpuStorage, layout: Layout, v_layout: Layout) -> Optional[int]:
    """The head dim the flash kernels are instantiated for that fits q/v, or None when
    they do not cover the case (f64, head dims over 128)."""
    if q.dtype not in (dtypes.float32, dtypes.float16, dtypes.bfloat16) or layout.ndim != 4 or v_layout.ndim != 4:
        return None
    widest = max(layout.shape[3], v_layout.shape[3])
    return next((dp for dp in (32, 64, 128) if widest <= dp), None)


_MMA_BWD_STAGES = 2                              # MMA_BWD_STAGES in attention.hip
_MMA_FWD_WARPS = 4                               # MMA_FWD_WARPS in attention.hip
_WG_FWD_GROUPS, _WG_FWD_BN, _WG_FWD_STAGES = 2, 128, 3  # WG_FWD_GROUPS, _BN, _STAGES in attention.hip
_WG_BWD_BN, _WG_BWD_STAGES = 128, 3              # WG_BWD_BN, WG_BWD_STAGES in attention.hip


def mma_fwd_tile(dev, dtype, dp: int) -> Tuple[int, int]:
    """(keys per tile, bytes of dynamic shared memory) of flash_fwd_mma<dp> on dev (MmaFwdTile in
    attention.hip): Q and the platform's MMA_STAGES K/V tiles, of 64 keys where they fit the
    shared memory the vendor's tile header says a block has (mma_lds_bytes), else 32."""
    bm, ld, stages = (16 if dtype.itemsize == 4 else 32) * _MMA_FWD_WARPS, dp + 8, dev.platform.MMA_STAGES
    bn = 64 if (bm + 2 * stages * 64) * ld * dtype.itemsize <= dev.platform.mma_lds_bytes(dev.arch) else 32
    return bn, (bm + 2 * stages * bn) * ld * dtype.itemsize


def _mma_bwd_smem(dtype, dp: int, warps: int) -> int:
    """MmaBwdTile::SMEM of attention.hip: K, the Q/dO stages, dS^T, the lse/Dr stages."""
    bn, bm, ld, st = 16 * warps, (32 if dp > 64 or dtype.itemsize == 4 else 64), dp + 8, _MMA_BWD_STAGES
    lds = bm + 16 // dtype.itemsize  # dS^T's padded rows
    return (bn * ld + st * 2 * bm * ld + bn * lds) * dtype.itemsize + st * 2 * bm * 4


def mma_bwd_tile(dev, dtype, dp: int) -> Tuple[int, int]:
    """(warps, bytes of dynamic shared memory) of flash_bwd_mma<dp> on dev (mma_bwd_warps in
    attention.hip): 8 warps of 16 keys where their tiles fit mma_lds_bytes, else 4."""
    warps = 8 if _mma_bwd_smem(dtype, dp, 8) <= dev.platform.mma_lds_bytes(dev.arch) else 4
    return warps, _mma_bwd_smem(dtype, dp, warps)


def flash_wgmma(dev, dtype) -> bool:
    """Whether sdpa and its backward take the warpgroup kernels (flash_{fwd,bwd}_wg*, TL_HAS_WGMMA
    in the vendor's tile header) where the matrix-core kernels cover the case: f16/bf16 on an arch
    the platform says has them ("wgmma"), unless TENSORLITE_WGMMA=0 (read at every call) asks for
    the flash_*_mma* kernels instead."""
    return (dtype in dtypes.HALVES and dev.platform.matrix_cores(dev.arch) == "wgmma"
            and os.environ.get("TENSORLITE_WGMMA", "1").strip() != "0")


_WS_FWD_GROUPS, _WS_FWD_BN = 2, 128                # WS_FWD_GROUPS, WS_FWD_BN in attention.hip


def _ws_fwd_stages(dp: int) -> int:
    """K/V stages of flash_fwd_ws<dp> (WsFwdTile::STAGES in attention.hip)."""
    return 3 if dp > 64 else 4


_HOPPER_VARIANTS = {"1": "ws", "pingpong": "wsp"}  # TENSORLITE_ATTN_HOPPER -> flash_fwd_<variant>
_HOPPER_DEFAULT = "pingpong"


def flash_hopper(dev, dtype, dp: int, mask, layouts) -> Optional[str]:
    """The warp-specialised Hopper forward sdpa takes ("wsp": flash_fwd_wsp*, the pingpong
    schedule of its two consumer warpgroups, the default; "ws": flash_fwd_ws*, without it, by
    TENSORLITE_ATTN_HOPPER=1), or None (TENSORLITE_ATTN_HOPPER=0, read at every call, keeps the
    flash_fwd_wg* forward; 1.19-1.27x slower on an H200, docs/benchmarks.md). Where the warpgroup
    kernels run (flash_wgmma: sm_90a), for complete head dims (q's d == v's dv == dp, 64 or 128),
    no mask, and operands whose rows the kernel's 16-byte copies take (`layouts`, after
    _flash_operand: a tile of 128 rows spans under 2**32 bytes; it has no element-wise
    fallback)."""
    variant = _HOPPER_VARIANTS.get(os.environ.get("TENSORLITE_ATTN_HOPPER", _HOPPER_DEFAULT).strip())
    if variant is None or mask is not None or not flash_wgmma(dev, dtype) or dp not in (64, 128):
        return None
    limit = 2 ** 32 // (_WS_FWD_BN * dtype.itemsize)
    fits = all(lay.shape[3] == dp and (lay.shape[2] <= 1 or 0 <= lay.strides[2] < limit) for lay in layouts)
    return variant if fits else None


def flash_mma(dev, dtype, dp: int) -> bool:
    """Whether the matrix-core kernels (flash_{fwd,bwd}_mma*, compat.h TL_HAS_MMA) cover the case on
    `dev`: f16/bf16 at padded head dim 64 or 128, f32 at 64 (NVIDIA: 3xTF32, AMD: f32 MFMA; its
    tiles at 128 would not fit AMD's LDS), on an arch with matrix cores (its platform says);
    RDNA's WMMA ("wmma") takes no f32 operands (its flash_*_mma64_f32 are empty)."""
    if dp not in ((64,) if dtype is dtypes.float32 else (64, 128) if dtype in dtypes.HALVES else ()):
        return False
    cores = dev.platform.matrix_cores(dev.arch)
    return cores is not None and not (cores == "wmma" and dtype is dtypes.float32)


def _flash_operand(st: GpuStorage, layout: Layout, dp: int, mma: bool) -> Tuple[GpuStorage, Layout]:
    """(storage, layout) a flash kernel reads for a (b, h, t, d) operand: the view itself
    (any strides: transposed (b, t, h, d) views need no copy), or a contiguous copy where the
    matrix-core kernels' 16-byte tile loads (mma_load_tile, d == dp) could not take its rows:
    rows not contiguous, or a row/head/batch stride or offset off 16 bytes. The kernel
    checks the same per tile and falls back to element loads; deciding here keeps every
    tile of a large operand on the fast path for the price of one copy."""
    if not mma:
        return st, layout
    n, s = layout.shape, layout.strides
    ch = 16 // st.dtype.itemsize
    rows = n[3] <= 1 or s[3] == 1
    aligned = (layout.offset % ch == 0 and st.buffer.ptr % 16 == 0
               and all(m <= 1 or x % ch == 0 for m, x in zip(n[:3], s[:3])))
    if rows and (aligned or n[3] != dp):  # d < dp: element loads whatever the layout
        return st, layout
    return st._contiguous(layout)


def _in_sdpa_layout(out: GpuStorage, layout: Layout) -> GpuStorage:
    """A contiguous (b, h, t, d) result re-laid as the dense `layout` (sdpa_layout)."""
    if layout.is_contiguous():
        return out
    order = sorted(range(4), key=lambda i: -layout.strides[i])  # outermost first
    return out.to_dtype(Layout.contiguous(layout.shape).permute(order), out.dtype)


def _flash_unsupported(q, layout, k, k_layout, v, v_layout, op="sdpa"):
    cls = DTypeError if q.dtype not in (dtypes.float32, dtypes.float16, dtypes.bfloat16) else ShapeError
    raise storage_error(cls, op, "TENSORLITE_SDPA=flash: the flash kernels cover f32/f16/bf16 with head dims <= 128",
                        q=(q, layout), k=(k, k_layout), v=(v, v_layout))


def _check_sdpa(q, layout, k, k_layout, v, v_layout):
    hq, hk = layout.shape[1], k_layout.shape[1]
    if hk == 0 or hq % hk:
        raise storage_error(ShapeError, "sdpa", "query heads must be a multiple of key/value heads",
                            q=(q, layout), k=(k, k_layout), v=(v, v_layout))
    if k.dtype is not q.dtype or v.dtype is not q.dtype:
        raise unsupported_dtype("sdpa", q=(q, layout), k=(k, k_layout), v=(v, v_layout))


def _flash_shape(q, b, hq, hk, L, S, d, dv, scale, is_causal, mask, mask_layout):
    """(packed AttnShape, mask arguments) for the flash kernels."""
    kind, mview, mptr = 0, VIEW4.pack(0, 0, 0, 0, 0), 0
    if mask is not None:
        if mask.dtype is not dtypes.bool_ and mask.dtype is not q.dtype:
            mask, mask_layout = mask._contiguous(mask_layout, q.dtype)
        kind, mview, mptr = (1 if mask.dtype is dtypes.bool_ else 2), view4(mask_layout), mask.buffer.ptr
    shape = _ATTN_SHAPE.pack(b, hq, hk, L, S, d, dv, 0, int(bool(is_causal)), kind, scale)
    return shape, [("bytes", mview), ("ptr", mptr)]
