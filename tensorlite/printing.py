"""How a tensor prints: PyTorch's repr, its number formatting, summarisation and print options.

The rules are torch's (torch/_tensor_str.py), so a program's printed tensors read the same after
`import tensorlite as torch`:

- one format for every element of a tensor, picked from its nonzero finite values: integers
  written as `2.`, fixed point with `precision` digits (`2.5000`), or scientific (`2.5000e+08`)
  when the largest is over 1e3 times the smallest, over 1e8, or the smallest is under 1e-4;
  elements right-aligned to the widest, lines wrapped at `linewidth`;
- over `threshold` elements, each dim longer than 2 * `edgeitems` shows its first and last
  `edgeitems` around `...`;
- suffixes only where torch prints them: `device=` off the cpu, `dtype=` for a dtype other than
  the default float, int64 and bool, `size=` for an empty tensor that is not 1-d, `grad_fn=` for
  a result of a recorded op (tensorlite's op name, e.g. `<SumBackward>`: torch's name has a
  version number, `<SumBackward0>`, and names some ops differently) and `requires_grad=True`
  for a leaf that needs a gradient.

>>> import tensorlite as tl
>>> tl.tensor([1.0, 2.5])
tensor([1.0000, 2.5000])
>>> tl.tensor([1, 2, 3], dtype=tl.int32)
tensor([1, 2, 3], dtype=tensorlite.int32)
>>> with tl.printoptions(precision=2):
...     tl.tensor([1.12345])
tensor([1.12])
"""
from __future__ import annotations

import contextlib
import dataclasses
import math

import numpy as np

from . import dtype as dtypes
from .errors import ArgumentError
from .ops.joins import cat

_IMPLIED_DTYPES = (dtypes.int64, dtypes.bool_)  # printed without dtype= (their values say them), as the default float


@dataclasses.dataclass
class PrintOptions:
    """tl.set_printoptions's settings, torch's defaults (sci_mode None: chosen per tensor)."""
    precision: int = 4
    threshold: float = 1000
    edgeitems: int = 3
    linewidth: int = 80
    sci_mode: object = None


_OPTIONS = PrintOptions()
_PROFILES = {"default": PrintOptions(), "short": PrintOptions(precision=2, edgeitems=2),
             "full": PrintOptions(threshold=math.inf)}


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None, sci_mode=None):
    """Set how tensors print, as torch.set_printoptions: `profile` ('default', 'short', 'full')
    first, then each option given; `sci_mode` (True, False, or None for chosen per tensor) is
    set on every call, as torch's.

    >>> import tensorlite as tl
    >>> tl.set_printoptions(threshold=5)
    >>> tl.arange(10)
    tensor([0, 1, 2,  ..., 7, 8, 9])
    >>> tl.set_printoptions(profile="default")
    >>> tl.arange(10)
    tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    """
    if profile is not None:
        if profile not in _PROFILES:
            raise ArgumentError(f"set_printoptions: profile={profile!r}; expected one of {sorted(_PROFILES)}")
        base = _PROFILES[profile]
        _OPTIONS.precision, _OPTIONS.threshold = base.precision, base.threshold
        _OPTIONS.edgeitems, _OPTIONS.linewidth = base.edgeitems, base.linewidth
    for name, value in (("precision", precision), ("threshold", threshold), ("edgeitems", edgeitems),
                        ("linewidth", linewidth)):
        if value is not None:
            setattr(_OPTIONS, name, value)
    _OPTIONS.sci_mode = sci_mode


def get_printoptions() -> dict:
    """The current print options, a dict that set_printoptions(**it) takes back.

    >>> import tensorlite as tl
    >>> tl.get_printoptions()["threshold"]
    1000
    """
    return dataclasses.asdict(_OPTIONS)


@contextlib.contextmanager
def printoptions(**options):
    """set_printoptions(**options) inside a `with` block, the previous options after it."""
    old = get_printoptions()
    set_printoptions(**options)
    try:
        yield
    finally:
        set_printoptions(**old)


class _Formatter:
    """One element format for a whole tensor, chosen from the (summarised) values as torch's."""

    def __init__(self, a: np.ndarray, floating: bool):
        self.floating, self.int_mode, self.sci_mode, self.width = floating, True, False, 1
        p = _OPTIONS.precision
        if not floating:
            self.width = max([len(str(v)) for v in a.ravel().tolist()], default=1)
            return
        values = a[np.isfinite(a) & (a != 0)]
        if values.size == 0:  # only zeros, nans and infs: `0.`, `nan`
            return
        magnitudes = np.abs(values)
        lo, hi = float(magnitudes.min()), float(magnitudes.max())
        self.int_mode = bool(np.all(values == np.ceil(values)))
        self.sci_mode = (hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4) if _OPTIONS.sci_mode is None \
            else _OPTIONS.sci_mode
        if self.sci_mode:
            texts = [f"{v:.{p}e}" for v in values.tolist()]
        elif self.int_mode:
            texts = [f"{v:.0f}." for v in values.tolist()]  # the '.' says floating
        else:
            texts = [f"{v:.{p}f}" for v in values.tolist()]
        self.width = max(len(s) for s in texts)

    def format(self, v) -> str:
        if not self.floating:
            text = str(v)
        elif self.sci_mode:
            text = f"{v:.{_OPTIONS.precision}e}"
        elif self.int_mode:
            text = f"{v:.0f}" + ("" if math.isinf(v) or math.isnan(v) else ".")
        else:
            text = f"{v:.{_OPTIONS.precision}f}"
        return text.rjust(self.width)


def _summarised(t, edge: int):
    """t with each dim longer than 2 * edge cut to its first and last `edge` (on t's device, so
    only what prints leaves it), and which dims were cut."""
    cut = []
    for d, n in enumerate(t.shape):
        cut.append(n > 2 * edge)
        if cut[-1]:
            t = cat([t.narrow(d, 0, edge), t.narrow(d, n - edge, edge)], d)
    return t, cut


def _body(a: np.ndarray, cut, fmt: _Formatter, indent: int) -> str:
    """The bracketed text of host array `a` (dims cut where `cut` says), starting at column `indent`."""
    edge = _OPTIONS.edgeitems
    if a.ndim == 0:
        return fmt.format(a.item())
    if a.ndim == 1:
        if cut[0] and not edge:
            items = ["..."]
        elif cut[0]:
            items = [fmt.format(v) for v in a[:edge].tolist()] + [" ..."] + [
                fmt.format(v) for v in a[len(a) - edge:].tolist()]
        else:
            items = [fmt.format(v) for v in a.tolist()]
        per_line = max(1, (_OPTIONS.linewidth - indent) // (fmt.width + 2))
        lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
        return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"
    rows = [_body(a[i], cut[1:], fmt, indent + 1) for i in range(a.shape[0])]
    if cut[0]:
        rows = rows[:edge] + ["..."] + rows[len(rows) - edge:]
    return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(rows) + "]"


def _with_suffixes(text: str, suffixes, indent: int) -> str:
    """`text, suffix, ...)`, a suffix on a line of its own where the line would pass linewidth."""
    parts = [text]
    line = len(text) - text.rfind("\n") + 1
    for s in suffixes:
        if line + len(s) + 2 > _OPTIONS.linewidth:
            parts.append(",\n" + " " * indent + s)
            line = indent + len(s)
        else:
            parts.append(", " + s)
            line += len(s) + 2
    return "".join(parts) + ")"


def _grad_fn_name(node) -> str:
    name = "".join(w[:1].upper() + w[1:] for w in node.name.split("_"))
    return name if name.endswith("Backward") else name + "Backward"


def tensor_repr(t) -> str:
    """torch's repr of tensor t: `tensor([1., 2.])`, `tensor(94.)`, `tensor([1, 2], dtype=tensorlite.int32)`."""
    prefix = "tensor("
    indent = len(prefix)
    suffixes = [f"device='{t.device}'"] if t.device.type != "cpu" else []
    default = dtypes.get_default_dtype()
    if t.numel() == 0:
        suffixes += [f"size={tuple(t.shape)}"] if t.ndim != 1 else []
        suffixes += [f"dtype={t.dtype}"] if t.dtype is not default else []
        text = "[]"
    else:
        suffixes += [] if _OPTIONS.edgeitems else [f"size={tuple(t.shape)}"]
        suffixes += [] if t.dtype is default or t.dtype in _IMPLIED_DTYPES else [f"dtype={t.dtype}"]
        x = t.detach()
        cut = [False] * x.ndim
        if x.numel() > _OPTIONS.threshold:
            x, cut = _summarised(x, _OPTIONS.edgeitems)
        a = x.numpy()
        if t.dtype.is_floating_point:
            a = a.astype(np.float64)  # exact for every float dtype (bf16 too); Python's float formatting
        text = _body(a, cut, _Formatter(a, t.dtype.is_floating_point), indent)
    if t.grad_fn is not None:
        suffixes.append(f"grad_fn=<{_grad_fn_name(t.grad_fn)}>")
    elif t.requires_grad:
        suffixes.append("requires_grad=True")
    return _with_suffixes(prefix + text, suffixes, indent)
