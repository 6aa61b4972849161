// Matrix family: gemv_<t> (floats), the few-row products of decoding. A decode step's
// linear layers multiply one row per sequence (m <= GEMV_MAX_ROWS in ops/matmul.py) by a
// weight W (n x k) stored row-major, as nn.Linear keeps it: the product streams W once, and
// its speed is memory bandwidth. The vendor GEMMs tile for m >= 64 and read the 8-10 MB
// weights of a 1.1B model's q/k/v and o_proj at 37-46% of bandwidth (H200, cuBLAS 13).
#include "rows.h"

// C (m x n, row stride ldc) = alpha * A (m x k, row stride lda) . W^T, W (n x k, row stride
// ldw); A's and W's rows are read along k with unit stride. A block takes GEMV_W_ROWS rows of W
// (as many columns of C for every row of A) and its threads stride over k together: each
// thread loads its run of V elements from every one of those rows before it multiplies (the
// loads are the latency: GEMV_W_ROWS of them in flight per thread), with the same run of A's
// rows (L1/L2 hits: every block reads A). Each warp sums its lanes, the block its warps.
// A warp per row of W instead had too few warps, each with too little in flight, where n is
// a few thousand: 1.275 ms of a 1.1B decode step against cuBLAS's 0.805 (H200).
// M is the largest m the accumulators hold in registers; V is 16 bytes of T where A, W and
// their row strides allow it, else 1.
#define GEMV_MAX_M 4
#define GEMV_W_ROWS 4
template <typename T, int M, int V>
TL_DEV void gemv_rows(int m, i64 n, i64 k, const T* a, i64 lda, const T* w, i64 ldw, T* c, i64 ldc, double alpha) {
    typedef typename Tr<T>::acc A;
    __shared__ A part[TL_MAX_WARPS][GEMV_W_ROWS * M];
    const int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize, warps = blockDim.x / warpSize;
    const i64 step = (i64)blockDim.x * V;  // elements of a row the block covers per pass
    for (i64 j0 = (i64)blockIdx.x * GEMV_W_ROWS; j0 < n; j0 += (i64)gridDim.x * GEMV_W_ROWS) {
        const T* wr[GEMV_W_ROWS];
#pragma unroll
        for (int u = 0; u < GEMV_W_ROWS; ++u)  // rows past n read row n-1 again; their sums are dropped
            wr[u] = w + (j0 + u < n ? j0 + u : n - 1) * ldw;
        A acc[GEMV_W_ROWS][M];
#pragma unroll
        for (int u = 0; u < GEMV_W_ROWS; ++u)
#pragma unroll
            for (int r = 0; r < M; ++r) acc[u][r] = A(0);
        for (i64 p = (i64)threadIdx.x * V; p < k; p += step) {
            A wv[GEMV_W_ROWS][V];
#pragma unroll
            for (int u = 0; u < GEMV_W_ROWS; ++u) load_run<T, V>(wr[u] + p, 1, wv[u]);
#pragma unroll
            for (int r = 0; r < M; ++r) {
                if (r >= m) break;
                A av[V];
                load_run<T, V>(a + r * lda + p, 1, av);
#pragma unroll
                for (int u = 0; u < GEMV_W_ROWS; ++u)
#pragma unroll
                    for (int v = 0; v < V; ++v) acc[u][r] += av[v] * wv[u][v];
            }
        }
#pragma unroll
        for (int u = 0; u < GEMV_W_ROWS; ++u)
#pragma unroll
            for (int r = 0; r < M; ++r) {
                A s = acc[u][r];
                for (int o = warpSize / 2; o > 0; o >>= 1) s += tl_shfl_xor(s, o, warpSize);
                if (lane == 0) part[warp][u * M + r] = s;
            }
        __syncthreads();
        const int u = threadIdx.x / M, r = threadIdx.x % M;
        if (threadIdx.x < GEMV_W_ROWS * M && r < m && j0 + u < n) {
            A s = A(0);
            for (int q = 0; q < warps; ++q) s += part[q][threadIdx.x];
            c[r * ldc + j0 + u] = Tr<T>::store(s * (A)alpha);
        }
        __syncthreads();  // part is written again by the next group
    }
}

template <typename T, int V>
TL_DEV void gemv_m(int m, i64 n, i64 k, const T* a, i64 lda, const T* w, i64 ldw, T* c, i64 ldc, double alpha) {
    if (m == 1)  // a decode step of one sequence: one accumulator per row of W, not GEMV_MAX_M
        gemv_rows<T, 1, V>(m, n, k, a, lda, w, ldw, c, ldc, alpha);
    else
        gemv_rows<T, GEMV_MAX_M, V>(m, n, k, a, lda, w, ldw, c, ldc, alpha);
}

template <typename T>
TL_DEV void gemv_map(int m, i64 n, i64 k, const T* a, i64 lda, const T* w, i64 ldw, T* c, i64 ldc, double alpha) {
    const int V = 16 / (int)sizeof(T);
    // runs of V: every row start aligned to 16 bytes, and k whole runs (the tail is not masked)
    if (tl_aligned16(a) && tl_aligned16(w) && lda % V == 0 && ldw % V == 0 && k % V == 0)
        gemv_m<T, V>(m, n, k, a, lda, w, ldw, c, ldc, alpha);
    else
        gemv_m<T, 1>(m, n, k, a, lda, w, ldw, c, ldc, alpha);
}

#define GEMV_ENTRY(T, sfx)                                                                       \
    extern "C" __global__ void gemv_##sfx(int m, i64 n, i64 k, const T* a, i64 lda, const T* w, \
                                          i64 ldw, T* c, i64 ldc, double alpha) {               \
        gemv_map(m, n, k, a, lda, w, ldw, c, ldc, alpha);                                       \
    }
TL_FOR_FLOATS(GEMV_ENTRY)
