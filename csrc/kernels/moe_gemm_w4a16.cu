// W4A16 grouped expert GEMM (API and weight layout: moe_gemm_w4a16.cuh).
//
// CTA: kWarpsN row tiles of 16 output features x kWarpsK slices of the input columns (chunk c
// goes to slice c % kWarpsK), for one expert: 8 warps, or 4 (one slice) when 8-warp CTAs would
// fill under two waves, so that small decode grids spread evenly over the SMs; grid = (row
// tiles / kWarpsN, expert slots). Slot y runs the y-th expert that owns rows, so decode
// launches (8 active experts of 384) spend nothing on idle experts. Each warp streams its
// 576-byte weight blocks global -> shared with cp.async, kStages blocks in flight, and reads
// its own bytes back (one 16-byte word per lane per block; the scale words cross lanes, hence
// the __syncwarp); dequantizes four bf16 pairs per word in registers, bf16(q * scale) exactly
// as the reference; and runs mma.sync m16n8k16 with the weights as A and 8 grouped rows of x
// as B. x comes from shared memory when the pass's rows fit there without costing the SM much
// occupancy (staged once per pass, beside the ring's fill), else straight from global memory
// (16-byte loads, L1/L2 hits across the CTA's warps and CTAs). The row tile (8, 16 or 32
// grouped rows per pass over the weights) is a template parameter; passes repeat for experts
// with more rows. The partial sums of the chunk classes (W4Tile::kSumClasses: the slices, or a
// plain GEMM's even and odd chunks) meet in shared memory, added in class order, so a row's
// result depends on neither the tile, nor the CTA's warps, nor where x is read from, nor the
// other rows, nor (plain GEMM) 1 or 2 slices. At single-token decode a gate/up + down pair hands off per expert slot
// (MoeW4a16Params::slot_sync): the gate/up CTAs of one slot count themselves done, and the
// down CTAs of that slot wait for the full count instead of for the whole gate/up grid
// (griddepcontrol.wait).
//
// Bytes: each weight byte is read once per pass (once per forward when an expert owns <= 32
// rows), and the x rows of an expert once per CTA. Instructions: the dequantization costs ~1.9
// per weight, so at decode sizes the kernel runs near the issue limit and the memory limit at
// once; the ring loop runs whole trips without per-block checks (SASS per weight word: plain
// 20.5, SwiGLU 19.4; docs/int4.md). Loading x a block ahead, a second mma chain, deeper rings,
// L2 prefetch hints and prefetches, and bulk copies into the ring were measured no faster on
// the H200 (docs/kernels/moe_w4a16.md, appendix).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "moe_gemm_w4a16.cuh"
#include "launch_support.h"
#include "model_dtype.cuh"
#include "moe_route.cuh"
#include "ptx_mma.cuh"

#if defined(KD_W4_TIMELINE)  // a measuring build: each CTA's timeline (csrc/dev/moe_w4a16_timeline.h)
#include "dev/moe_w4a16_timeline_marks.cuh"
#else
#define KD_W4_MARK(point) ((void)0)
#define KD_W4_MARK_EXPERT(expert_id) ((void)0)
#define KD_W4_MARK_FIRST_BLOCK(wait) ((void)0)
#endif

namespace kdtree {
namespace kern {

constexpr int kW4Warps = 8;  // warps per CTA, but for the 4-warp CTAs of small 1-slice grids (kW4SmallCtaWarps)
constexpr int kW4SmallCtaWarps = 4;
// Warps per SM that __launch_bounds__ asks registers for: 32 at one 8-row fragment (<= 64
// registers: 32 warps stream weights, and a decode gate/up launch of 8 experts x 64 CTAs fits
// one wave of 132 SMs), 16 otherwise (<= 128: the wider accumulators)
constexpr int w4_min_blocks(int warps, int frags) { return (frags == 1 ? 32 : 16) / warps; }
// The automatic slice count: the most slices (of 4, 2, 1) that leave each warp at least this
// many 64-column chunks, so that its cp.async ring (4-8 blocks deep) reaches a steady state
// instead of one fill and drain per CTA. Kimi's gate/up (k = 7168, 112 chunks) gets 4 slices
// x 2 row tiles: 8 decode experts x 2048 / 32 = 512 CTAs; its down (k = 2048, 32 chunks) 1
// slice x 8 row tiles. On the H200 these were the fastest slice counts, or within a few percent,
// at n = 1 .. 128 for each GEMM (`kdtree bench moe`'s int4_slices* rows).
constexpr int kW4MinChunksPerSlice = 28;

// 16-byte x pieces a thread loads before storing any when it stages x (kXShared): a decode
// gate/up row (k = 7168) is 3.5 pieces per thread of a 256-thread CTA, so one batch
constexpr int kW4XStageBatch = 4;

constexpr int kW4MaxExpertWords = kMoeMaxExperts / kWarpSize;
constexpr size_t kW4StaticSmemBytes = kW4MaxExpertWords * sizeof(unsigned);  // the kernel's owns_rows
constexpr size_t kW4StaticSmemLimit = 48 * 1024;  // above this a launch must opt in
constexpr size_t kW4MaxRingSmem = 227 * 1024;      // sm_90's opt-in maximum per CTA
// shared memory the driver keeps per CTA on sm_80+ (cudaDevAttrReservedSharedMemoryPerBlock)
constexpr size_t kSmemReservedPerBlock = 1024;
// bf16 bit patterns: 0x4300 | n is the bf16 128 + n for a nibble n (128's ulp is 1), so
// (0x4300 | n) - 136 = n - 8 = q, exactly
constexpr uint32_t kNibbleMask2 = 0x000f000fu;
constexpr uint32_t kBf16x2Magic128 = 0x43004300u;
constexpr uint32_t kBf16x2Minus136 = 0x43084308u;

// Ring depths, blocks in flight per warp: deeper rings (10 plain, 6 SwiGLU) were no faster on
// the H200 (docs/kernels/moe_w4a16.md, appendix)
constexpr int kW4SwigluStages = 4;
constexpr int kW4PlainStages = 8;

template <bool kSwiglu, int kWarpsN, int kWarpsK, int kFrags>
struct W4Tile {
  static constexpr int kMats = kSwiglu ? 2 : 1;
  static constexpr int kWarps = kWarpsN * kWarpsK, kThreads = kWarps * kWarpSize;
  // blocks in flight per warp: ~4.6 KB of weights per warp either way, ~37 KB per CTA, so
  // two or more CTAs per SM keep > 70 KB per SM in flight; the estimate of what an H200
  // needs (Little's law: ~20 B/clk/SM of DRAM bandwidth x ~1.5 K clk of loaded latency) is ~30 KB
  static constexpr int kStages = kSwiglu ? kW4SwigluStages : kW4PlainStages;
  static constexpr int kPassRows = 8 * kFrags;
  static constexpr int kRingWords = kWarps * kStages * kMats * kW4BlockWords;
  // Partial sums by chunk class: chunk c adds to class c % kSumClasses, one mma chain per class,
  // and the classes meet in class order. A plain GEMM of one slice keeps two chains (chunks even,
  // odd), so one and two slices give the same bits and the planner may pick either for a launch
  // (the down GEMM under the slot hand-off runs 2); otherwise a class is a slice.
  static constexpr int kSumClasses = kWarpsK == 1 && !kSwiglu ? 2 : kWarpsK;
  static constexpr int kAccs = kSumClasses / kWarpsK;  // chains per warp
  static_assert(kStages % kAccs == 0, "a ring slot's chunks must stay in one class");
  // partial sums: [class][row tile][matrix][frag][lane][4] floats
  static constexpr int kRedFloats = kSumClasses * kWarpsN * kMats * kFrags * kWarpSize * 4;
  static constexpr size_t kSmemBytes = 4 * static_cast<size_t>(kRingWords > kRedFloats ? kRingWords : kRedFloats);
  // the depths keep the ring under the limit that needs no opt-in (and far under sm_120's ~99 KB)
  static_assert(kSmemBytes <= kW4MaxRingSmem, "W4A16 ring over the largest shared memory a CTA may opt in to");
};

// The bf16 pair (lo, hi) as one register.
KD_DEVICE __nv_bfloat162 as_bf162(uint32_t u) {
  __nv_bfloat162 v;
  std::memcpy(&v, &u, 4);
  return v;
}
KD_DEVICE uint32_t as_u32(__nv_bfloat162 v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

// (a & mask) | magic in one LOP3: the compiler splits it into an AND and an OR when both
// constants are immediates (one LOP3 takes a single immediate), a third of the dequant's ALU work
KD_DEVICE uint32_t and_or(uint32_t a, uint32_t mask, uint32_t magic) {
#if defined(__CUDA_ARCH__) && !defined(KD_SIMT_EMULATION)
  constexpr int kLutAndOr = (0xf0 & 0xcc) | 0xaa;  // LOP3 truth table of (a & b) | c
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, %4;" : "=r"(r) : "r"(a), "r"(mask), "r"(magic), "n"(kLutAndOr));
  return r;
#else
  return (a & mask) | magic;
#endif
}

// The four A-fragment registers of one mma step from one word of eight nibbles: pair i from
// nibble positions (i, i + 4), times the scale of row g (i even) or g + 8 (i odd), each
// product rounded once to bf16. mask2 / magic2 hold kNibbleMask2 / kBf16x2Magic128 (registers,
// see and_or).
KD_DEVICE void dequant_word(uint32_t (&a)[4], uint32_t word, __nv_bfloat162 scale_g, __nv_bfloat162 scale_g8,
                            uint32_t mask2, uint32_t magic2) {
  const __nv_bfloat162 minus = as_bf162(kBf16x2Minus136);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t biased = and_or(word >> (4 * i), mask2, magic2);
    const __nv_bfloat162 q = __hsub2_rn(as_bf162(biased), minus);
    a[i] = as_u32(__hmul2_rn(q, (i & 1) ? scale_g8 : scale_g));
  }
}

// bf16 half `hi` of a scale word, in both halves (the scale of one row for a bf16x2 pair)
KD_DEVICE __nv_bfloat162 dup_half(uint32_t w, bool hi) {
#if defined(__CUDA_ARCH__) && !defined(KD_SIMT_EMULATION)
  return as_bf162(__byte_perm(w, 0, hi ? 0x3232 : 0x1010));
#else
  const uint32_t h = hi ? w >> 16 : w & 0xffffu;
  return as_bf162(h | (h << 16));
#endif
}

// 16 bytes of x: from the CTA's staged copy in shared memory, or a read-only global load (x
// rows are written by an earlier kernel)
template <bool kXShared>
KD_DEVICE uint4 load_x16(const void* p) {
  if constexpr (kXShared) return *reinterpret_cast<const uint4*>(p);
  else return __ldg(reinterpret_cast<const uint4*>(p));
}

// The slot hand-off of a gate/up + down pair (MoeW4a16Params::slot_sync): words [0, slots) count
// the slots' finished gate/up CTAs, words [slots, 2 slots) the down CTAs past their wait (the last
// one zeroes the slot's two words). Every gate/up CTA adds 1 to its slot's count with a release
// reduction, which it does not wait for, and CTA 0 of the slot also adds the slot's CTA count
// shifted by kW4SyncTotalShift: a down CTA sees its slot done when the low half equals a nonzero
// high half. Against a count returned to each CTA and a mark published by the last, that takes two round trips through a loaded memory system off the path from a slot's last
// gate/up store to its down CTAs' first mma, and one off each gate/up CTA's exit.
enum W4SlotSyncPart : int { kW4SyncDone = 0, kW4SyncPassed = 1 };
constexpr int kW4SyncTotalShift = 16;
constexpr uint32_t kW4SyncCountMask = (1u << kW4SyncTotalShift) - 1;
// how long a waiting down CTA's thread 0 sleeps between polls of its slot's count: short against
// the microseconds a gate/up CTA streams, so the poll adds little to the hand-off
constexpr unsigned kW4SyncPollNs = 100;
// word `part` of this CTA's slot (blockIdx.y) in the hand-off's words
KD_DEVICE uint32_t* slot_sync_word(const MoeW4a16Params& p, W4SlotSyncPart part) {
  return p.slot_sync + static_cast<int>(part) * gridDim.y + blockIdx.y;
}
// a slot's count word once all of its gate/up CTAs have added to it
KD_DEVICE bool slot_done(uint32_t word) {
  const uint32_t total = word >> kW4SyncTotalShift;
  return total != 0 && (word & kW4SyncCountMask) == total;
}

// *p += v with release semantics at GPU scope: this thread's earlier writes, and those ordered
// before it by a barrier, are visible before the sum is; nothing is returned, so nothing waits
KD_DEVICE void red_release_gpu_add(uint32_t* p, uint32_t v) {
#if defined(__CUDA_ARCH__) && !defined(KD_SIMT_EMULATION)
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#else
  atomicAdd(p, v);
#endif
}

KD_DEVICE uint32_t load_acquire_gpu(const uint32_t* p) {
#if defined(__CUDA_ARCH__) && !defined(KD_SIMT_EMULATION)
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
#else
  return *p;
#endif
}
KD_DEVICE void fence_gpu() {
#if defined(__CUDA_ARCH__) && !defined(KD_SIMT_EMULATION)
  __threadfence();
#endif
}
KD_DEVICE void poll_pause() {
#if defined(__CUDA_ARCH__) && !defined(KD_SIMT_EMULATION)
  __nanosleep(kW4SyncPollNs);
#endif
}
// 16 bytes from L2, past this SM's L1: x written by a kernel still running (the slot hand-off)
KD_DEVICE uint4 load_l2_16(const void* p) {
#if defined(__CUDA_ARCH__) && !defined(KD_SIMT_EMULATION)
  return __ldcg(reinterpret_cast<const uint4*>(p));
#else
  return *reinterpret_cast<const uint4*>(p);
#endif
}

// Staged x rows sit this many bf16 apart in shared memory: the row, zeros up to the next whole
// 64-column chunk (what the mma loop reads past k), and 16 bytes, so that the 8 rows of a B
// fragment start 4 banks apart instead of on the same bank
inline KD_HOST_DEVICE int w4_x_stage_stride(int k) { return ceil_div(k, kW4TileCols) * kW4TileCols + 8; }
inline size_t w4_x_stage_bytes(int k, int rows) { return static_cast<size_t>(rows) * w4_x_stage_stride(k) * 2; }

template <bool kSwiglu, int kWarpsN, int kWarpsK, int kFrags, bool kXShared>
__global__ void __launch_bounds__(kWarpsN* kWarpsK* kWarpSize, w4_min_blocks(kWarpsN* kWarpsK, kFrags))
    moe_w4a16_kernel(const MoeW4a16Params p, int x_stage_rows) {
  using Tile = W4Tile<kSwiglu, kWarpsN, kWarpsK, kFrags>;
  constexpr int kWarps = Tile::kWarps, kThreads = Tile::kThreads;
  static_assert(!kXShared || kFrags == 1, "x is staged for the 8-row tile only");
  constexpr int kMats = Tile::kMats, kStages = Tile::kStages;
  KD_DYNAMIC_SMEM(uint32_t, smem);
  __shared__ unsigned owns_rows[kW4MaxExpertWords];  // bit e % 32 of word e / 32: expert e has rows
  // a launch with p.overlap_previous after this one may start as our last blocks start
  grid_dependents_launch();
  KD_W4_MARK(kW4TlEntry);
  const int tid = static_cast<int>(threadIdx.x), warp = tid / kWarpSize, lane = tid % kWarpSize;

  // which expert: the blockIdx.y-th one that owns rows, from moe_group's list when given (one
  // load), else from one pass over offsets (all warps, a barrier and a scan)
  int e = -1;
  if (p.active_experts) {
    e = p.active_experts[blockIdx.y];
  } else {
    const int expert_words = ceil_div(p.experts, kWarpSize);
    for (int i = warp; i < expert_words; i += kWarps) {
      const int ex = i * kWarpSize + lane;
      const bool has = ex < p.experts && p.offsets[ex + 1] > p.offsets[ex];
      const unsigned bits = __ballot_sync(kFullMask, has);
      if (lane == 0) owns_rows[i] = bits;
    }
    __syncthreads();
    for (int i = 0, slot = static_cast<int>(blockIdx.y); i < expert_words; ++i) {
      unsigned bits = owns_rows[i];
      const int count = __popc(bits);
      if (slot < count) {
        for (int j = 0; j < slot; ++j) bits &= bits - 1;  // drop the lowest `slot` experts
        e = i * kWarpSize + __ffs(static_cast<int>(bits)) - 1;
        break;
      }
      slot -= count;
    }
  }
  if (e < 0) return;  // fewer experts own rows than there are slots (uniform over the CTA)
  KD_W4_MARK_EXPERT(e);

  const int wn = warp % kWarpsN, wk = warp / kWarpsN;
  const int g = lane / 4, quad = lane % 4;
  const int tiles = ceil_div(p.n, kW4TileRows), chunks = ceil_div(p.k, kW4TileCols);
  const int tile = static_cast<int>(blockIdx.x) * kWarpsN + wn;
  // chunks of this warp's slice (0 for a warp past the last row tile: it still meets the barriers)
  const int my_chunks = tile < tiles && wk < chunks ? ceil_div(chunks - wk, kWarpsK) : 0;
  // this lane's 16 bytes of block j (chunk wk + j * kWarpsK) sit at src[m] + j * kChunkStride
  // (a compile-time stride: in the unrolled loop below every copy's global and shared
  // addresses are a base register plus a constant)
  constexpr int kSlotWords = kMats * kW4BlockWords;
  constexpr int kChunkStride = kWarpsK * kW4BlockWords;
  const uint32_t* src[kMats];
  src[0] = p.w + e * p.w_expert_stride + (static_cast<int64_t>(tile) * chunks + wk) * kW4BlockWords + 4 * lane;
  if constexpr (kSwiglu)
    src[kMats - 1] = p.w_up + e * p.w_expert_stride + (static_cast<int64_t>(tile) * chunks + wk) * kW4BlockWords + 4 * lane;
  // this warp's ring of kStages slots, offset to the lane's own 16 bytes (its copy target)
  uint32_t* const ring = smem + warp * kStages * kSlotWords + 4 * lane;
  const bool scale_lane = lane < kW4ScaleWords / 4;  // lanes 0..3 also copy the 16 scale words
  const __nv_bfloat16* x = static_cast<const __nv_bfloat16*>(p.x);
  // the pass's x rows when staged (kXShared), after the ring / partial-sum area
  __nv_bfloat16* const x_staged = reinterpret_cast<__nv_bfloat16*>(smem + Tile::kSmemBytes / 4);
  const int x_staged_stride = w4_x_stage_stride(p.k);
  // the chunk that reaches past k (k % 64 == 32: its upper 32 columns; see x_back below)
  const int tail_chunk = p.k % kW4TileCols ? chunks - 1 : -1;
  const uint32_t mask2 = kNibbleMask2, magic2 = kBf16x2Magic128;

  // the copies of block `block` (relative to `base`, a compile-time index in the unrolled
  // loop) into ring slot `slot`; a block past the slice copies nothing (src-size 0: no read,
  // the free slot zero-filled), so no branch
  auto issue = [&](const uint32_t* const (&base)[kMats], int block, int slot, bool valid) {
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
      uint32_t* dst = ring + slot * kSlotWords + m * kW4BlockWords;
      const uint32_t* from = base[m] + block * kChunkStride;
      cp_async_16(dst, from, valid);
      if (scale_lane) cp_async_16(dst + kW4WeightWords, from + kW4WeightWords, valid);
    }
  };

  // rows per pass: the tile's, or as many as the staged x has room for (sized by the launch from
  // max_rows_per_expert; an expert with more rows takes more passes, so results never depend on it)
  const int pass_step = kXShared ? x_stage_rows : Tile::kPassRows;
  const int row_begin = p.offsets[e], row_end = p.offsets[e + 1];
  for (int r0 = row_begin; r0 < row_end; r0 += pass_step) {
    const int pass_rows = min(pass_step, row_end - r0);
    const int frags = ceil_div(pass_rows, 8);
    // the weights first: their addresses depend on nothing loaded (the x_row lookups below do).
    // Issuing the first pass's fill before the expert's rows are read (one load earlier) was
    // part of a change measured no faster at n = 1 and slower at n = 8 on the H200: the
    // decode kernels spilled. (Loading x's first batch before the fill was slower too, and the
    // per-CTA timeline showed x ready no sooner: what holds the CTAs for
    // ~4 us at the start is the fill's own issue, which waits while the SMs' first requests,
    // ~14 MB in all, are served)
#pragma unroll
    for (int j = 0; j < kStages - 1; ++j) {
      issue(src, j, j, j < my_chunks);
      cp_async_commit();  // one group per block: the wait below counts groups
    }
    // B operand rows: lane (g, quad) reads grouped row r0 + 8f + g (the last row stands in
    // past the end: its results are not stored), columns 16 quad .. 16 quad + 15 of a chunk;
    // the pointers advance by one chunk of this warp's slice per step
    const __nv_bfloat16* xp[kFrags];
#pragma unroll
    for (int f = 0; f < kFrags; ++f) {
      const int r = min(r0 + 8 * f + g, row_end - 1);
      const int row = p.x_row ? p.x_row[r] : r;
      xp[f] = kXShared ? x_staged + (r - r0) * x_staged_stride : x + row * p.x_stride;
      xp[f] += 16 * quad + wk * kW4TileCols;
    }
    float acc[Tile::kAccs][kMats][kFrags][4] = {};  // chunk class wk + a * kWarpsK in acc[a]

    // everything above read only the weights, offsets and x_row; x may come from the kernel
    // this launch overlaps (p.overlap_previous)
    // (with the slot hand-off and staged x: until this slot's gate/up CTAs have all stored)
    const bool slot_wait = !kSwiglu && p.slot_sync;  // the pair's down launch
    if (r0 == row_begin) {
      if (slot_wait && kXShared) {
        if (tid == 0) {
          while (!slot_done(load_acquire_gpu(slot_sync_word(p, kW4SyncDone)))) poll_pause();
          fence_gpu();
        }
        __syncthreads();
      } else {
        grid_dependency_wait();
      }
    }
    if constexpr (kXShared) {
      // the pass's rows in 16-byte pieces (k % 32 == 0), zeros past k up to the whole chunk,
      // through registers rather than as a cp.async group: a group committed after the ring's
      // fill could only be waited for together with every block of that fill, and the first
      // step needs just block 0 (H200, ncu at n = 1: that wait was 6-8% of the warps' time)
      const int pieces = chunks * (kW4TileCols / 8), inside = p.k / 8, total = pass_rows * pieces;
      for (int i0 = tid; i0 < total; i0 += kW4XStageBatch * kThreads) {
        uint4 v[kW4XStageBatch];
#pragma unroll
        for (int u = 0; u < kW4XStageBatch; ++u) {  // the batch's loads in flight together
          const int i = i0 + u * kThreads, rr = i / pieces, c = i - rr * pieces;
          v[u] = make_uint4(0, 0, 0, 0);
          if (i < total && c < inside) {
            const int row = p.x_row ? p.x_row[r0 + rr] : r0 + rr;
            const __nv_bfloat16* from = x + row * p.x_stride + 8 * c;
            // x written by a gate/up launch that may still run (the hand-off): past this SM's L1
            v[u] = slot_wait ? load_l2_16(from) : *reinterpret_cast<const uint4*>(from);
          }
        }
#pragma unroll
        for (int u = 0; u < kW4XStageBatch; ++u) {
          const int i = i0 + u * kThreads, rr = i / pieces, c = i - rr * pieces;
          if (i < total) *reinterpret_cast<uint4*>(x_staged + rr * x_staged_stride + 8 * c) = v[u];
        }
      }
      __syncthreads();
    }
    if (r0 == row_begin) {
      KD_W4_MARK(kW4TlReady);
      KD_W4_MARK_FIRST_BLOCK(cp_async_wait<kStages - 2>());  // block 0 (waiting twice is harmless)
    }
    // block j sits in slot j % kStages: the loop runs kStages blocks per trip, unrolled;
    // trip_src points at block j0 of the trip
    const uint32_t* trip_src[kMats];
#pragma unroll
    for (int m = 0; m < kMats; ++m) trip_src[m] = src[m];
    // x of block j (loading it a block ahead measured slower: more instructions, no stall
    // saved). In a chunk past k (k % 64 == 32: the last chunk's upper half) lanes 2..3 of each quad
    // read the chunk's lower half instead (kTail): the repacked weights of those columns are
    // exactly 0 (q = 0, scale 0), so the products are too, and no load is predicated. Staged x
    // has zeros there, so only x from global memory needs it. `ahead` is j's distance from the
    // trip's first block (a constant in the unrolled loop).
    auto load_x = [&](uint4 (&dst)[kFrags][2], int j, int ahead, auto tail) {
      int x_back = 0;
      if constexpr (decltype(tail)::value && !kXShared)
        x_back = wk + j * kWarpsK == tail_chunk && quad >= 2 ? kW4TileCols / 2 : 0;
#pragma unroll
      for (int f = 0; f < kFrags; ++f) {
        if (f == 0 || f < frags) {
          const __nv_bfloat16* xs = xp[f] + ahead * (kWarpsK * kW4TileCols) - x_back;
          dst[f][0] = load_x16<kXShared>(xs);
          dst[f][1] = load_x16<kXShared>(xs + 8);
        } else {
          dst[f][0] = dst[f][1] = make_uint4(0, 0, 0, 0);
        }
      }
    };
    // block j = j0 + slot: wait for it, refill the slot read last (if a block is left for it:
    // slot < refills), dequantize and multiply
    auto step = [&](int j, int slot, int refills, auto tail) {
      uint4 xv[kFrags][2];
      load_x(xv, j, slot, tail);
      // block j has landed (kStages - 2 younger groups may still be in flight); after the
      // barrier every lane's copies, the scale words of lanes 0..3 included, are visible and
      // every lane has read slot j - 1, which the next copy refills
      cp_async_wait<kStages - 2>();
      __syncwarp();
      issue(trip_src, slot + kStages - 1, (slot + kStages - 1) % kStages, slot < refills);
      cp_async_commit();
      uint4 wv[kMats];
      uint32_t sv[kMats];
#pragma unroll
      for (int m = 0; m < kMats; ++m) {
        const uint32_t* blk = ring - 4 * lane + slot * kSlotWords + m * kW4BlockWords;  // the block's start
        wv[m] = *reinterpret_cast<const uint4*>(blk + 4 * lane);
        sv[m] = blk[kW4WeightWords + (quad / 2) * 8 + g];
      }
#pragma unroll
      for (int m = 0; m < kMats; ++m) {
        const __nv_bfloat162 scale_g = dup_half(sv[m], false), scale_g8 = dup_half(sv[m], true);
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          const uint32_t word = s == 0 ? wv[m].x : s == 1 ? wv[m].y : s == 2 ? wv[m].z : wv[m].w;
          uint32_t a[4];
          dequant_word(a, word, scale_g, scale_g8, mask2, magic2);
#pragma unroll
          for (int f = 0; f < kFrags; ++f) {
            if (f > 0 && f >= frags) continue;  // frags >= 1: fragment 0 always runs
            const uint4& v = xv[f][s / 2];
            const uint32_t b0 = (s % 2) ? v.z : v.x, b1 = (s % 2) ? v.w : v.y;
            mma_bf16_16816(acc[slot % Tile::kAccs][m][f], a, b0, b1);
          }
        }
      }
    };
    auto next_trip = [&] {
#pragma unroll
      for (int m = 0; m < kMats; ++m) trip_src[m] += kStages * kChunkStride;
#pragma unroll
      for (int f = 0; f < kFrags; ++f) xp[f] += kStages * (kWarpsK * kW4TileCols);
    };
    // whole trips with no per-block bound checks, up to the last block when k has no tail chunk
    // (Kimi's GEMMs: every trip is whole) and else short of it, so that the tail chunk is in the
    // final trip below
    const int whole_end = tail_chunk < 0 ? my_chunks : my_chunks - 1;
    int j0 = 0;
    for (; j0 + kStages <= whole_end; j0 += kStages) {
      const int refills = my_chunks - (kStages - 1) - j0;
#pragma unroll
      for (int slot = 0; slot < kStages; ++slot) step(j0 + slot, slot, refills, std::false_type{});
      next_trip();
    }
#pragma unroll
    for (int slot = 0; slot < kStages; ++slot) {
      if (j0 + slot >= my_chunks) break;
      step(j0 + slot, slot, my_chunks - (kStages - 1) - j0, std::true_type{});
    }
    cp_async_wait<0>();
    KD_W4_MARK(kW4TlLoopEnd);

    // partial sums of the slices -> shared memory (the ring is free once everyone is here)
    __syncthreads();
    // a down CTA under the hand-off counts itself past its wait (it is past its mmas), the old
    // value read at the CTA's end: the round trip overlaps the epilogue, not the mma loop
    const bool count_passed = slot_wait && r0 == row_begin && tid == 0;
    const uint32_t passed_before = count_passed ? atomicAdd(slot_sync_word(p, kW4SyncPassed), 1u) : 0u;
    float* red = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int a = 0; a < Tile::kAccs; ++a)
#pragma unroll
      for (int m = 0; m < kMats; ++m)
#pragma unroll
        for (int f = 0; f < kFrags; ++f) {
          const int cls = wk + a * kWarpsK;
          float* d = red + ((((cls * kWarpsN + wn) * kMats + m) * kFrags + f) * kWarpSize + lane) * 4;
#pragma unroll
          for (int i = 0; i < 4; ++i) d[i] = acc[a][m][f][i];
        }
    __syncthreads();
    // element (row tile, frag, lane, i) of the mma D fragment: output feature 16 tile + g + 8 (i / 2),
    // grouped row r0 + 8 frag + 2 quad + i % 2
    constexpr int kOutputs = kWarpsN * kFrags * kWarpSize * 4;
    __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.out);
    for (int idx = tid; idx < kOutputs; idx += kThreads) {
      const int i = idx % 4, l = (idx / 4) % kWarpSize, f = (idx / (4 * kWarpSize)) % kFrags;
      const int tn = idx / (4 * kWarpSize * kFrags);
      const int col = (static_cast<int>(blockIdx.x) * kWarpsN + tn) * kW4TileRows + l / 4 + 8 * (i / 2);
      const int r = r0 + 8 * f + 2 * (l % 4) + i % 2;
      if (f >= frags || col >= p.n || r >= row_end) continue;
      float sum[kMats];
#pragma unroll
      for (int m = 0; m < kMats; ++m) {
        sum[m] = 0.0f;
        for (int s = 0; s < Tile::kSumClasses; ++s)
          sum[m] += red[((((s * kWarpsN + tn) * kMats + m) * kFrags + f) * kWarpSize + l) * 4 + i];
      }
      float v = sum[0];
      if (kSwiglu) {
        const float gate = round_to<__nv_bfloat16>(sum[0]);
        v = round_to<__nv_bfloat16>(gate / (1.0f + expf(-gate))) * round_to<__nv_bfloat16>(sum[kMats - 1]);
      }
      out[static_cast<int64_t>(r) * p.out_stride + col] = __float2bfloat16_rn(v);
    }
    if (count_passed && passed_before == gridDim.x - 1) {
      // every down CTA of this slot is past its mmas, so every gate/up CTA has counted: rearm
      for (W4SlotSyncPart part : {kW4SyncDone, kW4SyncPassed}) *slot_sync_word(p, part) = 0;
    }
    __syncthreads();  // the next pass reuses the shared memory
  }
  if (kSwiglu && p.slot_sync && tid == 0) {
    // the gate/up side of the hand-off: every thread's stores are behind the barrier above
    const uint32_t total = blockIdx.x == 0 ? gridDim.x << kW4SyncTotalShift : 0u;
    red_release_gpu_add(slot_sync_word(p, kW4SyncDone), total + 1u);
  }
  KD_W4_MARK(kW4TlExit);
}

// A launch's CTA shape and staging, chosen on the host (moe_gemm_w4a16 below).
struct W4Launch {
  int frags = 1;        // 8-row fragments per pass: 1, 2 or 4
  int warps_n = 8;      // row tiles per CTA
  int warps_k = 1;      // k slices per CTA
  int x_stage_rows = 0; // > 0 (frags 1 only): x staged in shared memory, that many rows per pass
};

template <bool kSwiglu, int kWarpsN, int kWarpsK, int kFrags, bool kXShared>
KernelResult launch_moe_w4a16(const MoeW4a16Params& p, int slots, int x_stage_rows, cudaStream_t stream) {
  using Tile = W4Tile<kSwiglu, kWarpsN, kWarpsK, kFrags>;
  const dim3 grid(ceil_div(ceil_div(p.n, kW4TileRows), kWarpsN), slots);
  auto* kernel = moe_w4a16_kernel<kSwiglu, kWarpsN, kWarpsK, kFrags, kXShared>;
  const size_t smem = Tile::kSmemBytes + (kXShared ? w4_x_stage_bytes(p.k, x_stage_rows) : 0);
  if (smem > kW4StaticSmemLimit) {
    const void* fn = reinterpret_cast<const void*>(kernel);
    if (KernelResult r = allow_dynamic_smem(fn, smem, "moe_w4a16_kernel"); !r.ok()) return r;
    // several such CTAs share an SM only with the largest carveout
    if (KernelResult r = prefer_shared_carveout(fn, "moe_w4a16_kernel"); !r.ok()) return r;
  }
  // its error, if any, is the runtime's last error: launch_status reports it
  (void)KD_LAUNCH_OVERLAPPED(p.overlap_previous, kernel, grid, Tile::kThreads, smem, stream, p, x_stage_rows);
  return launch_status("moe_w4a16_kernel launch");
}

template <bool kSwiglu, int kFrags, bool kXShared = false>
KernelResult launch_moe_w4a16_shape(const MoeW4a16Params& p, const W4Launch& l, int slots, cudaStream_t stream) {
  if constexpr (kFrags == 1)
    if (l.warps_k == 4 && l.warps_n == 1)  // 4-warp CTAs of one row tile (cta_warps = 4 with 4 slices)
      return launch_moe_w4a16<kSwiglu, 1, 4, kFrags, kXShared>(p, slots, l.x_stage_rows, stream);
  if (l.warps_k == 4) return launch_moe_w4a16<kSwiglu, 2, 4, kFrags, kXShared>(p, slots, l.x_stage_rows, stream);
  if (l.warps_k == 2) return launch_moe_w4a16<kSwiglu, 4, 2, kFrags, kXShared>(p, slots, l.x_stage_rows, stream);
  if constexpr (kFrags == 1)
    if (l.warps_n == kW4SmallCtaWarps)
      return launch_moe_w4a16<kSwiglu, kW4SmallCtaWarps, 1, kFrags, kXShared>(p, slots, l.x_stage_rows, stream);
  return launch_moe_w4a16<kSwiglu, 8, 1, kFrags, kXShared>(p, slots, l.x_stage_rows, stream);
}

template <bool kSwiglu>
KernelResult launch_moe_w4a16_plan(const MoeW4a16Params& p, const W4Launch& l, int slots, cudaStream_t stream) {
  if (l.frags == 1 && l.x_stage_rows > 0) return launch_moe_w4a16_shape<kSwiglu, 1, true>(p, l, slots, stream);
  if (l.frags == 1) return launch_moe_w4a16_shape<kSwiglu, 1>(p, l, slots, stream);
  if (l.frags == 2) return launch_moe_w4a16_shape<kSwiglu, 2>(p, l, slots, stream);
  return launch_moe_w4a16_shape<kSwiglu, 4>(p, l, slots, stream);
}

// Shared memory of the weight ring (and partial sums) of a launch's CTA
template <bool kSwiglu>
size_t w4_ring_bytes(const W4Launch& l) {
  if (l.warps_k == 4 && l.warps_n == 1) return W4Tile<kSwiglu, 1, 4, 1>::kSmemBytes;
  if (l.warps_k == 4) return W4Tile<kSwiglu, 2, 4, 1>::kSmemBytes;
  if (l.warps_k == 2) return W4Tile<kSwiglu, 4, 2, 1>::kSmemBytes;
  if (l.warps_n == kW4SmallCtaWarps) return W4Tile<kSwiglu, kW4SmallCtaWarps, 1, 1>::kSmemBytes;
  return W4Tile<kSwiglu, 8, 1, 1>::kSmemBytes;
}

// CTAs of an 8-row-tile launch with `smem` bytes each that fit one SM (registers allow
// w4_min_blocks of them)
inline int w4_ctas_per_sm(const DeviceLimits& d, const W4Launch& l, size_t smem) {
  const size_t per_cta = smem + kW4StaticSmemBytes + kSmemReservedPerBlock;
  return std::min<int>(w4_min_blocks(l.warps_n * l.warps_k, 1), static_cast<int>(d.smem_per_sm / per_cta));
}

// kAuto stages x when an SM still holds this many warps (or as many as without staging): on the
// H200 (docs/kernels/moe_w4a16.md) the down GEMM with 8 staged rows (3 CTAs of 8 warps per SM)
// beat x from global memory (4 per SM) by 7-13% at n = 8..128, while a gate/up GEMM with 8 staged
// rows of k = 7168 (1 CTA per SM) lost 30-45%
constexpr int kW4XStageMinWarps = 24;

// Rows of x per pass to stage in shared memory for an 8-row-tile launch of `pass_rows` (the
// host's bound), or 0 to read x from global memory: kAuto stages when the warps per SM stay at
// kW4XStageMinWarps or more (or unchanged); kShared whenever one row fits the block's limit.
template <bool kSwiglu>
KernelResult x_stage_rows_for(const MoeW4a16Params& p, const DeviceLimits& d, const W4Launch& l, int pass_rows,
                              int* out) {
  *out = 0;
  if (l.frags != 1 || p.x_source == W4XSource::kGlobal) return KernelResult::success();
  const size_t ring = w4_ring_bytes<kSwiglu>(l);
  if (p.x_source == W4XSource::kShared) {
    const int room = static_cast<int>((d.smem_optin - ring - kW4StaticSmemBytes) / w4_x_stage_bytes(p.k, 1));
    if (room < 1)
      return KernelResult::over_limit("moe_gemm_w4a16: x_source kShared: one x row of k " + std::to_string(p.k) +
                                      " does not fit the device's shared memory");
    *out = std::min(pass_rows, room);
    return KernelResult::success();
  }
  const int warps = l.warps_n * l.warps_k;
  const size_t staged = w4_x_stage_bytes(p.k, pass_rows);
  const int with = w4_ctas_per_sm(d, l, ring + staged) * warps, without = w4_ctas_per_sm(d, l, ring) * warps;
  if (ring + staged + kW4StaticSmemBytes <= static_cast<size_t>(d.smem_optin) &&
      with >= std::min(without, kW4XStageMinWarps))
    *out = pass_rows;
  return KernelResult::success();
}

// A 1-slice launch of the 8-row tile whose 8-warp CTAs would fill fewer than this many waves
// runs 4-warp CTAs instead: twice the CTAs spread the rows evenly over the SMs (Kimi's decode
// down GEMM: 448 CTAs of 8 warps put 4 on some SMs and 3 on the rest; 896 of 4 put 6 or 7),
// unless the pair hands off per slot (moe_gemm_w4a16 says why)
constexpr double kW4SmallGridWaves = 2.0;

// Slices of the down GEMM under the slot hand-off when not forced: its CTAs of a late slot start
// their mmas when the slot's last gate/up CTA has stored, with only their ring's fill landed, and
// with one slice each warp then streams the other 3/4 of its 32 chunks (Kimi, k = 2048) at the
// loaded memory system's round trips; with 2 slices half of them, in twice the CTAs (faster on
// the H200: docs/kernels/moe_w4a16.md).
constexpr int kW4HandOffDownSlices = 2;

// slices for k input columns when not forced (see kW4MinChunksPerSlice)
inline int auto_k_slices(int k) {
  const int chunks = ceil_div(k, kW4TileCols);
  for (int slices = 4; slices > 1; slices /= 2)
    if (chunks >= slices * kW4MinChunksPerSlice) return slices;
  return 1;
}

}  // namespace kern

KernelResult moe_gemm_w4a16(const MoeW4a16Params& p, cudaStream_t stream) {
  if (KernelResult r = check_moe_w4a16_params(p); !r.ok()) return r;
  if (p.rows == 0) return KernelResult::success();
  if (p.experts > kMoeMaxExperts)
    return KernelResult::over_limit("moe_gemm_w4a16: " + std::to_string(p.experts) + " experts, more than " +
                                    std::to_string(kMoeMaxExperts));
  // An expert owns at most `most` rows. max_rows_per_expert is the host's bound (tokens), not
  // the routing's real load, which at decode and verify sizes is a few rows per expert: there
  // the 8-row tile wins (H200, one Kimi layer, docs/kernels/moe_w4a16.md: faster than the 16-
  // and 32-row tiles the bound picked at n = 16..128, a tie at n <= 8). Above
  // kW4SmallTileMaxTokens (prefill chunks, unmeasured) a tile that covers the bound reads the
  // weights once.
  const int most = p.max_rows_per_expert > 0 ? std::min(p.max_rows_per_expert, p.rows) : p.rows;
  // both launches of the pair decide alike: the gate/up's features are the down's inputs, and
  // its CTAs per slot are at most its row tiles
  const int pair_features = p.w_up ? p.n : p.k;
  if (p.slot_sync && (most > kW4SlotSyncMaxRows || kern::ceil_div(pair_features, kW4TileRows) > kW4SlotSyncMaxCtas)) {
    MoeW4a16Params q = p;
    q.slot_sync = nullptr;
    return moe_gemm_w4a16(q, stream);
  }
  const int auto_rows = most <= kW4SmallTileMaxTokens ? std::min(most, 8) : most;
  const int pass_rows = p.row_tile != W4RowTile::kAuto ? static_cast<int>(p.row_tile) : auto_rows;
  const int slots = std::min(p.experts, p.rows);  // experts that can own rows
  int slices = p.k_slices ? p.k_slices : kern::auto_k_slices(p.k);
  // (the slices must leave each warp whole chunks: chunks >= slices)
  if (!p.k_slices && p.slot_sync && !p.w_up && kern::ceil_div(p.k, kW4TileCols) >= kern::kW4HandOffDownSlices)
    slices = std::max(slices, kern::kW4HandOffDownSlices);
  DeviceLimits d;
  if (KernelResult r = current_device_limits(&d); !r.ok()) return r;
  kern::W4Launch l;
  l.frags = pass_rows <= 8 ? 1 : pass_rows <= 16 ? 2 : 4;
  l.warps_k = slices;
  l.warps_n = kern::kW4Warps / slices;
  if (l.frags == 1 && slices == 4 && p.cta_warps == kern::kW4SmallCtaWarps) l.warps_n = 1;  // one tile x 4 slices
  if (l.frags == 1 && slices == 1) {
    bool small_ctas = p.cta_warps == kern::kW4SmallCtaWarps;
    // auto picks by waves, but under the slot hand-off 8-warp CTAs stay: the down GEMM alone is
    // slower with them, the layer faster, since fewer, larger down CTAs overlap the gate/up tail
    // better (H200, one Kimi layer at n = 1: docs/kernels/moe_w4a16.md)
    if (p.cta_warps == 0 && !p.slot_sync) {
      const double ctas = static_cast<double>(kern::ceil_div(kern::ceil_div(p.n, kW4TileRows), l.warps_n)) * slots;
      const double waves = ctas / (static_cast<double>(d.sms) * kern::w4_min_blocks(kern::kW4Warps, 1));
      small_ctas = waves < kern::kW4SmallGridWaves;
    }
    if (small_ctas) l.warps_n = kern::kW4SmallCtaWarps;
  }
  if (KernelResult r = p.w_up ? kern::x_stage_rows_for<true>(p, d, l, pass_rows, &l.x_stage_rows)
                              : kern::x_stage_rows_for<false>(p, d, l, pass_rows, &l.x_stage_rows);
      !r.ok())
    return r;
  return p.w_up ? kern::launch_moe_w4a16_plan<true>(p, l, slots, stream)
                : kern::launch_moe_w4a16_plan<false>(p, l, slots, stream);
}

KernelResult moe_w4a16_repack(const int32_t* weight_packed, const uint16_t* weight_scale, int n, int k,
                              uint32_t* dst) {
  if (n < 1 || k < 1 || k % kW4GroupSize)
    return KernelResult::invalid("moe_w4a16_repack: n " + std::to_string(n) + " must be >= 1 and k " +
                                 std::to_string(k) + " a positive multiple of " + std::to_string(kW4GroupSize));
  if (!weight_packed || !weight_scale || !dst) return KernelResult::invalid("moe_w4a16_repack: null pointer");
  constexpr uint32_t kZeroNibble = 8;  // q = 0 in padding
  const int64_t words_per_row = k / 8, scales_per_row = k / kW4GroupSize;
  const int tiles = kern::ceil_div(n, kW4TileRows), chunks = kern::ceil_div(k, kW4TileCols);
  auto nibble = [&](int row, int col) -> uint32_t {
    if (row >= n || col >= k) return kZeroNibble;
    const uint32_t word = static_cast<uint32_t>(weight_packed[row * words_per_row + col / 8]);
    return (word >> (4 * (col % 8))) & 0xfu;
  };
  auto scale = [&](int row, int group) -> uint32_t {
    return row < n && group < scales_per_row ? weight_scale[row * scales_per_row + group] : 0u;
  };
  for (int t = 0; t < tiles; ++t)
    for (int c = 0; c < chunks; ++c) {
      uint32_t* blk = dst + (static_cast<int64_t>(t) * chunks + c) * kW4BlockWords;
      for (int lane = 0; lane < kern::kWarpSize; ++lane) {
        const int g = lane / 4, quad = lane % 4;
        for (int s = 0; s < 4; ++s) {
          uint32_t word = 0;
          for (int pos = 0; pos < 8; ++pos) {
            const int i = pos % 4, half = pos / 4;
            const int row = t * kW4TileRows + g + 8 * (i % 2);
            const int col = c * kW4TileCols + 16 * quad + 4 * s + 2 * (i / 2) + half;
            word |= nibble(row, col) << (4 * pos);
          }
          blk[4 * lane + s] = word;
        }
      }
      for (int h = 0; h < 2; ++h)
        for (int g = 0; g < 8; ++g) {
          const int row = t * kW4TileRows + g, group = 2 * c + h;
          blk[kW4WeightWords + 8 * h + g] = scale(row, group) | (scale(row + 8, group) << 16);
        }
    }
  return KernelResult::success();
}

}  // namespace kdtree
