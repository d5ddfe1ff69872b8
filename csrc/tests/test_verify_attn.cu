// verify_attn on the GPU against the float64 reference: the small committed cases
// (refs/verify_attn.kdtr) in float32 and bf16 (every tile configuration this build holds, one
// split and forced splits), and, when $KDTREE_LARGE_ATTN_DIR names a folder written by
// python_engine/refgen/large_attn_cases.py, the long-prefix cases (2048 .. 131072 keys,
// 8/16/64 heads, n up to 256). Tolerances: relative error <= 1e-5 (f32), <= 1e-2 (bf16).
#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "device_buffer.h"
#include "common/device_profile.h"
#include "kernels/launch_support.h"
#include "kernels/verify_attn.cuh"
#include "kernels/verify_attn_plan.h"
#include "common/kernel_checks/verify_attn_cases.h"
#include "common/kernel_checks/cluster_probe.cuh"
#include "common/kernel_checks/tma_probe.cuh"
#include "common/kernel_checks/wgmma_probe.cuh"

using namespace kdtree;
using namespace kdtree::test;

namespace {

struct GpuAttnRunner {
  VerifyAttnPlan last_plan;

  KernelResult attn(AttnIO& io) {
    const bool f32 = io.dtype == AttnDType::kF32;
    DeviceBuffer<float> q_lat_f, q_pe_f, kv_f, out_f;
    DeviceBuffer<uint16_t> q_lat_b, q_pe_b, kv_b, out_b;
    if (f32) {
      q_lat_f = DeviceBuffer<float>(AttnIO::widen(io.q_lat));
      q_pe_f = DeviceBuffer<float>(AttnIO::widen(io.q_pe));
      kv_f = DeviceBuffer<float>(AttnIO::widen(io.kv));
      out_f = DeviceBuffer<float>(io.out);  // poisoned
    } else {
      q_lat_b = DeviceBuffer<uint16_t>(io.q_lat);
      q_pe_b = DeviceBuffer<uint16_t>(io.q_pe);
      kv_b = DeviceBuffer<uint16_t>(io.kv);
      out_b = DeviceBuffer<uint16_t>(std::vector<uint16_t>(io.out.size(), 0x7fc1));  // bf16 NaN
    }
    DeviceBuffer<int32_t> prefix(io.prefix);
    DeviceBuffer<uint32_t> vis(io.vis);
    DeviceBuffer<float> lse(io.lse);
    AttnIOArrays at;
    at.q_lat = f32 ? static_cast<const void*>(q_lat_f.get()) : q_lat_b.get();
    at.q_pe = f32 ? static_cast<const void*>(q_pe_f.get()) : q_pe_b.get();
    at.kv = f32 ? static_cast<const void*>(kv_f.get()) : kv_b.get();
    at.prefix = prefix.get();
    at.vis = vis.get();
    at.out = f32 ? static_cast<void*>(out_f.get()) : out_b.get();
    at.lse = lse.get();
    VerifyAttnParams p = verify_attn_params(io, at);
    if (KernelResult r = verify_attn_plan(p, &last_plan); !r.ok()) return r;
    DeviceBuffer<uint8_t> workspace(last_plan.workspace_bytes);
    p.workspace = workspace.get();
    p.workspace_bytes = last_plan.workspace_bytes;
    const KernelResult r = verify_attn(p, nullptr);
    if (!r.ok()) return r;
    KD_CUDA_CHECK(cudaDeviceSynchronize());
    lse.download(io.lse);
    if (f32) {
      out_f.download(io.out);
    } else {
      const std::vector<uint16_t> bits = out_b.download();
      for (size_t i = 0; i < bits.size(); ++i) io.out[i] = bf16_to_float(bits[i]);
    }
    return r;
  }
};

const KdtrFile& bundle() {
  static const KdtrFile f(repo_path("refs/verify_attn.kdtr"));
  return f;
}

// The limits the plans see here: the device's, capped by KDTREE_DEVICE_PROFILE.
const DeviceLimits& plan_limits() {
  static const DeviceLimits limits = [] {
    DeviceLimits d;
    const KernelResult r = current_device_limits(&d);
    if (!r.ok()) std::printf("    %s\n", r.message.c_str());
    KD_CHECK(r.ok());
    return d;
  }();
  return limits;
}

}  // namespace

// The wgmma wrappers' operand layouts against a double-precision matmul on sm_90 (the only
// target with wgmma); fresh random inputs, seed from KDTREE_SEED or the clock, printed.
KD_GPU_TEST(wgmma_probe_matches_matmul) {
  if (!plan_limits().wgmma) KD_SKIP("wgmma needs sm_90a (this device, or its KDTREE_DEVICE_PROFILE, has none)");
  const char* env = std::getenv("KDTREE_SEED");
  const uint64_t seed = env && *env ? std::strtoull(env, nullptr, 10) : static_cast<uint64_t>(std::random_device{}());
  std::printf("    seed %llu\n", static_cast<unsigned long long>(seed));
  WgmmaProbeHost h(seed);
  DeviceBuffer<uint16_t> a(h.a), b(h.b), p(h.p), v(h.v);
  DeviceBuffer<float> s(h.s), s_hi(h.s_hi), o_ss(h.o_ss), o_rs(h.o_rs);
  const WgmmaProbeIO io{a.get(), b.get(), p.get(), v.get(), s.get(), s_hi.get(), o_ss.get(), o_rs.get()};
  KD_CUDA_CHECK(cudaFuncSetAttribute(wgmma_probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kProbeSmemBytes)));
  wgmma_probe_kernel<<<1, kProbeThreads, kProbeSmemBytes>>>(io);
  KD_CUDA_CHECK(cudaGetLastError());
  KD_CUDA_CHECK(cudaDeviceSynchronize());
  s.download(h.s);
  s_hi.download(h.s_hi);
  o_ss.download(h.o_ss);
  o_rs.download(h.o_rs);
  KD_EXPECT_EQ(h.check(), 0);
}

// Thread block clusters (cluster_support.cuh), the ground a reduction of split partials through
// distributed shared memory would stand on: ranks, peers' shared memory read and written, the
// cluster barrier (cluster_probe.cuh), in clusters of 2, 4 and 2 x 2 blocks.
KD_GPU_TEST(cluster_probe_shares_shared_memory) {
  cudaDeviceProp prop;
  KD_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major < 9) KD_SKIP("thread block clusters need compute capability 9.0+");
  const dim3 shapes[][2] = {{dim3(4, 2), dim3(2, 1)}, {dim3(8), dim3(4)}, {dim3(2, 4, 2), dim3(2, 2)}};
  for (const auto& [grid, cluster] : shapes) {
    DeviceBuffer<int> bad(std::vector<int>(kClusterProbeChecks, 0));
    KD_CUDA_CHECK(KD_LAUNCH_CLUSTER(cluster, cluster_probe_kernel, grid, kClusterProbeThreads, kClusterProbeSmemBytes,
                                    nullptr, cluster, bad.get()));
    KD_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<int> got = bad.download();
    for (int c = 0; c < kClusterProbeChecks; ++c) KD_EXPECT_EQ(got[c], 0);
  }
}

// The TMA tile layout verify_attn's config 9 loads (tensor map, box coordinates, zeros past
// the tensor, mbarrier phases) against sw128_offset, byte for byte (tma_probe.cuh).
KD_GPU_TEST(tma_probe_matches_layout) {
  cudaDeviceProp prop;
  KD_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  // bulk tensor copies exist from compute capability 9.0 (sm_120 too: its decode tiles use them)
  if (prop.major < 9) KD_SKIP("bulk tensor copies (TMA) need compute capability 9.0+");
  DeviceBuffer<uint16_t> src(tma_probe_input(7));
  DeviceBuffer<int> mismatches(std::vector<int>(kTmaProbeFills, 0));
  TmaMap map;
  const KernelResult r = tma_probe_map(&map, src.get());
  if (!r.ok()) std::printf("    %s\n", r.message.c_str());
  KD_CHECK(r.ok());
  KD_CUDA_CHECK(cudaFuncSetAttribute(tma_probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kTmaProbeSmemBytes)));
  tma_probe_kernel<<<1, kTmaProbeThreads, kTmaProbeSmemBytes>>>(map, src.get(), mismatches.get());
  KD_CUDA_CHECK(cudaGetLastError());
  KD_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<int> bad = mismatches.download();
  for (int f = 0; f < kTmaProbeFills; ++f) KD_EXPECT_EQ(bad[f], 0);
}

// The configurations of `wanted` this device runs (KDTREE_DEVICE_PROFILE's limits, or the
// device's) and this build of the library holds (the baselines only a baselines build); each
// one left out is printed with why.
std::vector<int> library_configs(const std::vector<int>& wanted) {
  std::vector<int> out;
  for (int c : runnable_configs(wanted, plan_limits().smem_optin, plan_limits().wgmma)) {
    if (const std::string why = verify_attn_config_unbuilt(c); why.empty()) out.push_back(c);
    else std::printf("    skipped in this build: %s\n", why.c_str());
  }
  return out;
}

// Every configuration the plan may run here, the float32 tiles and the bf16 ones, and the
// baselines in a baselines build; the seesaw pairs have their own test (seesaw_pairs).
std::vector<int> device_configs() {
  std::vector<int> all;
  for (int c : kVerifyConfigs)
    if (c != kVerifyBf16WgmmaSeesawPairs) all.push_back(c);
  return library_configs(all);
}

KD_GPU_TEST(small_cases_one_split) {
  GpuAttnRunner runner;
  run_attn_bundle(runner, bundle(), device_configs(), 0);
}

KD_GPU_TEST(small_cases_forced_splits) {
  GpuAttnRunner runner;  // quick mode (sanitizers): one configuration of each kernel is enough for the merge
  if (quick_mode()) {
    const std::vector<int> c = library_configs({kVerifyBf16Sm90, kVerifyBf16Small, kVerifyBf16Decode, kVerifyBf16DecodeSmall,
                                                kVerifyBf16DecodeNarrow, kVerifyBf16DecodeNarrowPair, kVerifyBf16WgmmaSeesaw});
    run_attn_bundle(runner, bundle(), c, 64);
  } else {
    run_attn_bundle(runner, bundle(), device_configs(), 64);
  }
}

// The seesaw pairs (config 14, a baseline: clusters of two along the keys, O added through
// distributed shared memory; verify_attn_cases.h, check_seesaw_pairs) at 64 heads, n=1 (128
// query rows: two row tiles) over prefixes of ~8-10k and 1.5k keys (quick mode, under the
// sanitizers: ~2k and 300). Only in a baselines build.
KD_GPU_TEST(seesaw_pairs) {
  if (const std::string why = verify_attn_config_unbuilt(kVerifyBf16WgmmaSeesawPairs); !why.empty()) KD_SKIP(why);
  if (const std::string why =
          verify_config_unavailable(kVerifyBf16WgmmaSeesawPairs, plan_limits().smem_optin, plan_limits().wgmma);
      !why.empty())
    KD_SKIP(why);
  GpuAttnRunner runner;
  std::mt19937_64 rng(test_seed());
  if (quick_mode())
    check_seesaw_pairs(runner, rng, 64, 2, 2000 + static_cast<int>(rng() % 500), 300, {0, 512, 192});
  else
    check_seesaw_pairs(runner, rng, 64, 2, 8000 + static_cast<int>(rng() % 2000), 1500, {0, 2048, 576, 320});
}

// One file per case (schema v0.*), generated on this machine from a logged seed; float32 and
// bf16 with the plan's configuration.
KD_GPU_TEST(large_cases_from_env) {
  const char* dir = std::getenv("KDTREE_LARGE_ATTN_DIR");
  if (!dir || !*dir) KD_SKIP("set KDTREE_LARGE_ATTN_DIR to the output of python_engine/refgen/large_attn_cases.py");
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".kdtr") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  KD_CHECK(!files.empty());
  GpuAttnRunner runner;
  for (const auto& path : files) {
    const KdtrFile f(path.string());
    const AttnIO base = load_attn_case(f, "v0");
    const float* ref_out = f.get("v0.out").as<float>();
    const float* ref_lse = f.get("v0.lse").as<float>();
    const std::string label = path.stem().string();
    AttnIO io = base;
    io.dtype = AttnDType::kF32;
    check_attn(runner, io, ref_out, ref_lse, label + " f32");
    std::printf("      plan: %d splits of %d keys, %d row tiles\n", runner.last_plan.splits, runner.last_plan.split_len,
                runner.last_plan.m_tiles);
    io = base;
    io.dtype = AttnDType::kBF16;
    check_attn(runner, io, ref_out, ref_lse, label + " bf16");
    std::printf("      plan: %d splits of %d keys, %d row tiles, config %d\n", runner.last_plan.splits,
                runner.last_plan.split_len, runner.last_plan.m_tiles, runner.last_plan.config);
  }
}

namespace {
// The sizes of `queries` over `max_prefix` prefix rows, for the checks and plans alone: the
// pointers lead to one aligned dummy, the scale is 0.07, the mask is one word a row, and
// requests are 0 elements apart.
VerifyAttnParams params_for_checks(VerifyQueries queries, int max_prefix) {
  alignas(16) static uint16_t dummy[64];
  queries.q_lat = queries.q_pe = dummy;
  queries.scale = 0.07f;
  VerifyKeys keys;
  keys.kv = dummy;
  keys.max_prefix = max_prefix;
  TreeMask mask;
  mask.vis = reinterpret_cast<const uint32_t*>(dummy);
  mask.words = 1;
  VerifyOutputs outputs;
  outputs.out = dummy;
  return make_verify_attn_params(queries, keys, mask, outputs);
}
}  // namespace

KD_TEST(launcher_rejects_impossible_requests) {
  VerifyQueries queries;
  queries.batch = 1;
  queries.tree_len = 9;
  queries.heads = 8;
  const VerifyAttnParams p = params_for_checks(queries, 100);
  KD_EXPECT(check_verify_attn_params(p).ok());
  VerifyAttnParams q = p;
  q.batch = 0;
  KD_EXPECT_EQ(check_verify_attn_params(q).status, KernelStatus::kInvalidArgument);
  q = p;
  q.tree_len = kVerifyMaxTreeLen + 1;
  KD_EXPECT_EQ(check_verify_attn_params(q).status, KernelStatus::kOverLimit);
  q = p;
  q.heads = kVerifyMaxHeads + 1;
  KD_EXPECT_EQ(check_verify_attn_params(q).status, KernelStatus::kOverLimit);
  q = p;
  q.kv = nullptr;  // no cache at all
  KD_EXPECT_EQ(check_verify_attn_params(q).status, KernelStatus::kInvalidArgument);
  q = p;
  q.kv_row_stride = 570;
  KD_EXPECT_EQ(check_verify_attn_params(q).status, KernelStatus::kInvalidArgument);
  q = p;
  q.batch = 2;
  q.kv_batch_stride = 576;  // requests would overlap
  KD_EXPECT_EQ(check_verify_attn_params(q).status, KernelStatus::kInvalidArgument);
  q = p;
  q.vis_words = 0;
  KD_EXPECT_EQ(check_verify_attn_params(q).status, KernelStatus::kInvalidArgument);
  q = p;
  q.max_prefix = -1;
  KD_EXPECT_EQ(check_verify_attn_params(q).status, KernelStatus::kOverLimit);
  // plans: the wgmma tile where the device runs sm_90a code; without wgmma (an sm_120-class
  // limit, or the H200's shared memory) the two-stage 16-row tile (config 12) at every shape;
  // below its 94,752 B an error, not a fault (no baseline is planned)
  VerifyAttnPlan plan;
  KD_EXPECT(make_verify_attn_plan(p, 132, 232448, 233472, &plan, true).ok());
  KD_EXPECT_EQ(plan.config, static_cast<int>(kVerifyBf16WgmmaSeesaw));
  KD_EXPECT(make_verify_attn_plan(p, 132, 232448, 233472, &plan).ok());
  KD_EXPECT_EQ(plan.config, static_cast<int>(kVerifyBf16DecodeNarrowPair));
  // the seesaw pairs (config 14, a baseline) reduce the splits in pairs (a cluster of two along
  // the keys): an even count and half the partials (64 heads, n=1, 32k: 65 splits of 512 keys,
  // the tree alone on the last, become 66)
  q = p;
  q.heads = 64;
  q.tree_len = 2;
  q.max_prefix = 32768;
  for (int config : {static_cast<int>(kVerifyBf16WgmmaSeesaw), static_cast<int>(kVerifyBf16WgmmaSeesawPairs)}) {
    const int group = config == kVerifyBf16WgmmaSeesawPairs ? 2 : 1;
    q.force_config = config;
    KD_EXPECT(make_verify_attn_plan(q, 132, 232448, 233472, &plan, true).ok());
    KD_EXPECT_EQ(plan.split_group, group);
    KD_EXPECT_EQ(plan.splits, group == 2 ? 66 : 65);
    KD_EXPECT_EQ(plan.workspace_bytes, verify_workspace_for(1, plan.splits / group, 128));
    KD_EXPECT(plan.split_bound >= plan.splits);
  }
  q.force_config = -1;
  KD_EXPECT(make_verify_attn_plan(q, 132, 232448, 233472, &plan, true).ok());
  KD_EXPECT_EQ(plan.split_group, 1);  // pairs only when forced
  q = p;
  for (int config : {static_cast<int>(kVerifyBf16WgmmaSeesaw), static_cast<int>(kVerifyBf16WgmmaSeesawPairs)}) {
    q.force_config = config;  // wgmma tiles without wgmma
    KD_EXPECT_EQ(make_verify_attn_plan(q, 132, 232448, 233472, &plan).status, KernelStatus::kInvalidArgument);
  }
  KD_EXPECT(make_verify_attn_plan(p, 188, 101376, 102400, &plan).ok());
  KD_EXPECT_EQ(plan.config, static_cast<int>(kVerifyBf16DecodeNarrowPair));
  KD_EXPECT_EQ(make_verify_attn_plan(p, 188, 80 * 1024, 100 * 1024, &plan).status, KernelStatus::kOverLimit);
  KD_EXPECT_EQ(make_verify_attn_plan(p, 10, 48 * 1024, 64 * 1024, &plan).status, KernelStatus::kOverLimit);
  // a baseline is launched only by a build that holds it
  KD_EXPECT_EQ(verify_attn_config_unbuilt(kVerifyBf16WgmmaSeesaw), std::string());
  KD_EXPECT_EQ(verify_attn_config_unbuilt(kVerifyF32Narrow), std::string());
#if defined(KD_VERIFY_ATTN_BASELINES)
  KD_EXPECT_EQ(verify_attn_config_unbuilt(kVerifyBf16Small), std::string());
#else
  KD_EXPECT(verify_attn_config_unbuilt(kVerifyBf16Small).find("-DKD_VERIFY_ATTN_BASELINES") != std::string::npos);
#endif
  KD_EXPECT(verify_attn_config_unbuilt(5).find("no configuration") == 0);
  // decode shapes (T * H <= 32 query rows) take the decode kernel, split over every SM
  q = p;
  q.heads = 16;
  q.tree_len = 2;
  q.max_prefix = 32768;
  KD_EXPECT(make_verify_attn_plan(q, 132, 232448, 233472, &plan).ok());
  KD_EXPECT_EQ(plan.config, static_cast<int>(kVerifyBf16Decode));
  KD_EXPECT_EQ(plan.m_tiles, 1);
  KD_EXPECT(plan.splits >= 100);
  KD_EXPECT(make_verify_attn_plan(q, 188, 101376, 102400, &plan).ok());
  KD_EXPECT_EQ(plan.config, static_cast<int>(kVerifyBf16DecodeNarrowPair));
  KD_EXPECT_EQ(plan.m_tiles, 2);  // 32 rows in row tiles of 16
  q.force_config = kVerifyBf16Decode;
  q.tree_len = 3;  // 48 rows: past the decode tile
  KD_EXPECT_EQ(make_verify_attn_plan(q, 132, 232448, 233472, &plan).status, KernelStatus::kInvalidArgument);
  // up to 16 rows the narrow decode tile (one row group) where it fits, else the 32-row ones
  q.force_config = -1;
  q.heads = 8;
  q.tree_len = 2;
  KD_EXPECT(make_verify_attn_plan(q, 132, 232448, 233472, &plan).ok());
  KD_EXPECT_EQ(plan.config, static_cast<int>(kVerifyBf16DecodeNarrow));
  KD_EXPECT_EQ(plan.tile_rows, 16);
  KD_EXPECT(make_verify_attn_plan(q, 188, 101376, 102400, &plan).ok());
  KD_EXPECT_EQ(plan.config, static_cast<int>(kVerifyBf16DecodeNarrowPair));
  q.force_config = kVerifyBf16DecodeNarrow;
  q.tree_len = 3;  // 24 rows: past the narrow tile
  KD_EXPECT_EQ(make_verify_attn_plan(q, 132, 232448, 233472, &plan).status, KernelStatus::kInvalidArgument);
  // ... and its two-blocks-a-SM form where config 11's splits would be >= 1024 keys: twice the
  // splits, and a workspace bound that holds them whichever the prefix
  q.force_config = -1;
  q.tree_len = 2;
  q.max_prefix = 32768;  // 129 splits of 256 keys: config 11
  KD_EXPECT(make_verify_attn_plan(q, 132, 232448, 233472, &plan).ok());
  KD_EXPECT_EQ(plan.config, static_cast<int>(kVerifyBf16DecodeNarrow));
  const int bound_11 = plan.split_bound;
  q.max_prefix = 131072;  // config 11: 129 splits of 1024 keys
  KD_EXPECT(make_verify_attn_plan(q, 132, 232448, 233472, &plan).ok());
  KD_EXPECT_EQ(plan.config, static_cast<int>(kVerifyBf16DecodeNarrowPair));
  KD_EXPECT(plan.splits > 129 && plan.split_bound >= plan.splits);
  KD_EXPECT_EQ(bound_11, plan.split_bound);  // the same two waves of two blocks a SM
  // long prefixes split; prefix 0 does not; float32 splits stay short
  q = p;
  q.max_prefix = 131072;
  KD_EXPECT(make_verify_attn_plan(q, 132, 232448, 233472, &plan).ok());
  KD_EXPECT(plan.splits > 1);
  KD_EXPECT(plan.workspace_bytes > 0);
  q.max_prefix = 0;
  KD_EXPECT(make_verify_attn_plan(q, 132, 232448, 233472, &plan).ok());
  KD_EXPECT_EQ(plan.splits, 1);
  KD_EXPECT_EQ(plan.workspace_bytes, size_t{0});
  q.max_prefix = 131072;
  q.dtype = AttnDType::kF32;
  KD_EXPECT(make_verify_attn_plan(q, 132, 232448, 233472, &plan).ok());
  KD_EXPECT(plan.split_len <= kVerifyF32MaxSplitKeys);
  KD_EXPECT_EQ(plan.config, static_cast<int>(kVerifyF32));
  // a ~99 KB device (the RTX PRO 6000) gets the 8-row float32 tile; 16 rows there is refused
  const DeviceProfile& pro = *find_device_profile("rtx-pro-6000");
  KD_EXPECT(make_verify_attn_plan(q, pro.sms, pro.smem_optin, pro.smem_per_sm, &plan).ok());
  KD_EXPECT_EQ(plan.config, static_cast<int>(kVerifyF32Narrow));
  KD_EXPECT(plan.smem_bytes <= static_cast<size_t>(pro.smem_optin));
  KD_EXPECT(plan.split_len <= kVerifyF32MaxSplitKeys);
  q.force_config = kVerifyF32;
  KD_EXPECT_EQ(make_verify_attn_plan(q, pro.sms, pro.smem_optin, pro.smem_per_sm, &plan).status,
               KernelStatus::kInvalidArgument);
}

KD_GPU_TEST(launcher_reports_missing_workspace) {
  VerifyQueries queries;
  queries.batch = 1;
  queries.tree_len = 65;
  queries.heads = 64;
  VerifyAttnParams p = params_for_checks(queries, 32768);
  p.vis_words = 3;
  if (verify_attn_workspace_bytes(p) == 0) KD_SKIP("this device plans a single split here");
  const KernelResult r = verify_attn(p, nullptr);
  KD_EXPECT_EQ(r.status, KernelStatus::kInvalidArgument);
  KD_EXPECT(r.message.find("workspace") != std::string::npos);
}

KD_TEST_MAIN()
