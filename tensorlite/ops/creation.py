"""New tensors: tl.tensor, from_numpy, zeros / ones / empty / full and their *_like and Tensor.new_*
forms, arange, linspace, eye, and the random ones (rand, randn, randint, randperm, *_like) drawn
on the device (seeded by tl.manual_seed).
"""
from __future__ import annotations

import numbers
from math import isfinite
from typing import TYPE_CHECKING

import numpy as np

from .. import dtype as dtypes
from .._core import (TensorBase, check_size, copy_of, dtype_of, fail, fits, full_storage, grad_flag, ints,
                     out_of_memory, resolve_device, shape_arg, sizes_arg, wrap)
from ..errors import ArgumentError, DTypeError, ShapeError
from ..generator import drawing_from

if TYPE_CHECKING:
    from ..tensor import Tensor


def tensor(data, dtype=None, device=None, requires_grad=False) -> Tensor:
    """A new tensor holding a copy of `data` (nested lists, numbers, numpy arrays, tensors)."""
    if isinstance(data, TensorBase):
        out = data.detach().to(device)  # device None: to() returns it as it is
        out = out._cast(dtype_of(dtype)) if dtype is not None else out
        out = copy_of(out) if out._storage is data._storage else out
    else:
        try:
            arr = np.asarray(data)
        except ValueError as e:  # ragged nesting
            raise ShapeError(f"tensor: cannot make a tensor of {type(data).__name__} data: {e}") from None
        if dtype is not None:
            dt = dtype_of(dtype)
        elif arr.dtype == np.float64 and not isinstance(data, (np.ndarray, np.generic)):
            dt = dtypes.get_default_dtype()  # Python floats default to float32, as PyTorch
        elif arr.dtype.kind == "O":
            raise DTypeError(f"tensor: cannot infer a dtype from {type(data).__name__} data")
        else:
            dt = dtype_of(arr.dtype)
        # an int that does not fit raises (PyTorch: overflow), never wraps
        if arr.dtype.kind in "iu" and dt.np.kind in "iu" and arr.dtype != dt.np and arr.size and not (
                fits(int(arr.min()), dt) and fits(int(arr.max()), dt)):
            raise ArgumentError(f"tensor: values {int(arr.min())}..{int(arr.max())} do not fit {dt.name}")
        if arr.dtype.kind in "USMmc":  # text, dates, complex numbers: no dtype of tensorlite holds them
            raise DTypeError(f"tensor: cannot make a {dt.name} tensor of {arr.dtype} data")
        if arr.dtype.kind == "O" and any(v is None for v in arr.flat):  # numpy would make it NaN
            raise DTypeError(f"tensor: None is not a value a {dt.name} tensor can hold")
        try:  # (np.ascontiguousarray would make a 0-d array 1-d)
            arr = arr.astype(dt.np, order="C", copy=False)
        except OverflowError:  # an object array: a Python int past what the dtype holds
            raise ArgumentError(f"tensor: a value of the {type(data).__name__} cannot be converted to {dt.name} "
                                "without overflow") from None
        except (TypeError, ValueError) as e:  # an object array of other things: ["a", 1], [[1, 2], "b"]
            raise DTypeError(f"tensor: cannot make a {dt.name} tensor of {type(data).__name__} data: {e}") from None
        dev = resolve_device(device)
        out = wrap(dev.from_cpu(arr.reshape(-1)), arr.shape, dt)
    out.requires_grad = grad_flag("tensor", out.dtype, requires_grad)
    return out


def from_numpy(a: np.ndarray, device=None) -> Tensor:
    """A tensor with a copy of `a`, keeping its dtype (float64 stays float64)."""
    return tensor(a, dtype=dtypes.get(a.dtype), device=device)


def _filled(op, shape, value, dtype, device, requires_grad):
    dev = resolve_device(device)
    check_size(op, shape, dtype, dev)
    try:
        storage = full_storage(op, dev, shape, value, dtype) if value is not None else dev.alloc_uninit(shape, dtype)
    except MemoryError as e:  # more than is free now (check_size allows up to the total)
        raise out_of_memory(op, shape, dtype, dev, e) from None
    out = wrap(storage, shape, dtype)
    out.requires_grad = grad_flag(op, dtype, requires_grad)
    return out


def zeros(*sizes, size=None, dtype=None, device=None, requires_grad=False):
    """A tensor of zeros (the default float dtype unless given), as torch.zeros.

    >>> import tensorlite as tl
    >>> tl.zeros(2, 3).shape
    tensorlite.Size([2, 3])
    """
    return _filled("zeros", sizes_arg("zeros", sizes, size), 0, dtype_of(dtype, op="zeros"), device, requires_grad)


def ones(*sizes, size=None, dtype=None, device=None, requires_grad=False):
    """A tensor of ones (the default float dtype unless given), as torch.ones.

    >>> import tensorlite as tl
    >>> tl.ones(2, dtype=tl.int64).tolist()
    [1, 1]
    """
    return _filled("ones", sizes_arg("ones", sizes, size), 1, dtype_of(dtype, op="ones"), device, requires_grad)


def empty(*sizes, size=None, dtype=None, device=None, requires_grad=False):
    """An uninitialised tensor (its values are arbitrary), as torch.empty.

    >>> import tensorlite as tl
    >>> tl.empty(2, 3).shape
    tensorlite.Size([2, 3])
    """
    return _filled("empty", sizes_arg("empty", sizes, size), None, dtype_of(dtype, op="empty"), device, requires_grad)


def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    """A tensor of shape `size` filled with fill_value (dtype from the value unless given), as torch.full.

    >>> import tensorlite as tl
    >>> tl.full((2,), 7).tolist()
    [7, 7]
    """
    return _filled("full", shape_arg((size,), "full"), fill_value, dtype_of(dtype, fill_value, "full"), device,
                   requires_grad)


def _like(fn, x, *args, dtype=None, device=None, requires_grad=False):
    dtype = x.dtype if dtype is None else dtype_of(dtype, op=f"{fn.__name__}_like")
    return fn(x.shape, *args, dtype=dtype, device=device or x._device, requires_grad=requires_grad)


def zeros_like(x, **kw):
    """zeros of x's shape, dtype and device (unless given), as torch.zeros_like.

    >>> import tensorlite as tl
    >>> tl.zeros_like(tl.tensor([1, 2])).tolist()
    [0, 0]
    """
    return _like(zeros, x, **kw)


def ones_like(x, **kw):
    """ones of x's shape, dtype and device (unless given), as torch.ones_like.

    >>> import tensorlite as tl
    >>> tl.ones_like(tl.tensor([1, 2])).tolist()
    [1, 1]
    """
    return _like(ones, x, **kw)


def empty_like(x, **kw):
    """An uninitialised tensor of x's shape, dtype and device (unless given), as torch.empty_like.

    >>> import tensorlite as tl
    >>> tl.empty_like(tl.zeros(2, 3)).shape
    tensorlite.Size([2, 3])
    """
    return _like(empty, x, **kw)


def full_like(x, fill_value, **kw):
    """fill_value in x's shape, dtype and device (unless given), as torch.full_like.

    >>> import tensorlite as tl
    >>> tl.full_like(tl.tensor([1, 2]), 5).tolist()
    [5, 5]
    """
    return _like(full, x, fill_value, **kw)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    """start, start + step, ... below end (int64 if all are integers), as torch.arange.

    >>> import tensorlite as tl
    >>> tl.arange(1, 7, 2).tolist()
    [1, 3, 5]
    """
    if end is None:
        start, end = 0, start
    if not all(isinstance(v, numbers.Real) and isfinite(v) for v in (start, end, step)) or step == 0 or \
            (end - start) * step < 0:
        raise ArgumentError(f"arange: start, end, step {(start, end, step)} must be finite numbers, the step "
                            "nonzero and of the sign of end - start")
    is_int = all(isinstance(v, numbers.Integral) for v in (start, end, step))
    dt = dtype_of(dtype, 0 if is_int else 0.0, "arange")
    dev = resolve_device(device)
    check_size("arange", (int(-((start - end) // step)),), dt, dev)  # the length, before numpy builds it
    vals = np.arange(start, end, step, dtype=np.int64 if is_int else np.float64)
    return tensor(vals.astype(dt.np), dtype=dt, device=dev, requires_grad=requires_grad)


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False):
    """`steps` evenly spaced values from start to end inclusive, as torch.linspace.

    >>> import tensorlite as tl
    >>> tl.linspace(0, 1, 5).tolist()
    [0.0, 0.25, 0.5, 0.75, 1.0]
    """
    dt, dev = dtype_of(dtype, 0.0, "linspace"), resolve_device(device)
    if not all(isinstance(v, numbers.Real) for v in (start, end)):
        raise DTypeError(f"linspace: start and end must be real numbers, got {(start, end)}")
    steps = check_size("linspace", (ints("linspace", "steps", steps),), dt, dev)[0]
    return tensor(np.linspace(float(start), float(end), steps), dtype=dt, device=dev, requires_grad=requires_grad)


def eye(n, m=None, dtype=None, device=None, requires_grad=False):
    """An n x m (m = n by default) identity matrix, as torch.eye.

    >>> import tensorlite as tl
    >>> tl.eye(2).tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    dt, dev = dtype_of(dtype, 0.0, "eye"), resolve_device(device)
    shape = check_size("eye", (ints("eye", "n", n), ints("eye", "m", n if m is None else m)), dt, dev)
    return tensor(np.eye(*shape), dtype=dt, device=dev, requires_grad=requires_grad)


def _random(op, draw, size, dtype, device, requires_grad, generator):  # rand / randn: `draw` on [0, 1) / N(0, 1)
    dt, shape, dev = dtype_of(dtype, 0.0, op), shape_arg(size, op), resolve_device(device)
    if not dt.is_floating_point:
        raise DTypeError(f"{op}: expected a floating dtype, got {dt.name}")
    with drawing_from(generator, dev, op):
        out = wrap(getattr(dev, draw)(check_size(op, shape, dt, dev), dt, 0.0, 1.0), shape, dt)
    out.requires_grad = requires_grad
    return out


def rand(*sizes, size=None, generator=None, dtype=None, device=None, requires_grad=False):
    """Uniform on [0, 1) from the device's counter-based generator (see manual_seed), or `generator`'s."""
    return _random("rand", "rand_uniform", sizes_arg("rand", sizes, size), dtype, device, requires_grad, generator)


def randn(*sizes, size=None, generator=None, dtype=None, device=None, requires_grad=False):
    """Standard normal samples from the device's counter-based generator (see manual_seed), as torch.randn.

    >>> import tensorlite as tl
    >>> tl.randn(2, 3).shape
    tensorlite.Size([2, 3])
    """
    return _random("randn", "rand_normal", sizes_arg("randn", sizes, size), dtype, device, requires_grad, generator)


def randint(low, high=None, size=(), dtype=None, device=None, *, generator=None):
    """Integers uniform on [low, high), drawn in float64 so every value is reachable."""
    if high is None or isinstance(high, (tuple, list)):  # randint(high), randint(high, size)
        low, high, size = 0, low, (size if high is None else high)
    low, high = ints("randint", "low", low), ints("randint", "high", high)
    if high <= low:
        raise ArgumentError(f"randint: empty range [{low}, {high})")
    dev, dt = resolve_device(device), dtype_of(dtype, 0, "randint")
    shape = check_size("randint", shape_arg((size,), "randint"), dtypes.float64, dev)
    with drawing_from(generator, dev, "randint"):
        u = wrap(dev.rand_uniform(shape, dtypes.float64, 0.0, 1.0), shape, dtypes.float64)
    v = (u * float(high - low)).floor()._cast(dtypes.int64) + int(low)
    v = v.minimum(high - 1)  # guards the u -> 1.0 rounding edge
    return v._cast(dt) if dtype is not None else v


def randperm(n, dtype=None, device=None, requires_grad=False, *, generator=None):
    """A random permutation of 0..n-1 (int64), as torch.randperm: the order of n uniform
    float64 draws, made on the device.

    >>> import tensorlite as tl
    >>> sorted(tl.randperm(5).tolist())
    [0, 1, 2, 3, 4]
    """
    n = ints("randperm", "n", n, low=0)
    dev, dt = resolve_device(device), dtype_of(dtype, 0, "randperm")
    if requires_grad:
        raise ArgumentError("randperm: an integer tensor cannot require grad")
    with drawing_from(generator, dev, "randperm"):
        u = wrap(dev.rand_uniform((n,), dtypes.float64, 0.0, 1.0), (n,), dtypes.float64)
    out = u.argsort()
    return out._cast(dt) if dtype is not None else out


def _new(fn, x, size, *args, dtype=None, device=None, requires_grad=False):
    return fn(shape_arg(size, fn.__name__), *args, dtype=x.dtype if dtype is None else dtype,
              device=device or x._device, requires_grad=requires_grad)


def new_zeros(x: Tensor, *size, **kw) -> Tensor:
    """Zeros with x's dtype and device (unless given).

    >>> import tensorlite as tl
    >>> tl.ones(1, dtype=tl.int64).new_zeros(2).tolist()
    [0, 0]"""
    return _new(zeros, x, size, **kw)


def new_ones(x: Tensor, *size, **kw) -> Tensor:
    """Ones with x's dtype and device (unless given).

    >>> import tensorlite as tl
    >>> tl.zeros(1).new_ones(2).tolist()
    [1.0, 1.0]"""
    return _new(ones, x, size, **kw)


def new_empty(x: Tensor, *size, **kw) -> Tensor:
    """An uninitialized tensor with x's dtype and device (unless given).

    >>> import tensorlite as tl
    >>> tl.zeros(1).new_empty(2, 3).shape
    tensorlite.Size([2, 3])"""
    return _new(empty, x, size, **kw)


def new_full(x: Tensor, size, fill_value, **kw) -> Tensor:
    """`fill_value` everywhere, with x's dtype and device (unless given).

    >>> import tensorlite as tl
    >>> tl.zeros(1, dtype=tl.int64).new_full((2,), 7).tolist()
    [7, 7]"""
    return _new(full, x, (size,), fill_value, **kw)


def new_tensor(x: Tensor, data, dtype=None, device=None, requires_grad=False) -> Tensor:
    """A copy of `data` with x's dtype and device (unless given).

    >>> import tensorlite as tl
    >>> tl.zeros(1, dtype=tl.int64).new_tensor([1.7]).tolist()
    [1]"""
    return tensor(data, x.dtype if dtype is None else dtype, device or x._device, requires_grad)


def type_as(x: Tensor, other: Tensor) -> Tensor:
    """x cast to other's dtype.

    >>> import tensorlite as tl
    >>> tl.tensor([1.5]).type_as(tl.tensor([1])).tolist()
    [1]"""
    return x.to(other.dtype)


def _random_like(fn, x, dtype=None, **kw):
    op = f"{fn.__name__}_like"
    dt = x.dtype if dtype is None else dtype_of(dtype, op=op)
    if not dt.is_floating_point:
        fail(DTypeError, op, f"expected a floating dtype, got {dt.name}", input=x)
    return _like(fn, x, dtype=dt, **kw)


def rand_like(x: Tensor, **kw) -> Tensor:
    """rand with x's shape, dtype and device (unless given).

    >>> import tensorlite as tl
    >>> tl.rand_like(tl.zeros(2, 3)).shape
    tensorlite.Size([2, 3])"""
    return _random_like(rand, x, **kw)


def randn_like(x: Tensor, **kw) -> Tensor:
    """randn with x's shape, dtype and device (unless given).

    >>> import tensorlite as tl
    >>> tl.randn_like(tl.zeros(2, 3)).shape
    tensorlite.Size([2, 3])"""
    return _random_like(randn, x, **kw)


def randint_like(x: Tensor, low=0, high=None, *, dtype=None, device=None) -> Tensor:
    """Integers uniform on [low, high) with x's shape, dtype and device (unless given).

    >>> import tensorlite as tl
    >>> tl.randint_like(tl.zeros(3, dtype=tl.int64), 1, 2).tolist()
    [1, 1, 1]"""
    low, high = (0, low) if high is None else (low, high)
    return randint(low, high, x.shape, dtype=x.dtype if dtype is None else dtype, device=device or x._device)


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """`data` itself when it is a tensor of that dtype and device (else converted); other data is copied.

    >>> import tensorlite as tl
    >>> x = tl.zeros(2); tl.as_tensor(x) is x
    True"""
    return data.to(dtype=dtype, device=device) if isinstance(data, TensorBase) else tensor(data, dtype, device)


def is_tensor(obj) -> bool:
    """Whether obj is a tensorlite Tensor.

    >>> import tensorlite as tl
    >>> tl.is_tensor(tl.zeros(1)), tl.is_tensor([1])
    (True, False)"""
    return isinstance(obj, TensorBase)


def numel(x: Tensor) -> int:
    """The number of elements.

    >>> import tensorlite as tl
    >>> tl.numel(tl.zeros(2, 3))
    6"""
    return x.numel()


class CreationMethods:
    """The Tensor methods of this family (tensorlite.tensor.Tensor inherits them)."""
    __slots__ = ()

    new_zeros, new_ones, new_full, new_empty, new_tensor = new_zeros, new_ones, new_full, new_empty, new_tensor
    type_as = type_as
