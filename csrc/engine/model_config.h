// The engine's view of the models and its own limits: the C API's config structs, checked
// once at create time (every bad value is a KD_INVALID_ARGUMENT naming the field), then
// passed whole to the parts that need them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/kdtree_engine.h"
#include "kernels/model_dtype.cuh"

namespace kdtree::engine {

struct TargetDims {
  int vocab = 0, hidden = 0, dense_inter = 0, moe_inter = 0, layers = 0, heads = 0;
  int q_lora = 0;  // 0: q_proj
  int kv_lora = 0, nope = 0, rope = 0, v_head = 0;
  int experts = 0, shared_experts = 0, topk = 0, n_group = 1, topk_group = 1, first_dense = 0;
  bool norm_topk = true, rope_interleave = true, tie_embeddings = false;
  bool experts_int4 = false;  // routed experts stored INT4 (W4A16); kept packed in bf16 mode
  float scaling = 1.0f, eps = 1e-6f, latent_eps = 1e-6f, softmax_scale = 0.0f, rope_factor = 1.0f;
  std::vector<float> rope_inv_freq;

  // This engine's part of a model split over `world` GPUs: attention heads, the dense and
  // shared MLPs' intermediate columns, routed experts and lm_head rows (vocabulary) are
  // divided evenly (split_target checks they divide); everything else is replicated.
  int rank = 0, world = 1;

  int qk() const { return nope + rope; }
  bool moe_layer(int i) const { return i >= first_dense; }
  bool has_moe() const { return first_dense < layers; }
  int local_heads() const { return heads / world; }
  int head_begin() const { return rank * local_heads(); }
  int local_dense_inter() const { return dense_inter / world; }
  int shared_inter() const { return moe_inter * shared_experts; }
  int local_shared_inter() const { return shared_inter() / world; }
  int local_experts() const { return experts / world; }
  int expert_begin() const { return rank * local_experts(); }
  int local_vocab() const { return vocab / world; }
  int vocab_begin() const { return rank * local_vocab(); }
};

struct DrafterDims {
  int hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, inter = 0;
  int block_size = 0, mask_token = 0;
  std::vector<int> target_layers;
  float eps = 1e-6f, embed_scale = 1.0f, output_multiplier = 1.0f, softcap = 0.0f, rope_factor = 1.0f;
  std::vector<float> rope_inv_freq;

  int features() const { return static_cast<int>(target_layers.size()) * hidden; }  // context row width
};

struct EngineLimits {
  ModelDType dtype = ModelDType::kBF16;
  int device = 0;
  int slots = 1;
  int max_tokens = 0;       // prompt + generated, per request
  int max_budget = 0;       // node budget
  int max_block = 1;        // drafter block size (1: no drafter)
  int prefill_chunk = 256;
  int load_threads = 4;
  bool graphs = true;

  int tree_rows() const { return max_budget + 1; }  // root + nodes
  int max_path() const { return max_block; }        // accepted path, root included (<= D + 1)
  // rows of the largest forward: a tree or an AR step over every slot, or a prefill chunk
  int forward_rows() const;
  // rows per slot of the target cache: the committed tokens plus an uncommitted tree
  int cache_capacity() const;
};

TargetDims check_target_config(const kd_target_config& c);
// Sets t's part (rank of world), checking every split dimension divides evenly.
void split_target(TargetDims* t, int rank, int world);
DrafterDims check_drafter_config(const kd_drafter_config& c, const TargetDims& target);
EngineLimits check_options(const kd_engine_options& o, const DrafterDims* drafter);

}  // namespace kdtree::engine
