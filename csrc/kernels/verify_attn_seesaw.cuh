// The seesaw tile (config 10) of the bf16 verify_attn kernel (sm_90a): the wgmma tile with TMA loads, the two
// warpgroups on alternate key tiles ("seesaw", after FlashMLA's decode kernel) so that one's
// softmax runs while the other's MMAs keep the tensor cores busy.
//
// Why: in the lean and TMA wgmma tiles (configs 8, 9) both warpgroups compute S for the same tile (32 keys each), so Q is
// read twice per tile (S sits at the shared-memory read bound, ~1700 clk a tile), and both
// then run their softmax at the same time with the tensor cores idle (~1100 clk a tile).
// Here a pair of tiles A, B (buffers K0, K1) is processed as
//   wg0: S_A = Q K_A^T (all 64 keys: m64n64, Q and K read once)  | wg1: S_B = Q K_B^T
//   wg0: m0 = max(m, rowmax S_A), P_A = exp(S_A - m0),
//        O_L = O_L e^(m - m0) + P_A V_A[:, :256]                  | wg1: waits for m0
//                                                                 | wg1: m1 = max(m0, rowmax S_B), P_B = exp(S_B - m1),
//                                                                 |      O_R = O_R e^(m - m1) + P_B V_B[:, 256:]
//   wg0: O_L = O_L e^(m0 - m1) + P_B V_B[:, :256]                 | wg1: O_R += (P_A e^(m0 - m1)) V_A[:, 256:]
// (wg0 holds O's columns 0..255, wg1 256..511; m the running row maximum, m1 the next one):
// the same online softmax, with the work of one warpgroup's softmax overlapping the other's MMAs.
// The warpgroups meet at three named barriers a pair (m0 ready; m1 and P_B ready; scaled P_A
// ready), not at block barriers. P_A / P_B go to the rope block (columns 512..575) of their own
// key tile, which only that tile's S reads: no shared memory beyond Q and two key tiles.
//
// Loads: each buffer's 9 blocks come in two parts on two mbarriers, each part reloaded for the
// next pair by the warpgroup that reads it last, as soon as it is done with it: K0's blocks 0-3
// (V_A's left half) by wg0 after its P_A V, blocks 4-8 by wg1 after its P_A V; K1's blocks 4-7
// by wg1 after its P_B V, blocks 0-3 and 8 by wg0 after its P_B V. Each S takes the part that
// was reloaded first first (wg0: blocks 0-3, then 4-8; wg1: 4-7, then 0-3, 8), so the second
// part's latency hides behind the first part's MMAs. An odd tile count ends on a dummy tile
// (valid = 0: every key masked, its V rows zeroed).
//
// Pairs (the instance with Pairs = true: config 14, a baseline no plan picks,
// csrc/dev/verify_attn_baselines.h): splits 2p and 2p + 1 of a row tile run as a cluster of two
// (k.split_group 2) and add their O through distributed shared memory before anything is stored
// (seesaw_pair_store), so the partials written and merged are half. Timed on the H200 it gained
// less than a microsecond where the partials cost most and lost a wave elsewhere
// (docs/kernels/verify_attn.md, appendix). The planned instance (config 10) compiles without it.
#pragma once

#include "cluster_support.cuh"
#include "verify_attn_wgmma.cuh"

// The warpgroups' hand-offs: bar.arrive (release: the arriving thread's earlier accesses are
// performed for the barrier's threads when it completes) on one side, bar.sync on the other.
// A diagnostic build (-DKD_SEESAW_SYNC_ONLY) makes every arrive a bar.sync: the same order with
// more waiting, so racecheck on it tells a real race from the tool's view of bar.arrive.
#ifdef KD_SEESAW_SYNC_ONLY
#define KD_SEESAW_ARRIVE(id, count) KD_NAMED_BARRIER(id, count)
#else
#define KD_SEESAW_ARRIVE(id, count) KD_NAMED_BARRIER_ARRIVE(id, count)
#endif

namespace kdtree::kern {

struct Bf16AttnSeesaw {
  using W = Bf16AttnWgmma;
  static constexpr int kThreads = W::kThreads;
  static constexpr int kGroupThreads = W::kGroupThreads;
  static constexpr int kTileRows = W::kTileRows, kTileKeys = W::kTileKeys;
  static constexpr int kSRegs = kTileKeys / 2;  // m64n64 accumulators: a warpgroup's S covers the whole tile
  static constexpr int kORegs = W::kORegs;      // m64n256: its half of O's columns
  static constexpr int kVHalfBlocks = W::kColsPerGroup / 64;  // 4 64-column blocks of V per half
  static constexpr int kPBlock = W::kBlocks - 1;              // the rope block: after S, the tile's P
  static constexpr int kEarlyBlocks = 4;                      // blocks of a tile's first part
  static constexpr int kPairThreads = 2 * kGroupThreads;
  static constexpr int kKeySteps = kTileKeys / 16;  // k16 steps of P V over a tile
  static constexpr int kFragRegs = 4;               // registers of an m16n8k16 A fragment (P from registers)
  // named barriers (0 is __syncthreads)
  static constexpr int kBarM0 = 1;    // wg0's maxima m0 written
  static constexpr int kBarM1P1 = 2;  // wg1's maxima m1 and P_B written
  static constexpr int kBarP0 = 3;    // wg0's rescaled P_A written
  // shared memory (bytes from the 1024-byte aligned base)
  static constexpr size_t kQOff = 0;
  static constexpr size_t kKOff = kQOff + W::kTileBytes;
  static constexpr size_t kMOff = kKOff + 2 * W::kTileBytes;                 // float [2][rows]: m0, m1
  static constexpr size_t kSumOff = kMOff + sizeof(float) * 2 * kTileRows;  // float [2][rows]
  static constexpr size_t kMaskOff = kSumOff + sizeof(float) * 2 * kTileRows;
  static constexpr size_t kBarOff = kMaskOff + 16;  // uint64_t: q, early[2], late[2]
  static constexpr int kBars = 5;
  static constexpr size_t kSmemBytes = kBarOff + kBars * sizeof(uint64_t) + kWgmmaAtomBytes;
  static constexpr uint32_t kEarlyBytes = kEarlyBlocks * W::kBlockBytes;
  static constexpr uint32_t kLateBytes = (W::kBlocks - kEarlyBlocks) * W::kBlockBytes;
};
static_assert(verify_config_describes<Bf16AttnSeesaw>(kVerifyBf16WgmmaSeesaw),
              "verify_attn_configs.h must describe Bf16AttnSeesaw");
static_assert(Bf16AttnSeesaw::kBarOff % sizeof(uint64_t) == 0, "mbarriers are 8-byte aligned");
static_assert(Bf16AttnSeesaw::kORegs * Bf16AttnSeesaw::kGroupThreads * sizeof(float) <= Bf16AttnWgmma::kTileBytes,
              "a warpgroup's half of O fits one key buffer (seesaw_pair_store)");
static_assert(Bf16AttnSeesaw::kVHalfBlocks == Bf16AttnSeesaw::kEarlyBlocks && Bf16AttnSeesaw::kPBlock == 8,
              "the parts: V's halves are blocks 0-3 and 4-7, the rope block 8");

// The tile at schedule position `index`, or past the end a dummy (the last tile's rows, every
// key masked) that keeps the pairs whole.
KD_DEVICE KeyTile seesaw_tile(const SplitSchedule& sc, int index, int tree_len) {
  if (index < sc.n_tiles) return key_tile_at(sc.w, sc.prefix_tiles, sc.tail_mask, index, Bf16AttnSeesaw::kTileKeys, tree_len);
  KeyTile t = key_tile_at(sc.w, sc.prefix_tiles, sc.tail_mask, sc.n_tiles - 1, Bf16AttnSeesaw::kTileKeys, tree_len);
  t.valid = 0;
  t.tail_tile = -1;
  return t;
}

// Blocks [first, first + count) of a key tile by TMA, on `bar` (one thread).
KD_DEVICE void seesaw_load_blocks(uint8_t* tile, const TmaMap* kv, uint64_t* bar, int b, int key0, int first, int count) {
  for (int blk = first; blk < first + count; ++blk)
    tma_load_3d(tile + blk * Bf16AttnWgmma::kBlockBytes, kv, bar, blk * Bf16AttnWgmma::kBlockCols, key0, b);
}

// S = Q K^T over a whole tile: wg0 (kWg1 false) takes blocks 0-3 then 4-8, wg1 blocks 4-7 then
// 0-3 and 8, each waiting for the tile's second part before its MMAs.
template <bool kWg1>
KD_DEVICE void seesaw_s(float (&s)[Bf16AttnSeesaw::kSRegs], uint64_t q_desc, uint64_t k_desc, uint64_t* early,
                        uint64_t* late, uint32_t parity) {
  using W = Bf16AttnWgmma;
  constexpr int kEarly = Bf16AttnSeesaw::kEarlyBlocks, kHalf = Bf16AttnSeesaw::kVHalfBlocks;
  mbarrier_wait_parity(early, parity);
  wgmma_fence();
#pragma unroll
  for (int i = 0; i < W::kBlocks; ++i) {
    // wg1: V's right half (blocks 4-7) first, then the left half, then the rope block
    const int blk = !kWg1 ? i : i < kHalf ? i + kHalf : i < 2 * kHalf ? i - kHalf : i;
    if (i == kEarly) mbarrier_wait_parity(late, parity);
#pragma unroll
    for (int kk = 0; kk < W::kBlockCols / 16; ++kk) {
      const uint32_t step = blk * W::kBlockBytes + kk * 32;  // 16 columns (32 bytes) a step in the swizzle row
      wgmma_bf16_ss<Bf16AttnSeesaw::kTileKeys, false>(s, q_desc + step / 16, k_desc + step / 16, i + kk > 0);
    }
  }
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operand(s);
}

// Rows [valid, 64) of a tile brought by TMA are other keys, tree rows or memory past prefix + T
// (maybe NaN): their V columns become zeros so that P = 0 never meets a NaN (S masks them by
// select). By the warpgroup that owns the tile, after its S; a named barrier publishes them.
KD_DEVICE void seesaw_zero_rows(uint8_t* tile, int valid, int gt) {
  using W = Bf16AttnWgmma;
  for (int idx = gt; idx < (W::kTileKeys - valid) * W::kLatentChunks; idx += W::kGroupThreads) {
    const int r = valid + idx / W::kLatentChunks, c = idx % W::kLatentChunks;  // whole rows: no swizzle
    *reinterpret_cast<uint4*>(tile + (c / 8) * W::kBlockBytes + r * 128 + (c % 8) * 16) = make_uint4(0, 0, 0, 0);
  }
  fence_proxy_async_smem();
}

// p = exp2(s - m) in place; the f32 row sums of this thread's keys.
KD_DEVICE void seesaw_exp(float (&s)[Bf16AttnSeesaw::kSRegs], const float (&m_use)[2], float (&rowsum)[2]) {
  rowsum[0] = rowsum[1] = 0.0f;
#pragma unroll
  for (int i = 0; i < Bf16AttnSeesaw::kSRegs; ++i) {
    s[i] = exp2f(s[i] - m_use[(i >> 1) & 1]);
    rowsum[(i >> 1) & 1] += s[i];
  }
}

// O's rows times f (skipped when no factor differs from 1: x * 1 == x, bit-exact).
KD_DEVICE void seesaw_rescale(float (&o)[Bf16AttnSeesaw::kORegs], const float (&f)[2]) {
  if (__all_sync(kFullMask, f[0] == 1.0f && f[1] == 1.0f)) return;
#pragma unroll
  for (int i = 0; i < Bf16AttnSeesaw::kORegs; i += 4) {
    o[i] *= f[0];
    o[i + 1] *= f[0];
    o[i + 2] *= f[1];
    o[i + 3] *= f[1];
  }
}

// P (times f per row) to bf16: the m16n8k16 A fragments of the 4 16-key steps, a[ks][0..3].
KD_DEVICE void seesaw_pack(const float (&p)[Bf16AttnSeesaw::kSRegs], const float (&f)[2], uint32_t (&a)[Bf16AttnSeesaw::kKeySteps][Bf16AttnSeesaw::kFragRegs]) {
#pragma unroll
  for (int ks = 0; ks < Bf16AttnSeesaw::kKeySteps; ++ks)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int j = 2 * ks + half;  // 8-key column group
      a[ks][half * 2] = pack_bf16x2(p[4 * j] * f[0], p[4 * j + 1] * f[0]);          // row lo
      a[ks][half * 2 + 1] = pack_bf16x2(p[4 * j + 2] * f[1], p[4 * j + 3] * f[1]);  // row hi
    }
}

// The packed P to the tile's P block (K-major 64 rows x 64 keys, sw128 layout).
KD_DEVICE void seesaw_store_p(uint8_t* p_block, const uint32_t (&a)[Bf16AttnSeesaw::kKeySteps][Bf16AttnSeesaw::kFragRegs], int row_lo, int tig) {
#pragma unroll
  for (int ks = 0; ks < Bf16AttnSeesaw::kKeySteps; ++ks)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int key = 16 * ks + 8 * half + 2 * tig;
      *reinterpret_cast<uint32_t*>(p_block + sw128_offset(64, row_lo, key / 8) + (key % 8) * 2) = a[ks][half * 2];
      *reinterpret_cast<uint32_t*>(p_block + sw128_offset(64, row_lo + 8, key / 8) + (key % 8) * 2) = a[ks][half * 2 + 1];
    }
  fence_proxy_async_smem();
}

// O_half += P V_half, P from registers (the fragments) or from a P block (descriptor).
KD_DEVICE void seesaw_pv_regs(float (&o)[Bf16AttnSeesaw::kORegs], const uint32_t (&a)[Bf16AttnSeesaw::kKeySteps][Bf16AttnSeesaw::kFragRegs], uint64_t v_desc) {
  constexpr uint32_t kVStep = 16 * 128;  // 16 key rows
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < Bf16AttnSeesaw::kKeySteps; ++ks) wgmma_bf16_rs_tb<Bf16AttnWgmma::kColsPerGroup>(o, a[ks], v_desc + ks * kVStep / 16, true);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operand(o);
}
KD_DEVICE void seesaw_pv_smem(float (&o)[Bf16AttnSeesaw::kORegs], uint64_t p_desc, uint64_t v_desc) {
  constexpr uint32_t kVStep = 16 * 128, kPStep = 32;  // 16 key rows of V; 16 keys (32 bytes) of P
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < Bf16AttnSeesaw::kKeySteps; ++ks)
    wgmma_bf16_ss<Bf16AttnWgmma::kColsPerGroup, true>(o, p_desc + ks * kPStep / 16, v_desc + ks * kVStep / 16, true);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operand(o);
}

// The epilogue of a pair (k.split_group 2: splits 2p and 2p + 1 of one row tile, a cluster of
// two): their partials become one before anything leaves the SMs, so half the partial bytes are
// written and merged. Rank r keeps O's columns of its warpgroup r (0: 0..255, 1: 256..511);
// the other warpgroup sends its columns, weighted, into the peer's first key buffer (free once
// both CTAs have passed the first cluster barrier), where the peer's thread of the same index
// (the same rows and columns) adds them to its own. lse_s: 64 floats of this CTA's shared
// memory that the peer reads. Every thread of both CTAs calls it (two cluster barriers).
template <class OutT>
KD_DEVICE void seesaw_pair_store(const VerifyKernelParams& k, const SplitWork& w, float (&o)[Bf16AttnSeesaw::kORegs],
                                 const float (&m_run)[2], const float* red_sum, float* lse_s, uint8_t* recv, int group,
                                 int gt, int row_lo, int tig, int col_base) {
  using Cfg = Bf16AttnSeesaw;
  float inv[2], lse2[2];
  wgmma_row_totals<Cfg>(m_run, red_sum, row_lo, inv, lse2);
  const int rank = cluster_rank(), peer = rank ^ 1;
  if (group == 0 && tig == 0) {
    lse_s[row_lo] = lse2[0];
    lse_s[row_lo + 8] = lse2[1];
  }
  cluster_barrier();  // both CTAs' tiles done (the peer's key buffers free), both lse published
  const float* peer_lse = cluster_peer(lse_s, peer);
  float f[2], lse_pair[2];  // this CTA's weight in the pair (times 1 / its row sum); the pair's lse
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float mine = lse2[h], theirs = peer_lse[row_lo + 8 * h];
    const float top = fmaxf(mine, theirs);
    lse_pair[h] = top == -INFINITY ? -INFINITY : top + log2f(exp2f(mine - top) + exp2f(theirs - top));
    f[h] = top == -INFINITY ? 0.0f : inv[h] * exp2f(mine - lse_pair[h]);
  }
  float4* buf = reinterpret_cast<float4*>(recv);  // [kORegs / 4][kGroupThreads]: a thread's float4s strided
  if (group != rank) {
    float4* dst = cluster_peer(buf, peer);
#pragma unroll
    for (int j = 0; j < Cfg::kORegs / 4; ++j)
      dst[j * Cfg::kGroupThreads + gt] = make_float4(o[4 * j] * f[0], o[4 * j + 1] * f[0], o[4 * j + 2] * f[1], o[4 * j + 3] * f[1]);
  }
  cluster_barrier();  // the peer's columns are in this CTA's buffer; nothing reads a peer past here
  if (group != rank) return;
#pragma unroll
  for (int j = 0; j < Cfg::kORegs / 4; ++j) {
    const float4 v = buf[j * Cfg::kGroupThreads + gt];
    o[4 * j] = o[4 * j] * f[0] + v.x;
    o[4 * j + 1] = o[4 * j + 1] * f[0] + v.y;
    o[4 * j + 2] = o[4 * j + 2] * f[1] + v.z;
    o[4 * j + 3] = o[4 * j + 3] * f[1] + v.w;
  }
  const float kOne[2] = {1.0f, 1.0f};
  wgmma_store_scaled<Cfg, OutT>(k, w, w.split / k.split_group, o, kOne, lse_pair, tig == 0, row_lo, tig, col_base);
}

template <class OutT, bool Pairs>
KD_DEVICE void seesaw_split(const VerifyKernelParams& k, const AttnTmaMaps* maps) {
  using Cfg = Bf16AttnSeesaw;
  using W = Bf16AttnWgmma;
  ATTN_CLK_DECL;  // phase clocks of a measuring build (verify_attn_wgmma.cuh): wg0 / wg1 slots named in its report
  KD_DYNAMIC_SMEM(uint8_t, raw);
  uint8_t* smem = raw + (kWgmmaAtomBytes - smem_u32(raw) % kWgmmaAtomBytes) % kWgmmaAtomBytes;
  float* m_s = reinterpret_cast<float*>(smem + Cfg::kMOff);        // [2][rows]: m0, m1 of the pair
  float* red_sum = reinterpret_cast<float*>(smem + Cfg::kSumOff);  // [groups][rows]
  uint32_t* mask_s = reinterpret_cast<uint32_t*>(smem + Cfg::kMaskOff);
  uint64_t* q_bar = reinterpret_cast<uint64_t*>(smem + Cfg::kBarOff);
  uint64_t* early = q_bar + 1;  // [buffer]: K0 blocks 0-3, K1 blocks 4-7
  uint64_t* late = early + 2;   // [buffer]: K0 blocks 4-8, K1 blocks 0-3 and 8
  uint8_t* ktile[2] = {smem + Cfg::kKOff, smem + Cfg::kKOff + W::kTileBytes};
  const uint32_t q_addr = smem_u32(smem + Cfg::kQOff);
  const uint64_t q_desc = wgmma_desc_sw128(q_addr, 0, kWgmmaAtomBytes);

  const int tid = static_cast<int>(threadIdx.x);
  const int group = __shfl_sync(kFullMask, tid / Cfg::kGroupThreads, 0);  // warp-uniform, so that the branches on it are
  const int gt = tid % Cfg::kGroupThreads;
  const int wq = (tid / kWarpSize) % 4, lane = tid % kWarpSize, g = lane / 4, tig = lane % 4;
  const int row_lo = 16 * wq + g;  // this thread's accumulator rows: row_lo, row_lo + 8
  if (tid == 0) {
    mbarrier_init(q_bar, 1);
    for (int i = 0; i < 2; ++i) {
      mbarrier_init(&early[i], 1);  // each part: its producer's arrive.expect_tx
      mbarrier_init(&late[i], 1);
    }
    fence_mbarrier_init();
    tma_prefetch_map(&maps->kv);
  }
  __syncthreads();  // the mbarriers initialised, for every thread
  const SplitSchedule sc = split_schedule(k, Cfg::kTileRows, Cfg::kTileKeys, mask_s);
  const SplitWork& w = sc.w;
  const int H = k.p.heads, T = k.p.tree_len;
  const bool paired = Pairs && k.split_group > 1;  // a cluster of two: both meet in seesaw_pair_store
  if (sc.n_tiles == 0 && !paired) {  // an empty prefix split (a shorter request): nothing visible
    write_empty_split(k, w, Cfg::kTileRows);
    return;
  }
  const int n_pairs = (sc.n_tiles + 1) / 2;  // 0: an empty split of a pair (no loads, no tiles)
  int vis_row[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) vis_row[h] = (w.b * T + min(w.row0 + row_lo + 8 * h, k.rows - 1) / H) * k.p.vis_words;

  if (tid == 0 && n_pairs > 0) {  // Q, and pair 0 whole
    mbarrier_arrive_expect_tx(q_bar, W::kTileBytes);
    tma_load_query_tile(smem + Cfg::kQOff, *maps, q_bar, w.b, w.row0);
    const KeyTile ta = seesaw_tile(sc, 0, T), tb = seesaw_tile(sc, 1, T);
    mbarrier_arrive_expect_tx(&early[0], Cfg::kEarlyBytes);
    seesaw_load_blocks(ktile[0], &maps->kv, &early[0], w.b, ta.key0, 0, Cfg::kVHalfBlocks);
    mbarrier_arrive_expect_tx(&late[0], Cfg::kLateBytes);
    seesaw_load_blocks(ktile[0], &maps->kv, &late[0], w.b, ta.key0, Cfg::kVHalfBlocks, Cfg::kVHalfBlocks + 1);
    mbarrier_arrive_expect_tx(&early[1], Cfg::kEarlyBytes);
    seesaw_load_blocks(ktile[1], &maps->kv, &early[1], w.b, tb.key0, Cfg::kVHalfBlocks, Cfg::kVHalfBlocks);
    mbarrier_arrive_expect_tx(&late[1], Cfg::kLateBytes);
    seesaw_load_blocks(ktile[1], &maps->kv, &late[1], w.b, tb.key0, 0, Cfg::kVHalfBlocks);
    seesaw_load_blocks(ktile[1], &maps->kv, &late[1], w.b, tb.key0, Cfg::kPBlock, 1);
  }

  float o[Cfg::kORegs];
#pragma unroll
  for (int i = 0; i < Cfg::kORegs; ++i) o[i] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};  // base 2; l_run: this warpgroup's P terms
  if (n_pairs > 0) mbarrier_wait_parity(q_bar, 0);
  const uint32_t k0_addr = smem_u32(ktile[0]), k1_addr = smem_u32(ktile[1]);
  const uint64_t k_desc[2] = {wgmma_desc_sw128(k0_addr, 0, kWgmmaAtomBytes), wgmma_desc_sw128(k1_addr, 0, kWgmmaAtomBytes)};
  const uint64_t p_desc[2] = {wgmma_desc_sw128(k0_addr + Cfg::kPBlock * W::kBlockBytes, 0, kWgmmaAtomBytes),
                              wgmma_desc_sw128(k1_addr + Cfg::kPBlock * W::kBlockBytes, 0, kWgmmaAtomBytes)};
  // V N-major: 256 columns = 4 blocks kBlockBytes apart; this warpgroup's half
  const uint32_t half_off = group * Cfg::kVHalfBlocks * W::kBlockBytes;
  const uint64_t v_desc[2] = {wgmma_desc_sw128(k0_addr + half_off, W::kBlockBytes, kWgmmaAtomBytes),
                              wgmma_desc_sw128(k1_addr + half_off, W::kBlockBytes, kWgmmaAtomBytes)};
  float s[Cfg::kSRegs];
  uint32_t a[Cfg::kKeySteps][Cfg::kFragRegs];
  const float kOne[2] = {1.0f, 1.0f};

  ATTN_CLK_LAP(kClkPrologue);
  if (group == 0) {
    for (int j = 0; j < n_pairs; ++j) {
      const uint32_t par = static_cast<uint32_t>(j & 1);
      const KeyTile ta = seesaw_tile(sc, 2 * j, T);
      seesaw_s<false>(s, q_desc, k_desc[0], &early[0], &late[0], par);
      if (ta.valid < Cfg::kTileKeys) seesaw_zero_rows(ktile[0], ta.valid, gt);
      ATTN_CLK_LAP(kClkTop);
      float mx[2], m0[2], m_use[2], alpha[2], rowsum[2];
      wgmma_mask_max<Cfg::kTileKeys>(s, ta, k, vis_row, tig, 0, ta.tail_tile < 0 && ta.valid == Cfg::kTileKeys, mx);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        m0[h] = fmaxf(m_run[h], mx[h]);
        alpha[h] = m_run[h] == -INFINITY ? 0.0f : exp2f(m_run[h] - m0[h]);
        m_use[h] = m0[h] == -INFINITY ? 0.0f : m0[h];  // all masked so far: p = 0, no NaN
        if (tig == 0) m_s[row_lo + 8 * h] = m0[h];
      }
      KD_SEESAW_ARRIVE(Cfg::kBarM0, Cfg::kPairThreads);
      ATTN_CLK_LAP(kClkSIssue);
      seesaw_exp(s, m_use, rowsum);
      seesaw_pack(s, kOne, a);
      l_run[0] = l_run[0] * alpha[0] + rowsum[0];
      l_run[1] = l_run[1] * alpha[1] + rowsum[1];
      seesaw_rescale(o, alpha);
      seesaw_pv_regs(o, a, v_desc[0]);  // O_L += P_A V_A (left)
      const bool next = j + 1 < n_pairs;
      if (next && gt == 0) {  // K0's blocks 0-3 for the next pair: this warpgroup was their last reader
        const KeyTile na = seesaw_tile(sc, 2 * j + 2, T);
        mbarrier_arrive_expect_tx(&early[0], Cfg::kEarlyBytes);
        seesaw_load_blocks(ktile[0], &maps->kv, &early[0], w.b, na.key0, 0, Cfg::kVHalfBlocks);
      }
      ATTN_CLK_LAP(kClkCopyIssue);
      KD_NAMED_BARRIER(Cfg::kBarM1P1, Cfg::kPairThreads);  // wg1's m1 and P_B
      ATTN_CLK_LAP(kClkSWait);
      float scale1[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float m1 = m_s[Cfg::kTileRows + row_lo + 8 * h];
        scale1[h] = m0[h] == -INFINITY ? 0.0f : exp2f(m0[h] - m1);
        m_run[h] = m1;
        l_run[h] *= scale1[h];
      }
      seesaw_rescale(o, scale1);
      seesaw_pack(s, scale1, a);  // P_A at the new maximum, for wg1
      seesaw_store_p(ktile[0] + Cfg::kPBlock * W::kBlockBytes, a, row_lo, tig);
      KD_SEESAW_ARRIVE(Cfg::kBarP0, Cfg::kPairThreads);
      ATTN_CLK_LAP(kClkMax);
      mbarrier_wait_parity(&late[1], par);  // K1's blocks 0-3 (wg1's S waited for them too)
      seesaw_pv_smem(o, p_desc[1], v_desc[1]);  // O_L += P_B V_B (left)
      if (next && gt == 0) {  // K1's blocks 0-3 and its P block: this warpgroup was their last reader
        const KeyTile nb = seesaw_tile(sc, 2 * j + 3, T);
        mbarrier_arrive_expect_tx(&late[1], Cfg::kLateBytes);
        seesaw_load_blocks(ktile[1], &maps->kv, &late[1], w.b, nb.key0, 0, Cfg::kVHalfBlocks);
        seesaw_load_blocks(ktile[1], &maps->kv, &late[1], w.b, nb.key0, Cfg::kPBlock, 1);
      }
      ATTN_CLK_LAP(kClkSoftmax);
    }
  } else {
    for (int j = 0; j < n_pairs; ++j) {
      const uint32_t par = static_cast<uint32_t>(j & 1);
      const KeyTile tb = seesaw_tile(sc, 2 * j + 1, T);
      seesaw_s<true>(s, q_desc, k_desc[1], &early[1], &late[1], par);
      if (tb.valid < Cfg::kTileKeys) seesaw_zero_rows(ktile[1], tb.valid, gt);
      ATTN_CLK_LAP(kClkTop);
      float mx[2], m1[2], m_use[2], f[2], rowsum[2];
      wgmma_mask_max<Cfg::kTileKeys>(s, tb, k, vis_row, tig, 0, tb.tail_tile < 0 && tb.valid == Cfg::kTileKeys, mx);
      KD_NAMED_BARRIER(Cfg::kBarM0, Cfg::kPairThreads);  // wg0's m0
      ATTN_CLK_LAP(kClkSIssue);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float m0 = m_s[row_lo + 8 * h];
        m1[h] = fmaxf(m0, mx[h]);
        // O_R and l at m1: e^(m - m0) e^(m0 - m1), the same factors wg0 applies in turn
        const float alpha = m_run[h] == -INFINITY ? 0.0f : exp2f(m_run[h] - m0);
        const float scale1 = m0 == -INFINITY ? 0.0f : exp2f(m0 - m1[h]);
        f[h] = alpha * scale1;
        m_use[h] = m1[h] == -INFINITY ? 0.0f : m1[h];
      }
      seesaw_exp(s, m_use, rowsum);
      seesaw_pack(s, kOne, a);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        l_run[h] = l_run[h] * f[h] + rowsum[h];
        if (tig == 0) m_s[Cfg::kTileRows + row_lo + 8 * h] = m1[h];
        m_run[h] = m1[h];
      }
      seesaw_store_p(ktile[1] + Cfg::kPBlock * W::kBlockBytes, a, row_lo, tig);
      KD_SEESAW_ARRIVE(Cfg::kBarM1P1, Cfg::kPairThreads);
      ATTN_CLK_LAP(kClkCopyIssue);
      seesaw_rescale(o, f);
      seesaw_pv_regs(o, a, v_desc[1]);  // O_R += P_B V_B (right)
      const bool next = j + 1 < n_pairs;
      if (next && gt == 0) {  // K1's blocks 4-7 for the next pair: this warpgroup was their last reader
        const KeyTile nb = seesaw_tile(sc, 2 * j + 3, T);
        mbarrier_arrive_expect_tx(&early[1], Cfg::kEarlyBytes);
        seesaw_load_blocks(ktile[1], &maps->kv, &early[1], w.b, nb.key0, Cfg::kVHalfBlocks, Cfg::kVHalfBlocks);
      }
      ATTN_CLK_LAP(kClkSWait);
      KD_NAMED_BARRIER(Cfg::kBarP0, Cfg::kPairThreads);  // wg0's rescaled P_A
      ATTN_CLK_LAP(kClkMax);
      mbarrier_wait_parity(&late[0], par);                 // K0's blocks 4-7 (wg0's S waited for them too)
      seesaw_pv_smem(o, p_desc[0], v_desc[0]);             // O_R += P_A V_A (right)
      if (next && gt == 0) {  // K0's blocks 4-8: this warpgroup was their last reader
        const KeyTile na = seesaw_tile(sc, 2 * j + 2, T);
        mbarrier_arrive_expect_tx(&late[0], Cfg::kLateBytes);
        seesaw_load_blocks(ktile[0], &maps->kv, &late[0], w.b, na.key0, Cfg::kVHalfBlocks, Cfg::kVHalfBlocks + 1);
      }
      ATTN_CLK_LAP(kClkSoftmax);
    }
  }

  // the row sums across the quad and the two warpgroups; both hold the final maxima
  wgmma_publish_row_sums<Cfg>(l_run, red_sum, group, row_lo, tig);
  ATTN_CLK_LAP(kClkEpilogue);  // (the stores below are not counted)
  ATTN_CLK_FLUSH(2 * n_pairs);
  __syncthreads();
  const int col_base = group * W::kColsPerGroup;
  if constexpr (Pairs) {
    if (paired) {
      seesaw_pair_store<OutT>(k, w, o, m_run, red_sum, m_s, ktile[0], group, gt, row_lo, tig, col_base);
      return;
    }
  }
  wgmma_store_rows<Cfg, OutT>(k, w, o, m_run, red_sum, group, row_lo, tig, col_base);
}

// Pairs: the splits reduced in pairs on chip (config 14, a baseline); false: config 10
template <class OutT, bool Pairs>
__global__ void __launch_bounds__(Bf16AttnSeesaw::kThreads, 1)
    verify_attn_seesaw_kernel(const VerifyKernelParams k, const __grid_constant__ AttnTmaMaps maps) {
#if defined(KD_WGMMA_DEVICE) || defined(KD_SIMT_EMULATION)
  grid_dependents_launch();  // the merge, a programmatic dependent launch, may be placed from now on
  seesaw_split<OutT, Pairs>(k, &maps);
#elif defined(__CUDA_ARCH__)
  __trap();  // a build without sm_90a code: the plan picks this kernel on compute capability 9.0 only
#endif
}

}  // namespace kdtree::kern
