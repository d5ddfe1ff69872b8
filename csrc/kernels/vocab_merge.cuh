// Merging the parts of a vocabulary-split lm_head (engine/vocab_head.h): each rank holds the
// logits of its own vocabulary slice, reduces them to a few numbers per row, and every rank
// merges the gathered numbers into the decisions the whole row would give.
//   - argmax: each part's (largest logit, its global id; lowest id on ties, NaN never wins)
//     -> the row's argmax, exactly the whole row's (tree_accept's greedy rule).
//   - top-K: each part's topk_logprobs winners (their logits and ids) and its log-sum-exp
//     -> the row's K most likely tokens with log-probabilities against the whole row's lse,
//     in topk_logprobs' order (logp descending, lower id first).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "device_compat.cuh"
#include "kernel_status.h"

namespace kdtree {

constexpr int kVocabMaxParts = 8;  // KD_MAX_WORLD

// What each part sends (one all-gather of these blocks, part q's at q * the block's bytes):
//   argmax: value f32 [rows] | id i32 [rows]
//   top-K:  raw f32 [rows, k] | tok i32 [rows, k] | lse f32 pairs [rows, 2] (hi, lo)
KD_HOST_DEVICE inline size_t argmax_part_bytes(int rows) { return static_cast<size_t>(rows) * 8; }
KD_HOST_DEVICE inline size_t topk_part_bytes(int rows, int k) { return static_cast<size_t>(rows) * k * 8 + static_cast<size_t>(rows) * 8; }

struct PartArgmaxParams {
  int rows = 0, cols = 0;          // this part's [rows, cols] logits
  const float* logits = nullptr;
  int64_t stride = 0;
  int id_base = 0;                 // the part's first vocabulary id
  void* out = nullptr;             // argmax block: the largest logit (-inf when only NaN) and its
                                   // global id (INT32_MAX when only NaN), per row
};

struct MergeArgmaxParams {
  int rows = 0, parts = 0;
  const void* gathered = nullptr;  // parts argmax blocks
  int32_t* choice = nullptr;       // [rows] out
};

struct MergeTopkParams {
  int rows = 0, parts = 0, k = 0;  // each part gave k winners per row; the merge keeps k
  int part_vocab = 0;              // ids in part q are local: + q * part_vocab
  const void* gathered = nullptr;  // parts top-K blocks
  float* logp = nullptr;           // [rows, k] out
  int32_t* out_tok = nullptr;      // [rows, k] out
};

KernelResult part_argmax(const PartArgmaxParams& p, cudaStream_t stream);
KernelResult merge_argmax(const MergeArgmaxParams& p, cudaStream_t stream);
KernelResult merge_topk(const MergeTopkParams& p, cudaStream_t stream);

}  // namespace kdtree
