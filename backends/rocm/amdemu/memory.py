"""Global memory of the emulated device: host memory, so kernel pointers are host addresses.

Every buffer the platform hands out (and each code object's loaded image, kernarg block
and dispatch packet) is a numpy byte array registered here by its host address. Kernel
loads and stores are vectorised gathers and scatters over these arrays; an address outside
every registered range raises `MemoryFault` naming it (a wild pointer in a kernel is an
error the emulator reports, never a write into the interpreter's own memory). Each buffer
has GUARD bytes that belong to no allocation on either side, and the platform's buffers are
of the size asked (EXACT_BUFFERS: no caching-allocator slack), so a read or write just past
a tensor's end (a missing bound check, a tail) faults instead of meeting spare bytes.
"""
from __future__ import annotations

import bisect

import numpy as np

from tensorlite.errors import BackendError


class MemoryFault(BackendError):
    """A kernel touched memory outside every live allocation."""


GUARD = 256  # unregistered bytes before and after every allocation


class HostMemory:
    def __init__(self):
        self._bases, self._ends, self._arrays = [], [], []
        self.total = 0

    # ---- allocations ------------------------------------------------------------------
    def register(self, array: np.ndarray) -> int:
        """Make a C-contiguous uint8 array addressable; returns its address."""
        assert array.dtype == np.uint8 and array.flags.c_contiguous
        base = array.ctypes.data
        i = bisect.bisect(self._bases, base)
        self._bases.insert(i, base)
        self._ends.insert(i, base + array.nbytes)
        self._arrays.insert(i, array)
        self.total += array.nbytes
        return base

    def alloc(self, nbytes: int, align: int = 256) -> int:
        n = max(int(nbytes), 1)
        raw = np.zeros(GUARD + align + n + GUARD, np.uint8)
        start = GUARD + -(raw.ctypes.data + GUARD) % align
        return self.register(raw[start:start + n])

    def free(self, addr: int) -> None:
        i = bisect.bisect(self._bases, addr) - 1
        if i < 0 or self._bases[i] != addr:
            raise MemoryFault(f"free of 0x{addr:x}, which is not the start of an allocation")
        self.total -= self._arrays[i].nbytes
        del self._bases[i], self._ends[i], self._arrays[i]

    def view(self, addr: int, nbytes: int) -> np.ndarray:
        """The bytes [addr, addr + nbytes) of one allocation, as a writable view."""
        i = bisect.bisect(self._bases, addr) - 1
        if nbytes == 0:
            return np.zeros(0, np.uint8)
        if i < 0 or addr + nbytes > self._ends[i]:
            raise MemoryFault(f"host access of {nbytes} bytes at 0x{addr:x} is outside every allocation")
        off = addr - self._bases[i]
        return self._arrays[i][off:off + nbytes]

    # ---- kernel accesses ----------------------------------------------------------------
    def _locate(self, addrs: np.ndarray, size: int, what: str):
        bases = np.asarray(self._bases, np.uint64)
        idx = np.searchsorted(bases, addrs, side="right").astype(np.int64) - 1
        ends = np.asarray(self._ends, np.uint64)
        bad = (idx < 0) | (addrs + np.uint64(size) > ends[np.maximum(idx, 0)]) if len(bases) else \
            np.ones(addrs.shape, bool)
        if np.any(bad):
            a = int(addrs[np.argmax(bad)])
            raise MemoryFault(f"{what} of {size} bytes at 0x{a:x} is outside every allocation{self._near(a, size)}")
        return idx, addrs - bases[idx]

    def _one_allocation(self, addrs, size):
        """(array, offsets as intp) when all of addrs[j] .. + size lie in one allocation, else None."""
        lo, hi = int(addrs.min()), int(addrs.max())
        i = bisect.bisect(self._bases, lo) - 1
        if i < 0 or hi + size > self._ends[i]:
            return None
        return self._arrays[i], (addrs - np.uint64(self._bases[i])).astype(np.intp)

    def gather(self, addrs: np.ndarray, size: int, what: str = "load") -> np.ndarray:
        """(N, size) bytes read at each of N addresses (uint64)."""
        out = np.empty((addrs.size, size), np.uint8)
        if addrs.size == 0:
            return out
        one = self._one_allocation(addrs, size)
        if one is not None:  # the usual case: every address in one buffer
            array, offs = one
            out[:] = array[offs[:, None] + np.arange(size)]
            return out
        idx, offs = self._locate(addrs, size, what)
        cols = np.arange(size, dtype=np.uint64)
        for i in np.unique(idx):
            sel = idx == i
            out[sel] = self._arrays[i][(offs[sel][:, None] + cols).astype(np.intp)]
        return out

    def scatter(self, addrs: np.ndarray, data: np.ndarray, what: str = "store") -> None:
        """Write data[j] (size bytes) at addrs[j]; the later of two writes to one byte wins."""
        if addrs.size == 0:
            return
        size = data.shape[1]
        one = self._one_allocation(addrs, size)
        if one is not None:
            array, offs = one
            array[offs[:, None] + np.arange(size)] = data
            return
        idx, offs = self._locate(addrs, size, what)
        cols = np.arange(size, dtype=np.uint64)
        for i in np.unique(idx):
            sel = idx == i
            self._arrays[i][(offs[sel][:, None] + cols).astype(np.intp)] = data[sel]

    def _near(self, addr: int, size: int) -> str:
        """Where a faulting access lies next to an allocation (reaching into its guard): ', at
        offset K of the M-byte allocation at 0x...' (K >= M - size: past its end), else ''."""
        i = bisect.bisect(self._bases, addr) - 1
        if i >= 0 and addr < self._ends[i] + GUARD:
            return f", at offset {addr - self._bases[i]} of the {self._ends[i] - self._bases[i]}-byte allocation " \
                   f"at 0x{self._bases[i]:x} (past its end)"
        if i + 1 < len(self._bases) and self._bases[i + 1] - GUARD <= addr:
            return f", {self._bases[i + 1] - addr} bytes before the allocation at 0x{self._bases[i + 1]:x}"
        return ""

    def owner(self, addr: int):
        """(base, array) of the allocation holding addr, or None."""
        i = bisect.bisect(self._bases, addr) - 1
        if i >= 0 and addr < self._ends[i]:
            return self._bases[i], self._arrays[i]
        return None
