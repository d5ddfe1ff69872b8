// Rotary position embedding as transformers applies it to DeepSeek-V3 (and Qwen3 for the
// drafter), python_engine/model/rope.py: freq = position * inv_freq (float32),
// cos/sin = cos/sin(freq) * attention_factor rounded to the model dtype, and either
//   rotate-half:  out[i] = x[i] c_i - x[i+h] s_i,      out[i+h] = x[i+h] c_i + x[i] s_i
//   interleaved:  out[i] = x[2i] c_i - x[2i+1] s_i,    out[i+h] = x[2i+1] c_i + x[2i] s_i
// (h = dim/2; the interleaved form writes de-interleaved, as transformers does).
// inv_freq comes from the host (python_engine/native computes it exactly as the reference).
// Host API; kernels in rope.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernel_status.h"
#include "model_dtype.cuh"

namespace kdtree {

constexpr int kRopeMaxDim = 256;  // rotary dims per head (Kimi: 64; drafters: head_dim <= 256)

// Element (t, h, i) of a [tokens, heads, dim] view: base + t * token_stride + h * head_stride + i.
struct RopeParams {
  ModelDType dtype = ModelDType::kF32;
  int tokens = 0;
  int heads = 0;
  int dim = 0;                   // rotary dimension (even)
  const void* x = nullptr;
  int64_t x_token_stride = 0, x_head_stride = 0;
  void* out = nullptr;           // may equal x (in place) for rotate-half with the same strides
                                 //   (pair i reads and writes only i and i + dim/2)
  int64_t out_token_stride = 0, out_head_stride = 0;
  const int32_t* positions = nullptr;  // [tokens] device
  const float* inv_freq = nullptr;     // [dim / 2] device
  float attention_factor = 1.0f;
  bool interleave = false;
};

KernelResult rope(const RopeParams& p, cudaStream_t stream);

inline KernelResult check_rope_params(const RopeParams& p) {
  auto s = [](long long v) { return std::to_string(v); };
  if (p.tokens < 0 || p.heads <= 0) return KernelResult::invalid("rope: tokens must be >= 0 and heads >= 1");
  if (p.dim <= 0 || p.dim % 2 || p.dim > kRopeMaxDim)
    return KernelResult::invalid("rope: dim " + s(p.dim) + " must be even, in 2.." + s(kRopeMaxDim));
  if (p.tokens > 0 && (!p.x || !p.out || !p.positions || !p.inv_freq))
    return KernelResult::invalid("rope: x, out, positions and inv_freq must be non-null");
  if (p.x == p.out && (p.interleave || p.x_token_stride != p.out_token_stride || p.x_head_stride != p.out_head_stride))
    return KernelResult::invalid("rope: in place only for rotate-half with the same strides for x and out "
                                 "(interleaved pairs write where other pairs read)");
  return KernelResult::success();
}

}  // namespace kdtree
