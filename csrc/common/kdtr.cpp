// KDTR reader: the checks of docs/kdtr.md "What a reader must reject" (file_size is checked
// before the table, so that a truncated file is reported as truncated, as the Python reader does).
#include "common/kdtr.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <new>

namespace kdtree {
namespace {

// Layout constants from docs/kdtr.md.
constexpr uint8_t kMagic[8] = {0x4B, 0x44, 0x54, 0x52, 0x0D, 0x0A, 0x1A, 0x0A};  // "KDTR\r\n\x1a\n"
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderSize = 64;
constexpr uint64_t kTableOffset = 64;
constexpr uint32_t kEntrySize = 256;
constexpr uint32_t kMaxEntries = 65536;
constexpr uint64_t kAlignment = 64;  // data_offset and every tensor offset
constexpr size_t kNameField = 160;   // bytes for the name, NUL padded
constexpr size_t kMaxNameLen = kNameField - 1;
constexpr uint32_t kMaxDims = 8;

// Header field offsets.
constexpr size_t kHdrVersion = 8, kHdrEntryCount = 12, kHdrFileSize = 16, kHdrTableOffset = 24,
                 kHdrDataOffset = 32, kHdrChecksum = 40, kHdrEntrySize = 44, kHdrReserved = 48,
                 kHdrReservedLen = 16;
// Entry field offsets.
constexpr size_t kEntDtype = 160, kEntNdim = 164, kEntOffset = 168, kEntNbytes = 176, kEntDims = 184,
                 kEntReserved = 248;  // 8 bytes after dims[8] up to the 256-byte entry size: zero

constexpr uint32_t kCrcPolynomial = 0xEDB88320u;  // IEEE 802.3, bit-reflected

uint32_t load_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];  // little-endian regardless of host order
  return v;
}

uint64_t load_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) ? (kCrcPolynomial ^ (c >> 1)) : (c >> 1);
    table[i] = c;
  }
  return table;
}

// Strict UTF-8 as Python's bytes.decode("utf-8"): no overlong forms, no surrogates, <= U+10FFFF.
bool valid_utf8(const uint8_t* s, size_t n) {
  size_t i = 0;
  while (i < n) {
    const uint8_t c = s[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80) { ++i; continue; }
    else if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    else return false;
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    static constexpr uint32_t kMinForLen[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLen[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

}  // namespace

size_t dtype_itemsize(DType d) {
  switch (d) {
    case DType::F32: case DType::I32: case DType::U32: return 4;
    case DType::F64: case DType::I64: case DType::U64: return 8;
    case DType::F16: case DType::BF16: case DType::I16: case DType::U16: return 2;
    case DType::I8: case DType::U8: case DType::Bool: return 1;
  }
  return 0;
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::F32: return "float32";
    case DType::F64: return "float64";
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
    case DType::I8: return "int8";
    case DType::U8: return "uint8";
    case DType::I16: return "int16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::U16: return "uint16";
    case DType::U32: return "uint32";
    case DType::U64: return "uint64";
    case DType::Bool: return "bool";
  }
  return "unknown";
}

uint32_t kdtr_crc32(const uint8_t* data, size_t size) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = table[(c ^ data[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

namespace detail {
void throw_dtype_mismatch(const std::string& path, const std::string& name, DType have, const char* wanted) {
  throw KdtrError(path + ": tensor '" + name + "' has dtype " + dtype_name(have) + ", read as " + wanted);
}
}  // namespace detail

int64_t KdtrTensor::numel() const {
  for (int64_t d : shape)
    if (d == 0) return 0;  // before multiplying: the other dims may be huge
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // fits: numel * itemsize == nbytes <= file size (checked at load)
  return n;
}

KdtrFile::KdtrFile(const std::string& path) : path_(path) {
  auto fail = [&](const std::string& what) -> void { throw KdtrError(path_ + ": " + what); };

  // A directory opens as a stream of unknown size here, a device or a pipe as an empty or
  // endless one: say what it is instead.
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (!ec && std::filesystem::is_directory(st)) fail("is a directory, not a KDTR file");
  if (!ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    fail("is not a regular file (a device, a pipe or a socket?), not a KDTR file");

  // Read the whole file; its real size bounds every later allocation.
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail("cannot open (does it exist? is it readable?)");
  const std::streamoff real_size_signed = in.tellg();
  if (real_size_signed < 0) fail("cannot determine the file size");
  const uint64_t real_size = static_cast<uint64_t>(real_size_signed);
  if (real_size < kHeaderSize)
    fail("file is " + std::to_string(real_size) + " bytes, shorter than the 64-byte header (truncated?)");
  try {
    bytes_.resize(static_cast<size_t>(real_size));
  } catch (const std::bad_alloc&) {
    fail("cannot allocate " + std::to_string(real_size) + " bytes to read the file");
  }
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(bytes_.data()), static_cast<std::streamsize>(real_size)))
    fail("read error");
  const uint8_t* b = bytes_.data();

  // Header.
  if (std::memcmp(b, kMagic, sizeof(kMagic)) != 0)
    fail("bad magic: not a KDTR file, or damaged (e.g. by a text-mode transfer)");
  const uint32_t version = load_u32(b + kHdrVersion);
  if (version != kVersion) fail("unsupported version " + std::to_string(version) + " (this reader knows 1)");
  const uint32_t entry_size = load_u32(b + kHdrEntrySize);
  if (entry_size != kEntrySize) fail("entry_size is " + std::to_string(entry_size) + ", must be 256");
  const uint64_t table_offset = load_u64(b + kHdrTableOffset);
  if (table_offset != kTableOffset) fail("table_offset is " + std::to_string(table_offset) + ", must be 64");
  for (size_t i = 0; i < kHdrReservedLen; ++i)
    if (b[kHdrReserved + i] != 0) fail("reserved header bytes are not zero");
  const uint32_t count = load_u32(b + kHdrEntryCount);
  if (count > kMaxEntries)
    fail("entry_count " + std::to_string(count) + " is over the limit of " + std::to_string(kMaxEntries));
  const uint64_t file_size = load_u64(b + kHdrFileSize);
  if (file_size != real_size)
    fail("header says " + std::to_string(file_size) + " bytes but the file has " + std::to_string(real_size) +
         (real_size < file_size ? " (truncated)" : " (padded or appended to)"));
  const uint64_t table_end = kTableOffset + uint64_t{kEntrySize} * count;  // no overflow: count <= 65536
  if (table_end > real_size)
    fail("entry table of " + std::to_string(count) + " entries ends at byte " + std::to_string(table_end) +
         ", past the end of the " + std::to_string(real_size) + "-byte file");
  const uint64_t data_offset = load_u64(b + kHdrDataOffset);
  const uint64_t expected_data_offset = align_up(table_end, kAlignment);
  if (data_offset != expected_data_offset)
    fail("data_offset is " + std::to_string(data_offset) + ", must be " + std::to_string(expected_data_offset));
  const uint32_t stored_crc = load_u32(b + kHdrChecksum);
  const uint32_t crc = kdtr_crc32(b + kHeaderSize, static_cast<size_t>(file_size - kHeaderSize));
  if (crc != stored_crc)
    fail("checksum mismatch (stored " + std::to_string(stored_crc) + ", computed " + std::to_string(crc) +
         "): the file is damaged");

  // Entries.
  tensors_.reserve(count);
  uint64_t prev_end = data_offset;
  for (uint32_t i = 0; i < count; ++i) {
    const uint8_t* e = b + kTableOffset + uint64_t{kEntrySize} * i;
    const std::string where = "entry " + std::to_string(i);
    const size_t name_len = static_cast<size_t>(
        std::find(e, e + kNameField, uint8_t{0}) - e);
    if (name_len == 0) fail(where + ": empty name");
    if (name_len > kMaxNameLen) fail(where + ": name is not NUL-terminated within 159 bytes");
    for (size_t k = name_len; k < kNameField; ++k)
      if (e[k] != 0) fail(where + ": name is followed by non-NUL bytes");
    if (!valid_utf8(e, name_len)) fail(where + ": name is not valid UTF-8");
    std::string name(reinterpret_cast<const char*>(e), name_len);
    const std::string what = where + " '" + name + "'";
    if (index_.count(name)) fail(what + ": duplicate name");

    const uint32_t code = load_u32(e + kEntDtype);
    const DType dtype = static_cast<DType>(code);
    const uint64_t itemsize = dtype_itemsize(dtype);
    if (itemsize == 0) fail(what + ": unknown dtype code " + std::to_string(code));
    const uint32_t ndim = load_u32(e + kEntNdim);
    if (ndim > kMaxDims) fail(what + ": ndim " + std::to_string(ndim) + " is over 8");
    std::vector<int64_t> shape(ndim);
    bool has_zero_dim = false;
    for (uint32_t d = 0; d < kMaxDims; ++d) {
      const uint64_t dim = load_u64(e + kEntDims + 8 * d);
      if (d >= ndim) {
        if (dim != 0) fail(what + ": unused dim " + std::to_string(d) + " is not zero");
        continue;
      }
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(what + ": dim " + std::to_string(d) + " does not fit in int64");
      has_zero_dim = has_zero_dim || dim == 0;
      shape[d] = static_cast<int64_t>(dim);
    }
    if (load_u64(e + kEntReserved) != 0) fail(what + ": reserved entry bytes are not zero");
    // prod(dims) * itemsize as exact arithmetic would give it: 0 with any zero dim, else
    // checked for 64-bit overflow one factor at a time.
    uint64_t nbytes_expected = has_zero_dim ? 0 : itemsize;
    for (uint32_t d = 0; d < ndim && !has_zero_dim; ++d)
      if (__builtin_mul_overflow(nbytes_expected, static_cast<uint64_t>(shape[d]), &nbytes_expected))
        fail(what + ": size of the shape overflows 64 bits");
    const uint64_t offset = load_u64(e + kEntOffset);
    const uint64_t nbytes = load_u64(e + kEntNbytes);
    if (offset % kAlignment != 0) fail(what + ": offset " + std::to_string(offset) + " is not a multiple of 64");
    if (offset < data_offset)
      fail(what + ": offset " + std::to_string(offset) + " is before data_offset " + std::to_string(data_offset));
    if (nbytes_expected != nbytes)
      fail(what + ": nbytes is " + std::to_string(nbytes) + " but the " + dtype_name(dtype) + " shape needs " +
           std::to_string(nbytes_expected));
    uint64_t end = 0;
    if (__builtin_add_overflow(offset, nbytes, &end)) fail(what + ": offset + nbytes overflows 64 bits");
    if (end > file_size)
      fail(what + ": data [" + std::to_string(offset) + ", " + std::to_string(end) + ") runs past the end of the " +
           std::to_string(file_size) + "-byte file");
    if (offset < prev_end)
      fail(what + ": data at " + std::to_string(offset) + " overlaps the previous tensor or is out of order "
           "(previous data ends at " + std::to_string(prev_end) + ")");
    prev_end = end;

    if (dtype == DType::Bool) {
      // as<bool>() hands out these bytes as C++ bool, for which anything but 0/1 is undefined.
      for (uint64_t k = 0; k < nbytes; ++k)
        if (b[offset + k] > 1) fail(what + ": bool element " + std::to_string(k) + " is not 0 or 1");
    }
    index_.emplace(name, tensors_.size());
    tensors_.push_back(KdtrTensor{std::move(name), dtype, std::move(shape), b + offset,
                                  static_cast<size_t>(nbytes), path_});
  }
}

bool KdtrFile::has(const std::string& name) const { return index_.count(name) != 0; }

const KdtrTensor& KdtrFile::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it != index_.end()) return tensors_[it->second];
  // Name a few of the tensors that do exist: usually the typo is obvious next to them.
  constexpr size_t kNamesShown = 8;
  std::string have;
  for (size_t i = 0; i < tensors_.size() && i < kNamesShown; ++i) have += (i ? ", " : "") + tensors_[i].name;
  if (tensors_.size() > kNamesShown) have += ", ...";
  throw KdtrError(path_ + ": no tensor named '" + name + "' (the file has " + std::to_string(tensors_.size()) +
                  (tensors_.empty() ? " tensors)" : " tensors: " + have + ")"));
}

}  // namespace kdtree
