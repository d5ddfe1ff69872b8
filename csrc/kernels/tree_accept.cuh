// tree_accept: the accept walk of DDTree on the device, and the cache compaction after it
// (docs/ddtree.md: the accept walk and compaction). No host round trip: the walk writes the
// accepted node indices and their count to device memory, and cache_compact reads them.
//
// This header is the host API (no device code).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernel_status.h"
#include "tree_build.cuh"

namespace kdtree {

constexpr int kAcceptMaxPath = kTreeMaxDepth + 1;  // accepted path length (root included) <= D + 1

struct TreeAcceptParams {
  int batch = 0;                    // B requests, one block each
  int rows = 0;                     // R: row stride of the tree arrays (max_nodes + 1 of tree_build)
  const int32_t* n = nullptr;       // [B] node count per tree (root excluded); < 0: request skipped
  const int32_t* tokens = nullptr;  // [B, R] token of each node (tree_build's tokens)
  const int32_t* parent = nullptr;  // [B, R] parent index of each node
  const int32_t* choice = nullptr;  // [B, R] the target's token at each node (sampled or argmax),
                                    //   or null to take the argmax of `logits`
  const float* logits = nullptr;    // [B, R, vocab] target logits (greedy walk), when choice is null
  int vocab = 0;                    // V, for logits
  int max_path = 0;                 // row stride of `accepted`: >= deepest tree depth + 1,
                                    //   <= kAcceptMaxPath
  int32_t* accepted = nullptr;      // [B, max_path] accepted node indices, 0 first; -1 after
  int32_t* accept_len = nullptr;    // [B] m + 1 (path length including the root); 0 if skipped
  int32_t* bonus = nullptr;         // [B] the target's choice at the last accepted node; -1 if skipped
};

// Keep rows past + a_j (j = 0..m) at past + j, in place, for every request and layer. The
// cache is addressed in 32-bit words: element (layer, b, row, w) is at
// cache[layer * layer_stride + b * batch_stride + row * row_stride + w].
struct CacheCompactParams {
  int batch = 0;                       // B requests
  int layers = 1;                      // cache slices sharing the row layout (model layers), >= 1
  int row_words = 0;                   // 32-bit words per row (576 bf16 -> 288)
  int64_t row_stride = 0;              // words between consecutive rows (>= row_words)
  int64_t batch_stride = 0;            // words between requests
  int64_t layer_stride = 0;            // words between layers
  uint32_t* cache = nullptr;           // the latent cache, modified in place
  const int32_t* past_len = nullptr;   // [B] rows before the verified tree entries
  const int32_t* accepted = nullptr;   // [B, max_path] from tree_accept
  const int32_t* accept_len = nullptr; // [B] from tree_accept (0: request skipped)
  int max_path = 0;                    // row stride of accepted
};

// What the accept walk compares the draft with: the target's token at each node, or its
// logits (the walk takes their argmax). Build one with target_tokens or target_argmax.
struct TargetChoice {
  const int32_t* choice = nullptr;  // [B, R] the target's token at each node
  const float* logits = nullptr;    // [B, R, vocab] when choice is null
  int vocab = 0;
};
inline TargetChoice target_tokens(const int32_t* choice) {
  TargetChoice t;
  t.choice = choice;
  return t;
}
inline TargetChoice target_argmax(const float* logits, int vocab) {
  TargetChoice t;
  t.logits = logits;
  t.vocab = vocab;
  return t;
}

// The accepted paths of B requests: tree_accept writes them, cache_compact reads them.
struct AcceptedPaths {
  int max_path = 0;                // row stride of accepted
  int32_t* accepted = nullptr;     // [B, max_path] node indices, 0 first; -1 after
  int32_t* accept_len = nullptr;   // [B] path length including the root; 0 if skipped
  int32_t* bonus = nullptr;        // [B] the target's choice at the last accepted node (tree_accept's)
};

// A latent cache in 32-bit words, as cache_compact addresses it (CacheCompactParams).
struct CacheWords {
  uint32_t* cache = nullptr;
  int layers = 1;
  int row_words = 0;
  int64_t row_stride = 0;
  int64_t batch_stride = 0;
  int64_t layer_stride = 0;
};

// The one place TreeAcceptParams are built: the walk of `batch` requests over `trees` (rows,
// n, tokens, parent) against `target`, into `paths`.
inline TreeAcceptParams make_tree_accept_params(int batch, const TreeArrays& trees, const TargetChoice& target,
                                                const AcceptedPaths& paths) {
  TreeAcceptParams p;
  p.batch = batch;
  p.rows = trees.rows;
  p.n = trees.n;
  p.tokens = trees.tokens;
  p.parent = trees.parent;
  p.choice = target.choice;
  p.logits = target.logits;
  p.vocab = target.vocab;
  p.max_path = paths.max_path;
  p.accepted = paths.accepted;
  p.accept_len = paths.accept_len;
  p.bonus = paths.bonus;
  return p;
}

// The one place CacheCompactParams are built: keep the rows of `paths` in `cache` for
// `batch` requests whose tree entries start at past_len[b].
inline CacheCompactParams make_cache_compact_params(int batch, const CacheWords& cache, const int32_t* past_len,
                                                    const AcceptedPaths& paths) {
  CacheCompactParams p;
  p.batch = batch;
  p.layers = cache.layers;
  p.row_words = cache.row_words;
  p.row_stride = cache.row_stride;
  p.batch_stride = cache.batch_stride;
  p.layer_stride = cache.layer_stride;
  p.cache = cache.cache;
  p.past_len = past_len;
  p.accepted = paths.accepted;
  p.accept_len = paths.accept_len;
  p.max_path = paths.max_path;
  return p;
}

KernelResult tree_accept(const TreeAcceptParams& p, cudaStream_t stream);
KernelResult cache_compact(const CacheCompactParams& p, cudaStream_t stream);

inline KernelResult check_tree_accept_params(const TreeAcceptParams& p) {
  auto s = [](long long v) { return std::to_string(v); };
  if (p.batch <= 0) return KernelResult::invalid("tree_accept: batch must be >= 1, got " + s(p.batch));
  if (p.rows <= 0 || p.rows > kTreeMaxNodes + 1)
    return KernelResult::over_limit("tree_accept: rows " + s(p.rows) + " outside 1.." + s(kTreeMaxNodes + 1));
  if (p.max_path <= 0 || p.max_path > kAcceptMaxPath)
    return KernelResult::over_limit("tree_accept: max_path " + s(p.max_path) + " outside 1.." + s(kAcceptMaxPath) +
                                    " (kTreeMaxDepth + 1)");
  if (!p.n || !p.tokens || !p.parent || !p.accepted || !p.accept_len || !p.bonus)
    return KernelResult::invalid("tree_accept: n, tokens, parent, accepted, accept_len and bonus must be non-null");
  if (!p.choice && !p.logits)
    return KernelResult::invalid("tree_accept: give the target's choices or its logits");
  if (!p.choice && p.vocab <= 0)
    return KernelResult::invalid("tree_accept: vocab must be >= 1 with logits, got " + s(p.vocab));
  return KernelResult::success();
}

inline KernelResult check_cache_compact_params(const CacheCompactParams& p) {
  auto s = [](long long v) { return std::to_string(v); };
  if (p.batch <= 0) return KernelResult::invalid("cache_compact: batch must be >= 1, got " + s(p.batch));
  if (p.layers <= 0 || p.layers > 65535)
    return KernelResult::invalid("cache_compact: layers " + s(p.layers) + " outside 1..65535");
  if (p.row_words <= 0) return KernelResult::invalid("cache_compact: row_words must be >= 1, got " + s(p.row_words));
  if (p.row_stride < p.row_words)
    return KernelResult::invalid("cache_compact: row_stride " + s(p.row_stride) + " < row_words " + s(p.row_words));
  if (p.max_path <= 0 || p.max_path > kAcceptMaxPath)
    return KernelResult::over_limit("cache_compact: max_path " + s(p.max_path) + " outside 1.." + s(kAcceptMaxPath));
  if (!p.cache || !p.past_len || !p.accepted || !p.accept_len)
    return KernelResult::invalid("cache_compact: cache, past_len, accepted and accept_len must be non-null");
  return KernelResult::success();
}

}  // namespace kdtree
