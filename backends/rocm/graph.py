"""Graph capture and replay on the GPU backend (the frontend is tensorlite.graphs).

A capture records the device's one stream (cuStreamBeginCapture / hipStreamBeginCapture):
every launch, copy and memset that the ops enqueue becomes a node of a graph instead of
running; the instantiated graph then replays the whole sequence with one launch call.
Platforms without a driver graph API (the emulated AMD platform, the null platform)
record the same work as Python calls and replay runs them again (RecordedGraphs), so the
logic below is tested on machines without a GPU.

What a capture must get right, and where it does:
- Memory. Addresses are baked into the graph, so buffers allocated while capturing come
  from a GraphPool that only captures into the same pool use; blocks freed while
  capturing return to it, where a later allocation of the same capture may take them
  (the graph replays in capture order on one stream, so that reuse is safe). Eager
  buffers freed while capturing may still be read by replays: they are held back until
  the graph is reset. When every graph of a pool is gone its blocks return to the cache.
- Nothing waits for the host. GpuDevice refuses reads back and waits while capturing
  (CaptureError). Kernels that check their inputs (the index ops' ids, cross_entropy's
  targets) flag a bad one in the graph's own error flag; the flag is read, and
  IndexOutOfRange raised, at the first host read or synchronize after a replay.
- Host data. An upload while capturing (tl.tensor(...) inside the captured code) becomes
  a constant of the graph: the data goes to a device buffer the graph owns at once (on a
  side stream), and the graph copies it to its destination at that point of each replay.
- Random numbers (the device's Philox offset is a kernel argument) would repeat on every
  replay: the random ops refuse to run while capturing.
- Other streams. A stream that waits for an event recorded on the captured stream joins the
  capture (the drivers' fork rule): the collectives fork their calls onto the communication
  stream this way, so a replay overlaps them with the compute stream's work as eager runs
  do. The compute stream must wait for such a stream again before the capture ends: the
  forks register that wait in Capture.joins, and capture_end makes those nobody made.
"""
from __future__ import annotations

import functools
import threading
from typing import Callable, Dict, List, Optional

import numpy as np

from tensorlite.errors import CaptureError, IndexOutOfRange

from .device import Buffer, size_class


class GraphPool:
    """The device memory of captured graphs (torch.cuda.graph_pool_handle's pool).

    Graphs captured into one pool may share its blocks, so they must replay in the order
    they were captured (PyTorch's rule for a shared pool). `users`: graphs (and a capture in
    progress) that may still touch the pool's memory."""

    def __init__(self, device):
        self.device = device
        self.allocator = device.allocator
        self._free: Dict[int, list] = {}   # Buffer.__del__ returns pool blocks here
        self._spare: Optional[Dict[int, list]] = None  # the eager cache, lent while capturing
        self.users = 0
        self.capturing = False

    # Buffer.__del__ decrements `allocated` of its allocator: pool blocks count in the device's
    allocated = property(lambda self: self.allocator.allocated,
                         lambda self, value: setattr(self.allocator, "allocated", value))

    def alloc(self, nbytes: int) -> Buffer:
        if nbytes <= 0:
            return Buffer(0, 0, 0, None)
        size = size_class(nbytes, self.allocator.exact)
        free = self._free.get(size)
        if free:
            ptr = free.pop()
        else:  # eager blocks cached before the capture began are free for the graph to take
            spare = self._spare.get(size) if self._spare is not None else None
            ptr = spare.pop() if spare else self.allocator._malloc(size, nbytes)
        alloc = self.allocator
        alloc.num_allocs += 1
        alloc.allocated += size
        alloc.peak = max(alloc.peak, alloc.allocated)
        return Buffer(ptr, nbytes, size, self)

    def _retire(self) -> None:
        """No graph uses the pool any more: its free blocks, and those still held by live
        tensors when they die, belong to the eager cache again."""
        cache = self.allocator._free
        for size, ptrs in self._free.items():
            cache.setdefault(size, []).extend(ptrs)
        self._free = cache


class Capture:
    """A capture in progress on `device` (GpuDevice.capture while it lasts)."""

    def __init__(self, device, pool: GraphPool):
        self.device, self.pool = device, pool
        self.flag = pool.alloc(4)          # the graph's error flag (run_checked), zeroed before capture
        device.memset(self.flag.ptr, 0, 4)
        self.checks: List[str] = []        # the checked ops captured, for the error message
        self.constants: List[Buffer] = []  # host data uploaded while capturing, owned by the graph
        self.saved_cache = None            # the eager free lists, set aside while capturing
        self.joins: List[Callable[[], None]] = []  # rejoin work forked onto other streams (join_forks)
        self.thread = threading.get_ident()

    def join_forks(self) -> None:
        """Make the captured stream wait for the work forked onto other streams that nobody
        waited for yet: a capture may end only with every stream it reached joined back."""
        joins, self.joins = self.joins, []
        for join in joins:
            join()

    def constant(self, dst_ptr: int, array: np.ndarray) -> None:
        """An upload while capturing: `array` to a buffer of the graph now, and a captured
        copy from there to `dst_ptr` (so every replay writes the same data where the eager
        code would have)."""
        dev = self.device
        # a fresh block, not one of the cache's: the graph owns it; it returns to the cache
        # with the graph, where later work is ordered after the replays by the one stream
        const = self.pool.allocator.fresh(array.nbytes)
        self.constants.append(const)
        plat, side = dev.platform, upload_stream(dev)
        plat.htod_async(const.ptr, array.ctypes.data, array.nbytes, side)
        plat.stream_synchronize(side)
        plat.dtod_async(dst_ptr, const.ptr, array.nbytes, dev.stream)


def upload_stream(dev):
    """A second stream of `dev` for uploads that must not be captured."""
    stream = getattr(dev, "_tl_upload_stream", None)
    if stream is None:
        stream = dev._tl_upload_stream = dev.platform.stream_create()
    return stream


def capture_begin(dev, pool: Optional[GraphPool] = None) -> Capture:
    """Start capturing `dev`'s stream into `pool` (a new one by default)."""
    if dev.capture is not None:
        raise CaptureError(f"{dev}: a graph capture is already in progress on this device")
    pool = GraphPool(dev) if pool is None else pool
    if pool.device is not dev:
        raise CaptureError(f"{dev}: the graph pool belongs to {pool.device}")
    if pool.capturing:
        raise CaptureError(f"{dev}: the graph pool is being captured into already")
    if dev.has_blas:
        dev.blas  # noqa: B018 - the BLAS handle and its workspace are made outside any capture
    upload_stream(dev)
    if pool.users == 0:
        pool._free = {}
    capture = Capture(dev, pool)
    alloc = dev.allocator
    capture.saved_cache, alloc._free = alloc._free, {}  # eager blocks freed while capturing are held back
    pool._spare, pool.capturing = capture.saved_cache, True
    dev.alloc = pool.alloc
    try:
        dev.activate()
        dev.platform.capture_begin(dev.stream)
    except BaseException:
        _restore(dev, capture)
        raise
    pool.users += 1
    dev.capture = capture
    return capture


def _restore(dev, capture: Capture) -> dict:
    """Leave capture mode on the host side; returns the eager blocks freed while capturing."""
    alloc, pool = dev.allocator, capture.pool
    held_back, alloc._free = alloc._free, capture.saved_cache
    pool._spare, pool.capturing = None, False
    dev.alloc = alloc.alloc
    dev.capture = None
    return held_back


def capture_end(dev, previous: "GpuGraph" = None) -> "GpuGraph":
    """End the capture of `dev`'s stream: the instantiated graph. `previous`: a graph of
    this device whose executable is updated in place when the topology is unchanged
    (cheaper than instantiating again); it is reset otherwise."""
    capture = dev.capture
    if capture is None:
        raise CaptureError(f"{dev}: no graph capture is in progress")
    try:
        capture.join_forks()
    except BaseException:
        capture_abort(dev)
        raise
    held_back = _restore(dev, capture)
    plat = dev.platform
    try:
        raw = plat.capture_end(dev.stream)
    except BaseException:
        _release(dev, capture.pool, held_back)
        raise
    graph = GpuGraph(dev, capture, raw, held_back)
    try:
        if previous is not None and previous.device is dev and previous.exec is not None \
                and plat.graph_exec_update(previous.exec, raw):
            graph.exec, previous.exec = previous.exec, None
        else:
            graph.exec = plat.graph_instantiate(raw)
    except BaseException:
        graph.reset()
        raise
    finally:
        if previous is not None:
            previous.reset()
    return graph


def capture_abort(dev) -> None:
    """End a capture whose code raised: discard what was recorded."""
    capture = dev.capture
    if capture is None:
        return
    try:
        capture.join_forks()  # an unjoined stream would stay in capture mode
    except Exception:
        pass
    held_back = _restore(dev, capture)
    try:
        dev.platform.graph_destroy(dev.platform.capture_end(dev.stream))
    except Exception:  # an invalidated capture has ended all the same
        pass
    _release(dev, capture.pool, held_back)


def _release(dev, pool: GraphPool, held_back: dict) -> None:
    cache = dev.allocator._free
    for size, ptrs in held_back.items():
        cache.setdefault(size, []).extend(ptrs)
    pool.users -= 1
    if pool.users == 0:
        pool._retire()


class GpuGraph:
    """An instantiated graph of one device: replay() runs it on the device's stream."""

    def __init__(self, device, capture: Capture, raw, held_back: dict):
        self.device, self.pool, self.raw, self.exec = device, capture.pool, raw, None
        self.flag, self.checks = capture.flag, tuple(dict.fromkeys(capture.checks))
        self.constants = capture.constants
        self._held_back = held_back
        self._live = True

    def replay(self) -> None:
        dev = self.device
        if self.exec is None:
            raise CaptureError(f"{dev}: the graph was reset; capture it again")
        if dev.capture is not None:
            raise CaptureError(f"{dev}: a graph cannot be replayed while another is being captured")
        dev.activate()
        dev.platform.graph_launch(self.exec, dev.stream)
        if self.checks:
            dev.pending_checks[self] = None

    def check_flag(self) -> None:
        """Raise IndexOutOfRange if a checked kernel of a replay flagged a bad id (the
        stream has been synchronized)."""
        dev = self.device
        host = np.zeros(1, np.int32)
        dev.platform.dtoh_async(host.ctypes.data, self.flag.ptr, 4, dev.stream)
        dev.platform.stream_synchronize(dev.stream)
        if host[0]:
            dev.memset(self.flag.ptr, 0, 4)
            raise IndexOutOfRange(f"{dev}: a replay of a captured graph met an index out of range in "
                                  f"{' or '.join(self.checks)}; the replay's outputs are not valid (no memory "
                                  f"out of range was touched)")

    def reset(self) -> None:
        """Free the graph (its memory returns to the pool, the pool's to the cache once no
        graph uses it)."""
        if not self._live:
            return
        self._live = False
        plat = self.device.platform
        if self.exec is not None:
            plat.graph_exec_destroy(self.exec)
            self.exec = None
        plat.graph_destroy(self.raw)
        # no wait: replays still queued run before any later use of this memory (one stream)
        self.constants = []
        _release(self.device, self.pool, self._held_back)

    def __del__(self):
        try:
            self.reset()
        except Exception:  # interpreter shutdown
            pass


# ---- platforms without a driver graph API ---------------------------------------------

class _Recording:
    """A capture in progress on a RecordedGraphs platform."""
    __slots__ = ("origin", "streams", "calls", "events")

    def __init__(self, origin):
        self.origin = origin        # the captured stream
        self.streams = {origin}     # it and the streams that joined it
        self.calls = []             # the work enqueued on them, in the host's order
        self.events = set()         # events recorded on them (waiting for one joins the capture)


class RecordedGraphs:
    """Graphs on platforms that run work as Python calls (emulated AMD, null): while a
    stream is captured, the work enqueued on it is recorded instead of run, and a replay
    runs the record. A platform calls `_recorded(stream, fn, *args)` at the top of each
    stream operation and returns at once when it answers True. A stream that waits for an
    event recorded on a captured stream joins the capture, as on the drivers; the record
    keeps the host's order of all of them, which respects every event edge."""
    _recording: Optional[_Recording] = None

    def _recorded(self, stream, fn, *args) -> bool:
        rec = self._recording
        if rec is None or stream not in rec.streams:
            return False
        rec.calls.append(functools.partial(fn, *args))
        return True

    def event_record(self, event, stream) -> None:
        rec = self._recording
        if rec is not None and stream in rec.streams:
            rec.events.add(event)

    def stream_wait_event(self, stream, event) -> None:
        rec = self._recording
        if rec is not None and event in rec.events:
            rec.streams.add(stream)

    def capture_begin(self, stream) -> None:
        self._recording = _Recording(stream)

    def capture_end(self, stream):
        rec, self._recording = self._recording, None
        if rec is None or rec.origin != stream:
            raise CaptureError("the stream is not being captured")
        return rec.calls

    def graph_instantiate(self, graph):
        return list(graph)

    def graph_launch(self, graph_exec, stream) -> None:
        for call in graph_exec:
            call()

    def graph_exec_update(self, graph_exec, graph) -> bool:
        if len(graph_exec) != len(graph):
            return False
        graph_exec[:] = graph
        return True

    def graph_exec_destroy(self, graph_exec) -> None:
        graph_exec.clear()

    def graph_destroy(self, graph) -> None:
        pass
