"""Upsample, as torch.nn.modules.upsampling."""
from __future__ import annotations

from ._util import function_module

Upsample = function_module(__name__, "Upsample", "interpolate",
                           "F.interpolate as a module (mode 'nearest', 'bilinear', ...)", size=None, scale_factor=None,
                           mode="nearest", align_corners=None, recompute_scale_factor=None)
