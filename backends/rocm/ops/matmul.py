"""Matrix products: matmul and its BLAS epilogues, and `gemm`, the one routing every GEMM of
the backend takes (conv and attention included): products of a few rows by a row-major
weight (decoding's linear layers) to gemv.hip's GEMV kernels; other floats to the platform's
BLAS (through device.blas), transposed views as op=T without a copy; integers, and floats
where the platform has no BLAS (the emulated platform), to conv.hip's portable gemm_<t>.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Tuple

from tensorlite.backend import batch_of_one, check_matmul
from tensorlite.layout import Layout

from ..kernel_table import FLOATS, kernel_for
from ..launch import BLOCK, VIEW3, grid_for, sm_count

if TYPE_CHECKING:
    from ..storage import GpuStorage


# gemv.hip's entry points: (name, the most rows of A it takes, the rows of W a block takes;
# None: one per warp); and its one-row GEMVs with the RMSNorm before them (rms_norm_matmul)
_GEMV_KERNELS = (("gemv1", 1, None), ("gemv", 4, 4))
_NORM_GEMV_KERNELS = {False: "gemv1_norm", True: "gemv1_norm_silu"}  # by `gated`
# the same with int8 weights and a scale per output channel (matmul_int8, rms_norm_matmul's `scale`)
_Q8_GEMV_KERNELS = (("gemv1_q8", 1, None), ("gemv_q8", 4, 4))
_Q8_NORM_GEMV_KERNELS = {False: "gemv1_q8_norm", True: "gemv1_q8_norm_silu"}
# columns of the result a warp of gemv1_q8 and gemv1_q8_norm takes (gemv.hip GEMV1_Q8_ROWS: two
# rows of the int8 weight, their loads in flight together); gemv1_q8_norm_silu's warp takes one
# (a gate/up pair of rows), as every float one-row GEMV's
_Q8_COLS_PER_WARP = 2
KERNELS = {"gemv.hip": tuple(f"{name}_{t}" for name in [*(g[0] for g in _GEMV_KERNELS + _Q8_GEMV_KERNELS),
                                                          *_NORM_GEMV_KERNELS.values(),
                                                          *_Q8_NORM_GEMV_KERNELS.values()] for t in FLOATS)}

# Products of at most this many rows whose operands are both read along k with unit stride
# go to a GEMV kernel (past the rows of the last of _GEMV_KERNELS the BLAS takes them anyway).
# 0: every product to the BLAS. One row, as measured: a replayed 1.1B bf16 decode step
# (profile_decode.py, one H200, one process) took 1.303 ms with gemv1_<t> and 1.322 ms with
# cuBLAS where the graph launches gemv1 as a programmatic dependent (launch.py
# DEPENDENT_LAUNCH; cuBLAS's kernels are launched plainly), 1.352 and 1.339 ms without.
# rocBLAS was never compared (no AMD GPU). profile_decode.py --set ops.matmul.GEMV_MAX_ROWS=0
# (or 4) times the others again.
GEMV_MAX_ROWS = 1


class MatmulOps:
    __slots__ = ()  # a mixin of GpuStorage (storage.py), which holds the data: self is a GpuStorage

    # ---- matmul ---------------------------------------------------------------------
    def matmul(self, rhs, bmnk, lhs_layout, rhs_layout):
        check_matmul(self, rhs, bmnk, lhs_layout, rhs_layout)
        b, m, n, k = bmnk
        out = self._new(b * m * n)
        gemm(self, lhs_layout, rhs, rhs_layout, out, 0, m * n, n, b, m, n, k)
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

    def matmul_add(self, rhs, mnk, lhs_layout, rhs_layout, addend, addend_layout):
        # a GEMV adds the addend as it stores (a decode step's residual add after o_proj and
        # down_proj); the BLAS's beta would need the addend copied into the output first. Empty
        # products take the contract's path (gemm returns early for them)
        m, n, k = mnk
        lds = None
        if m and n and _gemv_rows(self, m) and addend.dtype is self.dtype is rhs.dtype and \
                addend_layout.shape == (m, n) and (n == 1 or addend_layout.strides[1] == 1):
            lhs, rhs_3d = batch_of_one(lhs_layout), batch_of_one(rhs_layout)  # only for GEMV-sized products
            lds = _gemv_strides(lhs, rhs_3d, m, n, k)
        if not lds:
            return super().matmul_add(rhs, mnk, lhs_layout, rhs_layout, addend, addend_layout)
        out = self._new(m * n)
        _gemv(self, lhs, rhs, rhs_3d, lds, out, 0, n, m, n, k, 1.0, addend.addr(addend_layout.offset),
              addend_layout.strides[0] if m > 1 else n)
        return out

    def rms_norm_matmul(self, layout, norm_weight, nw_layout, eps, rhs, rhs_layout, gated, scale=None,
                        s_layout=None):
        # one row (a decode step's q/k/v, gate/up or LM head): gemv1_norm(_silu), where x is a
        # contiguous row, the norm's weight contiguous and W^T a row-major weight's transpose;
        # gemv1_q8_norm(_silu) for an int8 W and its scale
        (m, k), n = layout.shape, rhs_layout.shape[1]
        kernels = _NORM_GEMV_KERNELS if scale is None else _Q8_NORM_GEMV_KERNELS
        lds = m == 1 and k and _gemv_rows(self, m) and (rhs.dtype is self.dtype or scale is not None) and \
            (scale is None or s_layout.strides[0] == 1 or n == 1) and \
            (norm_weight is None or (norm_weight.dtype is self.dtype and (k == 1 or nw_layout.strides[0] == 1))) and \
            _gemv_strides(batch_of_one(layout), batch_of_one(rhs_layout), m, n, k)
        if lds:
            dev, cols = self.device, n // 2 if gated else n
            kernel = kernel_for(dev, f"{kernels[gated]}_{self.dtype.short}", "rms_norm_linear",
                                input=(self, layout), weight=(rhs, rhs_layout))
            out = self._new(cols)
            if cols:
                per_warp = _Q8_COLS_PER_WARP if scale is not None and not gated else 1
                dev.launch(kernel, _gemv_blocks(dev, cols, per_warp * BLOCK // dev.warp_size), BLOCK,
                           [("int64", cols), ("int64", k), ("ptr", self.addr(layout.offset)),
                            ("ptr", 0 if norm_weight is None else norm_weight.addr(nw_layout.offset)), ("double", eps),
                            ("ptr", rhs.addr(rhs_layout.offset)), ("int64", lds[1]),
                            *([] if scale is None else [("ptr", scale.addr(s_layout.offset))]),
                            ("ptr", out.buffer.ptr)])
            return out
        return super().rms_norm_matmul(layout, norm_weight, nw_layout, eps, rhs, rhs_layout, gated, scale, s_layout)

    def matmul_int8(self, layout, weight, w_layout, scale, s_layout, addend=None, addend_layout=None):
        # a decode step's few rows: gemv(1)_q8 streams the int8 weight once, dequantising in
        # registers, and adds the addend as it stores; more rows take the contract's path
        (m, k), n = layout.shape, w_layout.shape[0]
        if 0 < m <= _Q8_GEMV_KERNELS[-1][1] and n and k and (k == 1 or layout.strides[1] == 1 and
                                                             w_layout.strides[1] == 1) and \
                (n == 1 or s_layout.strides[0] == 1) and \
                (addend is None or addend.dtype is self.dtype and (n == 1 or addend_layout.strides[1] == 1)):
            name, w_rows = next((name, w_rows) for name, rows, w_rows in _Q8_GEMV_KERNELS if m <= rows)
            dev = self.device
            kernel = kernel_for(dev, f"{name}_{self.dtype.short}", "linear_int8", input=(self, layout),
                                weight=(weight, w_layout))
            out = self._new(m * n)
            dev.launch(kernel, _gemv_blocks(dev, n, w_rows or _Q8_COLS_PER_WARP * BLOCK // dev.warp_size), BLOCK,
                       [("int32", m), ("int64", n), ("int64", k), ("ptr", self.addr(layout.offset)),
                        ("int64", layout.strides[0] if m > 1 else k), ("ptr", weight.addr(w_layout.offset)),
                        ("int64", w_layout.strides[0] if n > 1 else k), ("ptr", scale.addr(s_layout.offset)),
                        ("ptr", out.buffer.ptr), ("int64", n),
                        ("ptr", 0 if addend is None else addend.addr(addend_layout.offset)),
                        ("int64", 0 if addend is None else addend_layout.strides[0] if m > 1 else n)])
            return out
        return super().matmul_int8(layout, weight, w_layout, scale, s_layout, addend, addend_layout)

    def matmul_row_sums(self, rhs, mnk, lhs_layout, rhs_layout):
        m, n, k = mnk
        if self.device.blas.epilogues and self.dtype is rhs.dtype and self.dtype.is_floating_point and \
                lhs_layout.shape == (m, k) and rhs_layout.shape == (k, n):
            out, sums = self._new(m * n), self._new(m)
            lhs, rhs_3d = batch_of_one(lhs_layout), batch_of_one(rhs_layout)
            if _gemm_epilogue(self, lhs, rhs, rhs_3d, out, m, n, k, sums, "bgradb"):
                return out, sums
        return super().matmul_row_sums(rhs, mnk, lhs_layout, rhs_layout)


def matrix_view(st: GpuStorage, layout: Layout, shape) -> Tuple[GpuStorage, Layout]:
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


def gemm(a: GpuStorage, a_layout: Layout, b: GpuStorage, b_layout: Layout, c: GpuStorage, c_offset: int,
         c_batch_stride: int, ldc: int, batch: int, m: int, n: int, k: int, alpha: float = 1.0):
    """C[i] = alpha * A[i] . B[i] for i < batch; A (batch, m, k) and B (batch, k, n) are any
    3-d layouts (batch stride 0 broadcasts); C rows start at c_offset + i*c_batch_stride +
    r*ldc. Floats go to the platform's BLAS (transposed views as op=T, copies only when no
    leading dimension fits); other dtypes, and floats where the platform has no BLAS
    (the emulated platform), to the portable gemm_<t> kernel."""
    dev = a.device
    if batch * m * n == 0:
        return
    if k == 0:  # an empty sum
        c.const_set(0, Layout((batch, m, n), (c_batch_stride, ldc, 1), c_offset))
        return
    dtype = a.dtype
    lds = batch == 1 and _gemv_rows(a, m) and _gemv_strides(a_layout, b_layout, m, n, k)
    if lds:
        _gemv(a, a_layout, b, b_layout, lds, c, c_offset, ldc, m, n, k, alpha)
        return
    if not dtype.is_floating_point or not dev.has_blas:
        kernel = kernel_for(dev, f"gemm_{dtype.short}", "matmul", lhs=(a, a_layout), rhs=(b, b_layout))
        total = batch * m * n
        dev.launch(kernel, grid_for(dev, total), BLOCK,
                   [("int64", batch), ("int64", m), ("int64", n), ("int64", k),
                    ("bytes", VIEW3.pack(a_layout.offset, *a_layout.strides)),
                    ("bytes", VIEW3.pack(b_layout.offset, *b_layout.strides)),
                    ("int64", c_batch_stride), ("int64", ldc), ("double", alpha), ("ptr", a.buffer.ptr),
                    ("ptr", b.buffer.ptr),
                    ("ptr", c.addr(c_offset))])
        return
    (sa, la, (ta, lda)), (sb, lb, (tb, ldb)) = _blas_operands(a, a_layout, b, b_layout, m, n, k)
    stride_a = la.strides[0] if batch > 1 else 0
    stride_b = lb.strides[0] if batch > 1 else 0
    # row-major C = A.B is column-major C^T = B^T . A^T
    dev.blas.gemm_strided_batched(dtype, tb, ta, n, m, k, sb.addr(lb.offset), ldb, stride_b,
                                  sa.addr(la.offset), lda, stride_a, c.addr(c_offset), ldc,
                                  c_batch_stride, batch, alpha, 0.0)


def _gemv_rows(a: GpuStorage, m: int) -> bool:
    """Whether a float product of m rows goes to a GEMV kernel (GEMV_MAX_ROWS)."""
    return a.dtype.is_floating_point and m <= GEMV_MAX_ROWS and m <= _GEMV_KERNELS[-1][1]


def _gemv_strides(a_layout: Layout, b_layout: Layout, m: int, n: int, k: int):
    """(lda, ldw) where a GEMV kernel reads single-batch layouts A (1, m, k) and B (1, k, n):
    A's rows and B^T's (a row-major (n, k) weight's, nn.Linear's) with unit stride along k;
    None where they are not."""
    _, sa_row, sa_k = a_layout.strides
    _, sb_k, sb_col = b_layout.strides
    if k > 1 and (sa_k != 1 or sb_k != 1):
        return None
    # a stride of a size-1 dim is free: the kernel tests the one given for alignment
    return (sa_row if m > 1 else k), (sb_col if n > 1 else k)


def _gemv(a: GpuStorage, a_layout: Layout, b: GpuStorage, b_layout: Layout, lds, c: GpuStorage, c_offset: int,
          ldc: int, m: int, n: int, k: int, alpha: float, add: int = 0, ld_add: int = 0) -> None:
    """C = alpha * A . B (+ the rows at address `add`, ld_add apart, unless 0) by a GEMV kernel;
    lds: _gemv_strides of the layouts."""
    (lda, ldw), dev = lds, a.device
    name, w_rows = next((name, w_rows) for name, rows, w_rows in _GEMV_KERNELS if m <= rows)
    kernel = kernel_for(dev, f"{name}_{a.dtype.short}", "matmul", lhs=(a, a_layout), rhs=(b, b_layout))
    dev.launch(kernel, _gemv_blocks(dev, n, w_rows or BLOCK // dev.warp_size), BLOCK,
               [("int32", m), ("int64", n), ("int64", k), ("ptr", a.addr(a_layout.offset)), ("int64", lda),
                ("ptr", b.addr(b_layout.offset)), ("int64", ldw), ("ptr", c.addr(c_offset)), ("int64", ldc),
                ("double", alpha), ("ptr", add), ("int64", ld_add)])


def _gemv_blocks(dev, n: int, rows_per_block: int) -> int:
    """A GEMV's grid: a block per rows_per_block rows of W, grid-stride past 64 blocks per SM."""
    return min(-(-n // rows_per_block), 64 * sm_count(dev))


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
    return a.device.blas.gemm_epilogue(a.dtype, tb, ta, n, m, k, sb.addr(lb.offset), ldb, sa.addr(la.offset), lda,
                                       c.buffer.ptr, n, bias.buffer.ptr, epilogue)
