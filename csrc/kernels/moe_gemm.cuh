// The routed experts' grouped GEMM: rows grouped by expert (moe_route.cuh::moe_group), each
// expert's weights read once per 16-row tile of its rows (once per forward at decode and
// verify sizes), float32 accumulation in a fixed order (the result does not depend on how
// many rows share the expert). Two forms:
//   plain:  out[r] = x[r] W_e^T                              (down_proj)
//   SwiGLU: out[r] = silu(x[r] W_e^T) * (x[r] U_e^T)         (gate_proj, up_proj fused)
// rounded like the reference (each projection, the silu and the product in the model dtype).
// Host API; kernels in moe_gemm.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernel_status.h"
#include "model_dtype.cuh"
#include "moe_gemm_operands.cuh"

namespace kdtree {

struct MoeGemmParams {
  ModelDType dtype = ModelDType::kF32;  // of x, the weights and out
  int experts = 0;
  int rows = 0;                    // grouped rows (tokens * top_k)
  int n = 0, k = 0;                // out features, in features
  const void* x = nullptr;         // grouped row r reads x row (x_row ? x_row[r] : r)
  int64_t x_stride = 0;
  const int32_t* x_row = nullptr;  // [rows] or null
  const int32_t* offsets = nullptr;  // [experts + 1] expert e owns rows offsets[e] .. offsets[e+1]-1
  const void* w = nullptr;         // [experts, n, k] (nn.Linear layout per expert)
  const void* w_up = nullptr;      // as w, or null; non-null selects the SwiGLU form
  int64_t w_expert_stride = 0;     // elements between experts (>= n * k)
  void* out = nullptr;             // [rows, n] at out + r * out_stride
  int64_t out_stride = 0;
};

// The experts' weights of one projection: expert e's [n, k] at w + e * w_expert_stride.
struct MoeExpertWeights {
  const void* w = nullptr;       // [experts, n, k] (nn.Linear layout per expert)
  const void* w_up = nullptr;    // as w, or null; non-null selects the SwiGLU form
  int64_t w_expert_stride = 0;   // elements between experts (>= n * k)
  int n = 0, k = 0;              // out features, in features
};

// The one place MoeGemmParams are built: `weights` applied to the `in` rows of `rows`, into
// `out`, with x, the weights and out in `dtype` (rows.active_experts and max_rows_per_expert
// are not read).
inline MoeGemmParams make_moe_gemm_params(ModelDType dtype, const MoeRoutedRows& rows, const MoeInputRows& in,
                                          const MoeExpertWeights& weights, const MoeOutputRows& out) {
  MoeGemmParams p;
  p.dtype = dtype;
  set_moe_gemm_operands(p, rows, in, weights, out);
  return p;
}

KernelResult moe_gemm(const MoeGemmParams& p, cudaStream_t stream);

inline KernelResult check_moe_gemm_params(const MoeGemmParams& p) {
  auto s = [](long long v) { return std::to_string(v); };
  if (p.experts < 1 || p.rows < 0 || p.n < 1 || p.k < 1)
    return KernelResult::invalid("moe_gemm: experts, n, k must be >= 1 and rows >= 0");
  if (p.x_stride < p.k || p.out_stride < p.n || p.w_expert_stride < static_cast<int64_t>(p.n) * p.k)
    return KernelResult::invalid("moe_gemm: strides too small for n " + s(p.n) + ", k " + s(p.k));
  if (p.rows > 0 && (!p.x || !p.offsets || !p.w || !p.out))
    return KernelResult::invalid("moe_gemm: x, offsets, w and out must be non-null");
  return KernelResult::success();
}

}  // namespace kdtree
