// matrix_cores_amd.h -- compat.h Part 3's warp tiles on AMD matrix cores: one
// v_mfma_f32_16x16x16{f16,bf16_1k} per 16x16 tile on a 64-lane wavefront (CDNA2/3: gfx90a,
// gfx940-942). compat.h includes it in its Part 3 when hiprtc compiles for one of those; no
// kernel source includes it.
#pragma once

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
// held by lane 4 * (l / 16) + i + 16 * ((l % 16) / 4) in its register l % 4. a[i] = that value.
TL_DEV void tl_mma_acc_in_a_layout(float (&a)[4], const TlAcc& c) {
    const int l = tl_lane();
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int src = 4 * (l >> 4) + i + 16 * ((l & 15) >> 2);
        a[i] = 0.0f;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const float x = __shfl(c.x[r], src, 64);
            if ((l & 3) == r) a[i] = x;
        }
    }
}
template <typename T> TL_DEV void tl_mma_acc_to_a(TlFragA& f, const TlAcc& c) {
    float a[4];
    tl_mma_acc_in_a_layout(a, c);
#pragma unroll
    for (int i = 0; i < 4; ++i) f.x[i] = (short)Tr<T>::store(a[i]).bits;
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

// ---- f32 operands: v_mfma_f32_16x16x4f32 ------------------------------------------------
// A 16x16x16 f32 product is 4 of them (exact f32 products). Fragments keep the 16-bit
// layout (lane l: A[l % 16][4 (l / 16) + i], B[4 (l / 16) + i][l % 16]) and product i takes
// element i of each lane: k = 4 (l / 16) + i, the same k for A and B, so the sum is the
// product's whatever order the four products take the k values in.
struct TlFragA32 { float x[4]; };
struct TlFragB32 { float x[4]; };
TL_DEV void tl_mma_load_a(TlFragA32& f, const float* p, int ld) {
    const int l = tl_lane();
    const float* q = p + (l & 15) * ld + 4 * (l >> 4);
#pragma unroll
    for (int i = 0; i < 4; ++i) f.x[i] = q[i];
}
TL_DEV void tl_mma_load_b_nk(TlFragB32& f, const float* p, int ld) {
    const int l = tl_lane();
    const float* q = p + (l & 15) * ld + 4 * (l >> 4);
#pragma unroll
    for (int i = 0; i < 4; ++i) f.x[i] = q[i];
}
TL_DEV void tl_mma_load_b_kn(TlFragB32& f, const float* p, int ld) {
    const int l = tl_lane();
    const float* q = p + 4 * (l >> 4) * ld + (l & 15);
#pragma unroll
    for (int i = 0; i < 4; ++i) f.x[i] = q[i * ld];
}
TL_DEV void tl_mma_load_a_t(TlFragA32& f, const float* p, int ld) {
    const int l = tl_lane();
    const float* q = p + 4 * (l >> 4) * ld + (l & 15);
#pragma unroll
    for (int i = 0; i < 4; ++i) f.x[i] = q[i * ld];
}
template <typename T> TL_DEV void tl_mma_acc_to_a(TlFragA32& f, const TlAcc& c) { tl_mma_acc_in_a_layout(f.x, c); }
template <typename T> TL_DEV void tl_mma_16x16x16(TlAcc& c, const TlFragA32& a, const TlFragB32& b);
template <> TL_DEV void tl_mma_16x16x16<float>(TlAcc& c, const TlFragA32& a, const TlFragB32& b) {
    tl_float4 acc = {c.x[0], c.x[1], c.x[2], c.x[3]};
#pragma unroll
    for (int i = 0; i < 4; ++i) acc = __builtin_amdgcn_mfma_f32_16x16x4f32(a.x[i], b.x[i], acc, 0, 0, 0);
#pragma unroll
    for (int i = 0; i < 4; ++i) c.x[i] = acc[i];
}
