// A host emulator of the CUDA SIMT model, so the kernels in csrc/kernels run on a CPU.
//
// Why: development and CI machines have no GPU. Compiling a kernel's device code with g++
// against this header (KD_SIMT_EMULATION) runs the very same source on the CPU: indexing,
// barriers, warp collectives and the tensor-core fragment layouts are all exercised against
// the Python references before any GPU time is spent.
//
// How: every CUDA thread of a block is a fiber on one OS thread (a "carrier": one stack per
// thread index, reused by every block and launch). A fiber runs until it reaches a barrier
// (__syncthreads, a named barrier) or a warp collective (shuffle, ballot, ldmatrix, mma),
// where it yields; the barrier releases when every live thread has arrived.
// Blocks run one after another, so `__shared__` (defined as `static`) is the block's shared
// memory. Deterministic and single-threaded: a missing barrier is NOT detected here (run
// compute-sanitizer racecheck on the GPU for that), but wrong indexing, a barrier not every
// thread reaches (deadlock, reported) and a warp collective with exited lanes (reported) are.
//
// Limits: warp collectives must be called by all 32 lanes (full mask) in the same order;
// cp.async copies happen at issue; atomics are plain read-modify-writes (one OS thread).
// Hopper's mbarriers and bulk tensor copies (TMA) are emulated in emu/simt_tma.h: a copy
// poisons its destination at issue and lands when its mbarrier phase is waited for.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <vector>

namespace kdemu {

constexpr int kWarpSize = 32;
constexpr size_t kFiberStackBytes = 256 * 1024;  // kernels keep big register arrays on it
constexpr int kNamedBarriers = 16;               // bar.sync ids 0..15, as on the GPU

// ---- context switch ---------------------------------------------------------------------
//
// A thread of a block yields at every barrier and warp collective, so the switch is the
// emulator's inner loop. On x86-64 it is a few instructions: push the callee-saved registers,
// swap stack pointers, pop (setjmp/longjmp cost several times as much, mostly glibc's
// unwinding checks). The SSE/x87 control words are not switched: no kernel changes them.
// Elsewhere, ucontext's swapcontext.
#if defined(__x86_64__)
struct Context {
  void* sp = nullptr;
};
// runtime/simt_support.cpp (optimised: this is the emulator's inner loop)
extern "C" void kdemu_switch_context(void** save_sp, void* load_sp);
inline void switch_context(Context* save, const Context* load) { kdemu_switch_context(&save->sp, load->sp); }
// A context that starts `entry` on [stack, stack + bytes): the frame kdemu_switch_context
// pops (six registers, return address = entry) under a null return address, so entry starts
// with the stack aligned as after a call.
inline void make_context(Context* c, char* stack, size_t bytes, void (*entry)()) {
  auto top = reinterpret_cast<uintptr_t>(stack + bytes) & ~static_cast<uintptr_t>(15);
  auto* slot = reinterpret_cast<uint64_t*>(top);
  *--slot = 0;                                    // entry's return address: it never returns
  *--slot = reinterpret_cast<uint64_t>(entry);    // popped by ret
  for (int r = 0; r < 6; ++r) *--slot = 0;        // rbp rbx r12..r15
  c->sp = slot;
}
#else
struct Context {
  ucontext_t uc;
};
inline void switch_context(Context* save, const Context* load) { swapcontext(&save->uc, &load->uc); }
inline void make_context(Context* c, char* stack, size_t bytes, void (*entry)()) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack;
  c->uc.uc_stack.ss_size = bytes;
  c->uc.uc_link = nullptr;
  makecontext(&c->uc, entry, 0);
}
#endif

enum class State { kRunnable, kWaitBlock, kWaitNamed, kWaitWarp, kWaitMbarrier, kWaitCluster, kDone };

struct Fiber {
  State state = State::kRunnable;
  uint3 tid{0, 0, 0};
  int linear = 0;  // linear thread index in the block
  int warp = 0, lane = 0;
  int warp_gen = 0;  // number of warp collectives this lane has entered (selects a slot bank)
  int bar_id = -1;   // the named barrier this thread waits at
  int or_gen = 0;    // __syncthreads_or calls made (selects an accumulator slot)
  const void* mbar = nullptr;  // the mbarrier this thread waits on (kWaitMbarrier) ...
  int mbar_parity = 0;         // ... for the completion of the phase of this parity
};

// An mbarrier (PTX mbarrier.*: arrival counts, and on sm_90 transaction bytes), kept beside
// the block by its address (emu/simt_tma.h runs it). A phase completes when every expected
// arrival came and the bytes announced by expect_tx were delivered; the copies that deliver
// them wait in `in_flight` until then (each lands its data and returns its bytes).
struct Mbarrier {
  int expected = 0;  // arrivals a phase takes
  int pending = 0;   // arrivals the current phase still needs
  int64_t tx = 0;    // bytes announced and not yet delivered
  int phase = 0;     // parity of the current (incomplete) phase
  std::vector<std::function<int64_t()>> in_flight;
};

struct WarpState {
  int arrived = 0;
  int gen = 0;  // completed collectives
  // two banks of exchange slots: a lane may enter collective k+1 before a slow lane has
  // read the slots of collective k, but never collective k+2 (k+1 waits for everyone).
  uint64_t slots[2][kWarpSize][16];
  // A tensor-core collective's operands, unpacked once per collective by its first lane to
  // run after the exchange (every lane of a warp needs the same A and B; unpacking them per
  // lane was most of the emulated engine's time). `decoded` is the warp_gen it holds.
  int decoded = -1;
  std::vector<float> scratch;
};

struct Carrier;  // a thread index's stack and context (below)
struct Block;

// A thread block cluster (launch_cluster): its blocks, by rank, run together on this OS thread,
// one at a time until each waits at the cluster barrier or ends.
struct Cluster {
  std::vector<Block*> blocks;  // by rank (x fastest, as %cluster_ctarank)
};

struct Block {
  std::vector<Fiber> fibers;
  std::vector<WarpState> warps;
  int live = 0;
  int block_arrived = 0;
  int named_arrived[kNamedBarriers] = {};
  int named_expected[kNamedBarriers] = {};
  std::vector<uint8_t> dyn_smem;
  std::function<void()> body;
  Context sched;  // the scheduler (run_block), while a thread runs
  const std::unique_ptr<Carrier>* carriers = nullptr;  // this OS thread's, by thread index (run_block)
  std::map<const void*, Mbarrier> mbarriers;  // by shared-memory address (emu/simt_tma.h)
  int current = -1;
  bool flat = false;  // launched with launch_flat: threads run one after another, no fibers
  Cluster* cluster = nullptr;  // launched with launch_cluster: the block's cluster ...
  int cluster_rank = 0;        // ... and its rank there
  int cluster_arrived = 0;     // threads waiting at the cluster barrier
  uint3 block_idx{0, 0, 0};
  dim3 grid{1, 1, 1}, block{1, 1, 1};
};

inline Block*& current_block() {
  static Block* b = nullptr;
  return b;
}
inline Fiber* current_fiber() { return &current_block()->fibers[current_block()->current]; }

[[noreturn]] inline void fatal(const char* what) {
  Block* b = current_block();
  if (b && b->current >= 0) {
    const Fiber& f = b->fibers[b->current];
    std::fprintf(stderr, "simt emulator: %s (block %u,%u,%u thread %u,%u,%u)\n", what, b->block_idx.x,
                 b->block_idx.y, b->block_idx.z, f.tid.x, f.tid.y, f.tid.z);
  } else {
    std::fprintf(stderr, "simt emulator: %s\n", what);
  }
  std::abort();
}

inline void pass_on(Carrier* c, Block* b);  // below

// The calling thread waits (its state says for what): the next runnable thread runs.
inline void yield() {
  Block* b = current_block();
  pass_on(b->carriers[b->current].get(), b);
}

// A carrier runs thread index `i` of every block, on its own stack, for the life of the OS
// thread: it starts once and then parks between blocks, so starting a block's threads costs
// one switch each, like resuming them.
struct Carrier {
  std::unique_ptr<char[]> stack{new char[kFiberStackBytes]};
  Context ctx;
  bool started = false;
};

// This OS thread's carriers, at least `threads` of them (each stays put as the list grows).
inline const std::unique_ptr<Carrier>* carriers(int threads) {
  thread_local std::vector<std::unique_ptr<Carrier>> all;
  while (static_cast<int>(all.size()) < threads) all.emplace_back(new Carrier);
  return all.data();
}

inline void carrier_main();

// Switch from `from` (the carrier running now, or the scheduler) to thread `next` of b.
inline void switch_to(Context* from, Block* b, int next) {
  Carrier* to = b->carriers[next].get();
  if (!to->started) {
    to->started = true;
    make_context(&to->ctx, to->stack.get(), kFiberStackBytes, carrier_main);
  }
  b->current = next;
  switch_context(from, &to->ctx);
}

// Hand the OS thread from carrier c straight to the next runnable thread after it, in index
// order (one switch, not two through the scheduler), or back to the scheduler when none is
// (the block finished or is deadlocked). Returns when something switches back to c.
inline void pass_on(Carrier* c, Block* b) {
  const int n = static_cast<int>(b->fibers.size());
  for (int k = 1; k <= n; ++k) {
    const int i = (b->current + k) % n;
    if (b->fibers[i].state == State::kRunnable) {
      switch_to(&c->ctx, b, i);
      return;
    }
  }
  b->current = -1;
  switch_context(&c->ctx, &b->sched);
}

inline void maybe_release_block(Block* b);

inline void carrier_main() {
  Carrier* c = current_block()->carriers[current_block()->current].get();
  for (;;) {
    Block* b = current_block();
    b->body();
    current_fiber()->state = State::kDone;
    --b->live;
    maybe_release_block(b);  // an exit may complete a block barrier
    pass_on(c, b);           // resumed as the same thread index of a later block
  }
}

// Release a block barrier whose arrivals now cover every live thread.
inline void maybe_release_block(Block* b) {
  if (b->block_arrived > 0 && b->block_arrived == b->live) {
    b->block_arrived = 0;
    for (Fiber& f : b->fibers)
      if (f.state == State::kWaitBlock) f.state = State::kRunnable;
  }
}

// A kernel launched flat (launch_flat) promised to use no barrier and no warp collective.
inline void check_not_flat(const char* what) {
  if (current_block()->flat) fatal(what);
}

inline void syncthreads() {
  check_not_flat("__syncthreads in a kernel launched flat (KD_LAUNCH_FLAT): launch it with KD_LAUNCH");
  Block* b = current_block();
  Fiber* f = current_fiber();
  ++b->block_arrived;
  f->state = State::kWaitBlock;
  maybe_release_block(b);
  if (f->state != State::kRunnable) yield();
}

// __syncthreads_or: a barrier that also returns whether any thread's predicate was true.
inline int syncthreads_or(int pred) {
  static int acc[2] = {0, 0};  // slot of call g is g % 2; thread 0 clears it after everyone read
  Fiber* f = current_fiber();
  const int mine = f->or_gen++ & 1;
  if (pred) acc[mine] = 1;
  syncthreads();
  const int result = acc[mine];
  syncthreads();
  if (current_fiber()->linear == 0) acc[mine] = 0;
  return result;
}

// bar.sync id, count: `count` threads (a multiple of 32) meet at barrier `id`.
inline void named_barrier(int id, int count) {
  check_not_flat("named barrier in a kernel launched flat (KD_LAUNCH_FLAT): launch it with KD_LAUNCH");
  Block* b = current_block();
  Fiber* f = current_fiber();
  if (id < 0 || id >= kNamedBarriers) fatal("named barrier id out of range");
  if (b->named_arrived[id] == 0) b->named_expected[id] = count;
  if (b->named_expected[id] != count) fatal("named barrier used with different thread counts");
  ++b->named_arrived[id];
  f->state = State::kWaitNamed;
  f->bar_id = id;
  if (b->named_arrived[id] == count) {
    b->named_arrived[id] = 0;
    for (Fiber& g : b->fibers)
      if (g.state == State::kWaitNamed && g.bar_id == id) g.state = State::kRunnable;
  }
  if (f->state != State::kRunnable) yield();
}

// bar.arrive id, count: counts towards barrier `id` like bar.sync but does not wait (a
// producer signalling consumers that wait with bar.sync id, count).
inline void named_barrier_arrive(int id, int count) {
  check_not_flat("named barrier in a kernel launched flat (KD_LAUNCH_FLAT): launch it with KD_LAUNCH");
  Block* b = current_block();
  if (id < 0 || id >= kNamedBarriers) fatal("named barrier id out of range");
  if (b->named_arrived[id] == 0) b->named_expected[id] = count;
  if (b->named_expected[id] != count) fatal("named barrier used with different thread counts");
  if (++b->named_arrived[id] == count) {
    b->named_arrived[id] = 0;
    for (Fiber& g : b->fibers)
      if (g.state == State::kWaitNamed && g.bar_id == id) g.state = State::kRunnable;
  }
}

inline void check_warp_complete(Block* b, int warp) {
  for (int l = 0; l < kWarpSize; ++l) {
    const int idx = warp * kWarpSize + l;
    if (idx >= static_cast<int>(b->fibers.size()) || b->fibers[idx].state == State::kDone)
      fatal("warp collective while some lanes of the warp have exited or do not exist");
  }
}

// Enter a warp collective: deposit `n` words, wait for all 32 lanes, return the slot bank
// holding every lane's words.
inline uint64_t (*warp_exchange(const uint64_t* mine, int n))[16] {
  check_not_flat("warp collective in a kernel launched flat (KD_LAUNCH_FLAT): launch it with KD_LAUNCH");
  Block* b = current_block();
  Fiber* f = current_fiber();
  WarpState& w = b->warps[f->warp];
  const int bank = f->warp_gen & 1;
  ++f->warp_gen;
  for (int i = 0; i < n; ++i) w.slots[bank][f->lane][i] = mine[i];
  const int first = f->warp * kWarpSize;
  // The first lane in checks that the whole warp is there; a lane that exits after that
  // leaves the collective waiting, which run_block's deadlock report names.
  if (w.arrived == 0) check_warp_complete(b, f->warp);
  ++w.arrived;
  f->state = State::kWaitWarp;
  if (w.arrived == kWarpSize) {
    w.arrived = 0;
    ++w.gen;
    for (int l = 0; l < kWarpSize; ++l)
      if (b->fibers[first + l].state == State::kWaitWarp) b->fibers[first + l].state = State::kRunnable;
  }
  if (f->state != State::kRunnable) yield();
  return w.slots[bank];
}

// At a block's end: every bulk copy it issued was waited for.
inline void check_copies_landed(const Block& b) {
  for (const auto& [addr, m] : b.mbarriers)
    if (!m.in_flight.empty()) fatal("bulk copies still in flight when the block ended: nobody waited on their mbarrier");
}

inline void run_block(Block& b) {
  current_block() = &b;
  const int n = static_cast<int>(b.fibers.size());
  b.carriers = carriers(n);
  // Thread 0 starts; the threads pass the OS thread on among themselves (pass_on) until
  // none is runnable. Then every thread is done, or the rest wait for ever.
  switch_to(&b.sched, &b, 0);
  if (b.live > 0) {
    for (int i = 0; i < n; ++i)
      if (b.fibers[i].state == State::kWaitWarp) {
        b.current = i;
        check_warp_complete(&b, b.fibers[i].warp);
      }
    for (int i = 0; i < n; ++i)
      if (b.fibers[i].state == State::kWaitMbarrier) {
        b.current = i;
        fatal("deadlock: a thread waits on an mbarrier phase that never completes (an arrival missing, or "
              "expect_tx bytes that no copy delivers)");
      }
    b.current = 0;
    for (int i = 0; i < n; ++i)
      if (b.fibers[i].state != State::kDone) {
        b.current = i;
        break;
      }
    fatal("deadlock: threads wait at a barrier that the others never reach");
  }
  check_copies_landed(b);
  current_block() = nullptr;
}

// ---- thread block clusters (sm_90): launch_cluster ----------------------------------------
//
// The blocks of a cluster run on this OS thread like the threads of a block: each block runs
// (its own carriers, so that a block can stop mid-body) until none of its threads is runnable;
// the cluster barrier releases when every live thread of every block of the cluster has
// arrived. Another block's shared memory (distributed shared memory) is its dynamic shared
// memory at the same offset: a cluster kernel keeps what its peers read there (`__shared__`
// variables are this emulator's statics, shared by every block).

// barrier.cluster.arrive + wait (cooperative_groups' cluster.sync()); in a block launched
// without a cluster (a cluster of one), the block barrier.
inline void cluster_sync() {
  check_not_flat("a cluster barrier in a kernel launched flat: launch it with KD_LAUNCH_CLUSTER");
  Block* b = current_block();
  if (!b->cluster) {
    syncthreads();
    return;
  }
  ++b->cluster_arrived;
  current_fiber()->state = State::kWaitCluster;
  yield();  // run_cluster releases it
}

inline int cluster_rank() { return current_block()->cluster_rank; }
inline int cluster_size() {
  const Block* b = current_block();
  return b->cluster ? static_cast<int>(b->cluster->blocks.size()) : 1;
}

// The address of `local` (this block's dynamic shared memory) in block `rank` of the cluster.
inline void* cluster_map(const void* local, int rank) {
  Block* b = current_block();
  const auto off = static_cast<const uint8_t*>(local) - b->dyn_smem.data();
  if (off < 0 || static_cast<size_t>(off) >= b->dyn_smem.size())
    fatal("distributed shared memory: the address is not in this block's dynamic shared memory");
  if (rank < 0 || rank >= cluster_size()) fatal("distributed shared memory: rank outside the cluster");
  Block* peer = b->cluster ? b->cluster->blocks[rank] : b;
  if (peer->live == 0) fatal("distributed shared memory of a block that has exited");
  return peer->dyn_smem.data() + off;
}

// Run the blocks of one cluster to their end (see above).
inline void run_cluster(Cluster& c) {
  const int blocks = static_cast<int>(c.blocks.size());
  const int n = static_cast<int>(c.blocks[0]->fibers.size());
  const std::unique_ptr<Carrier>* all = carriers(blocks * n);
  for (int r = 0; r < blocks; ++r) c.blocks[r]->carriers = all + static_cast<size_t>(r) * n;
  for (;;) {
    bool progress = false;
    for (int r = 0; r < blocks; ++r) {
      Block& b = *c.blocks[r];
      int next = -1;
      for (int i = 0; i < n && next < 0; ++i)
        if (b.fibers[i].state == State::kRunnable) next = i;
      if (next < 0) continue;
      current_block() = &b;
      switch_to(&b.sched, &b, next);  // back when none of its threads is runnable
      progress = true;
    }
    bool waiting = false, others = false;  // threads at the cluster barrier; threads stuck elsewhere
    for (Block* b : c.blocks) {
      waiting = waiting || b->cluster_arrived > 0;
      others = others || b->cluster_arrived < b->live;
    }
    if (waiting && !others) {  // every live thread of the cluster arrived
      for (Block* b : c.blocks) {
        b->cluster_arrived = 0;
        for (Fiber& f : b->fibers)
          if (f.state == State::kWaitCluster) f.state = State::kRunnable;
      }
      continue;
    }
    if (progress) continue;
    for (Block* b : c.blocks)
      if (b->live > 0) {  // stuck: name a thread that waits
        current_block() = b;
        for (int i = 0; i < n; ++i)
          if (b->fibers[i].state != State::kDone) {
            b->current = i;
            break;
          }
        fatal(waiting ? "deadlock: threads wait at the cluster barrier that others never reach"
                      : "deadlock: threads wait at a barrier that the others never reach");
      }
    break;
  }
  for (Block* b : c.blocks) check_copies_landed(*b);
  current_block() = nullptr;
}

// Thread-index state read by the threadIdx/blockIdx macros below.
inline const uint3& thread_idx() { return current_fiber()->tid; }
inline const uint3& block_idx() { return current_block()->block_idx; }
inline const dim3& block_dim() { return current_block()->block; }
inline const dim3& grid_dim() { return current_block()->grid; }
inline void* dynamic_smem() { return current_block()->dyn_smem.data(); }

inline void init_block(Block& b, dim3 grid, dim3 block, uint3 idx, size_t dyn_smem_bytes, int threads) {
  b.grid = grid;
  b.block = block;
  b.block_idx = idx;
  // poison dynamic shared memory with all-ones bytes: a float or bf16 read before it is
  // written is NaN (it spreads to the output), an integer -1
  constexpr uint8_t kSmemPoison = 0xFF;
  b.dyn_smem.assign(dyn_smem_bytes + 16, kSmemPoison);
  b.fibers.resize(threads);
  b.warps.resize((threads + kWarpSize - 1) / kWarpSize);
  b.live = threads;
  for (int t = 0; t < threads; ++t) {
    Fiber& f = b.fibers[t];
    f.linear = t;
    f.tid = make_uint3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
    f.warp = t / kWarpSize;
    f.lane = t % kWarpSize;
  }
}

inline int block_threads(dim3 block) {
  const int threads = static_cast<int>(block.x * block.y * block.z);
  if (threads <= 0 || threads > 1024) fatal("launch: block size must be 1..1024 threads");
  return threads;
}

// Run kernel(args...) over the grid, one block at a time.
template <class... KArgs, class... Args>
void launch(dim3 grid, dim3 block, size_t dyn_smem_bytes, void (*kernel)(KArgs...), Args&&... args) {
  const int threads = block_threads(block);
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        Block b;
        init_block(b, grid, block, make_uint3(bx, by, bz), dyn_smem_bytes, threads);
        b.body = [&]() { kernel(args...); };
        run_block(b);
      }
}

// Run kernel(args...) over the grid in clusters of `cluster` blocks (which divide the grid),
// one cluster at a time (run_cluster).
template <class... KArgs, class... Args>
void launch_cluster(dim3 grid, dim3 cluster, dim3 block, size_t dyn_smem_bytes, void (*kernel)(KArgs...), Args&&... args) {
  const int threads = block_threads(block);
  if (cluster.x == 0 || cluster.y == 0 || cluster.z == 0 || grid.x % cluster.x || grid.y % cluster.y || grid.z % cluster.z)
    fatal("launch_cluster: the cluster's dimensions must divide the grid's");
  const int size = static_cast<int>(cluster.x * cluster.y * cluster.z);
  for (unsigned cz = 0; cz < grid.z; cz += cluster.z)
    for (unsigned cy = 0; cy < grid.y; cy += cluster.y)
      for (unsigned cx = 0; cx < grid.x; cx += cluster.x) {
        std::vector<Block> blocks(size);
        Cluster c;
        for (int r = 0; r < size; ++r) {
          const uint3 idx = make_uint3(cx + r % cluster.x, cy + (r / cluster.x) % cluster.y, cz + r / (cluster.x * cluster.y));
          init_block(blocks[r], grid, block, idx, dyn_smem_bytes, threads);
          blocks[r].body = [&]() { kernel(args...); };
          blocks[r].cluster = &c;
          blocks[r].cluster_rank = r;
          c.blocks.push_back(&blocks[r]);
        }
        run_cluster(c);
      }
}

// Run a kernel that uses no barrier and no warp collective (element-wise work): each
// thread is a plain call, one after another, two orders of magnitude faster than fibers.
// A barrier or collective reached in such a launch is reported, not silently mis-run.
template <class... KArgs, class... Args>
void launch_flat(dim3 grid, dim3 block, size_t dyn_smem_bytes, void (*kernel)(KArgs...), Args&&... args) {
  const int threads = block_threads(block);
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        Block b;
        init_block(b, grid, block, make_uint3(bx, by, bz), dyn_smem_bytes, threads);
        b.flat = true;
        current_block() = &b;
        for (int t = 0; t < threads; ++t) {
          b.current = t;
          kernel(args...);
        }
        current_block() = nullptr;
      }
}

// ---- warp collectives ------------------------------------------------------------------

template <class T>
inline uint64_t to_word(T v) {
  static_assert(sizeof(T) <= 8, "warp shuffle of a type wider than 8 bytes");
  uint64_t w = 0;
  std::memcpy(&w, &v, sizeof(T));
  return w;
}
template <class T>
inline T from_word(uint64_t w) {
  T v;
  std::memcpy(&v, &w, sizeof(T));
  return v;
}

inline void check_full_mask(unsigned mask) {
  if (mask != 0xffffffffu) fatal("warp collective with a partial mask (the emulator needs full warps)");
}

template <class T>
T shfl_idx(unsigned mask, T v, int src, int width) {
  check_full_mask(mask);
  const uint64_t mine = to_word(v);
  auto slots = warp_exchange(&mine, 1);
  const int lane = current_fiber()->lane;
  const int base = lane - lane % width;
  return from_word<T>(slots[base + ((src % width) + width) % width][0]);
}
template <class T>
T shfl_xor(unsigned mask, T v, int lane_mask, int width) {
  check_full_mask(mask);
  const uint64_t mine = to_word(v);
  auto slots = warp_exchange(&mine, 1);
  const int lane = current_fiber()->lane;
  const int base = lane - lane % width;
  const int src = lane ^ lane_mask;
  return from_word<T>(src - base < width && src >= base ? slots[src][0] : mine);
}
template <class T>
T shfl_up(unsigned mask, T v, unsigned delta, int width) {
  check_full_mask(mask);
  const uint64_t mine = to_word(v);
  auto slots = warp_exchange(&mine, 1);
  const int lane = current_fiber()->lane;
  const int base = lane - lane % width;
  const int src = lane - static_cast<int>(delta);
  return from_word<T>(src >= base ? slots[src][0] : mine);
}
template <class T>
T shfl_down(unsigned mask, T v, unsigned delta, int width) {
  check_full_mask(mask);
  const uint64_t mine = to_word(v);
  auto slots = warp_exchange(&mine, 1);
  const int lane = current_fiber()->lane;
  const int base = lane - lane % width;
  const int src = lane + static_cast<int>(delta);
  return from_word<T>(src < base + width ? slots[src][0] : mine);
}
inline unsigned ballot(unsigned mask, int pred) {
  check_full_mask(mask);
  const uint64_t mine = pred ? 1 : 0;
  auto slots = warp_exchange(&mine, 1);
  unsigned out = 0;
  for (int l = 0; l < kWarpSize; ++l)
    if (slots[l][0]) out |= 1u << l;
  return out;
}
// __reduce_{add,or}_sync (sm_80+ redux.sync): every lane gets the warp's sum (bitwise or).
template <class T, class Op>
T reduce(unsigned mask, T v, Op op) {
  check_full_mask(mask);
  const uint64_t mine = to_word(v);
  auto slots = warp_exchange(&mine, 1);
  T out = from_word<T>(slots[0][0]);
  for (int l = 1; l < kWarpSize; ++l) out = op(out, from_word<T>(slots[l][0]));
  return out;
}
inline void syncwarp(unsigned mask) {
  check_full_mask(mask);
  const uint64_t mine = 0;
  (void)warp_exchange(&mine, 1);
}

// ---- tensor-core fragments (PTX ISA layouts) --------------------------------------------

inline float bf16_bits_to_float(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ldmatrix.sync.aligned.m8n8.x{1,2,4}.shared.b16 [.trans]: lane l supplies the address of
// row l%8 of matrix l/8; register j of lane t receives matrix j's elements (t/4, 2*(t%4)+{0,1})
// or, transposed, (2*(t%4)+{0,1}, t/4), lower column (row) in the low half.
inline void ldmatrix(uint32_t* regs, int count, const void* row_addr, bool trans) {
  const uint64_t mine = reinterpret_cast<uint64_t>(row_addr);
  auto slots = warp_exchange(&mine, 1);
  const int t = current_fiber()->lane;
  for (int j = 0; j < count; ++j) {
    uint16_t lo, hi;
    if (!trans) {
      const auto* row = reinterpret_cast<const uint16_t*>(slots[j * 8 + t / 4][0]);
      lo = row[2 * (t % 4)];
      hi = row[2 * (t % 4) + 1];
    } else {
      const auto* r0 = reinterpret_cast<const uint16_t*>(slots[j * 8 + 2 * (t % 4)][0]);
      const auto* r1 = reinterpret_cast<const uint16_t*>(slots[j * 8 + 2 * (t % 4) + 1][0]);
      lo = r0[t / 4];
      hi = r1[t / 4];
    }
    regs[j] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
}

// runtime/simt_support.cpp, built optimised: the emulated attention's inner loop.
void tensor_core_product(const float* at, int rows, const float* b, int n, int k_dim, float* p);

// The warp's state for the collective just exchanged, and whether its operands still need
// unpacking (true for the first of its lanes to get here).
inline bool first_to_decode(WarpState*& w, size_t scratch) {
  Fiber* f = current_fiber();
  w = &current_block()->warps[f->warp];
  if (w->decoded == f->warp_gen) return false;
  w->decoded = f->warp_gen;
  if (w->scratch.size() < scratch) w->scratch.resize(scratch);
  return true;
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: D = A(16x16) * B(16x8) + C. The warp's
// product A B is formed once (in float, as the tensor cores do); each lane adds its C.
inline void mma_bf16_16816(float* d, const uint32_t* a, const uint32_t* b, const float* c) {
  constexpr int kM = 16, kN = 8, kK = 16;
  uint64_t mine[6];
  for (int i = 0; i < 4; ++i) mine[i] = a[i];
  for (int i = 0; i < 2; ++i) mine[4 + i] = b[i];
  auto slots = warp_exchange(mine, 6);
  WarpState* w;
  if (first_to_decode(w, kM * kN)) {
    float At[kK][kM];  // A(r, k) at At[k][r]: the layout tensor_core_product takes
    float Bt[kN][kK];  // B(k, col) at Bt[col][k]
    for (int l = 0; l < kWarpSize; ++l) {
      const int g = l / 4, q = l % 4;
      auto lo = [&](int i) { return bf16_bits_to_float(static_cast<uint16_t>(slots[l][i] & 0xffff)); };
      auto hi = [&](int i) { return bf16_bits_to_float(static_cast<uint16_t>((slots[l][i] >> 16) & 0xffff)); };
      At[2 * q][g] = lo(0);
      At[2 * q + 1][g] = hi(0);
      At[2 * q][g + 8] = lo(1);
      At[2 * q + 1][g + 8] = hi(1);
      At[2 * q + 8][g] = lo(2);
      At[2 * q + 9][g] = hi(2);
      At[2 * q + 8][g + 8] = lo(3);
      At[2 * q + 9][g + 8] = hi(3);
      Bt[g][2 * q] = lo(4);
      Bt[g][2 * q + 1] = hi(4);
      Bt[g][2 * q + 8] = lo(5);
      Bt[g][2 * q + 9] = hi(5);
    }
    tensor_core_product(&At[0][0], kM, &Bt[0][0], kN, kK, w->scratch.data());
  }
  const int t = current_fiber()->lane;
  const int g = t / 4, q = t % 4;
  const int rows[4] = {g, g, g + 8, g + 8};
  const int cols[4] = {2 * q, 2 * q + 1, 2 * q, 2 * q + 1};
  for (int i = 0; i < 4; ++i) d[i] = c[i] + w->scratch[rows[i] * kN + cols[i]];
}

// ---- Hopper warpgroup MMA (wgmma.mma_async, sm_90a) --------------------------------------
//
// Executed at issue (wgmma.fence / commit_group / wait_group are no-ops here): correct for a
// kernel that respects them, blind to one that does not (it reads an accumulator or
// overwrites an operand tile before its wait). Shared-memory operands are addressed by the
// PTX matrix descriptor exactly as on the GPU: start, leading / stride byte offsets and the
// 128/64/32-byte swizzle applied to the address bits (16-byte chunk bits [4, 7) XOR the bits
// [7, 10) above them), with addresses = byte offsets into the block's dynamic shared memory
// (kern::smem_u32 returns those under the emulator), so a wrong stride or swizzle in a
// kernel reads the wrong elements here too.

// The block's dynamic shared memory as a "shared address": the byte offset from its start.
inline uint32_t shared_offset(const void* p) {
  Block* b = current_block();
  const auto* base = b->dyn_smem.data();
  const auto* q = static_cast<const uint8_t*>(p);
  if (q < base || q >= base + b->dyn_smem.size())
    fatal("shared address of a pointer outside the dynamic shared memory (the emulator maps only that)");
  return static_cast<uint32_t>(q - base);
}

struct WgmmaDesc {
  uint32_t start, lbo, sbo;  // bytes
  int swizzle_bytes;         // 128, 64 or 32
};

// Descriptor bits (PTX ISA, "Matrix Descriptor Format"): [0,14) start address >> 4,
// [16,30) leading dimension byte offset >> 4, [32,46) stride dimension byte offset >> 4,
// [49,52) base offset, [62,64) swizzle mode (1: 128B, 2: 64B, 3: 32B, 0: none).
inline WgmmaDesc decode_wgmma_desc(uint64_t d) {
  WgmmaDesc w;
  w.start = static_cast<uint32_t>(d & 0x3FFF) << 4;
  w.lbo = static_cast<uint32_t>((d >> 16) & 0x3FFF) << 4;
  w.sbo = static_cast<uint32_t>((d >> 32) & 0x3FFF) << 4;
  if ((d >> 49) & 7) fatal("wgmma descriptor with a base offset (not emulated: keep swizzle atoms 1024-byte aligned)");
  const int mode = static_cast<int>(d >> 62);
  if (mode == 0) fatal("wgmma descriptor without swizzle (interleaved layout: not emulated)");
  w.swizzle_bytes = mode == 1 ? 128 : mode == 2 ? 64 : 32;
  return w;
}

// The bf16 element (mn, k) of a wgmma shared-memory operand (PTX canonical layouts, T = 8
// bf16 per 16 bytes, S = swizzle bytes): K-major ((8,m),(T,2k)):((S/2,SBO),(1,T)), i.e. row
// mn at (mn / 8) * SBO + (mn % 8) * S bytes, k contiguous within the swizzle row; MN-major
// ((T,S/16,m),(8,k)):((1,T,LBO),(S/2,SBO)), i.e. mn contiguous within S-byte rows, blocks of
// S/2 elements LBO apart, k rows S bytes apart in groups of 8 that are SBO apart.
inline uint32_t wgmma_operand_address(const WgmmaDesc& d, int mn, int k, bool mn_major) {
  const int S = d.swizzle_bytes, per_row = S / 2;
  uint32_t addr;
  if (!mn_major) {
    if (k >= per_row) fatal("wgmma K-major operand: k beyond one swizzle row");
    addr = d.start + static_cast<uint32_t>(mn / 8) * d.sbo + static_cast<uint32_t>(mn % 8) * S + 2u * k;
  } else {
    addr = d.start + static_cast<uint32_t>(mn / per_row) * d.lbo + 2u * (mn % per_row) +
           static_cast<uint32_t>(k % 8) * S + static_cast<uint32_t>(k / 8) * d.sbo;
  }
  const uint32_t mask = static_cast<uint32_t>(S / 16 - 1);
  return addr ^ (((addr >> 7) & mask) << 4);
}

// `count` consecutive bf16 at a shared address, as floats. The swizzle permutes whole 16-byte
// chunks, so up to 8 elements from a chunk-aligned address are contiguous.
inline void read_bf16(uint32_t addr, int count, float* out, int stride = 1) {
  Block* b = current_block();
  if (addr + 2u * count > b->dyn_smem.size()) fatal("wgmma operand beyond the dynamic shared memory");
  for (int i = 0; i < count; ++i) {
    uint16_t bits;
    std::memcpy(&bits, b->dyn_smem.data() + addr + 2 * i, 2);
    out[i * stride] = bf16_bits_to_float(bits);
  }
}

// Rows 0..n-1 of an operand (n a multiple of 8), 16 k values each, a 16-byte chunk per read:
// K-major, k 0..7 and 8..15 of a row; MN-major, 8 consecutive rows at one k.
inline void wgmma_operand_rows(const WgmmaDesc& d, int mn0, int n, float (*out)[16], bool mn_major) {
  constexpr int kChunk = 8, kK = 16;  // bf16 per 16-byte chunk; k per instruction
  if (!mn_major) {
    for (int mn = 0; mn < n; ++mn)
      for (int k = 0; k < kK; k += kChunk) read_bf16(wgmma_operand_address(d, mn0 + mn, k, false), kChunk, &out[mn][k]);
    return;
  }
  for (int k = 0; k < kK; ++k)
    for (int mn = 0; mn < n; mn += kChunk)
      read_bf16(wgmma_operand_address(d, mn0 + mn, k, true), kChunk, &out[mn][k], kK);
}

// wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16: D(64 x N) = A(64 x 16) B(16 x N)
// (+ D when accumulate). A from registers (a_regs: the m16n8k16 A fragment of the warp's 16
// rows, warp w % 4 of the warpgroup owning rows 16 (w % 4) ..) or a descriptor; B from a
// descriptor, K-major or (trans_b) N-major. D: thread (w, lane) holds rows 16 (w % 4) +
// lane / 4 (+ 8) and columns 8 j + 2 (lane % 4) (+ 1): d[4 j + {0, 1, 2, 3}].
inline void wgmma(float* d, int n, const uint32_t* a_regs, uint64_t a_desc, uint64_t b_desc, bool trans_a,
                  bool trans_b, bool accumulate) {
  constexpr int kRows = 16, kK = 16;  // a warp's share of the 64 x 16 A tile
  constexpr int kMaxN = 256;          // the PTX instruction's largest N
  if (n % 8 != 0 || n < 8 || n > kMaxN) fatal("wgmma: N must be a multiple of 8 in 8..256");
  // every lane passes the same descriptors (and its own A registers)
  uint64_t mine[6] = {a_desc, b_desc, 0, 0, 0, 0};
  for (int i = 0; i < 4; ++i) mine[2 + i] = a_regs ? a_regs[i] : 0;
  auto slots = warp_exchange(mine, 6);
  Fiber* f = current_fiber();
  const int wq = f->warp % 4;
  WarpState* w;
  // The warp's product P = A B (16 x n), formed once per collective by its first lane.
  if (first_to_decode(w, static_cast<size_t>(kRows) * n)) {
    for (int l = 0; l < kWarpSize; ++l)
      if (slots[l][1] != b_desc || (!a_regs && slots[l][0] != a_desc)) fatal("wgmma: lanes of a warp disagree on a descriptor");
    float A[kRows][kK];
    if (a_regs) {
      for (int r = 0; r < kRows; ++r)
        for (int k = 0; k < kK; ++k) {
          // row r = g + 8 h sits in register h + 2 (k / 8) of lane 4 g + k % 8 / 2, low half for even k
          const int g = r % 8, h = r / 8;
          const int lane = 4 * g + (k % 8) / 2, reg = h + 2 * (k / 8);
          const uint32_t word = static_cast<uint32_t>(slots[lane][2 + reg]);
          A[r][k] = bf16_bits_to_float(static_cast<uint16_t>(k % 2 ? word >> 16 : word & 0xffff));
        }
    } else {
      wgmma_operand_rows(decode_wgmma_desc(a_desc), 16 * wq, kRows, A, trans_a);
    }
    // k-major, so the sum over k (in order) runs for all 16 rows at once
    float At[kK][kRows];
    for (int r = 0; r < kRows; ++r)
      for (int k = 0; k < kK; ++k) At[k][r] = A[r][k];
    const WgmmaDesc db = decode_wgmma_desc(b_desc);
    float Bt[kMaxN][kK];
    wgmma_operand_rows(db, 0, n, Bt, trans_b);
    tensor_core_product(&At[0][0], kRows, &Bt[0][0], n, kK, w->scratch.data());
  }
  // D: thread (w, lane) holds rows lane / 4 (+ 8) of its warp's 16 and columns 8 j + 2 (lane % 4) (+ 1)
  const int g = f->lane / 4, q = f->lane % 4;
  for (int j = 0; j < n / 8; ++j)
    for (int c = 0; c < 2; ++c)
      for (int h = 0; h < 2; ++h) {
        float& out = d[4 * j + 2 * h + c];
        const float p = w->scratch[static_cast<size_t>(g + 8 * h) * n + 8 * j + 2 * q + c];
        out = accumulate ? out + p : p;
      }
}

}  // namespace kdemu

// ---- the CUDA vocabulary the kernels use, mapped onto the emulator ----------------------

#undef __global__
#undef __shared__
#undef __launch_bounds__
#undef __grid_constant__
#define __global__
#define __launch_bounds__(...)
#define __grid_constant__
#define __shared__ static
#define threadIdx (::kdemu::thread_idx())
#define blockIdx (::kdemu::block_idx())
#define blockDim (::kdemu::block_dim())
#define gridDim (::kdemu::grid_dim())

inline void __syncthreads() { ::kdemu::syncthreads(); }
inline int __syncthreads_or(int pred) { return ::kdemu::syncthreads_or(pred); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::kdemu::syncwarp(mask); }
template <class T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) { return ::kdemu::shfl_idx(mask, v, src, width); }
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32) { return ::kdemu::shfl_xor(mask, v, m, width); }
template <class T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) { return ::kdemu::shfl_up(mask, v, d, width); }
template <class T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) { return ::kdemu::shfl_down(mask, v, d, width); }
inline unsigned __ballot_sync(unsigned mask, int pred) { return ::kdemu::ballot(mask, pred); }
inline unsigned __reduce_add_sync(unsigned mask, unsigned v) {
  return ::kdemu::reduce(mask, v, [](unsigned a, unsigned b) { return a + b; });
}
inline int __reduce_add_sync(unsigned mask, int v) {
  return ::kdemu::reduce(mask, v, [](int a, int b) { return static_cast<int>(static_cast<unsigned>(a) + static_cast<unsigned>(b)); });
}
inline unsigned __reduce_or_sync(unsigned mask, unsigned v) {
  return ::kdemu::reduce(mask, v, [](unsigned a, unsigned b) { return a | b; });
}
inline int __any_sync(unsigned mask, int pred) { return ::kdemu::ballot(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) { return ::kdemu::ballot(mask, pred) == 0xffffffffu; }

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline float __fadd_rn(float a, float b) {
  volatile float r = a + b;  // a plain IEEE add; volatile keeps it out of any contraction
  return r;
}
inline float __fmul_rn(float a, float b) {
  volatile float r = a * b;
  return r;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline int __float_as_int(float f) { return static_cast<int>(__float_as_uint(f)); }
inline float __int_as_float(int i) { return __uint_as_float(static_cast<unsigned>(i)); }
inline double __longlong_as_double(long long v) {
  double d;
  std::memcpy(&d, &v, 8);
  return d;
}
inline long long __double_as_longlong(double d) {
  long long v;
  std::memcpy(&v, &d, 8);
  return v;
}
inline int __double2hiint(double d) { return static_cast<int>(static_cast<unsigned long long>(__double_as_longlong(d)) >> 32); }
inline int __double2loint(double d) { return static_cast<int>(static_cast<unsigned>(__double_as_longlong(d))); }
inline double __hiloint2double(int hi, int lo) {
  return __longlong_as_double(static_cast<long long>((static_cast<unsigned long long>(static_cast<unsigned>(hi)) << 32) |
                                                     static_cast<unsigned>(lo)));
}
template <class T>
inline T __ldg(const T* p) { return *p; }
using std::max;
using std::min;

template <class T>
inline T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }
template <class T>
inline T atomicMax(T* p, T v) { T old = *p; *p = old > v ? old : v; return old; }
template <class T>
inline T atomicMin(T* p, T v) { T old = *p; *p = old < v ? old : v; return old; }
template <class T>
inline T atomicOr(T* p, T v) { T old = *p; *p = old | v; return old; }
template <class T>
inline T atomicExch(T* p, T v) { T old = *p; *p = v; return old; }
