// matrix_cores_amd.h -- compat.h Part 3's warp tiles on AMD matrix cores. CDNA2/3/4 (gfx90a,
// gfx940-942, gfx950): one v_mfma_f32_16x16x16{f16,bf16_1k} per 16x16 tile on a 64-lane
// wavefront (gfx950: one v_mfma_f32_16x16x32_{f16,bf16} per two K chunks, tl_mma_16x16x32 below),
// and f32 operands (v_mfma_f32_16x16x4f32). RDNA3 / RDNA3.5 / RDNA4 (gfx11, gfx12):
// one v_wmma_f32_16x16x16_{f16,bf16} per tile on a 32-lane wave, 16-bit operands only (below).
// compat.h includes it in its Part 3 when compiling for one of those (hip.py's MFMA_ARCHS and
// WMMA_ARCHS); no kernel source includes it.
#pragma once

#define TL_HAS_MMA 1
#define TL_MMA_STAGES 1  // one K and one V buffer (the copies are synchronous: no second stage in flight)
// LDS a workgroup may allocate (AMDGPUUsage "Memory Spaces"): attention.hip sizes the matrix-core
// tiles from it (MmaFwdTile's BN, mma_bwd_warps); mirrored by hip.py's AmdArchitectures.mma_lds_bytes
#if defined(__gfx950__)
#define TL_MMA_LDS_KIB 160
#else
#define TL_MMA_LDS_KIB 64
#endif
#if defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__) || defined(__gfx950__)
#define TL_MMA_ACC_N 4
#define TL_MMA_ROW_SLOTS 4
#define TL_MMA_ROW_LANES 16
#define TL_MMA_LANES 64
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

#if defined(__gfx950__)
// ---- CDNA4: v_mfma_f32_16x16x32_{f16,bf16}, K 32 a product -------------------------------
// The hardware's layout (AMD's CDNA4 ISA guide, dense MFMA): lane l holds A[l % 16][8 (l / 16) + e]
// and B[8 (l / 16) + e][l % 16], e < 8 (four VGPRs); C as above. tl_mma_16x16x32 puts two K-16
// fragments into one operand, the first in elements 0-3, the second in 4-7, in A and in B alike:
// element (l / 16, e) then stands for k = 4 (l / 16) + e % 4 + 16 (e / 4) of the 32, one
// permutation of K shared by both operands, so the product is A0 B0 + A1 B1.
#define TL_MMA_K32 1  // compat.h: tl_mma_kp<T> is 2 for 16-bit T
typedef short tl_short8 __attribute__((ext_vector_type(8)));
typedef _Float16 tl_half8 __attribute__((ext_vector_type(8)));
typedef __bf16 tl_bf16x8 __attribute__((ext_vector_type(8)));
#if __has_builtin(__builtin_amdgcn_mfma_f32_16x16x32_bf16)  // a compiler that knows gfx950 (ROCm's hiprtc)
#define TL_MFMA_K32_F16 __builtin_amdgcn_mfma_f32_16x16x32_f16
#define TL_MFMA_K32_BF16 __builtin_amdgcn_mfma_f32_16x16x32_bf16
#else
// clang-19, which knows no gfx950, writes IR for triton's LLVM (backends/rocm/triton_llvm.py):
// calls of these declarations, which triton_llvm.retarget renames to the intrinsics they are
// named after (__tl_llvm_X -> llvm.X with the dots). The attributes are the intrinsics' as far as
// clang-19's optimizer looks: no memory access (const), convergent (every HIP device function is).
extern "C" __device__ __attribute__((const)) tl_float4
__tl_llvm_amdgcn_mfma_f32_16x16x32_f16(tl_half8, tl_half8, tl_float4, int, int, int);
extern "C" __device__ __attribute__((const)) tl_float4
__tl_llvm_amdgcn_mfma_f32_16x16x32_bf16(tl_bf16x8, tl_bf16x8, tl_float4, int, int, int);
#define TL_MFMA_K32_F16 __tl_llvm_amdgcn_mfma_f32_16x16x32_f16
#define TL_MFMA_K32_BF16 __tl_llvm_amdgcn_mfma_f32_16x16x32_bf16
#endif
TL_DEV tl_short8 tl_mma_k32_operand(const tl_short4& k0, const tl_short4& k1) {
    return __builtin_shufflevector(k0, k1, 0, 1, 2, 3, 4, 5, 6, 7);
}
TL_DEV tl_float4 tl_mfma_k32(tl_short8 a, tl_short8 b, tl_float4 c, const f16*) {
    return TL_MFMA_K32_F16(__builtin_bit_cast(tl_half8, a), __builtin_bit_cast(tl_half8, b), c, 0, 0, 0);
}
TL_DEV tl_float4 tl_mfma_k32(tl_short8 a, tl_short8 b, tl_float4 c, const bf16*) {
    return TL_MFMA_K32_BF16(__builtin_bit_cast(tl_bf16x8, a), __builtin_bit_cast(tl_bf16x8, b), c, 0, 0, 0);
}
// C += A0 B0 + A1 B1 (T f16 or bf16): A0 / B0 the first 16 of 32 K values, A1 / B1 the others
template <typename T>
TL_DEV void tl_mma_16x16x32(TlAcc& c, const TlFragA& a0, const TlFragB& b0, const TlFragA& a1, const TlFragB& b1) {
    tl_float4 acc = {c.x[0], c.x[1], c.x[2], c.x[3]};
    acc = tl_mfma_k32(tl_mma_k32_operand(a0.x, a1.x), tl_mma_k32_operand(b0.x, b1.x), acc, (const T*)nullptr);
#pragma unroll
    for (int i = 0; i < 4; ++i) c.x[i] = acc[i];
}
#undef TL_MFMA_K32_F16
#undef TL_MFMA_K32_BF16
#endif

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
#else
// ---- RDNA3 / RDNA3.5 / RDNA4: v_wmma_f32_16x16x16_{f16,bf16} on a 32-lane wave ----------
// D = A B + C for 16x16 tiles, f32 accumulate. The hardware's layouts (AMD's RDNA3 / RDNA4
// ISA guides and matrix instruction calculator), lane l, h = l / 16:
//   RDNA3 (gfx11): A[i][k] in lanes i and i + 16 (both half-waves hold the same rows), element
//                  k of 16; B[k][j] likewise in lanes j, j + 16; D[i][j] in lane j + 16 (i % 2),
//                  element i / 2 of 8.
//   RDNA4 (gfx12): A[i][k] in lane i + 16 ((k / 4) % 2), element 4 (k / 8) + k % 4 of 8 (the
//                  half-waves split K); B the same with j for i; D[i][j] in lane j + 16 (i / 8),
//                  element i % 8.
// A and B share one layout, so tl_mma_16x16x16 issues the product transposed, D^T = B^T A^T +
// C^T, for free: a TlAcc lane then holds one row of C, row l % 16, at columns tl_mma_acc_col,
// which is an A fragment's row (the P of P V is a repack here, not a transpose through LDS).
// Within a product, slot (h, e) of A multiplies slot (h, e) of B, so the fragments may assign
// the K index to slots in any order they share: RDNA4's here is k = 8 h + e (slot e of lane
// half h), the columns of the accumulator's elements, so that an accumulator is an A fragment
// as it stands and each lane's rows load as 16 contiguous bytes. No f32 operands
// (TL_MMA_NO_F32): the host takes the portable kernels for f32.
#if defined(__gfx1200__) || defined(__gfx1201__)
#define TL_WMMA_K 8  // K values per lane of a fragment: the half-waves hold k 0..7 and 8..15
#else
#define TL_WMMA_K 16  // every lane holds its row's 16 K values (the half-waves alike)
#endif
#define TL_MMA_NO_F32 1  // compat.h: no TlFragA32 / TlFragB32, flash_*_mma64_f32 are empty
#define TL_MMA_ACC_N 8
#define TL_MMA_ROW_SLOTS 1
#define TL_MMA_ROW_LANES 2    // lanes l and l ^ 16 share row l % 16
#define TL_MMA_ROW_STRIDE 16
#define TL_MMA_LANES 32
typedef short tl_wmma_s __attribute__((ext_vector_type(TL_WMMA_K)));
typedef short tl_short8 __attribute__((ext_vector_type(8)));
typedef _Float16 tl_wmma_h __attribute__((ext_vector_type(TL_WMMA_K)));
typedef float tl_float8 __attribute__((ext_vector_type(8)));
struct TlFragA { tl_wmma_s x; };  // lane l: A[l % 16][tl_wmma_k0() + e]
struct TlFragB { tl_wmma_s x; };  // lane l: B[tl_wmma_k0() + e][l % 16]
struct TlAcc { float x[8]; };     // lane l: C[l % 16][tl_mma_acc_col(i)]

TL_DEV int tl_lane() { return (int)(threadIdx.x & 31); }
TL_DEV int tl_wmma_k0() { return TL_WMMA_K == 8 ? 8 * (tl_lane() >> 4) : 0; }
TL_DEV int tl_mma_acc_slot(int i) { return 0; }
TL_DEV int tl_mma_slot_row(int s) { return tl_lane() & 15; }
// RDNA3: D^T's element i of lane l is column 2 i + h; RDNA4: column 8 h + i
TL_DEV int tl_mma_acc_col(int i) { return TL_WMMA_K == 8 ? 8 * (tl_lane() >> 4) + i : 2 * i + (tl_lane() >> 4); }

// rows: lane l's fragment is p[(l % 16) * ld + k0 .. + TL_WMMA_K] (ld a multiple of 8, p 16-byte
// aligned: vector loads); cols: p[(k0 + e) * ld + l % 16]
template <typename T> TL_DEV void tl_wmma_load_rows(tl_wmma_s& x, const T* p, int ld) {
    const int l = tl_lane();
    const tl_short8* q = (const tl_short8*)(p + (l & 15) * ld + tl_wmma_k0());
    const tl_short8 lo = q[0];
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = lo[e];
#if TL_WMMA_K == 16
    const tl_short8 hi = q[1];
#pragma unroll
    for (int e = 0; e < 8; ++e) x[8 + e] = hi[e];
#endif
}
template <typename T> TL_DEV void tl_wmma_load_cols(tl_wmma_s& x, const T* p, int ld) {
    const u16* q = (const u16*)(p + tl_wmma_k0() * ld + (tl_lane() & 15));
#pragma unroll
    for (int e = 0; e < TL_WMMA_K; ++e) x[e] = (short)q[e * ld];
}
template <typename T> TL_DEV void tl_mma_load_a(TlFragA& f, const T* p, int ld) { tl_wmma_load_rows(f.x, p, ld); }
template <typename T> TL_DEV void tl_mma_load_b_nk(TlFragB& f, const T* p, int ld) { tl_wmma_load_rows(f.x, p, ld); }
template <typename T> TL_DEV void tl_mma_load_b_kn(TlFragB& f, const T* p, int ld) { tl_wmma_load_cols(f.x, p, ld); }
template <typename T> TL_DEV void tl_mma_load_a_t(TlFragA& f, const T* p, int ld) { tl_wmma_load_cols(f.x, p, ld); }
template <typename T> TL_DEV void tl_mma_store_acc(T* p, int ld, const TlAcc& c) {
    const int r = tl_lane() & 15;
#pragma unroll
    for (int i = 0; i < 8; ++i) p[r * ld + tl_mma_acc_col(i)] = Tr<T>::store(c.x[i]);
}
TL_DEV void tl_mma_atomic_add_acc(float* p, i64 ld, const TlAcc& c, float scale, int rows, int cols) {
    const int r = tl_lane() & 15;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int col = tl_mma_acc_col(i);
        const float a = c.x[i] * scale;
        if (r < rows && col < cols && a != 0.0f) atomicAdd(p + r * ld + col, a);
    }
}
TL_DEV void tl_mma_atomic_add_tile(float* p, i64 ld, const TlAcc& c, float scale) {
    const int r = tl_lane() & 15;
#pragma unroll
    for (int i = 0; i < 8; ++i) atomicAdd(p + r * ld + tl_mma_acc_col(i), c.x[i] * scale);
}
// The accumulator as an A fragment (rounded to T). RDNA4: element e of both is column
// 8 h + e. RDNA3: the fragment needs all 16 columns of the row; the lane holds those of
// parity h, lane l ^ 16 the others.
template <typename T> TL_DEV void tl_mma_acc_to_a(TlFragA& f, const TlAcc& c) {
#if TL_WMMA_K == 8
#pragma unroll
    for (int e = 0; e < 8; ++e) f.x[e] = (short)Tr<T>::store(c.x[e]).bits;
#else
    const bool odd = (tl_lane() >> 4) != 0;  // this lane's columns are 2 i + 1
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const short mine = (short)Tr<T>::store(c.x[i]).bits;
        const short other = (short)tl_shfl_xor((int)mine, 16, 32);
        f.x[2 * i] = odd ? other : mine;
        f.x[2 * i + 1] = odd ? mine : other;
    }
#endif
}
#if TL_WMMA_K == 8
#define TL_WMMA(ty, b, a, c) __builtin_amdgcn_wmma_f32_16x16x16_##ty##_w32_gfx12(b, a, c)
#else
#define TL_WMMA(ty, b, a, c) __builtin_amdgcn_wmma_f32_16x16x16_##ty##_w32(b, a, c)
#endif
template <typename T> TL_DEV void tl_mma_16x16x16(TlAcc& c, const TlFragA& a, const TlFragB& b);
template <> TL_DEV void tl_mma_16x16x16<f16>(TlAcc& c, const TlFragA& a, const TlFragB& b) {
    tl_float8 acc;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] = c.x[i];
    acc = TL_WMMA(f16, __builtin_bit_cast(tl_wmma_h, b.x), __builtin_bit_cast(tl_wmma_h, a.x), acc);  // D^T
#pragma unroll
    for (int i = 0; i < 8; ++i) c.x[i] = acc[i];
}
template <> TL_DEV void tl_mma_16x16x16<bf16>(TlAcc& c, const TlFragA& a, const TlFragB& b) {
    tl_float8 acc;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] = c.x[i];
    acc = TL_WMMA(bf16, b.x, a.x, acc);  // D^T
#pragma unroll
    for (int i = 0; i < 8; ++i) c.x[i] = acc[i];
}
#undef TL_WMMA
#endif
