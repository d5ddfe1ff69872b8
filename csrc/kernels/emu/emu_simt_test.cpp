// The SIMT emulator's own scheduling: warp collectives, block and named barriers, threads that
// exit early, carriers reused across launches of different block sizes; and its two reports
// (a collective missing an exited lane, a barrier nobody completes), each run as its own
// process because the report aborts it: `emu_simt_test --abort exited|deadlock`.
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "common/test_harness.h"
#include "kernels/emu/simt_emulator.h"

namespace {

constexpr int kWarp = 32;
constexpr int kMaxThreads = 1024;

// out[block] = the sum over the block's threads of in[thread], by xor-shuffles then shared memory.
__global__ void block_sum(const int* in, long long* out) {
  long long v = in[blockIdx.x * blockDim.x + threadIdx.x];
  for (int m = kWarp / 2; m; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  __shared__ long long warp_sums[kMaxThreads / kWarp];
  if (threadIdx.x % kWarp == 0) warp_sums[threadIdx.x / kWarp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    long long t = 0;
    for (unsigned w = 0; w < blockDim.x / kWarp; ++w) t += warp_sums[w];
    out[blockIdx.x] = t;
  }
}

// Each lane gathers from others with the four shuffles and a ballot.
__global__ void shuffles(const int* in, int* out) {
  const int lane = threadIdx.x % kWarp, v = in[threadIdx.x];
  int* o = out + 5 * threadIdx.x;
  o[0] = __shfl_sync(0xffffffffu, v, (lane * 7 + 3) % kWarp);
  o[1] = __shfl_up_sync(0xffffffffu, v, 3);
  o[2] = __shfl_down_sync(0xffffffffu, v, 5);
  o[3] = __shfl_xor_sync(0xffffffffu, v, 9);
  o[4] = static_cast<int>(__ballot_sync(0xffffffffu, v % 3 == 0));
}

// Threads below `exits` leave before the barrier; the barrier still completes (it counts the
// live threads), and a named barrier over the second warp only joins that warp.
__global__ void exits_then_barriers(int exits, int* out) {
  if (static_cast<int>(threadIdx.x) < exits) return;
  __shared__ int seen;
  if (threadIdx.x == blockDim.x - 1) seen = 0;
  __syncthreads();
  atomicAdd(&seen, 1);
  __syncthreads();
  if (threadIdx.x / kWarp == 1) ::kdemu::named_barrier(1, kWarp);
  out[threadIdx.x] = seen;
}

__global__ void collective_after_an_exit(int* out) {
  if (threadIdx.x == 3) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
}

__global__ void barrier_nobody_completes(int*) {
  if (threadIdx.x < kWarp) ::kdemu::named_barrier(1, 2 * kWarp);
}

}  // namespace

KD_TEST(block_sums_over_block_sizes_and_repeated_launches) {
  const uint64_t seed = ::kdtree::test::test_seed();
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (int threads : {kWarp, 256, kMaxThreads, 64, 256}) {  // carriers reused, grown, reused
    const int blocks = 3;
    std::vector<int> in(static_cast<size_t>(blocks) * threads);
    for (int& x : in) x = static_cast<int>(rng() % 2001) - 1000;
    std::vector<long long> out(blocks, -1);
    ::kdemu::launch(dim3(blocks), dim3(threads), 0, block_sum, in.data(), out.data());
    for (int b = 0; b < blocks; ++b)
      KD_EXPECT_EQ(out[b], std::accumulate(in.begin() + b * threads, in.begin() + (b + 1) * threads, 0LL));
  }
}

KD_TEST(shuffles_and_ballot_read_the_right_lanes) {
  std::mt19937 rng(static_cast<uint32_t>(::kdtree::test::test_seed()));
  const int threads = 2 * kWarp;
  std::vector<int> in(threads), out(5 * threads, -1);
  for (int& x : in) x = static_cast<int>(rng() % 100000);
  ::kdemu::launch(dim3(1), dim3(threads), 0, shuffles, in.data(), out.data());
  for (int t = 0; t < threads; ++t) {
    const int base = t - t % kWarp, lane = t % kWarp;
    unsigned ballot = 0;
    for (int l = 0; l < kWarp; ++l) ballot |= (in[base + l] % 3 == 0 ? 1u : 0u) << l;
    KD_EXPECT_EQ(out[5 * t + 0], in[base + (lane * 7 + 3) % kWarp]);
    KD_EXPECT_EQ(out[5 * t + 1], in[lane >= 3 ? t - 3 : t]);
    KD_EXPECT_EQ(out[5 * t + 2], in[lane + 5 < kWarp ? t + 5 : t]);
    KD_EXPECT_EQ(out[5 * t + 3], in[base + (lane ^ 9)]);
    KD_EXPECT_EQ(static_cast<unsigned>(out[5 * t + 4]), ballot);
  }
}

KD_TEST(barriers_count_the_live_threads) {
  const int threads = 3 * kWarp;
  for (int exits : {0, 5, kWarp}) {
    std::vector<int> out(threads, -1);
    ::kdemu::launch(dim3(2), dim3(threads), 0, exits_then_barriers, exits, out.data());
    for (int t = 0; t < threads; ++t) KD_EXPECT_EQ(out[t], t < exits ? -1 : threads - exits);
  }
}

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--abort") == 0) {
    std::vector<int> out(2 * kWarp);
    if (std::strcmp(argv[2], "exited") == 0)
      ::kdemu::launch(dim3(1), dim3(kWarp), 0, collective_after_an_exit, out.data());
    else
      ::kdemu::launch(dim3(1), dim3(2 * kWarp), 0, barrier_nobody_completes, out.data());
    std::printf("no report: the emulator ran a kernel it should have refused\n");
    return 0;
  }
  return ::kdtree::test::run_all(argc, argv);
}
