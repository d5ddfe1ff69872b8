// The W4A16 grouped expert GEMM (kernels/moe_gemm_w4a16.cuh) on the GPU against a float64
// host reference of the dequantized experts (w = bf16(q * scale), docs/int4.md): random
// checkpoint-layout weights (compressed-tensors pack-quantized, repacked by
// moe_w4a16_repack), random x rows, ragged per-expert row counts (0, 1, > 16, > 32), both
// forms, padding tails (n % 16, k % 64 == 32), Kimi K2.6 shapes, the row tiles agreeing bit
// for bit, exact one-hot rows, a gate/up + down pair's slot hand-off agreeing bit for bit with
// the grid wait, and the launcher's argument errors.
//
// Also compiled for the CPU with the SIMT emulator by tests/kernels/test_moe_w4a16_emulated.py
// (KDTREE_SANITIZE_QUICK=1 there skips the K2.6-sized case).
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "device_buffer.h"
#include "common/kernel_checks/kernel_test_util.h"
#include "kernels/moe_gemm_w4a16.cuh"
#include "kernels/moe_route.cuh"

using namespace kdtree;
using namespace kdtree::test;

namespace {

constexpr int kPackedPerWord = 8;           // int4 values per checkpoint int32 word
constexpr int kNibbleOffset = 8;            // stored nibble = q + 8
constexpr uint16_t kPoisonBf16 = 0x7fc1;    // a NaN: an output still holding it was never written
// Per-element tolerance against the float64 reference: the bf16 output rounding (unit
// roundoff 2^-8) plus float32 accumulation error, bounded by 2^-14 of sum |x w| (k <= 7168
// terms of 2^-24 each would be 2^-11 in the worst case; random signs stay far below 2^-14).
constexpr double kOutputRoundoff = 1.0 / 256;
constexpr double kAccumulation = 1.0 / 16384;
// SwiGLU rounds four times (gate, up, silu, product) and silu' <= 1.1.
constexpr double kSwigluRoundoff = 4 * kOutputRoundoff;
constexpr double kSiluSlope = 1.1;

float bf16_to_float(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t float_to_bf16(float f) {
  const __nv_bfloat16 b = __float2bfloat16_rn(f);
  uint16_t u;
  std::memcpy(&u, &b, 2);
  return u;
}
float round_bf16(double v) { return bf16_to_float(float_to_bf16(static_cast<float>(v))); }

// One projection of every expert as the checkpoint stores it, and its reference weights.
struct Int4Experts {
  int experts = 0, n = 0, k = 0;
  std::vector<int8_t> q;               // [experts, n, k] in -8..7
  std::vector<uint16_t> scale;         // [experts, n, k / 32] bf16 bits
  std::vector<int32_t> packed;         // [experts, n, k / 8] compressed-tensors words
  std::vector<uint32_t> repacked;      // [experts, words] the kernel's layout
  int64_t words = 0;

  float weight(int e, int r, int c) const {  // bf16(q * scale), as docs/int4.md
    const int64_t i = (static_cast<int64_t>(e) * n + r) * k + c;
    const float s = bf16_to_float(scale[(static_cast<int64_t>(e) * n + r) * (k / kW4GroupSize) + c / kW4GroupSize]);
    return round_bf16(static_cast<float>(q[i]) * s);
  }
};

Int4Experts random_experts(int experts, int n, int k, std::mt19937_64& rng) {
  Int4Experts w;
  w.experts = experts;
  w.n = n;
  w.k = k;
  // scales as the quantizer makes them (absmax / 7.5 of ~N(0, 0.02) weights), all mantissas
  std::uniform_real_distribution<float> sd(0.002f, 0.02f);
  w.q.resize(static_cast<size_t>(experts) * n * k);
  uint64_t bits = 0;
  for (size_t i = 0; i < w.q.size(); ++i, bits >>= 4) {  // 16 uniform nibbles per draw
    if (i % 16 == 0) bits = rng();
    w.q[i] = static_cast<int8_t>(static_cast<int>(bits & 0xf) - kNibbleOffset);
  }
  w.scale.resize(static_cast<size_t>(experts) * n * (k / kW4GroupSize));
  for (auto& v : w.scale) v = float_to_bf16(sd(rng));
  w.packed.assign(static_cast<size_t>(experts) * n * (k / kPackedPerWord), 0);
  for (size_t i = 0; i < w.q.size(); ++i) {
    const uint32_t nib = static_cast<uint32_t>(w.q[i] + kNibbleOffset);
    uint32_t& word = reinterpret_cast<uint32_t&>(w.packed[i / kPackedPerWord]);
    word |= nib << (4 * (i % kPackedPerWord));
  }
  w.words = moe_w4a16_expert_words(n, k);
  w.repacked.assign(static_cast<size_t>(experts) * w.words, 0);
  for (int e = 0; e < experts; ++e) {
    const KernelResult r = moe_w4a16_repack(w.packed.data() + static_cast<int64_t>(e) * n * (k / kPackedPerWord),
                                            w.scale.data() + static_cast<int64_t>(e) * n * (k / kW4GroupSize), n, k,
                                            w.repacked.data() + e * w.words);
    if (!r.ok()) throw std::runtime_error(r.message);
  }
  return w;
}

std::vector<uint16_t> random_x(int tokens, int64_t stride, std::mt19937_64& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<uint16_t> x(static_cast<size_t>(tokens) * stride);
  for (auto& v : x) v = float_to_bf16(d(rng));
  return x;
}

struct Routing {
  std::vector<int32_t> offsets;  // [experts + 1]
  std::vector<int32_t> x_row;    // [rows]
  int rows() const { return offsets.back(); }
};

Routing ragged_routing(const std::vector<int>& counts, int tokens, std::mt19937_64& rng) {
  Routing r;
  r.offsets.push_back(0);
  for (int c : counts) r.offsets.push_back(r.offsets.back() + c);
  std::uniform_int_distribution<int> td(0, tokens - 1);
  for (int i = 0; i < r.rows(); ++i) r.x_row.push_back(td(rng));
  return r;
}

// top-k distinct experts per token, grouped by expert (what moe_group produces)
Routing topk_routing(int tokens, int experts, int topk, std::mt19937_64& rng) {
  std::vector<std::vector<int32_t>> rows_of(experts);
  std::vector<int> ids(experts);
  for (int t = 0; t < tokens; ++t) {
    for (int e = 0; e < experts; ++e) ids[e] = e;
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int j = 0; j < topk; ++j) rows_of[ids[j]].push_back(t);
  }
  Routing r;
  r.offsets.push_back(0);
  for (int e = 0; e < experts; ++e) {
    r.x_row.insert(r.x_row.end(), rows_of[e].begin(), rows_of[e].end());
    r.offsets.push_back(static_cast<int32_t>(r.x_row.size()));
  }
  return r;
}

struct Problem {
  const Int4Experts* w = nullptr;
  const Int4Experts* u = nullptr;  // SwiGLU when set
  const std::vector<uint16_t>* x = nullptr;
  int64_t x_stride = 0;
  const Routing* routing = nullptr;
  int64_t out_stride = 0;
  int max_rows_per_expert = 0;
  W4RowTile row_tile = W4RowTile::kAuto;
  int k_slices = 0;  // 0 = automatic
  W4XSource x_source = W4XSource::kAuto;
  int cta_warps = 0;
  bool active_list = false;  // pass the experts that own rows (as moe_group lists them)
};

// The experts that own rows, then -1 up to `experts` (moe_group's active_experts).
std::vector<int32_t> active_list_of(const std::vector<int32_t>& offsets) {
  std::vector<int32_t> list;
  for (size_t e = 0; e + 1 < offsets.size(); ++e)
    if (offsets[e + 1] > offsets[e]) list.push_back(static_cast<int32_t>(e));
  list.resize(offsets.size() - 1, -1);
  return list;
}

// The kernel's view of experts `w` uploaded to `device` (the plain form: set w_up for SwiGLU).
MoeW4a16Weights device_weights(const Int4Experts& w, const DeviceBuffer<uint32_t>& device) {
  MoeW4a16Weights d;
  d.w = device.get();
  d.w_expert_stride = w.words;
  d.n = w.n;
  d.k = w.k;
  return d;
}

// Runs the kernel; the output rows [rows, out_stride] as bf16 bits.
std::vector<uint16_t> run_gpu(const Problem& pb) {
  const Int4Experts& w = *pb.w;
  const Routing& rt = *pb.routing;
  DeviceBuffer<uint16_t> x(*pb.x);
  DeviceBuffer<int32_t> x_row(rt.x_row), offsets(rt.offsets), active(active_list_of(rt.offsets));
  DeviceBuffer<uint32_t> dw(w.repacked);
  DeviceBuffer<uint32_t> du(pb.u ? pb.u->repacked : std::vector<uint32_t>{});
  std::vector<uint16_t> host_out(static_cast<size_t>(rt.rows()) * pb.out_stride, kPoisonBf16);
  DeviceBuffer<uint16_t> out(host_out);
  MoeRoutedRows routed;
  routed.experts = w.experts;
  routed.rows = rt.rows();
  routed.offsets = offsets.get();
  routed.active_experts = pb.active_list ? active.get() : nullptr;
  routed.max_rows_per_expert = pb.max_rows_per_expert;
  MoeInputRows in;
  in.x = x.get();
  in.x_stride = pb.x_stride;
  in.x_row = x_row.get();
  MoeW4a16Weights weights = device_weights(w, dw);
  if (pb.u) weights.w_up = du.get();
  MoeOutputRows rows_out;
  rows_out.out = out.get();
  rows_out.out_stride = pb.out_stride;
  MoeW4a16Params p = make_moe_w4a16_params(routed, in, weights, rows_out);
  p.row_tile = pb.row_tile;
  p.k_slices = pb.k_slices;
  p.x_source = pb.x_source;
  p.cta_warps = pb.cta_warps;
  const KernelResult r = moe_gemm_w4a16(p, nullptr);
  if (!r.ok()) throw std::runtime_error(r.message);
  KD_CUDA_CHECK(cudaDeviceSynchronize());
  out.download(host_out);
  return host_out;
}

// float64 reference of one output and the error it may carry.
struct RefValue {
  double value, tol;
};

// The reference weights of one output row (col) of expert e.
std::vector<double> weight_row(const Int4Experts& w, int e, int col) {
  std::vector<double> r(w.k);
  for (int c = 0; c < w.k; ++c) r[c] = w.weight(e, col, c);
  return r;
}

RefValue reference(const Problem& pb, const std::vector<double>& wrow, const std::vector<double>& urow, int row) {
  const uint16_t* xr = pb.x->data() + static_cast<int64_t>(pb.routing->x_row[row]) * pb.x_stride;
  double g = 0, g_abs = 0, u = 0, u_abs = 0;
  for (size_t c = 0; c < wrow.size(); ++c) {
    const double xv = bf16_to_float(xr[c]);
    g += xv * wrow[c];
    g_abs += std::fabs(xv * wrow[c]);
    if (pb.u) {
      u += xv * urow[c];
      u_abs += std::fabs(xv * urow[c]);
    }
  }
  if (!pb.u) return {g, kOutputRoundoff * std::fabs(g) + kAccumulation * g_abs};
  const double silu = g / (1.0 + std::exp(-g));
  const double v = silu * u;
  const double tol = kSwigluRoundoff * std::fabs(v) + kSiluSlope * std::fabs(u) * kAccumulation * g_abs +
                     std::fabs(silu) * kAccumulation * u_abs;
  return {v, tol};
}

// Every stored output within tolerance of the reference; the padding columns untouched.
void expect_matches_reference(const std::string& what, const Problem& pb, const std::vector<uint16_t>& got) {
  const Routing& rt = *pb.routing;
  int64_t bad = 0, checked = 0;
  double worst = 0, ref_max = 0;
  auto fail = [&](const std::string& msg) {
    if (bad++ < 5) report_failure(nullptr, 0, what + ": " + msg);
  };
  for (int e = 0; e < pb.w->experts; ++e) {
    if (rt.offsets[e + 1] == rt.offsets[e]) continue;
    for (int col = 0; col < pb.out_stride; ++col) {
      if (col >= pb.w->n) {
        for (int row = rt.offsets[e]; row < rt.offsets[e + 1]; ++row)
          if (got[static_cast<size_t>(row) * pb.out_stride + col] != kPoisonBf16)
            fail("wrote padding column " + std::to_string(col) + " of row " + std::to_string(row));
        continue;
      }
      const std::vector<double> wrow = weight_row(*pb.w, e, col);
      const std::vector<double> urow = pb.u ? weight_row(*pb.u, e, col) : std::vector<double>{};
      for (int row = rt.offsets[e]; row < rt.offsets[e + 1]; ++row) {
        const RefValue ref = reference(pb, wrow, urow, row);
        const double v = bf16_to_float(got[static_cast<size_t>(row) * pb.out_stride + col]);
        const double err = std::fabs(v - ref.value);
        ++checked;
        worst = std::max(worst, err);
        ref_max = std::max(ref_max, std::fabs(ref.value));
        if (!(err <= ref.tol))
          fail("expert " + std::to_string(e) + " row " + std::to_string(row) + " col " + std::to_string(col) +
               ": got " + show(v) + ", want " + show(ref.value) + " +- " + show(ref.tol));
      }
    }
  }
  if (bad > 5) report_failure(nullptr, 0, what + ": " + std::to_string(bad) + " of " + std::to_string(checked) + " wrong");
  std::printf("    %s: %lld outputs, max |err| / max |ref| = %.2e\n", what.c_str(), static_cast<long long>(checked),
              ref_max > 0 ? worst / ref_max : 0.0);
}

void run_ragged_case(const std::string& name, bool swiglu, int n, int k, const std::vector<int>& counts,
                     uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int experts = static_cast<int>(counts.size()), tokens = 40;
  const Int4Experts w = random_experts(experts, n, k, rng);
  const Int4Experts u = swiglu ? random_experts(experts, n, k, rng) : Int4Experts{};
  const int64_t x_stride = k + 8, out_stride = n + 3;  // strides past the row ends
  const std::vector<uint16_t> x = random_x(tokens, x_stride, rng);
  const Routing rt = ragged_routing(counts, tokens, rng);
  Problem pb{&w, swiglu ? &u : nullptr, &x, x_stride, &rt, out_stride};
  expect_matches_reference(name, pb, run_gpu(pb));
  for (int slices : {1, 2, 4}) {  // every CTA shape, whatever the automatic choice for this k
    pb.k_slices = slices;
    expect_matches_reference(name + " k_slices=" + std::to_string(slices), pb, run_gpu(pb));
  }
  pb.k_slices = 0;
  // x staged in shared memory and read from global memory, on the 8-row tile; the staged rows
  // per pass follow the bound (3: below the real load, so experts take more passes)
  pb.row_tile = W4RowTile::k8;
  pb.max_rows_per_expert = 3;
  for (W4XSource source : {W4XSource::kGlobal, W4XSource::kShared}) {
    pb.x_source = source;
    expect_matches_reference(name + (source == W4XSource::kShared ? " x shared" : " x global"), pb, run_gpu(pb));
  }
  pb.k_slices = 1;  // one slice in CTAs of 4 and of 8 warps
  for (int warps : {4, 8}) {
    pb.cta_warps = warps;
    expect_matches_reference(name + " one slice, " + std::to_string(warps) + "-warp CTAs", pb, run_gpu(pb));
  }
}

}  // namespace

KD_GPU_TEST(ragged_rows_plain) {
  run_ragged_case("plain n=80 k=224", false, 80, 224, {3, 0, 20, 1, 0, 70, 8, 17}, 11);
  run_ragged_case("plain n=64 k=256", false, 64, 256, {0, 33, 9, 16, 0, 0}, 12);
}

KD_GPU_TEST(ragged_rows_swiglu) {
  run_ragged_case("swiglu n=80 k=224", true, 80, 224, {3, 0, 20, 1, 0, 70, 8, 17}, 21);
  run_ragged_case("swiglu n=48 k=96", true, 48, 96, {40, 0, 2}, 22);
}

// The result of a row depends on neither the row tile nor the other rows.
KD_GPU_TEST(row_tiles_and_neighbours_do_not_change_a_row) {
  std::mt19937_64 rng(31);
  const int experts = 5, n = 96, k = 320, tokens = 50;
  const Int4Experts w = random_experts(experts, n, k, rng), u = random_experts(experts, n, k, rng);
  const std::vector<uint16_t> x = random_x(tokens, k, rng);
  const Routing rt = ragged_routing({45, 0, 7, 19, 33}, tokens, rng);
  Problem pb{&w, &u, &x, k, &rt, n};
  const std::vector<uint16_t> base = run_gpu(pb);
  for (W4RowTile t : {W4RowTile::k8, W4RowTile::k16, W4RowTile::k32}) {
    pb.row_tile = t;
    KD_EXPECT(run_gpu(pb) == base);
    pb.active_list = true;  // each CTA's expert from the list instead of offsets: the same work
    KD_EXPECT(run_gpu(pb) == base);
    pb.active_list = false;
  }
  // the same rows, one expert at a time, each alone in its launch
  pb.row_tile = W4RowTile::kAuto;
  for (int e = 0; e < experts; ++e) {
    Routing one;
    for (int j = 0; j <= experts; ++j) one.offsets.push_back(j <= e ? 0 : rt.offsets[e + 1] - rt.offsets[e]);
    one.x_row.assign(rt.x_row.begin() + rt.offsets[e], rt.x_row.begin() + rt.offsets[e + 1]);
    if (one.rows() == 0) continue;
    pb.routing = &one;
    const std::vector<uint16_t> alone = run_gpu(pb);
    KD_EXPECT(std::equal(alone.begin(), alone.end(), base.begin() + static_cast<int64_t>(rt.offsets[e]) * n));
  }
}

// x rows with one nonzero column c: out = bf16(x_c * w[col][c]) exactly, which holds only if
// each weight is rounded to bf16 before the product (the unrounded q * scale differs).
KD_GPU_TEST(one_hot_rows_are_exact) {
  std::mt19937_64 rng(41);
  const int experts = 3, n = 64, k = 192, tokens = 24;
  const Int4Experts w = random_experts(experts, n, k, rng);
  std::vector<uint16_t> x(static_cast<size_t>(tokens) * k, 0);
  std::vector<int> hot(tokens);
  std::uniform_int_distribution<int> cd(0, k - 1);
  std::uniform_real_distribution<float> vd(1.0f, 4.0f);
  for (int t = 0; t < tokens; ++t) {
    hot[t] = cd(rng);
    x[static_cast<size_t>(t) * k + hot[t]] = float_to_bf16(vd(rng));
  }
  const Routing rt = ragged_routing({10, 0, 30}, tokens, rng);
  Problem pb{&w, nullptr, &x, k, &rt, n};
  const std::vector<uint16_t> got = run_gpu(pb);
  int bad = 0, unrounded_differs = 0;
  for (int e = 0; e < experts; ++e)
    for (int row = rt.offsets[e]; row < rt.offsets[e + 1]; ++row) {
      const int t = rt.x_row[row], c = hot[t];
      const float xv = bf16_to_float(x[static_cast<size_t>(t) * k + c]);
      for (int col = 0; col < n; ++col) {
        const uint16_t want = float_to_bf16(xv * w.weight(e, col, c));
        const int64_t i = (static_cast<int64_t>(e) * n + col) * k + c;
        const float s = bf16_to_float(w.scale[(static_cast<int64_t>(e) * n + col) * (k / kW4GroupSize) + c / kW4GroupSize]);
        unrounded_differs += float_to_bf16(static_cast<float>(xv * (static_cast<double>(w.q[i]) * s))) != want;
        if (got[static_cast<size_t>(row) * n + col] != want && bad++ < 5)
          report_failure(nullptr, 0, "row " + std::to_string(row) + " col " + std::to_string(col) + ": got " +
                                         show(bf16_to_float(got[static_cast<size_t>(row) * n + col])) + ", want " +
                                         show(bf16_to_float(want)));
      }
    }
  KD_EXPECT_EQ(bad, 0);
  KD_EXPECT(unrounded_differs > 0);  // the check can fail: skipping the rounding would be seen
}

// Kimi K2.6 expert shapes (hidden 7168, moe_intermediate 2048), top-8 routing of 16 tokens
// over 16 experts: the fused gate/up and the down projection.
KD_GPU_TEST(kimi_k26_shapes) {
  if (quick_mode()) KD_SKIP("KDTREE_SANITIZE_QUICK: the K2.6-sized case is skipped");
  std::mt19937_64 rng(51);
  const int experts = 16, tokens = 16, hidden = 7168, inter = 2048;
  const Routing rt = topk_routing(tokens, experts, 8, rng);
  {
    const Int4Experts gate = random_experts(experts, inter, hidden, rng), up = random_experts(experts, inter, hidden, rng);
    const std::vector<uint16_t> x = random_x(tokens, hidden, rng);
    Problem pb{&gate, &up, &x, hidden, &rt, inter, tokens};
    pb.active_list = true;  // as the engine launches it
    expect_matches_reference("gate_up 2048x7168", pb, run_gpu(pb));
  }
  {
    const Int4Experts down = random_experts(experts, hidden, inter, rng);
    const std::vector<uint16_t> act = random_x(tokens, inter, rng);
    Problem pb{&down, nullptr, &act, inter, &rt, hidden, tokens};
    pb.active_list = true;
    expect_matches_reference("down 7168x2048", pb, run_gpu(pb));
  }
}

// A gate/up + down pair with the slot hand-off (MoeW4a16Params::slot_sync) against the same pair
// waiting for the whole gate/up grid: the same bits in both outputs, for several pairs back to
// back on one set of words (each pair must leave them zero for the next), decode routings of 1
// token (the hand-off, whose down GEMM runs 2 slices where the grid wait's runs 1) and 4 (above
// kW4SlotSyncMaxRows: both launches ignore the words) over K2.6-wide layers (smaller ones on the
// emulator)
KD_GPU_TEST(pair_slot_handoff_matches_the_grid_wait) {
  const uint64_t seed = test_seed();
  std::mt19937_64 rng(seed);
  const bool quick = quick_mode();
  const int experts = quick ? 12 : 24, hidden = quick ? 256 : 7168, inter = quick ? 128 : 2048, topk = 8;
  const Int4Experts gate = random_experts(experts, inter, hidden, rng), up = random_experts(experts, inter, hidden, rng);
  const Int4Experts down = random_experts(experts, hidden, inter, rng);
  DeviceBuffer<uint32_t> dg(gate.repacked), du(up.repacked), dd(down.repacked);
  for (int tokens : {1, 4}) {
    const Routing rt = topk_routing(tokens, experts, topk, rng);
    const int rows = rt.rows();
    DeviceBuffer<uint16_t> x(random_x(tokens, hidden, rng));
    DeviceBuffer<int32_t> x_row(rt.x_row), offsets(rt.offsets), active(active_list_of(rt.offsets));
    DeviceBuffer<uint16_t> act(std::vector<uint16_t>(static_cast<size_t>(rows) * inter, kPoisonBf16));
    DeviceBuffer<uint16_t> out(std::vector<uint16_t>(static_cast<size_t>(rows) * hidden, kPoisonBf16));
    DeviceBuffer<uint32_t> sync(std::vector<uint32_t>(moe_w4a16_slot_sync_words(experts, rows), 0));
    MoeRoutedRows routed;
    routed.experts = experts;
    routed.rows = rows;
    routed.offsets = offsets.get();
    routed.active_experts = active.get();
    routed.max_rows_per_expert = tokens;
    MoeInputRows x_in;
    x_in.x = x.get();
    x_in.x_stride = hidden;
    x_in.x_row = x_row.get();
    MoeOutputRows act_out;
    act_out.out = act.get();
    act_out.out_stride = inter;
    MoeInputRows act_in;
    act_in.x = act.get();
    act_in.x_stride = inter;
    MoeOutputRows down_out;
    down_out.out = out.get();
    down_out.out_stride = hidden;
    MoeW4a16Weights gate_up = device_weights(gate, dg);
    gate_up.w_up = du.get();
    auto pair = [&](bool handoff) {
      MoeW4a16Params g = make_moe_w4a16_params(routed, x_in, gate_up, act_out);
      g.slot_sync = handoff ? sync.get() : nullptr;
      MoeW4a16Params d = make_moe_w4a16_params(routed, act_in, device_weights(down, dd), down_out);
      d.slot_sync = g.slot_sync;
      d.overlap_previous = true;  // as the engine launches it
      for (const MoeW4a16Params* q : {&g, &d})
        if (const KernelResult r = moe_gemm_w4a16(*q, nullptr); !r.ok()) throw std::runtime_error(r.message);
      KD_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<uint16_t> a(act.size()), o(out.size());
      act.download(a);
      out.download(o);
      a.insert(a.end(), o.begin(), o.end());
      return a;
    };
    const std::vector<uint16_t> want = pair(false);
    KD_EXPECT(std::find(want.begin(), want.end(), kPoisonBf16) == want.end());
    for (int round = 0; round < (quick ? 2 : 6); ++round) {
      if (pair(true) != want)
        report_failure(nullptr, 0, "seed " + std::to_string(seed) + ", " + std::to_string(tokens) + " tokens, pair " +
                                       std::to_string(round) + ": the hand-off changed an output");
      std::vector<uint32_t> words(sync.size());
      sync.download(words);
      KD_EXPECT(std::all_of(words.begin(), words.end(), [](uint32_t w) { return w == 0; }));
    }
  }
}

// moe_group's outputs against the host's grouping of fresh random top-k ids: offsets, and the
// active list over all experts and over a rank's range (expert parallelism)
KD_GPU_TEST(moe_group_lists_the_experts_that_own_rows) {
  const uint64_t seed = test_seed();
  std::mt19937_64 rng(seed);
  for (int tokens : {1, 3, 17}) {
    const int experts = 72, topk = 8;
    std::vector<int32_t> ids;
    std::vector<int> perm(experts);
    for (int t = 0; t < tokens; ++t) {
      for (int e = 0; e < experts; ++e) perm[e] = e;
      std::shuffle(perm.begin(), perm.end(), rng);
      ids.insert(ids.end(), perm.begin(), perm.begin() + topk);
    }
    std::vector<int32_t> want_off(experts + 1, 0);
    for (int id : ids) ++want_off[id + 1];
    for (int e = 0; e < experts; ++e) want_off[e + 1] += want_off[e];
    for (auto [begin, end] : {std::pair{0, 0}, std::pair{24, 56}}) {
      const int listed = (end > 0 ? end : experts) - begin;
      DeviceBuffer<int32_t> d_ids(ids), off(std::vector<int32_t>(experts + 1, -7)),
          row_token(std::vector<int32_t>(ids.size(), -7)), pair_row(std::vector<int32_t>(ids.size(), -7)),
          active(std::vector<int32_t>(listed, -7));
      MoeTopk picks;
      picks.tokens = tokens;
      picks.topk = topk;
      picks.ids = d_ids.get();
      MoeGroupOutputs grouped;
      grouped.offsets = off.get();
      grouped.row_token = row_token.get();
      grouped.pair_row = pair_row.get();
      MoeActiveList listed_experts;
      listed_experts.experts = active.get();
      listed_experts.begin = begin;
      listed_experts.end = end;
      const KernelResult r = moe_group(make_moe_group_params(picks, experts, grouped, listed_experts), nullptr);
      if (!r.ok()) throw std::runtime_error(r.message);
      KD_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<int32_t> got_off(experts + 1), got_active(listed);
      off.download(got_off);
      active.download(got_active);
      KD_EXPECT(got_off == want_off);
      std::vector<int32_t> want_active;
      for (int e = begin; e < begin + listed; ++e)
        if (want_off[e + 1] > want_off[e]) want_active.push_back(e - begin);
      want_active.resize(listed, -1);
      if (got_active != want_active)
        report_failure(nullptr, 0, "seed " + std::to_string(seed) + ", " + std::to_string(tokens) + " tokens, range [" +
                                       std::to_string(begin) + ", " + std::to_string(end) + "): active list differs");
      KD_EXPECT(got_active == want_active);
    }
  }
}

KD_GPU_TEST(bad_arguments_are_reported) {
  MoeRoutedRows routed;
  routed.experts = 4;
  routed.rows = 8;
  MoeInputRows in;
  in.x_stride = 128;
  MoeW4a16Weights weights;
  weights.n = 64;
  weights.k = 100;  // not a multiple of 32
  weights.w_expert_stride = moe_w4a16_expert_words(64, 128);
  MoeOutputRows rows_out;
  rows_out.out_stride = 64;
  MoeW4a16Params p = make_moe_w4a16_params(routed, in, weights, rows_out);
  KernelResult r = moe_gemm_w4a16(p, nullptr);
  KD_EXPECT(r.status == KernelStatus::kInvalidArgument && r.message.find("group size") != std::string::npos);
  p.k = 128;
  r = moe_gemm_w4a16(p, nullptr);  // null pointers with rows > 0
  KD_EXPECT(r.status == KernelStatus::kInvalidArgument && r.message.find("non-null") != std::string::npos);
  p.w_expert_stride -= 4;
  r = moe_gemm_w4a16(p, nullptr);
  KD_EXPECT(r.status == KernelStatus::kInvalidArgument && r.message.find("w_expert_stride") != std::string::npos);
  p.w_expert_stride += 4;
  p.x_stride = 130;
  r = moe_gemm_w4a16(p, nullptr);
  KD_EXPECT(r.status == KernelStatus::kInvalidArgument && r.message.find("multiple of 8") != std::string::npos);
  p.rows = 0;
  p.x_stride = 128;
  KD_EXPECT(moe_gemm_w4a16(p, nullptr).ok());  // nothing to do
  std::vector<int32_t> packed(64 * 12);
  std::vector<uint16_t> scale(64 * 3);
  std::vector<uint32_t> dst(moe_w4a16_expert_words(64, 96));
  KD_EXPECT(!moe_w4a16_repack(packed.data(), scale.data(), 64, 90, dst.data()).ok());
  KD_EXPECT(moe_w4a16_repack(packed.data(), scale.data(), 64, 96, dst.data()).ok());
}

KD_TEST_MAIN()
