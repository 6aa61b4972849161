"""torch.compile and torch.jit, as far as tensorlite can honestly go.

tensorlite has no compiler of Python programs: `tl.compile(model)` and `tl.jit.script` / `trace`
raise tl.NotSupportedError naming what to use instead. For speed, tl.graphs.graphed(fn)
captures a function's device work once and replays it (tl.graphs has the rules); to save a
model, tl.save(model.state_dict(), path). What has no effect without a compiler is provided:
`compile(model, disable=True)` returns the model (as torch's), `is_scripting()` and
`is_tracing()` are False, and `ignore`, `unused`, `export` leave their function as it is.

>>> import tensorlite as tl
>>> tl.jit.is_scripting()
False
"""
from __future__ import annotations

from typing import Final  # noqa: F401  (torch.jit.Final: a plain typing.Final without TorchScript)

from .errors import NotSupportedError

_FOR_SPEED = "tl.graphs.graphed(fn) captures a function's device work once and replays it, for speed on cuda/rocm"


def compile_(model=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None, options=None,
             disable=False):
    """torch.compile: refused (tensorlite compiles no Python), except disable=True, which returns
    the model unchanged as torch's does."""
    if disable:
        return model if model is not None else (lambda m: m)
    raise NotSupportedError(f"tl.compile: tensorlite has no compiler of Python programs (torch.compile's "
                            f"TorchDynamo/Inductor); drop the call (the model runs eagerly as it is) or pass "
                            f"disable=True; {_FOR_SPEED}")


def script(obj=None, *args, **kwargs):
    """torch.jit.script: refused (there is no TorchScript)."""
    raise NotSupportedError(f"tl.jit.script: tensorlite has no TorchScript; call the module or function itself "
                            f"(it runs eagerly) and save a model's weights with tl.save(model.state_dict(), path); "
                            f"{_FOR_SPEED}")


def trace(func=None, *args, **kwargs):
    """torch.jit.trace: refused (there is no TorchScript)."""
    raise NotSupportedError(f"tl.jit.trace: tensorlite has no TorchScript; call the module or function itself "
                            f"(it runs eagerly); {_FOR_SPEED}")


def save(m=None, f=None, *args, **kwargs):
    """torch.jit.save: refused (there are no ScriptModules)."""
    raise NotSupportedError("tl.jit.save: tensorlite has no ScriptModules; save the weights with "
                            "tl.save(model.state_dict(), path) (or tl.save_safetensors)")


def load(f=None, *args, **kwargs):
    """torch.jit.load: refused (there are no ScriptModules)."""
    raise NotSupportedError("tl.jit.load: tensorlite has no TorchScript to run an archive with; build the model in "
                            "Python and load its weights with model.load_state_dict(tl.load(path))")


def is_scripting() -> bool:
    """Whether the code runs under TorchScript: never in tensorlite."""
    return False


def is_tracing() -> bool:
    """Whether the code runs under torch.jit.trace: never in tensorlite."""
    return False


def ignore(fn=None, **kwargs):
    """torch.jit.ignore (also unused, export): a TorchScript marker, which leaves fn as it is
    (`@tl.jit.ignore` and `@tl.jit.ignore(drop=True)` both)."""
    return fn if callable(fn) else (lambda f: f)


unused = export = ignore
