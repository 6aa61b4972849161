"""Padding layers, as torch.nn.modules.padding."""
from __future__ import annotations

from ...ops.conv import as_tuple
from .. import functional as F
from .module import Module


class _PadNd(Module):
    """F.pad with `padding` (an int: every side) in `mode`."""
    nd, mode = 2, "constant"

    def __init__(self, padding, value: float = 0.0):
        super().__init__()
        self.padding, self.value = as_tuple(padding, 2 * self.nd), value

    def forward(self, x):
        """F.pad(x, padding, mode, value)."""
        return F.pad(x, self.padding, self.mode, self.value if self.mode == "constant" else None)

    def extra_repr(self):
        """padding (and value), for the repr."""
        return f"padding={self.padding}, value={self.value}" if type(self).__name__.startswith("Constant") else \
            f"{self.padding}"


def _pad(name, nd, mode):
    init = (lambda self, padding: _PadNd.__init__(self, padding)) if name != "Constant" else _PadNd.__init__
    return type(f"{name}Pad{nd}d", (_PadNd,), {"nd": nd, "mode": mode, "__init__": init, "__module__": __name__,
                                               "__doc__": f"Pad the last {nd} dims ({mode}); padding (left, right"
                                               f"{', top, bottom' if nd == 2 else ''}) or an int."})


ZeroPad1d, ZeroPad2d, ConstantPad1d, ConstantPad2d = (_pad(n, d, "constant") for n in ("Zero", "Constant")
                                                      for d in (1, 2))


ReflectionPad1d, ReflectionPad2d, ReplicationPad1d, ReplicationPad2d = (_pad(n, d, m) for n, m in (
    ("Reflection", "reflect"), ("Replication", "replicate")) for d in (1, 2))
