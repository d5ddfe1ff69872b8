// Tensor maps for the Tensor Memory Accelerator (TMA, sm_90+): what a kernel that loads shared
// memory with cp.async.bulk.tensor (ptx_tma.cuh) is given, encoded on the host.
//
// On the GPU a map is the driver's opaque CUtensorMap, encoded by cuTensorMapEncodeTiled,
// which the runtime hands out through cudaGetDriverEntryPointByVersion (so nothing links
// libcuda); the kernel takes it as a __grid_constant__ parameter. Under the SIMT emulator
// (KD_SIMT_EMULATION) it is kdemu::TensorMap, encoded with the same rules by
// emu/simt_tma.h. Host code only.
#pragma once

#include <cstdint>
#include <string>

#include "kernel_status.h"

#if defined(KD_SIMT_EMULATION)
#include "emu/simt_tma.h"
#else
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#endif

namespace kdtree {

#if defined(KD_SIMT_EMULATION)
using TmaMap = ::kdemu::TensorMap;
#else
using TmaMap = CUtensorMap;
#endif

// cuTensorMapEncodeTiled's oldest version (CUDA 12.0): the signature this code calls.
constexpr unsigned kTmaEncodeDriverVersion = 12000;

// A 3-D bf16 tensor map with the 128-byte swizzle: sizes {d0 (contiguous), d1, d2} in elements,
// byte strides of dimensions 1 and 2, and the box one copy moves. Coordinates outside the
// sizes read as zero. `what` names the map in errors.
inline KernelResult encode_tma_map_bf16_3d(TmaMap* map, const void* base, const uint64_t (&dims)[3],
                                           const uint64_t (&strides)[2], const uint32_t (&box)[3], const char* what) {
  constexpr int kRank = 3;
#if defined(KD_SIMT_EMULATION)
  constexpr int kBf16Bytes = 2, kSwizzleBytes = 128;
  if (const char* err = ::kdemu::encode_tensor_map(map, kBf16Bytes, kRank, base, dims, strides, box, kSwizzleBytes))
    return KernelResult::invalid(std::string(what) + ": tensor map: " + err);
  return KernelResult::success();
#else
  // the entry point, looked up once (thread-safe static initialisation)
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, kTmaEncodeDriverVersion,
                                                           cudaEnableDefault, &found);
    return e == cudaSuccess && found == cudaDriverEntryPointSuccess ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn)
                                                                    : nullptr;
  }();
  if (!encode) return KernelResult::cuda(std::string(what) + ": the driver has no cuTensorMapEncodeTiled (CUDA 12.0+)");
  const cuuint64_t d[kRank] = {dims[0], dims[1], dims[2]};
  const cuuint64_t s[kRank - 1] = {strides[0], strides[1]};
  const cuuint32_t b[kRank] = {box[0], box[1], box[2]};
  const cuuint32_t unit[kRank] = {1, 1, 1};  // element strides: every element of the box
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, kRank, const_cast<void*>(base), d, s, b, unit,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return KernelResult::invalid(std::string(what) + ": cuTensorMapEncodeTiled failed (CUresult " + std::to_string(r) +
                                 ")");
  return KernelResult::success();
#endif
}

}  // namespace kdtree
