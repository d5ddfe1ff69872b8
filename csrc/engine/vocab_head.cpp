#include "engine/vocab_head.h"

#include <string>

#include "engine/engine_error.h"
#include "kernels/elementwise.cuh"

namespace kdtree::engine {

void VocabHead::declare(Workspace* ws, int max_rows) {
  max_rows_ = max_rows;
  if (!comm_->split()) return;
  const size_t part = static_cast<size_t>(max_rows) * t_.local_vocab() * sizeof(float);
  ws->declare(&part_, part);
  ws->declare(&gathered_, part * t_.world);
}

void VocabHead::project(int rows, const void* x, int64_t x_ld, float* logits, cudaStream_t stream) {
  if (rows > max_rows_) fail(KD_INTERNAL, "lm_head over " + std::to_string(rows) + " rows, sized for " + std::to_string(max_rows_));
  const Matrix xm{x, x_ld, dt_}, wm{w_, t_.hidden, dt_};
  if (!comm_->split()) {
    gemm_->linear(rows, t_.vocab, t_.hidden, xm, wm, MatrixOut{logits, t_.vocab, ModelDType::kF32});
    return;
  }
  const int Vl = t_.local_vocab();
  gemm_->linear(rows, Vl, t_.hidden, xm, wm, MatrixOut{part_, Vl, ModelDType::kF32});
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
