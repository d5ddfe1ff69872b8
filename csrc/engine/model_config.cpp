#include "engine/model_config.h"

#include <algorithm>
#include <cmath>

#include "engine/engine_error.h"
#include "kernels/drafter_attn.cuh"
#include "kernels/moe_gemm_w4a16.cuh"
#include "kernels/moe_route.cuh"
#include "kernels/tree_build.cuh"
#include "kernels/verify_attn.cuh"

namespace kdtree::engine {
namespace {

constexpr int kDefaultPrefillChunk = 256;  // prompt tokens per forward: a causal "tree" of 256 rows
constexpr int kDefaultLoadThreads = 4;     // files read at once; NVMe and page cache both like a few
constexpr int kMaxLoadThreads = 64;
constexpr int kInt4GroupSize = kW4GroupSize;  // compressed-tensors group_size of the INT4 experts

void need(bool ok, const std::string& what) {
  if (!ok) fail(KD_INVALID_ARGUMENT, what);
}

void positive(const char* where, const char* name, long long v) {
  need(v >= 1, std::string(where) + ": " + name + " must be >= 1, got " + std::to_string(v));
}

void positive_finite(const char* where, const char* name, float v) {
  need(std::isfinite(v) && v > 0.0f, std::string(where) + ": " + name + " must be a positive number, got " +
                                         std::to_string(v));
}

std::vector<float> inv_freq(const char* where, const float* src, int n) {
  need(src != nullptr, std::string(where) + ": rope_inv_freq is missing");
  std::vector<float> out(src, src + n);
  for (float f : out) need(std::isfinite(f) && f > 0.0f, std::string(where) + ": rope_inv_freq holds a non-positive or non-finite value");
  return out;
}

}  // namespace

int EngineLimits::forward_rows() const { return std::max(slots * std::max(tree_rows(), 1), prefill_chunk); }

int EngineLimits::cache_capacity() const { return max_tokens + std::max(tree_rows(), max_block) + 1; }

TargetDims check_target_config(const kd_target_config& c) {
  const char* w = "target config";
  TargetDims t;
  t.vocab = c.vocab_size;
  t.hidden = c.hidden_size;
  t.dense_inter = c.intermediate_size;
  t.moe_inter = c.moe_intermediate_size;
  t.layers = c.num_layers;
  t.heads = c.num_heads;
  t.q_lora = c.q_lora_rank;
  t.kv_lora = c.kv_lora_rank;
  t.nope = c.qk_nope_dim;
  t.rope = c.qk_rope_dim;
  t.v_head = c.v_head_dim;
  t.experts = c.n_routed_experts;
  t.shared_experts = c.n_shared_experts;
  t.topk = c.experts_per_token;
  t.n_group = c.n_group;
  t.topk_group = c.topk_group;
  t.first_dense = c.first_dense_layers;
  t.norm_topk = c.norm_topk_prob != 0;
  t.rope_interleave = c.rope_interleave != 0;
  t.tie_embeddings = c.tie_word_embeddings != 0;
  t.experts_int4 = c.experts_int4 != 0;
  t.scaling = c.routed_scaling_factor;
  t.eps = c.rms_norm_eps;
  t.latent_eps = c.latent_norm_eps;
  t.softmax_scale = c.softmax_scale;
  t.rope_factor = c.rope_attention_factor;
  for (auto [name, v] : {std::pair{"vocab_size", t.vocab}, {"hidden_size", t.hidden}, {"num_hidden_layers", t.layers},
                         {"num_attention_heads", t.heads}, {"kv_lora_rank", t.kv_lora},
                         {"qk_nope_head_dim", t.nope}, {"qk_rope_head_dim", t.rope}, {"v_head_dim", t.v_head}})
    positive(w, name, v);
  need(t.q_lora >= 0, std::string(w) + ": q_lora_rank must be >= 0 (0: none)");
  need(t.kv_lora <= kVerifyLatentDim, std::string(w) + ": kv_lora_rank " + std::to_string(t.kv_lora) +
                                          " is over the engine's latent cache width " + std::to_string(kVerifyLatentDim));
  need(t.rope % 2 == 0 && t.rope <= kVerifyRopeDim,
       std::string(w) + ": qk_rope_head_dim " + std::to_string(t.rope) + " must be even and <= " +
           std::to_string(kVerifyRopeDim));
  need(t.heads <= kVerifyMaxHeads, std::string(w) + ": num_attention_heads over " + std::to_string(kVerifyMaxHeads));
  need(t.first_dense >= 0, std::string(w) + ": first_k_dense_replace must be >= 0");
  if (t.first_dense > 0) positive(w, "intermediate_size", t.dense_inter);
  if (t.has_moe()) {
    positive(w, "moe_intermediate_size", t.moe_inter);
    need(t.experts >= 2 && t.experts <= kMoeMaxExperts,
         std::string(w) + ": n_routed_experts " + std::to_string(t.experts) + " outside 2.." + std::to_string(kMoeMaxExperts));
    need(t.n_group >= 1 && t.n_group <= kMoeMaxGroups && t.experts % t.n_group == 0,
         std::string(w) + ": n_group must divide n_routed_experts and be <= " + std::to_string(kMoeMaxGroups));
    need(t.topk_group >= 1 && t.topk_group <= t.n_group, std::string(w) + ": topk_group outside 1..n_group");
    need(t.topk >= 1 && t.topk <= kMoeMaxTopk && t.topk <= t.topk_group * (t.experts / t.n_group),
         std::string(w) + ": num_experts_per_tok must be in 1.." + std::to_string(kMoeMaxTopk) +
             " and fit in topk_group groups");
    need(t.shared_experts >= 0, std::string(w) + ": n_shared_experts must be >= 0");
    positive_finite(w, "routed_scaling_factor", t.scaling);
    if (t.experts_int4)
      need(t.hidden % kInt4GroupSize == 0 && t.moe_inter % kInt4GroupSize == 0,
           std::string(w) + ": INT4 experts need hidden_size and moe_intermediate_size divisible by the group size " +
               std::to_string(kInt4GroupSize));
  }
  positive_finite(w, "rms_norm_eps", t.eps);
  positive_finite(w, "latent_norm_eps", t.latent_eps);
  positive_finite(w, "softmax_scale", t.softmax_scale);
  positive_finite(w, "rope_attention_factor", t.rope_factor);
  t.rope_inv_freq = inv_freq(w, c.rope_inv_freq, t.rope / 2);
  return t;
}

void split_target(TargetDims* t, int rank, int world) {
  t->rank = rank;
  t->world = world;
  if (world == 1) return;
  auto divides = [&](const char* what, int n) {
    need(n % world == 0, "a model split over " + std::to_string(world) + " GPUs needs " + what + " (" +
                             std::to_string(n) + ") divisible by " + std::to_string(world));
  };
  divides("num_attention_heads", t->heads);
  divides("vocab_size", t->vocab);
  if (t->first_dense > 0) divides("intermediate_size", t->dense_inter);
  if (t->has_moe()) {
    divides("n_routed_experts", t->experts);
    if (t->shared_experts > 0) divides("moe_intermediate_size * n_shared_experts", t->shared_inter());
  }
}

DrafterDims check_drafter_config(const kd_drafter_config& c, const TargetDims& target) {
  const char* w = "drafter config";
  DrafterDims d;
  d.hidden = c.hidden_size;
  d.layers = c.num_layers;
  d.heads = c.num_heads;
  d.kv_heads = c.num_kv_heads;
  d.head_dim = c.head_dim;
  d.inter = c.intermediate_size;
  d.block_size = c.block_size;
  d.mask_token = c.mask_token_id;
  d.eps = c.rms_norm_eps;
  d.embed_scale = c.input_embedding_scale;
  d.output_multiplier = c.output_multiplier;
  d.softcap = c.final_logit_softcapping;
  d.rope_factor = c.rope_attention_factor;
  for (auto [name, v] : {std::pair{"hidden_size", d.hidden}, {"num_hidden_layers", d.layers},
                         {"num_attention_heads", d.heads}, {"num_key_value_heads", d.kv_heads},
                         {"head_dim", d.head_dim}, {"intermediate_size", d.inter}, {"block_size", d.block_size}})
    positive(w, name, v);
  need(d.hidden == target.hidden, std::string(w) + ": hidden_size " + std::to_string(d.hidden) +
                                      " differs from the target's " + std::to_string(target.hidden));
  need(d.heads % d.kv_heads == 0, std::string(w) + ": num_attention_heads must be a multiple of num_key_value_heads");
  need(d.head_dim % 2 == 0 && d.head_dim <= kDrafterMaxHeadDim,
       std::string(w) + ": head_dim must be even and <= " + std::to_string(kDrafterMaxHeadDim));
  need(d.block_size >= 2 && d.block_size <= kTreeMaxDepth + 1,
       std::string(w) + ": block_size " + std::to_string(d.block_size) + " outside 2.." + std::to_string(kTreeMaxDepth + 1));
  need(d.mask_token >= 0 && d.mask_token < target.vocab, std::string(w) + ": mask_token_id outside the target's vocabulary");
  need(c.n_target_layers >= 1 && c.n_target_layers <= KD_MAX_TARGET_LAYER_IDS,
       std::string(w) + ": 1.." + std::to_string(KD_MAX_TARGET_LAYER_IDS) + " target_layer_ids required");
  for (int i = 0; i < c.n_target_layers; ++i) {
    const int id = c.target_layer_ids[i];
    need(id >= 0 && id < target.layers, std::string(w) + ": target_layer_ids holds " + std::to_string(id) +
                                            ", outside the target's layers 0.." + std::to_string(target.layers - 1));
    d.target_layers.push_back(id);
  }
  positive_finite(w, "rms_norm_eps", d.eps);
  positive_finite(w, "input_embedding_scale", d.embed_scale);
  positive_finite(w, "output_multiplier", d.output_multiplier);
  need(std::isfinite(d.softcap) && d.softcap >= 0.0f, std::string(w) + ": final_logit_softcapping must be >= 0");
  positive_finite(w, "rope_attention_factor", d.rope_factor);
  d.rope_inv_freq = inv_freq(w, c.rope_inv_freq, d.head_dim / 2);
  return d;
}

EngineLimits check_options(const kd_engine_options& o, const DrafterDims* drafter) {
  const char* w = "engine options";
  need(o.abi_version == KD_ENGINE_ABI, std::string(w) + ": built for ABI " + std::to_string(o.abi_version) +
                                           ", this library is ABI " + std::to_string(KD_ENGINE_ABI) +
                                           " (rebuild with `kdtree build`)");
  EngineLimits l;
  need(o.dtype == KD_F32 || o.dtype == KD_BF16, std::string(w) + ": dtype must be float32 or bfloat16");
  l.dtype = o.dtype == KD_F32 ? ModelDType::kF32 : ModelDType::kBF16;
  l.device = o.device;
  need(l.device >= 0, std::string(w) + ": device must be >= 0");
  need(o.max_slots >= 1 && o.max_slots <= KD_MAX_BATCH,
       std::string(w) + ": max_slots " + std::to_string(o.max_slots) + " outside 1.." + std::to_string(KD_MAX_BATCH));
  l.slots = o.max_slots;
  positive(w, "max_tokens", o.max_tokens);
  l.max_tokens = o.max_tokens;
  need(o.max_budget >= 0 && o.max_budget <= kTreeMaxNodes,
       std::string(w) + ": max_budget " + std::to_string(o.max_budget) + " outside 0.." + std::to_string(kTreeMaxNodes));
  l.max_budget = drafter ? o.max_budget : 0;
  const int block = o.max_block_size > 0 ? o.max_block_size : (drafter ? drafter->block_size : 1);
  need(block >= 1 && block <= kTreeMaxDepth + 1 && block <= kDrafterMaxBlock,
       std::string(w) + ": max_block_size " + std::to_string(block) + " outside 1.." + std::to_string(kTreeMaxDepth + 1));
  l.max_block = drafter ? std::max(block, 2) : 1;
  l.prefill_chunk = o.prefill_chunk > 0 ? o.prefill_chunk : kDefaultPrefillChunk;
  need(l.prefill_chunk <= kVerifyMaxTreeLen,
       std::string(w) + ": prefill_chunk over " + std::to_string(kVerifyMaxTreeLen) + " (one verify_attn tree)");
  l.load_threads = o.load_threads > 0 ? std::min(o.load_threads, kMaxLoadThreads) : kDefaultLoadThreads;
  l.graphs = o.use_graphs != 0;
  const long long capacity = static_cast<long long>(l.max_tokens) + std::max(l.tree_rows(), l.max_block) + 1;
  need(capacity + l.max_tokens < kVerifyMaxKeys, std::string(w) + ": max_tokens too large");
  return l;
}

}  // namespace kdtree::engine
