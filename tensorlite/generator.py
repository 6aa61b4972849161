"""tl.Generator, as torch.Generator: a random-number generator of one device with its own seed and
state, passed to the random ops (`generator=`: rand, randn, randint, randperm, multinomial, the
samplers, DataLoader, random_split) so that their draws do not touch, and are not touched by,
the device's default generator (tl.manual_seed's).

A Generator keeps its state as the bytes the device's generator has (get_rng_state's); an op
given one runs with the device's generator set to that state, and the state it leaves behind
is the Generator's next one. The same seed gives the same draws, on a Generator or on the
device after tl.manual_seed, but not PyTorch's numbers.

>>> import tensorlite as tl
>>> g = tl.Generator().manual_seed(7)
>>> a = tl.rand(3, generator=g); _ = tl.rand(5)     # the default generator draws between
>>> b = tl.rand(3, generator=tl.Generator().manual_seed(7))
>>> a.tolist() == b.tolist()
True
"""
from __future__ import annotations

import contextlib
import secrets

from ._core import resolve_device, rng_state_bytes, rng_state_tensor
from .backend import Device
from .errors import ArgumentError, DeviceError

DEFAULT_SEED = 67280421310721  # torch.Generator()'s initial seed


class Generator:
    """A generator on `device` (default cpu), seeded with DEFAULT_SEED until manual_seed or seed."""

    def __init__(self, device="cpu"):
        self._dev = resolve_device(device)
        self._state = None
        self._initial = DEFAULT_SEED

    @property
    def device(self) -> Device:
        return Device(str(self._dev))

    def manual_seed(self, seed) -> "Generator":
        seed = int(seed)
        saved = self._dev.get_rng_state()
        try:
            self._dev.set_seed(seed)
            self._state = self._dev.get_rng_state()
        finally:
            self._dev.set_rng_state(saved)
        self._initial = seed
        return self

    def seed(self) -> int:
        """Seed from the operating system's entropy; returns the seed."""
        seed = secrets.randbits(63)
        self.manual_seed(seed)
        return seed

    def initial_seed(self) -> int:
        return self._initial

    def get_state(self):
        """The state as a 1-D uint8 tensor on cpu (set_state takes it back)."""
        return rng_state_tensor(self._current())

    def set_state(self, new_state) -> "Generator":
        state = rng_state_bytes("Generator.set_state", new_state)
        saved = self._dev.get_rng_state()
        try:
            self._dev.set_rng_state(state)  # checks the size for this device
        finally:
            self._dev.set_rng_state(saved)
        self._state = state
        return self

    def _current(self) -> bytes:
        if self._state is None:
            self.manual_seed(self._initial)
        return self._state

    def __repr__(self):
        return f"<tensorlite.Generator device={self._dev}>"


def check_generator(op: str, generator) -> None:
    """A random op's `generator=`: None or a tl.Generator."""
    if generator is not None and not isinstance(generator, Generator):
        raise ArgumentError(f"{op}: generator must be a tl.Generator, got {type(generator).__name__}")


@contextlib.contextmanager
def drawing_from(generator, dev, op: str):
    """Run a random op's draws on `dev` from `generator` (None: the device's own generator)."""
    check_generator(op, generator)
    if generator is None:
        yield
        return
    if generator._dev is not dev:
        raise DeviceError(f"{op}: the generator is on {generator._dev}, the op on {dev}: give a Generator of the op's "
                          "device")
    saved = dev.get_rng_state()
    dev.set_rng_state(generator._current())
    try:
        yield
        generator._state = dev.get_rng_state()
    finally:
        dev.set_rng_state(saved)
