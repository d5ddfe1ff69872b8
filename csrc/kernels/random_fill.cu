// Random fills (API: random_fill.cuh): a grid-stride loop, four values per Philox draw.
#include "random_fill.cuh"

#include <algorithm>

#include "launch_support.h"
#include "philox.cuh"

namespace kdtree {
namespace kern {

// Blocks of a fill: enough to cover every SM several times over; each thread then loops.
constexpr int64_t kFillMaxBlocks = 4096;
constexpr int kValuesPerDraw = 4;  // Philox4x32 gives four 32-bit words

template <class T>
__global__ void __launch_bounds__(kElementThreads) fill_uniform_kernel(const FillUniformParams p) {
  const uint32_t key[2] = {static_cast<uint32_t>(p.seed), static_cast<uint32_t>(p.seed >> 32)};
  const int64_t draws = (p.count + kValuesPerDraw - 1) / kValuesPerDraw;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  T* out = static_cast<T*>(p.out);
  for (int64_t d = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; d < draws; d += step) {
    const uint32_t ctr[4] = {static_cast<uint32_t>(d), static_cast<uint32_t>(d >> 32), static_cast<uint32_t>(p.stream),
                             static_cast<uint32_t>(p.stream >> 32)};
    uint32_t bits[4];
    philox4x32_10(ctr, key, bits);
    for (int j = 0; j < kValuesPerDraw; ++j) {
      const int64_t i = d * kValuesPerDraw + j;
      if (i < p.count) out[i] = from_f32<T>(p.low + (p.high - p.low) * uniform_open01(bits[j]));
    }
  }
}

}  // namespace kern

KernelResult fill_uniform(const FillUniformParams& p, cudaStream_t stream) {
  if (p.count < 0 || (p.count > 0 && !p.out)) return KernelResult::invalid("fill_uniform: negative count or null output");
  if (!(p.low <= p.high)) return KernelResult::invalid("fill_uniform: low must be <= high");
  if (p.count == 0) return KernelResult::success();
  const int64_t draws = (p.count + kern::kValuesPerDraw - 1) / kern::kValuesPerDraw;
  const int blocks = static_cast<int>(std::min(kern::kFillMaxBlocks, (draws + kern::kElementThreads - 1) / kern::kElementThreads));
  KD_DISPATCH_DTYPE(p.dtype, T, KD_LAUNCH_FLAT(kern::fill_uniform_kernel<T>, blocks, kern::kElementThreads, 0, stream, p));
  return launch_status("fill_uniform_kernel launch");
}

}  // namespace kdtree
