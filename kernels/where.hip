// where_<dtype>(cond, t, f): cond is bool; t, f and the output share the dtype. All three
// arrive broadcast to the output shape; the output is contiguous.
#include "compat.h"

template <typename T>
TL_DEV void where_map(i64 n, const Strided& Lc, const Strided& Lt, const Strided& Lf,
                      const tlbool* c, const T* t, const T* f, T* out) {
    tl_map3(n, Lc, Lt, Lf, c, t, f, out, [](tlbool k, T x, T y) { return k.v ? x : y; });
}

#define WHERE_ENTRY(T, sfx)                                                               \
    extern "C" __global__ void where_##sfx(i64 n, Strided Lc, Strided Lt, Strided Lf,    \
                                           const tlbool* c, const T* t, const T* f, T* out) { \
        where_map(n, Lc, Lt, Lf, c, t, f, out);                                          \
    }
TL_FOR_ALL(WHERE_ENTRY)
