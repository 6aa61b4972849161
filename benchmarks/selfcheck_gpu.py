"""Storage-level self-check of the GPU backend against the cpu reference.

    python benchmarks/selfcheck_gpu.py --device cuda [--precompile] [--seed 0] [--only SECTION ...]

A script, part of neither the test suite nor the installed package.

Runs every GpuStorage method for every dtype on contiguous, permuted, offset/sliced,
stepped and broadcast layouts, the same calls on the cpu backend with the same inputs,
and compares (per-dtype tolerances, widened by sqrt(terms) for accumulations; integers
and bools exactly; errors must be of the same class on both). Prints one line per
failure and a summary; exit status 1 when anything failed. It needs a GPU, or the
emulated AMD platform (`TENSORLITE_AMDEMU=gfx90a ... --device amdemu`, slow: run a section
with --only); the backend-swap tests in tests/ cover the same ground through the Tensor API.

--precompile compiles every kernels/*.hip for the device's arch in parallel processes
first (filling the disk cache), which saves minutes on a fresh machine.
"""
from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
import traceback

import numpy as np

from tensorlite import dtype as dtypes
from tensorlite.backend import BINARY_OPS, CMP_OPS, ConvParams, PoolParams, get_device
from tensorlite.backends.rocm import compiler
from tensorlite.backends.rocm.kernel_table import unary_ops
from tensorlite.layout import Layout

_TOL = {"float64": (1e-9, 1e-12), "float32": (2e-5, 2e-6), "float16": (1e-2, 2e-3), "bfloat16": (1.6e-2, 1e-2)}


class Pair:
    """The same data on the cpu (`c`) and the GPU (`g`)."""

    def __init__(self, c, g, array):
        self.c, self.g, self.array = c, g, array


def _pick(x, side):
    return getattr(x, side) if isinstance(x, Pair) else x


class Checker:
    def __init__(self, device: str, seed: int = 0, verbose: bool = False):
        self.cpu, self.gpu = get_device("cpu"), get_device(device)
        self.rng = np.random.default_rng(seed)
        self.verbose = verbose
        self.passed, self.failures = 0, []

    # ---- inputs -------------------------------------------------------------------
    def data(self, n: int, dt, low=-2.0, high=2.0) -> Pair:
        dt = dtypes.get(dt)
        if dt is dtypes.bool_:
            arr = self.rng.random(n) < 0.5
        elif dt.is_floating_point:
            arr = self.rng.uniform(low, high, n).astype(dt.np)
        else:
            lo = int(low) if dt.is_signed else 0
            arr = self.rng.integers(lo, max(int(high), lo + 1) + 8, n).astype(dt.np)
        return Pair(self.cpu.from_cpu(arr), self.gpu.from_cpu(arr), arr)

    def ids(self, n: int, size: int, dt, bad: bool = False) -> Pair:
        arr = self.rng.integers(0, size, n)
        if bad:
            arr[n // 2] = size + 3
        arr = arr.astype(dtypes.get(dt).np)
        return Pair(self.cpu.from_cpu(arr), self.gpu.from_cpu(arr), arr)

    # ---- comparison ---------------------------------------------------------------
    def _fail(self, label, why):
        self.failures.append(f"{label}: {why}")
        print(f"FAIL {label}: {why}", flush=True)

    def compare(self, label, got, want, dt, terms=1):
        dt = dtypes.get(dt)
        if got.shape != want.shape:
            return self._fail(label, f"shape {got.shape} != {want.shape}")
        if dt.is_floating_point:
            rtol, atol = _TOL[dt.name]
            scale = math.sqrt(max(terms, 1))
            g, w = got.astype(np.float64), want.astype(np.float64)
            bad = ~np.isclose(g, w, rtol=rtol * scale, atol=atol * scale, equal_nan=True)
        else:
            bad = got != want
        if bad.any():
            i = np.argwhere(bad)[0]
            return self._fail(label, f"{int(bad.sum())}/{bad.size} differ, e.g. at {tuple(i)}: "
                                     f"gpu {got[tuple(i)]!r} vs cpu {want[tuple(i)]!r}")
        self.passed += 1
        if self.verbose:
            print(f"ok   {label}", flush=True)

    def check(self, label, obj, method, *args, shape=None, terms=1, inplace=None):
        """obj.method(*args) on both sides (Pairs become each side's storage); compare the
        results (read as `shape`), or the `inplace` Pair when the method writes in place."""
        results = {}
        for side in ("c", "g"):
            try:
                out = getattr(_pick(obj, side), method)(*[_pick(a, side) for a in args])
                results[side] = (out, None)
            except Exception as e:  # compared below: the GPU must raise what the cpu raises
                results[side] = (None, e)
        (c_out, c_err), (g_out, g_err) = results["c"], results["g"]
        if c_err is not None or g_err is not None:
            if c_err is not None and g_err is not None and isinstance(g_err, type(c_err)):
                self.passed += 1
                return
            detail = "".join(traceback.format_exception_only(type(g_err), g_err)).strip() if g_err else "no error"
            return self._fail(label, f"cpu raised {type(c_err).__name__ if c_err else 'nothing'}, gpu: {detail}")
        if inplace is not None:
            c_out, g_out = inplace.c, inplace.g
            shape = (inplace.c.data.size,)
        lay = Layout.contiguous(shape)
        try:
            got = g_out.to_cpu(lay)
        except Exception as e:
            return self._fail(label, f"to_cpu failed: {type(e).__name__}: {e}")
        if g_out.dtype is not c_out.dtype:
            return self._fail(label, f"dtype {g_out.dtype} != cpu {c_out.dtype}")
        self.compare(label, got, c_out.to_cpu(lay), c_out.dtype, terms)


# =====================================================================================
# The cases
# =====================================================================================

def _layouts_345():
    """(name, layout, storage elements) with shape (3, 4, 5)."""
    base = Layout.contiguous((3, 4, 5))
    return [
        ("contig", base, 60),
        ("contig+offset3", Layout.contiguous((3, 4, 5), offset=3), 63),
        ("contig+offset4", Layout.contiguous((3, 4, 5), offset=4), 64),
        ("permuted", Layout.contiguous((5, 3, 4)).permute((1, 2, 0)), 60),
        ("sliced+offset", Layout.contiguous((4, 6, 7)).narrow(0, 1, 3).narrow(1, 1, 4).narrow(2, 2, 5), 168),
        ("stepped", Layout.contiguous((3, 8, 11)).narrow(1, 0, 4, 2).narrow(2, 1, 5, 2), 264),
        ("broadcast", Layout.contiguous((1, 4, 1), offset=2).broadcast_as((3, 4, 5)), 6),
    ]


def check_elementwise(ck: Checker):
    lays = _layouts_345()
    for dt in dtypes.ALL:
        for name, lay, n in lays:
            x = ck.data(n, dt)
            for op in unary_ops(dt.short):  # the ops unary.hip has for this dtype
                ck.check(f"unary {op} {dt.short} {name}", x, "unary_impl", op, lay, shape=lay.shape)
            ck.check(f"affine {dt.short} {name}", x, "affine", lay, 3.0, -2.0, shape=lay.shape)
            ck.check(f"affine(0.5) {dt.short} {name}", x, "affine", lay, 0.5, 1.25, shape=lay.shape)
            if dt.is_floating_point:
                ck.check(f"powf {dt.short} {name}", x, "powf", lay, 1.7, shape=lay.shape)
                ck.check(f"elu {dt.short} {name}", x, "elu", lay, 0.7, shape=lay.shape)
            for other in dtypes.ALL:
                ck.check(f"to_dtype {dt.short}->{other.short} {name}", x, "to_dtype", lay, other, shape=lay.shape)
        for (na, la, n1), (nb, lb, n2) in itertools.combinations(lays, 2):
            a, b = ck.data(n1, dt), ck.data(n2, dt, low=0.5 if dt.is_floating_point else -2.0)
            for op in BINARY_OPS:
                ck.check(f"binary {op} {dt.short} {na},{nb}", a, "binary_impl", op, b, la, lb, shape=la.shape)
            for op in CMP_OPS:
                ck.check(f"cmp {op} {dt.short} {na},{nb}", a, "cmp", op, b, la, lb, shape=la.shape)
                ck.check(f"cmp {op} {dt.short} {na},{na}", a, "cmp", op, a, la, la, shape=la.shape)
            cond = ck.data(60, dtypes.bool_)
            ck.check(f"where {dt.short} {na},{nb}", cond, "where_cond", lays[0][1].permute((0, 1, 2)), a, la, b, lb,
                     shape=la.shape)
        big = ck.data(70005, dt)
        for off in (0, 1, 4):
            la, lb = Layout.contiguous((70001,), offset=off), Layout.contiguous((70001,), offset=2)
            for op in ("add", "mul", "maximum"):
                ck.check(f"binary {op} {dt.short} 70001 offsets {off},2", big, "binary_impl", op, big, la, lb,
                         shape=(70001,))
                ck.check(f"binary {op} {dt.short} 70001 scalar rhs", big, "binary_impl", op, big, la,
                         Layout.contiguous((1,)).broadcast_as((70001,)), shape=(70001,))
            ck.check(f"unary sqr {dt.short} 70001 offset {off}", big, "unary_impl", "sqr", la, shape=(70001,))
            ck.check(f"to_dtype {dt.short}->f32 70001 offset {off}", big, "to_dtype", la, dtypes.float32,
                     shape=(70001,))


def check_reductions(ck: Checker):
    cases = [(name, lay, n) for name, lay, n in _layouts_345()]
    cases += [("wide", Layout.contiguous((3, 5000)), 15000), ("tall", Layout.contiguous((5000, 3)), 15000),
              ("long", Layout.contiguous((70001,)), 70001), ("two-long", Layout.contiguous((2, 300000)), 600000),
              ("tall-T", Layout.contiguous((300, 70)).transpose(0, 1), 21000)]
    for dt in dtypes.ALL:
        for name, lay, n in cases:
            x = ck.data(n, dt)
            nd = lay.ndim
            dim_sets = [(d,) for d in range(nd)] + [tuple(range(nd))] + ([(0, 2)] if nd == 3 else [])
            for dims in dim_sets:
                terms = math.prod(lay.shape[d] for d in dims)
                for op in ("sum", "min", "max"):
                    ck.check(f"reduce {op} {dt.short} {name} dims={dims}", x, "reduce_op", op, lay, dims,
                             shape=tuple(1 if d in dims else s for d, s in enumerate(lay.shape)), terms=terms)
                if len(dims) == 1:
                    for op in ("argmin", "argmax"):
                        ck.check(f"reduce {op} {dt.short} {name} dims={dims}", x, "reduce_op", op, lay, dims,
                                 shape=tuple(1 if d in dims else s for d, s in enumerate(lay.shape)))
        if dt.is_floating_point:  # NaN propagates; argmax picks the first NaN
            arr = np.array([1.0, np.nan, 3.0, np.nan, -1.0], dt.np)
            x = Pair(ck.cpu.from_cpu(arr), ck.gpu.from_cpu(arr), arr)
            for op in ("max", "min", "argmax", "argmin"):
                ck.check(f"reduce {op} {dt.short} with NaN", x, "reduce_op", op, Layout.contiguous((5,)), (0,),
                         shape=(1,))
        x = ck.data(12, dt)
        ck.check(f"reduce max {dt.short} empty dim", x, "reduce_op", "max", Layout.contiguous((3, 0)), (1,),
                 shape=(3, 1))
        ck.check(f"reduce sum {dt.short} empty dim", x, "reduce_op", "sum", Layout.contiguous((3, 0)), (1,),
                 shape=(3, 1))


def check_indexing(ck: Checker):
    for dt, ids_dt in itertools.product(dtypes.ALL, ("i64", "u32", "u8")):
        for name, lay, n in _layouts_345()[:4]:
            x = ck.data(n, dt)
            for dim in range(3):
                size = lay.shape[dim]
                ids = ck.ids(7, size, ids_dt)
                ids_lay = Layout.contiguous((7,))
                out_shape = lay.shape[:dim] + (7,) + lay.shape[dim + 1:]
                ck.check(f"index_select {ids_dt} {dt.short} {name} dim={dim}", x, "index_select", ids, lay,
                         ids_lay, dim, shape=out_shape)
                strided_ids = Layout((3,), (2,), 1)
                ck.check(f"index_select strided ids {ids_dt} {dt.short} {name} dim={dim}", x, "index_select",
                         ids, lay, strided_ids, dim, shape=lay.shape[:dim] + (3,) + lay.shape[dim + 1:])
                g_shape = tuple(2 if d != dim else 6 for d in range(3))
                gids = ck.ids(math.prod(g_shape), size, ids_dt)
                g_lay = Layout.contiguous(g_shape)
                ck.check(f"gather {ids_dt} {dt.short} {name} dim={dim}", x, "gather", lay, gids, g_lay, dim,
                         shape=g_shape)
                src = ck.data(math.prod(g_shape) * 2, dt)
                src_lay = Layout.contiguous(g_shape[::-1]).permute((2, 1, 0))
                ck.check(f"scatter_add {ids_dt} {dt.short} {name} dim={dim}", x, "scatter_add", lay, gids, g_lay,
                         src, src_lay, dim, shape=lay.shape, terms=6)
                src2 = ck.data(math.prod(out_shape), dt)
                ck.check(f"index_add {ids_dt} {dt.short} {name} dim={dim}", x, "index_add", lay, ids, ids_lay,
                         src2, Layout.contiguous(out_shape), dim, shape=lay.shape, terms=7)
            bad = ck.ids(7, lay.shape[1], ids_dt, bad=True)
            ck.check(f"index_select out-of-range {ids_dt} {dt.short}", x, "index_select", bad, lay,
                     Layout.contiguous((7,)), 1, shape=(3, 7, 5))
            gbad = ck.ids(60, lay.shape[1], ids_dt, bad=True)
            ck.check(f"gather out-of-range {ids_dt} {dt.short}", x, "gather", lay, gbad, Layout.contiguous(lay.shape),
                     1, shape=lay.shape)
            ck.check(f"index_add out-of-range {ids_dt} {dt.short}", x, "index_add", lay, bad,
                     Layout.contiguous((7,)), ck.data(105, dt), Layout.contiguous((3, 7, 5)), 1, shape=lay.shape)


def check_copies(ck: Checker):
    for dt in dtypes.ALL:
        for name, lay, n in _layouts_345():
            x = ck.data(n, dt)
            for dst_dt in (dt, dtypes.float32, dtypes.int64):
                dst = ck.data(100, dst_dt)
                ck.check(f"copy_strided_src {dt.short}->{dst_dt.short} {name}", x, "copy_strided_src", dst, 17, lay,
                         inplace=dst)
            if name != "broadcast":
                for value in (0, 3, -1.5, True):
                    ck.check(f"const_set {value!r} {dt.short} {name}", x, "const_set", value, lay, inplace=x)
        src = ck.data(120, dt)
        for d1, d2, ss, ds in ((4, 5, 10, 7), (3, 8, 8, 8), (6, 1, 3, 2)):
            dst = ck.data(120, dt)
            ck.check(f"copy2d {dt.short} {(d1, d2, ss, ds)}", src, "copy2d", dst, d1, d2, ss, ds, 3, 5, inplace=dst)
        dst = ck.data(120, dtypes.float32)
        ck.check(f"copy2d cast {dt.short}->f32", src, "copy2d", dst, 4, 5, 10, 7, 3, 5, inplace=dst)


def check_matmul(ck: Checker):
    b, m, n, k = 3, 17, 33, 9
    for dt in dtypes.ALL:
        a = ck.data(b * m * k * 2, dt, low=-1, high=1)
        w = ck.data(b * k * n * 2, dt, low=-1, high=1)
        lhs = {"contig": Layout.contiguous((b, m, k)), "T": Layout.contiguous((b, k, m)).transpose(1, 2),
               "offset": Layout.contiguous((b, m, k), offset=5),
               "bcast": Layout.contiguous((m, k)).unsqueeze(0).broadcast_as((b, m, k)),
               "row-bcast": Layout((b, m, k), (m * k, 0, 1))}
        rhs = {"contig": Layout.contiguous((b, k, n)), "T": Layout.contiguous((b, n, k)).transpose(1, 2),
               "bcast": Layout.contiguous((k, n)).unsqueeze(0).broadcast_as((b, k, n)),
               "sliced": Layout.contiguous((b, k, 2 * n)).narrow(2, 3, n)}
        for (ln, la), (rn, lb) in itertools.product(lhs.items(), rhs.items()):
            ck.check(f"matmul {dt.short} {ln}x{rn}", a, "matmul", w, (b, m, n, k), la, lb, shape=(b, m, n), terms=k)
        big_a, big_b = ck.data(130 * 70, dt, low=-1, high=1), ck.data(70 * 90, dt, low=-1, high=1)
        ck.check(f"matmul {dt.short} 130x70x90", big_a, "matmul", big_b, (1, 130, 90, 70),
                 Layout.contiguous((1, 130, 70)), Layout.contiguous((1, 70, 90)), shape=(1, 130, 90), terms=70)


def check_conv_pool(ck: Checker):
    for dt in (dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64, dtypes.int64, dtypes.uint8):
        lo, hi = (-1, 1) if dt.is_floating_point else (0, 3)
        x = ck.data(2 * 4 * 9 * 8, dt, lo, hi)
        for xn, xl in (("contig", Layout.contiguous((2, 4, 9, 8))),
                       ("permuted", Layout.contiguous((2, 4, 8, 9)).permute((0, 1, 3, 2)))):
            for groups, stride, pad, dil in ((1, (1, 1), (0, 0), (1, 1)), (2, (2, 1), (1, 2), (1, 2)),
                                             (4, (1, 2), (1, 1), (2, 1))):
                w = ck.data(8 * (4 // groups) * 9, dt, lo, hi)
                p = ConvParams(stride, pad, dil, groups)
                oh, ow = p.out_size((9, 8), (3, 3))
                ck.check(f"conv2d {dt.short} {xn} g={groups} s={stride} p={pad} d={dil}", x, "conv2d", xl, w,
                         Layout.contiguous((8, 4 // groups, 3, 3)), p, shape=(2, 8, oh, ow), terms=36)
                wt = ck.data(4 * 3 * 9, dt, lo, hi)
                for op_pad in ((0, 0), (1, 0)):
                    pt = ConvParams(stride, pad, dil, groups, op_pad if max(stride) > 1 else (0, 0))
                    th, tw = pt.out_size((9, 8), (3, 3), transposed=True)
                    ck.check(f"conv_transpose2d {dt.short} {xn} g={groups} s={stride} p={pad} d={dil} op={op_pad}",
                             x, "conv_transpose2d", xl, wt, Layout.contiguous((4, 3, 3, 3)), pt,
                             shape=(2, 3 * groups, th, tw), terms=36)
            pool = PoolParams((3, 2), (2, 2), (1, 1), (1, 1))
            for cip in (True, False):
                pp = PoolParams((3, 3), (2, 1), (1, 1), count_include_pad=cip)
                ck.check(f"avg_pool2d {dt.short} {xn} include_pad={cip}", x, "avg_pool2d", xl, pp,
                         shape=(2, 4) + pp.out_size(9, 8), terms=9)
            ck.check(f"max_pool2d {dt.short} {xn}", x, "max_pool2d", xl, pool, shape=(2, 4) + pool.out_size(9, 8))
            dpool = PoolParams((2, 2), (1, 2), (1, 0), (2, 3))
            ck.check(f"max_pool2d dilated {dt.short} {xn}", x, "max_pool2d", xl, dpool,
                     shape=(2, 4) + dpool.out_size(9, 8))
            for oh, ow in ((18, 16), (5, 11), (9, 8)):
                ck.check(f"upsample_nearest2d {dt.short} {xn} -> {oh}x{ow}", x, "upsample_nearest2d", xl, oh, ow,
                         shape=(2, 4, oh, ow))
        x1 = ck.data(2 * 4 * 11, dt, lo, hi)
        w1 = ck.data(6 * 2 * 3, dt, lo, hi)
        p1 = ConvParams((2,), (1,), (2,), 2)
        ck.check(f"conv1d {dt.short}", x1, "conv1d", Layout.contiguous((2, 4, 11)), w1,
                 Layout.contiguous((6, 2, 3)), p1, shape=(2, 6) + p1.out_size((11,), (3,)), terms=6)
        wt1 = ck.data(4 * 3 * 3, dt, lo, hi)
        pt1 = ConvParams((3,), (1,), (1,), 1, (2,))
        ck.check(f"conv_transpose1d {dt.short}", x1, "conv_transpose1d", Layout.contiguous((2, 4, 11)), wt1,
                 Layout.contiguous((4, 3, 3)), pt1, shape=(2, 3) + pt1.out_size((11,), (3,), True), terms=12)


def check_fused(ck: Checker):
    for dt in dtypes.FLOATS:
        for shape in ((2, 3, 7), (4, 1500), (3, 2, 33)):
            n = math.prod(shape)
            x = ck.data(2 * n, dt, -4, 4)
            lays = {"contig": Layout.contiguous(shape),
                    "last-strided": Layout.contiguous(shape[:-1] + (2 * shape[-1],)).narrow(-1 % len(shape), 1,
                                                                                            shape[-1], 2)}
            lays["permuted"] = Layout.contiguous(shape[::-1]).permute(tuple(range(len(shape)))[::-1])
            for name, lay in lays.items():
                ck.check(f"softmax {dt.short} {shape} {name}", x, "softmax_last_dim", lay, shape=shape)
                ck.check(f"log_softmax {dt.short} {shape} {name}", x, "log_softmax", lay, shape=shape)
                w, bb = ck.data(2 * shape[-1], dt), ck.data(shape[-1], dt)
                wl, bl = Layout((shape[-1],), (2,), 1), Layout.contiguous((shape[-1],))
                ck.check(f"layer_norm {dt.short} {shape} {name}", x, "layer_norm", lay, w, wl, bb, bl, 1e-5,
                         shape=shape, terms=4)
                ck.check(f"layer_norm plain {dt.short} {shape} {name}", x, "layer_norm", lay, None, None, None, None,
                         1e-5, shape=shape, terms=4)
                ck.check(f"rms_norm {dt.short} {shape} {name}", x, "rms_norm", lay, w, wl, 1e-6, shape=shape, terms=4)
                ck.check(f"rms_norm plain {dt.short} {shape} {name}", x, "rms_norm", lay, None, None, 1e-6,
                         shape=shape, terms=4)
        b, h, t, d = 2, 3, 5, 8
        x = ck.data(b * h * t * d, dt)
        cs, sn = ck.data(b * t * d // 2, dt), ck.data(b * t * d // 2, dt)
        for variant in ("rope", "rope_i", "rope_thd"):
            shape = (b, t, h, d) if variant == "rope_thd" else (b, h, t, d)
            for name, lay in (("contig", Layout.contiguous(shape)),
                              ("permuted", Layout.contiguous((shape[0], shape[2], shape[1], d)).permute((0, 2, 1, 3)))):
                for cn, cl in (("per-batch", Layout.contiguous((b, t, d // 2))),
                               ("shared", Layout.contiguous((t, d // 2)).unsqueeze(0).broadcast_as((b, t, d // 2)))):
                    ck.check(f"{variant} {dt.short} {name} cos={cn}", x, "rope", lay, cs, cl, sn, cl, variant,
                             shape=shape)
        for (bq, hq, hk, L, S, dk, dv) in ((2, 4, 2, 5, 7, 8, 6), (1, 3, 3, 9, 9, 16, 16), (2, 2, 1, 1, 40, 8, 8)):
            q = ck.data(bq * hq * L * dk, dt, -1, 1)
            k = ck.data(bq * hk * S * dk, dt, -1, 1)
            v = ck.data(bq * hk * S * dv, dt, -1, 1)
            ql = Layout.contiguous((bq, hq, L, dk))
            kl = Layout.contiguous((bq, S, hk, dk)).permute((0, 2, 1, 3))
            vl = Layout.contiguous((bq, hk, S, dv))
            mb = ck.data(L * S, dtypes.bool_)
            ma = ck.data(L * S, dt, -1, 1)
            mlay = Layout.contiguous((L, S)).unsqueeze(0).unsqueeze(0).broadcast_as((bq, hq, L, S))
            for mn, mask in (("none", None), ("bool", mb), ("additive", ma)):
                for causal in (False, True):
                    ck.check(f"sdpa {dt.short} {(bq, hq, hk, L, S)} mask={mn} causal={causal}", q, "sdpa", ql, k, kl,
                             v, vl, mask, mlay if mask is not None else None, 0.35, causal, shape=(bq, hq, L, dv),
                             terms=S)


def _check_multi(ck: Checker, label, obj, method, *args, shapes, terms=1, inplace=()):
    """Like Checker.check for methods that return several storages (None entries must
    match) or write several in place (`inplace`: Pairs, compared after the call)."""
    outs = {}
    for side in ("c", "g"):
        try:
            outs[side] = (getattr(_pick(obj, side), method)(*[_pick(a, side) for a in args]), None)
        except Exception as e:
            outs[side] = (None, e)
    (c_out, c_err), (g_out, g_err) = outs["c"], outs["g"]
    if c_err is not None or g_err is not None:
        if c_err is not None and g_err is not None and isinstance(g_err, type(c_err)):
            ck.passed += 1
            return
        detail = "".join(traceback.format_exception_only(type(g_err), g_err)).strip() if g_err else "no error"
        return ck._fail(label, f"cpu raised {type(c_err).__name__ if c_err else 'nothing'}, gpu: {detail}")
    if inplace:
        c_out, g_out = [p.c for p in inplace], [p.g for p in inplace]
    for i, (c, g, shape) in enumerate(zip(c_out, g_out, shapes)):
        if (c is None) != (g is None):
            return ck._fail(f"{label} [{i}]", f"cpu returned {c!r}, gpu {g!r}")
        if c is not None:
            lay = Layout.contiguous(shape)
            ck.compare(f"{label} [{i}]", g.to_cpu(lay), c.to_cpu(lay), c.dtype, terms)


def check_fused_grad(ck: Checker):
    """Backward of the fused ops, fused cross-entropy, gelu/silu derivatives, AdamW step."""
    for dt in dtypes.FLOATS:
        acc = dtypes.float64 if dt is dtypes.float64 else dtypes.float32
        for shape in ((2, 3, 7), (4, 1500), (300, 40)):
            n = math.prod(shape)
            x, g = ck.data(2 * n, dt, -3, 3), ck.data(2 * n, dt)
            lays = {"contig": Layout.contiguous(shape),
                    "last-strided": Layout.contiguous(shape[:-1] + (2 * shape[-1],)).narrow(-1 % len(shape), 1,
                                                                                            shape[-1], 2),
                    "permuted": Layout.contiguous(shape[::-1]).permute(tuple(range(len(shape)))[::-1])}
            rows = n // shape[-1]
            w = ck.data(2 * shape[-1], dt, 0.5, 1.5)
            wl = Layout((shape[-1],), (2,), 1)
            for (xn, xl), (gn, gl) in ((("contig", lays["contig"]), ("permuted", lays["permuted"])),
                                       (("last-strided", lays["last-strided"]), ("contig", lays["contig"])),
                                       (("permuted", lays["permuted"]), ("last-strided", lays["last-strided"]))):
                tag = f"{dt.short} {shape} x={xn} g={gn}"
                y = ck.data(n, dt, 0, 1)  # softmax outputs: any values exercise the formula
                ck.check(f"softmax_backward {tag}", y, "softmax_last_dim_backward", Layout.contiguous(shape), g, gl,
                         shape=shape, terms=shape[-1])
                ck.check(f"log_softmax_backward {tag}", y, "log_softmax_backward", Layout.contiguous(shape), g, gl,
                         shape=shape, terms=shape[-1])
                for want in ((True, True), (False, True), (True, False)):
                    _check_multi(ck, f"layer_norm_backward {tag} want={want}", x, "layer_norm_backward", xl, g, gl,
                                 w, wl, 1e-5, *want, shapes=(shape, (shape[-1],), (shape[-1],)), terms=4 * rows)
                    _check_multi(ck, f"rms_norm_backward {tag} want_w={want[0]}", x, "rms_norm_backward", xl, g, gl,
                                 None if want[1] else w, None if want[1] else wl, 1e-6, want[0],
                                 shapes=(shape, (shape[-1],)), terms=4 * rows)
                for op in ("gelu_tanh", "gelu_erf", "silu"):
                    ck.check(f"{op}_backward {tag}", x, "unary_backward", op, xl, g, gl, shape=shape, terms=2)
                if len(shape) == 2:  # cross entropy: rows x classes
                    tgt = ck.ids(rows, shape[-1], dtypes.int64)
                    tgt.array[::7] = -100
                    tgt = Pair(ck.cpu.from_cpu(tgt.array), ck.gpu.from_cpu(tgt.array), tgt.array)
                    tl_ = Layout.contiguous((rows,))
                    for wn, wgt in (("none", (None, None)), ("weighted", (w, wl))):
                        _check_multi(ck, f"cross_entropy {tag} w={wn}", x, "cross_entropy", xl, tgt, tl_, *wgt, -100,
                                     shapes=((rows,),) * 3, terms=shape[-1])
                        loss_c, lse_c, wt_c = x.c.cross_entropy(xl, tgt.c, tl_, _pick(wgt[0], "c"), wgt[1], -100)
                        loss_g, lse_g, wt_g = x.g.cross_entropy(xl, tgt.g, tl_, _pick(wgt[0], "g"), wgt[1], -100)
                        gr = ck.data(rows, acc)
                        for grn, grl in (("rows", tl_), ("scalar", Layout.contiguous((1,)).broadcast_as((rows,)))):
                            ck.check(f"cross_entropy_backward {tag} w={wn} grad={grn}", x, "cross_entropy_backward",
                                     xl, tgt, tl_, Pair(lse_c, lse_g, None), Pair(wt_c, wt_g, None), gr, grl,
                                     shape=shape, terms=4)
                    bad = ck.ids(rows, shape[-1], dtypes.int64, bad=True)
                    _check_multi(ck, f"cross_entropy bad target {tag}", x, "cross_entropy", xl, bad, tl_, None, None,
                                 -100, shapes=((rows,),) * 3)
        b, h, t, d = 2, 3, 5, 8
        g = ck.data(b * h * t * d, dt)
        cs, sn = ck.data(b * t * d // 2, dt), ck.data(b * t * d // 2, dt)
        for variant in ("rope", "rope_i", "rope_thd"):
            shape = (b, t, h, d) if variant == "rope_thd" else (b, h, t, d)
            lay = Layout.contiguous((shape[0], shape[2], shape[1], d)).permute((0, 2, 1, 3))
            cl = Layout.contiguous((t, d // 2)).unsqueeze(0).broadcast_as((b, t, d // 2))
            ck.check(f"{variant}_backward {dt.short}", g, "rope_backward", lay, cs, cl, sn, cl, variant, shape=shape)
        for amsgrad, decoupled, maximize in ((False, True, False), (True, True, True), (False, False, False)):
            n = 5000
            p, gr = ck.data(n + 3, dt), ck.data(2 * n, dt)
            states = [ck.data(n, acc, 0, 1) for _ in range(3)]
            states[1] = ck.data(n, acc, 0, 0.01)  # second moments are non-negative
            states[2] = ck.data(n, acc, 0, 0.01)
            _check_multi(ck, f"adamw_step {dt.short} amsgrad={amsgrad} decoupled={decoupled} maximize={maximize}", p,
                         "adamw_step", Layout.contiguous((n,), offset=3), gr, Layout((n,), (2,), 1), states[0],
                         states[1], states[2] if amsgrad else None, 1e-2, (0.9, 0.999), 1e-8, 0.1, 3, decoupled,
                         maximize, shapes=((n + 3,), (n,), (n,), (n,)), terms=4,
                         inplace=(p, states[0], states[1], states[2]))


def check_random(ck: Checker):
    gpu = ck.gpu
    for dt in dtypes.FLOATS + (dtypes.int64,):
        n = 100003
        for kind, a, b in (("uniform", -1.0, 3.0), ("normal", 0.5, 2.0)):
            draw = getattr(gpu, f"rand_{kind}")
            lay = Layout.contiguous((n,))
            gpu.set_seed(42)
            v1 = draw((n,), dt, a, b).to_cpu(lay)
            v3 = draw((n,), dt, a, b).to_cpu(lay)  # the next draw: the same seed, the next offset
            gpu.set_seed(42)
            v2 = draw((n,), dt, a, b).to_cpu(lay)
            label = f"random {kind} {dt.short}"
            if not np.array_equal(v1, v2):
                ck._fail(label, "same (seed, offset) gave different values")
                continue
            if np.array_equal(v1, v3):
                ck._fail(label, "a different offset gave the same values")
                continue
            f = v1.astype(np.float64)
            if not dt.is_floating_point:  # float draws truncated toward zero
                ok = f.min() >= math.trunc(a) and f.max() <= b if kind == "uniform" else True
            elif kind == "uniform":
                ok = f.min() >= a and f.max() <= b and abs(f.mean() - (a + b) / 2) < 0.05 and \
                    abs(f.std() - (b - a) / math.sqrt(12)) < 0.05
            else:
                ok = abs(f.mean() - a) < 0.05 and abs(f.std() - b) < 0.05
            if ok:
                ck.passed += 1
            else:
                ck._fail(label, f"moments off: min {f.min()} max {f.max()} mean {f.mean()} std {f.std()}")


SECTIONS = {"elementwise": check_elementwise, "reductions": check_reductions, "indexing": check_indexing,
            "copies": check_copies, "matmul": check_matmul, "conv_pool": check_conv_pool, "fused": check_fused,
            "fused_grad": check_fused_grad, "random": check_random}


def precompile(device_name: str, processes: int = 16) -> None:
    """Compile every kernel source for the device's arch in parallel (fills the disk cache)."""
    import multiprocessing as mp
    arch = get_device(device_name).arch
    sources = compiler.list_kernel_sources()
    with mp.get_context("spawn").Pool(min(processes, len(sources))) as pool:
        pool.starmap(compiler.compile_source, [(device_name, s, arch) for s in sources])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", nargs="*", choices=sorted(SECTIONS), help="sections to run (default: all)")
    ap.add_argument("--precompile", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    t0 = time.time()
    if args.precompile:
        precompile(args.device)
        print(f"precompiled kernels in {time.time() - t0:.1f}s", flush=True)
    ck = Checker(args.device, args.seed, args.verbose)
    for name in args.only or SECTIONS:
        t = time.time()
        before_p, before_f = ck.passed, len(ck.failures)
        try:
            SECTIONS[name](ck)
        except Exception:
            ck._fail(f"section {name}", "crashed:\n" + traceback.format_exc())
        print(f"[{name}] passed {ck.passed - before_p}, failed {len(ck.failures) - before_f} "
              f"({time.time() - t:.1f}s)", flush=True)
    print(f"selfcheck on {ck.gpu}: {ck.passed} passed, {len(ck.failures)} failed ({time.time() - t0:.1f}s)")
    return 1 if ck.failures else 0


if __name__ == "__main__":
    sys.exit(main())
