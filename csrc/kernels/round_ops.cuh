// The glue of a DDTree round and an AR step on the device (docs/ddtree.md): the
// drafter's block inputs, the verify pass's inputs from the tree, and the commit after the
// accept walk (emitted tokens with stop rules, cache lengths, the next root, the drafter's
// new context rows). One thread per request slot; nothing here needs the host, so a whole
// round can be one CUDA graph. Host API; kernels in round_ops.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernel_status.h"

namespace kdtree {

constexpr int kMaxStopIds = 16;  // stop tokens per request

// Decoding state of every request slot, on the device (arrays over slots).
struct SlotState {
  int32_t* cache_len = nullptr;    // committed target cache rows = position of the next root
  int32_t* drafter_len = nullptr;  // committed drafter context rows
  int32_t* ctx_count = nullptr;    // context rows waiting for the drafter (features kept by commit)
  int32_t* root_token = nullptr;   // the next round's root: the last emitted token
  int32_t* live = nullptr;         // 1 while the slot decodes (set by the host), 0 otherwise
  int32_t* done = nullptr;         // set on the device: a stop token or max_new reached
  int32_t* out_count = nullptr;    // tokens emitted so far (the first comes from the prefill)
  int32_t* out_tokens = nullptr;   // [slots, out_cap]
  int out_cap = 0;
  int32_t* max_new = nullptr;      // [slots]
  int32_t* stop_ids = nullptr;     // [slots, kMaxStopIds]
  int32_t* n_stop = nullptr;       // [slots]
  int32_t* budget = nullptr;       // [slots] node budget of the request
  int32_t* ar = nullptr;           // [slots] 1: plain autoregressive decoding (no tree)
  int32_t* round_budget = nullptr; // [slots] this round's budget: the request's, or -1 (skip) when not decoding
  uint64_t* draw = nullptr;        // [slots] sampling draw counter, advanced once per target forward
};

// What a round leaves for the host (one copy per round): per slot.
struct RoundReport {
  int32_t accept_len;  // accepted path length with the root (0: the slot did not decode)
  int32_t tree_size;   // n
  int32_t tree_depth;  // deepest node
  int32_t out_count;   // tokens emitted so far
  int32_t done;        // finished (stop token or max_new)
  int32_t emitted;     // tokens emitted this round
};

// Round start: round_budget[b] = budget[b] if live, not done and not AR, else -1.
KernelResult round_begin(const SlotState& s, int batch, cudaStream_t stream);

// The drafter's block [root, mask, ..., mask] at positions start[b] + i (the drafter's
// context length), and the rows whose logits are drafts (every block row but the root's):
// gather[b * (block-1) + i - 1] = b * block + i. With block = 1 it is an AR step's input
// (start = cache_len).
struct BlockInputsParams {
  int batch = 0, block = 0, mask_token = 0;
  SlotState state;
  const int32_t* start = nullptr;  // [batch] state.drafter_len or state.cache_len
  int32_t* tokens = nullptr;     // [batch, block]
  int32_t* positions = nullptr;  // [batch, block]
  int32_t* gather = nullptr;     // [batch, block - 1], or null
};
KernelResult draft_block_inputs(const BlockInputsParams& p, cudaStream_t stream);

// Rows (b, j), j < max_rows, of the drafter's context extension: positions drafter_len + j,
// and the destination row b * capacity + drafter_len + j of the drafter cache (-1 when
// j >= ctx_count[b]). extend_commit then advances drafter_len and clears ctx_count.
struct ExtendRowsParams {
  int batch = 0, max_rows = 0, capacity = 0;
  SlotState state;
  int32_t* positions = nullptr;  // [batch, max_rows]
  int32_t* dest = nullptr;       // [batch, max_rows]
};
KernelResult extend_rows(const ExtendRowsParams& p, cudaStream_t stream);
KernelResult extend_commit(const SlotState& s, int batch, cudaStream_t stream);

// The verify forward's rows from tree_build's outputs, in place: rows past a tree's n (and
// every row of a skipped tree) become harmless copies of the root: token root_token,
// position cache_len, visibility {root}.
struct VerifyInputsParams {
  int batch = 0, rows = 0, vis_words = 0;
  SlotState state;
  const int32_t* n = nullptr;  // [batch] tree sizes (-1: skipped)
  int32_t* tokens = nullptr;   // [batch, rows]
  int32_t* positions = nullptr;
  uint32_t* vis = nullptr;     // [batch, rows, vis_words]
};
KernelResult verify_inputs(const VerifyInputsParams& p, cudaStream_t stream);

// After tree_accept and cache_compact: emit the accepted tokens and the bonus (cut at a stop
// token or max_new, as python_engine/decode/result.py::finish_tokens), advance cache_len by
// the path length, set the next root, keep the accepted rows' features for the drafter
// (feat_index[b, j] = b * rows + accepted[b, j], -1 past the path) and fill the report.
struct CommitTreeParams {
  int batch = 0, rows = 0, max_path = 0;
  SlotState state;
  const int32_t* n = nullptr;
  const int32_t* tree_tokens = nullptr;  // [batch, rows]
  const int32_t* tree_depth = nullptr;   // [batch, rows]
  const int32_t* accepted = nullptr;     // [batch, max_path]
  const int32_t* accept_len = nullptr;   // [batch]
  const int32_t* bonus = nullptr;        // [batch]
  int32_t* feat_index = nullptr;         // [batch, max_path]
  RoundReport* report = nullptr;         // [batch]
};
KernelResult commit_tree(const CommitTreeParams& p, cudaStream_t stream);

// After an AR forward (advance = 1: for AR slots, cache_len + 1) or a prefill (advance = 0:
// the prompt's rows are committed already; every live slot of the batch): emit choice[b] and
// set the next root.
struct CommitArParams {
  int batch = 0;
  int advance = 1;
  SlotState state;
  const int32_t* choice = nullptr;  // [batch]
  RoundReport* report = nullptr;
};
KernelResult commit_ar(const CommitArParams& p, cudaStream_t stream);

}  // namespace kdtree
