// Row helpers shared by fused.hip and fused_grad.hip: runs of elements moved in one
// access, and RowTile (a thread's fixed share of a row, by 16-byte vectors).
#pragma once
#include "compat.h"

template <typename T> TL_DEV bool tl_aligned16(const T* p) { return tl_aligned<16 / sizeof(T)>(p); }

// R consecutive elements of T (R * sizeof(T) <= 16 bytes, a power of two), one access.
template <typename T, int R> using Run = VecN<T, R>;
// dst[r] = p[r * s]: one load when s == 1 and p is aligned to the run.
template <typename T, int R>
TL_DEV void load_run(const T* p, i64 s, typename Tr<T>::acc* dst) {
    if (s == 1 && tl_aligned<R>(p)) {
        const Run<T, R> q = *(const Run<T, R>*)p;
#pragma unroll
        for (int r = 0; r < R; ++r) dst[r] = Tr<T>::load(q.v[r]);
    } else {
#pragma unroll
        for (int r = 0; r < R; ++r) dst[r] = Tr<T>::load(p[r * s]);
    }
}
// q = src rounded to T. f16/bf16 round pairs with one instruction where there is one
// (TL_HAS_PACK2: NVIDIA sm_80+ cvt.rn.{f16x2,bf16x2}.f32, nvidia.h tl_pack2), fewer
// instructions and registers than compat.h's per-element rounding: on the H100 bf16
// layer_norm +19%, rms_norm +7%, softmax +6% (RowRegs::store), rope +4% (store_run_aligned;
// it was -22% while NVRTC split rope's stores into 4-byte pieces).
template <typename T, int R>
TL_DEV void round_run(Run<T, R>& q, const typename Tr<T>::acc* src) {
#if defined(TL_HAS_PACK2)
    if constexpr (sizeof(T) == 2 && R % 2 == 0) {
#pragma unroll
        for (int r = 0; r < R; r += 2) *(u32*)&q.v[r] = tl_pack2<T>(src[r], src[r + 1]);
        return;
    }
#endif
#pragma unroll
    for (int r = 0; r < R; ++r) q.v[r] = Tr<T>::store(src[r]);
}
// dst = a run held in registers across a loop (fused.hip RowRegs::Operand), widened where
// it is used. On NVIDIA the 16-bit pairs are widened by volatile asm (TL_HAS_UNPACK2_OPAQUE:
// nvidia.h tl_unpack2_opaque), which NVVM does not hoist out of the loop: hoisted, the widened
// f32 values take twice the registers of the held pairs (bf16 layer_norm: 118 registers at 4
// vectors per thread instead of 80).
template <typename T, int R>
TL_DEV void widen_held(const Run<T, R>& q, typename Tr<T>::acc* dst) {
#if defined(TL_HAS_UNPACK2_OPAQUE)
    if constexpr (sizeof(T) == 2 && R % 2 == 0) {
#pragma unroll
        for (int r = 0; r < R; r += 2) tl_unpack2_opaque<T>(*(const u32*)&q.v[r], dst[r], dst[r + 1]);
        return;
    }
#endif
#pragma unroll
    for (int r = 0; r < R; ++r) dst[r] = Tr<T>::load(q.v[r]);
}
// p[r] = src[r], p aligned to the run: one store. A 16-byte run is written by one explicit
// 16-byte store where there is one (TL_HAS_STORE_GLOBAL16: NVIDIA, nvidia.h): NVRTC 13 split
// most of rope's plain Run stores into four 4-byte stores (seen in its SASS, with or without
// __builtin_assume_aligned), which cost L2 bandwidth (ncu: 2/3 of rope bf16's store sectors
// excessive).
template <typename T, int R>
TL_DEV void store_run_aligned(T* p, const typename Tr<T>::acc* src) {
    union { Run<T, R> run; u32 w[(sizeof(Run<T, R>) + 3) / 4]; } q;
    round_run<T, R>(q.run, src);
#if defined(TL_HAS_STORE_GLOBAL16)
    if constexpr (sizeof(Run<T, R>) == 16) {
        tl_store_global16(p, q.w);
        return;
    }
#endif
    *(Run<T, R>*)p = q.run;
}
// p[r] = src[r] (p contiguous): one store when p is aligned to the run.
template <typename T, int R>
TL_DEV void store_run(T* p, const typename Tr<T>::acc* src) {
    if (tl_aligned<R>(p)) {
        store_run_aligned<T, R>(p, src);
    } else {
#pragma unroll
        for (int r = 0; r < R; ++r) p[r] = Tr<T>::store(src[r]);
    }
}

// exp(x), x <= 0, inside the row kernels: a 16-bit result cannot see the hardware
// approximation's few-ulp f32 error (nor its flush of results below 2^-126 to 0), and the
// accurate expf costs enough instructions to bound bf16/f16 softmax.
template <typename T, typename A>
TL_DEV A row_exp(A x) { return sizeof(T) == 2 ? (A)tl_exp2_approx((float)x * TL_LOG2E) : tl_exp(x); }

// Vector k (elements k*N .. k*N+N-1) of a row of n elements at stride s, zeros past the
// end (n <= 0: all zeros, nothing read). `vec`: the row is contiguous and 16-byte aligned,
// so a whole vector is one load.
template <typename T>
TL_DEV Run<T, 16 / sizeof(T)> fetch_vec(const T* x, i64 n, i64 s, bool vec, i64 k) {
    enum { N = 16 / sizeof(T) };
    const i64 j = k * N;
    if (vec && j + N <= n) return ((const Run<T, N>*)x)[k];
    Run<T, N> q;
#pragma unroll
    for (int e = 0; e < N; ++e) q.v[e] = j + e < n ? x[(j + e) * s] : Tr<T>::store(typename Tr<T>::acc(0));
    return q;
}

// A thread's share of one row of n elements (stride `stride`): the 16-byte vectors
// k = threadIdx.x + c * blockDim.x (elements k*N .. k*N+N-1), read V at a time (all V
// loads issued before any is used). Whole vectors of a contiguous, 16-byte aligned row
// are one load; other rows (strided, misaligned views, the partial last vector) go
// element by element (fetch_vec).
template <typename T, int V>
struct RowTile {
    typedef typename Tr<T>::acc A;
    enum { N = 16 / sizeof(T) };
    const T* x;
    i64 n, stride;
    bool vec;
    TL_DEV RowTile(const T* x_, i64 n_, i64 stride_)
        : x(x_), n(n_), stride(stride_), vec(stride_ == 1 && tl_aligned16(x_)) {}
    TL_DEV Run<T, N> fetch(i64 k) const { return fetch_vec<T>(x, n, stride, vec, k); }
    // f(k, vals, cnt) for each of this thread's vectors: vector k, its values widened,
    // cnt (<= N) of them inside the row.
    template <typename F>
    TL_DEV void each(F f) const {
        const i64 step = blockDim.x;
        for (i64 k0 = threadIdx.x; k0 * N < n; k0 += step * V) {
            Run<T, N> q[V];
#pragma unroll
            for (int c = 0; c < V; ++c)
                if ((k0 + c * step) * N < n) q[c] = fetch(k0 + c * step);
#pragma unroll
            for (int c = 0; c < V; ++c) {
                const i64 k = k0 + c * step;
                if (k * N >= n) break;
                A t[N];
#pragma unroll
                for (int e = 0; e < N; ++e) t[e] = Tr<T>::load(q[c].v[e]);
                const i64 left = n - k * N;
                f(k, (const A*)t, left < N ? (int)left : (int)N);
            }
        }
    }
};

// Two tiles of rows of one length, walked together: f(k, a, b, cnt).
template <typename T, int V, typename F>
TL_DEV void each2(const RowTile<T, V>& ra, const RowTile<T, V>& rb, F f) {
    typedef typename Tr<T>::acc A;
    const int N = RowTile<T, V>::N;
    const i64 step = blockDim.x, n = ra.n;
    for (i64 k0 = threadIdx.x; k0 * N < n; k0 += step * V) {
        Run<T, N> qa[V], qb[V];
#pragma unroll
        for (int c = 0; c < V; ++c)
            if ((k0 + c * step) * N < n) { qa[c] = ra.fetch(k0 + c * step); qb[c] = rb.fetch(k0 + c * step); }
#pragma unroll
        for (int c = 0; c < V; ++c) {
            const i64 k = k0 + c * step;
            if (k * N >= n) break;
            A a[N], b[N];
#pragma unroll
            for (int e = 0; e < N; ++e) { a[e] = Tr<T>::load(qa[c].v[e]); b[e] = Tr<T>::load(qb[c].v[e]); }
            const i64 left = n - k * N;
            f(k, (const A*)a, (const A*)b, left < N ? (int)left : (int)N);
        }
    }
}

// p[0 .. cnt) = src (p contiguous): one store for a whole vector.
template <typename T, int N>
TL_DEV void store_part(T* p, const typename Tr<T>::acc* src, int cnt) {
    if (cnt == N) {
        store_run<T, N>(p, src);
    } else {
#pragma unroll
        for (int e = 0; e < N; ++e)
            if (e < cnt) p[e] = Tr<T>::store(src[e]);
    }
}
// dst[e] = p[e * s] for e < cnt (the rest 0): one load for a whole aligned run.
template <typename T, int N>
TL_DEV void load_part(const T* p, i64 s, int cnt, typename Tr<T>::acc* dst) {
    if (cnt == N) {
        load_run<T, N>(p, s, dst);
    } else {
#pragma unroll
        for (int e = 0; e < N; ++e) dst[e] = e < cnt ? Tr<T>::load(p[e * s]) : typename Tr<T>::acc(0);
    }
}

// ---- per-thread reductions of register-held values and the states a row merges -------
// v[0] = op over v[0 .. K) as a tree (K a power of two): depth log2(K) instead of a chain
// of K dependent operations. Overwrites v.
template <typename Op, int K, typename A>
TL_DEV A tl_tree(A* v) {
    static_assert((K & (K - 1)) == 0, "tl_tree: K must be a power of two");
#pragma unroll
    for (int w = K / 2; w >= 1; w /= 2)
#pragma unroll
        for (int i = 0; i < w; ++i) v[i] = Op::combine(v[i], v[i + w]);
    return v[0];
}

// Every row start (tl_index(outer, r), r < n_rows) of x is 16-byte aligned.
template <typename T>
TL_DEV bool tl_rows_aligned16(const Strided& outer, i64 n_rows, const T* x) {
    enum { N = 16 / sizeof(T) };
    if (!tl_aligned16(x + outer.offset)) return false;
    if (outer.contiguous) return n_rows <= 1;  // rows one element apart
    bool ok = true;
#pragma unroll
    for (int d = 0; d < TL_MAX_DIMS; ++d)  // constant indices: the struct stays in registers
        ok = ok && (d >= outer.ndim || outer.shape[d] <= 1 || outer.strides[d] % N == 0);
    return ok;
}

// Softmax state of part of a row: its max m of the values that are not NaN and s =
// sum(exp(x - m)) (where m is -inf, nothing else was seen: s is 0, or NaN if a NaN was).
// Merged with rescaling, so a row needs one all-reduction; NaN and +inf give NaN sums, as
// exp(x - max) does on the whole row.
template <typename A> struct MaxSum { A m, s; };
template <typename A> struct MaxSumOp {
    typedef MaxSum<A> State;
    static TL_DEV State combine(State a, State b) {
        State r;
        r.m = FMaxOp<A>::combine(a.m, b.m);
        if (r.m == tl_lowest<A>()) {
            r.s = a.s + b.s;
        } else {  // the part with the larger max needs no rescaling: one exp, not two
            const bool a_hi = a.m == r.m;
            r.s = (a_hi ? a.s : b.s) + (a_hi ? b.s : a.s) * tl_exp(a_hi ? b.m - r.m : a.m - r.m);
        }
        return r;
    }
    static TL_DEV State shfl(State v, int m, int w) {
        State r; r.m = tl_shfl_xor(v.m, m, w); r.s = tl_shfl_xor(v.s, m, w); return r;
    }
};

// a / b to a few ulps, without IEEE division's slow path (its call costs registers): for
// weights such as MeanM2Op's count ratio, where that is plenty.
TL_DEV float tl_ratio(float a, float b) { return __fdividef(a, b); }
TL_DEV double tl_ratio(double a, double b) { return a / b; }

// Mean and variance of part of a row: n values, their mean and m2 = sum((x - mean)^2),
// merged with Chan et al.'s formula. Each part's m2 is taken about its own mean, so the
// result keeps the accuracy of two passes (no E[x^2] - E[x]^2 cancellation).
template <typename A> struct MeanM2 { A n, mean, m2; };
template <typename A> struct MeanM2Op {
    typedef MeanM2<A> State;
    static TL_DEV State combine(State a, State b) {
        const A n = a.n + b.n;
        if (n == A(0)) return a;  // both empty
        const A d = b.mean - a.mean, f = tl_ratio(b.n, n);
        State r; r.n = n; r.mean = a.mean + d * f; r.m2 = a.m2 + b.m2 + d * d * a.n * f;
        return r;
    }
    static TL_DEV State shfl(State v, int m, int w) {
        State r; r.n = tl_shfl_xor(v.n, m, w); r.mean = tl_shfl_xor(v.mean, m, w); r.m2 = tl_shfl_xor(v.m2, m, w);
        return r;
    }
};
