// Unary elementwise family: u<op>_<dtype> for backend.UNARY_OPS, plus affine, powf, elu.
// Output is contiguous; the input is read through its Strided layout.
#include "compat.h"

// Overloads: generic (integer) version first, float/double ones take precedence.
template <typename A> TL_DEV A tl_abs(A x) { return x < A(0) ? A(0) - x : x; }
TL_DEV float tl_abs(float x) { return tl_fabs(x); }
TL_DEV double tl_abs(double x) { return tl_fabs(x); }
template <typename A> TL_DEV A tl_floor_any(A x) { return x; }  // integers: identity
TL_DEV float tl_floor_any(float x) { return tl_floor(x); }
TL_DEV double tl_floor_any(double x) { return tl_floor(x); }
template <typename A> TL_DEV A tl_ceil_any(A x) { return x; }
TL_DEV float tl_ceil_any(float x) { return tl_ceil(x); }
TL_DEV double tl_ceil_any(double x) { return tl_ceil(x); }
template <typename A> TL_DEV A tl_round_any(A x) { return x; }
TL_DEV float tl_round_any(float x) { return tl_rint(x); }
TL_DEV double tl_round_any(double x) { return tl_rint(x); }
template <typename A> TL_DEV A tl_trunc_any(A x) { return x; }
TL_DEV float tl_trunc_any(float x) { return truncf(x); }
TL_DEV double tl_trunc_any(double x) { return trunc(x); }
template <typename A> TL_DEV A tl_not(A x) { return ~x; }
TL_MATH1(log1p, log1pf, log1p)
TL_MATH1(expm1, expm1f, expm1)
TL_MATH1(log2, log2f, log2)
TL_MATH1(log10, log10f, log10)
TL_MATH1(exp2, exp2f, exp2)
TL_MATH1(tan, tanf, tan)
TL_MATH1(atan, atanf, atan)
TL_MATH1(asin, asinf, asin)
TL_MATH1(acos, acosf, acos)
TL_MATH1(sinh, sinhf, sinh)
TL_MATH1(cosh, coshf, cosh)
TL_MATH1(asinh, asinhf, asinh)
TL_MATH1(acosh, acoshf, acosh)
TL_MATH1(atanh, atanhf, atanh)
TL_MATH1(rsqrt, rsqrtf, rsqrt)

// Each op: static A f(A x) on the arithmetic type A (Tr<T>::acc).
#define TL_UOP(Name, expr) \
    struct Name { template <typename A> static TL_DEV A f(A x) { return (expr); } };
TL_UOP(UExp, tl_exp(x))
TL_UOP(ULog, tl_log(x))
TL_UOP(USin, tl_sin(x))
TL_UOP(UCos, tl_cos(x))
TL_UOP(UTanh, tl_tanh(x))
TL_UOP(UAbs, tl_abs(x))
TL_UOP(UNeg, A(0) - x)
TL_UOP(URecip, A(1) / x)
TL_UOP(USqr, x * x)
TL_UOP(USqrt, tl_sqrt(x))
// tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
TL_UOP(UGeluTanh, A(0.5) * x * (A(1) + tl_tanh(A(0.7978845608028654) * (x + A(0.044715) * x * x * x))))
TL_UOP(UGeluErf, A(0.5) * x * (A(1) + tl_erf(x * A(0.7071067811865476))))
TL_UOP(UErf, tl_erf(x))
TL_UOP(URelu, x < A(0) ? A(0) : x)  // NaN stays NaN
TL_UOP(USilu, x / (A(1) + tl_exp(-x)))
TL_UOP(UFloor, tl_floor_any(x))
TL_UOP(UCeil, tl_ceil_any(x))
TL_UOP(URound, tl_round_any(x))
TL_UOP(USign, x > A(0) ? A(1) : (x < A(0) ? A(0) - A(1) : x))  // 0 -> 0, NaN -> NaN
TL_UOP(USigmoid, A(1) / (A(1) + tl_exp(-x)))
TL_UOP(UTrunc, tl_trunc_any(x))
TL_UOP(ULog1p, tl_log1p(x))
TL_UOP(UExpm1, tl_expm1(x))
TL_UOP(ULog2, tl_log2(x))
TL_UOP(ULog10, tl_log10(x))
TL_UOP(UExp2, tl_exp2(x))
TL_UOP(UTan, tl_tan(x))
TL_UOP(UAtan, tl_atan(x))
TL_UOP(UAsin, tl_asin(x))
TL_UOP(UAcos, tl_acos(x))
TL_UOP(USinh, tl_sinh(x))
TL_UOP(UCosh, tl_cosh(x))
TL_UOP(UAsinh, tl_asinh(x))
TL_UOP(UAcosh, tl_acosh(x))
TL_UOP(UAtanh, tl_atanh(x))
TL_UOP(URsqrt, tl_rsqrt(x))
TL_UOP(UFrac, x - tl_trunc_any(x))
TL_UOP(UNot, tl_not(x))
TL_UOP(ULogicalNot, A(x == A(0)))  // bool's bitwise_not

// Parameterised ops carry their scalars in the functor.
template <typename A> struct UAffine {
    A mul, add;
    TL_DEV A operator()(A x) const { return x * mul + add; }
};
template <typename A> struct UPowf {
    A e;
    TL_DEV A operator()(A x) const { return tl_pow(x, e); }
};
template <typename A> struct UElu {
    A alpha;
    TL_DEV A operator()(A x) const { return x > A(0) ? x : alpha * (tl_exp(x) - A(1)); }
};
template <typename Op> struct Stateless {
    template <typename A> TL_DEV A operator()(A x) const { return Op::f(x); }
};

template <typename T, typename F>
TL_DEV void unary_map(i64 n, const Strided& L, const T* in, T* out, F f) {
    tl_map1(n, L, in, out, [&](T x) { return Tr<T>::store(f(Tr<T>::load(x))); });
}

#define UNARY_ENTRY(op, Op, T, sfx)                                                        \
    extern "C" __global__ void u##op##_##sfx(i64 n, Strided L, const T* in, T* out) {    \
        unary_map(n, L, in, out, Stateless<Op>());                                       \
    }

// Integer dtypes get the ops that are closed over integers (floor/ceil/round/trunc are
// the identity there; bool has no neg, as in numpy), and bitwise_not, which floats lack;
// the Tensor casts to float for the rest.
#define UNARY_ANY_OPS(T, sfx)                                                              \
    UNARY_ENTRY(abs, UAbs, T, sfx) UNARY_ENTRY(sqr, USqr, T, sfx)                          \
    UNARY_ENTRY(sign, USign, T, sfx) UNARY_ENTRY(relu, URelu, T, sfx)                      \
    UNARY_ENTRY(floor, UFloor, T, sfx) UNARY_ENTRY(ceil, UCeil, T, sfx)                    \
    UNARY_ENTRY(round, URound, T, sfx) UNARY_ENTRY(trunc, UTrunc, T, sfx)
#define UNARY_BOOL_OPS(T, sfx) UNARY_ANY_OPS(T, sfx) UNARY_ENTRY(bitwise_not, ULogicalNot, T, sfx)
#define UNARY_INT_OPS(T, sfx) UNARY_ANY_OPS(T, sfx) UNARY_ENTRY(neg, UNeg, T, sfx) UNARY_ENTRY(bitwise_not, UNot, T, sfx)
#define UNARY_FLOAT_OPS(T, sfx)                                                            \
    UNARY_ANY_OPS(T, sfx) UNARY_ENTRY(neg, UNeg, T, sfx)                                   \
    UNARY_ENTRY(exp, UExp, T, sfx) UNARY_ENTRY(log, ULog, T, sfx)                          \
    UNARY_ENTRY(sin, USin, T, sfx) UNARY_ENTRY(cos, UCos, T, sfx)                          \
    UNARY_ENTRY(tanh, UTanh, T, sfx) UNARY_ENTRY(recip, URecip, T, sfx)                    \
    UNARY_ENTRY(sqrt, USqrt, T, sfx) UNARY_ENTRY(gelu_tanh, UGeluTanh, T, sfx)             \
    UNARY_ENTRY(gelu_erf, UGeluErf, T, sfx) UNARY_ENTRY(erf, UErf, T, sfx)                 \
    UNARY_ENTRY(silu, USilu, T, sfx) UNARY_ENTRY(sigmoid, USigmoid, T, sfx)                \
    UNARY_ENTRY(log1p, ULog1p, T, sfx) UNARY_ENTRY(expm1, UExpm1, T, sfx)                  \
    UNARY_ENTRY(log2, ULog2, T, sfx) UNARY_ENTRY(log10, ULog10, T, sfx)                    \
    UNARY_ENTRY(exp2, UExp2, T, sfx) UNARY_ENTRY(tan, UTan, T, sfx)                        \
    UNARY_ENTRY(atan, UAtan, T, sfx) UNARY_ENTRY(asin, UAsin, T, sfx)                      \
    UNARY_ENTRY(acos, UAcos, T, sfx) UNARY_ENTRY(sinh, USinh, T, sfx)                      \
    UNARY_ENTRY(cosh, UCosh, T, sfx) UNARY_ENTRY(asinh, UAsinh, T, sfx)                    \
    UNARY_ENTRY(acosh, UAcosh, T, sfx) UNARY_ENTRY(atanh, UAtanh, T, sfx)                  \
    UNARY_ENTRY(rsqrt, URsqrt, T, sfx) UNARY_ENTRY(frac, UFrac, T, sfx)

// affine for every dtype; powf and elu for floating dtypes. Scalars arrive as doubles.
// Integers follow the cpu reference: integral coefficients compute exactly in wrapping
// 64-bit arithmetic, others in double, truncated toward zero.
template <typename T, bool IsFloat = Tr<T>::is_float> struct AffineImpl {
    static TL_DEV void run(i64 n, const Strided& L, const T* in, T* out, double mul, double add) {
        typedef typename Tr<T>::acc A;
        UAffine<A> f; f.mul = (A)mul; f.add = (A)add;
        unary_map(n, L, in, out, f);
    }
};
template <typename T> struct AffineImpl<T, false> {
    static TL_DEV void run(i64 n, const Strided& L, const T* in, T* out, double mul, double add) {
        const bool exact = (double)(i64)mul == mul && (double)(i64)add == add;
        const u64 imul = (u64)(i64)mul, iadd = (u64)(i64)add;
        tl_map1(n, L, in, out, [&](T v) {
            const i64 x = tl_to_i64(v);
            return exact ? FromI64<T>::cv((i64)((u64)x * imul + iadd)) : FromF64<T>::cv((double)x * mul + add);
        });
    }
};

#define AFFINE_ENTRY(T, sfx)                                                               \
    extern "C" __global__ void affine_##sfx(i64 n, Strided L, const T* in, T* out,       \
                                            double mul, double add) {                    \
        AffineImpl<T>::run(n, L, in, out, mul, add);                                     \
    }
#define POWF_ELU_ENTRY(T, sfx)                                                             \
    extern "C" __global__ void powf_##sfx(i64 n, Strided L, const T* in, T* out, double e) { \
        UPowf<typename Tr<T>::acc> f; f.e = e; unary_map(n, L, in, out, f);              \
    }                                                                                    \
    extern "C" __global__ void elu_##sfx(i64 n, Strided L, const T* in, T* out, double alpha) { \
        UElu<typename Tr<T>::acc> f; f.alpha = alpha; unary_map(n, L, in, out, f);       \
    }

TL_FOR_FLOATS(UNARY_FLOAT_OPS)
TL_FOR_INTEGERS(UNARY_INT_OPS)
UNARY_BOOL_OPS(tlbool, bool)
TL_FOR_ALL(AFFINE_ENTRY)
TL_FOR_FLOATS(POWF_ELU_ENTRY)
