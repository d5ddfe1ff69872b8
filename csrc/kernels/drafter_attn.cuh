// The DFlash drafter's attention (python_engine/model/drafter.py::draft): the block's q_len
// queries per head attend, with no mask, to the request's cached context keys/values
// [0, ctx_len) and to the block's own q_len keys/values; grouped-query heads (head h reads
// kv head h / (heads / kv_heads)). Float32 scores and online softmax, output rounded once.
// Host API; kernel in drafter_attn.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernel_status.h"
#include "model_dtype.cuh"

namespace kdtree {

constexpr int kDrafterMaxBlock = 64;     // queries per request (the drafter's block size)
constexpr int kDrafterMaxHeadDim = 256;

struct DrafterAttnParams {
  ModelDType dtype = ModelDType::kF32;
  int batch = 0, q_len = 0, heads = 0, kv_heads = 0, head_dim = 0;
  const void* q = nullptr;              // [batch, q_len, heads, head_dim], tokens q_stride apart
  int64_t q_stride = 0;                 // elements between tokens (0: heads * head_dim)
  const void* ctx_k = nullptr;          // request b, key j, kv head g at
  const void* ctx_v = nullptr;          //   ctx + b * ctx_batch_stride + j * kv_heads * head_dim + g * head_dim
  int64_t ctx_batch_stride = 0;
  const int32_t* ctx_len = nullptr;     // [batch] device: context keys of each request
  const void* blk_k = nullptr;          // [batch, q_len, kv_heads, head_dim], tokens blk_stride apart
  const void* blk_v = nullptr;
  int64_t blk_stride = 0;               // elements between tokens (0: kv_heads * head_dim)
  float scale = 0.0f;                   // 1 / sqrt(head_dim)
  void* out = nullptr;                  // [batch, q_len, heads, head_dim]
};

// Dynamic shared memory of one launch (query, output and key/value tiles in float32).
size_t drafter_attn_smem_bytes(int q_len, int head_dim);
KernelResult drafter_attn(const DrafterAttnParams& p, cudaStream_t stream);

inline KernelResult check_drafter_attn_params(const DrafterAttnParams& p) {
  auto s = [](long long v) { return std::to_string(v); };
  if (p.batch < 0) return KernelResult::invalid("drafter_attn: batch must be >= 0");
  if (p.q_len < 1 || p.q_len > kDrafterMaxBlock)
    return KernelResult::over_limit("drafter_attn: block of " + s(p.q_len) + " queries outside 1.." + s(kDrafterMaxBlock));
  if (p.head_dim < 1 || p.head_dim > kDrafterMaxHeadDim)
    return KernelResult::over_limit("drafter_attn: head_dim " + s(p.head_dim) + " outside 1.." + s(kDrafterMaxHeadDim));
  if (p.heads < 1 || p.kv_heads < 1 || p.heads % p.kv_heads)
    return KernelResult::invalid("drafter_attn: heads must be a multiple of kv_heads");
  if (!(p.scale > 0.0f)) return KernelResult::invalid("drafter_attn: scale must be positive");
  if (p.batch > 0 && (!p.q || !p.ctx_k || !p.ctx_v || !p.ctx_len || !p.blk_k || !p.blk_v || !p.out))
    return KernelResult::invalid("drafter_attn: every pointer must be non-null");
  return KernelResult::success();
}

}  // namespace kdtree
