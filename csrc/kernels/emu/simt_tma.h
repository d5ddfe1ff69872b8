// Hopper's mbarriers and tiled bulk tensor copies (TMA: cp.async.bulk.tensor) on the SIMT
// emulator (simt_emulator.h), for kernels that load shared memory through a tensor map.
//
// A tensor map here is an emulator-side description (TensorMap: base, sizes, byte strides,
// box, swizzle), encoded with the checks cuTensorMapEncodeTiled makes, standing in for the
// driver's opaque CUtensorMap (kernels/tma_map.h picks one or the other). A copy of a box
// reads the global tensor (coordinates outside it read as zero, and count towards the bytes
// delivered, as on the GPU) and writes it densely from its shared-memory destination, the
// 16-byte chunks of each swizzle span permuted by the address bits above them, exactly as
// kdemu::wgmma reads them back.
//
// Timing, made adversarial for the two mistakes a TMA pipeline can make: at issue a copy
// fills its destination with 0xFF (bf16 NaN), so a read of a buffer that is being refilled
// (a missing release) sees NaN; its data lands only when its mbarrier phase completes, which
// the emulator settles at the latest moment a thread can observe it (a wait on that phase), so
// a read before the wait sees NaN too. A phase whose expect_tx bytes no copy delivers leaves
// its waiters blocked: run_block reports that deadlock; copies never waited for are reported
// at the end of the block.
#pragma once

#include <cstdint>
#include <cstring>

#include "simt_emulator.h"

namespace kdemu {

constexpr int kTensorMapMaxRank = 5;

struct TensorMap {
  const uint8_t* base = nullptr;
  int rank = 0, elem_bytes = 0, swizzle_bytes = 0;  // swizzle 0 (none), 32, 64 or 128
  uint64_t dims[kTensorMapMaxRank] = {};            // elements per dimension, dimension 0 contiguous
  uint64_t strides[kTensorMapMaxRank] = {};         // bytes between consecutive indices (strides[0] = elem_bytes)
  uint32_t box[kTensorMapMaxRank] = {};             // elements a copy moves along each dimension
};

// The tiled encoding with cuTensorMapEncodeTiled's rules (interleave none, element strides 1).
// `strides` holds the byte strides of dimensions 1 .. rank-1. Returns null, or what is wrong.
inline const char* encode_tensor_map(TensorMap* m, int elem_bytes, int rank, const void* base, const uint64_t* dims,
                                     const uint64_t* strides, const uint32_t* box, int swizzle_bytes) {
  constexpr uint64_t kMaxDim = uint64_t{1} << 32, kMaxStride = uint64_t{1} << 40;
  constexpr uint32_t kMaxBox = 256, kAlign = 16;
  if (rank < 1 || rank > kTensorMapMaxRank) return "rank outside 1..5";
  if (reinterpret_cast<uintptr_t>(base) % kAlign != 0) return "global address not 16-byte aligned";
  if (swizzle_bytes != 0 && swizzle_bytes != 32 && swizzle_bytes != 64 && swizzle_bytes != 128) return "unknown swizzle";
  TensorMap out;
  out.base = static_cast<const uint8_t*>(base);
  out.rank = rank;
  out.elem_bytes = elem_bytes;
  out.swizzle_bytes = swizzle_bytes;
  out.strides[0] = static_cast<uint64_t>(elem_bytes);
  for (int d = 0; d < rank; ++d) {
    if (dims[d] == 0 || dims[d] > kMaxDim) return "a dimension is 0 or over 2^32";
    if (box[d] == 0 || box[d] > kMaxBox) return "a box dimension is 0 or over 256";
    if (d > 0 && (strides[d - 1] % kAlign != 0 || strides[d - 1] >= kMaxStride))
      return "a stride is not a multiple of 16 bytes or not below 2^40";
    out.dims[d] = dims[d];
    out.box[d] = box[d];
    if (d > 0) out.strides[d] = strides[d - 1];
  }
  const uint32_t inner = box[0] * static_cast<uint32_t>(elem_bytes);
  if (inner % kAlign != 0) return "the box's inner dimension is not a multiple of 16 bytes";
  if (swizzle_bytes != 0 && inner > static_cast<uint32_t>(swizzle_bytes)) return "the box's inner dimension exceeds the swizzle span";
  *m = out;
  return nullptr;
}

inline Mbarrier& mbarrier_at(const void* bar) {
  auto& all = current_block()->mbarriers;
  auto it = all.find(bar);
  if (it == all.end() || it->second.expected == 0) fatal("mbarrier used before mbarrier.init");
  return it->second;
}

// Completes the current phase if it can: every arrival in, then the queued copies land; the
// phase ends when they delivered exactly the announced bytes. Wakes that phase's waiters.
inline void mbarrier_settle(const void* bar, Mbarrier& m) {
  if (m.pending > 0) return;
  for (auto& land : m.in_flight) m.tx -= land();
  m.in_flight.clear();
  if (m.tx < 0) fatal("mbarrier: copies delivered more bytes than expect_tx announced");
  if (m.tx > 0) return;  // bytes still announced: the copies that bring them are not issued yet
  const int done = m.phase;
  m.phase ^= 1;
  m.pending = m.expected;
  for (Fiber& f : current_block()->fibers)
    if (f.state == State::kWaitMbarrier && f.mbar == bar && f.mbar_parity == done) f.state = State::kRunnable;
}

inline bool mbarrier_has_waiters(const void* bar) {
  for (const Fiber& f : current_block()->fibers)
    if (f.state == State::kWaitMbarrier && f.mbar == bar) return true;
  return false;
}

// mbarrier.init.shared.b64 [bar], count
inline void mbarrier_init(void* bar, int count) {
  if (reinterpret_cast<uintptr_t>(bar) % 8 != 0) fatal("mbarrier not 8-byte aligned");
  if (count < 1) fatal("mbarrier.init with an arrival count below 1");
  Mbarrier m;
  m.expected = m.pending = count;
  current_block()->mbarriers[bar] = std::move(m);
}

// mbarrier.arrive[.expect_tx].shared.b64 _, [bar], bytes
inline void mbarrier_arrive(void* bar, uint32_t tx_bytes) {
  Mbarrier& m = mbarrier_at(bar);
  if (m.pending == 0) fatal("mbarrier: more arrivals than its count in one phase");
  m.tx += tx_bytes;
  --m.pending;
  // A phase with no bytes outstanding completes at its last arrival; one with copies stays
  // open until a thread waits on it (its copies land as late as the GPU may land them).
  if (m.pending == 0 && ((m.tx == 0 && m.in_flight.empty()) || mbarrier_has_waiters(bar))) mbarrier_settle(bar, m);
}

// mbarrier.try_wait.parity in a loop: returns once the phase of this parity has completed.
inline void mbarrier_wait_parity(void* bar, int parity) {
  check_not_flat("mbarrier wait in a kernel launched flat (KD_LAUNCH_FLAT): launch it with KD_LAUNCH");
  Mbarrier& m = mbarrier_at(bar);
  if (m.phase != (parity & 1)) return;  // the phase of that parity completed already
  mbarrier_settle(bar, m);
  if (m.phase != (parity & 1)) return;
  Fiber* f = current_fiber();
  f->state = State::kWaitMbarrier;
  f->mbar = bar;
  f->mbar_parity = parity & 1;
  yield();
}

// cp.async.bulk.tensor.Nd.shared.global.tile.mbarrier::complete_tx::bytes [dst], [map, coords], [bar]
inline void tma_load(void* dst, const TensorMap* map, void* bar, const int* coords) {
  const TensorMap m = *map;
  if (m.rank == 0) fatal("bulk tensor copy through a tensor map that was never encoded");
  constexpr uint32_t kDstAlign = 128;  // the PTX rule for the shared-memory destination
  const uint32_t dst_off = shared_offset(dst);
  if (dst_off % kDstAlign != 0) fatal("bulk tensor copy: shared-memory destination not 128-byte aligned");
  uint64_t elems = 1;
  for (int d = 0; d < m.rank; ++d) elems *= m.box[d];
  const uint64_t bytes = elems * static_cast<uint64_t>(m.elem_bytes);
  Block* b = current_block();
  if (dst_off + bytes > b->dyn_smem.size()) fatal("bulk tensor copy beyond the dynamic shared memory");
  std::memset(b->dyn_smem.data() + dst_off, 0xFF, bytes);  // poison until it lands
  int c[kTensorMapMaxRank] = {};
  for (int d = 0; d < m.rank; ++d) c[d] = coords[d];
  Mbarrier& mb = mbarrier_at(bar);
  mb.in_flight.push_back([m, c, dst_off, bytes, b]() -> int64_t {
    const uint32_t span_mask = m.swizzle_bytes ? static_cast<uint32_t>(m.swizzle_bytes / 16 - 1) : 0u;
    const uint32_t eb = static_cast<uint32_t>(m.elem_bytes);
    for (uint64_t e = 0; e < bytes / eb; ++e) {
      // element e of the box, dimension 0 fastest
      uint64_t rest = e, src = 0;
      bool inside = true;
      for (int d = 0; d < m.rank; ++d) {
        const int64_t idx = static_cast<int64_t>(c[d]) + static_cast<int64_t>(rest % m.box[d]);
        rest /= m.box[d];
        if (idx < 0 || idx >= static_cast<int64_t>(m.dims[d])) inside = false;
        else src += static_cast<uint64_t>(idx) * m.strides[d];
      }
      uint32_t addr = dst_off + static_cast<uint32_t>(e * eb);
      addr ^= ((addr >> 7) & span_mask) << 4;  // the swizzle: chunk bits [4, 7) ^= bits [7, 10)
      if (inside) std::memcpy(b->dyn_smem.data() + addr, m.base + src, eb);
      else std::memset(b->dyn_smem.data() + addr, 0, eb);
    }
    return static_cast<int64_t>(bytes);
  });
  if (mbarrier_has_waiters(bar)) mbarrier_settle(bar, mb);
}

// cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [src], bytes, [bar]:
// `bytes` contiguous bytes of global memory into shared memory, reported to bar as a box is.
inline void bulk_copy(void* dst, const void* src, uint32_t bytes, void* bar) {
  constexpr uint32_t kAlign = 16;  // the PTX rule for both addresses and the size
  const uint32_t dst_off = shared_offset(dst);
  if (dst_off % kAlign != 0 || reinterpret_cast<uintptr_t>(src) % kAlign != 0 || bytes % kAlign != 0 || bytes == 0)
    fatal("bulk copy: an address or the size not a multiple of 16 bytes");
  Block* b = current_block();
  if (dst_off + bytes > b->dyn_smem.size()) fatal("bulk copy beyond the dynamic shared memory");
  std::memset(b->dyn_smem.data() + dst_off, 0xFF, bytes);  // poison until it lands
  const uint8_t* from = static_cast<const uint8_t*>(src);
  Mbarrier& mb = mbarrier_at(bar);
  mb.in_flight.push_back([from, dst_off, bytes, b]() -> int64_t {
    std::memcpy(b->dyn_smem.data() + dst_off, from, bytes);
    return static_cast<int64_t>(bytes);
  });
  if (mbarrier_has_waiters(bar)) mbarrier_settle(bar, mb);
}

}  // namespace kdemu
