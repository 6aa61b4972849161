"""Model IO: safetensors files (through the `safetensors` package's numpy API; bf16 via
ml_dtypes) and Hugging Face checkpoint directories."""
from __future__ import annotations

import json
import os

from . import dtype as _dt
from .errors import DTypeError, FormatError
from .tensor import Tensor, tensor


def _safetensors_numpy():
    try:
        import safetensors.numpy as st
    except ImportError as e:  # an optional dependency: say how to get it
        raise ImportError("tensorlite safetensors IO needs the `safetensors` package "
                          "(pip install safetensors)") from e
    return st


def save_safetensors(tensors: dict, path, metadata: dict = None) -> None:
    """Write {name: Tensor} to `path` (any device and dtype; values are copied to the host)."""
    arrays = {}
    for name, t in tensors.items():
        if not isinstance(t, Tensor):
            raise DTypeError(f"save_safetensors: {name!r} is a {type(t).__name__}, not a Tensor")
        arrays[name] = t.detach().numpy()  # a C-contiguous host copy (np.ascontiguousarray would make 0-d 1-d)
    _safetensors_numpy().save_file(arrays, os.fspath(path), metadata=metadata)


def load_safetensors(path, device=None, dtype=None) -> dict:
    """{name: Tensor} from a safetensors file, on `device`; `dtype` casts floating tensors."""
    cast, path, out = None if dtype is None else _dt.get(dtype), os.fspath(path), {}
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
            t = tensor(arr, dtype=_dt.get(arr.dtype), device=device)
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
