// The tree_build cases of refs/tree_build.kdtr, written once for any runner: the GPU test
// (test_tree_build.cu) runs them through the launchers, the CPU-emulated test
// (csrc/kernels/emu) through the same kernels on the SIMT emulator.
//
// A runner provides
//   KernelResult topk(TopkIO&)       fills logp/tok from logits
//   KernelResult build(TreeBuildIO&) fills the tree outputs from the inputs
// and must leave every output element it does not write as the poison set here.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/tree_build.cuh"

namespace kdtree::test {

// Host copies of one tree_build launch's inputs and outputs.
struct TreeBuildIO {
  int batch = 0, depth = 0, topk = 0, max_budget = 0, max_nodes = 0, vis_words = 0;
  std::vector<float> logp;  // [B, D, K]
  std::vector<int32_t> tok, budget, root, start;
  // outputs (poisoned by poison_outputs)
  std::vector<int32_t> n, tokens, depth_out, parent, positions;
  std::vector<float> score;
  std::vector<uint32_t> vis;

  int rows() const { return max_nodes + 1; }
  void poison_outputs() {
    const size_t r = static_cast<size_t>(batch) * rows();
    n.assign(batch, kPoisonI32);
    tokens.assign(r, kPoisonI32);
    depth_out.assign(r, kPoisonI32);
    parent.assign(r, kPoisonI32);
    positions.assign(r, kPoisonI32);
    score.assign(r, poison_f32());
    vis.assign(r * vis_words, kPoisonU32);
  }
};

struct TopkIO {
  int rows = 0, vocab = 0, k = 0;
  std::vector<float> logits;  // [R, V]
  std::vector<float> logp;    // [R, K] out
  std::vector<int32_t> tok;   // [R, K] out
  void poison_outputs() {
    logp.assign(static_cast<size_t>(rows) * k, poison_f32());
    tok.assign(static_cast<size_t>(rows) * k, kPoisonI32);
  }
};

// The launch parameters of the IO structs above (through make_*_params), each array at
// at(<its vector>): the vector's own data on the emulator, its device copy on the GPU
// (DeviceCopies). Top-K arrays ([B, D, K] or [R, K]):
template <class At>
TopkRows topk_rows(int k, std::vector<float>& logp, std::vector<int32_t>& tok, At&& at) {
  TopkRows r;
  r.k = k;
  r.logp = at(logp);
  r.tok = at(tok);
  return r;
}

template <class At>
TopkLogprobsParams topk_params(TopkIO& t, At&& at) {
  TopkLogits logits;
  logits.rows = t.rows;
  logits.vocab = t.vocab;
  logits.logits = at(t.logits);
  return make_topk_logprobs_params(logits, topk_rows(t.k, t.logp, t.tok, at));
}

// io's output trees:
template <class At>
TreeArrays tree_arrays(TreeBuildIO& io, At&& at) {
  TreeArrays t;
  t.rows = io.rows();
  t.vis_words = io.vis_words;
  t.n = at(io.n);
  t.tokens = at(io.tokens);
  t.depth = at(io.depth_out);
  t.parent = at(io.parent);
  t.positions = at(io.positions);
  t.score = at(io.score);
  t.vis = at(io.vis);
  return t;
}

template <class At>
TreeBuildParams tree_build_params(TreeBuildIO& io, At&& at) {
  TreeRequests requests;
  requests.batch = io.batch;
  requests.depth = io.depth;
  requests.max_budget = io.max_budget;
  requests.budget = at(io.budget);
  requests.root_token = at(io.root);
  requests.start_pos = at(io.start);
  return make_tree_build_params(requests, topk_rows(io.topk, io.logp, io.tok, at), tree_arrays(io, at));
}

// Compare request b of io with a reference tree (n, tokens/depth/parent [>= n+1], vis rows
// of ref_words words, score optional), and check the padding past n.
inline void check_tree(const TreeBuildIO& io, int b, const std::string& label, int ref_n, const int32_t* ref_tokens,
                       const int32_t* ref_depth, const int32_t* ref_parent, const float* ref_score,
                       const uint32_t* ref_vis, int ref_words, int start) {
  const int rows = io.rows();
  const size_t r0 = static_cast<size_t>(b) * rows;
  KD_EXPECT_EQ(io.n[b], ref_n);
  if (io.n[b] != ref_n) {
    report_failure(nullptr, 0, label + ": node count differs; rows not compared");
    return;
  }
  const int used = ref_n + 1;
  expect_equal_arrays(label + ".tokens", io.tokens.data() + r0, ref_tokens, used);
  expect_equal_arrays(label + ".depth", io.depth_out.data() + r0, ref_depth, used);
  expect_equal_arrays(label + ".parent", io.parent.data() + r0, ref_parent, used);
  if (ref_score) expect_equal_arrays(label + ".score", io.score.data() + r0, ref_score, used);
  std::vector<int32_t> want_pos(used);
  for (int i = 0; i < used; ++i) want_pos[i] = start + ref_depth[i];
  expect_equal_arrays(label + ".positions", io.positions.data() + r0, want_pos.data(), used);
  // visibility: the reference's words, then zeros to the row's end
  std::vector<uint32_t> want(static_cast<size_t>(used) * io.vis_words, 0u);
  for (int i = 0; i < used; ++i)
    for (int w = 0; w < std::min(ref_words, io.vis_words); ++w) want[static_cast<size_t>(i) * io.vis_words + w] = ref_vis[static_cast<size_t>(i) * ref_words + w];
  expect_equal_arrays(label + ".vis", io.vis.data() + r0 * io.vis_words, want.data(), static_cast<int64_t>(want.size()));
  // padding rows
  const int pad = rows - used;
  expect_all(label + ".tokens(pad)", io.tokens.data() + r0 + used, pad, -1);
  expect_all(label + ".depth(pad)", io.depth_out.data() + r0 + used, pad, -1);
  expect_all(label + ".parent(pad)", io.parent.data() + r0 + used, pad, -1);
  expect_all(label + ".positions(pad)", io.positions.data() + r0 + used, pad, -1);
  expect_all(label + ".score(pad)", io.score.data() + r0 + used, pad, 0.0f);
  expect_all(label + ".vis(pad)", io.vis.data() + (r0 + used) * io.vis_words, static_cast<int64_t>(pad) * io.vis_words, 0u);
}

// Single-request case c{i}: from logits (when the bundle has them) through topk, then the
// tree; or straight from the reference's top-K arrays.
template <class Runner>
void run_single_case(Runner& runner, const KdtrFile& f, int i, int extra_rows) {
  const std::string c = "c" + std::to_string(i);
  const KdtrTensor& logp = tensor(f, c + ".logp", 2);
  const int D = static_cast<int>(logp.shape[0]), K = static_cast<int>(logp.shape[1]);
  const int budget = static_cast<int>(scalar(f, c + ".budget"));
  TreeBuildIO io;
  io.batch = 1;
  io.depth = D;
  io.topk = K;
  io.max_budget = budget;
  io.max_nodes = std::min(budget + extra_rows, kTreeMaxNodes);
  io.vis_words = (io.max_nodes + 1 + 31) / 32 + (extra_rows > 0 ? 1 : 0);
  io.logp = to_vector<float>(logp);
  io.tok = to_vector<int32_t>(tensor(f, c + ".tok", 2));
  io.budget = {budget};
  io.root = {static_cast<int32_t>(scalar(f, c + ".root"))};
  io.start = {1000 + 7 * i};
  if (f.has(c + ".logits") && D > 0 && K > 0) {
    const KdtrTensor& logits = tensor(f, c + ".logits", 2);
    TopkIO t;
    t.rows = D;
    t.vocab = static_cast<int>(logits.shape[1]);
    t.k = K;
    t.logits = to_vector<float>(logits);
    t.poison_outputs();
    const KernelResult r = runner.topk(t);
    KD_CHECK(r.ok());
    expect_equal_arrays(c + ".topk.tok", t.tok.data(), io.tok.data(), static_cast<int64_t>(io.tok.size()));
    expect_equal_arrays(c + ".topk.logp", t.logp.data(), io.logp.data(), static_cast<int64_t>(io.logp.size()));
    io.logp = t.logp;  // the tree is built from the device's own top-K
    io.tok = t.tok;
  }
  io.poison_outputs();
  const KernelResult r = runner.build(io);
  if (!r.ok()) report_failure(nullptr, 0, c + ": " + r.message);
  KD_CHECK(r.ok());
  const KdtrTensor& vis = tensor(f, c + ".vis", 2);
  check_tree(io, 0, c, static_cast<int>(scalar(f, c + ".n")), f.get(c + ".tokens").as<int32_t>(),
             f.get(c + ".depth").as<int32_t>(), f.get(c + ".parent").as<int32_t>(), f.get(c + ".score").as<float>(),
             vis.as<uint32_t>(), static_cast<int>(vis.shape[1]), io.start[0]);
}

// Batched case b{j}: B requests with mixed budgets in one launch.
template <class Runner>
void run_batch_case(Runner& runner, const KdtrFile& f, int j) {
  const std::string c = "b" + std::to_string(j);
  const KdtrTensor& logp = tensor(f, c + ".logp", 3);
  const int B = static_cast<int>(logp.shape[0]), D = static_cast<int>(logp.shape[1]), K = static_cast<int>(logp.shape[2]);
  TreeBuildIO io;
  io.batch = B;
  io.depth = D;
  io.topk = K;
  io.logp = to_vector<float>(logp);
  io.tok = to_vector<int32_t>(tensor(f, c + ".tok", 3));
  io.budget = to_vector<int32_t>(tensor(f, c + ".budget", 1));
  io.root = to_vector<int32_t>(tensor(f, c + ".root", 1));
  io.max_budget = *std::max_element(io.budget.begin(), io.budget.end());
  io.max_nodes = io.max_budget;
  io.vis_words = (io.max_nodes + 1 + 31) / 32;
  io.start.resize(B);
  for (int b = 0; b < B; ++b) io.start[b] = 50 * b;
  io.poison_outputs();
  const KernelResult r = runner.build(io);
  if (!r.ok()) report_failure(nullptr, 0, c + ": " + r.message);
  KD_CHECK(r.ok());
  const KdtrTensor& tokens = tensor(f, c + ".tokens", 2);
  const KdtrTensor& vis = tensor(f, c + ".vis", 3);
  const int ref_rows = static_cast<int>(tokens.shape[1]);
  const int ref_words = static_cast<int>(vis.shape[2]);
  const int32_t* ref_n = f.get(c + ".n").as<int32_t>();
  for (int b = 0; b < B; ++b) {
    const size_t o = static_cast<size_t>(b) * ref_rows;
    check_tree(io, b, c + "[" + std::to_string(b) + "]", ref_n[b], tokens.as<int32_t>() + o,
               f.get(c + ".depth").as<int32_t>() + o, f.get(c + ".parent").as<int32_t>() + o, nullptr,
               vis.as<uint32_t>() + o * ref_words, ref_words, io.start[b]);
  }
}

// Requests with budgets outside [0, max_budget] get n = -1 and padding only.
template <class Runner>
void run_bad_budget_case(Runner& runner) {
  TreeBuildIO io;
  io.batch = 3;
  io.depth = 2;
  io.topk = 2;
  io.max_budget = 4;
  io.max_nodes = 4;
  io.vis_words = 1;
  io.logp = {-0.5f, -1.0f, -0.25f, -2.0f, -0.5f, -1.0f, -0.25f, -2.0f, -0.5f, -1.0f, -0.25f, -2.0f};
  io.tok = {1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4};
  io.budget = {5, -1, 3};
  io.root = {9, 9, 9};
  io.start = {0, 0, 0};
  io.poison_outputs();
  const KernelResult r = runner.build(io);
  KD_CHECK(r.ok());
  KD_EXPECT_EQ(io.n[0], -1);
  KD_EXPECT_EQ(io.n[1], -1);
  KD_EXPECT_EQ(io.n[2], 3);
  for (int b = 0; b < 2; ++b) {
    const size_t r0 = static_cast<size_t>(b) * io.rows();
    expect_all("tokens(bad budget)", io.tokens.data() + r0, io.rows(), -1);
    expect_all("parent(bad budget)", io.parent.data() + r0, io.rows(), -1);
    expect_all("vis(bad budget)", io.vis.data() + r0, io.rows(), 0u);
  }
  // request 2: paths (0) -0.5, (0,0) -0.75, (1) -1.0, (0,1) -2.5: the first three
  const size_t r2 = 2 * static_cast<size_t>(io.rows());
  const int32_t want_tok[4] = {9, 1, 3, 2};
  const int32_t want_par[4] = {-1, 0, 1, 0};
  expect_equal_arrays("tokens(req 2)", io.tokens.data() + r2, want_tok, 4);
  expect_equal_arrays("parent(req 2)", io.parent.data() + r2, want_par, 4);
}


// The reference's lse of a row (python_engine/ddtree/topk.py's, float64)
inline double reference_lse(const float* x, int vocab) {
  const double m = *std::max_element(x, x + vocab);
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(x[i]) - m);
  return m + std::log(sum);
}

// Plants ties and near-ties where the top-K is decided, in a row shifted below -0.5:
//   - copies of its largest logits (exact ties) and neighbours a few float32 ulps away;
//   - kTopkHalfwayPlants logits near 0 (ulps of ~2^-43) whose x - lse lies 2^-38 off halfway
//     between two float32 (iterated with the lse they move to a fixed point), so that only an
//     lse within 2^-39 of float64's rounds them as the reference does (a float32 lse does not),
//     each with a neighbour 1-2 ulps away (the same logp: a tie ordered by id).
// The plants near 0 are the row's largest logits and weigh most in its lse, so the iteration
// can end in a cycle with a plant much nearer halfway than 2^-38: such a planting is drawn
// again (kTopkHalfwayDraws times at most), so every row asks the kernel for the same margin.
constexpr int kTopkHalfwayPlants = 4;
constexpr double kTopkHalfwayOffset = 0x1p-38;
constexpr int kTopkHalfwayIterations = 64;  // fixed-point passes; the lse settles in ~15 when it does
constexpr int kTopkHalfwayDraws = 16;       // plantings tried before a row's case fails to set up

// |v - the nearest point halfway between two float32|
inline double distance_from_float_halfway(double v) {
  const float f = static_cast<float>(v);
  const float other = std::nextafter(f, v < static_cast<double>(f) ? -INFINITY : INFINITY);
  return std::fabs(v - 0.5 * (static_cast<double>(f) + static_cast<double>(other)));
}

// One try at the halfway plants on x (ties already planted); true when, under the final
// lse, each plant lies at least kTopkHalfwayOffset / 2 from halfway and its neighbour rounds
// to the same logp.
inline bool plant_halfway_pairs(float* x, int vocab, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> pos(0, vocab - 1);
  auto step_ulps = [](float v, int n) {
    for (; n != 0; n += n > 0 ? -1 : 1) v = std::nextafter(v, n > 0 ? INFINITY : -INFINITY);
    return v;
  };
  std::vector<int> at(2 * kTopkHalfwayPlants);  // the plants, then their neighbours: distinct positions
  for (size_t p = 0; p < at.size(); ++p) {
    do at[p] = pos(rng);
    while (std::find(at.begin(), at.begin() + p, at[p]) != at.begin() + p);
  }
  double target[kTopkHalfwayPlants];  // x - lse for each: halfway below a float32, off by +-2^-38
  int apart[kTopkHalfwayPlants];
  for (int p = 0; p < kTopkHalfwayPlants; ++p) {
    apart[p] = rng() % 2 ? 1 : -2;
    x[at[p]] = std::ldexp(1.0f + static_cast<float>(p) / kTopkHalfwayPlants, -20);
    x[at[kTopkHalfwayPlants + p]] = step_ulps(x[at[p]], apart[p]);
  }
  const double lse0 = reference_lse(x, vocab);
  for (int p = 0; p < kTopkHalfwayPlants; ++p) {
    const float g = static_cast<float>(static_cast<double>(x[at[p]]) - lse0);
    target[p] = 0.5 * (static_cast<double>(std::nextafter(g, -INFINITY)) + g) +
                (rng() % 2 ? kTopkHalfwayOffset : -kTopkHalfwayOffset);
  }
  for (int iter = 0; iter < kTopkHalfwayIterations; ++iter) {  // each pass moves the lse by a fraction of the last move
    const double lse = reference_lse(x, vocab);
    bool moved = false;
    for (int p = 0; p < kTopkHalfwayPlants; ++p) {
      const float want = static_cast<float>(lse + target[p]);
      moved = moved || want != x[at[p]];
      x[at[p]] = want;
      x[at[kTopkHalfwayPlants + p]] = step_ulps(want, apart[p]);  // 2^-42 or less away: the same logp
    }
    if (!moved) break;
  }
  const double lse = reference_lse(x, vocab);
  for (int p = 0; p < kTopkHalfwayPlants; ++p) {
    const double d = static_cast<double>(x[at[p]]) - lse, e = static_cast<double>(x[at[kTopkHalfwayPlants + p]]) - lse;
    if (distance_from_float_halfway(d) < 0.5 * kTopkHalfwayOffset || static_cast<float>(d) != static_cast<float>(e))
      return false;
  }
  return true;
}

inline void plant_near_ties(float* x, int vocab, int k, std::mt19937_64& rng) {
  const float shift = *std::max_element(x, x + vocab) + 0.5f;
  for (int i = 0; i < vocab; ++i) x[i] -= shift;
  std::vector<float> sorted(x, x + vocab);
  const int top = std::min(vocab, 4 * k + 8);
  std::nth_element(sorted.begin(), sorted.begin() + (vocab - top), sorted.end());
  const float floor_top = sorted[vocab - top];
  std::vector<int> anchors;
  for (int i = 0; i < vocab; ++i)
    if (x[i] >= floor_top) anchors.push_back(i);
  std::uniform_int_distribution<int> pos(0, vocab - 1), steps(-3, 3);
  const int plants = std::min<int>(static_cast<int>(anchors.size()), 64);
  auto step_ulps = [](float v, int n) {
    for (; n != 0; n += n > 0 ? -1 : 1) v = std::nextafter(v, n > 0 ? INFINITY : -INFINITY);
    return v;
  };
  for (int p = 0; p < plants; ++p) x[pos(rng)] = step_ulps(x[anchors[rng() % anchors.size()]], steps(rng));
  if (vocab < 4 * kTopkHalfwayPlants) return;
  const std::vector<float> tied(x, x + vocab);
  for (int draw = 0; draw < kTopkHalfwayDraws; ++draw) {
    if (plant_halfway_pairs(x, vocab, rng)) return;
    std::copy(tied.begin(), tied.end(), x);
  }
  report_failure(__FILE__, __LINE__, "plant_near_ties: no planting of the halfway pairs settled in " +
                                         std::to_string(kTopkHalfwayDraws) + " draws");
}

// topk_logprobs on fresh random rows against a host reference formed like
// python_engine/ddtree/topk.py (float64 lse, one rounding to float32, order by (logp desc, id
// asc)). Styles: "normal" N(0, 2.5); "ascending" (every logit passes: the buffer overflows
// every step); "ninf" (99% -inf, often fewer finite logits than K); "ties" (integers in
// [-3, 1]: exact ties across the K-th); "huge" (|logits| ~ 1e9: the exp's unclamped path);
// "rising" (thirds near -5000, 0, +5000: the scan's sums change reference mid-row);
// "straddle" (N(-+4096, 2.5) in alternate rows: both of the scan's sums hold weight);
// "near_ties" (N(0, 2.5) shifted below -0.5, with plant_near_ties: exact ties, near-ties and
// logps 2^-38 off halfway).
template <class Runner>
void run_random_topk_case(Runner& runner, const std::string& style, int rows, int vocab, int k, uint64_t seed) {
  const std::string label = "topk " + style + " rows=" + std::to_string(rows) + " V=" + std::to_string(vocab) +
                            " K=" + std::to_string(k) + " seed=" + std::to_string(seed);
  std::mt19937_64 rng(seed);
  TopkIO t;
  t.rows = rows;
  t.vocab = vocab;
  t.k = k;
  t.logits.resize(static_cast<size_t>(rows) * vocab);
  std::normal_distribution<float> normal(0.0f, 2.5f);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int r = 0; r < rows; ++r) {
    float* x = t.logits.data() + static_cast<size_t>(r) * vocab;
    for (int i = 0; i < vocab; ++i) {
      if (style == "ties") x[i] = static_cast<float>(static_cast<int>(rng() % 5) - 3);
      else if (style == "huge") x[i] = 1e9f + 4.0f * normal(rng) * 64.0f;
      else if (style == "ninf") x[i] = unit(rng) < 0.99 ? -INFINITY : normal(rng);
      else if (style == "straddle") x[i] = (r % 2 ? 4096.0f : -4096.0f) + normal(rng);
      else if (style == "rising") x[i] = 5000.0f * static_cast<float>(3 * i / vocab - 1) + normal(rng);
      else x[i] = normal(rng);
    }
    if (style == "ascending") std::sort(x, x + vocab);
    if (style == "near_ties") plant_near_ties(x, vocab, k, rng);
    if (style == "ninf") x[rng() % vocab] = 1.0f;  // never a row of only -inf
  }
  t.poison_outputs();
  const KernelResult res = runner.topk(t);
  if (!res.ok()) report_failure(nullptr, 0, label + ": " + res.message);
  KD_CHECK(res.ok());
  std::vector<float> want_logp(static_cast<size_t>(rows) * k), logp(vocab);
  std::vector<int32_t> want_tok(static_cast<size_t>(rows) * k), ids(vocab);
  for (int r = 0; r < rows; ++r) {
    const float* x = t.logits.data() + static_cast<size_t>(r) * vocab;
    const double lse = reference_lse(x, vocab);
    for (int i = 0; i < vocab; ++i) logp[i] = static_cast<float>(static_cast<double>(x[i]) - lse);
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                      [&](int a, int b) { return logp[a] != logp[b] ? logp[a] > logp[b] : a < b; });
    for (int j = 0; j < k; ++j) {
      want_tok[static_cast<size_t>(r) * k + j] = ids[j];
      want_logp[static_cast<size_t>(r) * k + j] = logp[ids[j]];
    }
  }
  const int before = failures_in_case();
  expect_equal_arrays(label + " tok", t.tok.data(), want_tok.data(), static_cast<int64_t>(want_tok.size()));
  expect_equal_arrays(label + " logp", t.logp.data(), want_logp.data(), static_cast<int64_t>(want_logp.size()));
  if (failures_in_case() != before) std::printf("    (%s failed)\n", label.c_str());
}

// The random cases above over the block sizes and both load paths (V % 4 != 0: scalar loads).
// `sms` sets the runner's pretend SM count where it has one (the emulator), so the rows
// choose 512-, 256- or 128-thread blocks.
template <class Runner>
void run_random_topk_cases(Runner& runner, uint64_t seed, bool large) {
  std::printf("    random topk seed %llu\n", static_cast<unsigned long long>(seed));
  const int big = large ? 163840 : 40000;
  run_random_topk_case(runner, "normal", 3, big, 256, seed + 1);
  run_random_topk_case(runner, "normal", 2, big + 3, 1024, seed + 2);
  run_random_topk_case(runner, "ascending", 2, 20000, 1024, seed + 3);
  run_random_topk_case(runner, "ascending", 1, 9001, 7, seed + 4);
  run_random_topk_case(runner, "ninf", 3, 50000, 1024, seed + 5);
  run_random_topk_case(runner, "ties", 2, 30001, 256, seed + 6);
  run_random_topk_case(runner, "huge", 2, 20000, 64, seed + 7);
  run_random_topk_case(runner, "rising", 2, 30000, 256, seed + 11);
  run_random_topk_case(runner, "straddle", 2, 30000, 256, seed + 13);
  run_random_topk_case(runner, "near_ties", 2, 30000, 256, seed + 14);
  run_random_topk_case(runner, "normal", 1, 5003, 5, seed + 12);
  run_random_topk_case(runner, "normal", 4, 97, 97, seed + 8);
}

}  // namespace kdtree::test
