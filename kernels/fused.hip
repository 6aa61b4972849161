// Fused nn ops (candle's CustomOps), floating dtypes, f32 arithmetic for the half types:
// softmax_<t>, log_softmax_<t>, layer_norm_<t>, rms_norm_<t> over the last dim;
// rope_<t>, rope_i_<t>, rope_thd_<t>; attn_softmax_<t> (the masked softmax inside sdpa).
//
// Row ops see the input as n_rows rows of row_len elements: `outer` addresses each row's
// first element, `inner_stride` steps along the row. Blocks are (tpr, rows_per_block) as
// at tl_row_allreduce in compat.h; outputs are contiguous.
#include "compat.h"

// This thread's elements of one row (j = threadIdx.x + k * blockDim.x). Rows of up to
// blockDim.x * TL_ROW_REGS elements are read from memory once, into registers, and every
// later pass reads the registers: the slot loop is unrolled, so each slot index is a
// constant and the array never spills to memory. Longer rows are re-read on each pass.
// 16-bit types keep one slot: caching them measured slower on the H100 (bf16 softmax and
// norms at 4096 columns lost 25-30%), so they read as before.
template <typename T, int TL_ROW_REGS = (sizeof(T) >= 4 ? 32 : 1)>
struct RowCache {
    typedef typename Tr<T>::acc A;
    A v[TL_ROW_REGS];
    const T* x;
    i64 n, stride;
    bool cached;
    TL_DEV RowCache(const T* x_, i64 n_, i64 stride_)
        : x(x_), n(n_), stride(stride_), cached(n_ <= (i64)blockDim.x * TL_ROW_REGS) {
        if (!cached) return;
#pragma unroll
        for (int c = 0; c < TL_ROW_REGS; ++c) {
            const i64 j = threadIdx.x + (i64)c * blockDim.x;
            v[c] = j < n ? Tr<T>::load(x[j * stride]) : A(0);
        }
    }
    template <typename F>  // f(j, x[j]) for each of this thread's elements
    TL_DEV void each(F f) const {
        const i64 step = blockDim.x;
        for (i64 j0 = threadIdx.x; j0 < n; j0 += step * TL_ROW_REGS) {
#pragma unroll
            for (int c = 0; c < TL_ROW_REGS; ++c) {
                const i64 j = j0 + c * step;
                if (j < n) f(j, cached ? v[c] : Tr<T>::load(x[j * stride]));
            }
        }
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
        r.each([&](i64, A v) { s += tl_exp(v - m); });
        s = tl_row_allreduce<SumOp<A> >(s, smem);
        if (!valid) continue;
        T* y = out + row * row_len;
        const A log_s = Log ? tl_log(s) : A(0), inv_s = A(1) / s;
        r.each([&](i64 j, A v) { y[j] = Tr<T>::store(Log ? v - m - log_s : tl_exp(v - m) * inv_s); });
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
        r.each([&](i64 j, A v) {
            v = (v - mean) * inv;
            if (w) v *= Tr<T>::load(w[j * w_stride]);
            if (b) v += Tr<T>::load(b[j * b_stride]);
            y[j] = Tr<T>::store(v);
        });
    }
}

struct View4 { i64 offset, s0, s1, s2, s3; };
struct View3 { i64 offset, s0, s1, s2; };

// Rotary embedding, one thread per rotated pair. x has dims (n0, n1, n2, d): (b, h, t, d)
// for rope/rope_i, (b, t, h, d) for rope_thd. cos/sin are (b, t, d/2) views.
// Variant 0: pairs (i, i + d/2); 1: pairs (2i, 2i + 1); 2: like 0 with t as dim 1.
// inverse: rotate by -theta (sin negated), the transpose: rope's backward.
template <typename T, int Variant>
TL_DEV void rope_map(i64 n_pairs, i64 n1, i64 n2, i64 d, const View4& xv, const View3& cv, const View3& sv,
                     const T* x, const T* cs, const T* sn, T* out, int inverse) {
    typedef typename Tr<T>::acc A;
    const i64 half = d / 2;
    TL_GRID_LOOP(e, n_pairs) {
        i64 t = e;
        const i64 i = t % half; t /= half;
        const i64 k2 = t % n2; t /= n2;
        const i64 k1 = t % n1, k0 = t / n1;
        const i64 pos = Variant == 2 ? k1 : k2;
        const i64 p0 = Variant == 1 ? 2 * i : i, p1 = Variant == 1 ? 2 * i + 1 : i + half;
        const i64 xb = xv.offset + k0 * xv.s0 + k1 * xv.s1 + k2 * xv.s2;
        const i64 ob = ((k0 * n1 + k1) * n2 + k2) * d;
        const A x0 = Tr<T>::load(x[xb + p0 * xv.s3]), x1 = Tr<T>::load(x[xb + p1 * xv.s3]);
        const A c = Tr<T>::load(cs[cv.offset + k0 * cv.s0 + pos * cv.s1 + i * cv.s2]);
        const A s0 = Tr<T>::load(sn[sv.offset + k0 * sv.s0 + pos * sv.s1 + i * sv.s2]);
        const A s = inverse ? -s0 : s0;
        out[ob + p0] = Tr<T>::store(x0 * c - x1 * s);
        out[ob + p1] = Tr<T>::store(x0 * s + x1 * c);
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
