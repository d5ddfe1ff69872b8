// A stand-in for the target's verify pass, for the on-device chain test: the "logits" of
// tree node i are row tokens[i] of a bigram table, and the latent-cache row it appends
// (at past + i) is row tokens[i] of an embedding table. python_engine/refgen/kernel_refs.py
// computes the same thing in numpy.
#pragma once

#include "kernels/device_compat.cuh"

namespace kdtree::test {

struct StandInVerifyParams {
  int batch = 0;
  int rows = 0;                   // R: tree row stride
  int vocab = 0;                  // V: bigram [V, V], embed [V, width]
  int width = 0;                  // floats per cache row
  int cache_rows = 0;             // rows per request in cache
  const int32_t* n = nullptr;     // [B] tree sizes
  const int32_t* tokens = nullptr;  // [B, R]
  const int32_t* past = nullptr;  // [B]
  const float* bigram = nullptr;
  const float* embed = nullptr;
  float* logits = nullptr;        // [B, R, V]: rows 0..n written
  float* cache = nullptr;         // [B, cache_rows, width]: rows past..past+n written
};

constexpr int kStandInThreads = 128;

// grid (R, B): one block per tree row.
__global__ void __launch_bounds__(kStandInThreads) stand_in_verify_kernel(const StandInVerifyParams p) {
  const int i = static_cast<int>(blockIdx.x), b = static_cast<int>(blockIdx.y);
  if (i > p.n[b]) return;
  const int t = p.tokens[static_cast<int64_t>(b) * p.rows + i];
  float* out = p.logits + (static_cast<int64_t>(b) * p.rows + i) * p.vocab;
  for (int v = static_cast<int>(threadIdx.x); v < p.vocab; v += kStandInThreads)
    out[v] = p.bigram[static_cast<int64_t>(t) * p.vocab + v];
  float* row = p.cache + (static_cast<int64_t>(b) * p.cache_rows + p.past[b] + i) * p.width;
  for (int w = static_cast<int>(threadIdx.x); w < p.width; w += kStandInThreads)
    row[w] = p.embed[static_cast<int64_t>(t) * p.width + w];
}

}  // namespace kdtree::test
