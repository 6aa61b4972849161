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

import cffi
import numpy as np
import pytest

import tensorlite as tl
import tensorlite.nn.functional as F
from tensorlite.backend import get_device
from tensorlite.backends.rocm import get_platform
from tensorlite.backends.rocm import dnn as dnn_mod
from tensorlite.backends.rocm.device import launch_args
from tensorlite.custom_op import storage_and_layout
from tensorlite.errors import BackendUnavailable
from tensorlite.layout import Layout

from conftest import as_f64, assert_close, device_params, random_array


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
    ds = dnn_mod.dims_strides
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


# ---------------------------------------------------------------- MIOpen's optional ops, through a fake libMIOpen
# The real MiopenLib runs against _FakeMiopenC, a recording stand-in for the cffi lib
# object (a real cffi FFI with MIOPEN_CDEFS builds the arguments), and GpuStorage runs
# on _RecordingDevice: the switch, the probe, the fallback and every argument the header
# documents are checked here; whether MIOpen computes what its sources say needs a ROCm
# GPU (the `path` tests further down).

class _PortablePath(Exception):
    """The portable kernel was asked for (the library did not take the op)."""


class _FakeMiopenC:
    STATUS_NAMES = {3: b"miopenStatusBadParm", 6: b"miopenStatusNotImplemented", 7: b"miopenStatusUnknownError"}

    def __init__(self, ffi, missing=(), status=0):
        self.ffi, self.missing, self.status = ffi, set(missing), status
        self.descs, self.calls, self._next, self._keep = {}, [], 0x10, []

    def __getattribute__(self, name):   # an unexported symbol: AttributeError, as cffi's dlopen lib
        if name.startswith("miopen") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(f"function/symbol '{name}' not found in library 'libMIOpen.so'")
        return object.__getattribute__(self, name)

    def addr(self, p):
        return int(self.ffi.cast("uintptr_t", p))

    def desc(self, d):
        """(miopenDataType_t code, dims, strides) a descriptor was set to."""
        return self.descs[self.addr(d)]

    def miopenGetErrorString(self, code):
        s = self.ffi.new("char[]", self.STATUS_NAMES.get(int(code), b"miopenStatusUnknownError"))
        self._keep.append(s)
        return s

    def miopenGetVersion(self, major, minor, patch):
        major[0], minor[0], patch[0] = 3, 4, 0
        return 0

    def miopenCreateWithStream(self, handle, stream):
        handle[0] = self.ffi.cast("miopenHandle_t", 0x77)
        return 0

    def miopenCreateTensorDescriptor(self, p):
        self._next += 0x10
        p[0] = self.ffi.cast("miopenTensorDescriptor_t", self._next)
        return 0

    def miopenSetTensorDescriptor(self, d, dt, nbdims, dims, strides):
        self.descs[self.addr(d)] = (int(dt), tuple(dims[0:nbdims]), tuple(strides[0:nbdims]))
        return 0

    def miopenDestroyTensorDescriptor(self, d):
        return 0

    def _record(self, name, *args):
        self.calls.append((name, args))
        return self.status

    def miopenLayerNormForward(self, *args):
        return self._record("miopenLayerNormForward", *args)

    def miopenT5LayerNormForward(self, *args):
        return self._record("miopenT5LayerNormForward", *args)

    def miopenRoPEForward(self, *args):
        return self._record("miopenRoPEForward", *args)


class _MiopenPlatform:
    def __init__(self, miopen):
        self.ffi, self._lib = miopen.ffi, miopen

    def dnn_lib(self):
        return self._lib

    def drain_launches(self):  # no launch queue here (launch_shim.py)
        pass


class _Kern(str):
    max_threads = 1024


class _Buf:
    def __init__(self, ptr, nbytes):
        self.ptr, self.nbytes = ptr, nbytes


class _RecordingDevice:
    props = {"multiprocessor_count": 4}

    def __init__(self, missing=(), status=0):
        from tensorlite.backends.rocm.hip import MIOPEN_CDEFS, MiopenLib
        ffi = cffi.FFI()
        ffi.cdef(MIOPEN_CDEFS)
        self.c = _FakeMiopenC(ffi, missing, status)
        miopen = MiopenLib(None)
        miopen.ffi, miopen.lib, miopen.path = ffi, self.c, "libMIOpen.so (fake)"
        self.platform = _MiopenPlatform(miopen)
        self.stream = ffi.cast("void*", 0x5000)
        self.allocs, self.launches, self._top = [], [], 1 << 20
        self.kernels = {}  # kernel_table.kernel_for's, by entry name (GpuDevice.kernels)

    def activate(self):
        pass

    def alloc(self, nbytes):
        buf = _Buf(self._top, nbytes)
        self._top += (nbytes + 511) // 256 * 256
        self.allocs.append(buf)
        return buf

    def function(self, source, name):
        if name.startswith("cast_"):   # the library path's cos/sin table expansion
            return _Kern(name)
        raise _PortablePath(name)

    def launch(self, kernel, grid, block, args, shared_mem=0):
        self.launches.append((kernel, args))

    def launch_values(self, kernel, grid, block, signature, values, shared_mem=0):
        self.launch(kernel, grid, block, launch_args(signature, values), shared_mem)

    def __str__(self):
        return "fake-rocm:0"


def _storage(dev, shape, dtype=tl.float32, layout=None):
    from tensorlite.backends.rocm.storage import GpuStorage
    layout = layout or Layout.contiguous(shape)
    n = max(layout.offset + sum((s - 1) * abs(st) for s, st in zip(layout.shape, layout.strides)) + 1, 0)
    return GpuStorage(dev, dev.alloc(n * dtype.itemsize), dtype, n), layout


def _calls(dev, name):
    return [args for n, args in dev.c.calls if n == name]


_F32, _F16 = 1, 0   # miopenDataType_t


@pytest.mark.parametrize("mode", ["0", "auto", "1"])
def test_fake_miopen_switch_routes_norms_and_rope(monkeypatch, mode):
    monkeypatch.setenv("TENSORLITE_DNN", mode)
    dev = _RecordingDevice()
    x, xl = _storage(dev, (2, 3, 8))
    w, wl = _storage(dev, (8,))
    b, bl = _storage(dev, (8,))
    q, ql = _storage(dev, (2, 2, 4, 8))
    c, _ = _storage(dev, (4, 4))
    tl_ = Layout((2, 4, 4), (0, 4, 1), 0)   # (t, d/2) broadcast over the batch, as F.rope_i passes it
    ops = [("miopenLayerNormForward", 11, lambda: x.layer_norm(xl, w, wl, b, bl, 1e-5)),   # 11, 8: where y goes
           ("miopenT5LayerNormForward", 8, lambda: x.rms_norm(xl, w, wl, 1e-6)),
           ("miopenRoPEForward", 8, lambda: q.rope(ql, c, tl_, c, tl_, "rope_i"))]
    for sym, y_at, op in ops:
        if mode == "0":
            with pytest.raises(_PortablePath):
                op()
            assert not _calls(dev, sym)
        else:
            out = op()
            assert len(_calls(dev, sym)) == 1 and dev.c.addr(_calls(dev, sym)[0][y_at]) == out.ptr
    if mode != "0":
        assert dnn_mod.dnn_for(dev).calls == {"layer_norm": 1, "rms_norm": 1, "rope_i": 1}


@pytest.mark.parametrize("dtype,code", [(tl.float32, _F32), (tl.float16, _F16)], ids=["f32", "f16"])
def test_fake_miopen_layer_norm_arguments(monkeypatch, dtype, code):
    monkeypatch.setenv("TENSORLITE_DNN", "1")
    dev = _RecordingDevice()
    x, xl = _storage(dev, (2, 3, 8), dtype)
    w, wl = _storage(dev, (8,), dtype)
    b, bl = _storage(dev, (8,), dtype)
    out = x.layer_norm(xl, w, wl, b, bl, 1e-5)
    (h, mode, xd, xp, wd, wp, bd, bp, eps, ndim, yd, yp, md, mp, rd, rp), = _calls(dev, "miopenLayerNormForward")
    a, d = dev.c.addr, dev.c.desc
    assert mode == 1 and ndim == 1 and eps == pytest.approx(1e-5)             # MIOPEN_WEIGHT_BIAS; dims 1.. normalised
    assert d(xd) == d(yd) == (code, (6, 8), (8, 1))
    assert d(wd) == d(bd) == (code, (8,), (1,))                                 # x.dims[normalized_dim:]
    assert d(md) == d(rd) == (code, (6,), (1,))                                 # x.dims[:normalized_dim]
    assert (a(xp), a(wp), a(bp), a(yp)) == (x.ptr, w.ptr, b.ptr, out.ptr)
    stats = [buf for buf in dev.allocs if buf.ptr <= a(mp) < buf.ptr + buf.nbytes]
    assert len(stats) == 1 and stats[0].nbytes >= 2 * 6 * 4 and a(rp) - a(mp) == 6 * 4   # f32-sized per row
    # no weight and bias: MIOPEN_ELEMENTWISE_AFFINE, NULL pointers, x as (rows, 1, n)
    x.layer_norm(xl, None, None, None, None, 1e-3)
    (h, mode, xd, xp, wd, wp, bd, bp, eps, ndim, *_), = _calls(dev, "miopenLayerNormForward")[1:]
    assert mode == 0 and ndim == 1 and d(xd) == (code, (6, 1, 8), (8, 8, 1)) and d(wd) == (code, (1, 8), (8, 1))
    assert a(wp) == a(bp) == 0


def test_fake_miopen_rms_norm_arguments(monkeypatch):
    monkeypatch.setenv("TENSORLITE_DNN", "1")
    dev = _RecordingDevice()
    x, xl = _storage(dev, (5, 16), tl.float16, Layout((5, 16), (16, 1), 16))   # an offset view
    w, wl = _storage(dev, (16,), tl.float16)
    out = x.rms_norm(xl, w, wl, 1e-6)
    out2 = x.rms_norm(xl, None, None, 0.5)
    (_, mode, xd, xp, wd, wp, eps, yd, yp, rd, rp), (_, mode2, *_, wp2, eps2, _, yp2, _, _) = \
        _calls(dev, "miopenT5LayerNormForward")
    a, d = dev.c.addr, dev.c.desc
    assert (mode, mode2) == (5, 4)                          # MIOPEN_WEIGHT_BIAS_T5, MIOPEN_ELEMENTWISE_AFFINE_T5
    assert d(xd) == d(yd) == (_F16, (5, 16), (16, 1)) and d(wd) == (_F16, (16,), (1,)) and d(rd) == (_F16, (5,), (1,))
    assert a(xp) == x.ptr + 16 * 2 and a(wp) == w.ptr and a(wp2) == 0 and (a(yp), a(yp2)) == (out.ptr, out2.ptr)
    assert eps == pytest.approx(1e-6) and eps2 == 0.5 and a(rp) != 0


def test_fake_miopen_rope_arguments_and_tables(monkeypatch):
    from tensorlite.backends.rocm.launch import pack_strided
    monkeypatch.setenv("TENSORLITE_DNN", "1")
    dev = _RecordingDevice()
    x, xl = _storage(dev, (2, 3, 4, 8))
    c, _ = _storage(dev, (4, 4))
    s, _ = _storage(dev, (4, 4))
    tab = Layout((2, 4, 4), (0, 4, 1), 0)
    out = x.rope(xl, c, tab, s, tab, "rope_i")
    (h, xd, xp, cd, cp, sd, sp, yd, yp), = _calls(dev, "miopenRoPEForward")
    a, d = dev.c.addr, dev.c.desc
    assert d(xd) == d(yd) == (_F32, (6, 1, 4, 8), (32, 32, 8, 1))        # (b*h, 1, t, d)
    assert d(cd) == d(sd) == (_F32, (1, 4, 8), (32, 8, 1))               # x.dims[1:], one value per element
    assert (a(xp), a(yp)) == (x.ptr, out.ptr)
    # each table expanded by one strided copy: value k of a row at 2k and 2k+1
    (k1, a1), (k2, a2) = dev.launches
    pair = pack_strided(Layout((4, 4, 2), (4, 1, 0), 0))[0]
    assert k1 == k2 == "cast_f32_f32" and a1[0] == a2[0] == ("int64", 32) and a1[1] == a2[1] == ("bytes", pair)
    assert (a1[2], a2[2]) == (("ptr", c.ptr), ("ptr", s.ptr)) and (a1[3][1], a2[3][1]) == (a(cp), a(sp))


def test_miopen_rope_layout_model_matches_cpu_rope_i(rng):
    """MIOpenRoPE.cpp's forward as a numpy model (flat index g, cos/sin at g % numel(cos),
    y[2k] = x[2k] cos - x[2k+1] sin, y[2k+1] = x[2k+1] cos + x[2k] sin), fed the way
    Dnn.rope feeds it, equals the cpu reference rope_i."""
    b, h, t, d = 2, 3, 5, 8
    xa = random_array(rng, (b, h, t, d), tl.float64)
    ca, sa = random_array(rng, (t, d // 2), tl.float64), random_array(rng, (t, d // 2), tl.float64)
    xf = xa.reshape(-1)
    cf, sf = np.repeat(ca, 2, axis=-1).reshape(-1), np.repeat(sa, 2, axis=-1).reshape(-1)   # (1, t, d)
    g = np.arange(xf.size)
    rot = np.where(g % 2 == 0, -xf[np.minimum(g + 1, xf.size - 1)], xf[g - 1])
    y = xf * cf[g % cf.size] + rot * sf[g % sf.size]
    ref = F.rope_i(tl.tensor(xa), tl.tensor(ca), tl.tensor(sa)).numpy()
    np.testing.assert_allclose(y.reshape(xa.shape), ref, rtol=1e-12, atol=1e-12)


def test_fake_miopen_leaves_other_cases_to_the_portable_kernels(monkeypatch):
    monkeypatch.setenv("TENSORLITE_DNN", "1")   # even when the library is required
    dev = _RecordingDevice()
    x, xl = _storage(dev, (4, 8))
    w, wl = _storage(dev, (8,))
    xb, xbl = _storage(dev, (4, 8), tl.bfloat16)
    xt = Layout((4, 8), (1, 4), 0)                                         # a transposed view
    q, ql = _storage(dev, (2, 2, 4, 8))
    c, _ = _storage(dev, (2, 4, 4))
    shared, per_batch = Layout((2, 4, 4), (0, 4, 1), 0), Layout((2, 4, 4), (16, 4, 1), 0)
    cases = [lambda: x.layer_norm(xl, w, wl, None, None, 1e-5),           # weight without bias: no such mode
             lambda: x.layer_norm(xl, w, Layout((8,), (2,), 0), w, Layout((8,), (2,), 0), 1e-5),  # strided weight
             lambda: x.layer_norm(xt, None, None, None, None, 1e-5),
             lambda: xb.layer_norm(xbl, None, None, None, None, 1e-5),   # bf16: left to the portable kernels
             lambda: xb.rms_norm(xbl, None, None, 1e-5),
             lambda: x.rms_norm(xt, None, None, 1e-5),
             lambda: q.rope(ql, c, shared, c, shared, "rope"),           # half-split: MIOpen pairs interleaved
             lambda: q.rope(ql, c, shared, c, shared, "rope_thd"),
             lambda: q.rope(ql, c, per_batch, c, per_batch, "rope_i"),   # per-batch tables: MIOpen has one
             lambda: q.rope(Layout((2, 2, 4, 8), (64, 8, 16, 1), 0), c, shared, c, shared, "rope_i"),
             lambda: q.rope_backward(ql, c, shared, c, shared, "rope_i")]
    for op in cases:
        with pytest.raises(_PortablePath):
            op()
    assert dev.c.calls == []


@pytest.mark.parametrize("sym,op", [("miopenLayerNormForward", "layer_norm"), ("miopenT5LayerNormForward", "rms_norm"),
                                    ("miopenRoPEForward", "rope_i")])
def test_fake_miopen_without_the_symbol_takes_the_portable_path(monkeypatch, sym, op):
    monkeypatch.setenv("TENSORLITE_DNN", "1")
    dev = _RecordingDevice(missing=[sym])
    lib = dev.platform.dnn_lib()
    assert lib.provides(op) is False and lib.features()[op] is False
    assert all(lib.provides(o) for o in ("layer_norm", "rms_norm", "rope_i") if o != op)
    x, xl = _storage(dev, (2, 2, 4, 8))
    c, _ = _storage(dev, (4, 4))
    tab = Layout((2, 4, 4), (0, 4, 1), 0)
    run = {"layer_norm": lambda: x.layer_norm(xl, None, None, None, None, 1e-5),
           "rms_norm": lambda: x.rms_norm(xl, None, None, 1e-5),
           "rope_i": lambda: x.rope(xl, c, tab, c, tab, "rope_i")}[op]
    with pytest.raises(_PortablePath):
        run()
    assert dev.c.calls == []


@pytest.mark.parametrize("status", [3, 6])   # miopenStatusBadParm, miopenStatusNotImplemented
def test_fake_miopen_rejection_falls_back_in_auto_and_raises_in_mode_1(monkeypatch, status):
    dev = _RecordingDevice(status=status)
    x, xl = _storage(dev, (3, 8))
    monkeypatch.setenv("TENSORLITE_DNN", "auto")
    with pytest.raises(_PortablePath):
        x.layer_norm(xl, None, None, None, None, 1e-5)
    with pytest.raises(_PortablePath):
        x.rms_norm(xl, None, None, 1e-5)
    calls = dnn_mod.dnn_for(dev).calls
    assert calls == {"layer_norm_fallback": 1, "rms_norm_fallback": 1} and len(dev.c.calls) == 2
    monkeypatch.setenv("TENSORLITE_DNN", "1")
    with pytest.raises(dnn_mod.DnnError, match=rf"miopenLayerNormForward failed: miopenStatus\w+ \({status}\)"):
        x.layer_norm(xl, None, None, None, None, 1e-5)


def test_fake_miopen_failure_is_raised_even_in_auto(monkeypatch):
    monkeypatch.setenv("TENSORLITE_DNN", "auto")
    dev = _RecordingDevice(status=7)   # miopenStatusUnknownError: a failure, not a rejection
    x, xl = _storage(dev, (3, 8))
    with pytest.raises(dnn_mod.DnnError, match=r"miopenT5LayerNormForward failed: miopenStatusUnknownError \(7\)"):
        x.rms_norm(xl, None, None, 1e-5)


def test_cudnn_has_no_optional_ops_and_is_not_loaded_for_them(monkeypatch):
    from tensorlite.backends.rocm.cuda import CudnnLib
    assert not any(CudnnLib(None).provides(op) for op in ("layer_norm", "rms_norm", "rope_i"))
    monkeypatch.setenv("TENSORLITE_DNN", "1")
    dev = _FakeDevice("libfake.so.1 not found")     # a library class without optional ops
    assert dnn_mod.dnn_for(dev, "layer_norm") is None and dev.platform._lib.loads == 0
    d = dnn_mod.Dnn(_FakeDevice(), _FakeLib(None))
    assert not d.supports_layer_norm(tl.float32, Layout.contiguous((2, 8)), (None, None), (None, None))
    assert not d.supports_rms_norm(tl.float32, Layout.contiguous((2, 8)), (None, None))


# ---------------------------------------------------------------- on a GPU
@pytest.fixture(params=device_params(("cuda", "rocm")))
def gpu(request):
    """The devices with a vendor DNN library (the emulated AMD platform has none)."""
    return request.param


def _force(gpu, monkeypatch, value):
    """TENSORLITE_DNN=value; (device name, the Dnn or None). The library path is skipped
    with the library's own reason where it cannot load."""
    monkeypatch.setenv("TENSORLITE_DNN", value)
    dev = get_device(gpu)
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
    if dnn is not None and not dnn.supports_conv(x.dtype, storage_and_layout(x)[1]):
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
    if dnn is not None and not dnn.supports_conv(x.dtype, storage_and_layout(x)[1], transposed=True):
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
    xs, xl = storage_and_layout(x)
    assert dnn.supports_batch_norm(x.dtype, xl)
    out = xs.device.alloc_uninit((x.numel(),), x.dtype)
    save = [xs.device.alloc_uninit((c,), x.dtype), xs.device.alloc_uninit((c,), x.dtype)]

    def addr(t):
        st, lay = storage_and_layout(t)
        return st.addr(lay.offset)
    _ran(dnn, "batch_norm_training" if training else "batch_norm",
         lambda: dnn.batch_norm(xs, xl, out, addr(w), addr(b), addr(rm), addr(rv), 1e-3, training,
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


def _optional(dnn, op):
    """Skip the library path where the loaded build lacks the optional op (cuDNN never has it)."""
    if dnn is not None and not dnn.lib.provides(op):
        pytest.skip(f"{dnn.lib.name} {dnn.lib.version()} has no {op} (symbol not exported / no such op)")


@pytest.mark.parametrize("dtype", [tl.float32, tl.float16], ids=lambda d: d.name)
@pytest.mark.parametrize("affine", [True, False], ids=["weight_bias", "plain"])
def test_layer_norm_both_paths(path, rng, dtype, affine):
    device, dnn = path
    _optional(dnn, "layer_norm")
    shape, n = (3, 5, 96), 96
    xa = random_array(rng, shape, dtype)
    pa = [random_array(rng, (n,), dtype) for _ in range(2)] if affine else [None, None]
    on = lambda a, dev=None: None if a is None else tl.tensor(a, dtype=dtype, device=dev)  # noqa: E731
    y = _ran(dnn, "layer_norm", lambda: F.layer_norm(on(xa, device), (n,), *(on(a, device) for a in pa), 1e-5))
    ey = F.layer_norm(on(xa), (n,), *(on(a) for a in pa), 1e-5)
    assert_close(y, as_f64(ey.numpy()), dtype, terms=n)


@pytest.mark.parametrize("dtype", [tl.float32, tl.float16], ids=lambda d: d.name)
@pytest.mark.parametrize("affine", [True, False], ids=["weight", "plain"])
def test_rms_norm_both_paths(path, rng, dtype, affine):
    device, dnn = path
    _optional(dnn, "rms_norm")
    shape, n = (4, 3, 80), 80
    xa, wa = random_array(rng, shape, dtype), random_array(rng, (n,), dtype) if affine else None
    w = lambda dev=None: None if wa is None else tl.tensor(wa, dtype=dtype, device=dev)  # noqa: E731
    y = _ran(dnn, "rms_norm", lambda: F.rms_norm(tl.tensor(xa, dtype=dtype, device=device), (n,), w(device), 1e-6))
    assert_close(y, as_f64(F.rms_norm(tl.tensor(xa, dtype=dtype), (n,), w(), 1e-6).numpy()), dtype, terms=n)


@pytest.mark.parametrize("dtype", [tl.float32, tl.float16], ids=lambda d: d.name)
@pytest.mark.parametrize("batched_tables", [False, True], ids=["shared", "b1"])
def test_rope_i_both_paths(path, rng, dtype, batched_tables):
    """rope_i with (t, d/2) tables (or (1, t, d/2) with b == 1): the cases MIOpen's RoPE takes."""
    device, dnn = path
    _optional(dnn, "rope_i")
    b, h, t, d = (1 if batched_tables else 2), 4, 6, 16
    xa = random_array(rng, (b, h, t, d), dtype)
    tabs = [random_array(rng, (b, t, d // 2) if batched_tables else (t, d // 2), dtype, -1.0, 1.0) for _ in range(2)]
    on = lambda a, dev=None: tl.tensor(a, dtype=dtype, device=dev)  # noqa: E731
    y = _ran(dnn, "rope_i", lambda: F.rope_i(on(xa, device), *(on(a, device) for a in tabs)))
    assert_close(y, as_f64(F.rope_i(on(xa), *(on(a) for a in tabs)).numpy()), dtype, terms=2)
