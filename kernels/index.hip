// Indexing family, one entry per (ids dtype, data dtype): index_select_<i>_<t>,
// gather_<i>_<t>, scatter_add_<i>_<t>, index_add_<i>_<t> with i in {i64, u32, u8}.
//
// The host folds the indexed dim out of the data layouts: `*_mod` layouts have the
// iteration shape and the data strides with the indexed dim's stride set to 0, so the
// address is tl_index(mod, e) + id * dim_stride. An id outside [0, dim_size) sets *err
// (checked by the host, which raises IndexError) and is skipped: nothing is read or
// written out of bounds.
#include "compat.h"

template <typename T> TL_DEV T tl_zero() { return FromI64<T>::cv(0); }

// scatter_add / index_add accumulate f16/bf16 in an f32 copy of the base (the host casts
// it back once, like the cpu reference); other dtypes add in place with atomics.
template <typename T> struct Accum { typedef T type; };
template <> struct Accum<f16> { typedef float type; };
template <> struct Accum<bf16> { typedef float type; };

// out (contiguous, shape of src with dim -> n_ids) = src[..., ids[i], ...]
template <typename I, typename T>
TL_DEV void index_select_map(i64 n, Strided ids_l, Strided src_mod, i64 right, i64 n_ids,
                             i64 dim_size, i64 dim_stride, const I* ids, const T* src, T* out, int* err) {
    TL_GRID_LOOP(e, n) {
        const i64 id = tl_to_i64(ids[tl_index(ids_l, (e / right) % n_ids)]);
        if (id < 0 || id >= dim_size) { *err = 1; out[e] = tl_zero<T>(); continue; }
        out[e] = src[tl_index(src_mod, e) + id * dim_stride];
    }
}

// torch.gather: out (contiguous, ids' shape) = src[..., ids[e], ...]
template <typename I, typename T>
TL_DEV void gather_map(i64 n, Strided ids_l, Strided src_mod, i64 dim_size, i64 dim_stride,
                       const I* ids, const T* src, T* out, int* err) {
    TL_GRID_LOOP(e, n) {
        const i64 id = tl_to_i64(ids[tl_index(ids_l, e)]);
        if (id < 0 || id >= dim_size) { *err = 1; out[e] = tl_zero<T>(); continue; }
        out[e] = src[tl_index(src_mod, e) + id * dim_stride];
    }
}

// out (contiguous, already holding the base values, of type Accum<T>) += src scattered
// at ids (ids and src share a shape).
template <typename I, typename T>
TL_DEV void scatter_add_map(i64 n, Strided ids_l, Strided src_l, Strided out_mod, i64 dim_size,
                            i64 dim_stride, const I* ids, const T* src, typename Accum<T>::type* out,
                            int* err) {
    TL_GRID_LOOP(e, n) {
        const i64 id = tl_to_i64(ids[tl_index(ids_l, e)]);
        if (id < 0 || id >= dim_size) { *err = 1; continue; }
        tl_atomic_add(out + tl_index(out_mod, e) + id * dim_stride, Tr<T>::load(src[tl_index(src_l, e)]));
    }
}

// out (contiguous, holding the base values) [..., ids[i], ...] += src[..., i, ...]
template <typename I, typename T>
TL_DEV void index_add_map(i64 n, Strided ids_l, Strided src_l, Strided out_mod, i64 right, i64 n_ids,
                          i64 dim_size, i64 dim_stride, const I* ids, const T* src,
                          typename Accum<T>::type* out, int* err) {
    TL_GRID_LOOP(e, n) {
        const i64 id = tl_to_i64(ids[tl_index(ids_l, (e / right) % n_ids)]);
        if (id < 0 || id >= dim_size) { *err = 1; continue; }
        tl_atomic_add(out + tl_index(out_mod, e) + id * dim_stride, Tr<T>::load(src[tl_index(src_l, e)]));
    }
}

#define INDEX_ENTRIES(I, isfx, T, sfx)                                                     \
    extern "C" __global__ void index_select_##isfx##_##sfx(                                \
        i64 n, Strided ids_l, Strided src_mod, i64 right, i64 n_ids, i64 dim_size,          \
        i64 dim_stride, const I* ids, const T* src, T* out, int* err) {                   \
        index_select_map(n, ids_l, src_mod, right, n_ids, dim_size, dim_stride, ids, src, out, err); \
    }                                                                                     \
    extern "C" __global__ void gather_##isfx##_##sfx(                                      \
        i64 n, Strided ids_l, Strided src_mod, i64 dim_size, i64 dim_stride, const I* ids, \
        const T* src, T* out, int* err) {                                                 \
        gather_map(n, ids_l, src_mod, dim_size, dim_stride, ids, src, out, err);          \
    }                                                                                     \
    extern "C" __global__ void scatter_add_##isfx##_##sfx(                                 \
        i64 n, Strided ids_l, Strided src_l, Strided out_mod, i64 dim_size, i64 dim_stride, \
        const I* ids, const T* src, typename Accum<T>::type* out, int* err) {             \
        scatter_add_map(n, ids_l, src_l, out_mod, dim_size, dim_stride, ids, src, out, err); \
    }                                                                                     \
    extern "C" __global__ void index_add_##isfx##_##sfx(                                   \
        i64 n, Strided ids_l, Strided src_l, Strided out_mod, i64 right, i64 n_ids,         \
        i64 dim_size, i64 dim_stride, const I* ids, const T* src, typename Accum<T>::type* out, \
        int* err) {                                                                       \
        index_add_map(n, ids_l, src_l, out_mod, right, n_ids, dim_size, dim_stride, ids, src, out, err); \
    }
#define INDEX_I64(T, sfx) INDEX_ENTRIES(i64, i64, T, sfx)
#define INDEX_U32(T, sfx) INDEX_ENTRIES(u32, u32, T, sfx)
#define INDEX_U8(T, sfx) INDEX_ENTRIES(u8, u8, T, sfx)
TL_FOR_ALL(INDEX_I64)
TL_FOR_ALL(INDEX_U32)
TL_FOR_ALL(INDEX_U8)
