// Device code of topk_logprobs (host API in tree_build.cuh, launch plan in topk_logprobs_plan.h):
// for each row of drafter logits, the K most probable tokens in (log-probability desc, token
// id asc) order with their log-probabilities, formed like python_engine/ddtree/topk.py:
// lse = max + log(sum exp(x - max)) in float64, logp = float32(x - lse); here the lse is
// formed in float pairs (float_pair.cuh: ~48 bits, no float64 anywhere), which rounds x - lse
// to the same float32 as float64 does but for ~1 in 10^8.
//
// One block per row (128, 256 or 512 threads: the plan takes more threads per row when there
// are fewer rows than SMs), ONE read of the logits:
//   1. scan: each thread loads four float4 per step (the next step's are in flight while this
//      one computes). Per step it takes the float32 max of its 16 logits, moves its pair
//      sums' power-of-two reference when the max rose (rare), then adds e^x 2^-mk of each
//      logit, clamped from below so the exp needs no range check (float_pair.cuh; interleaved
//      table copies keep bank conflicts low). The step's max also decides, once per 16
//      logits, whether any logit beats the candidate threshold; those that do are appended
//      to a candidate buffer in shared memory. When the buffer is full, the block keeps the
//      K largest (logit, lower id first; a few more when that saves select rounds), raises the
//      threshold to the lowest kept and appends what did not fit. In a row in random order
//      only ~K ln(V/K) logits ever pass.
//   2. lse from the partial sums (rescaled to the block's largest power-of-two reference:
//      exact; one exp for all); every candidate becomes its float32 log-probability, and the
//      K largest by (logp, lower id first) are selected.
//   3. float32 rounding can give neighbouring logits the same logp, and the reference then
//      orders them by id: a dropped logit may belong to the K-th logp's group. The largest
//      dropped logit is checked with one logp; when it could happen (rarely; always with exact
//      ties across the cut, e.g. many -inf), the row is read once more to gather that group's
//      lowest ids.
//   4. a bitonic sort of the K winners; logp and token out.
// Two scans implement step 1 (TopkScanVariant, kept side by side for A/B timing, the same
// outputs bit for bit): topk_scan (topk2) and topk_scan_lean (the default: fewer instructions
// per step, selects with fewer barriers; its comment says what differs).
#pragma once

#include "block_scan.cuh"
#include "block_select.cuh"
#include "block_sort.cuh"
#include "device_compat.cuh"
#include "float_pair.cuh"
#include "ordered_float.cuh"
#include "tree_build.cuh"

#if defined(KD_TOPK_PHASE_CLOCKS) && defined(__CUDACC__) && !defined(KD_SIMT_EMULATION)
#include "dev/topk_logprobs_clocks.cuh"  // a measuring build: cycles per phase of block 0
#else
#define TOPK_CLK_BEGIN(var) ((void)0)
#define TOPK_CLK_END(var, slot) ((void)0)
#define TOPK_CLK_COUNT(slot) ((void)0)
#define TOPK_CLK_REPORT() ((void)0)
#endif

namespace kdtree::kern {

constexpr int kTopkThreadsPerSM = 512;     // threads x resident blocks per SM: caps registers at 128
constexpr int kTopkMinThreads = 128;       // block sizes: 128 (many rows), 256, 512 (few rows)
constexpr int kTopkMaxThreads = 512;
constexpr int kTopkVecs = 4;               // float4 loads per thread per step, issued together
constexpr int kTopkPerThread = 4 * kTopkVecs;  // logits per thread per step
constexpr int kTopkSlack = 2048;           // candidate slots beyond the K kept: appends between compactions
constexpr int kTopkTableCopies = 8;        // interleaved copies: a half-warp's 8-byte reads at most 2-way conflicted
constexpr int kTopkTableShift = 6;         // entry j's copies start at byte j << 6 (8 copies x 8 bytes)
static_assert((1 << kTopkTableShift) == kTopkTableCopies * static_cast<int>(sizeof(FloatPair)), "table layout");
using TopkExpTable = PairTableShared<kTopkTableShift>;
// The scan's exp sums (float pairs): while a thread's max m has |m| < kTopkFastMaxAbs, it sums
// e^x 2^-mk with mk = topk_ref_exponent(m) ~ floor(m / ln2) (a power-of-two reference: no
// x - m per logit, exact rescales; |x| < kExpPairMaxAbs keeps the exp's reduction exact).
// Logits more than kTopkClampBelowMax below m are raised to m - kTopkClampBelowMax first:
// their terms (< e^-80 of the max's) vanish in a pair sum that holds the max's, and the exp
// needs no range check. Otherwise (absurd logits) the sum is of e^(x - m), x - m formed
// exactly as a pair, with the range-checked exp.
constexpr float kTopkFastMaxAbs = 4096.0f;
constexpr float kTopkClampBelowMax = kExpPairRange;
constexpr float kTopkInvLn2 = 0x1.715476p+0f;
constexpr float kTopkLn2 = 0x1.62e43p-1f;  // (rounded: only a range test)
static_assert(kTopkFastMaxAbs + 64.0f < kExpPairMaxAbs, "fast-range logits, and the lse's e^(-max), in the exp's range");

// The sums' power-of-two reference for a running max m (|m| < kTopkFastMaxAbs): both scans use
// it, so their sums differ by exact powers of two.
KD_DEVICE int topk_ref_exponent(float m) { return static_cast<int>(floorf(__fmul_rn(m, kTopkInvLn2))); }

// Candidate slots: the K kept (rounded up to a warp) and the slack.
KD_HOST_DEVICE constexpr int topk_kept_slots(int k) { return round_up(k, kWarpSize); }
KD_HOST_DEVICE constexpr int topk_capacity(int k) { return topk_kept_slots(k) + kTopkSlack; }
KD_HOST_DEVICE constexpr size_t topk_smem_bytes(int k) { return static_cast<size_t>(topk_capacity(k)) * 2 * sizeof(uint32_t); }

// The scan's compactions need not keep exactly K: the select stops once the bin holding the
// K-th has at most this many candidates (usually after 2 of its ~4-5 rounds) and keeps them all.
constexpr int kTopkCompactSlop = 64;
// The final select cuts the candidates by such a bound first only when that removes most of
// them (n >= 4 (K + slop): ~2000 of 2304 slots are full at the end of a 163840-logit row,
// ~400 at 32768, where the extra pass and barriers would not pay).
constexpr int kTopkCutFactor = 4;

constexpr int kTopkDefaultVariant = kTopkScanLean;  // TopkScanVariant when TopkLogprobsParams::variant is -1

// Launch options the plan sets (kernel argument).
struct TopkOptions {
  int compact_slop = 0;  // the scan's compactions keep up to K + this - 1, and the final select
                         //   first cuts to that many (0: exact selects only)
};

// The scan's summary of its row (block-uniform).
struct TopkSummary {
  FloatPair fsum;  // sum of e^x 2^-mk over the logits met while the max was in the fast range
  FloatPair slow;  // sum of e^(x - pmax) over the others
  float pmax;      // the row's largest logit
  float drop_max;  // the largest logit the candidates left out (-inf: none)
  int n;           // candidates
  int mk;          // fsum's power-of-two reference (when has_fast)
  int has_fast;
  int dropped;     // a compaction dropped candidates
};

// The static buffer (TopkShared<Threads, true>): every K's capacity.
constexpr int kTopkStaticCapacity = topk_capacity(kTreeMaxNodes);
constexpr int kTopkStaticStride = kTopkStaticCapacity;

// The lean scan's candidate slots: up to the whole static buffer from K = 256 (topk2: K + 2048).
// A compaction at n candidates leaves a threshold that ~K/n of the logits pass, so a larger
// buffer puts the next compaction later and lets fewer pass after it. Emulator, bench rows
// (emu_topk_profile): at 163840 x 256, 3072 slots: 2.00 compactions a row (2.14), 2.10 set-bit
// walks a warp-step (2.17), ~1040 candidates left (not ~2000: no cut before the final select);
// at 32768 x 256: 1.03 compactions (2.00). At K = 64 the same 3072 slots delay the second
// compaction past most of the row (walks 1.57 -> 2.04), hence the floor at K + 2048.
constexpr int kTopkLeanSlotsPerK = 12;
KD_HOST_DEVICE constexpr int topk_lean_capacity(int k) {
  const int wide = kTopkLeanSlotsPerK * k < kTopkStaticCapacity ? kTopkLeanSlotsPerK * k : kTopkStaticCapacity;
  return wide > topk_capacity(k) ? wide : topk_capacity(k);
}
static_assert(topk_lean_capacity(kTreeMaxNodes) <= kTopkStaticCapacity, "the lean capacity fits the static buffer");

// One warp's part of the lean scan's summary (TopkSummary's fields before the block sums).
struct TopkWarpSummary {
  FloatPair fsum;  // the warp's fast sums at 2^-mk
  float pmax, mk, drop_max;  // maxima (mk as a float: -inf where no thread had fast terms)
  int has_slow;
};

// The final sort reuses the buffer: its keys (8 bytes each, a power of two < 2K) must fit.
static_assert(2 * kTreeMaxNodes <= kTopkSlack, "the sort keys of K winners fit in the candidate buffer");
static_assert(2 * kTreeMaxNodes <= 2 * kTopkStaticStride, "... and in the static one");
static_assert(kTreeMaxNodes <= kTopkMinThreads * 8, "the K winners fit in 8 registers per thread before the sort");

// Lean: the candidate buffer is here too (static, at fixed offsets: one address computation per
// append serves both stores), else in dynamic shared memory.
template <int Threads, bool Lean = false>
struct TopkShared {
  FloatPair exp_table[kExpPairTableSize * kTopkTableCopies];  // kExp2PairTable[j], copy c at [j * copies + c]
  SelectScratch select;
  BlockScratch<FloatPair> dsum;
  BlockScratch<float> fmax;
  int count;                        // candidates in the buffer (may pass capacity while appending)
  uint32_t drop_key;                // largest ordered key a scan compaction removed (0: none)
  uint64_t eq_warp[Threads / kWarpSize];  // re-read: tied logits per warp in this chunk (4 packed counts)
  SelectLeanScratch select_lean;    // the lean scan's selects (zeroed at the start: they keep it so)
  TopkWarpSummary warp_summary[Threads / kWarpSize];  // the lean scan's summary, per warp
  alignas(16) uint32_t buf[Lean ? 2 * kTopkStaticStride : 1];  // keys, then rids at kTopkStaticStride
};

KD_DEVICE float logp_of(float x, FloatPair lse) { return logp_of_pair(x, lse); }

// Pair sums across a warp (butterfly: pair_add is commutative bit for bit, so every lane ends
// with the same value); block_sum takes them through this.
KD_DEVICE FloatPair warp_sum(FloatPair v) {
#pragma unroll
  for (int d = kWarpSize / 2; d > 0; d >>= 1)
    v = pair_add(v, FloatPair(__shfl_xor_sync(kFullMask, v.hi, d), __shfl_xor_sync(kFullMask, v.lo, d)));
  return v;
}

// e^(a - b) for floats a <= b (a pair difference: exact), 0 when a is -inf
template <class Table>
KD_DEVICE FloatPair topk_exp_diff(float a, float b, const Table& table) {
  if (!(a > -INFINITY)) return {};
  return exp_pair(two_sum(a, -b), table);
}

// Keep the buffer entries for which keep(value) holds, packed to the front in any order;
// s.count becomes their number. The buffer is walked in chunks of kTopkKeepPerThread entries
// per thread, one barrier each: a chunk's kept entries land below its end, so no unread entry
// is overwritten.
constexpr int kTopkKeepPerThread = 4;
constexpr int kTopkRereadPer = 4;  // re-read: logits per thread per chunk (four 16-bit counts fit 64 bits)
static_assert(kTopkRereadPer * 16 <= 64 && kTopkMaxThreads < (1 << 16), "packed per-j tie counts");
// TrackDropped: also raise s.drop_key to the largest key not kept. kept_max >= 0: at most that
// many are kept (the caller knows), so they land in the chunks below it and the chunks from
// there on need no barrier of their own (every thread read those below before writing).
template <bool TrackDropped = false, int Threads, bool L, class Keep>
KD_DEVICE void topk_keep_if(TopkShared<Threads, L>& s, uint32_t* keys, uint32_t* rids, int n, Keep keep, int kept_max = -1) {
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarpSize;
  uint32_t dropped_max = 0;
  if (tid == 0) s.count = 0;
  for (int base = 0; base < n; base += kTopkKeepPerThread * Threads) {
    uint32_t k[kTopkKeepPerThread], r[kTopkKeepPerThread];
    bool w[kTopkKeepPerThread];
#pragma unroll
    for (int j = 0; j < kTopkKeepPerThread; ++j) {
      const int i = base + j * Threads + tid;
      k[j] = i < n ? keys[i] : 0u;
      r[j] = i < n ? rids[i] : 0u;
      w[j] = i < n && keep((static_cast<uint64_t>(k[j]) << 32) | r[j]);
      if (TrackDropped && i < n && !w[j]) dropped_max = k[j] > dropped_max ? k[j] : dropped_max;
    }
    if (kept_max < 0 || base < kept_max) __syncthreads();  // the chunk is read (and, the first time, the count reset)
#pragma unroll
    for (int j = 0; j < kTopkKeepPerThread; ++j) {
      const unsigned ballot = __ballot_sync(kFullMask, w[j]);
      if (ballot != 0) {  // warp-uniform
        int slot = 0;
        if (lane == 0) slot = atomicAdd(&s.count, __popc(ballot));
        slot = __shfl_sync(kFullMask, slot, 0) + __popc(ballot & ((1u << lane) - 1u));
        if (w[j]) {
          keys[slot] = k[j];
          rids[slot] = r[j];
        }
      }
    }
  }
  if constexpr (TrackDropped) {
    dropped_max = warp_max(dropped_max);
    if (lane == 0 && dropped_max != 0) atomicMax(&s.drop_key, dropped_max);
  }
  __syncthreads();
}

// v[k] for a k known only at run time, without local memory: a tree of selects on k's bits.
KD_DEVICE float topk_pick(const float (&v)[kTopkPerThread], int k) {
  static_assert(kTopkPerThread == 16, "four levels of selects");
  float a[8], b[4], c[2];
#pragma unroll
  for (int j = 0; j < 8; ++j) a[j] = (k & 1) ? v[2 * j + 1] : v[2 * j];
#pragma unroll
  for (int j = 0; j < 4; ++j) b[j] = (k & 2) ? a[2 * j + 1] : a[2 * j];
#pragma unroll
  for (int j = 0; j < 2; ++j) c[j] = (k & 4) ? b[2 * j + 1] : b[2 * j];
  return (k & 8) ? c[1] : c[0];
}

// Step 1, the scan over the row's V logits at x: leaves s.count candidates in keys/rids and
// returns the row's summary. slop: what the compactions may keep beyond K (TopkOptions).
template <bool Vec4, int Threads, bool L>
KD_DEVICE TopkSummary topk_scan(TopkShared<Threads, L>& s, uint32_t* keys, uint32_t* rids, const float* x, int V, int K, int slop) {
  constexpr int kChunk = kTopkPerThread * Threads;  // logits per step
  const int capacity = topk_capacity(K);
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarpSize;
  const TopkExpTable table(s.exp_table, (lane % kTopkTableCopies) * static_cast<int>(sizeof(FloatPair)));  // this lane's copy
  if (tid == 0) {
    s.count = 0;
    s.drop_key = 0;
  }
  __syncthreads();  // (and the table is written)

  // 1. the scan
  float m = -INFINITY;            // running max of this thread's logits
  FloatPair sum[kTopkVecs] = {};  // sums of e^x 2^-mk while |m| < kTopkFastMaxAbs (several: shorter chains)
  int mk = 0;                     // their power-of-two reference
  float round = exp_pair_round(0);  // folds the 2^-mk into the exp
  bool fast = false;              // |m| < kTopkFastMaxAbs now
  bool had_fast = false;          // sum[] holds terms
  float lo = -INFINITY;           // logits below it are raised to it (m - kTopkClampBelowMax)
  FloatPair slow{};               // sum of e^(x - slow_ref) over the logits met while m was outside
  float slow_ref = -INFINITY;     //   (m only rises: it is in the fast range over one stretch)
  float thr = NAN;                // candidates need a logit above it (NaN: every logit passes)
  float drop = -INFINITY;         // the largest of this thread's logits left out of the buffer
  bool dropped = false;           // whether a compaction has dropped candidates (block-uniform)
  const int steps = ceil_div(V, kChunk);
  // element k of this thread's 16 in a step: float4 (k / 4) is coalesced across the block
  auto index = [&](int step, int k) {
    return step * kChunk + (Vec4 ? ((k / 4) * Threads + tid) * 4 + k % 4 : k * Threads + tid);
  };
  auto load = [&](int step, float (&v)[kTopkPerThread]) {
#pragma unroll
    for (int u = 0; u < kTopkVecs; ++u) {
      if constexpr (Vec4) {
        const int i = index(step, 4 * u);  // V % 4 == 0: a float4 is all in or all out
        const float4 f = i < V ? load_streaming(reinterpret_cast<const float4*>(x + i))
                               : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
        v[4 * u] = f.x;
        v[4 * u + 1] = f.y;
        v[4 * u + 2] = f.z;
        v[4 * u + 3] = f.w;
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = index(step, 4 * u + e);
          v[4 * u + e] = i < V ? x[i] : -INFINITY;
        }
      }
    }
  };
  // Append this thread's logits flagged in `pass` (a warp-uniform call); returns those that
  // did not fit in the buffer.
  auto append = [&](unsigned pass, int step, const float (&v)[kTopkPerThread]) {
    const int c = __popc(pass);
    const int incl = warp_inclusive_sum(c);
    int base = 0;
    if (lane == kWarpSize - 1 && incl > 0) base = atomicAdd(&s.count, incl);
    int slot = __shfl_sync(kFullMask, base, kWarpSize - 1) + incl - c;
    unsigned left = 0;
    // walk the set bits only: past the first steps a thread rarely has more than one
    for (unsigned bits = pass; bits != 0; bits &= bits - 1) {
      const int k = __ffs(static_cast<int>(bits)) - 1;
      if (slot < capacity) {
        keys[slot] = float_to_ordered(topk_pick(v, k));
        rids[slot] = ~static_cast<uint32_t>(index(step, k));
      } else {
        left |= 1u << k;
      }
      ++slot;
    }
    return left;
  };

  TOPK_CLK_BEGIN(clk_scan);
  KD_PHASE("topk scan");
  float next[kTopkPerThread];
  load(0, next);
  for (int step = 0; step < steps; ++step) {
    float v[kTopkPerThread];
#pragma unroll
    for (int k = 0; k < kTopkPerThread; ++k) v[k] = next[k];
    if (step + 1 < steps) load(step + 1, next);  // in flight while this step computes

    float vmax = v[0];
#pragma unroll
    for (int k = 1; k < kTopkPerThread; ++k) vmax = fmaxf(vmax, v[k]);
    if (vmax > m) {  // rare after the first steps
      m = vmax;
      fast = fabsf(m) < kTopkFastMaxAbs;
      if (fast) {
        const int mk_new = topk_ref_exponent(m);
        if (had_fast) {  // 2^(mk - mk_new) <= 1 rescales the sums
          const float f = pow2_nonpositive_f32(mk - mk_new);
#pragma unroll
          for (int u = 0; u < kTopkVecs; ++u) sum[u] = pair_scale(sum[u], f);
        }
        mk = mk_new;
        round = exp_pair_round(mk);
        had_fast = true;
        lo = m - kTopkClampBelowMax;
      } else {
        slow = pair_mul(slow, topk_exp_diff(slow_ref, m, table));
        slow_ref = m;
      }
    }
    if (fast) {
#pragma unroll
      for (int k = 0; k < kTopkPerThread; ++k)
        sum[k / 4] = pair_add(sum[k / 4], exp_pair_scaled<false>(fmaxf(v[k], lo), 0.0f, round, table));
    } else if (m > -INFINITY) {  // else every logit so far is -inf: nothing to add
#pragma unroll
      for (int k = 0; k < kTopkPerThread; ++k) slow = pair_add(slow, topk_exp_diff(v[k], m, table));
    }

    // candidates: one test per 16 logits decides whether any of them passes
    unsigned left = 0;
    const bool any = !(vmax <= thr);
    if (!any) drop = fmaxf(drop, vmax);  // all 16 stay out
    if (__any_sync(kFullMask, any)) {
      unsigned pass = 0;
      if (any) {
#pragma unroll
        for (int k = 0; k < kTopkPerThread; ++k) {
          const bool p = !(v[k] <= thr);
          pass |= static_cast<unsigned>(p) << k;
          drop = fmaxf(drop, p ? -INFINITY : v[k]);
        }
        // logits past the row (-inf) pass only while thr is NaN
        if ((step + 1) * kChunk > V) {
#pragma unroll
          for (int k = 0; k < kTopkPerThread; ++k)
            if (index(step, k) >= V) pass &= ~(1u << k);
        }
      }
      KD_EVENT("topk_pass", step, __popc(pass));
      left = append(pass, step, v);
    }
    while (__syncthreads_or(left != 0)) {  // the buffer is full: keep the K largest
      TOPK_CLK_BEGIN(clk_compact);
      KD_PHASE("topk compact");
      const int n = capacity;  // every slot below capacity was written
      // kth: a bound with K..K+slop-1 values >= it (its key a float >= -inf, never a NaN)
      const uint64_t kth = block_select_kth_largest(keys, rids, n, K, s.select, slop,
                                                    static_cast<uint64_t>(float_to_ordered(-INFINITY)) << 32);
      topk_keep_if<true>(s, keys, rids, n, [kth](uint64_t val) { return val >= kth; });
      thr = ordered_to_float(static_cast<uint32_t>(kth >> 32));
      dropped = true;
      KD_EVENT("topk_compact", step, 0);
      unsigned pass = 0;
#pragma unroll
      for (int k = 0; k < kTopkPerThread; ++k)
        if ((left >> k) & 1u) {
          if (v[k] > thr) pass |= 1u << k;
          else drop = fmaxf(drop, v[k]);
        }
      left = 0;
      if (__any_sync(kFullMask, pass != 0)) left = append(pass, step, v);
      KD_PHASE("topk scan");
      TOPK_CLK_END(clk_compact, 2);
      TOPK_CLK_COUNT(3);
    }
  }
  TOPK_CLK_END(clk_scan, 1);

  TOPK_CLK_BEGIN(clk_summary);
  KD_PHASE("topk summary");
  // the summary (after the loop's last barrier: s.count is final): sums at the block's largest
  // power-of-two reference (exact rescales) and its max
  TopkSummary pc;
  pc.pmax = block_max(m, -INFINITY, s.fmax);
  const float top_mk = block_max(had_fast ? static_cast<float>(mk) : -INFINITY, -INFINITY, s.fmax);  // |mk| < 2^13: exact
  pc.has_fast = top_mk > -INFINITY;
  pc.mk = pc.has_fast ? static_cast<int>(top_mk) : 0;
  FloatPair fsum{};
  if (had_fast) {
#pragma unroll
    for (int u = 0; u < kTopkVecs; ++u) fsum = pair_add(fsum, sum[u]);
    fsum = pair_scale(fsum, pow2_nonpositive_f32(mk - pc.mk));
  }
  pc.fsum = block_sum(fsum, s.dsum);
  FloatPair slow_part{};
  if (slow_ref > -INFINITY) slow_part = pair_mul(slow, topk_exp_diff(slow_ref, pc.pmax, table));
  pc.slow = block_sum(slow_part, s.dsum);
  float drop_max = block_max(drop, -INFINITY, s.fmax);
  if (s.drop_key != 0) drop_max = fmaxf(drop_max, ordered_to_float(s.drop_key));
  pc.drop_max = drop_max;
  pc.n = s.count;
  pc.dropped = dropped;
  TOPK_CLK_END(clk_summary, 4);
  return pc;
}

// v, hidden from the optimiser (no code): keeps a computation where it is written.
KD_DEVICE int opaque_int(int v) {
#if defined(__CUDA_ARCH__) && !defined(KD_SIMT_EMULATION)
  asm volatile("" : "+r"(v));
#endif
  return v;
}

// The lean scan (kTopkScanLean; the same summary as topk_scan's, bit for bit): the same two
// steps per 16 logits with fewer instructions (ncu at ff9b4e0: ~750 per warp and 2048-logit
// step, ~300 of them the exps; the 4-row SMs issue ~70% of their cycles, so they count):
//   - loads without bounds checks in full steps (one pointer, four 16-byte loads);
//   - the sums' power-of-two reference moves only when the thread's max passes the last
//     reference's by kTopkRefHeadroom (terms up to e^65 of 2^mk: no overflow), not at every
//     new max (61% of warp-steps took that branch): the running max is one fmaxf, and the
//     summary rescales to the reference topk_scan would have reached (exact: powers of two);
//   - the 2^-mk of every term folded into the exp's rounding constant (one integer op fewer);
//   - candidates: a threshold test only, no largest-dropped-logit upkeep (two ops per logit):
//     after a compaction to the bound b the test takes logits above b - delta, delta ~2^-16 of
//     the logp scale (128 float32 ulps of it), so every logit a test drops has a log-probability
//     below the K-th's and the largest threshold bounds them all for the re-read decision; when
//     the bound did not rise (exact ties at the cut) delta is 0 and a tie re-reads as before;
//   - appends: one shared atomic per lane with candidates (no warp scan), set bits walked
//     from the top, the buffer static (TopkShared<Threads, true>: both stores from one
//     address), the stores predicated;
//   - compactions: block_select_bound_lean (one pass and two barriers a round) and a keep that
//     knows at most K + slop - 1 stay (no barrier past those chunks).
constexpr float kTopkRefHeadroom = 64.0f;
constexpr float kTopkFastMaxBelow = 0x1.fffffep+11f;  // the largest float below kTopkFastMaxAbs
static_assert(kTopkFastMaxBelow < kTopkFastMaxAbs, "a max of kTopkFastMaxAbs leaves the fast range");
// delta = (thread max - bound + kTopkLseAbove) * kTopkMarginScale: lse - bound is at most the row's
// max - bound plus ln V (<= ln 2^30 < 21), and a float32 ulp is 2^-23 of its value.
constexpr float kTopkLseAbove = 24.0f;
constexpr float kTopkMarginScale = 0x1p-16f;

template <bool Vec4, int Threads, bool L>
KD_DEVICE TopkSummary topk_scan_lean(TopkShared<Threads, L>& s, uint32_t* keys, uint32_t* rids, const float* x, int V, int K,
                                     int slop) {
  constexpr int kChunk = kTopkPerThread * Threads;
  const int capacity = topk_lean_capacity(K);
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarpSize;
  const TopkExpTable table(s.exp_table, (lane % kTopkTableCopies) * static_cast<int>(sizeof(FloatPair)));  // this lane's copy
  if (tid == 0) {
    s.count = 0;
    s.drop_key = 0;
  }
  __syncthreads();

  float m = -INFINITY;         // running max of this thread's logits
  float rise_at = -INFINITY;   // a step max above it moves the sums' reference (rare)
  FloatPair sum[kTopkVecs] = {};  // sums of e^x 2^-mk (fast range)
  int mk = 0;
  float round = exp_pair_round(0);  // folds the 2^-mk into the exp
  bool fast = false, had_fast = false;
  float m_fast = -INFINITY;    // the running max when the fast range was left (topk_scan's last mk)
  float lo = -INFINITY;
  FloatPair slow{};
  float slow_ref = -INFINITY;
  float thr = NAN;             // the test: a logit above it is a candidate (NaN: every logit)
  float thr_drop = -INFINITY;  // every logit a test left out is <= it
  float bound_prev = -INFINITY;
  bool dropped = false;
  const int steps = ceil_div(V, kChunk);
  // element k of this thread's 16 in a step is at step * kChunk + ibase + k_offset(k)
  const int ibase = Vec4 ? tid * 4 : tid;
  // Vec4: (k / 4) * 4 Threads + k % 4 = (k (Threads + 1)) & (12 Threads + 3) for k < 16 (Threads a
  // power of two >= 16: the two parts of k (Threads + 1) do not overlap): two ops, not four
  static_assert((Threads & (Threads - 1)) == 0 && Threads >= kTopkPerThread, "k_offset's form");
  auto k_offset = [](unsigned k) {
    return static_cast<int>(Vec4 ? (k * (Threads + 1u)) & (12u * Threads + 3u) : k * Threads);
  };
  auto load_full = [&](int step, float (&v)[kTopkPerThread]) {
    if constexpr (Vec4) {
      const float4* p = reinterpret_cast<const float4*>(x + static_cast<int64_t>(step) * kChunk) + tid;
#pragma unroll
      for (int u = 0; u < kTopkVecs; ++u) {
        const float4 f = load_streaming(p + u * Threads);
        v[4 * u] = f.x;
        v[4 * u + 1] = f.y;
        v[4 * u + 2] = f.z;
        v[4 * u + 3] = f.w;
      }
    } else {
      const float* p = x + static_cast<int64_t>(step) * kChunk + ibase;
#pragma unroll
      for (int k = 0; k < kTopkPerThread; ++k) v[k] = p[k_offset(k)];
    }
  };
  auto load_tail = [&](int step, float (&v)[kTopkPerThread]) {  // the row's last, partial step
    // opaque: else nvcc forms this address for both step copies at the top of every step
    const int first = opaque_int(step * kChunk + ibase);
#pragma unroll
    for (int k = 0; k < kTopkPerThread; ++k) {
      const int i = first + k_offset(k);
      v[k] = i < V ? x[i] : -INFINITY;  // Vec4: V % 4 == 0, a float4 is all in or all out
    }
  };
  // Append this thread's logits flagged in `pass`; returns those that did not fit.
  auto append = [&](unsigned pass, int step, const float (&v)[kTopkPerThread]) {
    unsigned left = 0;
    if (pass != 0) {
      int slot = atomicAdd(&s.count, __popc(pass));
      const uint32_t nbase = ~static_cast<uint32_t>(step * kChunk + ibase);  // ~index = nbase - offset
      unsigned bits = pass;
      do {  // from the highest set bit: one FLO per bit; the stores predicated, not branched over
        const unsigned k = 31u - static_cast<unsigned>(__clz(static_cast<int>(bits)));
        bits ^= 1u << k;
        const uint32_t u = __float_as_uint(topk_pick(v, static_cast<int>(k)));
        const uint32_t key = u ^ (static_cast<uint32_t>(static_cast<int32_t>(u) >> 31) | 0x80000000u);  // float_to_ordered
        const uint32_t rid = nbase - static_cast<uint32_t>(k_offset(k));
        // opaque: nvcc would move the pick into a branch around the stores; this way only the
        // stores are predicated
        const uint32_t key_o = static_cast<uint32_t>(opaque_int(static_cast<int>(key)));
        const uint32_t rid_o = static_cast<uint32_t>(opaque_int(static_cast<int>(rid)));
        const bool fits = slot < capacity;
        if (fits) {
          keys[slot] = key_o;
          rids[slot] = rid_o;
        }
        left |= fits ? 0u : 1u << k;
        ++slot;
      } while (bits != 0);
    }
    return left;
  };

  // One step: the 16 logits in v (the next step's loads go to nx); returns the candidates that
  // did not fit in the buffer.
  auto step_fn = [&](int step, float (&v)[kTopkPerThread], float (&nx)[kTopkPerThread]) {
    if ((step + 2) * kChunk <= V) load_full(step + 1, nx);  // in flight while this step computes
    else if (step + 1 < steps) load_tail(step + 1, nx);

    float vmax = v[0];
#pragma unroll
    for (int k = 1; k < kTopkPerThread; ++k) vmax = fmaxf(vmax, v[k]);
    if (vmax > rise_at) {  // rare after the first step; then vmax > m
      if (fabsf(vmax) < kTopkFastMaxAbs) {
        const int mk_new = topk_ref_exponent(vmax);
        if (had_fast) {
          const float f = pow2_nonpositive_f32(mk - mk_new);
#pragma unroll
          for (int u = 0; u < kTopkVecs; ++u) sum[u] = pair_scale(sum[u], f);
        }
        mk = mk_new;
        round = exp_pair_round(mk);
        had_fast = true;
        fast = true;
        lo = vmax - kTopkClampBelowMax;
        rise_at = fminf(vmax + kTopkRefHeadroom, kTopkFastMaxBelow);
      } else {
        if (fast) m_fast = m;  // leaving the fast range: its last max sets topk_scan's mk
        fast = false;
        slow = pair_mul(slow, topk_exp_diff(slow_ref, vmax, table));
        slow_ref = vmax;
        rise_at = vmax;  // the slow sum is relative to the max itself
      }
    }
    m = fmaxf(m, vmax);
    if (fast) {
#pragma unroll
      for (int k = 0; k < kTopkPerThread; ++k)
        sum[k / 4] = pair_add(sum[k / 4], exp_pair_scaled<false>(fmaxf(v[k], lo), 0.0f, round, table));
    } else if (m > -INFINITY) {
#pragma unroll
      for (int k = 0; k < kTopkPerThread; ++k) slow = pair_add(slow, topk_exp_diff(v[k], m, table));
    }

    // candidates: one test per 16 logits decides whether any of them passes
    unsigned left = 0;
    if (__any_sync(kFullMask, !(vmax <= thr))) {
      unsigned pass = 0;
#pragma unroll
      for (int k = 0; k < kTopkPerThread; ++k) pass |= static_cast<unsigned>(!(v[k] <= thr)) << k;
      if ((step + 1) * kChunk > V) {  // logits past the row (-inf) pass only while thr is NaN
#pragma unroll
        for (int k = 0; k < kTopkPerThread; ++k)
          if (step * kChunk + ibase + k_offset(k) >= V) pass &= ~(1u << k);
      }
      KD_EVENT("topk_pass", step, __popc(pass));
      left = append(pass, step, v);
    }
    return left;
  };
  // After a compaction: those of `left` above the new threshold, appended again.
  auto retest = [&](int step, const float (&v)[kTopkPerThread], unsigned left) {
    unsigned pass = 0;
#pragma unroll
    for (int k = 0; k < kTopkPerThread; ++k)
      if (((left >> k) & 1u) && v[k] > thr) pass |= 1u << k;
    return __any_sync(kFullMask, pass != 0) ? append(pass, step, v) : 0u;
  };

  TOPK_CLK_BEGIN(clk_scan);
  KD_PHASE("topk scan");
  // two register sets take turns (this step's logits, the next step's loads): the step is
  // written out for each, so no copies between steps
  float va[kTopkPerThread], vb[kTopkPerThread];
  if (kChunk <= V) load_full(0, va);
  else load_tail(0, va);
  for (int step = 0; step < steps; ++step) {
    const bool odd = step % 2 != 0;
    unsigned left = odd ? step_fn(step, vb, va) : step_fn(step, va, vb);
    while (__syncthreads_or(left != 0)) {  // the buffer is full: keep the K largest
      TOPK_CLK_BEGIN(clk_compact);
      KD_PHASE("topk compact");
      // a bound with K..K+slop-1 values >= it (its key a float >= -inf, never a NaN): 2 barriers a
      // round (exact compactions, slop 0: the adaptive select)
      const uint64_t floor = static_cast<uint64_t>(float_to_ordered(-INFINITY)) << 32;
      const uint64_t kth = slop > 0 ? block_select_bound_lean(keys, rids, capacity, K, s.select_lean, slop, floor)
                                    : block_select_kth_largest(keys, rids, capacity, K, s.select, slop, floor);
      topk_keep_if<true>(s, keys, rids, capacity, [kth](uint64_t val) { return val >= kth; }, K + (slop > 0 ? slop : 1) - 1);
      // the new test: below the bound by the margin when the bound rose (block-uniform), never
      // below the last test (both are <= the K-th of the logits so far)
      const float bound = ordered_to_float(static_cast<uint32_t>(kth >> 32));
      float t = bound;
      if (bound > bound_prev) t = bound - (fmaxf(m - bound, 0.0f) + kTopkLseAbove) * kTopkMarginScale;
      bound_prev = fmaxf(bound_prev, bound);
      thr = thr >= t ? thr : t;  // NaN (no test yet) takes t
      thr_drop = fmaxf(thr_drop, thr);
      dropped = true;
      KD_EVENT("topk_compact", step, 0);
      left = odd ? retest(step, vb, left) : retest(step, va, left);
      KD_PHASE("topk scan");
      TOPK_CLK_END(clk_compact, 2);
      TOPK_CLK_COUNT(3);
    }
  }
  TOPK_CLK_END(clk_scan, 1);

  TOPK_CLK_BEGIN(clk_summary);
  KD_PHASE("topk summary");
  // the summary, as topk_scan forms it (same bits): its threads' mk is floor(max / ln2) of their
  // last max in the fast range, and these sums are at mk <= that, so powers of two take them to
  // the block's. One barrier: each warp reduces its part, then every warp combines all parts in
  // the order block_sum adds them (its warp 0's butterfly over one value per warp).
  constexpr int kWarps = Threads / kWarpSize;
  const int warp = tid / kWarpSize;
  const float mk_scan = had_fast ? static_cast<float>(topk_ref_exponent(fast ? m : m_fast)) : -INFINITY;
  const float warp_mk = warp_max(mk_scan);  // |mk| < 2^13: exact as a float
  FloatPair fsum{};
  if (had_fast) {
#pragma unroll
    for (int u = 0; u < kTopkVecs; ++u) fsum = pair_add(fsum, sum[u]);
    fsum = pair_scale(fsum, pow2_nonpositive_f32(mk - static_cast<int>(warp_mk)));
  }
  fsum = warp_sum(fsum);
  const float warp_pmax = warp_max(m);
  const float warp_drop = warp_max(dropped ? thr_drop : -INFINITY);
  const bool warp_slow = __any_sync(kFullMask, slow_ref > -INFINITY);
  if (lane == 0) s.warp_summary[warp] = TopkWarpSummary{fsum, warp_pmax, warp_mk, warp_drop, warp_slow};
  __syncthreads();
  TopkSummary pc;
  pc.pmax = -INFINITY;
  float top_mk = -INFINITY, drop_max = -INFINITY;
  bool any_slow = false;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const TopkWarpSummary& ws = s.warp_summary[w];
    pc.pmax = fmaxf(pc.pmax, ws.pmax);
    top_mk = fmaxf(top_mk, ws.mk);
    drop_max = fmaxf(drop_max, ws.drop_max);
    any_slow = any_slow || ws.has_slow;
  }
  pc.has_fast = top_mk > -INFINITY;
  pc.mk = pc.has_fast ? static_cast<int>(top_mk) : 0;
  FloatPair part{};
  if (lane < kWarps) {
    const TopkWarpSummary& ws = s.warp_summary[lane];
    if (ws.mk > -INFINITY) part = pair_scale(ws.fsum, pow2_nonpositive_f32(static_cast<int>(ws.mk) - pc.mk));
  }
  pc.fsum = warp_sum(part);
  pc.slow = FloatPair{};
  if (any_slow) {  // block-uniform; rows with a logit of magnitude >= kTopkFastMaxAbs
    FloatPair slow_part{};
    if (slow_ref > -INFINITY) slow_part = pair_mul(slow, topk_exp_diff(slow_ref, pc.pmax, table));
    pc.slow = block_sum(slow_part, s.dsum);
  }
  if (s.drop_key != 0) drop_max = fmaxf(drop_max, ordered_to_float(s.drop_key));
  pc.drop_max = drop_max;
  pc.n = s.count;
  pc.dropped = dropped;
  TOPK_CLK_END(clk_summary, 4);
  return pc;
}

// The row's lse (a pair, rounded as float64 holds it) from the scan's summary: e^(mk ln2 - max)
// times the fast sum, plus the slow one (already relative to the max). The factor is e^(-max) 2^mk from the exp's own
// reduction (exact for |max| < kExpPairMaxAbs); 0 where the max is more than
// kTopkClampBelowMax above 2^mk (the fast sum, at most V times 2, then vanishes).
template <class Table>
KD_DEVICE FloatPair topk_lse(const TopkSummary& pc, const Table& table) {
  const float row_max = pc.pmax;
  FloatPair total = pc.slow;
  if (pc.has_fast && row_max - static_cast<float>(pc.mk) * kTopkLn2 < kTopkClampBelowMax)
    total = pair_add(pair_mul(pc.fsum, exp_pair_scaled<false>(-row_max, 0.0f, exp_pair_round(-pc.mk), table)), total);
  const FloatPair log_total = pair_log(total, table);
  const FloatPair s = two_sum(row_max, log_total.hi);
  return pair_round_to_double(fast_two_sum(s.hi, __fadd_rn(s.lo, log_total.lo)));
}

// Steps 2-4 for row `row` (logits at x) once its n >= K candidates (ordered logits, ~ids) are
// in keys/rids and its lse is known; drop_max / dropped: the largest logit left out of them and
// whether any was. slop > 0 and many candidates: they are first cut to fewer than K + slop by
// a bound (1-2 select rounds over all n), so the exact select's ~4-5 rounds pass over those only.
// Lean: the lean selects (2 barriers a round) and keeps that know how many they keep.
template <int Threads, bool Lean>
KD_DEVICE void topk_finish(const TopkLogprobsParams& p, TopkShared<Threads, Lean>& s, uint32_t* buf, int rid_stride,
                           const float* x, int row, int n, FloatPair lse, float drop_max, bool dropped, int slop) {
  constexpr int kWarps = Threads / kWarpSize;
  const int K = p.k, V = p.vocab;
  uint32_t* keys = buf;
  uint32_t* rids = buf + rid_stride;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarpSize, warp = tid / kWarpSize;
  // 2. the candidates' log-probabilities, the K-th by (logp, lower id first)
  TOPK_CLK_BEGIN(clk_select);
  KD_PHASE("topk finish");
  for (int i = tid; i < n; i += Threads) keys[i] = float_to_ordered(logp_of(ordered_to_float(keys[i]), lse));
  __syncthreads();
  if (slop > 0 && n >= kTopkCutFactor * (K + slop)) {  // block-uniform
    // those below the bound rank below the K-th by (logp, id): never winners; the re-read
    // below keeps only logps above the K-th's and gathers the K-th's group from the row
    const uint64_t bound = Lean ? block_select_bound_lean(keys, rids, n, K, s.select_lean, slop)
                                : block_select_kth_largest(keys, rids, n, K, s.select, slop);
    topk_keep_if(s, keys, rids, n, [bound](uint64_t val) { return val >= bound; }, Lean ? K + slop - 1 : -1);
    n = s.count;
  }
  const uint64_t kth = Lean ? block_select_kth_largest_lean(keys, rids, n, K, s.select_lean)
                            : block_select_kth_largest(keys, rids, n, K, s.select);
  const uint32_t kth_logp = static_cast<uint32_t>(kth >> 32);

  // 3. could a dropped logit share the K-th's logp? The largest one tells (dropped logits
  // are all <= thr, but after a late compaction thr can still be the row's K-th: bounding by
  // thr sent ~1% of random rows to the re-read)
  TOPK_CLK_END(clk_select, 5);
  TOPK_CLK_BEGIN(clk_keep);
  const bool reread = dropped && float_to_ordered(logp_of(drop_max, lse)) >= kth_logp;
  KD_EVENT("topk_reread", reread, n);
  if (!reread) {
    topk_keep_if(s, keys, rids, n, [kth](uint64_t val) { return val >= kth; }, Lean ? K : -1);
  } else {
    // keep everything above the K-th's logp, then take its group's lowest ids from the row
    topk_keep_if(s, keys, rids, n, [kth_logp](uint64_t val) { return static_cast<uint32_t>(val >> 32) > kth_logp; },
                 Lean ? K : -1);
    const int above = s.count;
    const int need = K - above;
    // The row in chunks of kTopkRereadPer x Threads logits, element j of a thread at
    // base + j * Threads + tid (coalesced; the next chunk's loads in flight). A tie's rank in
    // id order is the ties of the chunk's earlier j, plus those of earlier threads at the same
    // j (one block scan of the four 16-bit counts packed in 64 bits), plus the earlier chunks'.
    constexpr int kStride = kTopkRereadPer * Threads;
    auto load_r = [&](int base, float (&v)[kTopkRereadPer]) {
#pragma unroll
      for (int j = 0; j < kTopkRereadPer; ++j) {
        const int i = base + j * Threads + tid;
        v[j] = i < V ? x[i] : -INFINITY;
      }
    };
    float nxt[kTopkRereadPer];
    load_r(0, nxt);
    int seen = 0;  // tied logits met so far (block-uniform)
    for (int base = 0; base < V && seen < need; base += kStride) {
      float v[kTopkRereadPer];
#pragma unroll
      for (int j = 0; j < kTopkRereadPer; ++j) v[j] = nxt[j];
      if (base + kStride < V) load_r(base + kStride, nxt);
      uint64_t packed = 0;  // 16 bits per j: this thread's tie (0 or 1)
      bool eq[kTopkRereadPer];
#pragma unroll
      for (int j = 0; j < kTopkRereadPer; ++j) {
        eq[j] = base + j * Threads + tid < V && float_to_ordered(logp_of(v[j], lse)) == kth_logp;
        packed |= static_cast<uint64_t>(eq[j]) << (16 * j);
      }
      const uint64_t incl = warp_inclusive_sum(packed);
      if (lane == kWarpSize - 1) s.eq_warp[warp] = incl;
      __syncthreads();
      uint64_t before = incl - packed, chunk = 0;
      for (int w = 0; w < kWarps; ++w) {
        if (w < warp) before += s.eq_warp[w];
        chunk += s.eq_warp[w];
      }
      int earlier = seen;  // ties at smaller j in this chunk, and in earlier chunks
#pragma unroll
      for (int j = 0; j < kTopkRereadPer; ++j) {
        const int rank = earlier + static_cast<int>((before >> (16 * j)) & 0xffffu);
        if (eq[j] && rank < need) {
          keys[above + rank] = kth_logp;
          rids[above + rank] = ~static_cast<uint32_t>(base + j * Threads + tid);
        }
        earlier += static_cast<int>((chunk >> (16 * j)) & 0xffffu);
      }
      seen = earlier;
      __syncthreads();  // eq_warp is rewritten by the next chunk
    }
  }

  TOPK_CLK_END(clk_keep, 6);
  TOPK_CLK_BEGIN(clk_sort);
  KD_PHASE("topk sort");
  // 4. sort the K winners (ascending ~(logp, rid) = the wanted order) at the buffer's start:
  // read them into registers first, as the sort keys overwrite them
  constexpr int kWinnersPerThread = ceil_div(kTreeMaxNodes, Threads);
  uint64_t mine_w[kWinnersPerThread];
#pragma unroll
  for (int j = 0; j < kWinnersPerThread; ++j) {
    const int i = j * Threads + tid;
    mine_w[j] = i < K ? ~((static_cast<uint64_t>(keys[i]) << 32) | rids[i]) : ~uint64_t{0};
  }
  __syncthreads();
  uint64_t* order = reinterpret_cast<uint64_t*>(buf);
  const int sort_n = block_sort_length(K);
#pragma unroll
  for (int j = 0; j < kWinnersPerThread; ++j) {
    const int i = j * Threads + tid;
    if (i < sort_n) order[i] = mine_w[j];
  }
  __syncthreads();
  block_sort_ascending(order, sort_n);
  const int64_t out0 = static_cast<int64_t>(row) * K;
  for (int i = tid; i < K; i += Threads) {
    const uint64_t v = ~order[i];
    p.logp[out0 + i] = ordered_to_float(static_cast<uint32_t>(v >> 32));
    p.tok[out0 + i] = static_cast<int32_t>(~static_cast<uint32_t>(v));
    if (p.raw) p.raw[out0 + i] = x[~static_cast<uint32_t>(v)];
  }
  if (p.lse && tid == 0) {
    p.lse[2 * row] = lse.hi;
    p.lse[2 * row + 1] = lse.lo;
  }
  TOPK_CLK_END(clk_sort, 7);
}


// Lean: the scan topk_scan_lean (fewer instructions per step), else topk_scan (TopkVariant).
template <bool Vec4, int Threads, bool Lean>
__global__ void __launch_bounds__(Threads, kTopkThreadsPerSM / Threads) topk_logprobs_kernel(const TopkLogprobsParams p,
                                                                                             const TopkOptions opt) {
  static_assert(Threads >= kTopkMinThreads && Threads <= kTopkMaxThreads && Threads % kWarpSize == 0, "block size");
  __shared__ TopkShared<Threads, Lean> s;
  const int K = p.k, V = p.vocab;
  // the candidates: keys = ordered bits of the logit (from step 2: of its logp), rids = ~token
  // id at rid_stride after them ((key, rid) descending puts lower ids first)
  uint32_t* buf;
  int rid_stride;
  if constexpr (Lean) {
    buf = s.buf;
    rid_stride = kTopkStaticStride;
  } else {
    KD_DYNAMIC_SMEM(uint32_t, dyn);
    buf = dyn;
    rid_stride = topk_capacity(K);
  }
  uint32_t* keys = buf;
  uint32_t* rids = buf + rid_stride;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarpSize;

  TOPK_CLK_BEGIN(clk_total);
  for (int i = tid; i < kExpPairTableSize * kTopkTableCopies; i += Threads) s.exp_table[i] = kExp2PairTable[i / kTopkTableCopies];
  if constexpr (Lean) {  // the lean selects' invariant (published by the scan's first barrier)
    for (int i = tid; i < 2 * kSelectBins; i += Threads) s.select_lean.hist[i / kSelectBins][i % kSelectBins] = 0;
    if (tid == 0) s.select_lean.found = ~uint64_t{0};
  }
  TOPK_CLK_END(clk_total, 0);
  const int row = static_cast<int>(blockIdx.x);
  const float* x = p.logits + static_cast<int64_t>(row) * V;
  TopkSummary pc;
  if constexpr (Lean) pc = topk_scan_lean<Vec4, Threads>(s, keys, rids, x, V, K, opt.compact_slop);
  else pc = topk_scan<Vec4, Threads>(s, keys, rids, x, V, K, opt.compact_slop);
  const FloatPair lse = topk_lse(pc, TopkExpTable(s.exp_table, (lane % kTopkTableCopies) * static_cast<int>(sizeof(FloatPair))));
  topk_finish<Threads, Lean>(p, s, buf, rid_stride, x, row, pc.n, lse, pc.drop_max, pc.dropped, opt.compact_slop);
  TOPK_CLK_END(clk_total, 8);
  TOPK_CLK_REPORT();
}

}  // namespace kdtree::kern
