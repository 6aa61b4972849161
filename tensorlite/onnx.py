"""torch.onnx for programs that import it: tensorlite writes no ONNX files.

`import tensorlite.onnx` works (a program may import it and export only behind a flag), and
is_in_onnx_export() is False; export() raises tl.NotSupportedError saying what to do instead:
save the weights (tl.save / tl.save_safetensors), load them into the same model built with
PyTorch, and export that with torch.onnx.export.
"""
from __future__ import annotations

from .errors import NotSupportedError


def export(model=None, args=(), f=None, *more, **kwargs):
    """torch.onnx.export: refused, with the way round it."""
    raise NotSupportedError(
        "tl.onnx.export: tensorlite has no ONNX exporter (it would have to trace the program into ONNX's "
        "operator set); save the weights with tl.save(model.state_dict(), path) or tl.save_safetensors, "
        "load them into the same model built with PyTorch, and export that with torch.onnx.export")


dynamo_export = export


def is_in_onnx_export() -> bool:
    """Whether an ONNX export is running: never in tensorlite."""
    return False
