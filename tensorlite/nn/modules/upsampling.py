"""Upsample, as torch.nn.modules.upsampling."""
from __future__ import annotations

from .utils import function_module


def _upsample_repr(self):
    """torch's: the scale factor (as floats, as torch holds it) or else the size, and the mode."""
    sf = self.scale_factor
    shown = f"size={self.size!r}" if sf is None else "scale_factor=" + repr(
        tuple(float(f) for f in sf) if isinstance(sf, (tuple, list)) else float(sf))
    return f"{shown}, mode={self.mode!r}"


Upsample = function_module(__name__, "Upsample", "interpolate",
                           "F.interpolate as a module (mode 'nearest', 'bilinear', ...)", size=None, scale_factor=None,
                           mode="nearest", align_corners=None, recompute_scale_factor=None, extra_repr=_upsample_repr)
