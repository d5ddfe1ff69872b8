// The emulated device the kernel runners plan for: the stand-in runtime's pretend device
// (runtime/cuda_runtime.cpp: KDTREE_DEVICE_PROFILE's, an H200's by default), read through
// the launchers' own current_device_limits so the runners and the engine see one device.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "common/device_profile.h"
#include "kernels/launch_support.h"

namespace kdtree::test {

inline const DeviceLimits& emulated_device_limits() {
  static const DeviceLimits limits = [] {
    DeviceLimits d;
    if (KernelResult r = current_device_limits(&d); !r.ok()) {
      std::fprintf(stderr, "emulated device: %s\n", r.message.c_str());
      std::exit(2);
    }
    std::printf("emulated device: %s (%d SMs, %d bytes of shared memory a block, %s)\n",
                d.profile ? d.profile->name : "no KDTREE_DEVICE_PROFILE", d.sms, d.smem_optin, d.wgmma ? "wgmma" : "no wgmma");
    return d;
  }();
  return limits;
}

}  // namespace kdtree::test
