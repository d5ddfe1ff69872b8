// Thin wrappers over Hopper's (sm_90) shared-memory mbarriers and tiled bulk tensor copies
// (TMA): a copy moves one box of a tensor map (tma_map.h) into shared memory and reports its
// bytes to an mbarrier (complete_tx); threads wait on the mbarrier's phase parity. Each has
// an emulator twin (emu/simt_tma.h), so a kernel's barrier phases, byte counts and box
// coordinates are tested on the CPU.
//
// Protocol per buffer: one thread arms the buffer's mbarrier with arrive.expect_tx(bytes of
// every copy) and issues the copies; consumers of its u-th fill (from 0) wait for parity u % 2.
// The copies write through the async proxy: a buffer read by wgmma needs no proxy fence after
// the wait; generic stores into a buffer later refilled by TMA need fence_proxy_async_smem
// (ptx_wgmma.cuh) before the barrier that orders them before the copy.
#pragma once

#include "device_compat.cuh"
#include "ptx_wgmma.cuh"
#include "tma_map.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(KD_SIMT_EMULATION)
#define KD_TMA_DEVICE 1
#endif

namespace kdtree::kern {

// mbarrier.init: `arrivals` arrivals complete a phase (plus the bytes announced with them).
KD_DEVICE void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
#if defined(KD_SIMT_EMULATION)
  ::kdemu::mbarrier_init(bar, static_cast<int>(arrivals));
#elif defined(KD_TMA_DEVICE)
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(arrivals) : "memory");
#endif
}

// Makes initialised mbarriers visible to the async proxy (the TMA unit); a barrier then
// publishes them to the other threads.
KD_DEVICE void fence_mbarrier_init() {
#if defined(KD_TMA_DEVICE)
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// One arrival that also announces `bytes` the phase's copies will deliver.
KD_DEVICE void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#if defined(KD_SIMT_EMULATION)
  ::kdemu::mbarrier_arrive(bar, bytes);
#elif defined(KD_TMA_DEVICE)
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
#endif
}

// One plain arrival (a consumer releasing a buffer).
KD_DEVICE void mbarrier_arrive(uint64_t* bar) {
#if defined(KD_SIMT_EMULATION)
  ::kdemu::mbarrier_arrive(bar, 0);
#elif defined(KD_TMA_DEVICE)
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
#endif
}

#if defined(KD_TMA_DEVICE)
KD_DEVICE bool mbarrier_try_wait_parity(uint32_t addr, uint32_t parity) {
  uint32_t done;
  asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(done)
               : "r"(addr), "r"(parity)
               : "memory");
  return done != 0;
}
// A phase still incomplete after this many cycles (~17 s at 2 GHz, slack for the sanitizers)
// never will (wrong byte count or parity): the launch fails instead of hanging the GPU.
constexpr long long kMbarrierTimeoutCycles = 1LL << 35;
#endif

// Waits until the phase of parity `parity` has completed (try_wait suspends the thread for a
// while in hardware between polls).
KD_DEVICE void mbarrier_wait_parity(uint64_t* bar, uint32_t parity) {
#if defined(KD_SIMT_EMULATION)
  ::kdemu::mbarrier_wait_parity(bar, static_cast<int>(parity));
#elif defined(KD_TMA_DEVICE)
  const uint32_t addr = smem_u32(bar);
  if (mbarrier_try_wait_parity(addr, parity)) return;
  const long long start = clock64();
  while (!mbarrier_try_wait_parity(addr, parity))
    if (clock64() - start > kMbarrierTimeoutCycles) __trap();
#endif
}

// Fetches a tensor map's descriptor into the TMA unit's cache ahead of its first copy.
KD_DEVICE void tma_prefetch_map(const TmaMap* map) {
#if defined(KD_TMA_DEVICE)
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
#else
  (void)map;
#endif
}

// The box of a 3-D map at element coordinates (c0, c1, c2) -> shared memory at dst (128-byte
// aligned; 1024 for the 128-byte swizzle to match sw128_offset), bytes reported to bar.
KD_DEVICE void tma_load_3d(void* dst, const TmaMap* map, uint64_t* bar, int c0, int c1, int c2) {
#if defined(KD_SIMT_EMULATION)
  const int c[3] = {c0, c1, c2};
  ::kdemu::tma_load(dst, map, bar, c);
#elif defined(KD_TMA_DEVICE)
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(
          smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#endif
}

// `bytes` (a multiple of 16) of global memory at src (16-byte aligned) into shared memory at
// dst (16-byte aligned), reported to bar like a box: the non-tensor bulk copy, for rows that
// need no tensor map.
KD_DEVICE void bulk_copy_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if defined(KD_SIMT_EMULATION)
  ::kdemu::bulk_copy(dst, src, bytes, bar);
#elif defined(KD_TMA_DEVICE)
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(smem_u32(dst)),
               "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
#elif defined(__CUDA_ARCH__)
  (void)dst, (void)src, (void)bytes, (void)bar;
  __trap();  // no bulk copies before sm_90: a kernel that needs them must not be picked there
#endif
}

}  // namespace kdtree::kern
