// Reader for KDTR reference bundles (docs/kdtr.md): named tensors written by the Python
// reference (python_engine/kdtr.py) and read here by the native tests.
//
//   kdtree::KdtrFile f("refs/tree_build.kdtr");          // reads and validates everything
//   const kdtree::KdtrTensor& logp = f.get("case3.logp");  // throws naming file and tensor
//   const float* p = logp.as<float>();                     // throws if the dtype differs
//
// Every problem with a file (short, damaged, inconsistent, unknown name, wrong type) throws
// KdtrError with the file's path and what is wrong; the reader never allocates from a size
// it has not checked against the file's real size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace kdtree {

struct KdtrError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class DType : uint32_t {
  F32 = 1, F64 = 2, F16 = 3, BF16 = 4, I8 = 5, U8 = 6, I16 = 7,
  I32 = 8, I64 = 9, U16 = 10, U32 = 11, U64 = 12, Bool = 13,
};

// Bytes per element, or 0 for a code that is not a known dtype.
size_t dtype_itemsize(DType dtype);
// "float32", "bfloat16", ... (the names docs/kdtr.md uses), or "unknown".
const char* dtype_name(DType dtype);

// CRC-32 as zlib's crc32 (IEEE 802.3, reflected, init and final xor 0xFFFFFFFF).
uint32_t kdtr_crc32(const uint8_t* data, size_t size);

namespace detail {
// Which dtypes a C++ element type may read: exact matches, and the 16-bit floats as their
// raw bits (uint16_t), since host C++17 has no standard half/bfloat16 type.
template <class T>
bool dtype_readable_as(DType d) {
  if constexpr (std::is_same_v<T, float>) return d == DType::F32;
  else if constexpr (std::is_same_v<T, double>) return d == DType::F64;
  else if constexpr (std::is_same_v<T, int8_t>) return d == DType::I8;
  else if constexpr (std::is_same_v<T, uint8_t>) return d == DType::U8 || d == DType::Bool;
  else if constexpr (std::is_same_v<T, int16_t>) return d == DType::I16;
  else if constexpr (std::is_same_v<T, uint16_t>) return d == DType::U16 || d == DType::F16 || d == DType::BF16;
  else if constexpr (std::is_same_v<T, int32_t>) return d == DType::I32;
  else if constexpr (std::is_same_v<T, uint32_t>) return d == DType::U32;
  else if constexpr (std::is_same_v<T, int64_t>) return d == DType::I64;
  else if constexpr (std::is_same_v<T, uint64_t>) return d == DType::U64;
  else if constexpr (std::is_same_v<T, bool>) return d == DType::Bool;  // bytes checked to be 0/1 at load
  else {
    static_assert(sizeof(T) == 0, "KdtrTensor::as<T>: T must be a fixed-width integer, float, double or bool");
    return false;
  }
}
[[noreturn]] void throw_dtype_mismatch(const std::string& path, const std::string& name, DType have,
                                       const char* wanted);
}  // namespace detail

struct KdtrTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;  // empty for a scalar
  const uint8_t* data;         // into the owning KdtrFile's buffer; valid while it lives
  size_t nbytes;
  std::string file;            // path of the owning file, for error messages

  int64_t numel() const;

  template <class T>
  const T* as() const {
    if (!detail::dtype_readable_as<T>(dtype)) detail::throw_dtype_mismatch(file, name, dtype, typeid_name<T>());
    return reinterpret_cast<const T*>(data);
  }

 private:
  template <class T>
  static const char* typeid_name() {
    if constexpr (std::is_same_v<T, float>) return "float";
    else if constexpr (std::is_same_v<T, double>) return "double";
    else if constexpr (std::is_same_v<T, bool>) return "bool";
    else if constexpr (std::is_signed_v<T>) return sizeof(T) == 1 ? "int8_t" : sizeof(T) == 2 ? "int16_t" : sizeof(T) == 4 ? "int32_t" : "int64_t";
    else return sizeof(T) == 1 ? "uint8_t" : sizeof(T) == 2 ? "uint16_t" : sizeof(T) == 4 ? "uint32_t" : "uint64_t";
  }
};

class KdtrFile {
 public:
  explicit KdtrFile(const std::string& path);  // reads and validates everything; throws KdtrError

  // Tensors point into this object's buffer: moving keeps them valid, copying is not allowed.
  KdtrFile(const KdtrFile&) = delete;
  KdtrFile& operator=(const KdtrFile&) = delete;
  KdtrFile(KdtrFile&&) = default;
  KdtrFile& operator=(KdtrFile&&) = default;

  bool has(const std::string& name) const;
  const KdtrTensor& get(const std::string& name) const;  // throws KdtrError naming file and tensor
  const std::vector<KdtrTensor>& tensors() const { return tensors_; }  // in file order
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<uint8_t> bytes_;  // the whole file
  std::vector<KdtrTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in tensors_
};

}  // namespace kdtree
