"""torch.backends.cuda's matmul flags, for programs that set them
(`torch.backends.cuda.matmul.allow_tf32 = True`), and torch.set_float32_matmul_precision.

They are kept for the program to read back and change nothing: tensorlite's f32 matmuls on the
`cuda` and `rocm` devices run in full f32 (no TF32), and its f16/bf16 products accumulate in f32.
(This module holds flags only; the `cuda` device itself is the GPU backend in `rocm/`.)

>>> import tensorlite as tl
>>> tl.backends.cuda.matmul.allow_tf32 = True
>>> tl.backends.cuda.matmul.allow_tf32, tl.get_float32_matmul_precision()
(True, 'high')
>>> tl.set_float32_matmul_precision("highest")
"""
from tensorlite.errors import ArgumentError

_PRECISIONS = {"highest": False, "high": True, "medium": True}  # -> allow_tf32, as torch maps them


class _MatmulFlags:
    """torch.backends.cuda.matmul: its three flags, an unknown name refused (as torch's)."""
    __slots__ = ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction")

    def __init__(self):
        self.allow_tf32 = False  # torch's defaults
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True

    def __repr__(self):
        return "tensorlite.backends.cuda.matmul(" + ", ".join(f"{n}={getattr(self, n)}" for n in self.__slots__) + ")"


matmul = _MatmulFlags()
_precision = ["highest"]


def is_built() -> bool:
    """Whether tensorlite has a `cuda` backend: always (tl.cuda.is_available() says if it can run here)."""
    return True


def set_float32_matmul_precision(precision: str) -> None:
    """torch.set_float32_matmul_precision: 'highest', 'high' or 'medium' (sets matmul.allow_tf32 as
    torch does; tensorlite's f32 products stay full f32 either way)."""
    if precision not in _PRECISIONS:
        raise ArgumentError(f"set_float32_matmul_precision: {precision!r}; expected one of {sorted(_PRECISIONS)}")
    _precision[0] = precision
    matmul.allow_tf32 = _PRECISIONS[precision]


def get_float32_matmul_precision() -> str:
    """What set_float32_matmul_precision last set ('highest', torch's default; 'high' after
    matmul.allow_tf32 = True, as torch reports it)."""
    if matmul.allow_tf32 != _PRECISIONS[_precision[0]]:
        return "high" if matmul.allow_tf32 else "highest"
    return _precision[0]
