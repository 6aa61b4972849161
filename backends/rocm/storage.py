"""GpuStorage: the storage contract (tensorlite.backend.BackendStorage) on a GPU.

Platform-agnostic: the same code drives the `rocm` and `cuda` platforms through the
GpuDevice API (alloc, htod/dtoh/dtod, memset, function, launch, blas). Every op enqueues
work on the device's stream and returns at once; only reading data back (`to_cpu`) and
the index ops' out-of-range check wait for the device.

Kernels: `KERNELS` below is the single table of entry points, per source in kernels/.
Dispatch looks names up there (a dtype a kernel does not support raises DTypeError
naming the op and operands, like the cpu reference), and tests/test_kernels_gfx90a.py
checks that every name in it is compiled into the code object.

Layouts travel by value: `_pack_strided` packs the C struct `Strided` of compat.h
(offset, ndim, contiguous flag, shape and strides innermost-first) after merging dims
that are contiguous with each other in every operand, so most strided views reach the
kernel with one or two dims; contiguous operands take the kernels' fast path.

Semantics follow the cpu backend (the reference), including its numerics notes:
f16/bf16 compute in f32 and round once, integers wrap, float->int truncates, matmul of
integers accumulates exactly (mod 2^bits), sdpa gives zeros for fully masked rows.
"""
from __future__ import annotations

import math
import os
import struct
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from tensorlite import dtype as dtypes
from tensorlite.backend import (BINARY_OPS, CMP_OPS, REDUCE_OPS, UNARY_BACKWARD_OPS, UNARY_OPS, BackendStorage,
                                ConvParams, PoolParams, adam_bias_corrections, adam_state_dtype, batch_of_one,
                                check_cross_entropy, sdpa_layout, sdpa_mode)
from tensorlite.dtype import cast_array  # the host-side casts of scalars, as the cpu backend's
from tensorlite.errors import DTypeError, IndexOutOfRange, ShapeError, storage_error, unsupported_dtype
from tensorlite.layout import Layout, contiguous_strides

from .dnn import bn_param_dtype as _bn_param_dtype, dnn_for as _dnn_for, run as _dnn_run

# =====================================================================================
# The kernel table: source file -> entry points (the single source of truth)
# =====================================================================================

ALL = tuple(d.short for d in dtypes.ALL)           # f32 f16 bf16 f64 u8 u32 i64 bool
FLOATS = tuple(d.short for d in dtypes.FLOATS)
NONFLOATS = tuple(d.short for d in dtypes.ALL if not d.is_floating_point)
IDS = ("i64", "u32", "u8")                          # index dtypes the contract allows

_UNARY_BOOL = ("abs", "sqr", "sign", "relu", "floor", "ceil", "round")
_BINARY_BOOL = ("add", "mul", "maximum", "minimum")


def _unary_ops(t: str) -> Tuple[str, ...]:
    if t in FLOATS:
        return UNARY_OPS
    return _UNARY_BOOL + (("neg",) if t != "bool" else ())


def _binary_ops(t: str) -> Tuple[str, ...]:
    if t in FLOATS:
        return BINARY_OPS
    return _BINARY_BOOL + (("sub",) if t != "bool" else ())


KERNELS: Dict[str, Tuple[str, ...]] = {
    "unary.hip": tuple(f"u{op}_{t}" for t in ALL for op in _unary_ops(t))
    + tuple(f"affine_{t}" for t in ALL) + tuple(f"{op}_{t}" for op in ("powf", "elu") for t in FLOATS),
    "binary.hip": tuple(f"b{op}_{t}" for t in ALL for op in _binary_ops(t))
    + tuple(f"{op}_{t}" for op in CMP_OPS for t in ALL),
    "where.hip": tuple(f"where_{t}" for t in ALL),
    "cast.hip": tuple(f"cast_{s}_{d}" for s in ALL for d in ALL)
    + tuple(f"cast_many_{s}_{d}" for s in FLOATS for d in FLOATS),
    "reduce.hip": tuple(f"reduce_{op}_{t}" for op in REDUCE_OPS for t in ALL),
    "index.hip": tuple(f"{op}_{i}_{t}" for op in ("index_select", "gather", "scatter_add", "index_add")
                       for i in IDS for t in ALL),
    "copy.hip": tuple(f"{op}_{t}" for op in ("copy2d", "const_set") for t in ALL),
    "conv.hip": tuple(f"{op}_{t}" for op in ("im2col", "col2im", "max_pool2d", "avg_pool2d",
                                              "upsample_nearest2d") for t in ALL)
    + tuple(f"gemm_{t}" for t in ALL),
    "random.hip": tuple(f"rand_{kind}_{t}" for kind in ("uniform", "normal") for t in FLOATS),
    "fused.hip": tuple(f"{op}_{t}" for op in ("softmax", "log_softmax", "layer_norm", "rms_norm", "rope",
                                               "rope_i", "rope_thd", "attn_softmax") for t in FLOATS),
    "fused_grad.hip": tuple(f"{op}_{t}" for op in ("softmax_bwd", "log_softmax_bwd", "layer_norm_bwd", "rms_norm_bwd",
                                                    "layer_norm_bwd_fit", "rms_norm_bwd_fit",
                                                    "layer_norm_bwd_fit_vec", "rms_norm_bwd_fit_vec",
                                                    "norm_wgrad", "norm_wgrad_finish", "cross_entropy_fwd",
                                                    "cross_entropy_bwd", "gelu_bwd", "gelu_erf_bwd", "silu_bwd",
                                                    "adamw", "adamw_many") for t in FLOATS),
    "attention.hip": tuple(f"flash_{op}{dp}_{t}" for op in ("fwd", "bwd") for dp in (32, 64, 128)
                           for t in ("f32", "f16", "bf16"))
    + tuple(f"flash_bwd_pre_{t}" for t in ("f32", "f16", "bf16"))
    + tuple(f"flash_{op}_mma{dp}_{t}" for op in ("fwd", "bwd") for dp in (64, 128) for t in ("f16", "bf16"))
    + tuple(f"flash_{op}_wg{dp}_{t}" for op in ("fwd", "bwd") for dp in (64, 128) for t in ("f16", "bf16")),
}
_SOURCE_OF = {name: src for src, names in KERNELS.items() for name in names}


def _kernel(dev, name: str, op: str, **operands):
    """The kernel handle for entry point `name`, or DTypeError (naming `op` and the
    operands, given as name=(storage, layout)) when the table has no such instantiation."""
    source = _SOURCE_OF.get(name)
    if source is None:
        raise unsupported_dtype(op, **operands)
    return dev.function(source, name)


# =====================================================================================
# Launch geometry and argument packing
# =====================================================================================

_BLOCK = 256
_MAX_DIMS = 8                                    # TL_MAX_DIMS in compat.h
_STRIDED = struct.Struct("<qii8q8q")             # struct Strided (144 bytes)
_STRIDED_HEAD = struct.Struct("<qii")
_CONTIG_TAIL = bytes(_STRIDED.size - _STRIDED_HEAD.size)
_GEOM2D = struct.Struct("<14q")                  # struct Geom2d of conv.hip
_VIEW4 = struct.Struct("<5q")                    # struct View4
_VIEW3 = struct.Struct("<4q")                    # struct View3
_MAX_REDUCE_STATE = 16                           # bytes of the largest partial state in reduce.hip
_PACK_CACHE: Dict[tuple, Tuple[bytes, ...]] = {}
_CONTIG_PACKS: Dict[int, bytes] = {}
_ADAM_TENSORS, _ADAM_CHUNK = 24, 2048             # TL_ADAM_TENSORS, TL_ADAM_CHUNK in fused_grad.hip
_CAST_TENSORS, _CAST_CHUNK = 24, 4096             # TL_CAST_TENSORS, TL_CAST_CHUNK in cast.hip
_CAST_TABLE = struct.Struct(f"<{_CAST_TENSORS}q{_CAST_TENSORS + 1}q{2 * _CAST_TENSORS}Qi4x")  # struct CastTable
# struct AdamTable: n[24], first_block[25], p, g, m, v [24] each, int count (+4 bytes padding)
_ADAM_TABLE = struct.Struct(f"<{_ADAM_TENSORS}q{_ADAM_TENSORS + 1}q{4 * _ADAM_TENSORS}Qi4x")
_TILE_UNITS = 8                                  # vectors per thread the RowTile kernels are sized for
_NORM_FIT_THREADS = 256                          # TL_NORM_FIT_THREADS in fused_grad.hip: block size
_COL_BLOCK = (8, 32)                             # reduce_cols: TL_COL_X units x 32 (TL_COL_THREADS in all)
_COL_UNROLL = 4                                  # TL_COL_UNROLL in reduce.hip: rows in flight per thread
_COL_MAX = (1 << 31) - 4096                      # reduce_cols: u32 counts below this


def _on_device(dev, name: str, make):
    """dev's own value `name`, made once by make(dev) and kept on the device object itself:
    a table keyed by id(dev) would hand a freed device's value to a new one reusing the id."""
    try:
        return getattr(dev, name)
    except AttributeError:
        value = make(dev)
        setattr(dev, name, value)
        return value


def _sm_count(dev) -> int:
    """Multiprocessors (CUs) of `dev`."""
    return _on_device(dev, "_tl_sm_count", lambda d: int(d.props.get("multiprocessor_count") or 80))


def _grid(dev, work_items: int, per_block: int = _BLOCK) -> int:
    """Blocks for a grid-stride loop: enough to fill the GPU, never 0."""
    cap = 16 * _sm_count(dev)
    blocks = -(-work_items // per_block)
    return blocks if 0 < blocks <= cap else (cap if blocks > 0 else 1)


def _coalesce(shape: Sequence[int], strides_list: Sequence[Sequence[int]]):
    """Drop size-1 dims and merge neighbours that are contiguous with each other in every
    layout. Returns (shape, [strides per layout]), both innermost-first."""
    out_shape, out_strides = [], [[] for _ in strides_list]
    for d, n in enumerate(shape):
        if n == 1:
            continue
        ss = [s[d] for s in strides_list]
        if out_shape and all(prev[-1] == n * s for prev, s in zip(out_strides, ss)):
            out_shape[-1] *= n
            for prev, s in zip(out_strides, ss):
                prev[-1] = s
        else:
            out_shape.append(n)
            for prev, s in zip(out_strides, ss):
                prev.append(s)
    out_shape.reverse()
    for s in out_strides:
        s.reverse()
    return out_shape, out_strides


def _pack_contiguous(offset: int) -> bytes:
    packed = _CONTIG_PACKS.get(offset)
    if packed is None:
        if len(_CONTIG_PACKS) > 4096:
            _CONTIG_PACKS.clear()
        packed = _CONTIG_PACKS[offset] = _STRIDED_HEAD.pack(offset, 0, 1) + _CONTIG_TAIL
    return packed


def _pack_strided(*layouts: Layout) -> Tuple[bytes, ...]:
    """`Strided` structs for layouts of one shape (their iteration order is shared)."""
    packs = []
    for lay in layouts:
        if not lay.is_contiguous():  # a Layout computes it once (output layouts are shared per shape)
            break
        packed = _CONTIG_PACKS.get(lay.offset)
        packs.append(packed if packed is not None else _pack_contiguous(lay.offset))
    else:  # the hot path: nothing to merge
        return tuple(packs)
    key = tuple([(lay.shape, lay.strides, lay.offset) for lay in layouts])
    packed = _PACK_CACHE.get(key)
    if packed is not None:
        return packed
    shape, strides = _coalesce(layouts[0].shape, [lay.strides for lay in layouts])
    if len(shape) > _MAX_DIMS:
        raise ShapeError(f"layout {layouts[0]} has {len(shape)} dims that cannot be merged; "
                         f"GPU kernels take at most {_MAX_DIMS}")
    pad = [0] * (_MAX_DIMS - len(shape))
    packed = tuple(_STRIDED.pack(lay.offset, len(shape), int(lay.is_contiguous()), *shape, *pad, *s, *pad)
                   for lay, s in zip(layouts, strides))
    if len(_PACK_CACHE) > 4096:
        _PACK_CACHE.clear()
    _PACK_CACHE[key] = packed
    return packed


def _view4(layout: Layout) -> bytes:
    return _VIEW4.pack(layout.offset, *layout.strides)


def _norm_fit_cols(dtype) -> int:
    """Elements of a row per thread in norm_bwd_fit (NormFit::S in fused_grad.hip)."""
    return 8 if dtype.itemsize == 8 else 16


def _norm_fit_blocks(dtype, vec: bool) -> int:
    """Resident blocks per SM that norm_bwd_fit's launch bounds keep (TL_NORM_FIT_VEC_BLOCKS)."""
    return (2 if dtype.itemsize == 8 else 3) if vec else 1


def _rows_vectorized(st, outer: Layout, inner: int, row_len: int) -> bool:
    """Every row of `st` under (outer, inner) is contiguous, 16-byte aligned and whole
    16-byte vectors (what norm_bwd_fit's Vec variant assumes without checking)."""
    n = 16 // st.dtype.itemsize
    return (inner == 1 and row_len % n == 0 and st._addr(outer.offset) % 16 == 0
            and all(s % n == 0 for d, s in zip(outer.shape, outer.strides) if d > 1))


def _row_block(dev, n_rows: int, row_len: int, max_threads: int = 1024, fit: bool = False) -> Tuple[int, int]:
    """(threads per row, rows per block) for the row kernels (see compat.h,
    tl_row_allreduce), at most `max_threads` per block. `fit`: as many threads as a row
    of `row_len` units needs (up to max_threads), even where many rows would get fewer."""
    sms = _sm_count(dev)
    cap = 1024 if n_rows <= sms else (256 if n_rows <= 16 * sms else 128)
    if fit:
        cap = max(cap, 1 << (row_len - 1).bit_length())
    cap = min(cap, max_threads)
    tpr = 1
    while tpr < row_len and 2 * tpr <= cap:
        tpr *= 2
    if tpr > dev.warp_size:
        return tpr, 1
    return tpr, max(1, min(_BLOCK, max_threads) // tpr)


def _row_vector(dtype, row_len: int, inner_stride: int) -> int:
    """Elements per 16-byte vector where fused.hip's RowRegs can hold rows by vectors
    (the kernel also checks alignment), else 1."""
    n = 16 // dtype.itemsize
    return n if inner_stride == 1 and row_len % n == 0 else 1


def _row_vectors(vector: int) -> int:
    """Vectors per thread that fused.hip's RowRegs holds (RowRegs::V): 8 for 16-bit types
    (vectors of 8 elements), else 4."""
    return 8 if vector == 8 else 4


def _launch_rows(dev, kernel, n_rows: int, row_len: int, args, vector: int = 1, held: bool = False):
    """`vector` > 1: the kernel reads the rows by vectors of that many elements. `held`: it
    holds a row in registers, _row_vectors(vector) vectors per thread (fused.hip RowRegs), so a row
    gets the threads to hold it whole, past _row_block's usual cap where needed (a row that
    does not fit is read three times); else it streams _TILE_UNITS vectors per thread
    (rows.h RowTile). Fewer threads per row leave room for more rows in flight. Blocks stay
    within the kernel's own limit (its registers can lower the device's)."""
    held = held and vector > 1
    units = -(-row_len // (vector * (_row_vectors(vector) if held else _TILE_UNITS))) if vector > 1 else row_len
    tpr, rpb = _row_block(dev, n_rows, units, kernel.max_threads, fit=held)
    # small blocks: enough of them to fill each multiprocessor's 2048 threads
    grid = min(-(-n_rows // rpb), _sm_count(dev) * max(16, 2048 // (tpr * rpb)))
    dev.launch(kernel, grid, (tpr, rpb), args)


def _table_blocks(sizes, chunk: int) -> list:
    """first_block of a multi-tensor table (adamw_many, cast_many; compat.h
    tl_table_tensor): block b works on `chunk` elements of tensor t for
    first_block[t] <= b < first_block[t + 1]."""
    first = [0]
    for n in sizes:
        first.append(first[-1] + -(-n // chunk))
    return first


def _range_union(a, b):
    """The bound of two GpuStorage.value_range's (None: unknown)."""
    return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))


def _ids_known_in_range(ids, size: int) -> bool:
    """Whether the host knows every value of `ids` (any view of it) lies in [0, size)."""
    r = ids.value_range
    return r is not None and r[0] >= 0 and r[1] < size


def _ptr(st) -> int:
    """The device address of a storage's buffer, or 0 (a null pointer) for None."""
    return 0 if st is None else st.buffer.ptr


def _tile_vector(dtype, inner_stride: int) -> int:
    """Row geometry of the RowTile kernels (kernels/rows.h: cross_entropy, long-row norm
    backward): contiguous rows go by 16-byte vectors (any length or alignment: the rest
    element by element)."""
    return 16 // dtype.itemsize if inner_stride == 1 else 1


def _rows_of(layout: Layout) -> Tuple[int, int, Layout, int]:
    """(n_rows, row_len, outer layout addressing each row's start, stride along rows) for
    the last dim of `layout` (a 0-d layout is one row of one element)."""
    if layout.ndim == 0:
        return 1, 1, Layout((1,), (1,), layout.offset), 1
    shape, strides = layout.shape, layout.strides
    outer = Layout(shape[:-1], strides[:-1], layout.offset)
    return outer.numel(), shape[-1], outer, strides[-1]


# =====================================================================================
# Storage
# =====================================================================================

class GpuStorage(BackendStorage):
    """`numel` elements of `dtype` in `buffer` (a device.Buffer) on `device`.

    `value_range`: (min, max) bounding every stored value where the host knows it without
    reading the device (integer data uploaded from the host, and copies of it), else None.
    Every write into the storage keeps it a bound or forgets it. The index ops and
    cross_entropy use it to skip their blocking error-flag read when it proves every id in
    range (their kernels check each id anyway and never touch memory out of range)."""
    __slots__ = ("device", "buffer", "dtype", "numel", "value_range")

    def __init__(self, device, buffer, dtype, numel: int):
        self.device, self.buffer, self.numel = device, buffer, numel
        self.dtype = dtype if isinstance(dtype, dtypes.DType) else dtypes.get(dtype)
        self.value_range = None

    def __repr__(self):
        return f"GpuStorage({self.numel} x {self.dtype.name} on {self.device})"

    @property
    def ptr(self) -> int:
        return self.buffer.ptr

    def _addr(self, offset: int) -> int:
        """Device address of element `offset`."""
        return self.buffer.ptr + offset * self.dtype.itemsize

    def _new(self, numel: int, dtype=None) -> "GpuStorage":
        dtype = self.dtype if dtype is None else dtype
        return GpuStorage(self.device, self.device.alloc(numel * dtype.itemsize), dtype, numel)

    def _contiguous(self, layout: Layout, dtype=None) -> Tuple["GpuStorage", Layout]:
        """(storage, layout) of `layout`'s elements in row-major order, in `dtype`; self
        without a copy when that is already the case."""
        dtype = self.dtype if dtype is None else dtype
        if dtype is self.dtype and layout.is_contiguous():
            return self, layout
        return self.to_dtype(layout, dtype), Layout.contiguous(layout.shape)

    # ---- elementwise ----------------------------------------------------------------
    def _map(self, name: str, op: str, layout: Layout, extra=(), out_dtype=None) -> "GpuStorage":
        """Launch an elementwise kernel `name(n, L, in, out, *extra)`."""
        dev = self.device
        kernel = _kernel(dev, name, op, self=(self, layout))
        n = layout.numel()
        out = self._new(n, out_dtype)
        if n:
            dev.launch(kernel, _grid(dev, n), _BLOCK,
                       [("int64", n), ("bytes", _pack_strided(layout)[0]), ("ptr", self.buffer.ptr),
                        ("ptr", out.buffer.ptr), *extra])
        return out

    def affine(self, layout, mul, add):
        return self._map(f"affine_{self.dtype.short}", "affine", layout,
                         (("double", float(mul)), ("double", float(add))))

    def powf(self, layout, e):
        return self._map(f"powf_{self.dtype.short}", "powf", layout, (("double", float(e)),))

    def elu(self, layout, alpha):
        return self._map(f"elu_{self.dtype.short}", "elu", layout, (("double", float(alpha)),))

    def unary_impl(self, op, layout):
        return self._map(f"u{op}_{self.dtype.short}", op, layout)

    def _binary(self, name: str, op: str, rhs, lhs_layout, rhs_layout, out_dtype=None):
        dev = self.device
        kernel = _kernel(dev, name, op, lhs=(self, lhs_layout), rhs=(rhs, rhs_layout))
        n = lhs_layout.numel()
        out = self._new(n, out_dtype)
        if n:
            la, lb = _pack_strided(lhs_layout, rhs_layout)
            dev.launch(kernel, _grid(dev, n), _BLOCK,
                       [("int64", n), ("bytes", la), ("bytes", lb), ("ptr", self.buffer.ptr),
                        ("ptr", rhs.buffer.ptr), ("ptr", out.buffer.ptr)])
        return out

    def binary_impl(self, op, rhs, lhs_layout, rhs_layout):
        return self._binary(f"b{op}_{self.dtype.short}", op, rhs, lhs_layout, rhs_layout)

    def cmp(self, op, rhs, lhs_layout, rhs_layout):
        return self._binary(f"{op}_{self.dtype.short}", op, rhs, lhs_layout, rhs_layout, dtypes.bool_)

    def where_cond(self, layout, t, t_layout, f, f_layout):
        cond, layout = (self, layout) if self.dtype is dtypes.bool_ else self._contiguous(layout, dtypes.bool_)
        dev = self.device
        kernel = _kernel(dev, f"where_{t.dtype.short}", "where_cond", cond=(self, layout),
                         on_true=(t, t_layout), on_false=(f, f_layout))
        n = layout.numel()
        out = t._new(n)
        if n:
            lc, lt, lf = _pack_strided(layout, t_layout, f_layout)
            dev.launch(kernel, _grid(dev, n), _BLOCK,
                       [("int64", n), ("bytes", lc), ("bytes", lt), ("bytes", lf), ("ptr", cond.buffer.ptr),
                        ("ptr", t.buffer.ptr), ("ptr", f.buffer.ptr), ("ptr", out.buffer.ptr)])
        return out

    def to_dtype(self, layout, dtype):
        dtype = dtypes.get(dtype)
        n = layout.numel()
        if dtype is self.dtype and layout.is_contiguous():
            out = self._new(n)
            self.device.dtod(out.buffer.ptr, self._addr(layout.offset), n * dtype.itemsize)
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
                batches.setdefault((st.device, st.dtype), []).append((i, st, st._addr(layout.offset), n))
            else:
                out[i] = st.to_dtype(layout, dtype)
        for (dev, src), batch in batches.items():
            kernel = _kernel(dev, f"cast_many_{src.short}_{dtype.short}", "to_dtype")
            for j in range(0, len(batch), _CAST_TENSORS):
                chunk = batch[j:j + _CAST_TENSORS]
                pad = [0] * (_CAST_TENSORS - len(chunk))
                sizes, srcs, dsts = [], [], []
                for i, st, addr, n in chunk:
                    res = out[i] = st._new(n, dtype)
                    sizes.append(n)
                    srcs.append(addr)
                    dsts.append(res.buffer.ptr)
                first = _table_blocks(sizes, _CAST_CHUNK)
                table = _CAST_TABLE.pack(*sizes, *pad, *first, *pad, *srcs, *pad, *dsts, *pad, len(chunk))
                dev.launch(kernel, _grid(dev, first[-1], 1), _BLOCK, [("bytes", table)])
        return out

    # ---- reductions -----------------------------------------------------------------
    def reduce_op(self, op, layout, dims):
        dims = tuple(sorted(dims))
        dev = self.device
        # the launch geometry depends on the shape, strides and dims only: planned once per
        # kind of call (a training step repeats the same few), the offset filled in per call
        plans = _reduce_plans(dev)
        key = (op, self.dtype, layout.shape, layout.strides, dims)
        plan = plans.get(key)
        if plan is None:
            plan = self._reduce_plan(op, layout, dims)
            if len(plans) > 1024:
                plans.clear()
            plans[key] = plan
        kernel, n_rows, row_len, outer_shape, outer_strides, launch = plan
        out = self._new(n_rows, dtypes.int64 if op in ("argmin", "argmax") else None)
        if launch is None:  # no rows
            return out
        inner_packed, columns, block, n_chunks, n_counters, n_tasks, n_states = launch
        args = [("int64", n_rows), ("int64", row_len),
                ("bytes", _pack_strided(Layout(outer_shape, outer_strides, layout.offset))[0]),
                ("bytes", inner_packed), ("ptr", self.buffer.ptr), ("ptr", out.buffer.ptr),
                ("int32", int(columns)), ("int64", n_chunks)]
        if n_chunks > 1:
            partials = dev.alloc(n_states * _MAX_REDUCE_STATE)
            dev.launch(kernel, _grid(dev, n_tasks, 1), block,
                       args + [("ptr", partials.ptr), ("ptr", _reduce_counters(dev, n_counters).ptr)])
        else:
            dev.launch(kernel, _grid(dev, -(-n_tasks // (1 if columns else block[1])), 1), block,
                       args + [("ptr", 0), ("ptr", 0)])
        return out

    def _reduce_plan(self, op, layout, dims):
        """reduce_op's checks and launch geometry for `layout`'s shape and strides: (kernel,
        n_rows, row_len, outer shape, outer strides, None when there are no rows, else
        (packed inner layout, columns, block, n_chunks, n_counters, n_tasks, n_states))."""
        shape = layout.shape
        if op != "sum" and any(shape[d] == 0 for d in dims):
            raise storage_error(ShapeError, op, f"cannot reduce over an empty dim (dims={dims})", self=(self, layout))
        if op in ("argmin", "argmax") and len(dims) != 1:
            raise storage_error(ShapeError, op, f"takes exactly one dim, got {dims}", self=(self, layout))
        dev = self.device
        kernel = _kernel(dev, f"reduce_{op}_{self.dtype.short}", op, self=(self, layout))
        kept = [d for d in range(len(shape)) if d not in dims]
        outer = Layout([shape[d] for d in kept], [layout.strides[d] for d in kept], 0)
        inner = Layout([shape[d] for d in dims], [layout.strides[d] for d in dims], 0)
        n_rows, row_len = outer.numel(), inner.numel()
        if n_rows == 0:
            return kernel, n_rows, row_len, outer.shape, outer.strides, None
        # Rows whose elements are farther apart than the rows themselves (e.g. a sum over
        # dim 0) go to reduce_cols: a thread takes neighbouring rows (output columns), a warp
        # neighbouring groups of them, so that it reads neighbouring addresses, and blocks
        # split the reduced range.
        inner_step = min((s for n, s in zip(inner.shape, inner.strides) if n > 1), default=1)
        outer_step = min((s for n, s in zip(outer.shape, outer.strides) if n > 1), default=0)
        columns = n_rows >= 64 and inner_step > 1 and outer_step < inner_step
        inner = inner.reshape((row_len,)) or inner  # one dim where the reduced dims merge: no div/mod per element
        if columns and (max(n_rows, row_len) >= _COL_MAX or
                        (inner.ndim > 1 and len(_coalesce(inner.shape, [inner.strides])[0]) > 2)):
            columns = False  # reduce_cols takes u32 counts and a reduced range of <= 2 dims
        sms = _sm_count(dev)
        if columns:
            # groups of bx units of `vec` neighbouring columns (TlWidth: one 16-byte load),
            # by threads along the reduced range (a multiple of vec), see reduce_cols
            vec = min(8, 16 // self.dtype.itemsize)
            n_units = -(-n_rows // vec)
            bx, by = _COL_BLOCK
            while by > 8 and by * _COL_UNROLL > row_len:  # short columns: fewer y threads ...
                by //= 2
            while bx * by < _COL_BLOCK[0] * _COL_BLOCK[1] and bx < n_units:  # ... and more units per block
                bx *= 2
            block = (bx, by)
            n_groups = -(-n_units // bx)
            # about 4 blocks per multiprocessor, each thread >= 2 x _COL_UNROLL rows
            n_chunks = max(1, min(-(-4 * sms // n_groups), row_len // (by * 2 * _COL_UNROLL)))
            n_counters, n_tasks, n_states = n_groups, n_groups * n_chunks, n_groups * n_chunks * bx * vec
        else:
            block = _row_block(dev, n_rows, row_len, kernel.max_threads)
            # Few long rows would leave most of the GPU idle: split each row over blocks.
            n_chunks = max(1, min(-(-2 * sms // n_rows), row_len // (block[0] * 8)))
            n_counters, n_tasks, n_states = n_rows, n_rows * n_chunks, n_rows * n_chunks
            if n_chunks > 1:
                block = (block[0], 1)
        return kernel, n_rows, row_len, outer.shape, outer.strides, (
            _pack_strided(inner)[0], columns, block, n_chunks, n_counters, n_tasks, n_states)

    # ---- indexing -------------------------------------------------------------------
    def _check_ids(self, op, ids, ids_layout, layout):
        if ids.dtype.short not in IDS:
            raise storage_error(DTypeError, op, "ids must be int64, uint32 or uint8",
                                self=(self, layout), ids=(ids, ids_layout))

    def _index_kernel(self, op, ids, layout, ids_layout):
        return _kernel(self.device, f"{op}_{ids.dtype.short}_{self.dtype.short}", op,
                       self=(self, layout), ids=(ids, ids_layout))

    def _run_checked(self, op, ids, ids_layout, size, layout, launch):
        """Run `launch(err_ptr)` (a kernel that flags out-of-range ids instead of touching
        memory), then wait for the flag and raise IndexOutOfRange naming the first bad id;
        no wait where the host knows the ids are in range (GpuStorage.value_range)."""
        dev = self.device
        flag = _error_flag(dev)
        if _ids_known_in_range(ids, size):  # nothing to wait for (GpuStorage.value_range)
            launch(flag.ptr)  # never flags; a reader resets the flag before its own launch
            return
        dev.memset(flag.ptr, 0, 4)
        launch(flag.ptr)
        host = np.zeros(1, np.int32)
        dev.dtoh(host, flag.ptr)
        if host[0]:
            idx = ids.to_cpu(ids_layout).astype(np.int64)
            bad = idx[(idx < 0) | (idx >= size)]
            raise storage_error(IndexOutOfRange, op, f"index {int(bad.flat[0])} is out of range for a dim of "
                                f"size {size}", self=(self, layout), ids=(ids, ids_layout))

    def _check_ids_on_host(self, op, ids, ids_layout, size, layout):
        """For an empty output (no kernel runs) the ids must still be in range."""
        if ids_layout.numel():
            idx = ids.to_cpu(ids_layout).astype(np.int64)
            bad = idx[(idx < 0) | (idx >= size)]
            if bad.size:
                raise storage_error(IndexOutOfRange, op, f"index {int(bad.flat[0])} is out of range for a dim "
                                    f"of size {size}", self=(self, layout), ids=(ids, ids_layout))

    def index_select(self, ids, layout, ids_layout, dim):
        self._check_ids("index_select", ids, ids_layout, layout)
        kernel = self._index_kernel("index_select", ids, layout, ids_layout)
        n_ids, size = ids_layout.numel(), layout.shape[dim]
        out_shape = layout.shape[:dim] + (n_ids,) + layout.shape[dim + 1:]
        n = math.prod(out_shape)
        out = self._new(n)
        if n == 0:
            self._check_ids_on_host("index_select", ids, ids_layout, size, layout)
            return out
        strides = list(layout.strides)
        dim_stride, strides[dim] = strides[dim], 0
        src_mod = Layout(out_shape, strides, layout.offset)
        ids_flat = Layout((n_ids,), (ids_layout.strides[0] if ids_layout.ndim else 0,), ids_layout.offset)
        (li,), (ls,) = _pack_strided(ids_flat), _pack_strided(src_mod)
        right = math.prod(out_shape[dim + 1:])
        dev = self.device
        self._run_checked("index_select", ids, ids_layout, size, layout, lambda err: dev.launch(
            kernel, _grid(dev, n), _BLOCK,
            [("int64", n), ("bytes", li), ("bytes", ls), ("int64", right), ("int64", n_ids), ("int64", size),
             ("int64", dim_stride), ("ptr", ids.buffer.ptr), ("ptr", self.buffer.ptr), ("ptr", out.buffer.ptr),
             ("ptr", err)]))
        return out

    def gather(self, layout, ids, ids_layout, dim):
        self._check_ids("gather", ids, ids_layout, layout)
        kernel = self._index_kernel("gather", ids, layout, ids_layout)
        size, n = layout.shape[dim], ids_layout.numel()
        out = self._new(n)
        if n == 0:
            return out
        strides = list(layout.strides)
        dim_stride, strides[dim] = strides[dim], 0
        # torch allows ids smaller than self in the other dims: only that corner is read
        src_mod = Layout(ids_layout.shape, strides, layout.offset)
        li, ls = _pack_strided(ids_layout, src_mod)
        dev = self.device
        self._run_checked("gather", ids, ids_layout, size, layout, lambda err: dev.launch(
            kernel, _grid(dev, n), _BLOCK,
            [("int64", n), ("bytes", li), ("bytes", ls), ("int64", size), ("int64", dim_stride),
             ("ptr", ids.buffer.ptr), ("ptr", self.buffer.ptr), ("ptr", out.buffer.ptr), ("ptr", err)]))
        return out

    def _accumulate(self, op, layout, ids, ids_layout, src, src_layout, dim, src_iter: Layout, ids_iter: Layout,
                    by_row: bool):
        """Shared body of scatter_add / index_add: a contiguous copy of self (in f32 for
        the half types), src added at the ids with atomics, cast back."""
        self._check_ids(op, ids, ids_layout, layout)
        if src.dtype is not self.dtype:
            raise storage_error(DTypeError, op, "src must have self's dtype", self=(self, layout),
                                src=(src, src_layout))
        kernel = self._index_kernel(op, ids, layout, ids_layout)
        half = self.dtype in (dtypes.float16, dtypes.bfloat16)
        acc = self.to_dtype(layout, dtypes.float32 if half else self.dtype)
        size, n = layout.shape[dim], src_iter.numel()
        if n == 0:
            self._check_ids_on_host(op, ids, ids_layout, size, layout)
        else:
            out_strides = list(contiguous_strides(layout.shape))
            dim_stride, out_strides[dim] = out_strides[dim], 0
            out_mod = Layout(src_iter.shape, out_strides, 0)
            dev = self.device
            if by_row:   # index_add: ids index dim `dim` of src
                right = math.prod(src_iter.shape[dim + 1:])
                (li,), (ls, lo) = _pack_strided(ids_iter), _pack_strided(src_iter, out_mod)
                shape_args = [("bytes", li), ("bytes", ls), ("bytes", lo), ("int64", right),
                              ("int64", ids_iter.numel())]
            else:        # scatter_add: ids and src share a shape
                li, ls, lo = _pack_strided(ids_iter, src_iter, out_mod)
                shape_args = [("bytes", li), ("bytes", ls), ("bytes", lo)]
            self._run_checked(op, ids, ids_layout, size, layout, lambda err: dev.launch(
                kernel, _grid(dev, n), _BLOCK,
                [("int64", n), *shape_args, ("int64", size), ("int64", dim_stride), ("ptr", ids.buffer.ptr),
                 ("ptr", src.buffer.ptr), ("ptr", acc.buffer.ptr), ("ptr", err)]))
        return acc.to_dtype(Layout.contiguous(layout.shape), self.dtype) if half else acc

    def scatter_add(self, layout, ids, ids_layout, src, src_layout, dim):
        # like torch, src may be larger than ids: only its leading corner is used
        src_iter = Layout(ids_layout.shape, src_layout.strides, src_layout.offset)
        return self._accumulate("scatter_add", layout, ids, ids_layout, src, src_layout, dim,
                                src_iter, ids_layout, by_row=False)

    def index_add(self, layout, ids, ids_layout, src, src_layout, dim):
        n_ids = ids_layout.numel()
        ids_flat = Layout((n_ids,), (ids_layout.strides[0] if ids_layout.ndim else 0,), ids_layout.offset)
        return self._accumulate("index_add", layout, ids, ids_layout, src, src_layout, dim,
                                src_layout, ids_flat, by_row=True)

    # ---- matmul ---------------------------------------------------------------------
    def matmul(self, rhs, bmnk, lhs_layout, rhs_layout):
        b, m, n, k = bmnk
        if lhs_layout.shape != (b, m, k) or rhs_layout.shape != (b, k, n):
            raise storage_error(ShapeError, "matmul", f"expected (b, m, k) x (b, k, n) for bmnk={bmnk}",
                                lhs=(self, lhs_layout), rhs=(rhs, rhs_layout))
        out = self._new(b * m * n)
        _gemm(self, lhs_layout, rhs, rhs_layout, out, 0, m * n, n, b, m, n, k)
        return out

    def matmul_add_bias(self, rhs, mnk, lhs_layout, rhs_layout, bias, bias_layout):
        m, n, k = mnk
        if self.device.blas.epilogues and bias.dtype is self.dtype is rhs.dtype and \
                self.dtype.is_floating_point and lhs_layout.shape == (m, k) and rhs_layout.shape == (k, n) and \
                bias_layout.shape == (n,) and bias_layout.offset == 0 and (n == 1 or bias_layout.strides[0] == 1):
            out = self._new(m * n)
            lhs, rhs_3d = batch_of_one(lhs_layout), batch_of_one(rhs_layout)
            if _gemm_epilogue(self, lhs, rhs, rhs_3d, out, m, n, k, bias, "bias"):
                return out
        return super().matmul_add_bias(rhs, mnk, lhs_layout, rhs_layout, bias, bias_layout)

    def matmul_row_sums(self, rhs, mnk, lhs_layout, rhs_layout):
        m, n, k = mnk
        if self.device.blas.epilogues and self.dtype is rhs.dtype and self.dtype.is_floating_point and \
                lhs_layout.shape == (m, k) and rhs_layout.shape == (k, n):
            out, sums = self._new(m * n), self._new(m)
            lhs, rhs_3d = batch_of_one(lhs_layout), batch_of_one(rhs_layout)
            if _gemm_epilogue(self, lhs, rhs, rhs_3d, out, m, n, k, sums, "bgradb"):
                return out, sums
        return super().matmul_row_sums(rhs, mnk, lhs_layout, rhs_layout)

    # ---- convolution, pooling, upsampling --------------------------------------------
    def _conv_check(self, op, layout, kernel, kernel_layout, nd):
        if layout.ndim != nd + 2 or kernel_layout.ndim != nd + 2:
            raise storage_error(ShapeError, op, f"expected {nd + 2}-d input and kernel", self=(self, layout),
                                kernel=(kernel, kernel_layout))
        if kernel.dtype is not self.dtype:
            raise storage_error(DTypeError, op, "input and kernel dtypes differ", self=(self, layout),
                                kernel=(kernel, kernel_layout))

    def conv2d(self, layout, kernel, kernel_layout, params):
        self._conv_check("conv2d", layout, kernel, kernel_layout, 2)
        b, c, h, w = layout.shape
        c_out, c_g, kh, kw = kernel_layout.shape
        g = params.groups
        if c != c_g * g or c_out % g:
            raise storage_error(ShapeError, "conv2d", f"channels do not match groups={g}", self=(self, layout),
                                kernel=(kernel, kernel_layout))
        oh, ow = params.out_size((h, w), (kh, kw))
        out = self._new(b * c_out * oh * ow)
        if out.numel == 0:
            return out
        dnn = _dnn_for(self.device)  # cuDNN / MIOpen where they take the case (TENSORLITE_DNN)
        if dnn is not None and dnn.supports_conv(self.dtype, layout, out.numel):
            wk, wl = kernel._contiguous(kernel_layout)  # filter descriptors have no strides
            if _dnn_run(dnn, "conv2d", dnn.conv2d, self, layout, wk, wl, params, out, (b, c_out, oh, ow)):
                return out
        dev = self.device
        # im2col: cols (b, c*kh*kw, oh*ow); group g's rows are one contiguous block
        n_cols = b * c * kh * kw * oh * ow
        cols = self._new(n_cols)
        geom = _GEOM2D.pack(b, c, h, w, kh, kw, oh, ow, *params.stride, *params.padding, *params.dilation)
        dev.launch(_kernel(dev, f"im2col_{self.dtype.short}", "conv2d", self=(self, layout)),
                   _grid(dev, n_cols), _BLOCK,
                   [("int64", n_cols), ("bytes", geom), ("bytes", _view4(layout)), ("ptr", self.buffer.ptr),
                    ("ptr", cols.buffer.ptr)])
        # per group: out[:, g] (c_out/g x oh*ow) = W_g (c_out/g x K) . cols[:, g] (K x oh*ow)
        kdim, o_g, hw = c_g * kh * kw, c_out // g, oh * ow
        wk, wl = _matrix_view(kernel, kernel_layout, (c_out, kdim))
        for gi in range(g):
            a_layout = Layout((b, o_g, kdim), (0, wl.strides[0], wl.strides[1]), wl.offset + gi * o_g * wl.strides[0])
            b_layout = Layout((b, kdim, hw), (c * kh * kw * hw, hw, 1), gi * kdim * hw)
            _gemm(wk, a_layout, cols, b_layout, out, gi * o_g * hw, c_out * hw, hw, b, o_g, hw, kdim)
        return out

    def conv1d(self, layout, kernel, kernel_layout, params):
        self._conv_check("conv1d", layout, kernel, kernel_layout, 1)
        return self.conv2d(_unsqueeze_h(layout), kernel, _unsqueeze_h(kernel_layout), params.as_2d())

    def conv_transpose2d(self, layout, kernel, kernel_layout, params):
        self._conv_check("conv_transpose2d", layout, kernel, kernel_layout, 2)
        b, c_in, h, w = layout.shape
        c_in_k, o_g, kh, kw = kernel_layout.shape
        g = params.groups
        if c_in != c_in_k or c_in % g:
            raise storage_error(ShapeError, "conv_transpose2d", f"channels do not match groups={g}",
                                self=(self, layout), kernel=(kernel, kernel_layout))
        c_out = o_g * g
        oh, ow = params.out_size((h, w), (kh, kw), transposed=True)
        out = self._new(b * c_out * oh * ow)
        if out.numel == 0:
            return out
        dnn = _dnn_for(self.device)  # the library's convolution backward-data, where it has one
        if dnn is not None and dnn.supports_conv(self.dtype, layout, out.numel, transposed=True):
            wk, wl = kernel._contiguous(kernel_layout)
            if _dnn_run(dnn, "conv_transpose2d", dnn.conv_transpose2d, self, layout, wk, wl, params, out,
                        (b, c_out, oh, ow)):
                return out
        dev = self.device
        # cols[:, g] (o_g*kh*kw x h*w) = W_g^T (o_g*kh*kw x c_in/g) . x[:, g] (c_in/g x h*w)
        i_g, kdim, hw = c_in // g, o_g * kh * kw, h * w
        cols = self._new(b * c_out * kh * kw * hw)
        wk, wl = _matrix_view(kernel, kernel_layout, (c_in, kdim))
        xs, xl = _matrix_view(self, layout, (b, c_in, hw))
        for gi in range(g):
            a_layout = Layout((b, kdim, i_g), (0, wl.strides[1], wl.strides[0]), wl.offset + gi * i_g * wl.strides[0])
            b_layout = Layout((b, i_g, hw), xl.strides, xl.offset + gi * i_g * xl.strides[1])
            _gemm(wk, a_layout, xs, b_layout, cols, gi * kdim * hw, c_out * kh * kw * hw, hw, b, kdim, hw, i_g)
        n = out.numel
        geom = _GEOM2D.pack(b, c_out, h, w, kh, kw, oh, ow, *params.stride, *params.padding, *params.dilation)
        dev.launch(_kernel(dev, f"col2im_{self.dtype.short}", "conv_transpose2d", self=(self, layout)),
                   _grid(dev, n), _BLOCK, [("int64", n), ("bytes", geom), ("ptr", cols.buffer.ptr),
                                           ("ptr", out.buffer.ptr)])
        return out

    def conv_transpose1d(self, layout, kernel, kernel_layout, params):
        self._conv_check("conv_transpose1d", layout, kernel, kernel_layout, 1)
        return self.conv_transpose2d(_unsqueeze_h(layout), kernel, _unsqueeze_h(kernel_layout),
                                     params.as_2d())

    def _window_op(self, name, op, layout, out_hw, geom_tail, extra=()):
        if layout.ndim != 4:
            raise storage_error(ShapeError, op, "expected a 4-d (b, c, h, w) input", self=(self, layout))
        b, c, h, w = layout.shape
        oh, ow = out_hw
        dev = self.device
        kernel = _kernel(dev, f"{name}_{self.dtype.short}", op, self=(self, layout))
        n = b * c * oh * ow
        out = self._new(n)
        if n:
            geom = _GEOM2D.pack(b, c, h, w, geom_tail[0], geom_tail[1], oh, ow, *geom_tail[2:])
            dev.launch(kernel, _grid(dev, n), _BLOCK,
                       [("int64", n), ("bytes", geom), ("bytes", _view4(layout)), *extra,
                        ("ptr", self.buffer.ptr), ("ptr", out.buffer.ptr)])
        return out

    def _dnn_pool(self, kind, layout, params):
        """The pooling through cuDNN / MIOpen, or None (the portable kernel runs)."""
        if layout.ndim != 4:
            return None
        oh, ow = params.out_size(*layout.shape[2:])
        n = layout.shape[0] * layout.shape[1] * oh * ow
        if n <= 0:
            return None
        dnn = _dnn_for(self.device)
        if dnn is None or not dnn.supports_pool(self.dtype, layout, params, kind, n):
            return None
        out = self._new(n)
        ok = _dnn_run(dnn, f"{kind}_pool2d", dnn.pool2d, kind, self, layout, params, out, layout.shape[:2] + (oh, ow))
        return out if ok else None

    def batch_norm_fused(self, layout, weight, w_layout, bias, b_layout, mean, m_layout, var, v_layout,
                         training: bool, momentum: float, eps: float):
        """Spatial batch norm forward through cuDNN / MIOpen, updating the running stats in
        place when training; None where the library does not take the case (F.batch_norm
        then runs its composite). Not a contract op: an optional fast path F.batch_norm
        looks for. weight/bias/mean/var: 1-d, unit stride, of bn_param_dtype(self.dtype)."""
        if not 2 <= layout.ndim <= 4 or layout.numel() == 0:
            return None
        dnn = _dnn_for(self.device)
        if dnn is None or not dnn.supports_batch_norm(self.dtype, layout):
            return None
        c, pdt = layout.shape[1], _bn_param_dtype(self.dtype)
        ops = ((weight, w_layout), (bias, b_layout), (mean, m_layout), (var, v_layout))
        if any(st.dtype is not pdt or tuple(lay.shape) != (c,) or (c > 1 and lay.strides[0] != 1) for st, lay in ops):
            return None
        out = self._new(layout.numel())
        save = [self._new(c, pdt), self._new(c, pdt)]   # batch mean / inverse std (unused: the backward recomputes)
        ok = _dnn_run(dnn, "batch_norm", dnn.batch_norm, self, layout, out,
                      *[st._addr(lay.offset) for st, lay in ops], float(eps), bool(training), float(momentum),
                      save[0].ptr, save[1].ptr)
        return out if ok else None

    def avg_pool2d(self, layout, params: PoolParams):
        out = self._dnn_pool("avg", layout, params)
        if out is not None:
            return out
        out_hw = params.out_size(*layout.shape[2:]) if layout.ndim == 4 else (0, 0)
        return self._window_op("avg_pool2d", "avg_pool2d", layout, out_hw,
                               (*params.kernel, *params.stride, *params.padding, 1, 1),
                               (("int32", int(bool(params.count_include_pad))),))

    def max_pool2d(self, layout, params: PoolParams):
        out = self._dnn_pool("max", layout, params)
        if out is not None:
            return out
        out_hw = params.out_size(*layout.shape[2:]) if layout.ndim == 4 else (0, 0)
        return self._window_op("max_pool2d", "max_pool2d", layout, out_hw,
                               (*params.kernel, *params.stride, *params.padding, *params.dilation))

    def upsample_nearest2d(self, layout, out_h, out_w):
        return self._window_op("upsample_nearest2d", "upsample_nearest2d", layout, (out_h, out_w),
                               (1, 1, 1, 1, 0, 0, 1, 1))

    # ---- copies ---------------------------------------------------------------------
    def copy_strided_src(self, dst, dst_offset, src_layout):
        n = src_layout.numel()
        if n == 0:
            return
        # a whole-storage copy takes over the source's bound; a partial one widens dst's
        same = dst.dtype is self.dtype
        dst.value_range = (self.value_range if same and n == dst.numel
                           else _range_union(dst.value_range, self.value_range) if same else None)
        dev = self.device
        if dst.dtype is self.dtype and src_layout.is_contiguous():
            dev.dtod(dst._addr(dst_offset), self._addr(src_layout.offset), n * self.dtype.itemsize)
            return
        kernel = _kernel(dev, f"cast_{self.dtype.short}_{dst.dtype.short}", "copy_strided_src",
                         self=(self, src_layout))
        dev.launch(kernel, _grid(dev, n), _BLOCK,
                   [("int64", n), ("bytes", _pack_strided(src_layout)[0]), ("ptr", self.buffer.ptr),
                    ("ptr", dst._addr(dst_offset))])

    def copy2d(self, dst, d1, d2, src_stride1, dst_stride1, src_offset, dst_offset):
        if d1 * d2 == 0:
            return
        dst.value_range = _range_union(dst.value_range, self.value_range) if dst.dtype is self.dtype else None
        src = self
        if dst.dtype is not self.dtype:  # cast the rows first (rare), then copy them
            src = self.to_dtype(Layout((d1, d2), (src_stride1, 1), src_offset), dst.dtype)
            src_stride1, src_offset = d2, 0
        dev = self.device
        isz = dst.dtype.itemsize
        if src_stride1 == d2 and dst_stride1 == d2:  # the rows form one contiguous block
            dev.dtod(dst._addr(dst_offset), src._addr(src_offset), d1 * d2 * isz)
            return
        kernel = _kernel(dev, f"copy2d_{dst.dtype.short}", "copy2d", self=(self, Layout((d1, d2))))
        dev.launch(kernel, _grid(dev, d1 * d2), _BLOCK,
                   [("int64", d1), ("int64", d2), ("int64", src_stride1), ("int64", dst_stride1),
                    ("ptr", src._addr(src_offset)), ("ptr", dst._addr(dst_offset))])

    def const_set(self, value, layout):
        n = layout.numel()
        if n == 0:
            return
        host = np.ascontiguousarray(cast_array(np.asarray(value), self.dtype)).reshape(())
        if self.value_range is not None:
            v = int(host)
            self.value_range = (min(self.value_range[0], v), max(self.value_range[1], v))
        raw = host.tobytes()
        dev = self.device
        if layout.is_contiguous() and raw.count(raw[:1]) == len(raw):  # all bytes equal (e.g. 0)
            dev.memset(self._addr(layout.offset), raw[0], n * len(raw))
            return
        kernel = _kernel(dev, f"const_set_{self.dtype.short}", "const_set", self=(self, layout))
        dev.launch(kernel, _grid(dev, n), _BLOCK,
                   [("int64", n), ("bytes", _pack_strided(layout)[0]),
                    ("uint64", int.from_bytes(raw.ljust(8, b"\0"), "little")), ("ptr", self.buffer.ptr)])

    def to_cpu(self, layout):
        arr = np.empty(layout.shape, self.dtype.np)
        if arr.size:
            src, lay = self._contiguous(layout)
            self.device.dtoh(arr, src._addr(lay.offset))
        return arr

    # ---- fused nn ops ---------------------------------------------------------------
    def _rows_op(self, name, op, layout, extra_in=(), extra_out=()) -> "GpuStorage":
        """softmax-like kernels `name(n_rows, row_len, outer, inner_stride, in, *extra_in,
        *extra_out, out)` over the rows of the last dim."""
        dev = self.device
        kernel = _kernel(dev, f"{name}_{self.dtype.short}", op, self=(self, layout))
        n_rows, row_len, outer, inner_stride = _rows_of(layout)
        out = self._new(n_rows * row_len)
        if out.numel:
            _launch_rows(dev, kernel, n_rows, row_len,
                         [("int64", n_rows), ("int64", row_len), ("bytes", _pack_strided(outer)[0]),
                          ("int64", inner_stride), ("ptr", self.buffer.ptr), *extra_in, *extra_out,
                          ("ptr", out.buffer.ptr)],
                         vector=_row_vector(self.dtype, row_len, inner_stride), held=True)
        return out

    def softmax_last_dim(self, layout):
        return self._rows_op("softmax", "softmax_last_dim", layout)

    def log_softmax(self, layout):
        return self._rows_op("log_softmax", "log_softmax", layout)

    def _affine_operand(self, op, name, st, lay, layout):
        if st is None:
            return [("ptr", 0), ("int64", 0)]
        if st.dtype is not self.dtype or lay.ndim != 1 or lay.shape[0] != (layout.shape[-1] if layout.ndim else 1):
            raise storage_error(ShapeError, op, f"{name} must be 1-d of the last dim's size and dtype",
                                self=(self, layout), **{name: (st, lay)})
        return [("ptr", st._addr(lay.offset)), ("int64", lay.strides[0])]

    def layer_norm(self, layout, weight, w_layout, bias, b_layout, eps):
        dnn = _dnn_for(self.device, "layer_norm")  # MIOpen's LayerNorm where it takes the case (TENSORLITE_DNN)
        if dnn is not None and dnn.supports_layer_norm(self.dtype, layout, (weight, w_layout), (bias, b_layout)):
            out = self._new(layout.numel())
            if _dnn_run(dnn, "layer_norm", dnn.layer_norm, self, layout, weight, w_layout, bias, b_layout, eps, out):
                return out
        args = (self._affine_operand("layer_norm", "weight", weight, w_layout, layout)
                + self._affine_operand("layer_norm", "bias", bias, b_layout, layout))
        return self._rows_op("layer_norm", "layer_norm", layout, args, (("double", float(eps)),))

    def rms_norm(self, layout, weight, w_layout, eps):
        dnn = _dnn_for(self.device, "rms_norm")  # MIOpen's T5LayerNorm (= RMSNorm), as layer_norm
        if dnn is not None and dnn.supports_rms_norm(self.dtype, layout, (weight, w_layout)):
            out = self._new(layout.numel())
            if _dnn_run(dnn, "rms_norm", dnn.rms_norm, self, layout, weight, w_layout, eps, out):
                return out
        args = self._affine_operand("rms_norm", "weight", weight, w_layout, layout)
        return self._rows_op("rms_norm", "rms_norm", layout, args, (("double", float(eps)),))

    def rope(self, layout, cos, cos_layout, sin, sin_layout, variant, _inverse=False):
        dnn = None if _inverse else _dnn_for(self.device, "rope_i")  # MIOpen's RoPE forward: rope_i only
        if dnn is not None and dnn.supports_rope(self.dtype, variant, layout, cos, cos_layout, sin, sin_layout):
            out = self._new(layout.numel())
            if _dnn_run(dnn, "rope_i", dnn.rope, self, layout, cos, cos_layout, sin, sin_layout, out):
                return out
        if variant not in ("rope", "rope_i", "rope_thd"):
            raise ValueError(f"rope: unknown variant {variant!r}; expected 'rope', 'rope_i' or 'rope_thd'")
        if layout.ndim != 4 or layout.shape[-1] % 2 or cos_layout.ndim != 3 or sin_layout.ndim != 3:
            raise storage_error(ShapeError, variant, "expected x 4-d with an even last dim and cos/sin 3-d (b, t, d/2)",
                                x=(self, layout), cos=(cos, cos_layout), sin=(sin, sin_layout))
        dev = self.device
        kernel = _kernel(dev, f"{variant}_{self.dtype.short}", variant, x=(self, layout), cos=(cos, cos_layout))
        n0, n1, n2, d = layout.shape
        n_pairs = n0 * n1 * n2 * (d // 2)
        out = self._new(layout.numel())
        if n_pairs:
            # a thread rotates `group` pairs where d/2 allows (fused.hip RopeGroup), in 4, 2
            # or 1 heads, the most that divides the head count (rope_heads)
            group = (8 if variant == "rope_i" else 16) // self.dtype.itemsize
            group = group if (d // 2) % group == 0 else 1
            heads = next(h for h in (4, 2, 1) if (n2 if variant == "rope_thd" else n1) % h == 0)
            dev.launch(kernel, _grid(dev, n_pairs // (group * heads)), _BLOCK,
                       [("int64", n_pairs), ("int64", n1), ("int64", n2), ("int64", d), ("bytes", _view4(layout)),
                        ("bytes", _VIEW3.pack(cos_layout.offset, *cos_layout.strides)),
                        ("bytes", _VIEW3.pack(sin_layout.offset, *sin_layout.strides)),
                        ("ptr", self.buffer.ptr), ("ptr", cos.buffer.ptr), ("ptr", sin.buffer.ptr),
                        ("ptr", out.buffer.ptr), ("int32", int(bool(_inverse)))])
        return out

    def rope_backward(self, layout, cos, cos_layout, sin, sin_layout, variant):
        # the rope kernel with sin negated (a rotation's transpose); self is the gradient
        return self.rope(layout, cos, cos_layout, sin, sin_layout, variant, _inverse=True)

    # ---- backward of the fused ops, fused cross-entropy, AdamW (kernels/fused_grad.hip) ------
    def _check_grad(self, op, layout, grad, grad_layout):
        if not self.dtype.is_floating_point:
            raise unsupported_dtype(op, self=(self, layout))
        if grad.dtype is not self.dtype or tuple(grad_layout.shape) != tuple(layout.shape):
            raise storage_error(DTypeError if grad.dtype is not self.dtype else ShapeError, op,
                                "grad must have the input's shape and dtype", self=(self, layout),
                                grad=(grad, grad_layout))

    def _rows_bwd(self, name, op, layout, grad, grad_layout, extra=(), stats=None, vector=1):
        """Row kernels `name(n_rows, row_len, xo, xi, go, gi, x, g, *extra, [stats,] out)`
        (`vector`: elements a thread reads at once, as _launch_rows)."""
        self._check_grad(op, layout, grad, grad_layout)
        dev = self.device
        kernel = _kernel(dev, f"{name}_{self.dtype.short}", op, self=(self, layout), grad=(grad, grad_layout))
        n_rows, row_len, xo, xi = _rows_of(layout)
        _, _, go, gi = _rows_of(grad_layout)
        out = self._new(n_rows * row_len)
        if out.numel:
            tail = [] if stats is False else [("ptr", _ptr(stats))]
            _launch_rows(dev, kernel, n_rows, row_len,
                         [("int64", n_rows), ("int64", row_len), ("bytes", _pack_strided(xo)[0]), ("int64", xi),
                          ("bytes", _pack_strided(go)[0]), ("int64", gi), ("ptr", self.buffer.ptr),
                          ("ptr", grad.buffer.ptr), *extra, *tail, ("ptr", out.buffer.ptr)], vector=vector)
        return out

    def softmax_last_dim_backward(self, layout, grad, grad_layout):
        return self._rows_bwd("softmax_bwd", "softmax_backward", layout, grad, grad_layout, stats=False)

    def log_softmax_backward(self, layout, grad, grad_layout):
        return self._rows_bwd("log_softmax_bwd", "log_softmax_backward", layout, grad, grad_layout, stats=False)

    def _acc_dtype(self):
        return dtypes.float64 if self.dtype is dtypes.float64 else dtypes.float32

    def _norm_backward(self, name, op, layout, grad, grad_layout, weight, w_layout, eps, weight_grad, bias_grad):
        """Rows that fit 256 threads: dx and the dweight/dbias partials in one pass
        (_norm_backward_fit). Longer rows: dx by the row kernel, which leaves per-row
        (mean, rstd) for the weight-gradient column sums (_norm_wgrad)."""
        wargs = self._affine_operand(op, "weight", weight, w_layout, layout)
        n_rows, row_len, _, xi = _rows_of(layout)
        if n_rows * row_len and row_len <= _NORM_FIT_THREADS * _norm_fit_cols(self.dtype):
            self._check_grad(op, layout, grad, grad_layout)
            return self._norm_backward_fit(name, op, layout, grad, grad_layout, wargs, eps, weight_grad, bias_grad)
        # per-row (mean, rstd) for the weight gradient; the bias gradient needs none
        stats = self._new(2 * n_rows, self._acc_dtype()) if weight_grad and n_rows * row_len else None
        dx = self._rows_bwd(name, op, layout, grad, grad_layout, (*wargs, ("double", float(eps))), stats,
                            vector=_tile_vector(self.dtype, xi))
        dw = self._new(row_len) if weight_grad else None
        db = self._new(row_len) if bias_grad else None
        if dw is None and db is None:
            return dx, dw, db
        if n_rows * row_len == 0:  # empty sums
            for st in (dw, db):
                if st is not None and st.numel:
                    self.device.memset(st.buffer.ptr, 0, st.numel * st.dtype.itemsize)
            return dx, dw, db
        self._norm_wgrad(layout, grad, grad_layout, stats, dw, db)
        return dx, dw, db

    def _norm_backward_fit(self, name, op, layout, grad, grad_layout, wargs, eps, weight_grad, bias_grad):
        """Rows that fit a block of _NORM_FIT_THREADS (fused_grad.hip norm_bwd_fit): tpr threads
        per row (tpr * cols >= row_len), up to 256 // tpr rows per block, as many blocks per SM
        as stay resident (each sums its dweight/dbias partials over all of its rows), then
        norm_wgrad_finish over the blocks' partials. Rows of whole aligned vectors take the
        _vec variant (fewer registers: more blocks per SM)."""
        dev, acc = self.device, self._acc_dtype()
        n_rows, row_len, xo, xi = _rows_of(layout)
        _, _, go, gi = _rows_of(grad_layout)
        dx = self._new(n_rows * row_len)
        dw = self._new(row_len) if weight_grad else None
        db = self._new(row_len) if bias_grad else None
        vec = _rows_vectorized(self, xo, xi, row_len) and _rows_vectorized(grad, go, gi, row_len)
        kernel = _kernel(dev, f"{name}_fit{'_vec' if vec else ''}_{self.dtype.short}", op, self=(self, layout),
                         grad=(grad, grad_layout))
        cols = _norm_fit_cols(self.dtype)
        tpr = 1
        while tpr * cols < row_len:
            tpr *= 2
        sms, blocks = _sm_count(dev), _norm_fit_blocks(self.dtype, vec)
        # fewer rows per block when the rows would not fill every SM's blocks
        rpb = max(1, min(_NORM_FIT_THREADS // tpr, -(-n_rows // (sms * blocks))))
        groups = -(-n_rows // rpb)
        grid = -(-groups // -(-groups // (sms * blocks)))  # every block the same number of turns
        pw = self._new(grid * row_len, acc) if dw is not None else None
        pb = self._new(grid * row_len, acc) if db is not None else None
        parts = [("ptr", _ptr(pw))] + ([] if name == "rms_norm_bwd" else [("ptr", _ptr(pb))])
        dev.launch(kernel, grid, (tpr, rpb),
                   [("int64", n_rows), ("int64", row_len), ("bytes", _pack_strided(xo)[0]), ("int64", xi),
                    ("bytes", _pack_strided(go)[0]), ("int64", gi), ("ptr", self.buffer.ptr),
                    ("ptr", grad.buffer.ptr), *wargs, ("double", float(eps)), *parts, ("ptr", dx.buffer.ptr)])
        if dw is not None or db is not None:
            self._norm_wgrad_finish(grid, row_len, pw, pb, dw, db)
        return dx, dw, db

    def _norm_wgrad_finish(self, n_chunks, row_len, pw, pb, dw, db):
        """dw/db = column sums of the (n_chunks, row_len) partials (fused_grad.hip
        norm_wgrad_finish: 32 columns x up to 32 chunk lanes per block, fixed order)."""
        dev = self.device
        kernel = _kernel(dev, f"norm_wgrad_finish_{self.dtype.short}", "norm_backward")
        by = max(1, min(32, n_chunks, kernel.max_threads // 32))  # TL_FINISH_THREADS: 32 * 32
        dev.launch(kernel, _grid(dev, row_len, 32), (32, by),
                   [("int64", n_chunks), ("int64", row_len), ("ptr", _ptr(pw)), ("ptr", _ptr(pb)),
                    ("ptr", _ptr(dw)), ("ptr", _ptr(db))])

    def _norm_wgrad(self, layout, grad, grad_layout, stats, dw, db):
        """dweight/dbias of rows too long for the fused pass, as column sums: per (row
        chunk, column) partials, then one sum per column (deterministic, no atomics)."""
        dev = self.device
        t, acc = self.dtype.short, self._acc_dtype()
        n_rows, row_len, xo, xi = _rows_of(layout)
        _, _, go, gi = _rows_of(grad_layout)
        bx = 32
        while bx < row_len and bx < 256:
            bx *= 2
        by = 256 // bx
        tiles = -(-row_len // bx)
        sms = _sm_count(dev)
        n_chunks = max(1, min(-(-4 * sms // tiles), -(-n_rows // by), 65535))
        rows_per_chunk = -(-n_rows // n_chunks)
        n_chunks = -(-n_rows // rows_per_chunk)
        pw = self._new(n_chunks * row_len, acc) if dw is not None else None
        pb = self._new(n_chunks * row_len, acc) if db is not None else None
        dev.launch(_kernel(dev, f"norm_wgrad_{t}", "norm_backward", self=(self, layout)), (tiles, n_chunks), (bx, by),
                   [("int64", n_rows), ("int64", row_len), ("int64", rows_per_chunk), ("bytes", _pack_strided(xo)[0]),
                    ("int64", xi), ("bytes", _pack_strided(go)[0]), ("int64", gi), ("ptr", self.buffer.ptr),
                    ("ptr", grad.buffer.ptr), ("ptr", _ptr(stats)), ("ptr", _ptr(pw)), ("ptr", _ptr(pb))])
        self._norm_wgrad_finish(n_chunks, row_len, pw, pb, dw, db)

    def layer_norm_backward(self, layout, grad, grad_layout, weight, w_layout, eps, weight_grad, bias_grad):
        return self._norm_backward("layer_norm_bwd", "layer_norm_backward", layout, grad, grad_layout, weight,
                                   w_layout, eps, weight_grad, bias_grad)

    def rms_norm_backward(self, layout, grad, grad_layout, weight, w_layout, eps, weight_grad):
        return self._norm_backward("rms_norm_bwd", "rms_norm_backward", layout, grad, grad_layout, weight,
                                   w_layout, eps, weight_grad, False)[:2]

    def _ce_check(self, op, layout, target, target_layout):
        if not self.dtype.is_floating_point:
            raise unsupported_dtype(op, self=(self, layout))
        check_cross_entropy(op, self, layout, target, target_layout)

    def cross_entropy(self, layout, target, target_layout, weight, w_layout, ignore_index):
        op = "cross_entropy"
        self._ce_check(op, layout, target, target_layout)
        n_rows, n_cls, xo, xi = _rows_of(layout)
        if weight is not None and (weight.dtype is not self.dtype or tuple(w_layout.shape) != (n_cls,)):
            raise storage_error(ShapeError, op, f"weight must be ({n_cls},) of the logits' dtype",
                                self=(self, layout), weight=(weight, w_layout))
        acc = self._acc_dtype()
        loss, lse, wt = (self._new(n_rows, acc) for _ in range(3))
        if n_rows == 0:
            return loss, lse, wt
        dev = self.device
        kernel = _kernel(dev, f"cross_entropy_fwd_{self.dtype.short}", op, self=(self, layout))
        flag = _error_flag(dev)
        checked = not _ids_known_in_range(target, n_cls)  # else the flag is not read (as _run_checked)
        if checked:
            dev.memset(flag.ptr, 0, 4)
        wargs = [("ptr", 0), ("int64", 0)] if weight is None else [("ptr", weight._addr(w_layout.offset)),
                                                                    ("int64", w_layout.strides[0])]
        _launch_rows(dev, kernel, n_rows, n_cls,
                     [("int64", n_rows), ("int64", n_cls), ("bytes", _pack_strided(xo)[0]), ("int64", xi),
                      ("bytes", _pack_strided(target_layout)[0]), ("ptr", target.buffer.ptr), *wargs,
                      ("int64", int(ignore_index)), ("ptr", self.buffer.ptr), ("ptr", loss.buffer.ptr),
                      ("ptr", lse.buffer.ptr), ("ptr", wt.buffer.ptr), ("ptr", flag.ptr)],
                     vector=_tile_vector(self.dtype, xi))
        if not checked:
            return loss, lse, wt
        host = np.zeros(1, np.int32)
        dev.dtoh(host, flag.ptr)  # waits, as the index ops do: a bad target must raise here
        if host[0]:
            t = target.to_cpu(target_layout).reshape(-1)
            bad = t[(t != ignore_index) & ((t < 0) | (t >= n_cls))]
            raise storage_error(IndexOutOfRange, op, f"target {int(bad[0]) if bad.size else '?'} is out of range for "
                                f"{n_cls} classes", self=(self, layout), target=(target, target_layout))
        return loss, lse, wt

    def cross_entropy_backward(self, layout, target, target_layout, lse, wt, grad, grad_layout):
        op = "cross_entropy_backward"
        self._ce_check(op, layout, target, target_layout)
        n_rows, n_cls, xo, xi = _rows_of(layout)
        acc = self._acc_dtype()
        if grad.dtype is not acc or lse.dtype is not acc or wt.dtype is not acc or grad_layout.numel() != n_rows \
                or lse.numel != n_rows or wt.numel != n_rows:
            raise storage_error(DTypeError, op, f"lse, wt and grad must be {acc.name} with one value per row, as "
                                "cross_entropy returned them", self=(self, layout), grad=(grad, grad_layout))
        out = self._new(n_rows * n_cls)
        if out.numel == 0:
            return out
        dev = self.device
        _launch_rows(dev, _kernel(dev, f"cross_entropy_bwd_{self.dtype.short}", op, self=(self, layout)),
                     n_rows, n_cls,
                     [("int64", n_rows), ("int64", n_cls), ("bytes", _pack_strided(xo)[0]), ("int64", xi),
                      ("bytes", _pack_strided(target_layout)[0]), ("ptr", target.buffer.ptr),
                      ("bytes", _pack_strided(grad_layout)[0]), ("ptr", grad.buffer.ptr), ("ptr", lse.buffer.ptr),
                      ("ptr", wt.buffer.ptr), ("ptr", self.buffer.ptr), ("ptr", out.buffer.ptr)],
                     vector=_tile_vector(self.dtype, xi))
        return out

    def unary_backward(self, op, layout, grad, grad_layout):
        if op not in UNARY_BACKWARD_OPS:
            raise ValueError(f"unary_backward: op must be one of {sorted(UNARY_BACKWARD_OPS)}, got {op!r}")
        self._check_grad(f"{op}_backward", layout, grad, grad_layout)
        return self._binary(f"{op}_bwd_{self.dtype.short}", f"{op}_backward", grad, layout, grad_layout)

    def _check_adamw(self, layout, grad, grad_layout, exp_avg, exp_avg_sq, max_exp_avg_sq) -> int:
        op = "adamw_step"
        self._check_grad(op, layout, grad, grad_layout)
        n, sdt = layout.numel(), adam_state_dtype(self.dtype)
        for st in (exp_avg, exp_avg_sq, max_exp_avg_sq):  # a loop, not any(...): once per parameter per step
            if st is not None and (st.dtype is not sdt or st.numel != n):
                raise storage_error(DTypeError, op, f"state buffers must be {sdt.name} with {n} elements",
                                    self=(self, layout), exp_avg=(exp_avg, Layout((exp_avg.numel,))))
        return n

    def adamw_step(self, layout, grad, grad_layout, exp_avg, exp_avg_sq, max_exp_avg_sq, lr, betas, eps,
                   weight_decay, step, decoupled=True, maximize=False):
        op = "adamw_step"
        n = self._check_adamw(layout, grad, grad_layout, exp_avg, exp_avg_sq, max_exp_avg_sq)
        if n == 0:
            return
        dev = self.device
        step_size, bc2_sqrt = adam_bias_corrections(lr, betas, step)
        flags = int(bool(decoupled)) | 2 * int(bool(maximize)) | 4 * int(max_exp_avg_sq is not None)
        lp, lg = _pack_strided(layout, grad_layout)
        dev.launch(_kernel(dev, f"adamw_{self.dtype.short}", op, self=(self, layout)), _grid(dev, n), _BLOCK,
                   [("int64", n), ("bytes", lp), ("bytes", lg), ("ptr", self.buffer.ptr), ("ptr", grad.buffer.ptr),
                    ("ptr", exp_avg.buffer.ptr), ("ptr", exp_avg_sq.buffer.ptr),
                    ("ptr", _ptr(max_exp_avg_sq)), ("double", float(lr)),
                    ("double", float(betas[0])), ("double", float(betas[1])), ("double", float(eps)),
                    ("double", float(weight_decay)), ("double", step_size), ("double", bc2_sqrt), ("int32", flags)])

    @classmethod
    def adamw_steps(cls, steps, lr, betas, eps, weight_decay, decoupled=True, maximize=False):
        # contiguous, non-empty parameters without amsgrad go by adamw_many (TL_ADAM_TENSORS
        # per launch), grouped by device, dtype and step count; the rest one by one
        batches, single = {}, []
        for item in steps:
            p, layout, grad, grad_layout, m, v, vmax, step = item
            if vmax is None and layout.is_contiguous() and grad_layout.is_contiguous():
                n = p._check_adamw(layout, grad, grad_layout, m, v, vmax)
                if n:
                    batches.setdefault((p.device, p.dtype, step), []).append((p, layout, grad, grad_layout, m, v, n))
            else:
                single.append(item)
        super().adamw_steps(single, lr, betas, eps, weight_decay, decoupled, maximize)
        flags = int(bool(decoupled)) | 2 * int(bool(maximize))
        for (dev, dtype, step), items in batches.items():
            kernel = _kernel(dev, f"adamw_many_{dtype.short}", "adamw_step", self=(items[0][0], items[0][1]))
            step_size, bc2_sqrt = adam_bias_corrections(lr, betas, step)
            hyper = [("double", float(lr)), ("double", float(betas[0])), ("double", float(betas[1])),
                     ("double", float(eps)), ("double", float(weight_decay)), ("double", step_size),
                     ("double", bc2_sqrt), ("int32", flags)]
            for i in range(0, len(items), _ADAM_TENSORS):
                chunk = items[i:i + _ADAM_TENSORS]
                pad = [0] * (_ADAM_TENSORS - len(chunk))
                first = _table_blocks([n for *_, n in chunk], _ADAM_CHUNK)
                table = _ADAM_TABLE.pack(
                    *[n for *_, n in chunk], *pad, *first, *pad,
                    *[p._addr(lay.offset) for p, lay, *_ in chunk], *pad,
                    *[g._addr(glay.offset) for _, _, g, glay, *_ in chunk], *pad,
                    *[m.buffer.ptr for *_, m, _, _ in chunk], *pad,
                    *[v.buffer.ptr for *_, v, _ in chunk], *pad, len(chunk))
                dev.launch(kernel, _grid(dev, first[-1], 1), _BLOCK, [("bytes", table), *hyper])

    def sdpa(self, layout, k, k_layout, v, v_layout, mask, mask_layout, scale, is_causal, return_lse=False):
        # TENSORLITE_SDPA (tensorlite.backend.sdpa_mode): the flash kernel where it covers the
        # case (f32/f16/bf16, head dims <= 128), else scores via GEMM + masked softmax + GEMM.
        mode = sdpa_mode()
        dp = _flash_dim(self, layout, v_layout)
        if mode == "flash" and dp is None:
            _flash_unsupported(self, layout, k, k_layout, v, v_layout)
        if mode != "gemm" and dp is not None:
            out, lse = self._sdpa_flash(dp, layout, k, k_layout, v, v_layout, mask, mask_layout, scale, is_causal,
                                        return_lse)
            return (out, lse) if return_lse else out
        out = self._sdpa_gemm(layout, k, k_layout, v, v_layout, mask, mask_layout, scale, is_causal)
        out = _in_sdpa_layout(out, sdpa_layout(layout, v_layout.shape[3]))
        return (out, None) if return_lse else out  # no lse: the caller differentiates the composite

    def _sdpa_flash(self, dp, layout, k, k_layout, v, v_layout, mask, mask_layout, scale, is_causal, want_lse):
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
        mma = _flash_mma(dev, self.dtype, dp)
        q, layout = _flash_operand(self, layout, dp, mma)
        k, k_layout = _flash_operand(k, k_layout, dp, mma)
        v, v_layout = _flash_operand(v, v_layout, dp, mma)
        if mma and _flash_wgmma(dev):  # Hopper: warpgroups of 4 warps, 64 rows each
            kernel = _kernel(dev, f"flash_fwd_wg{dp}_{self.dtype.short}", "sdpa", q=(self, layout))
            bm, block = 64 * _WG_FWD_GROUPS, (dev.warp_size, 4 * _WG_FWD_GROUPS)
            # WgFwdTile::SMEM: Q, the K/V stages, 1 KiB to align them to 1 KiB
            smem = (bm + 2 * _WG_FWD_STAGES * _WG_FWD_BN) * dp * self.dtype.itemsize + 1024
        elif mma:  # tensor cores: blocks of MMA_FWD_WARPS warps, 32 rows each
            kernel = _kernel(dev, f"flash_fwd_mma{dp}_{self.dtype.short}", "sdpa", q=(self, layout))
            bm, block = 32 * _MMA_FWD_WARPS, (dev.warp_size, _MMA_FWD_WARPS)
            stages = _MMA_FWD_STAGES[_arch_family(dev)]
            bn = 32 if dp > 64 and stages == 1 else 64
            smem = (bm + 2 * stages * bn) * (dp + 8) * self.dtype.itemsize  # MmaFwdTile::SMEM
        else:
            kernel = _kernel(dev, f"flash_fwd{dp}_{self.dtype.short}", "sdpa", q=(self, layout))
            bm = 32 if self.dtype.itemsize == 4 and dp > 64 else 64   # FwdCfg::BM, BN in attention.hip
            bn = 32 if dp > 64 else 64
            block = (16, 16)
            smem = (bm + bn) * (dp + 4) * self.dtype.itemsize + bn * (bm + 4) * 4  # FwdTile::SMEM
        dev.launch(kernel, b * hq * (-(-L // bm)), block,
                   [("bytes", shape), ("bytes", _view4(layout)), ("bytes", _view4(k_layout)),
                    ("bytes", _view4(v_layout)), ("bytes", _view4(out_layout)), *mask_args, ("ptr", q.buffer.ptr),
                    ("ptr", k.buffer.ptr), ("ptr", v.buffer.ptr), ("ptr", out.buffer.ptr),
                    ("ptr", _ptr(lse))],
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
            dev.launch(_kernel(dev, f"flash_bwd_pre_{t}", "sdpa_backward", q=(self, layout)), -(-n_rows // 16),
                       (16, 16), [("int64", n_rows), ("int64", hq), ("int64", L), ("int64", dv),
                                  ("bytes", _view4(out_layout)), ("bytes", _view4(grad_layout)),
                                  ("ptr", out.buffer.ptr), ("ptr", grad.buffer.ptr), ("ptr", dr.buffer.ptr)])
            shape, mask_args = _flash_shape(self, b, hq, hk, L, S, d, dv, scale, is_causal, mask, mask_layout)
            mma = _flash_mma(dev, self.dtype, dp)
            q, layout = _flash_operand(self, layout, dp, mma)
            k, k_layout = _flash_operand(k, k_layout, dp, mma)
            v, v_layout = _flash_operand(v, v_layout, dp, mma)
            grad, grad_layout = _flash_operand(grad, grad_layout, dp, mma)
            smem = 0
            if mma and _flash_wgmma(dev):  # Hopper: two warpgroups, 64 keys each
                kernel = _kernel(dev, f"flash_bwd_wg{dp}_{t}", "sdpa_backward", q=(self, layout))
                bn, block, bm, st = _WG_BWD_BN, (dev.warp_size, 8), 8192 // dp, _WG_BWD_STAGES
                # WgBwdTile::SMEM: K, V, the Q/dO stages, dS^T, lse/Dr stages, 1 KiB alignment slack
                smem = (2 * bn * dp + st * 2 * bm * dp + bn * bm) * self.dtype.itemsize + 2 * st * bm * 4 + 1024
            elif mma:  # tensor cores: MMA_WARPS warps, 16 keys each
                kernel = _kernel(dev, f"flash_bwd_mma{dp}_{t}", "sdpa_backward", q=(self, layout))
                warps = _MMA_WARPS[_arch_family(dev)]
                bn, block = 16 * warps, (dev.warp_size, warps)
                bm, st = (32 if dp > 64 else 64), _MMA_BWD_STAGES  # MmaBwdTile::SMEM: K, Q/dO stages, dS^T, lse/Dr
                smem = (bn * (dp + 8) + st * 2 * bm * (dp + 8) + bn * (bm + 8)) * self.dtype.itemsize + st * 2 * bm * 4
            else:
                kernel = _kernel(dev, f"flash_bwd{dp}_{t}", "sdpa_backward", q=(self, layout))
                bn = (16 if dp > 64 else 32) if self.dtype.itemsize == 4 else (32 if dp > 64 else 64)  # BwdCfg::BN
                block = (16, 16)
            dev.launch(kernel, b * hk * (-(-S // bn)), block,
                       [("bytes", shape), ("bytes", _view4(layout)), ("bytes", _view4(k_layout)),
                        ("bytes", _view4(v_layout)), ("bytes", _view4(grad_layout)), ("bytes", _view4(dq_layout)),
                        ("bytes", _view4(dk_layout)), ("bytes", _view4(dv_layout)), *mask_args,
                        ("ptr", q.buffer.ptr), ("ptr", k.buffer.ptr), ("ptr", v.buffer.ptr),
                        ("ptr", grad.buffer.ptr), ("ptr", lse.buffer.ptr), ("ptr", dr.buffer.ptr),
                        ("ptr", dq32.buffer.ptr), ("ptr", dk.buffer.ptr), ("ptr", dvs.buffer.ptr)],
                       shared_mem=smem)
        dq = dq32 if self.dtype is dtypes.float32 else dq32.to_dtype(Layout((dq32.numel,)), self.dtype)
        return dq, dk, dvs

    def _sdpa_gemm(self, layout, k, k_layout, v, v_layout, mask, mask_layout, scale, is_causal):
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
        qs, ql = _matrix_view(self, layout, (b * hk, g * L, d))
        ks, kl = _matrix_view(k, k_layout, (b * hk, S, d))
        vs, vl = _matrix_view(v, v_layout, (b * hk, S, dv))
        scores = self._new(b * hq * L * S)
        _gemm(qs, ql, ks, kl.transpose(1, 2), scores, 0, g * L * S, S, b * hk, g * L, S, d, alpha=scale)
        mask_args = [("int32", 0), ("bytes", _VIEW4.pack(0, 0, 0, 0, 0)), ("ptr", 0)]
        if mask is not None:
            if mask.dtype is not dtypes.bool_ and mask.dtype is not self.dtype:
                mask, mask_layout = mask._contiguous(mask_layout, self.dtype)
            mask_args = [("int32", 1 if mask.dtype is dtypes.bool_ else 2), ("bytes", _view4(mask_layout)),
                         ("ptr", mask.buffer.ptr)]
        dev = self.device
        kernel = _kernel(dev, f"attn_softmax_{self.dtype.short}", "sdpa", q=(self, layout))
        n_rows = b * hq * L
        _launch_rows(dev, kernel, n_rows, S, [("int64", n_rows), ("int64", S), ("int64", L), ("int64", hq),
                                              *mask_args, ("int32", int(bool(is_causal))),
                                              ("ptr", scores.buffer.ptr)])
        _gemm(scores, Layout.contiguous((b * hk, g * L, S)), vs, vl, out, 0, g * L * dv, dv, b * hk, g * L, dv, S)
        return out


# =====================================================================================
# Helpers shared by matmul, conv and sdpa
# =====================================================================================

_ATTN_SHAPE = struct.Struct("<8qiif4x")          # struct AttnShape of attention.hip


def _flash_dim(q: GpuStorage, layout: Layout, v_layout: Layout) -> Optional[int]:
    """The head dim the flash kernels are instantiated for that fits q/v, or None when
    they do not cover the case (f64, head dims over 128)."""
    if q.dtype not in (dtypes.float32, dtypes.float16, dtypes.bfloat16) or layout.ndim != 4 or v_layout.ndim != 4:
        return None
    widest = max(layout.shape[3], v_layout.shape[3])
    return next((dp for dp in (32, 64, 128) if widest <= dp), None)


def _arch_family(dev) -> str:
    """The key of the per-arch tile constants below: "sm_" (NVIDIA) or "gfx" (AMD)."""
    return "sm_" if dev.arch.startswith("sm_") else "gfx"


_MMA_WARPS = {"sm_": 8, "gfx": 4}                # MMA_WARPS in attention.hip (backward), per arch prefix
_MMA_BWD_STAGES = 2                              # MMA_BWD_STAGES in attention.hip
_MMA_FWD_WARPS = 4                               # MMA_FWD_WARPS in attention.hip
_MMA_FWD_STAGES = {"sm_": 2, "gfx": 1}           # TL_MMA_STAGES in compat.h (K/V buffers), per arch prefix
_MMA_ARCHS = ("gfx90a", "gfx940", "gfx941", "gfx942")  # CDNA with f16 and bf16_1k MFMA
_WG_FWD_GROUPS, _WG_FWD_BN, _WG_FWD_STAGES = 2, 128, 3  # WG_FWD_GROUPS, _BN, _STAGES in attention.hip
_WG_BWD_BN, _WG_BWD_STAGES = 128, 3              # WG_BWD_BN, WG_BWD_STAGES in attention.hip


def _flash_wgmma(dev) -> bool:
    """Whether sdpa and its backward take the Hopper kernels (flash_{fwd,bwd}_wg*: wgmma, compat.h TL_HAS_WGMMA)
    where the tensor-core kernels cover the case: code built for sm_90a (cuda.py), unless
    TENSORLITE_WGMMA=0 (read at every call) asks for the sm_80 kernels (mma.sync) instead."""
    return dev.arch == "sm_90a" and os.environ.get("TENSORLITE_WGMMA", "1").strip() != "0"


def _flash_mma(dev, dtype, dp: int) -> bool:
    """Whether the tensor-core kernels (flash_{fwd,bwd}_mma*) cover the case on `dev`: f16/bf16,
    padded head dim 64 or 128, NVIDIA sm_80+ or CDNA2/3 (compat.h TL_HAS_MMA)."""
    if dtype not in (dtypes.float16, dtypes.bfloat16) or dp not in (64, 128):
        return False
    arch = dev.arch
    if arch.startswith("sm_"):
        return int("".join(ch for ch in arch[3:] if ch.isdigit()) or 0) >= 80
    return arch in _MMA_ARCHS


def _flash_operand(st: GpuStorage, layout: Layout, dp: int, mma: bool) -> Tuple[GpuStorage, Layout]:
    """(storage, layout) a flash kernel reads for a (b, h, t, d) operand: the view itself
    (any strides: transposed (b, t, h, d) views need no copy), or a contiguous copy where the
    tensor-core kernels' 16-byte tile loads (mma_load_tile, d == dp) could not take its rows:
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
    kind, mview, mptr = 0, _VIEW4.pack(0, 0, 0, 0, 0), 0
    if mask is not None:
        if mask.dtype is not dtypes.bool_ and mask.dtype is not q.dtype:
            mask, mask_layout = mask._contiguous(mask_layout, q.dtype)
        kind, mview, mptr = (1 if mask.dtype is dtypes.bool_ else 2), _view4(mask_layout), mask.buffer.ptr
    shape = _ATTN_SHAPE.pack(b, hq, hk, L, S, d, dv, 0, int(bool(is_causal)), kind, scale)
    return shape, [("bytes", mview), ("ptr", mptr)]


def _unsqueeze_h(layout: Layout) -> Layout:
    """(b, c, l) -> (b, c, 1, l): 1-d ops run as 2-d ops of height 1."""
    return Layout(layout.shape[:2] + (1,) + layout.shape[2:], layout.strides[:2] + (0,) + layout.strides[2:],
                  layout.offset)


def _matrix_view(st: GpuStorage, layout: Layout, shape) -> Tuple[GpuStorage, Layout]:
    """`layout` reshaped to `shape` as a view if its strides allow, else a contiguous copy."""
    view = layout.reshape(shape)
    if view is not None:
        return st, view
    copy, _ = st._contiguous(layout)
    return copy, Layout.contiguous(shape)


def _blas_operand(rows: int, cols: int, sr: int, sc: int):
    """How BLAS (column-major) reads the TRANSPOSE of a row-major rows x cols operand with
    element strides (sr, sc): (trans, ld), or None when no leading dimension expresses it.
    Row-major X with unit column stride is column-major X^T (op N, ld = sr); unit row
    stride is column-major X (op T, ld = sc). Strides of size-1 dims are free."""
    if cols == 1:
        sc = 1
    if rows == 1:
        sr = max(cols, 1) if sc == 1 else 1
    if sc == 1 and sr >= max(1, cols):
        return False, sr
    if sr == 1 and sc >= max(1, rows):
        return True, sc
    return None


def _gemm(a: GpuStorage, a_layout: Layout, b: GpuStorage, b_layout: Layout, c: GpuStorage, c_offset: int,
          c_batch_stride: int, ldc: int, batch: int, m: int, n: int, k: int, alpha: float = 1.0):
    """C[i] = alpha * A[i] . B[i] for i < batch; A (batch, m, k) and B (batch, k, n) are any
    3-d layouts (batch stride 0 broadcasts); C rows start at c_offset + i*c_batch_stride +
    r*ldc. Floats go to the vendor BLAS (transposed views as op=T, copies only when no
    leading dimension fits); other dtypes, and floats where the platform has no BLAS
    (the emulated AMD platform), to the portable gemm_<t> kernel."""
    dev = a.device
    if batch * m * n == 0:
        return
    if k == 0:  # an empty sum
        c.const_set(0, Layout((batch, m, n), (c_batch_stride, ldc, 1), c_offset))
        return
    dtype = a.dtype
    if not dtype.is_floating_point or not dev.has_blas:
        kernel = _kernel(dev, f"gemm_{dtype.short}", "matmul", lhs=(a, a_layout), rhs=(b, b_layout))
        total = batch * m * n
        dev.launch(kernel, _grid(dev, total), _BLOCK,
                   [("int64", batch), ("int64", m), ("int64", n), ("int64", k),
                    ("bytes", _VIEW3.pack(a_layout.offset, *a_layout.strides)),
                    ("bytes", _VIEW3.pack(b_layout.offset, *b_layout.strides)),
                    ("int64", c_batch_stride), ("int64", ldc), ("double", alpha), ("ptr", a.buffer.ptr),
                    ("ptr", b.buffer.ptr),
                    ("ptr", c._addr(c_offset))])
        return
    (sa, la, (ta, lda)), (sb, lb, (tb, ldb)) = _blas_operands(a, a_layout, b, b_layout, m, n, k)
    stride_a = la.strides[0] if batch > 1 else 0
    stride_b = lb.strides[0] if batch > 1 else 0
    # row-major C = A.B is column-major C^T = B^T . A^T
    dev.blas.gemm_strided_batched(dtype, tb, ta, n, m, k, sb._addr(lb.offset), ldb, stride_b,
                                  sa._addr(la.offset), lda, stride_a, c._addr(c_offset), ldc,
                                  c_batch_stride, batch, alpha, 0.0)


def _blas_operands(a, a_layout, b, b_layout, m, n, k):
    """((storage, layout, (transposed, ld)) of A, then of B) as the BLAS takes them: the
    views themselves where a leading dimension fits, else contiguous copies."""
    return _blas_view(a, a_layout, m, k), _blas_view(b, b_layout, k, n)


def _blas_view(st, lay, rows, cols):
    form = _blas_operand(rows, cols, lay.strides[1], lay.strides[2])
    if form is None:  # e.g. a broadcast (stride-0) row dim: copy to row-major
        st, _ = st._contiguous(lay)
        return st, Layout.contiguous(lay.shape), (False, cols)
    return st, lay, form


def _gemm_epilogue(a: GpuStorage, a_layout: Layout, b: GpuStorage, b_layout: Layout, c: GpuStorage, m: int, n: int,
                   k: int, bias: GpuStorage, epilogue: str) -> bool:
    """C (a new contiguous (m, n)) = A . B for 3-D single-batch float layouts, with the BLAS
    epilogue "bias" (adds bias (n,) to every row) or "bgradb" (writes the row sums of A
    into bias (m,)); False, with nothing enqueued, where the platform does not fuse the case."""
    if not (m and n and k):
        return False
    (sa, la, (ta, lda)), (sb, lb, (tb, ldb)) = _blas_operands(a, a_layout, b, b_layout, m, n, k)
    # row-major C = A.B is column-major C^T = B^T . A^T: "bias" runs along C^T's rows (n of
    # them) and "bgradb" sums op(A^T) = A^T over k for each of C^T's m columns
    return a.device.blas.gemm_epilogue(a.dtype, tb, ta, n, m, k, sb._addr(lb.offset), ldb, sa._addr(la.offset), lda,
                                       c.buffer.ptr, n, bias.buffer.ptr, epilogue)


# =====================================================================================
# Device-side helpers: the index ops' error flag, random numbers
# =====================================================================================


def _reduce_plans(dev) -> dict:
    """reduce_op's launch plans on `dev`."""
    return _on_device(dev, "_tl_reduce_plans", lambda d: {})


def _reduce_counters(dev, n: int):
    """At least n u32 counters for reduce.hip's chunked reductions, kept on the device object
    and zeroed once here: the kernels leave them at 0 (each group's last block resets its
    own), so no launch needs a memset first. One stream: launches never share them at once."""
    buf = getattr(dev, "_tl_reduce_counters", None)
    if buf is None or buf.nbytes < 4 * n:
        nbytes = max(4 * n, 4096)
        buf = dev.alloc(nbytes)
        dev.memset(buf.ptr, 0, nbytes)
        dev._tl_reduce_counters = buf
    return buf


def _error_flag(dev):
    """A 4-byte buffer on `dev` where the index kernels flag bad ids."""
    return _on_device(dev, "_tl_error_flag", lambda d: d.alloc(4))


def random_fill(storage: GpuStorage, kind: str, a: float, b: float, seed: int, offset: int) -> None:
    """Fill `storage` with uniform [a, b) ('uniform') or normal (mean a, std b) values
    from Philox-4x32-10 keyed by `seed`, counter stream `offset` (see kernels/random.hip:
    a given (seed, offset, numel) always yields the same values). Integer dtypes draw in
    f32 and cast (truncating), like the cpu backend's cast of its draws."""
    if kind not in ("uniform", "normal"):
        raise ValueError(f"random_fill: kind must be 'uniform' or 'normal', got {kind!r}")
    n = storage.numel
    if n == 0:
        return
    dev = storage.device
    target = storage
    if not storage.dtype.is_floating_point:
        target = storage._new(n, dtypes.float32)
    per_group = 2 if target.dtype is dtypes.float64 else 4
    kernel = _kernel(dev, f"rand_{kind}_{target.dtype.short}", "random_fill", self=(storage, Layout((n,))))
    dev.launch(kernel, _grid(dev, -(-n // per_group)), _BLOCK,
               [("int64", n), ("uint64", int(seed) & 0xFFFFFFFFFFFFFFFF), ("uint64", int(offset) & 0xFFFFFFFFFFFFFFFF),
                ("double", float(a)), ("double", float(b)), ("ptr", target.buffer.ptr)])
    if target is not storage:
        target.copy_strided_src(storage, 0, Layout.contiguous((n,)))
