"""DLPack: tensors shared with numpy, PyTorch, CuPy, JAX, ... without a copy.

`Tensor.__dlpack__` / `__dlpack_device__` export a tensor (any framework's `from_dlpack` takes
it); `tl.from_dlpack(obj)` imports anything that has `__dlpack__` (or a legacy "dltensor"
capsule). Both share memory: a write through one is seen by the other. GPU tensors stay on
their GPU; work queued on tensorlite's stream is finished before another framework reads an
exported tensor, and an importer's producer orders its work before tensorlite's stream.

>>> import numpy as np, tensorlite as tl
>>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
>>> t = tl.from_dlpack(a)          # shares a's memory
>>> a[0, 0] = 7
>>> t.tolist()[0]
[7.0, 1.0, 2.0]
>>> np.from_dlpack(t.cpu()).shape
(2, 3)
"""
from __future__ import annotations

import ctypes

from . import backend, dtype as dtypes
from ._core import TensorBase, wrap
from .errors import DeviceError, DTypeError, ShapeError
from .layout import Layout

_CPU, _CUDA, _CUDA_HOST, _ROCM = 1, 2, 3, 10              # DLDeviceType
_PLATFORM_OF = {_CUDA: "cuda", _ROCM: "rocm"}
_TYPE_OF = {v: k for k, v in _PLATFORM_OF.items()}


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32),
                ("dtype", _DataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):  # DLManagedTensor: the legacy "dltensor" capsule
    pass


class _Versioned(ctypes.Structure):  # DLManagedTensorVersioned (DLPack 1.x): "dltensor_versioned"
    pass


_Managed._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                     ("deleter", ctypes.CFUNCTYPE(None, ctypes.c_void_p))]
_Versioned._fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
                       ("deleter", ctypes.CFUNCTYPE(None, ctypes.c_void_p)), ("flags", ctypes.c_uint64),
                       ("dl_tensor", _DLTensor)]
_NAMES = {_Managed: b"dltensor", _Versioned: b"dltensor_versioned"}
_USED = {k: b"used_" + name for k, name in _NAMES.items()}  # a capsule keeps a pointer to its name: never free them
_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY

_capi = ctypes.pythonapi
# the destructor gets the dying capsule as a raw pointer (a py_object would revive it)
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _capi))
_raw_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _capi))
_capi.PyCapsule_New.restype, _capi.PyCapsule_New.argtypes = ctypes.py_object, [
    ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR]
_capi.PyCapsule_GetPointer.restype, _capi.PyCapsule_GetPointer.argtypes = ctypes.c_void_p, [
    ctypes.py_object, ctypes.c_char_p]
_capi.PyCapsule_IsValid.restype, _capi.PyCapsule_IsValid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
_capi.PyCapsule_SetName.restype, _capi.PyCapsule_SetName.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]


def _code(d: dtypes.DType):
    """(DLDataTypeCode, bits) of a dtype: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6."""
    kind = "bf" if d is dtypes.bfloat16 else d.np.kind
    return {"i": 0, "u": 1, "f": 2, "bf": 4, "b": 6}[kind], d.itemsize * 8


_DTYPE_OF = {_code(d): d for d in dtypes.ALL}

# exported tensors alive in other frameworks: address of the managed struct -> what it keeps alive
_EXPORTED: dict = {}


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _release_export(address):
    _EXPORTED.pop(address, None)


@_CAPSULE_DESTRUCTOR
def _drop_unconsumed(capsule):  # a capsule nobody consumed: its owner's deleter runs here
    for name in _NAMES.values():
        if _raw_is_valid(capsule, name):
            _release_export(_raw_pointer(capsule, name))


def device_of(x) -> tuple:
    """Tensor.__dlpack_device__: (DLDeviceType, device id)."""
    dev = x._device
    if dev.name == "cpu":
        return _CPU, 0
    if dev.name not in _TYPE_OF:
        raise DeviceError(f"__dlpack__: tensors on {x.device} cannot be shared: its memory is not addressable "
                          "by other frameworks; use .cpu() first")
    return _TYPE_OF[dev.name], dev.ordinal


def to_dlpack(x, *, stream=None, max_version=None, dl_device=None, copy=None):
    """Tensor.__dlpack__ (the Python array API's signature): a capsule sharing x's memory, versioned
    (DLPack 1.0) where the consumer's `max_version` allows. `stream`: the consumer's stream;
    tensorlite's queued work on the device finishes first unless it is -1."""
    kind, ordinal = device_of(x)
    if dl_device is not None and tuple(dl_device) != (kind, ordinal):
        raise BufferError(f"__dlpack__: the tensor is on {x.device}; a copy to device {tuple(dl_device)} "
                          "is not supported (move it with .to() first)")
    if copy:
        x = x.clone()
    storage, lay = x._storage, x._layout
    if kind != _CPU and stream != -1:  # the consumer reads on its own stream: our queued writes must be done
        x._device.synchronize()
    shape = (ctypes.c_int64 * max(x.ndim, 1))(*lay.shape)
    strides = (ctypes.c_int64 * max(x.ndim, 1))(*lay.strides)
    m = _Versioned(major=1, minor=0) if max_version is not None and max_version[0] >= 1 else _Managed()
    m.dl_tensor = _DLTensor(storage.addr(0), _Device(kind, ordinal), x.ndim, _DataType(*_code(x.dtype), 1),
                            ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)),
                            ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64)), lay.offset * x.dtype.itemsize)
    m.deleter = _release_export
    _EXPORTED[ctypes.addressof(m)] = (m, shape, strides, storage)  # the storage stays alive while shared
    return _capi.PyCapsule_New(ctypes.addressof(m), _NAMES[type(m)], _drop_unconsumed)


class _Foreign:
    """Memory owned by another framework: its deleter runs when tensorlite drops the last use.
    Serves as a GPU storage's buffer (`ptr`) and as the owner of a cpu storage's array."""
    __slots__ = ("ptr", "nbytes", "_managed", "__array_interface__", "__weakref__")

    def __init__(self, ptr, nbytes, managed):
        self.ptr, self.nbytes, self._managed = ptr, nbytes, managed
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3}

    def __del__(self):
        m, self._managed = self._managed, None
        if m is not None and m.deleter:
            m.deleter(ctypes.addressof(m))


def _capsule_of(obj, stream):
    """obj's DLPack capsule, versioned where the producer has it; GPU producers order their work
    before tensorlite's stream (or `stream`)."""
    if not hasattr(obj, "__dlpack__"):
        return obj  # a capsule already (torch.utils.dlpack.to_dlpack's)
    kind, ordinal = obj.__dlpack_device__()
    kwargs = {}
    if kind in _PLATFORM_OF:
        dev = backend.get_device(f"{_PLATFORM_OF[kind]}:{ordinal}")
        kwargs["stream"] = dev.stream_handle() if stream is None else stream
    try:
        return obj.__dlpack__(max_version=(1, 0), **kwargs)
    except TypeError:  # a producer older than DLPack 1.0
        return obj.__dlpack__(**kwargs)


def from_dlpack(obj, *, stream=None):
    """A tensor sharing the memory of `obj` (anything with `__dlpack__`, or a DLPack capsule).
    Memory its producer marks read-only (e.g. JAX's) is copied: tensorlite tensors are writable.

    >>> import numpy as np, tensorlite as tl
    >>> tl.from_dlpack(np.ones((2, 2), dtype=np.int64)).sum().item()
    4
    """
    if isinstance(obj, TensorBase):
        return obj
    capsule = _capsule_of(obj, stream)
    kind = next((k for k, name in _NAMES.items() if _capi.PyCapsule_IsValid(capsule, name)), None)
    if kind is None:
        raise TypeError(f"from_dlpack: expected an object with __dlpack__ or an unused DLPack capsule, "
                        f"got {type(obj).__name__}")
    m = kind.from_address(_capi.PyCapsule_GetPointer(capsule, _NAMES[kind]))
    _capi.PyCapsule_SetName(capsule, _USED[kind])  # ours now: the deleter runs when we drop it
    owner, t = None, m.dl_tensor
    try:
        if kind is _Versioned and m.major != 1:
            raise BufferError(f"from_dlpack: DLPack version {m.major}.{m.minor} is not supported (1.x is)")
        shape = tuple(t.shape[i] for i in range(t.ndim))
        dtype = _DTYPE_OF.get((t.dtype.code, t.dtype.bits))
        if dtype is None or t.dtype.lanes != 1:
            raise DTypeError(f"from_dlpack: unsupported DLPack dtype (code {t.dtype.code}, bits {t.dtype.bits}, "
                             f"lanes {t.dtype.lanes})")
        lay = Layout(shape, tuple(t.strides[i] for i in range(t.ndim)) if t.strides else None)
        if any(s < 0 for s in lay.strides) or t.byte_offset % dtype.itemsize:
            raise ShapeError(f"from_dlpack: negative strides {lay.strides} or a byte offset ({t.byte_offset}) "
                             f"that is not a multiple of the item size are not supported; pass a copy")
        dev_type, ordinal = t.device.device_type, t.device.device_id
        if dev_type not in (_CPU, _CUDA_HOST, *_PLATFORM_OF):
            raise DeviceError(f"from_dlpack: DLPack device type {dev_type} is not one of tensorlite's devices")
        dev = backend.get_device(f"{_PLATFORM_OF[dev_type]}:{ordinal}" if dev_type in _PLATFORM_OF else "cpu")
        span = 0 if 0 in shape else 1 + sum((n - 1) * s for n, s in zip(shape, lay.strides))
        owner = _Foreign((t.data or 0) + t.byte_offset, span * dtype.itemsize, m)
    except BaseException:
        if owner is None and m.deleter:
            m.deleter(ctypes.addressof(m))
        raise
    out = wrap(dev.wrap_memory(owner, span, dtype), shape, dtype)
    out._layout = lay
    return out.clone() if kind is _Versioned and m.flags & _READ_ONLY else out
