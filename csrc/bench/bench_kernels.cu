// Timings of the DDTree kernels on the current GPU, one JSON object per case: what
// `kdtree bench kernels` (kdtree_cli/bench/) runs for the native side of its tables, beside
// the torch baselines it measures itself.
//
//   bench_kernels [--cases FILE] [--json PATH] [--quick]
//
// FILE holds one case per line, `suite key=value ...` (# starts a comment); without it a
// small default set runs. Suites and their keys (defaults in brackets):
//   gemm         m n k                         cuBLAS bf16 GEMM, f32 accumulate: the matrix-rate ceiling
//   copy         mb [1024]                     device-to-device copy: the memory ceiling (read + write)
//   launch       smem_kb [0] blocks [SMs]      an empty kernel: the floor under any one launch timed
//                this way (smem_kb of dynamic shared memory a block, as the large-tile kernels ask)
//   mma          blocks_per_sm [4] iters [4096] the mma.sync rate: bf16 m16n8k16 MMAs, f32 accumulate,
//                operands in registers, on every SM: the compute ceiling of mma.sync kernels (the
//                sm_120 plan; on sm_90 cuBLAS's GEMM rate is wgmma's)
//   verify_attn  dtype [bf16] batch [1] heads n prefix config [plan's] split_keys [plan's]
//                config / split_keys force a tile configuration (VerifyAttnConfig) or the prefix
//                keys per split, to time variants against the plan's choice; the baselines of
//                csrc/dev/verify_attn_baselines.h (configs 0, 1, 4 and 14, the seesaw pairs)
//                only in a build that holds them (NVCC_APPEND_FLAGS=-DKD_VERIFY_ATTN_BASELINES)
//   topk         rows vocab k exact [0] variant [-1]   exact 1: the scan's compactions keep exactly K
//                (force_exact_compaction: the earlier way, to time against); variant: the scan
//                (TopkScanVariant: 0 topk2's, 1 the lean one; -1 the default)
//   tree_build   batch budget depth [15] input [flat|logits] vocab [4096]
//                also times the reference heap (tree_heap.h) on one CPU core and checks the
//                kernel's trees against it
//   accept       batch budget                  tree_accept (walk to a leaf)
//   compact      batch layers [61] rows [9]    cache_compact
// Common keys: reps (timed runs, median reported), warm [3].
//
// Method: warm-up runs, then each run timed alone with CUDA events on one stream (median,
// p10, p90). Small launches are also timed inside a CUDA graph of `graph` launches
// (graph_ms: per launch, without the host's launch cost). Inputs are random, never zero;
// attention KV sets rotate so that the bytes come from DRAM, not L2.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_blocker.cuh"
#include "bench/bench_cases.h"
#include "bench/tree_heap.h"
#include "common/cuda_check.h"
#include "kernels/tree_accept.cuh"
#include "kernels/tree_build.cuh"
#include "kernels/verify_attn.cuh"
#include "tests/device_buffer.h"

using namespace kdtree;
using kdtree::bench::Case;
using kdtree::test::DeviceBuffer;

namespace {

// ---- the JSON a case produces -------------------------------------------------------------

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out;
}

// A flat JSON object built field by field.
class Record {
 public:
  void str(const std::string& k, const std::string& v) { add(k, "\"" + json_escape(v) + "\""); }
  void num(const std::string& k, double v) {
    char b[64];
    if (std::isfinite(v)) std::snprintf(b, sizeof b, "%.9g", v);
    else std::snprintf(b, sizeof b, "null");
    add(k, b);
  }
  void integer(const std::string& k, long long v) { add(k, std::to_string(v)); }
  void boolean(const std::string& k, bool v) { add(k, v ? "true" : "false"); }
  std::string json() const { return "{" + body_ + "}"; }

 private:
  void add(const std::string& k, const std::string& v) {
    if (!body_.empty()) body_ += ", ";
    body_ += "\"" + json_escape(k) + "\": " + v;
  }
  std::string body_;
};

void check(const KernelResult& r) {
  if (!r.ok()) throw CudaError(r.message);
}

// ---- timing ----------------------------------------------------------------------------------

struct Timing {
  double median = 0, p10 = 0, p90 = 0;
  int reps = 0;
};

class Timer {
 public:
  explicit Timer(cudaStream_t s) : stream_(s) {
    KD_CUDA_CHECK(cudaEventCreate(&a_));
    KD_CUDA_CHECK(cudaEventCreate(&b_));
  }
  ~Timer() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }

  // Each of `reps` runs of fn(i) timed alone (its GPU time: queued behind a blocker), after
  // `warm` untimed runs.
  Timing each(const std::function<void(int)>& fn, int warm, int reps) {
    KD_CUDA_CHECK(cudaDeviceSynchronize());  // inputs uploaded on the legacy stream have landed
    for (int i = 0; i < warm; ++i) fn(i);
    KD_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::vector<float> ms(static_cast<size_t>(reps));
    for (int i = 0; i < reps; ++i) {
      bench::launch_blocker(stream_);
      KD_CUDA_CHECK(cudaEventRecord(a_, stream_));
      fn(warm + i);
      KD_CUDA_CHECK(cudaEventRecord(b_, stream_));
      KD_CUDA_CHECK(cudaEventSynchronize(b_));
      KD_CUDA_CHECK(cudaEventElapsedTime(&ms[i], a_, b_));
    }
    std::sort(ms.begin(), ms.end());
    auto at = [&](double q) { return static_cast<double>(ms[static_cast<size_t>(q * (reps - 1) + 0.5)]); };
    return Timing{at(0.5), at(0.1), at(0.9), reps};
  }

  // Milliseconds per launch of fn inside a CUDA graph of `launches` launches (median of 7
  // replays): the kernels' own time, without the host's per-launch cost.
  double in_graph(const std::function<void(int)>& fn, int launches) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    KD_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < launches; ++i) fn(i);
    KD_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    KD_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    const Timing t = each([&](int) { KD_CUDA_CHECK(cudaGraphLaunch(exec, stream_)); }, 2, 7);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return t.median / launches;
  }

 private:
  cudaStream_t stream_;
  cudaEvent_t a_, b_;
};

void put_timing(Record& r, const Timing& t) {
  r.num("ms", t.median);
  r.num("ms_p10", t.p10);
  r.num("ms_p90", t.p90);
  r.integer("reps", t.reps);
}

std::vector<float> widen_bf16(const std::vector<uint16_t>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const uint32_t u = static_cast<uint32_t>(v[i]) << 16;
    std::memcpy(&f[i], &u, 4);
  }
  return f;
}

struct Env {
  cudaStream_t stream;
  cublasHandle_t blas;
  Timer* timer;
  bool quick;
};

int reps_of(const Case& c, const Env& env, int fallback) {
  return static_cast<int>(c.num("reps", env.quick ? std::max(3, fallback / 5) : fallback));
}

// ---- random inputs on the device (hundreds of MB: too slow on the host) -------------------------

// Device logits of normal(0, sigma) from a counter hash: fast for hundreds of MB.
__global__ void fill_normal_kernel(float* x, int64_t n, uint64_t seed, float sigma) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint64_t h = (static_cast<uint64_t>(i) + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 27;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 33;
    const float u1 = (static_cast<float>(h & 0xffffff) + 0.5f) / 16777216.0f;
    const float u2 = static_cast<float>((h >> 24) & 0xffffff) / 16777216.0f;
    x[i] = sigma * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
  }
}

void fill_normal(float* x, int64_t n, uint64_t seed, float sigma, cudaStream_t stream) {
  fill_normal_kernel<<<1024, 256, 0, stream>>>(x, n, seed, sigma);
  KD_CHECK_LAUNCH();
}

__global__ void to_bf16_kernel(const float* x, __nv_bfloat16* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}

// n random values of the given element size (2: bf16, 4: f32; exactly bf16 values either way).
void fill_attention_input(void* out, size_t esz, int64_t n, uint64_t seed, cudaStream_t stream) {
  DeviceBuffer<float> f(static_cast<size_t>(n));
  fill_normal(f.get(), n, seed, 1.0f, stream);
  DeviceBuffer<__nv_bfloat16> b(static_cast<size_t>(n));
  to_bf16_kernel<<<1024, 256, 0, stream>>>(f.get(), b.get(), n);
  KD_CHECK_LAUNCH();
  if (esz == 2) {
    KD_CUDA_CHECK(cudaMemcpyAsync(out, b.get(), n * 2, cudaMemcpyDeviceToDevice, stream));
  } else {
    std::vector<uint16_t> host(static_cast<size_t>(n));
    KD_CUDA_CHECK(cudaStreamSynchronize(stream));
    KD_CUDA_CHECK(cudaMemcpy(host.data(), b.get(), n * 2, cudaMemcpyDeviceToHost));
    const std::vector<float> wide = widen_bf16(host);
    KD_CUDA_CHECK(cudaMemcpy(out, wide.data(), n * 4, cudaMemcpyHostToDevice));
  }
  KD_CUDA_CHECK(cudaStreamSynchronize(stream));
}

// ---- ceilings ---------------------------------------------------------------------------------

void bench_gemm(const Case& c, Env& env, Record& r) {
  const int m = static_cast<int>(c.need("m")), n = static_cast<int>(c.need("n")), k = static_cast<int>(c.need("k"));
  DeviceBuffer<uint16_t> A(static_cast<size_t>(m) * k), B(static_cast<size_t>(k) * n), C(static_cast<size_t>(m) * n);
  fill_attention_input(A.get(), 2, static_cast<int64_t>(m) * k, 7, env.stream);
  fill_attention_input(B.get(), 2, static_cast<int64_t>(k) * n, 8, env.stream);
  const float alpha = 1.0f, beta = 0.0f;
  KD_CUBLAS_CHECK(cublasSetStream(env.blas, env.stream));
  const Timing t = env.timer->each(
      [&](int) {
        KD_CUBLAS_CHECK(cublasGemmEx(env.blas, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, A.get(), CUDA_R_16BF, m, B.get(),
                                     CUDA_R_16BF, k, &beta, C.get(), CUDA_R_16BF, m, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT));
      },
      static_cast<int>(c.num("warm", 3)), reps_of(c, env, 20));
  put_timing(r, t);
  r.num("tflops", 2.0 * m * n * k / t.median / 1e9);
}

void bench_copy(const Case& c, Env& env, Record& r) {
  const size_t bytes = static_cast<size_t>(c.num("mb", 1024)) << 20;
  DeviceBuffer<uint8_t> src(bytes), dst(bytes);
  KD_CUDA_CHECK(cudaMemsetAsync(src.get(), 0x5a, bytes, env.stream));
  const Timing t = env.timer->each(
      [&](int) { KD_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, env.stream)); },
      static_cast<int>(c.num("warm", 3)), reps_of(c, env, 20));
  put_timing(r, t);
  r.num("gbps", 2.0 * bytes / t.median / 1e6);  // bytes read + written
}

// ---- the mma.sync rate ---------------------------------------------------------------------------

constexpr int kMmaThreads = 256;             // 8 warps a block
constexpr int kMmaChains = 8;                // independent accumulators a warp: hides the MMA latency
constexpr double kMmaFlops = 2.0 * 16 * 8 * 16;  // one m16n8k16 MMA of a warp

// Each warp issues iters x kMmaChains bf16 MMAs on register operands; the accumulators are
// stored (when a value no input can give appears: never) so that the loop is not removed.
__global__ void __launch_bounds__(kMmaThreads) bench_mma_sync_kernel(int iters, float* sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t seed = (threadIdx.x + 1) * 0x9E3779B9u;
  // bf16 pairs of small normal numbers (exponent 0x3f..): no overflow in the f32 accumulators
  const uint32_t a0 = 0x3f803f80u ^ (seed & 0x007f007fu), a1 = a0 ^ 0x00010001u, a2 = a0 ^ 0x00020002u,
                 a3 = a0 ^ 0x00030003u, b0 = 0x3f803f80u ^ ((seed >> 8) & 0x007f007fu), b1 = b0 ^ 0x00010001u;
  float c[kMmaChains][4] = {};
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int k = 0; k < kMmaChains; ++k)
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+f"(c[k][0]), "+f"(c[k][1]), "+f"(c[k][2]), "+f"(c[k][3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kMmaChains; ++k) sum += c[k][0] + c[k][1] + c[k][2] + c[k][3];
  if (sum == -1.0f) sink[blockIdx.x * blockDim.x + threadIdx.x] = sum;
#endif
}

void bench_mma(const Case& c, Env& env, Record& r) {
  int dev = 0, sms = 0, major = 0;
  KD_CUDA_CHECK(cudaGetDevice(&dev));
  KD_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  KD_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (major < 8) throw std::runtime_error("mma: bf16 mma.sync needs sm_80 or newer");
  const int blocks = sms * static_cast<int>(c.num("blocks_per_sm", 4));
  const int iters = static_cast<int>(c.num("iters", 4096));
  DeviceBuffer<float> sink(static_cast<size_t>(blocks) * kMmaThreads);
  auto run = [&](int) {
    bench_mma_sync_kernel<<<blocks, kMmaThreads, 0, env.stream>>>(iters, sink.get());
    KD_CUDA_CHECK(cudaGetLastError());
  };
  const Timing t = env.timer->each(run, static_cast<int>(c.num("warm", 3)), reps_of(c, env, 20));
  put_timing(r, t);
  const double mmas = static_cast<double>(blocks) * (kMmaThreads / 32) * iters * kMmaChains;
  r.num("tflops", mmas * kMmaFlops / t.median / 1e9);
  r.integer("sms", sms);
}

// ---- launch floor -------------------------------------------------------------------------------

// Nothing but a block's start and end: what every kernel pays before its first instruction.
__global__ void bench_empty_kernel() {}

void bench_launch(const Case& c, Env& env, Record& r) {
  int dev = 0, sms = 0, smem_optin = 0;
  KD_CUDA_CHECK(cudaGetDevice(&dev));
  KD_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  KD_CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  const int blocks = c.num("blocks", 0) > 0 ? static_cast<int>(c.num("blocks", 0)) : sms;
  const size_t smem = static_cast<size_t>(c.num("smem_kb", 0)) * 1024;
  if (smem > static_cast<size_t>(smem_optin))
    throw std::runtime_error("launch: smem_kb over the device's " + std::to_string(smem_optin / 1024) + " KB a block");
  KD_CUDA_CHECK(cudaFuncSetAttribute(bench_empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  auto run = [&](int) {
    bench_empty_kernel<<<blocks, 128, smem, env.stream>>>();
    KD_CUDA_CHECK(cudaGetLastError());
  };
  put_timing(r, env.timer->each(run, static_cast<int>(c.num("warm", 3)), reps_of(c, env, 50)));
  r.num("graph_ms", env.timer->in_graph(run, 20));
  r.integer("grid_blocks", blocks);  // (blocks=0 in the case: one a SM)
}

// ---- verify_attn ------------------------------------------------------------------------------

void bench_verify(const Case& c, Env& env, Record& r) {
  const AttnDType dtype = c.text("dtype", "bf16") == "f32" ? AttnDType::kF32 : AttnDType::kBF16;
  const int batch = static_cast<int>(c.num("batch", 1)), heads = static_cast<int>(c.need("heads"));
  const int n = static_cast<int>(c.need("n")), prefix = static_cast<int>(c.need("prefix"));
  const int T = n + 1, words = (T + 31) / 32;
  const int64_t rows = static_cast<int64_t>(prefix) + T;
  const int64_t kv_elems = rows * kVerifyQKDim * batch;
  const size_t esz = dtype == AttnDType::kBF16 ? 2 : 4;
  // enough KV copies that one launch's bytes cannot come from L2 (~50-60 MB on Hopper)
  const double set_bytes = static_cast<double>(kv_elems) * esz;
  const int sets = set_bytes >= 200e6 ? 1 : std::min(8, static_cast<int>(std::ceil(200e6 / set_bytes)));
  std::vector<std::unique_ptr<DeviceBuffer<uint8_t>>> kv_sets;
  for (int s = 0; s < sets; ++s) {
    kv_sets.push_back(std::make_unique<DeviceBuffer<uint8_t>>(static_cast<size_t>(kv_elems) * esz));
    fill_attention_input(kv_sets.back()->get(), esz, kv_elems, 13 + s, env.stream);
  }
  const int64_t q_elems = static_cast<int64_t>(batch) * T * heads * kVerifyLatentDim;
  const int64_t qpe_elems = static_cast<int64_t>(batch) * T * heads * kVerifyRopeDim;
  DeviceBuffer<uint8_t> q(static_cast<size_t>(q_elems) * esz), qpe(static_cast<size_t>(qpe_elems) * esz);
  fill_attention_input(q.get(), esz, q_elems, 101, env.stream);
  fill_attention_input(qpe.get(), esz, qpe_elems, 102, env.stream);
  DeviceBuffer<uint8_t> out(static_cast<size_t>(batch) * T * heads * kVerifyLatentDim * esz);
  // a tree of chains and branches: node i's parent is i-1 when i is odd, else i/2
  std::vector<uint32_t> vis(static_cast<size_t>(batch) * T * words, 0u);
  std::vector<int> parent(T, -1);
  for (int i = 1; i < T; ++i) parent[i] = (i % 2) ? i - 1 : i / 2;
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < T; ++i)
      for (int a = i;; a = parent[a]) {
        vis[(static_cast<size_t>(b) * T + i) * words + a / 32] |= 1u << (a % 32);
        if (a == 0) break;
      }
  DeviceBuffer<uint32_t> d_vis(vis);
  VerifyQueries queries;
  queries.dtype = dtype;
  queries.batch = batch;
  queries.tree_len = T;
  queries.heads = heads;
  queries.q_lat = q.get();
  queries.q_pe = qpe.get();
  queries.scale = 1.0f / std::sqrt(192.0f);
  VerifyKeys keys;
  keys.kv = kv_sets[0]->get();
  keys.batch_stride = rows * kVerifyQKDim;
  keys.max_prefix = prefix;
  TreeMask mask;
  mask.vis = d_vis.get();
  mask.words = words;
  VerifyOutputs outputs;
  outputs.out = out.get();
  VerifyAttnParams p = make_verify_attn_params(queries, keys, mask, outputs);
  p.force_config = static_cast<int>(c.num("config", -1));
  p.force_split_keys = static_cast<int>(c.num("split_keys", 0));
  VerifyAttnPlan plan;
  check(verify_attn_plan(p, &plan));
  DeviceBuffer<uint8_t> ws(plan.workspace_bytes);
  p.workspace = ws.get();
  p.workspace_bytes = plan.workspace_bytes;
  auto run = [&](int i) {
    p.kv = kv_sets[i % sets]->get();
    check(verify_attn(p, env.stream));
  };
  const Timing t = env.timer->each(run, static_cast<int>(c.num("warm", 3)), reps_of(c, env, prefix >= 65536 ? 20 : 50));
  put_timing(r, t);
  const double flops = 2.0 * batch * heads * T * static_cast<double>(prefix) * (kVerifyQKDim + kVerifyLatentDim);
  r.num("tflops", flops / t.median / 1e9);
  r.num("cache_gbps", static_cast<double>(batch) * prefix * kVerifyQKDim * esz / t.median / 1e6);
  r.integer("splits", plan.splits);
  r.integer("split_group", plan.split_group);  // splits reduced on chip together (the seesaw pairs: 2)
  r.integer("split_keys", plan.split_len);
  r.integer("config", plan.config);
  r.integer("row_tiles", plan.m_tiles);
}

// ---- topk_logprobs ----------------------------------------------------------------------------

void bench_topk(const Case& c, Env& env, Record& r) {
  const int rows = static_cast<int>(c.need("rows")), vocab = static_cast<int>(c.need("vocab")), k = static_cast<int>(c.need("k"));
  DeviceBuffer<float> logits(static_cast<size_t>(rows) * vocab), logp(static_cast<size_t>(rows) * k);
  DeviceBuffer<int32_t> tok(static_cast<size_t>(rows) * k);
  fill_normal(logits.get(), static_cast<int64_t>(rows) * vocab, 17, 2.5f, env.stream);
  TopkLogits in;
  in.rows = rows;
  in.vocab = vocab;
  in.logits = logits.get();
  TopkRows out;
  out.k = k;
  out.logp = logp.get();
  out.tok = tok.get();
  TopkLogprobsParams p = make_topk_logprobs_params(in, out);
  p.force_exact_compaction = static_cast<int>(c.num("exact", 0));
  p.variant = static_cast<int>(c.num("variant", -1));
  const Timing t = env.timer->each([&](int) { check(topk_logprobs(p, env.stream)); }, static_cast<int>(c.num("warm", 3)),
                                   reps_of(c, env, 30));
  put_timing(r, t);
  r.num("logits_gbps", 4.0 * rows * static_cast<double>(vocab) / t.median / 1e6);
  int threads = 0, blocks_per_sm = 0;
  check(topk_logprobs_occupancy(p, &threads, &blocks_per_sm));
  r.integer("threads", threads);
  r.integer("blocks_per_sm", blocks_per_sm);
  r.integer("variant", p.variant);
}

// ---- tree_build (and the reference heap on one CPU core) ---------------------------------------

void bench_tree_build(const Case& c, Env& env, Record& r) {
  const int batch = static_cast<int>(c.need("batch")), budget = static_cast<int>(c.need("budget"));
  const int depth = static_cast<int>(c.num("depth", 15));
  const std::string input = c.text("input", "flat");
  const int K = budget;  // top-K arrays as wide as the budget (the engine's K = min(N, V))
  const size_t cells = static_cast<size_t>(batch) * depth * K;
  std::vector<float> logp(cells);
  std::vector<int32_t> tok(cells);
  DeviceBuffer<float> d_logp(cells);
  DeviceBuffer<int32_t> d_tok(cells);
  TopkRows topk;
  topk.k = K;
  topk.logp = d_logp.get();
  topk.tok = d_tok.get();
  if (input == "flat") {  // sorted log-probabilities with exponential gaps: wide, shallow trees
    std::mt19937_64 rng(11);
    std::exponential_distribution<float> ed(1.0f);
    for (int row = 0; row < batch * depth; ++row) {
      float acc = -0.05f;
      for (int k = 0; k < K; ++k) {
        acc -= ed(rng) * 0.08f;
        logp[static_cast<size_t>(row) * K + k] = acc;
        tok[static_cast<size_t>(row) * K + k] = k * 7 + row % 7;
      }
    }
    d_logp.upload(logp);
    d_tok.upload(tok);
  } else if (input == "logits") {  // top-K of normal(0, 2.5) logits, through topk_logprobs
    const int vocab = static_cast<int>(c.num("vocab", 4096));
    DeviceBuffer<float> logits(static_cast<size_t>(batch) * depth * vocab);
    fill_normal(logits.get(), static_cast<int64_t>(batch) * depth * vocab, 29, 2.5f, env.stream);
    TopkLogits drafted;
    drafted.rows = batch * depth;
    drafted.vocab = vocab;
    drafted.logits = logits.get();
    check(topk_logprobs(make_topk_logprobs_params(drafted, topk), env.stream));
    KD_CUDA_CHECK(cudaStreamSynchronize(env.stream));
    logp = d_logp.download();
    tok = d_tok.download();
  } else {
    throw std::runtime_error("tree_build input must be flat or logits, got " + input);
  }
  const int rows_per = budget + 1, words = (rows_per + 31) / 32;
  std::vector<int32_t> budgets(batch, budget), roots(batch, 1), start(batch, 100);
  DeviceBuffer<int32_t> d_budget(budgets), d_root(roots), d_start(start), d_n(batch);
  DeviceBuffer<int32_t> d_tokens(static_cast<size_t>(batch) * rows_per), d_depth(d_tokens.size()),
      d_parent(d_tokens.size()), d_pos(d_tokens.size());
  DeviceBuffer<uint32_t> d_vis(static_cast<size_t>(batch) * rows_per * words);
  TreeRequests requests;
  requests.batch = batch;
  requests.depth = depth;
  requests.max_budget = budget;
  requests.budget = d_budget.get();
  requests.root_token = d_root.get();
  requests.start_pos = d_start.get();
  TreeArrays gpu_trees;
  gpu_trees.rows = rows_per;
  gpu_trees.vis_words = words;
  gpu_trees.n = d_n.get();
  gpu_trees.tokens = d_tokens.get();
  gpu_trees.depth = d_depth.get();
  gpu_trees.parent = d_parent.get();
  gpu_trees.positions = d_pos.get();
  gpu_trees.vis = d_vis.get();
  const TreeBuildParams p = make_tree_build_params(requests, topk, gpu_trees);
  auto run = [&](int) { check(tree_build(p, env.stream)); };
  const Timing t = env.timer->each(run, static_cast<int>(c.num("warm", 3)), reps_of(c, env, 100));
  put_timing(r, t);
  r.num("graph_ms", env.timer->in_graph(run, 20));

  // the reference heap on this thread (one core): the same trees, one after another
  KD_CUDA_CHECK(cudaStreamSynchronize(env.stream));
  const std::vector<int32_t> g_n = d_n.download(), g_tokens = d_tokens.download(), g_parent = d_parent.download();
  bench::TreeHeap heap;
  std::vector<bench::HeapTree> trees(batch);
  std::vector<double> per_tree_us;
  const int heap_reps = env.quick ? 1 : 3;
  for (int rep = 0; rep < heap_reps; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int b = 0; b < batch; ++b)
      heap.build(logp.data() + static_cast<size_t>(b) * depth * K, tok.data() + static_cast<size_t>(b) * depth * K, depth,
                 K, budget, roots[b], &trees[b]);
    const std::chrono::duration<double, std::micro> dt = std::chrono::steady_clock::now() - t0;
    per_tree_us.push_back(dt.count() / batch);
  }
  std::sort(per_tree_us.begin(), per_tree_us.end());
  r.num("heap_ms_per_tree", per_tree_us[per_tree_us.size() / 2] / 1e3);
  r.num("heap_ms", per_tree_us[per_tree_us.size() / 2] / 1e3 * batch);
  int differ = 0, max_depth = 0;
  for (int b = 0; b < batch; ++b) {
    const bench::HeapTree& h = trees[b];
    bool same = g_n[b] == h.n;
    for (int i = 0; same && i <= h.n; ++i) {
      const size_t o = static_cast<size_t>(b) * rows_per + i;
      same = g_tokens[o] == h.tokens[i] && g_parent[o] == h.parent[i];
    }
    differ += same ? 0 : 1;
    for (int d : h.depth) max_depth = std::max(max_depth, d);
  }
  r.integer("trees_differing_from_heap", differ);
  r.integer("max_tree_depth", max_depth);
}

// ---- tree_accept + cache_compact ------------------------------------------------------------------

void bench_accept(const Case& c, Env& env, Record& r) {
  const int batch = static_cast<int>(c.need("batch")), budget = static_cast<int>(c.need("budget"));
  const int rows = budget + 1;
  std::vector<int32_t> n(batch, budget), tokens(static_cast<size_t>(batch) * rows), parent(tokens.size()), choice(tokens.size());
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < rows; ++i) {
      const size_t o = static_cast<size_t>(b) * rows + i;
      parent[o] = i == 0 ? -1 : (i - 1) / 2;  // a binary tree: depth ~log2(N)
      tokens[o] = 1000 + i;
      const int child = 2 * i + 1;
      choice[o] = child < rows ? 1000 + child : 7;  // follow the leftmost path to a leaf
    }
  DeviceBuffer<int32_t> dn(n), dt(tokens), dp(parent), dc(choice), acc(static_cast<size_t>(batch) * kAcceptMaxPath),
      len(batch), bonus(batch);
  TreeArrays trees;
  trees.rows = rows;
  trees.n = dn.get();
  trees.tokens = dt.get();
  trees.parent = dp.get();
  AcceptedPaths paths;
  paths.max_path = kAcceptMaxPath;
  paths.accepted = acc.get();
  paths.accept_len = len.get();
  paths.bonus = bonus.get();
  const TreeAcceptParams p = make_tree_accept_params(batch, trees, target_tokens(dc.get()), paths);
  auto run = [&](int) { check(tree_accept(p, env.stream)); };
  put_timing(r, env.timer->each(run, static_cast<int>(c.num("warm", 3)), reps_of(c, env, 100)));
  r.num("graph_ms", env.timer->in_graph(run, 20));
}

void bench_compact(const Case& c, Env& env, Record& r) {
  const int batch = static_cast<int>(c.need("batch")), layers = static_cast<int>(c.num("layers", 61));
  const int kept = static_cast<int>(c.num("rows", 9));  // accepted path length, root included
  const int width = kVerifyQKDim / 2, past = 4096;      // 576 bf16 per row, in 32-bit words
  const int64_t cache_rows = past + kAcceptMaxPath;
  DeviceBuffer<uint32_t> cache(static_cast<size_t>(layers) * batch * cache_rows * width);
  KD_CUDA_CHECK(cudaMemsetAsync(cache.get(), 0x3c, cache.size() * sizeof(uint32_t), env.stream));
  std::vector<int32_t> accepted(static_cast<size_t>(batch) * kAcceptMaxPath, -1), lens(batch, kept), pasts(batch, past);
  for (int b = 0; b < batch; ++b)
    for (int j = 0; j < kept; ++j) accepted[static_cast<size_t>(b) * kAcceptMaxPath + j] = j == 0 ? 0 : 2 * j;
  DeviceBuffer<int32_t> d_acc(accepted), d_len(lens), d_past(pasts);
  CacheWords words;
  words.cache = cache.get();
  words.layers = layers;
  words.row_words = width;
  words.row_stride = width;
  words.batch_stride = cache_rows * width;
  words.layer_stride = words.batch_stride * batch;
  AcceptedPaths paths;
  paths.max_path = kAcceptMaxPath;
  paths.accepted = d_acc.get();
  paths.accept_len = d_len.get();
  const CacheCompactParams p = make_cache_compact_params(batch, words, d_past.get(), paths);
  auto run = [&](int) { check(cache_compact(p, env.stream)); };
  const Timing t = env.timer->each(run, static_cast<int>(c.num("warm", 3)), reps_of(c, env, 100));
  put_timing(r, t);
  r.num("gbps", 2.0 * layers * batch * (kept - 1) * width * 4.0 / t.median / 1e6);  // bytes read + written
}

// ---- cases ------------------------------------------------------------------------------------------

const std::map<std::string, void (*)(const Case&, Env&, Record&)>& suites() {
  static const std::map<std::string, void (*)(const Case&, Env&, Record&)> s = {
      {"gemm", bench_gemm},         {"copy", bench_copy},     {"launch", bench_launch}, {"mma", bench_mma},
      {"verify_attn", bench_verify}, {"topk", bench_topk},
      {"tree_build", bench_tree_build}, {"accept", bench_accept}, {"compact", bench_compact},
  };
  return s;
}

const char* kDefaultCases[] = {
    "gemm m=8192 n=8192 k=8192",
    "copy mb=1024",
    "launch smem_kb=0",
    "verify_attn heads=64 n=64 prefix=32768",
    "verify_attn heads=8 n=64 prefix=32768",
    "verify_attn heads=64 n=1 prefix=32768",
    "topk rows=448 vocab=163840 k=256",
    "tree_build batch=64 budget=256 depth=15",
    "tree_build batch=1 budget=256 depth=15",
    "accept batch=64 budget=256",
    "compact batch=64",
};

}  // namespace

int main(int argc, char** argv) {
  const char* cases_path = nullptr;
  const char* json_path = nullptr;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--cases") && i + 1 < argc) cases_path = argv[++i];
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else {
      std::fprintf(stderr, "usage: %s [--cases FILE] [--json PATH] [--quick]\n", argv[0]);
      return 2;
    }
  }
  std::vector<Case> cases;
  try {
    if (cases_path) cases = bench::read_cases(cases_path);
    else
      for (const char* line : kDefaultCases) cases.push_back(bench::parse_case(line));
    for (const Case& c : cases)
      if (!suites().count(c.suite)) throw std::runtime_error("case `" + c.line + "`: suite not implemented");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kernels: %s\n", e.what());
    return 2;
  }
  FILE* json = json_path ? std::fopen(json_path, "w") : nullptr;
  if (json_path && !json) {
    std::fprintf(stderr, "bench_kernels: cannot write %s\n", json_path);
    return 2;
  }
  int failed = 0;
  try {
    cudaDeviceProp prop;
    KD_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("# %s (sm_%d%d, %d SMs), %zu cases\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                cases.size());
    cudaStream_t stream;
    KD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cublasHandle_t blas;
    KD_CUBLAS_CHECK(cublasCreate(&blas));
    Timer timer(stream);
    Env env{stream, blas, &timer, quick};
    for (const Case& c : cases) {
      Record r;
      r.str("suite", c.suite);
      for (const auto& [k, v] : c.args) r.str(k, v);
      r.str("case", c.line);
      try {
        suites().at(c.suite)(c, env, r);
        r.boolean("ok", true);
      } catch (const std::exception& e) {
        ++failed;
        r.boolean("ok", false);
        r.str("error", e.what());
        (void)cudaGetLastError();
        (void)cudaStreamSynchronize(stream);
      }
      const std::string line = r.json();
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
      if (json) {
        std::fprintf(json, "%s\n", line.c_str());
        std::fflush(json);
      }
    }
    KD_CUBLAS_CHECK(cublasDestroy(blas));
    KD_CUDA_CHECK(cudaStreamDestroy(stream));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kernels: %s\n", e.what());
    failed = std::max(failed, 1);
  }
  if (json) std::fclose(json);
  return failed ? 1 : 0;
}
