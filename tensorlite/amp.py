"""Automatic mixed precision: `tl.autocast`, as `torch.autocast`.

Inside `with tl.autocast("cuda", dtype=tl.bfloat16):` the ops that gain from low precision
(matmul, linear, conv, attention) run float32 operands of tensors on that device type in
`dtype`, and the ops that need range or accuracy (softmax, log_softmax, the norms, the losses)
run 16-bit operands in float32 and return float32, as PyTorch's autocast op lists do. Gradients
flow back through the casts, so parameters stay float32. Unlike PyTorch, casts of weights are
not cached within a region (`cache_enabled` is accepted and ignored).

>>> import tensorlite as tl
>>> a, b = tl.ones(2, 3, device="cpu"), tl.ones(3, 4, device="cpu")
>>> with tl.autocast("cpu", dtype=tl.bfloat16):
...     c = a @ b
...     p = tl.nn.functional.softmax(c, -1)
>>> c.dtype, p.dtype
(tensorlite.bfloat16, tensorlite.float32)
"""
from __future__ import annotations

import functools
import threading

from . import backend, dtype as _dt
from .errors import ArgumentError, DTypeError

_state = threading.local()  # .mode: (device type, dtype) of the innermost enabled region, or None
_LOW = (_dt.float16, _dt.bfloat16)


class autocast:
    """Context manager and decorator: mixed precision for tensors on `device_type` ('cpu', 'cuda',
    'rocm', ...). `dtype` defaults to float16 on GPUs and bfloat16 on cpu, as PyTorch's."""

    def __init__(self, device_type: str, dtype=None, enabled: bool = True, cache_enabled=None):
        names = backend.registered()
        if device_type not in names:
            raise ArgumentError(f"autocast: device_type must be one of {names}, got {device_type!r}")
        dtype = _dt.get(dtype) if dtype is not None else (_dt.bfloat16 if device_type == "cpu" else _dt.float16)
        if dtype not in _LOW:
            raise DTypeError(f"autocast: dtype must be float16 or bfloat16, got {dtype.name}")
        self.device_type, self.dtype, self.enabled = device_type, dtype, enabled

    def __enter__(self):
        self._outer = getattr(_state, "mode", None)
        _state.mode = (self.device_type, self.dtype) if self.enabled else None
        return self

    def __exit__(self, *exc):
        _state.mode = self._outer

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with autocast(self.device_type, self.dtype, self.enabled):
                return fn(*args, **kwargs)
        return wrapper


def is_autocast_enabled(device_type: str = None) -> bool:
    """Whether an autocast region is active (for device_type, if given), as torch.is_autocast_enabled.

    >>> import tensorlite as tl
    >>> tl.amp.is_autocast_enabled()
    False
    """
    mode = getattr(_state, "mode", None)
    return mode is not None and (device_type is None or mode[0] == device_type)


def _cast(tensors, cast_from, dtype):
    """tensors with the ones on the autocast device whose dtype is in cast_from cast to dtype
    (anything else, None and non-tensors included, as it is)."""
    kind = _state.mode[0]
    return tuple(t._cast(dtype) if getattr(t, "dtype", None) in cast_from and t._device.name == kind else t
                 for t in tensors)


def low_precision(*tensors):
    """The operands of a matmul-like op: float32 ones on the autocast device in its dtype.
    Outside autocast, the operands unchanged."""
    mode = getattr(_state, "mode", None)
    return tensors if mode is None else _cast(tensors, (_dt.float32,) + _LOW, mode[1])


def full_precision(*tensors):
    """The operands of an op that autocast runs in float32: 16-bit ones on the autocast device
    as float32. Outside autocast, the operands unchanged."""
    return tensors if getattr(_state, "mode", None) is None else _cast(tensors, _LOW, _dt.float32)
