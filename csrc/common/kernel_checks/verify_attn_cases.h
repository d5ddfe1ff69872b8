// verify_attn cases for any runner: the small committed bundle (refs/verify_attn.kdtr) and
// the large ones generated on the GPU machine (python_engine/refgen/large_attn_cases.py),
// both with schema v{i}.{q_lat,q_pe,kv (bf16), prefix, vis, scale, out, lse}.
//
// A runner provides  KernelResult attn(AttnIO&)  which fills io.out / io.lse (float32 copies
// of the kernel's output) for io.dtype, honouring io.force_config / io.force_split_keys.
#pragma once

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/verify_attn.cuh"
#include "kernels/verify_attn_plan.h"

namespace kdtree::test {

inline float bf16_to_float(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct AttnIO {
  AttnDType dtype = AttnDType::kBF16;
  int batch = 0, heads = 0, tree_len = 0, max_prefix = 0, vis_words = 0, kv_rows = 0;
  float scale = 0.0f;
  int force_config = -1, force_split_keys = 0;
  bool with_prefix_array = true;
  std::vector<uint16_t> q_lat, q_pe, kv;  // bf16 bits as stored in the bundle
  std::vector<int32_t> prefix;
  std::vector<uint32_t> vis;
  std::vector<float> out, lse;  // filled by the runner (poisoned first)
  int64_t rows() const { return static_cast<int64_t>(tree_len) * heads; }
  void poison_outputs() {
    out.assign(static_cast<size_t>(batch * rows()) * kVerifyLatentDim, poison_f32());
    lse.assign(static_cast<size_t>(batch * rows()), poison_f32());
  }
  // float32 copies of the inputs (exact: the values are bf16)
  static std::vector<float> widen(const std::vector<uint16_t>& v) {
    std::vector<float> f(v.size());
    for (size_t i = 0; i < v.size(); ++i) f[i] = bf16_to_float(v[i]);
    return f;
  }
};

// Where a runner holds io's arrays (its own copies: widened to float32, on the device, ...).
struct AttnIOArrays {
  const void* q_lat = nullptr;
  const void* q_pe = nullptr;
  const void* kv = nullptr;
  const int32_t* prefix = nullptr;
  const uint32_t* vis = nullptr;
  void* out = nullptr;
  float* lse = nullptr;
};

// The launch parameters for io with its arrays at `at` (the prefix array only when
// io.with_prefix_array), and io's forced plan choices.
inline VerifyAttnParams verify_attn_params(const AttnIO& io, const AttnIOArrays& at) {
  VerifyQueries queries;
  queries.dtype = io.dtype;
  queries.batch = io.batch;
  queries.tree_len = io.tree_len;
  queries.heads = io.heads;
  queries.q_lat = at.q_lat;
  queries.q_pe = at.q_pe;
  queries.scale = io.scale;
  VerifyKeys keys;
  keys.kv = at.kv;
  keys.batch_stride = static_cast<int64_t>(io.kv_rows) * kVerifyQKDim;
  keys.max_prefix = io.max_prefix;
  keys.prefix_len = io.with_prefix_array ? at.prefix : nullptr;
  TreeMask mask;
  mask.vis = at.vis;
  mask.words = io.vis_words;
  VerifyOutputs outputs;
  outputs.out = at.out;
  outputs.lse = at.lse;
  VerifyAttnParams p = make_verify_attn_params(queries, keys, mask, outputs);
  p.force_config = io.force_config;
  p.force_split_keys = io.force_split_keys;
  return p;
}

inline AttnIO load_attn_case(const KdtrFile& f, const std::string& c) {
  AttnIO io;
  const KdtrTensor& q = tensor(f, c + ".q_lat", 4);
  io.batch = static_cast<int>(q.shape[0]);
  io.tree_len = static_cast<int>(q.shape[1]);
  io.heads = static_cast<int>(q.shape[2]);
  const KdtrTensor& kv = tensor(f, c + ".kv", 3);
  io.kv_rows = static_cast<int>(kv.shape[1]);
  io.q_lat = to_vector<uint16_t>(q);
  io.q_pe = to_vector<uint16_t>(tensor(f, c + ".q_pe", 4));
  io.kv = to_vector<uint16_t>(kv);
  io.prefix = to_vector<int32_t>(tensor(f, c + ".prefix", 1));
  const KdtrTensor& vis = tensor(f, c + ".vis", 3);
  io.vis_words = static_cast<int>(vis.shape[2]);
  io.vis = to_vector<uint32_t>(vis);
  io.scale = f.get(c + ".scale").as<float>()[0];
  for (int32_t p : io.prefix) io.max_prefix = std::max(io.max_prefix, static_cast<int>(p));
  return io;
}

struct AttnError {
  double rel = 0.0;       // ||out - ref|| / ||ref||
  double max_abs = 0.0;   // of out - ref
  double lse_max = 0.0;   // max |lse - ref lse|
  int64_t bad = 0;        // NaN/Inf (never written, or broken) elements
};

inline AttnError attn_error(const AttnIO& io, const float* ref_out, const float* ref_lse) {
  AttnError e;
  double num = 0.0, den = 0.0;
  const size_t n = io.out.size();
  for (size_t i = 0; i < n; ++i) {
    const double got = io.out[i], want = ref_out[i];
    if (!std::isfinite(got)) {
      ++e.bad;
      continue;
    }
    num += (got - want) * (got - want);
    den += want * want;
    e.max_abs = std::max(e.max_abs, std::fabs(got - want));
  }
  e.rel = den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
  for (size_t i = 0; i < io.lse.size(); ++i) {
    if (!std::isfinite(io.lse[i])) {
      ++e.bad;
      continue;
    }
    e.lse_max = std::max(e.lse_max, std::fabs(static_cast<double>(io.lse[i]) - ref_lse[i]));
  }
  return e;
}

// Tolerances (float32 near exact; bf16 at its 8-bit mantissa): relative error <= 1e-5 in float32, <= 1e-2 in bf16; NaN never passes.
inline double attn_tolerance(AttnDType d) { return d == AttnDType::kF32 ? 1e-5 : 1e-2; }
inline double lse_tolerance(AttnDType d) { return d == AttnDType::kF32 ? 1e-5 : 2e-2; }

// Run one case through the runner and check it. `label` names it in failures; returns the
// error (for the summary table).
template <class Runner>
AttnError check_attn(Runner& runner, AttnIO io, const float* ref_out, const float* ref_lse, const std::string& label) {
  io.poison_outputs();
  const KernelResult r = runner.attn(io);
  if (!r.ok()) {
    report_failure(nullptr, 0, label + ": " + r.message);
    return AttnError{1.0, 0.0, 0.0, 1};
  }
  const AttnError e = attn_error(io, ref_out, ref_lse);
  const double tol = attn_tolerance(io.dtype);
  std::printf("    %-44s rel %.3e  max|d| %.3e  lse %.3e%s\n", label.c_str(), e.rel, e.max_abs, e.lse_max,
              e.bad ? "  NaN/unwritten!" : "");
  if (e.bad) report_failure(nullptr, 0, label + ": " + std::to_string(e.bad) + " outputs NaN/Inf or never written");
  if (!(e.rel <= tol)) report_failure(nullptr, 0, label + ": relative error " + std::to_string(e.rel) + " over " + std::to_string(tol));
  if (!(e.lse_max <= lse_tolerance(io.dtype)))
    report_failure(nullptr, 0, label + ": lse error " + std::to_string(e.lse_max));
  return e;
}

// The configurations of `wanted` a device with these limits runs (the plan's own rule,
// verify_config_unavailable); each one left out is printed with why.
inline std::vector<int> runnable_configs(const std::vector<int>& wanted, int smem_optin, bool wgmma) {
  std::vector<int> out;
  for (int c : wanted) {
    const std::string why = verify_config_unavailable(c, smem_optin, wgmma);
    if (why.empty()) out.push_back(c);
    else std::printf("    skipped on this device: %s\n", why.c_str());
  }
  return out;
}

// Every case of a bundle: float32 with the plan's tile, then each of `configs` forced (float32
// or bf16 by the configuration).
template <class Runner>
void run_attn_bundle(Runner& runner, const KdtrFile& f, const std::vector<int>& configs, int split_keys) {
  const int cases = static_cast<int>(scalar(f, "num_cases"));
  for (int i = 0; i < cases; ++i) {
    const std::string c = "v" + std::to_string(i);
    const AttnIO base = load_attn_case(f, c);
    const float* ref_out = f.get(c + ".out").as<float>();
    const float* ref_lse = f.get(c + ".lse").as<float>();
    const std::string shape = c + " B" + std::to_string(base.batch) + " H" + std::to_string(base.heads) + " T" +
                              std::to_string(base.tree_len) + " P" + std::to_string(base.max_prefix);
    AttnIO io = base;
    io.dtype = AttnDType::kF32;
    io.force_split_keys = split_keys;
    check_attn(runner, io, ref_out, ref_lse, shape + " f32");  // the plan's float32 tile
    for (int cfg : configs) {
      if (base.rows() > verify_config_max_rows(cfg)) continue;  // the decode tiles' limits
      const bool f32 = verify_config_is_f32(cfg);
      io = base;
      io.dtype = f32 ? AttnDType::kF32 : AttnDType::kBF16;
      io.force_config = cfg;
      io.force_split_keys = split_keys;
      io.with_prefix_array = (i % 2 == 0) || base.batch > 1;  // also the prefix_len == null path
      check_attn(runner, io, ref_out, ref_lse, shape + (f32 ? " f32" : " bf16") + " cfg" + std::to_string(cfg));
    }
  }
}

// A batch of two requests of fresh random bf16 inputs (N(0, 1), truncated: any bf16 will do):
// `heads` x `tree` query rows, prefixes {prefix0, prefix1}, tree token t seeing the tree
// positions of its vis_words = vis.size() / tree words vis[t * vis_words ...] (bit i of word j:
// token 32 j + i), MLA's softmax scale. Its float32 kernel output, which the bundle
// checks to 1e-5, is the reference the bf16 tiles are held to (ref).
template <class Runner>
AttnIO random_attn_case(std::mt19937_64& rng, int heads, int tree, int prefix0, int prefix1,
                        const std::vector<uint32_t>& vis, Runner& runner, AttnIO* ref) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto bf16 = [&] {
    const float f = normal(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    return static_cast<uint16_t>(bits >> 16);
  };
  AttnIO io;
  io.batch = 2;
  io.heads = heads;
  io.tree_len = tree;
  io.prefix = {prefix0, prefix1};
  io.max_prefix = std::max(prefix0, prefix1);
  io.kv_rows = io.max_prefix + tree;
  io.scale = 1.0f / std::sqrt(192.0f);  // MLA's softmax scale (qk_nope + rope head dims)
  io.vis_words = static_cast<int>(vis.size()) / tree;
  KD_CHECK(io.vis_words >= 1 && vis.size() == static_cast<size_t>(tree) * io.vis_words);
  for (int b = 0; b < io.batch; ++b) io.vis.insert(io.vis.end(), vis.begin(), vis.end());
  const size_t rows = static_cast<size_t>(io.batch) * tree * heads;
  for (size_t i = 0; i < rows * kVerifyLatentDim; ++i) io.q_lat.push_back(bf16());
  for (size_t i = 0; i < rows * kVerifyRopeDim; ++i) io.q_pe.push_back(bf16());
  for (size_t i = 0; i < static_cast<size_t>(io.batch) * io.kv_rows * kVerifyQKDim; ++i) io.kv.push_back(bf16());
  std::printf("    prefixes %d, %d\n", prefix0, prefix1);
  *ref = io;
  ref->dtype = AttnDType::kF32;
  ref->poison_outputs();
  KD_CHECK(runner.attn(*ref).ok());
  return io;
}

// The seesaw pairs (config 14, a baseline: two splits of a row tile reduced through distributed
// shared memory, a cluster of two) against the float32 kernel on a random_attn_case of `heads`
// x `tree` rows (a chain with a branch at 3 when tree > 3), prefixes {prefix0, prefix1}: per
// forced split length (0: the plan's), one pair (the output written directly) or many, odd
// counts evened (the tree's split alone, maybe an empty one before it), a shorter request whose
// pairs are half or wholly empty. Returns how many of the runs had an odd count to even.
template <class Runner>
int check_seesaw_pairs(Runner& runner, std::mt19937_64& rng, int heads, int tree, int prefix0, int prefix1,
                       const std::vector<int>& split_keys_list) {
  std::vector<uint32_t> vis;
  for (int t = 0; t < tree; ++t) vis.push_back(t == 3 ? 0b1001u : (2u << t) - 1);
  AttnIO ref;
  const AttnIO io = random_attn_case(rng, heads, tree, prefix0, prefix1, vis, runner, &ref);
  int odd = 0;
  for (int split_keys : split_keys_list) {
    AttnIO c = io;
    c.force_config = kVerifyBf16WgmmaSeesawPairs;
    c.force_split_keys = split_keys;
    check_attn(runner, c, ref.out.data(), ref.lse.data(), "seesaw pairs split_keys " + std::to_string(split_keys));
    const VerifyAttnPlan& pl = runner.last_plan;
    const int raw = split_keys > 0 ? (io.max_prefix + pl.split_len - 1) / pl.split_len : pl.splits;
    odd += split_keys > 0 && raw % 2 == 1;
    std::printf("      %d splits (%d before pairing) of %d keys, %d partials a row\n", pl.splits, raw, pl.split_len,
                verify_plan_parts(pl));
    if (pl.splits >= 2) KD_EXPECT_EQ(pl.split_group, kVerifySeesawSplitGroup);
    KD_EXPECT(pl.splits % pl.split_group == 0);
  }
  return odd;
}

}  // namespace kdtree::test
