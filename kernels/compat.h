// compat.h -- the portable shim: every kernels/<family>.hip includes it (directly or through
// rows.h) and is compiled from the same text by hiprtc (AMD, `--offload-arch=gfx90a` etc.) and
// by NVRTC (NVIDIA, `-arch=sm_XX`).
// Part 1 maps the few vendor differences of the basic primitives (no headers are included:
// hiprtc predefines the HIP device API and including hip_fp16.h again fails; NVRTC needs no
// header for what we use). Part 2 is portable: storage types, conversions, the by-value layout
// struct and the warp/block reductions that the families share. Part 3 takes what only one
// vendor has from that vendor's header (nvidia.h, tensor_cores_nvidia.h, matrix_cores_amd.h),
// each feature announced by a TL_HAS_* macro, and adds the portable fallbacks and helpers.
// Kernel sources and rows.h test those macros, never the vendor.
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
typedef signed char i8;
typedef short i16;
typedef int i32;

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
// tl_shfl: lane src's v, for every lane of the warp (read from lane 0 also to tell the
// compiler that a value is uniform in the warp).
#if defined(TL_HIP)
template <typename T> TL_DEV T tl_shfl_xor(T v, int mask, int width) { return __shfl_xor(v, mask, width); }
template <typename T> TL_DEV T tl_shfl(T v, int src) { return __shfl(v, src); }
#else
template <typename T> TL_DEV T tl_shfl_xor(T v, int mask, int width) {
    return __shfl_xor_sync(0xffffffffu, v, mask, width);
}
template <typename T> TL_DEV T tl_shfl(T v, int src) { return __shfl_sync(0xffffffffu, v, src); }
#endif

// v, which every lane of the warp holds alike (threadIdx.y where blockDim.x is the warp's
// size), known to the compiler as the warp's one value: on AMD in a scalar register
// (readfirstlane), so that branches on it are the wave's (s_cbranch_scc) and not regions of
// lanes under an EXEC mask. NVIDIA: v as it is.
#if defined(TL_HIP)
TL_DEV int tl_warp_uniform(int v) { return __builtin_amdgcn_readfirstlane(v); }
#else
TL_DEV int tl_warp_uniform(int v) { return v; }
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

// Programmatic dependent launch (NVIDIA sm_90 on). The kernels of launch.py's
// DEPENDENT_LAUNCH are launched so during a graph capture: such a kernel may start while the
// kernel before it in the stream still runs, so its first statement must be
// tl_dependent_start(), before it touches memory. The wait returns once that kernel has
// finished and its writes are visible; the trigger then lets the next such kernel start (its
// launch and block scheduling overlap this kernel's work). Where nothing launched the kernel
// so, or on other targets (AMD has no such launch), it costs nothing and orders nothing.
TL_DEV void tl_dependent_start() {
#if defined(TL_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

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

// ---- ordering -------------------------------------------------------------------------
// An empty statement that the compiler may not move memory accesses across (it emits
// nothing): keeps loads the caller wants issued in separate batches apart.
TL_DEV void tl_compiler_barrier() { asm volatile("" ::: "memory"); }

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
// int8/int16/int32 compute in i32 (sign-extended loads; the store wraps as numpy's astype)
#define TL_TR_SIGNED(T) template <> struct Tr<T> { \
    typedef i32 acc; static const bool is_float = false; \
    static TL_DEV i32 load(T x) { return x; } \
    static TL_DEV T store(i32 x) { return (T)x; } \
};
TL_TR_SIGNED(i8) TL_TR_SIGNED(i16) TL_TR_SIGNED(i32)
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
TL_DEV i64 tl_to_i64(i8 x) { return x; }
TL_DEV i64 tl_to_i64(i16 x) { return x; }
TL_DEV i64 tl_to_i64(i32 x) { return x; }
TL_DEV i64 tl_to_i64(tlbool x) { return x.v; }

template <typename D> struct FromF64;
template <> struct FromF64<float> { static TL_DEV float cv(double v) { return (float)v; } };
template <> struct FromF64<double> { static TL_DEV double cv(double v) { return v; } };
template <> struct FromF64<f16> { static TL_DEV f16 cv(double v) { f16 r; r.bits = tl_f64_to_f16_bits(v); return r; } };
template <> struct FromF64<bf16> { static TL_DEV bf16 cv(double v) { bf16 r; r.bits = tl_f64_to_bf16_bits(v); return r; } };
template <> struct FromF64<u8> { static TL_DEV u8 cv(double v) { return (u8)(i64)v; } };
template <> struct FromF64<u32> { static TL_DEV u32 cv(double v) { return (u32)(i64)v; } };
template <> struct FromF64<i64> { static TL_DEV i64 cv(double v) { return (i64)v; } };
template <> struct FromF64<i8> { static TL_DEV i8 cv(double v) { return (i8)(i64)v; } };
template <> struct FromF64<i16> { static TL_DEV i16 cv(double v) { return (i16)(i64)v; } };
template <> struct FromF64<i32> { static TL_DEV i32 cv(double v) { return (i32)(i64)v; } };
template <> struct FromF64<tlbool> { static TL_DEV tlbool cv(double v) { tlbool r; r.v = v != 0.0; return r; } };

template <typename D> struct FromI64 {  // integers -> integers wrap; -> floats via double
    static TL_DEV D cv(i64 v) { return FromF64<D>::cv((double)v); }
};
template <> struct FromI64<float> { static TL_DEV float cv(i64 v) { return (float)v; } };
template <> struct FromI64<u8> { static TL_DEV u8 cv(i64 v) { return (u8)v; } };
template <> struct FromI64<u32> { static TL_DEV u32 cv(i64 v) { return (u32)v; } };
template <> struct FromI64<i64> { static TL_DEV i64 cv(i64 v) { return v; } };
template <> struct FromI64<i8> { static TL_DEV i8 cv(i64 v) { return (i8)v; } };
template <> struct FromI64<i16> { static TL_DEV i16 cv(i64 v) { return (i16)v; } };
template <> struct FromI64<i32> { static TL_DEV i32 cv(i64 v) { return (i32)v; } };
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
template <> TL_DEV i32 tl_lowest<i32>() { return (i32)(1u << 31); }
template <typename A> TL_DEV A tl_highest();
template <> TL_DEV float tl_highest<float>() { return tl_inf_f32(); }
template <> TL_DEV double tl_highest<double>() { return tl_inf_f64(); }
template <> TL_DEV u32 tl_highest<u32>() { return 0xffffffffu; }
template <> TL_DEV i64 tl_highest<i64>() { return (i64)(~0ull >> 1); }
template <> TL_DEV i32 tl_highest<i32>() { return (i32)(~0u >> 1); }

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
// TlSame<A, B>::value: whether A and B are one type (no <type_traits> under every compiler here).
template <typename A, typename B> struct TlSame { enum { value = 0 }; };
template <typename A> struct TlSame<A, A> { enum { value = 1 }; };
// TlId<A>::type is A: a parameter written through it is not deduced from the argument.
template <typename A> struct TlId { typedef A type; };
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
// Native where both vendors have them; the 1- and 2-byte types by compare-and-swap on the
// aligned 32-bit word that contains them. (f16/bf16 sums accumulate in an f32 buffer.)
TL_DEV void tl_atomic_add(float* p, float v) { atomicAdd(p, v); }
TL_DEV void tl_atomic_add(double* p, double v) { atomicAdd(p, v); }
TL_DEV void tl_atomic_add(u32* p, u32 v) { atomicAdd(p, v); }
TL_DEV void tl_atomic_add(i32* p, i32 v) { atomicAdd(p, v); }
TL_DEV void tl_atomic_add(i64* p, i64 v) {  // two's complement: unsigned add is the same bits
    atomicAdd((unsigned long long*)p, (unsigned long long)v);
}
template <typename T>
TL_DEV void tl_atomic_add_byte(T* p, typename Tr<T>::acc v) {
    const u64 addr = (u64)p;
    u32* word = (u32*)(addr & ~(u64)3);
    const u32 bits = (1u << (8 * sizeof(T))) - 1u, shift = (u32)(addr & 3) * 8, mask = bits << shift;
    u32 old = *word, assumed;
    do {
        assumed = old;
        union { T t; u16 u; } cur, next;
        cur.u = (u16)((assumed & mask) >> shift);
        next.u = 0;
        next.t = Tr<T>::store(Tr<T>::load(cur.t) + v);
        const u32 nbits = next.u & bits;
        old = atomicCAS(word, assumed, (assumed & ~mask) | (nbits << shift));
    } while (old != assumed);
}
TL_DEV void tl_atomic_add(u8* p, u32 v) { tl_atomic_add_byte<u8>(p, v); }
TL_DEV void tl_atomic_add(i8* p, i32 v) { tl_atomic_add_byte<i8>(p, v); }
TL_DEV void tl_atomic_add(i16* p, i32 v) { tl_atomic_add_byte<i16>(p, v); }
TL_DEV void tl_atomic_add(tlbool* p, u32 v) { tl_atomic_add_byte<tlbool>(p, v); }

// ---- entry-point generation ----------------------------------------------------------
// TL_FOR_ALL(M) calls M(type, suffix) for every dtype; the suffix is the dtype's short
// name, the last part of every entry point (`badd_f32`, `cast_f16_bf16`). Which entry
// points exist is mirrored by the KERNELS table in backends/rocm/kernel_table.py.
#define TL_FOR_FLOATS(M) M(float, f32) M(f16, f16) M(bf16, bf16) M(double, f64)
#define TL_FOR_INTEGERS(M) M(u8, u8) M(u32, u32) M(i64, i64) M(i8, i8) M(i16, i16) M(i32, i32)
#define TL_FOR_NONFLOATS(M) M(u8, u8) M(u32, u32) M(i64, i64) M(tlbool, bool) M(i8, i8) M(i16, i16) M(i32, i32)
#define TL_FOR_ALL(M) TL_FOR_FLOATS(M) TL_FOR_NONFLOATS(M)

// =====================================================================================
// Part 3: what only one vendor has (its own header) and the portable fallbacks
// =====================================================================================
#if defined(TL_CUDA)
#include "nvidia.h"  // PTX: 16-bit pairs, 16-byte stores, shared addresses, cp.async
#endif

// ---- warp-level tensor-core tiles (f16/bf16/f32 in, f32 accumulate) --------------------
// One warp (wavefront) computes a 16x16 f32 tile C += A (16x16) * B (16x16) per
// tl_mma_16x16x16<T>. The register layouts differ per vendor and stay in the vendor headers:
// callers load fragments from shared memory with the helpers there and touch the accumulator
// only through TL_MMA_ACC_N elements per lane whose (row, col) the helpers name.
// Loads: tl_mma_load_a (A row-major), tl_mma_load_a_t (A stored transposed), tl_mma_load_b_nk
// / _kn (B stored n- / k-major); an accumulator becomes the next product's A operand
// (tl_mma_acc_to_a) or a T tile in shared memory (tl_mma_store_acc).
//   NVIDIA sm_80+ (tensor_cores_nvidia.h): two mma.sync.m16n8k16 per tile (32 lanes, 8 floats
//                  per lane); fragments come from ldmatrix (shared-memory rows 16-byte aligned).
//   AMD gfx90a/gfx94x/gfx950 (matrix_cores_amd.h): one v_mfma_f32_16x16x16{f16,bf16_1k} (64 lanes,
//                  4 floats per lane); gfx950: one v_mfma_f32_16x16x32_{f16,bf16} per two K chunks
//                  of 16 (tl_mma_k).
//   AMD RDNA3/3.5/4 gfx11/gfx12 (matrix_cores_amd.h): one v_wmma_f32_16x16x16_{f16,bf16} (32 lanes,
//                  8 floats per lane); 16-bit operands only.
// f32 operands take their own fragment types (TlFragA32/TlFragB32: NVIDIA 3xTF32, AMD
// v_mfma_f32_16x16x4f32), named per storage type by TlA<T> / TlB<T>. Every vendor header has
// them except one that says it has none (TL_MMA_NO_F32: RDNA's WMMA), so a header that forgets
// either fails to compile here rather than emptying the f32 kernels; tl_mma_takes<T> says
// whether the tiles take T operands.
// TL_HAS_MMA is defined only where one of these exists; the host never launches an MMA
// kernel elsewhere. Every lane of the warp must call each helper (they exchange registers);
// the block's x dimension must be a multiple of warpSize (lane = threadIdx.x % warpSize).
#if defined(TL_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#include "tensor_cores_nvidia.h"  // and Hopper's warpgroup products (TL_HAS_WGMMA) on sm_90a
#elif defined(TL_HIP) && (defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__) \
                          || defined(__gfx950__)                                    /* hip.py's MFMA_ARCHS */ \
                          || defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1102__)         \
                          || defined(__gfx1103__) || defined(__gfx1150__) || defined(__gfx1151__)         \
                          || defined(__gfx1152__) || defined(__gfx1200__) || defined(__gfx1201__))  /* WMMA_ARCHS */
#include "matrix_cores_amd.h"
#endif

#ifndef TL_MMA_LANES
#define TL_MMA_LANES 64  // no MMA here: the kernels are empty, any bound compiles
#define TL_MMA_STAGES 1
#define TL_MMA_LDS_KIB 64
#endif
#if defined(TL_HAS_MMA) && defined(TL_MMA_NO_F32)
template <typename T> constexpr bool tl_mma_takes = sizeof(T) == 2;
#else
template <typename T> constexpr bool tl_mma_takes = true;  // (no tiles at all: the kernels are empty)
#endif
#ifndef TL_MMA_ROW_STRIDE
#define TL_MMA_ROW_STRIDE 1  // the TL_MMA_ROW_LANES lanes that share a row are this many apart
#endif
#if defined(TL_HAS_MMA)
template <typename T> struct TlFrags { typedef TlFragA A; typedef TlFragB B; };
#if !defined(TL_MMA_NO_F32)
template <> struct TlFrags<float> { typedef TlFragA32 A; typedef TlFragB32 B; };
#endif
template <typename T> using TlA = typename TlFrags<T>::A;  // the A / B fragments of T operands
template <typename T> using TlB = typename TlFrags<T>::B;
// One matrix-core product takes tl_mma_kp<T> consecutive 16-wide K chunks (gfx950: two, its
// v_mfma_f32_16x16x32 for 16-bit T; else one): C += sum over e of a[e] b[e]. Kernels step their
// reduction loops by it and hold that many fragments.
#if defined(TL_MMA_K32)
template <typename T> constexpr int tl_mma_kp = sizeof(T) == 2 ? 2 : 1;
#else
template <typename T> constexpr int tl_mma_kp = 1;
#endif
template <typename T> TL_DEV void tl_mma_k(TlAcc& c, const TlA<T>* a, const TlB<T>* b) {
#if defined(TL_MMA_K32)
    if constexpr (tl_mma_kp<T> == 2)
        tl_mma_16x16x32<T>(c, a[0], b[0], a[1], b[1]);
    else
#endif
        tl_mma_16x16x16<T>(c, a[0], b[0]);
}
TL_DEV void tl_mma_zero(TlAcc& c) {
#pragma unroll
    for (int i = 0; i < TL_MMA_ACC_N; ++i) c.x[i] = 0.0f;
}
// Row of accumulator element i (0..15); rows held by a lane are its TL_MMA_ROW_SLOTS slots.
TL_DEV int tl_mma_acc_row(int i) { return tl_mma_slot_row(tl_mma_acc_slot(i)); }
// Max / sum of a per-lane partial over the lanes that share the lane's rows.
#define TL_MMA_ROW_SPAN (TL_MMA_ROW_STRIDE * TL_MMA_ROW_LANES)
TL_DEV float tl_mma_row_max(float v) {
#pragma unroll
    for (int m = TL_MMA_ROW_STRIDE; m < TL_MMA_ROW_SPAN; m <<= 1) v = fmaxf(v, tl_shfl_xor(v, m, TL_MMA_ROW_SPAN));
    return v;
}
TL_DEV float tl_mma_row_sum(float v) {
#pragma unroll
    for (int m = TL_MMA_ROW_STRIDE; m < TL_MMA_ROW_SPAN; m <<= 1) v += tl_shfl_xor(v, m, TL_MMA_ROW_SPAN);
    return v;
}
#endif

// ---- asynchronous tile copies ----------------------------------------------------------
// 16-byte global -> shared copies that may complete asynchronously (nvidia.h on sm_80+:
// cp.async; elsewhere the plain copies below), waited for by tl_cp_async_wait_all / _prior.
// `dst` and `src` 16-byte aligned; the copy is visible to other threads after the wait and a
// barrier. tl_cp_async16_at<OFF>: 16 bytes to dst + OFF bytes (OFF a compile-time constant);
// _zfill_at: zeros where !keep (src not read). tl_cp_async_wait_prior<N>: wait until at most
// N of this thread's most recent committed groups are pending (a pipeline of N + 1 stages:
// the oldest group is in, the later ones may still be landing).
#if !defined(TL_HAS_CP_ASYNC)
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
