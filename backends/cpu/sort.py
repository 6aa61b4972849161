"""CpuStorage's sorting, scans and searches: sort of rows, cumsum/cumprod, repeat_ids, searchsorted.
A mixin (storage.py)."""
from __future__ import annotations

import numpy as np

from tensorlite import dtype as dtypes
from tensorlite.errors import DTypeError, storage_error


class SortOps:
    __slots__ = ()  # a mixin of CpuStorage (storage.py), which holds the data: self is a CpuStorage

    def sort(self, layout, descending):
        x = self._read(layout, compute=True)
        if descending:  # stable descending: sort the reversed row ascending, reverse back (NaN first)
            idx = (x.shape[-1] - 1 - np.argsort(x[..., ::-1], axis=-1, kind="stable"))[..., ::-1]
        else:
            idx = np.argsort(x, axis=-1, kind="stable")  # numpy sorts NaN last, as PyTorch
        return self._new(np.take_along_axis(self._read(layout), idx, -1)), self._new(idx, dtypes.int64)

    def cumulative(self, op, layout, reverse=False):
        x = self._read(layout, compute=True)
        acc = x.dtype if self.dtype.is_floating_point else np.int64
        x = x[..., ::-1] if reverse else x
        with np.errstate(all="ignore"):
            out = (np.cumsum if op == "sum" else np.cumprod)(x, axis=-1, dtype=acc)
        return self._new(out[..., ::-1] if reverse else out,
                         self.dtype if self.dtype.is_floating_point else dtypes.int64)

    def repeat_ids(self, layout):
        counts = self._read(layout)
        if self.dtype is dtypes.bool_:  # a mask: its True positions (numpy's repeat is ~15x slower)
            ids = np.flatnonzero(counts)
        elif counts.size and counts.min() < 0:
            return None, 0
        else:
            ids = np.repeat(np.arange(counts.size), counts.astype(np.int64, copy=False))
        return self._new(ids, dtypes.int64), ids.size

    def searchsorted(self, layout, values, values_layout, right):
        if values.dtype is not self.dtype:
            raise storage_error(DTypeError, "searchsorted", "values must have the dtype of the sequence",
                                sorted_sequence=(self, layout), values=(values, values_layout))
        seq, v = self._read(layout, compute=True), values._read(values_layout, compute=True)
        row = seq[0] if seq.shape[0] == 1 else None
        if row is not None and (row[1:] >= row[:-1]).all() and not (row.dtype.kind == "f" and np.isnan(row).any()):
            # one sorted row without NaN: numpy's search gives the same answer, without a pass per step
            return self._new(np.searchsorted(row, v[0], "right" if right else "left"), dtypes.int64)
        lo, hi = np.zeros(v.shape, np.int64), np.full(v.shape, seq.shape[-1], np.int64)
        rows = np.arange(v.shape[0])[:, None]
        while (lo < hi).any():  # PyTorch's binary search, all values at once: a NaN compares false
            mid = (lo + hi) >> 1
            x = seq[rows, np.minimum(mid, seq.shape[-1] - 1)]
            go = (lo < hi) & ~((x > v) if right else (x >= v))
            lo, hi = np.where(go, mid + 1, lo), np.where((lo < hi) & ~go, mid, hi)
        return self._new(lo, dtypes.int64)
