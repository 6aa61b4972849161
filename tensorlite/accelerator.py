"""torch.accelerator: the GPU device a program should use, if any, without naming a platform.

tensorlite's accelerator is the best GPU device that can run here, `cuda` before `rocm` (as
tl.backend.best_device); the emulated AMD platform (`amdemu`) is never chosen, and cpu is not an
accelerator. tensorlite has no per-process "current device": each device's default is ordinal 0.

>>> import tensorlite as tl
>>> device = tl.accelerator.current_accelerator() if tl.accelerator.is_available() else tl.device("cpu")
>>> tl.zeros(2, device=device).device.type == device.type
True
"""
from __future__ import annotations

from . import backend
from .errors import DeviceError


def _name():
    best = backend.best_device()
    return None if best == "cpu" else best


def is_available() -> bool:
    """Whether a GPU device (cuda or rocm) can run here; tl.backends.available() says why not."""
    return _name() is not None


def current_accelerator(check_available: bool = False):
    """The accelerator's tl.device (`device(type='cuda')`), None where there is none (either
    way of check_available: tensorlite's only accelerators are those that can run)."""
    name = _name()
    return None if name is None else backend.Device(name)


def device_count() -> int:
    """The number of GPUs the accelerator sees (0 without one)."""
    name = _name()
    return 0 if name is None else int(backend.get_device(f"{name}:0").platform.init())


def _require(what: str) -> str:
    name = _name()
    if name is None:
        raise DeviceError(f"tl.accelerator.{what}: no accelerator (a cuda or rocm GPU) can run here; "
                          "tl.backends.available() says why")
    return name


def current_device_index() -> int:
    """The accelerator's device index: 0 (tensorlite's default ordinal); raises without an accelerator, as torch."""
    _require("current_device_index")
    return 0


current_device_idx = current_device_index  # torch's older name


def synchronize(device=None) -> None:
    """Wait until the accelerator's queued work has finished (device: an index, 'cuda:1', a tl.device;
    default its device 0); raises without an accelerator, as torch."""
    name = _require("synchronize")
    if device is None or (isinstance(device, int) and not isinstance(device, bool)):
        device = f"{name}:{device or 0}"
    backend.get_device(str(backend.Device(device))).synchronize()
