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
    if (inner.contiguous && tl_aligned<4>(row_ptr + j0)) {
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
// themselves in done[row] (zero at launch); the block that completes a row combines the
// row's partials in chunk order, so the result does not depend on timing, and resets the
// counter to 0 for the next launch.
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
            if (finishes_row) done[row] = 0;  // every chunk has counted: ready for the next launch
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
// gradient). Where every row of the input is aligned (chosen once per launch), a thread
// owns a unit of V neighbouring outputs ("columns") and reads them with one 16-byte load
// per row; otherwise one column, with V times as many threads across the columns, so a
// warp still reads whole lines. Blocks are (x, y) threads, x a multiple of TL_COL_X (the
// host's _COL_BLOCK): the y threads and n_chunks blocks per group of columns split the
// reduced range, each thread keeping
// TL_COL_UNROLL rows in flight. States combine in a fixed order (rows in order per thread,
// a fixed tree over y, chunks in order), so the result does not depend on timing. With
// n_chunks > 1 a block leaves its states in `partials`, counts itself in done[group], and
// the group's last block combines the partials and resets its counter to 0 for the next
// launch (the host zeroes the counters once, when it allocates them). The host sends only
// n_rows, row_len < 2^31 (u32 indices; offsets are 64-bit) and `inner` with <= 2 dims.
#define TL_COL_THREADS 256
#define TL_COL_X 8
#define TL_COL_UNROLL 4

// Offsets of rows j, j + step, ... of the reduced range (`inner` innermost first, at most
// 2 dims; one where the reduced dims merge: shape[0] == row_len). One division per thread;
// each step adds, and wraps into the outer dim when the inner one runs out.
struct ColRows {
    u32 n, rem, step;
    i64 off, s0, wrap;
    TL_DEV ColRows(const Strided& inner, u32 j, u32 step_) : n((u32)inner.shape[0]), step(step_) {
        const u32 q = j / n;
        rem = j - q * n;
        s0 = inner.strides[0];
        wrap = inner.strides[1] - (i64)n * s0;
        off = (i64)rem * s0 + (i64)q * inner.strides[1];
    }
    TL_DEV void next() {
        rem += step;  // no overflow: rem < n < 2^31
        off += (i64)step * s0;
        while (rem >= n) { rem -= n; off += wrap; }
    }
};

// Rows j, j + step, ... < j1 of the W columns at `p` (W == 1, or W consecutive and aligned)
// into s[], in row order.
template <int W, typename T, typename R>
TL_DEV void col_accumulate(typename R::State (&s)[W], const T* p, const Strided& inner, u32 j, u32 j1, u32 step) {
    const int U = TL_COL_UNROLL;
    ColRows r(inner, j, step);
    for (; j + (U - 1) * step < j1; j += U * step) {  // no overflow: j1 < 2^31
        VecN<T, W> x[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            x[u] = tl_loadv<W>(p + r.off);
            r.next();
        }
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int k = 0; k < W; ++k) s[k] = R::combine(s[k], R::make(Tr<T>::load(x[u].v[k]), (i64)(j + u * step)));
    }
    for (; j < j1; j += step) {
        const VecN<T, W> x = tl_loadv<W>(p + r.off);
        r.next();
#pragma unroll
        for (int k = 0; k < W; ++k) s[k] = R::combine(s[k], R::make(Tr<T>::load(x.v[k]), (i64)j));
    }
}

// Combines the states of the by threads (a power of two) that share x, in a fixed tree:
// y < h takes y + h. Thread y == 0 ends with the block's states. smem: W * TL_COL_THREADS / 2.
template <int W, typename R>
TL_DEV void col_block_reduce(typename R::State (&s)[W], typename R::State* smem, u32 x, u32 y, u32 bx, u32 by) {
    const u32 half = bx * by / 2;
    for (u32 h = by / 2; h > 0; h >>= 1) {
        if (y >= h && y < 2 * h)
#pragma unroll
            for (int k = 0; k < W; ++k) smem[k * half + (y - h) * bx + x] = s[k];  // k-major: no bank conflicts
        __syncthreads();
        if (y < h)
#pragma unroll
            for (int k = 0; k < W; ++k) s[k] = R::combine(s[k], smem[k * half + y * bx + x]);
        __syncthreads();
    }
}

// Vec: units of V columns (V divides n_rows), one vector load per row; else units of one
// column and the block seen as (blockDim.x * V, blockDim.y / V) threads (the host makes
// blockDim.y a multiple of V). Either way a group is blockDim.x * V columns and its partials
// per chunk are as many states, at least 128 bytes: a group's cache lines hold only its own
// states, read by its last block.
template <int V, bool Vec, typename T, typename R>
TL_DEV void reduce_cols_run(u32 n_rows, u32 row_len, const Strided& outer, const Strided& inner, const T* in,
                            typename R::Out* out, u32 n_chunks, typename R::State* partials, u32* done) {
    typedef typename R::State S;
    enum { W = Vec ? V : 1, G = Vec ? 1 : V };
    __shared__ S smem[W * TL_COL_THREADS / 2];
    __shared__ bool finishes_group;
    const u32 bx = blockDim.x * G, by = blockDim.y / G;
    const u32 x = threadIdx.x + blockDim.x * (threadIdx.y % G), y = threadIdx.y / G;
    const u32 n_units = (n_rows + (W - 1)) / W, n_groups = (n_units + bx - 1) / bx;
    const u32 chunk_len = (row_len + n_chunks - 1) / n_chunks;
    const i64 n_tasks = (i64)n_groups * n_chunks, group_states = (i64)bx * W;
    for (i64 task = blockIdx.x; task < n_tasks; task += gridDim.x) {
        const u32 group = (u32)(task / n_chunks), c = (u32)(task % n_chunks);
        const u32 unit = group * bx + x, col0 = unit * W;  // col0 < n_rows + TL_COL_THREADS * 8 < 2^32
        const bool live = col0 < n_rows;  // then all W columns are (W divides n_rows)
        const u32 j0 = c * chunk_len, j1 = j0 + chunk_len < row_len ? j0 + chunk_len : row_len;
        S s[W];
#pragma unroll
        for (int k = 0; k < W; ++k) s[k] = R::init();
        if (live && j0 < j1) col_accumulate<W, T, R>(s, in + tl_index_n<u32>(outer, col0), inner, j0 + y, j1, by);
        col_block_reduce<W, R>(s, smem, x, y, bx, by);
        if (n_chunks > 1) {
            S* gp = partials + (i64)group * n_chunks * group_states + x * W;  // [group][chunk][bx * W]
            if (y == 0)
#pragma unroll
                for (int k = 0; k < W; ++k) gp[c * group_states + k] = s[k];
            __threadfence();  // the partials are visible before the count says so
            __syncthreads();
            if (threadIdx.x == 0 && threadIdx.y == 0) {
                finishes_group = atomicAdd(done + group, 1u) == n_chunks - 1;
                if (finishes_group) done[group] = 0;  // every chunk has counted: ready for the next launch
            }
            __syncthreads();
            if (finishes_group) {  // uniform across the block
                __threadfence();
#pragma unroll
                for (int k = 0; k < W; ++k) s[k] = R::init();
                for (u32 cc = y; cc < n_chunks; cc += by)
#pragma unroll
                    for (int k = 0; k < W; ++k) s[k] = R::combine(s[k], gp[cc * group_states + k]);
                col_block_reduce<W, R>(s, smem, x, y, bx, by);
            }
        }
        if (y == 0 && live && (n_chunks == 1 || finishes_group))
#pragma unroll
            for (int k = 0; k < W; ++k) out[col0 + k] = R::finish(s[k]);
        __syncthreads();  // finishes_group is rewritten by the next task
    }
}

template <typename T, typename R>
TL_DEV void reduce_cols(i64 n_rows, i64 row_len, const Strided& outer, const Strided& inner,
                        const T* in, typename R::Out* out, i64 n_chunks,
                        typename R::State* partials, u32* done) {
    enum { V = TlWidth<sizeof(T)>::V };
    // Vectors when V columns are consecutive and aligned from every unit start in every row
    // (inner's offset is 0: its strides must keep the alignment) and V divides the columns.
    const bool vec = n_rows % V == 0 && tl_vec_ok<V>(outer, in) && inner.strides[0] % V == 0 &&
                     inner.strides[1] % V == 0;
    if (vec)
        reduce_cols_run<V, true, T, R>((u32)n_rows, (u32)row_len, outer, inner, in, out, (u32)n_chunks, partials, done);
    else
        reduce_cols_run<V, false, T, R>((u32)n_rows, (u32)row_len, outer, inner, in, out, (u32)n_chunks, partials,
                                        done);
}

template <typename T> using RArgMin = RArg<T, false>;
template <typename T> using RArgMax = RArg<T, true>;

// columns: reduce_cols (blocks (x, y), x a multiple of TL_COL_X, y a power of two >= 8,
// x * y <= TL_COL_THREADS; with n_chunks > 1, `done` has one counter per group of x * V
// columns and `partials` n_groups * n_chunks * x * V states). Otherwise n_chunks == 1: one
// (sub-)block per row; n_chunks > 1: reduce_rows_chunked, `done` one counter per row,
// `partials` n_rows * n_chunks states. States are at most 16 bytes; counters are 0 at
// launch and left at 0.
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
