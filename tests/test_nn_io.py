"""safetensors round trips (every dtype, bf16 included) and Hugging Face checkpoint loading."""
import json

import numpy as np
import pytest

import tensorlite as tl
from tensorlite import nn
from tensorlite.io import load_hf_checkpoint, load_safetensors, save_safetensors

safetensors = pytest.importorskip("safetensors", reason="the safetensors package is not installed")


def sample_tensors(rng, device):
    out = {}
    for dt in (tl.float32, tl.float16, tl.bfloat16, tl.float64):
        out[f"w.{dt.name}"] = tl.tensor(rng.standard_normal((3, 4)), dtype=dt, device=device)
    out["ids"] = tl.tensor(rng.integers(-5, 5, (7,)), device=device)
    out["mask"] = tl.tensor(rng.random((2, 2)) < 0.5, device=device)
    out["bytes"] = tl.tensor(rng.integers(0, 255, (4,)), dtype=tl.uint8, device=device)
    out["scalar"] = tl.tensor(2.5, device=device)
    return out


def test_round_trip_every_dtype(device, rng, tmp_path):
    tensors = sample_tensors(rng, device)
    tensors["view"] = tensors["w.float32"].T[1:]  # a non-contiguous view is written as its values
    path = tmp_path / "t.safetensors"
    save_safetensors(tensors, path, metadata={"format": "pt", "note": "tensorlite"})
    loaded = load_safetensors(path, device=device)
    assert set(loaded) == set(tensors)
    for name, t in tensors.items():
        got = loaded[name]
        assert got.dtype == t.dtype and got.shape == t.shape and got.device == t.device, name
        np.testing.assert_array_equal(got.numpy(), t.numpy(), err_msg=name)
    with safetensors.safe_open(str(path), framework="numpy") as f:
        assert f.metadata() == {"format": "pt", "note": "tensorlite"}
        assert set(f.keys()) == set(tensors)


def test_load_with_dtype_casts_only_floats(tmp_path, rng):
    path = tmp_path / "t.safetensors"
    save_safetensors(sample_tensors(rng, "cpu"), path)
    loaded = load_safetensors(path, dtype="bf16")
    assert loaded["w.float64"].dtype == tl.bfloat16 and loaded["ids"].dtype == tl.int64
    assert loaded["mask"].dtype == tl.bool_


def test_bf16_file_is_read_by_torch(tmp_path, rng):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from safetensors.torch import load_file, save_file
    t = tl.tensor(rng.standard_normal((2, 3)), dtype=tl.bfloat16)
    save_safetensors({"t": t}, tmp_path / "a.safetensors")
    back = load_file(str(tmp_path / "a.safetensors"))["t"]
    assert back.dtype == torch.bfloat16
    np.testing.assert_array_equal(back.float().numpy(), t.float().numpy())
    save_file({"u": back * 2}, str(tmp_path / "b.safetensors"))
    u = load_safetensors(tmp_path / "b.safetensors")["u"]
    assert u.dtype == tl.bfloat16
    np.testing.assert_array_equal(u.float().numpy(), (back * 2).float().numpy())


def test_save_rejects_non_tensors(tmp_path):
    with pytest.raises(TypeError, match="'a' is a ndarray, not a Tensor"):
        save_safetensors({"a": np.zeros(2)}, tmp_path / "x.safetensors")


def test_model_state_dict_round_trip(tmp_path, rng):
    model = nn.Sequential(nn.Embedding(11, 6), nn.LayerNorm(6), nn.Linear(6, 11))
    save_safetensors(model.state_dict(), tmp_path / "m.safetensors")
    fresh = nn.Sequential(nn.Embedding(11, 6), nn.LayerNorm(6), nn.Linear(6, 11))
    fresh.load_state_dict(load_safetensors(tmp_path / "m.safetensors"))
    ids = tl.tensor(rng.integers(0, 11, (2, 5)))
    np.testing.assert_array_equal(fresh(ids).numpy(), model(ids).numpy())


def write_hf_dir(path, tensors, shards=1):
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 4}))
    names = sorted(tensors)
    if shards == 1:
        save_safetensors(tensors, path / "model.safetensors")
        return
    weight_map = {}
    for i in range(shards):
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[i::shards]}
        save_safetensors(part, path / fname)
        weight_map.update({n: fname for n in part})
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


@pytest.mark.parametrize("shards", [1, 3])
def test_load_hf_checkpoint(device, tmp_path, rng, shards):
    tensors = {f"model.layers.{i}.weight": tl.tensor(rng.standard_normal((2, 4)), dtype=tl.bfloat16)
               for i in range(5)}
    write_hf_dir(tmp_path / "ckpt", tensors, shards)
    config, state = load_hf_checkpoint(tmp_path / "ckpt", device=device, dtype=tl.float32)
    assert config == {"model_type": "llama", "hidden_size": 4}
    assert set(state) == set(tensors)
    for name, t in tensors.items():
        assert state[name].dtype == tl.float32 and state[name].device.startswith(device)
        np.testing.assert_array_equal(state[name].numpy(), t.float().numpy())


def test_load_hf_checkpoint_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_hf_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="neither model.safetensors nor model.safetensors.index.json"):
        load_hf_checkpoint(tmp_path)


def test_load_checkpoint_written_by_transformers(tmp_path):
    """A directory from `save_pretrained` loads with the same names and values."""
    pytest.importorskip("torch", reason="torch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    cfg = transformers.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1)
    model = transformers.LlamaForCausalLM(cfg)
    model.save_pretrained(tmp_path, safe_serialization=True)
    config, state = load_hf_checkpoint(tmp_path)
    assert config["hidden_size"] == 16 and config["num_key_value_heads"] == 1
    ref = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    assert set(state) <= set(ref) and "model.embed_tokens.weight" in state
    for k, t in state.items():
        np.testing.assert_array_equal(t.numpy(), ref[k], err_msg=k)
