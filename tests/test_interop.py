"""DLPack both ways (numpy, PyTorch, CuPy, JAX; zero-copy: writes are seen across) and
tl.autocast, on every device."""
import gc
import os

import numpy as np
import pytest

import tensorlite as tl
from tensorlite import dlpack as _dlpack

from conftest import FLOAT_DTYPES, assert_close, random_array

DLPACK_DTYPES = [d for d in tl.dtype.ALL]
SHARABLE = {"cpu", "cuda", "rocm"}  # devices whose memory other frameworks can address


def _torch_device(device):
    """The torch device that shares memory with tensorlite's `device`, or a skip naming what is missing."""
    torch = pytest.importorskip("torch")
    if device == "cpu":
        return torch, "cpu"
    if device.startswith(("cuda", "rocm")) and torch.cuda.is_available():
        return torch, f"cuda:{tl.backend.parse_device(device)[1]}"
    pytest.skip(f"torch has no GPU here to share {device}'s memory with")


def _sharable(device):
    if tl.backend.parse_device(device)[0] not in SHARABLE:
        pytest.skip(f"{device}: its memory is not addressable by other frameworks (tested to raise below)")


@pytest.mark.parametrize("dtype", DLPACK_DTYPES, ids=lambda d: d.name)
def test_torch_round_trip_shares_memory(device, dtype, rng):
    _sharable(device)
    torch, tdev = _torch_device(device)
    a = random_array(rng, (3, 5), dtype)
    x = tl.tensor(a, device=device)[:, 1:4]  # a strided view with an offset
    t = torch.from_dlpack(x)
    assert tuple(t.shape) == x.shape and tuple(t.stride()) == x.stride() and str(t.device) == tdev
    assert t.data_ptr() == x.data_ptr()
    assert_close(tl.from_dlpack(t.cpu()), a[:, 1:4], dtype)
    back = tl.from_dlpack(t)
    assert back.data_ptr() == x.data_ptr() and back.dtype is dtype and back.device == x.device
    # a write through torch is seen by tensorlite, and the other way round
    t.zero_()
    if device != "cpu":
        torch.cuda.synchronize()
    assert not x.numpy().any()
    x.fill_(1)
    tl.synchronize(device)  # shared memory, separate streams: a write is ordered by a sync (as between torch streams)
    assert (t.cpu().to(torch.float64) == 1).all()


def test_torch_tensors_stay_alive_while_shared(device):
    _sharable(device)
    torch, tdev = _torch_device(device)
    t = torch.arange(6, device=tdev, dtype=torch.float32).reshape(2, 3)
    x = tl.from_dlpack(t)
    del t
    gc.collect()
    assert x.tolist() == [[0, 1, 2], [3, 4, 5]]
    y = tl.arange(4, device=device)
    gc.collect()  # exports of earlier tests that are garbage already
    exported = len(_dlpack._EXPORTED)
    u = torch.from_dlpack(y)
    assert len(_dlpack._EXPORTED) == exported + 1
    del y
    gc.collect()
    assert u.tolist() == [0, 1, 2, 3]
    del u
    gc.collect()
    assert len(_dlpack._EXPORTED) == exported  # the consumer's deleter released our side


def test_numpy_both_ways_on_cpu():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = tl.from_dlpack(a)
    a[0, 0] = 42
    assert x.device == "cpu" and x[0, 0].item() == 42
    b = np.from_dlpack(x.T)
    assert b.shape == (4, 3) and b.strides == (4, 16) and b[0, 0] == 42
    b[1, 0] = -1
    assert x[0, 1].item() == -1
    ro = np.ones(3)
    ro.flags.writeable = False
    assert tl.from_dlpack(ro).data_ptr() != ro.ctypes.data  # read-only memory is copied (tensors are writable)
    assert tl.from_dlpack(np.zeros((0, 4))).shape == (0, 4)
    assert tl.from_dlpack(np.array(2.5)).item() == 2.5


def test_unconsumed_capsule_releases_the_export():
    gc.collect()
    before = len(_dlpack._EXPORTED)
    capsule = tl.arange(3, device="cpu").__dlpack__()
    assert len(_dlpack._EXPORTED) == before + 1
    del capsule
    gc.collect()
    assert len(_dlpack._EXPORTED) == before


def test_cupy_and_jax_share_gpu_memory(gpu_device):
    if tl.backend.parse_device(gpu_device)[0] != "cuda":
        pytest.skip(f"{gpu_device}: CuPy and JAX are tested on cuda")
    cupy = pytest.importorskip("cupy")
    x = tl.arange(8, device=gpu_device).float()
    c = cupy.from_dlpack(x)
    assert c.data.ptr == x.data_ptr()
    c *= 2
    cupy.cuda.runtime.deviceSynchronize()
    same = tl.backend.parse_device
    assert x.tolist() == [2.0 * i for i in range(8)]
    y = tl.from_dlpack(cupy.arange(5, dtype=cupy.int64))
    assert same(y.device) == same(gpu_device) and y.tolist() == list(range(5))
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX would take 75% of the GPU at once
    jax = pytest.importorskip("jax")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("jax has no GPU here")
    j = jax.numpy.arange(6.0).reshape(2, 3)
    z = tl.from_dlpack(j)
    assert same(z.device) == same(gpu_device) and z.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert jax.numpy.asarray(jax.dlpack.from_dlpack(x)).tolist() == [2.0 * i for i in range(8)]


def test_unsharable_devices_and_bad_input_raise(device):
    if tl.backend.parse_device(device)[0] not in SHARABLE:
        with pytest.raises(tl.DeviceError, match="not addressable"):
            tl.arange(3, device=device).__dlpack__()
    with pytest.raises(TypeError, match="from_dlpack: expected"):
        tl.from_dlpack([1, 2, 3])
    with pytest.raises(BufferError, match="copy to device"):
        tl.arange(3, device="cpu").__dlpack__(dl_device=(2, 0))


# ---- autocast --------------------------------------------------------------------------

@pytest.mark.parametrize("low", [tl.bfloat16, tl.float16], ids=lambda d: d.name)
def test_autocast_runs_matmul_low_and_softmax_high(device, low, rng):
    kind = tl.backend.parse_device(device)[0]
    a = tl.tensor(random_array(rng, (4, 8), tl.float32), device=device, requires_grad=True)
    w = tl.tensor(random_array(rng, (6, 8), tl.float32), device=device, requires_grad=True)
    with tl.autocast(kind, dtype=low):
        h = tl.nn.functional.linear(a, w)
        c = a @ w.mT
        p = tl.nn.functional.softmax(c, -1)
        assert tl.amp.is_autocast_enabled(kind)
    assert h.dtype is low and c.dtype is low and p.dtype is tl.float32
    assert not tl.amp.is_autocast_enabled()
    ref = a.detach()._cast(low) @ w.detach()._cast(low).mT
    assert_close(c, ref.numpy(), low)
    p.sum().backward()
    assert a.grad.dtype is tl.float32 and w.grad.dtype is tl.float32  # parameters stay float32


def test_autocast_leaves_other_devices_and_float64_alone(device):
    kind = tl.backend.parse_device(device)[0]
    other = "cpu" if kind != "cpu" else next((d for d in tl.backend.registered() if d != "cpu"))
    x = tl.ones(2, 2, device=device)
    with tl.autocast(other, dtype=tl.bfloat16):
        assert (x @ x).dtype is tl.float32
    with tl.autocast(kind, dtype=tl.bfloat16):
        assert (x.double() @ x.double()).dtype is tl.float64
        with tl.autocast(kind, enabled=False):
            assert (x @ x).dtype is tl.float32

    @tl.autocast(kind, dtype=tl.float16)
    def f(a):
        return a @ a
    assert f(x).dtype is tl.float16


def test_autocast_bad_arguments():
    with pytest.raises(tl.ArgumentError, match="device_type must be one of"):
        tl.autocast("tpu")
    with pytest.raises(tl.DTypeError, match="float16 or bfloat16"):
        tl.autocast("cpu", dtype=tl.float32)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
def test_autocast_conv(device, dtype, rng):
    kind = tl.backend.parse_device(device)[0]
    x = tl.tensor(random_array(rng, (1, 2, 5, 5), dtype), device=device)
    w = tl.tensor(random_array(rng, (3, 2, 3, 3), dtype), device=device)
    with tl.autocast(kind, dtype=tl.bfloat16):
        y = tl.conv2d(x, w)
    assert y.dtype is (tl.float64 if dtype is tl.float64 else tl.bfloat16)
