// The MLA latent cache write of a forward: for every new token (b, t), the kv_a projection's
// output [c (kv_lora) | k_pe (rope)] becomes one cache row
//   row[0, kv_lora)       = kv_a_layernorm(c)          (python_engine/model/mla.py)
//   row[512, 512 + rope)  = RoPE(k_pe) at the token's position
// written at row cache_len[b] + t of slot b. Rows are kVerifyQKDim (576) wide whatever the
// model's widths, the layout verify_attn reads; a model with kv_lora < 512 or rope < 64
// keeps zeros in the padding (the cache is zeroed once), which adds exactly nothing to the
// attention scores and outputs. Host API; kernel in mla_cache.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernel_status.h"
#include "model_dtype.cuh"
#include "verify_attn.cuh"

namespace kdtree {

struct MlaCacheWriteParams {
  ModelDType dtype = ModelDType::kF32;  // of kv_a, norm_weight and the cache
  int batch = 0, tokens = 0;            // new rows (b, t), b-major
  int kv_lora = 0, rope_dim = 0;        // <= kVerifyLatentDim, <= kVerifyRopeDim
  const void* kv_a = nullptr;           // row (b, t) at kv_a + (b * tokens + t) * kv_a_stride
  int64_t kv_a_stride = 0;
  const void* norm_weight = nullptr;    // [kv_lora] kv_a_layernorm.weight
  float eps = 0.0f;
  const int32_t* positions = nullptr;   // [batch * tokens]
  const float* inv_freq = nullptr;      // [rope_dim / 2]
  float attention_factor = 1.0f;
  bool interleave = false;
  void* cache = nullptr;                // slot b's rows at cache + b * batch_stride
  int64_t row_stride = kVerifyQKDim;    // elements between rows
  int64_t batch_stride = 0;             // elements between slots
  const int32_t* cache_len = nullptr;   // [batch] device: row (b, t) goes to cache_len[b] + t
  int capacity = 0;                     // rows per slot; a row past it is not written
};

KernelResult mla_cache_write(const MlaCacheWriteParams& p, cudaStream_t stream);

inline KernelResult check_mla_cache_write_params(const MlaCacheWriteParams& p) {
  auto s = [](long long v) { return std::to_string(v); };
  if (p.batch < 0 || p.tokens < 0) return KernelResult::invalid("mla_cache_write: batch and tokens must be >= 0");
  if (p.kv_lora <= 0 || p.kv_lora > kVerifyLatentDim)
    return KernelResult::over_limit("mla_cache_write: kv_lora_rank " + s(p.kv_lora) + " outside 1.." +
                                    s(kVerifyLatentDim) + " (the latent cache row)");
  if (p.rope_dim <= 0 || p.rope_dim % 2 || p.rope_dim > kVerifyRopeDim)
    return KernelResult::over_limit("mla_cache_write: qk_rope_head_dim " + s(p.rope_dim) + " must be even, <= " +
                                    s(kVerifyRopeDim));
  if (p.kv_a_stride < p.kv_lora + p.rope_dim) return KernelResult::invalid("mla_cache_write: kv_a_stride too small");
  if (p.row_stride < kVerifyQKDim) return KernelResult::invalid("mla_cache_write: row_stride < 576");
  if (!(p.eps > 0.0f)) return KernelResult::invalid("mla_cache_write: eps must be positive");
  if (p.batch * p.tokens > 0 &&
      (!p.kv_a || !p.norm_weight || !p.positions || !p.inv_freq || !p.cache || !p.cache_len))
    return KernelResult::invalid("mla_cache_write: kv_a, norm_weight, positions, inv_freq, cache and cache_len "
                                 "must be non-null");
  return KernelResult::success();
}

}  // namespace kdtree
