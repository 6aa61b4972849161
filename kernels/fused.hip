// Fused nn ops (candle's CustomOps), floating dtypes, f32 arithmetic for the half types:
// softmax_<t>, log_softmax_<t>, layer_norm_<t>, rms_norm_<t>, add_rms_norm_<t> over the last dim;
// rope_<t>, rope_i_<t>, rope_thd_<t>; rope_kv_cache_<t> (rope and a decode step's KV-cache
// write); attn_softmax_<t> (the masked softmax inside sdpa).
//
// Row ops see the input as n_rows rows of row_len elements: `outer` addresses each row's
// first element, `inner_stride` steps along the row. Blocks are (tpr, rows_per_block) as
// at tl_row_allreduce in compat.h; outputs are contiguous.
#include "rows.h"  // Run, load_run, load_part, store_run, store_run_aligned, row_exp

// ---- softmax, log_softmax, layer_norm, rms_norm over rows --------------------------------
// Each thread first reduces its own elements of a row completely (no barrier), then the
// row's threads merge one small state in a single all-reduction (compat.h tl_row_allreduce:
// MaxSum for softmax, MeanM2 for layer_norm, a sum of squares for rms_norm), then each thread
// writes its elements. A thread's elements are held one of two ways, chosen once per
// launch so that only one of them occupies registers:
// - RowRegs, the fast path: every row contiguous, 16-byte aligned, a whole number of
//   16-byte vectors and at most RowRegs::V vectors per thread (slot c holds vector
//   threadIdx.x + c * blockDim.x, so neighbouring threads read neighbouring memory). Read
//   once and kept in the storage type (a bf16 vector is 4 registers, not 8); reduced as
//   trees; 32-bit index math (a row fits one block). softmax keeps its exps there (in f32
//   beside the row for the 16-bit types).
// - RowCache, any other row (strided, misaligned, not whole vectors, longer than the
//   block holds): re-read from memory on each pass (L1/L2 hits after the first), by
//   vectors where the row, weight and bias allow, else element by element. It holds
//   nothing in registers, so that the kernel's register count (and occupancy) is the
//   fast path's.
// The host picks threads per row so that a row of vectors fits (launch.py, launch_rows).
#define TL_ROW_GROUP 2  // RowRegs::store: vectors computed before any is written
// Register cap of the RowRegs kernels that hold a second set beside the row (softmax's
// kept exps, layer_norm's weight and bias: RowRegs::wide, RowRegs::Operand): 8 blocks of
// 64 threads per NVIDIA SM.
#define TL_ROW_REGS_CAP 128

// V, the most vectors a thread holds (launch.py row_vectors mirrors it): 8 for 16-bit types,
// else 4. On the H100 at rows of 4096, 8 took bf16 softmax from 84% to 90% of the copy
// bandwidth and rms_norm from 88% to 90%, but f32 rms_norm from 94% to 89%; 2 was slower.
template <typename T> struct RowSlots { enum { V = sizeof(T) == 2 ? 8 : 4 }; };

// Slots: RowSlots<T>::V, or 1 where the launch gives each thread one vector (a few rows
// spread over a block: launch.py SPREAD_ROWS_BELOW). A kernel of a decode step runs once per
// token, its code cold in the instruction cache: its time grows with the instructions it
// executes, and the single slot executes a fraction of the unrolled V.
template <typename T, int Slots = RowSlots<T>::V>
struct RowRegs {
    typedef typename Tr<T>::acc A;
    enum { N = 16 / sizeof(T), V = Slots };
    Run<T, N> raw[V];
    // A Keep fold's values where T is narrower than A (rounding them to T would lose
    // precision); where T is A they replace raw (kept here as well, f32 softmax took 62
    // registers instead of 46). Unused (and so no registers) otherwise.
    // On the H100 at rows of 4096, bf16 softmax keeping its exps here rather than computing
    // them again went from 90.8% to 92.3% of the copy bandwidth (with TL_ROW_REGS_CAP:
    // 139 registers uncapped, 87.7%).
    A wide[V][N];
    int live;  // slots 0 .. live-1 hold vectors of the row
    // The row x of n elements (n / N vectors; n = 0: nothing is read).
    TL_DEV RowRegs(const T* x, i64 n, i64, bool) : live(0) {
        const int nv = (int)(n / N);
#pragma unroll
        for (int c = 0; c < V; ++c) live += vector(c) < nv;
#pragma unroll
        for (int c = 0; c < V; ++c) {
            raw[c] = Run<T, N>();  // zero bits (+0) where the row ends
            if (c < live) raw[c] = ((const Run<T, N>*)x)[vector(c)];
        }
    }
    static TL_DEV int vector(int c) { return (int)threadIdx.x + c * (int)blockDim.x; }
    TL_DEV void values(int c, A* t) const {
#pragma unroll
        for (int e = 0; e < N; ++e) t[e] = Tr<T>::load(raw[c].v[e]);
    }
    TL_DEV A count() const { return A(live * N); }
    // Op over map(x) of this thread's elements (`id` if none): a tree over each vector,
    // then over the slots, so no chain of dependent operations is longer than log2.
    // Keep: each held value is replaced by map(x) (in wide where T is narrower than A), so
    // that a later pass (store<true>) reads it rather than computing it again.
    enum { KEEPS = 1 };
    template <typename Op, bool Keep = false, typename M>
    TL_DEV A fold(A id, M map) {
        A part[V];
#pragma unroll
        for (int c = 0; c < V; ++c) {
            part[c] = id;
            if (c < live) {
                A t[N];
                values(c, t);
#pragma unroll
                for (int e = 0; e < N; ++e) {
                    t[e] = map(t[e]);
                    if constexpr (Keep && sizeof(T) == sizeof(A)) raw[c].v[e] = Tr<T>::store(t[e]);
                    if constexpr (Keep && sizeof(T) != sizeof(A)) wide[c][e] = t[e];
                }
                part[c] = tl_tree<Op, N>(t);
            }
        }
        return tl_tree<Op, V>(part);
    }
    // y (the output row: contiguous, 16-byte aligned) = h(j, c, vals, N) mapping in place
    // the values of the vector at element j (slot c), TL_ROW_GROUP vectors at a time: all of
    // a group are computed (into raw) before any is written. Kept: the values are those a
    // Keep fold left.
    // y's element type O is T, or narrower (a norm whose output is cast: add_layer_norm's
    // `dtype`): then a vector of y is N elements of O, aligned to its size.
    template <bool Kept = false, typename O, typename H>
    TL_DEV void store(O* y, H h) {
        constexpr bool same = TlSame<O, T>::value;
        Run<O, N> narrow[same ? 1 : TL_ROW_GROUP];  // the rounded values where O is not T (else raw)
#pragma unroll
        for (int c0 = 0; c0 < V; c0 += TL_ROW_GROUP) {
#pragma unroll
            for (int c = c0; c < c0 + TL_ROW_GROUP && c < V; ++c) {
                if (c < live) {
                    A t[N];
                    if constexpr (Kept && sizeof(T) != sizeof(A)) {
#pragma unroll
                        for (int e = 0; e < N; ++e) t[e] = wide[c][e];
                    } else {
                        values(c, t);
                    }
                    h((i64)(vector(c) * (int)N), c, t, (int)N);
                    if constexpr (same) round_run<T, N>(raw[c], t);
                    else round_run<O, N>(narrow[c - c0], t);
                }
            }
#pragma unroll
            for (int c = c0; c < c0 + TL_ROW_GROUP && c < V; ++c) {
                if constexpr (same) {
                    if (c < live) ((Run<T, N>*)y)[vector(c)] = raw[c];
                } else {
                    if (c < live) ((Run<O, N>*)y)[vector(c)] = narrow[c - c0];
                }
            }
        }
    }
    // The row becomes itself + res (a row laid out as it, 16-byte aligned on this path, of T
    // or a narrower R), each value rounded to T, and is written to `sum` (add_rms_norm's and
    // add_layer_norm's residual add).
    template <typename R>
    TL_DEV void add(const R* res, T* sum) {
#pragma unroll
        for (int c = 0; c < V; ++c) {
            if (c < live) {
                const Run<R, N> q = ((const Run<R, N>*)res)[vector(c)];
#pragma unroll
                for (int e = 0; e < N; ++e) raw[c].v[e] = Tr<T>::store(Tr<T>::load(raw[c].v[e]) + Tr<R>::load(q.v[e]));
                ((Run<T, N>*)sum)[vector(c)] = raw[c];
            }
        }
    }
    // An operand row p of n elements (weight, bias: contiguous and 16-byte aligned on this
    // path), its vectors in this thread's slots read once for every row the thread writes,
    // and held in the storage type (a thread's columns are the same in every row); `fill`
    // where p is null. On the H100 at rows of 4096, holding them rather than reading them
    // again for each row took bf16 layer_norm from 87.5% to 91.5% of the copy bandwidth,
    // bf16 rms_norm from 90.6% to 94%, f32 layer_norm from 92.7% to 94%. bf16 layer_norm
    // needs TL_ROW_REGS_CAP for it: uncapped, its 150 registers left room for too few
    // rows per SM (86%).
    struct Operand {
        Run<T, N> q[V];
        TL_DEV Operand(const T* p, i64, i64 n, A fill) {
            const int nv = (int)(n / N);
#pragma unroll
            for (int c = 0; c < V; ++c) {
#pragma unroll
                for (int e = 0; e < N; ++e) q[c].v[e] = Tr<T>::store(fill);
                if (p && vector(c) < nv) q[c] = ((const Run<T, N>*)p)[vector(c)];
            }
        }
        // dst = the vector at element j, slot c
        TL_DEV void at(i64, int c, int, A* dst) const { widen_held<T, N>(q[c], dst); }
    };
};

template <typename T>
struct RowCache {
    typedef typename Tr<T>::acc A;
    enum { N = 16 / sizeof(T) };
    const T* x;
    i64 n, stride;
    bool vec;  // by vectors k = threadIdx.x + i * blockDim.x, else elements j likewise
    enum { KEEPS = 0 };  // nothing is held: fold's Keep must be false
    // ops_vec: the operand rows (operand()) can be read by vectors too.
    TL_DEV RowCache(const T* x_, i64 n_, i64 stride_, bool ops_vec)
        : x(x_), n(n_), stride(stride_), vec(ops_vec && stride_ == 1 && n_ % N == 0 && tl_aligned16(x_)) {}
    TL_DEV A count() const {
        const i64 t = threadIdx.x, units = vec ? n / N : n;
        const i64 mine = units > t ? (units - 1 - t) / blockDim.x + 1 : 0;
        return A(vec ? mine * N : mine);
    }
    template <typename Op, bool Keep = false, typename M>
    TL_DEV A fold(A id, M map) const {
        static_assert(!Keep, "RowCache holds nothing to keep");
        A acc = id;
        if (vec) {
#pragma unroll 2
            for (i64 k = threadIdx.x; k < n / N; k += blockDim.x) {
                const Run<T, N> q = ((const Run<T, N>*)x)[k];
                A t[N];
#pragma unroll
                for (int e = 0; e < N; ++e) t[e] = map(Tr<T>::load(q.v[e]));
                acc = Op::combine(acc, tl_tree<Op, N>(t));
            }
        } else {
#pragma unroll 4
            for (i64 j = threadIdx.x; j < n; j += blockDim.x) acc = Op::combine(acc, map(Tr<T>::load(x[j * stride])));
        }
        return acc;
    }
    // y (the contiguous output row) = h(j, 0, vals, cnt) mapping in place the cnt values
    // from element j on (cnt = N on the vector path, else 1). Nothing is ever kept.
    template <bool Kept = false, typename O, typename H>
    TL_DEV void store(O* y, H h) const {
        static_assert(!Kept, "RowCache holds nothing to keep");
        A t[N];
#pragma unroll
        for (int e = 0; e < N; ++e) t[e] = A(0);
        if (vec) {
#pragma unroll 1
            for (i64 k = threadIdx.x; k < n / N; k += blockDim.x) {
                const Run<T, N> q = ((const Run<T, N>*)x)[k];
#pragma unroll
                for (int e = 0; e < N; ++e) t[e] = Tr<T>::load(q.v[e]);
                h(k * N, 0, t, (int)N);
                store_run<O, N>(y + k * N, t);
            }
        } else {
#pragma unroll 1
            for (i64 j = threadIdx.x; j < n; j += blockDim.x) {
                t[0] = Tr<T>::load(x[j * stride]);
                h(j, 0, t, 1);
                y[j] = Tr<O>::store(t[0]);
            }
        }
    }
    // The row becomes itself + res (a row laid out as it), each value rounded to T: written to
    // the contiguous `sum`, which later passes read instead. Each thread writes the elements
    // (or vectors) that it reads in every pass, so it rereads only its own writes.
    template <typename R>
    TL_DEV void add(const R* res, T* sum) {
        if (vec) {
            for (i64 k = threadIdx.x; k < n / N; k += blockDim.x) {
                const Run<T, N> a = ((const Run<T, N>*)x)[k];
                const Run<R, N> b = ((const Run<R, N>*)res)[k];
                Run<T, N> q;
#pragma unroll
                for (int e = 0; e < N; ++e) q.v[e] = Tr<T>::store(Tr<T>::load(a.v[e]) + Tr<R>::load(b.v[e]));
                ((Run<T, N>*)sum)[k] = q;
            }
        } else {
            for (i64 j = threadIdx.x; j < n; j += blockDim.x)
                sum[j] = Tr<T>::store(Tr<T>::load(x[j * stride]) + Tr<R>::load(res[j * stride]));
        }
        x = sum;
        stride = 1;
    }
    // An operand row p with stride s (weight, bias), read where used; `fill` where p is null.
    struct Operand {
        const T* p;
        i64 s;
        A fill;
        TL_DEV Operand(const T* p_, i64 s_, i64, A fill_) : p(p_), s(s_), fill(fill_) {}
        // dst[0 .. cnt) = elements j .. j+cnt-1 (a whole vector on the vector path: ops_vec)
        TL_DEV void at(i64 j, int, int cnt, A* dst) const {
            if (p) {
                load_part<T, N>(p + j * s, s, cnt, dst);
            } else {
#pragma unroll
                for (int e = 0; e < N; ++e) dst[e] = fill;
            }
        }
    };
};

// Whether RowRegs can hold every row of the launch (and write the contiguous output, of T or
// a narrower O: its vectors are N elements of O).
template <typename T, typename O = T>
TL_DEV bool rows_fit_regs(i64 n_rows, i64 row_len, const Strided& outer, i64 inner_stride, const T* in,
                          const O* out) {
    enum { N = 16 / sizeof(T) };
    return inner_stride == 1 && row_len % N == 0 && row_len <= (i64)blockDim.x * RowSlots<T>::V * N &&
           tl_aligned<N>(out) && tl_rows_aligned16(outer, n_rows, in);
}
// Whether a row fits one vector per thread (RowRegs<T, 1>), given that it fits RowRegs.
template <typename T>
TL_DEV bool row_fits_one_slot(i64 row_len) { return row_len <= (i64)blockDim.x * (16 / (i64)sizeof(T)); }

template <typename T, bool Log, typename Row>
TL_DEV void softmax_pass(i64 n_rows, i64 row_len, const Strided& outer, i64 inner_stride, const T* in, T* out) {
    typedef typename Tr<T>::acc A;
    enum { N = Row::N };
    __shared__ MaxSum<A> smem[TL_MAX_WARPS];
    const i64 rpb = blockDim.y;
    for (i64 base = (i64)blockIdx.x * rpb; base < n_rows; base += (i64)gridDim.x * rpb) {
        const i64 row = base + threadIdx.y;
        const bool valid = row < n_rows;
        Row r(in + (valid ? tl_index(outer, row) : 0), valid ? row_len : 0, inner_stride, true);
        // keep: softmax keeps exp(x - this thread's max) (in RowRegs::wide for 16-bit T), so
        // that the output costs a multiply, not a second exp
        constexpr bool keep = Row::KEEPS && !Log;
        MaxSum<A> st;
        st.m = r.template fold<FMaxOp<A> >(tl_lowest<A>(), [](A v) { return v; });
        const A mt = st.m;
        // a thread that saw only -inf and NaN: exp(-inf - max) adds 0, a NaN NaN (testing
        // once per thread, not per element, keeps the exps unpredicated)
        st.s = mt == tl_lowest<A>() ? r.template fold<SumOp<A>, keep>(A(0), [](A v) { return v == v ? A(0) : v; })
                                    : r.template fold<SumOp<A>, keep>(A(0), [&](A v) { return row_exp<T>(v - mt); });
        st = tl_row_allreduce<MaxSumOp<A> >(st, smem);
        if (!valid) continue;
        // An all -inf row gives NaN (0 * inf, or exp(NaN)), as on cpu and in torch.
        const A m = st.m, log_s = Log ? tl_log(st.s) : A(0), inv_s = A(1) / st.s;
        const A scale = keep ? tl_exp(mt - m) * inv_s : A(0);
        r.template store<keep>(out + row * row_len, [&](i64, int, A* v, int) {
#pragma unroll
            for (int e = 0; e < N; ++e)
                v[e] = Log ? v[e] - m - log_s : keep ? v[e] * scale : row_exp<T>(v[e] - m) * inv_s;
        });
    }
}

template <typename T, bool Log>
TL_DEV void softmax_rows(i64 n_rows, i64 row_len, const Strided& outer, i64 inner_stride, const T* in, T* out) {
    if (rows_fit_regs<T>(n_rows, row_len, outer, inner_stride, in, out))
        softmax_pass<T, Log, RowRegs<T> >(n_rows, row_len, outer, inner_stride, in, out);
    else
        softmax_pass<T, Log, RowCache<T> >(n_rows, row_len, outer, inner_stride, in, out);
}

// layer_norm: (x - mean) / sqrt(var + eps) * w + b; rms_norm: x / sqrt(mean(x^2) + eps) * w.
// w / b may be null (no affine part); they are 1-d with strides w_stride / b_stride.
// __restrict__: out is a fresh buffer (ops/fused.py _rows_op) and the inputs are only read, so
// the compiler may move loads across the output's stores (H100, rows of 4096: bf16
// layer_norm without w and b 90.4 -> 92.2% of the copy bandwidth, the other cases unchanged).
// Add: the rows res + tl_index(outer, row) (of T, or a narrower R) are added to the input's
// first, each sum rounded to T and written to the contiguous `sum` (add_rms_norm,
// add_layer_norm: a residual add and the norm after it in one pass), and normalised as the
// input would be (a template flag: the plain norms' code stays as it was tuned). The output
// is of T or a narrower O (add_layer_norm's `dtype`: the norm's cast to a product's operand
// type in the same pass).
template <typename T, bool Rms, typename Row, bool Add, typename R = T, typename O = T>
TL_DEV void norm_pass(i64 n_rows, i64 row_len, const Strided& outer, i64 inner_stride, const T* __restrict__ in,
                      const R* __restrict__ res, const T* __restrict__ w, i64 w_stride, const T* __restrict__ b,
                      i64 b_stride, double eps, T* __restrict__ sum, O* __restrict__ out, bool ops_vec) {
    typedef typename Tr<T>::acc A;
    enum { N = Row::N };
    __shared__ A smem_sq[TL_MAX_WARPS];
    __shared__ MeanM2<A> smem_mv[TL_MAX_WARPS];
    const i64 rpb = blockDim.y;
    // the affine part: w = 1 and b = 0 where not given (rms_norm never reads b)
    const typename Row::Operand wo(w, w_stride, row_len, A(1)), bo(Rms ? nullptr : b, b_stride, row_len, A(0));
    for (i64 base = (i64)blockIdx.x * rpb; base < n_rows; base += (i64)gridDim.x * rpb) {
        const i64 row = base + threadIdx.y;
        const bool valid = row < n_rows;
        Row r(in + (valid ? tl_index(outer, row) : 0), valid ? row_len : 0, inner_stride, ops_vec);
        if constexpr (Add) {
            if (valid) r.add(res + tl_index(outer, row), sum + row * row_len);
        }
        A mean = A(0), var;
        if constexpr (Rms) {
            const A sq = r.template fold<SumOp<A> >(A(0), [](A v) { return v * v; });
            var = tl_row_allreduce<SumOp<A> >(sq, smem_sq) / (A)row_len;
        } else {  // this thread's mean, then squared deviations from it: two-pass accuracy
            MeanM2<A> st;
            st.n = r.count();
            const A sum = r.template fold<SumOp<A> >(A(0), [](A v) { return v; });
            st.mean = st.n > A(0) ? sum / st.n : A(0);
            const A mt = st.mean;
            st.m2 = r.template fold<SumOp<A> >(A(0), [&](A v) { return (v - mt) * (v - mt); });
            st = tl_row_allreduce<MeanM2Op<A> >(st, smem_mv);
            mean = st.mean;
            var = st.m2 / (A)row_len;
        }
        if (!valid) continue;
        const A inv = A(1) / tl_sqrt(var + (A)eps);
        r.store(out + row * row_len, [&](i64 j, int c, A* v, int cnt) {
            A wv[N], bv[N];
            wo.at(j, c, cnt, wv);
            if constexpr (Rms) {
#pragma unroll
                for (int e = 0; e < N; ++e) v[e] = v[e] * inv * wv[e];
            } else {
                bo.at(j, c, cnt, bv);
#pragma unroll
                for (int e = 0; e < N; ++e) v[e] = (v[e] - mean) * inv * wv[e] + bv[e];
            }
        });
    }
}

// (R and O are named, never deduced: the plain norms pass a null res.)
template <typename T, bool Rms, bool Add = false, typename R = T, typename O = T>
TL_DEV void norm_rows(i64 n_rows, i64 row_len, const Strided& outer, i64 inner_stride, const T* in,
                      const typename TlId<R>::type* res, const T* w, i64 w_stride, const T* b, i64 b_stride,
                      double eps, T* sum, typename TlId<O>::type* out) {
    // weight, bias and residual rows (where given) readable by vectors
    const bool ops_vec = (!w || (w_stride == 1 && tl_aligned16(w))) && (!b || (b_stride == 1 && tl_aligned16(b))) &&
                         (!Add || tl_rows_aligned16(outer, n_rows, res));
    if (ops_vec && rows_fit_regs<T>(n_rows, row_len, outer, inner_stride, in, out)) {
        if (row_fits_one_slot<T>(row_len))
            norm_pass<T, Rms, RowRegs<T, 1>, Add, R, O>(n_rows, row_len, outer, inner_stride, in, res, w, w_stride,
                                                        b, b_stride, eps, sum, out, true);
        else
            norm_pass<T, Rms, RowRegs<T>, Add, R, O>(n_rows, row_len, outer, inner_stride, in, res, w, w_stride, b,
                                                     b_stride, eps, sum, out, true);
    } else
        norm_pass<T, Rms, RowCache<T>, Add, R, O>(n_rows, row_len, outer, inner_stride, in, res, w, w_stride, b,
                                                  b_stride, eps, sum, out, ops_vec);
}

struct View4 { i64 offset, s0, s1, s2, s3; };
struct View3 { i64 offset, s0, s1, s2; };

// Rotary embedding. x has dims (n0, n1, n2, d): (b, h, t, d) for rope/rope_i, (b, t, h, d)
// for rope_thd. cos/sin are (b, t, d/2) views. Variant 0: pairs (i, i + d/2); 1: pairs
// (2i, 2i + 1); 2: like 0 with t as dim 1. inverse: rotate by -theta (sin negated), the
// transpose: rope's backward.
// A thread rotates G consecutive pairs, so that each operand is one run (16 bytes of x
// where the views are contiguous), in H heads at the same position, which share the cos/sin
// runs and put H times the loads in flight per thread (ncu: with one head, rope bf16 was
// latency-bound; on the H100, 4 heads took it from 82% to 94% of the copy bandwidth, f32
// from 93% to 96%; 2 heads: 89%, 95%). I is the index type of the position arithmetic
// (32-bit division is several times cheaper than 64-bit, and the kernel is bound by it otherwise).
template <typename T, int Variant, int G, int H, typename I>
TL_DEV void rope_groups(i64 n_pairs, i64 n1, i64 n2, i64 d, const View4& xv, const View3& cv, const View3& sv,
                        const T* x, const T* cs, const T* sn, T* out, int inverse) {
    typedef typename Tr<T>::acc A;
    const i64 half = d / 2;
    // groups per row; the head dim (1, or 2 for rope_thd) counted in steps of H
    const I gpr = (I)(half / G), m1 = (I)(Variant == 2 ? n1 : n1 / H), m2 = (I)(Variant == 2 ? n2 / H : n2);
    const i64 hx = Variant == 2 ? xv.s2 : xv.s1, ho = Variant == 2 ? d : n2 * d;  // the next head in x, in out
    TL_GRID_LOOP(e, n_pairs / (G * H)) {
        I t = (I)e;
        const i64 i = (i64)(t % gpr) * G; t /= gpr;
        i64 k2 = t % m2; t /= m2;
        i64 k1 = t % m1;
        const i64 k0 = t / m1;
        if (Variant == 2) k2 *= H; else k1 *= H;
        const i64 pos = Variant == 2 ? k1 : k2;
        const i64 xb = xv.offset + k0 * xv.s0 + k1 * xv.s1 + k2 * xv.s2;
        const i64 ob = ((k0 * n1 + k1) * n2 + k2) * d;
        A c[G], s[G], x0[H][G], x1[H][G];
        load_run<T, G>(cs + cv.offset + k0 * cv.s0 + pos * cv.s1 + i * cv.s2, cv.s2, c);
        load_run<T, G>(sn + sv.offset + k0 * sv.s0 + pos * sv.s1 + i * sv.s2, sv.s2, s);
#pragma unroll
        for (int h = 0; h < H; ++h) {
            if (Variant == 1) {
                A xx[2 * G];
                load_run<T, 2 * G>(x + xb + h * hx + 2 * i * xv.s3, xv.s3, xx);
#pragma unroll
                for (int g = 0; g < G; ++g) { x0[h][g] = xx[2 * g]; x1[h][g] = xx[2 * g + 1]; }
            } else {
                load_run<T, G>(x + xb + h * hx + i * xv.s3, xv.s3, x0[h]);
                load_run<T, G>(x + xb + h * hx + (i + half) * xv.s3, xv.s3, x1[h]);
            }
        }
#pragma unroll
        for (int h = 0; h < H; ++h) {
            A y0[G], y1[G];
#pragma unroll
            for (int g = 0; g < G; ++g) {
                const A sg = inverse ? -s[g] : s[g];
                y0[g] = x0[h][g] * c[g] - x1[h][g] * sg;
                y1[g] = x0[h][g] * sg + x1[h][g] * c[g];
            }
            T* o = out + ob + h * ho;
            if (Variant == 1) {
                A yy[2 * G];
#pragma unroll
                for (int g = 0; g < G; ++g) { yy[2 * g] = y0[g]; yy[2 * g + 1] = y1[g]; }
                store_run_aligned<T, 2 * G>(o + 2 * i, yy);
            } else {
                store_run_aligned<T, G>(o + i, y0);
                store_run_aligned<T, G>(o + half + i, y1);
            }
        }
    }
}

// Pairs per thread: 16 bytes of x per run (variant 1 reads both halves of its pairs in one
// run); heads per thread: 4, 2 or 1 as the host chose them (a divisor of the head count;
// ops/fused.py rope, which sizes the grid to match).
template <typename T, int Variant> struct RopeGroup { enum { G = (Variant == 1 ? 8 : 16) / (int)sizeof(T) }; };

template <typename T, int Variant, int G, typename I>
TL_DEV void rope_heads(i64 n_pairs, i64 n1, i64 n2, i64 d, const View4& xv, const View3& cv, const View3& sv,
                       const T* x, const T* cs, const T* sn, T* out, int inverse, int heads) {
    if (heads == 4)
        rope_groups<T, Variant, G, 4, I>(n_pairs, n1, n2, d, xv, cv, sv, x, cs, sn, out, inverse);
    else if (heads == 2)
        rope_groups<T, Variant, G, 2, I>(n_pairs, n1, n2, d, xv, cv, sv, x, cs, sn, out, inverse);
    else
        rope_groups<T, Variant, G, 1, I>(n_pairs, n1, n2, d, xv, cv, sv, x, cs, sn, out, inverse);
}

template <typename T, int Variant>
TL_DEV void rope_map(i64 n_pairs, i64 n1, i64 n2, i64 d, const View4& xv, const View3& cv, const View3& sv,
                     const T* x, const T* cs, const T* sn, T* out, int inverse, int heads) {
    const int G = RopeGroup<T, Variant>::G;
    const bool narrow = n_pairs < ((i64)1 << 31);
    // out is a fresh contiguous allocation (aligned far beyond a run), so rope_groups writes
    // its runs without an alignment test
    if ((d / 2) % G == 0) {
        if (narrow) rope_heads<T, Variant, G, u32>(n_pairs, n1, n2, d, xv, cv, sv, x, cs, sn, out, inverse, heads);
        else rope_heads<T, Variant, G, i64>(n_pairs, n1, n2, d, xv, cv, sv, x, cs, sn, out, inverse, heads);
    } else {
        if (narrow) rope_heads<T, Variant, 1, u32>(n_pairs, n1, n2, d, xv, cv, sv, x, cs, sn, out, inverse, heads);
        else rope_heads<T, Variant, 1, i64>(n_pairs, n1, n2, d, xv, cv, sv, x, cs, sn, out, inverse, heads);
    }
}

// A decode step's rotary embedding and key/value cache write in one launch (ops/fused.py
// rope_kv_cache): x (b, h, t, d) holds the heads of one q/k/v product, h = hq + 2*hkv
// (queries, keys, values). out (b, hq + hkv, t, d), contiguous, gets the rotated query and key
// heads; the contiguous caches kc, vc (b, hkv, S, d) get the rotated keys and the values at
// position ids[p] (an id outside [0, S) sets *err and writes nothing). A thread takes G pairs
// (i, i + d/2) of one head at one position, as rope_groups.
template <typename T, int G>
TL_DEV void rope_kv_cache_map(i64 n_groups, i64 h, i64 hkv, i64 t_len, i64 d, i64 S, const View4& xv,
                              const View3& cv, const View3& sv, const T* x, const T* cs, const T* sn,
                              const i64* ids, T* out, T* kc, T* vc, int* err) {
    typedef typename Tr<T>::acc A;
    const i64 half = d / 2, gpr = half / G, hq = h - 2 * hkv;
    TL_GRID_LOOP(e, n_groups) {  // e = ((b * h + head) * t_len + p) * gpr + group
        i64 r = e;
        const i64 i = (r % gpr) * G; r /= gpr;
        const i64 p = r % t_len; r /= t_len;
        const i64 head = r % h, b = r / h;
        const T* xp = x + xv.offset + b * xv.s0 + head * xv.s1 + p * xv.s2;
        A x0[G], x1[G];
        load_run<T, G>(xp + i * xv.s3, xv.s3, x0);
        load_run<T, G>(xp + (i + half) * xv.s3, xv.s3, x1);
        if (head < hq + hkv) {  // a query or key head: rotated into out
            A c[G], s[G];
            load_run<T, G>(cs + cv.offset + b * cv.s0 + p * cv.s1 + i * cv.s2, cv.s2, c);
            load_run<T, G>(sn + sv.offset + b * sv.s0 + p * sv.s1 + i * sv.s2, sv.s2, s);
#pragma unroll
            for (int g = 0; g < G; ++g) {
                const A y0 = x0[g] * c[g] - x1[g] * s[g];
                x1[g] = x0[g] * s[g] + x1[g] * c[g];
                x0[g] = y0;
            }
            T* o = out + ((b * (hq + hkv) + head) * t_len + p) * d;
            store_run<T, G>(o + i, x0);
            store_run<T, G>(o + half + i, x1);
        }
        if (head < hq) continue;
        const i64 id = ids[p];
        if (id < 0 || id >= S) { *err = 1; continue; }
        const bool key = head < hq + hkv;
        T* row = (key ? kc : vc) + ((b * hkv + head - hq - (key ? 0 : hkv)) * S + id) * d;
        store_run<T, G>(row + i, x0);
        store_run<T, G>(row + half + i, x1);
    }
}

template <typename T>
TL_DEV void rope_kv_cache_pick(i64 n_pairs, i64 h, i64 hkv, i64 t_len, i64 d, i64 S, const View4& xv,
                               const View3& cv, const View3& sv, const T* x, const T* cs, const T* sn,
                               const i64* ids, T* out, T* kc, T* vc, int* err) {
    const int G = RopeGroup<T, 0>::G;  // 16 bytes of a row per run where the half row allows
    if ((d / 2) % G == 0)
        rope_kv_cache_map<T, G>(n_pairs / G, h, hkv, t_len, d, S, xv, cv, sv, x, cs, sn, ids, out, kc, vc, err);
    else
        rope_kv_cache_map<T, 1>(n_pairs, h, hkv, t_len, d, S, xv, cv, sv, x, cs, sn, ids, out, kc, vc, err);
}

// In-place masked softmax over the rows of attention scores (n_rows = b*hq*L rows of S,
// contiguous, row r = (b*hq + h)*L + l). mask_kind 0: none, 1: bool (keep where true),
// 2: additive in T; the mask is a (b, hq, L, S) view. causal: key j > query l is masked.
template <typename T>
TL_DEV void attn_softmax_rows(i64 n_rows, i64 S, i64 L, i64 hq, int mask_kind, const View4& mv,
                              const void* mask, int causal, T* scores) {
    typedef typename Tr<T>::acc A;
    __shared__ A smem[TL_MAX_WARPS];
    const i64 rpb = blockDim.y;
    for (i64 base = (i64)blockIdx.x * rpb; base < n_rows; base += (i64)gridDim.x * rpb) {
        const i64 row = base + threadIdx.y;
        const bool valid = row < n_rows;
        const i64 l = row % L, bh = row / L;
        const i64 mrow = mv.offset + (bh / hq) * mv.s0 + (bh % hq) * mv.s1 + l * mv.s2;
        T* x = scores + (valid ? row * S : 0);
        // masked score of key j
#define TL_SCORE(j)                                                                        \
        ((causal && (j) > l) || (mask_kind == 1 && !((const tlbool*)mask)[mrow + (j) * mv.s3].v) \
             ? tl_lowest<A>()                                                              \
             : Tr<T>::load(x[j]) + (mask_kind == 2 ? Tr<T>::load(((const T*)mask)[mrow + (j) * mv.s3]) : A(0)))
        A m = tl_lowest<A>();
        if (valid)
            for (i64 j = threadIdx.x; j < S; j += blockDim.x) m = MaxOp<A>::combine(m, TL_SCORE(j));
        m = tl_row_allreduce<MaxOp<A> >(m, smem);
        A s = A(0);
        if (valid)
            for (i64 j = threadIdx.x; j < S; j += blockDim.x) s += tl_exp(TL_SCORE(j) - m);
        s = tl_row_allreduce<SumOp<A> >(s, smem);
        if (!valid) continue;
        // A row whose keys are all masked gets zeros (torch and the cpu reference).
        const bool dead = m == tl_lowest<A>();
        const A inv_s = A(1) / s;
        for (i64 j = threadIdx.x; j < S; j += blockDim.x)
            x[j] = Tr<T>::store(dead ? A(0) : tl_exp(TL_SCORE(j) - m) * inv_s);
#undef TL_SCORE
    }
}

// add_layer_norm_<t> (input, residual and output of T) and add_layer_norm_f32_<h> (an f32
// input, a residual and an output of the half type h: a mixed-precision residual stream)
#define ADD_LAYER_NORM_ENTRY(T, H, sfx)                                                   \
    extern "C" __global__ void TL_MAX_REGS(TL_ROW_REGS_CAP) add_layer_norm_##sfx(i64 n_rows, \
        i64 row_len, Strided outer, i64 inner_stride, const T* in, const H* res, const T* w, \
        i64 w_stride, const T* b, i64 b_stride, double eps, T* sum, H* out) {              \
        norm_rows<T, false, true, H, H>(n_rows, row_len, outer, inner_stride, in, res, w, w_stride, b, b_stride, \
                                        eps, sum, out);                                   \
    }
ADD_LAYER_NORM_ENTRY(float, f16, f32_f16)
ADD_LAYER_NORM_ENTRY(float, bf16, f32_bf16)

#define FUSED_ENTRIES(T, sfx)                                                              \
    extern "C" __global__ void TL_MAX_REGS(TL_ROW_REGS_CAP) softmax_##sfx(i64 n_rows,     \
        i64 row_len, Strided outer, i64 inner_stride, const T* in, T* out) {              \
        softmax_rows<T, false>(n_rows, row_len, outer, inner_stride, in, out);            \
    }                                                                                     \
    extern "C" __global__ void log_softmax_##sfx(i64 n_rows, i64 row_len, Strided outer,  \
                                                 i64 inner_stride, const T* in, T* out) { \
        softmax_rows<T, true>(n_rows, row_len, outer, inner_stride, in, out);             \
    }                                                                                     \
    extern "C" __global__ void TL_MAX_REGS(TL_ROW_REGS_CAP) layer_norm_##sfx(i64 n_rows,     \
        i64 row_len, Strided outer, i64 inner_stride, const T* in, const T* w, i64 w_stride, \
        const T* b, i64 b_stride, double eps, T* out) {                                   \
        norm_rows<T, false>(n_rows, row_len, outer, inner_stride, in, 0, w, w_stride, b, b_stride, eps, 0, out); \
    }                                                                                     \
    extern "C" __global__ void rms_norm_##sfx(i64 n_rows, i64 row_len, Strided outer,     \
        i64 inner_stride, const T* in, const T* w, i64 w_stride, double eps, T* out) {    \
        tl_dependent_start();                                                             \
        norm_rows<T, true>(n_rows, row_len, outer, inner_stride, in, 0, w, w_stride, 0, 0, eps, 0, out); \
    }                                                                                     \
    extern "C" __global__ void add_rms_norm_##sfx(i64 n_rows, i64 row_len, Strided outer, \
        i64 inner_stride, const T* in, const T* res, const T* w, i64 w_stride, double eps, T* sum, T* out) { \
        tl_dependent_start();                                                             \
        norm_rows<T, true, true>(n_rows, row_len, outer, inner_stride, in, res, w, w_stride, 0, 0, eps, sum, out); \
    }                                                                                     \
    ADD_LAYER_NORM_ENTRY(T, T, sfx)                                                       \
    extern "C" __global__ void rope_##sfx(i64 n, i64 n1, i64 n2, i64 d, View4 xv, View3 cv, \
        View3 sv, const T* x, const T* c, const T* s, T* out, int inverse, int heads) {   \
        rope_map<T, 0>(n, n1, n2, d, xv, cv, sv, x, c, s, out, inverse, heads);           \
    }                                                                                     \
    extern "C" __global__ void rope_i_##sfx(i64 n, i64 n1, i64 n2, i64 d, View4 xv, View3 cv, \
        View3 sv, const T* x, const T* c, const T* s, T* out, int inverse, int heads) {   \
        rope_map<T, 1>(n, n1, n2, d, xv, cv, sv, x, c, s, out, inverse, heads);           \
    }                                                                                     \
    extern "C" __global__ void rope_thd_##sfx(i64 n, i64 n1, i64 n2, i64 d, View4 xv, View3 cv, \
        View3 sv, const T* x, const T* c, const T* s, T* out, int inverse, int heads) {   \
        rope_map<T, 2>(n, n1, n2, d, xv, cv, sv, x, c, s, out, inverse, heads);           \
    }                                                                                     \
    extern "C" __global__ void rope_kv_cache_##sfx(i64 n, i64 h, i64 hkv, i64 t, i64 d, i64 S, \
        View4 xv, View3 cv, View3 sv, const T* x, const T* c, const T* s, const i64* ids, T* out, \
        T* kc, T* vc, int* err) {                                                         \
        tl_dependent_start();                                                             \
        rope_kv_cache_pick<T>(n, h, hkv, t, d, S, xv, cv, sv, x, c, s, ids, out, kc, vc, err); \
    }                                                                                     \
    extern "C" __global__ void attn_softmax_##sfx(i64 n_rows, i64 S, i64 L, i64 hq,       \
        int mask_kind, View4 mv, const void* mask, int causal, T* scores) {               \
        attn_softmax_rows<T>(n_rows, S, L, hq, mask_kind, mv, mask, causal, scores);      \
    }
TL_FOR_FLOATS(FUSED_ENTRIES)
