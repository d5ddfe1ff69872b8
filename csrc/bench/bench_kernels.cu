// Timings of the DDTree kernels on the current GPU, next to a cuBLAS bf16 GEMM measured in
// the same run (the device's matrix-rate ceiling):
//   tree_build      B=64 requests, budget N=256, depth 15, top-256 arrays (and from logits,
//                   V=163840, through topk_logprobs first)
//   verify_attn     64 heads, n=64, prefix 32768 (bf16, tensor cores): TFLOP/s with
//                   FLOPs = 2 * H * (1+n) * prefix * (576 + 512); and a few other shapes
//   tree_accept + cache_compact  B=64
// Each number is the median of many runs timed with CUDA events after warm-up, on random
// (never zero) inputs, rotating among input sets larger than L2 where bytes matter.
//
//   bench_kernels [--json PATH] [--quick]
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "kernels/tree_accept.cuh"
#include "kernels/tree_build.cuh"
#include "kernels/verify_attn.cuh"
#include "kernels/verify_attn_plan.h"

using namespace kdtree;

namespace {

template <class T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) { KD_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T))); }
  explicit Dev(const std::vector<T>& h) : Dev(h.size()) {
    KD_CUDA_CHECK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  Dev(const Dev&) = delete;
  ~Dev() { cudaFree(p); }
};

void check(const KernelResult& r) {
  if (!r.ok()) throw CudaError(r.message);
}

// Median milliseconds of `reps` runs of fn(i), each timed with events, after `warm` runs.
double time_ms(const std::function<void(int)>& fn, int warm, int reps) {
  cudaEvent_t a, b;
  KD_CUDA_CHECK(cudaEventCreate(&a));
  KD_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < warm; ++i) fn(i);
  KD_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    KD_CUDA_CHECK(cudaEventRecord(a));
    fn(i);
    KD_CUDA_CHECK(cudaEventRecord(b));
    KD_CUDA_CHECK(cudaEventSynchronize(b));
    KD_CUDA_CHECK(cudaEventElapsedTime(&ms[i], a, b));
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

std::vector<uint16_t> random_bf16(size_t n, std::mt19937_64& rng, float stddev = 1.0f) {
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<uint16_t> v(n);
  for (auto& x : v) {
    const __nv_bfloat16 b = __float2bfloat16_rn(d(rng));
    std::memcpy(&x, &b, 2);
  }
  return v;
}

struct Row {
  std::string name;
  double ms;
  double tflops;  // 0 if not a FLOP-bound measure
  double gbps;    // 0 if not reported
  std::string note;
};

std::vector<Row> rows;

void report(const Row& r) {
  rows.push_back(r);
  std::printf("%-52s %9.4f ms", r.name.c_str(), r.ms);
  if (r.tflops > 0) std::printf("  %7.1f TFLOP/s", r.tflops);
  if (r.gbps > 0) std::printf("  %7.0f GB/s", r.gbps);
  if (!r.note.empty()) std::printf("  (%s)", r.note.c_str());
  std::printf("\n");
  std::fflush(stdout);
}

// ---- cuBLAS bf16 GEMM: the matrix-rate ceiling of this device ----------------------------
void bench_gemm(cublasHandle_t h, int m, int n, int k, int reps) {
  std::mt19937_64 rng(7);
  Dev<uint16_t> A(random_bf16(static_cast<size_t>(m) * k, rng)), B(random_bf16(static_cast<size_t>(k) * n, rng));
  Dev<uint16_t> C(static_cast<size_t>(m) * n);
  const float alpha = 1.0f, beta = 0.0f;
  auto run = [&](int) {
    KD_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, A.p, CUDA_R_16BF, m, B.p, CUDA_R_16BF, k,
                                 &beta, C.p, CUDA_R_16BF, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  const double ms = time_ms(run, 3, reps);
  const double flops = 2.0 * m * n * k;
  report({"cublas bf16 gemm " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k), ms,
          flops / ms / 1e9, 0.0, ""});
}

// ---- tree_build ---------------------------------------------------------------------------
void bench_tree_build(int batch, int budget, int depth, int vocab, bool from_logits, int reps) {
  std::mt19937_64 rng(11);
  const int K = std::min(budget, vocab);
  // drafter-like rows: a few confident tokens, a long tail
  std::vector<float> logits(static_cast<size_t>(batch) * depth * vocab);
  std::normal_distribution<float> nd(0.0f, 2.5f);
  for (auto& x : logits) x = nd(rng);
  std::vector<float> logp(static_cast<size_t>(batch) * depth * K);
  std::vector<int32_t> tok(logp.size());
  if (!from_logits) {  // sorted random log-probabilities, distinct tokens
    std::exponential_distribution<float> ed(1.0f);
    for (int r = 0; r < batch * depth; ++r) {
      float acc = -0.05f;
      for (int k = 0; k < K; ++k) {
        acc -= ed(rng) * 0.08f;
        logp[static_cast<size_t>(r) * K + k] = acc;
        tok[static_cast<size_t>(r) * K + k] = k * 7 + r % 7;
      }
    }
  }
  std::vector<int32_t> budgets(batch, budget), roots(batch, 1), start(batch, 100);
  const int rows_per = budget + 1, words = (rows_per + 31) / 32;
  Dev<float> d_logits(from_logits ? logits : std::vector<float>{}), d_logp(logp);
  Dev<int32_t> d_tok(tok), d_budget(budgets), d_root(roots), d_start(start), d_n(batch);
  Dev<int32_t> d_tokens(static_cast<size_t>(batch) * rows_per), d_depth(d_tokens.n), d_parent(d_tokens.n), d_pos(d_tokens.n);
  Dev<uint32_t> d_vis(static_cast<size_t>(batch) * rows_per * words);
  TreeBuildParams p;
  p.batch = batch;
  p.depth = depth;
  p.topk = K;
  p.max_budget = budget;
  p.logp = d_logp.p;
  p.tok = d_tok.p;
  p.budget = d_budget.p;
  p.root_token = d_root.p;
  p.start_pos = d_start.p;
  p.max_nodes = budget;
  p.vis_words = words;
  p.n_out = d_n.p;
  p.tokens = d_tokens.p;
  p.depth_out = d_depth.p;
  p.parent = d_parent.p;
  p.positions = d_pos.p;
  p.vis = d_vis.p;
  TopkLogprobsParams t;
  t.rows = batch * depth;
  t.vocab = vocab;
  t.k = K;
  t.logits = d_logits.p;
  t.logp = d_logp.p;
  t.tok = d_tok.p;
  const std::string shape = "B=" + std::to_string(batch) + " N=" + std::to_string(budget) + " D=" + std::to_string(depth);
  if (from_logits) {
    const double ms_topk = time_ms([&](int) { check(topk_logprobs(t, nullptr)); }, 3, reps);
    const double bytes = 4.0 * t.rows * static_cast<double>(vocab);
    report({"topk_logprobs V=" + std::to_string(vocab) + " rows=" + std::to_string(t.rows), ms_topk, 0.0,
            bytes / ms_topk / 1e6, "logits read once per radix pass"});
    check(topk_logprobs(t, nullptr));
  }
  const double ms = time_ms([&](int) { check(tree_build(p, nullptr)); }, 3, reps);
  report({"tree_build " + shape + (from_logits ? " (after topk)" : " (top-K arrays)"), ms, 0.0, 0.0, ""});
}

// ---- verify_attn ----------------------------------------------------------------------------
void bench_verify(int batch, int heads, int n, int prefix, AttnDType dtype, int reps, const char* note) {
  std::mt19937_64 rng(13);
  const int T = n + 1, words = (T + 31) / 32;
  const int64_t rows = static_cast<int64_t>(prefix) + T;
  const int64_t kv_elems = rows * kVerifyQKDim * batch;
  const size_t esz = dtype == AttnDType::kBF16 ? 2 : 4;
  // enough KV sets to overflow L2 (~60 MB) when one set fits in it
  const double set_bytes = static_cast<double>(kv_elems) * esz;
  const int sets = set_bytes >= 200e6 ? 1 : std::min(8, static_cast<int>(std::ceil(200e6 / set_bytes)));
  std::vector<uint16_t> host_kv = random_bf16(static_cast<size_t>(kv_elems), rng);
  std::vector<uint16_t> host_q = random_bf16(static_cast<size_t>(batch) * T * heads * kVerifyLatentDim, rng);
  std::vector<uint16_t> host_qpe = random_bf16(static_cast<size_t>(batch) * T * heads * kVerifyRopeDim, rng);
  auto widen = [](const std::vector<uint16_t>& v) {
    std::vector<float> f(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const uint32_t u = static_cast<uint32_t>(v[i]) << 16;
      std::memcpy(&f[i], &u, 4);
    }
    return f;
  };
  std::vector<Dev<uint8_t>*> kv_sets;
  std::vector<uint8_t> kv_bytes(kv_elems * esz);
  if (esz == 2) std::memcpy(kv_bytes.data(), host_kv.data(), kv_bytes.size());
  else {
    const std::vector<float> f = widen(host_kv);
    std::memcpy(kv_bytes.data(), f.data(), kv_bytes.size());
  }
  for (int s = 0; s < sets; ++s) kv_sets.push_back(new Dev<uint8_t>(kv_bytes));
  auto as_bytes = [&](const std::vector<uint16_t>& v) {
    std::vector<uint8_t> b(v.size() * esz);
    if (esz == 2) std::memcpy(b.data(), v.data(), b.size());
    else {
      const std::vector<float> f = widen(v);
      std::memcpy(b.data(), f.data(), b.size());
    }
    return b;
  };
  Dev<uint8_t> q(as_bytes(host_q)), qpe(as_bytes(host_qpe));
  Dev<uint8_t> out(static_cast<size_t>(batch) * T * heads * kVerifyLatentDim * esz);
  // a chain-shaped tree (node i's parent is i-1 when i is odd, else i/2): a realistic mix
  std::vector<uint32_t> vis(static_cast<size_t>(batch) * T * words, 0u);
  std::vector<int> parent(T, -1);
  for (int i = 1; i < T; ++i) parent[i] = (i % 2) ? i - 1 : i / 2;
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < T; ++i)
      for (int a = i; a >= 0; a = parent[a]) {
        vis[(static_cast<size_t>(b) * T + i) * words + a / 32] |= 1u << (a % 32);
        if (a == 0) break;
      }
  Dev<uint32_t> d_vis(vis);
  VerifyAttnParams p;
  p.dtype = dtype;
  p.batch = batch;
  p.heads = heads;
  p.tree_len = T;
  p.max_prefix = prefix;
  p.q_lat = q.p;
  p.q_pe = qpe.p;
  p.kv_batch_stride = rows * kVerifyQKDim;
  p.vis = d_vis.p;
  p.vis_words = words;
  p.scale = 1.0f / std::sqrt(192.0f);
  p.out = out.p;
  p.kv = kv_sets[0]->p;  // the plan validates every pointer; the timed loop rotates the sets
  VerifyAttnPlan plan;
  check(verify_attn_plan(p, &plan));
  Dev<uint8_t> ws(plan.workspace_bytes);
  p.workspace = ws.p;
  p.workspace_bytes = plan.workspace_bytes;
  const double ms = time_ms(
      [&](int i) {
        p.kv = kv_sets[i % sets]->p;
        check(verify_attn(p, nullptr));
      },
      3, reps);
  const double flops = 2.0 * batch * heads * T * static_cast<double>(prefix) * (kVerifyQKDim + kVerifyLatentDim);
  const double bytes = static_cast<double>(kv_elems) * esz;
  char shape[160];
  std::snprintf(shape, sizeof shape, "verify_attn %s B=%d H=%d n=%d prefix=%d", dtype == AttnDType::kBF16 ? "bf16" : "f32",
                batch, heads, n, prefix);
  char plan_note[160];
  std::snprintf(plan_note, sizeof plan_note, "%s%s%d splits x %d keys, cfg %d", note, *note ? "; " : "", plan.splits,
                plan.split_len, plan.config);
  report({shape, ms, flops / ms / 1e9, bytes / ms / 1e6, plan_note});
  for (auto* s : kv_sets) delete s;
}

// ---- tree_accept + cache_compact ----------------------------------------------------------
void bench_accept(int batch, int budget, int depth, int reps) {
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
  (void)depth;
  Dev<int32_t> dn(n), dt(tokens), dp(parent), dc(choice), acc(static_cast<size_t>(batch) * kAcceptMaxPath), len(batch), bonus(batch);
  const int width = 288, past = 4096;  // 576 bf16 per row, in 32-bit words
  const int layers = 61;
  const int64_t cache_rows = past + rows;
  Dev<uint32_t> cache(static_cast<size_t>(layers) * batch * cache_rows * width);
  KD_CUDA_CHECK(cudaMemset(cache.p, 0x3c, cache.n * sizeof(uint32_t)));
  std::vector<int32_t> past_v(batch, past);
  Dev<int32_t> dpast(past_v);
  TreeAcceptParams p;
  p.batch = batch;
  p.rows = rows;
  p.n = dn.p;
  p.tokens = dt.p;
  p.parent = dp.p;
  p.choice = dc.p;
  p.max_path = kAcceptMaxPath;
  p.accepted = acc.p;
  p.accept_len = len.p;
  p.bonus = bonus.p;
  const double ms = time_ms([&](int) { check(tree_accept(p, nullptr)); }, 3, reps);
  report({"tree_accept B=" + std::to_string(batch) + " N=" + std::to_string(budget) + " (walk to a leaf)", ms, 0, 0, ""});
  CacheCompactParams c;
  c.batch = batch;
  c.layers = layers;
  c.row_words = width;
  c.row_stride = width;
  c.batch_stride = cache_rows * width;
  c.layer_stride = c.batch_stride * batch;
  c.cache = cache.p;
  c.past_len = dpast.p;
  c.accepted = acc.p;
  c.accept_len = len.p;
  c.max_path = kAcceptMaxPath;
  std::vector<int32_t> host_len(batch);
  KD_CUDA_CHECK(cudaMemcpy(host_len.data(), len.p, batch * sizeof(int32_t), cudaMemcpyDeviceToHost));
  const double moved = 2.0 * layers * batch * (host_len[0] - 1) * width * 4.0;
  const double ms2 = time_ms([&](int) { check(cache_compact(c, nullptr)); }, 3, reps);
  report({"cache_compact B=" + std::to_string(batch) + " x 61 layers, " + std::to_string(host_len[0]) + " rows kept", ms2, 0,
          moved / ms2 / 1e6, "bytes read + written"});
}

void write_json(const char* path) {
  FILE* f = std::fopen(path, "w");
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path);
    return;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) std::snprintf(prop.name, sizeof prop.name, "unknown");
  std::fprintf(f, "{\n  \"device\": \"%s\",\n  \"sm\": \"%d.%d\",\n  \"results\": [\n", prop.name, prop.major, prop.minor);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::fprintf(f, "    {\"name\": \"%s\", \"ms\": %.6f, \"tflops\": %.3f, \"gbps\": %.1f, \"note\": \"%s\"}%s\n", r.name.c_str(),
                 r.ms, r.tflops, r.gbps, r.note.c_str(), i + 1 < rows.size() ? "," : "");
  }
  std::fprintf(f, "  ]\n}\n");
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  const char* json = nullptr;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else {
      std::fprintf(stderr, "usage: %s [--json PATH] [--quick]\n", argv[0]);
      return 2;
    }
  }
  try {
    int count = 0;
    KD_CUDA_CHECK(cudaGetDeviceCount(&count));
    cudaDeviceProp prop;
    KD_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("# %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
    const int reps = quick ? 10 : 50;
    cublasHandle_t h;
    KD_CUBLAS_CHECK(cublasCreate(&h));
    bench_gemm(h, 8192, 8192, 8192, quick ? 5 : 20);
    bench_gemm(h, 4160, 32768, 576, reps);  // the QK^T of the verify shape below, as one GEMM
    bench_verify(1, 64, 64, 32768, AttnDType::kBF16, reps, "the issue's shape");
    bench_verify(1, 64, 64, 32768, AttnDType::kF32, quick ? 3 : 10, "exactness path");
    bench_verify(1, 8, 64, 32768, AttnDType::kBF16, reps, "8 heads: one GPU's share of 64 on 8");
    bench_verify(1, 64, 1, 32768, AttnDType::kBF16, reps, "n=1: memory-bound");
    bench_verify(1, 64, 256, 32768, AttnDType::kBF16, reps, "");
    bench_verify(8, 64, 64, 4096, AttnDType::kBF16, reps, "batched");
    bench_verify(1, 64, 64, 131072, AttnDType::kBF16, quick ? 5 : 20, "");
    bench_tree_build(64, 256, 15, 163840, false, reps);
    bench_tree_build(64, 256, 7, 163840, false, reps);
    bench_tree_build(64, 256, 7, 163840, true, quick ? 5 : 20);
    bench_tree_build(64, 1024, 31, 163840, false, quick ? 3 : 10);
    bench_accept(64, 256, 15, reps);
    KD_CUBLAS_CHECK(cublasDestroy(h));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kernels: %s\n", e.what());
    if (json) write_json(json);
    return 1;
  }
  if (json) write_json(json);
  return 0;
}
