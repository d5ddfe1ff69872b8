// Token choice kernel (API: sampling.cuh): one block per row; each thread scans a strided
// part of the vocabulary, then a block-wide argmax (lowest id on ties).
#include "block_scan.cuh"
#include "philox.cuh"
#include "model_dtype.cuh"
#include "sampling.cuh"

namespace kdtree {
namespace kern {

constexpr int kChooseThreads = 256;
constexpr int kPhiloxOutputs = 4;  // uniforms per Philox call

__global__ void __launch_bounds__(kChooseThreads) choose_tokens_kernel(const ChooseTokensParams p) {
  __shared__ float best_v[kChooseThreads];
  __shared__ int best_i[kChooseThreads];
  const int row = static_cast<int>(blockIdx.x), b = row / p.rows, r = row % p.rows;
  const int tid = static_cast<int>(threadIdx.x);
  const float* logits = p.logits + static_cast<int64_t>(row) * p.row_stride;
  const float temp = p.temperature[b];
  const bool sample = temp > 0.0f && p.seed != nullptr;
  uint32_t key[2] = {0, 0}, ctr[4] = {0, static_cast<uint32_t>(r), 0, 0};
  if (sample) {
    key[0] = static_cast<uint32_t>(p.seed[b]);
    key[1] = static_cast<uint32_t>(p.seed[b] >> 32);
    const uint64_t draw = p.draw ? p.draw[b] : 0;
    ctr[2] = static_cast<uint32_t>(draw);
    ctr[3] = static_cast<uint32_t>(draw >> 32);
  }
  float bv = -__builtin_huge_valf();
  int bi = -1;
  // a thread takes groups of 4 consecutive ids: one Philox call gives their 4 uniforms
  for (int v0 = tid * kPhiloxOutputs; v0 < p.vocab; v0 += kChooseThreads * kPhiloxOutputs) {
    uint32_t bits[kPhiloxOutputs] = {0, 0, 0, 0};
    if (sample) {
      ctr[0] = static_cast<uint32_t>(v0 / kPhiloxOutputs);
      philox4x32_10(ctr, key, bits);
    }
    for (int j = 0; j < kPhiloxOutputs && v0 + j < p.vocab; ++j) {
      float x = logits[v0 + j];
      if (sample) x = x / temp - logf(-logf(uniform_open01(bits[j])));
      if (x == x && (bi < 0 || x > bv)) {  // NaN never wins; ties keep the lower id
        bv = x;
        bi = v0 + j;
      }
    }
  }
  best_v[tid] = bv;
  best_i[tid] = bi;
  __syncthreads();
  for (int stride = kChooseThreads / 2; stride > 0; stride /= 2) {
    if (tid < stride) {
      const float ov = best_v[tid + stride];
      const int oi = best_i[tid + stride];
      if (oi >= 0 && (best_i[tid] < 0 || ov > best_v[tid] || (ov == best_v[tid] && oi < best_i[tid]))) {
        best_v[tid] = ov;
        best_i[tid] = oi;
      }
    }
    __syncthreads();
  }
  if (tid == 0) p.out[row] = best_i[0] < 0 ? 0 : best_i[0];  // all-NaN row: token 0, never out of range
}

}  // namespace kern

void philox4x32_10_host(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  kern::philox4x32_10(ctr, key, out);
}

KernelResult choose_tokens(const ChooseTokensParams& p, cudaStream_t stream) {
  if (KernelResult r = check_choose_tokens_params(p); !r.ok()) return r;
  const int rows = p.batch * p.rows;
  if (rows == 0) return KernelResult::success();
  KD_LAUNCH(kern::choose_tokens_kernel, rows, kern::kChooseThreads, 0, stream, p);
  return launch_status("choose_tokens_kernel launch");
}

}  // namespace kdtree
