"""One exception hierarchy, rooted at `TensorliteError`.

Each class is also the built-in a Python user would catch (a shape error is a
`ValueError`, a dtype error a `TypeError`, an index error an `IndexError`).
`describe` formats operands the same way in every message: the op, then each
operand's shape, dtype and device; `storage_error` does it for a backend's operands.
"""
from typing import NamedTuple


class TensorliteError(Exception):
    pass


class ShapeError(TensorliteError, ValueError):
    pass


class DTypeError(TensorliteError, TypeError):
    pass


class DeviceError(TensorliteError, RuntimeError):
    pass


class IndexOutOfRange(TensorliteError, IndexError):
    pass


class ArgumentError(TensorliteError, ValueError):
    """An argument's value is outside its domain: a stride, a probability, a mode name."""


class FormatError(TensorliteError, ValueError):
    """A file is not what its format says (a corrupt or truncated safetensors, a bad config.json)."""


class StateDictError(TensorliteError, KeyError):
    """A state dict's keys do not match the module's (missing or unexpected)."""

    def __str__(self):  # KeyError would print the message quoted
        return str(self.args[0]) if self.args else ""


class BackendUnavailable(DeviceError):
    pass


class OutOfMemoryError(DeviceError, MemoryError):
    pass


class CompileError(TensorliteError, RuntimeError):
    pass


class BackendError(TensorliteError, RuntimeError):
    """A device runtime call failed; the message carries the runtime's error name."""


def describe(op: str, **operands) -> str:
    """'matmul(a: shape=(2, 3) float32 cpu, b: shape=(4, 5) float32 cpu)'."""
    parts = []
    for name, t in operands.items():
        if hasattr(t, "shape") and hasattr(t, "dtype") and hasattr(t, "device"):
            parts.append(f"{name}: shape={tuple(t.shape)} {t.dtype.name} {t.device}")
        else:
            parts.append(f"{name}={t!r}")
    return f"{op}({', '.join(parts)})"


class _Operand(NamedTuple):
    """What describe prints for a storage seen through a layout."""
    shape: tuple
    dtype: object
    device: object


def storage_error(cls, op: str, why: str, **pairs):
    """`cls` with describe's message, for backends: pairs are name=(storage, layout)
    (the storage gives the dtype and device, the layout the shape)."""
    operands = {name: _Operand(lay.shape, st.dtype, st.device) for name, (st, lay) in pairs.items()}
    return cls(f"{describe(op, **operands)}: {why}")


def unsupported_dtype(op: str, **pairs) -> DTypeError:
    """The DTypeError of an op a backend has no kernel for at these operands' dtypes."""
    return storage_error(DTypeError, op, "not supported for this dtype", **pairs)
