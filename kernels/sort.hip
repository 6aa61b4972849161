// Sorting, scans and searches along the last dim of rows: sort_block_<t>, sort_step_<t>
// (a bitonic sort of (value, index) pairs), cumsum_<t>, cumprod_<t>, searchsorted_<t>.
//
// Sort order: a total order on (value, index) pairs, ascending or descending by value with
// NaN the largest (PyTorch's), ties by index; so the result is the stable sort. The network
// is the "sort everything ascending" form of bitonic sort (stage k first compares i with
// its mirror in its k-block, then i with i ^ j for j = k/4 .. 1, the earlier position always
// taking the pair's first element), so a row of n is sorted as if padded to a power of two
// with elements that sort last: a pair whose partner is >= n is skipped.
#include "compat.h"

#define TL_SORT_CAP 2048  // elements a block sorts in shared memory (ops/sort.py SORT_CAP)
#define TL_SCAN_THREADS 1024

template <typename T> TL_DEV bool sort_before(T a, i64 ia, T b, i64 ib, int desc) {
    typedef typename Tr<T>::acc A;
    const A x = Tr<T>::load(a), y = Tr<T>::load(b);
    const bool xn = tl_isnan(x), yn = tl_isnan(y);
    if (xn != yn) return desc ? xn : yn;
    if (!xn && x != y) return desc ? x > y : x < y;
    return ia < ib;
}

// The pair (i, q) of compare-exchange t of step j in stage k (q may be past the row); j and
// k are powers of two, so masks replace 64-bit division.
TL_DEV void sort_pair(i64 t, i64 k, i64 j, i64* i, i64* q) {
    const i64 r = t & (j - 1);
    *i = ((t - r) << 1) + r;
    *q = j == (k >> 1) ? *i + (k - 1 - 2 * r) : *i + j;
}

// One block per chunk of `chunk` (a power of two <= TL_SORT_CAP) elements of a row of n,
// sorted in shared memory. stage == 0: the chunk comes from `src` (row starts at
// tl_index(outer, row), elements inner_stride apart), indices are positions, and the
// network runs every stage up to the chunk's size. stage == k > chunk: the chunk comes from
// vals/idx (rows of n, contiguous) and the steps j < chunk of stage k run (the steps
// j >= chunk are sort_step launches). Results go to vals/idx.
template <typename T>
TL_DEV void sort_block(i64 n_rows, i64 n, i64 chunk, i64 stage, const Strided& outer, i64 inner_stride,
                       const T* src, T* vals, i64* idx, int desc) {
    __shared__ T sv[TL_SORT_CAP];
    __shared__ i64 si[TL_SORT_CAP];
    const i64 n_chunks = (n + chunk - 1) / chunk;
    for (i64 task = blockIdx.x; task < n_rows * n_chunks; task += gridDim.x) {
        const i64 row = task / n_chunks, c0 = (task % n_chunks) * chunk;
        const i64 len = n - c0 < chunk ? n - c0 : chunk;
        i64 p = 1;
        while (p < len) p <<= 1;
        const i64 start = stage ? 0 : tl_index(outer, row);
        __syncthreads();  // the previous task's write-back has read sv/si
        for (i64 t = threadIdx.x; t < len; t += blockDim.x) {
            if (stage == 0) {
                sv[t] = src[start + (c0 + t) * inner_stride];
                si[t] = c0 + t;
            } else {
                sv[t] = vals[row * n + c0 + t];
                si[t] = idx[row * n + c0 + t];
            }
        }
        __syncthreads();
        const i64 k0 = stage ? stage : 2, k1 = stage ? stage : p;
        for (i64 k = k0; k <= k1; k <<= 1) {
            for (i64 j = (stage ? p : k) >> 1; j > 0; j >>= 1) {  // bounds uniform: every thread meets the barrier
                for (i64 t = threadIdx.x; t < (p >> 1); t += blockDim.x) {
                    i64 i, q;
                    sort_pair(t, k, j, &i, &q);
                    if (q < len && sort_before(sv[q], si[q], sv[i], si[i], desc)) {
                        const T v = sv[i]; sv[i] = sv[q]; sv[q] = v;
                        const i64 x = si[i]; si[i] = si[q]; si[q] = x;
                    }
                }
                __syncthreads();
            }
        }
        for (i64 t = threadIdx.x; t < len; t += blockDim.x) {
            vals[row * n + c0 + t] = sv[t];
            idx[row * n + c0 + t] = si[t];
        }
    }
}

// Step j (>= the chunk) of stage k over every row of vals/idx, one thread per pair.
template <typename T>
TL_DEV void sort_step(i64 n_rows, i64 n, i64 half, i64 k, i64 j, T* vals, i64* idx, int desc) {
    TL_GRID_LOOP(e, n_rows * half) {
        const i64 row = e / half;
        i64 i, q;
        sort_pair(e & (half - 1), k, j, &i, &q);
        if (q >= n) continue;
        T* v = vals + row * n;
        i64* x = idx + row * n;
        if (sort_before(v[q], x[q], v[i], x[i], desc)) {
            const T a = v[i]; v[i] = v[q]; v[q] = a;
            const i64 b = x[i]; x[i] = x[q]; x[q] = b;
        }
    }
}

// Scans accumulate floats in Tr<T>::acc (f32 for f16/bf16) and write T; integers and
// bool accumulate and write int64, as PyTorch promotes them.
template <typename T, bool F = Tr<T>::is_float> struct ScanT {
    typedef typename Tr<T>::acc A;
    typedef T Out;
    static TL_DEV A load(T x) { return Tr<T>::load(x); }
    static TL_DEV Out store(A a) { return Tr<T>::store(a); }
};
template <typename T> struct ScanT<T, false> {
    typedef i64 A;
    typedef i64 Out;
    static TL_DEV A load(T x) { return (i64)Tr<T>::load(x); }
    static TL_DEV Out store(A a) { return a; }
};

// One block per row (rows of n from tl_index(outer, row), elements inner_stride apart;
// out: rows of n, contiguous): tiles of blockDim.x elements scanned in shared memory
// (Hillis-Steele) and chained by a running carry. `reverse`: from the row's end.
template <typename T, bool Prod>
TL_DEV void scan_rows(i64 n_rows, i64 n, const Strided& outer, i64 inner_stride, int reverse, const T* src,
                      typename ScanT<T>::Out* out) {
    typedef typename ScanT<T>::A A;
    __shared__ A buf[TL_SCAN_THREADS];
    const A one = Prod ? (A)1 : (A)0;
    const int tid = threadIdx.x;
    for (i64 row = blockIdx.x; row < n_rows; row += gridDim.x) {
        const T* in = src + tl_index(outer, row);
        A carry = one;
        for (i64 base = 0; base < n; base += blockDim.x) {
            const i64 j = base + tid, pos = reverse ? n - 1 - j : j;
            A v = j < n ? ScanT<T>::load(in[pos * inner_stride]) : one;
            buf[tid] = v;
            __syncthreads();
            for (int s = 1; s < (int)blockDim.x; s <<= 1) {
                const A o = tid >= s ? buf[tid - s] : one;
                __syncthreads();
                v = Prod ? o * v : o + v;
                buf[tid] = v;
                __syncthreads();
            }
            if (j < n) out[row * n + pos] = ScanT<T>::store(Prod ? carry * v : carry + v);
            carry = Prod ? carry * buf[blockDim.x - 1] : carry + buf[blockDim.x - 1];
            __syncthreads();  // buf is rewritten by the next tile
        }
    }
}

// out[e] = the position in its row of the sorted sequence (rows of len: seq + seq_off +
// row * seq_row_stride, elements seq_stride apart) where value e would go: the first
// element >= it (right: > it). PyTorch's predicates, so a NaN compares false either way.
// Values: m per row, addressed by vals_l.
template <typename T>
TL_DEV void searchsorted_map(i64 n_vals, i64 m, i64 len, i64 seq_off, i64 seq_row_stride, i64 seq_stride,
                             const Strided& vals_l, int right, const T* seq, const T* vals, i64* out) {
    typedef typename Tr<T>::acc A;
    TL_GRID_LOOP(e, n_vals) {
        const A v = Tr<T>::load(vals[tl_index(vals_l, e)]);
        const T* s = seq + seq_off + (e / m) * seq_row_stride;
        i64 lo = 0, hi = len;
        while (lo < hi) {
            const i64 mid = lo + ((hi - lo) >> 1);
            const A x = Tr<T>::load(s[mid * seq_stride]);
            if (right ? !(x > v) : !(x >= v)) lo = mid + 1; else hi = mid;
        }
        out[e] = lo;
    }
}

#define SORT_ENTRIES(T, sfx)                                                                              \
    extern "C" __global__ void sort_block_##sfx(i64 n_rows, i64 n, i64 chunk, i64 stage, Strided outer,  \
                                                i64 inner_stride, const T* src, T* vals, i64* idx,       \
                                                int desc) {                                               \
        sort_block<T>(n_rows, n, chunk, stage, outer, inner_stride, src, vals, idx, desc);                \
    }                                                                                                     \
    extern "C" __global__ void sort_step_##sfx(i64 n_rows, i64 n, i64 half, i64 k, i64 j, T* vals,       \
                                               i64* idx, int desc) {                                      \
        sort_step<T>(n_rows, n, half, k, j, vals, idx, desc);                                             \
    }                                                                                                     \
    extern "C" __global__ void cumsum_##sfx(i64 n_rows, i64 n, Strided outer, i64 inner_stride,          \
                                            int reverse, const T* src, ScanT<T>::Out* out) {              \
        scan_rows<T, false>(n_rows, n, outer, inner_stride, reverse, src, out);                           \
    }                                                                                                     \
    extern "C" __global__ void cumprod_##sfx(i64 n_rows, i64 n, Strided outer, i64 inner_stride,         \
                                             int reverse, const T* src, ScanT<T>::Out* out) {             \
        scan_rows<T, true>(n_rows, n, outer, inner_stride, reverse, src, out);                            \
    }                                                                                                     \
    extern "C" __global__ void searchsorted_##sfx(i64 n_vals, i64 m, i64 len, i64 seq_off,               \
                                                  i64 seq_row_stride, i64 seq_stride, Strided vals_l,    \
                                                  int right, const T* seq, const T* vals, i64* out) {     \
        searchsorted_map<T>(n_vals, m, len, seq_off, seq_row_stride, seq_stride, vals_l, right, seq,      \
                            vals, out);                                                                   \
    }
TL_FOR_ALL(SORT_ENTRIES)
