// Binary elementwise family: b<op>_<dtype> for backend.BINARY_OPS and <cmp>_<dtype> for
// backend.CMP_OPS (bool output). As in the cpu reference, div is for floating dtypes
// only (true division) and bool has no sub. Operands arrive broadcast to the output shape (stride-0
// dims); the output is contiguous.
#include "compat.h"

#define TL_BOP(Name, expr) \
    struct Name { template <typename A> static TL_DEV A f(A a, A b) { return (expr); } };
TL_BOP(BAdd, a + b)
TL_BOP(BSub, a - b)
TL_BOP(BMul, a * b)
TL_BOP(BDiv, a / b)
TL_BOP(BMaximum, tl_isnan(a) ? a : (tl_isnan(b) ? b : (a > b ? a : b)))
TL_BOP(BMinimum, tl_isnan(a) ? a : (tl_isnan(b) ? b : (a < b ? a : b)))

#define TL_CMP(Name, expr) \
    struct Name { template <typename A> static TL_DEV bool f(A a, A b) { return (expr); } };
TL_CMP(CEq, a == b)
TL_CMP(CNe, a != b)
TL_CMP(CLt, a < b)
TL_CMP(CLe, a <= b)
TL_CMP(CGt, a > b)
TL_CMP(CGe, a >= b)

// Arithmetic keeps the dtype; comparisons produce bool. Both compute on Tr<T>::acc.
template <typename Op> struct Arith {
    template <typename T> static TL_DEV T apply(T a, T b) {
        return Tr<T>::store(Op::f(Tr<T>::load(a), Tr<T>::load(b)));
    }
};
template <typename Op> struct Compare {
    template <typename T> static TL_DEV tlbool apply(T a, T b) {
        tlbool r; r.v = Op::f(Tr<T>::load(a), Tr<T>::load(b)); return r;
    }
};

template <typename Op, typename T, typename O>
TL_DEV void binary_map(i64 n, const Strided& La, const Strided& Lb, const T* a, const T* b, O* out) {
    if (La.contiguous && Lb.contiguous) {
        tl_map2_contig(n, a + La.offset, b + Lb.offset, out, [](T x, T y) { return Op::apply(x, y); });
    } else {
        TL_GRID_LOOP(i, n) out[i] = Op::apply(a[tl_index(La, i)], b[tl_index(Lb, i)]);
    }
}

#define BINARY_ENTRY(name, Op, T, O, sfx)                                                 \
    extern "C" __global__ void name##_##sfx(i64 n, Strided La, Strided Lb, const T* a,   \
                                            const T* b, O* out) {                         \
        binary_map<Op>(n, La, Lb, a, b, out);                                             \
    }
// Every dtype: add, mul, maximum, minimum and the comparisons.
#define BINARY_BOOL_OPS(T, sfx)                                                            \
    BINARY_ENTRY(badd, Arith<BAdd>, T, T, sfx) BINARY_ENTRY(bmul, Arith<BMul>, T, T, sfx) \
    BINARY_ENTRY(bmaximum, Arith<BMaximum>, T, T, sfx)                                    \
    BINARY_ENTRY(bminimum, Arith<BMinimum>, T, T, sfx)                                    \
    BINARY_ENTRY(eq, Compare<CEq>, T, tlbool, sfx) BINARY_ENTRY(ne, Compare<CNe>, T, tlbool, sfx) \
    BINARY_ENTRY(lt, Compare<CLt>, T, tlbool, sfx) BINARY_ENTRY(le, Compare<CLe>, T, tlbool, sfx) \
    BINARY_ENTRY(gt, Compare<CGt>, T, tlbool, sfx) BINARY_ENTRY(ge, Compare<CGe>, T, tlbool, sfx)
#define BINARY_INT_OPS(T, sfx) BINARY_BOOL_OPS(T, sfx) BINARY_ENTRY(bsub, Arith<BSub>, T, T, sfx)
#define BINARY_FLOAT_OPS(T, sfx) BINARY_INT_OPS(T, sfx) BINARY_ENTRY(bdiv, Arith<BDiv>, T, T, sfx)

TL_FOR_FLOATS(BINARY_FLOAT_OPS)
TL_FOR_INTEGERS(BINARY_INT_OPS)
BINARY_BOOL_OPS(tlbool, bool)
