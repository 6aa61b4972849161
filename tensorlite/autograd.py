"""Reverse-mode autograd: each differentiable op attaches a `Node` holding its inputs and
a backward closure (written with Tensor ops, so gradients are themselves tensors on the
op's device). `backward` walks the graph in reverse topological order.
"""
from __future__ import annotations

import threading

from .errors import TensorliteError

_state = threading.local()
_WRITES = [0]  # in-place writes of any storage so far (stamps): a backward checks saved tensors only after one


def note_write(storage) -> None:
    """Count an in-place write of `storage` (every frontend op that writes memory in place calls
    this): its version (PyTorch's `_version`) goes up, and it is stamped with the write's number."""
    _WRITES[0] += 1
    storage.version += 1
    storage.written_at = _WRITES[0]


def is_grad_enabled() -> bool:
    return getattr(_state, "enabled", True)


class _GradMode:
    """Context manager and decorator setting grad mode (no_grad / enable_grad)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __enter__(self):
        self.prev = is_grad_enabled()
        _state.enabled = self.enabled

    def __exit__(self, *exc):
        _state.enabled = self.prev

    def __call__(self, fn):
        def wrapper(*a, **k):
            with _GradMode(self.enabled):
                return fn(*a, **k)
        wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
        return wrapper


def no_grad():
    return _GradMode(False)


def enable_grad():
    return _GradMode(True)


class Node:
    """One recorded op. `inputs`: the tensors it was computed from; `edges`: where each input's
    gradient goes, fixed when the op ran (the input's own Node, the input itself for a leaf,
    None where it needs none), so a later in-place op that gives an input a new history does
    not change what this op differentiates through. `saved`: the tensors whose values
    backward_fn reads, checked before it runs against in-place writes since `stamp` (the
    write count when the op ran: no check at all where no write happened since)."""
    __slots__ = ("inputs", "edges", "backward_fn", "name", "saved", "stamp")

    def __init__(self, inputs, backward_fn, name, saved=()):
        edges = []
        for t in inputs:  # Tensors, None (an absent optional operand) or a multi-output hub
            base = None if t is None else t._base
            if base is not None and base._node is not t._base_node:
                raise TensorliteError(
                    f"{name}: an input ({t.dtype.name}, shape {tuple(t.shape)}, {t.device}) is a view of a tensor "
                    "that an in-place op gave a new autograd history after the view was taken; take the view "
                    "again after the in-place op")
            edges.append((t._node or t) if t is not None and t.requires_grad else None)
        self.inputs, self.edges, self.backward_fn, self.name = inputs, tuple(edges), backward_fn, name
        self.saved, self.stamp = saved, _WRITES[0]

    def check_saved(self):
        """Raise if a tensor this op's backward reads was modified in place since the op ran."""
        for t in self.saved:
            if t is not None and t._storage.written_at > self.stamp:
                raise TensorliteError(
                    f"backward of {self.name}: the {t.dtype.name} tensor of shape {tuple(t.shape)} on {t.device} "
                    f"that {self.name} saved was modified by an in-place operation afterwards (its version is now "
                    f"{t._storage.version}); modify a clone() instead, or use the out-of-place op")


def attach(out, inputs, backward_fn, name="op", saved=()):
    """Record `out = op(*inputs)` if any input needs a gradient. backward_fn(grad_out)
    returns one gradient (Tensor or None) per input; `saved` are the tensors whose values
    backward_fn reads (an in-place change to one of them before backward is an error)."""
    if getattr(_state, "enabled", True):  # is_grad_enabled(), inlined: every op comes here
        for t in inputs:
            if getattr(t, "requires_grad", False):
                out.requires_grad = True
                out._node = Node(tuple(inputs), backward_fn, name, saved)
                break
    return out


class _SlotGrads(dict):
    """A multi-output op's output gradients by output index; adding two merges them.
    Every instance is a fresh one that the backward walk alone holds (as the running
    sum of the op's hub), so the merge goes into self: copying instead was quadratic in
    the number of outputs (a foreach_to over every weight)."""
    __slots__ = ()

    def __add__(self, other):
        for i, g in other.items():
            prev = self.get(i)
            self[i] = g if prev is None else prev + g
        return self


class _Outputs:
    """The hidden input that ties a multi-output op's outputs to its one Node (attach_many):
    each output's node hands its gradient here under its index; the walk reaches this after
    every output (it is their common input) and runs the op's backward once, with all."""
    __slots__ = ("requires_grad", "_node")
    _base = None  # never a view (what Node asks of every input)

    def __init__(self, node):
        self.requires_grad, self._node = True, node


def attach_many(outs, inputs, backward_fn, name="op", saved=()):
    """Record `outs = op(*inputs)` (a list of tensors) as one node if any input needs a
    gradient. backward_fn(grads) gets one gradient per output (None where an output got
    none) and returns one per input."""
    if is_grad_enabled() and any(getattr(t, "requires_grad", False) for t in inputs):
        n = len(outs)
        hub = _Outputs(Node(tuple(inputs), lambda slots: backward_fn([slots.get(i) for i in range(n)]), name, saved))
        for i, out in enumerate(outs):
            out.requires_grad = True
            out._node = Node((hub,), lambda g, i=i: (_SlotGrads({i: g}),), name)
    return outs


def _topo_order(start):
    """Nodes and leaves reachable from `start` (a Node, or a leaf tensor), each after every
    vertex that feeds it a gradient."""
    order, seen, stack = [], set(), [(start, False)]
    pop, push, emit, mark = stack.pop, stack.append, order.append, seen.add
    while stack:
        v, done = pop()
        if done:
            emit(v)
            continue
        key = id(v)
        if key in seen:
            continue
        mark(key)
        if type(v) is not Node:  # a leaf: emitted now, where popping its (v, True) would emit it
            emit(v)
            continue
        push((v, True))
        for e in v.edges:
            if e is not None and id(e) not in seen:
                push((e, False))
    return reversed(order)


def backward(root, gradient, retain_graph=False):
    """Accumulate d(root)/d(leaf) * gradient into every leaf's .grad (Tensor.backward makes
    `gradient`, a tensor of root's shape, and checks that root requires grad)."""
    start = root._node or root
    grads = {id(start): gradient}
    pop, get = grads.pop, grads.get
    with no_grad():
        for v in _topo_order(start):
            g = pop(id(v), None)
            if g is None:
                continue
            if type(v) is not Node:  # leaf: accumulate
                if g.dtype is not v.dtype:
                    g = g.to(v.dtype)
                v.grad = g if v.grad is None else v.grad + g
                continue
            backward_fn = v.backward_fn
            if backward_fn is None:
                raise TensorliteError(
                    f"backward: the graph of {v.name} was freed by an earlier backward; "
                    "pass retain_graph=True to the first backward to call it twice")
            if v.stamp != _WRITES[0] and v.saved:
                v.check_saved()
            in_grads = backward_fn(g)
            if not retain_graph:
                v.backward_fn = None
            for e, ig in zip(v.edges, in_grads):
                if e is None or ig is None:
                    continue
                key = id(e)
                prev = get(key)
                grads[key] = ig if prev is None else prev + ig
