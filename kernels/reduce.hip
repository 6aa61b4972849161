// Reductions: reduce_<op>_<dtype> for sum, min, max (same dtype out) and argmin, argmax
// (int64 out, first occurrence on ties, NaN wins like torch/numpy).
//
// The host views the input as n_rows x row_len: `outer` addresses the first element of
// each row (the kept dims, with the input's offset), `inner` the elements of a row (the
// reduced dims, offset 0), so any set of dims reduces without a copy. Blocks are
// (tpr, rows_per_block) as described at tl_row_allreduce in compat.h.
#include "compat.h"

template <typename T> struct RSum {
    typedef typename Tr<T>::acc A;
    typedef A State;
    typedef T Out;
    static TL_DEV State init() { return A(0); }
    static TL_DEV State make(A v, i64) { return v; }
    static TL_DEV State combine(State a, State b) { return a + b; }
    static TL_DEV State shfl(State v, int m, int w) { return tl_shfl_xor(v, m, w); }
    static TL_DEV Out finish(State s) { return Tr<T>::store(s); }
};
template <typename T> struct RMax {
    typedef typename Tr<T>::acc A;
    typedef A State;
    typedef T Out;
    static TL_DEV State init() { return tl_lowest<A>(); }
    static TL_DEV State make(A v, i64) { return v; }
    static TL_DEV State combine(State a, State b) { return MaxOp<A>::combine(a, b); }
    static TL_DEV State shfl(State v, int m, int w) { return tl_shfl_xor(v, m, w); }
    static TL_DEV Out finish(State s) { return Tr<T>::store(s); }
};
template <typename T> struct RMin {
    typedef typename Tr<T>::acc A;
    typedef A State;
    typedef T Out;
    static TL_DEV State init() { return tl_highest<A>(); }
    static TL_DEV State make(A v, i64) { return v; }
    static TL_DEV State combine(State a, State b) { return MinOp<A>::combine(a, b); }
    static TL_DEV State shfl(State v, int m, int w) { return tl_shfl_xor(v, m, w); }
    static TL_DEV Out finish(State s) { return Tr<T>::store(s); }
};

// (value, index) pairs; Greater=true for argmax. NaN beats any number; ties and
// NaN-vs-NaN go to the lower index, so the result is the first occurrence.
template <typename T, bool Greater> struct RArg {
    typedef typename Tr<T>::acc A;
    struct State { A v; i64 i; };
    typedef i64 Out;
    static TL_DEV State init() {
        State s; s.v = Greater ? tl_lowest<A>() : tl_highest<A>(); s.i = tl_highest<i64>(); return s;
    }
    static TL_DEV State make(A v, i64 j) { State s; s.v = v; s.i = j; return s; }
    static TL_DEV State combine(State a, State b) {
        const bool an = tl_isnan(a.v), bn = tl_isnan(b.v), a_first = a.i < b.i;
        const bool a_better = Greater ? a.v > b.v : a.v < b.v;
        const bool take_a = an ? (!bn || a_first) : (!bn && (a_better || (a.v == b.v && a_first)));
        return take_a ? a : b;
    }
    static TL_DEV State shfl(State s, int m, int w) {
        State r; r.v = tl_shfl_xor(s.v, m, w); r.i = tl_shfl_xor(s.i, m, w); return r;
    }
    static TL_DEV Out finish(State s) { return s.i; }
};

// This thread's share of row elements [j0, j1): j0 + threadIdx.x + k * blockDim.x, or,
// when the row is contiguous and aligned, 4-element groups (one vector load each) in the
// same interleaving, so neighbouring threads still read neighbouring memory.
template <typename T, typename R>
TL_DEV typename R::State reduce_span(const T* row_ptr, const Strided& inner, i64 j0, i64 j1,
                                     typename R::State s) {
    if (inner.contiguous && tl_aligned4(row_ptr + j0)) {
        const Vec4<T>* v4 = (const Vec4<T>*)(row_ptr + j0);
        const i64 nv = (j1 - j0) >> 2;
        for (i64 v = threadIdx.x; v < nv; v += blockDim.x) {
            const Vec4<T> x = v4[v];
#pragma unroll
            for (int k = 0; k < 4; ++k) s = R::combine(s, R::make(Tr<T>::load(x.v[k]), j0 + 4 * v + k));
        }
        j0 += 4 * nv;
    }
    for (i64 j = j0 + threadIdx.x; j < j1; j += blockDim.x)
        s = R::combine(s, R::make(Tr<T>::load(row_ptr[tl_index(inner, j)]), j));
    return s;
}

template <typename T, typename R>
TL_DEV void reduce_rows(i64 n_rows, i64 row_len, const Strided& outer, const Strided& inner,
                        const T* in, typename R::Out* out) {
    __shared__ typename R::State smem[TL_MAX_WARPS];
    const i64 rpb = blockDim.y;
    // The loop bound is uniform across the block: every thread reaches the barriers.
    for (i64 base = (i64)blockIdx.x * rpb; base < n_rows; base += (i64)gridDim.x * rpb) {
        const i64 row = base + threadIdx.y;
        typename R::State s = R::init();
        if (row < n_rows) s = reduce_span<T, R>(in + tl_index(outer, row), inner, 0, row_len, s);
        s = tl_row_allreduce<R>(s, smem);
        if (row < n_rows && threadIdx.x == 0) out[row] = R::finish(s);
    }
}

// Few long rows (a full reduction, say): each row is cut into n_chunks pieces, one block
// per piece (blockDim.y == 1). Blocks leave their partial state in `partials` and count
// themselves in done[row] (zeroed by the host); the block that completes a row combines
// the row's partials in chunk order, so the result does not depend on timing.
template <typename T, typename R>
TL_DEV void reduce_rows_chunked(i64 n_rows, i64 row_len, const Strided& outer, const Strided& inner,
                                const T* in, typename R::Out* out, i64 n_chunks,
                                typename R::State* partials, u32* done) {
    __shared__ typename R::State smem[TL_MAX_WARPS];
    __shared__ bool finishes_row;
    const i64 chunk_len = ((row_len + n_chunks - 1) / n_chunks + 3) & ~(i64)3;  // keeps chunks aligned
    for (i64 task = blockIdx.x; task < n_rows * n_chunks; task += gridDim.x) {
        const i64 row = task / n_chunks, j0 = (task % n_chunks) * chunk_len;
        const i64 j1 = j0 + chunk_len < row_len ? j0 + chunk_len : row_len;
        typename R::State s = R::init();
        if (j0 < j1) s = reduce_span<T, R>(in + tl_index(outer, row), inner, j0, j1, s);
        s = tl_row_allreduce<R>(s, smem);
        if (threadIdx.x == 0) {
            partials[task] = s;
            __threadfence();  // the partial is visible before the count says so
            finishes_row = atomicAdd(done + row, 1u) == (u32)(n_chunks - 1);
        }
        __syncthreads();
        if (finishes_row) {  // uniform across the block
            __threadfence();
            s = R::init();
            for (i64 c = threadIdx.x; c < n_chunks; c += blockDim.x) s = R::combine(s, partials[row * n_chunks + c]);
            s = tl_row_allreduce<R>(s, smem);
            if (threadIdx.x == 0) out[row] = R::finish(s);
        }
        __syncthreads();  // finishes_row is rewritten by the next task
    }
}

// Reductions whose elements are farther apart than the outputs (a sum over dim 0: a bias
// gradient). Thread x of a block owns output row group*blockDim.x + x, so a warp reads
// neighbouring addresses; the block's y threads and n_chunks blocks per row group split
// the reduced range. States combine in a fixed order (y, then chunk), so the result does
// not depend on timing. With n_chunks > 1, blocks leave partials per (row, chunk) and
// count themselves in done[group] as reduce_rows_chunked does; the last one finishes.
#define TL_COL_THREADS 256
template <typename T, typename R>
TL_DEV void reduce_cols(i64 n_rows, i64 row_len, const Strided& outer, const Strided& inner,
                        const T* in, typename R::Out* out, i64 n_chunks,
                        typename R::State* partials, u32* done) {
    __shared__ typename R::State smem[TL_COL_THREADS];
    __shared__ bool finishes_group;
    const i64 n_groups = (n_rows + blockDim.x - 1) / blockDim.x;
    const i64 chunk_len = (row_len + n_chunks - 1) / n_chunks;
    const int t = threadIdx.y * blockDim.x + threadIdx.x;
    for (i64 task = blockIdx.x; task < n_groups * n_chunks; task += gridDim.x) {
        const i64 group = task / n_chunks, c = task % n_chunks;
        const i64 row = group * blockDim.x + threadIdx.x;
        const i64 j0 = c * chunk_len, j1 = j0 + chunk_len < row_len ? j0 + chunk_len : row_len;
        typename R::State s = R::init();
        if (row < n_rows) {
            const T* p = in + tl_index(outer, row);
            for (i64 j = j0 + threadIdx.y; j < j1; j += blockDim.y)
                s = R::combine(s, R::make(Tr<T>::load(p[tl_index(inner, j)]), j));
        }
        smem[t] = s;
        __syncthreads();
        if (threadIdx.y == 0) {
            for (int y = 1; y < (int)blockDim.y; ++y) s = R::combine(s, smem[y * blockDim.x + threadIdx.x]);
            if (row < n_rows) {
                if (n_chunks == 1) out[row] = R::finish(s);
                else partials[row * n_chunks + c] = s;
            }
        }
        if (n_chunks > 1) {
            __threadfence();  // the partials are visible before the count says so
            __syncthreads();
            if (t == 0) finishes_group = atomicAdd(done + group, 1u) == (u32)(n_chunks - 1);
            __syncthreads();
            if (finishes_group && threadIdx.y == 0 && row < n_rows) {  // uniform but for the row bound
                __threadfence();
                s = R::init();
                for (i64 k = 0; k < n_chunks; ++k) s = R::combine(s, partials[row * n_chunks + k]);
                out[row] = R::finish(s);
            }
        }
        __syncthreads();  // smem and finishes_group are rewritten by the next task
    }
}

template <typename T> using RArgMin = RArg<T, false>;
template <typename T> using RArgMax = RArg<T, true>;

// columns: reduce_cols (blocks (x, y), x * y <= TL_COL_THREADS; `done` has one zeroed counter
// per group of blockDim.x rows). Otherwise n_chunks == 1: one (sub-)block per row;
// n_chunks > 1: reduce_rows_chunked, `done` one zeroed counter per row. `partials` holds
// n_rows * n_chunks states (at most 16 bytes each).
#define REDUCE_ENTRY(op, R, T, O, sfx)                                                    \
    extern "C" __global__ void reduce_##op##_##sfx(i64 n_rows, i64 row_len, Strided outer, \
                                                   Strided inner, const T* in, O* out,    \
                                                   int columns,                           \
                                                   i64 n_chunks, void* partials, u32* done) { \
        if (columns)                                                                      \
            reduce_cols<T, R<T> >(n_rows, row_len, outer, inner, in, out, n_chunks,       \
                                  (R<T>::State*)partials, done);                          \
        else if (n_chunks > 1)                                                            \
            reduce_rows_chunked<T, R<T> >(n_rows, row_len, outer, inner, in, out, n_chunks, \
                                          (R<T>::State*)partials, done);                  \
        else                                                                              \
            reduce_rows<T, R<T> >(n_rows, row_len, outer, inner, in, out);                \
    }
#define REDUCE_OPS(T, sfx)                                                                 \
    REDUCE_ENTRY(sum, RSum, T, T, sfx) REDUCE_ENTRY(min, RMin, T, T, sfx)                  \
    REDUCE_ENTRY(max, RMax, T, T, sfx) REDUCE_ENTRY(argmin, RArgMin, T, i64, sfx)          \
    REDUCE_ENTRY(argmax, RArgMax, T, i64, sfx)
TL_FOR_ALL(REDUCE_OPS)
