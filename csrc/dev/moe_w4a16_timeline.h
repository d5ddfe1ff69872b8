// The W4A16 kernel's per-CTA timeline, a measuring build (-DKD_W4_TIMELINE, csrc/dev/README.md;
// moe_w4a16_timeline_marks.cuh holds the kernel's side): every
// CTA's thread 0 stamps the GPU's global nanosecond timer at a few points of its life, so that
// one layer's launches can be laid out in time across the SMs. Why: at decode sizes (n = 1,
// one wave of CTAs per GEMM) the layer takes ~1.35x its bytes over the copy bandwidth and the
// per-GEMM ramp, tail and the gap between the two launches cannot be told apart from kernel
// durations alone. `bench_moe` built the same way prints percentiles of each point.
#pragma once

#include <cstdint>

#include "kernels/kernel_status.h"

namespace kdtree {

enum W4TimelinePoint : int {
  kW4TlEntry = 0,   // the CTA starts
  kW4TlExpert,      // its expert is known
  kW4TlReady,       // the previous kernel waited for (overlap) and x staged: the mma loop may start
  kW4TlFirstBlock,  // warp 0's first weight block has landed
  kW4TlLoopEnd,     // warp 0's last block consumed
  kW4TlExit,        // outputs stored
  kW4TlPoints
};
constexpr int kW4TimelineCtas = 4096;  // CTAs recorded per form; a decode launch has <= 896

struct W4TimelineRecord {
  uint64_t ns[kW4TlPoints];  // %globaltimer; 0 where the point was not reached
  uint32_t smid;
  uint32_t expert;
  uint32_t cta;  // blockIdx.y * gridDim.x + blockIdx.x (filled in by the reader's caller)
};

// form 0: the SwiGLU (gate/up) kernel, 1: the plain (down) one. Reads the records of CTAs
// 0 .. count-1 as the last launches of that form left them; clear zeroes both forms.
KernelResult moe_w4a16_timeline_read(int form, W4TimelineRecord* out, int count);
KernelResult moe_w4a16_timeline_clear();

}  // namespace kdtree
