// Random fills of device memory: the dummy weights of `--load-format dummy` (timing and memory
// without a checkpoint). Values are uniform in [low, high), drawn from Philox4x32-10 keyed by
// (seed, stream), so a fill is reproducible and two tensors of one seed differ.
// Host API; kernels in random_fill.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernel_status.h"
#include "model_dtype.cuh"

namespace kdtree {

struct FillUniformParams {
  ModelDType dtype = ModelDType::kF32;
  int64_t count = 0;      // elements
  void* out = nullptr;    // [count] of dtype
  uint64_t seed = 0;      // the run's seed
  uint64_t stream = 0;    // which tensor of the run: a second key word
  float low = 0.0f, high = 1.0f;
};

KernelResult fill_uniform(const FillUniformParams& p, cudaStream_t stream);

}  // namespace kdtree
