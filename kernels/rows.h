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
// p[r] = src[r] (p contiguous): one store when p is aligned to the run.
template <typename T, int R>
TL_DEV void store_run(T* p, const typename Tr<T>::acc* src) {
    Run<T, R> q;
#pragma unroll
    for (int r = 0; r < R; ++r) q.v[r] = Tr<T>::store(src[r]);
    if (tl_aligned<R>(p)) {
        *(Run<T, R>*)p = q;
    } else {
#pragma unroll
        for (int r = 0; r < R; ++r) p[r] = q.v[r];
    }
}

// exp inside the row kernels: a 16-bit result cannot see __expf's few-ulp f32 error, and
// the accurate expf costs enough instructions to bound bf16/f16 softmax.
template <typename T, typename A>
TL_DEV A row_exp(A x) { return sizeof(T) == 2 ? (A)__expf((float)x) : tl_exp(x); }

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
