// The verify_attn plans of a sweep of shapes on the H200's limits (132 SMs, 227 KB a block,
// sm_90a): one line a shape. Built against two trees and diffed, it lists the shapes where a
// plan change moves the split count (stop 41: lease 5's cases).
//   g++ -std=c++17 -O1 -I<tree>/csrc -I/usr/local/cuda/include -o plans plan_sweep.cpp && ./plans
#include "kernels/verify_attn_plan.h"
#include <cstdio>
using namespace kdtree;
int main() {
  for (int heads : {8, 16, 64}) for (int n : {0, 1, 8, 16, 32, 64, 256}) for (int batch : {1, 2, 4})
  for (int prefix : {1024, 8192, 16384, 32768, 49152, 65536, 131072}) {
    VerifyAttnParams p; p.dtype = AttnDType::kBF16; p.batch = batch; p.heads = heads; p.tree_len = n + 1;
    p.max_prefix = prefix; p.vis_words = (n + 32) / 32; p.scale = 0.07f;
    alignas(16) static char buf[64]; p.q_lat = buf; p.q_pe = buf; p.kv = buf; p.out = buf; p.vis = reinterpret_cast<const uint32_t*>(buf);
    p.kv_batch_stride = (prefix + n + 1) * 576;
    VerifyAttnPlan pl;
    if (!make_verify_attn_plan(p, 132, 232448, 233472, &pl, true).ok()) { printf("err\n"); continue; }
    printf("H=%d n=%d B=%d prefix=%d: config %d splits %d split_len %d\n", heads, n, batch, prefix, pl.config, pl.splits, pl.split_len);
  }
}
