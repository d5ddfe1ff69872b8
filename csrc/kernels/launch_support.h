// What every kernel launcher needs besides its kernel: the device's limits (asked once per
// device, not per launch: launch overhead is part of what a round pays), the opt-in to more
// than 48 KB of dynamic shared memory (set once per device and kernel), and the launch's
// status as a KernelResult. Host code only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernel_status.h"

namespace kdtree {

struct DeviceProfile;  // common/device_profile.h

struct DeviceLimits {
  int sms = 0;            // streaming multiprocessors
  int smem_optin = 0;     // largest dynamic shared memory one block may opt in to (bytes)
  int smem_per_sm = 0;    // shared memory of one SM (bytes)
  bool wgmma = false;     // compute capability 9.0: the build's sm_90a kernels (wgmma) run here
  bool pdl = false;       // compute capability 9.0+: programmatic dependent launch (griddepcontrol)
  const DeviceProfile* profile = nullptr;  // KDTREE_DEVICE_PROFILE's, when set: the values above are its
};

// The current device's limits (cached per device id after the first call), as capped by
// KDTREE_DEVICE_PROFILE (device_profile.h): an unknown profile, or one asking for more than
// the device has, is an invalid-argument result naming why.
KernelResult current_device_limits(DeviceLimits* out);

// Let `kernel` launch with `bytes` of dynamic shared memory on the current device
// (cudaFuncSetAttribute, skipped when this device and kernel already allow that much).
// `what` names the kernel in the error.
KernelResult allow_dynamic_smem(const void* kernel, size_t bytes, const char* what);

// Ask for the largest shared-memory carveout for `kernel` (cudaFuncSetAttribute, once per
// device and kernel): kernels whose occupancy is set by shared memory and that stream their
// inputs past L1 would otherwise depend on the driver's choice of split.
KernelResult prefer_shared_carveout(const void* kernel, const char* what);

// cudaGetLastError after a launch, as a KernelResult naming `what`.
KernelResult launch_status(const char* what);
// The same for a launch that returned its error (cudaLaunchKernelEx); the last error is read
// too, so that an earlier launch's error is not left behind.
KernelResult launch_status(cudaError_t returned, const char* what);

}  // namespace kdtree
