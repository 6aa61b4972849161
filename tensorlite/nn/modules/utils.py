"""The factory of the modules that only hold an nn.functional op's settings (ReLU, Softmin,
AvgPool1d, ...), shared by the family files (internal: the classes are re-exported by
tensorlite.nn.modules)."""
from __future__ import annotations

from ...errors import ArgumentError
from ...tensor import Tensor
from .. import functional as F
from .module import Module

REQUIRED = object()  # a function_module argument without a default


def function_module(module, name, fname, doc, *, extra_repr=None, **defaults):
    """A torch.nn class `name` of module `module` (the caller's __name__, for its repr and pickling)
    wrapping F.<fname>: __init__ takes torch's arguments (`defaults`, in order; REQUIRED ones must
    be given), forward(*inputs) is F.<fname>(*inputs, **them); inplace=True writes the result
    into the input. Its repr shows every setting (inplace only when True), or what
    `extra_repr(self)` returns where torch's repr shows something else."""
    names = list(defaults)

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        if len(args) > len(names) or set(kwargs) - set(names) or set(kwargs) & set(names[:len(args)]):
            raise ArgumentError(f"{name}: takes ({', '.join(names)}), got {len(args)} positional "
                                f"and {sorted(kwargs)} keyword arguments")
        self.__dict__.update(defaults, **dict(zip(names, args)), **kwargs)
        if any(getattr(self, n) is REQUIRED for n in names):
            raise ArgumentError(f"{name}: missing {[n for n in names if getattr(self, n) is REQUIRED]}")

    def forward(self, *inputs):
        """The F function of this module's name applied to the inputs with its settings."""
        kw = {n: getattr(self, n) for n in names if n != "inplace"}
        if not getattr(self, "inplace", False):
            return getattr(F, fname)(*inputs, **kw)
        own = getattr(Tensor, fname + "_", None)  # relu_, silu_, ...
        return own(*inputs) if own is not None and not kw else getattr(F, fname)(*inputs, **kw, inplace=True)

    def settings(self):
        """The settings, for the repr."""
        return ", ".join(f"{n}={getattr(self, n)}" for n in names if n != "inplace" or self.inplace)
    return type(name, (Module,), {"__init__": __init__, "forward": forward, "extra_repr": extra_repr or settings,
                                  "__doc__": doc, "__module__": module})
