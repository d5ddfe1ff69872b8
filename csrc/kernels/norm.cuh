// RMSNorm over rows (the target's and the drafter's layer norms, and the drafter's per-head
// q_norm / k_norm with rows = tokens x heads), as python_engine/model/ops.py::rms_norm:
//   y = weight * dtype(x * rsqrt(mean(x^2) + eps))       (x^2 summed in float32)
// Host API; kernels in norm.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernel_status.h"
#include "model_dtype.cuh"

namespace kdtree {

struct RmsNormParams {
  ModelDType dtype = ModelDType::kF32;  // of x, weight and out
  int rows = 0;
  int dim = 0;                 // elements normalised together
  const void* x = nullptr;     // row r, head h at x + r * x_stride + h * x_head_stride (elements)
  int64_t x_stride = 0;
  const void* weight = nullptr;  // [dim]
  void* out = nullptr;         // likewise; may alias x when the strides match
  int64_t out_stride = 0;
  float eps = 0.0f;
  int heads = 1;               // per-head norms (q_norm / k_norm): each (row, head) is one vector
  int64_t x_head_stride = 0, out_head_stride = 0;
};

// The residual add and the next norm in one pass (every layer does both twice):
//   x = x + y (rounded);  out = weight * dtype(x * rsqrt(mean(x^2) + eps))
struct AddRmsNormParams {
  ModelDType dtype = ModelDType::kF32;
  int rows = 0, dim = 0;
  void* x = nullptr;           // the residual stream, updated in place
  int64_t x_stride = 0;
  const void* y = nullptr;     // what the sub-layer added
  int64_t y_stride = 0;
  const void* weight = nullptr;
  void* out = nullptr;         // the normalised rows (must not alias x)
  int64_t out_stride = 0;
  float eps = 0.0f;
};

KernelResult rms_norm(const RmsNormParams& p, cudaStream_t stream);
KernelResult add_rms_norm(const AddRmsNormParams& p, cudaStream_t stream);

inline KernelResult check_rms_norm_params(const RmsNormParams& p) {
  auto s = [](long long v) { return std::to_string(v); };
  if (p.rows < 0) return KernelResult::invalid("rms_norm: rows must be >= 0, got " + s(p.rows));
  if (p.dim <= 0) return KernelResult::invalid("rms_norm: dim must be >= 1, got " + s(p.dim));
  if (p.heads < 1) return KernelResult::invalid("rms_norm: heads must be >= 1");
  if (p.heads == 1 && (p.x_stride < p.dim || p.out_stride < p.dim))
    return KernelResult::invalid("rms_norm: row strides must be >= dim " + s(p.dim));
  if (p.heads > 1 && (p.x_head_stride < p.dim || p.out_head_stride < p.dim ||
                      p.x_stride < p.x_head_stride * p.heads || p.out_stride < p.out_head_stride * p.heads))
    return KernelResult::invalid("rms_norm: head strides must be >= dim and rows hold every head");
  if (!(p.eps > 0.0f)) return KernelResult::invalid("rms_norm: eps must be a positive number");
  if (p.rows > 0 && (!p.x || !p.weight || !p.out))
    return KernelResult::invalid("rms_norm: x, weight and out must be non-null");
  return KernelResult::success();
}

}  // namespace kdtree
