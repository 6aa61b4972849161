// Matrix family: gemv1_<t> and gemv_<t> (floats), the few-row products of decoding. A decode
// step's linear layers multiply one row per sequence (m <= GEMV_MAX_ROWS in ops/matmul.py) by a
// weight W (n x k) stored row-major, as nn.Linear keeps it: the product streams W once, and
// its speed is memory bandwidth. The vendor GEMMs tile for m >= 64 and read the 8-10 MB
// weights of a 1.1B model's q/k/v and o_proj at 37-46% of bandwidth (H200, cuBLAS 13), but
// over a whole decode step cuBLAS was still the faster (GEMV_MAX_ROWS's comment): these
// kernels run only where GEMV_MAX_ROWS is raised.
#include "rows.h"

// C (m x n, row stride ldc) = alpha * A (m x k, row stride lda) . W^T, W (n x k, row stride
// ldw); A's and W's rows are read along k with unit stride. A block takes WR rows of W (as
// many columns of C for every row of A) and its threads stride over k together: each thread
// loads its run of V elements from every one of those rows before it multiplies (the loads
// are the latency: WR of them in flight per thread, held as loaded and widened where
// multiplied), with the same run of A's rows (L1/L2 hits: every block reads A). Each warp sums
// its lanes, the block its warps. M is the largest m the accumulators hold; V is 16 bytes of
// T where A, W and their row strides allow it, else 1. A warp per row of W instead (four runs
// in flight per lane) took 1.275 ms of a 1.1B decode step against cuBLAS's 0.805 (H200).
template <typename T, int M, int WR, int V>
TL_DEV void gemv_rows(int m, i64 n, i64 k, const T* a, i64 lda, const T* w, i64 ldw, T* c, i64 ldc, double alpha) {
    typedef typename Tr<T>::acc A;
    __shared__ A part[TL_MAX_WARPS][WR * M];
    const int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize, warps = blockDim.x / warpSize;
    const i64 step = (i64)blockDim.x * V;  // elements of a row the block covers per pass
    for (i64 j0 = (i64)blockIdx.x * WR; j0 < n; j0 += (i64)gridDim.x * WR) {
        A acc[WR][M];
#pragma unroll
        for (int u = 0; u < WR; ++u)
#pragma unroll
            for (int r = 0; r < M; ++r) acc[u][r] = A(0);
        for (i64 p = (i64)threadIdx.x * V; p < k; p += step) {
            Run<T, V> wv[WR];
#pragma unroll
            for (int u = 0; u < WR; ++u)  // rows past n read row n-1 again; their sums are dropped
                wv[u] = *(const Run<T, V>*)(w + (j0 + u < n ? j0 + u : n - 1) * ldw + p);
#pragma unroll
            for (int r = 0; r < M; ++r) {
                if (r >= m) break;
                const Run<T, V> av = *(const Run<T, V>*)(a + r * lda + p);
#pragma unroll
                for (int v = 0; v < V; ++v) {
                    const A x = Tr<T>::load(av.v[v]);
#pragma unroll
                    for (int u = 0; u < WR; ++u) acc[u][r] += x * Tr<T>::load(wv[u].v[v]);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < WR; ++u)
#pragma unroll
            for (int r = 0; r < M; ++r) {
                A s = acc[u][r];
                for (int o = warpSize / 2; o > 0; o >>= 1) s += tl_shfl_xor(s, o, warpSize);
                if (lane == 0) part[warp][u * M + r] = s;
            }
        __syncthreads();
        const int u = threadIdx.x / M, r = threadIdx.x % M;
        if (threadIdx.x < WR * M && r < m && j0 + u < n) {
            A s = A(0);
            for (int q = 0; q < warps; ++q) s += part[q][threadIdx.x];
            c[r * ldc + j0 + u] = Tr<T>::store(s * (A)alpha);
        }
        __syncthreads();  // part is written again by the next group
    }
}

template <typename T, int M, int WR>
TL_DEV void gemv_map(int m, i64 n, i64 k, const T* a, i64 lda, const T* w, i64 ldw, T* c, i64 ldc, double alpha) {
    const int V = 16 / (int)sizeof(T);
    // runs of V: every row start aligned to 16 bytes, and k whole runs (the tail is not masked)
    if (tl_aligned16(a) && tl_aligned16(w) && lda % V == 0 && ldw % V == 0 && k % V == 0)
        gemv_rows<T, M, WR, V>(m, n, k, a, lda, w, ldw, c, ldc, alpha);
    else
        gemv_rows<T, M, WR, 1>(m, n, k, a, lda, w, ldw, c, ldc, alpha);
}

// Two entry points, as a kernel's registers are those of its largest path: gemv1_<t> for one
// row of A (a decode step of one sequence; 8 rows of W per block; at sm_90a capped at 64
// registers, four blocks per SM, with a 24-byte stack frame; 70 uncapped), and gemv_<t> for
// up to 4 rows (4 rows of W per block). One kernel for both took 128-150 registers: one block
// of 256 threads per SM, with too few loads in flight (a block per 4 rows of W read the 46 MB
// gate/up weight of that step at 43% of copy bandwidth, cuBLAS 101%).
// (m, WR) of each: ops/matmul.py's _GEMV_KERNELS.
#define GEMV_ENTRY(T, sfx)                                                                       \
    extern "C" __global__ void TL_MAX_REGS(64) gemv1_##sfx(int m, i64 n, i64 k, const T* a, i64 lda, \
                                                           const T* w, i64 ldw, T* c, i64 ldc,      \
                                                           double alpha) {                          \
        gemv_map<T, 1, 8>(m, n, k, a, lda, w, ldw, c, ldc, alpha);                                \
    }                                                                                            \
    extern "C" __global__ void gemv_##sfx(int m, i64 n, i64 k, const T* a, i64 lda, const T* w, \
                                          i64 ldw, T* c, i64 ldc, double alpha) {               \
        gemv_map<T, 4, 4>(m, n, k, a, lda, w, ldw, c, ldc, alpha);                                \
    }
TL_FOR_FLOATS(GEMV_ENTRY)
