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


def progress(iterable=None, disable=None, every=5.0, **kwargs):
    """A progress display from the first second, on a terminal or not: tqdm's bar on a terminal
    when tqdm is installed; otherwise (a log file, a pipe, CI, no tqdm) a plain line every `every`
    seconds ("train 12/1200 step 0.95 s/step loss=2.2013"). disable=True turns both off. The loop
    body is the same either way: iterate it or call update(); set_postfix, write, close. A manual
    bar (iterable None, total=N) can `stop_early()`: it then ends where the loop did."""
    if disable:
        return _Lines(iterable, every=None)
    try:
        from tqdm.auto import tqdm
    except ImportError:
        tqdm = None
    if tqdm is None or not sys.stderr.isatty():
        return _Lines(iterable, every=every, **kwargs)
    bar = tqdm(iterable, **kwargs)
    bar.stop_early = lambda: (setattr(bar, "total", bar.n), bar.refresh())
    return bar


class _Lines:
    """progress() where no bar can be drawn: a line at most every `every` seconds (None: silent)."""

    def __init__(self, iterable=None, every=5.0, total=None, initial=0, desc="", unit="it", **_):
        self.iterable, self.every, self.n, self.desc, self.unit = iterable, every, initial, desc, unit
        self.total = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)
        self.postfix, self.first = "", initial
        self.start = self.last = time.perf_counter()

    def __iter__(self):
        for item in self.iterable:
            yield item
            self.update()

    def update(self, n=1):
        self.n += n
        now = time.perf_counter()
        if self.every is not None and now - self.last >= self.every:
            self.last = now
            rate = (now - self.start) / max(1, self.n - self.first)
            total = f"/{self.total}" if self.total else ""
            print(f"{self.desc} {self.n}{total} {self.unit} {rate:.3g} s/{self.unit}{self.postfix}", flush=True)

    def set_postfix(self, **kwargs):
        self.postfix = "".join(f" {k}={v}" for k, v in kwargs.items())

    def stop_early(self):
        pass

    def close(self):
        pass

    @staticmethod
    def write(line):
        print(line, flush=True)
