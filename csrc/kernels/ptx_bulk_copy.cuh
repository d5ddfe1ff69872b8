// Bulk copies global -> shared by the copy engine (cp.async.bulk, sm_90+), completed on a shared
// memory barrier (mbarrier) that counts the bytes that landed. One thread moves a whole block
// with one instruction, and the copy does not hold the SM's load slots while it is in flight, so
// a streaming kernel keeps more bytes in flight per SM than with per-thread cp.async. In the
// emulator a copy lands when it is issued and a wait returns at once.
#pragma once

#include <cstring>

#include "ptx_mma.cuh"

namespace kdtree::kern {

// A shared-memory address as the instructions below take it: 32 bits on the GPU (a kernel keeps
// one register per address, not a generic pointer's two); a pointer in the emulator. Offsets in
// bytes add to either.
#if defined(KD_SIMT_EMULATION)
using shared_addr_t = char*;
inline shared_addr_t shared_address(void* p) { return static_cast<char*>(p); }
#else
using shared_addr_t = uint32_t;
KD_DEVICE shared_addr_t shared_address(const void* p) { return smem_addr(p); }
#endif

// Arm a barrier that completes a phase after `count` arrivals (and the bytes they announce).
KD_DEVICE void mbarrier_init(shared_addr_t bar, uint32_t count) {
#if defined(__CUDA_ARCH__) && !defined(KD_SIMT_EMULATION)
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#else
  (void)bar;
  (void)count;
#endif
}

// Make initialised barriers visible to the copy engine (the async proxy) before a copy uses them.
KD_DEVICE void fence_mbarrier_init() {
#if defined(__CUDA_ARCH__) && !defined(KD_SIMT_EMULATION)
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// One arrival on `bar` that also announces `bytes` of copies completing on it this phase.
KD_DEVICE void mbarrier_arrive_expect_tx(shared_addr_t bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && !defined(KD_SIMT_EMULATION)
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
#else
  (void)bar;
  (void)bytes;
#endif
}

// Copy `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared memory;
// their arrival counts down `bar`'s announced bytes.
KD_DEVICE void bulk_copy_to_shared(shared_addr_t dst, const void* src, uint32_t bytes, shared_addr_t bar) {
#if defined(KD_SIMT_EMULATION)
  (void)bar;
  std::memcpy(dst, src, bytes);
#elif defined(__CUDA_ARCH__)
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
#endif
}

// Wait until the phase of `bar` with this parity (0 for its first phase, then alternating) completes.
KD_DEVICE void mbarrier_wait_parity(shared_addr_t bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && !defined(KD_SIMT_EMULATION)
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
#else
  (void)bar;
  (void)parity;
#endif
}

}  // namespace kdtree::kern
