// lm_head, split by vocabulary over the GPUs of a split model: each rank multiplies by its
// rows of lm_head, the parts are gathered and laid side by side, so every rank holds the
// whole float32 logits and the decisions made from them (argmax, sampling, the drafter's
// top-K) are the same everywhere. On one GPU it is the plain product. The target and the
// drafter share it (DFlash drafts through the target's lm_head).
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
  void declare(Workspace* ws, int max_rows);

  // logits[r, 0:V] (leading dimension V) = x[r] @ lm_head^T for `rows` rows of x (leading dimension x_ld)
  void project(int rows, const void* x, int64_t x_ld, float* logits, cudaStream_t stream);
  const void* weight() const { return w_; }

 private:
  TargetDims t_;
  const void* w_;
  ModelDType dt_;
  Gemm* gemm_;
  Collective* comm_;
  int max_rows_ = 0;
  float* part_ = nullptr;      // [rows, local_vocab]
  float* gathered_ = nullptr;  // [world, rows, local_vocab]
};

}  // namespace kdtree::engine
