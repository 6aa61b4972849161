"""The storage contract (candle's `BackendStorage`) and the backend registry.

A backend provides a `BackendDevice` (one per ordinal) and `BackendStorage` objects:
flat buffers of one dtype. Tensor owns the Layout and hands it to each call; the
contract is *functional*: every op reads its inputs through their layouts and returns
a fresh, contiguous storage of the output shape, except where a method says "in place".

Conventions every backend must follow (the Tensor layer guarantees the preconditions):
- operands of one call live on the same device and, unless a method says otherwise,
  have the same dtype;
- binary, cmp and where operands arrive already broadcast to the output shape
  (broadcast dims have stride 0);
- reductions keep reduced dims as size 1 (the Tensor squeezes them for keepdim=False);
- integer index operands (`ids`) are int64, uint32 or uint8; out-of-range ids raise
  `IndexOutOfRange`, never read or write out of bounds;
- float16/bfloat16 arithmetic accumulates in float32.
"""
from __future__ import annotations

import contextlib
import math
import os
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Tuple

from . import dtype as dtypes, op_table, rnn_reference
from .errors import ArgumentError, BackendUnavailable, DeviceError, DTypeError, ShapeError, storage_error
from .layout import Layout

# the elementwise ops' names, from the op table (op_table.py)
UNARY_OPS = tuple(op.name for op in op_table.UNARY)
BINARY_OPS = tuple(op.name for op in op_table.BINARY)
CMP_OPS = tuple(op.name for op in op_table.COMPARE)
UNARY_BACKWARD_OPS = tuple(op.name for op in op_table.UNARY if op.grad == op_table.FUSED)
REDUCE_OPS = ("sum", "min", "max", "argmin", "argmax")


@dataclass(frozen=True)
class ConvParams:
    """Geometry of an N-d convolution (N = 1 or 2), PyTorch semantics.

    input (b, c_in, *spatial), kernel (c_out, c_in // groups, *k) for conv, and
    (c_in, c_out // groups, *k) for conv_transpose. Tuples have one entry per spatial dim.
    """
    stride: Tuple[int, ...]
    padding: Tuple[int, ...]
    dilation: Tuple[int, ...]
    groups: int = 1
    output_padding: Tuple[int, ...] = ()  # conv_transpose only

    def as_2d(self) -> "ConvParams":
        """A 1-d op's parameters for the same op in 2-d over a height of 1 (backends run
        conv1d as conv2d)."""
        one = lambda t: (1,) + tuple(t)  # noqa: E731 - the height dim
        return ConvParams(one(self.stride), (0,) + tuple(self.padding), one(self.dilation), self.groups,
                          (0,) + tuple(self.output_padding) if self.output_padding else ())

    def out_size(self, in_size: Sequence[int], k: Sequence[int], transposed: bool = False) -> Tuple[int, ...]:
        """The output's spatial sizes for input sizes in_size and kernel sizes k (PyTorch's formula)."""
        if not transposed:
            return _out_size(in_size, k, self.stride, self.padding, self.dilation)
        out_pad = self.output_padding or (0,) * len(k)
        return tuple((n - 1) * s - 2 * p + d * (kk - 1) + o + 1 for n, kk, s, p, d, o in
                     zip(in_size, k, self.stride, self.padding, self.dilation, out_pad))


@dataclass(frozen=True)
class PoolParams:
    kernel: Tuple[int, int]
    stride: Tuple[int, int]
    padding: Tuple[int, int] = (0, 0)
    dilation: Tuple[int, int] = (1, 1)   # max_pool2d only
    count_include_pad: bool = True       # avg_pool2d only

    def out_size(self, h: int, w: int) -> Tuple[int, int]:
        """The output's (height, width) for an (h, w) input (PyTorch's formula)."""
        return _out_size((h, w), self.kernel, self.stride, self.padding, self.dilation)


def _out_size(in_size, kernel, stride, padding, dilation) -> Tuple[int, ...]:
    """The output size of a convolution or pooling window over in_size (PyTorch's formula)."""
    return tuple((n + 2 * p - d * (k - 1) - 1) // s + 1 for n, k, s, p, d in
                 zip(in_size, kernel, stride, padding, dilation))


class BackendDevice(ABC):
    """One device of a backend. `name` is the registry name ('cpu', 'cuda', 'rocm')."""
    name: str
    ordinal: int = 0

    def __str__(self):
        return self.name if self.name == "cpu" else f"{self.name}:{self.ordinal}"

    @abstractmethod
    def zeros(self, shape: Sequence[int], dtype) -> "BackendStorage":
        """A storage of shape's elements, all zero."""

    @abstractmethod
    def alloc_uninit(self, shape: Sequence[int], dtype) -> "BackendStorage":
        """A storage of shape's elements, uninitialised."""

    @abstractmethod
    def from_cpu(self, array) -> "BackendStorage":
        """A storage holding a copy of a C-contiguous numpy array (bf16 via ml_dtypes)."""

    @abstractmethod
    def rand_uniform(self, shape, dtype, lo: float, hi: float) -> "BackendStorage":
        """A storage of U(lo, hi) samples from the device's seeded generator."""

    @abstractmethod
    def rand_normal(self, shape, dtype, mean: float, std: float) -> "BackendStorage":
        """A storage of N(mean, std) samples from the device's seeded generator."""

    @abstractmethod
    def set_seed(self, seed: int) -> None:
        """Seed the device's generator (tl.manual_seed calls it)."""

    def get_rng_state(self) -> bytes:
        """The generator's state, as bytes that set_rng_state takes back (tl.get_rng_state)."""
        raise DeviceError(f"{self}: this backend cannot save its generator's state")

    def set_rng_state(self, state: bytes) -> None:
        """Put the generator back in a state get_rng_state returned; ArgumentError for other bytes."""
        raise DeviceError(f"{self}: this backend cannot restore its generator's state")

    @abstractmethod
    def synchronize(self) -> None:
        """Wait for the device's queued work (tl.synchronize calls it)."""

    def full(self, shape, value, dtype) -> "BackendStorage":
        """A storage of shape's elements, all `value`."""
        s = self.alloc_uninit(shape, dtype)
        s.const_set(value, Layout.contiguous(shape))
        return s

    def memory_stats(self) -> Dict[str, int]:
        """Allocator counters, name -> bytes (empty where the backend keeps none)."""
        return {}

    # Bytes of memory the device has, None if unknown: the frontend refuses a larger tensor at
    # once (OutOfMemoryError) instead of asking the allocator
    def total_memory(self) -> Optional[int]:
        """Bytes of memory the device has, None if unknown: a larger tensor is refused at once."""
        return None

    def empty_cache(self) -> None:  # noqa: B027 (optional: a no-op where nothing is cached)
        """Give cached, unused memory back to the device (as torch.cuda.empty_cache)."""

    # ---- memory shared with other frameworks (DLPack) ---------------------------------
    def wrap_memory(self, owner, numel: int, dtype) -> "BackendStorage":
        """A storage over `numel` elements that another framework owns, at `owner.ptr`;
        it keeps `owner` alive (host memory: `owner` also has numpy's __array_interface__)."""
        raise DeviceError(f"{self}: cannot use memory of other frameworks")

    def stream_handle(self) -> Optional[int]:
        """The device's stream as an integer handle (DLPack's `stream`), None without one."""
        return None

    # ---- graphs (capture and replay; tensorlite.graphs is the frontend) ---------------
    capture = None  # the capture in progress on this device, if any

    def graph_pool(self):
        """A new memory pool that graphs captured into it share (torch.cuda.graph_pool_handle)."""
        raise DeviceError(f"{self}: graph capture needs a GPU device (on cpu, run the code eagerly)")

    def capture_begin(self, pool=None):
        """Start recording the device's work into a graph (allocations from `pool`, a new one by default)."""
        raise DeviceError(f"{self}: graph capture needs a GPU device (on cpu, run the code eagerly)")

    def capture_end(self, previous=None):
        """End the capture: the instantiated graph (replay(), reset()). `previous`: a graph
        whose executable may be updated in place instead (then reset)."""
        raise DeviceError(f"{self}: no graph capture is in progress")

    def capture_abort(self) -> None:  # noqa: B027 (optional: a no-op where capture is not supported)
        """End a capture whose code raised, discarding it."""

    def __reduce__(self):  # pickle / deepcopy as the registry's device of that name
        return (get_device, (str(self),))


class BackendStorage(ABC):
    """A flat buffer of `dtype` elements on `device`. See the module docstring."""
    device: BackendDevice
    dtype: object  # tensorlite.dtype.DType
    # in-place writes so far, and the process-wide number of the last one; the frontend keeps
    # them (autograd.note_write: a backward checks that the tensors it reads were not written
    # after they were saved); a backend never touches them
    version: int = 0
    written_at: int = 0

    def addr(self, offset: int) -> int:
        """The address of element `offset` (Tensor.data_ptr, DLPack export)."""
        raise DeviceError(f"{self.device}: its memory has no address other frameworks can use")

    # ---- elementwise ----------------------------------------------------------------
    @abstractmethod
    def affine(self, layout: Layout, mul: float, add: float) -> "BackendStorage":
        """x * mul + add, same dtype."""

    @abstractmethod
    def powf(self, layout: Layout, e: float) -> "BackendStorage":
        """x ** e (floating dtypes)."""

    @abstractmethod
    def elu(self, layout: Layout, alpha: float) -> "BackendStorage":
        """x if x > 0 else alpha * (exp(x) - 1)."""

    @abstractmethod
    def unary_impl(self, op: str, layout: Layout) -> "BackendStorage":
        """op in UNARY_OPS. Same dtype out. Integer and bool dtypes support the ops whose row
        in op_table.UNARY says so (floor/ceil/round as identity); the Tensor casts to float
        for the rest."""

    @abstractmethod
    def binary_impl(self, op: str, rhs: "BackendStorage", lhs_layout: Layout,
                    rhs_layout: Layout) -> "BackendStorage":
        """op in BINARY_OPS; integer div truncates toward zero is NOT used: the Tensor
        only sends `div` for floating dtypes (true division) and `floor_divide` is composed."""

    @abstractmethod
    def cmp(self, op: str, rhs: "BackendStorage", lhs_layout: Layout, rhs_layout: Layout) -> "BackendStorage":
        """op in CMP_OPS; returns a bool storage."""

    @abstractmethod
    def where_cond(self, layout: Layout, t: "BackendStorage", t_layout: Layout,
                   f: "BackendStorage", f_layout: Layout) -> "BackendStorage":
        """self is the bool condition; t and f share a dtype, which the output has."""

    @abstractmethod
    def to_dtype(self, layout: Layout, dtype) -> "BackendStorage":
        """Cast. float->int truncates toward zero; ->bool is x != 0; f32->f16/bf16 rounds
        to nearest even."""

    @classmethod
    def to_dtype_many(cls, items, dtype) -> list:
        """to_dtype of several tensors, items = [(storage, layout), ...], every storage of
        this class: one new contiguous storage per item, in order. Runs them one by one; a
        backend may batch them (the GPU backend: one launch for a few dozen contiguous
        float tensors, mixed precision's per-step weight casts)."""
        return [st.to_dtype(layout, dtype) for st, layout in items]

    @abstractmethod
    def reduce_op(self, op: str, layout: Layout, dims: Tuple[int, ...]) -> "BackendStorage":
        """op in REDUCE_OPS over `dims` (sorted, non-empty), kept as size-1 dims.
        sum/min/max keep the dtype; argmin/argmax take exactly one dim, return int64 and
        pick the first occurrence on ties. min/max of an empty dim raise ShapeError."""

    # ---- sorting, scans, searches (along the last dim; the frontend moves the dim there) ----
    @abstractmethod
    def sort(self, layout: Layout, descending: bool) -> Tuple["BackendStorage", "BackendStorage"]:
        """(values, int64 indices), contiguous, of each row (the last dim) sorted stably, NaN
        as the largest value (PyTorch's order): ties keep their order in either direction."""

    @abstractmethod
    def cumulative(self, op: str, layout: Layout, reverse: bool = False) -> "BackendStorage":
        """Running op ('sum' or 'prod') along each row, from the row's end where `reverse`;
        contiguous. Floats keep the dtype (f16/bf16 accumulate in f32); integers and bool
        accumulate and return int64 (PyTorch's promotion)."""

    @abstractmethod
    def searchsorted(self, layout: Layout, values: "BackendStorage", values_layout: Layout,
                     right: bool) -> "BackendStorage":
        """self: rows (R, N) of sorted sequences; values: (R, M) of the same dtype. int64 (R, M):
        per value, the first position whose element is >= it (right: > it), by PyTorch's
        binary search (a NaN compares false both ways)."""

    # ---- indexing -------------------------------------------------------------------
    @abstractmethod
    def index_select(self, ids: "BackendStorage", layout: Layout, ids_layout: Layout, dim: int) -> "BackendStorage":
        """ids is 1-D; output shape = layout.shape with dim replaced by len(ids)."""

    @abstractmethod
    def gather(self, layout: Layout, ids: "BackendStorage", ids_layout: Layout, dim: int) -> "BackendStorage":
        """torch.gather: ids has the same ndim; out[i][j] = self[ids[i][j]][j] for dim 0."""

    @abstractmethod
    def scatter_add(self, layout: Layout, ids: "BackendStorage", ids_layout: Layout,
                    src: "BackendStorage", src_layout: Layout, dim: int) -> "BackendStorage":
        """self (shape of layout) plus src scattered along dim at ids (ids shape = src shape)."""

    @abstractmethod
    def index_add(self, layout: Layout, ids: "BackendStorage", ids_layout: Layout,
                  src: "BackendStorage", src_layout: Layout, dim: int) -> "BackendStorage":
        """self plus src[.., i, ..] added at self[.., ids[i], ..] along dim (ids 1-D)."""

    @abstractmethod
    def scatter(self, layout: Layout, ids: "BackendStorage", ids_layout: Layout, src: "BackendStorage",
                src_layout: Layout, dim: int, reduce: Optional[str] = None) -> "BackendStorage":
        """self with src written at ids along dim, as scatter_add adds it (torch.scatter: of
        duplicate ids one write wins), or combined there with reduce "prod", "amax" or "amin"
        (NaN propagates; f16/bf16 in f32, cast once)."""

    def scatter_set(self, layout: Layout, ids: "BackendStorage", ids_layout: Layout, src: "BackendStorage",
                    src_layout: Layout, dim: int) -> None:
        """In place (candle's scatter_set): self's elements at the contiguous `layout` get src
        written at ids along dim, as scatter() does. What index_copy_ writes a KV cache's new
        positions with: a backend that overrides it writes only those (the GPU's one kernel);
        this default computes scatter() and copies the whole result back."""
        if not layout.is_contiguous():
            raise ShapeError("scatter_set: the written-to layout must be contiguous")
        self.scatter(layout, ids, ids_layout, src, src_layout, dim).copy_strided_src(
            self, layout.offset, Layout.contiguous(layout.shape))

    # ---- matmul, conv, pooling ------------------------------------------------------
    @abstractmethod
    def matmul(self, rhs: "BackendStorage", bmnk: Tuple[int, int, int, int],
               lhs_layout: Layout, rhs_layout: Layout) -> "BackendStorage":
        """lhs_layout is 3-D (b, m, k), rhs_layout (b, k, n); either may have batch stride 0
        or be a transposed view. Output contiguous (b, m, n)."""

    def matmul_add_bias(self, rhs: "BackendStorage", mnk: Tuple[int, int, int], lhs_layout: Layout,
                        rhs_layout: Layout, bias: "BackendStorage", bias_layout: Layout) -> "BackendStorage":
        """lhs (self) @ rhs + bias for 2-D lhs (m, k), rhs (k, n) and bias (n,) added to every
        row, one dtype: a new contiguous (m, n), F.linear's forward. Runs matmul, then the
        broadcast add; a backend may fuse the add into the GEMM (cuda: cuBLASLt's epilogue)."""
        m, n, k = mnk
        out = self.matmul(rhs, (1, m, n, k), batch_of_one(lhs_layout), batch_of_one(rhs_layout))
        return out.binary_impl("add", bias, Layout.contiguous((m, n)),
                               Layout((m, n), (0, bias_layout.strides[0]), bias_layout.offset))

    def matmul_add(self, rhs: "BackendStorage", mnk: Tuple[int, int, int], lhs_layout: Layout, rhs_layout: Layout,
                   addend: "BackendStorage", addend_layout: Layout) -> "BackendStorage":
        """lhs (self) @ rhs + addend for 2-D lhs (m, k), rhs (k, n) and addend (m, n), one
        dtype: a new contiguous (m, n), tl.addmm's forward without autograd (a residual add
        after a projection). Runs matmul, then the add; the GPU backend adds in its GEMV."""
        m, n, k = mnk
        out = self.matmul(rhs, (1, m, n, k), batch_of_one(lhs_layout), batch_of_one(rhs_layout))
        return out.binary_impl("add", addend, Layout.contiguous((m, n)), addend_layout)

    def rms_norm_matmul(self, layout: Layout, norm_weight: Optional["BackendStorage"], nw_layout: Optional[Layout],
                        eps: float, rhs: "BackendStorage", rhs_layout: Layout, gated: bool,
                        scale: Optional["BackendStorage"] = None,
                        s_layout: Optional[Layout] = None) -> "BackendStorage":
        """rms_norm(self's rows (m, k), norm_weight, eps) @ rhs (k, n): a new contiguous (m, n);
        `gated`: silu(y[:, :n/2]) * y[:, n/2:], (m, n/2) (SwiGLU). `scale` (n,): rhs is an int8
        weight's transpose, its column j scaled by scale[j] (matmul_int8's). F.rms_norm_linear's
        forward without autograd. Runs the ops; the GPU backend runs one row as one GEMV."""
        (m, k), n = layout.shape, rhs_layout.shape[1]
        normed = self.rms_norm(layout, norm_weight, nw_layout, eps)
        if scale is None:
            y = normed.matmul(rhs, (1, m, n, k), batch_of_one(Layout.contiguous((m, k))), batch_of_one(rhs_layout))
        else:
            y = normed.matmul_int8(Layout.contiguous((m, k)), rhs, rhs_layout.transpose(0, 1), scale, s_layout)
        if not gated:
            return y
        half = n // 2
        return y.binary_impl("silu_mul", y, Layout((m, half), (n, 1), 0), Layout((m, half), (n, 1), half))

    def matmul_int8(self, layout: Layout, weight: "BackendStorage", w_layout: Layout, scale: "BackendStorage",
                    s_layout: Layout, addend: Optional["BackendStorage"] = None,
                    addend_layout: Optional[Layout] = None) -> "BackendStorage":
        """lhs (self, 2-D (m, k), floating) @ (weight * scale[:, None])^T (+ addend (m, n)): weight
        (n, k) int8, scale (n,) and addend of self's dtype; a new contiguous (m, n). Weight-only
        int8 linear (F.linear_int8) without autograd. Dequantises the weight to self's dtype and
        runs matmul (then the add); the GPU backend streams the int8 weight through a GEMV kernel
        for a few rows (decoding), the add in its store."""
        (m, k), n = layout.shape, w_layout.shape[0]
        w = weight.to_dtype(w_layout, self.dtype).binary_impl(
            "mul", scale, Layout.contiguous((n, k)), Layout((n, k), (s_layout.strides[0], 0), s_layout.offset))
        w_t = Layout.contiguous((n, k)).transpose(0, 1)
        y = self.matmul(w, (1, m, n, k), batch_of_one(layout), batch_of_one(w_t))
        return y if addend is None else y.binary_impl("add", addend, Layout.contiguous((m, n)), addend_layout)

    def repeat_ids(self, layout: Layout) -> Optional[Tuple[Optional["BackendStorage"], int]]:
        """For 1-D integer or bool counts (self through `layout`): (ids, their number) where the
        backend builds ids = 0..n-1, each i repeated counts[i] times (int64, contiguous), in one
        step from memory it can read directly ((None, 0) where a count is negative); or None
        (the default), and ops/index.py's repeat_ids composes them on the device from cumsum and
        searchsorted (x[mask], repeat_interleave). cpu: numpy's repeat, without the search."""
        return None

    def batch_norm_fused(self, layout: Layout, weight: "BackendStorage", w_layout: Layout, bias: "BackendStorage",
                         b_layout: Layout, mean: "BackendStorage", m_layout: Layout, var: "BackendStorage",
                         v_layout: Layout, training: bool, momentum: float, eps: float) -> Optional["BackendStorage"]:
        """Spatial batch norm forward in one library call, or None where the backend has none
        for the case (the default): F.batch_norm then runs its composite. When training, the
        running mean/var are updated in place. weight/bias/mean/var: 1-d (C,) of the parameter
        dtype. The GPU backend answers through cuDNN / MIOpen."""
        return None

    def matmul_row_sums(self, rhs: "BackendStorage", mnk: Tuple[int, int, int], lhs_layout: Layout,
                        rhs_layout: Layout) -> Tuple["BackendStorage", "BackendStorage"]:
        """(lhs (self) @ rhs, the row sums of lhs) for 2-D lhs (m, k) and rhs (k, n), both new
        and contiguous ((m, n) and (m,)): F.linear's weight gradient g^T x and bias gradient
        from one call. Runs matmul, then the sum; a backend may fuse the sum into the GEMM
        (cuda: cuBLASLt's bias-gradient epilogue)."""
        m, n, k = mnk
        return (self.matmul(rhs, (1, m, n, k), batch_of_one(lhs_layout), batch_of_one(rhs_layout)),
                self.reduce_op("sum", lhs_layout, (1,)))

    @abstractmethod
    def conv1d(self, layout: Layout, kernel: "BackendStorage", kernel_layout: Layout,
               params: ConvParams) -> "BackendStorage":
        """1-D convolution of the (N, C, L) input by kernel."""

    @abstractmethod
    def conv2d(self, layout: Layout, kernel: "BackendStorage", kernel_layout: Layout,
               params: ConvParams) -> "BackendStorage":
        """2-D convolution of the (N, C, H, W) input by kernel."""

    @abstractmethod
    def conv_transpose1d(self, layout: Layout, kernel: "BackendStorage", kernel_layout: Layout,
                         params: ConvParams) -> "BackendStorage":
        """1-D transposed convolution of the (N, C, L) input by kernel."""

    @abstractmethod
    def conv_transpose2d(self, layout: Layout, kernel: "BackendStorage", kernel_layout: Layout,
                         params: ConvParams) -> "BackendStorage":
        """2-D transposed convolution of the (N, C, H, W) input by kernel."""

    @abstractmethod
    def avg_pool2d(self, layout: Layout, params: PoolParams) -> "BackendStorage":
        """2-D average pooling of the (N, C, H, W) input."""

    @abstractmethod
    def max_pool2d(self, layout: Layout, params: PoolParams) -> "BackendStorage":
        """2-D max pooling of the (N, C, H, W) input."""

    @abstractmethod
    def max_pool2d_backward(self, layout: Layout, params: PoolParams, grad: "BackendStorage",
                            grad_layout: Layout) -> "BackendStorage":
        """self is max_pool2d's (N, C, H, W) float input x, grad the gradient of its output (N, C,
        oh, ow; x's dtype). Returns the input's gradient (x's shape and dtype, contiguous): each
        window's gradient goes to the element PyTorch's max pooling picks, scanning the window's
        unpadded elements in row-major order from a running max of -inf at the first of them and
        taking a value that is greater or NaN (a tie: the first maximum; NaNs: the last NaN; only
        -inf: the first unpadded element; a window of padding alone: none, its gradient is dropped);
        overlapping windows add their gradients."""

    @abstractmethod
    def upsample_nearest2d(self, layout: Layout, out_h: int, out_w: int) -> "BackendStorage":
        """PyTorch 'nearest': src index = floor(dst * in / out)."""

    # ---- copies ---------------------------------------------------------------------
    @abstractmethod
    def copy_strided_src(self, dst: "BackendStorage", dst_offset: int, src_layout: Layout) -> None:
        """In place: write self's elements (read through src_layout, row-major order)
        contiguously into dst starting at element dst_offset."""

    @abstractmethod
    def copy2d(self, dst: "BackendStorage", d1: int, d2: int, src_stride1: int, dst_stride1: int,
               src_offset: int, dst_offset: int) -> None:
        """In place: d1 rows of d2 contiguous elements; row i of src starts at
        src_offset + i*src_stride1, of dst at dst_offset + i*dst_stride1 (used by cat)."""

    def copy_runs(self, runs) -> None:
        """In place: runs of contiguous elements of other storages of this class into this
        one, runs = [(src, src_offset, dst_offset, count), ...] (DDP's bucket buffers, cat of
        one row). One copy2d each here; a backend may batch them (the GPU backend: one launch
        for a few dozen float runs of this storage's dtype)."""
        for src, src_offset, dst_offset, n in runs:
            src.copy2d(self, 1, n, n, n, src_offset, dst_offset)

    @abstractmethod
    def const_set(self, value, layout: Layout) -> None:
        """In place: every element that layout addresses becomes `value`."""

    @abstractmethod
    def to_cpu(self, layout: Layout):
        """A C-contiguous numpy array of layout's shape (a copy)."""

    # ---- fused nn ops (candle's CustomOp); each has a composite reference in nn.functional
    @abstractmethod
    def softmax_last_dim(self, layout: Layout) -> "BackendStorage":
        """Softmax over the last dim."""

    @abstractmethod
    def log_softmax(self, layout: Layout) -> "BackendStorage":
        """Over the last dim."""

    @abstractmethod
    def layer_norm(self, layout: Layout, weight: Optional["BackendStorage"], w_layout: Optional[Layout],
                   bias: Optional["BackendStorage"], b_layout: Optional[Layout], eps: float) -> "BackendStorage":
        """Normalise over the last dim; weight/bias 1-D of that size or None."""

    @abstractmethod
    def rms_norm(self, layout: Layout, weight: Optional["BackendStorage"], w_layout: Optional[Layout],
                 eps: float) -> "BackendStorage":
        """x / sqrt(mean(x^2, -1) + eps) * weight."""

    def add_rms_norm(self, layout: Layout, res: "BackendStorage", res_layout: Layout,
                     weight: Optional["BackendStorage"], w_layout: Optional[Layout], eps: float):
        """(sum, normed): sum = self + res (one shape and dtype; contiguous, rounded to the
        dtype), normed = rms_norm(sum). A transformer block's residual add and the next
        RMSNorm; this default runs the two ops, a backend may fuse them (the GPU's one kernel)."""
        total = self.binary_impl("add", res, layout, res_layout)
        return total, total.rms_norm(Layout.contiguous(tuple(layout.shape)), weight, w_layout, eps)

    def add_layer_norm(self, layout: Layout, res: "BackendStorage", res_layout: Layout,
                       weight: Optional["BackendStorage"], w_layout: Optional[Layout],
                       bias: Optional["BackendStorage"], b_layout: Optional[Layout], eps: float, out_dtype):
        """(sum, normed): sum = self + res (one shape; res of self's float dtype or, where self is
        float32, of a half type; contiguous, of self's dtype), normed = layer_norm(sum) cast to
        out_dtype (self's dtype or res's). A pre-norm block's residual add, the next LayerNorm
        and the cast of its output to the products' dtype (F.add_layer_norm's forward); this
        default runs the ops, a backend may fuse them (the GPU's one kernel)."""
        if res.dtype is not self.dtype:
            res, res_layout = res.to_dtype(res_layout, self.dtype), Layout.contiguous(tuple(res_layout.shape))
        total = self.binary_impl("add", res, layout, res_layout)
        normed = total.layer_norm(Layout.contiguous(tuple(layout.shape)), weight, w_layout, bias, b_layout, eps)
        if out_dtype is not self.dtype:
            normed = normed.to_dtype(Layout.contiguous(tuple(layout.shape)), out_dtype)
        return total, normed

    def add_layer_norm_backward(self, layout: Layout, grad: "BackendStorage", grad_layout: Layout,
                                grad_sum: Optional["BackendStorage"], gs_layout: Optional[Layout],
                                weight: Optional["BackendStorage"], w_layout: Optional[Layout], eps: float,
                                res_dtype, weight_grad: bool, bias_grad: bool):
        """self is add_layer_norm's sum x (its dtype: the stream's). grad: the gradient of
        normed (of add_layer_norm's out_dtype); grad_sum: that of the sum (self's dtype; None:
        none). Returns (dsum, dres, dweight or None, dbias or None): dsum = layer_norm's dx +
        grad_sum, the gradient of both addends, and dres = dsum cast to res_dtype (dsum itself
        where that is self's dtype), dweight/dbias as layer_norm_backward's. A backend may fuse
        it (the GPU's one row kernel)."""
        if grad.dtype is not self.dtype:
            grad, grad_layout = grad.to_dtype(grad_layout, self.dtype), Layout.contiguous(tuple(grad_layout.shape))
        dx, dw, db = self.layer_norm_backward(layout, grad, grad_layout, weight, w_layout, eps, weight_grad,
                                              bias_grad)
        if grad_sum is not None:
            dx = dx.binary_impl("add", grad_sum, Layout.contiguous(tuple(layout.shape)), gs_layout)
        dres = dx if res_dtype is self.dtype else dx.to_dtype(Layout.contiguous(tuple(layout.shape)), res_dtype)
        return dx, dres, dw, db

    @abstractmethod
    def rope(self, layout: Layout, cos: "BackendStorage", cos_layout: Layout, sin: "BackendStorage",
             sin_layout: Layout, variant: str) -> "BackendStorage":
        """Rotary embedding. variant 'rope' (half-split pairs (i, i+d/2), x (b,h,t,d)),
        'rope_i' (interleaved pairs (2i, 2i+1), x (b,h,t,d)), 'rope_thd' (half-split,
        x (b,t,h,d)). cos/sin have shape (b, t, d/2) (the Tensor broadcasts a (t, d/2)
        table with batch stride 0)."""

    def rope_kv_cache(self, layout: Layout, cos: "BackendStorage", cos_layout: Layout, sin: "BackendStorage",
                      sin_layout: Layout, k_cache: "BackendStorage", k_layout: Layout, v_cache: "BackendStorage",
                      v_layout: Layout, ids: "BackendStorage", ids_layout: Layout) -> "BackendStorage":
        """A decode step's rotary embedding and key/value cache write. self: x (b, hq + 2*hkv,
        t, d), the heads of one q/k/v product (queries, keys, values); k_cache, v_cache: (b,
        hkv, S, d), contiguous, written in place at the int64 positions ids (t,) along dim 2:
        the keys rotated, the values as they are. Returns rope(x's query and key heads,
        variant 'rope'), as rope returns it. This default runs rope and two scatter_sets; a
        backend may fuse them (the GPU's one kernel)."""
        b, h, t, d = layout.shape
        hkv = k_layout.shape[1]
        qk = self.rope(Layout((b, h - hkv, t, d), layout.strides, layout.offset), cos, cos_layout, sin, sin_layout,
                       "rope")
        wide_ids = Layout((b, hkv, t, d), (0, 0, ids_layout.strides[0], 0), ids_layout.offset)
        keys = Layout((b, hkv, t, d), Layout.contiguous((b, h - hkv, t, d)).strides, (h - 2 * hkv) * t * d)
        k_cache.scatter_set(k_layout, ids, wide_ids, qk, keys, 2)
        values = Layout((b, hkv, t, d), layout.strides, layout.offset + (h - hkv) * layout.strides[1])
        v_cache.scatter_set(v_layout, ids, wide_ids, self, values, 2)
        return qk

    # ---- a recurrent cell's step, in place (F.rnn_layer off the numpy path): each operand an
    # (N, F) layout of contiguous rows, the others (storage, layout) pairs, None for absent ones
    def rnn_cell(self, mode: str, layout: Layout, gh, b_hh, state, h_out, c_out, saved) -> None:
        """One step of a recurrent cell's pointwise part (mode: tensorlite.rnn_reference.MODES):
        self is gi = x W_ih^T + b_ih (N, G), gh = h W_hh^T (N, G), b_hh (G,) or None; state the c (LSTM) or h
        (GRU) before the step. Writes h_out (N, H), c_out (LSTM) and `saved` (rnn_reference's
        SAVED blocks of H). This default is the numpy reference; a backend may fuse it (the GPU's
        one kernel)."""
        h, c, s = rnn_reference.cell_forward(mode, self.to_cpu(layout), _host(gh), _host(b_hh),
                                                   _host(state))
        for out, a in ((h_out, h), (c_out, c), (saved, s)):
            _write(out, a)

    def rnn_cell_backward(self, mode: str, layout: Layout, state, cell, g_out, dh_rec, carry, dgi, dgh) -> None:
        """rnn_cell's step back: self/layout what it saved (RNN: its h_out); state and cell (LSTM's
        c_out) as it read and wrote them; the gradient reaching h is g_out + dh_rec (+ carry for
        GRU); carry, in place, LSTM's dc (from the step after, then to the step before) or GRU's
        z * dh. Writes the gates' gradients dgi (N, G) and GRU's dgh (those of gh)."""
        got = rnn_reference.cell_backward(mode, self.to_cpu(layout), *(_host(p) for p in (state, cell, g_out, dh_rec,
                                                                                           carry)))
        for out, a in zip((carry, dgi, dgh), got):
            _write(out, a)

    # ---- backward of the fused ops, fused losses and optimizer steps ------------------------
    # Inputs are read through their layouts; `grad` operands have the forward output's shape
    # and dtype; outputs are fresh contiguous storages (adamw_step works in place).
    @abstractmethod
    def softmax_last_dim_backward(self, layout: Layout, grad: "BackendStorage",
                                  grad_layout: Layout) -> "BackendStorage":
        """self is softmax_last_dim's OUTPUT y: returns y * (grad - sum(grad * y, -1))."""

    @abstractmethod
    def log_softmax_backward(self, layout: Layout, grad: "BackendStorage", grad_layout: Layout) -> "BackendStorage":
        """self is log_softmax's OUTPUT y: returns grad - exp(y) * sum(grad, -1)."""

    @abstractmethod
    def layer_norm_backward(self, layout: Layout, grad: "BackendStorage", grad_layout: Layout,
                            weight: Optional["BackendStorage"], w_layout: Optional[Layout], eps: float,
                            weight_grad: bool, bias_grad: bool):
        """self is layer_norm's input x. Returns (dx, dweight or None, dbias or None); mean and
        1/std are recomputed from x in f32 (f64 for f64); dweight = sum over rows of
        grad * x_hat, dbias = sum over rows of grad (1-d of the last dim, self's dtype)."""

    @abstractmethod
    def rms_norm_backward(self, layout: Layout, grad: "BackendStorage", grad_layout: Layout,
                          weight: Optional["BackendStorage"], w_layout: Optional[Layout], eps: float,
                          weight_grad: bool):
        """self is rms_norm's input x. Returns (dx, dweight or None), as layer_norm_backward."""

    @abstractmethod
    def rope_backward(self, layout: Layout, cos: "BackendStorage", cos_layout: Layout, sin: "BackendStorage",
                      sin_layout: Layout, variant: str) -> "BackendStorage":
        """self is the gradient of rope's output: the inverse rotation (by -theta) of it,
        i.e. the gradient with respect to x. Arguments as rope."""

    @abstractmethod
    def cross_entropy(self, layout: Layout, target: "BackendStorage", target_layout: Layout,
                      weight: Optional["BackendStorage"], w_layout: Optional[Layout], ignore_index: int):
        """self: logits with the classes on the LAST dim (R rows of C). target: int64 class ids
        of shape layout.shape[:-1]; weight: 1-d (C,) of self's dtype or None. Returns
        (loss, lse, wt), contiguous storages of R elements in float32 (float64 for float64
        logits): lse = logsumexp of the row, wt = weight[t] (1 without weights, 0 where
        t == ignore_index), loss = wt * (lse - x[t]). A target outside [0, C) that is not
        ignore_index raises IndexOutOfRange."""

    @abstractmethod
    def cross_entropy_backward(self, layout: Layout, target: "BackendStorage", target_layout: Layout,
                               lse: "BackendStorage", wt: "BackendStorage", grad: "BackendStorage",
                               grad_layout: Layout) -> "BackendStorage":
        """d loss / d logits for cross_entropy's (lse, wt) and the per-row loss gradient `grad`
        (float32/float64 as the loss, R elements through grad_layout, which may broadcast):
        grad[r] * wt[r] * (softmax(x[r]) - onehot(t[r])), self's shape and dtype."""

    @abstractmethod
    def unary_backward(self, op: str, layout: Layout, grad: "BackendStorage", grad_layout: Layout) -> "BackendStorage":
        """op in UNARY_BACKWARD_OPS; self is the op's input x: grad * op'(x) in one pass."""

    @abstractmethod
    def adamw_step(self, layout: Layout, grad: "BackendStorage", grad_layout: Layout, exp_avg: "BackendStorage",
                   exp_avg_sq: "BackendStorage", max_exp_avg_sq: Optional["BackendStorage"], lr: float,
                   betas: Tuple[float, float], eps: float, weight_decay: float, step: int,
                   decoupled: bool = True, maximize: bool = False) -> None:
        """In place: one torch.optim.AdamW (decoupled) / Adam (L2, decoupled=False) step of the
        parameter self (read and written through `layout`, which must not address an element
        twice) with `grad` (self's dtype and shape). exp_avg, exp_avg_sq and (amsgrad only)
        max_exp_avg_sq are contiguous state storages of layout.numel() elements in
        adam_state_dtype(self.dtype), updated in place; `step` counts this step (1 first).
        f16/bf16 parameters compute in f32 and round once.

        Capturable (torch's capturable=True): `step` is a (storage, layout) pair addressing one
        float32 element on self's device that holds this step's count (already incremented),
        and `lr` a float or such a pair; their values are read when the update runs (a
        replayed graph sees the current ones), the bias corrections computed from them
        (check_adam_scalar checks the pairs)."""

    @classmethod
    def adamw_steps(cls, steps, lr: float, betas: Tuple[float, float], eps: float, weight_decay: float,
                    decoupled: bool = True, maximize: bool = False) -> None:
        """Several adamw_step calls that share their hyper-parameters, one optimizer step's
        worth: steps = [(param, layout, grad, grad_layout, exp_avg, exp_avg_sq,
        max_exp_avg_sq or None, step), ...], every param a storage of this class (`step` and
        `lr` as adamw_step takes them: numbers, or device pairs when capturable). Runs them
        one by one; a backend may batch them (the GPU backend: one launch per few dozen)."""
        for p, layout, grad, grad_layout, m, v, vmax, step in steps:
            p.adamw_step(layout, grad, grad_layout, m, v, vmax, lr, betas, eps, weight_decay, step, decoupled,
                         maximize)

    @abstractmethod
    def sdpa(self, layout: Layout, k: "BackendStorage", k_layout: Layout, v: "BackendStorage",
             v_layout: Layout, mask: Optional["BackendStorage"], mask_layout: Optional[Layout],
             scale: float, is_causal: bool, return_lse: bool = False):
        """Attention for q (self) (b, hq, L, d), k/v (b, hk, S, d) with hq % hk == 0 (GQA:
        q head h uses kv head h // (hq // hk)). mask is None, bool (True = keep) or
        additive float of the query dtype, broadcast to (b, hq, L, S). is_causal aligns
        top-left (query i sees keys j <= i), as torch does. Output (b, hq, L, dv) in the
        layout `sdpa_layout(layout, dv)` (q's memory order: heads-inner q gives a heads-inner
        output, so the usual out.transpose(1, 2).reshape(b, L, hq * dv) is a view).

        return_lse: return (out, lse) where lse (b, hq, L), contiguous, float32 (float64
        for float64 inputs), is the logsumexp of each row's kept scaled scores (-inf for a
        row with no kept key), or None when this path cannot feed `sdpa_backward` (the
        caller then differentiates the composite)."""

    def sdpa_backward(self, layout: Layout, k: "BackendStorage", k_layout: Layout, v: "BackendStorage",
                      v_layout: Layout, out: "BackendStorage", out_layout: Layout, grad: "BackendStorage",
                      grad_layout: Layout, lse: "BackendStorage", mask: Optional["BackendStorage"],
                      mask_layout: Optional[Layout], scale: float, is_causal: bool):
        """Gradients (dq, dk, dv) of sdpa (same arguments as the forward) for the output
        `out` and its incoming gradient `grad` (both (b, hq, L, dv) in q's dtype), from the
        `lse` that sdpa(return_lse=True) returned: storages of q's, k's and v's shapes in
        q's dtype, in the layouts sdpa_layout(layout), sdpa_layout(k_layout) and
        sdpa_layout(v_layout) (dk/dv summed over the query heads that share a kv head). An
        additive mask gets no gradient here. Backends without it raise NotImplementedError
        (and return lse None from sdpa)."""
        raise NotImplementedError(f"sdpa_backward is not implemented by {type(self).__name__}")


def _host(pair):
    """A (storage, layout) pair's numpy array, or None."""
    return None if pair is None else pair[0].to_cpu(pair[1])


def _write(pair, a) -> None:
    """Write numpy `a` into the contiguous (storage, layout) pair, cast to its dtype (None: skip)."""
    if pair is not None and a is not None:
        st, layout = pair
        st.device.from_cpu(dtypes.cast_array(a, st.dtype)).copy_strided_src(st, layout.offset,
                                                                            Layout.contiguous(a.shape))


def check_cross_entropy(op: str, logits, layout: Layout, target, target_layout: Layout) -> None:
    """The operand rules of cross_entropy(_backward) that every backend enforces: logits
    (..., C) and int64 class ids of the leading shape."""
    if layout.ndim == 0 or tuple(target_layout.shape) != tuple(layout.shape[:-1]):
        raise storage_error(ShapeError, op, "expected logits (..., C) and target of the leading shape",
                            self=(logits, layout), target=(target, target_layout))
    if target.dtype is not dtypes.int64:
        raise storage_error(DTypeError, op, "target must be int64 class ids", self=(logits, layout),
                            target=(target, target_layout))


def adam_state_dtype(dtype):
    """Adam's moment buffers: float64 for float64 parameters, else float32."""
    return dtypes.float64 if dtype is dtypes.float64 else dtypes.float32


def check_adam_scalar(op: str, name: str, value, param, layout: Layout):
    """adamw_step's `lr` or `step`: a number passes as it is; a (storage, layout) pair
    (capturable) must address one float32 element on the parameter's device."""
    if not isinstance(value, tuple):
        return value
    st, lay = value
    if st.device is not param.device:
        raise storage_error(DeviceError, op, f"{name} must be on the parameter's device",
                            self=(param, layout), **{name: value})
    if st.dtype is not dtypes.float32 or lay.numel() != 1:
        raise storage_error(DTypeError, op, f"{name} must be one float32 element", self=(param, layout),
                            **{name: value})
    return value


def adam_bias_corrections(lr: float, betas: Tuple[float, float], step: int) -> Tuple[float, float]:
    """(step_size, sqrt(bias_correction2)) of step `step` as torch computes them on the host."""
    b1, b2 = betas
    return lr / (1.0 - b1 ** step), math.sqrt(1.0 - b2 ** step)


def check_matmul(lhs, rhs, bmnk, lhs_layout: Layout, rhs_layout: Layout):
    """The storage matmul's operands as the contract states them: (b, m, k) x (b, k, n)."""
    b, m, n, k = bmnk
    if lhs_layout.shape != (b, m, k) or rhs_layout.shape != (b, k, n):
        raise storage_error(ShapeError, "matmul", f"expected (b, m, k) x (b, k, n) for bmnk={bmnk}",
                            lhs=(lhs, lhs_layout), rhs=(rhs, rhs_layout))


def batch_of_one(layout: Layout) -> Layout:
    """A 2-D layout as the (1, rows, cols) operand matmul takes."""
    return Layout((1,) + layout.shape, (0,) + layout.strides, layout.offset)


SDPA_MODES = ("auto", "flash", "gemm")


def sdpa_layout(layout: Layout, last: Optional[int] = None) -> Layout:
    """Layout of a fresh sdpa result (output, gradients) shaped like the (b, h, t, d) operand
    `layout` (last dim `last` if given): (b, t, h, d) in memory when the operand is such a
    buffer's transposed view (t stride > h stride), as a transformer's
    x.reshape(b, t, h, d).transpose(1, 2) is, so that the inverse transpose + reshape of the
    result is a view and no copy; else contiguous."""
    b, h, t, d = layout.shape[:3] + (layout.shape[3] if last is None else last,)
    if h > 1 and t > 1 and layout.strides[2] > layout.strides[1]:
        return Layout((b, h, t, d), (t * h * d, d, h * d, 1))
    return Layout.contiguous((b, h, t, d))


def sdpa_mode() -> str:
    """TENSORLITE_SDPA: 'flash' forces the fused flash-attention kernels (an error where they
    do not cover the case), 'gemm' the scores-in-memory path (GEMM + masked softmax + GEMM,
    differentiated as a composite), 'auto' (default) flash where covered, else gemm."""
    mode = os.environ.get("TENSORLITE_SDPA", "auto").strip().lower() or "auto"
    if mode not in SDPA_MODES:
        raise ArgumentError(f"TENSORLITE_SDPA must be one of {', '.join(SDPA_MODES)}, got {mode!r}")
    return mode


# =====================================================================================
# Registry
# =====================================================================================

class _Entry:
    def __init__(self, name: str, factory: Optional[Callable[[int], BackendDevice]], error: Optional[str] = None):
        self.name, self.factory, self.error = name, factory, error
        self.devices: Dict[int, BackendDevice] = {}


_REGISTRY: Dict[str, _Entry] = {}
_LOCK = threading.RLock()
_ENTRY_POINTS_LOADED = False


def register(name: str, factory: Callable[[int], BackendDevice]) -> None:
    """Register a backend: `factory(ordinal)` returns its BackendDevice or raises
    BackendUnavailable (or any exception) with the reason the backend cannot run here.
    Factories are called lazily, on first use of the device."""
    with _LOCK:
        _REGISTRY[name] = _Entry(name, factory)


@contextlib.contextmanager
def scoped_registry():
    """A block whose registrations are undone when it ends: register() calls and entry points
    loaded inside it change the registry until then, after which the registry (and whether
    entry points were loaded) is as it was before the block. For tests, or trying a plugin:

        with tl.backends.scoped_registry():
            tl.backends.register("toy", ToyDevice)
            ...
    """
    global _ENTRY_POINTS_LOADED
    with _LOCK:
        saved, loaded = dict(_REGISTRY), _ENTRY_POINTS_LOADED
    try:
        yield
    finally:
        with _LOCK:
            _REGISTRY.clear()
            _REGISTRY.update(saved)
            _ENTRY_POINTS_LOADED = loaded


def load_entry_points(reload: bool = False) -> None:
    """Register the backends of the entry-point group `tensorlite.backends` (done once, on
    the first device lookup); reload=True reads the group again. A plugin that fails to load
    is registered as unavailable, with the reason."""
    global _ENTRY_POINTS_LOADED
    if _ENTRY_POINTS_LOADED and not reload:
        return
    _ENTRY_POINTS_LOADED = True
    try:
        from importlib.metadata import entry_points
        for ep in entry_points(group="tensorlite.backends"):
            try:
                register(ep.name, ep.load())
            except Exception as e:  # a broken plugin must not break import
                _REGISTRY[ep.name] = _Entry(ep.name, None, f"entry point {ep.value!r} failed to load: {e}")
    except Exception:
        pass


class Device(str):
    """A device name with torch.device's face: `tl.device('cuda:1')`, `tl.device('cuda', 1)`,
    `.type`, `.index` (None where the name gives none, as torch's). It is the str itself
    ('cuda:1'), so it goes wherever a device name does and compares equal to one;
    Tensor.device returns one.

    >>> import tensorlite as tl
    >>> d = tl.device('cuda', 1)
    >>> d, d.type, d.index, d == 'cuda:1'
    (device(type='cuda', index=1), 'cuda', 1, True)
    """
    __slots__ = ()

    def __new__(cls, type, index=None):
        spec = str(type)  # a BackendDevice's own name too: 'cpu', 'cuda:1'
        name, _ = parse_device(spec)  # the one check of a device string's form
        if index is not None:
            if ":" in spec:
                raise DeviceError(f"device({spec!r}, {index!r}): the string already names an ordinal")
            if isinstance(index, bool) or not isinstance(index, int) or index < 0:
                raise DeviceError(f"device({spec!r}, {index!r}): the ordinal must be an int >= 0")
            spec = f"{name}:{index}"
        return str.__new__(cls, spec)

    @property
    def type(self) -> str:
        return str(self).partition(":")[0]  # a plain str (partition would return self itself)

    @property
    def index(self):
        idx = str(self).partition(":")[2]
        return int(idx) if idx else None

    def __repr__(self):
        return f"device(type={self.type!r})" if self.index is None else \
            f"device(type={self.type!r}, index={self.index})"

    def __reduce__(self):  # pickles as the class, not as a plain str
        return (Device, (str(self),))


def parse_device(spec) -> Tuple[str, int]:
    """(backend name, ordinal) of a device string or BackendDevice.

    >>> from tensorlite.backend import parse_device
    >>> parse_device('cuda:1')
    ('cuda', 1)
    """
    if isinstance(spec, BackendDevice):
        return spec.name, spec.ordinal
    spec = str(spec)
    name, colon, idx = spec.partition(":")
    if not name or (colon and not idx.isdigit()):
        raise DeviceError(f"invalid device string {spec!r}: expected 'name' or 'name:ordinal'")
    return name, int(idx) if idx else 0


def get_device(spec) -> BackendDevice:
    """The BackendDevice for 'cpu', 'cuda', 'cuda:1', 'rocm:0', ... (created on first use)."""
    if isinstance(spec, BackendDevice):
        return spec
    load_entry_points()
    name, ordinal = parse_device(spec)
    try:
        return _create_device(name, ordinal, spec)
    except BackendUnavailable as e:  # what a user needs: no such device here, why, and what there is
        raise BackendUnavailable(f"there is no {name!r} device here ({e}); available devices: "
                                 f"{available_devices()}") from e.__cause__


def _create_device(name, ordinal, spec) -> BackendDevice:
    """get_device's work; a BackendUnavailable's message is the backend's reason alone."""
    with _LOCK:
        entry = _REGISTRY.get(name)
        if entry is None:
            raise DeviceError(f"unknown device {str(spec)!r}; registered backends: {sorted(_REGISTRY)}")
        dev = entry.devices.get(ordinal)
        if dev is not None:
            return dev
        if entry.error is not None and entry.factory is None:
            raise BackendUnavailable(entry.error)
        try:
            dev = entry.factory(ordinal)
        except Exception as e:  # the reason: a BackendUnavailable's message, else the exception's type and message
            known = isinstance(e, BackendUnavailable)
            why = str(e) if known else f"{type(e).__name__}: {e}"
            if ordinal == 0:
                entry.error = why
            raise BackendUnavailable(why) from (None if known else e)
        # the factory may have imported a module that re-registered `name`: keep one device
        entry = _REGISTRY.get(name, entry)
        return entry.devices.setdefault(ordinal, dev)


def registered() -> list:
    """The registered backends' names, whether or not they can run here."""
    load_entry_points()
    return sorted(_REGISTRY)


def available() -> Dict[str, object]:
    """name -> True if its device 0 can be created here, else the reason it cannot."""
    load_entry_points()
    out = {}
    for name in list(_REGISTRY):
        try:
            _create_device(name, 0, name)
            out[name] = True
        except BackendUnavailable:
            out[name] = _REGISTRY[name].error or "unavailable"
    return out


def available_devices() -> list:
    """The names of the backends that can run here (see available())."""
    return [n for n, ok in available().items() if ok is True]


def initialized_devices() -> list:
    """The BackendDevices created so far."""
    with _LOCK:
        return [d for e in _REGISTRY.values() for d in e.devices.values()]


def default_device() -> str:
    """The default device's name: $TENSORLITE_DEVICE, else 'cpu'."""
    return os.environ.get("TENSORLITE_DEVICE", "cpu")


def best_device() -> str:
    """The first available of cuda, rocm, cpu (used by the examples' --device default)."""
    av = available()
    return next((name for name in ("cuda", "rocm") if av.get(name) is True), "cpu")
