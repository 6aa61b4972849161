// Counter-based random numbers: rand_uniform_<t> and rand_normal_<t> for floating dtypes.
//
// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3") keyed by
// the 64-bit seed. The 128-bit counter is (group, offset): element group g of a call
// with stream offset `offset` always gets the same bits, whatever the launch shape, so
// results depend only on (seed, offset, n). The device advances `offset` by one per call.
// A group yields 4 float results (f32/f16/bf16) or 2 double results (f64).
#include "compat.h"

TL_DEV void philox4x32_10(u32 c[4], u32 k0, u32 k1) {
    const u32 M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        const u64 p0 = (u64)M0 * c[0], p1 = (u64)M1 * c[2];
        const u32 hi0 = (u32)(p0 >> 32), lo0 = (u32)p0, hi1 = (u32)(p1 >> 32), lo1 = (u32)p1;
        const u32 n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0; c[1] = lo1; c[2] = n2; c[3] = lo0;
        k0 += W0; k1 += W1;
    }
}

// Uniform [0, 1) and (0, 1] from random bits, per arithmetic type.
TL_DEV float u01(u32 x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }
TL_DEV float u01_open0(u32 x) { return (float)((x >> 8) + 1u) * (1.0f / 16777216.0f); }
TL_DEV double u01_f64(u32 a, u32 b) { return (double)(((u64)(a >> 5) << 26) | (b >> 6)) * (1.0 / 9007199254740992.0); }
TL_DEV double u01_open0_f64(u32 a, u32 b) { return u01_f64(a, b) + 1.0 / 9007199254740992.0; }

// Fills v[0..K) with uniforms (Normal=false) or standard normals (Box-Muller).
template <typename A, bool Normal> struct Draw;
template <bool Normal> struct Draw<float, Normal> {
    static const int K = 4;
    static TL_DEV void fill(const u32 c[4], float v[4]) {
        for (int j = 0; j < 4; j += 2) {
            if (Normal) {
                const float r = sqrtf(-2.0f * logf(u01_open0(c[j]))), th = 6.283185307179586f * u01(c[j + 1]);
                v[j] = r * cosf(th); v[j + 1] = r * sinf(th);
            } else {
                v[j] = u01(c[j]); v[j + 1] = u01(c[j + 1]);
            }
        }
    }
};
template <bool Normal> struct Draw<double, Normal> {
    static const int K = 2;
    static TL_DEV void fill(const u32 c[4], double v[2]) {
        if (!Normal) { v[0] = u01_f64(c[0], c[1]); v[1] = u01_f64(c[2], c[3]); return; }
        const double r = sqrt(-2.0 * log(u01_open0_f64(c[0], c[1]))), th = 6.283185307179586 * u01_f64(c[2], c[3]);
        v[0] = r * cos(th); v[1] = r * sin(th);
    }
};

// uniform: lo + u * (hi - lo); normal: a + b * z with (a, b) = (mean, std).
template <typename T, bool Normal>
TL_DEV void rand_map(i64 n, u64 seed, u64 offset, double a, double b, T* out) {
    typedef typename Tr<T>::acc A;
    typedef Draw<A, Normal> D;
    const i64 groups = (n + D::K - 1) / D::K;
    const A base = (A)a, scale = Normal ? (A)b : (A)(b - a);
    TL_GRID_LOOP(g, groups) {
        u32 c[4] = {(u32)g, (u32)((u64)g >> 32), (u32)offset, (u32)(offset >> 32)};
        philox4x32_10(c, (u32)seed, (u32)(seed >> 32));
        A v[D::K];
        D::fill(c, v);
        for (int j = 0; j < D::K; ++j)
            if (g * D::K + j < n) out[g * D::K + j] = Tr<T>::store(base + scale * v[j]);
    }
}

#define RANDOM_ENTRIES(T, sfx)                                                             \
    extern "C" __global__ void rand_uniform_##sfx(i64 n, u64 seed, u64 offset, double lo, \
                                                  double hi, T* out) {                    \
        rand_map<T, false>(n, seed, offset, lo, hi, out);                                 \
    }                                                                                     \
    extern "C" __global__ void rand_normal_##sfx(i64 n, u64 seed, u64 offset, double mean, \
                                                 double std, T* out) {                    \
        rand_map<T, true>(n, seed, offset, mean, std, out);                               \
    }
TL_FOR_FLOATS(RANDOM_ENTRIES)
