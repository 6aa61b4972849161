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

// A run of V elements of W as loaded and held, its element v widened to the accumulator type A
// where it is multiplied. An int8 run of whole words is held as words: held as 16 one-byte
// elements (a first form of gemv1_q8's 16-int8 runs), each run loaded under a condition was
// unpacked at the condition's merge right after its load, so each load waited for the one
// before (sm_90a SASS), in 158 registers. The int8 weights are widened exactly without a
// conversion instruction: a byte biased by 128 (one xor a word) is the low byte of the float
// 2^23 + u (bits 0x4B0000uu), and 2^23 + 128 subtracted leaves the int8; NVIDIA's I2F converts
// 16 values per SM per cycle (sm_80/sm_90), about what an int8 weight read at 4 TB/s needs.
template <typename TW, int V, bool Words = sizeof(TW) == 1 && V % 4 == 0>
struct WeightRun {
    Run<TW, V> q;
    template <typename A> TL_DEV A at(int v) const { return (A)Tr<TW>::load(q.v[v]); }
};
template <typename TW, int V>
struct WeightRun<TW, V, true> {
    VecN<u32, V / 4> q;
    template <typename A> TL_DEV A at(int v) const {
        const u32 biased = q.v[v / 4] ^ 0x80808080u;
#if defined(TL_CUDA)
        const u32 bits = __byte_perm(biased, 0x4B000000u, 0x7440u | (v % 4));  // one PRMT
#else
        const u32 bits = 0x4B000000u | ((biased >> (8 * (v % 4))) & 0xFFu);
#endif
        return (A)(tl_bits_f32(bits) - 8388736.0f);
    }
};
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
            WeightRun<TW, V> wv[WR];
#pragma unroll
            for (int u = 0; u < WR; ++u)  // rows past n read row n-1 again; their sums are dropped
                wv[u] = *(const WeightRun<TW, V>*)(w + (j0 + u < n ? j0 + u : n - 1) * ldw + p);
#pragma unroll
            for (int r = 0; r < M; ++r) {
                if (r >= m) break;
                const Run<T, V> av = *(const Run<T, V>*)(a + r * lda + p);
#pragma unroll
                for (int v = 0; v < V; ++v) {
                    const A x = Tr<T>::load(av.v[v]);
#pragma unroll
                    for (int u = 0; u < WR; ++u) acc[u][r] += x * wv[u].template at<A>(v);
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

// m = 1: C (1 x n) = alpha * a (k) . W^T with R rows of W per warp and no block-wide step.
// Lane l takes the runs l, l + warpSize, ... of V elements of its rows, U of each row loaded
// before any is multiplied: at k = 2048 a row is one batch (8 runs of 8 bf16, 4 runs of 16
// int8 per lane), so every warp's loads, and with one wave of warps all of a 10 MB weight, are
// in flight together; a's runs are L1 hits (every warp of an SM reads them), widened once for
// the R rows. A shuffle sum per row; lane r stores column j + r.
// A decode step's element-wise neighbours ride along, each a launch saved:
// - add (may be null): c[j] += add[j] (a residual add after o_proj / down_proj),
//   loaded with the weights rather than after the sum;
// - Norm: a is first RMS-normalised with the weight g (may be null; the norm before q/k/v,
//   gate/up or the LM head): every warp reads all of a anyway, so it sums a's squares beside its dot
//   product of W's row with a * g and scales the dot by 1 / sqrt(mean(a^2) + eps) after;
// - Gated (R = 2): c has n columns and W 2n rows (gate's, then up's): a warp takes rows j and
//   n + j and stores silu(gate) * up (SwiGLU); otherwise a warp takes rows (and columns) j ..
//   j + R - 1, rows past n reading row n - 1 again, their sums dropped;
// - TW, scale (may be null): weight-only quantization: W is stored as TW (int8: gemv1_q8) and
//   the dot product of W's row i is multiplied by scale[i] (per output channel) after the sum,
//   the scales loaded with the weights.
template <typename T, int V, int U, int R, bool Norm, bool Gated, typename TW = T>
TL_DEV void gemv_warp_rows(i64 n, i64 k, const T* a, const TW* w, i64 ldw, T* c, double alpha, const T* add,
                           const T* g, double eps, const T* scale = nullptr) {
    typedef typename Tr<T>::acc A;
    static_assert(!Gated || R == 2, "a gated warp takes one gate/up pair of rows");
    enum { C = Gated ? 1 : R };  // columns of c per warp
    const int lane = threadIdx.x % warpSize, per_block = blockDim.x / warpSize;
    const i64 span = (i64)warpSize * V;  // elements of a row the warp covers with one run per lane
    enum { P = V * sizeof(T) > 16 ? 16 / sizeof(T) : V };  // elements of a per load
    for (i64 j = ((i64)blockIdx.x * per_block + threadIdx.x / warpSize) * C; j < n;
         j += (i64)gridDim.x * per_block * C) {
        // the warp's row r of W: a gated pair's j and n + j, else j + r (past n: row n - 1 again)
        auto row = [&](int r) -> i64 { return Gated ? j + r * n : r == 0 || j + r < n ? j + r : n - 1; };
        A sc[R], addend[C], acc[R], squares = A(0);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            sc[r] = scale != nullptr ? Tr<T>::load(scale[row(r)]) : A(1);
            acc[r] = A(0);
        }
#pragma unroll
        for (int r = 0; r < C; ++r)
            addend[r] = add != nullptr && lane == r && (r == 0 || j + r < n) ? Tr<T>::load(add[j + r]) : A(0);
        for (i64 p0 = (i64)lane * V; p0 < k; p0 += span * U) {
            WeightRun<TW, V> wv[R][U];
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int u = 0; u < U; ++u)
                    if (p0 + u * span < k) wv[r][u] = *(const WeightRun<TW, V>*)(w + row(r) * ldw + p0 + u * span);
#pragma unroll
            for (int u = 0; u < U; ++u) {
                if (p0 + u * span >= k) break;
                const i64 p = p0 + u * span;
#pragma unroll
                for (int h = 0; h < V / P; ++h) {  // a's run (and g's) in 16-byte pieces
                    const Run<T, P> av = *(const Run<T, P>*)(a + p + h * P);
                    Run<T, P> gv;
                    if (Norm && g != nullptr) gv = *(const Run<T, P>*)(g + p + h * P);
#pragma unroll
                    for (int v = 0; v < P; ++v) {
                        A x = Tr<T>::load(av.v[v]);
                        if constexpr (Norm) {
                            squares += x * x;
                            if (g != nullptr) x *= Tr<T>::load(gv.v[v]);
                        }
#pragma unroll
                        for (int r = 0; r < R; ++r) acc[r] += x * wv[r][u].template at<A>(h * P + v);
                    }
                }
            }
        }
        for (int o = warpSize / 2; o > 0; o >>= 1) {
#pragma unroll
            for (int r = 0; r < R; ++r) acc[r] += tl_shfl_xor(acc[r], o, warpSize);
            if constexpr (Norm) squares += tl_shfl_xor(squares, o, warpSize);
        }
        const A inv = Norm ? A(1) / tl_sqrt(squares / (A)k + (A)eps) : A(1);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] *= sc[r] * inv;  // each row's own scale
        if constexpr (Gated) {
            if (lane == 0) c[j] = Tr<T>::store(acc[0] / (A(1) + tl_exp(-acc[0])) * acc[1] * (A)alpha + addend[0]);
        } else {
#pragma unroll
            for (int r = 0; r < C; ++r)
                if (lane == r && (r == 0 || j + r < n)) c[j + r] = Tr<T>::store(acc[r] * (A)alpha + addend[r]);
        }
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

// g (the norm's weight, Norm only) is read with a's runs: contiguous, and aligned as a is. A
// run is 16 bytes of W: 8 runs of a float W in flight per lane, 4 of each of a gated pair's
// rows. An int8 run is 16 weights: two rows of 4 runs per warp (GEMV1_Q8_ROWS; a gate/up pair
// when gated), the 2 KB rows of k = 2048 whole and as many bytes in flight as gemv1's 4 KB row.
#define GEMV1_Q8_ROWS 2
template <typename T, bool Norm, bool Gated, typename TW = T>
TL_DEV void gemv1_map(i64 n, i64 k, const T* a, const TW* w, i64 ldw, T* c, double alpha, const T* add,
                      const T* g, double eps, const T* scale = nullptr) {
    enum { Q8 = sizeof(TW) == 1, V = 16 / sizeof(TW), U = Q8 || Gated ? 4 : 8 };
    enum { R = Q8 ? GEMV1_Q8_ROWS : Gated ? 2 : 1 };
    if (tl_aligned16(a) && tl_aligned16(w) && ldw % V == 0 && k % V == 0 && (!Norm || tl_aligned16(g)))
        gemv_warp_rows<T, V, U, R, Norm, Gated, TW>(n, k, a, w, ldw, c, alpha, add, g, eps, scale);
    else
        gemv_warp_rows<T, 1, U, R, Norm, Gated, TW>(n, k, a, w, ldw, c, alpha, add, g, eps, scale);
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
// gemv1_norm(_silu)). The one-row forms read 16 int8 a load, two rows a warp (gemv1_map), and
// are not capped: at sm_90a (NVRTC 13, bf16 and f16) all three take 72 registers, none spilled
// (capped at 64 they would spill 24-108 bytes). The kernels before them, 8 int8 a load and
// capped at 64, spilled 320-344 bytes and converted each weight with an I2F.
#define GEMV1_Q8_NORM_ENTRY(name, Gated, T, sfx)                                                           \
    extern "C" __global__ void name##_##sfx(i64 n, i64 k, const T* a, const T* g, double eps, const i8* w, \
                                            i64 ldw, const T* scale, T* c) {                               \
        tl_dependent_start();                                                                              \
        gemv1_map<T, true, Gated, i8>(n, k, a, w, ldw, c, 1.0, nullptr, g, eps, scale);                   \
    }
#define GEMV_Q8_ENTRY(T, sfx)                                                                              \
    extern "C" __global__ void gemv1_q8_##sfx(int m, i64 n, i64 k, const T* a, i64 lda, const i8* w,     \
                                              i64 ldw, const T* scale, T* c, i64 ldc, const T* add,      \
                                              i64 ld_add) {                                              \
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
