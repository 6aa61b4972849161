"""The vendor DNN seam (backends/rocm/dnn.py): cuDNN on `cuda`, MIOpen on `rocm`.

- Here (no GPU): the switch, the layout rules, and that each library reports itself
  unavailable with the loader's reason (MIOpen is not installed on this machine).
- On a GPU: every op the seam covers runs twice, with TENSORLITE_DNN=0 (portable kernels)
  and TENSORLITE_DNN=1 (library required; skipped with the library's own reason when it
  cannot load), and both are compared with the cpu backend; the library's call counter
  proves which path ran.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import tensorlite as tl
import tensorlite.nn.functional as F
from tensorlite.backends.rocm import get_platform
from tensorlite.backends.rocm import dnn as dnn_mod
from tensorlite.errors import BackendUnavailable
from tensorlite.layout import Layout

from conftest import _availability, as_f64, assert_close, random_array

GPU_NAMES = [n for n in ("cuda", "rocm") if n in _availability()]


# ---------------------------------------------------------------- no GPU needed
def test_miopen_reports_its_availability_with_a_reason():
    ok, why = dnn_mod.library_status(get_platform("rocm"))
    if ok:   # a ROCm machine with MIOpen: the status names the version and the file
        assert re.match(r"MIOpen \d+\.\d+\.\d+ \(", why), why
    else:
        assert "MIOpen" in why and "libMIOpen" in why, why
        ok2, why2 = dnn_mod.library_status(get_platform("rocm"))   # remembered, same answer
        assert (ok2, why2) == (ok, why)


def test_cudnn_status_names_the_library():
    ok, why = dnn_mod.library_status(get_platform("cuda"))
    assert "cuDNN" in why and ok == bool(re.match(r"cuDNN \d+\.\d+\.\d+ \(", why)), why


def test_mode_switch(monkeypatch):
    for value, mode in (("", "auto"), ("auto", "auto"), ("0", "0"), ("1", "1"), (" AUTO ", "auto")):
        monkeypatch.setenv("TENSORLITE_DNN", value)
        assert dnn_mod.dnn_mode() == mode
    monkeypatch.setenv("TENSORLITE_DNN", "yes")
    with pytest.raises(ValueError, match="TENSORLITE_DNN"):
        dnn_mod.dnn_mode()


def test_descriptor_layouts():
    ds = dnn_mod._dims_strides
    assert ds(Layout.contiguous((2, 3, 4, 5))) == ((2, 3, 4, 5), (60, 20, 5, 1))
    # a permuted (channels-last) view keeps its strides: no copy
    assert ds(Layout((2, 3, 4, 5), (60, 1, 15, 3), 7)) == ((2, 3, 4, 5), (60, 1, 15, 3))
    # size-1 dims get a packed stride whatever the view says (conv1d's added height has stride 0)
    assert ds(Layout((2, 3, 1, 5), (15, 5, 0, 1))) == ((2, 3, 1, 5), (15, 5, 5, 1))
    # (N, C) and (N, C, L) are padded to 4-d
    assert ds(Layout.contiguous((6, 4))) == ((6, 4, 1, 1), (4, 1, 1, 1))
    assert ds(Layout((2, 3, 4, 5), (0, 20, 5, 1))) is None            # broadcast batch
    assert ds(Layout((2, 1 << 16, 1 << 15, 1), (1 << 31, 1 << 15, 1, 1))) is None  # past int32


class _FakeLib(dnn_mod.DnnLib):
    name = "FakeDNN"
    DTYPES = ("f32",)

    def __init__(self, platform, fail=None):
        super().__init__(platform)
        self.fail, self.loads = fail, 0

    def load(self):
        self.loads += 1
        if self.fail:
            raise BackendUnavailable(self.fail)

    def version(self):
        return "0.1"


class _FakePlatform:
    def __init__(self, lib_fail):
        self._lib = _FakeLib(self, lib_fail)

    def dnn_lib(self):
        return self._lib


class _FakeDevice:
    def __init__(self, lib_fail=None):
        self.platform = _FakePlatform(lib_fail)

    def activate(self):
        pass

    def __str__(self):
        return "fake:0"


def test_dnn_for_follows_the_switch(monkeypatch):
    broken = _FakeDevice("libfake.so.1 not found: tried /opt/fake")
    monkeypatch.setenv("TENSORLITE_DNN", "0")
    assert dnn_mod.dnn_for(broken) is None and broken.platform._lib.loads == 0   # 0: never even loads it
    monkeypatch.setenv("TENSORLITE_DNN", "auto")
    assert dnn_mod.dnn_for(broken) is None                                      # auto: portable path
    monkeypatch.setenv("TENSORLITE_DNN", "1")
    with pytest.raises(BackendUnavailable, match="libfake.so.1 not found"):      # 1: the loader's reason
        dnn_mod.dnn_for(broken)
    good = _FakeDevice()
    d = dnn_mod.dnn_for(good)
    assert isinstance(d, dnn_mod.Dnn) and d.lib.name == "FakeDNN" and dnn_mod.dnn_for(good) is d


def test_run_falls_back_only_in_auto_mode(monkeypatch):
    d = dnn_mod.Dnn(_FakeDevice(), _FakeLib(None))

    def rejected():
        raise dnn_mod.DnnError("cudnnFoo failed: CUDNN_STATUS_NOT_SUPPORTED (3000)", unsupported=True)

    def broken():
        raise dnn_mod.DnnError("cudnnFoo failed: CUDNN_STATUS_EXECUTION_FAILED (5000)")

    monkeypatch.setenv("TENSORLITE_DNN", "auto")
    assert dnn_mod.run(d, "conv2d", rejected) is False and d.calls["conv2d_fallback"] == 1
    with pytest.raises(dnn_mod.DnnError, match="EXECUTION_FAILED"):
        dnn_mod.run(d, "conv2d", broken)
    monkeypatch.setenv("TENSORLITE_DNN", "1")
    with pytest.raises(dnn_mod.DnnError, match="NOT_SUPPORTED"):
        dnn_mod.run(d, "conv2d", rejected)
    assert dnn_mod.run(d, "conv2d", lambda: None) is True


# ---------------------------------------------------------------- on a GPU
@pytest.fixture(params=GPU_NAMES)
def gpu(request):
    status = _availability()[request.param]
    if status is not True:
        pytest.skip(f"backend {request.param!r} unavailable: {status}")
    return request.param


def _force(gpu, monkeypatch, value):
    """TENSORLITE_DNN=value; (device name, the Dnn or None). The library path is skipped
    with the library's own reason where it cannot load."""
    monkeypatch.setenv("TENSORLITE_DNN", value)
    dev = tl.zeros(1, device=gpu)._storage.device
    if value == "1":
        ok, why = dnn_mod.library_status(dev.platform)
        if not ok:
            pytest.skip(f"DNN library of {gpu} unavailable: {why}")
        return gpu, dnn_mod.dnn_for(dev)
    assert dnn_mod.dnn_for(dev) is None
    return gpu, None


@pytest.fixture(params=["0", "1"], ids=["portable", "dnn"])
def path(request, gpu, monkeypatch):
    """Each path forced in turn: (device name, the Dnn or None)."""
    return _force(gpu, monkeypatch, request.param)


@pytest.fixture
def library(gpu, monkeypatch):
    """The library path only: (device name, the Dnn)."""
    return _force(gpu, monkeypatch, "1")


def _ran(dnn, op, fn):
    """fn() and whether the library ran `op` (None: the portable path was forced)."""
    before = dict(dnn.calls) if dnn is not None else None
    out = fn()
    if dnn is not None:
        assert dnn.calls.get(op, 0) == before.get(op, 0) + 1, f"{op} did not run through {dnn}: {dnn.calls}"
        assert dnn.calls.get(f"{op}_fallback", 0) == before.get(f"{op}_fallback", 0)
    return out


DTYPES = [tl.float32, tl.float16, tl.bfloat16]
CONV_CASES = [  # (x shape, w shape, stride, padding, dilation, groups)
    ((2, 3, 9, 8), (4, 3, 3, 3), 1, 1, 1, 1),
    ((2, 4, 11, 10), (6, 2, 3, 2), (2, 1), (1, 0), (1, 2), 2),
    ((1, 8, 7, 7), (8, 1, 3, 3), 1, 1, 1, 8),       # depthwise
    ((3, 16, 6, 6), (8, 16, 1, 1), 1, 0, 1, 1),      # 1x1
]


def _pair(rng, xs, ws, dtype, device):
    xa, wa = random_array(rng, xs, dtype), random_array(rng, ws, dtype, -0.5, 0.5)
    return (tl.tensor(xa, dtype=dtype, device=device), tl.tensor(wa, dtype=dtype, device=device),
            tl.tensor(xa, dtype=dtype), tl.tensor(wa, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_conv2d_both_paths(path, rng, dtype, case):
    device, dnn = path
    xs, ws, s, p, d, g = CONV_CASES[case]
    x, w, xc, wc = _pair(rng, xs, ws, dtype, device)
    if dnn is not None and not dnn.supports_conv(x.dtype, x._layout):
        pytest.skip(f"{dnn.lib.name} leaves {dtype.name} convolutions to the portable kernels")
    y = _ran(dnn, "conv2d", lambda: tl.conv2d(x, w, None, s, p, d, g))
    assert_close(y, as_f64(tl.conv2d(xc, wc, None, s, p, d, g).numpy()), dtype, terms=ws[1] * ws[2] * ws[3])


def test_conv2d_strided_view_and_conv1d(path, rng):
    device, dnn = path
    xa = random_array(rng, (2, 5, 7, 3), tl.float32)
    wa = random_array(rng, (4, 3, 2, 2), tl.float32)
    x = tl.tensor(xa, device=device).permute(0, 3, 1, 2)      # NHWC memory seen as NCHW: no copy on the library path
    y = _ran(dnn, "conv2d", lambda: tl.conv2d(x, tl.tensor(wa, device=device), None, 1, 1))
    assert_close(y, tl.conv2d(tl.tensor(xa).permute(0, 3, 1, 2), tl.tensor(wa), None, 1, 1).numpy(), tl.float32, 12)
    xa1, wa1 = random_array(rng, (2, 3, 10), tl.float32), random_array(rng, (5, 3, 3), tl.float32)
    y1 = _ran(dnn, "conv2d", lambda: tl.conv1d(tl.tensor(xa1, device=device), tl.tensor(wa1, device=device),
                                               None, 2, 1))
    assert_close(y1, tl.conv1d(tl.tensor(xa1), tl.tensor(wa1), None, 2, 1).numpy(), tl.float32, 9)


@pytest.mark.parametrize("dtype", [tl.float32, tl.float16], ids=lambda d: d.name)
@pytest.mark.parametrize("stride,padding,output_padding,groups,dilation",
                         [(1, 0, 0, 1, 1), (2, 1, 1, 1, 1), (2, 1, 0, 2, 2)])
def test_conv_transpose2d_both_paths(path, rng, dtype, stride, padding, output_padding, groups, dilation):
    device, dnn = path
    x, w, xc, wc = _pair(rng, (2, 4, 5, 6), (4, 3, 3, 3), dtype, device)
    args = (None, stride, padding, output_padding, groups, dilation)
    if dnn is not None and not dnn.supports_conv(x.dtype, x._layout, transposed=True):
        pytest.skip(f"{dnn.lib.name}: conv_transpose2d stays on the portable kernels")
    y = _ran(dnn, "conv_transpose2d", lambda: tl.conv_transpose2d(x, w, *args))
    assert_close(y, tl.conv_transpose2d(xc, wc, *args).numpy(), dtype, terms=36)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("kind,kernel,stride,padding,count_include_pad",
                         [("max", 2, 2, 0, True), ("max", 3, 2, 1, True), ("avg", 3, 1, 1, True),
                          ("avg", 3, 2, 1, False), ("avg", (2, 3), (1, 2), 0, True)])
def test_pool2d_both_paths(path, rng, dtype, kind, kernel, stride, padding, count_include_pad):
    device, dnn = path
    xa = random_array(rng, (2, 3, 9, 10), dtype)
    x = tl.tensor(xa, dtype=dtype, device=device)
    if dnn is not None and dtype.short not in dnn.lib.DTYPES:
        pytest.skip(f"{dnn.lib.name} leaves {dtype.name} pooling to the portable kernels")
    if kind == "max":
        fn = lambda t: tl.max_pool2d(t, kernel, stride, padding)  # noqa: E731
    else:
        fn = lambda t: tl.avg_pool2d(t, kernel, stride, padding, count_include_pad=count_include_pad)  # noqa: E731
    y = _ran(dnn, f"{kind}_pool2d", lambda: fn(x))
    assert_close(y, fn(tl.tensor(xa, dtype=dtype)).numpy(), dtype, terms=9)


def test_pool_with_dilation_stays_portable(path, rng):
    device, dnn = path
    xa = random_array(rng, (1, 2, 8, 8), tl.float32)
    before = dict(dnn.calls) if dnn else {}
    y = tl.max_pool2d(tl.tensor(xa, device=device), 2, 1, 0, 2)
    assert_close(y, tl.max_pool2d(tl.tensor(xa), 2, 1, 0, 2).numpy(), tl.float32)
    if dnn is not None:
        assert dnn.calls.get("max_pool2d", 0) == before.get("max_pool2d", 0)


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("shape", [(4, 3, 5, 6), (8, 5)])
def test_dnn_batch_norm_matches_functional(library, rng, training, shape):
    """Dnn.batch_norm called directly, against F.batch_norm's composite on cpu."""
    device, dnn = library
    c = shape[1]
    xa = random_array(rng, shape, tl.float32)
    wa, ba = random_array(rng, (c,), tl.float32), random_array(rng, (c,), tl.float32)
    rma, rva = random_array(rng, (c,), tl.float32), random_array(rng, (c,), tl.float32, 0.5, 2.0)
    x = tl.tensor(xa, device=device)
    w, b, rm, rv = (tl.tensor(a, device=device) for a in (wa, ba, rma, rva))
    assert dnn.supports_batch_norm(x.dtype, x._layout)
    out = x._storage._new(x.numel())
    save = [x._storage._new(c), x._storage._new(c)]
    addr = lambda t: t._storage._addr(t._layout.offset)  # noqa: E731
    _ran(dnn, "batch_norm_training" if training else "batch_norm",
         lambda: dnn.batch_norm(x._storage, x._layout, out, addr(w), addr(b), addr(rm), addr(rv), 1e-3, training,
                                0.25, save[0].ptr, save[1].ptr))
    y = out.to_cpu(Layout.contiguous(shape))
    rmc, rvc = tl.tensor(rma), tl.tensor(rva)
    ey = F.batch_norm(tl.tensor(xa), rmc, rvc, tl.tensor(wa), tl.tensor(ba), training, 0.25, 1e-3)
    n = int(np.prod(shape)) // c
    assert_close(tl.tensor(y), ey.numpy(), tl.float32, terms=n)
    assert_close(rm, rmc.numpy(), tl.float32, terms=n)
    assert_close(rv, rvc.numpy(), tl.float32, terms=n)


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("dtype", [tl.float32, tl.float16], ids=lambda d: d.name)
def test_functional_batch_norm_both_paths(path, rng, training, dtype):
    """F.batch_norm takes the library (storage.batch_norm_fused) when weight, bias and running
    stats are given in the parameter dtype (f32 for f16 data); its gradients still match."""
    device, dnn = path
    if dnn is not None and dtype.short not in dnn.lib.BN_DTYPES:
        pytest.skip(f"{dnn.lib.name} leaves {dtype.name} batch norm to the composite")
    shape, c = (4, 3, 5, 6), 3
    xa = random_array(rng, shape, dtype)
    pa = [random_array(rng, (c,), tl.float32) for _ in range(3)] + [random_array(rng, (c,), tl.float32, 0.5, 2.0)]
    x = tl.tensor(xa, dtype=dtype, device=device, requires_grad=True)
    w, b, rm, rv = (tl.tensor(a, device=device) for a in pa)
    w.requires_grad_(True)
    y = _ran(dnn, "batch_norm_training" if training else "batch_norm",
             lambda: F.batch_norm(x, rm, rv, w, b, training, 0.25, 1e-3))
    xc = tl.tensor(xa, dtype=dtype, requires_grad=True)
    wc, bc, rmc, rvc = (tl.tensor(a) for a in pa)
    wc.requires_grad_(True)
    yc = F.batch_norm(xc, rmc, rvc, wc, bc, training, 0.25, 1e-3)
    n = int(np.prod(shape)) // c
    assert_close(y, yc.numpy(), dtype, terms=n)
    assert_close(rm, rmc.numpy(), tl.float32, terms=n)
    assert_close(rv, rvc.numpy(), tl.float32, terms=n)
    ga = random_array(rng, shape, tl.float32)
    (y * tl.tensor(ga, dtype=dtype, device=device)).sum().backward()
    (yc * tl.tensor(ga, dtype=dtype)).sum().backward()
    assert_close(x.grad, xc.grad.numpy(), dtype, terms=n)
    assert_close(w.grad, wc.grad.numpy(), tl.float32, terms=n)
