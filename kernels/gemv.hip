// Matrix family: gemv1_<t> and gemv_<t> (floats), the few-row products of decoding, and their
// int8-weight forms gemv1_q8_<t> / gemv_q8_<t>. A decode
// step's linear layers multiply one row per sequence (m <= GEMV_MAX_ROWS in ops/matmul.py) by a
// weight W (n x k) stored row-major, as nn.Linear keeps it: the product streams W once, and
// its speed is memory bandwidth. The vendor GEMMs tile for m >= 64; here a whole small weight
// is requested at once, so a kernel's time is one memory latency plus the transfer. The
// 1.1B decode step's products (probe_decode_products.py, one H200), gemv1 against cuBLAS, us:
// q/k/v 6.29 / 6.18, o_proj 4.79 / 6.11, gate/up 15.00 / 13.65, down 10.47 / 11.09, LM head
// 34.18 / 35.41; in a graph gemv1 also starts while the kernel before it ends (compat.h
// tl_dependent_start), which cuBLAS's kernels cannot.
#include "rows.h"

// C (m x n, row stride ldc) = alpha * A (m x k, row stride lda) . W^T, W (n x k, row stride
// ldw); A's and W's rows are read along k with unit stride. A block takes WR rows of W (as
// many columns of C for every row of A) and its threads stride over k together: each thread
// loads its run of V elements from every one of those rows before it multiplies (the loads
// are the latency: WR of them in flight per thread, held as loaded and widened where
// multiplied), with the same run of A's rows (L1/L2 hits: every block reads A). Each warp sums
// its lanes, the block its warps. M is the largest m the accumulators hold; V is 16 bytes of
// T where A, W and their row strides allow it, else 1. add (m x n, row stride ld_add; may be
// null) is added to C, as gemv_warp_rows's. TW and scale as gemv_warp_rows's.
template <typename T, int M, int WR, int V, typename TW = T>
TL_DEV void gemv_rows(int m, i64 n, i64 k, const T* a, i64 lda, const TW* w, i64 ldw, T* c, i64 ldc, double alpha,
                      const T* add, i64 ld_add, const T* scale = nullptr) {
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
            Run<TW, V> wv[WR];
#pragma unroll
            for (int u = 0; u < WR; ++u)  // rows past n read row n-1 again; their sums are dropped
                wv[u] = *(const Run<TW, V>*)(w + (j0 + u < n ? j0 + u : n - 1) * ldw + p);
#pragma unroll
            for (int r = 0; r < M; ++r) {
                if (r >= m) break;
                const Run<T, V> av = *(const Run<T, V>*)(a + r * lda + p);
#pragma unroll
                for (int v = 0; v < V; ++v) {
                    const A x = Tr<T>::load(av.v[v]);
#pragma unroll
                    for (int u = 0; u < WR; ++u) acc[u][r] += x * (A)Tr<TW>::load(wv[u].v[v]);
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
            if (scale != nullptr) s *= Tr<T>::load(scale[j0 + u]);
            c[r * ldc + j0 + u] = Tr<T>::store(s * (A)alpha + (add ? Tr<T>::load(add[r * ld_add + j0 + u]) : A(0)));
        }
        __syncthreads();  // part is written again by the next group
    }
}

// m = 1: C (1 x n) = alpha * a (k) . W^T with a warp per row of W and no block-wide step.
// Lane l takes the runs l, l + warpSize, ... of V elements of its row, U of them loaded
// before any is multiplied: at k = 2048 (bf16) a row is one batch, so every warp's loads, and
// with one wave of warps all of a 10 MB weight, are in flight together; a's runs are L1 hits
// (every warp of an SM reads them). A shuffle sum per row, its lane 0 stores.
// A decode step's element-wise neighbours ride along, each a launch saved:
// - add (may be null): c[j] += add[j] (a residual add after o_proj / down_proj),
//   loaded with the weights rather than after the sum;
// - Norm: a is first RMS-normalised with the weight g (may be null; the norm before q/k/v,
//   gate/up or the LM head): every warp reads all of a anyway, so it sums a's squares beside its dot
//   product of W's row with a * g and scales the dot by 1 / sqrt(mean(a^2) + eps) after;
// - Gated: c has n columns and W 2n rows (gate's, then up's): a warp takes rows j and n + j
//   and stores silu(gate) * up (SwiGLU);
// - TW, scale (may be null): weight-only quantization: W is stored as TW (int8: gemv1_q8) and
//   the dot product of W's row i is multiplied by scale[i] (per output channel) first.
template <typename T, int V, int U, bool Norm, bool Gated, typename TW = T>
TL_DEV void gemv_warp_rows(i64 n, i64 k, const T* a, const TW* w, i64 ldw, T* c, double alpha, const T* add,
                           const T* g, double eps, const T* scale = nullptr) {
    typedef typename Tr<T>::acc A;
    enum { R = Gated ? 2 : 1 };  // rows of W per column of c
    const int lane = threadIdx.x % warpSize, per_block = blockDim.x / warpSize;
    const i64 span = (i64)warpSize * V;  // elements of a row the warp covers with one run per lane
    for (i64 j = (i64)blockIdx.x * per_block + threadIdx.x / warpSize; j < n; j += (i64)gridDim.x * per_block) {
        const A addend = add != nullptr && lane == 0 ? Tr<T>::load(add[j]) : A(0);
        A acc[R], squares = A(0);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] = A(0);
        for (i64 p0 = (i64)lane * V; p0 < k; p0 += span * U) {
            Run<TW, V> wv[R][U];
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int u = 0; u < U; ++u)
                    if (p0 + u * span < k) wv[r][u] = *(const Run<TW, V>*)(w + (j + r * n) * ldw + p0 + u * span);
#pragma unroll
            for (int u = 0; u < U; ++u) {
                if (p0 + u * span >= k) break;
                const Run<T, V> av = *(const Run<T, V>*)(a + p0 + u * span);
                Run<T, V> gv;
                if (Norm && g != nullptr) gv = *(const Run<T, V>*)(g + p0 + u * span);
#pragma unroll
                for (int v = 0; v < V; ++v) {
                    A x = Tr<T>::load(av.v[v]);
                    if constexpr (Norm) {
                        squares += x * x;
                        if (g != nullptr) x *= Tr<T>::load(gv.v[v]);
                    }
#pragma unroll
                    for (int r = 0; r < R; ++r) acc[r] += x * (A)Tr<TW>::load(wv[r][u].v[v]);
                }
            }
        }
        for (int o = warpSize / 2; o > 0; o >>= 1) {
#pragma unroll
            for (int r = 0; r < R; ++r) acc[r] += tl_shfl_xor(acc[r], o, warpSize);
            if constexpr (Norm) squares += tl_shfl_xor(squares, o, warpSize);
        }
        if (scale != nullptr)  // each row's own scale: a gated pair's rows j and n + j have two
#pragma unroll
            for (int r = 0; r < R; ++r) acc[r] *= Tr<T>::load(scale[j + r * n]);
        A y = acc[0], up = acc[R - 1];
        if constexpr (Norm) {
            const A inv = A(1) / tl_sqrt(squares / (A)k + (A)eps);
            y *= inv;
            up *= inv;
        }
        if constexpr (Gated) y = y / (A(1) + tl_exp(-y)) * up;
        if (lane == 0) c[j] = Tr<T>::store(y * (A)alpha + addend);
    }
}

template <typename T, int M, int WR, typename TW = T>
TL_DEV void gemv_map(int m, i64 n, i64 k, const T* a, i64 lda, const TW* w, i64 ldw, T* c, i64 ldc, double alpha,
                     const T* add, i64 ld_add, const T* scale = nullptr) {
    const int V = 16 / (int)sizeof(T);
    // runs of V: every row start aligned to 16 bytes, and k whole runs (the tail is not masked)
    if (tl_aligned16(a) && tl_aligned16(w) && lda % V == 0 && ldw % V == 0 && k % V == 0)
        gemv_rows<T, M, WR, V, TW>(m, n, k, a, lda, w, ldw, c, ldc, alpha, add, ld_add, scale);
    else
        gemv_rows<T, M, WR, 1, TW>(m, n, k, a, lda, w, ldw, c, ldc, alpha, add, ld_add, scale);
}

// g (the norm's weight, Norm only) is read with a's runs: contiguous, and aligned as a is.
// 8 runs of W in flight per lane (4 of each of a gated pair's rows); twice as many where W is
// narrower than T (int8 weights): the same bytes in flight and registers held.
template <typename T, bool Norm, bool Gated, typename TW = T>
TL_DEV void gemv1_map(i64 n, i64 k, const T* a, const TW* w, i64 ldw, T* c, double alpha, const T* add,
                      const T* g, double eps, const T* scale = nullptr) {
    const int V = 16 / (int)sizeof(T), U = (Gated ? 4 : 8) * (sizeof(TW) < sizeof(T) ? 2 : 1);
    if (tl_aligned16(a) && tl_aligned16(w) && ldw % V == 0 && k % V == 0 && (!Norm || tl_aligned16(g)))
        gemv_warp_rows<T, V, U, Norm, Gated, TW>(n, k, a, w, ldw, c, alpha, add, g, eps, scale);
    else
        gemv_warp_rows<T, 1, U, Norm, Gated, TW>(n, k, a, w, ldw, c, alpha, add, g, eps, scale);
}

// Entry points, a kernel's registers being those of its largest path: gemv1_<t> for one row
// of A (a decode step of one sequence: a warp per row of W), and gemv_<t> for up to 4 rows
// (4 rows of W per block, gemv_rows); both add `add` (may be null; rows of unit column
// stride ld_add apart). One kernel for both took 128-150 registers: one block of 256 threads
// per SM, with too few loads in flight (a block per 4 rows of W read the 46 MB gate/up weight
// of a 1.1B decode step at 43% of copy bandwidth, cuBLAS 101%). gemv1_norm_<t> and
// gemv1_norm_silu_<t>: one row RMS-normalised first (g: the norm's weight, may be null), the
// second gated (SwiGLU; c has n columns, W 2n rows, 4 runs of each of its two rows in flight
// per lane). Both capped at 64 registers, 4 blocks per SM as gemv1's 59: uncapped (68 and
// 100, the gated one with 8 runs a row) they took the 1.1B LM head 40.8 us where gemv1 takes
// 34.1, gate/up 18.8 where gemv1 takes 15.0 (one H200, probe_decode_products.py). All start
// with tl_dependent_start (launch.py DEPENDENT_LAUNCH). ops/matmul.py's _GEMV_KERNELS: (m,
// rows of W per block) of the first two.
#define GEMV1_NORM_ENTRY(name, Gated, T, sfx)                                                              \
    extern "C" __global__ void TL_MAX_REGS(64) name##_##sfx(i64 n, i64 k, const T* a, const T* g, double eps,    \
                                                            const T* w, i64 ldw, T* c) {                        \
        tl_dependent_start();                                                                              \
        gemv1_map<T, true, Gated>(n, k, a, w, ldw, c, 1.0, nullptr, g, eps);                              \
    }
#define GEMV_ENTRY(T, sfx)                                                                                 \
    extern "C" __global__ void gemv1_##sfx(int m, i64 n, i64 k, const T* a, i64 lda, const T* w, i64 ldw, \
                                           T* c, i64 ldc, double alpha, const T* add, i64 ld_add) {     \
        tl_dependent_start();                                                                              \
        gemv1_map<T, false, false>(n, k, a, w, ldw, c, alpha, add, nullptr, 0.0);                         \
    }                                                                                                      \
    extern "C" __global__ void gemv_##sfx(int m, i64 n, i64 k, const T* a, i64 lda, const T* w, i64 ldw,  \
                                          T* c, i64 ldc, double alpha, const T* add, i64 ld_add) {      \
        tl_dependent_start();                                                                              \
        gemv_map<T, 4, 4>(m, n, k, a, lda, w, ldw, c, ldc, alpha, add, ld_add);                           \
    }                                                                                                      \
    GEMV1_NORM_ENTRY(gemv1_norm, false, T, sfx) GEMV1_NORM_ENTRY(gemv1_norm_silu, true, T, sfx)
TL_FOR_FLOATS(GEMV_ENTRY)

// Weight-only int8 (tl.quantize_weights), the entry points above with W (n x k) int8 and the
// dot product of W's row j scaled by scale[j] (of T): gemv1_q8_<t> and gemv_q8_<t> (one row of A
// / up to 4, adding `add` as gemv1's), gemv1_q8_norm_<t> and gemv1_q8_norm_silu_<t> (as
// gemv1_norm(_silu)). A run of W is V int8 (V: 16 bytes of T), so twice gemv1's runs are in
// flight per lane (gemv1_map). The one-row forms capped at 64 registers, as the norm GEMVs.
#define GEMV1_Q8_NORM_ENTRY(name, Gated, T, sfx)                                                           \
    extern "C" __global__ void TL_MAX_REGS(64) name##_##sfx(i64 n, i64 k, const T* a, const T* g, double eps,    \
                                                            const i8* w, i64 ldw, const T* scale, T* c) {        \
        tl_dependent_start();                                                                              \
        gemv1_map<T, true, Gated, i8>(n, k, a, w, ldw, c, 1.0, nullptr, g, eps, scale);                   \
    }
#define GEMV_Q8_ENTRY(T, sfx)                                                                              \
    extern "C" __global__ void TL_MAX_REGS(64) gemv1_q8_##sfx(int m, i64 n, i64 k, const T* a, i64 lda,   \
                                                              const i8* w, i64 ldw, const T* scale, T* c,  \
                                                              i64 ldc, const T* add, i64 ld_add) {         \
        tl_dependent_start();                                                                              \
        gemv1_map<T, false, false, i8>(n, k, a, w, ldw, c, 1.0, add, nullptr, 0.0, scale);                \
    }                                                                                                      \
    extern "C" __global__ void gemv_q8_##sfx(int m, i64 n, i64 k, const T* a, i64 lda, const i8* w,      \
                                             i64 ldw, const T* scale, T* c, i64 ldc, const T* add,       \
                                             i64 ld_add) {                                                 \
        tl_dependent_start();                                                                              \
        gemv_map<T, 4, 4, i8>(m, n, k, a, lda, w, ldw, c, ldc, 1.0, add, ld_add, scale);                  \
    }                                                                                                      \
    GEMV1_Q8_NORM_ENTRY(gemv1_q8_norm, false, T, sfx) GEMV1_Q8_NORM_ENTRY(gemv1_q8_norm_silu, true, T, sfx)
TL_FOR_FLOATS(GEMV_Q8_ENTRY)
