// topk_logprobs' float32-only arithmetic on the SIMT emulator (CPU): the float-pair exp, log and
// logp rounding (float_pair.cuh) against long double, and a fuzz of rows with planted ties and
// near-ties over many seeds whose top-K ids and log-probabilities must equal the float64
// reference's (python_engine/ddtree/topk.py's rule). Built and run by
// tests/kernels/test_emulated_kernels.py; no GPU needed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "emu_runners.h"
#include "kernels/float_pair.cuh"

using namespace kdtree;
using namespace kdtree::test;

namespace {

uint64_t seed_from_env() {
  const char* env = std::getenv("KD_SEED");
  const uint64_t seed = env && *env ? std::strtoull(env, nullptr, 10) : static_cast<uint64_t>(std::random_device{}());
  std::printf("    seed %llu\n", static_cast<unsigned long long>(seed));
  return seed;
}

long double value(kern::FloatPair p) { return static_cast<long double>(p.hi) + static_cast<long double>(p.lo); }

// |got - want| / max(|want|, floor) in units of 2^-47 (a pair holds ~48 bits). The floor: below
// 2^-101 a result's low part is subnormal; such terms are under 2^-100 of the sums they join.
constexpr long double kPairUnit = 0x1p-47L;
long double rel_units(long double got, long double want, long double floor = 0x1p-90L) {
  return std::fabs(got - want) / std::max(std::fabs(want), floor) / kPairUnit;
}

}  // namespace

// e^x 2^-mk over the references and arguments the scan uses (x within [mk ln2 - 80, mk ln2 + 65],
// |x| < 4096 + 80), e^d for pairs d in [-80, 0]: within 2^-46 of long double's (relative); log(a)
// for a in [1, 2^21] within 2^-45 (relative to max(log a, 1): it takes a pair exp and product).
KD_TEST(float_pair_exp_and_log) {
  std::mt19937_64 rng(seed_from_env());
  const kern::PairTableGlobal table;
  std::uniform_int_distribution<int> ref(-5880, 5880);
  std::uniform_real_distribution<double> offset(-80.0, 65.0), unit(0.0, 1.0);
  long double worst_scaled = 0, worst_pair = 0, worst_log = 0;
  for (int i = 0; i < 400000; ++i) {
    const int mk = ref(rng);
    const float x = static_cast<float>(mk * 0x1.62e42fefa39efp-1 + offset(rng));
    const long double want = std::ldexp(std::exp(static_cast<long double>(x)), -mk);
    worst_scaled = std::max(worst_scaled, rel_units(value(kern::exp_pair_scaled<false>(x, 0.0f, kern::exp_pair_round(mk), table)), want));
  }
  for (int i = 0; i < 400000; ++i) {
    const float hi = static_cast<float>(i % 2 ? -80.0 * unit(rng) : -unit(rng));
    const float lo = static_cast<float>((unit(rng) - 0.5) * (std::nextafter(std::fabs(hi), INFINITY) - std::fabs(hi)));
    const long double d = static_cast<long double>(hi) + lo;
    worst_pair = std::max(worst_pair, rel_units(value(kern::exp_pair(kern::FloatPair(hi, lo), table)), std::exp(d)));
    const kern::FloatPair a = kern::fast_two_sum(static_cast<float>(std::exp2(21.0 * unit(rng))), static_cast<float>(unit(rng) * 1e-8));
    worst_log = std::max(worst_log, rel_units(value(kern::pair_log(a, table)), std::log(value(a)), 1.0L));
  }
  std::printf("    worst: e^x 2^-mk %.3Lf, e^d %.3Lf (x 2^-47 relative), log %.3Lf\n", worst_scaled, worst_pair, worst_log);
  KD_EXPECT(worst_scaled <= 2.0L);
  KD_EXPECT(worst_pair <= 2.0L);
  KD_EXPECT(worst_log <= 4.0L);
  KD_EXPECT(value(kern::exp_pair(kern::FloatPair(0.0f), table)) == 1.0L);
  KD_EXPECT(value(kern::exp_pair(kern::FloatPair(-INFINITY), table)) == 0.0L);
  KD_EXPECT(value(kern::exp_pair(kern::FloatPair(-81.0f), table)) == 0.0L);
}

// float32(x - lse) for a pair lse is x - lse rounded once: within half an ulp, but for a margin
// of 2^-20 ulp (the one inner rounding), and -inf for x = -inf.
KD_TEST(float_pair_logp_rounds_once) {
  std::mt19937_64 rng(seed_from_env());
  std::normal_distribution<double> logit(0.0, 6.0);
  std::uniform_real_distribution<double> unit(-0.5, 0.5);
  int off = 0;
  for (int i = 0; i < 1000000; ++i) {
    const double l = 12.0 + std::fabs(logit(rng));
    const float hi = static_cast<float>(l);
    const float lo = static_cast<float>(unit(rng) * (std::nextafter(hi, INFINITY) - hi));
    const float x = static_cast<float>(logit(rng));
    const float got = kern::logp_of_pair(x, kern::FloatPair(hi, lo));
    const long double exact = static_cast<long double>(x) - hi - lo;
    const long double ulp = std::nextafter(std::fabs(got), INFINITY) - std::fabs(got);
    off += std::fabs(got - exact) > (0.5L + 0x1p-20L) * ulp;
  }
  KD_EXPECT_EQ(off, 0);
  KD_EXPECT(kern::logp_of_pair(-INFINITY, kern::FloatPair(3.0f, 1e-8f)) == -INFINITY);
}

// pair_round_to_double gives float64's rounding of hi + lo: on random pairs, on ties (lo an odd
// multiple of half float64's ulp) and under powers of two.
KD_TEST(float_pair_rounds_to_double) {
  std::mt19937_64 rng(seed_from_env());
  std::uniform_real_distribution<double> mag(-40.0, 40.0), unit(-1.0, 1.0);
  int differ = 0;
  for (int i = 0; i < 1000000; ++i) {
    float hi = static_cast<float>((rng() % 2 ? 1 : -1) * std::exp2(mag(rng)));
    if (i % 7 == 0) hi = std::exp2f(std::round(static_cast<float>(mag(rng))));  // a power of two
    const double ulp53 = std::ldexp(1.0, std::ilogb(hi) - 52);
    float lo = static_cast<float>(unit(rng) * (std::nextafter(std::fabs(hi), INFINITY) - std::fabs(hi)));
    if (i % 5 == 0) lo = static_cast<float>((2.0 * static_cast<double>(rng() % 1024) + 1.0) * 0.5 * ulp53);  // a tie
    const double want = static_cast<double>(static_cast<long double>(hi) + static_cast<long double>(lo));
    differ += value(kern::pair_round_to_double(kern::FloatPair(hi, lo))) != static_cast<long double>(want);
  }
  KD_EXPECT_EQ(differ, 0);
}

// The kernel's lse (the pair it writes to TopkLogprobsParams::lse) against long double's on
// rows at the engine's vocabulary: normal(0, 2.5) logits (a spread sum), a peaked row (one logit
// 30, the rest ~N(0, 2.5)), and logits near 4095 (the scan's sums straddle both forms). Within
// 2^-46 of |lse| (float64 holds it to 2^-53; ~2^-50 seen), both scans.
KD_TEST(topk_lse_against_long_double) {
  std::mt19937_64 rng(seed_from_env());
  std::normal_distribution<float> normal(0.0f, 2.5f);
  constexpr int kRows = 3, kVocab = 163840, kK = 64;
  TopkIO t;
  t.rows = kRows;
  t.vocab = kVocab;
  t.k = kK;
  t.logits.resize(static_cast<size_t>(kRows) * kVocab);
  for (int r = 0; r < kRows; ++r)
    for (int i = 0; i < kVocab; ++i) t.logits[static_cast<size_t>(r) * kVocab + i] = normal(rng) + (r == 2 ? 4095.0f : 0.0f);
  t.logits[static_cast<size_t>(kVocab) + rng() % kVocab] = 30.0f;  // row 1: peaked
  long double worst = 0;
  for (const int variant : {kTopkScan2, kTopkScanLean}) {
    t.poison_outputs();
    std::vector<float> lse(2 * kRows, NAN);
    TopkLogprobsParams p = topk_params(t, host_data);
    p.variant = variant;
    p.lse = lse.data();
    TopkLogprobsPlan plan;
    KD_CHECK(make_topk_logprobs_plan(p, emulated_device_limits().smem_optin, emulated_device_limits().sms, &plan).ok());
    ::kdemu::launch(dim3(plan.blocks), dim3(plan.threads), plan.smem_bytes, topk_logprobs_kernel_for(plan), p, plan.opt);
    for (int r = 0; r < kRows; ++r) {
      const float* x = t.logits.data() + static_cast<size_t>(r) * kVocab;
      const long double m = *std::max_element(x, x + kVocab);
      long double sum = 0;
      for (int i = 0; i < kVocab; ++i) sum += std::exp(static_cast<long double>(x[i]) - m);
      const long double want = m + std::log(sum);
      const long double err = std::fabs(static_cast<long double>(lse[2 * r]) + lse[2 * r + 1] - want) / std::fabs(want);
      std::printf("    variant %d row %d: lse %.17Lg, off by %.2Lg relative (2^%.1Lf)\n", variant, r, want, err,
                  err > 0 ? std::log2(err) : -INFINITY);
      worst = std::max(worst, err);
    }
  }
  KD_EXPECT(worst <= 0x1p-46L);
}

// Rows with planted exact ties, near-ties (a few ulps apart) and near-halfway logps
// (plant_near_ties) over many seeds, every block size and both scans: the same ids in the same
// order, and the same log-probabilities bit for bit, as the float64 reference.
KD_TEST(topk_near_ties_fuzz) {
  const uint64_t seed = seed_from_env();
  constexpr int kSeeds = 24;
  const int vocabs[] = {4099, 8192, 20011};
  const int ks[] = {1, 7, 64, 256};
  for (int i = 0; i < kSeeds; ++i) {
    EmuTreeRunner runner;
    runner.sms = i % 3 == 0 ? 132 : 1;  // 512 threads; or 256 (2 rows) / 128 (3-4 rows)
    runner.topk_variant = i % 2 ? kTopkScan2 : kTopkScanLean;
    const int vocab = vocabs[i % 3], k = std::min(ks[i % 4], vocab);
    run_random_topk_case(runner, "near_ties", 1 + i % 4, vocab, k, seed + 1000 * i);
  }
}

KD_TEST_MAIN()
