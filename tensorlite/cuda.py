"""torch.cuda's everyday questions, for tensorlite's `cuda` device: whether it can run here,
how many GPUs there are, their names, and waiting for queued work.

>>> import tensorlite as tl
>>> device = "cuda" if tl.cuda.is_available() else "cpu"
>>> tl.zeros(2, device=device).device.type == device
True
"""
from __future__ import annotations

from . import backend
from ._core import get_rng_state as device_rng_state, seed_device, set_rng_state as set_device_rng_state
from .errors import DeviceError


def is_available() -> bool:
    """Whether the `cuda` device can run here (tl.backends.available() says why not)."""
    return backend.available().get("cuda") is True


def device_count() -> int:
    """The number of GPUs the `cuda` device sees (0 where it cannot run)."""
    if not is_available():
        return 0
    return int(backend.get_device("cuda:0").platform.init())


def manual_seed(seed: int) -> None:
    """Seed cuda:0's generator, as torch.cuda.manual_seed (ignored where cuda cannot run)."""
    if is_available():
        seed_device(backend.get_device("cuda:0"), seed)


def manual_seed_all(seed: int) -> None:
    """Seed every GPU's generator, as torch.cuda.manual_seed_all (ignored where cuda cannot run)."""
    for i in range(device_count()):
        seed_device(backend.get_device(f"cuda:{i}"), seed)


def get_rng_state(device="cuda"):
    """A GPU's generator state as a uint8 tensor on `cpu` (default cuda:0), as torch.cuda.get_rng_state."""
    return device_rng_state(_cuda(device))


def get_rng_state_all() -> list:
    """Every GPU's generator state (an empty list where cuda cannot run), as torch.cuda.get_rng_state_all."""
    return [device_rng_state(f"cuda:{i}") for i in range(device_count())]


def set_rng_state(new_state, device="cuda") -> None:
    """Put a GPU's generator (default cuda:0) back in a state get_rng_state returned."""
    set_device_rng_state(new_state, _cuda(device))


def set_rng_state_all(new_states) -> None:
    """Put each GPU's generator back in its state of get_rng_state_all, as torch.cuda.set_rng_state_all."""
    for i, state in enumerate(new_states):
        set_device_rng_state(state, f"cuda:{i}")


def get_device_name(device=None) -> str:
    """The GPU's name, as its driver reports it (default: cuda:0)."""
    return str(backend.get_device(_cuda(device)).props.get("name"))


def synchronize(device=None) -> None:
    """Wait until the GPU's queued work has finished (default: cuda:0)."""
    backend.get_device(_cuda(device)).synchronize()


def _cuda(device) -> str:
    """The `cuda` device that `device` (None, an ordinal, 'cuda:N' or a tl.device) names."""
    if device is None:
        return "cuda:0"
    if isinstance(device, int) and not isinstance(device, bool):
        return f"cuda:{device}"
    name = backend.Device(device)
    if name.type != "cuda":
        raise DeviceError(f"tl.cuda: {name!r} is not a cuda device")
    return str(name)
