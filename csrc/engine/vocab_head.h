// lm_head, split by vocabulary over the GPUs of a split model: each rank multiplies by its
// rows of lm_head, the parts are gathered and laid side by side, so every rank holds the
// whole float32 logits and the decisions made from them (argmax, sampling, the drafter's
// top-K) are the same everywhere. On one GPU it is the plain product. The target and the
// drafter share it (DFlash drafts through the target's lm_head).
//
// Inside a decoding round the whole rows are not needed: project_part keeps each rank's
// slice, and argmax / topk reduce it per row, gather a few numbers from every rank and merge
// them (kernels/vocab_merge.cuh) into what the whole rows give: the greedy choice, and the
// drafter's top-K log-probabilities.
#pragma once

#include <cuda_runtime_api.h>

#include "engine/collective.h"
#include "engine/gemm.h"
#include "engine/model_config.h"
#include "engine/workspace.h"

namespace kdtree::engine {

class VocabHead {
 public:
  // lm_head_part: this rank's rows [vocab_begin, vocab_begin + local_vocab) of lm_head [V, H]
  VocabHead(const TargetDims& t, const void* lm_head_part, ModelDType dtype, Gemm* gemm, Collective* comm)
      : t_(t), w_(lm_head_part), dt_(dtype), gemm_(gemm), comm_(comm) {}
  // max_topk: the largest K the round's drafter top-K asks for
  void declare(Workspace* ws, int max_rows, int max_topk);

  // logits[r, 0:V] (leading dimension V) = x[r] @ lm_head^T for `rows` rows of x (leading dimension x_ld)
  void project(int rows, const void* x, int64_t x_ld, float* logits, cudaStream_t stream);
  const void* weight() const { return w_; }

  // this rank's logits [rows, local_vocab] into part() (on one GPU: the whole rows)
  void project_part(int rows, const void* x, int64_t x_ld, cudaStream_t stream);
  float* part() { return comm_->split() ? part_ : nullptr; }
  int part_vocab() const { return t_.local_vocab(); }  // part()'s row length
  // whether topk(k) can merge: each part must hold k tokens
  bool merges_topk(int k) const { return comm_->split() && k <= t_.local_vocab() && k <= max_topk_; }
  // after project_part on a split model: choice[r] = the whole row r's argmax
  void argmax(int rows, int32_t* choice, cudaStream_t stream);
  // after project_part on a split model (merges_topk(k)): the whole rows' topk_logprobs
  void topk(int rows, int k, float* logp, int32_t* tok, cudaStream_t stream);

 private:
  void check_rows(int rows) const;

  TargetDims t_;
  const void* w_;
  ModelDType dt_;
  Gemm* gemm_;
  Collective* comm_;
  int max_rows_ = 0, max_topk_ = 0;
  float* part_ = nullptr;      // [rows, local_vocab]
  float* gathered_ = nullptr;  // [world, rows, local_vocab]; also the merges' gathered blocks
  void* send_ = nullptr;       // this rank's argmax or top-K block
};

}  // namespace kdtree::engine
