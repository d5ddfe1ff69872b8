// The W4A16 kernel's side of its per-CTA timeline (csrc/dev/moe_w4a16_timeline.h): included by
// moe_gemm_w4a16.cu in a -DKD_W4_TIMELINE build only, in place of its empty marks. The marks
// expand inside moe_w4a16_kernel (kSwiglu, tid and e are its names).
#pragma once

#include <string>

#include "dev/moe_w4a16_timeline.h"
#include "kernels/launch_support.h"

namespace kdtree {
namespace kern {

__device__ W4TimelineRecord g_w4_timeline[2][kW4TimelineCtas];
KD_DEVICE uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// thread 0 stamps `point` of its CTA's record (form 0 SwiGLU, 1 plain)
#define KD_W4_MARK(point)                                                                   \
  do {                                                                                      \
    const unsigned cta_ = blockIdx.y * gridDim.x + blockIdx.x;                              \
    if (threadIdx.x == 0 && cta_ < kW4TimelineCtas) g_w4_timeline[kSwiglu ? 0 : 1][cta_].ns[point] = global_ns(); \
  } while (0)
// thread 0 stamps the expert point and its SM and expert
#define KD_W4_MARK_EXPERT(expert_id)                                               \
  do {                                                                            \
    KD_W4_MARK(kW4TlExpert);                                                      \
    if (tid == 0 && blockIdx.y * gridDim.x + blockIdx.x < kW4TimelineCtas) {      \
      unsigned smid;                                                              \
      asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));                           \
      auto& rec = g_w4_timeline[kSwiglu ? 0 : 1][blockIdx.y * gridDim.x + blockIdx.x]; \
      rec.smid = smid;                                                            \
      rec.expert = static_cast<uint32_t>(expert_id);                              \
    }                                                                             \
  } while (0)
// waits for warp 0's first weight block (the statement `wait`), then stamps it
#define KD_W4_MARK_FIRST_BLOCK(wait) \
  do {                               \
    wait;                            \
    KD_W4_MARK(kW4TlFirstBlock);     \
  } while (0)

}  // namespace kern

KernelResult moe_w4a16_timeline_read(int form, W4TimelineRecord* out, int count) {
  if (form < 0 || form > 1 || count < 0 || count > kW4TimelineCtas || (count > 0 && !out))
    return KernelResult::invalid("moe_w4a16_timeline_read: form must be 0 or 1 and count 0.." +
                                 std::to_string(kW4TimelineCtas));
  const size_t offset = static_cast<size_t>(form) * kW4TimelineCtas * sizeof(W4TimelineRecord);
  if (cudaMemcpyFromSymbol(out, kern::g_w4_timeline, count * sizeof(W4TimelineRecord), offset) != cudaSuccess)
    return launch_status("moe_w4a16_timeline_read");
  return KernelResult::success();
}
KernelResult moe_w4a16_timeline_clear() {
  static const W4TimelineRecord zero[2 * kW4TimelineCtas] = {};
  if (cudaMemcpyToSymbol(kern::g_w4_timeline, zero, sizeof zero) != cudaSuccess)
    return launch_status("moe_w4a16_timeline_clear");
  return KernelResult::success();
}

}  // namespace kdtree
