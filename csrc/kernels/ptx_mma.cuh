// Thin wrappers over the sm_80+ warp-level matrix instructions the attention kernel uses:
// ldmatrix, mma.sync m16n8k16 (bf16 in, f32 accumulate) and cp.async. Each has an emulator
// twin (emu/simt_emulator.h) with the PTX ISA's fragment layouts, so the kernel's fragment
// indexing is tested on the CPU.
#pragma once

#include "device_compat.cuh"

namespace kdtree::kern {

#if !defined(KD_SIMT_EMULATION)
KD_DEVICE uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
#endif

// Four 8x8 b16 matrices; lane l points at row l%8 of matrix l/8. r[j] = matrix j's
// elements (lane/4, 2*(lane%4)+{0,1}).
KD_DEVICE void ldmatrix_x4(uint32_t (&r)[4], const void* row_ptr) {
#if defined(KD_SIMT_EMULATION)
  ::kdemu::ldmatrix(r, 4, row_ptr, false);
#elif defined(__CUDA_ARCH__)
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row_ptr)));
#endif
}

// As ldmatrix_x4, transposed: r[j] = matrix j's elements (2*(lane%4)+{0,1}, lane/4).
KD_DEVICE void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row_ptr) {
#if defined(KD_SIMT_EMULATION)
  ::kdemu::ldmatrix(r, 4, row_ptr, true);
#elif defined(__CUDA_ARCH__)
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row_ptr)));
#endif
}

// acc(16x8, f32) += A(16x16, bf16, row-major fragments) * B(16x8, bf16, column fragments).
KD_DEVICE void mma_bf16_16816(float (&acc)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(KD_SIMT_EMULATION)
  const uint32_t b[2] = {b0, b1};
  ::kdemu::mma_bf16_16816(acc, a, b, acc);
#elif defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// 16-byte global -> shared copy that bypasses L1; when !valid the destination is zero-filled
// and nothing is read (src must still be a mapped address: pass any valid pointer).
KD_DEVICE void cp_async_16(void* smem_dst, const void* gmem_src, bool valid) {
#if defined(KD_SIMT_EMULATION)
  if (valid) std::memcpy(smem_dst, gmem_src, 16);
  else std::memset(smem_dst, 0, 16);
#elif defined(__CUDA_ARCH__)
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem_dst)), "l"(gmem_src),
               "r"(valid ? 16 : 0)
               : "memory");
#endif
}

KD_DEVICE void cp_async_commit() {
#if defined(__CUDA_ARCH__) && !defined(KD_SIMT_EMULATION)
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Wait until at most `Pending` committed groups of this thread are still in flight.
template <int Pending>
KD_DEVICE void cp_async_wait() {
#if defined(__CUDA_ARCH__) && !defined(KD_SIMT_EMULATION)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
#endif
}

// Two floats -> one register of two bf16 (lo in the low half), round to nearest even.
KD_DEVICE uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

}  // namespace kdtree::kern
