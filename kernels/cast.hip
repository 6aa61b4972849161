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
    CAST_ENTRY(i64, i64, S, ssfx) CAST_ENTRY(tlbool, bool, S, ssfx)
TL_FOR_ALL(CAST_FROM)
