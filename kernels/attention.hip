// Flash attention (the FlashAttention-2 scheme), forward and backward, f32/f16/bf16.
//
// Never materialises the L x S scores: a block owns a tile of query rows (forward) or of
// keys (backward), streams the other side through shared memory tile by tile and keeps
// the softmax online (running max and sum in f32). Everything accumulates in f32; tiles
// are staged in shared memory in the storage type (exact) and widened when read.
//
// Entry points (DP = head dim the instantiation is padded to: 32, 64 or 128; the host
// picks the smallest DP >= max(d, dv)):
//   flash_fwd{DP}_<t>   out (b, hq, L, dv) through its view ov, lse (b, hq, L) f32 contiguous (may be null)
//   flash_fwd_mma{DP}_<t>  the same on tensor cores, f16/bf16 at DP 64/128 and f32 at DP 64,
//                       where the device has them (TL_HAS_MMA, compat.h Part 3; the host checks
//                       the arch). f32 runs on NVIDIA as 3xTF32, on AMD as f32 MFMA.
//   flash_fwd_wg{DP}_<t>   flash_fwd_mma's f16/bf16 cases on Hopper's warpgroup products
//                       (wgmma: code built for sm_90a only; the host picks it there)
//   flash_bwd_mma{DP}_<t>  flash_bwd on tensor cores (same cases and host check as flash_fwd_mma)
//   flash_bwd_wg{DP}_<t>   flash_bwd_mma's cases on warpgroup products (as flash_fwd_wg)
//   flash_fwd_ws{DP}_<t>   flash_fwd_wg warp-specialised (a producer warpgroup loads, mbarriers;
//                       sm_90a only, no mask; the host picks it only with TENSORLITE_ATTN_HOPPER=1)
//   flash_bwd_pre_<t>   Dr[row] = sum_c dout[row, c] * out[row, c] in f32
//   flash_bwd{DP}_<t>   dk, dv (b, hk, S, .) in T through their views dkv, dvv; dq accumulated
//                       atomically into a zeroed f32 (b, hq, L, d) buffer through its view dqv
//   attn_decode_part_<t>, attn_decode_combine_<t>   few query rows over many keys, split over
//                       the keys (see "decode" below): the forward without lse
// Operands are (b, h, t, d) views passed by strides (View4), so transposed (b, t, h, d)
// inputs need no copy; results are written through views too (the host lays them out in
// the operands' memory order, tensorlite.backend.sdpa_layout), whose rows must be
// contiguous (their s3 is not read). GQA: query head h reads kv head h / (hq / hk). Masking: causal
// drops key j for query l when j > l + causal_shift (0: top-left); mask_kind 0 none,
// 1 bool (true = keep), 2 additive in T, a (b, hq, L, S) view (stride 0 broadcasts).
// A query row whose keys are all dropped gets zeros and lse = -inf (as the cpu reference).
//
// Blocks are 16 x 16 threads. In the forward threadIdx.y selects rows, threadIdx.x columns,
// so the 16 threads that share a query row sit in 16 consecutive lanes: row reductions are
// shuffles of width 16, valid for 32- and 64-lane warps (the backward needs none and maps
// threads to tiles its own way). Each product's register micro-tile is laid out so its
// shared-memory operands are vector loads or broadcasts (see flash_fwd and flash_bwd);
// padded tile rows keep lanes that read different rows off the same banks. Global tiles
// are read with every load in flight at once, 16 bytes each where the view's rows allow
// (AttStage). Tile sizes (FwdCfg/BwdCfg, FwdTile::SMEM) are mirrored by the launches in
// backends/rocm/ops/attention.py.
#include "compat.h"

struct View4 { i64 offset, s0, s1, s2, s3; };

struct AttnShape {
    i64 b, hq, hk, L, S, d, dv;
    i64 causal_shift;
    int causal, mask_kind;
    float scale;
};

// Tile sizes per storage width and padded head dim. The forward's tiles live in dynamic
// shared memory (FwdTile::SMEM, at most 51 KiB: f32 at DP 64, over the 48 KiB of static
// shared memory; the host opts in), the backward's in static shared memory under 48 KiB.
template <typename T, int DP> struct FwdCfg {
    static const int BM = (sizeof(T) == 4 && DP > 64) ? 32 : 64;  // query rows per block
    static const int BN = DP > 64 ? 32 : 64;                      // keys per tile
};
template <typename T, int DP> struct BwdCfg {
    static const int BN = sizeof(T) == 4 ? (DP > 64 ? 16 : 32) : (DP > 64 ? 32 : 64);  // keys per block
    static const int BM = (sizeof(T) == 4 && DP > 64) ? 16 : 32;                        // query rows per step
};

#define TL_ATT_THREADS 256  // two blocks per SM/CU (__launch_bounds__): registers capped at 128

TL_DEV float att_neg_inf() { return -tl_inf_f32(); }

// Scaled score x of key j for query l (both in range) after the mask (p.mask_kind != 0).
template <typename T>
TL_DEV float att_mask(float x, const AttnShape& p, i64 bi, i64 h, i64 l, i64 j, const View4& mv, const void* mask) {
    const i64 mi = mv.offset + bi * mv.s0 + h * mv.s1 + l * mv.s2 + j * mv.s3;
    if (p.mask_kind == 1) return ((const tlbool*)mask)[mi].v ? x : att_neg_inf();
    return x + Tr<T>::load(((const T*)mask)[mi]);
}

// Score of key j for query l (both in range) after scale, causal and mask; -inf = dropped.
template <typename T>
TL_DEV float att_score(float dot, const AttnShape& p, i64 bi, i64 h, i64 l, i64 j, const View4& mv,
                       const void* mask) {
    if (p.causal && j > l + p.causal_shift) return att_neg_inf();
    const float x = dot * p.scale;
    return p.mask_kind ? att_mask<T>(x, p, bi, h, l, j, mv, mask) : x;
}

// N consecutive shared-memory elements in one access (16-byte pieces at most); callers
// keep the offsets multiples of N (or of 16 bytes).
template <typename T, int N> struct alignas((N * sizeof(T)) < 16 ? N * sizeof(T) : 16) AttVec { T v[N]; };
template <typename T, int N>
TL_DEV void att_lds(float* dst, const T* src) {
    const AttVec<T, N> x = *(const AttVec<T, N>*)src;
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = Tr<T>::load(x.v[i]);
}

extern __shared__ Vec4<u32> att_dyn_smem[];

// A ROWS x DP tile of a (b, h, t, d) view staged in registers: thread tid holds the chunks
// tid + 256*k of VN consecutive elements (16 bytes). att_fetch issues every global load of
// the tile before any is used (so their latencies overlap, and a tile fetched before a
// product is in flight while it runs); att_put stores it row-major into shared memory.
template <typename T, int ROWS, int DP> struct AttStage {
    static const int VN = 16 / sizeof(T) < DP ? 16 / sizeof(T) : DP, CPR = DP / VN;
    static const int NC = (ROWS * CPR + TL_ATT_THREADS - 1) / TL_ATT_THREADS;
    AttVec<T, VN> x[NC];
};

// Whether a view's rows in (bi, h) can be read as aligned 16-byte pieces: complete,
// contiguous rows (d == DP) whose starts are all 16-byte aligned. Uniform per block.
template <typename T, int DP>
TL_DEV bool att_vec_ok(const T* src, const View4& v, i64 bi, i64 h, i64 d) {
    const int VN = AttStage<T, 1, DP>::VN;
    return d == DP && v.s3 == 1 && v.s2 % VN == 0 &&
           ((u64)(src + v.offset + bi * v.s0 + h * v.s1) & 15) == 0;
}

// Rows r0 .. r0+ROWS of the view; rows past n_rows and dims past d are zero (padding
// must not carry NaN into the sums).
template <typename T, int ROWS, int DP>
TL_DEV void att_fetch(AttStage<T, ROWS, DP>& st, bool vec, const T* src, const View4& v, i64 bi, i64 h, i64 r0,
                      i64 n_rows, i64 d) {
    typedef AttStage<T, ROWS, DP> S;
    const int tid = threadIdx.y * 16 + threadIdx.x;
    const T* base = src + v.offset + bi * v.s0 + h * v.s1;
    const i64 rows = n_rows - r0;
#pragma unroll
    for (int k = 0; k < S::NC; ++k) {
        const int e = tid + k * TL_ATT_THREADS, r = e / S::CPR, c = (e % S::CPR) * S::VN;
        if (e >= ROWS * S::CPR) break;
        if (vec && r < rows) {
            st.x[k] = *(const AttVec<T, S::VN>*)(base + (r0 + r) * v.s2 + c);
        } else {
#pragma unroll
            for (int i = 0; i < S::VN; ++i)
                st.x[k].v[i] = (r < rows && c + i < d) ? base[(r0 + r) * v.s2 + (c + i) * v.s3] : Tr<T>::store(0.0f);
        }
    }
}

// dst[r * ld + c] = the staged tile; ld a multiple of 4 (4-element stores).
template <typename T, int ROWS, int DP>
TL_DEV void att_put(T* dst, int ld, const AttStage<T, ROWS, DP>& st) {
    typedef AttStage<T, ROWS, DP> S;
    const int tid = threadIdx.y * 16 + threadIdx.x;
#pragma unroll
    for (int k = 0; k < S::NC; ++k) {
        const int e = tid + k * TL_ATT_THREADS, r = e / S::CPR, c = (e % S::CPR) * S::VN;
        if (e >= ROWS * S::CPR) break;
#pragma unroll
        for (int i = 0; i < S::VN; i += 4) {
            AttVec<T, 4> piece;
#pragma unroll
            for (int u = 0; u < 4; ++u) piece.v[u] = st.x[k].v[i + u];
            *(AttVec<T, 4>*)(dst + r * ld + c + i) = piece;
        }
    }
}

// Fetch and store at once (tiles loaded where nothing can overlap them).
template <typename T, int ROWS, int DP>
TL_DEV void att_load_rows(T* dst, int ld, const T* src, const View4& v, i64 bi, i64 h, i64 r0, i64 n_rows, i64 d) {
    AttStage<T, ROWS, DP> st;
    att_fetch<T, ROWS, DP>(st, att_vec_ok<T, DP>(src, v, bi, h, d), src, v, bi, h, r0, n_rows, d);
    att_put<T, ROWS, DP>(dst, ld, st);
}

// Forward: thread (tx, ty) owns query rows ty*TM .. +TM (their softmax state and output)
// and, per key tile, keys tx + 16*b of the scores and output dims tx*TD .. +TD. Q and K
// are staged row-major with rows padded by 4 elements: a score step reads 4 dims of TM
// rows (broadcast within the 16 lanes) and of TN keys (16 rows 17 quads apart: no bank
// conflicts). P is stored transposed (a key's TM rows one vector), V row-major. The next
// tile is fetched into registers (AttStage) while the current one is multiplied.
template <typename T, int DP> struct FwdTile {
    typedef FwdCfg<T, DP> C;
    static const int BM = C::BM, BN = C::BN, TM = BM / 16, TN = BN / 16, TD = DP / 16;
    static const int LD = DP + 4, LDP = BM + 4;  // padding against bank conflicts
    static const int VP = TD < 4 ? TD : 4;       // V piece per load (rows are 8-byte aligned at f16)
    // Q, then K or V, then P^T (floats); mirrored by _sdpa_flash in backends/rocm/ops/attention.py
    static const int SMEM = (BM + BN) * LD * (int)sizeof(T) + BN * LDP * (int)sizeof(float);
};

template <typename T, int DP>
TL_DEV void flash_fwd(const AttnShape& p, const View4& qv, const View4& kv, const View4& vv, const View4& ov,
                      const View4& mv, const void* mask, const T* q, const T* k, const T* v, T* out, float* lse) {
    typedef FwdTile<T, DP> F;
    const int BM = F::BM, BN = F::BN, TM = F::TM, TN = F::TN, TD = F::TD, LD = F::LD, LDP = F::LDP, VP = F::VP;
    T* const sq = (T*)att_dyn_smem;
    T* const skv = sq + BM * LD;                   // K, then V of the same tile
    float* const pt = (float*)(skv + BN * LD);
    static_assert((F::BM + F::BN) * F::LD * sizeof(T) % 16 == 0, "P^T must start 16-byte aligned");
    const int tx = threadIdx.x, ty = threadIdx.y;

    // Consecutive blocks share a head (K and V stay in L2), heaviest (latest, under a
    // causal mask) query tiles first within it.
    const i64 nq = (p.L + BM - 1) / BM;
    const i64 qt = nq - 1 - (i64)blockIdx.x % nq, bh = (i64)blockIdx.x / nq;
    const i64 bi = bh / p.hq, h = bh % p.hq, hk = h / (p.hq / p.hk);
    const i64 l0 = qt * BM;

    i64 n_end = p.S;  // keys past the causal diagonal of the tile's last row are never seen
    if (p.causal) {
        const i64 last = (l0 + BM < p.L ? l0 + BM : p.L) - 1 + p.causal_shift + 1;
        n_end = last < n_end ? (last > 0 ? last : 0) : n_end;
    }
    const bool kvec = att_vec_ok<T, DP>(k, kv, bi, hk, p.d), vvec = att_vec_ok<T, DP>(v, vv, bi, hk, p.dv);
    AttStage<T, BN, DP> st;  // the next K or V tile, in flight while the block computes
    if (n_end > 0) att_fetch<T, BN, DP>(st, kvec, k, kv, bi, hk, 0, p.S, p.d);
    att_load_rows<T, BM, DP>(sq, LD, q, qv, bi, h, l0, p.L, p.d);

    float m[TM], ls[TM], acc[TM][TD];
#pragma unroll
    for (int a = 0; a < TM; ++a) {
        m[a] = att_neg_inf(); ls[a] = 0.0f;
#pragma unroll
        for (int c = 0; c < TD; ++c) acc[a][c] = 0.0f;
    }

    for (i64 j0 = 0; j0 < n_end; j0 += BN) {
        __syncthreads();  // the previous tile's V and P are no longer read (first: Q is stored)
        att_put<T, BN, DP>(skv, LD, st);
        __syncthreads();
        att_fetch<T, BN, DP>(st, vvec, v, vv, bi, hk, j0, p.S, p.dv);
        float s[TM][TN];
#pragma unroll
        for (int a = 0; a < TM; ++a)
#pragma unroll
            for (int b = 0; b < TN; ++b) s[a][b] = 0.0f;
#pragma unroll 1  // more unrolling costs registers past the 128 of two blocks per SM
        for (int x = 0; x < DP; x += 4) {
            float qa[TM][4], kb[TN][4];
#pragma unroll
            for (int a = 0; a < TM; ++a) att_lds<T, 4>(qa[a], sq + (ty * TM + a) * LD + x);
#pragma unroll
            for (int b = 0; b < TN; ++b) att_lds<T, 4>(kb[b], skv + (tx + 16 * b) * LD + x);
#pragma unroll
            for (int e = 0; e < 4; ++e)
#pragma unroll
                for (int a = 0; a < TM; ++a)
#pragma unroll
                    for (int b = 0; b < TN; ++b) s[a][b] = fmaf(qa[a][e], kb[b][e], s[a][b]);
        }
        // Tiles wholly inside the scores and before the diagonal need no per-element test.
        const bool inner = !p.mask_kind && j0 + BN <= p.S && l0 + BM <= p.L &&
                           (!p.causal || j0 + BN - 1 <= l0 + p.causal_shift);
#pragma unroll
        for (int a = 0; a < TM; ++a) {
            const i64 l = l0 + ty * TM + a;
            // this row keeps the tile's keys below lim (in range, not past the diagonal)
            i64 lim = p.S - j0;
            if (p.causal && l + p.causal_shift + 1 - j0 < lim) lim = l + p.causal_shift + 1 - j0;
            const int lim_t = l < p.L ? (int)(lim < 0 ? 0 : (lim > BN ? BN : lim)) : 0;
            float mt = att_neg_inf();
#pragma unroll
            for (int b = 0; b < TN; ++b) {
                const int jj = tx + 16 * b;
                float x = s[a][b] * p.scale;
                if (!inner) {
                    if (jj >= lim_t) x = att_neg_inf();
                    else if (p.mask_kind) x = att_mask<T>(x, p, bi, h, l, j0 + jj, mv, mask);
                }
                s[a][b] = x;
                mt = fmaxf(mt, x);
            }
            for (int o = 8; o > 0; o >>= 1) mt = fmaxf(mt, tl_shfl_xor(mt, o, 16));
            const float mn = fmaxf(m[a], mt);
            // Nothing kept yet in this row: keep the sums at 0 (exp(-inf - -inf) is NaN).
            const float base = mn == att_neg_inf() ? 0.0f : mn;
            const float alpha = expf(m[a] - base);
            float rs = 0.0f;
#pragma unroll
            for (int b = 0; b < TN; ++b) { s[a][b] = expf(s[a][b] - base); rs += s[a][b]; }
            ls[a] = ls[a] * alpha + rs;  // per-thread partial sums; reduced once at the end
#pragma unroll
            for (int c = 0; c < TD; ++c) acc[a][c] *= alpha;
            m[a] = mn;
        }
        __syncthreads();  // every thread is done with K
#pragma unroll
        for (int b = 0; b < TN; ++b) {
            AttVec<float, TM> col;
#pragma unroll
            for (int a = 0; a < TM; ++a) col.v[a] = s[a][b];
            *(AttVec<float, TM>*)(pt + (tx + 16 * b) * LDP + ty * TM) = col;
        }
        att_put<T, BN, DP>(skv, LD, st);
        if (j0 + BN < n_end) att_fetch<T, BN, DP>(st, kvec, k, kv, bi, hk, j0 + BN, p.S, p.d);
        __syncthreads();
#pragma unroll 4
        for (int j = 0; j < BN; ++j) {
            float pa[TM], vc[TD];
            const AttVec<float, TM> pj = *(const AttVec<float, TM>*)(pt + j * LDP + ty * TM);
#pragma unroll
            for (int a = 0; a < TM; ++a) pa[a] = pj.v[a];
#pragma unroll
            for (int c = 0; c < TD; c += VP) att_lds<T, VP>(vc + c, skv + j * LD + tx * TD + c);
#pragma unroll
            for (int a = 0; a < TM; ++a)
#pragma unroll
                for (int c = 0; c < TD; ++c) acc[a][c] = fmaf(pa[a], vc[c], acc[a][c]);
        }
    }
#pragma unroll
    for (int a = 0; a < TM; ++a) {
        float tot = ls[a];
        for (int o = 8; o > 0; o >>= 1) tot += tl_shfl_xor(tot, o, 16);
        const i64 l = l0 + ty * TM + a;
        if (l >= p.L) continue;
        const i64 row = (bi * p.hq + h) * p.L + l, ob = ov.offset + bi * ov.s0 + h * ov.s1 + l * ov.s2;
        const float inv = tot > 0.0f ? 1.0f / tot : 0.0f;  // fully masked row: zeros
#pragma unroll
        for (int c = 0; c < TD; ++c)
            if (tx * TD + c < p.dv) out[ob + tx * TD + c] = Tr<T>::store(acc[a][c] * inv);
        if (lse && tx == 0) lse[row] = tot > 0.0f ? m[a] + logf(tot) : att_neg_inf();
    }
}

// Dr[row] = sum_c dout[row, c] * out[row, c]; blocks of 16 x 16, 16 lanes per row.
template <typename T>
TL_DEV void flash_bwd_pre(i64 n_rows, i64 hq, i64 L, i64 dv, const View4& ov, const View4& gv, const T* o,
                          const T* g, float* Dr) {
    const i64 row = (i64)blockIdx.x * 16 + threadIdx.y;
    const bool valid = row < n_rows;
    const i64 l = row % L, bh = row / L, bi = bh / hq, h = bh % hq;
    float s = 0.0f;
    if (valid) {
        const i64 ob = ov.offset + bi * ov.s0 + h * ov.s1 + l * ov.s2;
        const i64 gb = gv.offset + bi * gv.s0 + h * gv.s1 + l * gv.s2;
        for (i64 c = threadIdx.x; c < dv; c += 16) s += Tr<T>::load(o[ob + c * ov.s3]) * Tr<T>::load(g[gb + c * gv.s3]);
    }
    for (int m = 8; m > 0; m >>= 1) s += tl_shfl_xor(s, m, 16);
    if (valid && threadIdx.x == 0) Dr[row] = s;
}

// Backward: a block owns BN keys of one kv head and walks the query tiles of every query
// head that shares it, fetching the next step's Q and dO tiles into registers while a step
// computes. Q, dO, K and V are staged row-major (rows padded by 4 elements, so 4-element
// vector loads stay aligned and lanes reading different rows hit different banks); P and
// dS as f32 rows padded by 8. Each product runs on a 16 x 16 grid of (row group ry, column
// group cx); a 32-lane warp covers 4 ry x 8 cx, so either operand of a product is a few
// distinct vectors per warp (one shared-memory wavefront each). Any lane count is correct;
// nothing is exchanged between lanes. Ownership: S/dP rows ry + 16*a, keys cx + 16*b;
// dK/dV keys ry*TNK .. +TNK, dims cx*TD .. +TD (vector loads of P, dS, Q and dO rows);
// dQ rows ry + 16*a, dims cx*TD .. +TD, then staged in shared memory so the atomics
// cover contiguous addresses.
template <typename T, int DP> struct BwdTile {
    typedef BwdCfg<T, DP> C;
    static const int BN = C::BN, BM = C::BM, TNK = BN / 16, TMQ = BM / 16, TD = DP / 16;
    static const int LD = DP + 4, PLD = BN + 8, VP = TD < 4 ? TD : 4;  // padded rows; vector piece
    static const int UX = TNK > 2 || TD > 4 ? 1 : 2;  // S/dP unrolling within 128 registers
    struct Smem {
        alignas(16) T k[BN * LD];
        alignas(16) T v[BN * LD];
        alignas(16) T qg[2 * BM * LD];  // Q, then dO; after a step's products its dQ tile (f32, pitch LD)
        alignas(16) float p[BM * PLD];
        alignas(16) float ds[BM * PLD];
        float l[BM], dr[BM];
    };
};

template <typename T, int DP>
TL_DEV void flash_bwd(const AttnShape& p, const View4& qv, const View4& kv, const View4& vv, const View4& gv,
                      const View4& dqv, const View4& dkv, const View4& dvv, const View4& mv, const void* mask,
                      const T* q, const T* k, const T* v, const T* g, const float* lse, const float* Dr, float* dq,
                      T* dk, T* dv) {
    typedef BwdTile<T, DP> B;
    const int BN = B::BN, BM = B::BM, TNK = B::TNK, TMQ = B::TMQ, TD = B::TD, LD = B::LD, PLD = B::PLD, VP = B::VP;
    const int UX = B::UX;
    static_assert(2 * sizeof(T) >= sizeof(float), "the dQ tile reuses the Q and dO tiles' space");
    __shared__ typename B::Smem sm;
    T* const sq = sm.qg;
    T* const sg = sm.qg + BM * LD;
    const int tid = threadIdx.y * 16 + threadIdx.x;
    const int ry = ((tid >> 5) & 3) * 4 + ((tid & 31) >> 3), cx = (tid >> 7) * 8 + (tid & 7);

    // Consecutive blocks share a kv head (Q, dO and dq stay in L2); key tiles near the
    // start see the most queries under a causal mask: first within it.
    const i64 nk = (p.S + BN - 1) / BN;
    const i64 kt = (i64)blockIdx.x % nk, bh = (i64)blockIdx.x / nk;
    const i64 bi = bh / p.hk, hkv = bh % p.hk, groups = p.hq / p.hk;
    const i64 j0 = kt * BN;

    i64 i_begin = 0;  // queries before the tile's first key's diagonal see none of its keys
    if (p.causal) {
        const i64 first = j0 - p.causal_shift;
        i_begin = first > 0 ? (first / BM) * BM : 0;
    }
    // One step per (query head of the group, query tile).
    const i64 per_head = i_begin < p.L ? (p.L - i_begin + BM - 1) / BM : 0, n_steps = groups * per_head;
    AttStage<T, BM, DP> stq, stg;
    if (n_steps > 0) {
        const i64 h = hkv * groups;
        att_fetch<T, BM, DP>(stq, att_vec_ok<T, DP>(q, qv, bi, h, p.d), q, qv, bi, h, i_begin, p.L, p.d);
        att_fetch<T, BM, DP>(stg, att_vec_ok<T, DP>(g, gv, bi, h, p.dv), g, gv, bi, h, i_begin, p.L, p.dv);
    }
    att_load_rows<T, BN, DP>(sm.k, LD, k, kv, bi, hkv, j0, p.S, p.d);
    att_load_rows<T, BN, DP>(sm.v, LD, v, vv, bi, hkv, j0, p.S, p.dv);

    // dK[j][x] and dV[j][x] for keys j = ry*TNK + a, dims x = cx*TD + c
    float adk[TNK][TD], adv[TNK][TD];
#pragma unroll
    for (int a = 0; a < TNK; ++a)
#pragma unroll
        for (int c = 0; c < TD; ++c) adk[a][c] = adv[a][c] = 0.0f;

    for (i64 step = 0; step < n_steps; ++step) {
        const i64 h = hkv * groups + step / per_head, i0 = i_begin + (step % per_head) * BM;
        const i64 row0 = (bi * p.hq + h) * p.L;
        __syncthreads();  // the previous step's dQ tile is no longer read (first: K and V are stored)
        att_put<T, BM, DP>(sq, LD, stq);
        att_put<T, BM, DP>(sg, LD, stg);
        if (tid < BM) {
            const bool in = i0 + tid < p.L;
            sm.l[tid] = in ? lse[row0 + i0 + tid] : att_neg_inf();
            sm.dr[tid] = in ? Dr[row0 + i0 + tid] : 0.0f;
        }
        if (step + 1 < n_steps) {
            const i64 hn = hkv * groups + (step + 1) / per_head, in0 = i_begin + ((step + 1) % per_head) * BM;
            att_fetch<T, BM, DP>(stq, att_vec_ok<T, DP>(q, qv, bi, hn, p.d), q, qv, bi, hn, in0, p.L, p.d);
            att_fetch<T, BM, DP>(stg, att_vec_ok<T, DP>(g, gv, bi, hn, p.dv), g, gv, bi, hn, in0, p.L, p.dv);
        }
        __syncthreads();
        // S = Q K^T and dP = dO V^T for rows i = ry + 16*a, keys j = cx + 16*b
        float s[TMQ][TNK], dp[TMQ][TNK];
#pragma unroll
        for (int a = 0; a < TMQ; ++a)
#pragma unroll
            for (int b = 0; b < TNK; ++b) s[a][b] = dp[a][b] = 0.0f;
#pragma unroll UX
        for (int x = 0; x < DP; x += VP) {
            float qa[TMQ][VP], ga[TMQ][VP], kb[TNK][VP], vb[TNK][VP];
#pragma unroll
            for (int a = 0; a < TMQ; ++a) {
                att_lds<T, VP>(qa[a], sq + (ry + 16 * a) * LD + x);
                att_lds<T, VP>(ga[a], sg + (ry + 16 * a) * LD + x);
            }
#pragma unroll
            for (int b = 0; b < TNK; ++b) {
                att_lds<T, VP>(kb[b], sm.k + (cx + 16 * b) * LD + x);
                att_lds<T, VP>(vb[b], sm.v + (cx + 16 * b) * LD + x);
            }
#pragma unroll
            for (int a = 0; a < TMQ; ++a)
#pragma unroll
                for (int b = 0; b < TNK; ++b)
#pragma unroll
                    for (int e = 0; e < VP; ++e) {
                        s[a][b] = fmaf(qa[a][e], kb[b][e], s[a][b]);
                        dp[a][b] = fmaf(ga[a][e], vb[b][e], dp[a][b]);
                    }
        }
#pragma unroll
        for (int a = 0; a < TMQ; ++a) {
            const int r = ry + 16 * a;
            const i64 i = i0 + r;
            const float li = sm.l[r], di = sm.dr[r];
#pragma unroll
            for (int b = 0; b < TNK; ++b) {
                const int cj = cx + 16 * b;
                const i64 j = j0 + cj;
                float pij = 0.0f;
                if (i < p.L && j < p.S && li != att_neg_inf()) {
                    const float x = att_score<T>(s[a][b], p, bi, h, i, j, mv, mask);
                    pij = expf(x - li);  // x = -inf (dropped) gives 0
                }
                sm.p[r * PLD + cj] = pij;
                sm.ds[r * PLD + cj] = pij * (dp[a][b] - di);
            }
        }
        __syncthreads();
        // dV += P^T dO, dK += dS^T Q over this step's rows
#pragma unroll 2
        for (int r = 0; r < BM; ++r) {
            float gx[TD], qx[TD];
            const AttVec<float, TNK> pj = *(const AttVec<float, TNK>*)(sm.p + r * PLD + ry * TNK);
            const AttVec<float, TNK> sj = *(const AttVec<float, TNK>*)(sm.ds + r * PLD + ry * TNK);
#pragma unroll
            for (int c = 0; c < TD; c += VP) {
                att_lds<T, VP>(gx + c, sg + r * LD + cx * TD + c);
                att_lds<T, VP>(qx + c, sq + r * LD + cx * TD + c);
            }
#pragma unroll
            for (int a = 0; a < TNK; ++a)
#pragma unroll
                for (int c = 0; c < TD; ++c) {
                    adv[a][c] = fmaf(pj.v[a], gx[c], adv[a][c]);
                    adk[a][c] = fmaf(sj.v[a], qx[c], adk[a][c]);
                }
        }
        // dQ[i][x] = sum_j dS[i][j] K[j][x] for rows i = ry + 16*a, dims x = cx*TD + c
        float aq[TMQ][TD];
#pragma unroll
        for (int a = 0; a < TMQ; ++a)
#pragma unroll
            for (int c = 0; c < TD; ++c) aq[a][c] = 0.0f;
#pragma unroll 2
        for (int cj = 0; cj < BN; cj += 4) {
            AttVec<float, 4> sv[TMQ];
#pragma unroll
            for (int a = 0; a < TMQ; ++a) sv[a] = *(const AttVec<float, 4>*)(sm.ds + (ry + 16 * a) * PLD + cj);
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                float kx[TD];
#pragma unroll
                for (int c = 0; c < TD; c += VP) att_lds<T, VP>(kx + c, sm.k + (cj + u) * LD + cx * TD + c);
#pragma unroll
                for (int a = 0; a < TMQ; ++a)
#pragma unroll
                    for (int c = 0; c < TD; ++c) aq[a][c] = fmaf(sv[a].v[u], kx[c], aq[a][c]);
            }
        }
        __syncthreads();  // every thread is done with Q and dO: their space takes the dQ tile
        float* const dqs = (float*)sm.qg;
#pragma unroll
        for (int a = 0; a < TMQ; ++a)
#pragma unroll
            for (int c = 0; c < TD; c += VP) {
                AttVec<float, VP> x;
#pragma unroll
                for (int u = 0; u < VP; ++u) x.v[u] = aq[a][c + u];
                *(AttVec<float, VP>*)(dqs + (ry + 16 * a) * LD + cx * TD + c) = x;
            }
        __syncthreads();
        // scale * dQ added atomically (other key tiles add to the same rows), consecutive
        // threads on consecutive dims of a row
        const i64 qb = dqv.offset + bi * dqv.s0 + h * dqv.s1;
        for (int e = tid; e < BM * DP; e += TL_ATT_THREADS) {
            const int r = e / DP, x = e % DP;
            const float val = dqs[r * LD + x];
            if (i0 + r < p.L && x < p.d && val != 0.0f) tl_atomic_add(&dq[qb + (i0 + r) * dqv.s2 + x], val * p.scale);
        }
    }
#pragma unroll
    for (int a = 0; a < TNK; ++a) {
        const i64 j = j0 + ry * TNK + a;
        if (j >= p.S) continue;
        const i64 kb = dkv.offset + bi * dkv.s0 + hkv * dkv.s1 + j * dkv.s2;
        const i64 vb = dvv.offset + bi * dvv.s0 + hkv * dvv.s1 + j * dvv.s2;
#pragma unroll
        for (int c = 0; c < TD; ++c) {
            const int x = cx * TD + c;
            if (x < p.d) dk[kb + x] = Tr<T>::store(adk[a][c] * p.scale);
            if (x < p.dv) dv[vb + x] = Tr<T>::store(adv[a][c]);
        }
    }
}

// ---- tensor-core forward (f16/bf16 at DP 64 or 128, f32 at 64) --------------------------
// Same contract as flash_fwd. A block is (warpSize, MMA_FWD_WARPS) threads; warp w owns query
// rows l0 + RT*16*w .. +RT*16 (RT 16-row tiles, so each K / V fragment read from shared memory
// feeds RT products) and keeps the scores S = Q K^T of a key tile and the output accumulator
// in tensor-core tiles (compat.h Part 3); its Q fragments are re-read from shared memory
// (too many registers otherwise). Softmax runs in f32 on the accumulator elements, in the
// log2 domain (exp2); P is rounded to T as the A operand of P V. An f32 warp owns one
// 16-row tile (RT 1: the f32 fragments take twice the registers). Q and STAGES K and V tiles
// are staged row-major in dynamic shared memory (MmaFwdTile::SMEM bytes, above the 48 KiB of
// static shared memory: the host opts in), rows padded by 8 elements (fragment loads stay
// aligned and rows fall on different banks), by MmaTileCopy's cp.async runs.
#define MMA_FWD_WARPS 4  // forward
template <typename T, int DP, int NW> struct MmaFwdTile {
    static const int RT = sizeof(T) == 4 ? 1 : 2;              // 16-row tiles per warp (f32: registers)
    static const int STAGES = TL_MMA_STAGES;                   // K and V buffers each (the tile header)
    static const int BM = 16 * RT * NW, LD = DP + 8;
    // keys per tile: 64 (half the barriers, online-softmax updates and tile waits per key of
    // 32: 203 -> 212 TFLOP/s on the H100) where Q and STAGES K/V tiles of 64 keys fit the
    // LDS (TL_MMA_LDS_KIB of the tile header): at DP 128, 102 KiB with 2 stages (NVIDIA),
    // 68 KiB with 1 (gfx950: two such workgroups fit its 160 KiB); else 32 (51 KiB: 64 KiB of LDS).
    // Mirrored by sdpa in backends/rocm/ops/attention.py (the platform's mma_lds_bytes).
    static const int BN = (BM + 2 * STAGES * 64) * LD * (int)sizeof(T) <= TL_MMA_LDS_KIB * 1024 ? 64 : 32;
    static const int SMEM = (BM + 2 * STAGES * BN) * LD * (int)sizeof(T);
    static_assert(SMEM <= TL_MMA_LDS_KIB * 1024, "the forward's tiles exceed the LDS of a block");
};
// Shared-memory layouts of the tensor-core kernels' tiles: element (r, c) at at(r, c).
// PaddedRows: rows of LD elements (ldmatrix operands; the padding puts rows on different
// banks). Swizzled128 (below): wgmma operands. PITCH: rows r and r + n lie n * PITCH elements
// apart (n a multiple of 8 for Swizzled128).
template <int LD> struct PaddedRows {
    static const int PITCH = LD;
    static TL_DEV int at(int r, int c) { return r * LD + c; }
};
// Swizzled128: a ROWS x DP tile as column blocks of 128-byte rows (64 16-bit values), each
// block ROWS rows of 128 bytes, the 16-byte chunks of row r permuted by XOR with r % 8
// (wgmma's 128-byte swizzle: the tensor cores read 8 rows of a chunk column from 8
// different bank groups). Blocks must start 1024-byte aligned.
template <typename T, int ROWS, int DP> struct Swizzled128 {
    static const int CH = 16 / (int)sizeof(T), AW = 128 / (int)sizeof(T), PITCH = AW;
    static_assert(DP % AW == 0 && ROWS % 8 == 0, "whole atoms");
    static TL_DEV int at(int r, int c) {
        const int cc = c % AW;
        return c / AW * ROWS * AW + r * AW + ((cc / CH) ^ (r & 7)) * CH + cc % CH;
    }
#if defined(TL_HAS_WGMMA)
    // wgmma descriptors of the tile from p on (tensor_cores_nvidia.h tl_wg_desc_sw128):
    // K-major (its rows along M or N) and MN-major (its rows along K); what to add to them for
    // product c of a K-major operand (16 values along K: column block c / 4, 32 bytes into its
    // rows) and product n of an MN-major one (rows 16n .. 16n+15), in the descriptor's 16-byte
    // units.
    static TL_DEV u64 kmajor(const T* p) { return tl_wg_desc_sw128(p, 16, 1024); }
    static TL_DEV u64 mnmajor(const T* p) { return tl_wg_desc_sw128(p, ROWS * 128, 1024); }
    static TL_DEV u64 kstep(int c) { return (u64)((c / 4 * ROWS * 128 + c % 4 * 32) >> 4); }
    static TL_DEV u64 mnstep(int n) { return (u64)((16 * 128 * n) >> 4); }
#endif
};

// ROWS x DP tile of a (b, h, t, d) view into dst in layout Lay, zero-padded.
// Rows of 16 bytes at once when the view's rows are contiguous, aligned and complete, as
// asynchronous copies: the tile (one cp.async group, whichever way it is copied) is ready
// after the wait for its group and a barrier.
template <typename T, int ROWS, int DP, typename Lay>
TL_DEV void mma_load_tile(T* dst, const T* src, const View4& v, i64 bi, i64 h, i64 r0, i64 n_rows, i64 d) {
    const int tid = threadIdx.y * blockDim.x + threadIdx.x, nt = blockDim.x * blockDim.y;
    const T* base = src + v.offset + bi * v.s0 + h * v.s1 + r0 * v.s2;
    const i64 rows = n_rows - r0;
    const int CH = 16 / sizeof(T);  // elements per 16-byte chunk
    if (d == DP && v.s3 == 1 && v.s2 % CH == 0 && ((u64)base & 15) == 0) {
        for (int e = tid; e < ROWS * DP / CH; e += nt) {
            const int r = e / (DP / CH), c = (e % (DP / CH)) * CH;
            if (r < rows) {
                tl_cp_async16(dst + Lay::at(r, c), base + r * v.s2 + c);
            } else {
                const Vec4<u32> z = {{0u, 0u, 0u, 0u}};
                *(Vec4<u32>*)(dst + Lay::at(r, c)) = z;
            }
        }
        tl_cp_async_commit();
        return;
    }
    for (int e = tid; e < ROWS * DP; e += nt) {
        const int r = e / DP, c = e % DP;
        T x = Tr<T>::store(0.0f);
        if (r < rows && c < d) x = base[r * v.s2 + c * v.s3];
        dst[Lay::at(r, c)] = x;
    }
    tl_cp_async_commit();  // an empty group: every tile is one group (pipelines count them)
}

// The forward's tile copies: a ROWS x DP tile (layout Lay in shared memory) of a view
// whose rows take 16-byte pieces (mma_vec_ok), as cp.async chunks by NT threads. NT is a
// compile-time count, so a copy is PASSES LDGSTS in a row with no loop or branch: one
// shared address register (the passes are immediate offsets), one global pointer that steps
// by a 32-bit byte count (mma_vec_ok bounds ROWS * s2), both derived from the thread index.
// Only a tile that can end past the view's rows (PARTIAL) tests rows: those past it are
// zero-filled by the copy itself (padding must not carry NaN into the sums).
template <typename T, int ROWS, int DP, typename Lay, int NT> struct MmaTileCopy {
    static const int CH = 16 / sizeof(T), CPR = DP / CH, RPP = NT / CPR;  // chunks per row, rows per pass
    static const int PASSES = ROWS / RPP;
    static_assert(NT % (8 * CPR) == 0 && ROWS % RPP == 0, "whole passes of whole groups of 8 rows");
    // pass K: rows K * RPP + (the thread's row); rows_left counts rows from the thread's row on
    template <bool PARTIAL, int K> struct Pass {
        static TL_DEV void run(T* d, const char* g, u32 step, i64 rows_left, const void* any) {
            const int OFF = K * RPP * Lay::PITCH * (int)sizeof(T);
            if (PARTIAL)  // `any`: a readable address for the rows that read nothing
                tl_cp_async16_zfill_at<OFF>(d, K * RPP < rows_left ? (const void*)g : any, K * RPP < rows_left);
            else
                tl_cp_async16_at<OFF>(d, g);
            Pass<PARTIAL, K + 1>::run(d, g + step, step, rows_left, any);
        }
    };
    template <bool PARTIAL> struct Pass<PARTIAL, PASSES> {
        static TL_DEV void run(T*, const char*, u32, i64, const void*) {}
    };
    // rows r0 .. r0+ROWS of the view at base (row stride s2, n_rows rows) into dst; commits
    // one cp.async group
    template <bool PARTIAL> static TL_DEV void copy(T* dst, const T* base, i64 s2, i64 r0, i64 n_rows) {
        const int tid = threadIdx.y * TL_MMA_LANES + threadIdx.x, row = tid / CPR, c = (tid % CPR) * CH;
        const T* g = base + r0 * s2 + ((u32)row * (u32)s2 + c);
        Pass<PARTIAL, 0>::run(dst + Lay::at(row, c), (const char*)g, (u32)(RPP * s2 * (i64)sizeof(T)),
                              n_rows - r0 - row, base);
        tl_cp_async_commit();
    }
};

// Whether rows of (bi, h) of a view (at base) take MmaTileCopy: complete contiguous rows
// (d == DP) whose starts are 16-byte aligned, and a tile spanning under 2^32 bytes.
template <typename T, int ROWS, int DP>
TL_DEV bool mma_vec_ok(const T* base, const View4& v, i64 d) {
    return d == DP && v.s3 == 1 && v.s2 >= 0 && v.s2 % (16 / (int)sizeof(T)) == 0 &&
           v.s2 < (1ll << 32) / ROWS / (i64)sizeof(T) && ((u64)base & 15) == 0;
}

// A ROWS x DP tile of a view into shared memory (layout Lay) by NT threads, for the forward
// kernels' Q, K, V tiles and the Hopper backward's: MmaTileCopy where the view allows it
// (the view's last tile testing rows), else mma_load_tile's element loads. The view's
// (bi, h) base and the check are recomputed per tile from the kernel's arguments: cheaper
// than registers held across the loop.
template <typename T, int ROWS, int DP, typename Lay, int NT>
TL_DEV void mma_copy_tile(T* dst, const T* src, const View4& v, i64 bi, i64 h, i64 r0, i64 n_rows, i64 d) {
    typedef MmaTileCopy<T, ROWS, DP, Lay, NT> C;
    const T* base = src + v.offset + bi * v.s0 + h * v.s1;
    if (!mma_vec_ok<T, ROWS, DP>(base, v, d))
        mma_load_tile<T, ROWS, DP, Lay>(dst, src, v, bi, h, r0, n_rows, d);
    else if (r0 + ROWS <= n_rows)
        C::template copy<false>(dst, base, v.s2, r0, n_rows);
    else
        C::template copy<true>(dst, base, v.s2, r0, n_rows);
}

#if defined(TL_HAS_MMA)
// One key tile's scores to probabilities, for a warp whose rows start at query lw (RT tiles of
// 16) and a tile of 16 * NT keys from j0: s = Q K^T becomes exp2 of the scaled, masked scores
// less the running row max m (log2 units); the partial sums ls are rescaled by alpha where a
// row's max grew, and so must the output accumulator be (mma_rescale) when this returns true
// (some row of the warp grew, which late tiles seldom do). Shared by the mma.sync and the
// wgmma forward.
template <typename T, int RT, int NT>
TL_DEV bool mma_softmax_tile(TlAcc (&s)[RT][NT], float (&m)[RT][TL_MMA_ROW_SLOTS], float (&ls)[RT][TL_MMA_ROW_SLOTS],
                             float (&alpha)[RT][TL_MMA_ROW_SLOTS], const AttnShape& p, i64 bi, i64 h, i64 lw, i64 j0,
                             const View4& mv, const void* mask) {
    const int BN = 16 * NT, WR = 16 * RT;
    // Scores s times f are in log2 units. Unmasked tiles keep the raw products (f =
    // scale * log2(e), folded into the exponent's FFMA below); the per-element path (its
    // own loop, so that tiles inside the allowed region run none of it) scales them
    // (f = 1) only where something can be dropped, or where the scale is not positive
    // (the raw max would not be the scaled one).
    float f = p.scale * TL_LOG2E;
    if (p.mask_kind || !(p.scale > 0.0f) || j0 + BN > p.S || lw + WR > p.L ||
        (p.causal && j0 + BN - 1 > lw + p.causal_shift)) {
        // In tile coordinates (row r, key c; 32-bit, few registers): keep r < nr, c < nc,
        // and under a causal mask c - r <= dg.
        const i64 dg64 = p.causal ? lw + p.causal_shift - j0 : BN;
        const int nr = (int)(p.L - lw < WR ? p.L - lw : WR), nc = (int)(p.S - j0 < BN ? p.S - j0 : BN);
        const int dg = (int)(dg64 < -WR ? -WR : (dg64 > BN ? BN : dg64));
#pragma unroll
        for (int t = 0; t < RT; ++t)
#pragma unroll
            for (int n = 0; n < NT; ++n) {
#pragma unroll
                for (int i = 0; i < TL_MMA_ACC_N; ++i) {
                    const int r = 16 * t + tl_mma_acc_row(i), c = 16 * n + tl_mma_acc_col(i);
                    float x = s[t][n].x[i] * p.scale;
                    if (r >= nr || c >= nc || c - r > dg) x = att_neg_inf();
                    else if (p.mask_kind) x = att_mask<T>(x, p, bi, h, lw + r, j0 + c, mv, mask);
                    s[t][n].x[i] = x * TL_LOG2E;
                }
                // one 16x16 tile's mask reads at a time: all of them in flight at once
                // cost registers the whole loop pays for (spills, NVRTC 13)
                tl_compiler_barrier();
            }
        f = 1.0f;
    }
    // Online softmax. Rows whose max grew rescale their sum (and output) by alpha.
    float base[RT][TL_MMA_ROW_SLOTS];
    bool grew = false;
#pragma unroll
    for (int t = 0; t < RT; ++t) {
        float mt[TL_MMA_ROW_SLOTS];
#pragma unroll
        for (int r = 0; r < TL_MMA_ROW_SLOTS; ++r) mt[r] = att_neg_inf();
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int i = 0; i < TL_MMA_ACC_N; ++i)
                mt[tl_mma_acc_slot(i)] = fmaxf(mt[tl_mma_acc_slot(i)], s[t][n].x[i]);
#pragma unroll
        for (int r = 0; r < TL_MMA_ROW_SLOTS; ++r) {
            const float mn = fmaxf(m[t][r], tl_mma_row_max(mt[r]) * f);
            base[t][r] = mn == att_neg_inf() ? 0.0f : mn;  // nothing kept yet: exp2(-inf - -inf) is NaN
            alpha[t][r] = mn > m[t][r] ? tl_exp2_approx(m[t][r] - base[t][r]) : 1.0f;
            grew |= mn > m[t][r];
            ls[t][r] *= alpha[t][r];
            m[t][r] = mn;
        }
    }
#pragma unroll
    for (int t = 0; t < RT; ++t)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int i = 0; i < TL_MMA_ACC_N; ++i) {
                const float e = tl_exp2_approx(fmaf(s[t][n].x[i], f, -base[t][tl_mma_acc_slot(i)]));
                s[t][n].x[i] = e;
                ls[t][tl_mma_acc_slot(i)] += e;
            }
    return tl_warp_any(grew);
}

// o *= alpha of each element's row (after mma_softmax_tile returned true).
template <int RT, int KD>
TL_DEV void mma_rescale(TlAcc (&o)[RT][KD], const float (&alpha)[RT][TL_MMA_ROW_SLOTS]) {
#pragma unroll
    for (int t = 0; t < RT; ++t)
#pragma unroll
        for (int c = 0; c < KD; ++c)
#pragma unroll
            for (int i = 0; i < TL_MMA_ACC_N; ++i) o[t][c].x[i] *= alpha[t][tl_mma_acc_slot(i)];
}

// The forward's end for a warp whose rows start at query lw: out = o / row sum, lse in
// natural-log units (a row with no key kept: zeros and -inf).
template <typename T, int RT, int KD>
TL_DEV void mma_fwd_finish(TlAcc (&o)[RT][KD], float (&m)[RT][TL_MMA_ROW_SLOTS], float (&ls)[RT][TL_MMA_ROW_SLOTS],
                           const AttnShape& p, i64 bi, i64 h, i64 lw, const View4& ov, T* out, float* lse) {
#pragma unroll
    for (int t = 0; t < RT; ++t) {
        const i64 lt = lw + 16 * t;
        float inv[TL_MMA_ROW_SLOTS];
#pragma unroll
        for (int r = 0; r < TL_MMA_ROW_SLOTS; ++r) {
            ls[t][r] = tl_mma_row_sum(ls[t][r]);
            inv[r] = ls[t][r] > 0.0f ? 1.0f / ls[t][r] : 0.0f;  // a row with no key kept: zeros
        }
#pragma unroll
        for (int c = 0; c < KD; ++c)
#pragma unroll
            for (int i = 0; i < TL_MMA_ACC_N; ++i) {
                const i64 l = lt + tl_mma_acc_row(i);
                const int x = 16 * c + tl_mma_acc_col(i);
                if (l < p.L && x < p.dv)
                    out[ov.offset + bi * ov.s0 + h * ov.s1 + l * ov.s2 + x] =
                        Tr<T>::store(o[t][c].x[i] * inv[tl_mma_acc_slot(i)]);
            }
        if (lse && tl_mma_acc_col(0) == 0) {  // one lane per row writes its slots
#pragma unroll
            for (int r = 0; r < TL_MMA_ROW_SLOTS; ++r) {
                const i64 l = lt + tl_mma_slot_row(r);
                if (l < p.L)
                    lse[(bi * p.hq + h) * p.L + l] =
                        ls[t][r] > 0.0f ? (m[t][r] + log2f(ls[t][r])) / TL_LOG2E : att_neg_inf();
            }
        }
    }
}

#endif

template <typename T, int DP, int NW>
TL_DEV void flash_fwd_mma(const AttnShape& p, const View4& qv, const View4& kv, const View4& vv, const View4& ov,
                          const View4& mv, const void* mask, const T* q, const T* k, const T* v, T* out,
                          float* lse) {
#if defined(TL_HAS_MMA)
    typedef MmaFwdTile<T, DP, NW> F;
    const int RT = F::RT, BM = F::BM, BN = F::BN, LD = F::LD, KD = DP / 16, NT = BN / 16, WR = 16 * RT;
    const int KP = tl_mma_kp<T>;  // K chunks of 16 per product (compat.h)
    static_assert(KD % KP == 0 && NT % KP == 0, "whole products along K");
    T* sq = (T*)att_dyn_smem;
    T* const skv = sq + BM * LD;  // stage b: K at skv + 2 * b * BN * LD, V after it
    // The warp index as the wave's scalar: the branches on the warp's rows (active, the masked
    // tile path) are then uniform ones. Per-lane EXEC regions there met an LLVM 19 miscompile
    // (clang-19, gfx11 bf16): a live-range-split copy of a live-through VGPR (lane / 16, the
    // output's column) placed at the join before the EXEC restore, so it ran with no lane on
    // when the region was skipped (the full-tile path) and every column lost lane / 16. LLVM's
    // prolog placement of split copies (llvm-project PR 117544) is not in LLVM 19.
    const int w = tl_warp_uniform(threadIdx.y);

    // Consecutive blocks share a head (its K and V stay in L2 while they run), heaviest
    // (latest, under a causal mask) query tiles first within it.
    const i64 nq = (p.L + BM - 1) / BM;
    const i64 qt = nq - 1 - (i64)blockIdx.x % nq, bh = (i64)blockIdx.x / nq;
    const i64 bi = bh / p.hq, h = bh % p.hq, hk = h / (p.hq / p.hk);
    const i64 l0 = qt * BM, lw = l0 + WR * w;  // the block's and this warp's first query row
    const T* sqw = sq + WR * w * LD;

    float m[RT][TL_MMA_ROW_SLOTS], ls[RT][TL_MMA_ROW_SLOTS];  // running max (log2 units), per-lane partial sums
    TlAcc o[RT][KD];
#pragma unroll
    for (int t = 0; t < RT; ++t) {
#pragma unroll
        for (int s = 0; s < TL_MMA_ROW_SLOTS; ++s) { m[t][s] = att_neg_inf(); ls[t][s] = 0.0f; }
#pragma unroll
        for (int c = 0; c < KD; ++c) tl_mma_zero(o[t][c]);
    }

    i64 n_end = p.S, w_end = p.S;  // keys past the causal diagonal of the block's / warp's last row
    if (p.causal) {
        const i64 last = (l0 + BM < p.L ? l0 + BM : p.L) + p.causal_shift;
        const i64 wlast = lw + WR + p.causal_shift;
        n_end = last < n_end ? (last > 0 ? last : 0) : n_end;
        w_end = wlast < w_end ? (wlast > 0 ? wlast : 0) : w_end;
    }
    // Q stays. Two stages (NVIDIA): K_{j+1} and V_{j+1} stream in during all of tile j, into
    // the stage tile j-1 used; one barrier per tile. One stage (AMD: the copies are
    // synchronous there): one K and one V buffer, each filled while the
    // other is in use (the FlashAttention-2 pipeline): V_j during Q K_j^T and the softmax,
    // K_{j+1} during P V_j.
    const int NTH = TL_MMA_LANES * NW, STAGES = F::STAGES;
    mma_copy_tile<T, BM, DP, PaddedRows<LD>, NTH>(sq, q, qv, bi, h, l0, p.L, p.d);
    if (n_end > 0) mma_copy_tile<T, BN, DP, PaddedRows<LD>, NTH>(skv, k, kv, bi, hk, 0, p.S, p.d);
    if (STAGES > 1 && n_end > 0)
        mma_copy_tile<T, BN, DP, PaddedRows<LD>, NTH>(skv + BN * LD, v, vv, bi, hk, 0, p.S, p.dv);
    int cur = 0;  // the stage of tile j (element offset in skv)
    for (i64 j0 = 0; j0 < n_end; j0 += BN) {
        T* const sk = skv + cur;
        T* const sv = sk + BN * LD;
        tl_cp_async_wait_all();
        __syncthreads();  // K_j (2 stages: and V_j; first: and Q) are in; every warp is done with tile j-1
        if (STAGES == 1) {
            mma_copy_tile<T, BN, DP, PaddedRows<LD>, NTH>(sv, v, vv, bi, hk, j0, p.S, p.dv);
        } else {
            cur ^= 2 * BN * LD;
            if (j0 + BN < n_end) {
                mma_copy_tile<T, BN, DP, PaddedRows<LD>, NTH>(skv + cur, k, kv, bi, hk, j0 + BN, p.S, p.d);
                mma_copy_tile<T, BN, DP, PaddedRows<LD>, NTH>(skv + cur + BN * LD, v, vv, bi, hk, j0 + BN, p.S, p.dv);
            }
        }
        const bool active = j0 < w_end && lw < p.L;  // else every key of the tile is masked for this warp
        TlAcc s[RT][NT];
        if (active) {
#pragma unroll
            for (int t = 0; t < RT; ++t)
#pragma unroll
                for (int n = 0; n < NT; ++n) tl_mma_zero(s[t][n]);
#pragma unroll
            for (int c = 0; c < KD; c += KP) {  // dims outer: RT * NT independent accumulations in flight
                TlA<T> qa[RT][KP];
#pragma unroll
                for (int t = 0; t < RT; ++t)
#pragma unroll
                    for (int e = 0; e < KP; ++e) tl_mma_load_a(qa[t][e], sqw + 16 * t * LD + 16 * (c + e), LD);
#pragma unroll
                for (int n = 0; n < NT; ++n) {
                    TlB<T> kb[KP];
#pragma unroll
                    for (int e = 0; e < KP; ++e) tl_mma_load_b_nk(kb[e], sk + 16 * n * LD + 16 * (c + e), LD);
#pragma unroll
                    for (int t = 0; t < RT; ++t) tl_mma_k<T>(s[t][n], qa[t], kb);
                }
            }
            float alpha[RT][TL_MMA_ROW_SLOTS];
            if (mma_softmax_tile<T, RT, NT>(s, m, ls, alpha, p, bi, h, lw, j0, mv, mask)) mma_rescale(o, alpha);
        }
        if (STAGES == 1) {
            tl_cp_async_wait_all();
            __syncthreads();  // V_j is in; every warp is done with K_j
            if (j0 + BN < n_end) mma_copy_tile<T, BN, DP, PaddedRows<LD>, NTH>(sk, k, kv, bi, hk, j0 + BN, p.S, p.d);
        }
        if (!active) continue;
#pragma unroll
        for (int n = 0; n < NT; n += KP) {
            TlA<T> pa[RT][KP];
#pragma unroll
            for (int t = 0; t < RT; ++t)
#pragma unroll
                for (int e = 0; e < KP; ++e) tl_mma_acc_to_a<T>(pa[t][e], s[t][n + e]);
#pragma unroll
            for (int c = 0; c < KD; ++c) {
                TlB<T> vb[KP];
#pragma unroll
                for (int e = 0; e < KP; ++e) tl_mma_load_b_kn(vb[e], sv + 16 * (n + e) * LD + 16 * c, LD);
#pragma unroll
                for (int t = 0; t < RT; ++t) tl_mma_k<T>(o[t][c], pa[t], vb);
            }
        }
    }
    mma_fwd_finish<T, RT, KD>(o, m, ls, p, bi, h, lw, ov, out, lse);
#endif
}

// ---- Hopper forward (sm_90a warpgroup products; f16/bf16, DP 64 or 128) ----------------
// Same contract as flash_fwd. A block is WG_FWD_GROUPS warpgroups of 4 warps (threads
// (32, 4 * WG_FWD_GROUPS)); warpgroup g owns query rows l0 + 64g .. +64 and computes, per key
// tile, S = Q K^T (64 x BN) and O += P V (64 x DP) as wgmma products (tensor_cores_nvidia.h):
// Q, K and V are read by the tensor cores straight from shared memory, P from the registers S
// was rounded into. The accumulators are per warp what flash_fwd_mma holds for one 16-row tile,
// so the masking, the online softmax and the end are its (mma_softmax_tile, mma_fwd_finish).
// The products overlap the softmax (FlashAttention-3's pipelining within a warpgroup): S_{j+1}
// is issued before P_j V_j, and its softmax runs while P_j V_j does; O is rescaled and S_{j+1}
// rounded into P_{j+1} once P_j V_j is done. Q and WG_FWD_STAGES K/V tiles are staged in
// 128-byte swizzled rows (Swizzled128) by cp.async: tile j+2 is requested while tile j is
// multiplied. WgFwdTile::SMEM bytes of dynamic shared memory (225 KiB at DP 128, of the 227
// a block may have), mirrored by sdpa in backends/rocm/ops/attention.py (_WG_FWD_*). On the H100
// (b8 h16 s2048 d128 bf16 causal): 296 TFLOP/s with key tiles of 128, 270-273 with 64 (same
// run), against flash_fwd_mma's 215; before the swizzle, with 8 x 8 core-matrix tiles and
// products that ptxas serialized (both fixed at once), 194; waiting for each product before
// the softmax, 190.
#define WG_FWD_GROUPS 2
#define WG_FWD_BN 128  // keys per tile
#define WG_FWD_STAGES 3
template <typename T, int DP> struct WgFwdTile {
    static const int BM = 64 * WG_FWD_GROUPS, BN = WG_FWD_BN, STAGES = WG_FWD_STAGES;
    static const int SMEM = (BM + 2 * STAGES * BN) * DP * (int)sizeof(T) + 1024;  // + alignment slack
};

template <typename T, int DP>
TL_DEV void flash_fwd_wg(const AttnShape& p, const View4& qv, const View4& kv, const View4& vv, const View4& ov,
                         const View4& mv, const void* mask, const T* q, const T* k, const T* v, T* out, float* lse) {
#if defined(TL_HAS_WGMMA)
    typedef WgFwdTile<T, DP> F;
    typedef Swizzled128<T, F::BM, DP> QLay;
    typedef Swizzled128<T, F::BN, DP> KVLay;
    const int BM = F::BM, BN = F::BN, KD = DP / 16, NT = BN / 16, NTH = 128 * WG_FWD_GROUPS, STAGE = 2 * BN * DP;
    const int AW = QLay::AW;  // elements per 128-byte row of a column block (4 products of 16 along K)
    // Swizzled tiles start 1024-byte aligned (the host asks for 1 KiB more)
    T* const sq = (T*)((char*)att_dyn_smem + ((1024 - (tl_smem_addr(att_dyn_smem) & 1023)) & 1023));
    T* const skv = sq + BM * DP;  // stage b: K at skv + b * STAGE, V after it
    // the warp and its group; g from lane 0, so that ptxas knows it is uniform in the warp (else a
    // branch on it around a product is 'divergent', and ptxas serializes every product)
    const int w = threadIdx.y, g = tl_shfl(w / 4, 0);

    // Block order as flash_fwd_mma: a head's query tiles together, heaviest first.
    const i64 nq = (p.L + BM - 1) / BM;
    const i64 qt = nq - 1 - (i64)blockIdx.x % nq, bh = (i64)blockIdx.x / nq;
    const i64 bi = bh / p.hq, h = bh % p.hq, hk = h / (p.hq / p.hk);
    const i64 l0 = qt * BM, lg = l0 + 64 * g, lw = lg + 16 * (w % 4);  // the block's, group's, warp's first row

    float m[1][TL_MMA_ROW_SLOTS], ls[1][TL_MMA_ROW_SLOTS], alpha[1][TL_MMA_ROW_SLOTS];
    TlAcc o[1][KD];
#pragma unroll
    for (int r = 0; r < TL_MMA_ROW_SLOTS; ++r) { m[0][r] = att_neg_inf(); ls[0][r] = 0.0f; }
#pragma unroll
    for (int c = 0; c < KD; ++c) tl_mma_zero(o[0][c]);

    // Tiles of the block (up to its last row's causal diagonal), and of this group: later
    // ones are wholly masked for it (it computes nothing there, but keeps the barriers).
    i64 n_end = p.S, g_end = p.S;
    if (p.causal) {
        const i64 last = (l0 + BM < p.L ? l0 + BM : p.L) + p.causal_shift, glast = lg + 64 + p.causal_shift;
        n_end = last < n_end ? (last > 0 ? last : 0) : n_end;
        g_end = glast < g_end ? (glast > 0 ? glast : 0) : g_end;
    }
    const int tiles = (int)((n_end + BN - 1) / BN), g_tiles = lg < p.L ? (int)((g_end + BN - 1) / BN) : 0;
    // Tile t's K and V: two cp.async groups into stage t % STAGES.
    auto fetch = [&](int t) {
        T* st = skv + (t % F::STAGES) * STAGE;
        mma_copy_tile<T, BN, DP, KVLay, NTH>(st, k, kv, bi, hk, (i64)t * BN, p.S, p.d);
        mma_copy_tile<T, BN, DP, KVLay, NTH>(st + BN * DP, v, vv, bi, hk, (i64)t * BN, p.S, p.dv);
    };
    TlFragA pa[NT];  // P_j, the A operand of P_j V_j
    const u64 qdesc = QLay::kmajor(sq + 64 * g * AW);  // the group's 64 rows
    // S = Q K_t^T, issued after its own fence (as CUTLASS fences each batch) and committed; D is
    // written from scratch (the first product does not accumulate)
    auto scores = [&](TlAcc (&s)[1][NT], int t) {
        const u64 kdesc = KVLay::kmajor(skv + (t % F::STAGES) * STAGE);
        tl_wg_fence();
#pragma unroll
        for (int c = 0; c < KD; ++c) tl_wg_ss<T, BN>(s[0], qdesc + QLay::kstep(c), kdesc + KVLay::kstep(c), c > 0);
        tl_wg_commit();
    };

    // O += P_t V_t, issued after its own fence and committed
    auto values = [&](int t) {
        // V is K x N (keys x dims): MN-major; product n reads keys 16n .. 16n+15
        const u64 vdesc = KVLay::mnmajor(skv + (t % F::STAGES) * STAGE + BN * DP);
        tl_wg_fence();
#pragma unroll
        for (int n = 0; n < NT; ++n) tl_wg_rs<T, DP>(o[0], pa[n], vdesc + KVLay::mnstep(n));
        tl_wg_commit();
    };

    mma_copy_tile<T, BM, DP, QLay, NTH>(sq, q, qv, bi, h, l0, p.L, p.d);
    if (tiles > 0) fetch(0);
    if (tiles > 1) fetch(1);
    if (tiles > 1) tl_cp_async_wait_prior<2>(); else tl_cp_async_wait_all();  // Q and tile 0 are in
    tl_fence_async_smem();  // this thread's copies, visible to the tensor cores after the barrier
    __syncthreads();
    if (g_tiles > 0) {
        TlAcc s[1][NT];
        scores(s, 0);
        tl_wg_wait<0>();
        tl_wg_hold(s[0]);
        mma_softmax_tile<T, 1, NT>(s, m, ls, alpha, p, bi, h, lw, 0, mv, mask);  // o is still 0
#pragma unroll
        for (int n = 0; n < NT; ++n) tl_mma_acc_to_a<T>(pa[n], s[0][n]);
    }
    for (int j = 0; j < tiles; ++j) {
        tl_cp_async_wait_all();  // tile j+1 is in (requested an iteration ago)
        tl_fence_async_smem();
        __syncthreads();         // ... for every thread; every group is done with tile j-1's stage
        if (j + 2 < tiles) fetch(j + 2);
        if (j >= g_tiles) continue;
        // Every product is issued unconditionally within its branch (both uniform): ptxas
        // serializes all products of the kernel where a group may or may not have been issued.
        if (j + 1 < g_tiles) {
            TlAcc s[1][NT];
            scores(s, j + 1);
            values(j);
            tl_wg_wait<1>();  // S_{j+1} is done; P_j V_j may still run
            tl_wg_hold(s[0]);
            const bool grew = mma_softmax_tile<T, 1, NT>(s, m, ls, alpha, p, bi, h, lw, (i64)(j + 1) * BN, mv, mask);
            tl_wg_wait<0>();  // P_j V_j is done: O may be rescaled and P_j's registers reused
            tl_wg_hold(o[0]);
            if (grew) mma_rescale(o, alpha);
#pragma unroll
            for (int n = 0; n < NT; ++n) tl_mma_acc_to_a<T>(pa[n], s[0][n]);
        } else {  // the group's last tile
            values(j);
            tl_wg_wait<0>();
            tl_wg_hold(o[0]);
        }
    }
    mma_fwd_finish<T, 1, KD>(o, m, ls, p, bi, h, lw, ov, out, lse);
#endif
}

// ---- tensor-core backward (f16/bf16 at DP 64 or 128, f32 at 64) -------------------------
// Same contract as flash_bwd. A block is (warpSize, NW) threads and owns BN = 16 * NW keys
// of one kv head; warp w owns keys j0 + 16*w .. +16: its V fragments (registers), its rows of
// S^T = K Q^T, dP^T = V dO^T and of the dK / dV accumulators. P^T and dS^T are formed on the
// accumulator elements and reused as the A operand of dV += P^T dO and dK += dS^T Q. dS^T is
// also stored (as T) to shared memory, where every warp reads it back transposed for its
// share of dQ = dS K, added atomically to the f32 dq (other key tiles add to the same rows).
// Q, dO, lse and Dr of a step are staged MMA_BWD_STAGES (2) deep: a step's tiles are
// requested as soon as the step two back is done with its stage (mid-step), so they have
// a step and a half to land. Shared memory: MmaBwdTile::SMEM bytes of dynamic shared
// memory (at DP 128: 56.5 KiB with 4 warps, 78.5 KiB with 8; above the 48 KiB of static shared
// memory: the host opts in), mirrored by sdpa_backward in backends/rocm/ops/attention.py.
#define MMA_BWD_STAGES 2
template <typename T, int DP, int NW> struct MmaBwdTile {
    static const int BN = 16 * NW;            // keys per block
    static const int BM = DP > 64 || sizeof(T) == 4 ? 32 : 64;  // query rows per step
    // padded rows (fragment loads stay aligned; rows fall on different banks): 8 elements,
    // dS^T's 16 bytes (f32 at DP 64 with 4 warps then fits 64 KiB of LDS: 63.5 KiB)
    static const int LD = DP + 8, LDS = BM + 16 / (int)sizeof(T), ST = MMA_BWD_STAGES;
    // dQ (BM x DP) as 16x16 tiles: warp w takes row tile w % RT and every QW-th dim tile
    static const int RT = BM / 16, QW = NW / RT, CPW = DP / 16 / QW;
    struct Smem {
        alignas(16) T k[BN * LD];
        alignas(16) T qg[ST][2 * BM * LD];  // per stage Q then dO of a step; V is staged here first
        alignas(16) T ds[BN * LDS];         // dS^T of the step: keys x rows
        alignas(16) float lse2[ST][BM];     // lse in log2 units (+inf: row contributes nothing)
        alignas(16) float dr[ST][BM];
    };
    static const int SMEM = (BN * LD + ST * 2 * BM * LD + BN * LDS) * (int)sizeof(T) + ST * 2 * BM * (int)sizeof(float);
};
// Backward warps, 16 keys each: 8 (128 keys; each staged Q / dO tile then serves twice the keys:
// fwd+bwd 149 -> 159 TFLOP/s on the H100) where their tiles fit the LDS (78.5 KiB at DP 128,
// 90.5 KiB f32 at DP 64: NVIDIA, gfx950), else 4 (64 KiB of LDS). Mirrored by sdpa_backward.
template <typename T, int DP>
constexpr int mma_bwd_warps = MmaBwdTile<T, DP, 8>::SMEM <= TL_MMA_LDS_KIB * 1024 ? 8 : 4;

// The Q or dO tile of a step: thread tid copies the 16-byte chunks of row tid / CPR + k*RS,
// k < NC, at element column (tid % CPR) * CH, so that per step a thread issues NC copies at
// fixed offsets (its first chunk's, plus k * RS rows) instead of a loop of divisions and
// 64-bit index math. Views whose rows cannot be copied in 16-byte pieces take element loads.
template <typename T, int ROWS, int DP, int NT> struct MmaRows {
    static const int CH = 16 / (int)sizeof(T), CPR = DP / CH, RS = NT / CPR, NC = ROWS / RS;
    static_assert(NT % CPR == 0 && ROWS % RS == 0, "chunks per thread");
    int row, col;  // this thread's first chunk
    TL_DEV MmaRows(int tid) : row(tid / CPR), col((tid % CPR) * CH) {}
    // rows r0 .. r0+ROWS of head h into dst (row stride ld); rows past n_rows are zeros
    TL_DEV void load(T* dst, int ld, const T* src, const View4& v, i64 bi, i64 h, i64 r0, i64 n_rows, i64 d) const {
        const T* base = src + v.offset + bi * v.s0 + h * v.s1 + r0 * v.s2;
        const i64 rows = n_rows - r0;
        // (RS rows of the view apart fit an int: checked with the rest, uniform per block)
        if (d == DP && v.s3 == 1 && v.s2 % CH == 0 && v.s2 * RS < 0x7fffffff && ((u64)base & 15) == 0) {
            const T* g = base + row * v.s2 + col;
            T* sdst = dst + row * ld + col;
            const int step = RS * (int)v.s2;
            // rows past the end: zeros, their (unread) source clamped to the tile's first row
#pragma unroll
            for (int k = 0; k < NC; ++k) {
                const bool in = row + k * RS < rows;
                tl_cp_async16_zfill(sdst + k * RS * ld, in ? g + k * step : base, in);
            }
            return;
        }
        const int tid = row * CPR + col / CH;
        for (int e = tid; e < ROWS * DP; e += NT) {
            const int r = e / DP, c = e % DP;
            T x = Tr<T>::store(0.0f);
            if (r < rows && c < d) x = base[r * v.s2 + c * v.s3];
            dst[r * ld + c] = x;
        }
    }
};

#if defined(TL_HAS_MMA)
// A step of the tensor-core backward for a warp holding keys jw .. jw+15 (the accumulator
// rows) and query rows i0 .. i0+BM (BM = 16 MT, the columns): s = K Q^T becomes P^T =
// exp2(scaled, masked s - lse) and dpt = dP^T = V dO^T becomes dS^T = P^T (dP^T - Dr), from
// the step's rows' lse (log2 units; +inf: the row contributes nothing) and Dr in slse, sdr.
// Shared by flash_bwd_mma and flash_bwd_wg.
template <typename T, int MT>
TL_DEV void mma_bwd_probs(TlAcc (&s)[MT], TlAcc (&dpt)[MT], const AttnShape& p, i64 bi, i64 h, i64 i0, i64 jw,
                          const float* slse, const float* sdr, const View4& mv, const void* mask) {
    const int BM = 16 * MT;
    const float sc = p.scale * TL_LOG2E;
    // Scores in log2 units; the per-element path (its own loop, so that steps inside the
    // allowed region run none of it) only where something can be dropped.
    if (p.mask_kind) {
#pragma unroll
        for (int n = 0; n < MT; ++n)
#pragma unroll
            for (int i = 0; i < TL_MMA_ACC_N; ++i) {
                const i64 l = i0 + 16 * n + tl_mma_acc_col(i), j = jw + tl_mma_acc_row(i);
                s[n].x[i] = (l < p.L && j < p.S) ? att_score<T>(s[n].x[i], p, bi, h, l, j, mv, mask) * TL_LOG2E
                                                 : att_neg_inf();
            }
    } else if (jw + 16 > p.S || i0 + BM > p.L || (p.causal && jw + 15 > i0 + p.causal_shift)) {
        // Bounds and the causal diagonal only (the diagonal steps of a causal mask): in
        // offsets within the step, row rr of the step keeps key jj of the warp when
        // rr < nr, jj < nj and jj - rr <= dg.
        const i64 dg64 = p.causal ? i0 + p.causal_shift - jw : (i64)BM;
        const int nr = (int)(p.L - i0 < BM ? p.L - i0 : BM), nj = (int)(p.S - jw < 16 ? p.S - jw : 16);
        const int dg = (int)(dg64 < -BM ? -BM : (dg64 > BM ? BM : dg64));
#pragma unroll
        for (int n = 0; n < MT; ++n)
#pragma unroll
            for (int i = 0; i < TL_MMA_ACC_N; ++i) {
                const int rr = 16 * n + tl_mma_acc_col(i), jj = tl_mma_acc_row(i);
                s[n].x[i] = (rr < nr && jj < nj && jj - rr <= dg) ? s[n].x[i] * sc : att_neg_inf();
            }
    } else {
#pragma unroll
        for (int n = 0; n < MT; ++n)
#pragma unroll
            for (int i = 0; i < TL_MMA_ACC_N; ++i) s[n].x[i] *= sc;
    }
#pragma unroll
    for (int n = 0; n < MT; ++n)
#pragma unroll
        for (int i = 0; i < TL_MMA_ACC_N; ++i) {
            const int r = 16 * n + tl_mma_acc_col(i);  // the step's query row
            // dropped (-inf) or dead row (+inf lse2): 0
            const float pij = tl_exp2_approx(s[n].x[i] - slse[r]);
            s[n].x[i] = pij;
            dpt[n].x[i] = pij * (dpt[n].x[i] - sdr[r]);
        }
}

// dq rows l .. l+15 of head h, dims x0 + 16 XS t (t < CT) += the warp's tiles aq[t],
// atomically (other key tiles add to the same rows).
template <int DP, int CT, int XS>
TL_DEV void mma_bwd_add_dq(float* dq, const View4& dqv, const TlAcc (&aq)[CT], const AttnShape& p, i64 bi, i64 h,
                           i64 l, int x0) {
    float* const dqt = dq + dqv.offset + bi * dqv.s0 + h * dqv.s1 + l * dqv.s2;
    // complete tiles (all but the last rows; d == DP) with 8-byte aligned rows: vector adds
    if (l + 16 <= p.L && p.d == DP && (dqv.s2 & 1) == 0 && ((u64)dqt & 7) == 0) {
#pragma unroll
        for (int t = 0; t < CT; ++t) tl_mma_atomic_add_tile(dqt + x0 + 16 * XS * t, dqv.s2, aq[t], 1.0f);
    } else {
#pragma unroll
        for (int t = 0; t < CT; ++t) {
            const int x = x0 + 16 * XS * t;
            tl_mma_atomic_add_acc(dqt + x, dqv.s2, aq[t], 1.0f, (int)(p.L - l < 16 ? p.L - l : 16),
                                  (int)(p.d - x < 16 ? p.d - x : 16));
        }
    }
}

// The backward's end for a warp holding keys jw .. jw+15: dk = scale * its accumulator, dv.
template <typename T, int KD>
TL_DEV void mma_bwd_finish(const TlAcc (&adk)[KD], const TlAcc (&adv)[KD], const AttnShape& p, i64 bi, i64 hkv,
                           i64 jw, const View4& dkv, const View4& dvv, T* dk, T* dv) {
#pragma unroll
    for (int c = 0; c < KD; ++c)
#pragma unroll
        for (int i = 0; i < TL_MMA_ACC_N; ++i) {
            const i64 j = jw + tl_mma_acc_row(i);
            const int x = 16 * c + tl_mma_acc_col(i);
            if (j >= p.S) continue;
            if (x < p.d)
                dk[dkv.offset + bi * dkv.s0 + hkv * dkv.s1 + j * dkv.s2 + x] = Tr<T>::store(adk[c].x[i] * p.scale);
            if (x < p.dv) dv[dvv.offset + bi * dvv.s0 + hkv * dvv.s1 + j * dvv.s2 + x] = Tr<T>::store(adv[c].x[i]);
        }
}
#endif

template <typename T, int DP, int NW>
TL_DEV void flash_bwd_mma(const AttnShape& p, const View4& qv, const View4& kv, const View4& vv, const View4& gv,
                          const View4& dqv, const View4& dkv, const View4& dvv, const View4& mv, const void* mask,
                          const T* q, const T* k, const T* v, const T* g, const float* lse, const float* Dr,
                          float* dq, T* dk, T* dv) {
#if defined(TL_HAS_MMA)
    typedef MmaBwdTile<T, DP, NW> B;
    const int BN = B::BN, BM = B::BM, LD = B::LD, LDS = B::LDS, KD = DP / 16, MT = BM / 16, ST = B::ST;
    const int RT = B::RT, QW = B::QW, CPW = B::CPW;
    static_assert(NW % (BM / 16) == 0 && (DP / 16) % (NW / (BM / 16)) == 0 && BN <= ST * 2 * BM, "tile split");
    static_assert(B::SMEM <= TL_MMA_LDS_KIB * 1024, "the backward's tiles exceed the LDS of a block");
    const int KP = tl_mma_kp<T>;  // K chunks of 16 per product (compat.h)
    static_assert(KD % KP == 0 && MT % KP == 0 && BN / 16 % KP == 0, "whole products along K");
    static_assert(sizeof(typename B::Smem) == B::SMEM, "MmaBwdTile::SMEM (mirrored by the host)");
    typename B::Smem& sm = *(typename B::Smem*)att_dyn_smem;
    const int w = threadIdx.y, tid = threadIdx.y * TL_MMA_LANES + threadIdx.x;
    const MmaRows<T, BM, DP, TL_MMA_LANES * NW> rows(tid);

    // Consecutive blocks share a kv head (its Q, dO and dq rows stay in L2 while they run);
    // key tiles near the start see the most queries under a causal mask: first within it.
    const i64 nk = (p.S + BN - 1) / BN;
    const i64 kt = (i64)blockIdx.x % nk, bh = (i64)blockIdx.x / nk;
    const i64 bi = bh / p.hk, hkv = bh % p.hk, groups = p.hq / p.hk;
    const i64 j0 = kt * BN, jw = j0 + 16 * w;  // the block's and this warp's first key

    mma_load_tile<T, BN, DP, PaddedRows<LD> >(sm.k, k, kv, bi, hkv, j0, p.S, p.d);
    mma_load_tile<T, BN, DP, PaddedRows<LD> >(sm.qg[0], v, vv, bi, hkv, j0, p.S, p.dv);
    tl_cp_async_wait_all();
    __syncthreads();
    TlA<T> vf[KD];
#pragma unroll
    for (int c = 0; c < KD; ++c) tl_mma_load_a(vf[c], sm.qg[0] + 16 * w * LD + 16 * c, LD);
    TlAcc adk[KD], adv[KD];
#pragma unroll
    for (int c = 0; c < KD; ++c) { tl_mma_zero(adk[c]); tl_mma_zero(adv[c]); }

    i64 i_begin = 0;  // query tiles wholly above the diagonal of the block's first key see none of its keys
    if (p.causal) {
        const i64 first = j0 - p.causal_shift;
        i_begin = first > 0 ? (first / BM) * BM : 0;
    }
    // Steps walk (query head of the group, query tile); each stages its Q, dO, lse and Dr.
    // (hh, i0): the step computed; (lh, li): the next step to request.
    int hh = i_begin < p.L ? 0 : (int)groups, lh = hh;  // query head within the group
    i64 i0 = i_begin, li = i0;
    float nl = att_neg_inf(), nd = 0.0f;  // a requested step's lse and Dr of row tid, stored later
    // Request the step (lh, li) into stage slot: one cp.async group per call, empty when no
    // step is left (the waits count groups); lse and Dr of row tid into nl, nd.
    auto request = [&](int slot) {
        if (lh < groups) {
            const i64 h = hkv * groups + lh, row0 = (bi * p.hq + h) * p.L;
            rows.load(sm.qg[slot], LD, q, qv, bi, h, li, p.L, p.d);
            rows.load(sm.qg[slot] + BM * LD, LD, g, gv, bi, h, li, p.L, p.dv);
            const bool in = tid < BM && li + tid < p.L;
            nl = in ? lse[row0 + li + tid] : att_neg_inf();
            nd = in ? Dr[row0 + li + tid] : 0.0f;
            li += BM;
            if (li >= p.L) { li = i_begin; ++lh; }
        }
        tl_cp_async_commit();
    };
    auto stage_rows = [&](int slot) {  // nl, nd of the last request into its slot
        if (tid < BM) {
            sm.lse2[slot][tid] = nl == att_neg_inf() ? -att_neg_inf() : nl * TL_LOG2E;
            sm.dr[slot][tid] = nd;
        }
    };
    __syncthreads();  // every warp holds its V fragments: the staging area becomes Q and dO
#pragma unroll
    for (int s = 0; s < ST; ++s) { request(s); stage_rows(s); }
    int slot = 0;
    while (hh < groups) {
        const i64 h = hkv * groups + hh;
        const T* sq = sm.qg[slot];
        const T* sg = sm.qg[slot] + BM * LD;
        const float* slse = sm.lse2[slot];
        const float* sdr = sm.dr[slot];
        tl_cp_async_wait_prior<ST - 1>();  // this step's group (the later ones may be in flight)
        __syncthreads();  // the step's tiles are in; every warp is done with the previous dS
        // Rows past the causal diagonal of all this warp's keys: P = dS = 0 here.
        const bool active = jw < p.S && !(p.causal && jw > i0 + BM - 1 + p.causal_shift);
        TlAcc s[MT], dpt[MT];
#pragma unroll
        for (int n = 0; n < MT; ++n) { tl_mma_zero(s[n]); tl_mma_zero(dpt[n]); }
        if (active) {
#pragma unroll
            for (int c = 0; c < KD; c += KP) {
                TlA<T> ka[KP];
#pragma unroll
                for (int e = 0; e < KP; ++e) tl_mma_load_a(ka[e], sm.k + 16 * w * LD + 16 * (c + e), LD);
#pragma unroll
                for (int n = 0; n < MT; ++n) {
                    TlB<T> qb[KP], gb[KP];
#pragma unroll
                    for (int e = 0; e < KP; ++e) tl_mma_load_b_nk(qb[e], sq + 16 * n * LD + 16 * (c + e), LD);
                    tl_mma_k<T>(s[n], ka, qb);
#pragma unroll
                    for (int e = 0; e < KP; ++e) tl_mma_load_b_nk(gb[e], sg + 16 * n * LD + 16 * (c + e), LD);
                    tl_mma_k<T>(dpt[n], vf + c, gb);
                }
            }
            mma_bwd_probs<T, MT>(s, dpt, p, bi, h, i0, jw, slse, sdr, mv, mask);
            // dV += P^T dO, dK += dS^T Q
#pragma unroll
            for (int n = 0; n < MT; n += KP) {
                TlA<T> pa[KP], da[KP];
#pragma unroll
                for (int e = 0; e < KP; ++e) {
                    tl_mma_acc_to_a<T>(pa[e], s[n + e]);
                    tl_mma_acc_to_a<T>(da[e], dpt[n + e]);
                }
#pragma unroll
                for (int c = 0; c < KD; ++c) {
                    TlB<T> gb[KP], qb[KP];
#pragma unroll
                    for (int e = 0; e < KP; ++e) tl_mma_load_b_kn(gb[e], sg + 16 * (n + e) * LD + 16 * c, LD);
                    tl_mma_k<T>(adv[c], pa, gb);
#pragma unroll
                    for (int e = 0; e < KP; ++e) tl_mma_load_b_kn(qb[e], sq + 16 * (n + e) * LD + 16 * c, LD);
                    tl_mma_k<T>(adk[c], da, qb);
                }
            }
        }
        // dS^T is stored scaled (dQ's factor, half the multiplies of scaling the dQ tiles)
#pragma unroll
        for (int n = 0; n < MT; ++n) {
#pragma unroll
            for (int i = 0; i < TL_MMA_ACC_N; ++i) dpt[n].x[i] *= p.scale;
            tl_mma_store_acc<T>(sm.ds + 16 * w * LDS + 16 * n, LDS, dpt[n]);
        }
        __syncthreads();  // dS^T is complete; every warp is done with this stage
        // The step ST ahead streams into the freed stage during dQ; its lse and Dr are read
        // into registers now and stored after dQ (no wait on global memory before it).
        request(slot);
        // dQ[rows of tile rt][dims of tiles w / RT + QW * t] += (scale dS) K over the block's
        // keys. Every output tile at once (registers of S and dP^T, dead now): CPW independent
        // accumulations in flight instead of one dependent chain, dS^T read once per key tile.
        const int rt = w % RT;
        const i64 l = i0 + 16 * rt;
        TlAcc aq[CPW];
#pragma unroll
        for (int t = 0; t < CPW; ++t) tl_mma_zero(aq[t]);
#pragma unroll
        for (int kc = 0; kc < BN / 16; kc += KP) {
            TlA<T> da[KP];
#pragma unroll
            for (int e = 0; e < KP; ++e) tl_mma_load_a_t(da[e], sm.ds + 16 * (kc + e) * LDS + 16 * rt, LDS);
#pragma unroll
            for (int t = 0; t < CPW; ++t) {
                TlB<T> kb[KP];
#pragma unroll
                for (int e = 0; e < KP; ++e)
                    tl_mma_load_b_kn(kb[e], sm.k + 16 * (kc + e) * LD + 16 * (w / RT + QW * t), LD);
                tl_mma_k<T>(aq[t], da, kb);
            }
        }
        mma_bwd_add_dq<DP, CPW, QW>(dq, dqv, aq, p, bi, h, l, 16 * (w / RT));
        stage_rows(slot);  // read after the next barrier, by the step that uses this stage
        slot = slot + 1 == ST ? 0 : slot + 1;
        i0 += BM;
        if (i0 >= p.L) { i0 = i_begin; ++hh; }
    }
    mma_bwd_finish<T, KD>(adk, adv, p, bi, hkv, jw, dkv, dvv, dk, dv);
#endif
}

// ---- Hopper tensor-core backward (sm_90a: wgmma) ------------------------------------------
// Same contract as flash_bwd. A block is two warpgroups (8 warps) and owns BN = 128 keys of one
// kv head: group g keys j0 + 64g .. +64, its warp w % 4 16 of them (jw, as flash_bwd_mma's
// warps, so the per-warp accumulator helpers apply). A step is BM = 8192 / DP query rows (64 at
// DP 128, 128 at DP 64) of one query head:
//   S^T = K Q^T, dP^T = V dO^T   warpgroup products, K, V, Q, dO in 128-byte-swizzled tiles
//   P^T, dS^T                    mma_bwd_probs on the accumulators
//   dV += P^T dO, dK += dS^T Q   P^T and dS^T from registers, dO and Q read MN-major
//   dQ = (scale dS) K            from dS^T stored to shared memory (read MN-major): group g
//                                a 64 x 64 tile (rows 64 (g % QM), dims 64 (g / QM)), added
//                                atomically to dq
// Q and dO (lse and Dr) are staged WG_BWD_STAGES deep: a step requests the step ST - 1 ahead
// into the stage of the step before, whose products every group waited for before its barrier.
#define WG_BWD_BN 128
#define WG_BWD_STAGES 3
template <typename T, int DP> struct WgBwdTile {
    static const int BN = WG_BWD_BN, BM = 8192 / DP, ST = WG_BWD_STAGES, QM = BM / 64;
    // K, V; ST times Q and dO; dS^T; ST rows of lse and of Dr; 1 KiB to align the tiles (every
    // tile is a multiple of 1 KiB). Mirrored by sdpa_backward in backends/rocm/ops/attention.py.
    static const int SMEM = (2 * BN * DP + ST * 2 * BM * DP + BN * BM) * (int)sizeof(T) + 2 * ST * BM * 4 + 1024;
};

#if defined(TL_HAS_WGMMA)
// An accumulator tile times scale, rounded to T, into rows r0 .. r0+15, columns c0 .. c0+15
// of a tile in layout Lay: on NVIDIA elements i and i + 1 (i even) are a column pair, one word.
template <typename T, typename Lay> TL_DEV void mma_store_acc_at(T* tile, int r0, int c0, const TlAcc& a, float scale) {
#pragma unroll
    for (int i = 0; i < TL_MMA_ACC_N; i += 2)
        *(u32*)(tile + Lay::at(r0 + tl_mma_acc_row(i), c0 + tl_mma_acc_col(i))) =
            tl_pack2<T>(a.x[i] * scale, a.x[i + 1] * scale);
}
#endif

template <typename T, int DP>
TL_DEV void flash_bwd_wg(const AttnShape& p, const View4& qv, const View4& kv, const View4& vv, const View4& gv,
                         const View4& dqv, const View4& dkv, const View4& dvv, const View4& mv, const void* mask,
                         const T* q, const T* k, const T* v, const T* g, const float* lse, const float* Dr,
                         float* dq, T* dk, T* dv) {
#if defined(TL_HAS_WGMMA)
    typedef WgBwdTile<T, DP> B;
    const int BN = B::BN, BM = B::BM, ST = B::ST, QM = B::QM, KD = DP / 16, MT = BM / 16, NTH = 256;
    typedef Swizzled128<T, BN, DP> KLay;  // K, V: keys x dims
    typedef Swizzled128<T, BM, DP> QLay;  // Q, dO: rows x dims
    typedef Swizzled128<T, BN, BM> SLay;  // dS^T: keys x rows
    const int AW = KLay::AW;              // elements per 128-byte row of a column block
    T* const sk = (T*)((char*)att_dyn_smem + ((1024 - (tl_smem_addr(att_dyn_smem) & 1023)) & 1023));
    T* const sv = sk + BN * DP;
    T* const sqg = sv + BN * DP;  // stage s: Q at sqg + 2 s BM DP, dO after it
    T* const sds = sqg + ST * 2 * BM * DP;
    float* const slse = (float*)(sds + BN * BM);  // stage s: BM lse (log2 units; +inf: the row contributes nothing)
    float* const sdr = slse + ST * BM;            // stage s: BM Dr
    // the group from lane 0: known to be warp-uniform (see flash_fwd_wg)
    const int w = threadIdx.y, grp = tl_shfl(w / 4, 0), tid = w * TL_MMA_LANES + threadIdx.x;

    // Block order as flash_bwd_mma: a kv head's key tiles together, the first (most queries
    // under a causal mask) first.
    const i64 nk = (p.S + BN - 1) / BN;
    const i64 kt = (i64)blockIdx.x % nk, bh = (i64)blockIdx.x / nk;
    const i64 bi = bh / p.hk, hkv = bh % p.hk, groups = p.hq / p.hk;
    const i64 j0 = kt * BN, jw = j0 + 64 * grp + 16 * (w % 4);  // the block's and this warp's first key

    mma_copy_tile<T, BN, DP, KLay, NTH>(sk, k, kv, bi, hkv, j0, p.S, p.d);
    mma_copy_tile<T, BN, DP, KLay, NTH>(sv, v, vv, bi, hkv, j0, p.S, p.dv);
    TlAcc adk[KD], adv[KD];
#pragma unroll
    for (int c = 0; c < KD; ++c) { tl_mma_zero(adk[c]); tl_mma_zero(adv[c]); }

    i64 i_begin = 0;  // query tiles wholly above the diagonal of the block's first key see none of its keys
    if (p.causal) {
        const i64 first = j0 - p.causal_shift;
        i_begin = first > 0 ? (first / BM) * BM : 0;
    }
    // Steps walk (query head of the group, query tile) as flash_bwd_mma's: (hh, i0) the step
    // computed, (lh, li) the next step to request.
    int hh = i_begin < p.L ? 0 : (int)groups, lh = hh;
    i64 i0 = i_begin, li = i0;
    float nl = att_neg_inf(), nd = 0.0f;  // a requested step's lse and Dr of row tid, staged later
    // Request the step (lh, li) into stage slot: two cp.async groups (Q, dO; empty when no step
    // is left: the waits count groups); lse and Dr of row tid into nl, nd.
    auto request = [&](int slot) {
        T* const st = sqg + slot * 2 * BM * DP;
        if (lh < groups) {
            const i64 h = hkv * groups + lh, row0 = (bi * p.hq + h) * p.L;
            mma_copy_tile<T, BM, DP, QLay, NTH>(st, q, qv, bi, h, li, p.L, p.d);
            mma_copy_tile<T, BM, DP, QLay, NTH>(st + BM * DP, g, gv, bi, h, li, p.L, p.dv);
            const bool in = tid < BM && li + tid < p.L;
            nl = in ? lse[row0 + li + tid] : att_neg_inf();
            nd = in ? Dr[row0 + li + tid] : 0.0f;
            li += BM;
            if (li >= p.L) { li = i_begin; ++lh; }
        } else {
            tl_cp_async_commit();
            tl_cp_async_commit();
        }
    };
    auto stage_rows = [&](int slot) {  // nl, nd of the last request into its slot
        if (tid < BM) {
            slse[slot * BM + tid] = nl == att_neg_inf() ? -att_neg_inf() : nl * TL_LOG2E;
            sdr[slot * BM + tid] = nd;
        }
    };
#pragma unroll
    for (int s = 0; s < ST - 1; ++s) { request(s); stage_rows(s); }
    // Operands read K-major: K, V (the group's 64 keys), Q, dO of S^T and dP^T; MN-major: Q, dO
    // of dV and dK, dS^T (the group's 64 rows) and K (its 64 dims) of dQ.
    const u64 kdesc = KLay::kmajor(sk + 64 * grp * AW), vdesc = KLay::kmajor(sv + 64 * grp * AW);
    const u64 dsdesc = SLay::mnmajor(sds + (grp % QM) * BN * AW), kndesc = KLay::mnmajor(sk + (grp / QM) * BN * AW);
    int slot = 0;
    while (hh < groups) {
        const i64 h = hkv * groups + hh;
        T* const sq = sqg + slot * 2 * BM * DP;
        T* const sg = sq + BM * DP;
        tl_cp_async_wait_prior<2 * (ST - 2)>();  // this step's groups (later steps' may be in flight)
        tl_fence_async_smem();
        __syncthreads();  // the step's tiles are in; every group is done with the step before
        const int ahead = slot == 0 ? ST - 1 : slot - 1;  // the previous step's stage
        request(ahead);

        TlAcc st[MT], dpt[MT];
        {
            const u64 qdesc = QLay::kmajor(sq), gdesc = QLay::kmajor(sg);
            tl_wg_fence();
#pragma unroll
            for (int c = 0; c < KD; ++c) tl_wg_ss<T, BM>(st, kdesc + KLay::kstep(c), qdesc + QLay::kstep(c), c > 0);
#pragma unroll
            for (int c = 0; c < KD; ++c) tl_wg_ss<T, BM>(dpt, vdesc + KLay::kstep(c), gdesc + QLay::kstep(c), c > 0);
            tl_wg_commit();
        }
        tl_wg_wait<0>();
        tl_wg_hold(st);
        tl_wg_hold(dpt);
        mma_bwd_probs<T, MT>(st, dpt, p, bi, h, i0, jw, slse + slot * BM, sdr + slot * BM, mv, mask);
        // dV += P^T dO, dK += dS^T Q
        TlFragA pa[MT], da[MT];
#pragma unroll
        for (int n = 0; n < MT; ++n) { tl_mma_acc_to_a<T>(pa[n], st[n]); tl_mma_acc_to_a<T>(da[n], dpt[n]); }
        {
            const u64 gndesc = QLay::mnmajor(sg), qndesc = QLay::mnmajor(sq);
            tl_wg_fence();
#pragma unroll
            for (int n = 0; n < MT; ++n) tl_wg_rs<T, DP>(adv, pa[n], gndesc + QLay::mnstep(n));
#pragma unroll
            for (int n = 0; n < MT; ++n) tl_wg_rs<T, DP>(adk, da[n], qndesc + QLay::mnstep(n));
            tl_wg_commit();
        }
        // dS^T stored scaled (dQ's factor) while they run
#pragma unroll
        for (int n = 0; n < MT; ++n) mma_store_acc_at<T, SLay>(sds, jw - j0, 16 * n, dpt[n], p.scale);
        tl_fence_async_smem();
        __syncthreads();  // dS^T is complete
        TlAcc aq[4];
        tl_wg_fence();
#pragma unroll
        for (int kc = 0; kc < BN / 16; ++kc)
            tl_wg_ss<T, 64, 1, 1>(aq, dsdesc + SLay::mnstep(kc), kndesc + KLay::mnstep(kc), kc > 0);
        tl_wg_commit();
        tl_wg_wait<0>();  // every product of the step: its stage and dS^T may be overwritten after the next barrier
        tl_wg_hold(aq);
        mma_bwd_add_dq<DP, 4, 1>(dq, dqv, aq, p, bi, h, i0 + 64 * (grp % QM) + 16 * (w % 4), 64 * (grp / QM));
        stage_rows(ahead);  // read after the next barrier, by the step that uses that stage
        slot = slot + 1 == ST ? 0 : slot + 1;
        i0 += BM;
        if (i0 >= p.L) { i0 = i_begin; ++hh; }
    }
    mma_bwd_finish<T, KD>(adk, adv, p, bi, hkv, jw, dkv, dvv, dk, dv);
#endif
}

#define ATT_MMA_ENTRIES(T, sfx, DP)                                                                 \
    extern "C" __global__ void __launch_bounds__(TL_MMA_LANES * MMA_FWD_WARPS) flash_fwd_mma##DP##_##sfx(   \
        AttnShape p, View4 qv, View4 kv, View4 vv, View4 ov, View4 mv, const void* mask,           \
        const T* q, const T* k, const T* v, T* out, float* lse) {                                  \
        if constexpr (tl_mma_takes<T>)  /* else (f32 on WMMA) empty: the host takes flash_fwd */   \
            flash_fwd_mma<T, DP, MMA_FWD_WARPS>(p, qv, kv, vv, ov, mv, mask, q, k, v, out, lse);   \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__((TL_MMA_LANES * mma_bwd_warps<T, DP>))          \
        flash_bwd_mma##DP##_##sfx(                                                                 \
        AttnShape p, View4 qv, View4 kv, View4 vv, View4 gv, View4 dqv, View4 dkv, View4 dvv,      \
        View4 mv, const void* mask, const T* q, const T* k, const T* v, const T* g,                \
        const float* lse, const float* Dr, float* dq, T* dk, T* dv) {                              \
        if constexpr (tl_mma_takes<T>)                                                             \
            flash_bwd_mma<T, DP, mma_bwd_warps<T, DP> >(p, qv, kv, vv, gv, dqv, dkv, dvv, mv, mask, q, k, v, \
                                                       g, lse, Dr, dq, dk, dv);                    \
    }
#define ATT_WG_ENTRIES(T, sfx, DP)                                                                  \
    extern "C" __global__ void __launch_bounds__(128 * WG_FWD_GROUPS) flash_fwd_wg##DP##_##sfx(              \
        AttnShape p, View4 qv, View4 kv, View4 vv, View4 ov, View4 mv, const void* mask,           \
        const T* q, const T* k, const T* v, T* out, float* lse) {                                  \
        flash_fwd_wg<T, DP>(p, qv, kv, vv, ov, mv, mask, q, k, v, out, lse);                       \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(256, 1) flash_bwd_wg##DP##_##sfx(                 \
        AttnShape p, View4 qv, View4 kv, View4 vv, View4 gv, View4 dqv, View4 dkv, View4 dvv,      \
        View4 mv, const void* mask, const T* q, const T* k, const T* v, const T* g,                \
        const float* lse, const float* Dr, float* dq, T* dk, T* dv) {                              \
        flash_bwd_wg<T, DP>(p, qv, kv, vv, gv, dqv, dkv, dvv, mv, mask, q, k, v, g, lse, Dr, dq, dk, dv); \
    }
ATT_MMA_ENTRIES(f16, f16, 64) ATT_MMA_ENTRIES(f16, f16, 128)
ATT_MMA_ENTRIES(bf16, bf16, 64) ATT_MMA_ENTRIES(bf16, bf16, 128)
ATT_WG_ENTRIES(f16, f16, 64) ATT_WG_ENTRIES(f16, f16, 128)
ATT_WG_ENTRIES(bf16, bf16, 64) ATT_WG_ENTRIES(bf16, bf16, 128)
// f32 at head dim 64 only: at 128 its tiles would overflow AMD's 64 KiB of LDS
ATT_MMA_ENTRIES(float, f32, 64)

// ---- Hopper warp-specialised forward (sm_90a; f16/bf16, DP 64 or 128, no mask) ---------
// flash_fwd_wg's contract and math (the per-warp accumulators, mma_softmax_tile,
// mma_fwd_finish, Swizzled128 tiles, the same block order), with the loads taken off the
// product warps as FlashAttention-3 does: a block is WS_FWD_GROUPS + 1 warpgroups (threads
// (32, 4 * (WS_FWD_GROUPS + 1))). Warpgroup 0 is the producer: it copies Q and then K and V
// tile by tile into a ring of WsFwdTile::STAGES shared-memory stages (cp.async, 16 bytes per
// thread and copy, into the 128-byte swizzle), and gives most of its registers to the others
// (setmaxnreg). Warpgroups 1.. are the consumers, 64 query rows each, which only wait, multiply
// and run the softmax (S_{j+1} issued before P_j V_j, as flash_fwd_wg). Per stage two
// mbarriers: `full` (the producer's 128 threads arrive once their copies of the tile have
// landed and been fenced for the tensor cores) and `empty` (the consumers' threads arrive once
// their products that read the stage are done). No block-wide barrier after the start: the
// consumer groups run independently of each other and of the loads.
// The producer keeps up to two tiles in flight, and signals every landed tile before it waits
// for a stage the consumers still read (a landed tile never waits behind that). A consumer
// frees stage j only after S_{j+1} has been issued, so the ring needs at least 2 stages.
// Host precondition (flash_hopper in ops/attention.py): q, k, v rows complete (d == dv == DP),
// contiguous and 16-byte aligned (mma_vec_ok), and no mask. Selected by the host only on
// sm_90 and only with TENSORLITE_ATTN_HOPPER=1 or =pingpong (off by default: see flash_hopper).
// PINGPONG (flash_fwd_wsp*, TENSORLITE_ATTN_HOPPER=pingpong): the two consumer groups take
// turns to issue their products (FlashAttention-3's pingpong schedule: two named barriers), so
// that one group's softmax runs while the other's products keep the tensor cores busy. Every
// group takes its turn at every tile of the block, also at tiles it skips (the barriers'
// counts stay balanced).
// Lacks against FlashAttention-3: TMA loads (here cp.async by a full producer warpgroup), a
// persistent tile scheduler, and an epilogue through shared memory.
#define WS_FWD_GROUPS 2   // consumer warpgroups
#define WS_FWD_BN 128     // keys per tile
#define WS_FWD_PRODUCER_REGS 40
#define WS_FWD_CONSUMER_REGS 232  // 128 * 40 + 256 * 232 = 64512 of the SM's 65536
template <typename T, int DP> struct WsFwdTile {
    static const int BM = 64 * WS_FWD_GROUPS, BN = WS_FWD_BN;
    static const int STAGES = DP > 64 ? 3 : 4;  // 64 KiB a stage at DP 128
    static_assert(STAGES >= 2, "a consumer frees a stage only once it holds the next: see above");
    // Q, the stages, their 2 * STAGES mbarriers, 1 KiB to align the tiles to 1 KiB: 225.1 KiB
    // at DP 128; mirrored by sdpa in backends/rocm/ops/attention.py (_WS_FWD_*)
    static const int SMEM = (BM + 2 * STAGES * BN) * DP * (int)sizeof(T) + 16 * STAGES + 1024;
};

// Rows r0 .. r0+ROWS of a view (at base, row stride s2, n_rows rows) into dst by the 128
// threads of warpgroup 0 (MmaTileCopy's thread index is threadIdx.y * 32 + threadIdx.x):
// one cp.async group.
template <typename T, int ROWS, int DP, typename Lay>
TL_DEV void ws_copy_tile(T* dst, const T* base, i64 s2, i64 r0, i64 n_rows) {
    typedef MmaTileCopy<T, ROWS, DP, Lay, 128> C;
    if (r0 + ROWS <= n_rows) C::template copy<false>(dst, base, s2, r0, n_rows);
    else C::template copy<true>(dst, base, s2, r0, n_rows);
}

template <typename T, int DP, bool PINGPONG>
TL_DEV void flash_fwd_ws(const AttnShape& p, const View4& qv, const View4& kv, const View4& vv, const View4& ov,
                         const View4& mv, const void* mask, const T* q, const T* k, const T* v, T* out, float* lse) {
#if defined(TL_HAS_WGMMA)
    typedef WsFwdTile<T, DP> F;
    typedef Swizzled128<T, F::BM, DP> QLay;
    typedef Swizzled128<T, F::BN, DP> KVLay;
    const int BM = F::BM, BN = F::BN, KD = DP / 16, NT = BN / 16, STAGES = F::STAGES, STAGE = 2 * BN * DP;
    T* const sq = (T*)((char*)att_dyn_smem + ((1024 - (tl_smem_addr(att_dyn_smem) & 1023)) & 1023));
    T* const skv = sq + BM * DP;  // stage b: K at skv + b * STAGE, V after it
    u64* const full = (u64*)(skv + STAGES * STAGE);
    u64* const empty = full + STAGES;
    // warpgroup from lane 0: warp-uniform for ptxas (see flash_fwd_wg)
    const int w = threadIdx.y, wg = tl_shfl(w / 4, 0);

    const i64 nq = (p.L + BM - 1) / BM;
    const i64 qt = nq - 1 - (i64)blockIdx.x % nq, bh = (i64)blockIdx.x / nq;
    const i64 bi = bh / p.hq, h = bh % p.hq, hk = h / (p.hq / p.hk);
    const i64 l0 = qt * BM;
    i64 n_end = p.S;  // keys up to the causal diagonal of the block's last row
    if (p.causal) {
        const i64 last = (l0 + BM < p.L ? l0 + BM : p.L) + p.causal_shift;
        n_end = last < n_end ? (last > 0 ? last : 0) : n_end;
    }
    const int tiles = (int)((n_end + BN - 1) / BN);

    if (w == 0 && threadIdx.x == 0) {
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            tl_mbar_init(full + s, 128);
            tl_mbar_init(empty + s, 128 * WS_FWD_GROUPS);
        }
    }
    __syncthreads();

    if (wg == 0) {  // producer
        tl_regs_dec<WS_FWD_PRODUCER_REGS>();
        if (tiles == 0) return;
        const T* kb = k + kv.offset + bi * kv.s0 + hk * kv.s1;
        const T* vb = v + vv.offset + bi * vv.s0 + hk * vv.s1;
        ws_copy_tile<T, BM, DP, QLay>(sq, q + qv.offset + bi * qv.s0 + h * qv.s1, qv.s2, l0, p.L);
        // tile t's copies are issued once its stage is free (tile t - STAGES done); tile t-1
        // is signalled once it has landed: after tile t is issued (two tiles in flight), or
        // before waiting for tile t's stage if that is not free yet
        auto publish = [&](int t) {  // tile t has landed (every earlier copy too)
            tl_fence_async_smem();
            tl_mbar_arrive(full + t % STAGES);
        };
        for (int t = 0; t < tiles; ++t) {
            const int s = t % STAGES;
            bool pending = t > 0;  // tile t-1 not yet signalled
            if (t >= STAGES) {
                const u32 par = (u32)(t / STAGES - 1) & 1;
                if (!tl_mbar_ready(empty + s, par)) {
                    tl_cp_async_wait_all();
                    publish(t - 1);
                    pending = false;
                    tl_mbar_wait(empty + s, par);
                }
            }
            T* const st = skv + s * STAGE;
            ws_copy_tile<T, BN, DP, KVLay>(st, kb, kv.s2, (i64)t * BN, p.S);
            ws_copy_tile<T, BN, DP, KVLay>(st + BN * DP, vb, vv.s2, (i64)t * BN, p.S);
            if (pending) {
                tl_cp_async_wait_prior<2>();  // all but tile t's two groups: tile t-1 (and Q)
                publish(t - 1);
            }
        }
        tl_cp_async_wait_all();
        publish(tiles - 1);
        return;
    }

    // consumers: group g owns rows lg .. lg+64, warp w rows lw .. lw+16
    tl_regs_inc<WS_FWD_CONSUMER_REGS>();
    const int g = wg - 1;
    const i64 lg = l0 + 64 * g, lw = lg + 16 * (w % 4);
    i64 g_end = n_end;  // later tiles are wholly masked for the group: it only frees them
    if (p.causal) {
        const i64 glast = lg + 64 + p.causal_shift;
        g_end = glast < g_end ? (glast > 0 ? glast : 0) : g_end;
    }
    const int g_tiles = lg < p.L ? (int)((g_end + BN - 1) / BN) : 0;

    float m[1][TL_MMA_ROW_SLOTS], ls[1][TL_MMA_ROW_SLOTS], alpha[1][TL_MMA_ROW_SLOTS];
    TlAcc o[1][KD];
#pragma unroll
    for (int r = 0; r < TL_MMA_ROW_SLOTS; ++r) { m[0][r] = att_neg_inf(); ls[0][r] = 0.0f; }
#pragma unroll
    for (int c = 0; c < KD; ++c) tl_mma_zero(o[0][c]);

    TlFragA pa[NT];  // P_j, the A operand of P_j V_j
    const u64 qdesc = QLay::kmajor(sq + 64 * g * QLay::AW);
    auto scores = [&](TlAcc (&s)[1][NT], int t) {  // S = Q K_t^T
        const u64 kdesc = KVLay::kmajor(skv + (t % STAGES) * STAGE);
        tl_wg_fence();
#pragma unroll
        for (int c = 0; c < KD; ++c) tl_wg_ss<T, BN>(s[0], qdesc + QLay::kstep(c), kdesc + KVLay::kstep(c), c > 0);
        tl_wg_commit();
    };
    auto values = [&](int t) {  // O += P_t V_t
        const u64 vdesc = KVLay::mnmajor(skv + (t % STAGES) * STAGE + BN * DP);
        tl_wg_fence();
#pragma unroll
        for (int n = 0; n < NT; ++n) tl_wg_rs<T, DP>(o[0], pa[n], vdesc + KVLay::mnstep(n));
        tl_wg_commit();
    };

    // pingpong: group g issues its products after syncing at barrier 1 + g, then lets the other
    // group go (arrives at 2 - g); group 1 lets group 0 start, and skips its last signal
    // (nobody would wait for it)
    const int NB = 128 * WS_FWD_GROUPS;
    if (PINGPONG && g == 1 && tiles > 0) tl_bar_arrive(1, NB);
    if (tiles > 0) tl_mbar_wait(full, 0);  // Q and tile 0
    if (g_tiles > 0) {
        TlAcc s[1][NT];
        scores(s, 0);
        tl_wg_wait<0>();
        tl_wg_hold(s[0]);
        mma_softmax_tile<T, 1, NT>(s, m, ls, alpha, p, bi, h, lw, 0, mv, mask);  // o is still 0
#pragma unroll
        for (int n = 0; n < NT; ++n) tl_mma_acc_to_a<T>(pa[n], s[0][n]);
    }
    for (int j = 0; j < tiles; ++j) {
        // every tile's `full` is waited for before its `empty` is arrived at, by every consumer
        // thread (also for tiles it skips): the phases of both stay in step with the producer
        if (j + 1 < tiles) tl_mbar_wait(full + (j + 1) % STAGES, (u32)((j + 1) / STAGES) & 1);
        if (PINGPONG) tl_bar_sync(1 + g, NB);
        const bool signal = PINGPONG && (g == 0 || j + 1 < tiles);
        if (j < g_tiles) {
            if (j + 1 < g_tiles) {
                TlAcc s[1][NT];
                scores(s, j + 1);
                values(j);
                if (signal) tl_bar_arrive(2 - g, NB);
                tl_wg_wait<1>();  // S_{j+1} is done; P_j V_j may still run
                tl_wg_hold(s[0]);
                const bool grew =
                    mma_softmax_tile<T, 1, NT>(s, m, ls, alpha, p, bi, h, lw, (i64)(j + 1) * BN, mv, mask);
                tl_wg_wait<0>();  // P_j V_j is done: stage j is free, O may be rescaled, P_j reused
                tl_wg_hold(o[0]);
                if (grew) mma_rescale(o, alpha);
#pragma unroll
                for (int n = 0; n < NT; ++n) tl_mma_acc_to_a<T>(pa[n], s[0][n]);
            } else {  // the group's last tile
                values(j);
                if (signal) tl_bar_arrive(2 - g, NB);
                tl_wg_wait<0>();
                tl_wg_hold(o[0]);
            }
        } else if (signal) {
            tl_bar_arrive(2 - g, NB);
        }
        tl_mbar_arrive(empty + j % STAGES);
    }
    mma_fwd_finish<T, 1, KD>(o, m, ls, p, bi, h, lw, ov, out, lse);
#endif
}

#define ATT_WS_ENTRY(T, sfx, DP, NAME, PINGPONG)                                                     \
    extern "C" __global__ void __launch_bounds__(128 * (WS_FWD_GROUPS + 1), 1) NAME##DP##_##sfx(    \
        AttnShape p, View4 qv, View4 kv, View4 vv, View4 ov, View4 mv, const void* mask,           \
        const T* q, const T* k, const T* v, T* out, float* lse) {                                  \
        flash_fwd_ws<T, DP, PINGPONG>(p, qv, kv, vv, ov, mv, mask, q, k, v, out, lse);             \
    }
#define ATT_WS_ENTRIES(T, sfx, DP) \
    ATT_WS_ENTRY(T, sfx, DP, flash_fwd_ws, false) ATT_WS_ENTRY(T, sfx, DP, flash_fwd_wsp, true)
ATT_WS_ENTRIES(f16, f16, 64) ATT_WS_ENTRIES(f16, f16, 128)
ATT_WS_ENTRIES(bf16, bf16, 64) ATT_WS_ENTRIES(bf16, bf16, 128)

#define ATT_DIM_ENTRIES(T, sfx, DP)                                                                 \
    extern "C" __global__ void __launch_bounds__(TL_ATT_THREADS, 2) flash_fwd##DP##_##sfx(         \
        AttnShape p, View4 qv, View4 kv, View4 vv, View4 ov, View4 mv, const void* mask,           \
        const T* q, const T* k, const T* v, T* out, float* lse) {                                  \
        flash_fwd<T, DP>(p, qv, kv, vv, ov, mv, mask, q, k, v, out, lse);                          \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(TL_ATT_THREADS, 2) flash_bwd##DP##_##sfx(         \
        AttnShape p, View4 qv, View4 kv, View4 vv, View4 gv, View4 dqv, View4 dkv, View4 dvv,      \
        View4 mv, const void* mask, const T* q, const T* k, const T* v, const T* g,                \
        const float* lse, const float* Dr, float* dq, T* dk, T* dv) {                              \
        flash_bwd<T, DP>(p, qv, kv, vv, gv, dqv, dkv, dvv, mv, mask, q, k, v, g, lse, Dr, dq, dk, dv); \
    }

// ---- decode: a few query rows over many keys, split over the keys ("flash-decoding") ----
// The flash kernels give a block 64 query rows: a single-query decode step would use one
// of them, and read each kv head's keys once per query head. Here a block owns (batch, kv
// head, chunk of DecChunk keys) and all ROWS = (hq / hk) * L query rows that read that kv
// head (ROWS <= DEC_ROWS, d and dv <= DP: the host checks): it scores the chunk's keys,
// and writes per row the chunk's max m, l = sum exp(s - m) and o = sum exp(s - m) v (f32) to
// a workspace of (b * hq * L, n_chunks) rows; attn_decode_combine_<t> merges the chunks
// (out = sum e^(m_i - M) o_i / sum e^(m_i - M) l_i; a row with every key dropped: zeros).
// Rows are in (b, hq, L) order: the ROWS of a kv head are consecutive, row0 + r with
// r = (query head - kv head * hq / hk) * L + l.
// A decode step has few blocks (b * hk * n_chunks), so a block's latency is the kernel's:
// the query rows, keys and values are all fetched before the first barrier (their loads in
// flight together, 16 bytes at a time where the views allow), the head dim DP is a
// compile-time constant (its divisions are shifts, its loops unrolled), the index math
// within a block is 32-bit and each row's softmax is spread over the row's threads. (The
// version before, with 64-bit index math per element and one thread per row's softmax,
// took 27 us a call on the H200 at 40 blocks.)
#define DEC_ROWS 32
#define DEC_THREADS 128
// Keys per block: 32, or 16 for f32 at DP 128 (its keys and values would not fit the 48 KiB
// of static shared memory). ops/attention.py _dec_chunk mirrors it.
template <typename T, int DP> struct DecChunk { enum { N = (sizeof(T) == 4 && DP > 64) ? 16 : 32 }; };

template <typename T, int DP>
TL_DEV void dec_stage_rows(T* dst, const T* src, const View4& view, i64 base, int nj, int cols, bool whole_vectors) {
    // rows [0, DecChunk) of keys or values (d <= DP columns; zeros past nj and past the
    // view's columns) into shared memory rows of DP + pad elements
    const int CH = DecChunk<T, DP>::N, KP = DP + 4 / (int)sizeof(T), VN = 16 / (int)sizeof(T);
    if (whole_vectors) {
        for (int i = threadIdx.x; i < CH * (DP / VN); i += DEC_THREADS) {
            const int jj = i / (DP / VN), c = i % (DP / VN) * VN;
            AttVec<T, VN> x;
            if (jj < nj) {
                x = *(const AttVec<T, VN>*)(src + base + jj * view.s2 + c);
            } else {
#pragma unroll
                for (int e = 0; e < VN; ++e) x.v[e] = Tr<T>::store(0.0f);
            }
#pragma unroll
            for (int e = 0; e < VN; ++e) dst[jj * KP + c + e] = x.v[e];
        }
    } else {
        for (int i = threadIdx.x; i < CH * DP; i += DEC_THREADS) {
            const int jj = i / DP, c = i % DP;
            dst[jj * KP + c] = jj < nj && c < cols ? src[base + jj * view.s2 + c * view.s3] : Tr<T>::store(0.0f);
        }
    }
}

template <typename T, int DP>
TL_DEV void attn_decode_part(AttnShape p, View4 qv, View4 kv, View4 vv, View4 mv, const void* mask, const T* q,
                             const T* k, const T* v, i64 n_chunks, float* part_o, float* part_ml) {
    const int CH = DecChunk<T, DP>::N, KP = DP + 4 / (int)sizeof(T), VN = 16 / (int)sizeof(T);
    __shared__ float qs[DEC_ROWS * DP];
    __shared__ T ks[CH * KP], vs[CH * KP];  // padded rows: a warp reading one column of many keys hits every bank
    __shared__ float sc[DEC_ROWS * CH], pe[DEC_ROWS * CH], mrow[DEC_ROWS];
    const int g = (int)(p.hq / p.hk), L = (int)p.L, rows = g * L, d = (int)p.d, dv = (int)p.dv;
    const i64 chunk = blockIdx.x % n_chunks, bh = blockIdx.x / n_chunks;
    const i64 bi = bh / p.hk, kh = bh % p.hk, j0 = chunk * CH;
    const int nj = (int)(p.S - j0 < CH ? p.S - j0 : CH);
    const i64 row0 = (bi * p.hq + kh * g) * p.L;
    const int tid = threadIdx.x;
    // every global load of the block first: the mask (and causal) terms of the scores, the
    // query rows, the chunk's keys and values. sc holds att_score's terms beside the product:
    // -inf for a dropped key, else the additive mask (0 for a kept one)
    for (int i = tid; i < rows * CH; i += DEC_THREADS) {
        const int r = i / CH, jj = i % CH;
        sc[i] = jj < nj ? att_score<T>(0.0f, p, bi, kh * g + r / L, r % L, j0 + jj, mv, mask) : att_neg_inf();
    }
    for (int i = tid; i < rows * DP; i += DEC_THREADS) {
        const int r = i / DP, c = i % DP, h = (int)kh * g + r / L, l = r % L;
        qs[i] = c < d ? Tr<T>::load(q[qv.offset + bi * qv.s0 + h * qv.s1 + l * qv.s2 + c * qv.s3]) : 0.0f;
    }
    const i64 kb = kv.offset + bi * kv.s0 + kh * kv.s1 + j0 * kv.s2;
    const i64 vb = vv.offset + bi * vv.s0 + kh * vv.s1 + j0 * vv.s2;
    // 16-byte loads: unit column stride, whole rows of DP, every row start aligned (the
    // allocations are; the offsets and row strides must be multiples of a vector)
    dec_stage_rows<T, DP>(ks, k, kv, kb, nj, d, kv.s3 == 1 && d == DP && (kb | kv.s2) % VN == 0);
    dec_stage_rows<T, DP>(vs, v, vv, vb, nj, dv, vv.s3 == 1 && dv == DP && (vb | vv.s2) % VN == 0);
    __syncthreads();
    for (int i = tid; i < rows * CH; i += DEC_THREADS) {  // a warp: one row's keys (q broadcast)
        const int r = i / CH, jj = i % CH;
        const float term = sc[i];
        if (term == att_neg_inf()) continue;
        float dot = 0.0f;
#pragma unroll 16
        for (int c = 0; c < DP; ++c) dot = fmaf(qs[r * DP + c], Tr<T>::load(ks[jj * KP + c]), dot);
        sc[i] = dot * p.scale + term;  // att_score's value: the scaled product plus the mask
    }
    __syncthreads();
    for (int i = tid; i < rows * CH; i += DEC_THREADS) {  // exp(s - the row's max), the max
        const int r = i / CH;
        float m = att_neg_inf();
#pragma unroll 8
        for (int jj = 0; jj < CH; ++jj) m = fmaxf(m, sc[r * CH + jj]);
        pe[i] = m == att_neg_inf() ? 0.0f : expf(sc[i] - m);  // a dropped key (-inf) gives 0
        if (i % CH == 0) mrow[r] = m;
    }
    __syncthreads();
    for (int i = tid; i < rows * DP; i += DEC_THREADS) {  // consecutive threads: consecutive columns
        const int r = i / DP, c = i % DP;
        if (c >= dv) continue;
        float acc = 0.0f, sum = 0.0f;
#pragma unroll 8
        for (int jj = 0; jj < CH; ++jj) {
            const float e = pe[r * CH + jj];
            acc = fmaf(e, Tr<T>::load(vs[jj * KP + c]), acc);
            sum += e;
        }
        const i64 w = (row0 + r) * n_chunks + chunk;
        part_o[w * dv + c] = acc;
        if (c == 0) {
            part_ml[w * 2] = mrow[r];
            part_ml[w * 2 + 1] = sum;
        }
    }
}

template <typename T>
TL_DEV void attn_decode_combine(i64 n_rows, i64 hq, i64 L, i64 dv, i64 n_chunks, View4 ov, const float* part_o,
                                const float* part_ml, T* out) {
    TL_GRID_LOOP(e, n_rows * dv) {
        const i64 row = e / dv, c = e % dv;
        const float* st = part_ml + row * n_chunks * 2;
        float top = att_neg_inf(), num = 0.0f, den = 0.0f;
        for (i64 s = 0; s < n_chunks; ++s) top = fmaxf(top, st[2 * s]);
        if (top != att_neg_inf()) {
            for (i64 s = 0; s < n_chunks; ++s) {
                const float w = st[2 * s] == att_neg_inf() ? 0.0f : expf(st[2 * s] - top);
                den = fmaf(w, st[2 * s + 1], den);
                num = fmaf(w, part_o[(row * n_chunks + s) * dv + c], num);
            }
        }
        const i64 bi = row / (hq * L), h = (row / L) % hq, l = row % L;
        out[ov.offset + bi * ov.s0 + h * ov.s1 + l * ov.s2 + c] = Tr<T>::store(den > 0.0f ? num / den : 0.0f);
    }
}

#define ATT_DECODE_ENTRY(T, sfx, DP)                                                                \
    extern "C" __global__ void __launch_bounds__(DEC_THREADS) attn_decode_part##DP##_##sfx(          \
        AttnShape p, View4 qv, View4 kv, View4 vv, View4 mv, const void* mask, const T* q, const T* k, \
        const T* v, i64 n_chunks, float* part_o, float* part_ml) {                                 \
        tl_dependent_start();                                                                      \
        attn_decode_part<T, DP>(p, qv, kv, vv, mv, mask, q, k, v, n_chunks, part_o, part_ml);      \
    }

#define ATT_ENTRIES(T, sfx)                                                                         \
    ATT_DIM_ENTRIES(T, sfx, 32) ATT_DIM_ENTRIES(T, sfx, 64) ATT_DIM_ENTRIES(T, sfx, 128)           \
    ATT_DECODE_ENTRY(T, sfx, 32) ATT_DECODE_ENTRY(T, sfx, 64) ATT_DECODE_ENTRY(T, sfx, 128)        \
    extern "C" __global__ void attn_decode_combine_##sfx(i64 n_rows, i64 hq, i64 L, i64 dv,       \
        i64 n_chunks, View4 ov, const float* part_o, const float* part_ml, T* out) {               \
        tl_dependent_start();                                                                      \
        attn_decode_combine<T>(n_rows, hq, L, dv, n_chunks, ov, part_o, part_ml, out);             \
    }                                                                                              \
    extern "C" __global__ void flash_bwd_pre_##sfx(i64 n_rows, i64 hq, i64 L, i64 dv, View4 ov,    \
        View4 gv, const T* o, const T* g, float* Dr) {                                             \
        flash_bwd_pre<T>(n_rows, hq, L, dv, ov, gv, o, g, Dr);                                     \
    }
ATT_ENTRIES(float, f32)
ATT_ENTRIES(f16, f16)
ATT_ENTRIES(bf16, bf16)
