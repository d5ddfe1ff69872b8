// What lets one kernel source compile three ways: nvcc's device pass (the real kernels),
// nvcc's host pass (launch stubs), and g++ against the SIMT emulator (KD_SIMT_EMULATION:
// the kernels run on the CPU in tests; see emu/simt_emulator.h).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(KD_SIMT_EMULATION)
#include "emu/simt_emulator.h"
#define KD_DEVICE inline
#define KD_HOST_DEVICE
// dynamic shared memory of the running block
#define KD_DYNAMIC_SMEM(type, name) type* name = reinterpret_cast<type*>(::kdemu::dynamic_smem())
// bar.sync id, count: `count` threads (a multiple of 32) of the block meet at barrier `id`
#define KD_NAMED_BARRIER(id, count) ::kdemu::named_barrier((id), (count))
// bar.arrive id, count: this thread counts towards barrier `id` without waiting for it
#define KD_NAMED_BARRIER_ARRIVE(id, count) ::kdemu::named_barrier_arrive((id), (count))
// a read-only table in device memory, usable from device code
#define KD_DEVICE_TABLE static constexpr
// kernel launches: the emulator runs the grid at once (streams are ignored: everything is
// synchronous there); KD_LAUNCH_FLAT is for kernels with no barrier and no warp collective
#define KD_LAUNCH(kernel, grid, block, smem, stream, ...) \
  ::kdemu::launch(dim3(grid), dim3(block), (smem), kernel, __VA_ARGS__)
#define KD_LAUNCH_FLAT(kernel, grid, block, smem, stream, ...) \
  ::kdemu::launch_flat(dim3(grid), dim3(block), (smem), kernel, __VA_ARGS__)
// a programmatic dependent launch (see kd_launch_overlapped below): everything is serial here
#define KD_LAUNCH_OVERLAPPED(overlap, kernel, grid, block, smem, stream, ...) \
  (::kdemu::launch(dim3(grid), dim3(block), (smem), kernel, __VA_ARGS__), cudaSuccess)
#else
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <utility>
#define KD_DEVICE __device__ __forceinline__
#define KD_HOST_DEVICE __host__ __device__
#define KD_DYNAMIC_SMEM(type, name)                   \
  extern __shared__ __align__(16) uint8_t kd_smem_[]; \
  type* name = reinterpret_cast<type*>(kd_smem_)
#define KD_NAMED_BARRIER(id, count) asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory")
#define KD_NAMED_BARRIER_ARRIVE(id, count) asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory")
#define KD_DEVICE_TABLE static __device__ const
// `kernel` may be a template instance without commas, or a function pointer to one
#define KD_LAUNCH(kernel, grid, block, smem, stream, ...) kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#define KD_LAUNCH_FLAT KD_LAUNCH
// cudaLaunchKernelEx of `kernel` with `count` launch attributes (a cluster shape, a
// programmatic dependency); returns the launch's cudaError_t.
template <typename... KArgs, typename... Args>
inline cudaError_t kd_launch_ex(const cudaLaunchAttribute* attrs, unsigned count, void (*kernel)(KArgs...), dim3 grid,
                                dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = const_cast<cudaLaunchAttribute*>(attrs);
  cfg.numAttrs = count;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...);
}
// Launch `kernel` so that, when `overlap` is set, it may start before the previous kernel on
// the stream has finished (programmatic dependent launch, sm_90+): its blocks run their
// prologue early and call grid_dependency_wait() before touching what that kernel writes.
// Returns the launch's cudaError_t (0 = success).
template <typename... KArgs, typename... Args>
inline cudaError_t kd_launch_overlapped(bool overlap, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                        cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  return kd_launch_ex(attr, overlap ? 1u : 0u, kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}
#define KD_LAUNCH_OVERLAPPED(overlap, kernel, grid, block, smem, stream, ...) \
  ::kd_launch_overlapped((overlap), kernel, dim3(grid), dim3(block), (smem), (stream), __VA_ARGS__)
#endif

// Phase marks inside kernels, for the emulator's profile tool (emu/emu_tree_build_profile.cpp,
// which counts barriers per phase); nothing anywhere else.
#ifndef KD_PHASE
#define KD_PHASE(name) ((void)0)
#endif
// Search events (tree_build: a level grown, a threshold raised), for the same tool.
#ifndef KD_EVENT
#define KD_EVENT(name, a, b) ((void)0)
#endif
// The same from every warp (its lane 0 records it): events of warps that work alone.
#ifndef KD_WARP_EVENT
#define KD_WARP_EVENT(name, a, b) ((void)0)
#endif

namespace kdtree::kern {

// Programmatic dependent launch, device side (sm_90+; nothing elsewhere and in the emulator):
// wait until the kernel this one overlaps has finished and its writes are visible ...
KD_DEVICE void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(KD_SIMT_EMULATION)
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
// ... and let the kernel launched after this one with overlap start once every block of this
// grid has called this (or exited)
KD_DEVICE void grid_dependents_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(KD_SIMT_EMULATION)
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;

// Integer ceil-division and rounding for tile arithmetic (host and device).
template <class T>
KD_HOST_DEVICE constexpr T ceil_div(T a, T b) { return (a + b - 1) / b; }
template <class T>
KD_HOST_DEVICE constexpr T round_up(T a, T b) { return ceil_div(a, b) * b; }

// Device helpers: compiled by nvcc and the emulator build, not by a host compiler that only
// includes this header for its macros (the engine's .cpp files through the kernel APIs).
#if defined(__CUDACC__) || defined(KD_SIMT_EMULATION)
// Leading zero bits of a 64-bit value (64 for 0).
KD_DEVICE int clz64(uint64_t v) {
#if defined(KD_SIMT_EMULATION)
  return v == 0 ? 64 : __builtin_clzll(v);
#else
  return __clzll(static_cast<long long>(v));
#endif
}

// A 16-byte load of data read once (logits): streamed past the caches on the GPU.
KD_DEVICE float4 load_streaming(const float4* p) {
#if defined(KD_SIMT_EMULATION)
  return *p;
#else
  return __ldcs(p);
#endif
}
#endif  // __CUDACC__ || KD_SIMT_EMULATION

}  // namespace kdtree::kern
