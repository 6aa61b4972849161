"""The backend registry: availability with reasons, third-party backends (register() and
the entry-point group), TENSORLITE_DEVICE, and the rule that one op never mixes devices."""
import os
import pickle
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest

import tensorlite as tl
from tensorlite import backend as registry
from tensorlite.backends.cpu import CpuDevice
from conftest import assert_close, make_tensor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ToyDevice(CpuDevice):
    """A third-party backend: the numpy storage under another registry name."""
    name = "toy"


@pytest.fixture
def isolated_registry():
    """Registrations made by a test vanish afterwards (the registry is process-global)."""
    with tl.backends.scoped_registry():
        yield registry


@pytest.fixture
def toy(isolated_registry):
    tl.backends.register("toy", ToyDevice)
    return "toy"


def test_available_maps_every_builtin_name_to_true_or_a_reason():
    av = tl.backends.available()
    assert av["cpu"] is True
    for name in ("cuda", "rocm"):
        assert name in av
        assert av[name] is True or (isinstance(av[name], str) and av[name].strip()), (name, av[name])


@pytest.mark.parametrize("name", ["cuda", "rocm"])
def test_unavailable_gpu_backend_raises_with_its_reason(name):
    reason = tl.backends.available()[name]
    if reason is True:
        pytest.skip(f"{name} is available on this machine")
    with pytest.raises(tl.BackendUnavailable) as info:
        tl.zeros(2, device=name)
    assert isinstance(info.value, tl.DeviceError)
    assert name in str(info.value)
    assert reason.split(":")[0] in str(info.value)
    with pytest.raises(tl.DeviceError):
        tl.tensor([1.0]).to(f"{name}:0")
    with pytest.raises(tl.DeviceError) as info:
        tl.zeros(1, device=f"{name}:1")
    assert name in str(info.value)


def test_unknown_and_malformed_device_strings():
    with pytest.raises(tl.DeviceError) as info:
        tl.zeros(2, device="tpu")
    assert "tpu" in str(info.value) and "cpu" in str(info.value)  # lists what is registered
    with pytest.raises(tl.DeviceError):
        tl.zeros(2, device="cpu:x")


def test_device_string_forms(device):
    assert tl.zeros(1, device=device).device.split(":")[0] == device
    if device != "cpu":
        assert tl.zeros(1, device=f"{device}:0").device == f"{device}:0"
    assert tl.zeros(1, device="cpu").device == "cpu"


def test_device_objects_as_torch_device(device):
    """Tensor.device is a tl.device: the name as a str (so it compares to and goes where a
    name does) with torch.device's type / index; tl.device builds one as torch.device does."""
    d = tl.zeros(1, device=device).device
    assert isinstance(d, tl.device) and isinstance(d, str)
    assert d.type == device and (d.index is None if device == "cpu" else d.index == 0)
    assert repr(d) == ("device(type='cpu')" if device == "cpu" else f"device(type='{device}', index=0)")
    assert tl.zeros(1, device=d).device == d  # a tl.device names a device wherever a string does
    assert tl.zeros(1, device=device).is_cuda is (device == "cuda")
    assert tl.zeros(1, device=device).is_cpu is (device == "cpu")
    assert (tl.device("cuda", 1), tl.device("cuda:1").index, tl.device("cuda").index) == ("cuda:1", 1, None)
    assert pickle.loads(pickle.dumps(tl.device("rocm:2"))) == tl.device("rocm", 2)
    for bad in [("cuda:0", 1), ("cuda", -1), ("cuda", True), ("cuda:x",), ("",)]:
        with pytest.raises(tl.DeviceError):
            tl.device(*bad)


def test_to_another_tensor_takes_its_dtype_and_device(device):
    x = tl.tensor([1, 2])
    y = x.to(tl.zeros(1, dtype=tl.float16, device=device))
    assert (y.dtype, y.device, y.tolist()) == (tl.float16, tl.zeros(1, device=device).device, [1.0, 2.0])


def test_cuda_module_answers_as_torch_cuda():
    ok = tl.backends.available().get("cuda") is True
    assert tl.cuda.is_available() is ok
    if not ok:
        assert tl.cuda.device_count() == 0
        with pytest.raises(tl.BackendUnavailable):
            tl.cuda.synchronize()
        return
    assert tl.cuda.device_count() >= 1 and tl.cuda.get_device_name(0)
    tl.cuda.synchronize()
    tl.cuda.synchronize(tl.device("cuda", 0))
    with pytest.raises(tl.DeviceError):
        tl.cuda.synchronize("cpu")


def test_register_third_party_backend_and_run_ops(toy, rng):
    assert tl.backends.available()["toy"] is True
    x, a = make_tensor(rng, (3, 4), tl.float32, "toy")
    assert x.device == "toy:0"
    y = (x @ x.T).exp().sum(1)
    assert y.device == "toy:0"
    assert_close(y, np.exp(a.astype(np.float64) @ a.T).sum(1), tl.float32, terms=3)
    assert tl.randn(5, device="toy").device == "toy:0"
    moved = x.to("cpu")
    assert moved.device == "cpu"
    np.testing.assert_array_equal(moved.numpy(), a)
    np.testing.assert_array_equal(moved.to("toy").numpy(), a)


def test_backend_whose_factory_fails_reports_its_reason(isolated_registry):
    def factory(ordinal):
        raise tl.BackendUnavailable("the frobnicator driver is not loaded")
    tl.backends.register("frob", factory)
    assert "frobnicator" in tl.backends.available()["frob"]
    with pytest.raises(tl.BackendUnavailable) as info:
        tl.ones(3, device="frob")
    assert "frobnicator" in str(info.value)

    def crashing(ordinal):
        raise OSError("libfrob.so: cannot open shared object file")
    tl.backends.register("frob2", crashing)
    assert "libfrob.so" in tl.backends.available()["frob2"]


def test_moving_to_an_unavailable_device_says_so_and_lists_the_available(isolated_registry):
    """issue 45: x.to('cuda') without a GPU said 'nor is it a dtype' and listed 27 dtype names."""
    def factory(ordinal):
        raise tl.BackendUnavailable("the frobnicator driver is not loaded")
    tl.backends.register("frob", factory)
    x = tl.zeros(3)
    for move in (lambda: x.to("frob"), lambda: x.to(device="frob:0"), lambda: tl.zeros(1, device="frob")):
        with pytest.raises(tl.DeviceError) as info:
            move()
        msg = str(info.value)
        assert "no 'frob' device here" in msg and "frobnicator driver is not loaded" in msg, msg
        assert "available devices: ['cpu'" in msg and "dtype" not in msg, msg


def test_cuda_method_without_cuda_says_there_is_no_cuda_device():
    av = tl.backends.available()
    if av["cuda"] is True:
        pytest.skip("a CUDA device is available here")
    with pytest.raises(tl.DeviceError) as info:
        tl.zeros(3).cuda()
    msg = str(info.value)
    assert "no 'cuda' device here" in msg and av["cuda"] in msg, msg
    assert f"available devices: {tl.backends.available_devices()}" in msg and "dtype" not in msg, msg


def test_entry_point_backends_load_and_broken_ones_report(isolated_registry, monkeypatch):
    import importlib.metadata

    def ep(name, load):
        return SimpleNamespace(name=name, value=f"plugin:{name}", load=load)

    def broken_load():
        raise ImportError("plugin needs libfoo")

    def fake_entry_points(group=None, **kw):
        assert group == "tensorlite.backends"
        return [ep("plugged", lambda: ToyDevice), ep("broken", broken_load)]

    monkeypatch.setattr(importlib.metadata, "entry_points", fake_entry_points)
    tl.backends.load_entry_points(reload=True)
    av = tl.backends.available()
    assert av["plugged"] is True
    assert "libfoo" in av["broken"]
    assert tl.ones(2, device="plugged").sum().item() == 2.0
    with pytest.raises(tl.DeviceError):
        tl.ones(2, device="broken")


def _other_device(device):
    """A device different from `device` that surely exists here."""
    if device != "cpu":
        return "cpu"
    tl.backends.register("toy", ToyDevice)
    return "toy"


OPS_ON_TWO_TENSORS = [
    ("add", lambda x, y: x + y), ("mul", lambda x, y: x * y), ("eq", lambda x, y: x == y),
    ("matmul", lambda x, y: x @ y), ("where", lambda x, y: tl.where(x > 0, x, y)),
    ("cat", lambda x, y: tl.cat([x, y])), ("maximum", lambda x, y: tl.maximum(x, y)),
    ("index_select", lambda x, y: x.index_select(0, y.long().clamp(0, 1))),
    ("masked_fill", lambda x, y: x.masked_fill(y > 0, 1.0)),
]


@pytest.mark.parametrize("op, fn", OPS_ON_TWO_TENSORS, ids=[o[0] for o in OPS_ON_TWO_TENSORS])
def test_mixing_devices_raises_and_names_both(device, rng, isolated_registry, op, fn):
    other = _other_device(device)
    x, _ = make_tensor(rng, (2, 2), tl.float32, device)
    y, _ = make_tensor(rng, (2, 2), tl.float32, other)
    with pytest.raises(tl.DeviceError) as info:
        fn(x, y)
    msg = str(info.value)
    assert op in msg and device in msg and other in msg, msg


def test_conv_with_weight_on_other_device_raises(device, rng, isolated_registry):
    other = _other_device(device)
    x, _ = make_tensor(rng, (1, 2, 4, 4), tl.float32, device)
    w, _ = make_tensor(rng, (3, 2, 3, 3), tl.float32, other)
    with pytest.raises(tl.DeviceError) as info:
        tl.conv2d(x, w)
    assert "conv2d" in str(info.value)


def _run_python(code, **env):
    full_env = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full_env, cwd=REPO, timeout=120)


def test_tensorlite_device_env_sets_the_default():
    code = """
        import tensorlite as tl
        from tensorlite.backends.cpu import CpuDevice
        class ToyDevice(CpuDevice):
            name = "toy"
        tl.backends.register("toy", ToyDevice)
        print(tl.zeros(2).device, tl.tensor([1.0]).device, tl.randn(3).device)
    """
    out = _run_python(code, TENSORLITE_DEVICE="toy")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["toy:0", "toy:0", "toy:0"]
    out = _run_python("import tensorlite as tl; print(tl.ones(1).device)", TENSORLITE_DEVICE="cpu")
    assert out.stdout.strip() == "cpu", out.stderr


def test_import_never_fails_without_gpu_and_default_device_error_is_clear():
    av = tl.backends.available()
    missing = next((n for n in ("cuda", "rocm") if av[n] is not True), None)
    if missing is None:
        pytest.skip("both GPU backends are available here")
    code = """
        import tensorlite as tl
        try:
            tl.zeros(2)
        except tl.DeviceError as e:
            print("DeviceError", e)
    """
    out = _run_python(code, TENSORLITE_DEVICE=missing)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("DeviceError") and missing in out.stdout
