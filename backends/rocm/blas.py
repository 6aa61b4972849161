"""Strided-batched GEMM through the platform's BLAS library, vendor-neutral.

BLAS is column-major: C (m x n, leading dimension ldc) = alpha * op(A) op(B) + beta * C,
op(A) m x k, op(B) k x n. A row-major caller computes C^T = B^T A^T, i.e. swaps the
operands and m/n (ops/matmul.py's gemm does that). f16/bf16 inputs are multiplied with f32
accumulation (compute type f32, scalars f32); f64 computes in f64.
"""
from __future__ import annotations

import math
import os

from tensorlite import dtype as dtypes
from tensorlite.errors import DTypeError, ShapeError

_INT32_MAX = 2 ** 31 - 1


class Blas:
    def __init__(self, device):
        self.device = device
        self.platform = device.platform
        self._handle = None
        self._workspace = None  # a Buffer the library uses for as long as the handle lives
        self._has_epilogues = None
        self._scalars = {}  # (f64?, value) -> cffi pointer (see _scalar)

    @property
    def handle(self):
        """The library's handle, bound to the device stream; taken right before each call that
        enqueues work there, so the kernel launches queued before go first (launch_shim.py)."""
        self.platform.drain_launches()
        if self._handle is None:
            self.device.activate()
            size = self.platform.BLAS_WORKSPACE
            self._workspace = self.device.alloc(size) if size else None
            self._handle = self.platform.blas_create(self.device.stream, self._workspace.ptr if size else 0, size)
        return self._handle

    def gemm_strided_batched(self, dtype, trans_a: bool, trans_b: bool, m: int, n: int, k: int,
                             a_ptr: int, lda: int, stride_a: int, b_ptr: int, ldb: int, stride_b: int,
                             c_ptr: int, ldc: int, stride_c: int, batch: int,
                             alpha: float = 1.0, beta: float = 0.0) -> None:
        """Enqueue `batch` column-major GEMMs on the device stream (strides in elements;
        a stride of 0 reuses one matrix for every batch)."""
        if type(dtype) is not dtypes.DType:
            dtype = dtypes.get(dtype)
        if dtype not in dtypes.FLOATS:
            raise DTypeError(f"gemm_strided_batched: dtype {dtype.name} is not supported on {self.device} "
                             f"(expected one of {[d.name for d in dtypes.FLOATS]})")
        if min(m, n, k, lda, ldb, ldc, batch) < 0 or max(m, n, k, lda, ldb, ldc, batch) > _INT32_MAX:
            args = dict(m=m, n=n, k=k, lda=lda, ldb=ldb, ldc=ldc, batch=batch)
            raise ShapeError(f"gemm_strided_batched: sizes must lie in [0, 2^31): {args}")
        rows_a, rows_b = (k if trans_a else m), (n if trans_b else k)
        for name, ld, rows in (("lda", lda, rows_a), ("ldb", ldb, rows_b), ("ldc", ldc, m)):
            if ld < max(1, rows):
                raise ShapeError(f"gemm_strided_batched: {name}={ld} is smaller than the {rows} rows "
                                 f"it spans (m={m}, n={n}, k={k}, trans_a={trans_a}, trans_b={trans_b})")
        if m == 0 or n == 0 or batch == 0:
            return
        alpha_c, beta_c = self._scalar(dtype, alpha), self._scalar(dtype, beta)
        self.device.activate()
        self.platform.blas_gemm(self.handle, dtype.short, bool(trans_a), bool(trans_b), m, n, k,
                                alpha_c, a_ptr, lda, stride_a, b_ptr, ldb, stride_b,
                                beta_c, c_ptr, ldc, stride_c, batch)

    def _scalar(self, dtype, value):
        """A host pointer to `value` as the GEMM's scalar type, kept per value: the library
        reads host scalars before the call returns, so one never-written copy serves every call."""
        key = (dtype is dtypes.float64, value)
        ptr = self._scalars.get(key)
        if ptr is None:
            ptr = self.platform.ffi.new("double*" if key[0] else "float*", value)
            if value == value and (value != 0 or math.copysign(1.0, value) > 0):  # keys compare by ==: not nan, -0.0
                if len(self._scalars) > 64:
                    self._scalars.clear()
                self._scalars[key] = ptr
        return ptr

    @property
    def epilogues(self) -> bool:
        """Whether gemm_epilogue can fuse at all here (the platform has a library with
        epilogues, and TENSORLITE_BLAS_EPILOGUE=0 does not turn them off): callers skip
        preparing the fused call where it cannot run."""
        if self._has_epilogues is None:
            self._has_epilogues = bool(getattr(self.platform, "has_gemm_epilogues", lambda: False)())
        return self._has_epilogues and os.environ.get("TENSORLITE_BLAS_EPILOGUE") != "0"

    def gemm_epilogue(self, dtype, trans_a: bool, trans_b: bool, m: int, n: int, k: int, a_ptr: int, lda: int,
                      b_ptr: int, ldb: int, c_ptr: int, ldc: int, bias_ptr: int, epilogue: str) -> bool:
        """One column-major GEMM C = op(A) op(B) with a fused bias epilogue ("bias": bias[m]
        added to every column; "bgradb": bias[n] = the sums of op(B) over k), enqueued where
        the platform has one (`blas_gemm_epilogue`) and takes the case. False, with nothing enqueued,
        otherwise: the caller runs the GEMM and a separate kernel. TENSORLITE_BLAS_EPILOGUE=0
        turns the fused path off (to compare, or to rule it out)."""
        dtype = dtypes.get(dtype)
        if not self.epilogues or dtype not in dtypes.FLOATS or min(m, n, k) <= 0 or \
                max(m, n, k, lda, ldb, ldc) > _INT32_MAX:
            return False
        handle = self.handle
        self.device.activate()
        ws = self._workspace
        return self.platform.blas_gemm_epilogue(
            handle, self.device.stream, dtype.short, bool(trans_a), bool(trans_b), m, n, k, self._scalar(dtype, 1.0),
            a_ptr, lda, b_ptr, ldb, self._scalar(dtype, 0.0), c_ptr, ldc, bias_ptr, epilogue,
            0 if ws is None else ws.ptr, 0 if ws is None else self.platform.BLAS_WORKSPACE)
