// The DFlash drafter's forward (python_engine/model/drafter.py): the context extension
// (target features -> fc -> hidden_norm -> each layer's K/V, cached per slot) and the block
// forward (the block [root, mask, ...] attends to the cached context and to itself; the
// target's embedding and lm_head), giving logits for the block's positions 1..block-1.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/caches.h"
#include "engine/gemm.h"
#include "engine/model_config.h"
#include "engine/vocab_head.h"
#include "engine/weights.h"
#include "engine/workspace.h"
#include "kernels/drafter_attn.cuh"

namespace kdtree::engine {

class DrafterModel {
 public:
  DrafterModel(const DrafterDims& dims, const TargetDims& target, const EngineLimits& limits,
               const DeviceWeights& weights, const void* embedding, VocabHead* head, Gemm* gemm);
  int max_draft_rows() const;  // rows one draft call sends through lm_head
  void declare(Workspace* ws);
  void upload_constants(cudaStream_t stream);

  int max_context_rows() const;  // rows one extend call takes (all slots x max_rows)

  // Append ctx_count[b] rows of `features` (row (b, j) at features + (b * max_rows + j) *
  // feat_stride, compute dtype) to slots first_slot.. at positions drafter_len[b] + j, then
  // advance drafter_len and clear ctx_count.
  void extend(int first_slot, int batch, int max_rows, const void* features, int64_t feat_stride,
              const SlotTable& slots, const DrafterCache& cache, cudaStream_t stream);
  // Host float32 features into the extension buffer (kd_draft), returning it.
  void* stage_features() const { return ext_feat_; }

  // The block at positions cache_len[b] + i; logits() then holds [batch * (block-1), V].
  // part: leave this rank's slice of the logits in the vocab head (a split model's round
  // merges its top-K from there) instead of the whole rows in logits()
  void draft(int first_slot, int batch, int block, const SlotTable& slots, const DrafterCache& cache,
             cudaStream_t stream, bool part = false);
  const float* logits() const { return logits_; }
  const DrafterDims& dims() const { return dims_; }

 private:
  struct Layer {
    // q, k, v: rows of one [q | k | v] matrix; gate, up: rows of one [2I, H] matrix (weights.cpp)
    const void *input_norm, *post_norm, *q, *k, *v, *o, *q_norm, *k_norm, *gate, *up, *down;
  };
  // The attention's split-KV partials: the most any draft call (any batch up to the slots,
  // any block up to max_block) needs at a context up to the cache capacity.
  size_t attention_workspace_bytes() const;
  DrafterAttnParams attention_params(int batch, int block) const;
  void norm_rope_heads(void* x, int64_t stride, int rows, int heads, const void* norm_weight,
                       const int32_t* positions, cudaStream_t stream);

  DrafterDims dims_;
  int vocab_;
  EngineLimits limits_;
  Gemm* gemm_;
  ModelDType dt_;
  const void *fc_, *hidden_norm_, *norm_, *embed_;
  VocabHead* head_;
  std::vector<Layer> layers_;
  std::vector<float> inv_freq_host_;
  float* inv_freq_ = nullptr;

  // workspace
  void *ext_feat_ = nullptr, *ext_c_ = nullptr, *ext_kv_ = nullptr;
  int32_t *ext_pos_ = nullptr, *ext_dest_ = nullptr;
  int32_t *blk_tokens_ = nullptr, *blk_pos_ = nullptr, *gather_ = nullptr;
  void *x_ = nullptr, *h_ = nullptr, *qkv_ = nullptr, *attn_ = nullptr, *o_ = nullptr;
  void *gate_up_ = nullptr, *act_ = nullptr, *hs_ = nullptr;
  float* logits_ = nullptr;
  void* attn_workspace_ = nullptr;
  size_t attn_workspace_bytes_ = 0;
};

}  // namespace kdtree::engine
