// Indexing family, one entry per (ids dtype, data dtype): index_select_<i>_<t>,
// gather_<i>_<t>, scatter_add_<i>_<t>, index_add_<i>_<t> with i in {i64, u32, u8};
// scatter_<t> (int64 ids: the host widens the others) for torch.scatter and scatter_reduce;
// scatter_set_<t>, the same assignment in place (candle's scatter_set: index_copy_, KV caches).
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

// a (reduce 1) prod, (2) amax, (3) amin b; a NaN wins, as in PyTorch
template <typename A> TL_DEV A tl_combine(int reduce, A a, A b) {
    if (reduce == 1) return a * b;
    if (reduce == 2) return (b > a || b != b) ? b : a;
    return (b < a || b != b) ? b : a;
}

// *p = tl_combine(reduce, *p, v) atomically: compare-and-swap on the aligned 32-bit word that
// holds *p (1-, 2- and 4-byte types) or on its 64 bits; no write where nothing changes
template <int S> struct CasWord { typedef u32 type; };
template <> struct CasWord<8> { typedef u64 type; };
template <typename O> TL_DEV void tl_atomic_combine(O* p, typename Tr<O>::acc v, int reduce) {
    typedef typename CasWord<sizeof(O)>::type W;
    const u64 addr = (u64)p;
    W* word = (W*)(addr & ~(u64)(sizeof(W) - 1));
    const u32 shift = (u32)(addr & (sizeof(W) - 1)) * 8;
    const W ones = ~(W)0 >> (8 * (sizeof(W) - sizeof(O))), mask = ones << shift;
    W old = *word, assumed;
    do {
        assumed = old;
        union { O t; W w; } cur, next;
        cur.w = (assumed & mask) >> shift;
        next.w = 0;
        next.t = Tr<O>::store(tl_combine(reduce, Tr<O>::load(cur.t), v));
        const W nw = (assumed & ~mask) | ((next.w & ones) << shift);
        if (nw == assumed) return;
        old = atomicCAS(word, assumed, nw);
    } while (old != assumed);
}

// torch.scatter (reduce 0: one of duplicate ids wins) / scatter_reduce (1 prod, 2 amax,
// 3 amin): out (holding the base values; Accum<T> for the reductions, T for a plain
// assignment in place) at ids gets src (ids and src iterate ids' shape)
template <typename T, typename O>
TL_DEV void scatter_map(i64 n, Strided ids_l, Strided src_l, Strided out_mod, i64 dim_size, i64 dim_stride,
                        i64 reduce, const i64* ids, const T* src, O* out, int* err) {
    TL_GRID_LOOP(e, n) {
        const i64 id = ids[tl_index(ids_l, e)];
        if (id < 0 || id >= dim_size) { *err = 1; continue; }
        O* p = out + tl_index(out_mod, e) + id * dim_stride;
        const typename Tr<O>::acc v = Tr<T>::load(src[tl_index(src_l, e)]);
        if (reduce == 0) *p = Tr<O>::store(v);
        else tl_atomic_combine(p, v, (int)reduce);
    }
}

#define SCATTER_ENTRY(T, sfx)                                                              \
    extern "C" __global__ void scatter_##sfx(                                              \
        i64 n, Strided ids_l, Strided src_l, Strided out_mod, i64 dim_size, i64 dim_stride, \
        i64 reduce, const i64* ids, const T* src, typename Accum<T>::type* out, int* err) { \
        scatter_map(n, ids_l, src_l, out_mod, dim_size, dim_stride, reduce, ids, src, out, err); \
    }                                                                                     \
    extern "C" __global__ void scatter_set_##sfx(                                          \
        i64 n, Strided ids_l, Strided src_l, Strided out_mod, i64 dim_size, i64 dim_stride, \
        const i64* ids, const T* src, T* out, int* err) {                                 \
        scatter_map(n, ids_l, src_l, out_mod, dim_size, dim_stride, (i64)0, ids, src, out, err); \
    }
TL_FOR_ALL(SCATTER_ENTRY)

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
