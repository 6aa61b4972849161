"""CpuStorage's matmul and its fused epilogues (bias add, row sums). A mixin (storage.py)."""
from __future__ import annotations

import numpy as np

from tensorlite import dtype as dtypes
from tensorlite.backend import batch_of_one, check_matmul

from .common import accumulate_dtype, strided


class MatmulOps:
    __slots__ = ()  # a mixin of CpuStorage (storage.py), which holds the data: self is a CpuStorage

    def matmul(self, rhs, bmnk, lhs_layout, rhs_layout):
        check_matmul(self, rhs, bmnk, lhs_layout, rhs_layout)
        b, m, n, k = bmnk
        acc = accumulate_dtype(self.dtype)
        return self._new(np.matmul(self._read(lhs_layout).astype(acc, copy=False),
                                   rhs._read(rhs_layout).astype(acc, copy=False)))

    def matmul_add_bias(self, rhs, mnk, lhs_layout, rhs_layout, bias, bias_layout):
        if self.dtype not in (dtypes.float32, dtypes.float64) or bias.dtype is not self.dtype:
            # 16-bit: the contract's product rounded to the dtype, then the add (as the GPU's unfused path)
            return super().matmul_add_bias(rhs, mnk, lhs_layout, rhs_layout, bias, bias_layout)
        m, n, k = mnk
        out = self.matmul(rhs, (1, m, n, k), batch_of_one(lhs_layout), batch_of_one(rhs_layout))
        out.data.reshape(m, n)[...] += strided(bias.data, bias_layout)  # in place on the fresh product
        return out

    def matmul_row_sums(self, rhs, mnk, lhs_layout, rhs_layout):
        if self.dtype not in (dtypes.float32, dtypes.float64):
            return super().matmul_row_sums(rhs, mnk, lhs_layout, rhs_layout)
        m, n, k = mnk
        # lhs is F.linear's transposed output gradient: its row sums as a product with ones (BLAS),
        # not numpy's sum along the strided axis (3x slower)
        sums = np.matmul(self._read(lhs_layout), np.ones(k, self.dtype.np))
        return self.matmul(rhs, (1, m, n, k), batch_of_one(lhs_layout), batch_of_one(rhs_layout)), self._new(sums)
