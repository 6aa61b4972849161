"""Model IO: safetensors files (through the `safetensors` package's numpy API; bf16 via
ml_dtypes) and Hugging Face checkpoint directories."""
from __future__ import annotations

import json
import os

from . import dtype as _dt
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
            raise TypeError(f"save_safetensors: {name!r} is a {type(t).__name__}, not a Tensor")
        arrays[name] = t.detach().numpy()  # a C-contiguous host copy (np.ascontiguousarray would make 0-d 1-d)
    _safetensors_numpy().save_file(arrays, os.fspath(path), metadata=metadata)


def load_safetensors(path, device=None, dtype=None) -> dict:
    """{name: Tensor} from a safetensors file, on `device`; `dtype` casts floating tensors."""
    cast = None if dtype is None else _dt.get(dtype)
    out = {}
    for name, arr in _safetensors_numpy().load_file(os.fspath(path)).items():
        t = tensor(arr, dtype=_dt.get(arr.dtype), device=device)
        out[name] = t._cast(cast) if cast is not None and t.dtype.is_floating_point else t
    return out


def load_hf_checkpoint(directory, device=None, dtype=None):
    """(config dict, state dict) of a Hugging Face model directory: `config.json` plus
    `model.safetensors` or a sharded `model.safetensors.index.json`."""
    directory = os.fspath(directory)
    config_path = os.path.join(directory, "config.json")
    if not os.path.isfile(config_path):
        raise FileNotFoundError(f"load_hf_checkpoint: no config.json in {directory!r}")
    with open(config_path) as f:
        config = json.load(f)
    single = os.path.join(directory, "model.safetensors")
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.isfile(single):
        shards = [single]
    elif os.path.isfile(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        shards = [os.path.join(directory, s) for s in sorted(set(weight_map.values()))]
    else:
        raise FileNotFoundError(f"load_hf_checkpoint: {directory!r} has neither model.safetensors nor "
                                "model.safetensors.index.json (only safetensors checkpoints are supported)")
    state = {}
    for shard in shards:
        state.update(load_safetensors(shard, device=device, dtype=dtype))
    return config, state
