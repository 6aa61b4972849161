"""CpuDevice: host memory (numpy arrays) and the cpu generator (numpy's Philox)."""
from __future__ import annotations

import math
import os

import numpy as np

from tensorlite import dtype as dtypes
from tensorlite.backend import BackendDevice
from tensorlite.dtype import cast_array
from tensorlite.errors import ArgumentError, DeviceError, OutOfMemoryError

from .storage import CpuStorage


class CpuDevice(BackendDevice):
    name = "cpu"

    def __init__(self, ordinal: int = 0):
        if ordinal != 0:
            raise DeviceError(f"cpu has only ordinal 0, got cpu:{ordinal}")
        self.ordinal, self._total = 0, None
        self.set_seed(0)

    def _wrap(self, arr: np.ndarray, dtype) -> CpuStorage:
        return CpuStorage(arr, dtypes.get(dtype), self)

    def _alloc(self, make, shape, dtype):
        """make() -> a new host array, numpy's MemoryError as OutOfMemoryError naming the size."""
        try:
            return make()
        except MemoryError:
            raise self._oom(shape, dtype) from None

    @staticmethod
    def _oom(shape, dtype) -> OutOfMemoryError:
        return OutOfMemoryError(f"cpu: out of memory allocating a {tuple(shape)} {dtype.name} array "
                                f"({math.prod(shape) * dtype.itemsize} bytes)")

    def zeros(self, shape, dtype):
        dtype = dtypes.get(dtype)
        return self._wrap(self._alloc(lambda: np.zeros(math.prod(shape), dtype.np), shape, dtype), dtype)

    def alloc_uninit(self, shape, dtype):
        dtype = dtypes.get(dtype)
        return self._wrap(self._alloc(lambda: np.empty(math.prod(shape), dtype.np), shape, dtype), dtype)

    def from_cpu(self, array):
        array = np.asarray(array)
        dtype = dtypes.get(array.dtype)  # e.g. int32 is stored as int64
        return self._wrap(self._alloc(lambda: np.array(array, dtype.np, order="C", copy=True).reshape(-1),
                                      array.shape, dtype), dtype)

    def wrap_memory(self, owner, numel, dtype):
        data = np.asarray(owner).view(dtype.np) if numel else np.empty(0, dtype.np)
        return CpuStorage(data, dtype, self)  # the array's base is `owner`: alive while the storage is

    def total_memory(self):
        """The host's physical memory (None where the OS does not say)."""
        if self._total is None:
            try:
                self._total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            except (AttributeError, ValueError, OSError):
                self._total = 0
        return self._total or None

    def set_seed(self, seed):
        self._rng = np.random.Generator(np.random.Philox(int(seed)))

    # Philox's state as 13 uint64 words: counter (4), key (2), buffer (4), buffer_pos, has_uint32, uinteger
    def get_rng_state(self) -> bytes:
        st = self._rng.bit_generator.state
        words = [*st["state"]["counter"], *st["state"]["key"], *st["buffer"], st["buffer_pos"], st["has_uint32"],
                 st["uinteger"]]
        return np.array(words, np.uint64).tobytes()

    def set_rng_state(self, state: bytes) -> None:
        if len(state) != 13 * 8:
            raise ArgumentError(f"set_rng_state: a cpu generator state has {13 * 8} bytes, got {len(state)}")
        w = np.frombuffer(state, np.uint64)
        bits = np.random.Philox()
        bits.state = {"bit_generator": "Philox", "state": {"counter": w[0:4].copy(), "key": w[4:6].copy()},
                      "buffer": w[6:10].copy(), "buffer_pos": int(w[10]), "has_uint32": int(w[11]),
                      "uinteger": int(w[12])}
        self._rng = np.random.Generator(bits)

    def rand_uniform(self, shape, dtype, lo, hi):
        dtype = dtypes.get(dtype)
        return self._wrap(self._alloc(lambda: cast_array(self._rng.uniform(lo, hi, math.prod(shape)), dtype), shape,
                                      dtype), dtype)

    def rand_normal(self, shape, dtype, mean, std):
        dtype = dtypes.get(dtype)
        return self._wrap(self._alloc(lambda: cast_array(self._rng.normal(mean, std, math.prod(shape)), dtype), shape,
                                      dtype), dtype)

    def synchronize(self):
        pass  # numpy is synchronous

    def memory_stats(self):
        return {}
