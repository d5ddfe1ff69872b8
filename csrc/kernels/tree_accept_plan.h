// How tree_accept and cache_compact launch: grid, block and access width. Pure functions of
// the arguments, called by the launchers (tree_accept.cu) and the CPU-emulated tests
// (emu/emu_runners.h), so both run the kernels the same way.
#pragma once

#include <cstdint>

#include "tree_accept.cuh"
#include "tree_accept_kernels.cuh"

namespace kdtree {

struct TreeAcceptPlan {
  int blocks = 0;   // one per request
  int threads = 0;
};

struct CacheCompactPlan {
  dim3 grid;        // (column blocks, requests, layers)
  int threads = 0;
  bool vec4 = false;  // 16-byte accesses: rows, strides and the cache pointer allow them
};

inline KernelResult make_tree_accept_plan(const TreeAcceptParams& p, TreeAcceptPlan* plan) {
  if (KernelResult r = check_tree_accept_params(p); !r.ok()) return r;
  plan->blocks = p.batch;
  plan->threads = kern::kAcceptThreads;
  return KernelResult::success();
}

inline KernelResult make_cache_compact_plan(const CacheCompactParams& p, CacheCompactPlan* plan) {
  if (KernelResult r = check_cache_compact_params(p); !r.ok()) return r;
  CacheCompactPlan pl;
  pl.vec4 = p.row_words % 4 == 0 && p.row_stride % 4 == 0 && p.batch_stride % 4 == 0 && p.layer_stride % 4 == 0 &&
            reinterpret_cast<uintptr_t>(p.cache) % 16 == 0;
  pl.threads = kern::kCompactThreads;
  const int per_block = pl.threads * (pl.vec4 ? 4 : 1);
  pl.grid = dim3(static_cast<unsigned>((p.row_words + per_block - 1) / per_block), static_cast<unsigned>(p.batch),
                 static_cast<unsigned>(p.layers));
  *plan = pl;
  return KernelResult::success();
}

}  // namespace kdtree
