// The CUDA runtime calls of the engine, on the host, for the emulated build
// (lib/libkdtree_engine_emu.so): with the SIMT emulator running the kernels, this lets the
// whole native engine run on a machine without a GPU, so CI checks it against the torch
// reference end to end.
//
// Semantics: one pretend device (a device profile's limits, an H200's by default), memory is host memory, every "async"
// call completes before it returns (the emulator runs each launch to completion, so stream
// order is program order), events record the host clock, graph capture is not supported
// (the engine falls back to eager rounds, as it does on a GPU that refuses a capture).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "common/device_profile.h"

namespace {

// The pretend device: the profile $KDTREE_DEVICE_PROFILE names (an H200 when unset, so
// kernels plan as they will on the GPU they were tuned on; an unknown name also falls back to
// it here, and current_device_limits refuses it with the list of names).
const kdtree::DeviceProfile& emu_device() {
  static const kdtree::DeviceProfile& d = [&]() -> const kdtree::DeviceProfile& {
    const kdtree::DeviceProfile* p = kdtree::device_profile_from_env(nullptr);
    return p ? *p : *kdtree::find_device_profile(kdtree::kDefaultEmulatedProfile);
  }();
  return d;
}
size_t emu_device_bytes() { return static_cast<size_t>(emu_device().memory_gb) << 30; }
constexpr size_t kEmuAlign = 256;  // cudaMalloc's alignment

struct EmuState {
  std::mutex mutex;
  std::map<void*, size_t> allocations;
  size_t in_use = 0;
  cudaError_t last = cudaSuccess;
};

EmuState& state() {
  static EmuState s;
  return s;
}

cudaError_t set_error(cudaError_t e) {
  if (e != cudaSuccess) state().last = e;
  return e;
}

struct EmuEvent {
  std::chrono::steady_clock::time_point at{};
  bool recorded = false;
};

}  // namespace

extern "C" {

cudaError_t cudaMalloc(void** ptr, size_t size) {
  if (!ptr) return set_error(cudaErrorInvalidValue);
  EmuState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.in_use + size > emu_device_bytes()) return set_error(cudaErrorMemoryAllocation);
  void* p = std::aligned_alloc(kEmuAlign, (size + kEmuAlign - 1) / kEmuAlign * kEmuAlign + kEmuAlign);
  if (!p) return set_error(cudaErrorMemoryAllocation);
  // garbage, like fresh device memory: reads before writes show. 0xA5 bytes are tiny numbers in
  // bf16 and float32; KD_EMU_POISON=255 makes them NaN, so that any such read reaches the results
  const char* poison = std::getenv("KD_EMU_POISON");
  std::memset(p, poison && *poison ? std::atoi(poison) : 0xA5, size);
  s.allocations[p] = size;
  s.in_use += size;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
  EmuState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.allocations.find(ptr);
  if (it == s.allocations.end()) return set_error(cudaErrorInvalidValue);
  s.in_use -= it->second;
  s.allocations.erase(it);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  if (!ptr) return set_error(cudaErrorInvalidValue);
  *ptr = std::aligned_alloc(kEmuAlign, (size + kEmuAlign - 1) / kEmuAlign * kEmuAlign + kEmuAlign);
  return *ptr ? cudaSuccess : set_error(cudaErrorMemoryAllocation);
}

cudaError_t cudaFreeHost(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total_b) {
  EmuState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (free_b) *free_b = emu_device_bytes() - s.in_use;
  if (total_b) *total_b = emu_device_bytes();
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind) {
  if (n && (!dst || !src)) return set_error(cudaErrorInvalidValue);
  std::memmove(dst, src, n);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, n, kind);
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t n, cudaStream_t) {
  if (n && !dst) return set_error(cudaErrorInvalidValue);
  std::memset(dst, value, n);
  return cudaSuccess;
}

cudaError_t cudaMemset(void* dst, int value, size_t n) { return cudaMemsetAsync(dst, value, n, nullptr); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  static int token;  // streams are only names here
  *stream = reinterpret_cast<cudaStream_t>(&token);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }  // every call has completed
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int) { return cudaSuccess; }  // already in order
cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus* status) {
  if (status) *status = cudaStreamCaptureStatusNone;  // capture is never active here
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = reinterpret_cast<cudaEvent_t>(new EmuEvent);
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) { return cudaEventCreate(event); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<EmuEvent*>(event);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  auto* e = reinterpret_cast<EmuEvent*>(event);
  e->at = std::chrono::steady_clock::now();
  e->recorded = true;
  return cudaSuccess;
}
cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int) {
  return cudaEventRecord(event, stream);
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  const auto* a = reinterpret_cast<EmuEvent*>(start);
  const auto* b = reinterpret_cast<EmuEvent*>(end);
  if (!a->recorded || !b->recorded) return set_error(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : set_error(cudaErrorInvalidDevice); }

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int) {
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = emu_device().sms; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = emu_device().smem_optin; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = emu_device().smem_per_sm; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = emu_device().cc_major; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = emu_device().cc_minor; return cudaSuccess;
    default: return set_error(cudaErrorInvalidValue);
  }
}

cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute, int) { return cudaSuccess; }

// The emulator models no registers: the blocks the threads and the shared memory allow on an
// SM of the stand-in device (what cuda_runtime.h's cudaOccupancyMaxActiveBlocksPerMultiprocessor
// template calls; the topk_logprobs occupancy query reports it)
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* num_blocks, const void*, int block_size,
                                                                   size_t dynamic_smem, unsigned int) {
  constexpr size_t kSmemReservedPerBlock = 1024;  // the runtime's own share, as on the GPU
  if (!num_blocks || block_size < 1) return set_error(cudaErrorInvalidValue);
  const int by_threads = emu_device().threads_per_sm / block_size;
  const int by_smem = static_cast<int>(static_cast<size_t>(emu_device().smem_per_sm) / (dynamic_smem + kSmemReservedPerBlock));
  *num_blocks = std::max(0, std::min(by_threads, by_smem));
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  const cudaError_t e = state().last;
  state().last = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return state().last; }

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaError (emulated)";
  }
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNotSupported: return "operation not supported (CPU emulation)";
    default: return "error (CPU emulation)";
  }
}

// Graphs: refused, so the engine runs rounds eagerly.
cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode) { return set_error(cudaErrorNotSupported); }
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t* graph) {
  if (graph) *graph = nullptr;
  return set_error(cudaErrorNotSupported);
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t*, cudaGraph_t, unsigned long long) {
  return set_error(cudaErrorNotSupported);
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t) { return set_error(cudaErrorNotSupported); }
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t) { return cudaSuccess; }
cudaError_t cudaGraphDestroy(cudaGraph_t) { return cudaSuccess; }

}  // extern "C"
