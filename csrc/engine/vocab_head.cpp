#include "engine/vocab_head.h"

#include <algorithm>
#include <string>

#include "engine/engine_error.h"
#include "kernels/elementwise.cuh"
#include "kernels/tree_build.cuh"
#include "kernels/vocab_merge.cuh"

namespace kdtree::engine {

void VocabHead::declare(Workspace* ws, int max_rows, int max_topk) {
  max_rows_ = max_rows;
  max_topk_ = max_topk;
  if (!comm_->split()) return;
  const size_t part = static_cast<size_t>(max_rows) * t_.local_vocab() * sizeof(float);
  const size_t block = std::max(argmax_part_bytes(max_rows), max_topk > 0 ? topk_part_bytes(max_rows, max_topk) : 0);
  ws->declare(&part_, part);
  ws->declare(&gathered_, std::max(part, block) * t_.world);
  ws->declare(&send_, block);
}

void VocabHead::check_rows(int rows) const {
  if (rows > max_rows_) fail(KD_INTERNAL, "lm_head over " + std::to_string(rows) + " rows, sized for " + std::to_string(max_rows_));
}

void VocabHead::project_part(int rows, const void* x, int64_t x_ld, cudaStream_t stream) {
  check_rows(rows);
  if (!comm_->split()) fail(KD_INTERNAL, "project_part on one GPU");
  const int Vl = t_.local_vocab();
  gemm_->linear(rows, Vl, t_.hidden, Matrix{x, x_ld, dt_}, Matrix{w_, t_.hidden, dt_}, MatrixOut{part_, Vl, ModelDType::kF32});
}

void VocabHead::argmax(int rows, int32_t* choice, cudaStream_t stream) {
  PartArgmaxParams a;
  a.rows = rows;
  a.cols = t_.local_vocab();
  a.logits = part_;
  a.stride = t_.local_vocab();
  a.id_base = t_.vocab_begin();
  a.out = send_;
  check_kernel(part_argmax(a, stream));
  comm_->all_gather(send_, gathered_, argmax_part_bytes(rows), stream);
  MergeArgmaxParams m;
  m.rows = rows;
  m.parts = t_.world;
  m.gathered = gathered_;
  m.choice = choice;
  check_kernel(merge_argmax(m, stream));
}

void VocabHead::topk(int rows, int k, float* logp, int32_t* tok, cudaStream_t stream) {
  if (!merges_topk(k)) fail(KD_INTERNAL, "top-K " + std::to_string(k) + " cannot be merged from the parts");
  char* block = static_cast<char*>(send_);
  const size_t kk = static_cast<size_t>(rows) * k;
  TopkLogits part;  // this part's logits
  part.rows = rows;
  part.vocab = t_.local_vocab();
  part.logits = part_;
  TopkRows winners;  // its winners, with their logits and the part's lse
  winners.k = k;
  winners.logp = gathered_;  // scratch: the part's own log-probabilities are not used
  winners.tok = reinterpret_cast<int32_t*>(block + kk * 4);
  TopkPartOutputs sent;
  sent.raw = reinterpret_cast<float*>(block);
  sent.lse = reinterpret_cast<float*>(block + kk * 8);
  check_kernel(topk_logprobs(make_topk_logprobs_params(part, winners, sent), stream));
  comm_->all_gather(send_, gathered_, topk_part_bytes(rows, k), stream);
  MergeTopkParams m;
  m.rows = rows;
  m.parts = t_.world;
  m.k = k;
  m.part_vocab = t_.local_vocab();
  m.gathered = gathered_;
  m.logp = logp;
  m.out_tok = tok;
  check_kernel(merge_topk(m, stream));
}

void VocabHead::project(int rows, const void* x, int64_t x_ld, float* logits, cudaStream_t stream) {
  if (!comm_->split()) {
    check_rows(rows);
    gemm_->linear(rows, t_.vocab, t_.hidden, Matrix{x, x_ld, dt_}, Matrix{w_, t_.hidden, dt_},
                  MatrixOut{logits, t_.vocab, ModelDType::kF32});
    return;
  }
  project_part(rows, x, x_ld, stream);
  const int Vl = t_.local_vocab();
  comm_->all_gather(part_, gathered_, static_cast<size_t>(rows) * Vl * sizeof(float), stream);
  for (int q = 0; q < t_.world; ++q) {  // rank q's [rows, Vl] block -> columns q*Vl .. of every row
    CopyRowsParams c;
    c.rows = rows;
    c.cols = Vl;
    c.in = gathered_ + static_cast<int64_t>(q) * rows * Vl;
    c.in_stride = Vl;
    c.out = logits + static_cast<int64_t>(q) * Vl;
    c.out_stride = t_.vocab;
    check_kernel(copy_rows(c, stream));
  }
}

}  // namespace kdtree::engine
