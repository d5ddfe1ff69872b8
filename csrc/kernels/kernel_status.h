// What a kernel launcher returns: launchers check their arguments at the boundary and report
// impossible requests (and failed launches) as a value, never by faulting or throwing.
#pragma once

#include <string>
#include <utility>

namespace kdtree {

enum class KernelStatus {
  kOk = 0,
  kInvalidArgument,  // a shape, count or pointer the kernel cannot work with
  kOverLimit,        // a size over a compiled maximum (budget, depth, heads, ...)
  kCudaError,        // the launch itself failed (message has the CUDA error)
};

struct KernelResult {
  KernelStatus status = KernelStatus::kOk;
  std::string message;  // empty when ok; otherwise says what to change

  bool ok() const { return status == KernelStatus::kOk; }
  static KernelResult success() { return {}; }
  static KernelResult invalid(std::string why) { return {KernelStatus::kInvalidArgument, std::move(why)}; }
  static KernelResult over_limit(std::string why) { return {KernelStatus::kOverLimit, std::move(why)}; }
  static KernelResult cuda(std::string why) { return {KernelStatus::kCudaError, std::move(why)}; }
};

}  // namespace kdtree
