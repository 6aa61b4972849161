// Binary elementwise family: b<op>_<dtype> for backend.BINARY_OPS and <cmp>_<dtype> for
// backend.CMP_OPS (bool output). As in the cpu reference (the op table's rows), div, atan2
// and hypot are for floating dtypes only, the bitwise ops for integers and bool (the shifts
// for integers only), and bool has no sub or fmod. Operands arrive broadcast to the output
// shape (stride-0 dims); the output is contiguous.
#include "compat.h"

// fmod: C's truncating remainder; integers: b != 0 (the host checks), and MIN % -1 (which
// traps or is undefined in C) is 0, as numpy's
template <typename A> TL_DEV A tl_fmod(A a, A b) { return A(-1) < A(0) && b == A(-1) ? A(0) : a % b; }
TL_DEV float tl_fmod(float a, float b) { return fmodf(a, b); }
TL_DEV double tl_fmod(double a, double b) { return fmod(a, b); }
// shifts (integers; A is the 32- or 64-bit compute type): a count < 0 or >= A's width gives 0,
// >> the sign, as PyTorch and numpy; the stored narrow dtype keeps the same low bits. << goes
// through u64, where shifting a negative value is defined
template <typename A> TL_DEV A tl_shl(A a, A b) {
    return b < A(0) || b >= A(sizeof(A) * 8) ? A(0) : A((u64)a << b);
}
template <typename A> TL_DEV A tl_shr(A a, A b) {
    return b < A(0) || b >= A(sizeof(A) * 8) ? (a < A(0) ? A(-1) : A(0)) : A(a >> b);
}
TL_DEV float tl_atan2(float a, float b) { return atan2f(a, b); }
TL_DEV double tl_atan2(double a, double b) { return atan2(a, b); }
TL_DEV float tl_hypot(float a, float b) { return hypotf(a, b); }
TL_DEV double tl_hypot(double a, double b) { return hypot(a, b); }

#define TL_BOP(Name, expr) \
    struct Name { template <typename A> static TL_DEV A f(A a, A b) { return (expr); } };
TL_BOP(BAdd, a + b)
TL_BOP(BSub, a - b)
TL_BOP(BMul, a * b)
TL_BOP(BDiv, a / b)
TL_BOP(BMaximum, tl_isnan(a) ? a : (tl_isnan(b) ? b : (a > b ? a : b)))
TL_BOP(BMinimum, tl_isnan(a) ? a : (tl_isnan(b) ? b : (a < b ? a : b)))
TL_BOP(BAnd, a & b)
TL_BOP(BOr, a | b)
TL_BOP(BXor, a ^ b)
TL_BOP(BShl, tl_shl(a, b))
TL_BOP(BShr, tl_shr(a, b))
TL_BOP(BAtan2, tl_atan2(a, b))
TL_BOP(BHypot, tl_hypot(a, b))
TL_BOP(BSiluMul, a / (A(1) + tl_exp(-a)) * b)

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
// fmod of the 8- and 16-bit integers goes through float's (exact there): hiprtc expands
// their 24-bit-safe remainder into V_MAD_F32 code, which the emulated CDNA platform lacks.
struct Fmod {
    template <typename T> static TL_DEV T apply(T a, T b) {
        typedef typename Tr<T>::acc A;
        const A x = Tr<T>::load(a), y = Tr<T>::load(b);
        return Tr<T>::store(sizeof(T) < 4 && !Tr<T>::is_float ? (A)tl_fmod((float)x, (float)y) : tl_fmod(x, y));
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
        // the operands are ordered, then the op runs once per element. Selecting between the
        // results of both orders let LLVM 19 (clang-19) merge the SDWA forms of a - b and b - a:
        // machine CSE commuted V_SUB_U32_sdwa without making it a SUBREV (llvm-project PR 106920,
        // fixed in LLVM 20), and bsub_i8/u8 on CDNA gave b - a in some bytes
        VecN<O, V> r;
#pragma unroll
        for (int e = 0; e < V; ++e) r.v[e] = Op::apply(swap ? y.v[e] : x.v[e], swap ? x.v[e] : y.v[e]);
        ((VecN<O, V>*)out)[v] = r;
        j += step;
        if (j >= P) j -= P;
    }
    if (V > 1)
        for (i64 i = nv * V + (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
            out[i] = Op::apply(swap ? p[i % P] : c[i], swap ? c[i] : p[i % P]);
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
        tl_dependent_start();                                                             \
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
// Integers and bool: the bitwise ops (integers also the shifts); integers and floats: sub and fmod;
// floats: div, atan2, hypot, silu_mul.
#define BINARY_BITS_OPS(T, sfx)                                                            \
    BINARY_ENTRY(bbitwise_and, Arith<BAnd>, T, T, sfx) BINARY_ENTRY(bbitwise_or, Arith<BOr>, T, T, sfx) \
    BINARY_ENTRY(bbitwise_xor, Arith<BXor>, T, T, sfx)
#define BINARY_NUM_OPS(T, sfx) BINARY_BOOL_OPS(T, sfx) BINARY_ENTRY(bsub, Arith<BSub>, T, T, sfx) \
    BINARY_ENTRY(bfmod, Fmod, T, T, sfx)
#define BINARY_INT_OPS(T, sfx) BINARY_NUM_OPS(T, sfx) BINARY_BITS_OPS(T, sfx)                   \
    BINARY_ENTRY(bbitwise_left_shift, Arith<BShl>, T, T, sfx)                             \
    BINARY_ENTRY(bbitwise_right_shift, Arith<BShr>, T, T, sfx)
#define BINARY_FLOAT_OPS(T, sfx) BINARY_NUM_OPS(T, sfx) BINARY_ENTRY(bdiv, Arith<BDiv>, T, T, sfx) \
    BINARY_ENTRY(batan2, Arith<BAtan2>, T, T, sfx) BINARY_ENTRY(bhypot, Arith<BHypot>, T, T, sfx) \
    BINARY_ENTRY(bsilu_mul, Arith<BSiluMul>, T, T, sfx)

TL_FOR_FLOATS(BINARY_FLOAT_OPS)
TL_FOR_INTEGERS(BINARY_INT_OPS)
BINARY_BOOL_OPS(tlbool, bool) BINARY_BITS_OPS(tlbool, bool)
