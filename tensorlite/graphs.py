"""Graph capture and replay: record a sequence of device work once, then run it with one
call, without the Python, dispatch and launch costs of running it op by op.

Two ways in, with PyTorch's and tinygrad's shapes:

- `Graph` and the `graph(g)` context (torch.cuda.CUDAGraph / torch.cuda.graph): the ops in
  the block are captured; tensors it creates are the graph's static outputs, and
  `g.replay()` recomputes them from whatever the tensors it read (its static inputs) hold
  then. Copy new inputs into those tensors in place (`x.copy_(...)`) before a replay.
- `graphed(fn)` (torch.cuda.make_graphed_callables for a function, tinygrad's TinyJit):
  the first call runs eagerly (it compiles the kernels), the next captures, later calls
  copy their tensor arguments into the captured inputs and replay. A call with other
  shapes, dtypes or non-tensor arguments captures a graph of its own. On cpu tensors it
  simply calls fn.

What a capture may not do, and says so (CaptureError): read data back to the host
(.item(), .tolist(), printing, boolean masks, nonzero, ...), wait for the device, draw
random numbers (they would repeat on every replay), or step an optimizer whose step count
and learning rate are host values that a replay would repeat (Adam/AdamW with
capturable=True keep them on the device and may be captured). Host data uploaded inside
the capture (`tl.tensor([...])`) becomes a constant of the graph. Index ops check their
ids on the device: a bad id in a replay raises IndexOutOfRange at the next host read.
Tensors a graph reads but did not create (weights, static inputs) must stay alive and be
updated in place. Only `cuda` and `rocm` (and the emulated AMD platform, where replay
re-runs the recorded launches) capture.
"""
from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Any, Callable, Optional

from . import backend
from .errors import CaptureError, DeviceError
from .ops.creation import empty
from .tensor import Tensor

__all__ = ["Graph", "graph", "graph_pool_handle", "graphed", "is_capturing"]


def _gpu(device):
    dev = backend.get_device(backend.best_device() if device is None else device)
    if dev.name == "cpu":
        raise DeviceError("graph capture needs a GPU device (cuda or rocm); none is available here"
                          if device is None else f"{dev}: graph capture needs a GPU device (cuda or rocm)")
    return dev


def is_capturing(device=None) -> bool:
    """Whether a graph capture is in progress on `device` (any device by default), as
    torch.cuda.is_current_stream_capturing.

    >>> import tensorlite as tl
    >>> tl.graphs.is_capturing("cpu")
    False
    """
    if device is not None:
        return backend.get_device(device).capture is not None
    return any(d.capture is not None for d in backend.available_devices())


def graph_pool_handle(device=None):
    """A memory pool that several graphs can be captured into (torch.cuda.graph_pool_handle):
    they share its memory, so replay them in the order they were captured."""
    return _gpu(device).graph_pool()


class Graph:
    """A captured graph of one GPU device (torch.cuda.CUDAGraph): capture it with
    `with tl.graphs.graph(g): ...` (or capture_begin/capture_end), then `g.replay()`.

    Capturing a Graph again replaces its work; where only kernel arguments changed
    (addresses, scalars) the executable is updated in place instead of rebuilt."""

    def __init__(self):
        self._device = None
        self._graph = None

    @property
    def device(self):
        """The device the graph was captured on (None before a capture)."""
        return self._device

    def capture_begin(self, pool=None, device=None) -> None:
        """Start capturing `device`'s work (the best GPU by default; `pool`: a
        graph_pool_handle() or another graph's pool() to share memory with)."""
        dev = pool.device if pool is not None and device is None else _gpu(device)
        dev.capture_begin(pool)
        self._device = dev

    def capture_end(self) -> None:
        """End the capture; the graph is ready to replay."""
        if self._device is None or self._device.capture is None:
            raise CaptureError("Graph.capture_end: no capture is in progress")
        previous, self._graph = self._graph, None
        self._graph = self._device.capture_end(previous)

    def _abort(self) -> None:
        if self._device is not None:
            self._device.capture_abort()

    def replay(self) -> None:
        """Run the captured work again on the device's stream (returns at once)."""
        if self._graph is None:
            raise CaptureError("Graph.replay: nothing was captured (or the graph was reset)")
        self._graph.replay()

    def reset(self) -> None:
        """Free the graph and its memory (the static outputs stay valid as tensors)."""
        if self._graph is not None:
            graph, self._graph = self._graph, None
            graph.reset()

    def pool(self):
        """The graph's memory pool, to capture another graph into (graph(g2, pool=g1.pool()))."""
        if self._graph is None:
            raise CaptureError("Graph.pool: capture the graph first")
        return self._graph.pool


class graph:
    """Capture the block into `cuda_graph` (torch.cuda.graph):

        g = tl.graphs.Graph()
        with tl.graphs.graph(g):
            y = model(static_x)
        static_x.copy_(new_x); g.replay()   # y now holds model(new_x)

    Warm up first (run the code once eagerly) so kernels are compiled outside the capture.
    If the block raises, the capture is discarded and the device is left as before."""

    def __init__(self, cuda_graph: Graph, pool=None, device=None):
        self.graph, self.pool, self.device = cuda_graph, pool, device

    def __enter__(self):
        self.graph.capture_begin(self.pool, self.device)
        return self.graph

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.graph._abort()
            return False
        self.graph.capture_end()
        return False


# ---- graphed functions -----------------------------------------------------------------

def _flatten(obj, out):
    """The tensors of a nest of tuples, lists and dicts, in order; returns a rebuilder."""
    if isinstance(obj, Tensor):
        out.append(obj)
        return lambda ts: ts.pop(0)
    if isinstance(obj, (tuple, list)):
        parts = [_flatten(o, out) for o in obj]
        return lambda ts: type(obj)(p(ts) for p in parts)
    if isinstance(obj, dict):
        parts = {k: _flatten(v, out) for k, v in obj.items()}
        return lambda ts: {k: p(ts) for k, p in parts.items()}
    return lambda ts: obj


def _key_of(obj):
    """What must match for a captured graph to be reused: tensors by shape, dtype and
    device, everything else by value."""
    if isinstance(obj, Tensor):
        return ("T", obj.shape, obj.dtype.name, str(obj._device))
    if isinstance(obj, (tuple, list)):
        return (type(obj).__name__,) + tuple(_key_of(o) for o in obj)
    if isinstance(obj, dict):
        return ("dict",) + tuple((k, _key_of(v)) for k, v in sorted(obj.items(), key=lambda kv: repr(kv[0])))
    try:
        hash(obj)
    except TypeError:
        raise CaptureError(f"graphed: an argument of type {type(obj).__name__} can be neither copied into the "
                           f"graph (only tensors are) nor compared with the captured one (it is unhashable)") from None
    return obj


class _Captured:
    __slots__ = ("calls", "graph", "inputs", "outputs", "rebuild")

    def __init__(self):
        self.calls, self.graph, self.inputs, self.outputs, self.rebuild = 0, None, None, None, None


class GraphedFunction:
    """`fn` captured per argument signature and replayed (see graphed())."""

    def __init__(self, fn: Callable, warmup: int = 1, copy_outputs: bool = True, max_graphs: int = 16):
        functools.update_wrapper(self, fn)
        self.fn, self.warmup, self.copy_outputs, self.max_graphs = fn, int(warmup), copy_outputs, max_graphs
        self._captured: "OrderedDict[Any, _Captured]" = OrderedDict()

    def __call__(self, *args, **kwargs):
        tensors = []
        rebuild_args = _flatten((args, kwargs), tensors)
        devices = {t._device for t in tensors if t._device.name != "cpu"}
        if not devices:  # nothing to capture: plain eager code (cpu tensors, or none)
            return self.fn(*args, **kwargs)
        if len(devices) > 1:
            raise CaptureError(f"graphed {self.__name__}: tensor arguments on several devices "
                               f"({', '.join(sorted(map(str, devices)))}); a graph belongs to one")
        (dev,) = devices
        key = _key_of((args, kwargs))
        entry = self._captured.get(key)
        if entry is None:
            entry = self._captured[key] = _Captured()
            while len(self._captured) > self.max_graphs:
                _, old = self._captured.popitem(last=False)
                if old.graph is not None:
                    old.graph.reset()
        self._captured.move_to_end(key)
        if entry.calls < self.warmup:  # eager: compiles the kernels and makes lazily built state
            entry.calls += 1
            return self.fn(*args, **kwargs)
        if entry.graph is None:
            self._capture(entry, dev, tensors, rebuild_args)
        else:
            for static, t in zip(entry.inputs, tensors):
                if static is not t:
                    static.copy_(t)
            entry.graph.replay()
        outs = [o.clone() for o in entry.outputs] if self.copy_outputs else list(entry.outputs)
        return entry.rebuild(outs)

    def _capture(self, entry, dev, tensors, rebuild_args):
        # static inputs: the graph reads these; each call copies its arguments into them
        inputs = []
        for t in tensors:
            s = empty(*t.shape, dtype=t.dtype, device=t._device)
            s.copy_(t.detach())
            s.requires_grad_(t.requires_grad)
            inputs.append(s)
        args, kwargs = rebuild_args(list(inputs))
        g = Graph()
        with graph(g, device=dev):
            result = self.fn(*args, **kwargs)
        outputs = []
        rebuild = _flatten(result, outputs)
        if any(o.requires_grad for o in outputs):
            g.reset()
            raise CaptureError(f"graphed {self.__name__}: an output requires grad; a graphed function's outputs "
                               "carry no autograd history (run backward inside the function, or detach them)")
        entry.graph, entry.inputs, entry.outputs, entry.rebuild = g, inputs, outputs, rebuild
        g.replay()  # a capture runs nothing: this call's results come from the first replay

    def reset(self) -> None:
        """Drop every captured graph (the next calls warm up and capture again)."""
        for entry in self._captured.values():
            if entry.graph is not None:
                entry.graph.reset()
        self._captured.clear()


def graphed(fn: Optional[Callable] = None, *, warmup: int = 1, copy_outputs: bool = True):
    """Capture `fn` and replay it on later calls (decorator; tinygrad's TinyJit,
    torch.cuda.make_graphed_callables for a function).

    Per signature (tensor shapes, dtypes and device; other arguments by value): the first
    `warmup` calls run eagerly, the next captures `fn` with its tensor arguments copied
    into static inputs, and later calls copy their arguments there and replay. Tensors
    that `fn` reads without taking them as arguments (weights) are read where they are
    at replay time. Outputs are copied out (`copy_outputs=False` returns the graph's
    static outputs, overwritten by the next call). On cpu tensors fn runs eagerly.

    >>> import tensorlite as tl
    >>> @tl.graphs.graphed
    ... def step(x):
    ...     return (x * 2).sum()
    >>> [step(tl.ones(3) * i).item() for i in range(3)]   # cpu: eager calls
    [0.0, 6.0, 12.0]
    """
    if fn is None:
        return lambda f: GraphedFunction(f, warmup, copy_outputs)
    return GraphedFunction(fn, warmup, copy_outputs)
