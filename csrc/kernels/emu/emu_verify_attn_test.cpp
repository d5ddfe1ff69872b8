// verify_attn (float32 and both bf16 tile configurations, one split and several) on the SIMT
// emulator (CPU), against refs/verify_attn.kdtr.
#include <algorithm>
#include <filesystem>

#include "emu_attn_runner.h"

using namespace kdtree;
using namespace kdtree::test;

namespace {
const KdtrFile& bundle() {
  static const KdtrFile f(repo_path("refs/verify_attn.kdtr"));
  return f;
}
}  // namespace

KD_TEST(verify_attn_one_split) {
  EmuAttnRunner runner;
  run_attn_bundle(runner, bundle(),
                  {kVerifyBf16Sm90, kVerifyBf16Small, kVerifyBf16Decode, kVerifyBf16DecodeSmall, kVerifyBf16Sm90Classic}, 0);
}

KD_TEST(verify_attn_forced_splits) {
  EmuAttnRunner runner;
  run_attn_bundle(runner, bundle(),
                  {kVerifyBf16Sm90, kVerifyBf16Small, kVerifyBf16Decode, kVerifyBf16DecodeSmall, kVerifyBf16Sm90Classic}, 64);
}

// Files of python_engine/refgen/large_attn_cases.py (folder in $KD_LARGE_ATTN_DIR): the
// generator's schema and its torch reference, checked on the CPU (keep them small here).
KD_TEST(verify_attn_large_from_env) {
  const char* dir = std::getenv("KD_LARGE_ATTN_DIR");
  if (!dir || !*dir) KD_SKIP("set KD_LARGE_ATTN_DIR");
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".kdtr") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  EmuAttnRunner runner;
  runner.sms = 8;
  for (const auto& path : files) {
    const KdtrFile f(path.string());
    const AttnIO base = load_attn_case(f, "v0");
    for (AttnDType d : {AttnDType::kF32, AttnDType::kBF16}) {
      AttnIO io = base;
      io.dtype = d;
      check_attn(runner, io, f.get("v0.out").as<float>(), f.get("v0.lse").as<float>(),
                 path.stem().string() + (d == AttnDType::kF32 ? " f32" : " bf16"));
      std::printf("      %d splits of %d keys\n", runner.last_plan.splits, runner.last_plan.split_len);
    }
  }
}

KD_TEST_MAIN()
