"""Every GPU kernel compiled for AMD gfx90a (MI200) without a GPU, through the backend's own
compile path (hiprtc via backends/rocm/compiler.py), and checked against the dispatch table.

- each kernels/*.hip compiles for gfx90a;
- every entry point of `kernel_table.KERNELS` (the table dispatch uses) is a kernel symbol in
  the code object, so a missing instantiation fails here;
- every launch that GpuStorage makes, for every storage method and dtype on strided,
  broadcast and offset layouts, passes arguments whose sizes and offsets match the
  kernel's signature as the compiler recorded it in the code object's metadata. The
  storage runs on a recording device (no GPU: results are not computed, only the calls
  checked; values are checked on real devices by the backend-swap tests).

Needs Debian's libamdhip64-dev (HIP 5.2, which carries hiprtc); skipped where missing.
Nothing here runs on AMD hardware.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from tensorlite import dtype as dtypes
from tensorlite.backend import CMP_OPS, UNARY_BACKWARD_OPS, ConvParams, PoolParams, sdpa_layout
from tensorlite.errors import BackendUnavailable, DTypeError, ShapeError
from tensorlite.layout import Layout
from tensorlite.backends.rocm import compiler, get_platform
from tensorlite.backends.rocm import kernel_table, storage as gpu_storage
from tensorlite.backends.rocm.ops.random import random_fill
from tensorlite.backends.rocm.amdemu.codeobject import CodeObject
from tensorlite.backends.rocm.device import GpuDevice, Kernel, launch_args
from tensorlite.backends.rocm.hip import AmdArchitectures

ARCH = "gfx90a"
SOURCES = sorted(kernel_table.KERNELS)


def _hiprtc_or_skip():
    plat = get_platform("rocm")
    try:
        _ = plat.rtc
    except BackendUnavailable as e:
        pytest.skip(f"libamdhip64/hiprtc is not installed: {e}")
    return plat


_CODE = {}


def code_object(source: str) -> bytes:
    """kernels/<source> compiled for gfx90a (once per session; the disk cache helps reruns)."""
    if source not in _CODE:
        _CODE[source] = compiler.compile_source(_hiprtc_or_skip(), source, ARCH)
    return _CODE[source]


# ---- reading the code object (amdemu's loader: ELF symbols and the AMDGPU metadata note) --

def kernel_signatures(elf: bytes) -> dict:
    """name -> ((offset, size), ...) of the explicit kernel arguments, from the code object's
    NT_AMDGPU_METADATA note (hidden arguments the runtime appends are left out)."""
    return {name: tuple((a["offset"], a["size"]) for a in k.explicit_args)
            for name, k in CodeObject.parse(elf).kernels.items()}


# ---- compile + entry points ------------------------------------------------------------

@pytest.mark.parametrize("source", SOURCES, ids=[f"{ARCH}-{s}" for s in SOURCES])
def test_compiles_with_every_entry_point(source):
    code = code_object(source)
    symbols = {name for name, sym in CodeObject.parse(code).symbols.items() if sym.type == "FUNC"}
    missing = sorted(set(kernel_table.KERNELS[source]) - symbols)
    assert not missing, f"{source} for {ARCH}: {len(missing)} entry points missing, e.g. {missing[:10]}"
    signatures = kernel_signatures(code)
    assert set(kernel_table.KERNELS[source]) <= set(signatures)


def test_table_covers_every_source_file():
    assert set(SOURCES) == set(compiler.list_kernel_sources()), \
        "every kernels/*.hip must appear in kernel_table.KERNELS (and vice versa)"


# ---- every storage method's launches against the compiled signatures ----------------------

_SIZES = {"int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "float": 4, "double": 8, "ptr": 8}


class _Buffer:
    def __init__(self, ptr, nbytes):
        self.ptr, self.nbytes = ptr, nbytes


class _RecordingBlas:
    def __init__(self, dev):
        self.dev = dev

    def gemm_strided_batched(self, dtype, trans_a, trans_b, m, n, k, a_ptr, lda, stride_a, b_ptr, ldb, stride_b,
                             c_ptr, ldc, stride_c, batch, alpha=1.0, beta=0.0):
        assert dtype.is_floating_point
        rows_a, rows_b = (k if trans_a else m), (n if trans_b else k)
        assert lda >= max(1, rows_a) and ldb >= max(1, rows_b) and ldc >= max(1, m), (lda, ldb, ldc, m, n, k)
        assert min(stride_a, stride_b, stride_c) >= 0 and batch >= 1
        for ptr in (a_ptr, b_ptr, c_ptr):
            self.dev.check_ptr(ptr)
        self.dev.calls.append("gemm")

    epilogues = False  # a BLAS with fused bias epilogues (cuBLASLt) sets it: test_blas_epilogue_routing

    def gemm_epilogue(self, dtype, trans_a, trans_b, m, n, k, a_ptr, lda, b_ptr, ldb, c_ptr, ldc, bias_ptr, epilogue):
        assert epilogue in ("bias", "bgradb") and dtype.is_floating_point and min(m, n, k) > 0
        for ptr in (a_ptr, b_ptr, c_ptr, bias_ptr):
            self.dev.check_ptr(ptr)
        self.dev.calls.append(f"gemm_epilogue:{epilogue}")
        return True


class RecordingDevice:
    """The GpuDevice API without a GPU: checks launches against gfx90a signatures."""
    name, ordinal, arch, warp_size = "rocm", 0, ARCH, 64
    props = {"multiprocessor_count": 104}
    has_blas = True  # False (the emulated platform): float GEMMs launch the portable gemm_<t>
    capture, _error_flag = None, None
    run_checked = GpuDevice.run_checked  # the real one: its flag launches are checked like any other

    def __init__(self):
        self.platform = AmdArchitectures()  # what gfx90a offers the kernels; no libraries (no DNN)
        self.calls, self._next, self._allocs = [], 1 << 20, []
        self.blas = _RecordingBlas(self)
        self._sigs = {}
        self.kernels = {}  # kernel_table.kernel_for's, by entry name (GpuDevice.kernels)
        self.max_threads = 1024  # what function() reports per kernel (registers can lower it)

    def __str__(self):
        return "rocm:0"

    def alloc(self, nbytes):
        ptr = self._next
        self._next += -(-(max(nbytes, 1) + 4096) // 256) * 256  # aligned as the real allocators' blocks
        self._allocs.append((ptr, nbytes))
        return _Buffer(ptr, nbytes)

    def fresh_zeros(self, nbytes):
        buf = self.alloc(nbytes)
        self.memset(buf.ptr, 0, nbytes)
        return buf

    def check_ptr(self, ptr, nbytes=0):
        assert any(p <= ptr and ptr + nbytes <= p + max(n, 1) for p, n in self._allocs), \
            f"pointer 0x{ptr:x} (+{nbytes}) outside every allocation"

    def htod(self, dst, array):
        self.check_ptr(dst, array.nbytes)

    def dtoh(self, array, src):
        self.check_ptr(src, array.nbytes)
        array[...] = 0

    def dtod(self, dst, src, nbytes):
        self.check_ptr(dst, nbytes)
        self.check_ptr(src, nbytes)

    def memset(self, ptr, byte, nbytes):
        self.check_ptr(ptr, nbytes)

    def function(self, source, name):
        if source not in self._sigs:
            self._sigs[source] = kernel_signatures(code_object(source))
        assert name in self._sigs[source], f"{name} is not a kernel of {source}"
        return Kernel(None, name, source, self.max_threads)

    def launch(self, func, grid, block, args, shared_mem=0):
        source, name = func.source, func.name
        grid = (grid,) if isinstance(grid, int) else tuple(grid)
        block = (block,) if isinstance(block, int) else tuple(block)
        assert min(grid) >= 1 and min(block) >= 1 and np.prod(block) <= func.max_threads, (name, grid, block)
        slots, pos = [], 0
        for ctype, value in args:
            size = len(value) if ctype == "bytes" else _SIZES[ctype]
            align = 8 if ctype == "bytes" else size
            pos += -pos % align
            slots.append((pos, size))
            if ctype == "ptr" and value:
                self.check_ptr(value)
            pos += size
        expected = self._sigs[source][name]
        assert tuple(slots) == expected, f"{name}: launch packs {slots}, kernel expects {expected}"
        self.calls.append(name)

    def launch_values(self, func, grid, block, signature, values, shared_mem=0):
        self.launch(func, grid, block, launch_args(signature, values), shared_mem)


@pytest.fixture
def dev():
    _hiprtc_or_skip()
    return RecordingDevice()


def _storage(dev, shape_or_n, dtype, extra=0):
    n = shape_or_n if isinstance(shape_or_n, int) else int(np.prod(shape_or_n))
    return gpu_storage.GpuStorage(dev, dev.alloc((n + extra) * dtype.itemsize), dtype, n + extra)


# (layout, storage elements) for a (4, 6) operand: contiguous, transposed, sliced with an
# offset, and broadcast from a row
LAYOUTS_4x6 = {
    "contiguous": (Layout((4, 6)), 24),
    "transposed": (Layout((6, 4)).transpose(0, 1), 24),
    "offset-slice": (Layout((5, 8), None, 0).narrow(0, 1, 4).narrow(1, 2, 6), 40),
    "broadcast-row": (Layout((1, 6)).broadcast_as((4, 6)), 6),
}


@pytest.mark.parametrize("dt", dtypes.ALL, ids=[f"{ARCH}-{d.short}" for d in dtypes.ALL])
def test_elementwise_launches_match_gfx90a_signatures(dev, dt):
    ops = kernel_table.unary_ops(dt.short)  # the op table says which rows each dtype has
    for (lay, n), (ray, rn) in itertools.product(LAYOUTS_4x6.values(), repeat=2):
        x, y = _storage(dev, n, dt), _storage(dev, rn, dt)
        for op in ops:
            assert x.unary_impl(op, lay).numel == 24
        x.affine(lay, 2.0, 1.0)
        for op in kernel_table.binary_ops(dt.short):
            x.binary_impl(op, y, lay, ray)
        for op in CMP_OPS:
            assert x.cmp(op, y, lay, ray).dtype is dtypes.bool_
        cond = _storage(dev, 24, dtypes.bool_)
        assert cond.where_cond(Layout((4, 6)), x, lay, y, ray).dtype is dt
        for dst in dtypes.ALL:
            assert x.to_dtype(lay, dst).dtype is dst
    if dt.is_floating_point:
        x.powf(lay, 1.5)
        x.elu(lay, 0.5)
    else:
        with pytest.raises(DTypeError):
            x.powf(lay, 1.5)
        with pytest.raises(DTypeError):
            x.unary_impl("exp", lay)
        if dt is not dtypes.bool_:
            with pytest.raises(DTypeError):
                x.binary_impl("div", y, lay, lay)
    assert dev.calls


@pytest.mark.parametrize("dt", dtypes.ALL, ids=[f"{ARCH}-{d.short}" for d in dtypes.ALL])
def test_reduce_index_copy_launches_match_gfx90a_signatures(dev, dt):
    base = Layout((3, 4, 5))
    views = [base, base.permute((2, 0, 1)), Layout((4, 6, 5)).narrow(0, 1, 3).narrow(1, 1, 4)]
    for lay in views:
        x = _storage(dev, lay.extent(), dt)
        for dims in [(0,), (1,), (2,), (0, 2), (0, 1, 2)]:
            for op in ("sum", "min", "max"):
                out = x.reduce_op(op, lay, dims)
                assert out.numel == int(np.prod([1 if d in dims else n for d, n in enumerate(lay.shape)]))
            assert x.reduce_op("argmax", lay, dims[:1]).dtype is dtypes.int64
            x.reduce_op("argmin", lay, dims[:1])
        with pytest.raises(ShapeError):
            x.reduce_op("argmax", lay, (0, 1))
        for ids_dt in (dtypes.int64, dtypes.uint32, dtypes.uint8):
            ids = _storage(dev, 8, ids_dt)
            for dim in range(3):
                ids_lay = Layout((3,), (2,), 1)  # strided, offset ids
                out = x.index_select(ids, lay, ids_lay, dim)
                assert out.numel == lay.numel() // lay.shape[dim] * 3
                gids_lay = Layout(tuple(min(2, n) for n in lay.shape))
                gids = _storage(dev, gids_lay.numel(), ids_dt)
                x.gather(lay, gids, gids_lay, dim)
                src = _storage(dev, lay.numel(), dt)
                x.scatter_add(lay, gids, gids_lay, src, Layout.contiguous(lay.shape), dim)
                for reduce in (None, "prod", "amax", "amin"):
                    x.scatter(lay, gids, gids_lay, src, Layout.contiguous(lay.shape), dim, reduce)
                if lay.is_contiguous():
                    x.scatter_set(lay, gids, gids_lay, src, Layout.contiguous(lay.shape), dim)
                src_shape = lay.shape[:dim] + (3,) + lay.shape[dim + 1:]
                src2 = _storage(dev, int(np.prod(src_shape)), dt)
                x.index_add(lay, ids, ids_lay, src2, Layout(src_shape[::-1]).permute((2, 1, 0)), dim)
        dst = _storage(dev, 200, dt)
        x.copy_strided_src(dst, 7, lay)
        x.copy_strided_src(_storage(dev, 200, dtypes.float32), 3, lay)
        x.const_set(3, lay)
        x.const_set(0, Layout((60,)))
        assert x.to_cpu(lay).shape == lay.shape
    long_rows = _storage(dev, 3 * 100000, dt)  # few long rows: split over blocks
    for op in ("sum", "max", "argmin"):
        long_rows.reduce_op(op, Layout((3, 100000)), (1,))
    cols = _storage(dev, 3000 * 72, dt)  # column reductions: vectors or elements, chunked or not
    for lay in (Layout((3000, 72)), Layout((3000, 72)).narrow(1, 1, 69), Layout((6, 72)),
                Layout((30, 24, 100)).transpose(1, 2)):
        for op in ("sum", "max", "argmin"):
            cols.reduce_op(op, lay, (0,))
    x = _storage(dev, 100, dt)
    x.copy2d(_storage(dev, 100, dt), 4, 5, 10, 7, 2, 3)
    x.copy2d(_storage(dev, 100, dtypes.float64), 4, 5, 10, 7, 2, 3)


def test_reductions_respect_the_kernels_own_block_limit(dev):
    """A kernel whose registers allow fewer threads per block than the device (argmin/argmax
    of 16-bit types on sm_90: a 1024-thread launch failed with LAUNCH_OUT_OF_RESOURCES) gets
    blocks within its limit on every reduction path."""
    dev.max_threads = 256
    x = _storage(dev, 3000 * 72, dtypes.bfloat16)
    for lay, dims in ((Layout((3, 72000)), (1,)), (Layout((72000,)), (0,)), (Layout((3000, 72)), (0,)),
                      (Layout((2, 108000)), (1,)), (Layout((72, 3000)), (1,))):
        for op in ("sum", "argmax"):
            x.reduce_op(op, lay, dims)


def test_chunked_reductions_leave_their_counters_zeroed_instead_of_a_memset_per_launch(dev, monkeypatch):
    memsets = []
    monkeypatch.setattr(dev, "memset", lambda ptr, byte, nbytes: memsets.append(nbytes))
    x = _storage(dev, 3000 * 72, dtypes.bfloat16)
    for _ in range(3):
        x.reduce_op("sum", Layout((3000, 72)), (0,))  # columns, split over blocks
        x.reduce_op("max", Layout((3000 * 72,)), (0,))  # one long row, split over blocks
    assert dev.calls == ["reduce_sum_bf16", "reduce_max_bf16"] * 3
    assert len(memsets) == 1  # the counters, zeroed once when allocated


@pytest.mark.parametrize("has_blas", [True, False], ids=["blas", "portable"])
@pytest.mark.parametrize("dt", dtypes.ALL, ids=[f"{ARCH}-{d.short}" for d in dtypes.ALL])
def test_matmul_conv_pool_launches_match_gfx90a_signatures(dev, dt, has_blas):
    dev.has_blas = has_blas
    a = _storage(dev, 2 * 3 * 4, dt)
    b = _storage(dev, 2 * 4 * 5, dt)
    lhs = [Layout((2, 3, 4)), Layout((2, 4, 3)).transpose(1, 2), Layout((1, 3, 4)).broadcast_as((2, 3, 4)),
           Layout((3, 4), (0, 1)).broadcast_as((2, 3, 4))]
    rhs = [Layout((2, 4, 5)), Layout((2, 5, 4)).transpose(1, 2), Layout((4, 5)).broadcast_as((2, 4, 5))]
    for la, lb in itertools.product(lhs, rhs):
        assert a.matmul(b, (2, 3, 5, 4), la, lb).numel == 30
    a.matmul(b, (2, 3, 5, 0), Layout((2, 3, 0)), Layout((2, 0, 5)))
    assert ("gemm" in dev.calls) == (has_blas and dt.is_floating_point)
    assert (f"gemm_{dt.short}" in dev.calls) == (not has_blas or not dt.is_floating_point)
    x = _storage(dev, 2 * 4 * 9 * 8, dt)
    xl = Layout((2, 4, 9, 8))
    for groups in (1, 2):
        w = _storage(dev, 6 * (4 // groups) * 3 * 3, dt)
        p = ConvParams((2, 1), (1, 0), (1, 2), groups)
        assert x.conv2d(xl, w, Layout((6, 4 // groups, 3, 3)), p).numel == 2 * 6 * 5 * 4
        wt = _storage(dev, 4 * 3 * 3 * 3, dt)
        pt = ConvParams((2, 1), (1, 0), (1, 1), groups, (1, 0))
        x.conv_transpose2d(xl.permute((0, 1, 3, 2)), wt, Layout((4, 3, 3, 3)), pt)
        x1 = Layout((2, 4, 9))
        x.conv1d(x1, w, Layout((6, 4 // groups, 3)), ConvParams((1,), (1,), (1,), groups))
        x.conv_transpose1d(x1, wt, Layout((4, 3, 3)), ConvParams((2,), (0,), (1,), groups, (1,)))
    x.max_pool2d(xl, PoolParams((2, 2), (2, 2), (1, 1), (1, 1)))
    if dt.is_floating_point:  # its input gradient (floats only), through a broadcast gradient
        x.max_pool2d_backward(xl, PoolParams((3, 2), (2, 1), (1, 1), (1, 2)), _storage(dev, 8, dt),
                              Layout((8,)).broadcast_as((2, 4, 5, 8)))
    x.avg_pool2d(xl.permute((0, 1, 3, 2)), PoolParams((3, 3), (2, 2), (1, 1), count_include_pad=False))
    assert x.upsample_nearest2d(xl, 17, 5).numel == 2 * 4 * 17 * 5


@pytest.mark.parametrize("epilogues", [True, False], ids=["epilogues", "no-epilogues"])
def test_blas_epilogue_routing(dev, epilogues):
    """matmul_add_bias / matmul_row_sums (F.linear's forward and bias gradient) take the BLAS's
    fused epilogue where it has one (cuBLASLt), else the GEMM and a separate kernel."""
    dev.blas.epilogues = epilogues
    a, b, bias = (_storage(dev, n, dtypes.float32) for n in (3 * 4, 4 * 5, 5))
    assert a.matmul_add_bias(b, (3, 5, 4), Layout((3, 4)), Layout((4, 5)), bias, Layout((5,))).numel == 15
    out, sums = a.matmul_row_sums(b, (3, 5, 4), Layout((3, 4)), Layout((4, 5)))
    assert out.numel == 15 and sums.numel == 3
    fused = [c for c in dev.calls if c.startswith("gemm_epilogue")]
    assert fused == (["gemm_epilogue:bias", "gemm_epilogue:bgradb"] if epilogues else [])
    assert ("gemm" in dev.calls) != epilogues


@pytest.mark.parametrize("dt", dtypes.FLOATS, ids=[f"{ARCH}-{d.short}" for d in dtypes.FLOATS])
def test_fused_and_random_launches_match_gfx90a_signatures(dev, dt):
    x = _storage(dev, 2 * 3 * 5 * 8, dt)
    for lay in (Layout((2, 3, 5, 8)), Layout((2, 3, 8, 5)).transpose(2, 3)):
        x.softmax_last_dim(lay)
        x.log_softmax(lay)
        w = _storage(dev, 17, dt)
        x.layer_norm(lay, w, Layout((8,)), w, Layout((8,), (2,), 1), 1e-5)
        x.layer_norm(lay, None, None, None, None, 1e-5)
        x.rms_norm(lay, w, Layout((8,), (2,), 1), 1e-6)
        cs = _storage(dev, 5 * 4, dt)
        for variant in ("rope", "rope_i"):
            x.rope(lay, cs, Layout((5, 4)).broadcast_as((2, 5, 4)), cs, Layout((1, 5, 4)).broadcast_as((2, 5, 4)),
                   variant)
        x.rope(lay.permute((0, 2, 1, 3)), cs, Layout((2, 3, 4), (0, 4, 1)), cs, Layout((2, 3, 4), (0, 4, 1)),
               "rope_thd")
        kv, ids = _storage(dev, 2 * 6 * 8, dt), _storage(dev, 5, dtypes.int64)
        x.rope_kv_cache(lay, cs, Layout((5, 4)).broadcast_as((2, 5, 4)), cs, Layout((5, 4)).broadcast_as((2, 5, 4)),
                        kv, Layout((2, 1, 6, 8)), kv, Layout((2, 1, 6, 8)), ids, Layout((5,)))
    q, k, v = _storage(dev, 2 * 4 * 5 * 8, dt), _storage(dev, 2 * 2 * 7 * 8, dt), _storage(dev, 2 * 2 * 7 * 6, dt)
    ql, kl, vl = Layout((2, 4, 5, 8)), Layout((2, 2, 7, 8)), Layout((2, 7, 2, 6)).permute((0, 2, 1, 3))
    mb = _storage(dev, 5 * 7, dtypes.bool_)
    ma = _storage(dev, 5 * 7, dt)
    mlay = Layout((5, 7)).broadcast_as((2, 4, 5, 7))
    for mask in (None, mb, ma):
        for causal in (False, True):
            out = q.sdpa(ql, k, kl, v, vl, mask, mlay if mask is not None else None, 0.3, causal)
            assert out.numel == 2 * 4 * 5 * 6
    # add_layer_norm and its backward: one dtype, and f32 with each half type
    for half in (dt,) + ((dtypes.float16, dtypes.bfloat16) if dt is dtypes.float32 else ()):
        rows, w = Layout((6, 16)), _storage(dev, 16, dt)
        res, g = _storage(dev, 6 * 16, half), _storage(dev, 6 * 16, half)
        total, normed = x.add_layer_norm(rows, res, rows, w, Layout((16,)), w, Layout((16,)), 1e-5, half)
        assert (total.dtype, normed.dtype) == (dt, half)
        dx, dres, dw, db = total.add_layer_norm_backward(rows, g, rows, total, rows, w, Layout((16,)), 1e-5, half,
                                                         True, True)
        assert (dx.dtype, dres.dtype, dw.numel, db.numel) == (dt, half, 16, 16)
    random_fill(x, "uniform", -1.0, 1.0, 1234, 8)
    random_fill(x, "normal", 0.0, 2.0, 1234, 12)
    random_fill(_storage(dev, 10, dtypes.int64), "uniform", 0.0, 9.0, 1, 0)


@pytest.mark.parametrize("dt", dtypes.FLOATS, ids=[f"{ARCH}-{d.short}" for d in dtypes.FLOATS])
def test_attention_launches_match_gfx90a_signatures(dev, dt, monkeypatch):
    """Both TENSORLITE_SDPA paths, lse, the flash backward (every padded head dim) on
    strided views; f64 is not a flash case (gemm in 'auto', an error in 'flash')."""
    for d, dv in ((8, 6), (64, 64), (100, 128)):
        b, hq, hk, L, S = 2, 4, 2, 5, 7
        q, k = _storage(dev, b * hq * L * d, dt), _storage(dev, b * hk * S * d, dt)
        v = _storage(dev, b * hk * S * dv, dt)
        ql, kl = Layout((b, hq, L, d)), Layout((b, S, hk, d)).permute((0, 2, 1, 3))
        vl, gl = Layout((b, hk, S, dv)), Layout((b, L, hq, dv)).permute((0, 2, 1, 3))
        g = _storage(dev, b * hq * L * dv, dt)
        masks = [(None, None), (_storage(dev, L * S, dtypes.bool_), Layout((L, S)).broadcast_as((b, hq, L, S))),
                 (_storage(dev, L * S, dt), Layout((L, S)).broadcast_as((b, hq, L, S)))]
        for mode in ("auto", "flash", "gemm"):
            monkeypatch.setenv("TENSORLITE_SDPA", mode)
            for (mask, mlay), causal in itertools.product(masks, (False, True)):
                if mode == "flash" and dt is dtypes.float64:
                    with pytest.raises(DTypeError, match="TENSORLITE_SDPA=flash"):
                        q.sdpa(ql, k, kl, v, vl, mask, mlay, 0.3, causal)
                    continue
                out, lse = q.sdpa(ql, k, kl, v, vl, mask, mlay, None, causal, return_lse=True)
                assert out.numel == b * hq * L * dv
                if lse is None:
                    assert mode == "gemm" or dt is dtypes.float64
                    continue
                dq, dk, dvs = q.sdpa_backward(ql, k, kl, v, vl, out, Layout((b, hq, L, dv)), g, gl, lse, mask, mlay,
                                              0.3, causal)
                assert (dq.numel, dk.numel, dvs.numel) == (b * hq * L * d, b * hk * S * d, b * hk * S * dv)
                assert dq.dtype is dt and dk.dtype is dt and dvs.dtype is dt
    assert any(c.startswith("flash_bwd") for c in dev.calls) == (dt is not dtypes.float64)


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float16, dtypes.bfloat16], ids=lambda d: f"{ARCH}-{d.short}")
def test_flash_operands_copied_only_where_the_mma_tile_loads_need_it(dev, dt):
    """Transposed (b, t, h, d) head views go into the flash kernels as they are; the
    tensor-core kernels (every float dtype here at head dim 64 on gfx90a) get a contiguous
    copy of a view whose rows are not contiguous or not 16-byte aligned. Results come back in
    the operand's memory order (sdpa_layout) without a copy either way."""
    b, h, L, d = 2, 4, 40, 64
    ch = 16 // dt.itemsize
    bthd = Layout((b, L, h, d)).permute((0, 2, 1, 3))
    views = {"contiguous": (Layout((b, h, L, d)), False),
             "bthd": (bthd, False),
             "bthd_aligned_offset": (Layout(bthd.shape, bthd.strides, ch), False),
             "bthd_odd_offset": (Layout(bthd.shape, bthd.strides, 1), True),
             "odd_row_stride": (Layout((b, L, h, d), (L * h * (d + 1), h * (d + 1), d + 1, 1)).permute((0, 2, 1, 3)),
                                True),
             "strided_rows": (Layout((b, h, d, L)).transpose(2, 3), True)}
    x = _storage(dev, b * L * h * (d + 1) + ch, dt)
    dq_cast = int(dt is not dtypes.float32)  # dq's f32 sums to the dtype
    for name, (lay, copy) in views.items():
        dev.calls.clear()
        out, lse = x.sdpa(lay, x, lay, x, lay, None, None, None, True, return_lse=True)
        copies = [c for c in dev.calls if c.startswith("cast_")]
        assert len(copies) == (3 if copy else 0), (name, dev.calls)
        assert dev.calls[-1].startswith("flash_fwd_mma64_"), (name, dev.calls)
        dev.calls.clear()
        dq, dk, dvs = x.sdpa_backward(lay, x, lay, x, lay, out, sdpa_layout(lay), x, lay, lse, None, None, None,
                                      True)
        copies = [c for c in dev.calls if c.startswith("cast_")]
        assert len(copies) == (4 if copy else 0) + dq_cast, (name, dev.calls)  # q, k, v, dO
        assert (out.numel, dq.numel, dk.numel, dvs.numel) == (b * h * L * d,) * 4
    assert sdpa_layout(bthd) == bthd and sdpa_layout(views["strided_rows"][0]) == Layout((b, h, L, d))


@pytest.mark.parametrize("dt", dtypes.FLOATS, ids=[f"{ARCH}-{d.short}" for d in dtypes.FLOATS])
def test_fused_backward_launches_match_gfx90a_signatures(dev, dt):
    acc = dtypes.float64 if dt is dtypes.float64 else dtypes.float32
    x, g = _storage(dev, 2 * 3 * 5 * 8, dt), _storage(dev, 2 * 3 * 5 * 8 + 7, dt)
    lay, glay = Layout((2, 3, 5, 8)), Layout((2, 3, 8, 5), None, 7).transpose(2, 3)
    w = _storage(dev, 17, dt)
    for lx, lg in ((lay, lay), (glay, lay), (lay, Layout((1, 3, 5, 8)).broadcast_as((2, 3, 5, 8)))):
        x.softmax_last_dim_backward(lx, g, lg)
        x.log_softmax_backward(lx, g, lg)
        for want in ((True, True), (False, True), (True, False), (False, False)):
            dx, dw, db = x.layer_norm_backward(lx, g, lg, w, Layout((8,), (2,), 1), 1e-5, *want)
            assert dx.numel == 240 and (dw is not None) == want[0] and (db is not None) == want[1]
            x.rms_norm_backward(lx, g, lg, None, None, 1e-5, want[0])
        for op in UNARY_BACKWARD_OPS:
            assert x.unary_backward(op, lx, g, lg).numel == 240
    big = _storage(dev, 3000 * 40, dt)  # many row chunks for the weight gradient
    big.layer_norm_backward(Layout((3000, 40)), big, Layout((40, 3000)).transpose(0, 1), None, None, 1e-5, True, True)
    big.layer_norm_backward(Layout((2, 20000)), big, Layout((2, 20000)), None, None, 1e-5, True, True)
    # rows that fit 256 threads: norm_bwd_fit (its _vec variant for whole aligned vectors) and
    # the finish of its partials; longer rows (5000): norm_bwd_rows, then the stats-based wgrad
    for shape, kernels in (((64, 512), ["layer_norm_bwd_fit_vec", "norm_wgrad_finish"]),
                           ((3, 203), ["layer_norm_bwd_fit", "norm_wgrad_finish"]),
                           ((2, 5000), ["layer_norm_bwd", "norm_wgrad", "norm_wgrad_finish"])):
        st, n0 = _storage(dev, shape, dt), len(dev.calls)
        st.layer_norm_backward(Layout(shape), st, Layout(shape), None, None, 1e-5, True, True)
        st.rms_norm_backward(Layout(shape), st, Layout(shape), None, None, 1e-5, False)
        rms = kernels[0].replace("layer", "rms")
        assert dev.calls[n0:] == [f"{k}_{dt.short}" for k in kernels + [rms]], dev.calls[n0:]
    cs = _storage(dev, 5 * 4, dt)
    for variant in ("rope", "rope_i"):
        g.rope_backward(glay, cs, Layout((5, 4)).broadcast_as((2, 5, 4)), cs, Layout((2, 5, 4), (0, 4, 1)), variant)
    g.rope_backward(glay.permute((0, 2, 1, 3)), cs, Layout((2, 3, 4), (0, 4, 1)), cs, Layout((2, 3, 4), (0, 4, 1)),
                    "rope_thd")
    logits = _storage(dev, 6 * 5 * 4, dt)
    tgt = _storage(dev, 6 * 4, dtypes.int64)
    for xl, tl_ in ((Layout((24, 5)), Layout((24,))), (Layout((6, 5, 4)).permute((0, 2, 1)), Layout((6, 4)))):
        for wgt in ((None, None), (w, Layout((5,), (3,), 1))):
            loss, lse, wt = logits.cross_entropy(xl, tgt, tl_, *wgt, -100)
            assert loss.dtype is acc and loss.numel == 24
            for gl in (Layout(tl_.shape), Layout((1,) * len(tl_.shape)).broadcast_as(tl_.shape)):
                gr = _storage(dev, 24, acc)
                assert logits.cross_entropy_backward(xl, tgt, tl_, lse, wt, gr, gl).numel == 120
    p = _storage(dev, 40 + 3, dt)
    st = [_storage(dev, 40, acc) for _ in range(3)]
    for amsgrad in (False, True):
        p.adamw_step(Layout((5, 8), None, 3), g, Layout((8, 5)).transpose(0, 1), st[0], st[1],
                     st[2] if amsgrad else None, 1e-3, (0.9, 0.999), 1e-8, 0.01, 3, True, amsgrad)
    items = [(_storage(dev, n, dt), Layout((n,)), _storage(dev, n, dt), Layout((n,)), _storage(dev, n, acc),
              _storage(dev, n, acc), None, 2) for n in (5000, 3, 7)]
    type(p).adamw_steps(items, 1e-3, (0.9, 0.999), 1e-8, 0.01)
    # mixed precision's batched casts, both ways; 30 tensors = two launches each way
    casts = [(_storage(dev, n + 1, dt), Layout((n,), None, 1)) for n in range(1, 31)]
    back = type(p).to_dtype_many(casts, dtypes.bfloat16 if dt is not dtypes.bfloat16 else dtypes.float32)
    assert [st.numel for st in back] == list(range(1, 31))
    assert dev.calls[-2:] == [f"cast_many_{dt.short}_{back[0].dtype.short}"] * 2
    assert {"softmax_bwd_" + dt.short, "norm_wgrad_" + dt.short, "norm_wgrad_finish_" + dt.short,
            "cross_entropy_fwd_" + dt.short, "cross_entropy_bwd_" + dt.short, "adamw_" + dt.short,
            "adamw_many_" + dt.short} <= set(dev.calls)
