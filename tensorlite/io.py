"""Model IO: safetensors files (read through the `safetensors` package's numpy API, written here; bf16
via ml_dtypes), Hugging Face checkpoint directories, and tl.save / tl.load (state dicts, no pickle)."""
from __future__ import annotations

import base64
import contextlib
import json
import mmap
import os
import pickle
import secrets
import stat
import zlib

import numpy as np

from . import dtype as dtypes, serialization
from .errors import ArgumentError, DeviceError, DTypeError, FormatError
from .nn.parameter import Parameter
from .ops.creation import tensor
from .tensor import Tensor


def _safetensors_numpy():
    try:
        import safetensors.numpy as st
    except ImportError as e:  # an optional dependency: say how to get it
        raise ImportError("tensorlite safetensors IO needs the `safetensors` package "
                          "(pip install safetensors)") from e
    return st


def save_safetensors(tensors: dict, path, metadata: dict = None) -> None:
    """Write {name: Tensor} to `path` (any device and dtype; values are copied to the host one tensor at a
    time), replacing the file atomically as tl.save does; `metadata`: str -> str."""
    for name, t in tensors.items():
        if not isinstance(t, Tensor):
            raise DTypeError(f"save_safetensors: {name!r} is a {type(t).__name__}, not a Tensor")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in (metadata or {}).items()):
        raise DTypeError(f"save_safetensors: metadata must map str to str, got {metadata!r}")
    _replace_atomically(path, "save_safetensors",
                        lambda out: _write_safetensors(out, tensors, metadata or {}, checksums=False))


def load_safetensors(path, device=None, dtype=None) -> dict:
    """{name: Tensor} from a safetensors file, on `device`; `dtype` casts floating tensors."""
    cast, path, out = None if dtype is None else dtypes.get(dtype), os.fspath(path), {}
    st = _safetensors_numpy()
    try:
        arrays = st.load_file(path)
    except FileNotFoundError:
        raise
    except Exception as e:  # the library's SafetensorError (corrupt, truncated), or an OSError
        raise FormatError(f"load_safetensors: {path!r} is not a readable safetensors file: "
                          f"{type(e).__name__}: {e}") from e
    for name, arr in arrays.items():
        try:
            t = tensor(arr, dtype=dtypes.get(arr.dtype), device=device)
        except DTypeError as e:
            raise DTypeError(f"load_safetensors: tensor {name!r} of {path!r}: {e}") from None
        out[name] = t._cast(cast) if cast is not None and t.dtype.is_floating_point else t
    return out


def _read_json(path, op, key=None):  # a JSON object (its object entry `key`), or FormatError naming the file
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
        if not isinstance(obj, dict) or (key is not None and not isinstance(obj.get(key), dict)):
            raise ValueError("expected a JSON object" + (f" with an object {key!r}" if key else ""))
    except (ValueError, UnicodeDecodeError) as e:  # json.JSONDecodeError is a ValueError
        raise FormatError(f"{op}: {path!r} is not valid: {e}") from None
    return obj if key is None else obj[key]


def load_hf_checkpoint(directory, device=None, dtype=None):
    """(config dict, state dict) of a Hugging Face model directory: `config.json` plus
    `model.safetensors` or a sharded `model.safetensors.index.json`."""
    directory = os.fspath(directory)
    config_path = os.path.join(directory, "config.json")
    if not os.path.isfile(config_path):
        raise FileNotFoundError(f"load_hf_checkpoint: no config.json in {directory!r}")
    config = _read_json(config_path, "load_hf_checkpoint")
    single = os.path.join(directory, "model.safetensors")
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.isfile(single):
        shards = [single]
    elif os.path.isfile(index):
        weight_map = _read_json(index, "load_hf_checkpoint", "weight_map")
        shards = [os.path.join(directory, s) for s in sorted(set(weight_map.values()))]
    else:
        raise FileNotFoundError(f"load_hf_checkpoint: {directory!r} has neither model.safetensors nor "
                                "model.safetensors.index.json (only safetensors checkpoints are supported)")
    return config, {name: t for shard in shards for name, t in load_safetensors(shard, device, dtype).items()}


# ---- tl.save / tl.load: a safetensors file whose metadata holds the object's structure as JSON ----
# Containers are tagged ({"dict": [[key, value], ...]}, {"tuple": [...]}, {"tensor": name, ...}), so any
# JSON object is a tag and keys keep their types (an optimizer's state is keyed by ints). Written and
# read here (safetensors.numpy cannot read bf16 from bytes); the files open with the safetensors library.
# Format 2 (the "tensorlite.format" entry; absent: format 1, which still loads, unchecked) adds crc32s
# of the header's content and of every tensor's bytes, checked on load.
_STRUCTURE, _FORMAT, _CHECKSUMS = "tensorlite.save", "tensorlite.format", "tensorlite.checksums"
_FORMAT_VERSION = 2
# Format 3 (written only where something was pickled: a whole module...) adds "tensorlite.pickles", the
# base64 pickles that {"pickle": i} structure nodes name, their tensors kept as the file's entries
_PICKLES, _PICKLE_FORMAT = "tensorlite.pickles", 3
_ST_CODES = {d.name: "BOOL" if d is dtypes.bool_ else "BF16" if d is dtypes.bfloat16 else
             {"f": "F", "i": "I", "u": "U"}[d.np.kind] + str(8 * d.itemsize) for d in dtypes.ALL}
_ST_DTYPES = {code: dtypes.get(name) for name, code in _ST_CODES.items()}


def _host_bytes(t: Tensor) -> np.ndarray:
    """A tensor's values as flat bytes on the host (a C-contiguous copy; flat so 0-d and bf16 views work)."""
    return t.detach().numpy().reshape(-1).view(np.uint8)


def _header_crc(metadata: dict, entries: dict) -> int:
    """crc32 of what a header says, as parsed (its spacing aside): a byte flipped in it cannot pass."""
    return zlib.crc32(json.dumps([metadata, entries], sort_keys=True).encode())


def _write_safetensors(out, tensors: dict, metadata: dict, checksums: bool) -> None:
    """Stream {name: Tensor} to the binary file `out` as a safetensors file, one tensor on the host at a
    time. checksums: add format 2's crc32s to the metadata; they are written as fixed-width placeholders
    and patched once the data is out where `out` can seek back, else computed in a first pass."""
    entries, offset = {}, 0
    for name, t in tensors.items():
        entries[name] = {"dtype": _ST_CODES[t.dtype.name], "shape": list(t.shape),
                         "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes

    def head(crcs):
        meta = dict(metadata)
        if checksums:
            meta[_CHECKSUMS] = json.dumps({"header": _header_crc(metadata, entries), "tensors": crcs})
        text = json.dumps({**({"__metadata__": meta} if meta else {}), **entries}).encode()
        text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
        return len(text).to_bytes(8, "little") + text

    seekable = checksums and bool(tensors) and getattr(out, "seekable", lambda: False)()
    if checksums and not seekable:
        crcs = {name: f"{zlib.crc32(_host_bytes(t)):08x}" for name, t in tensors.items()}
    else:
        crcs = {name: "0" * 8 for name in tensors}  # the same width as any crc32 in hex
    start = out.tell() if seekable else None
    out.write(head(crcs))
    for name, t in tensors.items():
        data = _host_bytes(t)
        if seekable:
            crcs[name] = f"{zlib.crc32(data):08x}"
        out.write(data)
        del data  # before the next tensor's copy
    if seekable:
        end = out.tell()
        out.seek(start)
        out.write(head(crcs))
        out.seek(end)


def _replace_atomically(path, op: str, write) -> None:
    """write(file) into a new file beside `path`, flushed and fsynced, then renamed over `path` (and the
    directory fsynced): a crash, a kill or a full disk at any point leaves the old file or the new one,
    whole. An error removes the new file; a killed process can leave it behind (.<name>.<hex>.tmp)."""
    path = os.path.realpath(os.fspath(path))  # through a symlink, as open() writes
    directory, name = os.path.split(path)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"{op}: the directory of {path!r} does not exist")
    tmp = os.path.join(directory, f".{name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)  # umask: as open()
    try:
        with os.fdopen(fd, "wb") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(FileNotFoundError):  # the old file's permissions, where there is one
            os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    try:  # the rename itself reaches the disk
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:  # directories cannot be opened on Windows
        return
    try:
        os.fsync(dir_fd)
    except OSError:  # some file systems refuse; the rename is done
        pass
    finally:
        os.close(dir_fd)


def save(obj, f) -> None:
    """Save a state dict (nested dicts, lists, tuples of Tensors, numbers, strings, None) to a path or a
    binary file: a safetensors file with the structure as JSON in its metadata, and crc32s of its header
    and of every tensor, which load checks. Any other object in it (a whole module, torch.save(model)'s
    way) is pickled, its tensors kept as the file's tensors; load rebuilds it only when its classes are
    allowed (tl.serialization) or with weights_only=False.

    To a path, the file is written beside it under a temporary name, fsynced, then renamed over it: a save
    killed or failing midway (a full disk) leaves the previous file at `f` whole. Tensors are copied to the
    host one at a time, so a save needs little memory beyond the state dict. A file object is written in
    place (no rename is possible there): what it holds after a failed save is incomplete.

    >>> import io, tensorlite as tl
    >>> buf = io.BytesIO()
    >>> tl.save({'w': tl.ones(2), 'epoch': 3}, buf); _ = buf.seek(0)
    >>> tl.load(buf)['w'].tolist()
    [1.0, 1.0]
    """
    tensors, names, pickles = {}, {}, []  # names: id(Tensor) -> its entry (saved twice, loads as one object)

    def entry(x):
        if id(x) not in names:
            names[id(x)] = str(len(tensors))
            tensors[names[id(x)]] = x
        return names[id(x)]

    def encode(x, path):
        if isinstance(x, Tensor):
            return {"tensor": entry(x), "device": str(x.device), **({"requires_grad": True} if x.requires_grad else {}),
                    **({"parameter": True} if isinstance(x, Parameter) else {})}
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        if isinstance(x, (list, tuple)):
            items = [encode(v, f"{path}[{i}]") for i, v in enumerate(x)]
            return items if isinstance(x, list) else {"tuple": items}
        if isinstance(x, dict) and all(k is None or isinstance(k, (bool, int, float, str)) for k in x):
            return {"dict": [[k, encode(v, f"{path}[{k!r}]")] for k, v in x.items()]}  # else pickled
        try:
            data = serialization.dumps(x, lambda t: (entry(t), str(t.device), t.requires_grad,
                                                     isinstance(t, Parameter)))
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            raise DTypeError(f"save: {path} is a {type(x).__name__}, which cannot be pickled ({e}); save its "
                             "state_dict() instead") from None
        pickles.append(base64.b64encode(data).decode("ascii"))
        return {"pickle": len(pickles) - 1}

    metadata = {_STRUCTURE: json.dumps(encode(obj, "obj"))}
    metadata[_FORMAT] = str(_PICKLE_FORMAT if pickles else _FORMAT_VERSION)
    if pickles:
        metadata[_PICKLES] = json.dumps(pickles)
    if hasattr(f, "write"):
        _write_safetensors(f, tensors, metadata, checksums=True)
    else:
        _replace_atomically(f, "save", lambda out: _write_safetensors(out, tensors, metadata, checksums=True))


def load(f, map_location=None, weights_only: bool = True):
    """Load what tl.save wrote (a plain safetensors file loads as {name: Tensor}) from a path or a binary
    file, tensors on their saved device or on `map_location` (a device string). A pickled object in it (a
    whole module) is rebuilt only from the classes tl.serialization allows (weights-only, the default, as
    PyTorch 2.6+), else WeightsOnlyError (a pickle.UnpicklingError); weights_only=False rebuilds anything
    and can run arbitrary code. A truncated or corrupted file (its checksums do not match) raises
    FormatError naming it.

    >>> import io, tensorlite as tl
    >>> buf = io.BytesIO()
    >>> tl.save([tl.tensor([1, 2]), ('a', None)], buf); _ = buf.seek(0)
    >>> t, rest = tl.load(buf, map_location='cpu'); t.tolist(), rest
    ([1, 2], ('a', None))
    """
    if map_location is not None and not isinstance(map_location, str):
        raise ArgumentError(f"load: map_location must be a device string such as 'cpu' or 'cuda:0', got "
                            f"{type(map_location).__name__}")
    where = getattr(f, "name", "the file") if hasattr(f, "read") else repr(os.fspath(f))
    if hasattr(f, "read"):
        data = f.read()
    else:  # mapped, not read: a large checkpoint is not held twice
        with open(os.fspath(f), "rb") as src:
            data = mmap.mmap(src.fileno(), 0, access=mmap.ACCESS_READ) if os.fstat(src.fileno()).st_size else b""
    try:
        n = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + n])
        meta = header.pop("__metadata__", None) or {}
        structure = json.loads(meta[_STRUCTURE]) if _STRUCTURE in meta else None
        entries = {name: (e["dtype"], tuple(e["shape"]), e["data_offsets"]) for name, e in header.items()}
        version = int(meta.get(_FORMAT, 1))
        checks = json.loads(meta[_CHECKSUMS]) if _CHECKSUMS in meta else None
        crcs = None if checks is None else {name: int(c, 16) for name, c in checks["tensors"].items()}
        size = max((int(end) for _, _, (_, end) in entries.values()), default=0)
    except (ValueError, TypeError, KeyError, AttributeError) as e:  # JSON and Unicode decode errors are ValueErrors
        pickled = data[:2] == b"PK" or data[:1] == b"\x80"
        raise FormatError(f"load: {where} is not a tl.save / safetensors file ({type(e).__name__}: {e})" +
                          ("; it looks like a pickled (torch.save) checkpoint, which tensorlite never unpickles: "
                           "in PyTorch, save it with safetensors' save_file(state_dict)" if pickled else "")) from None
    if version > _PICKLE_FORMAT:
        raise FormatError(f"load: {where} is in tl.save format {version}; this tensorlite reads formats up to "
                          f"{_PICKLE_FORMAT} (upgrade tensorlite)")
    if checks is None and version >= 2:
        raise FormatError(f"load: {where} is corrupted: it is in tl.save format {version} but has no checksums")
    if checks is not None and _header_crc({k: v for k, v in meta.items() if k != _CHECKSUMS}, header) != \
            checks.get("header"):
        raise FormatError(f"load: {where} is corrupted: its header does not match its checksum")
    body, cache = memoryview(data)[8 + n:], {}
    if len(body) < size:
        raise FormatError(f"load: {where} is truncated: its header describes {8 + n + size} bytes, the file "
                          f"holds {len(data)}")

    def tensor_(name, device, path, requires_grad=False, parameter=False):
        """Entry `name` as a Tensor (an nn.Parameter where saved as one); one object per entry."""
        if name not in cache:
            if name not in entries:
                raise FormatError(f"load: {path} names tensor {name!r}, which {where} does not hold")
            code, shape, (begin, end) = entries[name]
            if code not in _ST_DTYPES:
                raise DTypeError(f"load: {path} of {where} has dtype {code}, which tensorlite does not support")
            raw = body[begin:end]
            if crcs is not None and zlib.crc32(raw) != crcs.get(name):
                raise FormatError(f"load: {where} is corrupted: the bytes of {path} do not match their checksum")
            try:
                arr = np.frombuffer(raw, dtype=_ST_DTYPES[code].np).reshape(shape)
            except (ValueError, TypeError) as e:
                raise FormatError(f"load: {path} of {where} does not fit its header ({e})") from None
            try:
                t = tensor(arr, dtype=_ST_DTYPES[code], device=map_location or device)
            except DeviceError as e:
                raise type(e)(f"load: {path} was saved on {device!r}: {e}; pass map_location "
                              "(e.g. map_location='cpu')") from None
            cache[name] = Parameter(t, requires_grad) if parameter else t.requires_grad_(requires_grad)
        return cache[name]

    def decode(x, path):
        if isinstance(x, list):
            return [decode(v, f"{path}[{i}]") for i, v in enumerate(x)]
        if not isinstance(x, dict):
            return x
        if "tuple" in x:
            return tuple(decode(v, f"{path}[{i}]") for i, v in enumerate(x["tuple"]))
        if "dict" in x:
            return {k: decode(v, f"{path}[{k!r}]") for k, v in x["dict"]}
        if "pickle" in x:
            return unpickle(x["pickle"], path)
        return tensor_(x["tensor"], x.get("device"), path, bool(x.get("requires_grad")), bool(x.get("parameter")))

    def unpickle(i, path):
        def tensor_of(key):  # save's (entry, device, requires_grad, is an nn.Parameter)
            return tensor_(*key[:2], path, *key[2:])
        try:
            data = base64.b64decode(json.loads(meta[_PICKLES])[i])
        except (KeyError, IndexError, ValueError, TypeError) as e:
            raise FormatError(f"load: {path} of {where} names pickle {i!r}, which the file does not hold ({e})") \
                from None
        return serialization.loads(data, tensor_of, weights_only, f"{where} ({path})")

    if structure is None:
        return {name: tensor_(name, None, repr(name)) for name in entries}
    return decode(structure, "obj")
