// tree_build: the DDTree draft tree of every request on the device (docs/ddtree.md).
//
// One block per request selects the first N rank paths of the total order (score
// descending, rank path ascending) by a parallel threshold search, then emits the nodes in
// that order with their tokens, depths, parents, scores, positions and bit-packed
// visibility rows; bit-exact with python_engine/ddtree (scores summed in float32 in depth
// order). Optional first stage: top-K + log-softmax of the drafter's logits on the device.
//
// This header is the host API (no device code): include it from .cpp or .cu files.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernel_status.h"

namespace kdtree {

constexpr int kTreeMaxNodes = 1024;  // largest node budget N (nodes besides the root)
constexpr int kTreeMaxDepth = 32;    // largest D (drafter positions, = block_size - 1)
constexpr int kTreeMaxVocab = 1 << 30;  // top-K indices and counts stay in int32

// Inputs are per-depth top-K arrays (from the reference or from topk_logprobs below).
struct TreeBuildParams {
  int batch = 0;                        // B requests, one block each
  int depth = 0;                        // D rows per request, 0..kTreeMaxDepth
  int topk = 0;                         // K columns per row (>= min(budget, vocab) of every request)
  int max_budget = 0;                   // host-known bound on budget[b], 0..kTreeMaxNodes
  const float* logp = nullptr;          // [B, D, K] log-probabilities (<= 0), rows descending
  const int32_t* tok = nullptr;         // [B, D, K] token ids of those columns
  const int32_t* budget = nullptr;      // [B] node budget per request; outside [0, max_budget] -> n = -1
  const int32_t* root_token = nullptr;  // [B] token of node 0 (the previous bonus token); null -> -1
  const int32_t* start_pos = nullptr;   // [B] sequence position of the root; null -> no positions
  int max_nodes = 0;                    // output rows per request minus one (>= max_budget)
  int vis_words = 0;                    // uint32 words per visibility row (>= ceil((max_nodes+1)/32))
  int32_t* n_out = nullptr;             // [B] node count n (root excluded); -1 for a bad budget
  int32_t* tokens = nullptr;            // [B, max_nodes+1] tokens[0] = root token; -1 past n
  int32_t* depth_out = nullptr;         // [B, max_nodes+1] depth (root 0); -1 past n
  int32_t* parent = nullptr;            // [B, max_nodes+1] parent index < own index; parent[0] = -1
  int32_t* positions = nullptr;         // [B, max_nodes+1] start_pos + depth, or null; -1 past n
  float* score = nullptr;               // [B, max_nodes+1] path score (root 0), or null; 0 past n
  uint32_t* vis = nullptr;              // [B, max_nodes+1, vis_words]: bit j of row i = j is i or
                                        //   an ancestor of i (word j/32, bit j%32); zero past n
};

// The scans topk_logprobs can run (TopkLogprobsParams::variant, bench `variant=`): topk2's
// (12a33d4) and the lean one (topk_logprobs_kernels.cuh); the same outputs bit for bit, both
// kept for A/B timing.
enum TopkScanVariant : int { kTopkScan2 = 0, kTopkScanLean = 1, kTopkScanVariants = 2 };

// Per-depth top-K of log_softmax(logits), sorted by (log-probability descending, token id
// ascending). logp = float32(x - lse) rounded once, as the reference does
// (python_engine/ddtree/topk.py, lse in float64), with the lse formed in float pairs (~48 bits,
// no float64: float_pair.cuh), so the arrays match it bit for bit but for ~1 rounding in 10^8.
struct TopkLogprobsParams {
  int rows = 0;                  // R = B * D rows of logits
  int vocab = 0;                 // V
  int k = 0;                     // K columns to produce, 1..min(kTreeMaxNodes, V)
  const float* logits = nullptr; // [R, V], finite or -inf (not all -inf), no NaN
  float* logp = nullptr;         // [R, K] out
  int32_t* tok = nullptr;        // [R, K] out
  // A vocabulary-split lm_head's part (vocab_merge.cuh) also needs, or null:
  float* raw = nullptr;          // [R, K] out: each winner's logit
  float* lse = nullptr;          // [R, 2] out: the row's log-sum-exp as the pair hi + lo logp is formed against
  int force_exact_compaction = 0;  // tests and bench: 1 the scan's compactions keep exactly K
  int variant = -1;                // tests and bench: the scan (TopkScanVariant); -1 the default
                                   //   (kern::kTopkDefaultVariant)
};

// The groups of arguments the launch parameters are built from (make_*_params below), so
// that every caller names what it passes and two arrays of one type cannot trade places.

// Rows of logits, [rows, vocab] row-major: topk_logprobs' input.
struct TopkLogits {
  int rows = 0;                   // R
  int vocab = 0;                  // V
  const float* logits = nullptr;  // [R, V]
};

// Top-K rows, [R, K]: topk_logprobs writes them; tree_build reads them as [B, D, K].
struct TopkRows {
  int k = 0;                // K columns per row
  float* logp = nullptr;    // [R, K] log-probabilities, rows descending
  int32_t* tok = nullptr;   // [R, K] their token ids
};

// What a vocabulary-split lm_head's part also takes from topk_logprobs (vocab_merge.cuh).
struct TopkPartOutputs {
  float* raw = nullptr;  // [R, K] each winner's logit
  float* lse = nullptr;  // [R, 2] the row's log-sum-exp as a float pair
};

// The requests of one tree_build launch (device arrays of B entries).
struct TreeRequests {
  int batch = 0;                        // B requests
  int depth = 0;                        // D top-K rows per request (drafted positions)
  int max_budget = 0;                   // host-known bound on budget[b]
  const int32_t* budget = nullptr;      // [B] node budget per request
  const int32_t* root_token = nullptr;  // [B] token of node 0, or null (-1)
  const int32_t* start_pos = nullptr;   // [B] sequence position of the root, or null (no positions)
};

// B draft trees of `rows` rows each (node 0 the root): tree_build writes them, tree_accept
// (tree_accept.cuh) and the decode round read them.
struct TreeArrays {
  int rows = 0;                    // rows per request: the largest node count + 1
  int vis_words = 0;               // uint32 words per visibility row (>= ceil(rows / 32))
  int32_t* n = nullptr;            // [B] node count (root excluded)
  int32_t* tokens = nullptr;       // [B, rows]
  int32_t* depth = nullptr;        // [B, rows]
  int32_t* parent = nullptr;       // [B, rows]
  int32_t* positions = nullptr;    // [B, rows], or null
  float* score = nullptr;          // [B, rows], or null
  uint32_t* vis = nullptr;         // [B, rows, vis_words]
};

// The one place TopkLogprobsParams are built: the top K of every row of `logits` into `out`
// (plus a vocabulary part's raw logits and lse when `part` names them). The test hooks
// (force_exact_compaction, variant) keep their defaults.
inline TopkLogprobsParams make_topk_logprobs_params(const TopkLogits& logits, const TopkRows& out,
                                                    const TopkPartOutputs& part = {}) {
  TopkLogprobsParams p;
  p.rows = logits.rows;
  p.vocab = logits.vocab;
  p.k = out.k;
  p.logits = logits.logits;
  p.logp = out.logp;
  p.tok = out.tok;
  p.raw = part.raw;
  p.lse = part.lse;
  return p;
}

// The one place TreeBuildParams are built: the trees of `requests` from their top-K rows
// `topk` ([B, D, K]) into `trees` (max_nodes = trees.rows - 1).
inline TreeBuildParams make_tree_build_params(const TreeRequests& requests, const TopkRows& topk,
                                              const TreeArrays& trees) {
  TreeBuildParams p;
  p.batch = requests.batch;
  p.depth = requests.depth;
  p.topk = topk.k;
  p.max_budget = requests.max_budget;
  p.logp = topk.logp;
  p.tok = topk.tok;
  p.budget = requests.budget;
  p.root_token = requests.root_token;
  p.start_pos = requests.start_pos;
  p.max_nodes = trees.rows - 1;
  p.vis_words = trees.vis_words;
  p.n_out = trees.n;
  p.tokens = trees.tokens;
  p.depth_out = trees.depth;
  p.parent = trees.parent;
  p.positions = trees.positions;
  p.score = trees.score;
  p.vis = trees.vis;
  return p;
}

// Dynamic shared memory a tree_build launch with these sizes takes on the current device
// (~85 KB for the node pool, plus the staged logp rows when they fit; 0 on error).
size_t tree_build_smem_bytes(int depth, int topk, int max_budget);

// Launch on `stream`. The checks below run first; an impossible request returns its error
// and launches nothing.
KernelResult tree_build(const TreeBuildParams& p, cudaStream_t stream);
KernelResult topk_logprobs(const TopkLogprobsParams& p, cudaStream_t stream);
// The block size topk_logprobs takes for `p` and how many such blocks an SM holds (for the bench).
KernelResult topk_logprobs_occupancy(const TopkLogprobsParams& p, int* threads, int* blocks_per_sm);

// The argument checks of the launchers (also used by the CPU-emulated tests).
inline KernelResult check_tree_build_params(const TreeBuildParams& p) {
  auto s = [](long long v) { return std::to_string(v); };
  if (p.batch <= 0) return KernelResult::invalid("tree_build: batch must be >= 1, got " + s(p.batch));
  if (p.depth < 0 || p.depth > kTreeMaxDepth)
    return KernelResult::over_limit("tree_build: depth " + s(p.depth) + " outside 0.." + s(kTreeMaxDepth) +
                                    " (kTreeMaxDepth; it is the drafter's block_size - 1)");
  if (p.max_budget < 0 || p.max_budget > kTreeMaxNodes)
    return KernelResult::over_limit("tree_build: max_budget " + s(p.max_budget) + " outside 0.." + s(kTreeMaxNodes) +
                                    " (kTreeMaxNodes)");
  if (p.topk < 0) return KernelResult::invalid("tree_build: topk must be >= 0, got " + s(p.topk));
  if (p.max_nodes < p.max_budget)
    return KernelResult::invalid("tree_build: max_nodes " + s(p.max_nodes) + " < max_budget " + s(p.max_budget) +
                                 " (the outputs need max_budget+1 rows per request)");
  if (p.max_nodes > kTreeMaxNodes)
    return KernelResult::over_limit("tree_build: max_nodes " + s(p.max_nodes) + " over kTreeMaxNodes " +
                                    s(kTreeMaxNodes));
  const int need_words = (p.max_nodes + 1 + 31) / 32;
  if (p.vis_words < need_words)
    return KernelResult::invalid("tree_build: vis_words " + s(p.vis_words) + " < " + s(need_words) + " needed for " +
                                 s(p.max_nodes + 1) + " rows");
  if (!p.budget || !p.n_out || !p.tokens || !p.depth_out || !p.parent || !p.vis)
    return KernelResult::invalid("tree_build: budget, n_out, tokens, depth_out, parent and vis must be non-null");
  if (p.depth > 0 && p.topk > 0 && p.max_budget > 0 && (!p.logp || !p.tok))
    return KernelResult::invalid("tree_build: logp and tok must be non-null");
  return KernelResult::success();
}

inline KernelResult check_topk_logprobs_params(const TopkLogprobsParams& p) {
  auto s = [](long long v) { return std::to_string(v); };
  if (p.rows <= 0) return KernelResult::invalid("topk_logprobs: rows must be >= 1, got " + s(p.rows));
  if (p.vocab <= 0 || p.vocab > kTreeMaxVocab)
    return KernelResult::invalid("topk_logprobs: vocab " + s(p.vocab) + " outside 1.." + s(kTreeMaxVocab));
  if (p.k <= 0 || p.k > p.vocab || p.k > kTreeMaxNodes)
    return KernelResult::over_limit("topk_logprobs: k " + s(p.k) + " outside 1..min(vocab " + s(p.vocab) +
                                    ", kTreeMaxNodes " + s(kTreeMaxNodes) + ")");
  if (!p.logits || !p.logp || !p.tok)
    return KernelResult::invalid("topk_logprobs: logits, logp and tok must be non-null");
  if (p.variant < -1 || p.variant >= kTopkScanVariants)
    return KernelResult::invalid("topk_logprobs: variant must be -1 (the default) or a TopkScanVariant, got " + s(p.variant));
  return KernelResult::success();
}

}  // namespace kdtree
