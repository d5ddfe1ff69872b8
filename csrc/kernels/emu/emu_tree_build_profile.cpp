// Where tree_build's time goes, counted on the SIMT emulator: barriers per request by phase
// (the kernel's KD_PHASE marks), and how often the one-sweep search hands over to the
// bisection, on bench_kernels' input kinds. Barriers count rounds, not time: what a launch
// costs on the GPU is the length of the dependent chains between them (docs/kernels/tree_build.md; the
// kernel's -DKD_TREE_PHASE_CLOCKS build measures cycles per phase). Every tree is also checked
// against the reference heap (csrc/bench/tree_heap.h). Its output is
// checked by tests/kernels/test_emulated_kernels.py.
//
//   emu_tree_build_profile [REQUESTS [KIND [N]]]   (built like the emulated tests, -DKD_SIMT_EMULATION)
//   KD_TREE_TRACE=1: print the search's events (levels grown, raises, compactions) per request,
//   and the levels each warp grew alone (depth, children written)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace profile {
inline const char* phase = "start";
inline std::map<std::string, long> barriers;  // phase -> barriers (thread 0's count)
inline std::map<std::string, long> entered;   // phase -> requests that reached it
inline std::map<unsigned, std::map<std::string, long>> per_request;  // block -> event -> count
inline std::map<unsigned, std::map<std::string, long>> last_a;       // block -> event -> its last first value
inline bool trace = false;  // KD_TREE_TRACE=1: print every search event of every request
inline void mark(const char* name, unsigned tid) {
  if (tid != 0) return;
  phase = name;
  ++entered[name];
}
inline void event(const char* name, unsigned block, unsigned tid, long a, long b) {
  if (tid != 0) return;
  ++per_request[block][name];
  last_a[block][name] = a;
  if (trace) std::printf("  req %u %s %ld %ld\n", block, name, a, b);
}
// block -> warp -> events of warps working alone (KD_WARP_EVENT, lane 0 of each warp)
inline std::map<unsigned, std::map<unsigned, long>> warp_events;
constexpr unsigned kLanes = 32;  // a warp (kern::kWarpSize, declared after these hooks)
inline void warp_event(const char* name, unsigned block, unsigned tid, long a, long b) {
  if (tid % kLanes != 0) return;
  ++warp_events[block][tid / kLanes];
  if (trace) std::printf("  req %u warp %u %s %ld %ld\n", block, tid / kLanes, name, a, b);
}
inline void barrier(unsigned block, unsigned tid) {
  if (tid != 0) return;
  ++barriers[phase];
  ++per_request[block]["barrier"];
}
}  // namespace profile

#define KD_PHASE(name) ::profile::mark(name, threadIdx.x)
#define KD_EVENT(name, a, b) ::profile::event(name, blockIdx.x, threadIdx.x, (a), (b))
#define KD_WARP_EVENT(name, a, b) ::profile::warp_event(name, blockIdx.x, threadIdx.x, (a), (b))
#include "kernels/device_compat.cuh"
#define __syncthreads() (::profile::barrier(blockIdx.x, threadIdx.x), ::kdemu::syncthreads())
#include "bench/tree_heap.h"
#include "kernels/emu/emu_runners.h"
#include "kernels/tree_build_plan.h"

using namespace kdtree;

namespace {

// Sorted log-probability rows [D, K]: "flat" as bench_kernels draws them (exponential gaps),
// "logits": the top K of log_softmax(normal(0, sigma) over 4096 tokens).
std::vector<float> rows(const std::string& kind, int D, int K, std::mt19937_64& rng) {
  std::vector<float> out(static_cast<size_t>(D) * K);
  for (int d = 0; d < D; ++d) {
    float* row = out.data() + static_cast<size_t>(d) * K;
    if (kind == "flat") {
      std::exponential_distribution<float> ed(1.0f);
      float acc = -0.05f;
      for (int k = 0; k < K; ++k) row[k] = acc -= ed(rng) * 0.08f;
    } else {
      const float sigma = kind == "logits" ? 2.5f : 6.0f;
      std::normal_distribution<double> nd(0.0, sigma);
      std::vector<double> x(4096);
      double m = -1e300, sum = 0.0;
      for (double& v : x) m = std::max(m, v = nd(rng));
      for (double v : x) sum += std::exp(v - m);
      std::partial_sort(x.begin(), x.begin() + K, x.end(), std::greater<double>());
      for (int k = 0; k < K; ++k) row[k] = static_cast<float>(x[k] - m - std::log(sum));
    }
  }
  return out;
}

void profile_case(const std::string& kind, int requests, int N, int D) {
  std::mt19937_64 rng(11);
  const int K = N, R = N + 1, W = (R + 31) / 32;
  std::vector<float> logp;
  for (int b = 0; b < requests; ++b) {
    const std::vector<float> r = rows(kind, D, K, rng);
    logp.insert(logp.end(), r.begin(), r.end());
  }
  std::vector<int32_t> tok(logp.size()), budget(requests, N), n(requests), tokens(static_cast<size_t>(requests) * R),
      depth(tokens.size()), parent(tokens.size()), positions(tokens.size());
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<int32_t>(i % K);
  std::vector<float> score(tokens.size());
  std::vector<uint32_t> vis(tokens.size() * W);
  TreeRequests reqs;
  reqs.batch = requests;
  reqs.depth = D;
  reqs.max_budget = N;
  reqs.budget = budget.data();
  TopkRows topk;
  topk.k = K;
  topk.logp = logp.data();
  topk.tok = tok.data();
  TreeArrays trees;
  trees.rows = R;
  trees.vis_words = W;
  trees.n = n.data();
  trees.tokens = tokens.data();
  trees.depth = depth.data();
  trees.parent = parent.data();
  trees.positions = positions.data();
  trees.score = score.data();
  trees.vis = vis.data();
  const TreeBuildParams p = make_tree_build_params(reqs, topk, trees);
  TreeBuildPlan plan;
  const test::EmuTreeRunner device;  // the pretend device's limits, as the emulated tests plan with
  if (!make_tree_build_plan(p, device.smem_limit, device.sms, device.smem_per_sm, &plan).ok()) std::abort();
  profile::barriers.clear();
  profile::entered.clear();
  profile::per_request.clear();
  profile::warp_events.clear();
  profile::last_a.clear();
  ::kdemu::launch(dim3(plan.blocks), dim3(plan.threads), plan.smem_bytes, kern::tree_build_kernel_for(plan.staged, plan.level_raise, plan.lone), p, plan.onepass);
  int max_depth = 0, differ = 0;
  for (int32_t d : depth) max_depth = std::max(max_depth, static_cast<int>(d));
  bench::TreeHeap heap;
  bench::HeapTree want;
  for (int b = 0; b < requests; ++b) {
    const size_t o = static_cast<size_t>(b) * D * K, r0 = static_cast<size_t>(b) * R;
    heap.build(logp.data() + o, tok.data() + o, D, K, N, -1, &want);
    bool same = n[b] == want.n;
    for (int i = 0; same && i <= want.n; ++i) same = tokens[r0 + i] == want.tokens[i] && parent[r0 + i] == want.parent[i];
    differ += same ? 0 : 1;
    if (!same && profile::trace) std::printf("  req %d differs from the heap (n %d, heap %d)\n", b, n[b], want.n);
  }
  long total = 0;
  for (const auto& [ph, c] : profile::barriers) total += c;
  std::printf("%-7s N=%-5d D=%-3d depth %2d | barriers/request %6.1f |", kind.c_str(), N, D, max_depth,
              static_cast<double>(total) / requests);
  for (const char* ph : {"start", "onepass", "sweep", "bisection", "ties", "order", "emit"})
    if (profile::barriers.count(ph)) std::printf(" %s %.1f", ph, static_cast<double>(profile::barriers[ph]) / requests);
  // per request (a batch's time is its slowest request's): mean/max
  std::printf(" | per request mean/max:");
  for (const char* ev : {"barrier", "onepass_level", "grow", "raise", "compact"}) {
    long sum = 0, most = 0;
    for (const auto& [blk, m] : profile::per_request) {
      const auto it = m.find(ev);
      const long v = it == m.end() ? 0 : it->second;
      sum += v;
      most = std::max(most, v);
    }
    std::printf(" %s %.1f/%ld", ev, static_cast<double>(sum) / requests, most);
  }
  // the levels a request's warps grew alone (the one-pass search below its synchronised
  // levels), counted for its slowest warp: what sets a batch's time apart from one request's
  {
    long sum = 0, most = 0;
    unsigned worst = 0;
    for (const auto& [blk, warps] : profile::warp_events) {
      long m = 0;
      for (const auto& [w, c] : warps) m = std::max(m, c);
      sum += m;
      if (m > most) most = m, worst = blk;
    }
    std::printf(" warp_levels %.1f/%ld (request %u)", static_cast<double>(sum) / requests, most, worst);
  }
  // the one-pass search's candidates (pool nodes in the N-th best's bin and above): ~N when its
  // threshold is close to t*
  {
    long sum = 0, most = 0, seen = 0;
    for (const auto& [blk, m] : profile::last_a) {
      const auto it = m.find("onepass_cands");
      if (it == m.end()) continue;
      sum += it->second;
      most = std::max(most, it->second);
      ++seen;
    }
    if (seen) std::printf(" candidates %.1f/%ld", static_cast<double>(sum) / seen, most);
  }
  long gave_up = 0;
  for (const auto& [blk, m] : profile::per_request) gave_up += m.count("onepass_gave_up") ? 1 : 0;
  std::printf(" | one-pass gave up in %ld of %ld | bisection in %ld of %d | trees differing from the heap: %d\n", gave_up,
              profile::entered["onepass"], profile::entered["bisection"], requests, differ);
}

}  // namespace

int main(int argc, char** argv) {
  const int requests = argc > 1 ? std::atoi(argv[1]) : 8;
  const char* only_kind = argc > 2 ? argv[2] : nullptr;        // e.g. flat
  const int only_n = argc > 3 ? std::atoi(argv[3]) : 0;          // e.g. 256
  profile::trace = std::getenv("KD_TREE_TRACE") && std::atoi(std::getenv("KD_TREE_TRACE")) != 0;
  for (const char* kind : {"flat", "logits", "peaky"})
    for (int N : {16, 64, 256, 512, 1024})
      for (int D : {15})
        if ((!only_kind || std::string(only_kind) == kind) && (only_n == 0 || only_n == N))
          profile_case(kind, requests, N, D);
  return 0;
}
