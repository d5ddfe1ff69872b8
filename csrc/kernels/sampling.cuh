// The target's choice of token at each verified position (python_engine/decode/choice.py):
// greedy argmax (lowest id on ties) when the request's temperature is 0, else one
// independent sample from softmax(logits / T) per row, drawn on the device by the
// Gumbel-max rule: argmax_v (logits_v / T - log(-log u_v)), u_v uniform in (0, 1) from
// Philox4x32-10 keyed by the request's seed and countered by (vocab block, row, draw).
// The draws of a request depend only on its own seed and draw counter, never on the batch
// it runs in. Host API; kernels in sampling.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernel_status.h"

namespace kdtree {

struct ChooseTokensParams {
  int batch = 0;                        // requests
  int rows = 0;                         // rows per request
  int vocab = 0;
  const float* logits = nullptr;        // [batch, rows, vocab] float32
  int64_t row_stride = 0;               // elements between rows (>= vocab)
  const float* temperature = nullptr;   // [batch] <= 0: greedy
  const uint64_t* seed = nullptr;       // [batch] request seeds (null: greedy for all)
  const uint64_t* draw = nullptr;       // [batch] draw counter of this call (e.g. round or position)
  int32_t* out = nullptr;               // [batch, rows]
};

KernelResult choose_tokens(const ChooseTokensParams& p, cudaStream_t stream);

// Philox4x32-10 (Salmon et al., SC'11): the counter-based generator the draws use; exposed
// for the known-answer test.
void philox4x32_10_host(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

inline KernelResult check_choose_tokens_params(const ChooseTokensParams& p) {
  if (p.batch < 0 || p.rows < 0) return KernelResult::invalid("choose_tokens: batch and rows must be >= 0");
  if (p.vocab < 1) return KernelResult::invalid("choose_tokens: vocab must be >= 1");
  if (p.row_stride < p.vocab) return KernelResult::invalid("choose_tokens: row_stride < vocab");
  if (p.batch * p.rows > 0 && (!p.logits || !p.temperature || !p.out))
    return KernelResult::invalid("choose_tokens: logits, temperature and out must be non-null");
  return KernelResult::success();
}

}  // namespace kdtree
