// The tree_accept and cache_compact cases (refs/tree_accept.kdtr, refs/compaction.kdtr) and
// the on-device chain (refs/ddtree_chain.kdtr: tree_build -> stand-in verify -> tree_accept
// -> cache_compact), written once for any runner (GPU launchers or the SIMT emulator).
//
// A runner provides
//   KernelResult accept(AcceptIO&)
//   KernelResult compact(CompactIO&)       (in place on io.cache)
//   KernelResult chain(ChainIO&)           all four stages back to back, no host round trip
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/tree_accept.cuh"
#include "stand_in_verify.cuh"
#include "tree_build_cases.h"

namespace kdtree::test {

struct AcceptIO {
  int batch = 0, rows = 0, vocab = 0, max_path = kAcceptMaxPath;
  std::vector<int32_t> n, tokens, parent, choice;  // choice empty: greedy from logits
  std::vector<float> logits;                       // [B, rows, vocab]
  std::vector<int32_t> accepted, accept_len, bonus;  // outputs
  void poison_outputs() {
    accepted.assign(static_cast<size_t>(batch) * max_path, kPoisonI32);
    accept_len.assign(batch, kPoisonI32);
    bonus.assign(batch, kPoisonI32);
  }
};

struct CompactIO {
  int batch = 0, layers = 1, row_words = 0, max_path = kAcceptMaxPath;
  int64_t row_stride = 0, batch_stride = 0, layer_stride = 0;
  std::vector<uint32_t> cache;  // modified in place
  std::vector<int32_t> past_len, accepted, accept_len;
};

// The chain's inputs (the stand-in verify: logits row i = bigram[tokens[i]], cache row
// past + i = embed[tokens[i]]) and its outputs.
struct ChainIO {
  std::vector<float> draft_logits;  // [B, D, vocab]: the chain starts with topk_logprobs
  TreeBuildIO tree;              // inputs set (logp/tok are replaced by the device's top-K)
  int vocab = 0, width = 0;      // bigram table [vocab, vocab], embeddings [vocab, width]
  std::vector<float> bigram, embed;
  int cache_rows = 0;            // rows per request in cache
  std::vector<float> cache;      // [B, cache_rows, width], modified in place
  std::vector<int32_t> past;     // [B]
  AcceptIO acc;                  // outputs (batch, rows, max_path set by the caller); acc.logits:
                                 //   the stand-in verify's logits, poisoned by the caller
};

// The launch parameters for io (through make_*_params), each array at at(<its vector>) as in
// tree_build_params. io's outputs (the paths cache_compact keeps):
template <class At>
AcceptedPaths accepted_paths(AcceptIO& io, At&& at) {
  AcceptedPaths paths;
  paths.max_path = io.max_path;
  paths.accepted = at(io.accepted);
  paths.accept_len = at(io.accept_len);
  paths.bonus = at(io.bonus);
  return paths;
}

// The walk takes io.choice, or the argmax of io.logits when choice is empty.
template <class At>
TreeAcceptParams tree_accept_params(AcceptIO& io, At&& at) {
  TreeArrays trees;
  trees.rows = io.rows;
  trees.n = at(io.n);
  trees.tokens = at(io.tokens);
  trees.parent = at(io.parent);
  const TargetChoice target = io.choice.empty() ? target_argmax(io.logits.empty() ? nullptr : at(io.logits), io.vocab)
                                                : target_tokens(at(io.choice));
  return make_tree_accept_params(io.batch, trees, target, accepted_paths(io, at));
}

template <class At>
CacheCompactParams cache_compact_params(CompactIO& io, At&& at) {
  CacheWords cache;
  cache.cache = at(io.cache);
  cache.layers = io.layers;
  cache.row_words = io.row_words;
  cache.row_stride = io.row_stride;
  cache.batch_stride = io.batch_stride;
  cache.layer_stride = io.layer_stride;
  AcceptedPaths kept;
  kept.max_path = io.max_path;
  kept.accepted = at(io.accepted);
  kept.accept_len = at(io.accept_len);
  return make_cache_compact_params(io.batch, cache, at(io.past_len), kept);
}

// The chain's stages on io.tree's arrays (at at(...) as above): topk_logprobs of the draft
// logits into the tree's top-K arrays, the stand-in verify into io.acc.logits and io.cache,
// the greedy walk over the tree's outputs, and the compaction of io.cache.
template <class At>
TopkLogprobsParams chain_topk_params(ChainIO& io, At&& at) {
  TreeBuildIO& t = io.tree;
  TopkLogits draft;
  draft.rows = t.batch * t.depth;
  draft.vocab = io.vocab;
  draft.logits = at(io.draft_logits);
  return make_topk_logprobs_params(draft, topk_rows(t.topk, t.logp, t.tok, at));
}

template <class At>
StandInVerifyParams chain_verify_params(ChainIO& io, At&& at) {
  TreeBuildIO& t = io.tree;
  StandInVerifyParams v;
  v.batch = t.batch;
  v.rows = t.rows();
  v.vocab = io.vocab;
  v.width = io.width;
  v.cache_rows = io.cache_rows;
  v.n = at(t.n);
  v.tokens = at(t.tokens);
  v.past = at(io.past);
  v.bigram = at(io.bigram);
  v.embed = at(io.embed);
  v.logits = at(io.acc.logits);
  v.cache = at(io.cache);
  return v;
}

template <class At>
TreeAcceptParams chain_accept_params(ChainIO& io, At&& at) {
  return make_tree_accept_params(io.tree.batch, tree_arrays(io.tree, at), target_argmax(at(io.acc.logits), io.vocab),
                                 accepted_paths(io.acc, at));
}

template <class At>
CacheCompactParams chain_compact_params(ChainIO& io, At&& at) {
  CacheWords cache;  // the float rows as 32-bit words, one layer
  cache.cache = reinterpret_cast<uint32_t*>(at(io.cache));
  cache.row_words = io.width;
  cache.row_stride = io.width;
  cache.batch_stride = static_cast<int64_t>(io.cache_rows) * io.width;
  return make_cache_compact_params(io.tree.batch, cache, at(io.past), accepted_paths(io.acc, at));
}

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Accept case a{i}: one request, by choice or greedy from logits.
template <class Runner>
void run_accept_case(Runner& runner, const KdtrFile& f, int i) {
  const std::string a = "a" + std::to_string(i);
  AcceptIO io;
  io.tokens = to_vector<int32_t>(tensor(f, a + ".tokens", 1));
  io.parent = to_vector<int32_t>(tensor(f, a + ".parent", 1));
  const int rows = static_cast<int>(io.tokens.size());
  io.batch = 1;
  io.rows = rows;
  io.n = {rows - 1};
  if (f.has(a + ".logits")) {
    const KdtrTensor& lg = tensor(f, a + ".logits", 2);
    io.vocab = static_cast<int>(lg.shape[1]);
    io.logits = to_vector<float>(lg);
  } else {
    io.choice = to_vector<int32_t>(tensor(f, a + ".choice", 1));
  }
  io.poison_outputs();
  const KernelResult r = runner.accept(io);
  if (!r.ok()) report_failure(nullptr, 0, a + ": " + r.message);
  KD_CHECK(r.ok());
  const std::vector<int32_t> want = to_vector<int32_t>(tensor(f, a + ".accepted", 1));
  const int len = static_cast<int>(want.size());
  KD_EXPECT_EQ(io.accept_len[0], len);
  KD_EXPECT_EQ(io.bonus[0], static_cast<int32_t>(scalar(f, a + ".bonus")));
  if (io.accept_len[0] == len) {
    expect_equal_arrays(a + ".accepted", io.accepted.data(), want.data(), len);
    expect_all(a + ".accepted(pad)", io.accepted.data() + len, io.max_path - len, -1);
  }
}

// All choice-mode accept cases in one launch (padded to the largest tree), plus a request
// without a tree (n = -1), which must come back skipped.
template <class Runner>
void run_accept_batch(Runner& runner, const KdtrFile& f) {
  const int cases = static_cast<int>(scalar(f, "num_cases"));
  std::vector<int> ids;
  int rows = 1;
  for (int i = 0; i < cases; ++i) {
    const std::string a = "a" + std::to_string(i);
    if (f.has(a + ".logits")) continue;
    ids.push_back(i);
    rows = std::max(rows, static_cast<int>(f.get(a + ".tokens").numel()));
  }
  AcceptIO io;
  io.batch = static_cast<int>(ids.size()) + 1;
  io.rows = rows;
  io.tokens.assign(static_cast<size_t>(io.batch) * rows, -1);
  io.parent.assign(static_cast<size_t>(io.batch) * rows, -1);
  io.choice.assign(static_cast<size_t>(io.batch) * rows, -1);
  for (size_t b = 0; b < ids.size(); ++b) {
    const std::string a = "a" + std::to_string(ids[b]);
    const KdtrTensor& t = f.get(a + ".tokens");
    std::copy_n(t.as<int32_t>(), t.numel(), io.tokens.begin() + b * rows);
    std::copy_n(f.get(a + ".parent").as<int32_t>(), t.numel(), io.parent.begin() + b * rows);
    std::copy_n(f.get(a + ".choice").as<int32_t>(), t.numel(), io.choice.begin() + b * rows);
    io.n.push_back(static_cast<int32_t>(t.numel()) - 1);
  }
  io.n.push_back(-1);  // the skipped request
  io.poison_outputs();
  const KernelResult r = runner.accept(io);
  KD_CHECK(r.ok());
  for (size_t b = 0; b < ids.size(); ++b) {
    const std::string a = "a" + std::to_string(ids[b]);
    const std::vector<int32_t> want = to_vector<int32_t>(f.get(a + ".accepted"));
    const int len = static_cast<int>(want.size());
    KD_EXPECT_EQ(io.accept_len[b], len);
    KD_EXPECT_EQ(io.bonus[b], static_cast<int32_t>(scalar(f, a + ".bonus")));
    if (io.accept_len[b] == len) expect_equal_arrays(a + ".accepted(batched)", io.accepted.data() + b * io.max_path, want.data(), len);
  }
  const int last = io.batch - 1;
  KD_EXPECT_EQ(io.accept_len[last], 0);
  KD_EXPECT_EQ(io.bonus[last], -1);
  expect_all("accepted(skipped request)", io.accepted.data() + static_cast<size_t>(last) * io.max_path, io.max_path, -1);
}

// Compaction case k{i}, run as two layers (the second a transformed copy) and with a row
// stride of W (16-byte path) or W + 1 (word path); rows past the kept ones stay untouched.
template <class Runner>
void run_compact_case(Runner& runner, const KdtrFile& f, int i, bool padded_rows) {
  const std::string k = "k" + std::to_string(i);
  const KdtrTensor& cache = tensor(f, k + ".cache", 2);
  const KdtrTensor& after = tensor(f, k + ".cache_after", 2);
  const int total_rows = static_cast<int>(cache.shape[0]), W = static_cast<int>(cache.shape[1]);
  const int kept = static_cast<int>(after.shape[0]);
  const std::vector<int32_t> accepted = to_vector<int32_t>(tensor(f, k + ".accepted", 1));
  CompactIO io;
  io.batch = 1;
  io.layers = 2;
  io.row_words = W;
  io.row_stride = W + (padded_rows ? 1 : 0);
  io.batch_stride = io.row_stride * total_rows;
  io.layer_stride = io.batch_stride;
  io.past_len = {static_cast<int32_t>(scalar(f, k + ".past"))};
  io.accepted.assign(io.max_path, -1);
  std::copy(accepted.begin(), accepted.end(), io.accepted.begin());
  io.accept_len = {static_cast<int32_t>(accepted.size())};
  auto layer_value = [](int layer, float v) { return layer == 0 ? v : 2.0f * v + 1.0f; };
  io.cache.assign(static_cast<size_t>(io.layer_stride) * io.layers, kPoisonU32);
  const float* src = cache.as<float>();
  for (int l = 0; l < io.layers; ++l)
    for (int r = 0; r < total_rows; ++r)
      for (int w = 0; w < W; ++w)
        io.cache[l * io.layer_stride + r * io.row_stride + w] = f32_bits(layer_value(l, src[static_cast<size_t>(r) * W + w]));
  const std::vector<uint32_t> before = io.cache;
  const KernelResult res = runner.compact(io);
  KD_CHECK(res.ok());
  std::vector<uint32_t> want = before;
  const float* ref = after.as<float>();
  for (int l = 0; l < io.layers; ++l)
    for (int r = 0; r < kept; ++r)
      for (int w = 0; w < W; ++w)
        want[l * io.layer_stride + r * io.row_stride + w] = f32_bits(layer_value(l, ref[static_cast<size_t>(r) * W + w]));
  expect_equal_arrays(k + (padded_rows ? ".cache(word path)" : ".cache(16-byte path)"), io.cache.data(), want.data(),
                      static_cast<int64_t>(want.size()));
}

// The chain bundle: inputs, and the expected tree, walk and final cache.
template <class Runner>
void run_chain_case(Runner& runner, const KdtrFile& f) {
  const KdtrTensor& logp = tensor(f, "logp", 3);
  ChainIO io;
  TreeBuildIO& t = io.tree;
  t.batch = static_cast<int>(logp.shape[0]);
  t.depth = static_cast<int>(logp.shape[1]);
  t.topk = static_cast<int>(logp.shape[2]);
  io.draft_logits = to_vector<float>(tensor(f, "draft_logits", 3));
  t.budget = to_vector<int32_t>(tensor(f, "budget", 1));
  t.root = to_vector<int32_t>(tensor(f, "root", 1));
  t.max_budget = *std::max_element(t.budget.begin(), t.budget.end());
  t.max_nodes = t.max_budget;
  t.vis_words = (t.max_nodes + 1 + 31) / 32;
  t.start = to_vector<int32_t>(tensor(f, "past", 1));
  const KdtrTensor& bigram = tensor(f, "bigram", 2);
  io.vocab = static_cast<int>(bigram.shape[0]);
  io.bigram = to_vector<float>(bigram);
  const KdtrTensor& embed = tensor(f, "embed", 2);
  io.width = static_cast<int>(embed.shape[1]);
  io.embed = to_vector<float>(embed);
  const KdtrTensor& cache = tensor(f, "cache", 3);
  io.cache_rows = static_cast<int>(cache.shape[1]);
  io.cache = to_vector<float>(cache);
  io.past = t.start;
  io.acc.batch = t.batch;
  io.acc.rows = t.rows();
  io.acc.vocab = io.vocab;
  io.acc.max_path = static_cast<int>(f.get("accepted").shape[1]);
  t.poison_outputs();
  io.acc.poison_outputs();
  io.acc.logits.assign(static_cast<size_t>(t.batch) * t.rows() * io.vocab, poison_f32());
  const KernelResult r = runner.chain(io);
  if (!r.ok()) report_failure(nullptr, 0, "chain: " + r.message);
  KD_CHECK(r.ok());
  expect_equal_arrays("chain.tok", t.tok.data(), f.get("tok").as<int32_t>(), static_cast<int64_t>(t.tok.size()));
  expect_equal_arrays("chain.logp", t.logp.data(), f.get("logp").as<float>(), static_cast<int64_t>(t.logp.size()));
  expect_equal_arrays("chain.n", t.n.data(), f.get("n").as<int32_t>(), t.batch);
  const KdtrTensor& tokens = tensor(f, "tokens", 2);
  const int ref_rows = static_cast<int>(tokens.shape[1]);
  for (int b = 0; b < t.batch; ++b)
    expect_equal_arrays("chain.tokens[" + std::to_string(b) + "]", t.tokens.data() + static_cast<size_t>(b) * t.rows(),
                        tokens.as<int32_t>() + static_cast<size_t>(b) * ref_rows, std::min(ref_rows, t.rows()));
  expect_equal_arrays("chain.accept_len", io.acc.accept_len.data(), f.get("accept_len").as<int32_t>(), t.batch);
  expect_equal_arrays("chain.bonus", io.acc.bonus.data(), f.get("bonus").as<int32_t>(), t.batch);
  expect_equal_arrays("chain.accepted", io.acc.accepted.data(), f.get("accepted").as<int32_t>(),
                      static_cast<int64_t>(io.acc.accepted.size()));
  expect_equal_arrays("chain.cache", io.cache.data(), f.get("cache_after").as<float>(),
                      static_cast<int64_t>(io.cache.size()));
}

}  // namespace kdtree::test
