// The engine: one GPU, the target and (optionally) its drafter, request slots with their
// caches, the workspace, and the requests (continuous batching). api.cpp exposes it as the
// C API of kdtree_engine.h; engine.cpp holds construction and the part-1 forwards,
// requests.cpp the scheduler and rounds.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "engine/caches.h"
#include "engine/collective.h"
#include "engine/decode_round.h"
#include "engine/drafter_model.h"
#include "engine/gemm.h"
#include "engine/kdtree_engine.h"
#include "engine/model_config.h"
#include "engine/target_model.h"
#include "engine/vocab_head.h"
#include "engine/weights.h"
#include "engine/workspace.h"

namespace kdtree::engine {

struct Request {
  int64_t id = 0;
  kd_request_state state = KD_REQ_WAITING;
  int slot = -1;
  std::vector<int32_t> prompt, stop_ids, tokens;  // tokens: the output, kept once finished
  int max_new = 0, budget = 0, block = 0;
  bool ar = false;
  float temperature = 0.0f;
  uint64_t seed = 0;
  int generated = 0, rounds = 0;
  int64_t accepted = 0;
  double prefill_s = 0.0, decode_s = 0.0;
};

class Engine {
 public:
  Engine(const kd_target_config& target, const kd_drafter_config* drafter, const kd_tensor_entry* tensors,
         int n_tensors, const kd_engine_options& options, kd_progress_fn progress, void* progress_user);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  kd_memory_report memory() const { return memory_; }
  int weight_count() const { return static_cast<int>(weight_shapes_.size()); }
  void weight_info(int index, kd_weight_info* out) const;
  Collective* collective() const { return comm_.get(); }
  kd_engine_options options() const;

  // part 1
  void slot_reset(int slot);
  void slot_lengths(int slot, int32_t* target_len, int32_t* drafter_len);
  void prefill(int slot, const int32_t* tokens, int n, float* last_logits, float* hidden);
  void forward(int first_slot, int batch, int tokens_per_slot, const int32_t* tokens, const int32_t* positions,
               const uint32_t* vis, int vis_words, bool commit, float* logits, float* hidden);
  void keep(int slot, const int32_t* accepted, int count);
  void draft(int first_slot, int batch, const float* ctx_features, const int32_t* ctx_count, int max_ctx,
             const int32_t* bonus, int block, float* logits);

  // part 2 (requests.cpp)
  int64_t submit(const kd_request& r);
  void cancel(int64_t id);
  void step(bool want_tree, kd_step_report* report);
  void request_get(int64_t id, kd_request_info* info, int32_t* tokens, int32_t capacity);
  void release(int64_t id);

 private:
  // The memory this engine may use (memory_.limit) from the options and the device.
  void plan_memory_limit(const kd_engine_options& options, uint64_t free_before, uint64_t device_total);
  // Refuses, naming what to lower, when memory_'s weights and caches plus `workspace` exceed it.
  void check_memory_fits(uint64_t workspace) const;
  void check_slot_range(int first, int count, const char* what) const;
  void check_tokens(const int32_t* tokens, int64_t n, const char* what) const;
  int32_t read_field(const int32_t* field, int slot) const;
  void write_field(int32_t* field, int slot, int32_t value) const;
  std::vector<int32_t> read_fields(const int32_t* field, int first, int count) const;
  void upload_inputs(const int32_t* tokens, const int32_t* positions, int rows);
  const uint32_t* causal_vis(int tokens);  // [1, tokens, words] uploaded
  // target forward of `n` tokens of one slot in prefill chunks, committing each; features go
  // to the drafter unless `ar`. Returns with the last token's logits in the target's buffer.
  void prefill_chunks(int slot, const int32_t* tokens, int n, bool feed_drafter, float* hidden);
  void ensure_host_io();
  void copy_features_to_host(int rows, float* hidden);

  // requests.cpp
  void admit(kd_step_report* report);
  void start_request(Request& r, int slot);
  void finish_request(Request& r, kd_request_state state);
  int running_batch() const;
  void run_round(bool tree, bool want_tree, kd_step_report* report);
  int prefix_bound(int needed) const;

  std::unique_ptr<Collective> comm_;  // first: destroyed after everything that runs collectives
  int comm_kind_ = KD_COMM_NONE;
  TargetDims tdims_;
  std::optional<DrafterDims> ddims_;
  EngineLimits limits_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t comm_stream_ = nullptr;  // a split model's all-reduces, overlapping compute
  Gemm gemm_;
  DeviceWeights weights_;
  std::unique_ptr<TargetModel> target_;
  std::unique_ptr<VocabHead> head_;
  std::unique_ptr<DrafterModel> drafter_;
  std::unique_ptr<TargetCache> tcache_;
  std::unique_ptr<DrafterCache> dcache_;
  std::unique_ptr<SlotTable> slots_;
  std::unique_ptr<DecodeRound> round_;
  Workspace ws_;
  kd_memory_report memory_{};
  int32_t load_format_ = KD_LOAD_CHECKPOINT;
  uint64_t dummy_seed_ = 0, memory_limit_ = 0;
  struct WeightShape {
    std::string name;
    std::vector<int64_t> shape;  // as held on this GPU
    uint64_t bytes;
  };
  std::vector<WeightShape> weight_shapes_;  // the weight plan, in order

  // host-driven forward inputs
  int32_t *io_tokens_ = nullptr, *io_positions_ = nullptr, *io_keep_ = nullptr, *io_counts_ = nullptr;
  uint32_t* io_vis_ = nullptr;
  int io_vis_words_ = 0;
  int causal_uploaded_ = -1;  // tokens of the causal mask now in io_vis_ (-1: none)
  DeviceBuffer io_f32_;       // float32 staging for hidden states / host features (allocated on first use)

  // requests
  std::map<int64_t, Request> requests_;
  std::deque<int64_t> waiting_;
  std::vector<int64_t> slot_owner_;  // request id per slot, -1 free
  std::vector<int32_t> slot_len_;    // host mirror of cache_len for running slots
  int64_t next_id_ = 1;
  int sampled_slot_ = -1;
};

}  // namespace kdtree::engine
