"""nn.Module and the standard layers, shaped after torch.nn."""
from __future__ import annotations

import copy
import functools
import math
import warnings
from collections import OrderedDict, namedtuple

from .. import dtype as _dt
from ..autograd import _HOOK_KEYS, RemovableHandle, attach_many, no_grad
from ..errors import (ArgumentError, DTypeError, IndexOutOfRange, ShapeError, StateDictError, TensorliteError,
                      describe)
from ..tensor import Tensor, as_tuple, cat, empty, ones, stack, tensor, zeros, zeros_like
from . import functional as F
from .functional.attention import attention_probs
from . import init

IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class Parameter(Tensor):
    """A Tensor that a Module registers as trainable (requires_grad=True by default).
    It shares the storage of the tensor it wraps."""
    __slots__ = ()

    def __new__(cls, data=None, requires_grad: bool = True):
        src = empty(0) if data is None else data.detach()
        p = Tensor.__new__(cls)
        p._storage, p._layout, p.dtype, p._device = src._storage, src._layout, src.dtype, src._device
        p.requires_grad, p.grad, p._node, p._base = bool(requires_grad), None, None, None
        return p

    def __init__(self, data=None, requires_grad: bool = True):
        pass  # everything happens in __new__ (Tensor.__init__ forbids direct construction)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()


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
        key = next(_HOOK_KEYS)
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
            if isinstance(a, _dt.DType) or (isinstance(a, str) and a in _dt._BY_NAME):
                dtype = a
            else:
                device = a
        dtype = None if dtype is None else _dt.get(dtype)

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
    float = functools.partialmethod(to, dtype=_dt.float32)
    double = functools.partialmethod(to, dtype=_dt.float64)
    half = functools.partialmethod(to, dtype=_dt.float16)
    bfloat16 = functools.partialmethod(to, dtype=_dt.bfloat16)

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
            if tuple(value.shape) != target.shape:
                raise ShapeError(f"load_state_dict for {type(self).__name__}: {k!r} has shape "
                                 f"{tuple(value.shape)} in the checkpoint but {target.shape} in the model")
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


class Identity(Module):
    """Returns its input (arguments are accepted and ignored, as torch's)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        """x unchanged."""
        return x


class Linear(Module):
    """y = x W^T + b; W (out_features, in_features) ~ kaiming_uniform(a=sqrt(5)) and
    b ~ U(-1/sqrt(in), 1/sqrt(in)), as torch.nn.Linear."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(empty(out_features, in_features, device=device, dtype=dtype))
        self.bias = Parameter(empty(out_features, device=device, dtype=dtype)) if bias else None
        self.reset_parameters()

    def reset_parameters(self):  # also the convolutions' (fan_in: the weight's in-features times its kernel size)
        """Re-initialise the weight (kaiming_uniform, a=sqrt(5)) and bias as torch does."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1.0 / math.sqrt(init.calculate_fan_in_and_fan_out(self.weight)[0])
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        """F.linear(x, weight, bias): x W^T + b."""
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self):
        """in_features, out_features and bias, for the repr."""
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Embedding(Module):
    """Lookup table initialised N(0, 1) (the padding_idx row zeroed), as torch.nn.Embedding."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx=None, device=None, dtype=None,
                 _weight=None, _freeze=False):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = None if padding_idx is None else padding_idx % num_embeddings
        if _weight is not None:  # from_pretrained's (torch's keywords): the weight as given
            self.weight = Parameter(_weight.detach(), requires_grad=not _freeze)
            return
        self.weight = Parameter(empty(num_embeddings, embedding_dim, device=device, dtype=dtype))
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx] = 0.0

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, padding_idx=None):
        """An Embedding whose weight is `embeddings` (2-d: num_embeddings x embedding_dim), trained
        unless freeze, as torch.nn.Embedding.from_pretrained (the padding row is left as given).

        >>> import tensorlite as tl
        >>> e = tl.nn.Embedding.from_pretrained(tl.tensor([[1.0, 2.0], [3.0, 4.0]]))
        >>> e(tl.tensor([1])).tolist(), e.weight.requires_grad
        ([[3.0, 4.0]], False)
        """
        if not isinstance(embeddings, Tensor) or embeddings.ndim != 2:
            raise ShapeError(f"{describe('Embedding.from_pretrained', embeddings=embeddings)}: embeddings must "
                             "be a 2-dimensional tensor")
        n, d = embeddings.shape
        return cls(n, d, padding_idx=padding_idx, _weight=embeddings, _freeze=freeze)

    def forward(self, ids):
        """The rows of weight at ids (an integer tensor of any shape), as F.embedding."""
        return F.embedding(ids, self.weight, self.padding_idx)

    def extra_repr(self):
        """num_embeddings, embedding_dim and padding_idx, for the repr."""
        return f"{self.num_embeddings}, {self.embedding_dim}" + (
            f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")


class _Norm(Module):
    def __init__(self, normalized_shape, eps, elementwise_affine, bias, device, dtype):
        super().__init__()
        ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape, self.eps = ns, eps
        self.weight = Parameter(ones(ns, device=device, dtype=dtype)) if elementwise_affine else None
        self.bias = Parameter(zeros(ns, device=device, dtype=dtype)) if elementwise_affine and bias else None

    def extra_repr(self):
        """normalized_shape, eps and elementwise_affine, for the repr."""
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.weight is not None}"


class LayerNorm(_Norm):
    """Layer normalisation over the last dims normalized_shape, weight ones and bias zeros, as torch.nn.LayerNorm.

    >>> import tensorlite as tl
    >>> tl.nn.LayerNorm(8)(tl.randn(2, 8)).shape
    (2, 8)
    """
    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None):
        super().__init__(normalized_shape, eps, elementwise_affine, bias, device, dtype)

    def forward(self, x):
        """F.layer_norm of x with this module's weight, bias and eps."""
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class RMSNorm(_Norm):
    """x / sqrt(mean(x^2) + eps) * weight over the last dims normalized_shape, as torch.nn.RMSNorm.

    >>> import tensorlite as tl
    >>> tl.nn.RMSNorm(8)(tl.randn(2, 8)).shape
    (2, 8)
    """
    def __init__(self, normalized_shape, eps=None, elementwise_affine: bool = True, device=None, dtype=None):
        super().__init__(normalized_shape, eps, elementwise_affine, False, device, dtype)

    def forward(self, x):
        """F.rms_norm of x with this module's weight and eps."""
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)


class _BatchNorm(Module):
    """torch.nn.BatchNorm*d: weight ones, bias zeros, buffers running_mean (zeros),
    running_var (ones) and num_batches_tracked; momentum=None is a cumulative average."""
    dims: tuple = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum=0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.weight = Parameter(ones(num_features, device=device, dtype=dtype)) if affine else None
        self.bias = Parameter(zeros(num_features, device=device, dtype=dtype)) if affine else None
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, device=device, dtype=dtype))
            self.register_buffer("running_var", ones(num_features, device=device, dtype=dtype))
            self.register_buffer("num_batches_tracked", zeros((), dtype=_dt.int64, device=device))
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def forward(self, x):
        """Normalise with the batch's stats in training (updating the running ones), else the running ones."""
        if x.ndim not in self.dims:
            raise ShapeError(f"{type(self).__name__}: expected a {' or '.join(f'{d}-D' for d in self.dims)} input, "
                             f"got shape {tuple(x.shape)}")
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / int(self.num_batches_tracked)
        use_batch = self.training or self.running_mean is None
        track = not self.training or self.track_running_stats
        return F.batch_norm(x, self.running_mean if track else None, self.running_var if track else None,
                            self.weight, self.bias, use_batch, factor, self.eps)

    def extra_repr(self):
        """The settings, for the repr."""
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalisation of (N, C) or (N, C, L) per channel C, as torch.nn.BatchNorm1d.

    >>> import tensorlite as tl
    >>> tl.nn.BatchNorm1d(3)(tl.randn(4, 3, 5)).shape
    (4, 3, 5)
    """
    dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalisation of (N, C, H, W) per channel C, as torch.nn.BatchNorm2d.

    >>> import tensorlite as tl
    >>> tl.nn.BatchNorm2d(3)(tl.randn(2, 3, 4, 4)).shape
    (2, 3, 4, 4)
    """
    dims = (4,)


class Dropout(Module):
    """Zero each element with probability p in training (scaling the rest by 1 / (1 - p))."""
    fname = "dropout"

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ArgumentError(f"{type(self).__name__}: probability must be in [0, 1], got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, x):
        """The dropout of x in training mode; x itself in eval mode."""
        return getattr(F, self.fname)(x, self.p, self.training, self.inplace)

    def extra_repr(self):
        """p (and inplace), for the repr."""
        return f"p={self.p}" + (", inplace=True" if self.inplace else "")


class Dropout1d(Dropout):
    """Zero whole channels ((N, C, L) or (C, L)) with probability p in training."""
    fname = "dropout1d"


class Dropout2d(Dropout):
    """Zero whole channels ((N, C, H, W) or (C, H, W)) with probability p in training."""
    fname = "dropout2d"


class _ConvNd(Module):
    """Conv1d/Conv2d: weight (out, in/groups, *k) ~ kaiming_uniform(a=sqrt(5)), bias
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)), as torch."""
    nd, transposed = 2, False

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, device=None, dtype=None):
        super().__init__()
        if not isinstance(groups, int) or groups < 1 or in_channels % groups or out_channels % groups:
            raise ShapeError(f"{type(self).__name__}: channels ({in_channels}, {out_channels}) must be divisible "
                             f"by groups={groups}")
        k = as_tuple(kernel_size, self.nd)
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, k
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        shape = (in_channels, out_channels // groups) if self.transposed else (out_channels, in_channels // groups)
        self.weight = Parameter(empty(shape + k, device=device, dtype=dtype))
        self.bias = Parameter(empty(out_channels, device=device, dtype=dtype)) if bias else None
        self.reset_parameters()

    reset_parameters = Linear.reset_parameters

    def forward(self, x):
        """The convolution of x with this module's weight and bias."""
        conv = F.conv2d if self.nd == 2 else F.conv1d
        return conv(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self):
        """The channels, kernel size, stride, padding, groups and bias, for the repr."""
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, groups={self.groups}, bias={self.bias is not None}")


class Conv2d(_ConvNd):
    """2-D convolution layer over (N, C, H, W) (no padding_mode argument), as torch.nn.Conv2d.

    >>> import tensorlite as tl
    >>> tl.nn.Conv2d(3, 8, 3, padding=1)(tl.randn(1, 3, 5, 5)).shape
    (1, 8, 5, 5)
    """
    nd = 2


class Conv1d(_ConvNd):
    """1-D convolution layer over (N, C, L) (no padding_mode argument), as torch.nn.Conv1d.

    >>> import tensorlite as tl
    >>> tl.nn.Conv1d(3, 8, 3)(tl.randn(1, 3, 10)).shape
    (1, 8, 8)
    """
    nd = 1


class ConvTranspose2d(_ConvNd):
    """The gradient of Conv2d with respect to its input (a "deconvolution"); weight
    (in_channels, out_channels / groups, *kernel_size), as torch.nn.ConvTranspose2d.

    >>> import tensorlite as tl
    >>> up = tl.nn.ConvTranspose2d(4, 2, kernel_size=2, stride=2)
    >>> tuple(up.weight.shape), tuple(up(tl.zeros(1, 4, 3, 3)).shape)
    ((4, 2, 2, 2), (1, 2, 6, 6))
    """
    nd, transposed = 2, True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, padding_mode="zeros", device=None, dtype=None):
        if padding_mode != "zeros":
            raise ArgumentError(f"{type(self).__name__}: only padding_mode='zeros' is supported, got {padding_mode!r}")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, device, dtype)
        self.output_padding, self.padding_mode = output_padding, padding_mode

    def forward(self, x, output_size=None):
        """output_size (the spatial sizes, optionally with batch and channels) picks output_padding."""
        op = self.output_padding if output_size is None else self._output_padding(x, output_size)
        conv = F.conv_transpose2d if self.nd == 2 else F.conv_transpose1d
        return conv(x, self.weight, self.bias, self.stride, self.padding, op, self.groups, self.dilation)

    def _output_padding(self, x, output_size):
        nd, want = self.nd, tuple(output_size)[-self.nd:]
        s, p, d = (as_tuple(v, nd) for v in (self.stride, self.padding, self.dilation))
        low = [(x.shape[i - nd] - 1) * s[i] - 2 * p[i] + d[i] * (self.kernel_size[i] - 1) + 1 for i in range(nd)]
        if len(want) != nd or any(not lo <= w < lo + si for w, lo, si in zip(want, low, s)):
            raise ShapeError(f"{describe(type(self).__name__, input=x)}: requested output size {want}, but valid "
                             f"sizes range from {tuple(low)} to {tuple(lo + si - 1 for lo, si in zip(low, s))}")
        return tuple(w - lo for w, lo in zip(want, low))


class ConvTranspose1d(ConvTranspose2d):
    """1-D ConvTranspose2d: input (N, C, L) or (C, L), weight (in, out / groups, k)."""
    nd = 1


_REQUIRED = object()  # a _function_module argument without a default


def _function_module(name, fname, doc, **defaults):
    """A torch.nn class wrapping F.<fname>: __init__ takes torch's arguments (`defaults`, in
    order; _REQUIRED ones must be given), forward(*inputs) is F.<fname>(*inputs, **them);
    inplace=True writes the result into the input."""
    names = list(defaults)

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        if len(args) > len(names) or set(kwargs) - set(names) or set(kwargs) & set(names[:len(args)]):
            raise ArgumentError(f"{name}: takes ({', '.join(names)}), got {len(args)} positional "
                                f"and {sorted(kwargs)} keyword arguments")
        self.__dict__.update(defaults, **dict(zip(names, args)), **kwargs)
        if any(getattr(self, n) is _REQUIRED for n in names):
            raise ArgumentError(f"{name}: missing {[n for n in names if getattr(self, n) is _REQUIRED]}")

    def forward(self, *inputs):
        """The F function of this module's name applied to the inputs with its settings."""
        kw = {n: getattr(self, n) for n in names if n != "inplace"}
        if not getattr(self, "inplace", False):
            return getattr(F, fname)(*inputs, **kw)
        own = getattr(Tensor, fname + "_", None)  # relu_, silu_, ...
        return own(*inputs) if own is not None and not kw else getattr(F, fname)(*inputs, **kw, inplace=True)

    def extra_repr(self):
        """The settings, for the repr."""
        return ", ".join(f"{n}={getattr(self, n)}" for n in names if n != "inplace" or self.inplace)
    return type(name, (Module,), {"__init__": __init__, "forward": forward, "extra_repr": extra_repr,
                                  "__doc__": doc, "__module__": __name__})


_fm = _function_module
ReLU = _fm("ReLU", "relu", "max(x, 0)", inplace=False)
SiLU = _fm("SiLU", "silu", "x * sigmoid(x)", inplace=False)
Sigmoid = _fm("Sigmoid", "sigmoid", "1 / (1 + exp(-x))")
Tanh = _fm("Tanh", "tanh", "tanh(x)")
ReLU6 = _fm("ReLU6", "relu6", "min(max(x, 0), 6)", inplace=False)
LeakyReLU = _fm("LeakyReLU", "leaky_relu", "x if x >= 0 else negative_slope * x", negative_slope=0.01, inplace=False)
ELU = _fm("ELU", "elu", "x if x > 0 else alpha * (exp(x) - 1)", alpha=1.0, inplace=False)
CELU = _fm("CELU", "celu", "max(0, x) + min(0, alpha * (exp(x / alpha) - 1))", alpha=1.0, inplace=False)
SELU = _fm("SELU", "selu", "scale * elu(x, alpha) with torch's fixed constants", inplace=False)
RReLU = _fm("RReLU", "rrelu", "leaky_relu with a random slope in [lower, upper] (their mean in eval)",
            lower=1.0 / 8, upper=1.0 / 3, inplace=False)
RReLU.forward = lambda self, x: F.rrelu(x, self.lower, self.upper, self.training, self.inplace)
Mish = _fm("Mish", "mish", "x * tanh(softplus(x))", inplace=False)
Softplus = _fm("Softplus", "softplus", "log(1 + exp(beta * x)) / beta (linear above threshold)", beta=1.0,
               threshold=20.0)
Hardtanh = _fm("Hardtanh", "hardtanh", "clamp(x, min_val, max_val)", min_val=-1.0, max_val=1.0, inplace=False)
Hardswish = _fm("Hardswish", "hardswish", "x * relu6(x + 3) / 6", inplace=False)
Hardsigmoid = _fm("Hardsigmoid", "hardsigmoid", "relu6(x + 3) / 6", inplace=False)
LogSigmoid = _fm("LogSigmoid", "logsigmoid", "log(sigmoid(x))")
Softsign = _fm("Softsign", "softsign", "x / (1 + |x|)")
Tanhshrink = _fm("Tanhshrink", "tanhshrink", "x - tanh(x)")
Softshrink = _fm("Softshrink", "softshrink", "x - lambd above lambd, x + lambd below -lambd, else 0", lambd=0.5)
Hardshrink = _fm("Hardshrink", "hardshrink", "x where |x| > lambd, else 0", lambd=0.5)
Threshold = _fm("Threshold", "threshold", "x where x > threshold, else value", threshold=_REQUIRED, value=_REQUIRED,
                inplace=False)
GLU = _fm("GLU", "glu", "a * sigmoid(b) of the two halves of x along dim", dim=-1)
LogSoftmax = _fm("LogSoftmax", "log_softmax", "log(softmax(x, dim))", dim=-1)
Softmin = _fm("Softmin", "softmin", "softmax(-x, dim)", dim=-1)
PixelShuffle = _fm("PixelShuffle", "pixel_shuffle", "(*, C r^2, H, W) -> (*, C, H r, W r)", upscale_factor=_REQUIRED)
PixelUnshuffle = _fm("PixelUnshuffle", "pixel_unshuffle", "(*, C, H r, W r) -> (*, C r^2, H, W)",
                     downscale_factor=_REQUIRED)
CosineSimilarity = _fm("CosineSimilarity", "cosine_similarity", "x1 . x2 / (max(|x1|, eps) max(|x2|, eps)) along dim",
                       dim=1, eps=1e-8)
PairwiseDistance = _fm("PairwiseDistance", "pairwise_distance", "||x1 - x2 + eps||_p over the last dim", p=2.0,
                       eps=1e-6, keepdim=False)
AdaptiveAvgPool1d = _fm("AdaptiveAvgPool1d", "adaptive_avg_pool1d", "Average pooling of (N, C, L) to a fixed length",
                        output_size=_REQUIRED)
AdaptiveMaxPool1d = _fm("AdaptiveMaxPool1d", "adaptive_max_pool1d", "Max pooling of (N, C, L) to a fixed length",
                        output_size=_REQUIRED, return_indices=False)
AdaptiveMaxPool2d = _fm("AdaptiveMaxPool2d", "adaptive_max_pool2d", "Max pooling of (N, C, H, W) to a fixed size",
                        output_size=_REQUIRED, return_indices=False)
AvgPool1d = _fm("AvgPool1d", "avg_pool1d", "Average pooling over the last dim of (N, C, L)", kernel_size=_REQUIRED,
                stride=None, padding=0, ceil_mode=False, count_include_pad=True)
MaxPool1d = _fm("MaxPool1d", "max_pool1d", "Max pooling over the last dim of (N, C, L)", kernel_size=_REQUIRED,
                stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False)
Upsample = _fm("Upsample", "interpolate", "F.interpolate as a module (mode 'nearest', 'bilinear', ...)", size=None,
               scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None)


class GELU(Module):
    """gelu(x) = x * Phi(x), exact or approximate='tanh', as torch.nn.GELU.

    >>> import tensorlite as tl
    >>> tl.nn.GELU()(tl.tensor([0.0])).tolist()
    [0.0]
    """
    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        """F.gelu(x, approximate)."""
        return F.gelu(x, self.approximate)

    def extra_repr(self):
        """approximate, for the repr."""
        return f"approximate={self.approximate!r}"


class Softmax(Module):
    """softmax along dim (default -1; torch's default None is deprecated), as torch.nn.Softmax.

    >>> import tensorlite as tl
    >>> tl.nn.Softmax(-1)(tl.zeros(1, 4)).tolist()
    [[0.25, 0.25, 0.25, 0.25]]
    """
    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        """F.softmax(x, dim)."""
        return F.softmax(x, self.dim)


class Flatten(Module):
    """Dims start_dim (1) to end_dim (-1) merged into one, as torch.nn.Flatten.

    >>> import tensorlite as tl
    >>> tl.nn.Flatten()(tl.zeros(2, 3, 4)).shape
    (2, 12)
    """
    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        """x.flatten(start_dim, end_dim)."""
        return x.flatten(self.start_dim, self.end_dim)


class MaxPool2d(Module):
    """2-D max pooling (no ceil_mode, return_indices), as torch.nn.MaxPool2d.

    >>> import tensorlite as tl
    >>> tl.nn.MaxPool2d(2)(tl.zeros(1, 1, 4, 4)).shape
    (1, 1, 2, 2)
    """
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1):
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.dilation = kernel_size, stride, padding, dilation

    def forward(self, x):
        """F.max_pool2d of x with this module's settings."""
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation)


class AvgPool2d(Module):
    """2-D average pooling (no ceil_mode, divisor_override), as torch.nn.AvgPool2d.

    >>> import tensorlite as tl
    >>> tl.nn.AvgPool2d(2)(tl.ones(1, 1, 4, 4)).tolist()
    [[[[1.0, 1.0], [1.0, 1.0]]]]
    """
    def __init__(self, kernel_size, stride=None, padding=0, count_include_pad: bool = True):
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.count_include_pad = kernel_size, stride, padding, \
            count_include_pad

    def forward(self, x):
        """F.avg_pool2d of x with this module's settings."""
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, count_include_pad=self.count_include_pad)


class ModuleList(Module):
    """A list of submodules named '0', '1', ... (so state_dict keys read 'layers.0.weight')."""
    _reg = "_modules"  # the registry the list reads (ParameterList: _parameters)

    def __init__(self, modules=None):
        super().__init__()
        self.extend(modules or [])

    def _index(self, i):
        n = len(self)
        if not -n <= i < n:
            raise IndexOutOfRange(f"{type(self).__name__} index {i} out of range for length {n}")
        return str(i % n)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return type(self)(list(self)[i])
        return self.__dict__[self._reg][self._index(i)]

    def __setitem__(self, i, module):
        self._put(self._index(i), module)

    def __len__(self):
        return len(self.__dict__[self._reg])

    def __iter__(self):
        return iter(self.__dict__[self._reg].values())

    def append(self, module):
        """Add a module at the end; returns self, as torch's."""
        self._put(str(len(self)), module)
        return self

    _put = Module.add_module

    def extend(self, modules):
        """Append each module of an iterable; returns self, as torch's."""
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module):
        """Insert a module before index (the later ones are renamed), as torch's."""
        items = list(self)
        items.insert(index, module)
        self.__dict__[self._reg].clear()
        self.extend(items)


class Sequential(ModuleList):
    """Submodules applied in order; also accepts an OrderedDict of named modules."""

    def __init__(self, *modules):
        Module.__init__(self)
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            self.extend(modules)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return Sequential(*list(self._modules.values())[i])
        return list(self._modules.values())[int(self._index(i))]

    def forward(self, x):
        """x through each submodule in order."""
        for m in self:
            x = m(x)
        return x


class ModuleDict(Module):
    """An ordered dict of submodules (keys are their state-dict names)."""
    _reg = "_modules"  # the registry the dict reads (ParameterDict: _parameters)

    def __init__(self, modules=None):
        super().__init__()
        self.update(modules or {})

    def __getitem__(self, name):
        return self.__dict__[self._reg][name]

    def __setitem__(self, name, module):
        self.add_module(name, module)

    def __delitem__(self, name):
        del self.__dict__[self._reg][name]

    def __len__(self):
        return len(self.__dict__[self._reg])

    def __iter__(self):
        return iter(self.__dict__[self._reg])

    def __contains__(self, name):
        return name in self.__dict__[self._reg]

    def keys(self):
        """The names, as a dict's."""
        return self.__dict__[self._reg].keys()

    def values(self):
        """The modules, as a dict's."""
        return self.__dict__[self._reg].values()

    def items(self):
        """(name, module) pairs, as a dict's."""
        return self.__dict__[self._reg].items()

    def update(self, items):
        """Add or replace modules from a mapping or (name, module) pairs, as torch's."""
        for k, v in (items.items() if hasattr(items, "items") else items):
            self[k] = v

    def pop(self, key):
        """Remove the module of key and return it, as torch's."""
        return self.__dict__[self._reg].pop(key)


class ParameterList(ModuleList):
    """A list of Parameters named '0', '1', ... (plain tensors are wrapped as Parameters).

    >>> import tensorlite as tl
    >>> ps = tl.nn.ParameterList([tl.nn.Parameter(tl.zeros(2)), tl.ones(3)])
    >>> list(ps.state_dict()), len(ps), ps[1].requires_grad
    (['0', '1'], 2, True)
    """
    _reg = "_parameters"

    def __init__(self, values=None):
        super().__init__(values)

    def _put(self, name, value):
        self.register_parameter(name, value if isinstance(value, Parameter) or value is None else Parameter(value))


class ParameterDict(ModuleDict):
    """A dict of Parameters, keyed by name (plain tensors are wrapped as Parameters).

    >>> import tensorlite as tl
    >>> pd = tl.nn.ParameterDict({"scale": tl.ones(2)})
    >>> pd["shift"] = tl.zeros(2)
    >>> list(pd.keys()), "scale" in pd
    (['scale', 'shift'], True)
    """
    _reg = "_parameters"
    __setitem__ = ParameterList._put

    def __init__(self, parameters=None):
        super().__init__(parameters)


# ---- losses ------------------------------------------------------------------------------

class _Loss(Module):
    """forward(input, target) = F.<fname>(input, target, reduction=..., **{a: self.a for a in args})."""
    fname, args = "", ()

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        if size_average is not None or reduce is not None:  # torch's deprecated pair, as torch maps it
            reduction = "none" if reduce is False else "sum" if size_average is False else "mean"
            warnings.warn(f"size_average and reduce are deprecated: use reduction={reduction!r}", UserWarning, 3)
        self.reduction = reduction

    def forward(self, input, target):
        """The loss of input against target (F.<loss> with this module's reduction and settings)."""
        kw = {a: getattr(self, a) for a in self.args}
        return getattr(F, self.fname)(input, target, reduction=self.reduction, **kw)

    def extra_repr(self):
        """reduction and the loss's settings, for the repr."""
        return ", ".join(f"{a}={getattr(self, a)!r}" for a in ("reduction",) + self.args if a not in self._buffers)


class _WeightedLoss(_Loss):
    args = ("weight",)

    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)  # in state_dict when given, as torch's


class L1Loss(_Loss):
    """Mean absolute error |input - target| (reduced)."""
    fname = "l1_loss"


class MSELoss(_Loss):
    """Mean squared error (input - target)^2 (reduced).

    >>> import tensorlite as tl
    >>> tl.nn.MSELoss()(tl.tensor([1.0, 2.0]), tl.tensor([1.0, 4.0])).item()
    2.0
    """
    fname = "mse_loss"


class SmoothL1Loss(_Loss):
    """Quadratic below beta, linear above: 0.5 d^2 / beta if |d| < beta else |d| - 0.5 beta."""
    fname, args = "smooth_l1_loss", ("beta",)

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = beta


class HuberLoss(_Loss):
    """0.5 d^2 if |d| < delta else delta (|d| - 0.5 delta)."""
    fname, args = "huber_loss", ("delta",)

    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(reduction=reduction)
        self.delta = delta


class KLDivLoss(_Loss):
    """target * (log target - input) for log-probabilities `input` (log_target: target is log too)."""
    fname, args = "kl_div", ("log_target",)

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False):
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target


class BCELoss(_WeightedLoss):
    """Binary cross entropy of probabilities `input` against targets in [0, 1]."""
    fname = "binary_cross_entropy"


class BCEWithLogitsLoss(_Loss):
    """sigmoid + binary cross entropy in one numerically stable op; pos_weight weighs the positives."""
    fname, args = "binary_cross_entropy_with_logits", ("weight", "pos_weight")

    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean", pos_weight=None):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)


class NLLLoss(_WeightedLoss):
    """Negative log-likelihood of log-probabilities (N, C, ...) at class ids (N, ...)."""
    fname, args = "nll_loss", ("weight", "ignore_index")

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean"):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index


class CrossEntropyLoss(_WeightedLoss):
    """log_softmax + NLL of logits (N, C, ...) at class ids (N, ...) or class probabilities.

    >>> import tensorlite as tl
    >>> loss = tl.nn.CrossEntropyLoss(ignore_index=0)
    >>> round(loss(tl.tensor([[0.0, 0.0], [5.0, 5.0]]), tl.tensor([0, 1])).item(), 4)
    0.6931
    """
    fname, args = "cross_entropy", ("weight", "ignore_index", "label_smoothing")

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean", label_smoothing: float = 0.0):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing


# ---- more layers ---------------------------------------------------------------------------

class GroupNorm(Module):
    """Normalise each sample over groups of channels (input (N, C, *)); per-channel affine.

    >>> import tensorlite as tl
    >>> gn = tl.nn.GroupNorm(2, 4)
    >>> [round(v, 3) for v in gn(tl.arange(8.0).reshape(1, 4, 2))[0, :2].flatten().tolist()]
    [-1.342, -0.447, 0.447, 1.342]
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device=None, dtype=None):
        super().__init__()
        if num_groups < 1 or num_channels % num_groups:
            raise ShapeError(f"GroupNorm: num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        self.weight = Parameter(ones(num_channels, device=device, dtype=dtype)) if affine else None
        self.bias = Parameter(zeros(num_channels, device=device, dtype=dtype)) if affine else None

    def forward(self, x):
        """F.group_norm of x with this module's groups, weight, bias and eps."""
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        """The settings, for the repr."""
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class _InstanceNorm(_BatchNorm):
    """Normalise each channel of each sample over its positions; running stats (off by
    default) as torch's: updated in training, used in eval."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum=0.1, affine: bool = False,
                 track_running_stats: bool = False, device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)

    def forward(self, x):
        """F.instance_norm of x (a batch or one sample) with this module's settings."""
        if x.ndim not in self.dims:
            raise ShapeError(f"{type(self).__name__}: expected a {' or '.join(f'{d}-D' for d in self.dims)} input, "
                             f"got shape {tuple(x.shape)}")
        one = x.ndim == self.dims[0]  # unbatched
        y = F.instance_norm(x.unsqueeze(0) if one else x, self.running_mean, self.running_var, self.weight, self.bias,
                            self.training or not self.track_running_stats, self.momentum or 0.0, self.eps)
        return y.squeeze(0) if one else y


class InstanceNorm1d(_InstanceNorm):
    """Instance normalisation of (N, C, L) or (C, L), as torch.nn.InstanceNorm1d.

    >>> import tensorlite as tl
    >>> tl.nn.InstanceNorm1d(3)(tl.randn(2, 3, 5)).shape
    (2, 3, 5)
    """
    dims = (2, 3)


class InstanceNorm2d(_InstanceNorm):
    """Instance normalisation of (N, C, H, W) or (C, H, W), as torch.nn.InstanceNorm2d.

    >>> import tensorlite as tl
    >>> tl.nn.InstanceNorm2d(3)(tl.randn(2, 3, 4, 4)).shape
    (2, 3, 4, 4)
    """
    dims = (3, 4)


AdaptiveAvgPool2d = _fm("AdaptiveAvgPool2d", "adaptive_avg_pool2d", """Average pooling to a fixed output size.

    >>> import tensorlite as tl
    >>> tl.nn.AdaptiveAvgPool2d(1)(tl.arange(4.0).reshape(1, 1, 2, 2)).flatten().tolist()
    [1.5]
    """, output_size=_REQUIRED)


class _PadNd(Module):
    """F.pad with `padding` (an int: every side) in `mode`."""
    nd, mode = 2, "constant"

    def __init__(self, padding, value: float = 0.0):
        super().__init__()
        self.padding, self.value = as_tuple(padding, 2 * self.nd), value

    def forward(self, x):
        """F.pad(x, padding, mode, value)."""
        return F.pad(x, self.padding, self.mode, self.value if self.mode == "constant" else None)

    def extra_repr(self):
        """padding (and value), for the repr."""
        return f"{self.padding}" + (f", value={self.value}" if self.mode == "constant" else "")


def _pad(name, nd, mode):
    init = (lambda self, padding: _PadNd.__init__(self, padding)) if name != "Constant" else _PadNd.__init__
    return type(f"{name}Pad{nd}d", (_PadNd,), {"nd": nd, "mode": mode, "__init__": init, "__module__": __name__,
                                               "__doc__": f"Pad the last {nd} dims ({mode}); padding (left, right"
                                               f"{', top, bottom' if nd == 2 else ''}) or an int."})


ZeroPad1d, ZeroPad2d, ConstantPad1d, ConstantPad2d = (_pad(n, d, "constant") for n in ("Zero", "Constant")
                                                      for d in (1, 2))
ReflectionPad1d, ReflectionPad2d, ReplicationPad1d, ReplicationPad2d = (_pad(n, d, m) for n, m in (
    ("Reflection", "reflect"), ("Replication", "replicate")) for d in (1, 2))


class Unflatten(Module):
    """Split dim `dim` into `unflattened_size`."""

    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, x):
        """x.unflatten(dim, unflattened_size)."""
        return x.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self):
        """dim and unflattened_size, for the repr."""
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class PReLU(Module):
    """max(0, x) + weight * min(0, x) with a learned slope (one, or one per channel of dim 1)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters = num_parameters
        self.weight = Parameter(ones(num_parameters, device=device, dtype=dtype) * init)

    def forward(self, x):
        """F.prelu(x, weight)."""
        return F.prelu(x, self.weight)

    def extra_repr(self):
        """num_parameters, for the repr."""
        return f"num_parameters={self.num_parameters}"


# ---- attention and transformers --------------------------------------------------------------

def _torch_mask(op, name, mask, want, shape, q):
    """A torch MHA mask of shape `want` (bool: True = masked out; float: added) in sdpa's
    convention (bool: True = attend), reshaped to `shape` (broadcastable to (N, H, L, S))."""
    if mask is None:
        return None
    if tuple(mask.shape) != want:
        raise ShapeError(f"{describe(op, **{name: mask})}: expected shape {want}")
    mask = mask.reshape(shape)
    if mask.dtype is _dt.bool_:
        return ~mask
    if not mask.dtype.is_floating_point:
        raise DTypeError(f"{describe(op, **{name: mask})}: masks must be bool or floating point")
    return mask._cast(q.dtype)


def _merge_masks(a, b):
    if a is None or b is None:
        return a if b is None else b
    if a.dtype is _dt.bool_ and b.dtype is _dt.bool_:
        return a & b
    bias = [m if m.dtype is not _dt.bool_ else zeros(m.shape, dtype=(b if m is a else a).dtype,
                                                        device=m._device).masked_fill(~m, float("-inf"))
            for m in (a, b)]
    return bias[0] + bias[1]


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention: out_proj(attention(q W_q, k W_k, v W_v)) over num_heads heads.

    Inputs (L, N, E) (or (N, L, E) with batch_first, or unbatched (L, E)); returns
    (output, the attention weights averaged over heads or per head, or None without need_weights).
    attn_mask (L, S) or (N * num_heads, L, S) and key_padding_mask (N, S): bool True = not
    attended, or float added to the scores. A query whose keys are all masked gives zeros
    (PyTorch gives NaN). is_causal without attn_mask applies the causal mask.

    >>> import tensorlite as tl
    >>> mha = tl.nn.MultiheadAttention(8, 2, batch_first=True)
    >>> out, w = mha(tl.ones(3, 5, 8), tl.ones(3, 4, 8), tl.ones(3, 4, 8))
    >>> tuple(out.shape), tuple(w.shape), list(mha.state_dict())
    ((3, 5, 8), (3, 5, 4), ['in_proj_weight', 'in_proj_bias', 'out_proj.weight', 'out_proj.bias'])
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim=None, vdim=None,
                 batch_first: bool = False, device=None, dtype=None):
        super().__init__()
        if num_heads < 1 or embed_dim % num_heads:
            raise ShapeError(f"MultiheadAttention: embed_dim ({embed_dim}) must be divisible by num_heads "
                             f"({num_heads})")
        if add_bias_kv or add_zero_attn:
            raise ArgumentError("MultiheadAttention: add_bias_kv and add_zero_attn are not supported")
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.kdim, self.vdim, self.head_dim = kdim or embed_dim, vdim or embed_dim, embed_dim // num_heads
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        kw = dict(device=device, dtype=dtype)
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim, **kw))
            self.q_proj_weight = self.k_proj_weight = self.v_proj_weight = None
        else:
            self.q_proj_weight = Parameter(empty(embed_dim, embed_dim, **kw))
            self.k_proj_weight = Parameter(empty(embed_dim, self.kdim, **kw))
            self.v_proj_weight = Parameter(empty(embed_dim, self.vdim, **kw))
            self.register_parameter("in_proj_weight", None)
        self.in_proj_bias = Parameter(zeros(3 * embed_dim, **kw)) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, **kw)
        for w in (self.in_proj_weight, self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
            if w is not None:
                init.xavier_uniform_(w)
        if bias:
            init.zeros_(self.out_proj.bias)

    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True, attn_mask=None,
                average_attn_weights: bool = True, is_causal: bool = False):
        """(attention output, weights averaged over heads or None), with torch's arguments and masks."""
        op, E, H = "MultiheadAttention", self.embed_dim, self.num_heads
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim or query.shape[-1] != E \
                or key.shape[-1] != self.kdim or value.shape[-1] != self.vdim or key.shape[:-1] != value.shape[:-1]:
            raise ShapeError(f"{describe(op, query=query, key=key, value=value)}: expected (L, N, E) inputs (N first "
                             f"with batch_first, or unbatched (L, E)) with E = {E}, {self.kdim}, {self.vdim} "
                             "and key/value of one length")
        batched = query.ndim == 3
        q, k, v = ((t.transpose(0, 1) if not self.batch_first else t) if batched else t.unsqueeze(0)
                   for t in (query, key, value))
        N, L, S = q.shape[0], q.shape[1], k.shape[1]
        if q.shape[0] != k.shape[0]:
            raise ShapeError(f"{describe(op, query=query, key=key)}: query and key batch sizes differ")
        w = self.in_proj_weight.chunk(3) if self.in_proj_weight is not None else \
            (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        b = (None,) * 3 if self.in_proj_bias is None else self.in_proj_bias.chunk(3)
        q, k, v = (F.linear(t, wi, bi).unflatten(-1, (H, self.head_dim)).transpose(1, 2)
                   for t, wi, bi in zip((q, k, v), w, b))
        if is_causal and attn_mask is None:
            attn_mask = ~F.causal_mask(L, S, device=q._device)
        two_d = attn_mask is None or attn_mask.ndim == 2
        mask = _merge_masks(_torch_mask(op, "attn_mask", attn_mask, (L, S) if two_d else (N * H, L, S),
                                        (L, S) if two_d else (N, H, L, S), q),
                            _torch_mask(op, "key_padding_mask", key_padding_mask, (N, S) if batched else (S,),
                                        (N, 1, 1, S), q))
        p = self.dropout if self.training else 0.0
        if need_weights:
            weights = F.dropout(attention_probs(q, k, mask, 1.0 / math.sqrt(self.head_dim), False), p)
            out = weights @ v
            weights = weights.mean(1) if average_attn_weights else weights
        else:
            out, weights = F.scaled_dot_product_attention(q, k, v, mask, p), None
        out = self.out_proj(out.transpose(1, 2).reshape(N, L, E))
        out = (out if self.batch_first else out.transpose(0, 1)) if batched else out.squeeze(0)
        return out, (weights if batched or weights is None else weights.squeeze(0))

    def extra_repr(self):
        """embed_dim, num_heads and batch_first, for the repr."""
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, batch_first={self.batch_first}"


def _activation_fn(activation):
    if activation in ("relu", "gelu"):
        return getattr(F, activation)
    if isinstance(activation, str) or not callable(activation):
        raise ArgumentError(f"activation should be 'relu', 'gelu' or a callable, not {activation!r}")
    return activation


class TransformerEncoderLayer(Module):
    """Self-attention then a feed-forward block, each with a residual and a LayerNorm (after
    them, or before with norm_first), as torch.nn.TransformerEncoderLayer (same state-dict names).

    >>> import tensorlite as tl
    >>> layer = tl.nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, batch_first=True)
    >>> tuple(layer(tl.ones(2, 5, 8)).shape), sorted(layer.state_dict())[:3]
    ((2, 5, 8), ['linear1.bias', 'linear1.weight', 'linear2.bias'])
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation="relu", layer_norm_eps: float = 1e-5, batch_first: bool = False, norm_first: bool = False,
                 bias: bool = True, device=None, dtype=None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.self_attn = MultiheadAttention(d_model, nhead, dropout, bias, batch_first=batch_first, **kw)
        if self._decoder:
            self.multihead_attn = MultiheadAttention(d_model, nhead, dropout, bias, batch_first=batch_first, **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias, **kw)
        self.norm_first = norm_first
        for i in range(1, 4 if self._decoder else 3):
            setattr(self, f"norm{i}", LayerNorm(d_model, layer_norm_eps, bias=bias, **kw))
        for i in range(1, 4 if self._decoder else 3):
            setattr(self, f"dropout{i}", Dropout(dropout))
        self.activation = _activation_fn(activation)

    _decoder = False

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False,
                           is_causal=bool(is_causal))[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        """Self-attention then feed-forward, each with a residual and a norm (first if norm_first)."""
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x))


class TransformerDecoderLayer(TransformerEncoderLayer):
    """Self-attention, attention over `memory`, then a feed-forward block, each with a residual
    and a LayerNorm, as torch.nn.TransformerDecoderLayer (same state-dict names)."""
    _decoder = True

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal):
        x = self.multihead_attn(x, mem, mem, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                                need_weights=False, is_causal=bool(is_causal))[0]
        return self.dropout2(x)

    def _ff_block(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool = False, memory_is_causal: bool = False):
        """Self-attention, attention to memory, then feed-forward, each with a residual and a norm."""
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))
        return self.norm3(x + self._ff_block(x))


class TransformerEncoder(Module):
    """num_layers deep copies of encoder_layer (layers.0, layers.1, ...), then `norm` if given.

    >>> import tensorlite as tl
    >>> layer = tl.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0)
    >>> enc = tl.nn.TransformerEncoder(layer, num_layers=2, norm=tl.nn.LayerNorm(8))
    >>> tuple(enc(tl.ones(5, 3, 8)).shape), len([k for k in enc.state_dict() if k.startswith("layers.1.")])
    ((5, 3, 8), 12)
    """

    def __init__(self, encoder_layer, num_layers: int, norm=None, enable_nested_tensor: bool = True,
                 mask_check: bool = True):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers, self.norm = num_layers, norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        """src through each layer (then the final norm, if any), as torch's."""
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return x if self.norm is None else self.norm(x)


class TransformerDecoder(TransformerEncoder):
    """num_layers deep copies of decoder_layer, then `norm` if given."""

    def __init__(self, decoder_layer, num_layers: int, norm=None):
        super().__init__(decoder_layer, num_layers, norm)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal: bool = False):
        """tgt through each layer with memory (then the final norm, if any), as torch's."""
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                      bool(tgt_is_causal), memory_is_causal)
        return x if self.norm is None else self.norm(x)


class Transformer(Module):
    """Encoder-decoder transformer (encoder.*, decoder.* as torch.nn.Transformer's state dict);
    matrices xavier-initialised.

    >>> import tensorlite as tl
    >>> model = tl.nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=16)
    >>> mask = tl.nn.Transformer.generate_square_subsequent_mask(3)
    >>> tuple(model(tl.ones(5, 2, 8), tl.ones(3, 2, 8), tgt_mask=mask).shape), mask[0].tolist()
    ((3, 2, 8), [0.0, -inf, -inf])
    """

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6, num_decoder_layers: int = 6,
                 dim_feedforward: int = 2048, dropout: float = 0.1, activation="relu", custom_encoder=None,
                 custom_decoder=None, layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None):
        super().__init__()
        args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first, norm_first, bias,
                device, dtype)

        def norm():
            return LayerNorm(d_model, layer_norm_eps, bias=bias, device=device, dtype=dtype)
        self.encoder = custom_encoder or TransformerEncoder(TransformerEncoderLayer(*args), num_encoder_layers, norm())
        self.decoder = custom_decoder or TransformerDecoder(TransformerDecoderLayer(*args), num_decoder_layers, norm())
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal: bool = False):
        """The decoder's output for tgt given the encoder's memory of src, as torch's."""
        batch = 0 if self.batch_first else 1
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model or (
                src.ndim == 3 and tgt.ndim == 3 and src.shape[batch] != tgt.shape[batch]):
            raise ShapeError(f"{describe('Transformer', src=src, tgt=tgt)}: src and tgt need d_model = {self.d_model} "
                             "features and one batch size")
        memory = self.encoder(src, src_mask, src_key_padding_mask, src_is_causal)
        return self.decoder(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                            tgt_is_causal, memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None):
        """(sz, sz) float mask: 0 where a query may attend, -inf above the diagonal."""
        return zeros(sz, sz, device=device, dtype=dtype).masked_fill(~F.causal_mask(sz, sz, device=device),
                                                                      float("-inf"))


# ---- recurrent layers ----------------------------------------------------------------------------

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def _rnn_step(mode, gi, h, c, w_hh, b_hh, w_hr=None):
    """One time step from gi = x W_ih^T + b_ih: (h', c') (c' None outside LSTM), torch's gate order."""
    gh = F.linear(h, w_hh, b_hh)
    if mode == "LSTM":
        i, f, g, o = (gi + gh).chunk(4, -1)
        c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        h = o.sigmoid() * c.tanh()
        return (h if w_hr is None else F.linear(h, w_hr)), c
    if mode == "GRU":
        (ir, iz, i_n), (hr, hz, h_n) = gi.chunk(3, -1), gh.chunk(3, -1)
        r, z = (ir + hr).sigmoid(), (iz + hz).sigmoid()
        n = (i_n + r * h_n).tanh()
        return n + z * (h - n), None  # (1 - z) n + z h
    return ((gi + gh).tanh() if mode == "RNN_TANH" else (gi + gh).relu()), None


def _reset_uniform(module):
    """Every parameter of the RNN from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as torch's reset_parameters."""
    bound = 1.0 / math.sqrt(module.hidden_size)
    for p in module.parameters():
        init.uniform_(p, -bound, bound)


class RNNBase(Module):
    """Multi-layer (bi)directional RNN / LSTM / GRU with torch's parameter names
    (weight_ih_l{k}[_reverse], weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k}, weight_hr_l{k})."""

    def __init__(self, mode, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None):
        super().__init__()
        name = type(self).__name__
        if not 0.0 <= dropout <= 1.0:
            raise ArgumentError(f"{name}: dropout must be in [0, 1], got {dropout}")
        if proj_size < 0 or (proj_size and (mode != "LSTM" or proj_size >= hidden_size)):
            raise ArgumentError(f"{name}: proj_size ({proj_size}) must be 0, or in (0, hidden_size) for LSTM")
        if hidden_size < 1 or num_layers < 1:
            raise ArgumentError(f"{name}: hidden_size and num_layers must be positive")
        if dropout and num_layers == 1:
            warnings.warn(f"{name}: dropout={dropout} and num_layers=1: dropout applies between layers only",
                          UserWarning, stacklevel=3)
        self.mode, self.input_size, self.hidden_size, self.num_layers = mode, input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size = bidirectional, proj_size
        gates, out = _GATES[mode] * hidden_size, proj_size or hidden_size
        kw = dict(device=device, dtype=dtype)
        for layer in range(num_layers):
            for sfx in ("", "_reverse")[:2 if bidirectional else 1]:
                sfx = f"_l{layer}{sfx}"
                setattr(self, "weight_ih" + sfx, Parameter(empty(gates, input_size if layer == 0 else
                                                                 out * (1 + bidirectional), **kw)))
                setattr(self, "weight_hh" + sfx, Parameter(empty(gates, out, **kw)))
                if bias:
                    setattr(self, "bias_ih" + sfx, Parameter(empty(gates, **kw)))
                    setattr(self, "bias_hh" + sfx, Parameter(empty(gates, **kw)))
                if proj_size:
                    setattr(self, "weight_hr" + sfx, Parameter(empty(proj_size, hidden_size, **kw)))
        _reset_uniform(self)

    reset_parameters = _reset_uniform

    def forward(self, input, hx=None):
        """input (L, N, H_in) ((N, L, H_in) with batch_first, or unbatched (L, H_in)); hx: h_0
        (D * num_layers, N, H_out), or (h_0, c_0) for LSTM, zeros if None. Returns
        (output (L, N, D * H_out), h_n) / (output, (h_n, c_n))."""
        name, lstm, D = type(self).__name__, self.mode == "LSTM", 2 if self.bidirectional else 1
        if input.ndim not in (2, 3) or input.shape[-1] != self.input_size:
            raise ShapeError(f"{describe(name, input=input)}: expected (L, N, {self.input_size}) "
                             f"(N first with batch_first) or unbatched (L, {self.input_size})")
        if lstm and hx is not None and not (isinstance(hx, (tuple, list)) and len(hx) == 2):
            raise ArgumentError(f"{name}: hx must be a pair (h_0, c_0)")
        batched = input.ndim == 3
        x = (input.transpose(0, 1) if self.batch_first else input) if batched else input.unsqueeze(1)
        L, N, H_out = x.shape[0], x.shape[1], self.proj_size or self.hidden_size
        states = (hx if lstm else (hx,)) if hx is not None else \
            [zeros(self.num_layers * D, N, size, dtype=x.dtype, device=x._device)
             for size in ((H_out, self.hidden_size) if lstm else (H_out,))]
        states = [s if batched else s.unsqueeze(1) for s in states]
        for s, size in zip(states, (H_out, self.hidden_size)):
            if tuple(s.shape) != (self.num_layers * D, N, size):
                raise ShapeError(f"{describe(name, input=input, hx=s)}: expected hidden state "
                                 f"({self.num_layers * D}, {N}, {size})" + ("" if batched else " without N"))
        h_n, c_n = [], []
        for layer in range(self.num_layers):
            outs = []
            for d in range(D):
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                p = [getattr(self, n + sfx, None) for n in ("weight_ih", "bias_ih", "weight_hh", "bias_hh",
                                                            "weight_hr")]
                gi = F.linear(x, p[0], p[1])  # the input projection of every step at once
                h, c = states[0][layer * D + d], states[1][layer * D + d] if lstm else None
                steps = []
                for t in (range(L - 1, -1, -1) if d else range(L)):
                    h, c = _rnn_step(self.mode, gi[t], h, c, p[2], p[3], p[4])
                    steps.append(h)
                outs.append(stack(steps[::-1] if d else steps))
                h_n.append(h), c_n.append(c)
            x = outs[0] if D == 1 else cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout)
        out = (x.transpose(0, 1) if self.batch_first else x) if batched else x.squeeze(1)
        h_n, c_n = stack(h_n), (stack(c_n) if lstm else None)
        h_n, c_n = (h_n, c_n) if batched else (h_n.squeeze(1), c_n.squeeze(1) if lstm else None)
        return (out, (h_n, c_n)) if lstm else (out, h_n)

    def extra_repr(self):
        """The sizes and settings, for the repr."""
        return (f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, batch_first={self.batch_first}, "
                f"dropout={self.dropout}, bidirectional={self.bidirectional}")


class RNN(RNNBase):
    """Elman RNN: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (or relu), as torch.nn.RNN."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ArgumentError(f"RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        super().__init__(f"RNN_{nonlinearity.upper()}", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, 0, device, dtype)
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """Long short-term memory (gates i, f, g, o; proj_size projects h), as torch.nn.LSTM.

    >>> import tensorlite as tl
    >>> lstm = tl.nn.LSTM(4, 3, num_layers=2, batch_first=True, bidirectional=True)
    >>> out, (h, c) = lstm(tl.ones(2, 5, 4))
    >>> tuple(out.shape), tuple(h.shape), list(lstm.state_dict())[4]
    ((2, 5, 6), (4, 2, 3), 'weight_ih_l0_reverse')
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device, dtype)


class GRU(RNNBase):
    """Gated recurrent unit (gates r, z, n), as torch.nn.GRU."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, device=None,
                 dtype=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         0, device, dtype)


class RNNCellBase(Module):
    """One step of RNN / LSTM / GRU: weight_ih, weight_hh, bias_ih, bias_hh as torch's cells."""
    mode = "LSTM"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        gates, kw = _GATES[self.mode] * hidden_size, dict(device=device, dtype=dtype)
        self.weight_ih = Parameter(empty(gates, input_size, **kw))
        self.weight_hh = Parameter(empty(gates, hidden_size, **kw))
        self.bias_ih = Parameter(empty(gates, **kw)) if bias else None
        self.bias_hh = Parameter(empty(gates, **kw)) if bias else None
        _reset_uniform(self)

    reset_parameters = _reset_uniform

    def forward(self, input, hx=None):
        """input (N, H_in) or (H_in,); hx h (or (h, c) for LSTMCell), zeros if None."""
        name, lstm = type(self).__name__, self.mode == "LSTM"
        if input.ndim not in (1, 2) or input.shape[-1] != self.input_size:
            raise ShapeError(f"{describe(name, input=input)}: expected (N, {self.input_size}) or ({self.input_size},)")
        x = input if input.ndim == 2 else input.unsqueeze(0)
        if hx is None:
            hx = zeros(x.shape[0], self.hidden_size, dtype=x.dtype, device=x._device)
            hx = (hx, hx) if lstm else hx
        elif input.ndim == 1:
            hx = tuple(s.unsqueeze(0) for s in hx) if lstm else hx.unsqueeze(0)
        h, c = (hx if lstm else (hx, None))
        if tuple(h.shape) != (x.shape[0], self.hidden_size):
            raise ShapeError(f"{describe(name, input=input, hx=h)}: expected a hidden state "
                             f"({x.shape[0]}, {self.hidden_size})" + ("" if input.ndim == 2 else " without N"))
        h, c = _rnn_step(self.mode, F.linear(x, self.weight_ih, self.bias_ih), h, c, self.weight_hh, self.bias_hh)
        if input.ndim == 1:
            h, c = h.squeeze(0), (c.squeeze(0) if lstm else None)
        return (h, c) if lstm else h

    def extra_repr(self):
        """input_size, hidden_size and bias, for the repr."""
        return f"{self.input_size}, {self.hidden_size}, bias={self.bias}"


class LSTMCell(RNNCellBase):
    """One LSTM step: returns (h', c')."""
    mode = "LSTM"


class GRUCell(RNNCellBase):
    """One GRU step: returns h'."""
    mode = "GRU"


class RNNCell(RNNCellBase):
    """One Elman RNN step (tanh or relu): returns h'."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ArgumentError(f"RNNCell: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        self.__dict__["mode"] = f"RNN_{nonlinearity.upper()}"
        super().__init__(input_size, hidden_size, bias, device, dtype)
        self.nonlinearity = nonlinearity
