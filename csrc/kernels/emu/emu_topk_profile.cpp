// What topk_logprobs' scan does per row, counted on the SIMT emulator for each scan
// (TopkScanVariant): compactions, re-reads, candidates, and per warp and 2048-logit step how
// often a warp takes the candidate path and how many times it walks its lanes' set bits (the
// largest count in the warp: SIMT runs the loop that often). Rows as bench_kernels draws them
// (normal(0, 2.5)). A tool for NOTES.md, from the kernel's KD_EVENT marks.
//
//   emu_topk_profile [ROWS [VOCAB [K]]]   (built like the emulated tests, -DKD_SIMT_EMULATION)
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
#include "kernels/device_compat.cuh"
#include "emu_runners.h"

using namespace kdtree;
using namespace kdtree::test;

int main(int argc, char** argv) {
  const int rows = argc > 1 ? std::atoi(argv[1]) : 8;
  const int vocab = argc > 2 ? std::atoi(argv[2]) : 163840;
  const int k = argc > 3 ? std::atoi(argv[3]) : 256;
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
    runner.sms = 1;  // 128-thread blocks, as 448 rows on 132 SMs take
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
    const long warps_steps = static_cast<long>(rows) * 4 * ((vocab + 2047) / 2048);
    steps = warps_steps;
    double compact = 0, reread = 0, cand = 0, fin = 0;
    for (auto& [b, m] : profile::per_row) {
      compact += m["topk_compact"];
      reread += m["reread"];
      cand += m["candidates"];
      fin += m["final_candidates"];
    }
    std::printf("variant %d rows=%d V=%d K=%d: per row %.2f compactions, %.3f re-reads, %.0f candidates appended, %.0f left at the end;"
                " per warp-step: candidate path %.3f, set-bit walks %.3f\n",
                variant, rows, vocab, k, compact / rows, reread / rows, cand / rows, fin / rows,
                static_cast<double>(any) / steps, static_cast<double>(walks) / steps);
  }
  return 0;
}
