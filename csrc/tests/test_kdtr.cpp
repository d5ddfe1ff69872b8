// The C++ KDTR reader against bundles the Python writer produced (refs/), and against
// damaged copies of a good bundle built here: every way docs/kdtr.md says a file can be
// wrong must raise KdtrError naming the file, never crash or read out of bounds.
//
// refs/kdtr_format.kdtr comes from python_engine/refgen/kdtr_golden.py; the literals in
// golden_bundle_values below mirror golden_tensors() there.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "common/kdtr.h"
#include "common/test_harness.h"

namespace fs = std::filesystem;
using kdtree::DType;
using kdtree::KdtrError;
using kdtree::KdtrFile;

namespace {

constexpr size_t kHeader = 64, kEntry = 256;
// Header and entry field offsets (docs/kdtr.md), for damaging files on purpose.
constexpr size_t kVersionAt = 8, kCountAt = 12, kFileSizeAt = 16, kTableOffsetAt = 24, kDataOffsetAt = 32,
                 kChecksumAt = 40, kEntrySizeAt = 44, kReservedAt = 48;
constexpr size_t kDtypeAt = 160, kNdimAt = 164, kOffsetAt = 168, kNbytesAt = 176, kDimsAt = 184,
                 kEntryReservedAt = 248;
constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

std::string golden_path() { return kdtree::test::repo_path("refs/kdtr_format.kdtr"); }

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// A scratch folder for damaged copies, removed when the test binary ends.
const fs::path& scratch_dir() {
  static const struct Dir {
    fs::path path = fs::temp_directory_path() / ("kdtree_test_kdtr_" + std::to_string(::getpid()));
    Dir() { fs::create_directories(path); }
    ~Dir() { std::error_code ec; fs::remove_all(path, ec); }
  } dir;
  return dir.path;
}

std::string write_scratch(const std::vector<uint8_t>& bytes, const std::string& name) {
  const std::string path = (scratch_dir() / (name + ".kdtr")).string();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
  return path;
}

uint64_t get_u64(const std::vector<uint8_t>& b, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[at + i];
  return v;
}
void put_u32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
// After editing bytes past the header, restore the checksum so the intended check fires.
void refresh_checksum(std::vector<uint8_t>& b) { put_u32(b, kChecksumAt, kdtree::kdtr_crc32(b.data() + kHeader, b.size() - kHeader)); }
size_t entry(size_t i) { return kHeader + kEntry * i; }
size_t entry_count(const std::vector<uint8_t>& b) { return b[kCountAt] | (b[kCountAt + 1] << 8); }

const std::vector<uint8_t>& golden_bytes() {
  static const std::vector<uint8_t> bytes = [] {
    if (!fs::exists(golden_path()))
      throw std::runtime_error(golden_path() + " is missing: write it with `kdtree refs --only kdtr_format`");
    return read_bytes(golden_path());
  }();
  return bytes;
}

// A damaged copy must raise KdtrError naming the file and mentioning `problem`.
void expect_rejected(const std::vector<uint8_t>& bytes, const std::string& label, const std::string& problem) {
  const std::string path = write_scratch(bytes, label);
  try {
    KdtrFile f(path);
    kdtree::test::report_failure(__FILE__, __LINE__, label + ": accepted, expected an error about '" + problem + "'");
  } catch (const KdtrError& e) {
    const std::string msg = e.what();
    if (msg.find(path) == std::string::npos || msg.find(problem) == std::string::npos)
      kdtree::test::report_failure(__FILE__, __LINE__,
                                   label + ": expected the path and '" + problem + "' in: " + msg);
  } catch (const std::exception& e) {
    kdtree::test::report_failure(__FILE__, __LINE__, label + ": not a KdtrError: " + e.what());
  }
}

float half_to_float(uint16_t h) {  // IEEE binary16 -> float, enough for the literals below
  const int exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  const float sign = (h & 0x8000) ? -1.f : 1.f;
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -24);
  if (exp == 31) return mant ? NAN : sign * INFINITY;
  return sign * std::ldexp(1.f + mant / 1024.f, exp - 15);
}

template <class T>
void expect_values(const KdtrFile& f, const std::string& name, DType dtype, std::vector<int64_t> shape,
                   std::vector<T> want) {
  const kdtree::KdtrTensor& t = f.get(name);
  KD_EXPECT_EQ(static_cast<uint32_t>(t.dtype), static_cast<uint32_t>(dtype));
  KD_EXPECT(t.shape == shape);
  KD_CHECK_EQ(t.numel(), static_cast<int64_t>(want.size()));
  KD_CHECK_EQ(t.nbytes, want.size() * sizeof(T));
  const T* got = t.as<T>();
  for (size_t i = 0; i < want.size(); ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(want[i])) { KD_EXPECT(std::isnan(got[i])); continue; }
      KD_EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i]));  // -0.0 stays -0.0
    }
    KD_EXPECT_EQ(got[i], want[i]);
  }
}

}  // namespace

KD_TEST(crc32_matches_zlib_check_value) {
  const char* text = "123456789";  // the standard CRC-32 check input
  constexpr uint32_t kCheckValue = 0xCBF43926u;
  KD_EXPECT_EQ(kdtree::kdtr_crc32(reinterpret_cast<const uint8_t*>(text), 9), kCheckValue);
  KD_EXPECT_EQ(kdtree::kdtr_crc32(nullptr, 0), 0u);
}

KD_TEST(golden_bundle_values) {
  golden_bytes();  // fails, saying how to make it, when the bundle is missing
  const KdtrFile f(golden_path());
  KD_CHECK_EQ(f.tensors().size(), size_t{21});
  KD_EXPECT_EQ(f.path(), golden_path());
  expect_values<float>(f, "dtype.float32", DType::F32, {2, 3},
                       {1.f / 3.f, -0.f, std::numeric_limits<float>::denorm_min(), -2.5f, INFINITY, NAN});
  expect_values<double>(f, "dtype.float64", DType::F64, {3},
                        {1.0 / 3.0, -1e300, std::numeric_limits<double>::denorm_min()});
  expect_values<uint16_t>(f, "dtype.float16", DType::F16, {2, 2}, {0xC000, 0x3800, 0x7BFF, 0x0001});
  const uint16_t* h = f.get("dtype.float16").as<uint16_t>();
  KD_EXPECT_EQ(half_to_float(h[2]), 65504.f);
  KD_EXPECT_EQ(half_to_float(h[3]), std::ldexp(1.f, -24));
  expect_values<uint16_t>(f, "dtype.bfloat16", DType::BF16, {3}, {0x3F80, 0xC000, 0x4049});
  uint32_t bits = uint32_t{f.get("dtype.bfloat16").as<uint16_t>()[2]} << 16;  // bf16 = top half of f32
  float pi_ish;
  std::memcpy(&pi_ish, &bits, sizeof(pi_ish));
  KD_EXPECT_EQ(pi_ish, 3.140625f);
  expect_values<int8_t>(f, "dtype.int8", DType::I8, {4}, {-128, -1, 0, 127});
  expect_values<uint8_t>(f, "dtype.uint8", DType::U8, {3}, {0, 128, 255});
  expect_values<int16_t>(f, "dtype.int16", DType::I16, {3}, {-32768, 12345, 32767});
  expect_values<int32_t>(f, "dtype.int32", DType::I32, {2, 2},
                         {std::numeric_limits<int32_t>::min(), -1, 7, std::numeric_limits<int32_t>::max()});
  expect_values<int64_t>(f, "dtype.int64", DType::I64, {3},
                         {std::numeric_limits<int64_t>::min(), 0x0123456789ABCDEF, std::numeric_limits<int64_t>::max()});
  expect_values<uint16_t>(f, "dtype.uint16", DType::U16, {2}, {0, 65535});
  expect_values<uint32_t>(f, "dtype.uint32", DType::U32, {2}, {0xDEADBEEFu, 0xFFFFFFFFu});
  expect_values<uint64_t>(f, "dtype.uint64", DType::U64, {2}, {kU64Max, 0x8000000000000001ull});
  expect_values<bool>(f, "dtype.bool", DType::Bool, {5}, {true, false, false, true, true});
  expect_values<int64_t>(f, "scalar.int64", DType::I64, {}, {42});
  expect_values<double>(f, "scalar.float64", DType::F64, {}, {-0.125});
  expect_values<float>(f, "empty.float32", DType::F32, {0, 3}, {});
  std::vector<int32_t> rank8(16);
  for (int i = 0; i < 16; ++i) rank8[i] = i * 3 - 7;
  expect_values<int32_t>(f, "rank8.int32", DType::I32, {1, 2, 1, 2, 1, 2, 1, 2}, rank8);
  std::vector<uint8_t> odd(67);
  for (int i = 0; i < 67; ++i) odd[i] = static_cast<uint8_t>(i * 7 % 256);
  expect_values<uint8_t>(f, "odd.uint8", DType::U8, {67}, odd);
  expect_values<int32_t>(f, std::string(159, 'n'), DType::I32, {1}, {159});
  expect_values<int16_t>(f, "ünïcødé.テンソル", DType::I16, {1}, {-7});
  std::vector<float> big(1000);
  for (int i = 0; i < 1000; ++i) big[i] = (i % 17) * 0.125f - 1.0f;
  expect_values<float>(f, "big.float32", DType::F32, {1000}, big);
}

KD_TEST(tensors_keep_file_order_and_alignment) {
  golden_bytes();
  KdtrFile f(golden_path());
  const std::vector<std::string> first = {"dtype.float32", "dtype.float64", "dtype.float16", "dtype.bfloat16"};
  for (size_t i = 0; i < first.size(); ++i) KD_EXPECT_EQ(f.tensors()[i].name, first[i]);
  KD_EXPECT_EQ(f.tensors().back().name, std::string("big.float32"));
  const uint8_t* base = f.tensors().front().data;
  for (const auto& t : f.tensors()) KD_EXPECT_EQ((t.data - base) % 64, 0);
  // Moving the file keeps the tensors' data pointers valid (the buffer moves, not copies).
  const float* before = f.get("big.float32").as<float>();
  KdtrFile moved = std::move(f);
  KD_EXPECT_EQ(moved.get("big.float32").as<float>(), before);
  KD_EXPECT(moved.has("scalar.int64"));
  KD_EXPECT(!moved.has("scalar"));
}

KD_TEST(wrong_type_or_name_names_file_and_tensor) {
  golden_bytes();
  const KdtrFile f(golden_path());
  KD_EXPECT_THROWS(f.get("dtype.float32").as<double>(), KdtrError, "'dtype.float32' has dtype float32, read as double");
  KD_EXPECT_THROWS(f.get("dtype.int32").as<uint32_t>(), KdtrError, golden_path());
  KD_EXPECT_THROWS(f.get("dtype.bool").as<int8_t>(), KdtrError, "bool");
  KD_EXPECT(f.get("dtype.bool").as<uint8_t>() != nullptr);  // bool bytes may be read as uint8_t
  KD_EXPECT_THROWS(f.get("dtype.float33"), KdtrError, "no tensor named 'dtype.float33'");
  KD_EXPECT_THROWS(f.get("nope"), KdtrError, golden_path());
  KD_EXPECT_THROWS(KdtrFile(kdtree::test::repo_path("refs/does_not_exist.kdtr")), KdtrError, "cannot open");
}

KD_TEST(a_directory_or_a_device_gets_a_plain_message) {
  const std::string refs = kdtree::test::repo_path("refs");
  KD_EXPECT_THROWS(KdtrFile(refs), KdtrError, refs + ": is a directory, not a KDTR file");
  KD_EXPECT_THROWS(KdtrFile("/dev/zero"), KdtrError, "/dev/zero: is not a regular file");
}

KD_TEST(every_committed_bundle_loads) {
  const fs::path refs = kdtree::test::repo_path("refs");
  int bundles = 0;
  for (const auto& item : fs::directory_iterator(refs)) {
    if (item.path().extension() != ".kdtr") continue;
    ++bundles;
    const KdtrFile f(item.path().string());
    KD_EXPECT(!f.tensors().empty());
    for (const auto& t : f.tensors()) {
      KD_EXPECT_EQ(t.nbytes, static_cast<size_t>(t.numel()) * kdtree::dtype_itemsize(t.dtype));
      KD_EXPECT(t.shape.size() <= 8);
    }
  }
  if (bundles == 0) KD_SKIP("no refs/*.kdtr bundles yet");
  std::printf("    read %d bundle(s) from %s\n", bundles, refs.string().c_str());
}

KD_TEST(damaged_header_is_rejected) {
  const std::vector<uint8_t>& good = golden_bytes();
  const size_t table_end = kHeader + kEntry * entry_count(good);
  for (size_t len : {size_t{0}, size_t{10}, kHeader - 1}) expect_rejected({good.begin(), good.begin() + len}, "short" + std::to_string(len), "shorter than the 64-byte header");
  for (size_t len : {kHeader, kHeader + 100, table_end, good.size() - 1})
    expect_rejected({good.begin(), good.begin() + len}, "truncated" + std::to_string(len), "truncated");
  auto padded = good;
  padded.push_back(0);
  expect_rejected(padded, "padded", "padded");

  auto b = good; b[0] = 'X'; expect_rejected(b, "magic", "bad magic");
  b = good;  // what a text-mode transfer does: "\r\n" -> "\n"
  b.erase(b.begin() + 4);
  expect_rejected(b, "textmode", "bad magic");
  b = good; put_u32(b, kVersionAt, 2); expect_rejected(b, "version", "unsupported version 2");
  b = good; put_u32(b, kEntrySizeAt, 255); expect_rejected(b, "entry_size", "entry_size");
  b = good; put_u64(b, kTableOffsetAt, 128); expect_rejected(b, "table_offset", "table_offset");
  b = good; b[kReservedAt + 15] = 1; expect_rejected(b, "reserved", "reserved header bytes");
  b = good; put_u32(b, kCountAt, 65537); expect_rejected(b, "count_limit", "over the limit");
  b = good; put_u32(b, kCountAt, 60000); expect_rejected(b, "table_fit", "past the end");
  b = good; put_u64(b, kDataOffsetAt, get_u64(good, kDataOffsetAt) + 64); expect_rejected(b, "data_offset", "data_offset");
  b = good; b[b.size() - 70] ^= 0x01; expect_rejected(b, "data_flip", "checksum mismatch");
  b = good; b[kChecksumAt] ^= 0x80; expect_rejected(b, "crc_flip", "checksum mismatch");
  b = good; put_u64(b, kFileSizeAt, kU64Max); expect_rejected(b, "file_size", "truncated");
}

KD_TEST(damaged_entry_is_rejected) {
  const std::vector<uint8_t>& good = golden_bytes();
  // Each edit is followed by a fresh checksum so that the entry check itself must fire.
  auto damaged = [&](auto&& edit) { auto b = good; edit(b); refresh_checksum(b); return b; };
  const size_t e0 = entry(0), e1 = entry(1), e2 = entry(2);  // float32 (2,3), float64 (3), float16 (2,2)
  const uint64_t data_offset = get_u64(good, kDataOffsetAt);

  expect_rejected(damaged([&](auto& b) { b[e0] = 0; }), "name_empty", "empty name");
  expect_rejected(damaged([&](auto& b) { std::memset(&b[e0], 'x', 160); }), "name_long", "NUL-terminated within 159");
  expect_rejected(damaged([&](auto& b) { b[e0 + 150] = 'x'; }), "name_pad", "non-NUL");
  expect_rejected(damaged([&](auto& b) { b[e0] = 0xFF; }), "name_utf8", "not valid UTF-8");
  expect_rejected(damaged([&](auto& b) { b[e0] = 0xC0; b[e0 + 1] = 0x80; }), "name_overlong", "not valid UTF-8");
  expect_rejected(damaged([&](auto& b) { b[e0] = 0xED; b[e0 + 1] = 0xA0; b[e0 + 2] = 0x80; }), "name_surrogate", "not valid UTF-8");
  expect_rejected(damaged([&](auto& b) { std::memcpy(&b[e1], &b[e0], 160); }), "name_dup", "duplicate name");
  expect_rejected(damaged([&](auto& b) { put_u32(b, e0 + kDtypeAt, 99); }), "dtype99", "unknown dtype code 99");
  expect_rejected(damaged([&](auto& b) { put_u32(b, e0 + kDtypeAt, 0); }), "dtype0", "unknown dtype code 0");
  expect_rejected(damaged([&](auto& b) { put_u32(b, e0 + kNdimAt, 9); }), "ndim", "ndim 9");
  expect_rejected(damaged([&](auto& b) { put_u64(b, e0 + kDimsAt + 8 * 7, 1); }), "unused_dim", "unused dim 7");
  expect_rejected(damaged([&](auto& b) { b[e0 + kEntryReservedAt] = 1; }), "entry_reserved", "reserved entry bytes");
  expect_rejected(damaged([&](auto& b) { put_u64(b, e0 + kOffsetAt, data_offset + 8); }), "unaligned", "not a multiple of 64");
  expect_rejected(damaged([&](auto& b) { put_u64(b, e0 + kOffsetAt, data_offset - 64); }), "before_data", "before data_offset");
  expect_rejected(damaged([&](auto& b) { put_u64(b, e0 + kNbytesAt, 4 * 6 + 4); }), "nbytes", "nbytes is 28");
  // Overflowing sizes: (2^62, 2^62) float32 elements; a dim past int64; offset + nbytes past 2^64.
  expect_rejected(damaged([&](auto& b) { put_u64(b, e0 + kDimsAt, 1ull << 62); put_u64(b, e0 + kDimsAt + 8, 1ull << 62); }),
                  "shape_overflow", "overflows 64 bits");
  expect_rejected(damaged([&](auto& b) { put_u64(b, e0 + kDimsAt, 0); put_u64(b, e0 + kDimsAt + 8, kU64Max); put_u64(b, e0 + kNbytesAt, 0); }),
                  "dim_int64", "does not fit in int64");
  const size_t last = entry(entry_count(good) - 1);  // big.float32: 4000 bytes, enough to wrap around
  expect_rejected(damaged([&](auto& b) { put_u64(b, last + kOffsetAt, kU64Max - 63); }), "end_overflow", "offset + nbytes overflows");
  // Out of range, overlapping, out of order.
  expect_rejected(damaged([&](auto& b) { put_u64(b, e2 + kOffsetAt, (good.size() + 63) / 64 * 64); }), "past_end", "runs past the end");
  expect_rejected(damaged([&](auto& b) { put_u64(b, e1 + kOffsetAt, get_u64(good, e0 + kOffsetAt)); }), "overlap", "overlaps");
  expect_rejected(damaged([&](auto& b) {
                    const uint64_t o1 = get_u64(good, e1 + kOffsetAt), o2 = get_u64(good, e2 + kOffsetAt);
                    put_u64(b, e1 + kOffsetAt, o2); put_u64(b, e2 + kOffsetAt, o1);
                  }), "order", "out of order");
  // A bool byte other than 0/1 would be undefined behaviour when read as C++ bool.
  const uint64_t bool_at = [&] {
    KdtrFile f(golden_path());
    return static_cast<uint64_t>(f.get("dtype.bool").data - f.tensors().front().data) + get_u64(good, e0 + kOffsetAt);
  }();
  expect_rejected(damaged([&](auto& b) { b[bool_at] = 2; }), "bool_value", "not 0 or 1");
}

KD_TEST(truncation_anywhere_is_rejected) {
  // Every cut inside the header and the first entry, then a cut every kStride bytes (a prime,
  // so the cuts fall at every phase of the 64-byte alignment): each file write costs about a
  // millisecond, and all 10k cuts would take seconds.
  constexpr size_t kStride = 61;
  const std::vector<uint8_t>& good = golden_bytes();
  for (size_t len = 0; len < good.size(); len += (len < kHeader + kEntry ? 1 : kStride))
    expect_rejected({good.begin(), good.begin() + len}, "cut", len < kHeader ? "shorter" : "truncated");
}

KD_TEST(random_byte_flips_are_rejected) {
  // Every single-byte change is caught: header fields are checked exactly, and CRC-32 sees
  // every burst of up to 32 bits in the rest.
  const std::vector<uint8_t>& good = golden_bytes();
  constexpr int kFlips = 300;
  std::mt19937_64 rng(kdtree::test::test_seed());
  for (int i = 0; i < kFlips; ++i) {
    auto b = good;
    const size_t at = rng() % b.size();
    b[at] ^= static_cast<uint8_t>(1 + rng() % 255);
    expect_rejected(b, "flip", "");
  }
}

KD_TEST_MAIN()
