// One MoE layer's routed experts on the current GPU: the W4A16 grouped GEMM
// (kernels/moe_gemm_w4a16.cuh) and the bf16 grouped GEMM (kernels/moe_gemm.cuh), the fused
// gate/up (SwiGLU) projection then the down projection, for routings given by `kdtree bench
// moe` (which times torch's grouped GEMM on the same routings and writes the report), plus a
// device-to-device copy as the bandwidth the floors are computed from.
//
//   bench_moe --routing FILE [--reps N] [--warm N] [--copy-mib N]
//
// FILE (KDTR, python_engine/kdtr.py): int64 scalars experts, hidden, inter, topk, sets; int64
// [T] tokens; int32 [n, topk] n<n>.s<s>.topk_ids for every n in tokens and s < sets. Each
// timed run uses the next routing set (sets rotate) so the active experts' weights come from
// DRAM, not from L2. Weights are random: INT4 words and scales in the repacked layout, bf16
// values ~U(-0.02, 0.02). Output: one JSON object a line on stdout, progress on stderr. Built
// with -DKD_W4_TIMELINE (kdtree bench moe --timeline) it also lays out a few layers at
// n <= 8 per CTA in time ("kind": "timeline", dev/moe_w4a16_timeline.h).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "bench/bench_blocker.cuh"
#include "common/cuda_check.h"
#include "common/kdtr.h"
#include "kernels/moe_gemm.cuh"
#include "kernels/moe_gemm_w4a16.cuh"
#ifdef KD_W4_TIMELINE
#include "dev/moe_w4a16_timeline.h"
#endif

using namespace kdtree;

namespace {

constexpr int kDefaultCopyMib = 2048;  // 2 GiB each way: far past L2
constexpr int kFillThreads = 256;
constexpr float kWeightRange = 0.02f;           // bf16 weights ~U(-0.02, 0.02)
constexpr float kScaleMin = 0.002f, kScaleSpan = 0.018f;  // INT4 scales ~U(0.002, 0.02)

template <class T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  Dev(size_t count, const char* what) : n(count) {
    const cudaError_t err = cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(count, 1) * sizeof(T));
    if (err != cudaSuccess)
      throw CudaError(std::string("cudaMalloc of ") + std::to_string(count * sizeof(T) >> 20) + " MiB for " + what +
                      ": " + cudaGetErrorString(err));
  }
  explicit Dev(const std::vector<T>& h, const char* what) : Dev(h.size(), what) {
    KD_CUDA_CHECK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  Dev(const Dev&) = delete;
  Dev(Dev&& o) noexcept : p(o.p), n(o.n) { o.p = nullptr; }
  ~Dev() { cudaFree(p); }
};

__device__ uint64_t mix64(uint64_t x) {  // splitmix64's finaliser: a counter-based random word
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
__device__ float unit(uint64_t bits) { return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f); }

__global__ void fill_bf16(__nv_bfloat16* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    p[i] = __float2bfloat16_rn((2.0f * unit(mix64(seed ^ i)) - 1.0f) * kWeightRange);
}

// random nibbles; the scale words of each block (kW4WeightWords .. kW4BlockWords-1) a pair of bf16 scales
__global__ void fill_w4(uint32_t* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const uint64_t r = mix64(seed ^ i);
    if (i % kW4BlockWords < kW4WeightWords) {
      p[i] = static_cast<uint32_t>(r);
    } else {
      const __nv_bfloat16 lo = __float2bfloat16_rn(kScaleMin + kScaleSpan * unit(r));
      const __nv_bfloat16 hi = __float2bfloat16_rn(kScaleMin + kScaleSpan * unit(r << 24));
      uint16_t a, b;
      std::memcpy(&a, &lo, 2);
      std::memcpy(&b, &hi, 2);
      p[i] = a | (static_cast<uint32_t>(b) << 16);
    }
  }
}

int fill_blocks(size_t n) { return static_cast<int>(std::min<size_t>((n + kFillThreads - 1) / kFillThreads, 65536)); }

void check(const KernelResult& r) {
  if (!r.ok()) throw CudaError(r.message);
}

struct Timing {
  double ms, p10, p90;
};

// Medians of `reps` runs of fn(i), each timed alone with CUDA events, after `warm` runs.
Timing time_runs(const std::function<void(int)>& fn, int warm, int reps) {
  cudaEvent_t a, b;
  KD_CUDA_CHECK(cudaEventCreate(&a));
  KD_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < warm; ++i) fn(i);
  KD_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    bench::launch_blocker(nullptr);  // the GPU time of the run, not its launches (bench_blocker.cuh)
    KD_CUDA_CHECK(cudaEventRecord(a));
    fn(warm + i);
    KD_CUDA_CHECK(cudaEventRecord(b));
    KD_CUDA_CHECK(cudaEventSynchronize(b));
    KD_CUDA_CHECK(cudaEventElapsedTime(&ms[i], a, b));
  }
  KD_CUDA_CHECK(cudaEventDestroy(a));
  KD_CUDA_CHECK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) { return static_cast<double>(ms[static_cast<size_t>(q * (reps - 1) + 0.5)]); };
  return {at(0.5), at(0.1), at(0.9)};
}

// One routing set on the device, grouped by expert as moe_group groups it.
struct DeviceRouting {
  int rows = 0, distinct = 0, most = 0;
  Dev<int32_t> offsets, row_token, active;  // active: the experts that own rows, then -1 (moe_group's list)
  DeviceRouting(const KdtrTensor& ids, int experts, int topk)
      : offsets(static_cast<size_t>(experts) + 1, "offsets"), row_token(static_cast<size_t>(ids.numel()), "row_token"),
        active(static_cast<size_t>(experts), "active") {
    const int32_t* id = ids.as<int32_t>();
    const int tokens = static_cast<int>(ids.numel() / topk);
    std::vector<std::vector<int32_t>> rows_of(experts);
    for (int t = 0; t < tokens; ++t)
      for (int j = 0; j < topk; ++j) {
        const int e = id[t * topk + j];
        if (e < 0 || e >= experts) throw KdtrError(ids.file + ": " + ids.name + " holds expert " + std::to_string(e));
        rows_of[e].push_back(t);
      }
    std::vector<int32_t> off(1, 0), tok, act;
    for (const auto& r : rows_of) {
      if (!r.empty()) act.push_back(static_cast<int32_t>(off.size() - 1));
      tok.insert(tok.end(), r.begin(), r.end());
      off.push_back(static_cast<int32_t>(tok.size()));
      distinct += !r.empty();
      most = std::max(most, static_cast<int>(r.size()));
    }
    act.resize(static_cast<size_t>(experts), -1);
    rows = static_cast<int>(tok.size());
    KD_CUDA_CHECK(cudaMemcpy(active.p, act.data(), act.size() * 4, cudaMemcpyHostToDevice));
    KD_CUDA_CHECK(cudaMemcpy(offsets.p, off.data(), off.size() * 4, cudaMemcpyHostToDevice));
    KD_CUDA_CHECK(cudaMemcpy(row_token.p, tok.data(), tok.size() * 4, cudaMemcpyHostToDevice));
  }
};

void emit(const std::string& json) {
  std::printf("%s\n", json.c_str());
  std::fflush(stdout);
}

std::string timing_json(const Timing& t) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "\"ms\": %.5f, \"ms_p10\": %.5f, \"ms_p90\": %.5f", t.ms, t.p10, t.p90);
  return buf;
}

int64_t scalar_of(const KdtrFile& f, const char* name) { return f.get(name).as<int64_t>()[0]; }

#ifdef KD_W4_TIMELINE
// One layer's W4A16 launches laid out in time (moe_w4a16_timeline.cuh): per form, percentiles
// of each point over the CTAs in us from the layer's first CTA start, and how many CTAs stream
// weights (first block landed, last not yet consumed) in each microsecond.
void emit_timeline(const std::string& impl, int n, int run) {
  static const char* kPoints[kW4TlPoints] = {"entry", "expert", "ready", "first_block", "loop_end", "exit"};
  std::vector<W4TimelineRecord> rec[2];
  uint64_t t0 = UINT64_MAX, t_end = 0;
  for (int form = 0; form < 2; ++form) {
    std::vector<W4TimelineRecord> all(kW4TimelineCtas);
    check(moe_w4a16_timeline_read(form, all.data(), kW4TimelineCtas));
    for (size_t i = 0; i < all.size(); ++i)
      if (const W4TimelineRecord& r = all[i]; r.ns[kW4TlExit]) {
        rec[form].push_back(r);
        rec[form].back().cta = static_cast<uint32_t>(i);
        t0 = std::min(t0, r.ns[kW4TlEntry]);
        t_end = std::max(t_end, r.ns[kW4TlExit]);
      }
  }
  if (t0 == UINT64_MAX) return;
  std::string json = "{\"kind\": \"timeline\", \"impl\": \"" + impl + "\", \"tokens\": " + std::to_string(n) +
                     ", \"run\": " + std::to_string(run) + ", \"span_us\": " + std::to_string((t_end - t0) * 1e-3);
  const double qs[] = {0.0, 0.1, 0.5, 0.9, 1.0};
  for (int form = 0; form < 2; ++form) {
    const char* name = form == 0 ? "gate_up" : "down";
    json += std::string(", \"") + name + "\": {\"ctas\": " + std::to_string(rec[form].size());
    std::fprintf(stderr, "timeline %s n=%d run %d %s (%zu CTAs), us from the first start: p0 p10 p50 p90 p100\n",
                 impl.c_str(), n, run, name, rec[form].size());
    if (rec[form].empty()) {
      json += "}";
      continue;
    }
    for (int pt = 0; pt < kW4TlPoints; ++pt) {
      std::vector<double> v;
      for (const W4TimelineRecord& r : rec[form])
        if (r.ns[pt]) v.push_back((r.ns[pt] - t0) * 1e-3);
      std::sort(v.begin(), v.end());
      json += std::string(", \"") + kPoints[pt] + "\": [";
      std::fprintf(stderr, "  %-12s", kPoints[pt]);
      for (size_t i = 0; i < std::size(qs); ++i) {
        const double x = v.empty() ? -1.0 : v[static_cast<size_t>(qs[i] * (v.size() - 1) + 0.5)];
        json += (i ? ", " : "") + std::to_string(x);
        std::fprintf(stderr, " %7.2f", x);
      }
      json += "]";
      std::fprintf(stderr, "\n");
    }
    // CTAs streaming in each microsecond
    const int bins = static_cast<int>((t_end - t0) / 1000) + 1;
    std::vector<int> streaming(bins, 0);
    for (const W4TimelineRecord& r : rec[form]) {
      if (!r.ns[kW4TlFirstBlock] || !r.ns[kW4TlLoopEnd]) continue;
      for (uint64_t b = (r.ns[kW4TlFirstBlock] - t0) / 1000; b <= (r.ns[kW4TlLoopEnd] - t0) / 1000; ++b) ++streaming[b];
    }
    json += ", \"streaming_per_us\": [";
    std::fprintf(stderr, "  streaming CTAs per us:");
    for (int b = 0; b < bins; ++b) {
      json += (b ? ", " : "") + std::to_string(streaming[b]);
      std::fprintf(stderr, " %d", streaming[b]);
    }
    std::fprintf(stderr, "\n");
    // every CTA: [cta, smid, expert, the points in 10 ns units from the first start (-1: not reached)]
    json += "], \"raw\": [";
    for (size_t i = 0; i < rec[form].size(); ++i) {
      const W4TimelineRecord& r = rec[form][i];
      json += (i ? ", [" : "[") + std::to_string(r.cta) + ", " + std::to_string(r.smid) + ", " + std::to_string(r.expert);
      for (int pt = 0; pt < kW4TlPoints; ++pt)
        json += ", " + std::to_string(r.ns[pt] ? static_cast<long long>((r.ns[pt] - t0) / 10) : -1LL);
      json += "]";
    }
    json += "]}";
  }
  emit(json + "}");
}
#endif

}  // namespace

int main(int argc, char** argv) {
  const char* routing_path = nullptr;
  int reps = 20, warm = 3, copy_mib = kDefaultCopyMib;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--routing") && i + 1 < argc) routing_path = argv[++i];
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--warm") && i + 1 < argc) warm = std::max(0, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--copy-mib") && i + 1 < argc) copy_mib = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr,
                   "usage: %s --routing FILE [--reps N] [--warm N] [--copy-mib N]  (FILE: written by `kdtree bench moe`)\n",
                   argv[0]);
      return 2;
    }
  }
  if (!routing_path) {
    std::fprintf(stderr, "bench_moe: --routing FILE is required (run it through `kdtree bench moe`)\n");
    return 2;
  }
  try {
    const KdtrFile routing(routing_path);
    const int experts = static_cast<int>(scalar_of(routing, "experts"));
    const int hidden = static_cast<int>(scalar_of(routing, "hidden"));
    const int inter = static_cast<int>(scalar_of(routing, "inter"));
    const int topk = static_cast<int>(scalar_of(routing, "topk"));
    const int sets = static_cast<int>(scalar_of(routing, "sets"));
    const KdtrTensor& token_list = routing.get("tokens");
    std::vector<int> tokens(token_list.as<int64_t>(), token_list.as<int64_t>() + token_list.numel());
    const int max_tokens = *std::max_element(tokens.begin(), tokens.end());
    std::fprintf(stderr, "bench_moe: %d experts of %dx%d, top-%d\n", experts, inter, hidden, topk);

    // ---- weights ------------------------------------------------------------------------
    const int64_t gate_words = moe_w4a16_expert_words(inter, hidden), down_words = moe_w4a16_expert_words(hidden, inter);
    const int64_t bf16_elems = static_cast<int64_t>(inter) * hidden;
    Dev<uint32_t> q_gate(gate_words * experts, "INT4 gate_proj"), q_up(gate_words * experts, "INT4 up_proj"),
        q_down(down_words * experts, "INT4 down_proj");
    Dev<__nv_bfloat16> b_gate(bf16_elems * experts, "bf16 gate_proj"), b_up(bf16_elems * experts, "bf16 up_proj"),
        b_down(bf16_elems * experts, "bf16 down_proj");
    uint64_t seed = 1;
    for (auto* w : {&q_gate, &q_up, &q_down}) KD_LAUNCH(fill_w4, fill_blocks(w->n), kFillThreads, 0, nullptr, w->p, w->n, seed++);
    for (auto* w : {&b_gate, &b_up, &b_down}) KD_LAUNCH(fill_bf16, fill_blocks(w->n), kFillThreads, 0, nullptr, w->p, w->n, seed++);
    KD_CHECK_LAUNCH();
    const int max_rows = max_tokens * topk;
    Dev<__nv_bfloat16> x(static_cast<size_t>(max_tokens) * hidden, "x"), act(static_cast<size_t>(max_rows) * inter, "act"),
        out(static_cast<size_t>(max_rows) * hidden, "out");
    KD_LAUNCH(fill_bf16, fill_blocks(x.n), kFillThreads, 0, nullptr, x.p, x.n, seed++);
    KD_CHECK_LAUNCH();
    KD_CUDA_CHECK(cudaDeviceSynchronize());
    // the slot hand-off's words (MoeW4a16Params::slot_sync): zero, and left zero by every pair
    Dev<uint32_t> slot_sync(static_cast<size_t>(moe_w4a16_slot_sync_words(experts, max_rows)), "slot_sync");
    KD_CUDA_CHECK(cudaMemset(slot_sync.p, 0, slot_sync.n * 4));
    const double int4_expert_bytes = 4.0 * (2 * gate_words + down_words);
    const double bf16_expert_bytes = 2.0 * 3 * bf16_elems;
    emit("{\"kind\": \"shape\", \"experts\": " + std::to_string(experts) +
         ", \"hidden\": " + std::to_string(hidden) + ", \"inter\": " + std::to_string(inter) + ", \"topk\": " +
         std::to_string(topk) + ", \"int4_expert_bytes\": " + std::to_string(static_cast<int64_t>(int4_expert_bytes)) +
         ", \"bf16_expert_bytes\": " + std::to_string(static_cast<int64_t>(bf16_expert_bytes)) + "}");

    // ---- copy bandwidth: the floors' denominator -----------------------------------------
    {
      const size_t bytes = static_cast<size_t>(copy_mib) << 20;
      Dev<uint8_t> src(bytes, "copy source"), dst(bytes, "copy destination");
      KD_CUDA_CHECK(cudaMemset(src.p, 1, bytes));
      const Timing t = time_runs([&](int) { KD_CUDA_CHECK(cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice)); },
                                 warm, reps);
      const double gbps = 2.0 * bytes / (t.ms * 1e6);  // bytes read + written
      emit("{\"kind\": \"copy\", \"bytes\": " + std::to_string(bytes) + ", " + timing_json(t) +
           ", \"gbps\": " + std::to_string(gbps) + "}");
    }

    // ---- the layer at each n --------------------------------------------------------------
    for (int n : tokens) {
      std::vector<DeviceRouting> routes;
      double distinct = 0;
      int most = 0;
      for (int s = 0; s < sets; ++s) {
        const KdtrTensor& ids = routing.get("n" + std::to_string(n) + ".s" + std::to_string(s) + ".topk_ids");
        if (ids.numel() != static_cast<int64_t>(n) * topk)
          throw KdtrError(std::string(routing_path) + ": " + ids.name + " is not [" + std::to_string(n) + ", " +
                          std::to_string(topk) + "]");
        routes.emplace_back(ids, experts, topk);
        distinct += routes.back().distinct;
        most = std::max(most, routes.back().most);
      }
      distinct /= sets;
      // the operands both params structs share: the routing's rows, and the gate/up (x gathered
      // -> act) or down (act -> out) projection's input and output rows
      auto routed_rows = [&](const DeviceRouting& r) {
        MoeRoutedRows rows;
        rows.experts = experts;
        rows.rows = r.rows;
        rows.offsets = r.offsets.p;
        rows.active_experts = r.active.p;  // as the engine passes moe_group's list
        rows.max_rows_per_expert = n;
        return rows;
      };
      auto input_rows = [&](const DeviceRouting& r, bool gate_up) {
        MoeInputRows in;
        in.x = gate_up ? x.p : act.p;
        in.x_stride = gate_up ? hidden : inter;
        in.x_row = gate_up ? r.row_token.p : nullptr;
        return in;
      };
      auto output_rows = [&](bool gate_up) {
        MoeOutputRows o;
        o.out = gate_up ? act.p : out.p;
        o.out_stride = gate_up ? inter : hidden;
        return o;
      };
      auto int4_params = [&](const DeviceRouting& r, bool gate_up) {
        MoeW4a16Weights w;
        w.w = gate_up ? q_gate.p : q_down.p;
        w.w_up = gate_up ? q_up.p : nullptr;
        w.w_expert_stride = gate_up ? gate_words : down_words;
        w.n = gate_up ? inter : hidden;
        w.k = gate_up ? hidden : inter;
        return make_moe_w4a16_params(routed_rows(r), input_rows(r, gate_up), w, output_rows(gate_up));
      };
      auto bf16_params = [&](const DeviceRouting& r, bool gate_up) {
        MoeExpertWeights w;
        w.w = gate_up ? b_gate.p : b_down.p;
        w.w_up = gate_up ? b_up.p : nullptr;
        w.w_expert_stride = bf16_elems;
        w.n = gate_up ? inter : hidden;
        w.k = gate_up ? hidden : inter;
        return make_moe_gemm_params(ModelDType::kBF16, routed_rows(r), input_rows(r, gate_up), w, output_rows(gate_up));
      };
      const DeviceRouting* cur = nullptr;
      auto pick = [&](int i) { cur = &routes[i % sets]; };
      struct Case {
        std::string impl;
        std::function<void(bool pair)> gate_up, down;  // pair: the layer's two launches, not one alone
      };
      std::vector<Case> cases;
      // the automatic choice as the engine launches it, then each row tile and each slice count
      // forced (the rest automatic; per GEMM where named), the down GEMM not overlapping the gate/up
      // one, and x read from global memory or staged in shared memory
      struct Int4Variant {
        const char* name;
        W4RowTile tile;
        int slices_gate_up, slices_down;
        bool overlap;
        W4XSource x_gate_up, x_down;
        int cta_warps = 0;
        bool scan_offsets = false;  // each CTA finds its expert in offsets, not in the active list
        bool slot_sync = true;  // the pair hands off per expert slot (MoeW4a16Params::slot_sync), as the engine
      };
      constexpr W4RowTile kAutoTile = W4RowTile::kAuto;
      constexpr W4XSource kAutoX = W4XSource::kAuto, kShared = W4XSource::kShared, kGlobal = W4XSource::kGlobal;
      const Int4Variant variants[] = {
          {"int4", kAutoTile, 0, 0, true, kAutoX, kAutoX},
          {"int4_tile8", W4RowTile::k8, 0, 0, true, kAutoX, kAutoX},
          {"int4_tile16", W4RowTile::k16, 0, 0, true, kAutoX, kAutoX},
          {"int4_tile32", W4RowTile::k32, 0, 0, true, kAutoX, kAutoX},
          {"int4_slices1", kAutoTile, 1, 1, true, kAutoX, kAutoX},
          {"int4_slices2", kAutoTile, 2, 2, true, kAutoX, kAutoX},
          {"int4_slices4", kAutoTile, 4, 4, true, kAutoX, kAutoX},
          {"int4_gate_up_slices2", kAutoTile, 2, 0, true, kAutoX, kAutoX},
          {"int4_serial", kAutoTile, 0, 0, false, kAutoX, kAutoX, 0, false, false},
          {"int4_xglobal", kAutoTile, 0, 0, true, kGlobal, kGlobal},
          {"int4_xshared", kAutoTile, 0, 0, true, kShared, kShared},
          {"int4_down_xshared", kAutoTile, 0, 0, true, kAutoX, kShared},
          {"int4_cta8", kAutoTile, 0, 0, true, kAutoX, kAutoX, 8},
          {"int4_scan", kAutoTile, 0, 0, true, kAutoX, kAutoX, 0, true},
          {"int4_cta4", kAutoTile, 0, 0, true, kAutoX, kAutoX, 4},
          {"int4_gridwait", kAutoTile, 0, 0, true, kAutoX, kAutoX, 0, false, false}};
      for (const Int4Variant& v : variants) {
        auto launch = [&, v](bool gate_up, bool pair) {
          MoeW4a16Params p = int4_params(*cur, gate_up);
          p.row_tile = v.tile;
          p.k_slices = gate_up ? v.slices_gate_up : v.slices_down;
          p.x_source = gate_up ? v.x_gate_up : v.x_down;
          p.cta_warps = v.cta_warps;
          p.overlap_previous = v.overlap && !gate_up;  // as the engine launches the down GEMM
          if (v.scan_offsets) p.active_experts = nullptr;
          if (v.slot_sync && pair) p.slot_sync = slot_sync.p;  // a launch alone has no partner to hand off to
          check(moe_gemm_w4a16(p, nullptr));
        };
        auto gu = [launch](bool pair) { launch(true, pair); };
        auto dn = [launch](bool pair) { launch(false, pair); };
        cases.push_back({v.name, gu, dn});
      }
      cases.push_back({"bf16", [&](bool) { check(moe_gemm(bf16_params(*cur, true), nullptr)); },
                       [&](bool) { check(moe_gemm(bf16_params(*cur, false), nullptr)); }});
      // every case once on every routing set before any is timed, so that no case is timed on
      // weights and kernels the cases before it have warmed (in a run without this pass, the first
      // INT4 variant at n = 1 ran 2-4 us behind later variants of identical configuration)
      for (const Case& c : cases)
        for (int i = 0; i < sets; ++i) {
          pick(i);
          c.gate_up(true);
          c.down(true);
        }
      KD_CUDA_CHECK(cudaDeviceSynchronize());
      {  // the slot hand-off changes no bit of either output, and leaves its words zero
        auto outputs = [&](const char* impl) {
          for (const Case& c : cases)
            if (c.impl == impl) {
              pick(0);
              KD_CUDA_CHECK(cudaMemset(act.p, 0xff, act.n * 2));
              KD_CUDA_CHECK(cudaMemset(out.p, 0xff, out.n * 2));
              c.gate_up(true);
              c.down(true);
            }
          KD_CUDA_CHECK(cudaDeviceSynchronize());
          std::vector<uint16_t> h(act.n + out.n);
          KD_CUDA_CHECK(cudaMemcpy(h.data(), act.p, act.n * 2, cudaMemcpyDeviceToHost));
          KD_CUDA_CHECK(cudaMemcpy(h.data() + act.n, out.p, out.n * 2, cudaMemcpyDeviceToHost));
          return h;
        };
        const std::vector<uint16_t> synced = outputs("int4"), plain = outputs("int4_gridwait");
        std::vector<uint32_t> words(slot_sync.n);
        KD_CUDA_CHECK(cudaMemcpy(words.data(), slot_sync.p, slot_sync.n * 4, cudaMemcpyDeviceToHost));
        const bool same = plain == synced, zero = std::all_of(words.begin(), words.end(), [](uint32_t w) { return !w; });
        emit("{\"kind\": \"slot_sync_check\", \"tokens\": " + std::to_string(n) + ", \"identical\": " +
             (same ? "true" : "false") + ", \"words_zero\": " + (zero ? "true" : "false") + "}");
        if (!same || !zero) throw CudaError("int4's slot hand-off: outputs differ from int4_gridwait's or its words are not zero again");
      }
      for (const Case& c : cases) {
        const int r = c.impl == "bf16" ? std::max(3, reps / 4) : reps;  // the SIMT bf16 kernel is slow
        const Timing layer = time_runs([&](int i) { pick(i); c.gate_up(true); c.down(true); }, warm, r);
        const Timing gu = time_runs([&](int i) { pick(i); c.gate_up(false); }, warm, r);
        const Timing dn = time_runs([&](int i) { pick(i); c.down(false); }, warm, r);
        char buf[512];
        std::snprintf(buf, sizeof buf,
                      "{\"kind\": \"moe\", \"impl\": \"%s\", \"tokens\": %d, \"rows\": %d, \"distinct_experts\": %.2f, "
                      "\"max_rows_per_expert\": %d, %s, \"gate_up_ms\": %.5f, \"down_ms\": %.5f, \"reps\": %d}",
                      c.impl.c_str(), n, n * topk, distinct, most, timing_json(layer).c_str(), gu.ms, dn.ms, r);
        emit(buf);
        std::fprintf(stderr, "bench_moe: n=%d %s %.4f ms\n", n, c.impl.c_str(), layer.ms);
#ifdef KD_W4_TIMELINE
        // a few layers, each laid out alone (decode sizes: the records hold one wave's CTAs)
        if (n <= 8 && (c.impl == "int4" || c.impl == "int4_gridwait" || c.impl == "int4_serial"))
          for (int run = 0; run < 3; ++run) {
            check(moe_w4a16_timeline_clear());
            pick(run + 1);
            bench::launch_blocker(nullptr);  // both launches queued, as when timed
            c.gate_up(true);
            c.down(true);
            KD_CUDA_CHECK(cudaDeviceSynchronize());
            emit_timeline(c.impl, n, run);
          }
#endif
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_moe: %s\n", e.what());
    return 1;
  }
  return 0;
}
