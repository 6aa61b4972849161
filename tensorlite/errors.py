"""One exception hierarchy, rooted at `TensorliteError`.

Each class is also the built-in a Python user would catch (a shape error is a
`ValueError`, a dtype error a `TypeError`, an index error an `IndexError`).
`describe` formats operands the same way in every message: the op, then each
operand's shape, dtype and device; `storage_error` does it for a backend's operands.
"""
import pickle
from typing import NamedTuple


class TensorliteError(Exception):
    """The base of every tensorlite error (torch raises plain RuntimeError and friends instead)."""


class ShapeError(TensorliteError, ValueError):
    """Shapes that do not fit the op (a ValueError; torch raises RuntimeError)."""


class DTypeError(TensorliteError, TypeError):
    """A dtype, or an argument's type, that the op does not take (a TypeError)."""


class DeviceError(TensorliteError, RuntimeError):
    """Operands on different devices, or an unknown device (a RuntimeError, as torch's)."""


class IndexOutOfRange(TensorliteError, IndexError):
    """An index or dim out of range (an IndexError, as torch's)."""


class ArgumentError(TensorliteError, ValueError):
    """An argument's value is outside its domain: a stride, a probability, a mode name."""


class FormatError(TensorliteError, ValueError):
    """A file is not what its format says (a corrupt or truncated safetensors, a bad config.json)."""


class WeightsOnlyError(FormatError, pickle.UnpicklingError):
    """A weights-only tl.load met a pickled object it may not rebuild (tl.serialization says which)."""


class StateDictError(TensorliteError, KeyError, RuntimeError):
    """A state dict that does not fit: missing or unexpected keys (a KeyError), also the
    RuntimeError that torch's load_state_dict raises and its users catch."""

    def __str__(self):  # KeyError would print the message quoted
        return str(self.args[0]) if self.args else ""


class StateDictShapeError(StateDictError, ShapeError):
    """A state dict's tensor whose shape differs from the module's (torch's "size mismatch", a
    RuntimeError; also a ShapeError)."""


class NotSupportedError(TensorliteError, NotImplementedError):
    """A PyTorch API that tensorlite cannot provide honestly (torch.compile, torch.jit.script,
    torch.onnx.export); the message says why and names the alternative."""


class BackendUnavailable(DeviceError):
    """The backend cannot run here (a missing library, no device); the message says why."""


class OutOfMemoryError(DeviceError, MemoryError):
    """The device has not enough memory for the tensor, as torch.OutOfMemoryError (also a MemoryError)."""


class CompileError(TensorliteError, RuntimeError):
    """A GPU kernel source failed to compile (NVRTC / hiprtc) or was not found."""


class BackendError(TensorliteError, RuntimeError):
    """A device runtime call failed; the message carries the runtime's error name."""


class CaptureError(TensorliteError, RuntimeError):
    """Something a graph capture cannot record (a host read, a wait, random numbers, ...) was
    asked for while capturing, or a graph was used wrongly; the message names it."""


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
