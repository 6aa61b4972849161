"""The core of the frontend: what every op family and the Tensor class share.

The tensor's data model (TensorBase: a storage, a Layout, a dtype, a device, autograd's
slots), the one constructor of tensors from a storage (wrap, as_view), the device lookup and
seeding, and the checks of the arguments every op takes (dims, sizes, ints, devices,
dtypes). It imports nothing of the frontend above it: the op families (tensorlite/ops/)
import it, the Tensor class (tensorlite/tensor.py) inherits TensorBase and registers itself
as the class wrap() makes (register_tensor_class), and autograd needs nothing more.
"""
from __future__ import annotations

import builtins
import functools
import numbers
import operator
from collections import namedtuple
from math import isfinite, prod
from typing import TYPE_CHECKING

import numpy as np

from . import dtype as dtypes
from .backend import BackendStorage, default_device, get_device
from .errors import ArgumentError, DTypeError, DeviceError, IndexOutOfRange, OutOfMemoryError, ShapeError, describe
from .layout import Layout, cached

if TYPE_CHECKING:
    from .tensor import Tensor


class TensorBase:
    """The data model of a tensor, the slots every op reads: its storage (the device memory), its
    Layout (shape, strides, offset), dtype, device, and autograd's state (requires_grad, grad,
    _node: the op that made it; _base, _base_node: the tensor a view views and that tensor's
    history when the view was taken). tensorlite.tensor.Tensor adds the methods."""
    __slots__ = ("_storage", "_layout", "dtype", "_device", "requires_grad", "grad", "_node", "_base",
                 "_base_node", "__weakref__")


# The class wrap() and as_view() make: tensorlite.tensor.Tensor, registered as it is defined (the
# core cannot import it: its methods are the op families, which import the core)
_tensor_class = TensorBase


def register_tensor_class(cls) -> None:
    """Make `cls` (a TensorBase subclass: tensorlite.tensor.Tensor) the class of new tensors."""
    global _tensor_class
    _tensor_class = cls


def is_exact_tensor(v) -> bool:
    """Whether v is a tensor of the registered class itself (not a subclass such as nn.Parameter)."""
    return type(v) is _tensor_class


MinMax = namedtuple("MinMax", ["values", "indices"])
_SEED = [None]          # seed set by manual_seed, applied to devices created later
_SEEDED = set()


def resolve_device(spec=None):
    dev = get_device(spec if spec is not None else default_device())
    if _SEED[0] is not None and id(dev) not in _SEEDED:
        dev.set_seed(_SEED[0])
        _SEEDED.add(id(dev))
    return dev


_NUMPY_KEYWORDS = (("axis", "dim"), ("keepdims", "keepdim"))


def numpy_keywords(fn):
    """fn also taking numpy's `axis` for `dim` and `keepdims` for `keepdim`, as torch's reductions do."""
    @functools.wraps(fn)
    def with_numpy_keywords(*args, **kwargs):
        if "axis" in kwargs or "keepdims" in kwargs:
            for alias, name in _NUMPY_KEYWORDS:
                if alias in kwargs:
                    if name in kwargs:
                        raise ArgumentError(f"{fn.__name__.rstrip('_')}: give {name}= or {alias}=, not both")
                    kwargs[name] = kwargs.pop(alias)
        return fn(*args, **kwargs)
    return with_numpy_keywords


def seed_device(dev, seed: int) -> None:
    """Seed one device's generator (torch.cuda.manual_seed); tl.manual_seed's seed no longer
    replaces it when the device is first used."""
    dev.set_seed(int(seed))
    _SEEDED.add(id(dev))


def manual_seed(seed: int) -> None:
    """Seed the random generators of every device (created now or later)."""
    from .backend import initialized_devices
    _SEED[0] = int(seed)
    _SEEDED.clear()
    for dev in initialized_devices():
        dev.set_seed(int(seed))
        _SEEDED.add(id(dev))


def rng_state_tensor(state: bytes):
    """A device generator's state bytes as the 1-D uint8 cpu tensor torch's get_rng_state gives."""
    return wrap(get_device("cpu").from_cpu(np.frombuffer(state, np.uint8).copy()), (len(state),), dtypes.uint8)


def rng_state_bytes(op: str, new_state) -> bytes:
    """rng_state_tensor's inverse, refusing anything but a 1-D uint8 tensor (naming op)."""
    if not isinstance(new_state, TensorBase) or new_state.dtype is not dtypes.uint8 or new_state.ndim != 1:
        raise DTypeError(f"{describe(op, new_state=new_state)}: expected a 1-D uint8 tensor from get_rng_state")
    return new_state.numpy().tobytes()


def get_rng_state(device="cpu"):
    """The generator state of `device` (default `cpu`) as a 1-D uint8 tensor on `cpu`, which
    set_rng_state takes back, as torch.get_rng_state (torch.cuda.get_rng_state for a GPU)."""
    return rng_state_tensor(resolve_device(device).get_rng_state())


def set_rng_state(new_state, device="cpu") -> None:
    """Put the generator of `device` (default `cpu`) back in a state get_rng_state returned,
    as torch.set_rng_state: the draws that followed it then repeat."""
    state = rng_state_bytes("set_rng_state", new_state)
    resolve_device(device).set_rng_state(state)  # resolved: a pending tl.manual_seed must not replace it later


_CONTIG_LAYOUTS = {}  # shape -> its contiguous Layout, shared by outputs (Layouts are never mutated)


def contiguous_layout(shape) -> Layout:
    if not isinstance(shape, tuple):  # a tuple or a tl.Size (they hash and compare alike)
        return Layout.contiguous(shape)
    return cached(_CONTIG_LAYOUTS, shape, lambda s: Layout.contiguous(tuple([int(n) for n in s])))


def wrap(storage: BackendStorage, shape, dtype=None) -> "Tensor":
    t = _tensor_class.__new__(_tensor_class)
    lay = _CONTIG_LAYOUTS.get(shape) if isinstance(shape, tuple) else None  # contiguous_layout's hit, inlined
    t._storage, t._layout = storage, lay if lay is not None else contiguous_layout(shape)
    t.dtype = dtype if dtype is not None else storage.dtype
    t._device = storage.device
    t.requires_grad, t.grad, t._node, t._base = False, None, None, None
    return t


def as_view(x: "Tensor", layout: Layout) -> "Tensor":
    """A view of x: x's storage through another layout. Its _base is the tensor whose storage
    it views and _base_node that tensor's history when the view was taken: autograd refuses
    a view whose base has had a new history since (an in-place op recorded on the base), and
    in-place ops on views while recording."""
    t = _tensor_class.__new__(_tensor_class)
    t._storage, t._layout, t.dtype, t._device = x._storage, layout, x.dtype, x._device
    base = x._base if x._base is not None else x
    t.requires_grad, t.grad, t._node, t._base, t._base_node = False, None, None, base, base._node
    return t


# d in [-ndim, ndim) as a dim in [0, ndim); a 0-d tensor takes 0 and -1 where scalar_ok (PyTorch)
def norm_dim(d: int, ndim: int, op: str, x=None, scalar_ok=True) -> int:
    """A dim in [-ndim, ndim) as one in [0, ndim), as PyTorch wraps it; else IndexOutOfRange naming `op`."""
    n = builtins.max(ndim, 1) if scalar_ok else ndim
    if type(d) is not int or not -n <= d < n:
        who = describe(op, self=x) if x is not None else op
        if not isinstance(d, numbers.Integral):
            raise DTypeError(f"{who}: dim must be an integer, got {d!r}")
        if not -n <= d < n:
            raise IndexOutOfRange(f"{who}: dimension {d} out of range for {ndim} dims (expected {-n}..{n - 1})")
    return d % n


# dim (None, an int or a sequence of them) as sorted dims in [0, ndim): None and, for the
# reductions, () are every dim; a 0-d tensor takes dim 0 or -1 and has none (PyTorch)
def norm_dims(dim, ndim, op, x=None, empty_is_all=True):
    if dim is None or (empty_is_all and isinstance(dim, (tuple, list)) and not dim):
        return tuple(range(ndim))
    if type(dim) is int:  # the common case, one dim: what the general path below gives for it
        d = norm_dim(dim, ndim, op, x)
        return (d,) if ndim else ()
    dims = tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)
    out = tuple(sorted({norm_dim(d, ndim, op, x) for d in dims}))
    if len(out) != len(dims):
        raise ShapeError(f"{describe(op, self=x) if x is not None else op}: repeated dims in {dim}")
    return out if ndim else ()


# sizes given as ints or as one sequence, as a tuple of ints (floats are refused, as PyTorch)
def shape_arg(shape, op="size", x=None):
    try:
        if len(shape) == 1 and type(shape[0]) is not int and not isinstance(shape[0], numbers.Integral):
            shape = tuple(shape[0])
        for s in shape:  # the common case, plain ints, passes as it is
            if type(s) is not int:
                return tuple([operator.index(s) for s in shape])
        return shape
    except TypeError:
        raise DTypeError(f"{describe(op, self=x) if x is not None else op}: sizes must be integers, got {shape!r}") \
            from None


def sizes_arg(op, sizes, size=None):
    """The shape of a creation function: its positional sizes (ints or one sequence), or the
    keyword `size`, as torch.zeros(size=...) takes it."""
    if size is None:
        return shape_arg(sizes, op)
    if sizes:
        raise ArgumentError(f"{op}: sizes given both as arguments {sizes!r} and as size={size!r}")
    return shape_arg((size,), op)


# The one check of a new tensor's shape: no negative size, and no more bytes than the device
# has (OutOfMemoryError at once, before any host or device work)
def check_size(op, shape, dtype, dev):
    if builtins.min(shape, default=0) < 0:
        raise ShapeError(f"{op}: negative size in {tuple(shape)}")
    nbytes = prod(shape) * dtype.itemsize
    if not nbytes and prod(s for s in shape if s) * dtype.itemsize >= 2 ** 63:
        # an empty tensor needs no memory, but an array's sizes past a 0 still multiply within int64 (numpy)
        raise ShapeError(f"{op}: the sizes of a {tuple(shape)} {dtype.name} tensor other than 0 multiply to more "
                         f"bytes than int64 holds")
    limit = dev.total_memory()
    if limit is not None and nbytes > limit:
        raise OutOfMemoryError(f"{op}: a {tuple(shape)} {dtype.name} tensor needs {nbytes} "
                               f"bytes, more than the {limit} bytes of {dev}")
    return shape


def out_of_memory(op, shape, dtype, dev, error) -> OutOfMemoryError:
    """The error for a result that check_size let through (it fits the device's total memory) and
    the allocator then refused (numpy's MemoryError, a backend's OutOfMemoryError): named by the op."""
    return OutOfMemoryError(f"{op}: a {tuple(shape)} {dtype.name} result needs {prod(shape) * dtype.itemsize} bytes, "
                            f"more than {dev} could allocate now ({error})")


# An int argument (n None) or n of them (one int repeated, or a sequence of n), each >= low: the
# check of every stride, padding, count; DTypeError / ArgumentError naming the op otherwise
def ints(op, name, v, n=None, low=None, **operands):
    what = ("an integer" if n is None else f"{n} integers") + ("" if low is None else f" >= {low}")
    try:
        out = operator.index(v) if n is None else tuple(operator.index(i) for i in v) \
            if isinstance(v, (tuple, list)) else (operator.index(v),) * n
        bad = (n is not None and len(out) != n) or (low is not None and builtins.min(out if n else (out,)) < low)
    except TypeError:
        out = bad = None
    if bad is not False:
        raise (DTypeError if bad is None else ArgumentError)(
            f"{describe(op, **operands) if operands else op}: {name} must be {what}, got {v!r}")
    return out


def same_device(op, **ts):
    devs = {id(t._device) for t in ts.values()}
    if len(devs) > 1:
        raise DeviceError(f"{describe(op, **ts)}: operands are on different devices; move them with .to()")


def copy_of(x: Tensor) -> Tensor:
    dst = x._device.alloc_uninit(x.shape, x.dtype)
    if x.numel():
        x._storage.copy_strided_src(dst, 0, x._layout)
    return wrap(dst, x.shape, x.dtype)


def is_scalar(v):
    return isinstance(v, (numbers.Number, np.generic)) and not isinstance(v, TensorBase)


def scalar_tensor(v, dtype, dev, op="scalar"):
    return wrap(full_storage(op, dev, (), v, dtype), (), dtype)


def opmath(dt, for_integers):
    """The dtype a composite computes in: float32 for 16-bit floats (PyTorch's opmath: a sum of
    them overflows their range long before their mean does), `for_integers` for integers."""
    return dtypes.float32 if dt.itemsize == 2 and dt.is_floating_point else dt if dt.is_floating_point else for_integers


def grad_flag(op, dtype, flag):
    """requires_grad, where the dtype can have gradients (floats, as PyTorch)."""
    if flag and not dtype.is_floating_point:
        raise DTypeError(f"{op}: only floating point tensors can require gradients, got {dtype.name}")
    return bool(flag)


def fits(v, dtype) -> bool:
    """Whether an integer dtype holds the number v (NaN, Inf and too large ones it does not)."""
    info = np.iinfo(dtype.np)
    return (isinstance(v, numbers.Integral) or isfinite(v)) and info.min <= v <= info.max


# Refuse a value to be written into `dtype` (full, fill_, x[i] = v) that is no real number, or
# that the dtype cannot hold: NaN, Inf or too large for an integer dtype, an int past float64's
# range for a float one (PyTorch refuses them too); `where` begins the message (the op)
def check_value(where, value, dtype) -> None:
    if not is_scalar(value) or isinstance(value, (complex, np.complexfloating)):
        raise DTypeError(f"{where}: the value must be a real number, got {type(value).__name__}")
    if dtype.is_floating_point:
        try:
            float(value)
            return
        except OverflowError:
            pass
    elif dtype is dtypes.bool_ or fits(value, dtype):
        return
    raise ArgumentError(f"{where}: the value {value!r} cannot be converted to {dtype.name} without overflow")


def full_storage(op, dev, shape, value, dtype):  # dev.full(shape, value, dtype) of a value check_value passes
    check_value(op, value, dtype)
    return dev.full(shape, value, dtype)


def dtype_of(dtype, value=0.0, op="tensor"):
    if dtype is not None:
        try:
            return dtypes.get(dtype)
        except TypeError as e:
            raise DTypeError(f"{op}: {e}") from None
    return dtypes.bool_ if isinstance(value, bool) else dtypes.int64 if isinstance(value, numbers.Integral) \
        else dtypes.get_default_dtype()


def synchronize(device=None) -> None:
    """Wait until the device's queued work has finished, as torch.cuda.synchronize (default: the default device)."""
    resolve_device(device).synchronize()


def dims_arg(dims, more, op, x):
    """dims given as one int, one sequence, or several ints (x.flip(0, 1)): a tuple of ints."""
    return shape_arg((dims, *more) if more else (dims,), op, x)


def fail(cls, op, msg, **operands):
    raise cls(f"{describe(op, **operands)}: {msg}")
