// A tiny test framework for the native test binaries (csrc/tests/test_*.{cpp,cu}).
//
//   #include "common/test_harness.h"
//   KD_TEST(reads_scalar) { KD_EXPECT_EQ(f.get("n").as<int64_t>()[0], 42); }
//   KD_GPU_TEST(kernel_matches_ref) { ... }   // skipped when no CUDA device is present
//   KD_TEST_MAIN()
//
// KD_EXPECT_* record a failure and continue; KD_CHECK_* record it and end the case (use them
// when the rest of the case would be meaningless, e.g. before indexing a tensor). An exception
// escaping a case fails it with its message. KD_SKIP("why") skips the running case.
//
// Output, parsed by `kdtree test --native`: one line per case, then as the very last line
//   "N passed, N failed" (+ ", N skipped" when some were skipped)
// and exit status 1 when anything failed. Arguments: substrings that select cases by name,
// or --list.
#pragma once

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace kdtree::test {

struct Case {
  const char* name;
  void (*fn)();
  bool needs_gpu;
};

inline std::vector<Case>& registry() {
  static std::vector<Case> cases;
  return cases;
}

struct Register {
  Register(const char* name, void (*fn)(), bool needs_gpu) { registry().push_back({name, fn, needs_gpu}); }
};

struct CaseAborted {};                         // thrown by KD_CHECK_* to end the case
struct CaseSkipped { std::string reason; };   // thrown by KD_SKIP

inline int& failures_in_case() {
  static int n = 0;
  return n;
}

inline void report_failure(const char* file, int line, const std::string& message) {
  ++failures_in_case();
  if (file) std::printf("    %s:%d: %s\n", file, line, message.c_str());
  else std::printf("    %s\n", message.c_str());
}

// Render a value for a failure message: numbers as numbers (int8_t/uint8_t too), strings quoted.
template <class T>
std::string show(const T& v) {
  std::ostringstream os;
  if constexpr (std::is_same_v<T, bool>) os << (v ? "true" : "false");
  else if constexpr (std::is_integral_v<T> && sizeof(T) == 1) os << static_cast<int>(v);
  else if constexpr (std::is_floating_point_v<T>) { os.precision(9); os << v; }
  else if constexpr (std::is_convertible_v<T, std::string>) os << '"' << std::string(v) << '"';
  else if constexpr (std::is_enum_v<T>) os << static_cast<long long>(v);
  else os << v;
  return os.str();
}

// Whether a CUDA device is usable; asked once. No driver or no GPU both mean "no".
inline bool cuda_device_available() {
  static const bool available = [] {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) (void)cudaGetLastError();
    return err == cudaSuccess && count > 0;
  }();
  return available;
}

// Path of a file in the repository (refs/..., docs/...). The root is $KDTREE_REPO_ROOT (set
// by `kdtree test --native`), else found from this program's own location (`kdtree build`
// passes KDTREE_REPO_ROOT_FROM_EXE, e.g. "../../..", when the build directory is inside the
// repository, so a build tree moved with its repository still works), else KDTREE_REPO_ROOT
// as built, else the working directory.
inline std::string repo_path(const std::string& relative) {
  const char* env = std::getenv("KDTREE_REPO_ROOT");
  if (env && *env) return std::string(env) + "/" + relative;
#if defined(KDTREE_REPO_ROOT_FROM_EXE) && defined(__linux__)
  char exe[4096];  // PATH_MAX on Linux
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    std::string dir(exe, static_cast<size_t>(n));
    dir.resize(dir.rfind('/'));
    return dir + "/" + KDTREE_REPO_ROOT_FROM_EXE + "/" + relative;
  }
#endif
#ifdef KDTREE_REPO_ROOT
  return std::string(KDTREE_REPO_ROOT) + "/" + relative;
#else
  return "./" + relative;
#endif
}

// The seed for a test's random inputs: $KDTREE_TEST_SEED to repeat a run, else fresh. Printed,
// so a failure can be reproduced.
inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("KDTREE_TEST_SEED");
    const uint64_t s = env && *env ? std::strtoull(env, nullptr, 10)
                                   : (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
    std::printf("seed %llu (KDTREE_TEST_SEED=%llu repeats this run)\n", static_cast<unsigned long long>(s),
                static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

inline bool selected(const char* name, int argc, char** argv) {
  bool any_filter = false;
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-') continue;
    any_filter = true;
    if (std::strstr(name, argv[i])) return true;
  }
  return !any_filter;
}

inline int run_all(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--list") == 0) {
      for (const Case& c : registry()) std::printf("%s%s\n", c.name, c.needs_gpu ? " (gpu)" : "");
      return 0;
    }
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("usage: %s [--list] [NAME_SUBSTRING...]\n", argv[0]);
      return 0;
    }
  }
  int passed = 0, failed = 0, skipped = 0;
  std::vector<std::string> failed_names;
  for (const Case& c : registry()) {
    if (!selected(c.name, argc, argv)) continue;
    if (c.needs_gpu && !cuda_device_available()) {
      std::printf("[ SKIPPED  ] %s: no CUDA device\n", c.name);
      ++skipped;
      continue;
    }
    std::printf("[ RUN      ] %s\n", c.name);
    std::fflush(stdout);
    failures_in_case() = 0;
    std::string skip_reason;
    const auto start = std::chrono::steady_clock::now();
    try {
      c.fn();
    } catch (const CaseAborted&) {
      // already reported
    } catch (const CaseSkipped& s) {
      skip_reason = s.reason;
    } catch (const std::exception& e) {
      report_failure(nullptr, 0, std::string("uncaught exception: ") + e.what());
    } catch (...) {
      report_failure(nullptr, 0, "uncaught exception of unknown type");
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (failures_in_case() > 0) {
      std::printf("[  FAILED  ] %s (%.1f ms)\n", c.name, ms);
      failed_names.push_back(c.name);
      ++failed;
    } else if (!skip_reason.empty()) {
      std::printf("[ SKIPPED  ] %s: %s\n", c.name, skip_reason.c_str());
      ++skipped;
    } else {
      std::printf("[       OK ] %s (%.1f ms)\n", c.name, ms);
      ++passed;
    }
    std::fflush(stdout);
  }
  for (const std::string& name : failed_names) std::printf("FAILED: %s\n", name.c_str());
  if (skipped > 0) std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  else std::printf("%d passed, %d failed\n", passed, failed);
  std::fflush(stdout);
  return failed > 0 ? 1 : 0;
}

}  // namespace kdtree::test

#define KD_TEST_IMPL_(name, gpu)                                                              \
  static void kd_test_##name();                                                               \
  static const ::kdtree::test::Register kd_register_##name(#name, kd_test_##name, gpu);       \
  static void kd_test_##name()

#define KD_TEST(name) KD_TEST_IMPL_(name, false)
#define KD_GPU_TEST(name) KD_TEST_IMPL_(name, true)
#define KD_TEST_MAIN() \
  int main(int argc, char** argv) { return ::kdtree::test::run_all(argc, argv); }

#define KD_SKIP(reason) throw ::kdtree::test::CaseSkipped{reason}

// `fatal` is true for KD_CHECK_*: the case ends at the first failure.
#define KD_ASSERT_IMPL_(ok, message, fatal)                                                   \
  do {                                                                                        \
    if (!(ok)) {                                                                              \
      ::kdtree::test::report_failure(__FILE__, __LINE__, message);                            \
      if (fatal) throw ::kdtree::test::CaseAborted{};                                         \
    }                                                                                         \
  } while (0)

#define KD_BOOL_IMPL_(cond, fatal) KD_ASSERT_IMPL_(static_cast<bool>(cond), "expected " #cond, fatal)

#define KD_EQ_IMPL_(a, b, fatal)                                                              \
  do {                                                                                        \
    const auto& kd_a_ = (a);                                                                  \
    const auto& kd_b_ = (b);                                                                  \
    KD_ASSERT_IMPL_(kd_a_ == kd_b_,                                                           \
                    "expected " #a " == " #b ", got " + ::kdtree::test::show(kd_a_) + " vs " + \
                        ::kdtree::test::show(kd_b_),                                          \
                    fatal);                                                                   \
  } while (0)

// |a - b| <= tol; NaN is never near anything.
#define KD_NEAR_IMPL_(a, b, tol, fatal)                                                       \
  do {                                                                                        \
    const double kd_a_ = static_cast<double>(a), kd_b_ = static_cast<double>(b);              \
    KD_ASSERT_IMPL_(std::fabs(kd_a_ - kd_b_) <= (tol),                                        \
                    "expected " #a " within " #tol " of " #b ", got " + ::kdtree::test::show(kd_a_) + \
                        " vs " + ::kdtree::test::show(kd_b_),                                 \
                    fatal);                                                                   \
  } while (0)

// `expr` must throw `exc_type` whose what() contains `substring` ("" accepts any message).
#define KD_THROWS_IMPL_(expr, exc_type, substring, fatal)                                     \
  do {                                                                                        \
    std::string kd_problem_ = "expected `" #expr "` to throw " #exc_type;                     \
    bool kd_ok_ = false;                                                                      \
    try {                                                                                     \
      (void)(expr);                                                                           \
    } catch (const exc_type& kd_e_) {                                                         \
      kd_ok_ = std::string(kd_e_.what()).find(substring) != std::string::npos;                \
      if (!kd_ok_) kd_problem_ += " mentioning \"" + std::string(substring) + "\", got: " + kd_e_.what(); \
    } catch (const std::exception& kd_e_) {                                                   \
      kd_problem_ += std::string(", got another exception: ") + kd_e_.what();                 \
    }                                                                                         \
    KD_ASSERT_IMPL_(kd_ok_, kd_problem_, fatal);                                              \
  } while (0)

#define KD_EXPECT(cond) KD_BOOL_IMPL_(cond, false)
#define KD_CHECK(cond) KD_BOOL_IMPL_(cond, true)
#define KD_EXPECT_EQ(a, b) KD_EQ_IMPL_(a, b, false)
#define KD_CHECK_EQ(a, b) KD_EQ_IMPL_(a, b, true)
#define KD_EXPECT_NEAR(a, b, tol) KD_NEAR_IMPL_(a, b, tol, false)
#define KD_CHECK_NEAR(a, b, tol) KD_NEAR_IMPL_(a, b, tol, true)
#define KD_EXPECT_THROWS(expr, exc_type, substring) KD_THROWS_IMPL_(expr, exc_type, substring, false)
#define KD_CHECK_THROWS(expr, exc_type, substring) KD_THROWS_IMPL_(expr, exc_type, substring, true)
