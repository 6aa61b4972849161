"""The platform's DNN library behind one seam (each platform names its own: `dnn_lib()`).

`Dnn(device)` is vendor-neutral: it turns layouts into descriptors, picks and caches an
algorithm per problem, takes workspace from the device's caching allocator and runs
everything on the device stream. The library calls live in the platform modules (cuda.py
and hip.py, each with a subclass of `DnnLib` below), so those two stay the only files that
name a vendor's library or functions.

Covered: conv2d forward (conv1d runs as a conv2d of height 1), conv_transpose2d as the
library's convolution backward-data (where the library has it wired:
`DnnLib.HAS_CONV_BWD_DATA`), max/avg pooling without dilation, and batch norm forward
(inference and training, spatial mode). Optional ops a library may lack
(`DnnLib.OPTIONAL_OPS`, `DnnLib.provides`): layer_norm, rms_norm and rope_i forward, which
one platform's library has in some builds (each symbol probed; the platform module says
which). Every op has the portable kernels as fallback; the GPU storage's conv and fused
ops (ops/conv.py, ops/fused.py) ask `dnn_for(device)` and use the library only where
`Dnn.supports_*` says so.

Switch: env TENSORLITE_DNN (read at every call, so tests can flip it)
  auto (default) use the library when it loads and supports the case; if it rejects a
                 problem (NOT_SUPPORTED / BAD_PARAM), fall back to the portable path
  0              portable kernels only
  1              require the library: BackendUnavailable (with the loader's reason) when it
                 cannot be loaded, and a library error is raised instead of falling back.
                 Cases outside its coverage (integer dtypes, dilated pooling, tensors past
                 2^31 elements) still take the portable path.

Numerics: f32 convolutions run with FMA math (no reduced-precision f32 modes), so they match
the cpu reference to f32 tolerance like the BLAS's f32 path; f16/bf16 compute in f32 (the
matrix units allowed).
"""
from __future__ import annotations

import os
import threading
import weakref
from typing import Dict, Optional, Tuple

from tensorlite import dtype as dtypes
from tensorlite.errors import ArgumentError, BackendError, BackendUnavailable
from tensorlite.layout import Layout

MODES = ("auto", "0", "1")
_INT32_MAX = 2 ** 31 - 1
_WORKSPACE_LIMIT = 512 << 20     # largest workspace an algorithm may ask for
_PLAN_CACHE_MAX = 1024


def dnn_mode() -> str:
    mode = os.environ.get("TENSORLITE_DNN", "auto").strip().lower() or "auto"
    if mode not in MODES:
        raise ArgumentError(f"TENSORLITE_DNN={mode!r}: expected one of {MODES}")
    return mode


class DnnError(BackendError):
    """A DNN library call failed; `unsupported` marks a problem the library rejects (as
    opposed to a failure), which auto mode answers with the portable path."""

    def __init__(self, msg: str, unsupported: bool = False):
        super().__init__(msg)
        self.unsupported = unsupported


# ---- the library interface (implemented by the platform modules) ----------------------

class DnnLib:
    """One platform's DNN library, loaded once per platform. Subclasses implement the primitives
    below; descriptors are cffi objects that destroy themselves when collected."""
    name = ""
    DTYPES: Tuple[str, ...] = ()            # dtype shorts the convolutions accept
    BN_DTYPES: Tuple[str, ...] = ()         # ... and batch norm
    HAS_CONV_BWD_DATA = False

    def __init__(self, platform):
        self.platform = platform
        self.lib = None
        self.path = ""

    def load(self) -> None: ...                                 # raises BackendUnavailable
    def version(self) -> str: ...
    def features(self) -> Dict[str, bool]:
        return {}

    def create(self, stream_addr: int): ...                     # -> handle bound to the stream
    def tensor(self, dt: str, dims, strides): ...
    def filter(self, dt: str, dims): ...
    def conv(self, dt: str, pad, stride, dilation, groups): ...
    def conv_fwd_algo(self, handle, xd, wd, cd, yd, ptrs, alloc, limit) -> Tuple[int, int]: ...
    def conv_fwd(self, handle, dt, xd, x, wd, w, cd, algo, ws, ws_bytes, yd, y) -> None: ...
    def conv_bwd_data_algo(self, handle, wd, dyd, cd, dxd, ptrs, alloc, limit) -> Tuple[int, int]:
        raise DnnError(f"{self.name}: convolution backward-data is not wired", unsupported=True)
    def conv_bwd_data(self, handle, dt, wd, w, dyd, dy, cd, algo, ws, ws_bytes, dxd, dx) -> None:
        raise DnnError(f"{self.name}: convolution backward-data is not wired", unsupported=True)
    def pool(self, mode: str, kernel, pad, stride): ...          # mode: max | avg_include | avg_exclude
    def pool_fwd(self, handle, dt, pd, xd, x, yd, y) -> None: ...
    def bn_param(self, xd): ...
    def bn_fwd_inference(self, handle, dt, xd, x, yd, y, pd, scale, bias, mean, var, eps) -> None: ...
    def bn_fwd_training(self, handle, dt, xd, x, yd, y, pd, scale, bias, factor, run_mean, run_var, eps,
                        save_mean, save_invstd) -> None: ...

    # optional ops (argument order after the one library that has them; the others have none)
    OPTIONAL_OPS: Tuple[str, ...] = ()      # the optional ops this library can have at all
    NORM_DTYPES: Tuple[str, ...] = ()       # dtypes layer_norm / rms_norm / rope_i take

    def provides(self, op: str) -> bool:
        """Whether this build has the optional op 'layer_norm', 'rms_norm' or 'rope_i'."""
        return False

    def layer_norm_forward(self, handle, affine, xd, x, wd, w, bd, b, eps, normalized_dim, yd, y, md, mean,
                           rd, rstd) -> None:
        raise DnnError(f"{self.name}: layer_norm is not wired", unsupported=True)

    def rms_norm_forward(self, handle, affine, xd, x, wd, w, eps, yd, y, rd, rstd) -> None:
        raise DnnError(f"{self.name}: rms_norm is not wired", unsupported=True)

    def rope_forward(self, handle, xd, x, cd, cos, sd, sin, yd, y) -> None:
        raise DnnError(f"{self.name}: rope is not wired", unsupported=True)


# ---- the per-device seam --------------------------------------------------------------

def dims_strides(layout, ndim: int = 4):
    """(dims, strides) for a descriptor, or None when the library cannot address the view
    (a broadcast stride, or sizes past int32). Size-1 dims get a harmless packed stride;
    missing trailing dims are appended with size 1."""
    shape = tuple(layout.shape) + (1,) * (ndim - layout.ndim)
    strides = list(layout.strides) + [1] * (ndim - layout.ndim)
    inner = 1
    for d in range(ndim - 1, -1, -1):
        if shape[d] == 1:
            strides[d] = inner
        elif strides[d] <= 0:
            return None
        inner = max(inner, shape[d] * strides[d])
    if inner > _INT32_MAX or any(s > _INT32_MAX for s in strides):
        return None
    return shape, tuple(strides)


class Dnn:
    """The DNN library of one GpuDevice: a handle on the device stream, cached plans."""

    def __init__(self, device, lib: DnnLib):
        self.device, self.lib = device, lib
        self._handle = None
        self._plans: Dict[tuple, tuple] = {}
        self._lock = threading.Lock()
        self.calls: Dict[str, int] = {}   # op -> times the library ran it (tests read this)

    def __repr__(self):
        return f"Dnn({self.lib.name} {self.lib.version()} on {self.device})"

    @property
    def handle(self):
        """The library's handle, bound to the device stream; taken right before each call that
        enqueues work there, so the kernel launches queued before go first (launch_shim.py)."""
        self.device.platform.drain_launches()
        if self._handle is None:
            self.device.activate()
            ffi = self.device.platform.ffi
            self._handle = self.lib.create(int(ffi.cast("uintptr_t", self.device.stream)))
        return self._handle

    def _count(self, op):
        self.calls[op] = self.calls.get(op, 0) + 1

    def _plan(self, key, build):
        plan = self._plans.get(key)
        if plan is None:
            with self._lock:
                plan = self._plans.get(key)
                if plan is None:
                    if len(self._plans) >= _PLAN_CACHE_MAX:
                        self._plans.clear()
                    plan = self._plans[key] = build()
        return plan

    def _workspace(self, nbytes):
        buf = self.device.alloc(nbytes) if nbytes else None
        return buf, (buf.ptr if buf is not None else 0)

    # ---- what the library takes ------------------------------------------------------
    def supports_conv(self, dtype, x_layout, out_numel: int = 0, transposed: bool = False) -> bool:
        if dtype.short not in self.lib.DTYPES or (transposed and not self.lib.HAS_CONV_BWD_DATA):
            return False
        return out_numel <= _INT32_MAX and dims_strides(x_layout) is not None

    def supports_pool(self, dtype, layout, params, kind: str, out_numel: int = 0) -> bool:
        if dtype.short not in self.lib.DTYPES or tuple(params.dilation) != (1, 1) and kind == "max":
            return False
        return out_numel <= _INT32_MAX and dims_strides(layout) is not None

    def supports_batch_norm(self, dtype, layout) -> bool:
        return dtype.short in self.lib.BN_DTYPES and 2 <= layout.ndim <= 4 and dims_strides(layout) is not None

    def _norm_case(self, op, dtype, layout) -> bool:
        """A contiguous, non-empty x the library can address, in a dtype it takes."""
        return (self.lib.provides(op) and dtype.short in self.lib.NORM_DTYPES and layout.ndim >= 1
                and 0 < layout.numel() <= _INT32_MAX and layout.is_contiguous())

    def supports_layer_norm(self, dtype, layout, weight, bias) -> bool:
        """weight/bias: (storage or None, layout). Both given or both None (the library's
        two modes); each 1-d, unit stride, x's dtype."""
        if not self._norm_case("layer_norm", dtype, layout) or (weight[0] is None) != (bias[0] is None):
            return False
        return all(_param_ok(st, lay, dtype, layout.shape[-1]) for st, lay in (weight, bias))

    def supports_rms_norm(self, dtype, layout, weight) -> bool:
        return self._norm_case("rms_norm", dtype, layout) and _param_ok(*weight, dtype, layout.shape[-1])

    def supports_rope(self, dtype, variant, layout, cos, cos_layout, sin, sin_layout) -> bool:
        """rope_i only (the library op rotates interleaved pairs) on a contiguous (b, h, t, d) x, with
        cos/sin (b, t, d/2) of x's dtype shared by the batch (broadcast or b == 1): the
        library's tables cover x's trailing dims, not its batch."""
        if variant != "rope_i" or not self._norm_case("rope_i", dtype, layout) or layout.ndim != 4:
            return False
        b, _, t, d = layout.shape
        tables = ((cos, cos_layout), (sin, sin_layout))
        return d % 2 == 0 and all(st.dtype is dtype and tuple(lay.shape) == (b, t, d // 2)
                                  and (b == 1 or lay.strides[0] == 0) for st, lay in tables)

    # ---- ops -------------------------------------------------------------------------
    def conv2d(self, x, x_layout, w, w_layout, params, out, out_shape) -> None:
        """out (contiguous, `out_shape`) = conv2d(x, w); w must be contiguous."""
        dt = x.dtype.short
        xdims, xstrides = dims_strides(x_layout)
        key = ("conv2d", dt, xdims, xstrides, tuple(w_layout.shape), params.stride, params.padding,
               params.dilation, params.groups)
        ptrs = (x.addr(x_layout.offset), w.addr(w_layout.offset), out.ptr)

        def build():
            lib = self.lib
            xd = lib.tensor(dt, xdims, xstrides)
            wd = lib.filter(dt, tuple(w_layout.shape))
            cd = lib.conv(dt, params.padding, params.stride, params.dilation, params.groups)
            yd = lib.tensor(dt, out_shape, _packed(out_shape))
            algo, ws = lib.conv_fwd_algo(self.handle, xd, wd, cd, yd, ptrs, self._workspace, _WORKSPACE_LIMIT)
            return xd, wd, cd, yd, algo, ws
        xd, wd, cd, yd, algo, ws_bytes = self._plan(key, build)
        ws, ws_ptr = self._workspace(ws_bytes)
        self.device.activate()
        self.lib.conv_fwd(self.handle, dt, xd, ptrs[0], wd, ptrs[1], cd, algo, ws_ptr, ws_bytes, yd, ptrs[2])
        self._count("conv2d")

    def conv_transpose2d(self, x, x_layout, w, w_layout, params, out, out_shape) -> None:
        """out = conv_transpose2d(x, w) as the backward-data of the conv that maps out to x."""
        dt = x.dtype.short
        xdims, xstrides = dims_strides(x_layout)
        key = ("conv_transpose2d", dt, xdims, xstrides, tuple(w_layout.shape), tuple(out_shape), params.stride,
               params.padding, params.dilation, params.groups)
        ptrs = (w.addr(w_layout.offset), x.addr(x_layout.offset), out.ptr)

        def build():
            lib = self.lib
            dyd = lib.tensor(dt, xdims, xstrides)
            wd = lib.filter(dt, tuple(w_layout.shape))
            cd = lib.conv(dt, params.padding, params.stride, params.dilation, params.groups)
            dxd = lib.tensor(dt, tuple(out_shape), _packed(out_shape))
            algo, ws = lib.conv_bwd_data_algo(self.handle, wd, dyd, cd, dxd, ptrs, self._workspace, _WORKSPACE_LIMIT)
            return wd, dyd, cd, dxd, algo, ws
        wd, dyd, cd, dxd, algo, ws_bytes = self._plan(key, build)
        ws, ws_ptr = self._workspace(ws_bytes)
        self.device.activate()
        self.lib.conv_bwd_data(self.handle, dt, wd, ptrs[0], dyd, ptrs[1], cd, algo, ws_ptr, ws_bytes, dxd, ptrs[2])
        self._count("conv_transpose2d")

    def pool2d(self, kind: str, x, layout, params, out, out_shape) -> None:
        """kind: 'max' or 'avg'; out contiguous (b, c, oh, ow)."""
        dt = x.dtype.short
        dims, strides = dims_strides(layout)
        mode = "max" if kind == "max" else ("avg_include" if params.count_include_pad else "avg_exclude")
        key = ("pool", mode, dt, dims, strides, params.kernel, params.stride, params.padding)

        def build():
            lib = self.lib
            return (lib.pool(mode, params.kernel, params.padding, params.stride), lib.tensor(dt, dims, strides),
                    lib.tensor(dt, tuple(out_shape), _packed(out_shape)))
        pd, xd, yd = self._plan(key, build)
        self.device.activate()
        self.lib.pool_fwd(self.handle, dt, pd, xd, x.addr(layout.offset), yd, out.ptr)
        self._count(f"{kind}_pool2d")

    def batch_norm(self, x, layout, out, scale, bias, mean, var, eps, training=False, factor=0.0,
                   save_mean=0, save_invstd=0) -> None:
        """Spatial batch norm of x (N, C, *) into contiguous `out`. scale/bias/mean/var are
        device addresses of C values of the library's parameter dtype (f32 for f16/bf16
        data, else the data's dtype). training: normalise with batch statistics and update
        mean/var (the running stats) in place with `factor` (= momentum)."""
        dt = x.dtype.short
        dims, strides = dims_strides(layout)
        key = ("bn", dt, dims, strides)

        def build():
            lib = self.lib
            xd = lib.tensor(dt, dims, strides)
            yd = lib.tensor(dt, dims, _packed(dims))
            return xd, yd, lib.bn_param(xd)
        xd, yd, pd = self._plan(key, build)
        self.device.activate()
        xp = x.addr(layout.offset)
        if training:
            self.lib.bn_fwd_training(self.handle, dt, xd, xp, yd, out.ptr, pd, scale, bias, factor, mean, var, eps,
                                     save_mean, save_invstd)
        else:
            self.lib.bn_fwd_inference(self.handle, dt, xd, xp, yd, out.ptr, pd, scale, bias, mean, var, eps)
        self._count("batch_norm_training" if training else "batch_norm")

    def _stats(self, rows):
        """Per-row mean/rstd outputs the API requires: f32-sized, which also holds them in
        x's dtype (builds differ in which they write)."""
        return self._workspace(2 * rows * 4)

    def layer_norm(self, x, layout, weight, w_layout, bias, b_layout, eps, out) -> None:
        """out (contiguous) = layer_norm over x's last dim; weight and bias both given or both None."""
        dt = x.dtype.short
        n = layout.shape[-1]
        rows, affine = layout.numel() // n, weight is not None
        key = ("layer_norm", dt, rows, n, affine)

        def build():
            lib = self.lib
            # normalized_dim=1: dims 1.. are normalised. Without weight/bias x goes in as
            # (rows, 1, n): the library's rank-2 solver reads gamma/beta whatever the mode
            xdims = (rows, n) if affine else (rows, 1, n)
            return (lib.tensor(dt, xdims, _packed(xdims)), lib.tensor(dt, xdims[1:], _packed(xdims[1:])),
                    lib.tensor(dt, (rows,), (1,)))
        xd, wd, sd = self._plan(key, build)
        stats, sp = self._stats(rows)
        w = weight.addr(w_layout.offset) if affine else 0
        b = bias.addr(b_layout.offset) if affine else 0
        self.device.activate()
        self.lib.layer_norm_forward(self.handle, affine, xd, x.addr(layout.offset), wd, w, wd, b, float(eps), 1,
                                    xd, out.ptr, sd, sp, sd, sp + rows * 4)
        self._count("layer_norm")

    def rms_norm(self, x, layout, weight, w_layout, eps, out) -> None:
        """out (contiguous) = rms_norm over x's last dim (the library's "T5" layer norm); weight may be None."""
        dt = x.dtype.short
        n = layout.shape[-1]
        rows, affine = layout.numel() // n, weight is not None
        key = ("rms_norm", dt, rows, n)

        def build():
            lib = self.lib
            return lib.tensor(dt, (rows, n), (n, 1)), lib.tensor(dt, (n,), (1,)), lib.tensor(dt, (rows,), (1,))
        xd, wd, rd = self._plan(key, build)
        stats, sp = self._stats(rows)
        w = weight.addr(w_layout.offset) if affine else 0
        self.device.activate()
        self.lib.rms_norm_forward(self.handle, affine, xd, x.addr(layout.offset), wd, w, float(eps), xd, out.ptr,
                                  rd, sp)
        self._count("rms_norm")

    def rope(self, x, layout, cos, cos_layout, sin, sin_layout, out) -> None:
        """out (contiguous) = rope_i(x) for a contiguous (b, h, t, d) x. The library takes x as
        (b*h, 1, t, d) and one value per element of the trailing (1, t, d): each (t, d/2)
        table is expanded once per call (t*d elements, a copy 1/(b*h) the size of x)."""
        dt = x.dtype.short
        b, h, t, d = layout.shape
        key = ("rope_i", dt, b * h, t, d)

        def build():
            lib = self.lib
            xdims = (b * h, 1, t, d)
            return lib.tensor(dt, xdims, _packed(xdims)), lib.tensor(dt, (1, t, d), (t * d, d, 1))
        xd, cd = self._plan(key, build)

        def full(st, lay):   # value k of a row at 2k and 2k+1 (a stride-0 pair axis)
            return st._contiguous(Layout((t, d // 2, 2), (lay.strides[1], lay.strides[2], 0), lay.offset))[0]
        c, s = full(cos, cos_layout), full(sin, sin_layout)
        self.device.activate()
        self.lib.rope_forward(self.handle, xd, x.addr(layout.offset), cd, c.ptr, cd, s.ptr, xd, out.ptr)
        self._count("rope_i")


def _param_ok(st, lay, dtype, n) -> bool:
    """An absent weight/bias, or a 1-d one of n elements, unit stride, x's dtype."""
    return st is None or (st.dtype is dtype and lay.ndim == 1 and lay.shape[0] == n
                          and (n == 1 or lay.strides[0] == 1))


def _packed(shape):
    strides, acc = [], 1
    for n in reversed(tuple(shape)):
        strides.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(strides))


def bn_param_dtype(dtype):
    """The dtype batch norm's scale/bias/mean/var must have for data of `dtype`."""
    return dtypes.float32 if dtype in (dtypes.float16, dtypes.bfloat16) else dtype


# ---- per-device lookup ----------------------------------------------------------------

# per device object (weakly: a device that goes away takes its entry with it)
_DNNS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_REASONS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def library_status(platform) -> Tuple[bool, str]:
    """(available, reason or version) of the platform's DNN library; loads it once."""
    lib = platform.dnn_lib()
    try:
        lib.load()
    except BackendUnavailable as e:
        return False, str(e)
    return True, f"{lib.name} {lib.version()} ({lib.path})"


def dnn_for(device, optional_op: Optional[str] = None) -> Optional[Dnn]:
    """The device's Dnn when TENSORLITE_DNN allows it and the library loads, else None.
    Mode '1' raises BackendUnavailable with the loader's reason instead of None.
    optional_op (layer_norm, rms_norm, rope_i): None at once, loading nothing, where the
    platform's library has no optional ops at all, so a model without convolutions never
    loads that library for them."""
    if optional_op is not None:  # a per-op hot path: answered by the library object, nothing loaded
        platform = getattr(device, "platform", None)
        if not hasattr(platform, "dnn_lib") or optional_op not in platform.dnn_lib().OPTIONAL_OPS:
            return None
    mode = dnn_mode()
    if mode == "0":
        return None
    key = device
    if key not in _DNNS:
        with _LOCK:
            if key not in _DNNS:
                platform = getattr(device, "platform", None)
                if platform is None or not hasattr(platform, "dnn_lib"):  # e.g. a recording test double
                    ok, why = False, f"{device} has no vendor platform"
                else:
                    device.activate()  # a library's probe may create a handle in the device's context
                    ok, why = library_status(platform)
                _DNNS[key] = Dnn(device, platform.dnn_lib()) if ok else None
                _REASONS[key] = why
    dnn = _DNNS[key]
    if dnn is None and mode == "1":
        raise BackendUnavailable(f"TENSORLITE_DNN=1 but the DNN library of {device} is unavailable: {_REASONS[key]}")
    return dnn


def run(dnn: Dnn, op: str, fn, *args) -> bool:
    """Run `fn(*args)` (a Dnn method); True when the library did the work. In auto mode a
    problem the library rejects returns False (the caller takes the portable path)."""
    try:
        fn(*args)
        return True
    except DnnError as e:
        if e.unsupported and dnn_mode() == "auto":
            dnn.calls[f"{op}_fallback"] = dnn.calls.get(f"{op}_fallback", 0) + 1
            return False
        raise
