// Device profiles: the facts each supported GPU gives the plans (device_profiles.def, with
// their sources), and KDTREE_DEVICE_PROFILE, which makes the kernel plans, the engine and the
// CPU emulator behave as on the named device: its limits, its instruction families. On a GPU
// the profile caps what the device reports; a profile asking for more than the device has
// (more shared memory, an instruction it lacks) is refused. Host code only.
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>

namespace kdtree {

struct DeviceProfile {
  const char* name;
  int cc_major, cc_minor;  // compute capability
  int sms;                 // streaming multiprocessors
  int smem_optin;          // dynamic shared memory one block may opt in to (bytes)
  int smem_per_sm;         // shared memory of one SM (bytes)
  int regs_per_sm, regs_per_block, regs_per_thread;
  int threads_per_sm;      // resident threads an SM
  bool wgmma;              // warpgroup MMA (sm_90a)
  bool bulk_tensor_copy;   // cp.async.bulk.tensor (TMA)
  bool clusters;           // thread block clusters
  int fp32_per_fp64;       // FP32 rate / FP64 rate
  double memory_gb, memory_gbps, bf16_dense_tflops;
};

#define KD_DEVICE_PROFILE_FIELDS(...)
#define KD_DEVICE_PROFILE(...) DeviceProfile{__VA_ARGS__},
inline constexpr DeviceProfile kDeviceProfiles[] = {
#include "device_profiles.def"
};
#undef KD_DEVICE_PROFILE
#undef KD_DEVICE_PROFILE_FIELDS

inline constexpr const char* kDeviceProfileEnv = "KDTREE_DEVICE_PROFILE";
// The emulator's device when no profile is named: the GPU the kernels were tuned on.
inline constexpr const char* kDefaultEmulatedProfile = "h200";

inline const DeviceProfile* find_device_profile(const char* name) {
  for (const DeviceProfile& p : kDeviceProfiles)
    if (name && std::strcmp(p.name, name) == 0) return &p;
  return nullptr;
}

inline std::string device_profile_names() {
  std::string out;
  for (const DeviceProfile& p : kDeviceProfiles) out += (out.empty() ? "" : ", ") + std::string(p.name);
  return out;
}

// The profile $KDTREE_DEVICE_PROFILE names; nullptr when it is unset or empty, and also when
// it names no profile, with *error saying so.
inline const DeviceProfile* device_profile_from_env(std::string* error) {
  const char* name = std::getenv(kDeviceProfileEnv);
  if (!name || !*name) return nullptr;
  const DeviceProfile* p = find_device_profile(name);
  if (!p && error)
    *error = std::string(kDeviceProfileEnv) + "=" + name + " names no device profile (known: " +
             device_profile_names() + ")";
  return p;
}

// What a device reports of itself, as far as the plans read it.
struct DeviceFacts {
  int cc_major = 0, cc_minor = 0;
  int sms = 0, smem_optin = 0, smem_per_sm = 0;
};

inline bool facts_have_wgmma(const DeviceFacts& d) { return d.cc_major == 9 && d.cc_minor == 0; }

// Why `profile` cannot stand on a device with these facts ("" when it can): the profile may
// only take away shared memory and instructions. Its SM count is taken as it is, even past the
// device's (the RTX PRO 6000's 188 on an H200's 132): the plans then split as they will on
// that device, which costs a smaller one only time.
inline std::string profile_exceeds_device(const DeviceProfile& profile, const DeviceFacts& d) {
  const std::string what = std::string(kDeviceProfileEnv) + "=" + profile.name + " asks for ";
  const std::string dev = " than this device (compute capability " + std::to_string(d.cc_major) + "." +
                          std::to_string(d.cc_minor) + ") has: ";
  if (profile.smem_optin > d.smem_optin)
    return what + "more shared memory a block (" + std::to_string(profile.smem_optin) + " bytes)" + dev +
           std::to_string(d.smem_optin);
  if (profile.smem_per_sm > d.smem_per_sm)
    return what + "more shared memory an SM (" + std::to_string(profile.smem_per_sm) + " bytes)" + dev +
           std::to_string(d.smem_per_sm);
  if (profile.wgmma && !facts_have_wgmma(d))
    return what + "wgmma (sm_90a), which this device lacks: use a profile without it (" + device_profile_names() + ")";
  if ((profile.bulk_tensor_copy || profile.clusters) && d.cc_major < 9)
    return what + "bulk tensor copies and clusters (compute capability 9.0+), which this device lacks";
  return "";  // a newer compute capability is fine: the plans read it only for the instructions above
}

// The facts the plans see under `profile` (nullptr: the device's own).
inline DeviceFacts facts_under_profile(const DeviceFacts& d, const DeviceProfile* profile) {
  if (!profile) return d;
  DeviceFacts f = d;
  f.sms = profile->sms;
  f.smem_optin = profile->smem_optin;
  f.smem_per_sm = profile->smem_per_sm;
  f.cc_major = profile->cc_major;
  f.cc_minor = profile->cc_minor;
  return f;
}

}  // namespace kdtree
