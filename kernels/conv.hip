// Spatial family: im2col_<t> / col2im_<t> (convolutions become GEMMs on the host),
// max_pool2d_<t>, max_pool2d_backward_<t> (floats), avg_pool2d_<t>, upsample_nearest2d_<t>,
// and gemm_<t> for the integer dtypes that vendor BLAS libraries do not cover. Inputs are
// read through 4-d views (strides by value); outputs are contiguous NCHW.
#include "compat.h"

// Geometry of a 2-d window op. For im2col/pooling: h, w are the input size and oh, ow
// the output size; for col2im (conv_transpose) h, w are the size of the transposed
// convolution's input and oh, ow its output. Packed by the host (`_GEOM2D`).
struct Geom2d { i64 batch, c, h, w, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw; };
struct View4 { i64 offset, s0, s1, s2, s3; };
struct View3 { i64 offset, s0, s1, s2; };

// col (B, C*kh*kw, oh*ow) contiguous; zero where the window reads padding.
template <typename T>
TL_DEV void im2col_map(i64 n, const Geom2d& g, const View4& x, const T* in, T* col) {
    TL_GRID_LOOP(e, n) {
        i64 t = e;
        const i64 ox = t % g.ow; t /= g.ow;
        const i64 oy = t % g.oh; t /= g.oh;
        const i64 kx = t % g.kw; t /= g.kw;
        const i64 ky = t % g.kh; t /= g.kh;
        const i64 c = t % g.c, b = t / g.c;
        const i64 iy = oy * g.sh - g.ph + ky * g.dh, ix = ox * g.sw - g.pw + kx * g.dw;
        const bool inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
        col[e] = inside ? in[x.offset + b * x.s0 + c * x.s1 + iy * x.s2 + ix * x.s3] : FromI64<T>::cv(0);
    }
}

// The gather form of col2im: each output pixel sums the column entries that land on it
// (deterministic, no atomics). cols is (B, C*kh*kw, h*w) contiguous.
template <typename T>
TL_DEV void col2im_map(i64 n, const Geom2d& g, const T* cols, T* out) {
    typedef typename Tr<T>::acc A;
    TL_GRID_LOOP(e, n) {
        i64 t = e;
        const i64 ox = t % g.ow; t /= g.ow;
        const i64 oy = t % g.oh; t /= g.oh;
        const i64 c = t % g.c, b = t / g.c;
        A acc = A(0);
        for (i64 ky = 0; ky < g.kh; ++ky) {
            const i64 ty = oy + g.ph - ky * g.dh;
            if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.h) continue;
            const i64 iy = ty / g.sh;
            for (i64 kx = 0; kx < g.kw; ++kx) {
                const i64 tx = ox + g.pw - kx * g.dw;
                if (tx < 0 || tx % g.sw != 0 || tx / g.sw >= g.w) continue;
                const i64 ix = tx / g.sw;
                acc += Tr<T>::load(cols[(((b * g.c + c) * g.kh + ky) * g.kw + kx) * g.h * g.w + iy * g.w + ix]);
            }
        }
        out[e] = Tr<T>::store(acc);
    }
}

// Padding never wins a max (torch semantics); NaN propagates.
template <typename T>
TL_DEV void max_pool2d_map(i64 n, const Geom2d& g, const View4& x, const T* in, T* out) {
    typedef typename Tr<T>::acc A;
    TL_GRID_LOOP(e, n) {
        i64 t = e;
        const i64 ox = t % g.ow; t /= g.ow;
        const i64 oy = t % g.oh; t /= g.oh;
        const i64 c = t % g.c, b = t / g.c;
        const T* base = in + x.offset + b * x.s0 + c * x.s1;
        A best = tl_lowest<A>();
        for (i64 ky = 0; ky < g.kh; ++ky) {
            const i64 iy = oy * g.sh - g.ph + ky * g.dh;
            if (iy < 0 || iy >= g.h) continue;
            for (i64 kx = 0; kx < g.kw; ++kx) {
                const i64 ix = ox * g.sw - g.pw + kx * g.dw;
                if (ix < 0 || ix >= g.w) continue;
                best = MaxOp<A>::combine(best, Tr<T>::load(base[iy * x.s2 + ix * x.s3]));
            }
        }
        out[e] = Tr<T>::store(best);
    }
}

// The flat (iy * w + ix) position of the element that PyTorch's max pooling picks in window
// (oy, ox): its unpadded elements in row-major order, a value replacing the running max when it
// is greater or NaN, so a tie keeps the first maximum, NaNs the last NaN, and a window of -inf
// its first element (the forward's max: MaxOp, which agrees on the value).
template <typename T>
TL_DEV i64 max_pool2d_winner(const Geom2d& g, const View4& x, const T* base, i64 oy, i64 ox) {
    typedef typename Tr<T>::acc A;
    i64 win = -1;
    A best = A(0);
    for (i64 ky = 0; ky < g.kh; ++ky) {
        const i64 iy = oy * g.sh - g.ph + ky * g.dh;
        if (iy < 0 || iy >= g.h) continue;
        for (i64 kx = 0; kx < g.kw; ++kx) {
            const i64 ix = ox * g.sw - g.pw + kx * g.dw;
            if (ix < 0 || ix >= g.w) continue;
            const A v = Tr<T>::load(base[iy * x.s2 + ix * x.s3]);
            if (win < 0 || v > best || tl_isnan(v)) { best = v; win = iy * g.w + ix; }
        }
    }
    return win;
}

// max_pool2d's input gradient in the gather form (deterministic, no atomics; out is the
// contiguous NCHW input gradient): one input element per thread sums the output gradients
// of the windows that cover it and pick it. A window covers (iy, ix) at most at one kernel
// offset, so each window is visited once.
template <typename T>
TL_DEV void max_pool2d_backward_map(i64 n, const Geom2d& g, const View4& x, const View4& gv, const T* in,
                                    const T* grad, T* out) {
    typedef typename Tr<T>::acc A;
    TL_GRID_LOOP(e, n) {
        i64 t = e;
        const i64 ix = t % g.w; t /= g.w;
        const i64 iy = t % g.h; t /= g.h;
        const i64 c = t % g.c, b = t / g.c;
        const T* base = in + x.offset + b * x.s0 + c * x.s1;
        const T* gbase = grad + gv.offset + b * gv.s0 + c * gv.s1;
        A acc = A(0);
        for (i64 ky = 0; ky < g.kh; ++ky) {
            const i64 ty = iy + g.ph - ky * g.dh;  // oy * sh where output row oy's window holds iy at ky
            if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.oh) continue;
            const i64 oy = ty / g.sh;
            for (i64 kx = 0; kx < g.kw; ++kx) {
                const i64 tx = ix + g.pw - kx * g.dw;
                if (tx < 0 || tx % g.sw != 0 || tx / g.sw >= g.ow) continue;
                const i64 ox = tx / g.sw;
                if (max_pool2d_winner(g, x, base, oy, ox) == iy * g.w + ix)
                    acc += Tr<T>::load(gbase[oy * gv.s2 + ox * gv.s3]);
            }
        }
        out[e] = Tr<T>::store(acc);
    }
}

// torch's divisor: with count_include_pad the window clipped to the padded input,
// otherwise the number of real input elements it covers.
// The window's mean as the store converts it: cpu's rule is "exact mean, then the dtype's
// cast". Integers truncate toward zero, which acc / count does; a bool mean is nonzero
// exactly when the sum is (acc / count would say false for 1 true element of 9).
template <typename T, typename A> TL_DEV A tl_window_mean(A acc, i64 count) { return acc / (A)count; }
template <> TL_DEV u32 tl_window_mean<tlbool, u32>(u32 acc, i64) { return acc; }

template <typename T>
TL_DEV void avg_pool2d_map(i64 n, const Geom2d& g, const View4& x, int count_include_pad,
                           const T* in, T* out) {
    typedef typename Tr<T>::acc A;
    TL_GRID_LOOP(e, n) {
        i64 t = e;
        const i64 ox = t % g.ow; t /= g.ow;
        const i64 oy = t % g.oh; t /= g.oh;
        const i64 c = t % g.c, b = t / g.c;
        i64 y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
        i64 y1 = y0 + g.kh < g.h + g.ph ? y0 + g.kh : g.h + g.ph;
        i64 x1 = x0 + g.kw < g.w + g.pw ? x0 + g.kw : g.w + g.pw;
        const i64 padded_count = (y1 - y0) * (x1 - x0);
        y0 = y0 < 0 ? 0 : y0; x0 = x0 < 0 ? 0 : x0;
        y1 = y1 > g.h ? g.h : y1; x1 = x1 > g.w ? g.w : x1;
        const T* base = in + x.offset + b * x.s0 + c * x.s1;
        A acc = A(0);
        for (i64 iy = y0; iy < y1; ++iy)
            for (i64 ix = x0; ix < x1; ++ix) acc += Tr<T>::load(base[iy * x.s2 + ix * x.s3]);
        const i64 count = count_include_pad ? padded_count : (y1 - y0) * (x1 - x0);
        out[e] = Tr<T>::store(count > 0 ? tl_window_mean<T>(acc, count) : A(0));
    }
}

// PyTorch 'nearest': source index floor(dst * in / out), computed exactly in integers.
template <typename T>
TL_DEV void upsample_nearest2d_map(i64 n, const Geom2d& g, const View4& x, const T* in, T* out) {
    TL_GRID_LOOP(e, n) {
        i64 t = e;
        const i64 ox = t % g.ow; t /= g.ow;
        const i64 oy = t % g.oh; t /= g.oh;
        const i64 c = t % g.c, b = t / g.c;
        const i64 iy = oy * g.h / g.oh, ix = ox * g.w / g.ow;
        out[e] = in[x.offset + b * x.s0 + c * x.s1 + iy * x.s2 + ix * x.s3];
    }
}

// alpha scales float products; integer GEMMs are always called with alpha = 1
TL_DEV float gemm_scale(float acc, double alpha) { return acc * (float)alpha; }
TL_DEV double gemm_scale(double acc, double alpha) { return acc * alpha; }
template <typename A> TL_DEV A gemm_scale(A acc, double) { return acc; }

// C[b] (m x n, row stride ldc, batch stride c_sb) = alpha A[b] (m x k) . B[b] (k x n), any
// strides, 16-bit floats accumulated in f32. One output per thread: the portable GEMM of
// integer dtypes everywhere and of floats where the platform has no BLAS (amdemu).
template <typename T>
TL_DEV void gemm_map(i64 batch, i64 m, i64 n, i64 k, const View3& a, const View3& b, i64 c_sb,
                     i64 ldc, double alpha, const T* A_, const T* B_, T* C) {
    typedef typename Tr<T>::acc A;
    TL_GRID_LOOP(e, batch * m * n) {
        const i64 j = e % n, i = (e / n) % m, bi = e / (n * m);
        const T* pa = A_ + a.offset + bi * a.s0 + i * a.s1;
        const T* pb = B_ + b.offset + bi * b.s0 + j * b.s2;
        A acc = A(0);
        for (i64 p = 0; p < k; ++p) acc += Tr<T>::load(pa[p * a.s2]) * Tr<T>::load(pb[p * b.s1]);
        C[bi * c_sb + i * ldc + j] = Tr<T>::store(gemm_scale(acc, alpha));
    }
}

#define SPATIAL_ENTRIES(T, sfx)                                                            \
    extern "C" __global__ void im2col_##sfx(i64 n, Geom2d g, View4 x, const T* in, T* col) { \
        im2col_map(n, g, x, in, col);                                                     \
    }                                                                                     \
    extern "C" __global__ void col2im_##sfx(i64 n, Geom2d g, const T* cols, T* out) {    \
        col2im_map(n, g, cols, out);                                                      \
    }                                                                                     \
    extern "C" __global__ void max_pool2d_##sfx(i64 n, Geom2d g, View4 x, const T* in, T* out) { \
        max_pool2d_map(n, g, x, in, out);                                                 \
    }                                                                                     \
    extern "C" __global__ void avg_pool2d_##sfx(i64 n, Geom2d g, View4 x, int count_include_pad, \
                                                const T* in, T* out) {                    \
        avg_pool2d_map(n, g, x, count_include_pad, in, out);                              \
    }                                                                                     \
    extern "C" __global__ void upsample_nearest2d_##sfx(i64 n, Geom2d g, View4 x, const T* in, \
                                                        T* out) {                         \
        upsample_nearest2d_map(n, g, x, in, out);                                         \
    }
// the input gradient of max pooling: float dtypes only (a gradient is a float)
#define POOL_GRAD_ENTRY(T, sfx)                                                            \
    extern "C" __global__ void max_pool2d_backward_##sfx(i64 n, Geom2d g, View4 x, View4 gv, const T* in, \
                                                         const T* grad, T* out) {         \
        max_pool2d_backward_map(n, g, x, gv, in, grad, out);                              \
    }
#define GEMM_ENTRY(T, sfx)                                                                 \
    extern "C" __global__ void gemm_##sfx(i64 batch, i64 m, i64 n, i64 k, View3 a, View3 b, \
                                          i64 c_sb, i64 ldc, double alpha, const T* A_, const T* B_, \
                                          T* C) {                                         \
        gemm_map(batch, m, n, k, a, b, c_sb, ldc, alpha, A_, B_, C);                      \
    }
TL_FOR_ALL(SPATIAL_ENTRIES)
TL_FOR_FLOATS(POOL_GRAD_ENTRY)
TL_FOR_ALL(GEMM_ENTRY)
