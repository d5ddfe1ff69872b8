// One decoding round over request slots 0..batch-1, all on the device (ddtree.md):
//   DDTree: drafter (pending context, then the block) -> topk_logprobs -> tree_build ->
//           target verify over the tree -> choice (argmax / sample) -> tree_accept ->
//           cache_compact -> commit (tokens, lengths, next root, drafter context)
//   AR:     target forward of each slot's last token -> choice -> commit
// The host reads one small report per round. Each round shape is captured once as a CUDA
// graph (after one eager warm-up run) and replayed after that.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "engine/caches.h"
#include "engine/collective.h"
#include "engine/device_memory.h"
#include "engine/drafter_model.h"
#include "engine/target_model.h"
#include "engine/vocab_head.h"
#include "engine/workspace.h"
#include "kernels/round_ops.cuh"
#include "kernels/tree_build.cuh"

namespace kdtree::engine {

struct RoundShape {
  bool tree = true;     // DDTree round, else an AR step
  int batch = 0;        // slots 0 .. batch-1
  int rows = 1;         // tree rows: 1 + the largest budget (AR: 1)
  int block = 1;        // drafter block size (AR: 1)
  int topk = 0;         // K of topk_logprobs: min(rows - 1, vocab)
  int max_prefix = 0;   // bound on the slots' cache rows (verify_attn's split plan)
  bool sample = false;  // some slot has temperature > 0

  auto key() const { return std::tuple(tree, batch, rows, block, topk, max_prefix, sample); }
};

struct RoundTimes {
  float stage_us[4] = {0, 0, 0, 0};  // draft, tree_build, verify, commit (CUDA events)
  bool graph = false;
  int collectives = 0;       // a split model's collectives in the round
  float collective_us = 0;   // their time (inside draft and verify)
};

class DecodeRound {
 public:
  DecodeRound(const EngineLimits& limits, int vocab, TargetModel* target, DrafterModel* drafter, TargetCache* tcache,
              DrafterCache* dcache, SlotTable* slots, Collective* comm, VocabHead* head);
  ~DecodeRound();
  void declare(Workspace* ws);
  void init(cudaStream_t stream);  // events and the pinned report, after allocation

  // Runs one round and waits for it; report() then holds one RoundReport per slot.
  RoundTimes run(const RoundShape& shape, cudaStream_t stream);
  const RoundReport* report() const { return static_cast<const RoundReport*>(host_report_.data()); }

  // The tree of slot b after a DDTree round (copied on request): n, parents, tokens, path.
  struct TreeSample {
    int n = 0, accept_len = 0;
    std::vector<int32_t> parent, token, accepted;
  };
  TreeSample tree_of(int b, const RoundShape& shape, cudaStream_t stream) const;
  void drop_graphs();

 private:
  void body(const RoundShape& s, cudaStream_t stream, bool capturing);
  void tree_body(const RoundShape& s, cudaStream_t stream, bool capturing);
  void ar_body(const RoundShape& s, cudaStream_t stream, bool capturing);
  void record(int i, cudaStream_t stream, bool capturing);
  TreeArrays tree_arrays(int rows) const;  // the workspace's trees at `rows` rows per slot
  // a split model's round reduces the logits per rank and merges (vocab_head.h)
  bool merged_topk(const RoundShape& s) const { return head_->merges_topk(s.topk); }
  bool merged_argmax(const RoundShape& s) const { return comm_->split() && !s.sample; }

  EngineLimits limits_;
  int vocab_;
  TargetModel* target_;
  DrafterModel* drafter_;
  TargetCache* tcache_;
  DrafterCache* dcache_;
  SlotTable* slots_;
  Collective* comm_;
  VocabHead* head_;

  // workspace
  float* logp_ = nullptr;
  int32_t *tok_ = nullptr, *tree_n_ = nullptr, *tree_tokens_ = nullptr, *tree_depth_ = nullptr,
          *tree_parent_ = nullptr, *tree_pos_ = nullptr;
  uint32_t* tree_vis_ = nullptr;
  int32_t *choice_ = nullptr, *accepted_ = nullptr, *accept_len_ = nullptr, *bonus_ = nullptr, *feat_index_ = nullptr;
  void* ctx_feat_ = nullptr;
  int32_t *ar_tokens_ = nullptr, *ar_pos_ = nullptr;
  uint32_t* ones_ = nullptr;  // AR visibility: each row sees itself
  RoundReport* report_ = nullptr;
  PinnedBuffer host_report_;
  int vis_words_ = 0;

  cudaEvent_t events_[5] = {};
  struct Graph {
    int runs = 0;  // eager runs so far; the second sighting is captured
    cudaGraphExec_t exec = nullptr;
    bool failed = false;  // capture did not work: stay eager
    int collectives = 0;  // collectives the captured round times
  };
  std::map<decltype(RoundShape{}.key()), Graph> graphs_;
};

}  // namespace kdtree::engine
