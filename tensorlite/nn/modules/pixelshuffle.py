"""PixelShuffle and PixelUnshuffle, as torch.nn.modules.pixelshuffle."""
from __future__ import annotations

from .utils import REQUIRED, function_module

PixelShuffle = function_module(__name__, "PixelShuffle", "pixel_shuffle", "(*, C r^2, H, W) -> (*, C, H r, W r)",
                               upscale_factor=REQUIRED)


PixelUnshuffle = function_module(__name__, "PixelUnshuffle", "pixel_unshuffle", "(*, C, H r, W r) -> (*, C r^2, H, W)",
                                 downscale_factor=REQUIRED)
