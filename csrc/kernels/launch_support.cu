// Launch helpers shared by every kernel family (API: launch_support.h).
#include <mutex>
#include <string>
#include <unordered_map>

#include "launch_support.h"

#include "common/device_profile.h"

namespace kdtree {
namespace {

// One lock for both caches: they are touched once per device (and kernel) in steady state.
std::mutex& cache_lock() {
  static std::mutex m;
  return m;
}

KernelResult cuda_failure(const std::string& what, cudaError_t err) {
  return KernelResult::cuda(what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

}  // namespace

KernelResult current_device_limits(DeviceLimits* out) {
  static std::unordered_map<int, DeviceLimits> cache;
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return cuda_failure("reading the current device", err);
  {
    std::lock_guard<std::mutex> hold(cache_lock());
    if (auto it = cache.find(dev); it != cache.end()) {
      *out = it->second;
      return KernelResult::success();
    }
  }
  DeviceFacts f;
  err = cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&f.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&f.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&f.cc_major, cudaDevAttrComputeCapabilityMajor, dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&f.cc_minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (err != cudaSuccess) return cuda_failure("reading the properties of device " + std::to_string(dev), err);
  // KDTREE_DEVICE_PROFILE: plan as on the named device, which may only take away
  std::string problem;
  const DeviceProfile* profile = device_profile_from_env(&problem);
  if (!problem.empty()) return KernelResult::invalid(problem);
  if (profile) problem = profile_exceeds_device(*profile, f);
  if (!problem.empty()) return KernelResult::invalid(problem);
  const DeviceFacts seen = facts_under_profile(f, profile);
  DeviceLimits d;
  d.sms = seen.sms;
  d.smem_optin = seen.smem_optin;
  d.smem_per_sm = seen.smem_per_sm;
  d.wgmma = facts_have_wgmma(seen);
  d.pdl = seen.cc_major >= 9;
  d.profile = profile;
  std::lock_guard<std::mutex> hold(cache_lock());
  cache[dev] = d;
  *out = d;
  return KernelResult::success();
}

KernelResult allow_dynamic_smem(const void* kernel, size_t bytes, const char* what) {
  // (device, kernel) -> bytes already allowed
  static std::unordered_map<const void*, std::unordered_map<int, size_t>> allowed;
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return cuda_failure(std::string(what) + ": reading the current device", err);
  std::lock_guard<std::mutex> hold(cache_lock());
  size_t& have = allowed[kernel][dev];
  if (have >= bytes) return KernelResult::success();
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // not a sticky error: do not let the next launch check report it
    return cuda_failure(std::string(what) + ": allowing " + std::to_string(bytes) + " bytes of shared memory", err);
  }
  have = bytes;
  return KernelResult::success();
}

KernelResult prefer_shared_carveout(const void* kernel, const char* what) {
  static std::unordered_map<const void*, std::unordered_map<int, bool>> done;  // (kernel, device) -> set
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return cuda_failure(std::string(what) + ": reading the current device", err);
  std::lock_guard<std::mutex> hold(cache_lock());
  bool& set = done[kernel][dev];
  if (set) return KernelResult::success();
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // not a sticky error
    return cuda_failure(std::string(what) + ": asking for the largest shared-memory carveout", err);
  }
  set = true;
  return KernelResult::success();
}

KernelResult launch_status(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return KernelResult::success();
  return cuda_failure(what, err);
}

KernelResult launch_status(cudaError_t returned, const char* what) {
  const cudaError_t last = cudaGetLastError();
  if (returned != cudaSuccess) return cuda_failure(what, returned);
  if (last != cudaSuccess) return cuda_failure(what, last);
  return KernelResult::success();
}

}  // namespace kdtree
