"""What tl.save may pickle and tl.load may unpickle, as torch.serialization: a whole module (or any
object that is not a tensor, a container, a number or a string) is pickled, with its tensors kept
out of the pickle (stored as the file's checked tensors). Loading is weights-only by default, as in
PyTorch 2.6+: the pickle may name only the classes and functions allowed here (the defaults below,
and those a user allows with add_safe_globals / safe_globals); anything else raises
WeightsOnlyError, a pickle.UnpicklingError, naming it. weights_only=False unpickles anything, and
can run arbitrary code: only for files from a trusted source.

>>> import io, tensorlite as tl
>>> buf = io.BytesIO()
>>> tl.save(tl.nn.Linear(2, 3), buf); _ = buf.seek(0)
>>> with tl.serialization.safe_globals([tl.nn.Linear]):
...     tl.load(buf)
Linear(in_features=2, out_features=3, bias=True)
"""
from __future__ import annotations

import builtins
import collections
import contextlib
import io
import pickle
from typing import Callable, Iterable

from . import dtype as dtypes
from .backend import Device, get_device
from .errors import WeightsOnlyError
from .tensor import Tensor

# allowed in every weights-only load: containers, and what dtypes and devices pickle as (the
# functions their __reduce__ names, whatever those are)
_DEFAULT_SAFE = {collections.OrderedDict, collections.defaultdict, builtins.set, builtins.frozenset,
                 builtins.complex, builtins.slice, builtins.bytearray, Device, get_device,
                 dtypes.float32.__reduce__()[0]}
_user_safe: list = []


def add_safe_globals(safe_globals: Iterable) -> None:
    """Allow these classes and functions in a weights-only load (torch.serialization.add_safe_globals)."""
    _user_safe.extend(safe_globals)


def get_safe_globals() -> list:
    """The classes and functions add_safe_globals allowed."""
    return list(_user_safe)


def clear_safe_globals() -> None:
    _user_safe.clear()


@contextlib.contextmanager
def safe_globals(safe_globals: Iterable):
    """Allow these in weights-only loads inside the `with` block only."""
    added = list(safe_globals)
    _user_safe.extend(added)
    try:
        yield
    finally:
        for g in added:
            _user_safe.remove(g)


def _qualified(g) -> str:
    return f"{g.__module__}.{g.__qualname__}"


def _allowed() -> dict:
    """{'module.qualname': object} of every global a weights-only load may name."""
    return {_qualified(g): g for g in (*_DEFAULT_SAFE, *_user_safe)}


def dumps(obj, tensor_id: Callable) -> bytes:
    """obj pickled, each Tensor in it replaced by tensor_id(tensor) (a small picklable key)."""
    class Pickler(pickle.Pickler):
        def persistent_id(self, x):
            return tensor_id(x) if isinstance(x, Tensor) else None
    out = io.BytesIO()
    Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return out.getvalue()


def loads(data: bytes, tensor_of: Callable, weights_only: bool, where: str):
    """dumps' inverse: tensor_of(key) gives each tensor back. weights_only: only allowed globals."""
    allowed = _allowed() if weights_only else None

    class Unpickler(pickle.Unpickler):
        def persistent_load(self, key):
            return tensor_of(key)

        def find_class(self, module, name):
            if allowed is None:
                return super().find_class(module, name)
            g = allowed.get(f"{module}.{name}")
            if g is None:
                raise WeightsOnlyError(
                    f"load: weights-only load of {where} failed: it names {module}.{name}, which is not an allowed "
                    f"global. If you trust the file, allow it with tl.serialization.add_safe_globals([{name}]) or "
                    f"the tl.serialization.safe_globals([{name}]) context manager, or load with weights_only=False "
                    "(which can run arbitrary code: only for files from a trusted source)")
            return g
    return Unpickler(io.BytesIO(data)).load()
