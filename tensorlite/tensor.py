"""The Tensor: a storage, a Layout and a dtype.

View ops build a new Layout over the same storage; every other op hands layouts to the
storage of the tensor's device (tensorlite.backend.BackendStorage) and wraps the fresh
storage it returns. Differentiable ops attach a backward closure (tensorlite.autograd).
"""
from __future__ import annotations

import functools

import numpy as np

from . import autograd, dlpack, dtype as dtypes
from ._core import (TensorBase, as_view, copy_of, dtype_of, grad_flag, norm_dim, register_tensor_class,
                    resolve_device, wrap)
from .autograd import attach
from .backend import BackendDevice, Device
from .errors import ArgumentError, BackendUnavailable, DTypeError, DeviceError, ShapeError, TensorliteError, describe
from .ops.creation import CreationMethods, rand, randn, tensor
from .ops.elementwise import ElementwiseMethods, OpTableMethods
from .ops.index import IndexMethods, setitem
from .ops.matmul import MatmulMethods
from .ops.reduce import ReduceMethods
from .ops.shape import ShapeMethods
from .ops.sort import SortMethods
from .ops.views import ViewMethods
from .printing import tensor_repr
from .size import Size, size_of


def _unpickle(cls, data, dtype, device, requires_grad):  # Tensor.__reduce__'s inverse (a Parameter stays one)
    t = tensor(data, dtype, device, requires_grad)
    return t if cls is Tensor else cls(t, requires_grad)


class Tensor(TensorBase, ElementwiseMethods, OpTableMethods, ViewMethods, ReduceMethods, IndexMethods,
             SortMethods, ShapeMethods, MatmulMethods, CreationMethods):
    """A storage, a Layout (shape, strides, offset) and a dtype on one device.

    Its data model (the slots) is the core's TensorBase; this class holds the attributes, host
    interop, autograd, conversions and whole-tensor writes; the op methods are the mixins of the
    op families (tensorlite/ops/*.py: each family's `...Methods`, most the module functions of
    the same names; OpTableMethods: one method and its in-place form per row of the op table)."""
    __slots__ = ()  # the data model's slots are TensorBase's (tensorlite/_core.py)
    __array_priority__ = 1000  # numpy defers `ndarray op Tensor` to us

    def __init__(self, *a, **k):
        raise TypeError("create tensors with tl.tensor(...), tl.zeros(...), ... not Tensor(...)")

    # ---- attributes -----------------------------------------------------------------
    @property
    def shape(self) -> Size:
        """The sizes of the dims, a tl.Size (a tuple, as torch.Size).

        >>> import tensorlite as tl
        >>> tl.zeros(2, 3).shape
        tensorlite.Size([2, 3])
        """
        return size_of(self._layout.shape)

    def size(self, dim=None):
        """The shape, or the size of dim `dim`, as torch.Tensor.size.

        >>> import tensorlite as tl
        >>> tl.zeros(2, 3).size(-1)
        3
        """
        return self.shape if dim is None else self.shape[norm_dim(dim, self.ndim, "size", self, False)]

    @property
    def device(self) -> Device:
        """The device, a tl.device: the device's name ('cpu', 'cuda:0', ...) as a str with
        torch.device's .type and .index.

        >>> import tensorlite as tl
        >>> d = tl.zeros(1, device='cpu').device
        >>> d, d.type, d == 'cpu'
        (device(type='cpu'), 'cpu', True)
        """
        return Device(self._device)

    @property
    def is_cuda(self) -> bool:
        """Whether the tensor is on a `cuda` device, as torch.Tensor.is_cuda.

        >>> import tensorlite as tl
        >>> tl.zeros(1).is_cuda
        False
        """
        return self._device.name == "cuda"

    @property
    def is_cpu(self) -> bool:
        """Whether the tensor is on the `cpu` device, as torch.Tensor.is_cpu.

        >>> import tensorlite as tl
        >>> tl.zeros(1).is_cpu
        True
        """
        return self._device.name == "cpu"

    @property
    def ndim(self) -> int:
        """The number of dims, as torch.Tensor.ndim.

        >>> import tensorlite as tl
        >>> tl.zeros(2, 3).ndim
        2
        """
        return len(self._layout.shape)

    def dim(self) -> int:
        """The number of dims, as torch.Tensor.dim."""
        return self.ndim

    def stride(self, dim=None):
        """The strides in elements, or that of dim `dim`, as torch.Tensor.stride.

        >>> import tensorlite as tl
        >>> tl.zeros(2, 3).stride()
        (3, 1)
        """
        s = self._layout.strides
        return s if dim is None else s[norm_dim(dim, self.ndim, "stride", self, False)]

    def numel(self) -> int:
        """The number of elements, as torch.Tensor.numel.

        >>> import tensorlite as tl
        >>> tl.zeros(2, 3).numel()
        6
        """
        return self._layout.numel()

    nelement = numel  # torch.Tensor.nelement, numel's other name

    def is_contiguous(self) -> bool:
        """Whether the layout is row-major without gaps, as torch.Tensor.is_contiguous.

        >>> import tensorlite as tl
        >>> tl.zeros(2, 3).mT.is_contiguous()
        False
        """
        return self._layout.is_contiguous()

    def element_size(self) -> int:
        """Bytes per element, as torch.Tensor.element_size.

        >>> import tensorlite as tl
        >>> tl.zeros(1, dtype=tl.float16).element_size()
        2
        """
        return self.dtype.itemsize

    @property
    def is_leaf(self) -> bool:
        """Whether no autograd op made this tensor (a user-made tensor), as torch.Tensor.is_leaf.

        >>> import tensorlite as tl
        >>> (tl.ones(1, requires_grad=True) * 2).is_leaf
        False
        """
        return self._node is None

    @property
    def grad_fn(self):
        """The autograd Node that made this tensor (its `name`, its `inputs`), None for a leaf."""
        return self._node

    @property
    def is_floating_point(self):
        """Whether the dtype is floating: a property here, a method in torch.

        >>> import tensorlite as tl
        >>> tl.tensor([1]).is_floating_point
        False
        """
        return self.dtype.is_floating_point

    @property
    def _version(self) -> int:
        """How many in-place writes this tensor's storage has had (shared by its views)."""
        return self._storage.version

    def data_ptr_id(self):
        """Identity of the underlying storage (views share it)."""
        return id(self._storage)

    # ---- host interop ---------------------------------------------------------------
    def __reduce__(self):  # pickle, copy.deepcopy: host data, dtype, device name, requires_grad
        return _unpickle, (type(self), self.numpy(), self.dtype, str(self._device), self.requires_grad)

    def numpy(self) -> np.ndarray:
        """A host copy (waits for the device). bf16 comes back as ml_dtypes.bfloat16."""
        return self._storage.to_cpu(self._layout)

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    __dlpack__, __dlpack_device__ = dlpack.to_dlpack, dlpack.device_of  # shared memory (tensorlite/dlpack.py)

    def data_ptr(self) -> int:
        """The address of the first element (host or device memory).

        >>> import tensorlite as tl
        >>> x = tl.zeros(4, device="cpu")
        >>> x[1:].data_ptr() - x.data_ptr() == x.element_size()
        True
        """
        return self._storage.addr(self._layout.offset)

    def item(self):
        """The value of a one-element tensor as a Python number, as torch.Tensor.item.

        >>> import tensorlite as tl
        >>> tl.tensor([[2.5]]).item()
        2.5
        """
        if self.numel() != 1:
            raise ShapeError(f"{describe('item', self=self)}: only one-element tensors convert to a Python scalar")
        v = self.numpy().reshape(-1)[0]
        return v.item() if self.dtype is not dtypes.bfloat16 else float(v)

    def tolist(self):
        """The values as nested Python lists (a number for a 0-d tensor), as torch.Tensor.tolist.

        >>> import tensorlite as tl
        >>> tl.tensor([[1, 2]]).tolist()
        [[1, 2]]
        """
        a = self.numpy()
        return (a.astype(np.float32) if self.dtype is dtypes.bfloat16 else a).tolist()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self.dtype.is_floating_point:
            raise DTypeError(f"{describe('__index__', self=self)}: only integer tensors can be used as an index")
        return int(self.item())

    def __bool__(self):
        if self.numel() != 1:
            raise ShapeError(f"{describe('__bool__', self=self)}: the truth value of a tensor with more "
                             "than one element is ambiguous")
        return bool(self.item())

    def __len__(self):
        if self.ndim == 0:
            raise DTypeError(f"{describe('len', self=self)}: len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __format__(self, spec):
        """A one-element tensor formats as its number (f"{loss:.4f}"), as torch's; others as repr."""
        if spec and self.numel() == 1:
            return format(self.item(), spec)
        return object.__format__(self, spec) if spec else repr(self)

    def __repr__(self):
        """torch's repr (tensorlite/printing.py): `tensor([1., 2.])`, `tensor(94.)`."""
        return tensor_repr(self)

    # ---- autograd -------------------------------------------------------------------
    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Add d(self)/d(leaf) (times `gradient`) to each leaf's .grad; see tl.autograd.backward.

        >>> import tensorlite as tl
        >>> x = tl.tensor([1.0, 2.0], requires_grad=True)
        >>> (x * x).sum().backward(); x.grad.tolist()
        [2.0, 4.0]
        """
        autograd.backward(self, gradient, retain_graph, create_graph, inputs)

    def register_hook(self, hook):
        """hook(grad) runs when this tensor's gradient is computed and may return a replacement;
        returns a handle whose remove() unregisters it.

        >>> import tensorlite as tl
        >>> x = tl.tensor([1.0, 2.0], requires_grad=True)
        >>> h = x.register_hook(lambda g: g * 10)
        >>> x.sum().backward(); x.grad.tolist()
        [10.0, 10.0]
        """
        return autograd.register_hook(self, hook)

    def register_post_accumulate_grad_hook(self, hook):
        """hook(self) runs after a backward has added its gradient to this leaf's .grad (as
        torch's; distributed data parallel starts its all-reduces here); returns a handle.
        See tensorlite.autograd.register_post_accumulate_grad_hook."""
        return autograd.register_post_accumulate_grad_hook(self, hook)

    def retain_grad(self):
        """Keep .grad for this non-leaf tensor in later backward passes (leaves have it anyway).

        >>> import tensorlite as tl
        >>> y = tl.tensor([1.0, 2.0], requires_grad=True) * 2
        >>> y.retain_grad(); (y * y).sum().backward(); y.grad.tolist()
        [4.0, 8.0]
        """
        autograd.retain_grad(self)

    @property
    def retains_grad(self) -> bool:
        """Whether retain_grad() was called on this non-leaf tensor."""
        return autograd.retains_grad(self)

    def detach(self) -> "Tensor":
        """The same storage and layout, out of the graph (in-place changes show in both)."""
        t = as_view(self, self._layout)
        t._base = t._base_node = None  # not a view: it keeps nothing of self's graph alive
        return t

    def requires_grad_(self, flag=True):
        """Set requires_grad in place (floating dtypes only) and return self, as torch's.

        >>> import tensorlite as tl
        >>> tl.zeros(2).requires_grad_().requires_grad
        True
        """
        self.requires_grad = grad_flag("requires_grad_", self.dtype, flag)
        return self

    def _set_data(self, other: "Tensor"):
        """Swap in another tensor's storage and layout (optimizers' parameter update)."""
        if other.shape != self.shape or other.dtype is not self.dtype or other._device is not self._device:
            raise ShapeError(f"{describe('data=', self=self, other=other)}: shape, dtype and device must match")
        self._storage, self._layout = other._storage, other._layout

    data = property(detach, _set_data)  # x.data: x detached; x.data = y: _set_data

    # ---- conversion -----------------------------------------------------------------
    def to(self, *args, dtype=None, device=None, non_blocking=False, copy=False) -> "Tensor":
        """to(device), to(dtype), to(device, dtype), to(other tensor) (its dtype and device) or
        keyword forms, as torch.Tensor.to: self itself where nothing changes, unless copy.
        non_blocking is accepted (a copy between devices is ordered on the device either way).

        >>> import tensorlite as tl
        >>> tl.tensor([1, 2]).to(tl.zeros(1, dtype=tl.float64)).dtype
        tensorlite.float64
        """
        if dtype is None and device is None and len(args) == 1 and type(args[0]) is dtypes.DType and not copy:
            return self._cast(args[0])  # the mixed-precision hot path: one cast per weight per step
        if len(args) == 1 and isinstance(args[0], Tensor):  # to(other): other's dtype and device, as torch's
            dtype, device, args = dtype or args[0].dtype, device or args[0]._device, ()
        for a in args:  # a string that names no dtype, or a BackendDevice, is a device
            if not isinstance(a, (str, BackendDevice)) or a in dtypes.BY_NAME:
                dtype = a
            else:
                device = a
        out = self
        if device is not None:
            try:
                dev = resolve_device(device)
            except BackendUnavailable as e:  # a known device, not here
                raise BackendUnavailable(f"{describe('to', self=self)}: {e}") from None
            except DeviceError as e:
                raise type(e)(f"{describe('to', self=self)}: {e}; nor is {device!r} a dtype "
                              f"({sorted(dtypes.BY_NAME)})") from None
            if dev is not out._device:
                src_dev = out._device
                moved = wrap(dev.from_cpu(np.ascontiguousarray(out.numpy())), out.shape, out.dtype)
                out = attach(moved, (out,), lambda g: (g.to(src_dev),), "to(device)")
        if dtype is not None:
            out = out._cast(dtype_of(dtype, op="to"))
        return out.clone() if copy and out is self else out

    def _cast(self, dtype) -> "Tensor":
        if dtype is self.dtype:
            return self
        src = self.dtype
        out = wrap(self._storage.to_dtype(self._layout, dtype), self._layout.shape, dtype)
        if dtype.is_floating_point and src.is_floating_point:
            return attach(out, (self,), lambda g: (g._cast(src),), "cast")
        return out

    def type(self, dtype):
        """A cast to dtype (a tl dtype or its name; torch's also takes type strings).

        >>> import tensorlite as tl
        >>> tl.tensor([1.5]).type(tl.int64).tolist()
        [1]
        """
        return self._cast(dtype_of(dtype, op="type"))

    float = functools.partialmethod(_cast, dtypes.float32)
    half = functools.partialmethod(_cast, dtypes.float16)
    bfloat16 = functools.partialmethod(_cast, dtypes.bfloat16)
    double = functools.partialmethod(_cast, dtypes.float64)
    long = functools.partialmethod(_cast, dtypes.int64)
    int = functools.partialmethod(_cast, dtypes.int32)
    short = functools.partialmethod(_cast, dtypes.int16)
    char = functools.partialmethod(_cast, dtypes.int8)
    bool = functools.partialmethod(_cast, dtypes.bool_)
    cpu = functools.partialmethod(to, "cpu")

    def cuda(self, ordinal=0):
        """self.to('cuda:<ordinal>'), as torch.Tensor.cuda."""
        return self.to(f"cuda:{ordinal}")

    def contiguous(self) -> "Tensor":
        """self if already contiguous, else a row-major copy, as torch.Tensor.contiguous.

        >>> import tensorlite as tl
        >>> tl.zeros(2, 3).mT.contiguous().stride()
        (2, 1)
        """
        if self._layout.is_contiguous():
            return self
        return attach(copy_of(self), (self,), lambda g: (g,), "contiguous")

    def clone(self) -> "Tensor":
        """A copy with its own storage, in the graph (gradients flow back), as torch.Tensor.clone.

        >>> import tensorlite as tl
        >>> tl.tensor([1, 2]).clone().tolist()
        [1, 2]
        """
        return attach(copy_of(self), (self,), lambda g: (g,), "clone")



    def pin_memory(self):
        """A copy in host memory, as torch.Tensor.pin_memory (tensorlite's host copies need no
        pinning: this is the copy PyTorch makes); cpu tensors only.

        >>> import tensorlite as tl
        >>> tl.ones(2).pin_memory().is_pinned()
        False
        """
        if self._device.name != "cpu":
            raise DeviceError(f"{describe('pin_memory', self=self)}: only cpu tensors can be pinned")
        return self.clone()

    def is_pinned(self) -> bool:
        """False: tensorlite keeps no page-locked host memory (see pin_memory)."""
        return False

    # ---- in-place (PyTorch's trailing underscore): the tensor's memory changes, its views see it
    def copy_(self, src):
        """Copy src (broadcast, cast) into this tensor's memory, as torch.Tensor.copy_.

        >>> import tensorlite as tl
        >>> tl.zeros(2, dtype=tl.int64).copy_(tl.tensor([3, 4])).tolist()
        [3, 4]
        """
        return setitem(self, Ellipsis, src, "copy_")

    def fill_(self, value):
        """Every element becomes value, in place, as torch.Tensor.fill_.

        >>> import tensorlite as tl
        >>> tl.zeros(2).fill_(3).tolist()
        [3.0, 3.0]
        """
        return setitem(self, Ellipsis, value, "fill_")

    def zero_(self):
        """Every element becomes 0, in place, as torch.Tensor.zero_."""
        return setitem(self, Ellipsis, 0, "zero_")

    def normal_(self, mean=0.0, std=1.0):
        """Every element becomes a N(mean, std) sample, in place, as torch.Tensor.normal_
        (drawn on the tensor's device, seeded by tl.manual_seed).

        >>> import tensorlite as tl
        >>> tl.zeros(3).normal_(5.0, 0.0).tolist()
        [5.0, 5.0, 5.0]
        """
        self._check_random_fill("normal_")
        return setitem(self, Ellipsis, randn(self.shape, dtype=self.dtype, device=self._device) * std + mean,
                        "normal_")

    def uniform_(self, a=0.0, b=1.0, **bounds):
        """Every element becomes a U(a, b) sample, in place, as torch.Tensor.uniform_ (whose
        keyword names, `from` and `to`, are taken too).

        >>> import tensorlite as tl
        >>> x = tl.zeros(1000).uniform_(-2, 2)
        >>> bool(x.min() >= -2) and bool(x.max() < 2)
        True
        """
        a, b = bounds.pop("from", a), bounds.pop("to", b)
        if bounds:
            raise ArgumentError(f"uniform_: unexpected arguments {sorted(bounds)}")
        self._check_random_fill("uniform_")
        return setitem(self, Ellipsis, rand(self.shape, dtype=self.dtype, device=self._device) * (b - a) + a,
                        "uniform_")

    def exponential_(self, lambd=1.0):
        """Every element becomes an Exp(lambd) sample (-log(1 - u) / lambd), in place, as
        torch.Tensor.exponential_.

        >>> import tensorlite as tl
        >>> bool(tl.zeros(1000).exponential_(2.0).min() >= 0)
        True
        """
        if not lambd > 0:
            raise ArgumentError(f"{describe('exponential_', self=self)}: lambd must be positive, got {lambd}")
        self._check_random_fill("exponential_")
        u = rand(self.shape, dtype=dtypes.float32 if self.dtype in dtypes.HALVES else self.dtype,
                 device=self._device)
        return setitem(self, Ellipsis, (1.0 - u).log() * (-1.0 / lambd), "exponential_")

    def _check_random_fill(self, op):
        if not self.dtype.is_floating_point:
            raise DTypeError(f"{describe(op, self=self)}: random samples of a floating dtype only")

    def bernoulli(self, p=None):
        """1 with probability p (default: this tensor's values), else 0, in this tensor's dtype, as
        torch.bernoulli / torch.Tensor.bernoulli.

        >>> import tensorlite as tl
        >>> tl.tensor([0.0, 1.0]).bernoulli().tolist()
        [0.0, 1.0]
        """
        if not self.dtype.is_floating_point:
            raise DTypeError(f"{describe('bernoulli', self=self)}: probabilities of a floating dtype only")
        if p is not None and not 0.0 <= float(p) <= 1.0:
            raise ArgumentError(f"{describe('bernoulli', self=self)}: p must be in [0, 1], got {p}")
        probs = self.detach() if p is None else float(p)
        return (rand(self.shape, dtype=self.dtype, device=self._device) < probs)._cast(self.dtype)

    def softmax(self, dim, dtype=None):
        """F.softmax(self, dim, dtype), as torch.Tensor.softmax."""
        from .nn import functional as F
        return F.softmax(self, dim, dtype=dtype)

    def log_softmax(self, dim, dtype=None):
        """F.log_softmax(self, dim, dtype), as torch.Tensor.log_softmax."""
        from .nn import functional as F
        return F.log_softmax(self, dim, dtype=dtype)

    @property
    def nbytes(self) -> int:
        """numel * itemsize, as torch.Tensor.nbytes."""
        return self.numel() * self.itemsize

    @property
    def itemsize(self) -> int:
        """Bytes per element, as torch.Tensor.itemsize."""
        return self.dtype.itemsize

    def storage_offset(self) -> int:
        """The first element's offset in the storage, in elements, as torch.Tensor.storage_offset.

        >>> import tensorlite as tl
        >>> tl.zeros(2, 3)[1].storage_offset()
        3
        """
        return self._layout.offset

    def detach_(self):
        """Take this tensor out of the graph in place (it no longer requires grad), as
        torch.Tensor.detach_; a view refuses (detach() it instead)."""
        if self._base is not None:
            raise TensorliteError(f"{describe('detach_', self=self)}: can't detach views in-place; use detach()")
        self._node, self.requires_grad = None, False
        return self


register_tensor_class(Tensor)
