// Copies that are not casts: copy2d_<dtype> (rows of contiguous elements, used by cat)
// and const_set_<dtype> (fill every element a strided layout addresses). The strided
// copy behind contiguous() is cast_<t>_<t> in cast.hip.
#include "compat.h"

template <typename I, typename T>
TL_DEV void copy2d_run(I n, I d2, i64 src_stride1, i64 dst_stride1, const T* src, T* dst) {
    TL_GRID_LOOP_T(I, e, n) {
        const I r = e / d2, c = e - r * d2;
        dst[(i64)r * dst_stride1 + c] = src[(i64)r * src_stride1 + c];
    }
}
template <typename T>
TL_DEV void copy2d_map(i64 d1, i64 d2, i64 src_stride1, i64 dst_stride1, const T* src, T* dst) {
    if (tl_narrow(d1 * d2)) copy2d_run<u32>((u32)(d1 * d2), (u32)d2, src_stride1, dst_stride1, src, dst);
    else copy2d_run<i64>(d1 * d2, d2, src_stride1, dst_stride1, src, dst);
}

template <typename T>
TL_DEV void const_set_map(i64 n, const Strided& L, u64 bits, T* dst) {
    const T v = tl_from_bits<T>(bits);
    if (L.contiguous) {
        dst += L.offset;
        TL_GRID_LOOP(i, n) dst[i] = v;
    } else if (tl_narrow(n)) {
        TL_GRID_LOOP_T(u32, i, n) dst[tl_index_n<u32>(L, i)] = v;
    } else {
        TL_GRID_LOOP(i, n) dst[tl_index(L, i)] = v;
    }
}

#define COPY_ENTRIES(T, sfx)                                                               \
    extern "C" __global__ void copy2d_##sfx(i64 d1, i64 d2, i64 src_stride1, i64 dst_stride1, \
                                            const T* src, T* dst) {                       \
        copy2d_map(d1, d2, src_stride1, dst_stride1, src, dst);                           \
    }                                                                                     \
    extern "C" __global__ void const_set_##sfx(i64 n, Strided L, u64 bits, T* dst) {     \
        const_set_map(n, L, bits, dst);                                                   \
    }
TL_FOR_ALL(COPY_ENTRIES)
