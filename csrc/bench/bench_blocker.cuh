// What the bench programs time: a run's GPU time, not the host's cost of launching it. Each
// CUDA-event-timed run is queued behind a spin kernel, so its launches reach the stream while
// the GPU is still busy and the start event fires just before the run's first kernel
// (`kdtree bench` times torch's baselines the same way: kdtree_cli/bench/timing.py).
#pragma once

#include <cuda_runtime_api.h>

#include "common/cuda_check.h"

namespace kdtree::bench {

// ~0.2 ms at the H200's 1.98 GHz: longer than the host needs to launch any one timed run
constexpr long long kBlockerCycles = 400000;

#if !defined(KD_SIMT_EMULATION)
__global__ void bench_blocker_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}
#endif

// Spin on `stream` for kBlockerCycles (nothing on the emulator, where launches are synchronous).
inline void launch_blocker(cudaStream_t stream) {
#if !defined(KD_SIMT_EMULATION)
  bench_blocker_kernel<<<1, 1, 0, stream>>>(kBlockerCycles);
  KD_CUDA_CHECK(cudaGetLastError());
#else
  (void)stream;
#endif
}

}  // namespace kdtree::bench
