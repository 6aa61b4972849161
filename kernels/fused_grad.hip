// Backward kernels of the fused nn ops, the fused cross-entropy, the activation
// derivatives and the AdamW update; floating dtypes, f32 arithmetic for the half types
// (A = Tr<T>::acc: f32, or f64 for f64).
//
// softmax_bwd_<t>, log_softmax_bwd_<t>     grad in over the last dim, from y and dy
// layer_norm_bwd_fit[_vec]_<t>, rms_norm_bwd_fit[_vec]_<t>   rows of at most 256 x 16
//                                          elements (8 for f64): dx + the dweight/dbias partials
//                                          per block, x and dy read once into registers; _vec:
//                                          rows of whole aligned 16-byte vectors (3 blocks per SM)
// layer_norm_bwd_<t>, rms_norm_bwd_<t>     longer rows: dx + per-row (mean, rstd) for norm_wgrad
// norm_wgrad_<t>, norm_wgrad_finish_<t>    dweight/dbias of longer rows: partial column sums
//                                          per row chunk; the finish sums the partials of
//                                          either path, one per column (no atomics)
// cross_entropy_fwd_<t>, _bwd_<t>          log-softmax + NLL per row, softmax - onehot
// gelu_tanh_bwd_<t>, gelu_erf_bwd_<t>, silu_bwd_<t>   dy * f'(x)
// adamw_<t>                                one in-place AdamW/Adam step per parameter
// adamw_many_<t>                           the same for up to 24 contiguous parameters at once
// adamw_cap_<t>, adamw_many_cap_<t>        the same with the step count (and lr) read from device
//                                          memory (capturable: a replayed graph sees their values)
//
// Row kernels use fused.hip's conventions: `outer` addresses each row's first element,
// `inner` steps along the row, blocks are (tpr, rows_per_block) (tl_row_allreduce).
#include "rows.h"  // RowTile, Run, load_part, store_part, row_exp

// ---- softmax / log_softmax backward ----------------------------------------------------
// softmax: dx = y * (dy - sum(dy * y));  log_softmax: dx = dy - exp(y) * sum(dy).
template <typename T, bool Log>
TL_DEV void softmax_bwd_rows(i64 n_rows, i64 row_len, const Strided& yo, i64 yi, const Strided& go, i64 gi,
                             const T* y, const T* g, T* out) {
    typedef typename Tr<T>::acc A;
    __shared__ A smem[TL_MAX_WARPS];
    const i64 rpb = blockDim.y;
    for (i64 base = (i64)blockIdx.x * rpb; base < n_rows; base += (i64)gridDim.x * rpb) {
        const i64 row = base + threadIdx.y;
        const bool valid = row < n_rows;
        const T* yr = y + (valid ? tl_index(yo, row) : 0);
        const T* gr = g + (valid ? tl_index(go, row) : 0);
        A s = A(0);
        if (valid)
            for (i64 j = threadIdx.x; j < row_len; j += blockDim.x)
                s += Log ? Tr<T>::load(gr[j * gi]) : Tr<T>::load(gr[j * gi]) * Tr<T>::load(yr[j * yi]);
        s = tl_row_allreduce<SumOp<A> >(s, smem);
        if (!valid) continue;
        T* o = out + row * row_len;
        for (i64 j = threadIdx.x; j < row_len; j += blockDim.x) {
            const A yv = Tr<T>::load(yr[j * yi]), gv = Tr<T>::load(gr[j * gi]);
            o[j] = Tr<T>::store(Log ? gv - tl_exp(yv) * s : yv * (gv - s));
        }
    }
}

// ---- layer_norm / rms_norm backward of rows longer than norm_bwd_fit takes: dx ------------
// xhat = (x - mean) * rstd (mean = 0 for rms), gw = dy * w:
// dx = rstd * (gw - xhat * mean(gw * xhat) - mean(gw))   (no mean(gw) term for rms).
// mean/rstd are recomputed from x as the forward does; `stats` (nullable) receives them
// for norm_wgrad. Rows go by RowTile (16-byte vectors where the row allows), re-read per pass.
#define TL_NORM_VECTORS 4  // 16-byte vectors in flight per thread
template <typename T, bool Rms>
TL_DEV void norm_bwd_rows(i64 n_rows, i64 row_len, const Strided& xo, i64 xi, const Strided& go, i64 gi,
                          const T* x, const T* g, const T* w, i64 w_stride, double eps,
                          typename Tr<T>::acc* stats, T* out) {
    typedef typename Tr<T>::acc A;
    typedef RowTile<T, TL_NORM_VECTORS> Tile;
    enum { N = Tile::N };
    __shared__ A smem[TL_MAX_WARPS];
    __shared__ Pair<A> psmem[TL_MAX_WARPS];
    const i64 rpb = blockDim.y;
    for (i64 base = (i64)blockIdx.x * rpb; base < n_rows; base += (i64)gridDim.x * rpb) {
        const i64 row = base + threadIdx.y;
        const bool valid = row < n_rows;
        const i64 len = valid ? row_len : 0;
        const Tile xr(x + (valid ? tl_index(xo, row) : 0), len, xi);
        const Tile gr(g + (valid ? tl_index(go, row) : 0), len, gi);
        A mean = A(0);
        if (!Rms) {
            xr.each([&](i64, const A* v, int cnt) {
#pragma unroll
                for (int e = 0; e < N; ++e) if (e < cnt) mean += v[e];
            });
            mean = tl_row_allreduce<SumOp<A> >(mean, smem) / (A)row_len;
        }
        A sq = A(0);
        xr.each([&](i64, const A* v, int cnt) {
#pragma unroll
            for (int e = 0; e < N; ++e) if (e < cnt) sq += (v[e] - mean) * (v[e] - mean);
        });
        sq = tl_row_allreduce<SumOp<A> >(sq, smem);
        const A rstd = A(1) / tl_sqrt(sq / (A)row_len + (A)eps);
        Pair<A> sums; sums.a = A(0); sums.b = A(0);  // sum(gw), sum(gw * xhat)
        each2(xr, gr, [&](i64 k, const A* xv, const A* gv, int cnt) {
            A wv[N];
            if (w) load_part<T, N>(w + k * N * w_stride, w_stride, cnt, wv);
#pragma unroll
            for (int e = 0; e < N; ++e) {
                if (e >= cnt) break;
                const A gw = w ? gv[e] * wv[e] : gv[e];
                sums.a += gw;
                sums.b += gw * (xv[e] - mean) * rstd;
            }
        });
        sums = tl_row_allreduce<PairSumOp<A> >(sums, psmem);
        if (!valid) continue;
        if (stats && threadIdx.x == 0) { stats[2 * row] = mean; stats[2 * row + 1] = rstd; }
        const A inv_n = A(1) / (A)row_len;
        const A mean_gw = Rms ? A(0) : sums.a * inv_n, mean_gwx = sums.b * inv_n;
        T* o = out + row * row_len;
        each2(xr, gr, [&](i64 k, const A* xv, const A* gv, int cnt) {
            A wv[N], d[N];
            if (w) load_part<T, N>(w + k * N * w_stride, w_stride, cnt, wv);
#pragma unroll
            for (int e = 0; e < N; ++e)
                d[e] = rstd * ((w ? gv[e] * wv[e] : gv[e]) - (xv[e] - mean) * rstd * mean_gwx - mean_gw);
            store_part<T, N>(o + k * N, d, cnt);
        });
    }
}

// ---- rows that fit one block of TL_NORM_FIT_THREADS: the fast path ------------------------------
// Each thread keeps S = V * N elements (V 16-byte vectors) of x and of dy in registers, read
// once; a row gets tpr = the least power of two with tpr * S >= row_len threads and a block
// holds up to 256 / tpr rows. Two row reductions from registers: mean, then
// (sum (x - mean)^2, sum gw, sum gw * (x - mean)) at once, all plain sums (the same result
// in every lane, exact two-pass variance). A thread's columns are the same in every row, so
// it adds its dweight/dbias terms to its own shared-memory slots over all of the block's
// rows; at the end the block's rows are summed in row order: one partial per (block,
// column) for norm_wgrad_finish (fixed order, no atomics). Rows of whole aligned vectors
// (`Vec`, the host checks) keep the registers low enough for TL_NORM_FIT_VEC_BLOCKS
// resident blocks per SM/CU (the launch bounds; the host launches that many per SM).
#define TL_NORM_FIT_THREADS 256
// 80 registers on sm_90 (f64 would spill at that); the strided variant needs ~230: 1 block
#define TL_NORM_FIT_VEC_BLOCKS(T) (sizeof(T) == 8 ? 2 : 3)
template <typename T> struct NormFit {
    enum { N = 16 / sizeof(T), S = sizeof(T) == 8 ? 8 : 16, V = S / N };
};
template <typename A> struct NormSums { A sq, g, gx; };
template <typename A> struct NormSumsOp {
    typedef NormSums<A> State;
    static TL_DEV State combine(State x, State y) {
        State r; r.sq = x.sq + y.sq; r.g = x.g + y.g; r.gx = x.gx + y.gx; return r;
    }
    static TL_DEV State shfl(State v, int m, int w) {
        State r; r.sq = tl_shfl_xor(v.sq, m, w); r.g = tl_shfl_xor(v.g, m, w); r.gx = tl_shfl_xor(v.gx, m, w);
        return r;
    }
};
// add_layer_norm's backward (Vec rows only) is this with dy of H (T or a narrower half type),
// the gradient of the residual sum `gs` (T, contiguous rows; nullable) added to dx, and dx
// written in H as well where H is not T (`out_h`: the residual's gradient).
template <typename T, bool Rms, bool Vec, typename H = T>
TL_DEV void norm_bwd_fit(i64 n_rows, i64 row_len, const Strided& xo, i64 xi, const Strided& go, i64 gi,
                         const T* x, const typename TlId<H>::type* g, const T* w, i64 w_stride, double eps,
                         typename Tr<T>::acc* pw, typename Tr<T>::acc* pb, T* out, const T* gs = 0,
                         typename TlId<H>::type* out_h = 0) {
    typedef typename Tr<T>::acc A;
    static_assert(Vec || TlSame<H, T>::value, "norm_bwd_fit: a narrower dy needs Vec rows");
    enum { N = NormFit<T>::N, V = NormFit<T>::V, S = NormFit<T>::S };
    __shared__ A smem[TL_NORM_FIT_THREADS / 16];  // one per warp: warps of >= 16 lanes
    __shared__ NormSums<A> tsmem[TL_NORM_FIT_THREADS / 16];
    // column partials: thread t's slot q (column (threadIdx.x + q / N * tpr) * N + q % N) of
    // dweight at mine[q], of dbias at mine[S + q]: constant offsets from one address, and the
    // odd stride puts consecutive threads in different banks. Shared memory, not registers:
    // registers hold the rows, and 2 x S more per thread would cost resident blocks.
    enum { P = 2 * S + 1 };
    __shared__ A red[P * TL_NORM_FIT_THREADS];
    const bool part = pw || pb;
    const int tpr = blockDim.x, nt = tpr * blockDim.y, t = threadIdx.y * tpr + threadIdx.x;
    const A inv_n = A(1) / (A)row_len;
    A* const mine = red + t * P;
    if (part)
#pragma unroll
        for (int q = 0; q < 2 * S; ++q) mine[q] = A(0);
    // the thread's weights: the same columns in every row
    Run<T, N> qw[V];
    const bool wvec = w_stride == 1 && tl_aligned16(w);
#pragma unroll
    for (int c = 0; c < V; ++c) qw[c] = fetch_vec<T>(w, w ? row_len : 0, w_stride, wvec, threadIdx.x + (i64)c * tpr);
    const i64 rpb = blockDim.y;
    for (i64 base = (i64)blockIdx.x * rpb; base < n_rows; base += (i64)gridDim.x * rpb) {  // block-uniform
        const i64 row = base + threadIdx.y;
        const bool valid = row < n_rows;
        const i64 len = valid ? row_len : 0;  // rows past the end: zeros, nothing read
        const T* xr = x + (valid ? tl_index(xo, row) : 0);
        const H* gr = g + (valid ? tl_index(go, row) : 0);
        Run<T, N> qx[V];
        Run<H, N> qg[V];
        if constexpr (Vec) {  // the host saw every row contiguous, 16-byte aligned, whole vectors
#pragma unroll
            for (int c = 0; c < V; ++c) {  // every load issued before any is used
                const i64 k = threadIdx.x + (i64)c * tpr;
                if (k * N < len) {
                    qx[c] = ((const Run<T, N>*)xr)[k];
                    qg[c] = ((const Run<H, N>*)gr)[k];
                } else {
#pragma unroll
                    for (int e = 0; e < N; ++e) { qx[c].v[e] = Tr<T>::store(A(0)); qg[c].v[e] = Tr<H>::store(A(0)); }
                }
            }
        } else {  // strided or misaligned rows, a partial last vector
            const bool xvec = xi == 1 && tl_aligned16(xr), gvec = gi == 1 && tl_aligned16(gr);
#pragma unroll
            for (int c = 0; c < V; ++c) {
                const i64 k = threadIdx.x + (i64)c * tpr;
                qx[c] = fetch_vec<T>(xr, len, xi, xvec, k);
                qg[c] = fetch_vec<T>(gr, len, gi, gvec, k);
            }
        }
        A mean = A(0);
        if (!Rms) {
            A s = A(0);
#pragma unroll
            for (int c = 0; c < V; ++c)
#pragma unroll
                for (int e = 0; e < N; ++e) s += Tr<T>::load(qx[c].v[e]);  // zeros past the end
            mean = tl_row_allreduce<SumOp<A> >(s, smem) * inv_n;
        }
        NormSums<A> ts; ts.sq = A(0); ts.g = A(0); ts.gx = A(0);
#pragma unroll
        for (int c = 0; c < V; ++c) {
            const i64 left = len - (threadIdx.x + (i64)c * tpr) * N;
#pragma unroll
            for (int e = 0; e < N; ++e) {
                const A d = e < left ? Tr<T>::load(qx[c].v[e]) - mean : A(0);
                const A gv = Tr<H>::load(qg[c].v[e]);  // 0 past the end
                const A gw = w ? gv * Tr<T>::load(qw[c].v[e]) : gv;
                ts.sq += d * d; ts.g += gw; ts.gx += gw * d;
            }
        }
        ts = tl_row_allreduce<NormSumsOp<A> >(ts, tsmem);
        if (!valid) continue;  // no barriers below: rows are independent until the loop's next turn
        const A rstd = A(1) / tl_sqrt(ts.sq * inv_n + (A)eps);
        const A mean_gw = Rms ? A(0) : ts.g * inv_n, mean_gwx = ts.gx * rstd * inv_n;  // mean(gw * xhat)
        T* o = out + row * row_len;
#pragma unroll
        for (int c = 0; c < V; ++c) {
            const i64 k = threadIdx.x + (i64)c * tpr, left = row_len - k * N;
            A d[N], add[N];
            if (gs && left > 0) widen_held<T, N>(((const Run<T, N>*)(gs + row * row_len))[k], add);  // Vec rows
#pragma unroll
            for (int e = 0; e < N; ++e) {
                const A gv = Tr<H>::load(qg[c].v[e]), xhat = (Tr<T>::load(qx[c].v[e]) - mean) * rstd;
                d[e] = rstd * ((w ? gv * Tr<T>::load(qw[c].v[e]) : gv) - xhat * mean_gwx - mean_gw);
                if (part) {  // columns past the end: never written out
                    mine[c * N + e] += gv * xhat;
                    mine[S + c * N + e] += gv;
                }
                if (gs) d[e] += add[e];
            }
            if (left > 0) {
                store_part<T, N>(o + k * N, d, left < N ? (int)left : (int)N);
                if (out_h) store_part<H, N>(out_h + row * row_len + k * N, d, left < N ? (int)left : (int)N);
            }
        }
    }
    if (!part) return;
    // the block's rows meet: (slot, lane) pairs spread over the block, each summed in row order
    __syncthreads();
    A* const pwb = pw ? pw + (i64)blockIdx.x * row_len : 0;
    A* const pbb = pb ? pb + (i64)blockIdx.x * row_len : 0;
    for (int i = t; i < S * tpr; i += nt) {
        const int q = i / tpr, lane = i % tpr;
        const i64 col = ((i64)lane + (i64)(q / N) * tpr) * N + q % N;
        if (col >= row_len) continue;
        A sw = A(0), sb = A(0);
        for (int y = 0; y < (int)blockDim.y; ++y) {
            const A* const r = red + (i64)(y * tpr + lane) * P;
            sw += r[q]; sb += r[S + q];
        }
        if (pwb) pwb[col] = sw;
        if (pbb) pbb[col] = sb;
    }
}

// ---- dweight / dbias: column sums over rows ---------------------------------------------------
// Grid (column tiles, row chunks), block (bx, by) with bx * by <= TL_WGRAD_THREADS: thread
// (tx, ty) sums column c over rows chunk_start + ty, + by, ...; the by partials meet in
// shared memory and one f32/f64 partial per (chunk, column) is written. pb may be null
// (rms_norm, or no bias gradient wanted); pw may be null (only the bias gradient).
#define TL_WGRAD_THREADS 256
template <typename T>
TL_DEV void norm_wgrad_map(i64 n_rows, i64 row_len, i64 rows_per_chunk, const Strided& xo, i64 xi,
                           const Strided& go, i64 gi, const T* x, const T* g, const typename Tr<T>::acc* stats,
                           typename Tr<T>::acc* pw, typename Tr<T>::acc* pb) {
    typedef typename Tr<T>::acc A;
    __shared__ A sw[TL_WGRAD_THREADS], sb[TL_WGRAD_THREADS];
    const i64 c = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    const i64 chunk = blockIdx.y;
    const i64 r0 = chunk * rows_per_chunk;
    const i64 r1 = r0 + rows_per_chunk < n_rows ? r0 + rows_per_chunk : n_rows;
    A aw = A(0), ab = A(0);
    if (c < row_len)
        for (i64 r = r0 + threadIdx.y; r < r1; r += blockDim.y) {
            const A gv = Tr<T>::load(g[tl_index(go, r) + c * gi]);
            ab += gv;
            if (pw) aw += gv * (Tr<T>::load(x[tl_index(xo, r) + c * xi]) - stats[2 * r]) * stats[2 * r + 1];
        }
    const int t = threadIdx.y * blockDim.x + threadIdx.x;
    sw[t] = aw; sb[t] = ab;
    __syncthreads();
    if (threadIdx.y != 0 || c >= row_len) return;
    for (int k = 1; k < (int)blockDim.y; ++k) { aw += sw[k * blockDim.x + threadIdx.x]; ab += sb[k * blockDim.x + threadIdx.x]; }
    if (pw) pw[chunk * row_len + c] = aw;
    if (pb) pb[chunk * row_len + c] = ab;
}

// Block (32, by), by * 32 <= TL_FINISH_THREADS: thread (tx, ty) sums column c's chunks
// ty, ty + by, ...; the by partials meet in shared memory in a fixed order. Few columns
// (a GPT's 512) make few blocks: many chunk lanes per column keep the loads in flight.
#define TL_FINISH_THREADS 1024
template <typename T>
TL_DEV void norm_wgrad_finish_map(i64 n_chunks, i64 row_len, const typename Tr<T>::acc* pw,
                                  const typename Tr<T>::acc* pb, T* dw, T* db) {
    typedef typename Tr<T>::acc A;
    __shared__ A sw[TL_FINISH_THREADS], sb[TL_FINISH_THREADS];
    const int bx = blockDim.x, t = threadIdx.y * bx + threadIdx.x;
    for (i64 c0 = (i64)blockIdx.x * bx; c0 < row_len; c0 += (i64)gridDim.x * bx) {
        const i64 c = c0 + threadIdx.x;
        A aw = A(0), ab = A(0);
        if (c < row_len) {
#pragma unroll 4
            for (i64 k = threadIdx.y; k < n_chunks; k += blockDim.y) {
                if (pw) aw += pw[k * row_len + c];
                if (pb) ab += pb[k * row_len + c];
            }
        }
        __syncthreads();  // the previous column tile's sums are read
        sw[t] = aw; sb[t] = ab;
        __syncthreads();
        if (threadIdx.y != 0 || c >= row_len) continue;
        for (int y = 1; y < (int)blockDim.y; ++y) { aw += sw[y * bx + threadIdx.x]; ab += sb[y * bx + threadIdx.x]; }
        if (dw) dw[c] = Tr<T>::store(aw);
        if (db) db[c] = Tr<T>::store(ab);
    }
}

// ---- cross entropy ------------------------------------------------------------------------------
// Per row r with target t = tgt[r]: lse = logsumexp(x[r]); wt = w[t] (1 without weights,
// 0 when t == ignore_index); loss = wt * (lse - x[r, t]). Outputs are A-typed, one per
// row. A target outside [0, C) that is not ignore_index sets *err (the host raises) and
// counts as ignored. The logits are read once: each thread keeps a running (max, sum of
// exp(x - max)), rescaled when the max grows, and the row's threads merge theirs.
#define TL_CE_VECTORS 4  // 16-byte vectors in flight per thread
template <typename A> struct LseState { A m, s; };
template <typename A> struct LseOp {
    typedef LseState<A> State;
    static TL_DEV State combine(State a, State b) {
        State r;
        r.m = MaxOp<A>::combine(a.m, b.m);
        r.s = r.m == tl_lowest<A>() ? A(0) : a.s * tl_exp(a.m - r.m) + b.s * tl_exp(b.m - r.m);
        return r;
    }
    static TL_DEV State shfl(State v, int m, int w) {
        State r; r.m = tl_shfl_xor(v.m, m, w); r.s = tl_shfl_xor(v.s, m, w); return r;
    }
};

template <typename T>
TL_DEV void cross_entropy_fwd_rows(i64 n_rows, i64 row_len, const Strided& xo, i64 xi, const Strided& tl,
                                   const i64* tgt, const T* w, i64 w_stride, i64 ignore_index, const T* x,
                                   typename Tr<T>::acc* loss, typename Tr<T>::acc* lse_out,
                                   typename Tr<T>::acc* wt_out, int* err) {
    typedef typename Tr<T>::acc A;
    typedef RowTile<T, TL_CE_VECTORS> Tile;
    enum { N = Tile::N };
    __shared__ LseState<A> smem[TL_MAX_WARPS];
    const i64 rpb = blockDim.y;
    for (i64 base = (i64)blockIdx.x * rpb; base < n_rows; base += (i64)gridDim.x * rpb) {
        const i64 row = base + threadIdx.y;
        const bool valid = row < n_rows;
        const T* xr = x + (valid ? tl_index(xo, row) : 0);
        LseState<A> st; st.m = tl_lowest<A>(); st.s = A(0);
        Tile(xr, valid ? row_len : 0, xi).each([&](i64, const A* v, int cnt) {
            A vm = tl_lowest<A>();
#pragma unroll
            for (int e = 0; e < N; ++e) if (e < cnt) vm = MaxOp<A>::combine(vm, v[e]);
            const A mn = MaxOp<A>::combine(st.m, vm);
            if (mn == tl_lowest<A>()) return;  // nothing but -inf so far
            A acc = A(0);
#pragma unroll
            for (int e = 0; e < N; ++e) if (e < cnt) acc += tl_exp(v[e] - mn);
            st.s = (st.m == mn ? st.s : st.s * tl_exp(st.m - mn)) + acc;
            st.m = mn;
        });
        st = tl_row_allreduce<LseOp<A> >(st, smem);
        if (!valid || threadIdx.x != 0) continue;
        const A lse = st.m + tl_log(st.s);
        const i64 t = tgt[tl_index(tl, row)];
        A wt = A(0), l = A(0);
        if (t != ignore_index) {
            if (t < 0 || t >= row_len) {
                *err = 1;
            } else {
                wt = w ? Tr<T>::load(w[t * w_stride]) : A(1);
                l = wt * (lse - Tr<T>::load(xr[t * xi]));
            }
        }
        loss[row] = l; lse_out[row] = lse; wt_out[row] = wt;
    }
}

// dx[r, c] = dloss[r] * wt[r] * (exp(x[r, c] - lse[r]) - (c == t[r])); rows with wt 0
// (ignored) get 0 without reading x. dloss is read through its Strided layout (a
// broadcast scalar for the 'mean' and 'sum' reductions). Row kernel (blocks as the
// forward's): the per-row values are read once per row, the logits by vectors.
template <typename T>
TL_DEV void cross_entropy_bwd_rows(i64 n_rows, i64 row_len, const Strided& xo, i64 xi, const Strided& tl,
                                   const i64* tgt, const Strided& gl, const typename Tr<T>::acc* gloss,
                                   const typename Tr<T>::acc* lse, const typename Tr<T>::acc* wt, const T* x,
                                   T* out) {
    typedef typename Tr<T>::acc A;
    typedef RowTile<T, TL_CE_VECTORS> Tile;
    enum { N = Tile::N };
    const i64 rpb = blockDim.y;
    for (i64 base = (i64)blockIdx.x * rpb; base < n_rows; base += (i64)gridDim.x * rpb) {
        const i64 row = base + threadIdx.y;
        if (row >= n_rows) continue;  // no block-wide steps here
        T* o = out + row * row_len;
        const A wr = wt[row];
        if (wr == A(0)) {
            A z[N];
#pragma unroll
            for (int e = 0; e < N; ++e) z[e] = A(0);
            for (i64 k = threadIdx.x; k * N < row_len; k += blockDim.x) {
                const i64 left = row_len - k * N;
                store_part<T, N>(o + k * N, z, left < N ? (int)left : (int)N);
            }
            continue;
        }
        const A scale = gloss[tl_index(gl, row)] * wr, l = lse[row];
        const i64 t = tgt[tl_index(tl, row)];
        Tile(x + tl_index(xo, row), row_len, xi).each([&](i64 k, const A* v, int cnt) {
            A d[N];
#pragma unroll
            for (int e = 0; e < N; ++e) {
                const A p = row_exp<T>(v[e] - l);
                d[e] = scale * (k * N + e == t ? p - A(1) : p);
            }
            store_part<T, N>(o + k * N, d, cnt);
        });
    }
}

// ---- activation derivatives ---------------------------------------------------------------------
struct DGeluTanh {  // tanh approximation
    template <typename A> static TL_DEV A f(A x) {
        const A k = A(0.7978845608028654), c = A(0.044715);
        const A t = tl_tanh(k * (x + c * x * x * x));
        return A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * k * (A(1) + A(3) * c * x * x);
    }
};
struct DGeluErf {  // Phi(x) + x * phi(x)
    template <typename A> static TL_DEV A f(A x) {
        return A(0.5) * (A(1) + tl_erf(x * A(0.7071067811865476))) + x * tl_exp(A(-0.5) * x * x) * A(0.3989422804014327);
    }
};
struct DSilu {  // s * (1 + x * (1 - s)), s = sigmoid(x)
    template <typename A> static TL_DEV A f(A x) {
        const A s = A(1) / (A(1) + tl_exp(-x));
        return s * (A(1) + x * (A(1) - s));
    }
};

template <typename D, typename T>
TL_DEV void act_bwd_map(i64 n, const Strided& Lx, const Strided& Lg, const T* x, const T* g, T* out) {
    auto f = [](T xv, T gv) {
        typedef typename Tr<T>::acc A;
        return Tr<T>::store(Tr<T>::load(gv) * D::template f<A>(Tr<T>::load(xv)));
    };
    tl_map2(n, Lx, Lg, x, g, out, f);
}

// ---- AdamW / Adam step, in place ------------------------------------------------------------------
// torch.optim.AdamW / Adam (single-tensor path): with g = -grad when maximize,
//   decoupled: p *= 1 - lr * wd          else: g += wd * p
//   m = lerp(m, g, 1 - b1);  v = v * b2 + (1 - b2) * g * g;  vmax = max(vmax, v) (amsgrad)
//   p -= step_size * m / (sqrt(v or vmax) / bc2_sqrt + eps)
// with step_size = lr / (1 - b1^t) and bc2_sqrt = sqrt(1 - b2^t) from the host, or (the _cap
// entries, torch's capturable=True) from a float32 step count t and lr in device memory. The
// parameter is read and written through its layout; the states (m, v, vmax: A-typed,
// contiguous) by element index. flags: 1 decoupled, 2 maximize, 4 amsgrad.
template <typename A> struct AdamStep {
    A decay, w1, beta2, w2, wd, eps, step_size, bc2;
    int flags;
    TL_DEV AdamStep(double lr, double b1, double b2, double eps_, double wd_, double ss, double bc2_sqrt, int f)
        : decay((A)(1.0 - lr * wd_)), w1((A)(1.0 - b1)), beta2((A)b2), w2((A)(1.0 - b2)), wd((A)wd_),
          eps((A)eps_), step_size((A)ss), bc2((A)bc2_sqrt), flags(f) {}
    // element i: parameter value pv and gradient gv in, the new parameter value out
    TL_DEV A operator()(A pv, A gv, A* m, A* v, A* vmax, i64 i) const {
        if (flags & 2) gv = -gv;
        if (flags & 1) pv *= decay;
        else if (wd != A(0)) gv += wd * pv;
        A mv = m[i];
        mv = w1 < A(0.5) ? mv + w1 * (gv - mv) : gv - (gv - mv) * (A(1) - w1);  // torch's lerp
        A vv = v[i] * beta2 + w2 * gv * gv;
        m[i] = mv; v[i] = vv;
        if (flags & 4) {
            const A prev = vmax[i];
            vv = prev > vv ? prev : vv;
            vmax[i] = vv;
        }
        return pv - step_size * (mv / (tl_sqrt(vv) / bc2 + eps));
    }
};

TL_MATH1(expm1, expm1f, expm1)

// capturable: this step's count *t (already incremented) and lr (*lr_dev, or lr where lr_dev is
// null) read when the kernel runs; 1 - b^t = -expm1(t * log b) with log b from the host keeps
// A's precision for b near 1 (1 - powf(b, t) would lose it), and b = 0 (log -inf) gives 1.
template <typename A>
TL_DEV AdamStep<A> adam_counted_step(const float* lr_dev, double lr, double b1, double b2, double eps, double wd,
                                     double log_b1, double log_b2, const float* t, int flags) {
    const A n = (A)*t, l = lr_dev ? (A)*lr_dev : (A)lr;
    const A bc1 = -tl_expm1(n * (A)log_b1), bc2 = -tl_expm1(n * (A)log_b2);
    return AdamStep<A>(l, b1, b2, eps, wd, l / bc1, tl_sqrt(bc2), flags);
}

template <typename T>
TL_DEV void adamw_map(i64 n, const Strided& Lp, const Strided& Lg, T* p, const T* g, typename Tr<T>::acc* m,
                      typename Tr<T>::acc* v, typename Tr<T>::acc* vmax, const AdamStep<typename Tr<T>::acc>& step) {
    TL_GRID_LOOP(i, n) {
        const i64 pi = tl_index(Lp, i);
        p[pi] = Tr<T>::store(step(Tr<T>::load(p[pi]), Tr<T>::load(g[tl_index(Lg, i)]), m, v, vmax, i));
    }
}

// adamw_many_<t>: the same step for up to TL_ADAM_TENSORS contiguous parameters of one
// dtype in one launch (an optimizer step is otherwise one launch per parameter, and a
// model has a hundred small ones). Block b works on TL_ADAM_CHUNK elements of tensor t,
// first_block[t] <= b < first_block[t + 1]. No amsgrad (the host keeps that per tensor).
#define TL_ADAM_TENSORS 24
#define TL_ADAM_CHUNK 2048
template <typename T> struct AdamTable {
    i64 n[TL_ADAM_TENSORS];
    i64 first_block[TL_ADAM_TENSORS + 1];
    T* p[TL_ADAM_TENSORS];
    const T* g[TL_ADAM_TENSORS];
    typename Tr<T>::acc* m[TL_ADAM_TENSORS];
    typename Tr<T>::acc* v[TL_ADAM_TENSORS];
    int count;
};
template <typename T> struct AdamTableCap {  // capturable: each tensor's float32 step count too
    AdamTable<T> tb;
    const float* step[TL_ADAM_TENSORS];
};

// Steps(t): tensor t's AdamStep: the host's one for all (AdamSame), or from t's count (AdamCounted)
template <typename A> struct AdamSame {
    AdamStep<A> s;
    TL_DEV const AdamStep<A>& operator()(int) const { return s; }
};
template <typename A> struct AdamCounted {
    const float* lr_dev;
    const float* const* step;
    double lr, b1, b2, eps, wd, log_b1, log_b2;
    int flags;
    TL_DEV AdamStep<A> operator()(int t) const {
        return adam_counted_step<A>(lr_dev, lr, b1, b2, eps, wd, log_b1, log_b2, step[t], flags);
    }
};

template <typename T, typename Steps>
TL_DEV void adamw_many_map(const AdamTable<T>& tb, const Steps& steps) {
    const i64 n_blocks = tb.first_block[tb.count];
    for (i64 b = blockIdx.x; b < n_blocks; b += gridDim.x) {
        const int t = tl_table_tensor(tb.first_block, b);
        const AdamStep<typename Tr<T>::acc>& step = steps(t);
        const i64 i0 = (b - tb.first_block[t]) * TL_ADAM_CHUNK;
        const i64 i1 = i0 + TL_ADAM_CHUNK < tb.n[t] ? i0 + TL_ADAM_CHUNK : tb.n[t];
        T* p = tb.p[t];
        const T* g = tb.g[t];
        for (i64 i = i0 + threadIdx.x; i < i1; i += blockDim.x)
            p[i] = Tr<T>::store(step(Tr<T>::load(p[i]), Tr<T>::load(g[i]), tb.m[t], tb.v[t], 0, i));
    }
}

// norm_bwd_fit's entry points: `Vec` rows (contiguous, aligned, whole vectors) need no
// per-element addresses, which lets the registers fit MIN_BLOCKS blocks per SM/CU.
#define NORM_BWD_FIT_ENTRIES(T, sfx, name, Vec, MIN_BLOCKS)                                   \
    extern "C" __global__ void __launch_bounds__(TL_NORM_FIT_THREADS, MIN_BLOCKS) layer_norm_bwd_##name##_##sfx( \
        i64 n_rows, i64 row_len, Strided xo, i64 xi, Strided go, i64 gi, const T* x, const T* g,  \
        const T* w, i64 w_stride, double eps, Tr<T>::acc* pw, Tr<T>::acc* pb, T* out) {          \
        norm_bwd_fit<T, false, Vec>(n_rows, row_len, xo, xi, go, gi, x, g, w, w_stride, eps, pw, pb, out); \
    }                                                                                         \
    extern "C" __global__ void __launch_bounds__(TL_NORM_FIT_THREADS, MIN_BLOCKS) rms_norm_bwd_##name##_##sfx( \
        i64 n_rows, i64 row_len, Strided xo, i64 xi, Strided go, i64 gi, const T* x, const T* g,  \
        const T* w, i64 w_stride, double eps, Tr<T>::acc* pw, T* out) {                         \
        norm_bwd_fit<T, true, Vec>(n_rows, row_len, xo, xi, go, gi, x, g, w, w_stride, eps, pw, 0, out); \
    }

// add_layer_norm_bwd_<t> (every operand of T) and add_layer_norm_bwd_f32_<h> (x, gs, w and dx
// f32, dy and the residual's gradient of the half type h): norm_bwd_fit of Vec rows plus the
// residual sum's gradient gs (nullable); out_h (nullable) gets dx in H too
#define ADD_LAYER_NORM_BWD_ENTRY(T, H, sfx)                                                   \
    extern "C" __global__ void __launch_bounds__(TL_NORM_FIT_THREADS, TL_NORM_FIT_VEC_BLOCKS(T)) \
    add_layer_norm_bwd_##sfx(i64 n_rows, i64 row_len, Strided xo, i64 xi, Strided go, i64 gi,  \
        const T* x, const H* g, const T* w, i64 w_stride, double eps, Tr<T>::acc* pw, Tr<T>::acc* pb, \
        T* out, const T* gs, H* out_h) {                                                      \
        norm_bwd_fit<T, false, true, H>(n_rows, row_len, xo, xi, go, gi, x, g, w, w_stride, eps, pw, pb, out, gs, \
                                        out_h);                                               \
    }
ADD_LAYER_NORM_BWD_ENTRY(float, f16, f32_f16)
ADD_LAYER_NORM_BWD_ENTRY(float, bf16, f32_bf16)

#define FUSED_GRAD_ENTRIES(T, sfx)                                                             \
    extern "C" __global__ void softmax_bwd_##sfx(i64 n_rows, i64 row_len, Strided yo, i64 yi, \
        Strided go, i64 gi, const T* y, const T* g, T* out) {                                 \
        softmax_bwd_rows<T, false>(n_rows, row_len, yo, yi, go, gi, y, g, out);               \
    }                                                                                         \
    extern "C" __global__ void log_softmax_bwd_##sfx(i64 n_rows, i64 row_len, Strided yo, i64 yi, \
        Strided go, i64 gi, const T* y, const T* g, T* out) {                                 \
        softmax_bwd_rows<T, true>(n_rows, row_len, yo, yi, go, gi, y, g, out);                \
    }                                                                                         \
    extern "C" __global__ void layer_norm_bwd_##sfx(i64 n_rows, i64 row_len, Strided xo, i64 xi, \
        Strided go, i64 gi, const T* x, const T* g, const T* w, i64 w_stride, double eps,      \
        Tr<T>::acc* stats, T* out) {                                                          \
        norm_bwd_rows<T, false>(n_rows, row_len, xo, xi, go, gi, x, g, w, w_stride, eps, stats, out); \
    }                                                                                         \
    extern "C" __global__ void rms_norm_bwd_##sfx(i64 n_rows, i64 row_len, Strided xo, i64 xi, \
        Strided go, i64 gi, const T* x, const T* g, const T* w, i64 w_stride, double eps,      \
        Tr<T>::acc* stats, T* out) {                                                          \
        norm_bwd_rows<T, true>(n_rows, row_len, xo, xi, go, gi, x, g, w, w_stride, eps, stats, out); \
    }                                                                                         \
    NORM_BWD_FIT_ENTRIES(T, sfx, fit, false, 1)                                                \
    NORM_BWD_FIT_ENTRIES(T, sfx, fit_vec, true, TL_NORM_FIT_VEC_BLOCKS(T))                                             \
    ADD_LAYER_NORM_BWD_ENTRY(T, T, sfx)                                                        \
    extern "C" __global__ void norm_wgrad_##sfx(i64 n_rows, i64 row_len, i64 rows_per_chunk,  \
        Strided xo, i64 xi, Strided go, i64 gi, const T* x, const T* g, const Tr<T>::acc* stats, \
        Tr<T>::acc* pw, Tr<T>::acc* pb) {                                                     \
        norm_wgrad_map<T>(n_rows, row_len, rows_per_chunk, xo, xi, go, gi, x, g, stats, pw, pb); \
    }                                                                                         \
    extern "C" __global__ void norm_wgrad_finish_##sfx(i64 n_chunks, i64 row_len,             \
        const Tr<T>::acc* pw, const Tr<T>::acc* pb, T* dw, T* db) {                           \
        norm_wgrad_finish_map<T>(n_chunks, row_len, pw, pb, dw, db);                          \
    }                                                                                         \
    extern "C" __global__ void cross_entropy_fwd_##sfx(i64 n_rows, i64 row_len, Strided xo, i64 xi, \
        Strided tl, const i64* tgt, const T* w, i64 w_stride, i64 ignore_index, const T* x,    \
        Tr<T>::acc* loss, Tr<T>::acc* lse, Tr<T>::acc* wt, int* err) {                        \
        cross_entropy_fwd_rows<T>(n_rows, row_len, xo, xi, tl, tgt, w, w_stride, ignore_index, x, loss, lse, \
                                  wt, err);                                                   \
    }                                                                                         \
    extern "C" __global__ void cross_entropy_bwd_##sfx(i64 n_rows, i64 row_len, Strided xo, i64 xi, \
        Strided tl, const i64* tgt, Strided gl, const Tr<T>::acc* gloss, const Tr<T>::acc* lse, \
        const Tr<T>::acc* wt, const T* x, T* out) {                                           \
        cross_entropy_bwd_rows<T>(n_rows, row_len, xo, xi, tl, tgt, gl, gloss, lse, wt, x, out); \
    }                                                                                         \
    extern "C" __global__ void gelu_tanh_bwd_##sfx(i64 n, Strided Lx, Strided Lg, const T* x, const T* g, \
                                                   T* out) {                                  \
        act_bwd_map<DGeluTanh, T>(n, Lx, Lg, x, g, out);                                      \
    }                                                                                         \
    extern "C" __global__ void gelu_erf_bwd_##sfx(i64 n, Strided Lx, Strided Lg, const T* x, const T* g, \
                                                  T* out) {                                   \
        act_bwd_map<DGeluErf, T>(n, Lx, Lg, x, g, out);                                       \
    }                                                                                         \
    extern "C" __global__ void silu_bwd_##sfx(i64 n, Strided Lx, Strided Lg, const T* x, const T* g, T* out) { \
        act_bwd_map<DSilu, T>(n, Lx, Lg, x, g, out);                                          \
    }                                                                                         \
    extern "C" __global__ void adamw_##sfx(i64 n, Strided Lp, Strided Lg, T* p, const T* g,   \
        Tr<T>::acc* m, Tr<T>::acc* v, Tr<T>::acc* vmax, double lr, double b1, double b2,      \
        double eps, double wd, double step_size, double bc2_sqrt, int flags) {                \
        adamw_map<T>(n, Lp, Lg, p, g, m, v, vmax,                                             \
                     AdamStep<Tr<T>::acc>(lr, b1, b2, eps, wd, step_size, bc2_sqrt, flags));   \
    }                                                                                         \
    extern "C" __global__ void adamw_many_##sfx(AdamTable<T> tb, double lr, double b1, double b2, \
        double eps, double wd, double step_size, double bc2_sqrt, int flags) {                \
        const AdamSame<Tr<T>::acc> same = {AdamStep<Tr<T>::acc>(lr, b1, b2, eps, wd, step_size, bc2_sqrt, flags)}; \
        adamw_many_map<T>(tb, same);                                                          \
    }                                                                                         \
    extern "C" __global__ void adamw_cap_##sfx(i64 n, Strided Lp, Strided Lg, T* p, const T* g, \
        Tr<T>::acc* m, Tr<T>::acc* v, Tr<T>::acc* vmax, const float* lr_dev, double lr, double b1, \
        double b2, double eps, double wd, double log_b1, double log_b2, const float* step, int flags) { \
        adamw_map<T>(n, Lp, Lg, p, g, m, v, vmax, adam_counted_step<Tr<T>::acc>(              \
            lr_dev, lr, b1, b2, eps, wd, log_b1, log_b2, step, flags));                       \
    }                                                                                         \
    extern "C" __global__ void adamw_many_cap_##sfx(AdamTableCap<T> tc, const float* lr_dev, double lr, \
        double b1, double b2, double eps, double wd, double log_b1, double log_b2, int flags) { \
        const AdamCounted<Tr<T>::acc> counted = {lr_dev, tc.step, lr, b1, b2, eps, wd, log_b1, log_b2, flags}; \
        adamw_many_map<T>(tc.tb, counted);                                                    \
    }
TL_FOR_FLOATS(FUSED_GRAD_ENTRIES)
