// compat.h -- the only kernel file that knows which vendor compiles it.
//
// Every kernels/<family>.hip includes this header and is compiled from the same text by
// hiprtc (AMD, `--offload-arch=gfx90a` etc.) and by NVRTC (NVIDIA, `-arch=sm_XX`).
// Part 1 maps the few vendor differences (no headers are included: hiprtc predefines the
// HIP device API and including hip_fp16.h again fails; NVRTC needs no header for what we
// use). Part 2 is portable: storage types, conversions, the by-value layout struct and
// the warp/block reductions that the families share.
#pragma once

// =====================================================================================
// Part 1: vendor mapping
// =====================================================================================
#if defined(__HIPCC_RTC__) || defined(__HIP_PLATFORM_AMD__) || defined(__HIP__)
#define TL_HIP 1
#elif defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define TL_CUDA 1
#else
#error "compat.h: compile with hiprtc or NVRTC"
#endif

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

#define TL_DEV __device__ __forceinline__

// A kernel's registers capped at n per thread where NVRTC takes __maxnreg__ (CUDA 12.4 on),
// without fixing its block size as __launch_bounds__ would. A tuning for NVIDIA's register
// file (64K per SM); elsewhere it expands to nothing.
#if defined(TL_CUDA) && (__CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 4))
#define TL_MAX_REGS(n) __maxnreg__(n)
#else
#define TL_MAX_REGS(n)
#endif

// Shuffle-xor within groups of `width` lanes (a power of two <= warpSize). CDNA
// wavefronts have 64 lanes, NVIDIA warps 32: callers pass the width, never assume 32.
#if defined(TL_HIP)
template <typename T> TL_DEV T tl_shfl_xor(T v, int mask, int width) { return __shfl_xor(v, mask, width); }
#else
template <typename T> TL_DEV T tl_shfl_xor(T v, int mask, int width) {
    return __shfl_xor_sync(0xffffffffu, v, mask, width);
}
#endif

// Whether p holds on any lane of the warp (wavefront); every lane must call it.
#if defined(TL_HIP)
// Not __any: hiprtc (5.2 and 5.4.2) links its wave32 variant for wave64 targets too, which
// tests the low 32 lanes only (s_cmp_lg_u32 vcc_lo); __ballot's uicmp is the wave's width.
TL_DEV bool tl_warp_any(bool p) { return __ballot(p) != 0ull; }
#else
TL_DEV bool tl_warp_any(bool p) { return __any_sync(0xffffffffu, p); }
#endif

// 2^x for x <= 0 (softmax exponents), by the hardware's approximation where exp2f adds an
// IEEE path around it: NVIDIA ex2.approx.ftz (2 ulp; results below 2^-126 flush to 0, which
// against a softmax row sum >= 1 is below f32 rounding). exp2f elsewhere.
#if defined(TL_CUDA)
TL_DEV float tl_exp2_approx(float x) { float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
#else
TL_DEV float tl_exp2_approx(float x) { return exp2f(x); }
#endif
#define TL_LOG2E 1.4426950408889634f  // exp(x) = 2^(x * TL_LOG2E)

// IEEE half <-> float/double with the hardware's round-to-nearest-even.
#if defined(TL_HIP)
union tl_half_bits { _Float16 h; u16 u; };
TL_DEV u16 tl_f32_to_f16_bits(float x) { tl_half_bits b; b.h = (_Float16)x; return b.u; }
TL_DEV u16 tl_f64_to_f16_bits(double x) { tl_half_bits b; b.h = (_Float16)x; return b.u; }
TL_DEV float tl_f16_bits_to_f32(u16 u) { tl_half_bits b; b.u = u; return (float)b.h; }
#else
TL_DEV u16 tl_f32_to_f16_bits(float x) { u16 r; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x)); return r; }
TL_DEV u16 tl_f64_to_f16_bits(double x) { u16 r; asm("cvt.rn.f16.f64 %0, %1;" : "=h"(r) : "d"(x)); return r; }
TL_DEV float tl_f16_bits_to_f32(u16 u) { float r; asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(u)); return r; }
#endif

// =====================================================================================
// Part 2: portable helpers
// =====================================================================================

// ---- bit casts ----------------------------------------------------------------------
TL_DEV u32 tl_f32_bits(float x) { union { float f; u32 u; } b; b.f = x; return b.u; }
TL_DEV float tl_bits_f32(u32 u) { union { float f; u32 u; } b; b.u = u; return b.f; }
TL_DEV u64 tl_f64_bits(double x) { union { double f; u64 u; } b; b.f = x; return b.u; }
TL_DEV double tl_bits_f64(u64 u) { union { double f; u64 u; } b; b.u = u; return b.f; }
TL_DEV float tl_inf_f32() { return tl_bits_f32(0x7f800000u); }
TL_DEV double tl_inf_f64() { return tl_bits_f64(0x7ff0000000000000ull); }
TL_DEV float tl_nan_f32() { return tl_bits_f32(0x7fc00000u); }

// ---- storage types ------------------------------------------------------------------
// f16 and bf16 are 16-bit storage with explicit conversions; bool is one byte holding
// 0 or 1. Distinct struct types keep template dispatch exact.
struct f16 { u16 bits; };
struct bf16 { u16 bits; };
struct tlbool { u8 v; };

TL_DEV float tl_bf16_bits_to_f32(u16 u) { return tl_bits_f32((u32)u << 16); }
// float -> bf16, round to nearest even; NaN stays a (quiet) NaN.
TL_DEV u16 tl_f32_to_bf16_bits(float x) {
    // Integer ops on purpose: sm_90's single cvt.rn.bf16.f32 measured slower in bf16 row
    // kernels (rms_norm -15%, rope -23% on the H100): conversions issue at a lower rate.
    // (The pair conversion is faster in the row kernels: rows.h round_run.)
    u32 u = tl_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (u16)(u >> 16);
}
// double -> bf16 with a single rounding: round to float *toward odd* first (exact
// enough: float keeps 24 >= 2*8+2 bits), then to bf16 to nearest even.
TL_DEV u16 tl_f64_to_bf16_bits(double x) {
    float f = (float)x;
    if (x == x && (double)f != x) {
        u32 u = tl_f32_bits(f);
        double af = f < 0 ? -(double)f : (double)f, ax = x < 0 ? -x : x;
        if (af > ax) u -= 1;  // rounded away from zero: step back toward zero
        f = tl_bits_f32(u | 1u);
    }
    return tl_f32_to_bf16_bits(f);
}

// Type traits: `acc` is the arithmetic type (f32 for the half types, u32 for the small
// integers whose wrap-around the final store reproduces); load/store convert.
template <typename T> struct Tr;
template <> struct Tr<float> {
    typedef float acc; static const bool is_float = true;
    static TL_DEV float load(float x) { return x; }
    static TL_DEV float store(float x) { return x; }
};
template <> struct Tr<double> {
    typedef double acc; static const bool is_float = true;
    static TL_DEV double load(double x) { return x; }
    static TL_DEV double store(double x) { return x; }
};
template <> struct Tr<f16> {
    typedef float acc; static const bool is_float = true;
    static TL_DEV float load(f16 x) { return tl_f16_bits_to_f32(x.bits); }
    static TL_DEV f16 store(float x) { f16 r; r.bits = tl_f32_to_f16_bits(x); return r; }
};
template <> struct Tr<bf16> {
    typedef float acc; static const bool is_float = true;
    static TL_DEV float load(bf16 x) { return tl_bf16_bits_to_f32(x.bits); }
    static TL_DEV bf16 store(float x) { bf16 r; r.bits = tl_f32_to_bf16_bits(x); return r; }
};
#if defined(TL_CUDA)
// A word of two 16-bit values (lo in the low half) widened to f32 by volatile asm: the same
// conversions as Tr<T>::load, which the compiler may not move (rows.h widen_held).
template <typename T> TL_DEV void tl_unpack2_opaque(u32 w, float& lo, float& hi);
template <> TL_DEV void tl_unpack2_opaque<bf16>(u32 w, float& lo, float& hi) {
    u32 l, h;  // bf16 -> f32 is exact: its bits become the upper half (selector 4: a zero byte)
    asm volatile("prmt.b32 %0, %2, 0, 0x1044;\n\tprmt.b32 %1, %2, 0, 0x3244;" : "=r"(l), "=r"(h) : "r"(w));
    lo = tl_bits_f32(l);
    hi = tl_bits_f32(h);
}
template <> TL_DEV void tl_unpack2_opaque<f16>(u32 w, float& lo, float& hi) {
    asm volatile("{ .reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h; }"
                 : "=f"(lo), "=f"(hi) : "r"(w));
}
#endif
template <> struct Tr<u8> {
    typedef u32 acc; static const bool is_float = false;
    static TL_DEV u32 load(u8 x) { return x; }
    static TL_DEV u8 store(u32 x) { return (u8)x; }
};
template <> struct Tr<u32> {
    typedef u32 acc; static const bool is_float = false;
    static TL_DEV u32 load(u32 x) { return x; }
    static TL_DEV u32 store(u32 x) { return x; }
};
template <> struct Tr<i64> {
    typedef i64 acc; static const bool is_float = false;
    static TL_DEV i64 load(i64 x) { return x; }
    static TL_DEV i64 store(i64 x) { return x; }
};
template <> struct Tr<tlbool> {
    typedef u32 acc; static const bool is_float = false;
    static TL_DEV u32 load(tlbool x) { return x.v; }
    static TL_DEV tlbool store(u32 x) { tlbool r; r.v = x != 0; return r; }
};

// ---- casts between any two storage types ---------------------------------------------
// Floating sources go through double (exact for f16/bf16/f32), integer sources through
// i64; the destination rounds once. float -> integer truncates toward zero and wraps
// like numpy (via i64); -> bool is x != 0.
TL_DEV double tl_to_f64(float x) { return x; }
TL_DEV double tl_to_f64(double x) { return x; }
TL_DEV double tl_to_f64(f16 x) { return Tr<f16>::load(x); }
TL_DEV double tl_to_f64(bf16 x) { return Tr<bf16>::load(x); }
TL_DEV i64 tl_to_i64(u8 x) { return x; }
TL_DEV i64 tl_to_i64(u32 x) { return x; }
TL_DEV i64 tl_to_i64(i64 x) { return x; }
TL_DEV i64 tl_to_i64(tlbool x) { return x.v; }

template <typename D> struct FromF64;
template <> struct FromF64<float> { static TL_DEV float cv(double v) { return (float)v; } };
template <> struct FromF64<double> { static TL_DEV double cv(double v) { return v; } };
template <> struct FromF64<f16> { static TL_DEV f16 cv(double v) { f16 r; r.bits = tl_f64_to_f16_bits(v); return r; } };
template <> struct FromF64<bf16> { static TL_DEV bf16 cv(double v) { bf16 r; r.bits = tl_f64_to_bf16_bits(v); return r; } };
template <> struct FromF64<u8> { static TL_DEV u8 cv(double v) { return (u8)(i64)v; } };
template <> struct FromF64<u32> { static TL_DEV u32 cv(double v) { return (u32)(i64)v; } };
template <> struct FromF64<i64> { static TL_DEV i64 cv(double v) { return (i64)v; } };
template <> struct FromF64<tlbool> { static TL_DEV tlbool cv(double v) { tlbool r; r.v = v != 0.0; return r; } };

template <typename D> struct FromI64 {  // integers -> integers wrap; -> floats via double
    static TL_DEV D cv(i64 v) { return FromF64<D>::cv((double)v); }
};
template <> struct FromI64<float> { static TL_DEV float cv(i64 v) { return (float)v; } };
template <> struct FromI64<u8> { static TL_DEV u8 cv(i64 v) { return (u8)v; } };
template <> struct FromI64<u32> { static TL_DEV u32 cv(i64 v) { return (u32)v; } };
template <> struct FromI64<i64> { static TL_DEV i64 cv(i64 v) { return v; } };
template <> struct FromI64<tlbool> { static TL_DEV tlbool cv(i64 v) { tlbool r; r.v = v != 0; return r; } };

template <typename D, typename S, bool FloatSrc = Tr<S>::is_float> struct Cast;
template <typename D, typename S> struct Cast<D, S, true> {
    static TL_DEV D cv(S x) { return FromF64<D>::cv(tl_to_f64(x)); }
};
template <typename D, typename S> struct Cast<D, S, false> {
    static TL_DEV D cv(S x) { return FromI64<D>::cv(tl_to_i64(x)); }
};
// The hot mixed-precision casts skip the double detour (results are identical).
template <> struct Cast<f16, float, true> { static TL_DEV f16 cv(float x) { return Tr<f16>::store(x); } };
template <> struct Cast<bf16, float, true> { static TL_DEV bf16 cv(float x) { return Tr<bf16>::store(x); } };
template <> struct Cast<float, f16, true> { static TL_DEV float cv(f16 x) { return Tr<f16>::load(x); } };
template <> struct Cast<float, bf16, true> { static TL_DEV float cv(bf16 x) { return Tr<bf16>::load(x); } };
template <> struct Cast<bf16, f16, true> { static TL_DEV bf16 cv(f16 x) { return Tr<bf16>::store(Tr<f16>::load(x)); } };
template <> struct Cast<f16, bf16, true> { static TL_DEV f16 cv(bf16 x) { return Tr<f16>::store(Tr<bf16>::load(x)); } };

// A scalar travels to a kernel as its raw bits in a u64 (the host packs it in the
// tensor's dtype), so every dtype's value arrives exactly.
template <typename T> TL_DEV T tl_from_bits(u64 bits) {
    union { u64 u; T t; } b; b.u = bits; return b.t;
}

// ---- math overloads for the arithmetic types ------------------------------------------
#define TL_MATH1(name, f32fn, f64fn) \
    TL_DEV float tl_##name(float x) { return f32fn(x); } \
    TL_DEV double tl_##name(double x) { return f64fn(x); }
TL_MATH1(exp, expf, exp)
TL_MATH1(log, logf, log)
TL_MATH1(sin, sinf, sin)
TL_MATH1(cos, cosf, cos)
TL_MATH1(tanh, tanhf, tanh)
TL_MATH1(sqrt, sqrtf, sqrt)
TL_MATH1(erf, erff, erf)
TL_MATH1(floor, floorf, floor)
TL_MATH1(ceil, ceilf, ceil)
TL_MATH1(rint, rintf, rint)  // round half to even, as torch.round / numpy.round
TL_MATH1(fabs, fabsf, fabs)
TL_DEV float tl_pow(float x, float e) { return powf(x, e); }
TL_DEV double tl_pow(double x, double e) { return pow(x, e); }
template <typename A> TL_DEV bool tl_isnan(A x) { return x != x; }
template <typename A> TL_DEV A tl_lowest();
template <> TL_DEV float tl_lowest<float>() { return -tl_inf_f32(); }
template <> TL_DEV double tl_lowest<double>() { return -tl_inf_f64(); }
template <> TL_DEV u32 tl_lowest<u32>() { return 0u; }
template <> TL_DEV i64 tl_lowest<i64>() { return (i64)(1ull << 63); }
template <typename A> TL_DEV A tl_highest();
template <> TL_DEV float tl_highest<float>() { return tl_inf_f32(); }
template <> TL_DEV double tl_highest<double>() { return tl_inf_f64(); }
template <> TL_DEV u32 tl_highest<u32>() { return 0xffffffffu; }
template <> TL_DEV i64 tl_highest<i64>() { return (i64)(~0ull >> 1); }

// ---- layouts by value -----------------------------------------------------------------
// The host (backends/rocm/launch.py, `pack_strided`) packs this struct byte for byte:
// offset, ndim, contiguous, then shape and strides with the INNERMOST dim first (after
// merging dims that are contiguous with each other and dropping size-1 dims).
#define TL_MAX_DIMS 8
struct Strided {
    i64 offset;
    int ndim;
    int contiguous;  // 1: element i lives at offset + i (the fast path)
    i64 shape[TL_MAX_DIMS];
    i64 strides[TL_MAX_DIMS];
};

// Element offset of the i-th element in row-major order; I is the type of the index
// arithmetic: u32 where the launch has fewer than 2^31 elements (tl_narrow: 32-bit div/mod
// is several times cheaper than 64-bit, and strided copies are bound by it), else i64.
// Offsets are always 64-bit. The outermost dim needs no modulo (i is in range), so 1-D
// strided and stride-0 (broadcast scalar) layouts cost one multiply. (Not unrolled on
// purpose: unrolling 8 dims of div/mod triples compile time and code size.)
template <typename I> TL_DEV i64 tl_index_n(const Strided& L, I i) {
    if (L.contiguous) return L.offset + (i64)i;
    if (L.ndim == 0) return L.offset;
    i64 idx = L.offset;
    const int last = L.ndim - 1;
#pragma unroll 1
    for (int d = 0; d < last; ++d) {
        const I n = (I)L.shape[d], q = i / n;
        idx += (i64)(i - q * n) * L.strides[d];
        i = q;
    }
    return idx + (i64)i * L.strides[last];
}
TL_DEV i64 tl_index(const Strided& L, i64 i) { return tl_index_n<i64>(L, i); }

// Below 2^31 elements a u32 index and the grid stride added to it cannot overflow.
#define TL_NARROW ((i64)1 << 31)
TL_DEV bool tl_narrow(i64 n) { return n < TL_NARROW; }

// Grid-stride loop over [0, n) with 64-bit indices; TL_GRID_LOOP_T with index type I.
#define TL_GRID_LOOP(i, n) \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (i64)(n); i += (i64)blockDim.x * gridDim.x)
#define TL_GRID_LOOP_T(I, i, n) \
    for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < (I)(n); i += (I)blockDim.x * (I)gridDim.x)

// ---- vector access ---------------------------------------------------------------------
// V consecutive elements moved by one load/store (16 bytes: what streams at full memory
// bandwidth). alignas needs V * sizeof(T) to be a power of two, which all uses are.
template <typename T, int V> struct alignas(V * sizeof(T)) VecN { T v[V]; };
template <typename T> using Vec4 = VecN<T, 4>;
template <int V, typename T> TL_DEV bool tl_aligned(const T* p) { return ((u64)p & (V * sizeof(T) - 1)) == 0; }
// Elements per vector for a map whose widest operand is S bytes: 16 bytes, at most 8.
template <int S> struct TlWidth { enum { V = S >= 8 ? 2 : (S == 4 ? 4 : 8) }; };

// Whether `p` read through L can be read V elements at a time: for every i that is a
// multiple of V, elements i..i+V-1 are consecutive and their first is V-aligned. True for
// contiguous layouts at an aligned address, and for strided ones whose innermost dim is
// contiguous with a length that V divides (a (b, t, h, d) view, a bias broadcast along
// leading dims) when every other stride keeps the alignment. Once per thread, not per element.
template <int V, typename T> TL_DEV bool tl_vec_ok(const Strided& L, const T* p) {
    if (!tl_aligned<V>(p + L.offset)) return false;
    if (L.contiguous || V == 1) return true;
    if (L.ndim == 0 || L.strides[0] != 1 || L.shape[0] % V != 0) return false;
    for (int d = 1; d < L.ndim; ++d)
        if (L.strides[d] % V != 0) return false;
    return true;
}

// > 0 when element i of L lives at offset + i % P: a contiguous block of P elements
// repeated along the leading dims (a bias (C,) broadcast to (N, C)); P == 1 is a broadcast
// scalar. 0 otherwise (also for contiguous layouts: the caller handles those).
TL_DEV i64 tl_period(const Strided& L) {
    if (L.contiguous) return 0;
    if (L.ndim == 0) return 1;
    const int d0 = L.strides[0] == 1 ? 1 : 0;
    for (int d = d0; d < L.ndim; ++d)
        if (L.strides[d] != 0) return 0;
    return d0 ? L.shape[0] : 1;
}

// ---- elementwise maps over strided operands ---------------------------------------------
// out[i] = f(a[i], ...) for i < n with a contiguous output. Each launch picks once (uniform
// branches, not per element) the index type (u32 below 2^31 elements) and whether every
// operand can be accessed V elements at a time (tl_vec_ok); contiguous operands index as
// offset + i, strided ones with one tl_index_n per vector. `f` maps input storage values
// to the output storage value.
template <int V, typename T> TL_DEV VecN<T, V> tl_loadv(const T* p) { return *(const VecN<T, V>*)p; }

template <int V, typename I, typename A, typename O, typename F>
TL_DEV void tl_map1_run(I n, const Strided& La, const A* a, O* out, F f) {
    const I nv = n / V;
    TL_GRID_LOOP_T(I, v, nv) {
        const VecN<A, V> x = tl_loadv<V>(a + tl_index_n<I>(La, v * V));
        VecN<O, V> r;
#pragma unroll
        for (int j = 0; j < V; ++j) r.v[j] = f(x.v[j]);
        ((VecN<O, V>*)out)[v] = r;
    }
    if (V > 1)  // the last n % V elements of contiguous operands
        for (I i = nv * V + (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < n; i += (I)blockDim.x * (I)gridDim.x)
            out[i] = f(a[tl_index_n<I>(La, i)]);
}

template <int V, typename I, typename A, typename B, typename O, typename F>
TL_DEV void tl_map2_run(I n, const Strided& La, const Strided& Lb, const A* a, const B* b, O* out, F f) {
    const I nv = n / V;
    TL_GRID_LOOP_T(I, v, nv) {
        const VecN<A, V> x = tl_loadv<V>(a + tl_index_n<I>(La, v * V));
        const VecN<B, V> y = tl_loadv<V>(b + tl_index_n<I>(Lb, v * V));
        VecN<O, V> r;
#pragma unroll
        for (int j = 0; j < V; ++j) r.v[j] = f(x.v[j], y.v[j]);
        ((VecN<O, V>*)out)[v] = r;
    }
    if (V > 1)
        for (I i = nv * V + (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < n; i += (I)blockDim.x * (I)gridDim.x)
            out[i] = f(a[tl_index_n<I>(La, i)], b[tl_index_n<I>(Lb, i)]);
}

template <int V, typename I, typename A, typename B, typename C, typename O, typename F>
TL_DEV void tl_map3_run(I n, const Strided& La, const Strided& Lb, const Strided& Lc, const A* a, const B* b,
                        const C* c, O* out, F f) {
    const I nv = n / V;
    TL_GRID_LOOP_T(I, v, nv) {
        const VecN<A, V> x = tl_loadv<V>(a + tl_index_n<I>(La, v * V));
        const VecN<B, V> y = tl_loadv<V>(b + tl_index_n<I>(Lb, v * V));
        const VecN<C, V> z = tl_loadv<V>(c + tl_index_n<I>(Lc, v * V));
        VecN<O, V> r;
#pragma unroll
        for (int j = 0; j < V; ++j) r.v[j] = f(x.v[j], y.v[j], z.v[j]);
        ((VecN<O, V>*)out)[v] = r;
    }
    if (V > 1)
        for (I i = nv * V + (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < n; i += (I)blockDim.x * (I)gridDim.x)
            out[i] = f(a[tl_index_n<I>(La, i)], b[tl_index_n<I>(Lb, i)], c[tl_index_n<I>(Lc, i)]);
}

// The dispatch: (vectors or single elements) x (u32 or i64 index).
#define TL_MAP_DISPATCH(V, vec, n, RUN, ...)                                        \
    if (!tl_narrow(n)) RUN<1, i64>((i64)(n), __VA_ARGS__);                          \
    else if (vec) RUN<V, u32>((u32)(n), __VA_ARGS__);                                 \
    else RUN<1, u32>((u32)(n), __VA_ARGS__);

template <typename A, typename O, typename F>
TL_DEV void tl_map1(i64 n, const Strided& La, const A* a, O* out, F f) {
    const int V = TlWidth<(sizeof(A) > sizeof(O) ? sizeof(A) : sizeof(O))>::V;
    const bool vec = tl_vec_ok<V>(La, a) && tl_aligned<V>(out);
    TL_MAP_DISPATCH(V, vec, n, tl_map1_run, La, a, out, f)
}
template <typename A, typename B, typename O, typename F>
TL_DEV void tl_map2(i64 n, const Strided& La, const Strided& Lb, const A* a, const B* b, O* out, F f) {
    const int S = sizeof(A) > sizeof(B) ? sizeof(A) : sizeof(B);
    const int V = TlWidth<(S > (int)sizeof(O) ? S : (int)sizeof(O))>::V;
    const bool vec = tl_vec_ok<V>(La, a) && tl_vec_ok<V>(Lb, b) && tl_aligned<V>(out);
    TL_MAP_DISPATCH(V, vec, n, tl_map2_run, La, Lb, a, b, out, f)
}
template <typename A, typename B, typename C, typename O, typename F>
TL_DEV void tl_map3(i64 n, const Strided& La, const Strided& Lb, const Strided& Lc, const A* a, const B* b,
                    const C* c, O* out, F f) {
    const int S = sizeof(B) > sizeof(C) ? sizeof(B) : sizeof(C);
    const int V = TlWidth<(S > (int)sizeof(O) ? S : (int)sizeof(O))>::V;
    const bool vec = tl_vec_ok<V>(La, a) && tl_vec_ok<V>(Lb, b) && tl_vec_ok<V>(Lc, c) && tl_aligned<V>(out);
    TL_MAP_DISPATCH(V, vec, n, tl_map3_run, La, Lb, Lc, a, b, c, out, f)
}

// ---- multi-tensor tables (adamw_many, cast_many) ----------------------------------------
// Block b works on tensor t where first_block[t] <= b < first_block[t + 1] (the host's
// _table_blocks); a table holds a few dozen tensors, so a scan is cheaper than a search.
TL_DEV int tl_table_tensor(const i64* first_block, i64 b) {
    int t = 0;
    while (b >= first_block[t + 1]) ++t;
    return t;
}

// ---- row reductions -----------------------------------------------------------------
// Blocks are (tpr, rows_per_block): `tpr` threads (a power of two) cooperate on one row.
// When tpr <= warpSize a row's lanes sit inside one warp and shuffles of width tpr
// suffice; otherwise the row's warps meet in shared memory, row y's at smem[y * tpr /
// warpSize ..] (smem holds one State per warp of the block).
// Every thread of the block must call these (they contain shuffles and barriers).
// `Op` provides: typedef State; static State combine(State, State);
// static State shfl(State, int mask, int width).
#define TL_MAX_WARPS 32  // 1024 threads / 32 lanes

// At each shuffle step both partners combine (lower lane's part, higher lane's part), so
// all of a row's threads get bit-identical results also for an Op whose combine is not
// exactly commutative (rows.h MeanM2Op); the warps' parts are merged by a shuffle tree.
// The operands are ordered by selects before one combine: a branch per order made the
// partners diverge and run both (H100: layer_norm f32 91.6 -> 92.6% of copy, bf16 +0.3%).
template <typename Op>
TL_DEV typename Op::State tl_row_allreduce(typename Op::State v, typename Op::State* smem) {
    typedef typename Op::State S;
    const int tpr = blockDim.x, pos = threadIdx.x;  // pos: this thread's place in its row
    const int width = tpr < warpSize ? tpr : warpSize;
    for (int m = width >> 1; m > 0; m >>= 1) {
        const S o = Op::shfl(v, m, width);
        const bool hi = pos & m;
        v = Op::combine(hi ? o : v, hi ? v : o);
    }
    if (tpr <= warpSize) return v;
    const int lane = pos % warpSize, wpr = tpr / warpSize;  // a power of two <= warpSize
    S* const s = smem + threadIdx.y * wpr;
    __syncthreads();  // smem may still be read by the previous call
    if (lane == 0) s[pos / warpSize] = v;
    __syncthreads();
    v = s[lane & (wpr - 1)];
    for (int m = wpr >> 1; m > 0; m >>= 1) {
        const S o = Op::shfl(v, m, wpr);
        const bool hi = lane & m;
        v = Op::combine(hi ? o : v, hi ? v : o);
    }
    return v;
}

template <typename A> struct SumOp {
    typedef A State;
    static TL_DEV A combine(A a, A b) { return a + b; }
    static TL_DEV A shfl(A v, int m, int w) { return tl_shfl_xor(v, m, w); }
};
// max/min that propagate NaN (as torch and numpy do).
template <typename A> struct MaxOp {
    typedef A State;
    static TL_DEV A combine(A a, A b) { return (tl_isnan(a) || a > b) ? a : b; }
    static TL_DEV A shfl(A v, int m, int w) { return tl_shfl_xor(v, m, w); }
};
// max that skips NaN (one instruction, not a compare and a select): for softmax, whose
// exp sum turns a NaN anywhere in the row into NaN by itself.
template <typename A> struct FMaxOp {
    typedef A State;
    static TL_DEV A combine(A a, A b) { return fmax(a, b); }
    static TL_DEV A shfl(A v, int m, int w) { return tl_shfl_xor(v, m, w); }
};
template <typename A> struct MinOp {
    typedef A State;
    static TL_DEV A combine(A a, A b) { return (tl_isnan(a) || a < b) ? a : b; }
    static TL_DEV A shfl(A v, int m, int w) { return tl_shfl_xor(v, m, w); }
};
// Two sums at once (layer norm's mean and variance, softmax's max and sum).
template <typename A> struct Pair { A a, b; };
template <typename A> struct PairSumOp {
    typedef Pair<A> State;
    static TL_DEV State combine(State x, State y) { State r; r.a = x.a + y.a; r.b = x.b + y.b; return r; }
    static TL_DEV State shfl(State v, int m, int w) {
        State r; r.a = tl_shfl_xor(v.a, m, w); r.b = tl_shfl_xor(v.b, m, w); return r;
    }
};

// ---- atomics for every storage type --------------------------------------------------
// Native where both vendors have them; the 1-byte types by compare-and-swap on the
// aligned 32-bit word that contains them. (f16/bf16 sums accumulate in an f32 buffer.)
TL_DEV void tl_atomic_add(float* p, float v) { atomicAdd(p, v); }
TL_DEV void tl_atomic_add(double* p, double v) { atomicAdd(p, v); }
TL_DEV void tl_atomic_add(u32* p, u32 v) { atomicAdd(p, v); }
TL_DEV void tl_atomic_add(i64* p, i64 v) {  // two's complement: unsigned add is the same bits
    atomicAdd((unsigned long long*)p, (unsigned long long)v);
}
template <typename T>
TL_DEV void tl_atomic_add_byte(T* p, typename Tr<T>::acc v) {
    const u64 addr = (u64)p;
    u32* word = (u32*)(addr & ~(u64)3);
    const u32 shift = (u32)(addr & 3) * 8, mask = 0xffu << shift;
    u32 old = *word, assumed;
    do {
        assumed = old;
        union { T t; u8 u; } cur, next;
        cur.u = (u8)((assumed & mask) >> shift);
        next.t = Tr<T>::store(Tr<T>::load(cur.t) + v);
        const u32 nbits = next.u;
        old = atomicCAS(word, assumed, (assumed & ~mask) | (nbits << shift));
    } while (old != assumed);
}
TL_DEV void tl_atomic_add(u8* p, u32 v) { tl_atomic_add_byte<u8>(p, v); }
TL_DEV void tl_atomic_add(tlbool* p, u32 v) { tl_atomic_add_byte<tlbool>(p, v); }

// ---- entry-point generation ----------------------------------------------------------
// TL_FOR_ALL(M) calls M(type, suffix) for every dtype; the suffix is the dtype's short
// name, the last part of every entry point (`badd_f32`, `cast_f16_bf16`). Which entry
// points exist is mirrored by the KERNELS table in backends/rocm/kernel_table.py.
#define TL_FOR_FLOATS(M) M(float, f32) M(f16, f16) M(bf16, bf16) M(double, f64)
#define TL_FOR_INTEGERS(M) M(u8, u8) M(u32, u32) M(i64, i64)
#define TL_FOR_NONFLOATS(M) TL_FOR_INTEGERS(M) M(tlbool, bool)
#define TL_FOR_ALL(M) TL_FOR_FLOATS(M) TL_FOR_NONFLOATS(M)

// =====================================================================================
// Part 3: warp-level tensor-core tiles (f16/bf16 in, f32 accumulate)
// =====================================================================================
// One warp (wavefront) computes a 16x16 f32 tile C += A (16x16) * B (16x16) per
// tl_mma_16x16x16<T>. The register layouts differ per vendor and stay in here: callers
// load fragments from shared memory with the helpers below and touch the accumulator
// only through TL_MMA_ACC_N elements per lane whose (row, col) the helpers name.
// Loads: tl_mma_load_a (A row-major), tl_mma_load_a_t (A stored transposed), tl_mma_load_b_nk
// / _kn (B stored n- / k-major); an accumulator becomes the next product's A operand
// (tl_mma_acc_to_a) or a T tile in shared memory (tl_mma_store_acc).
//   NVIDIA sm_80+: two mma.sync.m16n8k16 per tile (32 lanes, 8 floats per lane);
//                  fragments come from ldmatrix (shared-memory rows 16-byte aligned).
//   AMD gfx90a/gfx94x: one v_mfma_f32_16x16x16{f16,bf16_1k} (64 lanes, 4 floats per lane).
// TL_HAS_MMA is defined only where one of these exists; the host never launches an MMA
// kernel elsewhere. Every lane of the warp must call each helper (they exchange registers);
// the block's x dimension must be a multiple of warpSize (lane = threadIdx.x % warpSize).
#if defined(TL_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define TL_HAS_MMA 1
#define TL_MMA_ACC_N 8      // accumulator floats per lane
#define TL_MMA_ROW_SLOTS 2  // distinct tile rows per lane
#define TL_MMA_ROW_LANES 4  // lanes that share a row (consecutive lanes)
#define TL_MMA_LANES 32     // lanes per warp (launch bounds of MMA kernels)
#define TL_MMA_STAGES 2     // K/V buffers of the MMA forward (shared memory: up to 227 KiB per block)
struct TlFragA { u32 x[4]; };
struct TlFragB { u32 x[4]; };  // two k16 x n8 halves
struct TlAcc { float x[8]; };  // x[4*half + i]: row lane/4 + 8*(i/2), col 8*half + 2*(lane%4) + i%2

TL_DEV int tl_lane() { return (int)(threadIdx.x & 31); }
TL_DEV int tl_mma_acc_slot(int i) { return (i >> 1) & 1; }
TL_DEV int tl_mma_slot_row(int s) { return (tl_lane() >> 2) + 8 * s; }
TL_DEV int tl_mma_acc_col(int i) { return 8 * (i >> 2) + 2 * (tl_lane() & 3) + (i & 1); }

// The 32-bit shared-memory address of p. The compiler's own conversion (not inline asm):
// it sees through it, so addresses stay 32-bit shared offsets ([R+imm] operands of LDSM /
// LDGSTS) instead of 64-bit generic pointers converted one by one.
TL_DEV u32 tl_smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }
TL_DEV void tl_ldmatrix_x4(u32* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(tl_smem_addr(p)));
}
TL_DEV void tl_ldmatrix_x4_trans(u32* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(tl_smem_addr(p)));
}
// A[r][k] = p[r * ld + k] (16-bit storage, ld a multiple of 8)
template <typename T> TL_DEV void tl_mma_load_a(TlFragA& f, const T* p, int ld) {
    const int l = tl_lane();
    tl_ldmatrix_x4(f.x, p + ((l & 7) + 8 * ((l >> 3) & 1)) * ld + 8 * (l >> 4));
}
// B[k][n] = p[n * ld + k] (B stored n-major, e.g. K for Q K^T)
template <typename T> TL_DEV void tl_mma_load_b_nk(TlFragB& f, const T* p, int ld) {
    const int l = tl_lane();
    tl_ldmatrix_x4(f.x, p + ((l & 7) + 8 * (l >> 4)) * ld + 8 * ((l >> 3) & 1));
}
// B[k][n] = p[k * ld + n] (B stored k-major, e.g. V for P V)
template <typename T> TL_DEV void tl_mma_load_b_kn(TlFragB& f, const T* p, int ld) {
    const int l = tl_lane();
    tl_ldmatrix_x4_trans(f.x, p + ((l & 7) + 8 * ((l >> 3) & 1)) * ld + 8 * (l >> 4));
}
// A[r][k] = p[k * ld + r] (A stored transposed, e.g. dS^T for dS K): the B_kn addressing
// with the two 8x8 halves of k and r swapped.
template <typename T> TL_DEV void tl_mma_load_a_t(TlFragA& f, const T* p, int ld) {
    const int l = tl_lane();
    tl_ldmatrix_x4_trans(f.x, p + ((l & 7) + 8 * (l >> 4)) * ld + 8 * ((l >> 3) & 1));
}
template <typename T> TL_DEV u32 tl_pack2(float lo, float hi);
template <> TL_DEV u32 tl_pack2<bf16>(float lo, float hi) {
    u32 r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r;
}
template <> TL_DEV u32 tl_pack2<f16>(float lo, float hi) {
    u32 r; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r;
}
// An accumulator rounded to T into p[row * ld + col] (ld even): column pairs as one word.
template <typename T> TL_DEV void tl_mma_store_acc(T* p, int ld, const TlAcc& c) {
    const int l = tl_lane();
#pragma unroll
    for (int i = 0; i < 8; i += 2)
        *(u32*)(p + ((l >> 2) + 8 * ((i >> 1) & 1)) * ld + 8 * (i >> 2) + 2 * (l & 3)) = tl_pack2<T>(c.x[i], c.x[i + 1]);
}
// p[row * ld + col] += scale * c[row][col] for row < rows, col < cols, atomically (f32
// partial sums from several blocks); zeros are skipped. Column pairs as one vector
// reduction where the hardware has it (sm_90) and the pair is complete and aligned.
TL_DEV void tl_mma_atomic_add_acc(float* p, i64 ld, const TlAcc& c, float scale, int rows, int cols) {
    const int l = tl_lane();
#pragma unroll
    for (int i = 0; i < 8; i += 2) {
        const int r = (l >> 2) + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * (l & 3);
        if (r >= rows) continue;
        float* q = p + r * ld + col;
        const float a = c.x[i] * scale, b = c.x[i + 1] * scale;
#if __CUDA_ARCH__ >= 900
        if (col + 1 < cols && ((u64)q & 7) == 0) {
            if (a != 0.0f || b != 0.0f) asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" :: "l"(q), "f"(a), "f"(b) : "memory");
            continue;
        }
#endif
        if (col < cols && a != 0.0f) atomicAdd(q, a);
        if (col + 1 < cols && b != 0.0f) atomicAdd(q + 1, b);
    }
}
// The same for a complete tile (16 rows, 16 cols) whose rows start 8-byte aligned, zeros
// included (no per-element test): on sm_90 column pairs as 4 vector reductions per lane.
TL_DEV void tl_mma_atomic_add_tile(float* p, i64 ld, const TlAcc& c, float scale) {
    const int l = tl_lane();
    float* r0 = p + (l >> 2) * ld + 2 * (l & 3);  // row l/4; row l/4 + 8 is 8 * ld further
    float* r8 = r0 + 8 * ld;
#pragma unroll
    for (int i = 0; i < 8; i += 2) {
        float* q = ((i & 2) ? r8 : r0) + 8 * (i >> 2);
#if __CUDA_ARCH__ >= 900
        asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" :: "l"(q), "f"(c.x[i] * scale), "f"(c.x[i + 1] * scale)
                     : "memory");
#else
        atomicAdd(q, c.x[i] * scale);
        atomicAdd(q + 1, c.x[i + 1] * scale);
#endif
    }
}
// An accumulator rounded to T as the A operand of the next product (P of P V): on NVIDIA
// the m16n8 accumulator layout is the A layout, so this is a register repack.
template <typename T> TL_DEV void tl_mma_acc_to_a(TlFragA& f, const TlAcc& c) {
#pragma unroll
    for (int r = 0; r < 4; ++r) f.x[r] = tl_pack2<T>(c.x[2 * r], c.x[2 * r + 1]);
}
#define TL_MMA_PTX(TY)                                                                          \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TY "." TY ".f32 {%0,%1,%2,%3}, "      \
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"                                       \
                 : "+f"(c.x[4 * h]), "+f"(c.x[4 * h + 1]), "+f"(c.x[4 * h + 2]), "+f"(c.x[4 * h + 3]) \
                 : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[2 * h]), "r"(b.x[2 * h + 1]))
template <typename T> TL_DEV void tl_mma_16x16x16(TlAcc& c, const TlFragA& a, const TlFragB& b);
template <> TL_DEV void tl_mma_16x16x16<bf16>(TlAcc& c, const TlFragA& a, const TlFragB& b) {
#pragma unroll
    for (int h = 0; h < 2; ++h) TL_MMA_PTX("bf16");
}
template <> TL_DEV void tl_mma_16x16x16<f16>(TlAcc& c, const TlFragA& a, const TlFragB& b) {
#pragma unroll
    for (int h = 0; h < 2; ++h) TL_MMA_PTX("f16");
}
#undef TL_MMA_PTX

#elif defined(TL_HIP) && (defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__))
#define TL_HAS_MMA 1
#define TL_MMA_ACC_N 4
#define TL_MMA_ROW_SLOTS 4
#define TL_MMA_ROW_LANES 16
#define TL_MMA_LANES 64
#define TL_MMA_STAGES 1  // 64 KiB of LDS per workgroup: one K and one V buffer
typedef short tl_short4 __attribute__((ext_vector_type(4)));
typedef _Float16 tl_half4 __attribute__((ext_vector_type(4)));
typedef float tl_float4 __attribute__((ext_vector_type(4)));
// lane l holds A[l % 16][4 * (l / 16) + i], B[4 * (l / 16) + i][l % 16], C[4 * (l / 16) + i][l % 16]
struct TlFragA { tl_short4 x; };
struct TlFragB { tl_short4 x; };
struct TlAcc { float x[4]; };

TL_DEV int tl_lane() { return (int)(threadIdx.x & 63); }
TL_DEV int tl_mma_acc_slot(int i) { return i; }
TL_DEV int tl_mma_slot_row(int s) { return 4 * (tl_lane() >> 4) + s; }
TL_DEV int tl_mma_acc_col(int i) { return tl_lane() & 15; }

template <typename T> TL_DEV void tl_mma_load_a(TlFragA& f, const T* p, int ld) {
    const int l = tl_lane();
    const u16* q = (const u16*)(p + (l & 15) * ld + 4 * (l >> 4));
#pragma unroll
    for (int i = 0; i < 4; ++i) f.x[i] = (short)q[i];
}
template <typename T> TL_DEV void tl_mma_load_b_nk(TlFragB& f, const T* p, int ld) {
    const int l = tl_lane();
    const u16* q = (const u16*)(p + (l & 15) * ld + 4 * (l >> 4));
#pragma unroll
    for (int i = 0; i < 4; ++i) f.x[i] = (short)q[i];
}
template <typename T> TL_DEV void tl_mma_load_b_kn(TlFragB& f, const T* p, int ld) {
    const int l = tl_lane();
    const u16* q = (const u16*)(p + 4 * (l >> 4) * ld + (l & 15));
#pragma unroll
    for (int i = 0; i < 4; ++i) f.x[i] = (short)q[i * ld];
}
template <typename T> TL_DEV void tl_mma_load_a_t(TlFragA& f, const T* p, int ld) {
    const int l = tl_lane();
    const u16* q = (const u16*)(p + 4 * (l >> 4) * ld + (l & 15));
#pragma unroll
    for (int i = 0; i < 4; ++i) f.x[i] = (short)q[i * ld];
}
template <typename T> TL_DEV void tl_mma_store_acc(T* p, int ld, const TlAcc& c) {
    const int l = tl_lane();
#pragma unroll
    for (int i = 0; i < 4; ++i) p[(4 * (l >> 4) + i) * ld + (l & 15)] = Tr<T>::store(c.x[i]);
}
TL_DEV void tl_mma_atomic_add_acc(float* p, i64 ld, const TlAcc& c, float scale, int rows, int cols) {
    const int l = tl_lane();
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int r = 4 * (l >> 4) + i, col = l & 15;
        const float a = c.x[i] * scale;
        if (r < rows && col < cols && a != 0.0f) atomicAdd(p + r * ld + col, a);
    }
}
TL_DEV void tl_mma_atomic_add_tile(float* p, i64 ld, const TlAcc& c, float scale) {
    const int l = tl_lane();
#pragma unroll
    for (int i = 0; i < 4; ++i) atomicAdd(p + (4 * (l >> 4) + i) * ld + (l & 15), c.x[i] * scale);
}
// The accumulator is the transpose of the A layout: lane l needs C[l % 16][4 * (l / 16) + i],
// held by lane 4 * (l / 16) + i + 16 * ((l % 16) / 4) in its register l % 4.
template <typename T> TL_DEV void tl_mma_acc_to_a(TlFragA& f, const TlAcc& c) {
    const int l = tl_lane();
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int src = 4 * (l >> 4) + i + 16 * ((l & 15) >> 2);
        float v = 0.0f;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const float x = __shfl(c.x[r], src, 64);
            if ((l & 3) == r) v = x;
        }
        f.x[i] = (short)Tr<T>::store(v).bits;
    }
}
template <typename T> TL_DEV void tl_mma_16x16x16(TlAcc& c, const TlFragA& a, const TlFragB& b);
template <> TL_DEV void tl_mma_16x16x16<f16>(TlAcc& c, const TlFragA& a, const TlFragB& b) {
    tl_float4 acc = {c.x[0], c.x[1], c.x[2], c.x[3]};
    acc = __builtin_amdgcn_mfma_f32_16x16x16f16(__builtin_bit_cast(tl_half4, a.x), __builtin_bit_cast(tl_half4, b.x),
                                                acc, 0, 0, 0);
#pragma unroll
    for (int i = 0; i < 4; ++i) c.x[i] = acc[i];
}
template <> TL_DEV void tl_mma_16x16x16<bf16>(TlAcc& c, const TlFragA& a, const TlFragB& b) {
    tl_float4 acc = {c.x[0], c.x[1], c.x[2], c.x[3]};
    acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a.x, b.x, acc, 0, 0, 0);
#pragma unroll
    for (int i = 0; i < 4; ++i) c.x[i] = acc[i];
}
#endif

#ifndef TL_MMA_LANES
#define TL_MMA_LANES 64  // no MMA here: the kernels are empty, any bound compiles
#define TL_MMA_STAGES 1
#endif
#if defined(TL_HAS_MMA)
TL_DEV void tl_mma_zero(TlAcc& c) {
#pragma unroll
    for (int i = 0; i < TL_MMA_ACC_N; ++i) c.x[i] = 0.0f;
}
// Row of accumulator element i (0..15); rows held by a lane are its TL_MMA_ROW_SLOTS slots.
TL_DEV int tl_mma_acc_row(int i) { return tl_mma_slot_row(tl_mma_acc_slot(i)); }
// Max / sum of a per-lane partial over the lanes that share the lane's rows.
TL_DEV float tl_mma_row_max(float v) {
#pragma unroll
    for (int m = 1; m < TL_MMA_ROW_LANES; m <<= 1) v = fmaxf(v, tl_shfl_xor(v, m, TL_MMA_ROW_LANES));
    return v;
}
TL_DEV float tl_mma_row_sum(float v) {
#pragma unroll
    for (int m = 1; m < TL_MMA_ROW_LANES; m <<= 1) v += tl_shfl_xor(v, m, TL_MMA_ROW_LANES);
    return v;
}
#endif

// ---- Hopper warpgroup products (sm_90a: wgmma) -------------------------------------------
// A warpgroup (4 consecutive warps, the first a multiple of 4 in the block) computes a 64 x N
// f32 tile D (+)= A (64 x 16) B (16 x N) asynchronously: products are issued after
// tl_wg_fence() (which orders any other register writes to D and A before them), committed
// as a group by tl_wg_commit(), and D is read after tl_wg_wait<0>() and tl_wg_hold(D). D is
// N / 16 TlAcc tiles in which warp w of the group holds rows 16w .. 16w+15 in Part 3's m16n8
// layout, so the tile helpers above apply per warp, and tl_mma_acc_to_a turns a tile into
// the A operand of a register-A product (P of P V, P^T of P^T dO). Shared-memory operands
// (16-bit values) are described by tl_wg_desc_sw128. Shared memory written by stores or
// cp.async is read by wgmma only after each writer's tl_fence_async_smem() and a barrier.
// Products issued in a branch that may not run, and registers of an unfinished product read
// or written, make ptxas serialize every product of the kernel ('Potential Performance Loss'
// in its -v output; tests/test_kernels_sm90.py checks). sm_90a only (cuda.py compiles for it
// on cc 9.0).
#if defined(TL_CUDA) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TL_HAS_WGMMA 1
// A matrix in 128-byte swizzled rows: groups of 8 rows of 128 bytes, 1024-byte aligned, the
// 16-byte chunk k of row r stored at chunk k ^ (r % 8); p points into such a group (at the
// operand's first 16 values along K for K-major operands). `lead`: for MN-major operands
// (B stored K x N: V of P V; A stored K x M: dS^T of dS K) the bytes between groups of 64
// values along M/N, unused for K-major ones; `rows8`: the bytes between groups of 8 rows
// (along M/N for K-major, along K for MN-major). Checked on the H100 by the attention tests
// (flash_fwd_wg, flash_bwd_wg).
TL_DEV u64 tl_wg_desc_sw128(const void* p, u32 lead, u32 rows8) {
    return (u64)((tl_smem_addr(p) & 0x3FFFF) >> 4) | ((u64)(lead >> 4) << 16) | ((u64)(rows8 >> 4) << 32) |
           (1ull << 62);  // layout type 1: 128-byte swizzle
}
TL_DEV void tl_wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
TL_DEV void tl_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> TL_DEV void tl_wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
TL_DEV void tl_fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// The compiler sees a product write D when it is issued: after the wait, every use of D is
// made to depend on this (empty) statement, so none is scheduled before the wait.
template <int K> TL_DEV void tl_wg_hold(TlAcc (&d)[K]) {
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
        for (int i = 0; i < 8; ++i) asm volatile("" : "+f"(d[k].x[i])::"memory");
}
// D = (acc ? D : 0) + A B with A (64 x 16) and B (16 x N) in shared memory, each K-major (A
// stored M x K, B stored N x K: K of Q K^T) or, with TA / TB = 1, MN-major (A stored K x M:
// dS^T of dS K; B stored K x N: V of P V); D += A B with A in registers (each warp its 16
// rows) and B stored K x N (MN-major).
template <typename T, int N> struct TlWg;
template <typename T, int N, int TA = 0, int TB = 0>
TL_DEV void tl_wg_ss(TlAcc (&d)[N / 16], u64 a, u64 b, int acc) { TlWg<T, N>::template ss<TA, TB>(d, a, b, acc); }
template <typename T, int N> TL_DEV void tl_wg_rs(TlAcc (&d)[N / 16], const TlFragA& a, u64 b) {
    TlWg<T, N>::rs(d, a, b);
}
#define TL_WG_ACC(c) "+f"(c.x[0]), "+f"(c.x[1]), "+f"(c.x[2]), "+f"(c.x[3]), "+f"(c.x[4]), "+f"(c.x[5]), \
                     "+f"(c.x[6]), "+f"(c.x[7])
#define TL_WG_ACC64(d) TL_WG_ACC(d[0]), TL_WG_ACC(d[1]), TL_WG_ACC(d[2]), TL_WG_ACC(d[3])
#define TL_WG_ACC128(d) TL_WG_ACC64(d), TL_WG_ACC(d[4]), TL_WG_ACC(d[5]), TL_WG_ACC(d[6]), TL_WG_ACC(d[7])
#define TL_WG_D64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "  \
                  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define TL_WG_D128 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "  \
                   "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "  \
                   "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "  \
                   "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
// N, its D operand list and accumulator constraints, then the numbers of the operands after D
#define TL_WG_PRODUCTS(T, TY, N, DSTR, ACCS, I0, I1, I2, I3, I4)                                    \
    template <> struct TlWg<T, N> {                                                                  \
        template <int TA, int TB> static TL_DEV void ss(TlAcc (&d)[N / 16], u64 a, u64 b, int acc) { \
            asm volatile("{ .reg .pred p; setp.ne.b32 p, %" I2 ", 0; wgmma.mma_async.sync.aligned.m64n" #N \
                         "k16.f32." TY "." TY " " DSTR ", %" I0 ", %" I1 ", p, 1, 1, %" I3 ", %" I4 "; }" \
                         : ACCS(d) : "l"(a), "l"(b), "r"(acc), "n"(TA), "n"(TB) : "memory");         \
        }                                                                                            \
        static TL_DEV void rs(TlAcc (&d)[N / 16], const TlFragA& a, u64 b) {                         \
            asm volatile("{ .reg .pred p; setp.ne.b32 p, 1, 0; wgmma.mma_async.sync.aligned.m64n" #N   \
                         "k16.f32." TY "." TY " " DSTR ", {%" I0 ", %" I1 ", %" I2 ", %" I3 "}, %" I4 \
                         ", p, 1, 1, 1; }"                                                           \
                         : ACCS(d) : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "l"(b) : "memory"); \
        }                                                                                            \
    };
#define TL_WG_TYPE(T, TY)                                                                    \
    TL_WG_PRODUCTS(T, TY, 64, TL_WG_D64, TL_WG_ACC64, "32", "33", "34", "35", "36")    \
    TL_WG_PRODUCTS(T, TY, 128, TL_WG_D128, TL_WG_ACC128, "64", "65", "66", "67", "68")
TL_WG_TYPE(bf16, "bf16")
TL_WG_TYPE(f16, "f16")
#undef TL_WG_TYPE
#undef TL_WG_PRODUCTS
#undef TL_WG_D64
#undef TL_WG_D128
#undef TL_WG_ACC128
#undef TL_WG_ACC64
#undef TL_WG_ACC
#endif

// 16-byte global -> shared copies that may complete asynchronously (NVIDIA sm_80+:
// cp.async, waited for by tl_cp_async_wait_all / _prior; elsewhere a plain copy). `dst` and `src`
// 16-byte aligned; the copy is visible to other threads after the wait and a barrier.
#if defined(TL_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
TL_DEV void tl_cp_async16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(tl_smem_addr(dst)), "l"(src));
}
// 16 bytes to dst + OFF bytes (OFF a compile-time constant: the immediate of the instruction,
// so copies into one tile share one address register); zeros where !keep (src not read).
template <int OFF> TL_DEV void tl_cp_async16_at(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0+%2], [%1], 16;" :: "r"(tl_smem_addr(dst)), "l"(src), "n"(OFF));
}
template <int OFF> TL_DEV void tl_cp_async16_zfill_at(void* dst, const void* src, bool keep) {
    asm volatile("cp.async.cg.shared.global [%0+%2], [%1], 16, %3;"
                 :: "r"(tl_smem_addr(dst)), "l"(src), "n"(OFF), "r"(keep ? 16 : 0));
}
TL_DEV void tl_cp_async_commit() { asm volatile("cp.async.commit_group;"); }
TL_DEV void tl_cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }
// Wait until at most N of this thread's most recent committed groups are pending (a
// pipeline of N + 1 stages: the oldest group is in, the later ones may still be landing).
template <int N> TL_DEV void tl_cp_async_wait_prior() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }
#else
TL_DEV void tl_cp_async16(void* dst, const void* src) { *(Vec4<u32>*)dst = *(const Vec4<u32>*)src; }
template <int OFF> TL_DEV void tl_cp_async16_at(void* dst, const void* src) { tl_cp_async16((char*)dst + OFF, src); }
template <int OFF> TL_DEV void tl_cp_async16_zfill_at(void* dst, const void* src, bool keep) {
    const Vec4<u32> z = {{0u, 0u, 0u, 0u}};
    *(Vec4<u32>*)((char*)dst + OFF) = keep ? *(const Vec4<u32>*)src : z;
}
TL_DEV void tl_cp_async_commit() {}
TL_DEV void tl_cp_async_wait_all() {}
template <int N> TL_DEV void tl_cp_async_wait_prior() {}
#endif
// tl_cp_async16_zfill_at<0>: the destination's address computed at run time.
TL_DEV void tl_cp_async16_zfill(void* dst, const void* src, bool full) { tl_cp_async16_zfill_at<0>(dst, src, full); }
