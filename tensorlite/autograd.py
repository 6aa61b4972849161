"""Reverse-mode autograd: each differentiable op attaches a `Node` holding its inputs and
a backward closure (written with Tensor ops, so gradients are themselves tensors on the
op's device). `backward` walks the graph in reverse topological order. With create_graph=True the walk
runs with grad mode on, so those Tensor ops record the backward itself (higher derivatives).

The user API, as torch.autograd's: `grad`, `backward`, `Function` (custom ops), grad modes,
and the tensor hooks / retain_grad that Tensor.register_hook and Tensor.retain_grad keep here.
"""
from __future__ import annotations

import itertools
import threading
import weakref

from . import fused_unary
from ._core import TensorBase
from .errors import ArgumentError, ShapeError, TensorliteError, describe

class _ThreadGradMode(threading.local):
    """Each thread's grad mode (and the fused backward under way, see below); the defaults are class
    attributes, so a thread that never set them reads them (a getattr default costs a caught
    AttributeError, and every op reads the mode)."""
    enabled = True
    fused = None


_state = _ThreadGradMode()
_WRITES = [0]  # in-place writes of any storage so far (stamps): a backward checks saved tensors only after one
_HOOKS = {}  # id(vertex) -> {key: hook} of the few vertices with tensor hooks (empty: no cost)
_POST_HOOKS = {}  # id(leaf) -> {key: hook(leaf)}: post-accumulate-grad hooks (distributed data parallel's buckets)
_RETAINED = weakref.WeakValueDictionary()  # id(t) -> t, the non-leaf tensors retain_grad() was called on
# Ops whose backward reads no tensor, only shapes: as PyTorch (which frees saved tensors, not nodes) a
# second backward through one runs it again, where the walk frees every other node's backward
# (`a, b = leaf.chunk(2); a.sum().backward(); b.sum().backward()` goes through split twice).
_READS_NO_TENSOR = frozenset({
    "split", "unbind", "cat", "reshape", "permute", "transpose", "narrow", "select", "unsqueeze", "squeeze",
    "broadcast_to", "diagonal", "sum", "contiguous", "clone", "cast", "to(device)"})
HOOK_KEYS = itertools.count()  # the keys of every hook registry (tensors' here, nn.Module's forward hooks)


def note_write(storage) -> None:
    """Count an in-place write of `storage` (every frontend op that writes memory in place calls
    this): its version (PyTorch's `_version`) goes up, and it is stamped with the write's number."""
    _WRITES[0] += 1
    storage.version += 1
    storage.written_at = _WRITES[0]


def is_grad_enabled() -> bool:
    """Whether ops record the autograd graph now (False inside no_grad), as torch.is_grad_enabled.

    >>> import tensorlite as tl
    >>> with tl.no_grad(): print(tl.is_grad_enabled())
    False
    """
    return _state.enabled


class _GradMode:
    """Context manager and decorator setting grad mode (no_grad / enable_grad; None keeps it)."""

    def __init__(self, enabled):
        self.enabled = enabled

    def __enter__(self):
        self.prev = is_grad_enabled()
        if self.enabled is not None:
            _state.enabled = self.enabled

    def __exit__(self, *exc):
        _state.enabled = self.prev

    def __call__(self, fn):
        def wrapper(*a, **k):
            with _GradMode(self.enabled):
                return fn(*a, **k)
        wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
        return wrapper


def no_grad(fn=None):
    """Record no gradients in a `with` block or a decorated function (also bare: @tl.no_grad)."""
    return _GradMode(False)(fn) if callable(fn) else _GradMode(False)


def enable_grad(fn=None):
    """Record gradients in a `with` block or a decorated function (also bare: @tl.enable_grad)."""
    return _GradMode(True)(fn) if callable(fn) else _GradMode(True)


class set_grad_enabled(_GradMode):
    """Turn gradient recording on or off: at once when called, back when its `with` block ends.

    >>> import tensorlite as tl
    >>> x = tl.ones(2, requires_grad=True)
    >>> with tl.set_grad_enabled(False):
    ...     (x * 2).requires_grad
    False
    """

    def __init__(self, mode: bool):
        self.enabled, self.prev = bool(mode), is_grad_enabled()
        _state.enabled = self.enabled

    def __enter__(self):
        pass  # the call set the mode

    def __call__(self, fn):
        _state.enabled = self.prev  # as a decorator only the calls of fn change the mode
        return super().__call__(fn)


def inference_mode(mode: bool = True):
    """no_grad (tensorlite has no separate inference tensors); inference_mode(False) changes nothing.

    >>> import tensorlite as tl
    >>> with tl.inference_mode():
    ...     (tl.ones(2, requires_grad=True) * 2).requires_grad
    False
    """
    return _GradMode(False)(mode) if callable(mode) else _GradMode(False if mode else None)


class Node:
    """One recorded op. `inputs`: the tensors it was computed from; `edges`: where each input's
    gradient goes, fixed when the op ran (the input's own Node, the input itself for a leaf,
    None where it needs none), so a later in-place op that gives an input a new history does
    not change what this op differentiates through. `saved`: the tensors whose values
    backward_fn reads, checked before it runs against in-place writes since `stamp` (the
    write count when the op ran: no check at all where no write happened since)."""
    __slots__ = ("inputs", "edges", "backward_fn", "name", "saved", "stamp", "__weakref__")

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

def _check_saved(name, saved, stamp):
    """Raise if a tensor that op `name` saved was modified in place since `stamp`."""
    for t in saved:
        if t is not None and t._storage.written_at > stamp:
            raise TensorliteError(
                f"backward of {name}: the {t.dtype.name} tensor of shape {tuple(t.shape)} on {t.device} "
                f"that {name} saved was modified by an in-place operation afterwards (its version is now "
                f"{t._storage.version}); modify a clone() instead, or use the out-of-place op")


def attach(out, inputs, backward_fn, name="op", saved=()):
    """Record `out = op(*inputs)` if any input needs a gradient. backward_fn(grad_out)
    returns one gradient (Tensor or None) per input; `saved` are the tensors whose values
    backward_fn reads (an in-place change to one of them before backward is an error)."""
    if _state.enabled:  # is_grad_enabled(), inlined: every op comes here
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


def topo_order(starts):
    """Nodes and leaves reachable from `starts` (Nodes, or leaf tensors), each before every
    vertex that it feeds a gradient."""
    order, seen, stack = [], set(), [(s, False) for s in starts]
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
        # edges in reverse, so the first input's subgraph is walked first and ends up last in
        # the order: an op's weights and bias (its later inputs) get their gradients right
        # after the op's backward, not after the whole graph below it. DDP's buckets start
        # from those gradients while the rest of backward runs.
        for e in reversed(v.edges):
            if e is not None and id(e) not in seen:
                push((e, False))
    order.reverse()
    return order


# ---- tensor hooks and retain_grad -------------------------------------------------------

class RemovableHandle:
    """What Tensor.register_hook returns: remove() unregisters the hook (so does leaving a `with`)."""
    __slots__ = ("_fns", "_key")

    def __init__(self, fns, key):
        self._fns, self._key = fns, key

    def remove(self):
        """Unregister the hook (again: nothing happens)."""
        self._fns.pop(self._key, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def _needs_grad(t, op):
    if not t.requires_grad:
        raise TensorliteError(f"{describe(op, self=t)}: the tensor does not require grad")


def register_hook(t, hook) -> RemovableHandle:
    """Tensor.register_hook: hook(grad) runs when t's gradient is complete and may return a
    replacement (a leaf: before it is added to .grad). Kept by t's vertex (its Node, or t for
    a leaf), as PyTorch's: a later in-place op on t leaves it on the gradient of the old value."""
    _needs_grad(t, "register_hook")
    return _add_hook(_HOOKS, t._node or t, hook)


def register_post_accumulate_grad_hook(t, hook) -> RemovableHandle:
    """PyTorch's Tensor.register_post_accumulate_grad_hook for a leaf t: hook(t) runs after a
    backward has added its gradient to t.grad (once per backward that reaches t; its return
    value is ignored). Distributed data parallel starts a bucket's all-reduce from here.

    >>> import tensorlite as tl
    >>> w = tl.tensor([1.0, 2.0], requires_grad=True)
    >>> h = tl.autograd.register_post_accumulate_grad_hook(w, lambda p: print(p.grad.tolist()))
    >>> (w * 3).sum().backward()
    [3.0, 3.0]
    """
    _needs_grad(t, "register_post_accumulate_grad_hook")
    if t._node is not None:
        raise TensorliteError(f"{describe('register_post_accumulate_grad_hook', self=t)}: post-accumulate-grad "
                              "hooks can only be registered on leaf tensors")
    return _add_hook(_POST_HOOKS, t, hook)


def _add_hook(registry, v, hook) -> RemovableHandle:
    """Keep hook in registry under vertex v (dropped with v)."""
    fns = registry.get(id(v))
    if fns is None:
        fns = registry[id(v)] = {}
        weakref.finalize(v, registry.pop, id(v), None)
    key = next(HOOK_KEYS)
    fns[key] = hook
    return RemovableHandle(fns, key)


def retain_grad(t) -> None:
    """Tensor.retain_grad: a non-leaf t gets .grad from each backward (a leaf has it anyway)."""
    _needs_grad(t, "retain_grad")
    if t._node is not None:
        _RETAINED[id(t)] = t


def retains_grad(t) -> bool:
    """Tensor.retains_grad: whether retain_grad() was called on the non-leaf t."""
    return t._node is not None and _RETAINED.get(id(t)) is t


def _run_hooks(fns, g):
    for fn in tuple(fns.values()):
        r = fn(g)
        if r is not None:
            if tuple(r.shape) != tuple(g.shape):
                raise ShapeError(f"hook {getattr(fn, '__name__', fn)!r} returned a gradient of shape "
                                 f"{tuple(r.shape)} for a tensor of shape {tuple(g.shape)}")
            g = r
    return g


def _run_post_hooks(fns, leaf):
    for fn in tuple(fns.values()):
        fn(leaf)


# ---- double backward ------------------------------------------------------------------------

def _twice_error(name):
    def refuse(g):
        raise TensorliteError(
            f"{name}: its backward is a fused kernel that cannot be differentiated again; a gradient of a "
            f"gradient (create_graph=True) through {name} is not supported")
    return refuse


def not_twice(t, v, g):
    """Mark t, a gradient that node v's fused backward kernel computed from g while create_graph
    records, as not differentiable again: its node leads where v's inputs and g do (so that every
    path through it is found) and raises, naming the op, when a gradient reaches it."""
    if t is not None and not t.requires_grad:
        n = Node.__new__(Node)
        gs = [x for x in (g.values() if isinstance(g, dict) else (g,)) if x is not None and x.requires_grad]
        n.inputs, n.edges, n.saved, n.stamp = v.inputs, v.edges + tuple(x._node or x for x in gs), (), 0
        n.backward_fn, n.name = _twice_error(v.name), v.name + " backward"
        t.requires_grad, t._node = True, n
    return t


def _unary_twice(d):  # g * f'(x) of a fused unary, d = f' in Tensor ops
    return lambda v, g: (g._cast(v.inputs[0].dtype) * d(v.inputs[0]),)


# node name -> rule(node, g) -> its input gradients as Tensor ops: what create_graph runs for the
# ops whose backward is a fused kernel: the fused unaries' from their units (fused_unary.py), the
# others' (softmax, log_softmax, linear) registered beside their forwards
_TWICE = {u.name: _unary_twice(u.derivative) for u in fused_unary.UNARIES}


def register_double_backward(name: str, rule) -> None:
    """rule(node, g) -> the input gradients (one per input) of a node recorded under `name`, written
    in Tensor ops: what a backward with create_graph=True runs instead of the node's backward where
    that is a fused kernel (whose result cannot be differentiated again). `node.inputs` and
    `node.saved` are what the op recorded (custom_op's inputs and saved tensors)."""
    _TWICE[name] = rule


def _recorded_backward(v, g):
    """v's input gradients with grad mode on (create_graph): recorded where written as Tensor
    ops (or where _TWICE has a rule for v); a fused kernel's result (custom_op.result) refuses a
    second pass."""
    twice = _TWICE.get(v.name)
    if twice is not None:
        return twice(v, g)
    _state.fused = (v, g)
    try:
        grads = v.backward_fn(g)
    finally:
        _state.fused = None
    return grads


def mark_if_fused_backward(t):
    """t, marked not differentiable again (not_twice) where a fused backward kernel computes it
    while create_graph records (custom_op.result's results); else t itself."""
    fused = _state.fused
    return t if fused is None else not_twice(t, *fused)


# ---- the backward walk ------------------------------------------------------------------------

def _accumulate(t, g, taken):
    """t.grad += g. A first gradient is kept where it is contiguous over memory that no seed or
    other .grad of this walk uses (`taken`: their storages), else copied, as PyTorch's
    AccumulateGrad: a gradient may be another leaf's, a view of the seed, a broadcast."""
    if g.dtype is not t.dtype:
        g = g.to(t.dtype)
    if t.grad is not None:
        t.grad = t.grad + g
    elif id(g._storage) in taken or not g._layout.is_contiguous():
        t.grad = g.clone()
    else:
        t.grad = g
        taken.add(id(g._storage))


def _run(roots, grads, retain_graph, create_graph, inputs=None, capture=False):
    """The backward walk from `roots` seeded with `grads` (one per root). Accumulates into the
    .grad of every leaf reached (of `inputs` only, where given; there the walk runs only the
    nodes that lead to one), or with `capture` returns the gradient of each of `inputs` (None
    where none arrived) and touches no .grad."""
    acc, starts = {}, []
    for r, g in zip(roots, grads):
        s = r._node or r
        starts.append(s)
        acc[id(s)] = g if id(s) not in acc else acc[id(s)] + g
    order = topo_order(starts)
    want = run = None
    if inputs is not None:  # the inputs' vertices, and the nodes whose backward leads to one
        want, run = {}, set()
        for i, t in enumerate(inputs):
            want.setdefault(id(t._node or t), []).append(i)
        useful = set(want)
        for v in reversed(order):
            if type(v) is Node and any(e is not None and id(e) in useful for e in v.edges):
                run.add(id(v))
                useful.add(id(v))
    got = [None] * len(inputs) if capture else None
    taken, hooks = {id(g._storage) for g in grads}, _HOOKS
    retained = {id(t._node): t for t in _RETAINED.values()} if _RETAINED else None  # their current vertices
    pop, get = acc.pop, acc.get
    prev, prev_fused = is_grad_enabled(), _state.fused
    _state.enabled, _state.fused = create_graph, None
    try:
        for v in order:
            k = id(v)
            g = pop(k, None)
            if g is None:
                continue
            if hooks and k in hooks:
                g = _run_hooks(hooks[k], g)
            if retained and k in retained:  # after the hooks, as PyTorch: the gradient they made
                t = retained[k]
                t.grad = g.clone() if t.grad is None else t.grad + g
            if want is not None:
                idx = want.get(k)
                if idx is not None:
                    if capture:
                        for i in idx:
                            got[i] = g
                    else:
                        _accumulate(inputs[idx[0]], g, taken)
                        if k in _POST_HOOKS:
                            _run_post_hooks(_POST_HOOKS[k], inputs[idx[0]])
                if k not in run:
                    continue
            elif type(v) is not Node:
                _accumulate(v, g, taken)
                if k in _POST_HOOKS:
                    _run_post_hooks(_POST_HOOKS[k], v)
                continue
            if v.backward_fn is None:
                raise TensorliteError(
                    f"backward: the graph of {v.name} was freed by an earlier backward; "
                    "pass retain_graph=True to the first backward to call it twice")
            if v.stamp != _WRITES[0] and v.saved:
                _check_saved(v.name, v.saved, v.stamp)
            in_grads = _recorded_backward(v, g) if create_graph else v.backward_fn(g)
            if not retain_graph and v.name not in _READS_NO_TENSOR:
                # freed with the tensors the node holds, as PyTorch frees saved tensors: a loss
                # kept after backward would otherwise keep the step's activations alive (through
                # its graph's inputs), and an op that saved its own output (softmax,
                # add_layer_norm) forms a cycle that only the garbage collector breaks
                v.backward_fn, v.saved, v.inputs = None, (), ()
            for e, ig in zip(v.edges, in_grads):
                if e is None or ig is None:
                    continue
                key = id(e)
                prev_g = get(key)
                acc[key] = ig if prev_g is None else prev_g + ig
    finally:
        _state.enabled, _state.fused = prev, prev_fused
    return got


def _tensors(op, ts, what):
    ts = [ts] if isinstance(ts, TensorBase) else list(ts)
    for i, t in enumerate(ts):
        if not isinstance(t, TensorBase):
            raise ArgumentError(f"{op}: {what} must be tensors, got a {type(t).__name__} at index {i}")
    return ts


def _seeds(op, outputs, grad_outputs):
    """(outputs as a list, one gradient tensor each): ones for a one-element output where none
    is given, Python numbers / arrays as tensors like the output's."""
    outputs = _tensors(op, outputs, "outputs")
    grads = [None] * len(outputs) if grad_outputs is None else \
        [grad_outputs] if not isinstance(grad_outputs, (list, tuple)) else list(grad_outputs)
    if len(grads) != len(outputs):
        raise ArgumentError(f"{op}: {len(grads)} gradients given for {len(outputs)} outputs")
    for i, (t, g) in enumerate(zip(outputs, grads)):
        if not t.requires_grad:
            raise TensorliteError(f"{describe(op, self=t)}: element {i} of tensors does not require grad and "
                                  "does not have a grad_fn")
        if g is None:
            if t.numel() != 1:
                raise TensorliteError(f"{describe(op, self=t)}: grad can be implicitly created only for "
                                      "scalar (one-element) outputs; pass the gradient")
            g = t.new_ones(t.shape)
        elif not isinstance(g, TensorBase):
            g = t.new_tensor(g)  # its dtype and device
        if g.shape != t.shape:
            raise ShapeError(f"{describe(op, self=t, gradient=g)}: the gradient must have the shape of the tensor")
        grads[i] = g
    return outputs, grads


def _differentiated(op, inputs):
    inputs = _tensors(op, inputs, "inputs")
    for t in inputs:
        if not t.requires_grad:
            raise TensorliteError(f"{describe(op, input=t)}: one of the differentiated tensors does not require grad")
    return inputs


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None) -> None:
    """Add the gradients of `tensors` (times grad_tensors) to the leaves' .grad (of `inputs` only, if given).

    >>> import tensorlite as tl
    >>> x = tl.tensor([1.0, 2.0], requires_grad=True)
    >>> tl.autograd.backward([(x * x).sum(), x.sum()]); x.grad.tolist()
    [3.0, 5.0]
    """
    roots, grads = _seeds("backward", tensors, grad_tensors)
    _run(roots, grads, create_graph if retain_graph is None else retain_graph, create_graph,
         None if inputs is None else _differentiated("backward", inputs))


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, only_inputs=True,
         allow_unused=None, materialize_grads=False):
    """The gradients of `outputs` with respect to `inputs`, as a tuple; no .grad changes.

    >>> import tensorlite as tl
    >>> x = tl.tensor([1.0, 2.0], requires_grad=True)
    >>> dx, = tl.autograd.grad((x ** 3).sum(), x, create_graph=True)
    >>> dx.tolist(), tl.autograd.grad(dx.sum(), x)[0].tolist()
    ([3.0, 12.0], [6.0, 12.0])
    """
    if materialize_grads and allow_unused is False:
        raise ArgumentError("grad: materialize_grads=True needs allow_unused True or not given")
    roots, grads = _seeds("grad", outputs, grad_outputs)
    inputs = _differentiated("grad", inputs)
    got = _run(roots, grads, create_graph if retain_graph is None else retain_graph, create_graph, inputs, True)
    for i, g in enumerate(got):
        if g is None:
            if not (allow_unused or materialize_grads):
                raise TensorliteError(f"{describe('grad', input=inputs[i])}: the differentiated tensor at index {i} "
                                      "was not used in the graph; pass allow_unused=True if that is intended")
            if materialize_grads:
                got[i] = inputs[i].new_zeros(inputs[i].shape)
    return tuple(got)


# ---- custom Functions -----------------------------------------------------------------------

class FunctionCtx:
    """The `ctx` of a custom Function: what its forward leaves for its backward."""

    def __init__(self, name):
        self._name, self._saved, self._stamp, self._non_differentiable = name, (), _WRITES[0], set()
        self.needs_input_grad, self.materialize_grads = (), True

    def save_for_backward(self, *tensors):
        """Keep tensors for backward (ctx.saved_tensors); an in-place change to one before then is an error."""
        self._saved, self._stamp = tensors, _WRITES[0]

    @property
    def saved_tensors(self):
        """The tensors given to save_for_backward (checked against in-place changes since)."""
        _check_saved(self._name, self._saved, self._stamp)
        return self._saved

    def mark_non_differentiable(self, *outputs):
        """These outputs get no gradient (they do not require grad; backward sees zeros or None for them)."""
        self._non_differentiable.update(map(id, outputs))

    def set_materialize_grads(self, value: bool):
        """False: backward gets None, not zeros, for the outputs that received no gradient."""
        self.materialize_grads = bool(value)

    def mark_dirty(self, *tensors):
        """Not supported: a forward that writes its inputs in place (return a new tensor instead)."""
        raise TensorliteError(f"{self._name}: in-place forwards (ctx.mark_dirty) are not supported; "
                              "return a new tensor")


class Function:
    """A custom autograd op: subclass with static forward(ctx, *args) and backward(ctx, *grads),
    call it as MyOp.apply(*args). backward returns one gradient per forward argument (None for
    non-tensors and inputs that need none); forward runs without recording.

    >>> import tensorlite as tl
    >>> class Cube(tl.autograd.Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         ctx.save_for_backward(x)
    ...         return x ** 3
    ...     @staticmethod
    ...     def backward(ctx, g):
    ...         x, = ctx.saved_tensors
    ...         return g * 3 * x ** 2
    >>> x = tl.tensor([1.0, 2.0], requires_grad=True)
    >>> Cube.apply(x).sum().backward(); x.grad.tolist()
    [3.0, 12.0]
    """

    @staticmethod
    def forward(ctx, *args):
        """A subclass's forward(ctx, *args) computes the outputs (a @staticmethod, as torch's)."""
        raise NotImplementedError("a Function subclass defines forward(ctx, *args) as a @staticmethod")

    @staticmethod
    def backward(ctx, *grad_outputs):
        """A subclass's backward(ctx, *grad_outputs) returns one gradient (or None) per forward input."""
        raise NotImplementedError("a Function subclass defines backward(ctx, *grads) as a @staticmethod")

    @staticmethod
    def setup_context(ctx, inputs, output):
        """Optional (torch's newer style): save what backward needs on ctx, from inputs and output."""
        raise NotImplementedError

    @classmethod
    def apply(cls, *args):
        """Run forward on args and, where an argument tensor requires grad, record backward."""
        name = cls.__name__
        ctx = FunctionCtx(name)
        on = is_grad_enabled()
        ctx.needs_input_grad = tuple(on and isinstance(a, TensorBase) and a.requires_grad for a in args)
        with no_grad():
            if cls.setup_context is not Function.setup_context:  # forward(*args) + setup_context (PyTorch 2)
                outs = cls.forward(*args)
                cls.setup_context(ctx, args, outs)
            else:
                outs = cls.forward(ctx, *args)
        if not any(ctx.needs_input_grad):
            return outs
        many = isinstance(outs, tuple)
        outs = list(outs) if many else [outs]
        pos = [i for i, a in enumerate(args) if isinstance(a, TensorBase)]
        like = args[pos[0]]  # an input (kept by the graph anyway): its new_zeros makes the materialized grads
        diff = []  # the differentiable outputs; an input returned as is becomes a new tensor over its memory
        for i, o in enumerate(outs):
            if isinstance(o, TensorBase) and o.dtype.is_floating_point and id(o) not in ctx._non_differentiable:
                outs[i] = o.detach() if any(o is args[p] for p in pos) else o
                diff.append(i)
        metas = [(o.shape, o.dtype, o.device) if isinstance(o, TensorBase) else None for o in outs]

        def backward_fn(grads):
            gs = [None] * len(outs)
            for i, g in zip(diff, grads):
                gs[i] = g
            if ctx.materialize_grads:
                gs = [like.new_zeros(m[0], dtype=m[1], device=m[2]) if g is None and m else g
                      for g, m in zip(gs, metas)]
            got = cls.backward(ctx, *gs)
            got = got if isinstance(got, tuple) else (got,)
            if len(got) < len(args) or any(g is not None for g in got[len(args):]):
                raise TensorliteError(f"{name}.backward returned {len(got)} gradients; expected {len(args)}, one per "
                                      "argument of forward (None for non-tensors)")
            for i, (a, g) in enumerate(zip(args, got)):
                if g is not None and (not isinstance(a, TensorBase) or not isinstance(g, TensorBase)
                                      or g.shape != a.shape):
                    raise ShapeError(f"{describe(name + '.backward', gradient=g, input=a)}: the gradient at index {i} "
                                     "must be None or a tensor of its input's shape")
            return [None if got[p] is None else got[p]._cast(args[p].dtype) for p in pos]
        inputs, saved, node = tuple(args[p] for p in pos), ctx._saved, name + "Backward"  # PyTorch's grad_fn name
        if len(diff) == 1:
            attach(outs[diff[0]], inputs, lambda g: backward_fn([g]), node, saved)
        elif diff:
            attach_many([outs[i] for i in diff], inputs, backward_fn, node, saved)
        return tuple(outs) if many else outs[0]
