"""Elementwise kernels (unary.hip, binary.hip, where.hip, cast.hip): one thread per
output element over any strided or broadcast layouts (`pack_strided`)."""
from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING
import struct

from tensorlite import dtype as dtypes, fused_unary
from tensorlite.backend import CMP_OPS, UNARY_BACKWARD_OPS
from tensorlite.errors import ArgumentError
from tensorlite.layout import Layout

from ..kernel_table import ALL, FLOATS, binary_ops, kernel_for, unary_ops
from ..launch import BLOCK, STRIDED_BYTES, grid_for, pack_strided, table_blocks

if TYPE_CHECKING:
    from ..storage import GpuStorage

# the entry points of this family's kernel sources (kernel_table.py assembles every family's)
KERNELS = {
    "unary.hip": tuple(f"u{op}_{t}" for t in ALL for op in unary_ops(t))
    + tuple(f"affine_{t}" for t in ALL) + tuple(f"{op}_{t}" for op in ("powf", "elu") for t in FLOATS),
    "binary.hip": tuple(f"b{op}_{t}" for t in ALL for op in binary_ops(t))
    + tuple(f"{op}_{t}" for op in CMP_OPS for t in ALL),
    "where.hip": tuple(f"where_{t}" for t in ALL),
    "cast.hip": tuple(f"cast_{s}_{d}" for s in ALL for d in ALL)
    + tuple(f"cast_many_{s}_{d}" for s in FLOATS for d in FLOATS),
}

# the argument types of unary.hip / cast.hip's (n, L, in, out) and binary.hip's (n, La, Lb, a, b, out)
# entry points, as ArgLayout.signature_of gives them: GpuDevice.launch_values finds the plan by identity
_MAP_ARGS = ("int64", ("bytes", STRIDED_BYTES), "ptr", "ptr")
_MAP1_ARGS, _MAP2_ARGS = _MAP_ARGS + ("double",), _MAP_ARGS + ("double", "double")  # powf / elu, affine
_BINARY_ARGS = ("int64", ("bytes", STRIDED_BYTES), ("bytes", STRIDED_BYTES), "ptr", "ptr", "ptr")
_CAST_TENSORS, _CAST_CHUNK = 24, 4096             # TL_CAST_TENSORS, TL_CAST_CHUNK in cast.hip
_CAST_TABLE = struct.Struct(f"<{_CAST_TENSORS}q{_CAST_TENSORS + 1}q{2 * _CAST_TENSORS}Qi4x")  # struct CastTable


class ElementwiseOps:
    __slots__ = ()  # a mixin of GpuStorage (storage.py), which holds the data: self is a GpuStorage

    # ---- elementwise ----------------------------------------------------------------
    def _map(self, name: str, op: str, layout: Layout, signature=_MAP_ARGS, extra=(), out_dtype=None) -> "GpuStorage":
        """Launch an elementwise kernel `name(n, L, in, out, *extra)` of argument types `signature`."""
        dev = self.device
        kernel = dev.kernels.get(name) or kernel_for(dev, name, op, self=(self, layout))
        n = prod(layout.shape)
        out = self._new(n, out_dtype)
        if n:
            dev.launch_values(kernel, grid_for(dev, n), BLOCK, signature,
                              (n, pack_strided(layout)[0], self.buffer.ptr, out.buffer.ptr, *extra))
        return out

    def affine(self, layout, mul, add):
        return self._map(f"affine_{self.dtype.short}", "affine", layout, _MAP2_ARGS, (float(mul), float(add)))

    def powf(self, layout, e):
        return self._map(f"powf_{self.dtype.short}", "powf", layout, _MAP1_ARGS, (float(e),))

    def elu(self, layout, alpha):
        return self._map(f"elu_{self.dtype.short}", "elu", layout, _MAP1_ARGS, (float(alpha),))

    def unary_impl(self, op, layout):
        return self._map(f"u{op}_{self.dtype.short}", op, layout)

    def _binary(self, name: str, op: str, rhs, lhs_layout, rhs_layout, out_dtype=None):
        dev = self.device
        kernel = dev.kernels.get(name) or kernel_for(dev, name, op, lhs=(self, lhs_layout), rhs=(rhs, rhs_layout))
        n = prod(lhs_layout.shape)
        out = self._new(n, out_dtype)
        if n:
            la, lb = pack_strided(lhs_layout, rhs_layout)
            dev.launch_values(kernel, grid_for(dev, n), BLOCK, _BINARY_ARGS,
                              (n, la, lb, self.buffer.ptr, rhs.buffer.ptr, out.buffer.ptr))
        return out

    def binary_impl(self, op, rhs, lhs_layout, rhs_layout):
        return self._binary(f"b{op}_{self.dtype.short}", op, rhs, lhs_layout, rhs_layout)

    def cmp(self, op, rhs, lhs_layout, rhs_layout):
        return self._binary(f"{op}_{self.dtype.short}", op, rhs, lhs_layout, rhs_layout, dtypes.bool_)

    def where_cond(self, layout, t, t_layout, f, f_layout):
        cond, layout = (self, layout) if self.dtype is dtypes.bool_ else self._contiguous(layout, dtypes.bool_)
        dev = self.device
        kernel = kernel_for(dev, f"where_{t.dtype.short}", "where_cond", cond=(self, layout),
                            on_true=(t, t_layout), on_false=(f, f_layout))
        n = layout.numel()
        out = t._new(n)
        if n:
            lc, lt, lf = pack_strided(layout, t_layout, f_layout)
            dev.launch(kernel, grid_for(dev, n), BLOCK,
                       [("int64", n), ("bytes", lc), ("bytes", lt), ("bytes", lf), ("ptr", cond.buffer.ptr),
                        ("ptr", t.buffer.ptr), ("ptr", f.buffer.ptr), ("ptr", out.buffer.ptr)])
        return out

    def to_dtype(self, layout, dtype):
        dtype = dtypes.get(dtype)
        n = layout.numel()
        if dtype is self.dtype and layout.is_contiguous():
            out = self._new(n)
            self.device.dtod(out.buffer.ptr, self.addr(layout.offset), n * dtype.itemsize)
            return out
        return self._map(f"cast_{self.dtype.short}_{dtype.short}", "to_dtype", layout, out_dtype=dtype)

    @classmethod
    def to_dtype_many(cls, items, dtype):
        # contiguous, non-empty float tensors of one device and source dtype go by cast_many
        # (_CAST_TENSORS per launch); the rest one by one
        dtype = dtypes.get(dtype)
        out, batches = [None] * len(items), {}
        for i, (st, layout) in enumerate(items):
            n = layout.numel()
            if dtype.is_floating_point and st.dtype.is_floating_point and n and layout.is_contiguous():
                res = out[i] = st._new(n, dtype)
                batches.setdefault((st.device, st.dtype), []).append((st.addr(layout.offset), res.buffer.ptr, n))
            else:
                out[i] = st.to_dtype(layout, dtype)
        for (dev, src), batch in batches.items():
            _cast_many(dev, src, dtype, batch)
        return out

    def copy_runs(self, runs):
        # float runs of this dtype and device: cast_many's tables (a cast to the same dtype
        # copies), _CAST_TENSORS runs a launch; the rest one by one
        batch, rest = [], []
        for src, src_offset, dst_offset, n in runs:
            if n and src.dtype is self.dtype and self.dtype.is_floating_point and src.device is self.device:
                batch.append((src.addr(src_offset), self.addr(dst_offset), n))
            else:
                rest.append((src, src_offset, dst_offset, n))
        super().copy_runs(rest)  # the contract's: a copy2d each
        if batch:
            self.value_range = None  # what copy2d keeps for index tensors; floats have none
            _cast_many(self.device, self.dtype, self.dtype, batch)

    def unary_backward(self, op, layout, grad, grad_layout):
        if op not in UNARY_BACKWARD_OPS:
            raise ArgumentError(f"unary_backward: op must be one of {sorted(UNARY_BACKWARD_OPS)}, got {op!r}")
        self._check_grad(f"{op}_backward", layout, grad, grad_layout)
        kernel = fused_unary.BY_NAME[op].backward_kernel
        return self._binary(f"{kernel}_{self.dtype.short}", f"{op}_backward", grad, layout, grad_layout)


def _cast_many(dev, src, dst, batch) -> None:
    """cast_many_<src>_<dst> over batch = [(source address, destination address, count), ...]
    (contiguous runs, counts > 0), _CAST_TENSORS runs a launch."""
    kernel = kernel_for(dev, f"cast_many_{src.short}_{dst.short}", "to_dtype")
    for j in range(0, len(batch), _CAST_TENSORS):
        chunk = batch[j:j + _CAST_TENSORS]
        pad = [0] * (_CAST_TENSORS - len(chunk))
        sizes = [n for _, _, n in chunk]
        first = table_blocks(sizes, _CAST_CHUNK)
        table = _CAST_TABLE.pack(*sizes, *pad, *first, *pad, *(a for a, _, _ in chunk), *pad,
                                 *(b for _, b, _ in chunk), *pad, len(chunk))
        dev.launch(kernel, grid_for(dev, first[-1], 1), BLOCK, [("bytes", table)])
