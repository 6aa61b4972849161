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

// One operand contiguous (c), the other periodic (p[i % P], tl_period: a bias broadcast
// along leading dims, or a scalar); swap: the periodic one is the op's left operand. V
// elements per step; j = i % P is advanced by the grid stride without a division, and the
// periodic operand is read by vectors too when P keeps them aligned (else element by
// element, wrapping), so an odd P still streams the contiguous operand and the output.
template <int V, typename Op, typename T, typename O>
TL_DEV void binary_periodic(i64 n, const T* c, const T* p, i64 P, bool swap, O* out) {
    const i64 nv = n / V, stride = (i64)blockDim.x * gridDim.x;
    i64 v = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    i64 j = (v * V) % P;
    const i64 step = (stride * V) % P;
    const bool pvec = P % V == 0 && tl_aligned<V>(p);
    for (; v < nv; v += stride) {
        const VecN<T, V> x = ((const VecN<T, V>*)c)[v];
        VecN<T, V> y;
        if (pvec) {
            y = tl_loadv<V>(p + j);
        } else {
            i64 k = j;
#pragma unroll
            for (int e = 0; e < V; ++e) { y.v[e] = p[k]; k = k + 1 == P ? 0 : k + 1; }
        }
        VecN<O, V> r;
#pragma unroll
        for (int e = 0; e < V; ++e) r.v[e] = swap ? Op::apply(y.v[e], x.v[e]) : Op::apply(x.v[e], y.v[e]);
        ((VecN<O, V>*)out)[v] = r;
        j += step;
        if (j >= P) j -= P;
    }
    if (V > 1)
        for (i64 i = nv * V + (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
            out[i] = swap ? Op::apply(p[i % P], c[i]) : Op::apply(c[i], p[i % P]);
}

template <typename Op, typename T, typename O>
TL_DEV void binary_map(i64 n, const Strided& La, const Strided& Lb, const T* a, const T* b, O* out) {
    if (La.contiguous != Lb.contiguous) {
        const bool swap = !La.contiguous;
        const Strided& Lc = swap ? Lb : La;
        const Strided& Lp = swap ? La : Lb;
        const i64 P = tl_period(Lp);
        if (P > 0) {
            const T* c = (swap ? b : a) + Lc.offset;
            const T* p = (swap ? a : b) + Lp.offset;
            const int V = TlWidth<(sizeof(T) > sizeof(O) ? sizeof(T) : sizeof(O))>::V;
            if (tl_aligned<V>(c) && tl_aligned<V>(out)) binary_periodic<V, Op>(n, c, p, P, swap, out);
            else binary_periodic<1, Op>(n, c, p, P, swap, out);
            return;
        }
    }
    tl_map2(n, La, Lb, a, b, out, [](T x, T y) { return Op::apply(x, y); });
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
