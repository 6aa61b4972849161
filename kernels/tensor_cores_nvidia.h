// tensor_cores_nvidia.h -- compat.h Part 3's warp tiles on NVIDIA tensor cores (sm_80+: two
// mma.sync.m16n8k16 per 16x16 tile, fragments by ldmatrix, accumulators added to global
// memory by red.global.add.v2 on sm_90) and Hopper's warpgroup products (sm_90a: wgmma,
// TL_HAS_WGMMA). compat.h includes it in its Part 3 when NVRTC compiles for sm_80+, after
// nvidia.h (tl_smem_addr, tl_pack2); no kernel source includes it.
#pragma once

// ---- mma.sync tiles (sm_80+) -----------------------------------------------------------
#define TL_HAS_MMA 1
#define TL_MMA_ACC_N 8      // accumulator floats per lane
#define TL_MMA_ROW_SLOTS 2  // distinct tile rows per lane
#define TL_MMA_ROW_LANES 4  // lanes that share a row (consecutive lanes)
#define TL_MMA_LANES 32     // lanes per warp (launch bounds of MMA kernels)
#define TL_MMA_STAGES 2     // K/V buffers of the MMA forward
// shared memory a block may opt into (CUDA's table of compute capabilities): 99 KiB on sm_86,
// sm_89 and sm_12x (RTX 30 / 40 / 50), 163 KiB on sm_80 and sm_87, 227 KiB on sm_90 and sm_10x;
// attention.hip sizes its matrix-core tiles from it; mirrored by cuda.py's CudaPlatform.mma_lds_bytes
#if __CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 890 || __CUDA_ARCH__ >= 1200
#define TL_MMA_LDS_KIB 99
#elif __CUDA_ARCH__ == 800 || __CUDA_ARCH__ == 870
#define TL_MMA_LDS_KIB 163
#else
#define TL_MMA_LDS_KIB 227
#endif
struct TlFragA { u32 x[4]; };
struct TlFragB { u32 x[4]; };  // two k16 x n8 halves
struct TlAcc { float x[8]; };  // x[4*half + i]: row lane/4 + 8*(i/2), col 8*half + 2*(lane%4) + i%2

TL_DEV int tl_lane() { return (int)(threadIdx.x & 31); }
TL_DEV int tl_mma_acc_slot(int i) { return (i >> 1) & 1; }
TL_DEV int tl_mma_slot_row(int s) { return (tl_lane() >> 2) + 8 * s; }
TL_DEV int tl_mma_acc_col(int i) { return 8 * (i >> 2) + 2 * (tl_lane() & 3) + (i & 1); }

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

// ---- f32 operands: 3xTF32 --------------------------------------------------------------
// A 16x16x16 f32 product is 2 (n) x 2 (k) mma.sync.m16n8k8 tf32 products, each operand
// split into a tf32 head and the tf32 rounding of its remainder: a b ~ ah bh + ah bl + al bh
// (al bl and the tail's own rounding are below f32's last bit of the sum: errors near
// 2^-21 relative, where one tf32 product has 2^-11). Within each group of 8 k values the
// fragments take k in pair order -- the product's k = t is element 2t, k = t + 4 element
// 2t + 1 -- so that an accumulator's column pairs are an A fragment's k pairs (the A of P V
// is the accumulator itself, no shuffle) and A rows / B columns load as 8-byte pairs.
// Lane l = 4g + t: x[4kh + j] of A is A[g + 8 (j & 1)][8kh + 2t + (j >> 1)]; x[4nh + 2kh + j]
// of B is B[8kh + 2t + j][8nh + g].
struct TlFragA32 { float x[8]; };
struct TlFragB32 { float x[8]; };
// A[r][k] = p[r * ld + k] (ld even, p 8-byte aligned)
TL_DEV void tl_mma_load_a(TlFragA32& f, const float* p, int ld) {
    const int l = tl_lane(), g = l >> 2, t = l & 3;
#pragma unroll
    for (int kh = 0; kh < 2; ++kh)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float2 u = *(const float2*)(p + (g + 8 * h) * ld + 8 * kh + 2 * t);
            f.x[4 * kh + h] = u.x;
            f.x[4 * kh + 2 + h] = u.y;
        }
}
// B[k][n] = p[n * ld + k]
TL_DEV void tl_mma_load_b_nk(TlFragB32& f, const float* p, int ld) {
    const int l = tl_lane(), g = l >> 2, t = l & 3;
#pragma unroll
    for (int nh = 0; nh < 2; ++nh)
#pragma unroll
        for (int kh = 0; kh < 2; ++kh) {
            const float2 u = *(const float2*)(p + (8 * nh + g) * ld + 8 * kh + 2 * t);
            f.x[4 * nh + 2 * kh] = u.x;
            f.x[4 * nh + 2 * kh + 1] = u.y;
        }
}
// B[k][n] = p[k * ld + n]
TL_DEV void tl_mma_load_b_kn(TlFragB32& f, const float* p, int ld) {
    const int l = tl_lane(), g = l >> 2, t = l & 3;
#pragma unroll
    for (int nh = 0; nh < 2; ++nh)
#pragma unroll
        for (int kh = 0; kh < 2; ++kh)
#pragma unroll
            for (int j = 0; j < 2; ++j) f.x[4 * nh + 2 * kh + j] = p[(8 * kh + 2 * t + j) * ld + 8 * nh + g];
}
// A[r][k] = p[k * ld + r]
TL_DEV void tl_mma_load_a_t(TlFragA32& f, const float* p, int ld) {
    const int l = tl_lane(), g = l >> 2, t = l & 3;
#pragma unroll
    for (int kh = 0; kh < 2; ++kh)
#pragma unroll
        for (int j = 0; j < 4; ++j) f.x[4 * kh + j] = p[(8 * kh + 2 * t + (j >> 1)) * ld + g + 8 * (j & 1)];
}
template <> TL_DEV void tl_mma_store_acc<float>(float* p, int ld, const TlAcc& c) {
    const int l = tl_lane();
#pragma unroll
    for (int i = 0; i < 8; i += 2)
        *(float2*)(p + ((l >> 2) + 8 * ((i >> 1) & 1)) * ld + 8 * (i >> 2) + 2 * (l & 3)) =
            make_float2(c.x[i], c.x[i + 1]);
}
// The accumulator as an A fragment: its column pairs are the fragment's k pairs.
template <typename T> TL_DEV void tl_mma_acc_to_a(TlFragA32& f, const TlAcc& c) {
#pragma unroll
    for (int kh = 0; kh < 2; ++kh) {
        f.x[4 * kh] = c.x[4 * kh];
        f.x[4 * kh + 1] = c.x[4 * kh + 2];
        f.x[4 * kh + 2] = c.x[4 * kh + 1];
        f.x[4 * kh + 3] = c.x[4 * kh + 3];
    }
}
// x = hi + lo as two tf32 values (the bits mma's tf32 operands take)
TL_DEV void tl_tf32_split(float x, u32& hi, u32& lo) {
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(hi) : "f"(x));
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(lo) : "f"(x - __uint_as_float(hi)));
}
TL_DEV void tl_mma_tf32(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <typename T> TL_DEV void tl_mma_16x16x16(TlAcc& c, const TlFragA32& a, const TlFragB32& b);
template <> TL_DEV void tl_mma_16x16x16<float>(TlAcc& c, const TlFragA32& a, const TlFragB32& b) {
    u32 ah[8], al[8], bh[8], bl[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        tl_tf32_split(a.x[i], ah[i], al[i]);
        tl_tf32_split(b.x[i], bh[i], bl[i]);
    }
#pragma unroll
    for (int nh = 0; nh < 2; ++nh) {
        float d[4] = {c.x[4 * nh], c.x[4 * nh + 1], c.x[4 * nh + 2], c.x[4 * nh + 3]};
#pragma unroll
        for (int kh = 0; kh < 2; ++kh) {
            const u32 aH[4] = {ah[4 * kh], ah[4 * kh + 1], ah[4 * kh + 2], ah[4 * kh + 3]};
            const u32 aL[4] = {al[4 * kh], al[4 * kh + 1], al[4 * kh + 2], al[4 * kh + 3]};
            const int j = 4 * nh + 2 * kh;
            tl_mma_tf32(d, aL, bh[j], bh[j + 1]);  // the small terms first
            tl_mma_tf32(d, aH, bl[j], bl[j + 1]);
            tl_mma_tf32(d, aH, bh[j], bh[j + 1]);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) c.x[4 * nh + i] = d[i];
    }
}

// ---- Hopper warpgroup products (sm_90a: wgmma) -------------------------------------------
// A warpgroup (4 consecutive warps, the first a multiple of 4 in the block) computes a 64 x N
// f32 tile D (+)= A (64 x 16) B (16 x N) asynchronously: products are issued after
// tl_wg_fence() (which orders any other register writes to D and A before them), committed
// as a group by tl_wg_commit(), and D is read after tl_wg_wait<0>() and tl_wg_hold(D). D is
// N / 16 TlAcc tiles in which warp w of the group holds rows 16w .. 16w+15 in the m16n8
// layout, so the tile helpers above apply per warp, and tl_mma_acc_to_a turns a tile into
// the A operand of a register-A product (P of P V, P^T of P^T dO). Shared-memory operands
// (16-bit values) are described by tl_wg_desc_sw128. Shared memory written by stores or
// cp.async is read by wgmma only after each writer's tl_fence_async_smem() and a barrier.
// Products issued in a branch that may not run, and registers of an unfinished product read
// or written, make ptxas serialize every product of the kernel ('Potential Performance Loss'
// in its -v output; tests/test_kernels_sm90.py checks). sm_90a only (cuda.py compiles for it
// on cc 9.0).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
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

// ---- Hopper block synchronisation for warp-specialised kernels (sm_90a) ------------------
// An mbarrier is 8 bytes of shared memory that counts arrivals: a phase completes when
// `count` threads have arrived, and the next phase begins. tl_mbar_wait(b, par) returns once
// the phase of parity `par` has completed (phase k of a barrier has parity k % 2; a waiter
// must not fall two phases behind, which the kernels' ring protocols rule out). An arrival
// releases the arriving thread's earlier memory accesses to the threads whose wait sees
// its phase complete (acquire), as a block barrier would, but without stopping the arriving
// thread. Initialised by one thread, then a __syncthreads before any other use.
TL_DEV void tl_mbar_init(u64* bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(tl_smem_addr(bar)), "r"(count) : "memory");
}
TL_DEV void tl_mbar_arrive(u64* bar) {
    asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }" ::"r"(tl_smem_addr(bar)) : "memory");
}
TL_DEV bool tl_mbar_test(u64* bar, u32 parity) {
    u32 done;
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(tl_smem_addr(bar)), "r"(parity) : "memory");
    return done != 0;
}
// Whether that phase has completed, without waiting.
TL_DEV bool tl_mbar_ready(u64* bar, u32 parity) {
    u32 done;
    asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(tl_smem_addr(bar)), "r"(parity) : "memory");
    return done != 0;
}
TL_DEV void tl_mbar_wait(u64* bar, u32 parity) {
    while (!tl_mbar_test(bar, parity)) {}  // try_wait itself suspends the thread a while
}
// Named block barriers (ids 1..15; 0 is __syncthreads'): tl_bar_sync waits until n threads
// (a multiple of 32, the caller included) have synced or arrived at barrier id since its last
// completion; tl_bar_arrive counts the caller in without waiting (a signal to the syncers).
TL_DEV void tl_bar_sync(int id, int n) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory"); }
TL_DEV void tl_bar_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory"); }
// Registers per thread of the calling warpgroup from here on (every warp of the group runs
// it; N a multiple of 8 in 24..256): a producer group gives registers back to the block's
// pool (dec) for its consumer groups to take (inc, which waits until the pool has them).
template <int N> TL_DEV void tl_regs_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N)); }
template <int N> TL_DEV void tl_regs_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N)); }
#endif
