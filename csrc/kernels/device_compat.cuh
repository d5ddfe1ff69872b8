// What lets one kernel source compile three ways: nvcc's device pass (the real kernels),
// nvcc's host pass (launch stubs), and g++ against the SIMT emulator (KD_SIMT_EMULATION:
// the kernels run on the CPU in tests; see emu/simt_emulator.h).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(KD_SIMT_EMULATION)
#include "emu/simt_emulator.h"
#define KD_DEVICE inline
#define KD_HOST_DEVICE inline
// dynamic shared memory of the running block
#define KD_DYNAMIC_SMEM(type, name) type* name = reinterpret_cast<type*>(::kdemu::dynamic_smem())
// bar.sync id, count: `count` threads (a multiple of 32) of the block meet at barrier `id`
#define KD_NAMED_BARRIER(id, count) ::kdemu::named_barrier((id), (count))
// kernel launches: the emulator runs the grid at once (streams are ignored: everything is
// synchronous there); KD_LAUNCH_FLAT is for kernels with no barrier and no warp collective
#define KD_LAUNCH(kernel, grid, block, smem, stream, ...) \
  ::kdemu::launch(dim3(grid), dim3(block), (smem), kernel, __VA_ARGS__)
#define KD_LAUNCH_FLAT(kernel, grid, block, smem, stream, ...) \
  ::kdemu::launch_flat(dim3(grid), dim3(block), (smem), kernel, __VA_ARGS__)
#else
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#define KD_DEVICE __device__ __forceinline__
#define KD_HOST_DEVICE __host__ __device__ inline
#define KD_DYNAMIC_SMEM(type, name)                   \
  extern __shared__ __align__(16) uint8_t kd_smem_[]; \
  type* name = reinterpret_cast<type*>(kd_smem_)
#define KD_NAMED_BARRIER(id, count) asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory")
// `kernel` may be a template instance without commas, or a function pointer to one
#define KD_LAUNCH(kernel, grid, block, smem, stream, ...) kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#define KD_LAUNCH_FLAT KD_LAUNCH
#endif

namespace kdtree::kern {

// Allow `bytes` of dynamic shared memory for `kernel` (above 48 KB it must be asked for).
// Through the C entry point so the emulated build (no templates of cuda_runtime.h) shares it.
template <class Kernel>
inline cudaError_t set_max_dynamic_smem(Kernel* kernel, int bytes) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;

// Integer ceil-division and rounding for tile arithmetic (host and device).
template <class T>
constexpr T ceil_div(T a, T b) { return (a + b - 1) / b; }
template <class T>
constexpr T round_up(T a, T b) { return ceil_div(a, b) * b; }

}  // namespace kdtree::kern
