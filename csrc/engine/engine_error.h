// How the engine reports failure inside: EngineError carries a kd_status and a sentence a
// person can act on; the C API (api.cpp) turns it into the status and the last-error text.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "common/cuda_check.h"
#include "engine/kdtree_engine.h"
#include "kernels/kernel_status.h"

namespace kdtree::engine {

struct EngineError : std::runtime_error {
  kd_status status;
  EngineError(kd_status s, const std::string& message) : std::runtime_error(message), status(s) {}
};

[[noreturn]] inline void fail(kd_status status, const std::string& message) { throw EngineError(status, message); }

// A kernel launcher's result: its argument errors are engine bugs or limits, CUDA errors
// are CUDA errors.
inline void check_kernel(const KernelResult& r) {
  if (r.ok()) return;
  switch (r.status) {
    case KernelStatus::kCudaError: fail(KD_CUDA_ERROR, r.message);
    case KernelStatus::kOverLimit: fail(KD_OVER_LIMIT, r.message);
    default: fail(KD_INTERNAL, "kernel arguments rejected: " + r.message);
  }
}

inline std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

}  // namespace kdtree::engine
