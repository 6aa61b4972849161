// cast_<src>_<dst> for every pair of dtypes (also the same dtype: the strided copy
// behind copy_strided_src / contiguous()). Output contiguous.
#include "compat.h"

template <typename S, typename D>
TL_DEV void cast_map(i64 n, const Strided& L, const S* in, D* out) {
    if (L.contiguous) {
        tl_map1_contig(n, in + L.offset, out, [](S x) { return Cast<D, S>::cv(x); });
    } else {
        TL_GRID_LOOP(i, n) out[i] = Cast<D, S>::cv(in[tl_index(L, i)]);
    }
}
// Same dtype: a plain copy, no conversion.
template <typename T>
TL_DEV void cast_map(i64 n, const Strided& L, const T* in, T* out) {
    if (L.contiguous) {
        tl_map1_contig(n, in + L.offset, out, [](T x) { return x; });
    } else {
        TL_GRID_LOOP(i, n) out[i] = in[tl_index(L, i)];
    }
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
    CAST_ENTRY(i64, i64, S, ssfx) CAST_ENTRY(tlbool, bool, S, ssfx)
TL_FOR_ALL(CAST_FROM)
