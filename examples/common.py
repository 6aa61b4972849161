"""Helpers shared by the examples: device/dtype command-line options, token-id input
handling and a progress bar that degrades gracefully when tqdm is missing."""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import tensorlite as tl
from tensorlite.backend import best_device, get_device


def add_device_args(parser: argparse.ArgumentParser, dtypes=("f32", "bf16")) -> None:
    parser.add_argument("--device", default=None,
                        help="cpu, cuda, cuda:1, rocm, ... (default: the best available: "
                             "cuda, then rocm, then cpu)")
    if dtypes:
        parser.add_argument("--dtype", default=dtypes[0], choices=dtypes, help="compute dtype")


def resolve_device(name) -> str:
    """`name`, or the best available device; fails early with the backend's own reason."""
    name = name or best_device()
    backend = name.split(":")[0]
    status = tl.backends.available().get(backend)
    if status is None:
        sys.exit(f"unknown device {name!r}; registered: {sorted(tl.backends.available())}")
    if status is not True:
        sys.exit(f"device {name!r} is unavailable here: {status}")
    return name


def warm_up_kernels(device: str) -> None:
    """On a GPU device, compile (or load from the disk cache) every kernel family at once,
    in parallel where the compiler allows (NVRTC does): on a fresh machine each family
    otherwise compiles on first use, one after another (over 100 s for train_gpt.py on the
    H100 machine, 41.6 s this way). Nothing to do on cpu."""
    if device.split(":")[0] == "cpu":
        return
    print(f"{device}: loading GPU kernels (compiled on a machine's first run, then cached)", flush=True)
    start = time.perf_counter()
    get_device(device).warmup()
    print(f"{device}: kernels ready in {time.perf_counter() - start:.1f} s", flush=True)


def token_ids(tokens, device) -> tl.Tensor:
    """A list, numpy array or Tensor of token ids as an int64 Tensor on `device`."""
    if isinstance(tokens, tl.Tensor):
        if tokens.dtype.is_floating_point:
            raise TypeError(f"token ids must be integers, got a {tokens.dtype} Tensor")
        return tokens.to(device, tl.int64)
    arr = np.asarray(tokens)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"token ids must be integers, got an array of {arr.dtype}")
    return tl.tensor(arr.astype(np.int64), device=device)


def progress(iterable=None, disable=None, **kwargs):
    """tqdm's bar when installed (shown only on a terminal: disable=None), else a plain
    stand-in (iterates `iterable`; no-op `update`/`set_postfix`/`stop_early`, a printing
    `write`), so the loop body is the same either way. disable=True turns the bar off.
    A manual bar (iterable None, total=N, update() per step) can `stop_early()`: the bar
    then ends where the loop did, not at a total it never reached."""
    if disable:
        return _Plain(iterable)
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _Plain(iterable)
    bar = tqdm(iterable, disable=None, **kwargs)
    bar.stop_early = lambda: (setattr(bar, "total", bar.n), bar.refresh())
    return bar


class _Plain:
    def __init__(self, iterable):
        self.iterable = iterable

    def __iter__(self):
        return iter(self.iterable)

    def update(self, n=1):
        pass

    def set_postfix(self, *args, **kwargs):
        pass

    def stop_early(self):
        pass

    def close(self):
        pass

    @staticmethod
    def write(line):
        print(line, flush=True)
