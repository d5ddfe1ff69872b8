// The SIMT emulator's own scheduling: warp collectives, block and named barriers, threads that
// exit early, carriers reused across launches of different block sizes, thread block clusters
// (common/kernel_checks/cluster_probe.cuh); and its reports (a collective missing an exited lane, a barrier
// nobody completes, a cluster barrier a block never reaches), each run as its own process
// because the report aborts it: `emu_simt_test --abort exited|deadlock|cluster`.
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "common/test_harness.h"
#include "kernels/emu/simt_emulator.h"
#include "common/kernel_checks/cluster_probe.cuh"

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

// Block 1's first warp waits at a named barrier nobody completes; everyone else at the cluster
// barrier, which therefore never releases.
__global__ void cluster_barrier_nobody_completes(int*) {
  if (kdtree::kern::cluster_rank() == 1 && threadIdx.x < kWarp) ::kdemu::named_barrier(1, 2 * kWarp);
  else kdtree::kern::cluster_barrier();
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

// Clusters of 2, 4 and 2 x 2 blocks, and a launch without a cluster (a cluster of one): every
// block's rank, its next peer's shared memory read and written (cluster_probe.cuh).
KD_TEST(clusters_share_shared_memory_and_a_barrier) {
  using namespace kdtree::test;
  const dim3 shapes[][2] = {{dim3(4, 2), dim3(2, 1)}, {dim3(8), dim3(4)}, {dim3(2, 4, 2), dim3(2, 2)}};
  for (const auto& [grid, cluster] : shapes) {
    std::vector<int> bad(kClusterProbeChecks, 0);
    ::kdemu::launch_cluster(grid, cluster, dim3(kClusterProbeThreads), kClusterProbeSmemBytes, cluster_probe_kernel, cluster,
                            bad.data());
    for (int c = 0; c < kClusterProbeChecks; ++c) KD_EXPECT_EQ(bad[c], 0);
  }
  std::vector<int> bad(kClusterProbeChecks, 0);
  ::kdemu::launch(dim3(3), dim3(kClusterProbeThreads), kClusterProbeSmemBytes, cluster_probe_kernel, dim3(1, 1, 1), bad.data());
  for (int c = 0; c < kClusterProbeChecks; ++c) KD_EXPECT_EQ(bad[c], 0);
}

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--abort") == 0) {
    std::vector<int> out(2 * kWarp);
    if (std::strcmp(argv[2], "exited") == 0)
      ::kdemu::launch(dim3(1), dim3(kWarp), 0, collective_after_an_exit, out.data());
    else if (std::strcmp(argv[2], "cluster") == 0)
      ::kdemu::launch_cluster(dim3(2), dim3(2), dim3(2 * kWarp), 0, cluster_barrier_nobody_completes, out.data());
    else
      ::kdemu::launch(dim3(1), dim3(2 * kWarp), 0, barrier_nobody_completes, out.data());
    std::printf("no report: the emulator ran a kernel it should have refused\n");
    return 0;
  }
  return ::kdtree::test::run_all(argc, argv);
}
