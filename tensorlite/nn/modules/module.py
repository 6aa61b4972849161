"""nn.Module: the base class of every layer (parameters, buffers, submodules, hooks, modes,
devices and state dicts), shaped after torch.nn.Module."""
from __future__ import annotations

import functools
from collections import OrderedDict, namedtuple

from ... import dtype as dtypes
from ...autograd import HOOK_KEYS, RemovableHandle, attach_many, no_grad
from ...errors import ArgumentError, DTypeError, StateDictError, StateDictShapeError, TensorliteError
from ...ops.creation import tensor, zeros_like
from ...tensor import Tensor
from ..parameter import Parameter

IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


def _swap_in(t: Tensor, new: Tensor) -> None:
    """Make `t` hold `new`'s storage, dtype and device in place: the object identity
    (which optimizers and other modules hold on to) survives Module.to()."""
    t._storage, t._layout, t.dtype, t._device = new._storage, new._layout, new.dtype, new._device


class Module:
    """Base class: attributes that are Parameters, Modules or registered buffers are tracked."""

    def __init__(self):  # the registries, set past __setattr__ (which needs them)
        self.__dict__.update(_parameters=OrderedDict(), _buffers=OrderedDict(), _non_persistent=set(),
                             _modules=OrderedDict(), training=True, _forward_hooks=OrderedDict(),
                             _forward_pre_hooks=OrderedDict(), _backward_hooks=OrderedDict())

    def forward(self, *args, **kwargs):
        """The computation, defined by every subclass; call the module (module(x)) to run it with its hooks."""
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args, **kwargs):
        if not (self._forward_pre_hooks or self._forward_hooks or self._backward_hooks):
            return self.forward(*args, **kwargs)
        for hook, with_kwargs in list(self._forward_pre_hooks.values()):
            res = hook(self, args, kwargs) if with_kwargs else hook(self, args)
            if res is not None and with_kwargs:
                args, kwargs = res
            elif res is not None:
                args = res if isinstance(res, tuple) else (res,)
        out = self._backward_hooked(args, kwargs) if self._backward_hooks else self.forward(*args, **kwargs)
        for hook, with_kwargs in list(self._forward_hooks.values()):
            res = hook(self, args, kwargs, out) if with_kwargs else hook(self, args, out)
            out = out if res is None else res
        return out

    def _backward_hooked(self, args, kwargs):
        """forward between two identity nodes: one over the tensor outputs (its backward keeps
        grad_output), one over the inputs that require grad (its backward calls the hooks)."""
        targs = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        track, grad_out = [i for i in targs if args[i].requires_grad], []

        def fire(grads):
            gin = tuple(dict(zip(track, grads)).get(i) for i in targs)
            for hook, _ in list(self._backward_hooks.values()):
                res = hook(self, gin, tuple(grad_out))
                gin = gin if res is None else tuple(res)
            return [gin[targs.index(i)] for i in track]
        args = list(args)
        for i, t in zip(track, attach_many([args[i].detach() for i in track], [args[i] for i in track], fire,
                                           "backward_hook")):
            args[i] = t
        out = self.forward(*args, **kwargs)
        outs = list(out) if isinstance(out, tuple) else [out]
        opos = [i for i, o in enumerate(outs) if isinstance(o, Tensor) and o.requires_grad]

        def keep(grads):
            grad_out[:] = grads
            if not track:  # no input needs a gradient: the hooks run now, with grad_input all None
                fire([])
            return grads
        for i, t in zip(opos, attach_many([outs[i].detach() for i in opos], [outs[i] for i in opos], keep,
                                          "backward_hook")):
            outs[i] = t
        return tuple(outs) if isinstance(out, tuple) else outs[0]

    def register_full_backward_hook(self, hook, prepend: bool = False):
        """Call hook(module, grad_input, grad_output) once the gradients with respect to the
        module's tensor inputs are known (None for one that needs none); a non-None result
        replaces grad_input.

        >>> import tensorlite as tl
        >>> m, seen = tl.nn.Linear(2, 1), []
        >>> h = m.register_full_backward_hook(lambda mod, gin, gout: seen.append(gout[0].tolist()))
        >>> m(tl.ones(3, 2)).sum().backward()
        >>> seen
        [[[1.0], [1.0], [1.0]]]
        """
        return self._add_hook(self._backward_hooks, hook, prepend, False)

    def _add_hook(self, hooks, hook, prepend, with_kwargs):
        key = next(HOOK_KEYS)
        hooks[key] = (hook, with_kwargs)
        if prepend:
            hooks.move_to_end(key, last=False)
        return RemovableHandle(hooks, key)

    def register_forward_pre_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False):
        """Call hook(module, args) before forward; a non-None result replaces args (a tuple or
        one value). With with_kwargs, hook(module, args, kwargs) returns (args, kwargs).

        >>> import tensorlite as tl
        >>> m = tl.nn.Identity()
        >>> h = m.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
        >>> m(tl.tensor([1, 2])).tolist()
        [2, 4]
        """
        return self._add_hook(self._forward_pre_hooks, hook, prepend, with_kwargs)

    def register_forward_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False):
        """Call hook(module, args, output) after forward; a non-None result replaces the output.
        Returns a handle whose remove() unregisters the hook.

        >>> import tensorlite as tl
        >>> m, seen = tl.nn.ReLU(), []
        >>> h = m.register_forward_hook(lambda mod, args, out: seen.append(out.tolist()))
        >>> _ = m(tl.tensor([-1.0, 2.0])); h.remove(); _ = m(tl.tensor([3.0]))
        >>> seen
        [[0.0, 2.0]]
        """
        return self._add_hook(self._forward_hooks, hook, prepend, with_kwargs)

    # ---- registration ----------------------------------------------------------------
    def _registry(self):
        if "_parameters" not in self.__dict__:
            raise TensorliteError(f"{type(self).__name__}: call super().__init__() before assigning attributes")
        return self._parameters, self._buffers, self._modules

    def __setattr__(self, name, value):
        params, buffers, modules = self._registry()
        if isinstance(value, Parameter):
            self.__dict__.pop(name, None), buffers.pop(name, None), modules.pop(name, None)
            params[name] = value
        elif isinstance(value, Module):
            self.__dict__.pop(name, None), params.pop(name, None), buffers.pop(name, None)
            modules[name] = value
        elif name in params:
            if value is not None:
                raise DTypeError(f"cannot assign {type(value).__name__} to parameter {name!r} "
                                "(expected a Parameter or None)")
            params[name] = None
        elif name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise DTypeError(f"cannot assign {type(value).__name__} to buffer {name!r} (expected a Tensor or None)")
            buffers[name] = value
        elif name in modules:
            if value is not None:
                raise DTypeError(f"cannot assign {type(value).__name__} to submodule {name!r}")
            modules[name] = None
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):  # only called when normal lookup fails
        for registry in ("_parameters", "_buffers", "_modules"):
            d = self.__dict__.get(registry)
            if d is not None and name in d:
                return d[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __delattr__(self, name):
        for registry in (self._parameters, self._buffers, self._modules):
            if name in registry:
                del registry[name]
                self._non_persistent.discard(name)
                return
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param):
        """Register a Parameter (or None) under name, as torch's (an attribute assignment does the same)."""
        if param is not None and not isinstance(param, Parameter):
            raise DTypeError(f"register_parameter({name!r}): expected a Parameter or None, got {type(param).__name__}")
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor, persistent: bool = True):
        """A tensor that is state but not trained (moved by .to(); in state_dict if persistent)."""
        if tensor is not None and not isinstance(tensor, Tensor):
            raise DTypeError(f"register_buffer({name!r}): expected a Tensor or None, got {type(tensor).__name__}")
        self._buffers[name] = tensor
        (self._non_persistent.discard if persistent else self._non_persistent.add)(name)

    def add_module(self, name: str, module):
        """Register a submodule (or None) under name, as torch's (also register_module)."""
        if module is not None and not isinstance(module, Module):
            raise DTypeError(f"add_module({name!r}): expected a Module, got {type(module).__name__}")
        self._modules[name] = module

    register_module = add_module

    # ---- traversal -------------------------------------------------------------------
    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        """(dotted name, module) of this module and every submodule, depth first, as torch's.

        >>> import tensorlite as tl
        >>> [n for n, _ in tl.nn.Sequential(tl.nn.Linear(2, 2)).named_modules()]
        ['', '0']
        """
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        if remove_duplicate:
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(memo, f"{prefix}.{name}" if prefix else name, remove_duplicate)

    def get_submodule(self, target: str):
        """The submodule at the dotted path `target` ('' is the module itself).

        >>> import tensorlite as tl
        >>> net = tl.nn.Sequential(tl.nn.Linear(2, 3), tl.nn.ReLU())
        >>> net.get_submodule("0").out_features, tuple(net.get_parameter("0.bias").shape)
        (3, (3,))
        """
        m = self
        for i, name in enumerate(target.split(".") if target else []):
            if not isinstance(m._modules.get(name), Module):
                raise ArgumentError(f"get_submodule({target!r}): {type(m).__name__} at "
                                    f"{'.'.join(target.split('.')[:i]) or 'the top'} has no submodule {name!r}")
            m = m._modules[name]
        return m

    def _get_member(self, target, registry, what):
        path, _, name = target.rpartition(".")
        t = getattr(self.get_submodule(path), registry).get(name)
        if t is None:
            raise ArgumentError(f"get_{what}({target!r}): no {what} {name!r} in {path or 'the module'}")
        return t

    def get_parameter(self, target: str):
        """The parameter at the dotted path `target` (e.g. 'layers.0.weight')."""
        return self._get_member(target, "_parameters", "parameter")

    def get_buffer(self, target: str):
        """The buffer at the dotted path `target` (e.g. 'bn.running_mean')."""
        return self._get_member(target, "_buffers", "buffer")

    def modules(self):
        """This module and every submodule, depth first, as torch's."""
        return (m for _, m in self.named_modules())

    def named_children(self):
        """(name, module) of each direct submodule, a shared one once (as torch)."""
        seen = set()
        return ((n, m) for n, m in self._modules.items() if m is not None and not (id(m) in seen or seen.add(id(m))))

    def children(self):
        """The direct submodules, as torch's."""
        return (m for _, m in self.named_children())

    def _named_members(self, registry, prefix, recurse):
        seen = set()
        modules = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mod_prefix, m in modules:
            for name, t in getattr(m, registry).items():
                if t is None or id(t) in seen:  # shared (tied) tensors are listed once
                    continue
                seen.add(id(t))
                yield (f"{mod_prefix}.{name}" if mod_prefix else name), t

    def named_parameters(self, prefix: str = "", recurse: bool = True):
        """(dotted name, parameter) of every parameter, a shared one once, as torch's.

        >>> import tensorlite as tl
        >>> [n for n, _ in tl.nn.Linear(2, 3).named_parameters()]
        ['weight', 'bias']
        """
        return self._named_members("_parameters", prefix, recurse)

    def parameters(self, recurse: bool = True):
        """Every parameter (of the submodules too if recurse), a shared one once, as torch's."""
        return (p for _, p in self.named_parameters(recurse=recurse))

    def named_buffers(self, prefix: str = "", recurse: bool = True):
        """(dotted name, buffer) of every buffer, as torch's."""
        return self._named_members("_buffers", prefix, recurse)

    def buffers(self, recurse: bool = True):
        """Every buffer (of the submodules too if recurse), as torch's."""
        return (b for _, b in self.named_buffers(recurse=recurse))

    def apply(self, fn):
        """fn(m) on every submodule (children first) and self; returns self, as torch's."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ---- modes and grads -------------------------------------------------------------
    def train(self, mode: bool = True):
        """Set training mode (mode=True) on this module and its submodules; returns self, as torch's.

        >>> import tensorlite as tl
        >>> tl.nn.Dropout().train(False).training
        False
        """
        for m in self.modules():
            object.__setattr__(m, "training", bool(mode))
        return self

    def eval(self):
        """train(False): evaluation mode (dropout off, batch norm uses its running stats), as torch's."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True):
        """Set requires_grad of every parameter; returns self, as torch's."""
        for p in self.parameters():
            p.requires_grad = requires_grad
        return self

    def zero_grad(self, set_to_none: bool = True):
        """Clear every parameter's .grad (None by default, else zeros), as torch's."""
        for p in self.parameters():
            if p.grad is not None:
                p.grad = None if set_to_none else zeros_like(p.grad)

    # ---- device and dtype ------------------------------------------------------------
    def to(self, *args, device=None, dtype=None, non_blocking=False):
        """Move/cast parameters and buffers in place (floating ones only change dtype), as
        torch's (non_blocking is accepted: the copies are ordered on the device either way)."""
        for a in args:
            if isinstance(a, dtypes.DType) or (isinstance(a, str) and a in dtypes.BY_NAME):
                dtype = a
            else:
                device = a
        dtype = None if dtype is None else dtypes.get(dtype)

        def convert(t):
            cast = dtype if dtype is not None and t.dtype.is_floating_point else None
            return t.detach().to(device=device, dtype=cast)
        with no_grad():
            for p in self.parameters():
                _swap_in(p, convert(p))
                if p.grad is not None:
                    p.grad = convert(p.grad)
            for m in self.modules():
                m._buffers.update({name: convert(b) for name, b in m._buffers.items() if b is not None})
        return self

    def cuda(self, ordinal: int = 0):
        """self.to('cuda:<ordinal>'), as torch's."""
        return self.to(f"cuda:{ordinal}")

    cpu = functools.partialmethod(to, "cpu")
    float = functools.partialmethod(to, dtype=dtypes.float32)
    double = functools.partialmethod(to, dtype=dtypes.float64)
    half = functools.partialmethod(to, dtype=dtypes.float16)
    bfloat16 = functools.partialmethod(to, dtype=dtypes.bfloat16)

    # ---- state -----------------------------------------------------------------------
    def _state_items(self):
        for prefix, m in self.named_modules():
            dot = prefix + "." if prefix else ""
            for name, p in m._parameters.items():
                if p is not None:
                    yield dot + name, p
            for name, b in m._buffers.items():
                if b is not None and name not in m._non_persistent:
                    yield dot + name, b

    def state_dict(self, prefix: str = "", keep_vars: bool = False):
        """name -> tensor (detached, sharing storage) for every parameter and persistent buffer."""
        return OrderedDict((prefix + k, v if keep_vars else v.detach()) for k, v in self._state_items())

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Copy values (Tensors or numpy arrays) into the parameters and buffers, keeping
        each one's device and dtype. With strict=True, missing or unexpected keys raise."""
        own = OrderedDict(self._state_items())
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise StateDictError(f"load_state_dict for {type(self).__name__}: missing keys {missing}, "
                           f"unexpected keys {unexpected}")
        for k in [key for key in own if key in state_dict]:
            target, value = own[k], state_dict[k]
            if not hasattr(value, "shape"):  # a list, a number: torch too wants a tensor-like value
                raise DTypeError(f"load_state_dict for {type(self).__name__}: {k!r} is a {type(value).__name__} in "
                                 "the checkpoint; expected a tensor (or a numpy array)")
            if tuple(value.shape) != target.shape:
                raise StateDictShapeError(f"load_state_dict for {type(self).__name__}: {k!r} has shape "
                                          f"{tuple(value.shape)} in the checkpoint but {tuple(target.shape)} in "
                                          "the model")
            with no_grad():
                new = tensor(value, dtype=None if assign else target.dtype, device=target._device)
            _swap_in(target, new)
        return IncompatibleKeys(missing, unexpected)

    # ---- printing --------------------------------------------------------------------
    def extra_repr(self) -> str:
        """The text inside this module's repr parentheses (its settings); subclasses override it."""
        return ""

    def __repr__(self):
        lines = [f"({name}): " + repr(m).replace("\n", "\n  ") for name, m in self._modules.items() if m is not None]
        head = f"{type(self).__name__}({self.extra_repr()}"
        return head + ")" if not lines else head + "\n  " + "\n  ".join(lines) + "\n)"
