"""Launch geometry and argument packing, shared by every kernel family (vendor-neutral:
what differs between GPUs comes from the device's properties).

Layouts travel by value: `pack_strided` packs the C struct `Strided` of compat.h (offset,
ndim, contiguous flag, shape and strides innermost-first) after merging dims that are
contiguous with each other in every operand, so most strided views reach the kernel with
one or two dims; contiguous operands take the kernels' fast path.
"""
from __future__ import annotations

import struct
from typing import Dict, Sequence, Tuple

from tensorlite.errors import ShapeError
from tensorlite.layout import Layout

BLOCK = 256                                      # threads per block of the grid-stride kernels
# The entry points a graph capture launches as programmatic dependents where the platform can
# (CUDA sm_90 on; compat.h tl_dependent_start, their first statement): every entry of a
# source (None), or the named ones, without their dtype suffix. tests/test_kernels_sm90.py
# checks in each one's PTX that the wait comes before any memory access.
DEPENDENT_LAUNCH = {"binary.hip": None, "gemv.hip": None,
                    "fused.hip": ("rms_norm", "add_rms_norm", "rope_kv_cache"),
                    "attention.hip": ("attn_decode_part32", "attn_decode_part64", "attn_decode_part128",
                                      "attn_decode_combine")}
MAX_DIMS = 8                                     # TL_MAX_DIMS in compat.h
_STRIDED = struct.Struct("<qii8q8q")             # struct Strided (144 bytes)
STRIDED_BYTES = _STRIDED.size                    # what pack_strided's structs take, every one
_STRIDED_HEAD = struct.Struct("<qii")
_CONTIG_TAIL = bytes(_STRIDED.size - _STRIDED_HEAD.size)
VIEW4 = struct.Struct("<5q")                     # struct View4 (conv, fused, attention .hip): offset, 4 strides
VIEW3 = struct.Struct("<4q")                     # struct View3 (conv.hip, fused.hip): offset, 3 strides
TILE_UNITS = 8                                   # vectors per thread the RowTile kernels (rows.h) are sized for
_PACK_CACHE: Dict[tuple, Tuple[bytes, ...]] = {}
_CONTIG_PACKS: Dict[int, bytes] = {}


def on_device(dev, name: str, make):
    """dev's own value `name`, made once by make(dev) and kept on the device object itself:
    a table keyed by id(dev) would hand a freed device's value to a new one reusing the id."""
    try:
        return getattr(dev, name)
    except AttributeError:
        value = make(dev)
        setattr(dev, name, value)
        return value


def arrival_counters(dev, n: int) -> int:
    """The address of at least n u32 counters at zero, for kernels whose last block to arrive
    finishes its group's work (reduce.hip's chunked reductions). Each launch leaves the
    counters it used at zero again and the one stream never runs two such launches at once,
    so none needs a memset first. Made on first use (GpuDevice.fresh_zeros: at zero for eager
    launches too when first needed while capturing); an outgrown buffer stays allocated, as
    a graph may still count in it."""
    kept = on_device(dev, "_tl_arrival_counters", lambda d: [])
    if not kept or kept[-1].nbytes < 4 * n:
        kept.append(dev.fresh_zeros(max(4 * n, 4096)))
    return kept[-1].ptr


def dependent_launch(source: str, name: str) -> bool:
    """Whether entry `name` of `source` may be launched as a programmatic dependent."""
    names = DEPENDENT_LAUNCH.get(source, ())
    return names is None or name[:name.rfind("_")] in names


def sm_count(dev) -> int:
    """Multiprocessors (CUs) of `dev`."""
    return on_device(dev, "_tl_sm_count", lambda d: int(d.props.get("multiprocessor_count") or 80))


def grid_for(dev, work_items: int, per_block: int = BLOCK) -> int:
    """Blocks for a grid-stride loop: enough to fill the GPU, never 0."""
    try:  # on_device's hit, inlined: every elementwise launch asks
        cap = dev._tl_grid_cap
    except AttributeError:
        cap = on_device(dev, "_tl_grid_cap", lambda d: 16 * sm_count(d))
    blocks = -(-work_items // per_block)
    return blocks if 0 < blocks <= cap else (cap if blocks > 0 else 1)


def coalesce(shape: Sequence[int], strides_list: Sequence[Sequence[int]]):
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


def pack_contiguous(offset: int) -> bytes:
    packed = _CONTIG_PACKS.get(offset)
    if packed is None:
        if len(_CONTIG_PACKS) > 4096:
            _CONTIG_PACKS.clear()
        packed = _CONTIG_PACKS[offset] = _STRIDED_HEAD.pack(offset, 0, 1) + _CONTIG_TAIL
    return packed


def pack_strided(*layouts: Layout) -> Tuple[bytes, ...]:
    """`Strided` structs for layouts of one shape (their iteration order is shared)."""
    # the hot path, every layout contiguous (a Layout computes that once; output layouts are shared
    # per shape): nothing to merge. One and two layouts, the elementwise kernels', without a loop
    first = layouts[0]
    if len(layouts) <= 2 and first.is_contiguous():
        pa = _CONTIG_PACKS.get(first.offset) or pack_contiguous(first.offset)
        if len(layouts) == 1:
            return (pa,)
        second = layouts[1]
        if second.is_contiguous():
            return pa, _CONTIG_PACKS.get(second.offset) or pack_contiguous(second.offset)
    elif all([lay.is_contiguous() for lay in layouts]):
        return tuple([_CONTIG_PACKS.get(lay.offset) or pack_contiguous(lay.offset) for lay in layouts])
    key = tuple([(lay.shape, lay.strides, lay.offset) for lay in layouts])
    packed = _PACK_CACHE.get(key)
    if packed is not None:
        return packed
    shape, strides = coalesce(layouts[0].shape, [lay.strides for lay in layouts])
    if len(shape) > MAX_DIMS:
        raise ShapeError(f"layout {layouts[0]} has {len(shape)} dims that cannot be merged; "
                         f"GPU kernels take at most {MAX_DIMS}")
    pad = [0] * (MAX_DIMS - len(shape))
    packed = tuple(_STRIDED.pack(lay.offset, len(shape), int(lay.is_contiguous()), *shape, *pad, *s, *pad)
                   for lay, s in zip(layouts, strides))
    if len(_PACK_CACHE) > 4096:
        _PACK_CACHE.clear()
    _PACK_CACHE[key] = packed
    return packed


def view4(layout: Layout) -> bytes:
    return VIEW4.pack(layout.offset, *layout.strides)


def row_block(dev, n_rows: int, row_len: int, max_threads: int = 1024, fit: bool = False) -> Tuple[int, int]:
    """(threads per row, rows per block) for the row kernels (see compat.h,
    tl_row_allreduce), at most `max_threads` per block. `fit`: as many threads as a row
    of `row_len` units needs (up to max_threads), even where many rows would get fewer."""
    sms = sm_count(dev)
    cap = 1024 if n_rows <= sms else (256 if n_rows <= 16 * sms else 128)
    if fit:
        cap = max(cap, 1 << (row_len - 1).bit_length())
    cap = min(cap, max_threads)
    tpr = 1
    while tpr < row_len and 2 * tpr <= cap:
        tpr *= 2
    if tpr > dev.warp_size:
        return tpr, 1
    return tpr, max(1, min(BLOCK, max_threads) // tpr)


def row_vector(dtype, row_len: int, inner_stride: int) -> int:
    """Elements per 16-byte vector where fused.hip's RowRegs can hold rows by vectors
    (the kernel also checks alignment), else 1."""
    n = 16 // dtype.itemsize
    return n if inner_stride == 1 and row_len % n == 0 else 1


def row_vectors(vector: int) -> int:
    """Vectors per thread that fused.hip's RowRegs holds (RowRegs::V): 8 for 16-bit types
    (vectors of 8 elements), else 4."""
    return 8 if vector == 8 else 4


# Fewer rows than this leave most of the GPU idle (a decode step's norms have one row per
# sequence): a held row is then spread over a thread per vector, so each thread's chain of
# dependent loads, arithmetic and stores is one vector long instead of row_vectors(vector).
SPREAD_ROWS_BELOW = 64


def launch_rows(dev, kernel, n_rows: int, row_len: int, args, vector: int = 1, held: bool = False):
    """`vector` > 1: the kernel reads the rows by vectors of that many elements. `held`: it
    holds a row in registers, up to row_vectors(vector) vectors per thread (fused.hip RowRegs),
    so a row gets the threads to hold it whole, past row_block's usual cap where needed (a row
    that does not fit is read three times); else it streams TILE_UNITS vectors per thread
    (rows.h RowTile). Fewer threads per row leave room for more rows in flight, unless the rows
    are too few to fill the GPU (SPREAD_ROWS_BELOW). Blocks stay within the kernel's own limit
    (its registers can lower the device's)."""
    held = held and vector > 1
    per_thread = 1 if n_rows < SPREAD_ROWS_BELOW else row_vectors(vector)
    units = -(-row_len // (vector * (per_thread if held else TILE_UNITS))) if vector > 1 else row_len
    tpr, rpb = row_block(dev, n_rows, units, kernel.max_threads, fit=held)
    # small blocks: enough of them to fill each multiprocessor's 2048 threads
    grid = min(-(-n_rows // rpb), sm_count(dev) * max(16, 2048 // (tpr * rpb)))
    dev.launch(kernel, grid, (tpr, rpb), args)


def table_blocks(sizes, chunk: int) -> list:
    """first_block of a multi-tensor table (adamw_many, cast_many; compat.h
    tl_table_tensor): block b works on `chunk` elements of tensor t for
    first_block[t] <= b < first_block[t + 1]."""
    first = [0]
    for n in sizes:
        first.append(first[-1] + -(-n // chunk))
    return first


def ptr_or_null(st) -> int:
    """The device address of a storage's buffer, or 0 (a null pointer) for None."""
    return 0 if st is None else st.buffer.ptr


def rows_of(layout: Layout) -> Tuple[int, int, Layout, int]:
    """(n_rows, row_len, outer layout addressing each row's start, stride along rows) for
    the last dim of `layout` (a 0-d layout is one row of one element)."""
    if layout.ndim == 0:
        return 1, 1, Layout((1,), (1,), layout.offset), 1
    shape, strides = layout.shape, layout.strides
    outer = Layout(shape[:-1], strides[:-1], layout.offset)
    return outer.numel(), shape[-1], outer, strides[-1]
