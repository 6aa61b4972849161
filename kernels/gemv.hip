// Matrix family: gemv_<t> (floats), the few-row products of decoding. A decode step's
// linear layers multiply one row per sequence (m <= GEMV_MAX_ROWS in ops/matmul.py) by a
// weight W (n x k) stored row-major, as nn.Linear keeps it: the product streams W once, and
// its speed is memory bandwidth. The vendor GEMMs tile for m >= 64 and read the 8-10 MB
// weights of a 1.1B model's q/k/v and o_proj at 37-46% of bandwidth (H200, cuBLAS 13).
#include "rows.h"

// C (m x n, row stride ldc) = alpha * A (m x k, row stride lda) . W^T, W (n x k, row stride
// ldw); A's and W's rows are read along k with unit stride. A warp takes one row of W (one
// column of C for every row of A): each lane streams runs of V elements of it, GEMV_UNROLL
// runs in flight, multiplies each by the same run of A's rows (L1/L2 hits: every warp reads
// A), and the warp sums its lanes. M is the largest m the accumulators hold in registers.
// V is 16 bytes of T where A, W and their row strides allow it, else 1 (gemv_rows).
#define GEMV_MAX_M 4
#define GEMV_UNROLL 4
template <typename T, int M, int V>
TL_DEV void gemv_rows(int m, i64 n, i64 k, const T* a, i64 lda, const T* w, i64 ldw, T* c, i64 ldc, double alpha) {
    typedef typename Tr<T>::acc A;
    const int lane = threadIdx.x % warpSize;
    const i64 warps = (i64)gridDim.x * (blockDim.x / warpSize);
    const i64 step = (i64)warpSize * V;  // elements of a row the warp covers per run
    for (i64 j = ((i64)blockIdx.x * blockDim.x + threadIdx.x) / warpSize; j < n; j += warps) {
        const T* wj = w + j * ldw;
        A acc[M];
#pragma unroll
        for (int r = 0; r < M; ++r) acc[r] = A(0);
        for (i64 p0 = lane * V; p0 < k; p0 += GEMV_UNROLL * step) {
            A wv[GEMV_UNROLL][V];
#pragma unroll
            for (int u = 0; u < GEMV_UNROLL; ++u)  // every load of W first: they are the latency
                if (p0 + u * step < k) load_run<T, V>(wj + p0 + u * step, 1, wv[u]);
#pragma unroll
            for (int u = 0; u < GEMV_UNROLL; ++u) {
                const i64 p = p0 + u * step;
                if (p >= k) break;
#pragma unroll
                for (int r = 0; r < M; ++r) {
                    if (r >= m) break;
                    A av[V];
                    load_run<T, V>(a + r * lda + p, 1, av);
#pragma unroll
                    for (int v = 0; v < V; ++v) acc[r] += av[v] * wv[u][v];
                }
            }
        }
#pragma unroll
        for (int r = 0; r < M; ++r) {
            if (r >= m) break;
            A s = acc[r];
            for (int o = warpSize / 2; o > 0; o >>= 1) s += tl_shfl_xor(s, o, warpSize);
            if (lane == 0) c[r * ldc + j] = Tr<T>::store(s * (A)alpha);
        }
    }
}

template <typename T>
TL_DEV void gemv_map(int m, i64 n, i64 k, const T* a, i64 lda, const T* w, i64 ldw, T* c, i64 ldc, double alpha) {
    const int V = 16 / (int)sizeof(T);
    // runs of V: every row start aligned to 16 bytes, and k whole runs (the tail is not masked)
    if (tl_aligned16(a) && tl_aligned16(w) && lda % V == 0 && ldw % V == 0 && k % V == 0)
        gemv_rows<T, GEMV_MAX_M, V>(m, n, k, a, lda, w, ldw, c, ldc, alpha);
    else
        gemv_rows<T, GEMV_MAX_M, 1>(m, n, k, a, lda, w, ldw, c, ldc, alpha);
}

#define GEMV_ENTRY(T, sfx)                                                                       \
    extern "C" __global__ void gemv_##sfx(int m, i64 n, i64 k, const T* a, i64 lda, const T* w, \
                                          i64 ldw, T* c, i64 ldc, double alpha) {               \
        gemv_map(m, n, k, a, lda, w, ldw, c, ldc, alpha);                                       \
    }
TL_FOR_FLOATS(GEMV_ENTRY)
