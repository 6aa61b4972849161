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

from . import backend, dtype as dtypes
from .autograd import no_grad
from .errors import ArgumentError, DTypeError
from .ops.joins import stack

_state = threading.local()  # .mode: (device type, dtype) of the innermost enabled region, or None


class autocast:
    """Context manager and decorator: mixed precision for tensors on `device_type` ('cpu', 'cuda',
    'rocm', ...). `dtype` defaults to float16 on GPUs and bfloat16 on cpu, as PyTorch's."""

    def __init__(self, device_type: str, dtype=None, enabled: bool = True, cache_enabled=None):
        names = backend.registered()
        if device_type not in names:
            raise ArgumentError(f"autocast: device_type must be one of {names}, got {device_type!r}")
        default = dtypes.bfloat16 if device_type == "cpu" else dtypes.float16
        dtype = dtypes.get(dtype) if dtype is not None else default
        if dtype not in dtypes.HALVES:
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
    return tensors if mode is None else _cast(tensors, (dtypes.float32,) + dtypes.HALVES, mode[1])


def full_precision(*tensors):
    """The operands of an op that autocast runs in float32: 16-bit ones on the autocast device
    as float32. Outside autocast, the operands unchanged."""
    return tensors if getattr(_state, "mode", None) is None else _cast(tensors, dtypes.HALVES, dtypes.float32)


class GradScaler:
    """Loss scaling for float16 training, as torch.amp.GradScaler: `scale(loss).backward()`
    makes the gradients of a loss multiplied by the scale (small float16 gradients stay above
    underflow), `step(optimizer)` divides them back (`unscale_`) and steps unless one is inf or
    NaN, `update()` halves the scale after such a step and doubles it after `growth_interval`
    clean ones. Checking the gradients reads one flag per device on the host, as torch's does.

    >>> import tensorlite as tl
    >>> w = tl.nn.Parameter(tl.ones(2))
    >>> opt, scaler = tl.optim.SGD([w], lr=0.1), tl.amp.GradScaler("cpu", init_scale=1024.0)
    >>> scaler.scale((w * 3).sum()).backward()
    >>> w.grad.tolist(), scaler.step(opt), w.tolist()
    ([3072.0, 3072.0], None, [0.699999988079071, 0.699999988079071])
    >>> scaler.update(); scaler.get_scale()
    1024.0
    """

    def __init__(self, device: str = "cuda", init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True):
        if not growth_factor > 1.0:
            raise ArgumentError(f"GradScaler: growth_factor should be > 1, got {growth_factor}")
        if not 0.0 < backoff_factor < 1.0:
            raise ArgumentError(f"GradScaler: backoff_factor should be < 1 and > 0, got {backoff_factor}")
        if isinstance(growth_interval, bool) or not isinstance(growth_interval, int) or growth_interval < 1:
            raise ArgumentError(f"GradScaler: growth_interval should be a positive integer, got {growth_interval!r}")
        self.device, self._enabled = device, bool(enabled)
        self._scale, self._growth_tracker = float(init_scale), 0
        self._growth_factor, self._backoff_factor = growth_factor, backoff_factor
        self._growth_interval = growth_interval
        self._unscaled = {}  # id(optimizer) -> whether it found an inf/NaN, since the last update()

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled, as torch's)."""
        return self._scale if self._enabled else 1.0

    def scale(self, outputs):
        """outputs (a tensor, or lists / tuples of them) times the scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        return outputs * self._scale

    def unscale_(self, optimizer) -> None:
        """Divide the optimizer's gradients by the scale, in place (before clipping them, say);
        at most once per optimizer between update()s."""
        if not self._enabled:
            return
        if id(optimizer) in self._unscaled:
            raise ArgumentError("GradScaler: unscale_() has already been called on this optimizer since the last "
                                "update()")
        inv, finite = 1.0 / self._scale, {}
        with no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad.mul_(inv)
                        finite.setdefault(p.grad._device, []).append(p.grad.isfinite().all())
        self._unscaled[id(optimizer)] = not all(bool(stack(flags).all().item()) for flags in finite.values())

    def step(self, optimizer, *args, **kwargs):
        """optimizer.step(*args, **kwargs) after unscale_ (where not done yet), skipped (None)
        where a gradient is inf or NaN."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if id(optimizer) not in self._unscaled:
            self.unscale_(optimizer)
        return None if self._unscaled[id(optimizer)] else optimizer.step(*args, **kwargs)

    def update(self, new_scale=None) -> None:
        """The scale for the next iteration: new_scale where given, else backed off after a
        skipped step and grown after growth_interval steps in a row without one."""
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale.item() if hasattr(new_scale, "item") else new_scale)
        elif any(self._unscaled.values()):
            self._scale *= self._backoff_factor
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self._growth_interval:
                self._scale *= self._growth_factor
                self._growth_tracker = 0
        self._unscaled = {}

    def state_dict(self) -> dict:
        """torch's keys: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker."""
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor, "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval, "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state: dict) -> None:
        if not self._enabled:
            return
        if not state:
            raise ArgumentError("GradScaler: the state_dict is empty (the scaler that saved it was disabled)")
        self._scale, self._growth_tracker = float(state["scale"]), int(state["_growth_tracker"])
        self._growth_factor, self._backoff_factor = float(state["growth_factor"]), float(state["backoff_factor"])
        self._growth_interval = int(state["growth_interval"])
