"""nn.Module and the standard layers, shaped after torch.nn."""
from __future__ import annotations

import functools
import math
from collections import OrderedDict, namedtuple

from .. import dtype as _dt
from ..autograd import no_grad
from ..errors import ArgumentError, DTypeError, IndexOutOfRange, ShapeError, StateDictError, TensorliteError
from ..tensor import Tensor, as_tuple, empty, ones, tensor, zeros, zeros_like
from . import functional as F
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
                             _modules=OrderedDict(), training=True)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

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
        if module is not None and not isinstance(module, Module):
            raise DTypeError(f"add_module({name!r}): expected a Module, got {type(module).__name__}")
        self._modules[name] = module

    register_module = add_module

    # ---- traversal -------------------------------------------------------------------
    def named_modules(self, memo=None, prefix: str = ""):
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(memo, f"{prefix}.{name}" if prefix else name)

    def modules(self):
        return (m for _, m in self.named_modules())

    def named_children(self):
        return ((n, m) for n, m in self._modules.items() if m is not None)

    def children(self):
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
        return self._named_members("_parameters", prefix, recurse)

    def parameters(self, recurse: bool = True):
        return (p for _, p in self.named_parameters(recurse=recurse))

    def named_buffers(self, prefix: str = "", recurse: bool = True):
        return self._named_members("_buffers", prefix, recurse)

    def buffers(self, recurse: bool = True):
        return (b for _, b in self.named_buffers(recurse=recurse))

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ---- modes and grads -------------------------------------------------------------
    def train(self, mode: bool = True):
        for m in self.modules():
            object.__setattr__(m, "training", bool(mode))
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True):
        for p in self.parameters():
            p.requires_grad = requires_grad
        return self

    def zero_grad(self, set_to_none: bool = True):
        for p in self.parameters():
            if p.grad is not None:
                p.grad = None if set_to_none else zeros_like(p.grad)

    # ---- device and dtype ------------------------------------------------------------
    def to(self, *args, device=None, dtype=None):
        """Move/cast parameters and buffers in place (floating ones only change dtype)."""
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
        return ""

    def __repr__(self):
        lines = [f"({name}): " + repr(m).replace("\n", "\n  ") for name, m in self.named_children()]
        head = f"{type(self).__name__}({self.extra_repr()}"
        return head + ")" if not lines else head + "\n  " + "\n  ".join(lines) + "\n)"


class Identity(Module):
    def forward(self, x):
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
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1.0 / math.sqrt(init.calculate_fan_in_and_fan_out(self.weight)[0])
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Embedding(Module):
    """Lookup table initialised N(0, 1) (the padding_idx row zeroed), as torch.nn.Embedding."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx=None, device=None, dtype=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = None if padding_idx is None else padding_idx % num_embeddings
        self.weight = Parameter(empty(num_embeddings, embedding_dim, device=device, dtype=dtype))
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx] = 0.0

    def forward(self, ids):
        return F.embedding(ids, self.weight, self.padding_idx)

    def extra_repr(self):
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
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.weight is not None}"


class LayerNorm(_Norm):
    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None):
        super().__init__(normalized_shape, eps, elementwise_affine, bias, device, dtype)

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class RMSNorm(_Norm):
    def __init__(self, normalized_shape, eps=None, elementwise_affine: bool = True, device=None, dtype=None):
        super().__init__(normalized_shape, eps, elementwise_affine, False, device, dtype)

    def forward(self, x):
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
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    dims = (4,)


class Dropout(Module):
    def __init__(self, p: float = 0.5):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ArgumentError(f"Dropout: probability must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}"


class _ConvNd(Module):
    """Conv1d/Conv2d: weight (out, in/groups, *k) ~ kaiming_uniform(a=sqrt(5)), bias
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)), as torch."""
    nd = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, device=None, dtype=None):
        super().__init__()
        if not isinstance(groups, int) or groups < 1 or in_channels % groups or out_channels % groups:
            raise ShapeError(f"{type(self).__name__}: channels ({in_channels}, {out_channels}) must be divisible "
                             f"by groups={groups}")
        k = as_tuple(kernel_size, self.nd)
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, k
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.weight = Parameter(empty((out_channels, in_channels // groups) + k, device=device, dtype=dtype))
        self.bias = Parameter(empty(out_channels, device=device, dtype=dtype)) if bias else None
        self.reset_parameters()

    reset_parameters = Linear.reset_parameters

    def forward(self, x):
        conv = F.conv2d if self.nd == 2 else F.conv1d
        return conv(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, groups={self.groups}, bias={self.bias is not None}")


class Conv2d(_ConvNd):
    nd = 2


class Conv1d(_ConvNd):
    nd = 1


def _activation(name, fn, doc):
    def forward(self, x):
        return fn(x)
    return type(name, (Module,), {"forward": forward, "__doc__": doc})


ReLU = _activation("ReLU", F.relu, "max(x, 0)")
SiLU = _activation("SiLU", F.silu, "x * sigmoid(x)")
Sigmoid = _activation("Sigmoid", F.sigmoid, "1 / (1 + exp(-x))")
Tanh = _activation("Tanh", F.tanh, "tanh(x)")


class GELU(Module):
    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, self.approximate)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"


class Softmax(Module):
    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return F.softmax(x, self.dim)


class Flatten(Module):
    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1):
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.dilation = kernel_size, stride, padding, dilation

    def forward(self, x):
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation)


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, count_include_pad: bool = True):
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.count_include_pad = kernel_size, stride, padding, \
            count_include_pad

    def forward(self, x):
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, count_include_pad=self.count_include_pad)


class ModuleList(Module):
    """A list of submodules named '0', '1', ... (so state_dict keys read 'layers.0.weight')."""

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
            return type(self)(list(self._modules.values())[i])
        return self._modules[self._index(i)]

    def __setitem__(self, i, module):
        self.add_module(self._index(i), module)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module):
        items = list(self._modules.values())
        items.insert(index, module)
        self._modules.clear()
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
        for m in self:
            x = m(x)
        return x


class ModuleDict(Module):
    def __init__(self, modules=None):
        super().__init__()
        for name, m in (modules or {}).items():
            self.add_module(name, m)

    def __getitem__(self, name):
        return self._modules[name]

    def __setitem__(self, name, module):
        self.add_module(name, module)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, name):
        return name in self._modules

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()
