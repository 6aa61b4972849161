"""tl.save / tl.load: state dicts of model + optimizer + scalars round-trip on every device (paths and
file objects, every dtype, shared tensors), the files are safetensors, and nothing is ever unpickled."""
import io
import json
import pickle

import numpy as np
import pytest

import tensorlite as tl
import tensorlite.nn.functional as F
from tensorlite import nn, optim
from conftest import ALL_DTYPES, random_array


def rewrite_structure(data: bytes, edit) -> bytes:
    """The file with its structure JSON passed through `edit` (to forge what tl.save would not write), and
    without checksums: a file of format 1, which loads unchecked."""
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    meta = header["__metadata__"]
    meta["tensorlite.save"] = edit(meta["tensorlite.save"])
    del meta["tensorlite.checksums"], meta["tensorlite.format"]
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    return len(head).to_bytes(8, "little") + head + data[8 + n:]


def round_trip(obj, **load_kwargs):
    buf = io.BytesIO()
    tl.save(obj, buf)
    buf.seek(0)
    return tl.load(buf, **load_kwargs)


def test_model_optimizer_and_scalars_round_trip(device, rng, tmp_path):
    tl.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.GELU(), nn.Linear(4, 2)).to(device)
    opt = optim.AdamW(model.parameters(), lr=0.01)
    x = tl.tensor(rng.standard_normal((5, 3)), dtype=tl.float32, device=device)
    y = tl.tensor(rng.integers(0, 2, 5), device=device)

    def train(m, o, steps):
        for _ in range(steps):
            o.zero_grad()
            F.cross_entropy(m(x), y).backward()
            o.step()
    train(model, opt, 2)
    ckpt = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3, "loss": 0.25,
            "name": "run-1", "history": [1.5, None, (2, "a")], "best": float("inf"), "flags": {1: True, 2.5: False}}
    path = tmp_path / "ckpt.pt"
    tl.save(ckpt, path)
    loaded = tl.load(path)
    assert {k: loaded[k] for k in ("epoch", "loss", "name", "history", "best", "flags")} == \
        {k: ckpt[k] for k in ("epoch", "loss", "name", "history", "best", "flags")}
    for k, t in ckpt["model"].items():
        got = loaded["model"][k]
        assert got.dtype == t.dtype and got.device == t.device and got.shape == t.shape, k
        np.testing.assert_array_equal(got.numpy(), t.numpy())
    assert loaded["optimizer"]["param_groups"] == ckpt["optimizer"]["param_groups"]
    # resuming from the file continues exactly as the run that never stopped
    tl.manual_seed(1)
    model2 = nn.Sequential(nn.Linear(3, 4), nn.GELU(), nn.Linear(4, 2)).to(device)
    opt2 = optim.AdamW(model2.parameters(), lr=0.5)
    model2.load_state_dict(loaded["model"])
    opt2.load_state_dict(loaded["optimizer"])
    train(model, opt, 3)
    train(model2, opt2, 3)
    for a, b in zip(model.parameters(), model2.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_every_dtype_views_and_sharing(device, rng):
    tensors = {dt.name: tl.tensor(random_array(rng, (2, 3), dt), dtype=dt, device=device) for dt in ALL_DTYPES}
    w = tensors["float32"]
    obj = {"t": tensors, "view": w.T[1:], "tied": [w, w], "scalar": tl.tensor(2.5, device=device),
           "empty": tl.zeros((0, 4), device=device), "param": nn.Parameter(tl.ones(2, device=device))}
    got = round_trip(obj)
    for name, t in tensors.items():
        assert got["t"][name].dtype == t.dtype and got["t"][name].device == t.device, name
        np.testing.assert_array_equal(got["t"][name].numpy(), t.numpy())  # bf16 bit-exact
    np.testing.assert_array_equal(got["view"].numpy(), w.numpy().T[1:])
    assert got["tied"][0] is got["tied"][1] is got["t"]["float32"]  # one tensor saved twice loads as one
    assert got["scalar"].shape == () and got["scalar"].item() == 2.5 and got["empty"].shape == (0, 4)
    assert got["param"].requires_grad and not got["t"]["float32"].requires_grad


def test_files_are_safetensors(tmp_path):
    safetensors = pytest.importorskip("safetensors")
    path = tmp_path / "sd.safetensors"
    tl.save({"w": tl.ones(2, 3, dtype=tl.bfloat16), "step": 7}, path)
    with safetensors.safe_open(str(path), framework="numpy") as f:
        assert len(f.keys()) == 1 and "tensorlite.save" in f.metadata()
    # and a plain safetensors file (a Hugging Face checkpoint) loads as {name: Tensor}
    plain = tmp_path / "plain.safetensors"
    tl.save_safetensors({"a.weight": tl.tensor([[0, 1, 2], [3, 4, 5]]), "b": tl.ones(1, dtype=tl.float16)}, plain)
    got = tl.load(plain, map_location="cpu")
    assert got["a.weight"].tolist() == [[0, 1, 2], [3, 4, 5]] and got["b"].dtype == tl.float16
    got["a.weight"].add_(1)  # loaded tensors own their memory (the file is mapped while loading)
    assert got["a.weight"].tolist()[0] == [1, 2, 3]


def test_map_location(device):
    got = round_trip({"w": tl.ones(2, device=device)}, map_location="cpu")
    assert got["w"].device == "cpu"
    assert round_trip([tl.ones(2)], map_location=device)[0].device == tl.ones(1, device=device).device
    with pytest.raises(ValueError, match="map_location must be a device string"):
        round_trip([tl.ones(1)], map_location={"cuda:0": "cpu"})


def test_a_device_missing_here_names_the_key_and_map_location():
    buf = io.BytesIO()
    tl.save({"model": {"w": tl.ones(2)}}, buf)
    forged = rewrite_structure(buf.getvalue(), lambda s: s.replace('"cpu"', '"nodevice:0"'))
    with pytest.raises(tl.DeviceError, match=r"obj\['model'\]\['w'\] was saved on 'nodevice:0'.*map_location"):
        tl.load(io.BytesIO(forged))
    assert tl.load(io.BytesIO(forged), map_location="cpu")["model"]["w"].tolist() == [1.0, 1.0]


def test_what_cannot_be_pickled_names_the_key_path():
    with pytest.raises(TypeError, match=r"obj\['model'\]\['layers'\]\[1\] is a function, which cannot be pickled"):
        tl.save({"model": {"layers": [tl.ones(1), lambda x: x]}}, io.BytesIO())


def test_never_reads_a_pickled_torch_file(tmp_path):
    path = tmp_path / "evil.pt"
    path.write_bytes(pickle.dumps({"w": [1.0, 2.0]}))
    with pytest.raises(tl.FormatError, match="pickled .*never unpickles"):  # torch.save's files, not tl.save's
        tl.load(path)
    with pytest.raises(tl.FormatError, match="not a tl.save / safetensors file"):
        tl.load(io.BytesIO(b"\x05\x00\x00\x00\x00\x00\x00\x00{nope"))
    buf = io.BytesIO()
    tl.save({"w": tl.ones(1)}, buf)
    forged = rewrite_structure(buf.getvalue(), lambda s: s.replace('"tensor": "0"', '"tensor": "9"'))
    with pytest.raises(tl.FormatError, match=r"obj\['w'\] names tensor '9'"):
        tl.load(io.BytesIO(forged))


def test_a_whole_module_saves_and_loads_weights_only_as_torch(tmp_path):
    """tl.save(model) pickles the module, its tensors kept as the file's checked tensors; tl.load is
    weights-only by default (PyTorch 2.6+): the module's classes must be allowed, or weights_only=False."""
    tl.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    path = tmp_path / "model.pt"
    tl.save(model, path)
    with pytest.raises(tl.WeightsOnlyError, match=r"names tensorlite\.nn\.modules\.container\.Sequential, which is not "
                       r"an allowed global.*add_safe_globals\(\[Sequential\]\).*weights_only=False") as e:
        tl.load(path)
    assert isinstance(e.value, pickle.UnpicklingError)  # what torch raises, and its users catch
    with tl.serialization.safe_globals([nn.Sequential, nn.Linear]):
        with pytest.raises(tl.WeightsOnlyError, match="ReLU"):
            tl.load(path)
    assert tl.serialization.get_safe_globals() == []
    tl.serialization.add_safe_globals([nn.Sequential, nn.Linear, nn.ReLU])
    try:
        again = tl.load(path)
    finally:
        tl.serialization.clear_safe_globals()
    for loaded in (again, tl.load(path, weights_only=False)):
        assert type(loaded) is nn.Sequential and repr(loaded) == repr(model)
        for p, q in zip(loaded.parameters(), model.parameters()):
            assert type(p) is nn.Parameter and p.requires_grad and np.array_equal(p.numpy(), q.numpy())
        x = tl.randn(5, 3)
        assert np.array_equal(loaded(x).numpy(), model(x).numpy())


def test_pickled_parts_share_tensors_with_the_rest():
    """A state dict saved beside its module names the same entries: loaded, they are one object."""
    model = nn.Linear(2, 2)
    buf = io.BytesIO()
    tl.save({"model": model, "weight": model.weight, "steps": {(1, 2): 3}}, buf)
    buf.seek(0)
    got = tl.load(buf, weights_only=False)
    assert got["model"].weight is got["weight"] and got["steps"] == {(1, 2): 3}
    small = io.BytesIO()
    tl.save({"steps": {(1, 2): 3}, "seen": {1, 2}}, small)
    small.seek(0)
    assert tl.load(small) == {"steps": {(1, 2): 3}, "seen": {1, 2}}  # pickled, of types allowed by default
    bad = rewrite_structure(buf.getvalue(), lambda s: s.replace('{"pickle": 0}', '{"pickle": 7}'))
    with pytest.raises(tl.FormatError, match="names pickle 7"):
        tl.load(io.BytesIO(bad), weights_only=False)
