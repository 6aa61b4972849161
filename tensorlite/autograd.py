"""Reverse-mode autograd: each differentiable op attaches a `Node` holding its inputs and
a backward closure (written with Tensor ops, so gradients are themselves tensors on the
op's device). `backward` walks the graph in reverse topological order.
"""
from __future__ import annotations

import threading

from .errors import TensorliteError

_state = threading.local()


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
    __slots__ = ("inputs", "backward_fn", "name")

    def __init__(self, inputs, backward_fn, name):
        self.inputs, self.backward_fn, self.name = inputs, backward_fn, name


def attach(out, inputs, backward_fn, name="op"):
    """Record `out = op(*inputs)` if any input needs a gradient. backward_fn(grad_out)
    returns one gradient (Tensor or None) per input."""
    if getattr(_state, "enabled", True):  # is_grad_enabled(), inlined: every op comes here
        for t in inputs:
            if getattr(t, "requires_grad", False):
                out.requires_grad = True
                out._node = Node(tuple(inputs), backward_fn, name)
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

    def __init__(self, node):
        self.requires_grad, self._node = True, node


def attach_many(outs, inputs, backward_fn, name="op"):
    """Record `outs = op(*inputs)` (a list of tensors) as one node if any input needs a
    gradient. backward_fn(grads) gets one gradient per output (None where an output got
    none) and returns one per input."""
    if is_grad_enabled() and any(getattr(t, "requires_grad", False) for t in inputs):
        n = len(outs)
        hub = _Outputs(Node(tuple(inputs), lambda slots: backward_fn([slots.get(i) for i in range(n)]), name))
        for i, out in enumerate(outs):
            out.requires_grad = True
            out._node = Node((hub,), lambda g, i=i: (_SlotGrads({i: g}),), name)
    return outs


def _topo_order(root):
    order, seen, stack = [], set(), [(root, False)]
    pop, push, emit, mark = stack.pop, stack.append, order.append, seen.add
    while stack:
        t, done = pop()
        if done:
            emit(t)
            continue
        key = id(t)
        if key in seen:
            continue
        mark(key)
        node = t._node
        if node is None:  # a leaf: emitted now, where popping its (t, True) would emit it
            emit(t)
            continue
        push((t, True))
        for inp in node.inputs:
            if getattr(inp, "requires_grad", False) and id(inp) not in seen:
                push((inp, False))
    return reversed(order)


def backward(root, gradient, retain_graph=False):
    """Accumulate d(root)/d(leaf) * gradient into every leaf's .grad (Tensor.backward makes
    `gradient`, a tensor of root's shape, and checks that root requires grad)."""
    grads = {id(root): gradient}
    pop, get = grads.pop, grads.get
    with no_grad():
        for t in _topo_order(root):
            g = pop(id(t), None)
            if g is None:
                continue
            node = t._node
            if node is None:  # leaf: accumulate
                if g.dtype is not t.dtype:
                    g = g.to(t.dtype)
                t.grad = g if t.grad is None else t.grad + g
                continue
            backward_fn = node.backward_fn
            if backward_fn is None:
                raise TensorliteError(
                    f"backward: the graph of {node.name} was freed by an earlier backward; "
                    "pass retain_graph=True to the first backward to call it twice")
            in_grads = backward_fn(g)
            if not retain_graph:
                node.backward_fn = None
            for inp, ig in zip(node.inputs, in_grads):
                if ig is None or not getattr(inp, "requires_grad", False):
                    continue
                key = id(inp)
                prev = get(key)
                grads[key] = ig if prev is None else prev + ig
