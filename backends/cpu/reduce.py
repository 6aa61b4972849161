"""CpuStorage's reductions: sum/min/max/argmin/argmax over any dims. A mixin (storage.py)."""
from __future__ import annotations

import numpy as np

from tensorlite import dtype as dtypes
from tensorlite.errors import ShapeError, storage_error

# the ufuncs' reduce itself (np.sum / np.max add a Python wrapper's 0.5 us to a tiny reduction)
REDUCE = {"sum": np.add.reduce, "min": np.minimum.reduce, "max": np.maximum.reduce, "argmin": np.argmin,
          "argmax": np.argmax}


class ReduceOps:
    __slots__ = ()  # a mixin of CpuStorage (storage.py), which holds the data: self is a CpuStorage

    def reduce_op(self, op, layout, dims):
        dims = tuple(dims)
        if op != "sum" and any(layout.shape[d] == 0 for d in dims):
            raise storage_error(ShapeError, op, f"cannot reduce over an empty dim (dims={dims})",
                                self=(self, layout))
        x = self._operand(layout)
        if op in ("argmin", "argmax"):
            if len(dims) != 1:
                raise storage_error(ShapeError, op, f"takes exactly one dim, got {dims}", self=(self, layout))
            return self._new(REDUCE[op](x, axis=dims[0], keepdims=True), dtypes.int64)
        # integer sums keep their dtype (wrapping); np.sum would otherwise widen them
        kwargs = {"dtype": x.dtype} if op == "sum" else {}
        return self._new(REDUCE[op](x, axis=dims, keepdims=True, **kwargs).reshape(-1))  # flat: _new's fast path
