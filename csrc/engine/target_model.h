// The target model's forward over a batch of request slots (python_engine/model/target.py,
// mla.py, moe.py): T new tokens per slot, appended after each slot's committed cache rows,
// every attention through verify_attn (prefix + the new rows under their visibility mask:
// a tree's ancestor mask, or causal for a prefill chunk or an AR step).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/caches.h"
#include "engine/collective.h"
#include "engine/gemm.h"
#include "engine/model_config.h"
#include "engine/vocab_head.h"
#include "engine/weights.h"
#include "engine/workspace.h"

namespace kdtree::engine {

// kPart: every row, this rank's vocabulary slice only, left in the vocab head (a split
// model's round merges its argmax from there)
enum class LogitRows { kNone, kAll, kLastPerSlot, kPart };

struct TargetBatch {
  int first_slot = 0;
  int batch = 0;                       // slots first_slot .. first_slot + batch - 1
  int tokens = 0;                      // T per slot
  const int32_t* token_ids = nullptr;  // [batch * T] device
  const int32_t* positions = nullptr;  // [batch * T] device
  const uint32_t* vis = nullptr;       // [batch, T, vis_words] device
  int vis_words = 0;
  int max_prefix = 0;                  // bound on the slots' committed rows (sizes verify_attn's split)
  LogitRows logits = LogitRows::kAll;
  bool features = false;               // keep the drafter's context features
};

class TargetModel {
 public:
  TargetModel(const TargetDims& dims, const EngineLimits& limits, const std::vector<int>& feature_layers,
              const DeviceWeights& weights, Gemm* gemm, Collective* comm);
  void set_vocab_head(VocabHead* head) { head_ = head; }  // before the first forward
  // A split model's all-reduces run on `stream` (owned by the caller), each overlapping the
  // other half of the batch's compute; null: in line. Creates the events it needs.
  void set_collective_stream(cudaStream_t stream);
  ~TargetModel();
  void declare(Workspace* ws);
  void upload_constants(cudaStream_t stream);  // after the workspace is allocated

  // Writes the new rows into `cache` (uncommitted: the caller advances cache_len) and fills
  // logits() / features(). cache_len: the device array of all slots.
  void forward(const TargetBatch& b, const TargetCache& cache, const int32_t* cache_len, cudaStream_t stream);

  const float* logits() const { return logits_; }  // [rows, V] (kLastPerSlot: [batch, V])
  const void* features() const { return features_; }  // [rows, feature_width()]
  int feature_width() const { return static_cast<int>(feature_layers_.size()) * dims_.hidden; }
  const void* embedding() const { return embed_; }
  const void* lm_head() const { return lm_head_; }  // this rank's rows
  const TargetDims& dims() const { return dims_; }
  // verify_attn workspace the largest forward can need, for the given device (create time)
  size_t attention_workspace_bytes() const;

 private:
  struct Layer {
    const void *input_norm, *post_norm, *q_proj, *q_a, *q_a_norm, *q_b, *kv_a, *kv_a_norm, *kv_b, *o_proj;
    const void *gate, *up, *down;                             // dense layers (gate, up: one [2I, H])
    const float *router, *router_bias;                        // MoE layers
    const void *experts_gate, *experts_up, *experts_down;
    const void *shared_gate, *shared_up, *shared_down;
  };
  // b's rows of hn -> attn_out (this rank's part of o_proj; the caller reduces it)
  void attention(const Layer& w, int layer, const TargetBatch& b, const void* hn, void* attn_out,
                 const TargetCache& cache, const int32_t* cache_len, cudaStream_t stream);
  void dense_ffn(const void* gate_up, const void* down, int inter, int rows, const void* hn, void* out,
                 cudaStream_t stream);
  int64_t proj_width() const;
  bool int4_packed() const { return dims_.experts_int4 && dt_ == ModelDType::kBF16; }  // [q_a | kv_a] or [q | kv_a]: the columns of the first projection
  void moe_ffn(const Layer& w, int rows, const void* hn, void* out, cudaStream_t stream);
  // a forward's slots, split in two halves when collectives overlap compute
  struct Half {
    TargetBatch b;
    int r0 = 0, rows = 0;
  };

  TargetDims dims_;
  EngineLimits limits_;
  std::vector<int> feature_layers_;
  Gemm* gemm_;
  Collective* comm_;
  VocabHead* head_ = nullptr;
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t ready_[2][2] = {}, reduced_[2][2] = {};  // [half][attention, MLP]
  ModelDType dt_;
  const void *embed_, *norm_, *lm_head_;
  std::vector<Layer> layers_;
  const float* inv_freq_ = nullptr;  // device copy of the RoPE frequencies (in the workspace)
  std::vector<float> inv_freq_host_;

  // workspace (rows = limits.forward_rows())
  void *x_ = nullptr, *hn_ = nullptr, *proj_ = nullptr, *q_ = nullptr;
  void *q_lat_ = nullptr, *q_pe_ = nullptr, *o_lat_ = nullptr, *o_ = nullptr, *attn_out_ = nullptr;
  void *gate_up_ = nullptr, *act_ = nullptr, *ffn_out_ = nullptr, *shared_out_ = nullptr;
  float *h32_ = nullptr, *router_logits_ = nullptr, *topk_weights_ = nullptr, *inv_freq_dev_ = nullptr;
  int32_t *topk_ids_ = nullptr, *expert_offsets_ = nullptr, *active_experts_ = nullptr, *row_token_ = nullptr,
          *pair_row_ = nullptr;
  void *expert_act_ = nullptr, *expert_out_ = nullptr;
  uint32_t* moe_slot_sync_ = nullptr;  // MoeW4a16Params::slot_sync of the W4A16 pair
  float* logits_ = nullptr;
  void* features_ = nullptr;
  void* attn_workspace_ = nullptr;
  size_t attn_workspace_bytes_ = 0;
};

}  // namespace kdtree::engine
