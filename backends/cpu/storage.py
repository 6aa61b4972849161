"""CpuStorage: a flat 1-D numpy array (`data`) of one tensorlite dtype, and what every op shares:
reading operands through their layouts, wrapping results, copies. The ops are mixins, one
module per op family (see __init__.py)."""
from __future__ import annotations

from typing import TYPE_CHECKING
import math

import numpy as np

from tensorlite import dtype as dtypes
from tensorlite.backend import BackendStorage
from tensorlite.dtype import cast_array
from tensorlite.errors import DTypeError, ShapeError, storage_error, unsupported_dtype
from tensorlite.layout import Layout

from .attention import AttentionOps
from .common import F32, HALF_TYPES, strided
from .conv import ConvOps
from .elementwise import ElementwiseOps
from .fused import FusedOps
from .index import IndexOps
from .matmul import MatmulOps
from .reduce import ReduceOps
from .sort import SortOps

if TYPE_CHECKING:
    from .device import CpuDevice


class CpuStorage(ElementwiseOps, ReduceOps, SortOps, IndexOps, MatmulOps, ConvOps, FusedOps, AttentionOps,
                 BackendStorage):
    __slots__ = ("data", "dtype", "device")

    def __init__(self, data: np.ndarray, dtype, device: "CpuDevice"):
        self.data, self.dtype, self.device = data, dtype, device

    def __repr__(self):
        return f"CpuStorage({self.data.size} x {self.dtype.name})"

    def addr(self, offset):
        return self.data.ctypes.data + offset * self.dtype.itemsize

    # ---- plumbing ---------------------------------------------------------------------
    def _read(self, layout: Layout, compute: bool = False) -> np.ndarray:
        """Read-only view through layout; `compute` upcasts f16/bf16 to f32 (a copy)."""
        v = strided(self.data, layout)
        try:
            return v.astype(F32) if compute and self.dtype in HALF_TYPES else v
        except MemoryError:
            raise self.device._oom(layout.shape, dtypes.float32) from None

    def _whole(self, layout: Layout):
        """self.data itself where `layout` reads all of it in order (most operands: an op's output)
        and computes in its own dtype, else None. A ufunc's operand needs no view then, and a
        result of such operands is already the flat array a storage holds: no reshape either way."""
        data = self.data
        if layout.offset == 0 and data.size == math.prod(layout.shape) and layout.is_contiguous() and \
                self.dtype not in HALF_TYPES:
            return data
        return None

    def _operand(self, layout: Layout, flat: bool = False) -> np.ndarray:
        """The operand of a function that never writes it (a ufunc, a reduction, the op table's
        rows: tests/test_cpu_fast_paths.py): self.data itself where _whole gives it, flat or shaped
        as the layout (a plain view: the read-only flag costs a tiny op 0.3 us), else _read's view."""
        x = self._whole(layout)
        if x is None:
            return self._read(layout, compute=True)
        return x if flat else x.reshape(layout.shape)

    def _new(self, arr: np.ndarray, dtype=None) -> "CpuStorage":
        """Wrap a result: cast to dtype (default self's), C-contiguous, flattened."""
        dtype = self.dtype if dtype is None else dtype
        if type(arr) is np.ndarray and arr.ndim == 1 and arr.dtype == dtype.np and arr.flags.c_contiguous:
            return CpuStorage(arr, dtype, self.device)  # a ufunc's result over _whole operands
        try:
            return CpuStorage(np.ascontiguousarray(cast_array(np.asarray(arr), dtype)).reshape(-1),
                              dtype, self.device)
        except MemoryError:
            raise self.device._oom(np.shape(arr), dtype) from None

    def _new_in(self, arr: np.ndarray, layout: Layout) -> "CpuStorage":
        """Wrap a result of layout.shape stored as the dense (non-contiguous) `layout` says."""
        order = sorted(range(arr.ndim), key=lambda i: -layout.strides[i])  # outermost first
        return self._new(np.transpose(arr, order))

    def _require_float(self, op, layout):
        if not self.dtype.is_floating_point:
            raise unsupported_dtype(op, self=(self, layout))

    def _float_read(self, op, layout):
        self._require_float(op, layout)
        return self._read(layout, compute=True)

    def _grad_read(self, op, layout, grad, grad_layout):
        """(x, grad) in the compute dtype; grad must have self's dtype and layout's shape."""
        x = self._float_read(op, layout)
        if grad.dtype is not self.dtype or tuple(grad_layout.shape) != tuple(layout.shape):
            raise storage_error(DTypeError if grad.dtype is not self.dtype else ShapeError, op,
                                "grad must have the input's shape and dtype", self=(self, layout),
                                grad=(grad, grad_layout))
        return x, grad._read(grad_layout, compute=True)

    # ---- copies -----------------------------------------------------------------------
    def copy_strided_src(self, dst, dst_offset, src_layout):
        n = src_layout.numel()
        dst.data[dst_offset:dst_offset + n] = cast_array(self._read(src_layout), dst.dtype).reshape(-1)

    def copy2d(self, dst, d1, d2, src_stride1, dst_stride1, src_offset, dst_offset):
        src = self._read(Layout((d1, d2), (src_stride1, 1), src_offset))
        strided(dst.data, Layout((d1, d2), (dst_stride1, 1), dst_offset), writeable=True)[...] = \
            cast_array(src, dst.dtype)

    def const_set(self, value, layout):
        strided(self.data, layout, writeable=True)[...] = cast_array(np.asarray(value), self.dtype)

    def to_cpu(self, layout):
        return np.array(self._read(layout), order="C", copy=True)
