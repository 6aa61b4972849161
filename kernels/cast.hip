// cast_<src>_<dst> for every pair of dtypes (also the same dtype: the strided copy
// behind copy_strided_src / contiguous()). Output contiguous.
#include "compat.h"

template <typename S, typename D>
TL_DEV void cast_map(i64 n, const Strided& L, const S* in, D* out) {
    tl_map1(n, L, in, out, [](S x) { return Cast<D, S>::cv(x); });
}
// Same dtype: a plain copy, no conversion.
template <typename T>
TL_DEV void cast_map(i64 n, const Strided& L, const T* in, T* out) {
    tl_map1(n, L, in, out, [](T x) { return x; });
}

#define CAST_ENTRY(D, dsfx, S, ssfx)                                                       \
    extern "C" __global__ void cast_##ssfx##_##dsfx(i64 n, Strided L, const S* in, D* out) { \
        cast_map(n, L, in, out);                                                         \
    }
// For a source type, one entry per destination type.
#define CAST_FROM(S, ssfx)                                                                 \
    CAST_ENTRY(float, f32, S, ssfx) CAST_ENTRY(f16, f16, S, ssfx)                          \
    CAST_ENTRY(bf16, bf16, S, ssfx) CAST_ENTRY(double, f64, S, ssfx)                       \
    CAST_ENTRY(u8, u8, S, ssfx) CAST_ENTRY(u32, u32, S, ssfx)                              \
    CAST_ENTRY(i64, i64, S, ssfx) CAST_ENTRY(tlbool, bool, S, ssfx)                        \
    CAST_ENTRY(i8, i8, S, ssfx) CAST_ENTRY(i16, i16, S, ssfx) CAST_ENTRY(i32, i32, S, ssfx)
TL_FOR_ALL(CAST_FROM)

// cast_many_<src>_<dst>: up to TL_CAST_TENSORS contiguous tensors in one launch (mixed
// precision casts every weight to the compute dtype and every weight gradient back, each
// step: one launch per tensor otherwise, and host time per launch is what bounds such a
// step). Block b casts TL_CAST_CHUNK elements of tensor t, first_block[t] <= b <
// first_block[t + 1]; aligned tensors go by 16-byte vectors (the chunk keeps alignment).
#define TL_CAST_TENSORS 24
#define TL_CAST_CHUNK 4096
template <typename S, typename D> struct CastTable {
    i64 n[TL_CAST_TENSORS];
    i64 first_block[TL_CAST_TENSORS + 1];
    const S* src[TL_CAST_TENSORS];
    D* dst[TL_CAST_TENSORS];
    int count;
};

template <typename S, typename D>
TL_DEV void cast_many_map(const CastTable<S, D>& tb) {
    const int V = TlWidth<(sizeof(S) > sizeof(D) ? sizeof(S) : sizeof(D))>::V;
    const i64 n_blocks = tb.first_block[tb.count];
    for (i64 b = blockIdx.x; b < n_blocks; b += gridDim.x) {
        const int t = tl_table_tensor(tb.first_block, b);
        const i64 i0 = (b - tb.first_block[t]) * TL_CAST_CHUNK;
        const int len = (int)(tb.n[t] - i0 < TL_CAST_CHUNK ? tb.n[t] - i0 : TL_CAST_CHUNK);
        const S* s = tb.src[t] + i0;
        D* d = tb.dst[t] + i0;
        int tail = 0;
        if (tl_aligned<V>(s) && tl_aligned<V>(d)) {
            for (int v = threadIdx.x; v < len / V; v += blockDim.x) {
                const VecN<S, V> x = tl_loadv<V>(s + v * V);
                VecN<D, V> r;
#pragma unroll
                for (int e = 0; e < V; ++e) r.v[e] = Cast<D, S>::cv(x.v[e]);
                *(VecN<D, V>*)(d + v * V) = r;
            }
            tail = len / V * V;
        }
        for (int i = tail + threadIdx.x; i < len; i += blockDim.x) d[i] = Cast<D, S>::cv(s[i]);
    }
}

#define CAST_MANY_ENTRY(D, dsfx, S, ssfx)                                                  \
    extern "C" __global__ void cast_many_##ssfx##_##dsfx(CastTable<S, D> tb) { cast_many_map(tb); }
#define CAST_MANY_FROM(S, ssfx)                                                            \
    CAST_MANY_ENTRY(float, f32, S, ssfx) CAST_MANY_ENTRY(f16, f16, S, ssfx)                \
    CAST_MANY_ENTRY(bf16, bf16, S, ssfx) CAST_MANY_ENTRY(double, f64, S, ssfx)
TL_FOR_FLOATS(CAST_MANY_FROM)
