// verify_attn (every tile configuration, the baselines of csrc/dev/ included, one split and
// several) on the SIMT emulator (CPU), against refs/verify_attn.kdtr and the float32 kernel.
#include <algorithm>
#include <cmath>
#include <random>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "emu_attn_runner.h"
#include "common/kernel_checks/tma_probe.cuh"
#include "common/kernel_checks/wgmma_probe.cuh"

using namespace kdtree;
using namespace kdtree::test;

namespace {
const KdtrFile& bundle() {
  static const KdtrFile f(repo_path("refs/verify_attn.kdtr"));
  return f;
}
}  // namespace

// One probe of each wgmma operand form the wgmma kernel uses against a double-precision
// matmul (fresh random inputs; seed from KD_SEED or the clock, printed).
KD_TEST(wgmma_probe_matches_matmul) {
  if (!emulated_device_limits().wgmma) KD_SKIP("the emulated device has no wgmma (sm_90a only)");
  const char* env = std::getenv("KD_SEED");
  const uint64_t seed = env && *env ? std::strtoull(env, nullptr, 10) : static_cast<uint64_t>(std::random_device{}());
  std::printf("    seed %llu\n", static_cast<unsigned long long>(seed));
  WgmmaProbeHost h(seed);
  const WgmmaProbeIO io{h.a.data(), h.b.data(), h.p.data(), h.v.data(), h.s.data(), h.s_hi.data(), h.o_ss.data(), h.o_rs.data()};
  ::kdemu::launch(dim3(1), dim3(kProbeThreads), kProbeSmemBytes, wgmma_probe_kernel, io);
  KD_EXPECT_EQ(h.check(), 0);
}

// The TMA tile layout (tensor map, box coordinates, zeros past the tensor, mbarrier phases)
// against sw128_offset (common/kernel_checks/tma_probe.cuh).
KD_TEST(tma_probe_matches_layout) {
  const std::vector<uint16_t> src = tma_probe_input(7);
  TmaMap map;
  const KernelResult r = tma_probe_map(&map, src.data());
  KD_CHECK(r.ok());
  int mismatches[kTmaProbeFills] = {};
  ::kdemu::launch(dim3(1), dim3(kTmaProbeThreads), kTmaProbeSmemBytes, tma_probe_kernel, map, src.data(), mismatches);
  for (int f = 0; f < kTmaProbeFills; ++f) KD_EXPECT_EQ(mismatches[f], 0);
}

// Every configuration the emulated device runs, the baselines included (KDTREE_DEVICE_PROFILE's
// limits: the others are skipped, each saying why); the seesaw pairs have their own test
// (verify_attn_seesaw_pairs).
std::vector<int> device_configs(const EmuAttnRunner& runner) {
  std::vector<int> all;
  for (int c : kVerifyConfigs)
    if (c != kVerifyBf16WgmmaSeesawPairs) all.push_back(c);
  return runnable_configs(all, runner.smem_optin, runner.wgmma);
}

KD_TEST(verify_attn_one_split) {
  EmuAttnRunner runner;
  run_attn_bundle(runner, bundle(), device_configs(runner), 0);
}

KD_TEST(verify_attn_forced_splits) {
  EmuAttnRunner runner;
  run_attn_bundle(runner, bundle(), device_configs(runner), 64);
}

// Every case of the bundle through configurations a and b (dtype as given), one split and
// several: their outputs and lse values must agree bit for bit. Skipped, saying why, where the
// emulated device runs either not.
void expect_bitwise_equal(AttnDType dtype, int a, int b) {
  EmuAttnRunner runner;
  for (int c : {a, b})
    if (const std::string why = verify_config_unavailable(c, runner.smem_optin, runner.wgmma); !why.empty()) KD_SKIP(why);
  const int cases = static_cast<int>(scalar(bundle(), "num_cases"));
  for (int split_keys : {0, 64})
    for (int i = 0; i < cases; ++i) {
      const AttnIO base = load_attn_case(bundle(), "v" + std::to_string(i));
      std::vector<float> out[2], lse[2];
      for (int v = 0; v < 2; ++v) {
        AttnIO io = base;
        io.dtype = dtype;
        io.force_config = v == 0 ? a : b;
        io.force_split_keys = split_keys;
        io.poison_outputs();
        KD_CHECK(runner.attn(io).ok());
        out[v] = io.out;
        lse[v] = io.lse;
      }
      KD_EXPECT(std::memcmp(out[0].data(), out[1].data(), out[0].size() * sizeof(float)) == 0);
      KD_EXPECT(std::memcmp(lse[0].data(), lse[1].data(), lse[0].size() * sizeof(float)) == 0);
    }
}

// The float32 tiles of 16 rows (config 2) and 8 (config 13, the one ~99 KB devices get) give
// the same outputs bit for bit: each row's arithmetic is the same.
KD_TEST(verify_attn_f32_tiles_equal_bitwise) { expect_bitwise_equal(AttnDType::kF32, kVerifyF32, kVerifyF32Narrow); }

// The decode tiles (configs 3, 4, 11, 12: <= 32 rows) over prefixes of many key tiles, partial last
// tiles and requests of different lengths, one split and several: the bundle's decode-shaped
// cases have short prefixes, so the tiles' pipelines (buffers reused, mbarrier phases past the
// first) are checked here, against the float32 kernel (itself checked against the bundle to
// 1e-5) on fresh random bf16 inputs.
KD_TEST(verify_attn_decode_tiles_long_prefixes) {
  std::mt19937_64 rng(test_seed());
  constexpr int kHeads = 8, kTree = 2;  // 16 query rows: every decode tile takes them
  EmuAttnRunner runner;
  AttnIO ref;
  // many tiles, a partial last one; a shorter request; a chain (each token sees itself and those before)
  const int prefix0 = 517 + static_cast<int>(rng() % 200);
  const AttnIO io = random_attn_case(rng, kHeads, kTree, prefix0, 213, {0b1u, 0b11u}, runner, &ref);
  for (int split_keys : {0, 128})
    for (int cfg : runnable_configs({kVerifyBf16Decode, kVerifyBf16DecodeSmall, kVerifyBf16DecodeNarrow,
                                     kVerifyBf16DecodeNarrowPair}, runner.smem_optin, runner.wgmma)) {
      AttnIO c = io;
      c.force_config = cfg;
      c.force_split_keys = split_keys;
      check_attn(runner, c, ref.out.data(), ref.lse.data(),
                 "decode cfg" + std::to_string(cfg) + " split_keys " + std::to_string(split_keys));
    }
}

// Parameters for planning alone (the pointers lead nowhere): `batch` requests of `heads` x
// `tree_len` query rows over caches of `capacity` rows, the longest prefix that leaves room for
// the tree.
VerifyAttnParams params_to_plan(AttnDType dtype, int batch, int heads, int tree_len, int capacity) {
  VerifyQueries q;
  q.dtype = dtype;
  q.batch = batch;
  q.tree_len = tree_len;
  q.heads = heads;
  q.scale = 0.1f;
  return make_verify_attn_plan_params(q, capacity);
}

// A random tree of `tree` tokens (token 0 the root, each later one a child of a random earlier
// one): each token's ancestor mask, itself included, in words of 32 tree positions.
std::vector<uint32_t> random_tree_mask(std::mt19937_64& rng, int tree) {
  const int words = (tree + 31) / 32;
  std::vector<uint32_t> vis(static_cast<size_t>(tree) * words, 0u);
  for (int t = 0; t < tree; ++t) {
    if (t > 0) {
      const int parent = static_cast<int>(rng() % static_cast<uint64_t>(t));
      std::copy_n(vis.begin() + static_cast<size_t>(parent) * words, words, vis.begin() + static_cast<size_t>(t) * words);
    }
    vis[static_cast<size_t>(t) * words + t / 32] |= 1u << (t % 32);
  }
  return vis;
}

// Kimi K2.6's attention on one rank of eight (8 heads) at the tree sizes DDTree verifies (n
// drafted tokens: 1 + n query positions, a random tree of them) over prefixes of a few thousand
// keys, a shorter second request: the plan's bf16 tile (on the RTX PRO 6000's profile config 12,
// the two-stage 16-row tile, in row tiles of 16 past 16 rows) with the emulated device's SM
// count, with 4 SMs (few splits), and config 12 forced with 256-key splits, against the float32
// kernel on the same inputs.
KD_TEST(verify_attn_kimi_rank_shapes) {
  std::mt19937_64 rng(test_seed());
  constexpr int kRankHeads = 8;
  for (int n : {1, 2, 9, 17, 33, 65}) {
    EmuAttnRunner runner;
    // a few thousand keys; fewer for the largest trees (the emulator's time grows with rows x keys)
    const int longest = n <= 9 ? 3000 : n <= 33 ? 1500 : 800;
    const int prefix0 = longest - static_cast<int>(rng() % 200), prefix1 = static_cast<int>(rng() % (longest / 2));
    AttnIO ref;
    const AttnIO io = random_attn_case(rng, kRankHeads, 1 + n, prefix0, prefix1, random_tree_mask(rng, 1 + n), runner, &ref);
    struct Run {
      int sms, config, split_keys;
    };
    const Run runs[] = {{emulated_device_limits().sms, -1, 0}, {4, -1, 0}, {4, kVerifyBf16DecodeNarrowPair, 256}};
    for (const Run& run : runs) {
      if (run.config >= 0)
        if (const std::string why = verify_config_unavailable(run.config, runner.smem_optin, runner.wgmma); !why.empty()) {
          std::printf("    skipped on this device: %s\n", why.c_str());
          continue;
        }
      AttnIO c = io;
      c.force_config = run.config;
      c.force_split_keys = run.split_keys;
      runner.sms = run.sms;
      check_attn(runner, c, ref.out.data(), ref.lse.data(),
                 "H8 n" + std::to_string(n) + " " + std::to_string(run.sms) + " SMs cfg" + std::to_string(run.config) +
                     " split_keys " + std::to_string(run.split_keys));
      std::printf("      config %d: %d row tiles x %d splits of %d keys\n", runner.last_plan.config, runner.last_plan.m_tiles,
                  runner.last_plan.splits, runner.last_plan.split_len);
    }
  }
}

// The RTX PRO 6000's plan (its profile's limits, whatever the emulated device): every bf16 shape
// of Kimi's per-rank attention takes config 12 (two stages of key tiles, 16-row tiles), and its
// split search fills the profile's 188 SMs where the prefix has the keys for it (32k, 128k): at
// most two waves of CTAs (plus a split's rounding), and a first wave at least kWaveFill full
// (splits are whole key tiles, and the search takes more splits only for a 2% gain: H8 n1 32k
// is 171 splits of 6 tiles, where 188 would need 5.5). With the H200's 132 SMs that shape
// plans 129 CTAs: a plan that ignored the profile's SM count fails here.
KD_TEST(verify_attn_sm120_plan_fills_its_sms) {
  constexpr double kWaveFill = 0.9;
  const DeviceProfile& pro = *find_device_profile("rtx-pro-6000");
  for (int n : {1, 2, 9, 17, 33, 65})
    for (int prefix : {32768, 131072}) {
      const VerifyAttnParams p = params_to_plan(AttnDType::kBF16, 1, 8, 1 + n, prefix + 1 + n);
      VerifyAttnPlan plan;
      KD_CHECK(make_verify_attn_plan(p, pro.sms, pro.smem_optin, pro.smem_per_sm, &plan, pro.wgmma).ok());
      const int64_t ctas = static_cast<int64_t>(plan.m_tiles) * plan.splits * p.batch;
      std::printf("    H8 n%-2d prefix %6d: config %d, %d row tiles x %d splits of %d keys = %lld CTAs on %d SMs\n", n, prefix,
                  plan.config, plan.m_tiles, plan.splits, plan.split_len, static_cast<long long>(ctas), pro.sms);
      KD_EXPECT_EQ(plan.config, static_cast<int>(kVerifyBf16DecodeNarrowPair));
      KD_EXPECT_EQ(plan.m_tiles, (8 * (1 + n) + 15) / 16);
      KD_EXPECT(ctas >= kWaveFill * pro.sms);
      KD_EXPECT(ctas <= static_cast<int64_t>(kVerifyMaxSplitWaves) * pro.sms + plan.m_tiles);
      KD_EXPECT(plan.split_bound >= plan.splits);
    }
}

// The seesaw pairs (config 14, a baseline) on the emulator (verify_attn_cases.h,
// check_seesaw_pairs): 80 query rows (a full row tile and a partial one), a chain with a branch;
// 64-key splits over 600..699 + 5 keys make an odd count, so the evened form (an empty split
// before the tree's) runs too.
KD_TEST(verify_attn_seesaw_pairs) {
  EmuAttnRunner runner;
  if (const std::string why = verify_config_unavailable(kVerifyBf16WgmmaSeesawPairs, runner.smem_optin, runner.wgmma);
      !why.empty())
    KD_SKIP(why);
  std::mt19937_64 rng(test_seed());
  const int odd = check_seesaw_pairs(runner, rng, 16, 5, 600 + static_cast<int>(rng() % 100), 150, {0, 384, 192, 128, 64});
  KD_EXPECT(odd > 0);
}

// The merge's two kernels (a warp per row up to kMergeRowsMaxSplits splits, warps over the
// splits beyond) against a float64 merge of random partials. Some splits saw no key (lse
// -inf): their partial rows are NaN, so a kernel that weighs one in fails (the kernels load
// them with the others, before the weights are known); one row saw no key at all (output 0,
// lse -inf). The split kernel's other forms run too and agree: both batches at
// <= kMergeRowsMaxSplits, the wide one beyond.
KD_TEST(verify_merge_matches_double) {
  std::mt19937_64 rng(test_seed());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> lse_of(-30.0f, 10.0f);  // base 2: weights from ~1 to ~1e-12
  for (int S : {2, 3, kern::kMergeRowBatch + 1, kern::kMergeRowsMaxSplits, kern::kMergeRowsMaxSplits + 1, 33, 65, 300})
    for (int batch : {1, 2}) {
      const int rows = S <= kern::kMergeRowsMaxSplits ? 37 : 5;  // the row kernel: a partial last block
      const size_t parts = static_cast<size_t>(batch) * S * rows;
      std::vector<float> part_o(parts * kVerifyLatentDim), part_lse(parts);
      for (size_t i = 0; i < parts; ++i) {
        const bool no_key = i % rows == 3 || rng() % 10 == 0;  // (b, s, m) with i % rows = m: row 3 sees none
        part_lse[i] = no_key ? -INFINITY : lse_of(rng);
        for (int c = 0; c < kVerifyLatentDim; ++c)
          part_o[i * kVerifyLatentDim + c] = part_lse[i] == -INFINITY ? NAN : normal(rng);
      }
      // float64 reference
      std::vector<double> ref(static_cast<size_t>(batch) * rows * kVerifyLatentDim, 0.0), ref_lse(batch * rows);
      for (int b = 0; b < batch; ++b)
        for (int m = 0; m < rows; ++m) {
          double top = -INFINITY, total = 0.0;
          for (int s = 0; s < S; ++s) top = std::max<double>(top, part_lse[(static_cast<size_t>(b) * S + s) * rows + m]);
          for (int s = 0; s < S; ++s) {
            const double l = part_lse[(static_cast<size_t>(b) * S + s) * rows + m];
            if (l != -INFINITY) total += std::exp2(l - top);
          }
          ref_lse[b * rows + m] = total > 0 ? (top + std::log2(total)) / kern::kLog2e : -INFINITY;
          for (int s = 0; s < S; ++s) {
            const size_t i = (static_cast<size_t>(b) * S + s) * rows + m;
            if (part_lse[i] == -INFINITY) continue;
            const double w = std::exp2(part_lse[i] - top) / total;
            for (int c = 0; c < kVerifyLatentDim; ++c)
              ref[(static_cast<size_t>(b) * rows + m) * kVerifyLatentDim + c] += w * part_o[i * kVerifyLatentDim + c];
          }
        }
      kern::VerifyKernelParams k{};
      k.p.batch = batch;
      k.rows = rows;
      k.splits = S;
      k.split_group = 1;
      k.parts = S;
      k.part_o = part_o.data();
      k.part_lse = part_lse.data();
      std::vector<float> out_f(ref.size()), lse_f(ref_lse.size()), out_split(ref.size());
      std::vector<__nv_bfloat16> out_b(ref.size());
      k.p.out = out_f.data();
      k.p.lse = lse_f.data();
      kern::launch_verify_merge<float>(k, nullptr);
      double worst_f = 0, worst_b = 0, worst_lse = 0, worst_split = 0;
      const auto err = [](double d) { return std::isnan(d) ? INFINITY : d; };  // a NaN is the worst error
      for (size_t i = 0; i < ref.size(); ++i) worst_f = std::max(worst_f, err(std::abs(out_f[i] - ref[i])));
      for (size_t i = 0; i < ref_lse.size(); ++i)
        worst_lse = std::max(worst_lse, ref_lse[i] == -INFINITY ? (lse_f[i] == -INFINITY ? 0.0 : INFINITY)
                                                                 : err(std::abs(lse_f[i] - ref_lse[i])));
      k.p.out = out_b.data();
      k.p.lse = nullptr;
      kern::launch_verify_merge<__nv_bfloat16>(k, nullptr);
      for (size_t i = 0; i < ref.size(); ++i)  // one rounding to bf16: half an ulp, <= 2^-8 relative
        worst_b = std::max(worst_b, err(std::abs(__bfloat162float(out_b[i]) - ref[i]) - std::abs(ref[i]) * 0x1p-8));
      // the split kernel's other forms: at <= kMergeRowsMaxSplits (where the launch picks the row
      // kernel) both batches, beyond them the wide one (the launch above ran the narrow one)
      k.p.out = out_split.data();
      const auto check_split = [&] {
        for (size_t i = 0; i < ref.size(); ++i) worst_split = std::max(worst_split, err(std::abs(out_split[i] - ref[i])));
      };
      if (S <= kern::kMergeRowsMaxSplits) {
        ::kdemu::launch(dim3(rows, kern::kMergeColBlocks, batch), dim3(kern::kMergeThreads), 0,
                        kern::verify_merge_kernel<float, kern::kMergeBatch>, k);
        check_split();
        ::kdemu::launch(dim3(rows, kern::kMergeColBlocks, batch), dim3(kern::kMergeThreads), 0,
                        kern::verify_merge_kernel<float, kern::kMergeWideBatch>, k);
      } else {
        kern::launch_verify_merge<float>(k, nullptr, false, true);
      }
      check_split();
      std::printf("    S %3d B%d rows %2d: max|d| f32 %.2e, bf16 past its rounding %.2e, lse %.2e, other split forms %.2e\n", S,
                  batch, rows, worst_f, worst_b, worst_lse, worst_split);
      // outputs are weighted means of N(0, 1) values: |out| < ~5, so 1e-5 is ~20 float32 ulps
      KD_EXPECT(worst_f <= 1e-5);
      KD_EXPECT(worst_b <= 1e-5);
      KD_EXPECT(worst_lse <= 1e-5);
      KD_EXPECT(worst_split <= 1e-5);
    }
}

// Files of python_engine/refgen/large_attn_cases.py (folder in $KD_LARGE_ATTN_DIR): the
// generator's schema and its torch reference, checked on the CPU (keep them small here). Each
// case runs in float32 and in bf16 with the plan's configuration.
KD_TEST(verify_attn_large_from_env) {
  const char* dir = std::getenv("KD_LARGE_ATTN_DIR");
  if (!dir || !*dir) KD_SKIP("set KD_LARGE_ATTN_DIR");
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".kdtr") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  EmuAttnRunner runner;
  runner.sms = 8;
  for (const auto& path : files) {
    const KdtrFile f(path.string());
    const AttnIO base = load_attn_case(f, "v0");
    for (const AttnDType d : {AttnDType::kF32, AttnDType::kBF16}) {
      AttnIO io = base;
      io.dtype = d;
      check_attn(runner, io, f.get("v0.out").as<float>(), f.get("v0.lse").as<float>(),
                 path.stem().string() + (d == AttnDType::kF32 ? " f32" : " bf16"));
      std::printf("      %d splits of %d keys, config %d\n", runner.last_plan.splits, runner.last_plan.split_len,
                  runner.last_plan.config);
    }
  }
}

// KDTREE_DEVICE_PROFILE may only take away (common/device_profile.h): the RTX PRO 6000's
// profile stands on an H200 and caps its limits; the H200's is refused on the RTX PRO 6000
// (more shared memory, wgmma), with the reason; every profile stands on itself.
KD_TEST(device_profiles_only_take_away) {
  const DeviceProfile& h200 = *find_device_profile("h200");
  const DeviceProfile& pro = *find_device_profile("rtx-pro-6000");
  const auto facts_of = [](const DeviceProfile& p) {
    DeviceFacts f;
    f.cc_major = p.cc_major;
    f.cc_minor = p.cc_minor;
    f.sms = p.sms;
    f.smem_optin = p.smem_optin;
    f.smem_per_sm = p.smem_per_sm;
    return f;
  };
  for (const DeviceProfile& p : kDeviceProfiles) KD_EXPECT_EQ(profile_exceeds_device(p, facts_of(p)), std::string());
  KD_EXPECT_EQ(profile_exceeds_device(pro, facts_of(h200)), std::string());
  const DeviceFacts capped = facts_under_profile(facts_of(h200), &pro);
  KD_EXPECT_EQ(capped.smem_optin, 101376);
  KD_EXPECT_EQ(capped.sms, 188);  // the plans split as on the RTX PRO 6000
  KD_EXPECT(!facts_have_wgmma(capped));
  const std::string refused = profile_exceeds_device(h200, facts_of(pro));
  std::printf("    %s\n", refused.c_str());
  KD_EXPECT(refused.find("KDTREE_DEVICE_PROFILE=h200 asks for more shared memory a block (232448 bytes)") == 0);
  DeviceFacts big_pro = facts_of(pro);  // shared memory to spare, but no wgmma
  big_pro.smem_optin = h200.smem_optin;
  big_pro.smem_per_sm = h200.smem_per_sm;
  KD_EXPECT(profile_exceeds_device(h200, big_pro).find("wgmma") != std::string::npos);
  KD_EXPECT(find_device_profile("rtx-pro-9000") == nullptr);
}

KD_TEST_MAIN()

// The plan's prefix-independent workspace bound (what the engine allocates once per cache
// capacity): for devices like the H200 and the RTX PRO 6000, trees and prefill shapes, every
// prefix up to the capacity gets at most split_bound splits and workspace_bound_bytes of
// workspace. The split count is not monotone in the prefix, so probing a few prefixes is not
// enough (64 heads, batch 4, 17 tokens needed more than the powers of two showed).
KD_TEST(verify_attn_workspace_bound_covers_every_prefix) {
  struct Device {
    int sms, smem_optin, smem_per_sm;
  };
  const Device devices[] = {{132, 232448, 233472}, {188, 101376, 102400}};
  struct Shape {
    AttnDType dtype;
    int batch, heads, tree_len, capacity;
  };
  const Shape shapes[] = {{AttnDType::kBF16, 1, 64, 2, 40000},   {AttnDType::kBF16, 4, 64, 17, 40000},
                          {AttnDType::kBF16, 1, 8, 2, 40000},    {AttnDType::kBF16, 8, 8, 65, 40000},
                          {AttnDType::kBF16, 1, 64, 256, 40000}, {AttnDType::kF32, 2, 16, 33, 40000},
                          {AttnDType::kBF16, 3, 128, 9, 140000}, {AttnDType::kBF16, 1, 8, 2, 140000},
                          {AttnDType::kBF16, 4, 8, 2, 40000}};  // the last two: config 11 gives way to 12
  int checked = 0;
  for (const Device& d : devices)
    for (const Shape& s : shapes) {
      VerifyAttnParams p = params_to_plan(s.dtype, s.batch, s.heads, s.tree_len, s.capacity);
      VerifyAttnPlan bound;
      const KernelResult r = make_verify_attn_plan(p, d.sms, d.smem_optin, d.smem_per_sm, &bound);
      if (r.status == KernelStatus::kOverLimit && s.dtype == AttnDType::kF32) continue;  // no f32 tile on ~99 KB devices
      if (!r.ok()) std::printf("    B%d H%d T%d: %s\n", s.batch, s.heads, s.tree_len, r.message.c_str());
      KD_EXPECT(r.ok());
      // every prefix below 4096, then steps that hit many residues of the tile and split sizes
      const int top = p.max_prefix;
      for (int prefix = 0; prefix <= top; prefix += prefix < 4096 ? 1 : 97) {
        p.max_prefix = prefix;
        VerifyAttnPlan plan;
        const KernelResult rp = make_verify_attn_plan(p, d.sms, d.smem_optin, d.smem_per_sm, &plan);
        if (!rp.ok()) {
          std::printf("    prefix %d of B%d H%d T%d: %s\n", prefix, s.batch, s.heads, s.tree_len, rp.message.c_str());
          KD_EXPECT(false);
          return;
        }
        if (plan.splits > bound.split_bound || plan.workspace_bytes > bound.workspace_bound_bytes) {
          KD_EXPECT(false);
          std::printf("    prefix %d of shape B%d H%d T%d: %d splits, %zu bytes; bound %d, %zu\n", prefix, s.batch,
                      s.heads, s.tree_len, plan.splits, plan.workspace_bytes, bound.split_bound,
                      bound.workspace_bound_bytes);
          return;
        }
        ++checked;
      }
    }
  std::printf("    %d plans within their shape's bound\n", checked);
}
