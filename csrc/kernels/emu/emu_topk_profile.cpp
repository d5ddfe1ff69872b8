// What topk_logprobs' scan does per row, counted on the SIMT emulator for each scan
// (TopkScanVariant): compactions, re-reads, candidates, and per warp and 2048-logit step how
// often a warp takes the candidate path and how many times it walks its lanes' set bits (the
// largest count in the warp: SIMT runs the loop that often). Rows as bench_kernels draws them
// (normal(0, 2.5)). A tool for docs/kernels/topk_logprobs.md, from the kernel's KD_EVENT marks.
//
//   emu_topk_profile [ROWS [VOCAB [K [SMS]]]]   (built like the emulated tests, -DKD_SIMT_EMULATION)
//   SMS: the pretend device's SMs, which set the block size as the plan does (default 1: 128
//   threads from 3 rows, as 448 rows on 132 SMs; 132 with 64 rows: 512 threads)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <tuple>
#include <vector>

namespace profile {
// (block, step, warp) -> (lanes with candidates, largest per-lane count); per block: events
inline std::map<std::tuple<unsigned, long, unsigned>, std::pair<int, int>> warp_steps;
inline std::map<unsigned, std::map<std::string, long>> per_row;
inline const char* phase = "start";
inline void mark(const char* name, unsigned tid) {
  if (tid == 0) phase = name;
}
inline void barrier(unsigned block, unsigned tid) {
  if (tid == 0) ++per_row[block][std::string("barriers ") + phase];
}
inline void event(const char* name, unsigned block, unsigned tid, long a, long b) {
  const std::string n = name;
  if (n == "topk_pass") {
    auto& w = warp_steps[{block, a, tid / 32}];
    w.first += b > 0;
    w.second = std::max(w.second, static_cast<int>(b));
    per_row[block]["candidates"] += b;
    return;
  }
  if (tid != 0) return;
  if (n == "topk_reread") {
    per_row[block]["reread"] += a;
    per_row[block]["final_candidates"] += b;
  } else {
    ++per_row[block][n];
  }
}
}  // namespace profile

#define KD_EVENT(name, a, b) ::profile::event(name, blockIdx.x, threadIdx.x, (a), (b))
#define KD_PHASE(name) ::profile::mark(name, threadIdx.x)
#include "kernels/device_compat.cuh"
#define __syncthreads() (::profile::barrier(blockIdx.x, threadIdx.x), ::kdemu::syncthreads())
#define __syncthreads_or(p) (::profile::barrier(blockIdx.x, threadIdx.x), ::kdemu::syncthreads_or(p))
#include "emu_runners.h"

using namespace kdtree;
using namespace kdtree::test;

int main(int argc, char** argv) {
  const int rows = argc > 1 ? std::atoi(argv[1]) : 8;
  const int vocab = argc > 2 ? std::atoi(argv[2]) : 163840;
  const int k = argc > 3 ? std::atoi(argv[3]) : 256;
  const int sms = argc > 4 ? std::atoi(argv[4]) : 1;
  std::mt19937_64 rng(17);
  std::normal_distribution<float> normal(0.0f, 2.5f);
  TopkIO base;
  base.rows = rows;
  base.vocab = vocab;
  base.k = k;
  base.logits.resize(static_cast<size_t>(rows) * vocab);
  for (float& x : base.logits) x = normal(rng);
  std::vector<float> first_logp;
  for (const int variant : {kTopkScan2, kTopkScanLean}) {
    profile::warp_steps.clear();
    profile::per_row.clear();
    EmuTreeRunner runner;
    runner.sms = sms;
    runner.topk_variant = variant;
    TopkIO t = base;
    t.poison_outputs();
    if (!runner.topk(t).ok()) return 1;
    if (first_logp.empty()) first_logp = t.logp;
    else if (t.logp != first_logp) std::printf("  the scans' log-probabilities differ\n");
    long steps = 0, any = 0, walks = 0;
    for (const auto& [key, w] : profile::warp_steps) {
      ++any;
      walks += w.second;
    }
    TopkLogprobsPlan plan;
    TopkLogprobsParams pp = topk_params(t, host_data);
    if (!make_topk_logprobs_plan(pp, runner.smem_limit, sms, &plan).ok()) return 1;
    const int chunk = kern::kTopkPerThread * plan.threads;
    const long warps_steps = static_cast<long>(rows) * (plan.threads / 32) * ((vocab + chunk - 1) / chunk);
    steps = warps_steps;
    double compact = 0, reread = 0, cand = 0, fin = 0, bar_scan = 0, bar_compact = 0, bar_finish = 0, bar_sum = 0, bar_sort = 0;
    for (auto& [b, m] : profile::per_row) {
      compact += m["topk_compact"];
      reread += m["reread"];
      cand += m["candidates"];
      fin += m["final_candidates"];
      bar_scan += m["barriers topk scan"];
      bar_compact += m["barriers topk compact"];
      bar_finish += m["barriers topk finish"];
      bar_sum += m["barriers topk summary"];
      bar_sort += m["barriers topk sort"];
    }
    std::printf("variant %d rows=%d V=%d K=%d threads=%d: per row %.2f compactions, %.3f re-reads, %.0f candidates appended, %.0f left at the end;"
                " per warp-step: candidate path %.3f, set-bit walks %.3f\n",
                variant, rows, vocab, k, plan.threads, compact / rows, reread / rows, cand / rows, fin / rows,
                static_cast<double>(any) / steps, static_cast<double>(walks) / steps);
    std::printf("  barriers per row: scan %.1f, compactions %.1f (%.1f each), summary %.1f, select %.1f, sort %.1f\n",
                bar_scan / rows, bar_compact / rows, compact > 0 ? bar_compact / compact : 0.0, bar_sum / rows, bar_finish / rows,
                bar_sort / rows);
  }
  return 0;
}
