// nvidia.h -- inline PTX that only NVIDIA has, outside the matrix products (those are in
// tensor_cores_nvidia.h). compat.h includes it after its portable Part 2 when NVRTC compiles
// (TL_CUDA); no kernel source includes it. Each feature comes with a TL_HAS_* macro that
// portable code (rows.h, compat.h's fallbacks) tests instead of the vendor:
//   TL_HAS_UNPACK2_OPAQUE  tl_unpack2_opaque: a word of two f16/bf16 widened where it is used
//   TL_HAS_STORE_GLOBAL16  tl_store_global16: one explicit 16-byte global store
//   sm_80+: tl_smem_addr (32-bit shared-memory addresses); TL_HAS_PACK2 tl_pack2 (two floats
//           rounded into one f16x2/bf16x2 word); TL_HAS_CP_ASYNC (cp.async: compat.h Part 3)
#pragma once

// ---- the row kernels' 16-bit pairs and 16-byte stores (rows.h) -----------------------
#define TL_HAS_UNPACK2_OPAQUE 1
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

#define TL_HAS_STORE_GLOBAL16 1
// p[0 .. 4) = w as one 16-byte store to global memory, p 16-byte aligned: NVRTC 13 split
// plain 16-byte stores into 4-byte ones (rows.h store_run_aligned).
TL_DEV void tl_store_global16(void* p, const u32* w) {
    asm volatile("{ .reg .u64 g; cvta.to.global.u64 g, %0; st.global.v4.b32 [g], {%1, %2, %3, %4}; }"
                 ::"l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]) : "memory");
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
// ---- sm_80+ --------------------------------------------------------------------------
// The 32-bit shared-memory address of p. The compiler's own conversion (not inline asm):
// it sees through it, so addresses stay 32-bit shared offsets ([R+imm] operands of LDSM /
// LDGSTS) instead of 64-bit generic pointers converted one by one.
TL_DEV u32 tl_smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }
// Two floats rounded to T (f16 or bf16) into one word, lo in the low half, by one cvt
// (rows.h round_run; the tensor-core tiles' stores and A operands).
#define TL_HAS_PACK2 1
template <typename T> TL_DEV u32 tl_pack2(float lo, float hi);
template <> TL_DEV u32 tl_pack2<bf16>(float lo, float hi) {
    u32 r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r;
}
template <> TL_DEV u32 tl_pack2<f16>(float lo, float hi) {
    u32 r; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r;
}

// 16-byte global -> shared copies by cp.async (their contract, and the plain copies that
// replace them elsewhere: compat.h Part 3).
#define TL_HAS_CP_ASYNC 1
TL_DEV void tl_cp_async16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(tl_smem_addr(dst)), "l"(src));
}
// OFF is the instruction's immediate: copies into one tile share one address register.
template <int OFF> TL_DEV void tl_cp_async16_at(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0+%2], [%1], 16;" :: "r"(tl_smem_addr(dst)), "l"(src), "n"(OFF));
}
template <int OFF> TL_DEV void tl_cp_async16_zfill_at(void* dst, const void* src, bool keep) {
    asm volatile("cp.async.cg.shared.global [%0+%2], [%1], 16, %3;"
                 :: "r"(tl_smem_addr(dst)), "l"(src), "n"(OFF), "r"(keep ? 16 : 0));
}
TL_DEV void tl_cp_async_commit() { asm volatile("cp.async.commit_group;"); }
TL_DEV void tl_cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }
template <int N> TL_DEV void tl_cp_async_wait_prior() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }
#endif
