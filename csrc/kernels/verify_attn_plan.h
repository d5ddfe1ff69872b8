// How a verify_attn launch is divided: tile configuration, split-KV count, workspace. A pure
// function of the sizes and two device properties, so the launcher and the CPU-emulated
// tests compute the same plan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <limits>
#include <string>

#include "verify_attn.cuh"
#include "verify_attn_configs.h"

namespace kdtree {

// The tile configurations, by plan.config: those a plan picks (verify_attn_configs.h lists them,
// with what each one is) and the baselines (csrc/dev/verify_attn_baselines.h), which only a
// force_config reaches. Numbers no configuration holds any more stay unused.
enum VerifyAttnConfig : int {
#define KD_VERIFY_CONFIG_ENUM(config, number, ...) config = number,
  KD_VERIFY_ATTN_ALL_CONFIGS(KD_VERIFY_CONFIG_ENUM)
#undef KD_VERIFY_CONFIG_ENUM
  kVerifyConfigCount = 15,  // one past the largest number
};

// The sm_90 decode tiles (decode and narrow decode, configs 3 and 11) take their key tiles by
// bulk copies into rows padded by kBulkRowPad bytes (verify_attn_decode.cuh)
constexpr size_t kBulkRowPad = 16;  // one 16-byte chunk: row r starts r chunks past bank 0 mod 8

struct VerifyConfigShape {
  int tile_rows, tile_keys;
  size_t smem_bytes;
};
// The shape of a configuration ({0, 0, 0}: no such configuration); the kernel headers
// static_assert that their tiles match.
constexpr VerifyConfigShape verify_attn_config_shape(int config) {
  switch (config) {
#define KD_VERIFY_CONFIG_SHAPE(config, number, rows, keys, smem, ...) \
  case config:                                                        \
    return {rows, keys, smem};
    KD_VERIFY_ATTN_ALL_CONFIGS(KD_VERIFY_CONFIG_SHAPE)
#undef KD_VERIFY_CONFIG_SHAPE
    default:
      return {0, 0, 0};
  }
}
constexpr bool verify_config_exists(int config) { return verify_attn_config_shape(config).tile_rows > 0; }
// Whether a kernel's configuration struct has the shape the list gives `config`
template <class Cfg>
constexpr bool verify_config_describes(int config) {
  const VerifyConfigShape s = verify_attn_config_shape(config);
  return Cfg::kSmemBytes == s.smem_bytes && Cfg::kTileRows == s.tile_rows && Cfg::kTileKeys == s.tile_keys;
}
// Every configuration, the baselines last, in the lists' order
inline constexpr int kVerifyConfigs[] = {
#define KD_VERIFY_CONFIG_NUMBER(config, ...) config,
    KD_VERIFY_ATTN_ALL_CONFIGS(KD_VERIFY_CONFIG_NUMBER)
#undef KD_VERIFY_CONFIG_NUMBER
};
inline bool verify_config_is_wgmma(int config) {
  return config == kVerifyBf16WgmmaSeesaw || config == kVerifyBf16WgmmaSeesawPairs;
}
inline bool verify_config_is_f32(int config) { return config == kVerifyF32 || config == kVerifyF32Narrow; }
inline bool verify_config_is_decode(int config) {
  return config == kVerifyBf16Decode || config == kVerifyBf16DecodeSmall || config == kVerifyBf16DecodeNarrow ||
         config == kVerifyBf16DecodeNarrowPair;
}
// Query rows (T * H) up to which the decode kernels run: one CTA's two m16 row groups. Such
// shapes are memory-bound: the 64-row tile would spend 2-4x the MMAs on empty rows.
constexpr int kVerifyDecodeMaxRows = 32;
// ... and up to which the narrow one does (one row group): at 16 rows the two-group tile spent
// half its S and P V work and its query reads on empty rows (H200, H=8 n=1 32k, phase clocks:
// S 4.2 K cycles of a 64-key tile's 8.8 K, its shared-memory reads of Q the bound)
constexpr int kVerifyDecodeNarrowRows = 16;
// The most query rows a configuration takes (the others tile any number of rows). The narrow
// decode tile's two-stage form (config 12) tiles any rows in row tiles of 16: it is the bf16 tile
// of ~100 KB devices (sm_120) at every shape.
inline int verify_config_max_rows(int config) {
  return config == kVerifyBf16DecodeNarrowPair ? std::numeric_limits<int>::max()
         : config == kVerifyBf16DecodeNarrow   ? kVerifyDecodeNarrowRows
         : verify_config_is_decode(config)     ? kVerifyDecodeMaxRows
                                               : std::numeric_limits<int>::max();
}

// Why a device with these limits cannot run `config` ("" when it can): the plan never picks
// such a configuration, and a forced one is refused; tests skip it saying this.
inline std::string verify_config_unavailable(int config, int smem_optin, bool wgmma) {
  if (!verify_config_exists(config)) return "no configuration " + std::to_string(config);
  if (verify_config_is_wgmma(config) && !wgmma) return "config " + std::to_string(config) + " needs wgmma (sm_90a)";
  const size_t need = verify_attn_config_shape(config).smem_bytes;
  if (static_cast<size_t>(smem_optin) < need)
    return "config " + std::to_string(config) + " needs " + std::to_string(need) + " bytes of shared memory a block, the device allows " +
           std::to_string(smem_optin);
  return "";
}

// Shortest split: two 32-key float32 tiles. The cost model below (+3 tiles per split) already
// weighs a split's fixed costs; a larger floor left short prefixes (the prefill of a chat, a
// small model's verify: 5 CTAs on 132 SMs at 256 keys, measured 59 us) on one split.
constexpr int kVerifyMinSplitKeys = 64;
constexpr int kVerifyF32MaxSplitKeys = 4096; // keeps float32 running sums short (accuracy)
constexpr int kVerifyMaxSplits = 65535;      // grid.y

// The narrow decode tile's (config 11) splits from which its two-a-SM form (config 12: one
// block's wait for its tile overlaps the other's work; twice the splits, each half as long)
// replaces it. On the H200 it won at 1024-key splits and lost at <= 256, where the doubled
// partials and merge cost more (docs/kernels/verify_attn.md); 512 was not measured.
constexpr int kVerifyDecodePairMinSplitKeys = 1024;

// The seesaw pairs (config 14, a baseline) reduce the seesaw tile's splits in pairs on chip (a
// cluster of two CTAs along the keys, the partial O exchanged through distributed shared memory)
// before they write partials: half the partial bytes written and merged. No plan picks them: on
// the H200 they saved under a microsecond where the partials cost most (H=64 n=1 32k) and lost
// a wave elsewhere (docs/kernels/verify_attn.md, appendix).
constexpr int kVerifySeesawSplitGroup = 2;

// Waves of CTAs the split search considers at most: its cost model charges every wave a fixed
// cost (query load, tree tail, epilogue), so it picks a second wave only when the first is
// badly filled and never gains from a third; the cap makes the split count bounded
// independently of the prefix (VerifyAttnPlan::split_bound).
constexpr int kVerifyMaxSplitWaves = 2;

// The seesaw tile's (config 10) second wave: the split search below weighs a wave's fixed cost
// as 3 key tiles (the query load, the tree tail, the epilogue), which took two waves where one
// measured faster on the H200 (at 17 row tiles, H=64 n=16 or H=16 n=64, one wave of 7 splits
// against the search's two of 15 at 32k). So a two-wave choice of the seesaw tile is weighed
// again against the fullest single wave, each wave charged this many tiles; 8 puts the
// crossover of those shapes at ~54k keys, between the measured 32k and 64k, and at every shape
// of a plan sweep (H 8-64, n 8-64, batch 1-4) where it moves the split count the single wave
// measured faster (docs/kernels/verify_attn.md).
constexpr double kVerifySecondWaveTiles = 8;

// Bytes of partials (normalised O rows, then lse at a 256-byte boundary) for `parts` a row.
inline size_t verify_workspace_for(int batch, int parts, int rows) {
  if (parts <= 1) return 0;
  const size_t all = static_cast<size_t>(batch) * parts * rows;
  const size_t o_bytes = all * kVerifyLatentDim * sizeof(float);
  return ((o_bytes + 255) / 256) * 256 + all * sizeof(float);
}

// num_sms and smem_optin (largest dynamic shared memory per block) describe the device;
// wgmma: it runs sm_90a code (compute capability 9.0), so the wgmma tile is available.
inline KernelResult make_verify_attn_plan(const VerifyAttnParams& p, int num_sms, int smem_optin, int smem_per_sm,
                                          VerifyAttnPlan* plan, bool wgmma = false) {
  if (KernelResult r = check_verify_attn_params(p); !r.ok()) return r;
  VerifyAttnPlan pl;
  const int rows = p.tree_len * p.heads;
  auto fits = [&](int config) { return static_cast<size_t>(smem_optin) >= verify_attn_config_shape(config).smem_bytes; };
  if (p.dtype == AttnDType::kBF16) {
    // > 32 rows: the seesaw tile where there is wgmma (sm_90a); <= 32 the decode tiles, the
    // narrow one up to 16 rows
    const bool decode = rows <= kVerifyDecodeMaxRows;
    const int big = !decode ? (wgmma ? kVerifyBf16WgmmaSeesaw : -1)
                    : rows <= kVerifyDecodeNarrowRows && fits(kVerifyBf16DecodeNarrow) ? kVerifyBf16DecodeNarrow
                                                                                        : kVerifyBf16Decode;
    // Else (~100 KB a block: sm_120; no wgmma) config 12 at every shape: the largest tile with
    // two stages of key tiles in flight (bulk copies on mbarriers, 16 rows x 32 keys, 94,752 B,
    // one block a SM there). Below its size no tile is planned (no device the library builds for).
    if (big >= 0 && fits(big)) pl.config = big;
    else if (fits(kVerifyBf16DecodeNarrowPair)) pl.config = kVerifyBf16DecodeNarrowPair;
    else
      return KernelResult::over_limit("verify_attn: the device allows " + std::to_string(smem_optin) +
                                      " bytes of shared memory per block; the smallest bf16 tile needs " +
                                      std::to_string(verify_attn_config_shape(kVerifyBf16DecodeNarrowPair).smem_bytes));
  } else {
    // 16 rows where they fit, else 8 (the same arithmetic a row: the same outputs)
    pl.config = fits(kVerifyF32) ? kVerifyF32 : kVerifyF32Narrow;
    if (!fits(pl.config))
      return KernelResult::over_limit("verify_attn: the device allows " + std::to_string(smem_optin) +
                                      " bytes of shared memory per block; the smallest float32 tile needs " +
                                      std::to_string(verify_attn_config_shape(kVerifyF32Narrow).smem_bytes));
  }
  if (p.force_config >= 0) {
    const bool bf16_cfg = !verify_config_is_f32(p.force_config);
    const std::string unavailable = verify_config_unavailable(p.force_config, smem_optin, wgmma);
    if (!unavailable.empty())
      return KernelResult::invalid("verify_attn: force_config " + std::to_string(p.force_config) + ": " + unavailable);
    if (bf16_cfg != (p.dtype == AttnDType::kBF16) || rows > verify_config_max_rows(p.force_config))
      return KernelResult::invalid("verify_attn: force_config " + std::to_string(p.force_config) +
                                   " does not fit this dtype or shape");
    pl.config = p.force_config;
  }
  const VerifyConfigShape shape = verify_attn_config_shape(pl.config);
  pl.tile_rows = shape.tile_rows;
  pl.tile_keys = shape.tile_keys;
  pl.smem_bytes = shape.smem_bytes;
  pl.m_tiles = (rows + pl.tile_rows - 1) / pl.tile_rows;
  const int64_t base = static_cast<int64_t>(pl.m_tiles) * p.batch;  // CTAs per split
  auto slots_of = [&](int config) {  // CTAs of a configuration resident at once
    const int64_t per_sm = smem_per_sm / static_cast<int64_t>(verify_attn_config_shape(config).smem_bytes + 1024);
    return static_cast<int64_t>(num_sms > 0 ? num_sms : 1) * std::max<int64_t>(1, per_sm);
  };
  // the splits kVerifyMaxSplitWaves waves of CTAs hold (at least 1)
  auto cap_of = [&](int config) {
    return static_cast<int>(std::min<int64_t>(
        kVerifyMaxSplits, std::max<int64_t>(1, (kVerifyMaxSplitWaves * slots_of(config) + base - 1) / base)));
  };
  const int64_t slots = slots_of(pl.config);
  const int split_cap = cap_of(pl.config);
  // config 11 may give way to 12 (below): the bound must hold 12's splits at any prefix
  const bool pair_may_replace = pl.config == kVerifyBf16DecodeNarrow && p.force_config < 0 && p.force_split_keys <= 0 &&
                                fits(kVerifyBf16DecodeNarrowPair);
  int splits = 1;
  if (p.max_prefix > 0) {
    // the split count with the least estimated time: waves x (key tiles per split + fixed
    // cost of ~3 tiles for the query load, the tree tail and the epilogue)
    const int min_splits = p.dtype == AttnDType::kF32 ? (p.max_prefix + kVerifyF32MaxSplitKeys - 1) / kVerifyF32MaxSplitKeys : 1;
    const int max_splits = std::max(min_splits, std::min({kVerifyMaxSplits, split_cap,
                                                          (p.max_prefix + kVerifyMinSplitKeys - 1) / kVerifyMinSplitKeys}));
    // a split count's waves of CTAs, and its split's key tiles plus a wave's fixed cost
    auto split_waves = [&](int s) { return static_cast<double>((base * s + slots - 1) / slots); };
    auto wave_cost = [&](int s, double fixed) {
      return static_cast<double>((p.max_prefix + s - 1) / s) / pl.tile_keys + fixed;
    };
    double best = 0.0;
    for (int s = min_splits; s <= max_splits; ++s) {
      const double cost = split_waves(s) * wave_cost(s, 3.0);
      if (s == min_splits || cost < best * 0.98) {  // more splits only for a clear gain
        best = cost;
        splits = s;
      }
    }
    // the seesaw tile: two waves only if they beat the fullest single wave (kVerifySecondWaveTiles)
    const int one_wave = static_cast<int>(std::min<int64_t>(max_splits, slots / base));
    if (verify_config_is_wgmma(pl.config) && split_waves(splits) > 1 && one_wave >= min_splits && one_wave < splits &&
        wave_cost(one_wave, kVerifySecondWaveTiles) <= split_waves(splits) * wave_cost(splits, kVerifySecondWaveTiles))
      splits = one_wave;
    // The tree's key tiles all fall on the last split: cut the prefix so that the last
    // split's prefix tiles plus the tree's come to no more than the others' (never longer than
    // cutting the prefix alone), and take one split more when that shortens the longest split
    // without another wave (H=64, n=1, 32k: 65 splits of 8 tiles, the last one the tree
    // alone, instead of 64 of 8 and a 9th on the last; ~4.8 us a tile there on the H200).
    const int prefix_tiles = (p.max_prefix + pl.tile_keys - 1) / pl.tile_keys;
    const int tail_tiles = (p.tree_len + 63) / 64 * (64 / pl.tile_keys);
    const int total = prefix_tiles + tail_tiles;
    const int max_per = p.dtype == AttnDType::kF32 ? kVerifyF32MaxSplitKeys / pl.tile_keys : total;  // float32: short sums
    auto per_of = [&](int s) { return std::min(max_per, (total + s - 1) / s); };  // tiles a split, the tree's included
    auto used_of = [&](int s) { return (total + per_of(s) - 1) / per_of(s); };    // splits that cut makes
    auto waves_of = [&](int s) { return (base * used_of(s) + slots - 1) / slots; };
    if (splits < kVerifyMaxSplits && waves_of(splits + 1) == waves_of(splits) &&
        std::max(per_of(splits + 1), tail_tiles) < std::max(per_of(splits), tail_tiles))
      ++splits;
    pl.split_len = per_of(splits) * pl.tile_keys;
    splits = used_of(splits);
  }
  if (p.force_split_keys > 0 && p.max_prefix > 0) {
    pl.split_len = std::max(pl.tile_keys, (p.force_split_keys + pl.tile_keys - 1) / pl.tile_keys * pl.tile_keys);
    splits = (p.max_prefix + pl.split_len - 1) / pl.split_len;
  }
  if (p.max_prefix == 0) pl.split_len = pl.tile_keys;
  // The seesaw pairs need an even split count: one split more where it is odd (the tree's split
  // then holds the tree alone, the one before it what is left of the prefix, maybe nothing).
  const bool pairs = pl.config == kVerifyBf16WgmmaSeesawPairs;
  if (pairs && splits >= 2 && splits < kVerifyMaxSplits) {
    splits += splits % 2;
    pl.split_group = kVerifySeesawSplitGroup;
  }
  pl.splits = splits;
  if (splits > kVerifyMaxSplits) return KernelResult::over_limit("verify_attn: more than 65535 key splits");
  if (p.batch > 65535) return KernelResult::over_limit("verify_attn: batch over 65535 (grid.z)");
  pl.workspace_bytes = verify_workspace_for(p.batch, verify_plan_parts(pl), rows);
  // The bound over prefixes 0 .. max_prefix: the search stays within split_cap (float32: or its
  // minimum, which grows with the prefix), the tree's tail adds one, and float32's cut at
  // kVerifyF32MaxSplitKeys uses at most (prefix + tree) / that keys, rounded up, plus one.
  if (p.force_split_keys > 0) {
    pl.split_bound = pl.splits;
  } else {
    const int64_t keys = static_cast<int64_t>(p.max_prefix) + p.tree_len;
    const int64_t f32_splits = p.dtype == AttnDType::kF32 ? (keys + kVerifyF32MaxSplitKeys - 1) / kVerifyF32MaxSplitKeys + 1 : 0;
    const int cap = pair_may_replace ? std::max(split_cap, cap_of(kVerifyBf16DecodeNarrowPair)) : split_cap;
    const int pair_extra = pairs ? 1 : 0;  // the pairs' even count
    pl.split_bound = static_cast<int>(std::min<int64_t>(kVerifyMaxSplits, std::max<int64_t>(cap + 1 + pair_extra, f32_splits)));
    pl.split_bound = std::max(pl.split_bound, pl.splits);
  }
  pl.workspace_bound_bytes = verify_workspace_for(p.batch, pl.split_bound, rows);
  if (pair_may_replace && pl.split_len >= kVerifyDecodePairMinSplitKeys) {
    VerifyAttnParams q = p;
    q.force_config = kVerifyBf16DecodeNarrowPair;
    return make_verify_attn_plan(q, num_sms, smem_optin, smem_per_sm, plan, wgmma);  // its bound is the larger
  }
  *plan = pl;
  return KernelResult::success();
}

}  // namespace kdtree
