// The DFlash drafter's split-KV attention (kernels/drafter_attn.cuh) against a float64 host
// loop over the same inputs: random shapes from the logged seed (GQA ratios 1, 2 and 8,
// block queries 1..16, a context per request, 0 included, long enough for several key
// splits, strided q and block rows, bf16 and float32), a plan without splits attending a
// context past max_ctx, and the plan's rules (one split and no workspace for short contexts,
// shared memory within sm_120's per-block limit at every head_dim, Kimi's workspace).
//
// Also compiled for the CPU with the SIMT emulator (tests/kernels/test_drafter_attn_emulated.py).
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "device_buffer.h"
#include "common/kernel_checks/kernel_test_util.h"
#include "kernels/drafter_attn.cuh"

using namespace kdtree;
using namespace kdtree::test;

namespace {

// Per-element tolerance against float64: |got - want| <= rounding * |want| + kAccumulation *
// max |v| of the row's keys. bf16 rounds the output once, by at most its unit roundoff 2^-8
// of the value (random outputs come within a few percent of that bound); float32 output
// rounding is 2^-24. The accumulation term bounds float32 scores, exponentials and sums over
// a few thousand keys (2^-24 each, random signs): observed errors stay under 1% of it.
constexpr double kBf16Rounding = 1.0 / 256;
constexpr double kF32Rounding = 1e-6;
constexpr double kAccumulation = 2e-5;
// Context lengths drawn up to this many keys: several kDrafterMinSplitKeys splits.
constexpr int kMaxRandomContext = 5 * kDrafterMinSplitKeys;
constexpr int kRandomCases = 10;
constexpr int kQuickRandomCases = 3;  // KDTREE_SANITIZE_QUICK: compute-sanitizer is slow
constexpr int kMaxRandomQueries = 16;
constexpr int kRowPadding = 8;        // extra elements between q / block rows (the engine's [q | k | v] rows)
constexpr int kSm120SmemOptin = 101376;  // sm_120's per-block opt-in (device_profiles.def)

float round_to(ModelDType dt, float x) {
  return dt == ModelDType::kBF16 ? __bfloat162float(__float2bfloat16_rn(x)) : x;
}

struct Shape {
  ModelDType dtype = ModelDType::kF32;
  int batch = 1, q_len = 1, heads = 1, kv_heads = 1, head_dim = 8, max_ctx = 0;
  std::vector<int32_t> ctx_len;
};

std::string describe(const Shape& s) {
  std::string c;
  for (int v : s.ctx_len) c += (c.empty() ? "" : ",") + std::to_string(v);
  return std::string(s.dtype == ModelDType::kBF16 ? "bf16" : "f32") + " batch " + std::to_string(s.batch) +
         " q_len " + std::to_string(s.q_len) + " heads " + std::to_string(s.heads) + "/" +
         std::to_string(s.kv_heads) + " hd " + std::to_string(s.head_dim) + " ctx [" + c + "] max_ctx " +
         std::to_string(s.max_ctx);
}

// Host values (already rounded to the dtype) and their device copies in that dtype.
struct Tensor {
  std::vector<float> host;
  DeviceBuffer<float> f32;
  DeviceBuffer<__nv_bfloat16> bf16;
  Tensor(ModelDType dt, size_t n, std::mt19937_64& rng, float spread) : host(n) {
    std::normal_distribution<float> dist(0.0f, spread);
    for (float& x : host) x = round_to(dt, dist(rng));
    if (dt == ModelDType::kBF16) {
      std::vector<__nv_bfloat16> b(n);
      for (size_t i = 0; i < n; ++i) b[i] = __float2bfloat16_rn(host[i]);
      bf16 = DeviceBuffer<__nv_bfloat16>(b);
    } else {
      f32 = DeviceBuffer<float>(host);
    }
  }
  const void* device() const { return f32.get() ? static_cast<const void*>(f32.get()) : static_cast<const void*>(bf16.get()); }
};

void run_case(const Shape& s, std::mt19937_64& rng) {
  const int hd = s.head_dim, group = s.heads / s.kv_heads;
  const int cap = *std::max_element(s.ctx_len.begin(), s.ctx_len.end()) + 1;
  const int64_t q_stride = static_cast<int64_t>(s.heads) * hd + kRowPadding;
  const int64_t blk_stride = static_cast<int64_t>(s.kv_heads) * hd + kRowPadding;
  const int64_t kv_row = static_cast<int64_t>(s.kv_heads) * hd;
  // scores of a few units: the softmax neither flat nor one-hot
  const float spread = 2.0f / std::sqrt(std::sqrt(static_cast<float>(hd)));
  Tensor q(s.dtype, static_cast<size_t>(s.batch) * s.q_len * q_stride, rng, spread);
  Tensor ck(s.dtype, static_cast<size_t>(s.batch) * cap * kv_row, rng, spread);
  Tensor cv(s.dtype, static_cast<size_t>(s.batch) * cap * kv_row, rng, 1.0f);
  Tensor bk(s.dtype, static_cast<size_t>(s.batch) * s.q_len * blk_stride, rng, spread);
  Tensor bv(s.dtype, static_cast<size_t>(s.batch) * s.q_len * blk_stride, rng, 1.0f);
  DeviceBuffer<int32_t> ctx_len(s.ctx_len);
  const size_t out_n = static_cast<size_t>(s.batch) * s.q_len * s.heads * hd;
  const int el = model_dtype_bytes(s.dtype);
  DeviceBuffer<uint8_t> out(out_n * el);
  KD_CUDA_CHECK(cudaMemset(out.get(), 0xff, out_n * el));  // NaN in both dtypes: an unwritten output fails

  DrafterAttnParams p;
  p.dtype = s.dtype;
  p.batch = s.batch;
  p.q_len = s.q_len;
  p.heads = s.heads;
  p.kv_heads = s.kv_heads;
  p.head_dim = hd;
  p.q = q.device();
  p.q_stride = q_stride;
  p.ctx_k = ck.device();
  p.ctx_v = cv.device();
  p.ctx_batch_stride = cap * kv_row;
  p.ctx_len = ctx_len.get();
  p.max_ctx = s.max_ctx;
  p.blk_k = bk.device();
  p.blk_v = bv.device();
  p.blk_stride = blk_stride;
  p.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  p.out = out.get();
  DrafterAttnPlan plan;
  KD_CHECK_EQ(drafter_attn_plan(p, &plan).message, std::string());
  DeviceBuffer<uint8_t> ws(plan.workspace_bytes);
  p.workspace = ws.get();
  p.workspace_bytes = plan.workspace_bytes;
  KD_CHECK_EQ(drafter_attn(p, nullptr).message, std::string());
  KD_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> got(out_n);
  if (s.dtype == ModelDType::kBF16) {
    std::vector<__nv_bfloat16> b(out_n);
    KD_CUDA_CHECK(cudaMemcpy(b.data(), out.get(), out_n * el, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < out_n; ++i) got[i] = __bfloat162float(b[i]);
  } else {
    KD_CUDA_CHECK(cudaMemcpy(got.data(), out.get(), out_n * el, cudaMemcpyDeviceToHost));
  }

  const double rounding = s.dtype == ModelDType::kBF16 ? kBf16Rounding : kF32Rounding;
  int64_t bad = 0;
  double worst = 0.0;
  std::vector<double> score, acc(hd);
  for (int b = 0; b < s.batch; ++b)
    for (int t = 0; t < s.q_len; ++t)
      for (int h = 0; h < s.heads; ++h) {
        const int g = h / group, ctx = s.ctx_len[b], total = ctx + s.q_len;
        const float* qr = &q.host[(static_cast<size_t>(b) * s.q_len + t) * q_stride + h * hd];
        auto key = [&](const Tensor& c, const Tensor& blk, int j) {
          return j < ctx ? &c.host[(static_cast<size_t>(b) * cap + j) * kv_row + g * hd]
                         : &blk.host[(static_cast<size_t>(b) * s.q_len + (j - ctx)) * blk_stride + g * hd];
        };
        score.assign(total, 0.0);
        double m = -INFINITY;
        for (int j = 0; j < total; ++j) {
          const float* k = key(ck, bk, j);
          double d = 0.0;
          for (int e = 0; e < hd; ++e) d += static_cast<double>(qr[e]) * k[e];
          score[j] = d * p.scale;
          m = std::max(m, score[j]);
        }
        double l = 0.0, vmax = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int j = 0; j < total; ++j) {
          const double w = std::exp(score[j] - m);
          const float* v = key(cv, bv, j);
          l += w;
          for (int e = 0; e < hd; ++e) {
            acc[e] += w * v[e];
            vmax = std::max(vmax, std::fabs(static_cast<double>(v[e])));
          }
        }
        for (int e = 0; e < hd; ++e) {
          const double want = acc[e] / l;
          const double have = got[((static_cast<size_t>(b) * s.q_len + t) * s.heads + h) * hd + e];
          const double err = std::fabs(have - want);
          const double tol = rounding * std::fabs(want) + kAccumulation * vmax;
          worst = std::max(worst, err / tol);
          if (!(err <= tol)) {
            if (bad < 5)
              report_failure(__FILE__, __LINE__, describe(s) + ": out[b " + std::to_string(b) + ", t " + std::to_string(t) +
                                                     ", h " + std::to_string(h) + ", " + std::to_string(e) + "] = " +
                                                     std::to_string(have) + ", want " + std::to_string(want));
            ++bad;
          }
        }
      }
  std::printf("  %s: %d split(s), %d row tile(s) of %d, worst error %.3f of its tolerance\n", describe(s).c_str(),
              plan.splits, plan.row_tiles, plan.tile_rows, worst);
  KD_EXPECT_EQ(bad, 0);
}

Shape make_shape(ModelDType dt, int q_len, int heads, int kv_heads, int head_dim, std::vector<int32_t> ctx_len,
                 int max_ctx) {
  Shape s;
  s.dtype = dt;
  s.batch = static_cast<int>(ctx_len.size());
  s.q_len = q_len;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.head_dim = head_dim;
  s.ctx_len = std::move(ctx_len);
  s.max_ctx = max_ctx;
  return s;
}

Shape random_shape(std::mt19937_64& rng, int case_index) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  static const int kRatios[] = {1, 2, 8};
  static const int kHeadDims[] = {8, 24, 64, 128};
  Shape s;
  s.dtype = case_index % 2 ? ModelDType::kBF16 : ModelDType::kF32;
  s.kv_heads = pick(1, 2);
  s.heads = s.kv_heads * kRatios[pick(0, 2)];
  s.head_dim = kHeadDims[pick(0, 3)];
  s.q_len = pick(1, kMaxRandomQueries);
  s.batch = pick(1, 3);
  for (int b = 0; b < s.batch; ++b) s.ctx_len.push_back(pick(0, 2) == 0 ? 0 : pick(1, kMaxRandomContext));
  // the engine plans for its cache capacity: at least the longest context, sometimes more
  const int longest = *std::max_element(s.ctx_len.begin(), s.ctx_len.end());
  s.max_ctx = longest + (pick(0, 1) ? 0 : pick(0, kMaxRandomContext));
  return s;
}

}  // namespace

KD_GPU_TEST(random_shapes_match_float64) {
  std::mt19937_64 rng(test_seed());
  const int cases = quick_mode() ? kQuickRandomCases : kRandomCases;
  for (int i = 0; i < cases; ++i) run_case(random_shape(rng, i), rng);
}

// Split counts that differ per request in one launch (context 0: one split, written directly;
// 785 and 255 context keys: several), GQA 8 at Kimi's head_dim and block.
KD_GPU_TEST(kimi_group_with_ragged_contexts) {
  std::mt19937_64 rng(test_seed() + 1);
  for (ModelDType dt : {ModelDType::kBF16, ModelDType::kF32})
    run_case(make_shape(dt, 8, 8, 1, 128, {0, 3 * kDrafterMinSplitKeys + 17, kDrafterMinSplitKeys - 1},
                        4 * kDrafterMinSplitKeys),
             rng);
}

// A plan of one split (max_ctx 0) still attends a longer context exactly, in one CTA.
KD_GPU_TEST(context_past_max_ctx_in_one_split) {
  std::mt19937_64 rng(test_seed() + 2);
  run_case(make_shape(ModelDType::kBF16, 4, 4, 2, 32, {2 * kDrafterMinSplitKeys + 5, 1}, 0), rng);
}

KD_TEST(plan_rules) {
  DrafterAttnParams p;
  p.dtype = ModelDType::kBF16;
  p.batch = 1;
  p.q_len = 8;
  p.heads = 64;
  p.kv_heads = 8;
  p.head_dim = 128;
  p.scale = 1.0f;
  constexpr int kH200Sms = 132;
  // short contexts: one split, no merge, no workspace
  p.max_ctx = kDrafterMinSplitKeys - p.q_len;
  DrafterAttnPlan pl = make_drafter_attn_plan(p, kH200Sms);
  KD_EXPECT_EQ(pl.splits, 1);
  KD_EXPECT_EQ(pl.workspace_bytes, size_t{0});
  // Kimi's drafter at 128k: the group's 64 rows in two tiles of 32, the SMs filled
  p.max_ctx = 131072;
  pl = make_drafter_attn_plan(p, kH200Sms);
  KD_EXPECT_EQ(pl.group_rows, 64);
  KD_EXPECT(pl.smem_bytes <= static_cast<size_t>(kDrafterSmemBudget));
  KD_EXPECT(static_cast<int64_t>(pl.splits) * p.kv_heads * pl.row_tiles >= kH200Sms * kDrafterCtasPerSm);
  KD_EXPECT_EQ(pl.workspace_bytes, drafter_workspace_layout(1, 8, pl.splits, 64, 128).total);
  std::printf("  Kimi drafter, 128k context, batch 1: %d splits x %d row tiles of %d, %zu B shared, %zu B workspace\n",
              pl.splits, pl.row_tiles, pl.tile_rows, pl.smem_bytes, pl.workspace_bytes);
  // every head_dim and dtype fits sm_120's per-block shared memory
  for (ModelDType dt : {ModelDType::kBF16, ModelDType::kF32})
    for (int hd = 1; hd <= kDrafterMaxHeadDim; ++hd) {
      p.dtype = dt;
      p.head_dim = hd;
      KD_EXPECT(make_drafter_attn_plan(p, kH200Sms).smem_bytes <= static_cast<size_t>(kSm120SmemOptin));
    }
}

KD_TEST_MAIN()
