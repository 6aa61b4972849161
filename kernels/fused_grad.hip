// Backward kernels of the fused nn ops, the fused cross-entropy, the activation
// derivatives and the AdamW update; floating dtypes, f32 arithmetic for the half types
// (A = Tr<T>::acc: f32, or f64 for f64).
//
// softmax_bwd_<t>, log_softmax_bwd_<t>     grad in over the last dim, from y and dy
// layer_norm_bwd_<t>, rms_norm_bwd_<t>     dx (one row kernel) + per-row (mean, rstd)
// norm_wgrad_<t>, norm_wgrad_finish_<t>    dweight/dbias: partial column sums per row
//                                          chunk, then one sum per column (no atomics)
// cross_entropy_fwd_<t>, _bwd_<t>          log-softmax + NLL per row, softmax - onehot
// gelu_bwd_<t>, gelu_erf_bwd_<t>, silu_bwd_<t>   dy * f'(x)
// adamw_<t>                                one in-place AdamW/Adam step per parameter
// adamw_many_<t>                           the same for up to 24 contiguous parameters at once
//
// Row kernels use fused.hip's conventions: `outer` addresses each row's first element,
// `inner` steps along the row, blocks are (tpr, rows_per_block) (tl_row_allreduce).
#include "compat.h"

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

// ---- layer_norm / rms_norm backward: dx ---------------------------------------------------
// xhat = (x - mean) * rstd (mean = 0 for rms), gw = dy * w:
// dx = rstd * (gw - xhat * mean(gw * xhat) - mean(gw))   (no mean(gw) term for rms).
// mean/rstd are recomputed from x as the forward does; `stats` (nullable) receives them
// for the weight-gradient kernel.
template <typename T, bool Rms>
TL_DEV void norm_bwd_rows(i64 n_rows, i64 row_len, const Strided& xo, i64 xi, const Strided& go, i64 gi,
                          const T* x, const T* g, const T* w, i64 w_stride, double eps,
                          typename Tr<T>::acc* stats, T* out) {
    typedef typename Tr<T>::acc A;
    __shared__ A smem[TL_MAX_WARPS];
    __shared__ Pair<A> psmem[TL_MAX_WARPS];
    const i64 rpb = blockDim.y;
    for (i64 base = (i64)blockIdx.x * rpb; base < n_rows; base += (i64)gridDim.x * rpb) {
        const i64 row = base + threadIdx.y;
        const bool valid = row < n_rows;
        const T* xr = x + (valid ? tl_index(xo, row) : 0);
        const T* gr = g + (valid ? tl_index(go, row) : 0);
        A mean = A(0);
        if (!Rms) {
            if (valid)
                for (i64 j = threadIdx.x; j < row_len; j += blockDim.x) mean += Tr<T>::load(xr[j * xi]);
            mean = tl_row_allreduce<SumOp<A> >(mean, smem) / (A)row_len;
        }
        A sq = A(0);
        if (valid)
            for (i64 j = threadIdx.x; j < row_len; j += blockDim.x) {
                const A d = Tr<T>::load(xr[j * xi]) - mean;
                sq += d * d;
            }
        sq = tl_row_allreduce<SumOp<A> >(sq, smem);
        const A rstd = A(1) / tl_sqrt(sq / (A)row_len + (A)eps);
        Pair<A> sums; sums.a = A(0); sums.b = A(0);  // sum(gw), sum(gw * xhat)
        if (valid)
            for (i64 j = threadIdx.x; j < row_len; j += blockDim.x) {
                A gw = Tr<T>::load(gr[j * gi]);
                if (w) gw *= Tr<T>::load(w[j * w_stride]);
                sums.a += gw;
                sums.b += gw * (Tr<T>::load(xr[j * xi]) - mean) * rstd;
            }
        sums = tl_row_allreduce<PairSumOp<A> >(sums, psmem);
        if (!valid) continue;
        if (stats && threadIdx.x == 0) { stats[2 * row] = mean; stats[2 * row + 1] = rstd; }
        const A inv_n = A(1) / (A)row_len;
        const A mean_gw = Rms ? A(0) : sums.a * inv_n, mean_gwx = sums.b * inv_n;
        T* o = out + row * row_len;
        for (i64 j = threadIdx.x; j < row_len; j += blockDim.x) {
            A gw = Tr<T>::load(gr[j * gi]);
            if (w) gw *= Tr<T>::load(w[j * w_stride]);
            const A xhat = (Tr<T>::load(xr[j * xi]) - mean) * rstd;
            o[j] = Tr<T>::store(rstd * (gw - xhat * mean_gwx - mean_gw));
        }
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

template <typename T>
TL_DEV void norm_wgrad_finish_map(i64 n_chunks, i64 row_len, const typename Tr<T>::acc* pw,
                                  const typename Tr<T>::acc* pb, T* dw, T* db) {
    typedef typename Tr<T>::acc A;
    TL_GRID_LOOP(c, row_len) {
        A aw = A(0), ab = A(0);
        for (i64 k = 0; k < n_chunks; ++k) {
            if (pw) aw += pw[k * row_len + c];
            if (pb) ab += pb[k * row_len + c];
        }
        if (dw) dw[c] = Tr<T>::store(aw);
        if (db) db[c] = Tr<T>::store(ab);
    }
}

// ---- cross entropy ------------------------------------------------------------------------------
// Per row r with target t = tgt[r]: lse = logsumexp(x[r]); wt = w[t] (1 without weights,
// 0 when t == ignore_index); loss = wt * (lse - x[r, t]). Outputs are A-typed, one per
// row. A target outside [0, C) that is not ignore_index sets *err (the host raises) and
// counts as ignored.
template <typename T>
TL_DEV void cross_entropy_fwd_rows(i64 n_rows, i64 row_len, const Strided& xo, i64 xi, const Strided& tl,
                                   const i64* tgt, const T* w, i64 w_stride, i64 ignore_index, const T* x,
                                   typename Tr<T>::acc* loss, typename Tr<T>::acc* lse_out,
                                   typename Tr<T>::acc* wt_out, int* err) {
    typedef typename Tr<T>::acc A;
    __shared__ A smem[TL_MAX_WARPS];
    const i64 rpb = blockDim.y;
    for (i64 base = (i64)blockIdx.x * rpb; base < n_rows; base += (i64)gridDim.x * rpb) {
        const i64 row = base + threadIdx.y;
        const bool valid = row < n_rows;
        const T* xr = x + (valid ? tl_index(xo, row) : 0);
        A m = tl_lowest<A>();
        if (valid)
            for (i64 j = threadIdx.x; j < row_len; j += blockDim.x) m = MaxOp<A>::combine(m, Tr<T>::load(xr[j * xi]));
        m = tl_row_allreduce<MaxOp<A> >(m, smem);
        A s = A(0);
        if (valid)
            for (i64 j = threadIdx.x; j < row_len; j += blockDim.x) s += tl_exp(Tr<T>::load(xr[j * xi]) - m);
        s = tl_row_allreduce<SumOp<A> >(s, smem);
        if (!valid || threadIdx.x != 0) continue;
        const A lse = m + tl_log(s);
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
// (ignored) get 0. dloss is read through its Strided layout (a broadcast scalar for the
// 'mean' and 'sum' reductions).
template <typename T>
TL_DEV void cross_entropy_bwd_map(i64 n_rows, i64 row_len, const Strided& xo, i64 xi, const Strided& tl,
                                  const i64* tgt, const Strided& gl, const typename Tr<T>::acc* gloss,
                                  const typename Tr<T>::acc* lse, const typename Tr<T>::acc* wt, const T* x,
                                  T* out) {
    typedef typename Tr<T>::acc A;
    TL_GRID_LOOP(e, n_rows * row_len) {
        const i64 r = e / row_len, c = e - r * row_len;
        const A wr = wt[r];
        A d = A(0);
        if (wr != A(0)) {
            const A p = tl_exp(Tr<T>::load(x[tl_index(xo, r) + c * xi]) - lse[r]);
            d = gloss[tl_index(gl, r)] * wr * (c == tgt[tl_index(tl, r)] ? p - A(1) : p);
        }
        out[e] = Tr<T>::store(d);
    }
}

// ---- activation derivatives ---------------------------------------------------------------------
struct DGelu {  // tanh approximation
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
    if (Lx.contiguous && Lg.contiguous) {
        tl_map2_contig(n, x + Lx.offset, g + Lg.offset, out, f);
    } else {
        TL_GRID_LOOP(i, n) out[i] = f(x[tl_index(Lx, i)], g[tl_index(Lg, i)]);
    }
}

// ---- AdamW / Adam step, in place ------------------------------------------------------------------
// torch.optim.AdamW / Adam (single-tensor path): with g = -grad when maximize,
//   decoupled: p *= 1 - lr * wd          else: g += wd * p
//   m = lerp(m, g, 1 - b1);  v = v * b2 + (1 - b2) * g * g;  vmax = max(vmax, v) (amsgrad)
//   p -= step_size * m / (sqrt(v or vmax) / bc2_sqrt + eps)
// with step_size = lr / (1 - b1^t) and bc2_sqrt = sqrt(1 - b2^t) from the host. The
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

template <typename T>
TL_DEV void adamw_map(i64 n, const Strided& Lp, const Strided& Lg, T* p, const T* g, typename Tr<T>::acc* m,
                      typename Tr<T>::acc* v, typename Tr<T>::acc* vmax, double lr, double b1, double b2,
                      double eps, double wd, double step_size, double bc2_sqrt, int flags) {
    const AdamStep<typename Tr<T>::acc> step(lr, b1, b2, eps, wd, step_size, bc2_sqrt, flags);
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

template <typename T>
TL_DEV void adamw_many_map(const AdamTable<T>& tb, double lr, double b1, double b2, double eps, double wd,
                           double step_size, double bc2_sqrt, int flags) {
    const AdamStep<typename Tr<T>::acc> step(lr, b1, b2, eps, wd, step_size, bc2_sqrt, flags);
    const i64 n_blocks = tb.first_block[tb.count];
    for (i64 b = blockIdx.x; b < n_blocks; b += gridDim.x) {
        int t = 0;
        while (b >= tb.first_block[t + 1]) ++t;
        const i64 i0 = (b - tb.first_block[t]) * TL_ADAM_CHUNK;
        const i64 i1 = i0 + TL_ADAM_CHUNK < tb.n[t] ? i0 + TL_ADAM_CHUNK : tb.n[t];
        T* p = tb.p[t];
        const T* g = tb.g[t];
        for (i64 i = i0 + threadIdx.x; i < i1; i += blockDim.x)
            p[i] = Tr<T>::store(step(Tr<T>::load(p[i]), Tr<T>::load(g[i]), tb.m[t], tb.v[t], 0, i));
    }
}

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
        cross_entropy_bwd_map<T>(n_rows, row_len, xo, xi, tl, tgt, gl, gloss, lse, wt, x, out); \
    }                                                                                         \
    extern "C" __global__ void gelu_bwd_##sfx(i64 n, Strided Lx, Strided Lg, const T* x, const T* g, T* out) { \
        act_bwd_map<DGelu, T>(n, Lx, Lg, x, g, out);                                          \
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
        adamw_map<T>(n, Lp, Lg, p, g, m, v, vmax, lr, b1, b2, eps, wd, step_size, bc2_sqrt, flags); \
    }                                                                                         \
    extern "C" __global__ void adamw_many_##sfx(AdamTable<T> tb, double lr, double b1, double b2, \
        double eps, double wd, double step_size, double bc2_sqrt, int flags) {                \
        adamw_many_map<T>(tb, lr, b1, b2, eps, wd, step_size, bc2_sqrt, flags);               \
    }
TL_FOR_FLOATS(FUSED_GRAD_ENTRIES)
