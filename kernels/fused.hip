// Fused nn ops (candle's CustomOps), floating dtypes, f32 arithmetic for the half types:
// softmax_<t>, log_softmax_<t>, layer_norm_<t>, rms_norm_<t> over the last dim;
// rope_<t>, rope_i_<t>, rope_thd_<t>; attn_softmax_<t> (the masked softmax inside sdpa).
//
// Row ops see the input as n_rows rows of row_len elements: `outer` addresses each row's
// first element, `inner_stride` steps along the row. Blocks are (tpr, rows_per_block) as
// at tl_row_allreduce in compat.h; outputs are contiguous.
#include "rows.h"  // Run, load_run, store_run, row_exp

// This thread's elements of one row, for kernels that pass over a row several times.
// A row that is contiguous, 16-byte aligned and a whole number of 16-byte vectors goes
// by vectors (vector k = threadIdx.x + i * blockDim.x, so neighbouring threads still touch
// neighbouring memory); other rows element by element (j = threadIdx.x + i * blockDim.x).
// Up to VECTORS vectors (or SCALARS elements) per thread are read from memory once, in the
// constructor, and kept in registers in the storage type (packed: a bf16 vector costs 4
// registers, not 8), so that more rows fit on a multiprocessor; every later pass widens
// them again. The slot loops are unrolled, so each slot index is a constant and the arrays
// never spill to memory. Longer rows are re-read on each pass. The host picks threads
// per row so that a row fits (storage.py, _launch_rows).
#define TL_ROW_VECTORS 8
template <typename T>
struct RowCache {
    typedef typename Tr<T>::acc A;
    enum { N = 16 / sizeof(T), VECTORS = TL_ROW_VECTORS, SCALARS = 32 };  // N: values per vector
    Run<T, N> raw[VECTORS];
    T sraw[SCALARS];
    const T* x;
    i64 n, stride;
    bool vec, cached;
    TL_DEV RowCache(const T* x_, i64 n_, i64 stride_)
        : x(x_), n(n_), stride(stride_), vec(stride_ == 1 && n_ % N == 0 && tl_aligned16(x_)),
          cached(n_ <= (i64)blockDim.x * (vec ? VECTORS * N : SCALARS)) {
        if (!cached) return;
        if (vec) {
#pragma unroll
            for (int c = 0; c < VECTORS; ++c) {
                const i64 k = threadIdx.x + (i64)c * blockDim.x;
                if (k * N < n) raw[c] = ((const Run<T, N>*)x)[k];
            }
        } else {
#pragma unroll
            for (int c = 0; c < SCALARS; ++c) {
                const i64 j = threadIdx.x + (i64)c * blockDim.x;
                if (j < n) sraw[c] = x[j * stride];
            }
        }
    }
    // each(f): f(j, x[j]) for each of this thread's elements. each_vec(g, f): on the vector
    // path g(k, values of vector k), f(j, x[j]) per element otherwise.
    template <typename F>
    TL_DEV void each(F f) const {
        each_vec([&](i64 k, const A* vals) {
#pragma unroll
            for (int e = 0; e < N; ++e) f(k * N + e, vals[e]);
        }, f);
    }
    template <typename G, typename F>
    TL_DEV void each_vec(G g, F f) const {
        const i64 step = blockDim.x;
        if (vec) {
            for (i64 k0 = threadIdx.x; k0 * N < n; k0 += step * VECTORS) {
#pragma unroll
                for (int c = 0; c < VECTORS; ++c) {
                    const i64 k = k0 + c * step;
                    if (k * N >= n) break;
                    const Run<T, N> q = cached ? raw[c] : ((const Run<T, N>*)x)[k];
                    A t[N];
#pragma unroll
                    for (int e = 0; e < N; ++e) t[e] = Tr<T>::load(q.v[e]);
                    g(k, t);
                }
            }
            return;
        }
        for (i64 j0 = threadIdx.x; j0 < n; j0 += step * SCALARS) {
#pragma unroll
            for (int c = 0; c < SCALARS; ++c) {
                const i64 j = j0 + c * step;
                if (j < n) f(j, Tr<T>::load(cached ? sraw[c] : x[j * stride]));
            }
        }
    }
    // y[j] = h(j, x[j]) for this thread's elements of a contiguous output row y, by whole
    // vectors where the row goes by vectors. store_vec: hv(k, vals) maps the N values of
    // vector k in place on that path (so that it can read its own operands by vectors).
    template <typename H>
    TL_DEV void store(T* y, H h) const {
        store_vec(y, [&](i64 k, A* vals) {
#pragma unroll
            for (int e = 0; e < N; ++e) vals[e] = h(k * N + e, vals[e]);
        }, h);
    }
    template <typename HV, typename H>
    TL_DEV void store_vec(T* y, HV hv, H h) const {
        each_vec([&](i64 k, const A* vals) {
            A t[N];
#pragma unroll
            for (int e = 0; e < N; ++e) t[e] = vals[e];
            hv(k, t);
            store_run<T, N>(y + k * N, t);
        }, [&](i64 j, A v) { y[j] = Tr<T>::store(h(j, v)); });
    }
};

template <typename T, bool Log>
TL_DEV void softmax_rows(i64 n_rows, i64 row_len, const Strided& outer, i64 inner_stride,
                         const T* in, T* out) {
    typedef typename Tr<T>::acc A;
    __shared__ A smem[TL_MAX_WARPS];
    const i64 rpb = blockDim.y;
    for (i64 base = (i64)blockIdx.x * rpb; base < n_rows; base += (i64)gridDim.x * rpb) {
        const i64 row = base + threadIdx.y;
        const bool valid = row < n_rows;
        const RowCache<T> r(in + (valid ? tl_index(outer, row) : 0), valid ? row_len : 0, inner_stride);
        A m = tl_lowest<A>();
        r.each([&](i64, A v) { m = MaxOp<A>::combine(m, v); });
        m = tl_row_allreduce<MaxOp<A> >(m, smem);
        A s = A(0);
        r.each([&](i64, A v) { s += row_exp<T>(v - m); });
        s = tl_row_allreduce<SumOp<A> >(s, smem);
        if (!valid) continue;
        T* y = out + row * row_len;
        const A log_s = Log ? tl_log(s) : A(0), inv_s = A(1) / s;
        r.store(y, [&](i64, A v) { return Log ? v - m - log_s : row_exp<T>(v - m) * inv_s; });
    }
}

// layer_norm: (x - mean) / sqrt(var + eps) * w + b; rms_norm: x / sqrt(mean(x^2) + eps) * w.
// w / b may be null (no affine part); they are 1-d with strides w_stride / b_stride.
template <typename T, bool Rms>
TL_DEV void norm_rows(i64 n_rows, i64 row_len, const Strided& outer, i64 inner_stride, const T* in,
                      const T* w, i64 w_stride, const T* b, i64 b_stride, double eps, T* out) {
    typedef typename Tr<T>::acc A;
    __shared__ A smem[TL_MAX_WARPS];
    const i64 rpb = blockDim.y;
    for (i64 base = (i64)blockIdx.x * rpb; base < n_rows; base += (i64)gridDim.x * rpb) {
        const i64 row = base + threadIdx.y;
        const bool valid = row < n_rows;
        const RowCache<T> r(in + (valid ? tl_index(outer, row) : 0), valid ? row_len : 0, inner_stride);
        A mean = A(0);
        if (!Rms) {  // two passes (mean, then squared deviations) for accuracy
            r.each([&](i64, A v) { mean += v; });
            mean = tl_row_allreduce<SumOp<A> >(mean, smem) / (A)row_len;
        }
        A sq = A(0);
        r.each([&](i64, A v) { sq += (v - mean) * (v - mean); });
        sq = tl_row_allreduce<SumOp<A> >(sq, smem);
        if (!valid) continue;
        const A inv = A(1) / tl_sqrt(sq / (A)row_len + (A)eps);
        T* y = out + row * row_len;
        typedef RowCache<T> Row;
        r.store_vec(y, [&](i64 k, A* vals) {  // weight and bias by vectors too
            A wv[Row::N], bv[Row::N];
            if (w) load_run<T, Row::N>(w + k * Row::N * w_stride, w_stride, wv);
            if (b) load_run<T, Row::N>(b + k * Row::N * b_stride, b_stride, bv);
#pragma unroll
            for (int e = 0; e < Row::N; ++e)
                vals[e] = (vals[e] - mean) * inv * (w ? wv[e] : A(1)) + (b ? bv[e] : A(0));
        }, [&](i64 j, A v) {
            v = (v - mean) * inv;
            if (w) v *= Tr<T>::load(w[j * w_stride]);
            if (b) v += Tr<T>::load(b[j * b_stride]);
            return v;
        });
    }
}

struct View4 { i64 offset, s0, s1, s2, s3; };
struct View3 { i64 offset, s0, s1, s2; };

// Rotary embedding. x has dims (n0, n1, n2, d): (b, h, t, d) for rope/rope_i, (b, t, h, d)
// for rope_thd. cos/sin are (b, t, d/2) views. Variant 0: pairs (i, i + d/2); 1: pairs
// (2i, 2i + 1); 2: like 0 with t as dim 1. inverse: rotate by -theta (sin negated), the
// transpose: rope's backward.
// A thread rotates G consecutive pairs, so that each operand is one run (16 bytes of x
// where the views are contiguous); I is the index type of the position arithmetic (32-bit
// division is several times cheaper than 64-bit, and the kernel is bound by it otherwise).
template <typename T, int Variant, int G, typename I>
TL_DEV void rope_groups(i64 n_pairs, i64 n1, i64 n2, i64 d, const View4& xv, const View3& cv, const View3& sv,
                        const T* x, const T* cs, const T* sn, T* out, int inverse) {
    typedef typename Tr<T>::acc A;
    const i64 half = d / 2;
    const I gpr = (I)(half / G), m1 = (I)n1, m2 = (I)n2;  // groups per row
    TL_GRID_LOOP(e, n_pairs / G) {
        I t = (I)e;
        const i64 i = (i64)(t % gpr) * G; t /= gpr;
        const i64 k2 = t % m2; t /= m2;
        const i64 k1 = t % m1, k0 = t / m1;
        const i64 pos = Variant == 2 ? k1 : k2;
        const i64 xb = xv.offset + k0 * xv.s0 + k1 * xv.s1 + k2 * xv.s2;
        const i64 ob = ((k0 * n1 + k1) * n2 + k2) * d;
        A c[G], s[G], x0[G], x1[G];
        load_run<T, G>(cs + cv.offset + k0 * cv.s0 + pos * cv.s1 + i * cv.s2, cv.s2, c);
        load_run<T, G>(sn + sv.offset + k0 * sv.s0 + pos * sv.s1 + i * sv.s2, sv.s2, s);
        if (Variant == 1) {
            A xx[2 * G];
            load_run<T, 2 * G>(x + xb + 2 * i * xv.s3, xv.s3, xx);
#pragma unroll
            for (int g = 0; g < G; ++g) { x0[g] = xx[2 * g]; x1[g] = xx[2 * g + 1]; }
        } else {
            load_run<T, G>(x + xb + i * xv.s3, xv.s3, x0);
            load_run<T, G>(x + xb + (i + half) * xv.s3, xv.s3, x1);
        }
        A y0[G], y1[G];
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const A sg = inverse ? -s[g] : s[g];
            y0[g] = x0[g] * c[g] - x1[g] * sg;
            y1[g] = x0[g] * sg + x1[g] * c[g];
        }
        if (Variant == 1) {
            A yy[2 * G];
#pragma unroll
            for (int g = 0; g < G; ++g) { yy[2 * g] = y0[g]; yy[2 * g + 1] = y1[g]; }
            store_run<T, 2 * G>(out + ob + 2 * i, yy);
        } else {
            store_run<T, G>(out + ob + i, y0);
            store_run<T, G>(out + ob + half + i, y1);
        }
    }
}

// Pairs per thread: 16 bytes of x per run (variant 1 reads both halves of its pairs in one
// run). The host sizes the grid with the same rule (storage.py rope).
template <typename T, int Variant> struct RopeGroup { enum { G = (Variant == 1 ? 8 : 16) / (int)sizeof(T) }; };

template <typename T, int Variant>
TL_DEV void rope_map(i64 n_pairs, i64 n1, i64 n2, i64 d, const View4& xv, const View3& cv, const View3& sv,
                     const T* x, const T* cs, const T* sn, T* out, int inverse) {
    const int G = RopeGroup<T, Variant>::G;
    const bool narrow = n_pairs < ((i64)1 << 31);
    if ((d / 2) % G == 0) {
        if (narrow) rope_groups<T, Variant, G, u32>(n_pairs, n1, n2, d, xv, cv, sv, x, cs, sn, out, inverse);
        else rope_groups<T, Variant, G, i64>(n_pairs, n1, n2, d, xv, cv, sv, x, cs, sn, out, inverse);
    } else {
        if (narrow) rope_groups<T, Variant, 1, u32>(n_pairs, n1, n2, d, xv, cv, sv, x, cs, sn, out, inverse);
        else rope_groups<T, Variant, 1, i64>(n_pairs, n1, n2, d, xv, cv, sv, x, cs, sn, out, inverse);
    }
}

// In-place masked softmax over the rows of attention scores (n_rows = b*hq*L rows of S,
// contiguous, row r = (b*hq + h)*L + l). mask_kind 0: none, 1: bool (keep where true),
// 2: additive in T; the mask is a (b, hq, L, S) view. causal: key j > query l is masked.
template <typename T>
TL_DEV void attn_softmax_rows(i64 n_rows, i64 S, i64 L, i64 hq, int mask_kind, const View4& mv,
                              const void* mask, int causal, T* scores) {
    typedef typename Tr<T>::acc A;
    __shared__ A smem[TL_MAX_WARPS];
    const i64 rpb = blockDim.y;
    for (i64 base = (i64)blockIdx.x * rpb; base < n_rows; base += (i64)gridDim.x * rpb) {
        const i64 row = base + threadIdx.y;
        const bool valid = row < n_rows;
        const i64 l = row % L, bh = row / L;
        const i64 mrow = mv.offset + (bh / hq) * mv.s0 + (bh % hq) * mv.s1 + l * mv.s2;
        T* x = scores + (valid ? row * S : 0);
        // masked score of key j
#define TL_SCORE(j)                                                                        \
        ((causal && (j) > l) || (mask_kind == 1 && !((const tlbool*)mask)[mrow + (j) * mv.s3].v) \
             ? tl_lowest<A>()                                                              \
             : Tr<T>::load(x[j]) + (mask_kind == 2 ? Tr<T>::load(((const T*)mask)[mrow + (j) * mv.s3]) : A(0)))
        A m = tl_lowest<A>();
        if (valid)
            for (i64 j = threadIdx.x; j < S; j += blockDim.x) m = MaxOp<A>::combine(m, TL_SCORE(j));
        m = tl_row_allreduce<MaxOp<A> >(m, smem);
        A s = A(0);
        if (valid)
            for (i64 j = threadIdx.x; j < S; j += blockDim.x) s += tl_exp(TL_SCORE(j) - m);
        s = tl_row_allreduce<SumOp<A> >(s, smem);
        if (!valid) continue;
        // A row whose keys are all masked gets zeros (torch and the cpu reference).
        const bool dead = m == tl_lowest<A>();
        const A inv_s = A(1) / s;
        for (i64 j = threadIdx.x; j < S; j += blockDim.x)
            x[j] = Tr<T>::store(dead ? A(0) : tl_exp(TL_SCORE(j) - m) * inv_s);
#undef TL_SCORE
    }
}

#define FUSED_ENTRIES(T, sfx)                                                              \
    extern "C" __global__ void softmax_##sfx(i64 n_rows, i64 row_len, Strided outer,      \
                                             i64 inner_stride, const T* in, T* out) {     \
        softmax_rows<T, false>(n_rows, row_len, outer, inner_stride, in, out);            \
    }                                                                                     \
    extern "C" __global__ void log_softmax_##sfx(i64 n_rows, i64 row_len, Strided outer,  \
                                                 i64 inner_stride, const T* in, T* out) { \
        softmax_rows<T, true>(n_rows, row_len, outer, inner_stride, in, out);             \
    }                                                                                     \
    extern "C" __global__ void layer_norm_##sfx(i64 n_rows, i64 row_len, Strided outer,   \
        i64 inner_stride, const T* in, const T* w, i64 w_stride, const T* b, i64 b_stride, \
        double eps, T* out) {                                                             \
        norm_rows<T, false>(n_rows, row_len, outer, inner_stride, in, w, w_stride, b, b_stride, eps, out); \
    }                                                                                     \
    extern "C" __global__ void rms_norm_##sfx(i64 n_rows, i64 row_len, Strided outer,     \
        i64 inner_stride, const T* in, const T* w, i64 w_stride, double eps, T* out) {    \
        norm_rows<T, true>(n_rows, row_len, outer, inner_stride, in, w, w_stride, (const T*)0, 0, eps, out); \
    }                                                                                     \
    extern "C" __global__ void rope_##sfx(i64 n, i64 n1, i64 n2, i64 d, View4 xv, View3 cv, \
        View3 sv, const T* x, const T* c, const T* s, T* out, int inverse) {              \
        rope_map<T, 0>(n, n1, n2, d, xv, cv, sv, x, c, s, out, inverse);                  \
    }                                                                                     \
    extern "C" __global__ void rope_i_##sfx(i64 n, i64 n1, i64 n2, i64 d, View4 xv, View3 cv, \
        View3 sv, const T* x, const T* c, const T* s, T* out, int inverse) {              \
        rope_map<T, 1>(n, n1, n2, d, xv, cv, sv, x, c, s, out, inverse);                  \
    }                                                                                     \
    extern "C" __global__ void rope_thd_##sfx(i64 n, i64 n1, i64 n2, i64 d, View4 xv, View3 cv, \
        View3 sv, const T* x, const T* c, const T* s, T* out, int inverse) {              \
        rope_map<T, 2>(n, n1, n2, d, xv, cv, sv, x, c, s, out, inverse);                  \
    }                                                                                     \
    extern "C" __global__ void attn_softmax_##sfx(i64 n_rows, i64 S, i64 L, i64 hq,       \
        int mask_kind, View4 mv, const void* mask, int causal, T* scores) {               \
        attn_softmax_rows<T>(n_rows, S, L, hq, mask_kind, mv, mask, causal, scores);      \
    }
TL_FOR_FLOATS(FUSED_ENTRIES)
