#include "engine/weights.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include <cmath>
#include <random>

#include "engine/engine_error.h"
#include "kernels/elementwise.cuh"
#include "kernels/moe_gemm_w4a16.cuh"
#include "kernels/random_fill.cuh"

namespace kdtree::engine {
namespace {

// Bytes read per pread into a pinned stage; two stages per reader thread let one chunk
// cross the bus while the next is read.
constexpr size_t kLoadStageBytes = size_t{16} << 20;
constexpr int kStagesPerReader = 2;
constexpr auto kProgressPeriod = std::chrono::milliseconds(100);

std::string shape_str(const int64_t* shape, int ndim) {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string shape_str(const std::vector<int64_t>& shape) { return shape_str(shape.data(), static_cast<int>(shape.size())); }

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t stored_bytes(int32_t dtype) { return dtype == KD_BF16 ? 2 : 4; }
constexpr int kInt4PerWord = 8;     // eight 4-bit values per int32 word (compressed-tensors pack-quantized)
constexpr int kInt4Group = kW4GroupSize;
constexpr int kInt4Offset = 8;      // a nibble holds q + 8

ModelDType model_type(int32_t dtype) { return dtype == KD_F32 ? ModelDType::kF32 : ModelDType::kBF16; }

// One tensor to read: its source bytes (a copy of the entry, narrowed to a row part) and
// destination slot (INT4: also the scales' entry).
struct LoadJob {
  kd_tensor_entry entry;
  const WeightSlot* slot;
  const kd_tensor_entry* scale = nullptr;
};

float bf16_bits_to_float(uint16_t b) {
  const uint32_t wide = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &wide, 4);
  return f;
}

float round_bf16(float v) {  // round to nearest even, as __float2bfloat16_rn (weights are finite)
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

class Reader {
 public:
  Reader(char* device_base, ModelDType compute, std::atomic<uint64_t>* done, std::atomic<bool>* stop)
      : base_(device_base), compute_(compute), done_(done), stop_(stop) {}

  // Reads every job of one file; the first failure is returned as text (empty: ok).
  std::string run(const std::vector<LoadJob>& jobs) {
    try {
      setup();
      for (const LoadJob& job : jobs) {
        if (stop_->load()) break;
        if (job.slot->int4) read_int4(job);
        else read_tensor(job);
      }
      KD_CUDA_CHECK(cudaStreamSynchronize(stream_));
    } catch (const std::exception& e) {
      teardown();
      return e.what();
    }
    teardown();
    return {};
  }

 private:
  void setup() {
    KD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    for (int s = 0; s < kStagesPerReader; ++s) {
      pinned_[s] = PinnedBuffer(kLoadStageBytes, "checkpoint staging");
      scratch_[s] = DeviceBuffer(kLoadStageBytes, "checkpoint staging");
      KD_CUDA_CHECK(cudaEventCreateWithFlags(&ready_[s], cudaEventDisableTiming));
      used_[s] = false;
    }
  }

  void teardown() {
    if (stream_) (void)cudaStreamSynchronize(stream_);
    for (int s = 0; s < kStagesPerReader; ++s) {
      if (ready_[s]) (void)cudaEventDestroy(ready_[s]);
      ready_[s] = nullptr;
      pinned_[s].release();
      scratch_[s].release();
    }
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    if (stream_) (void)cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }

  void open_file(const char* path) {
    if (fd_ >= 0 && open_path_ == path) return;
    if (fd_ >= 0) close(fd_);
    fd_ = open(path, O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail(KD_LOAD_ERROR, std::string("cannot open ") + path + ": " + std::strerror(errno));
    open_path_ = path;
  }

  void read_all(const kd_tensor_entry& e, void* dst) {
    open_file(e.file);
    size_t got = 0;
    while (got < e.nbytes) {
      const ssize_t r = pread(fd_, static_cast<char*>(dst) + got, e.nbytes - got, static_cast<off_t>(e.offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0)
        fail(KD_LOAD_ERROR, std::string("reading tensor '") + e.name + "' from " + e.file + ": " +
                                (r == 0 ? "the file ends early (truncated?)" : std::strerror(errno)));
      got += static_cast<size_t>(r);
    }
  }

  // host bytes -> device, through the pinned stages
  void upload(const void* host, size_t bytes, char* dst) {
    for (size_t off = 0; off < bytes; off += kLoadStageBytes) {
      const size_t len = std::min(kLoadStageBytes, bytes - off);
      const int s = stage_++ % kStagesPerReader;
      if (used_[s]) KD_CUDA_CHECK(cudaEventSynchronize(ready_[s]));
      std::memcpy(pinned_[s].data(), static_cast<const char*>(host) + off, len);
      KD_CUDA_CHECK(cudaMemcpyAsync(dst + off, pinned_[s].data(), len, cudaMemcpyHostToDevice, stream_));
      KD_CUDA_CHECK(cudaEventRecord(ready_[s], stream_));
      used_[s] = true;
    }
  }

  void read_int4(const LoadJob& job) {
    const WeightSlot& w = *job.slot;
    const int n = static_cast<int>(w.n), k = static_cast<int>(w.k);
    std::vector<int32_t> packed(static_cast<size_t>(n) * k / kInt4PerWord);
    std::vector<uint16_t> scale(static_cast<size_t>(n) * k / kInt4Group);
    read_all(job.entry, packed.data());
    read_all(*job.scale, scale.data());
    char* dst = base_ + w.offset;
    if (compute_ == ModelDType::kBF16) {  // kept packed: repacked into the kernel's tiles
      std::vector<uint32_t> tiles(static_cast<size_t>(moe_w4a16_expert_words(n, k)));
      const KernelResult r = moe_w4a16_repack(packed.data(), scale.data(), n, k, tiles.data());
      if (!r.ok()) fail(KD_LOAD_ERROR, w.module + ": " + r.message);
      upload(tiles.data(), tiles.size() * sizeof(uint32_t), dst);
    } else {  // float32 mode: w = bf16(q * scale), python_engine/model/int4.py's dequantization
      std::vector<float> full(static_cast<size_t>(n) * k);
      for (int r = 0; r < n; ++r)
        for (int c = 0; c < k; ++c) {
          const uint32_t word = static_cast<uint32_t>(packed[static_cast<size_t>(r) * (k / kInt4PerWord) + c / kInt4PerWord]);
          const int q = static_cast<int>((word >> (4 * (c % kInt4PerWord))) & 0xfu) - kInt4Offset;
          const float sc = bf16_bits_to_float(scale[static_cast<size_t>(r) * (k / kInt4Group) + c / kInt4Group]);
          full[static_cast<size_t>(r) * k + c] = round_bf16(static_cast<float>(q) * sc);
        }
      upload(full.data(), full.size() * sizeof(float), dst);
    }
    done_->fetch_add(job.entry.nbytes + job.scale->nbytes);
  }

  // bytes [at, at + len) of the file into stage s (after its last upload has left)
  char* stage_read(const kd_tensor_entry& e, uint64_t at, size_t len, int s) {
    open_file(e.file);
    if (used_[s]) KD_CUDA_CHECK(cudaEventSynchronize(ready_[s]));
    char* host = static_cast<char*>(pinned_[s].data());
    size_t got = 0;
    while (got < len) {
      const ssize_t r = pread(fd_, host + got, len - got, static_cast<off_t>(at + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0)
        fail(KD_LOAD_ERROR, std::string("reading tensor '") + e.name + "' from " + e.file + " at byte " +
                                std::to_string(at + got) + ": " +
                                (r == 0 ? "the file ends early (truncated?)" : std::strerror(errno)));
      got += static_cast<size_t>(r);
    }
    return host;
  }

  // stage s's first len bytes (elements of type src) -> dst, converted to dst_type
  void stage_send(int s, size_t len, int32_t src, ModelDType dst_type, char* dst) {
    if (model_type(src) == dst_type) {
      KD_CUDA_CHECK(cudaMemcpyAsync(dst, pinned_[s].data(), len, cudaMemcpyHostToDevice, stream_));
    } else {
      KD_CUDA_CHECK(cudaMemcpyAsync(scratch_[s].data(), pinned_[s].data(), len, cudaMemcpyHostToDevice, stream_));
      CopyRowsParams p;
      p.in_dtype = model_type(src);
      p.out_dtype = dst_type;
      p.rows = 1;
      p.cols = static_cast<int>(len / stored_bytes(src));
      p.in = scratch_[s].data();
      p.in_stride = p.cols;
      p.out = dst;
      p.out_stride = p.cols;
      check_kernel(copy_rows(p, stream_));
    }
    KD_CUDA_CHECK(cudaEventRecord(ready_[s], stream_));
    used_[s] = true;
  }

  void read_tensor(const LoadJob& job) {
    if (job.slot->part.dim == 1) return read_columns(job);
    const kd_tensor_entry& e = job.entry;
    const size_t src_el = stored_bytes(e.dtype);
    const ModelDType dst_type = job.slot->float32 ? ModelDType::kF32 : compute_;
    const size_t dst_el = static_cast<size_t>(model_dtype_bytes(dst_type));
    const size_t chunk = kLoadStageBytes / src_el * src_el;
    for (uint64_t off = 0; off < e.nbytes; off += chunk) {
      const size_t len = static_cast<size_t>(std::min<uint64_t>(chunk, e.nbytes - off));
      const int s = stage_++ % kStagesPerReader;
      stage_read(e, e.offset + off, len, s);
      stage_send(s, len, e.dtype, dst_type, base_ + job.slot->offset + off / src_el * dst_el);
      done_->fetch_add(len);
    }
  }

  // Columns [begin, begin + count) of a [rows, cols] tensor: whole rows are read a stage at a
  // time and the part of each row is moved to the front before the upload.
  void read_columns(const LoadJob& job) {
    const kd_tensor_entry& e = job.entry;
    const WeightSlot& w = *job.slot;
    const int64_t R = w.source_shape[0], C = w.source_shape[1], begin = w.part.begin, width = w.part.count;
    const size_t src_el = stored_bytes(e.dtype), row_bytes = static_cast<size_t>(C) * src_el;
    const size_t part_bytes = static_cast<size_t>(width) * src_el;
    if (row_bytes > kLoadStageBytes) fail(KD_LOAD_ERROR, where(e) + ": a row is wider than the load stage");
    const ModelDType dst_type = w.float32 ? ModelDType::kF32 : compute_;
    const size_t dst_el = static_cast<size_t>(model_dtype_bytes(dst_type));
    const int64_t per_chunk = static_cast<int64_t>(kLoadStageBytes / row_bytes);
    for (int64_t r0 = 0; r0 < R; r0 += per_chunk) {
      const int64_t n = std::min(per_chunk, R - r0);
      const int s = stage_++ % kStagesPerReader;
      char* host = stage_read(e, e.offset + static_cast<uint64_t>(r0) * row_bytes, static_cast<size_t>(n) * row_bytes, s);
      for (int64_t i = 0; i < n; ++i)  // destinations never pass their sources: in place, in order
        std::memmove(host + i * part_bytes, host + i * row_bytes + begin * src_el, part_bytes);
      stage_send(s, static_cast<size_t>(n) * part_bytes, e.dtype, dst_type,
                 base_ + w.offset + static_cast<size_t>(r0) * width * dst_el);
      done_->fetch_add(static_cast<size_t>(n) * row_bytes);
    }
  }

  static std::string where(const kd_tensor_entry& e) { return std::string("tensor '") + e.name + "' in " + e.file; }

  char* base_;
  ModelDType compute_;
  std::atomic<uint64_t>* done_;
  std::atomic<bool>* stop_;
  cudaStream_t stream_ = nullptr;
  PinnedBuffer pinned_[kStagesPerReader];
  DeviceBuffer scratch_[kStagesPerReader];
  cudaEvent_t ready_[kStagesPerReader] = {};
  bool used_[kStagesPerReader] = {};
  int stage_ = 0;
  int fd_ = -1;
  std::string open_path_;
};

// Every planned tensor's entry, checked; throws KD_LOAD_ERROR on the first problem.
std::vector<LoadJob> match_entries(const WeightPlan& plan, const kd_tensor_entry* entries, int n) {
  if (n < 0 || (n > 0 && !entries)) fail(KD_INVALID_ARGUMENT, "tensor table: null or negative count");
  std::unordered_map<std::string, const kd_tensor_entry*> by_name;
  for (int i = 0; i < n; ++i) {
    const kd_tensor_entry& e = entries[i];
    if (!e.name || !e.file) fail(KD_INVALID_ARGUMENT, "tensor table entry " + std::to_string(i) + " has no name or file");
    by_name.emplace(e.name, &e);
  }
  std::unordered_map<std::string, uint64_t> file_size;
  std::vector<LoadJob> jobs;
  auto find = [&](const std::string& name, const std::string& expect) -> const kd_tensor_entry& {
    auto it = by_name.find(name);
    if (it == by_name.end())
      fail(KD_LOAD_ERROR, "tensor '" + name + "' is missing from the checkpoint (expected " + expect + ")");
    return *it->second;
  };
  auto check_file = [&](const kd_tensor_entry& e, const std::string& where) {
    auto fs = file_size.find(e.file);
    if (fs == file_size.end()) {
      struct stat st;
      if (stat(e.file, &st) != 0)
        fail(KD_LOAD_ERROR, std::string("cannot read ") + e.file + " (holding " + where + "): " + std::strerror(errno));
      if (!S_ISREG(st.st_mode)) fail(KD_LOAD_ERROR, std::string(e.file) + " is not a regular file");
      fs = file_size.emplace(e.file, static_cast<uint64_t>(st.st_size)).first;
    }
    if (e.offset + e.nbytes > fs->second)
      fail(KD_LOAD_ERROR, where + " needs bytes " + std::to_string(e.offset) + ".." + std::to_string(e.offset + e.nbytes) +
                              " but the file has " + std::to_string(fs->second) + " bytes (truncated?)");
  };
  auto check_shape = [](const kd_tensor_entry& e, const std::vector<int64_t>& shape, int32_t dtype,
                        const std::string& where, const char* type_name) {
    if (e.dtype != dtype) fail(KD_LOAD_ERROR, where + " must be " + type_name);
    if (e.ndim != static_cast<int>(shape.size()) || !std::equal(shape.begin(), shape.end(), e.shape))
      fail(KD_LOAD_ERROR, where + " has shape " + shape_str(e.shape, std::clamp(e.ndim, 0, 4)) + ", expected " +
                              shape_str(shape));
    if (e.nbytes != static_cast<uint64_t>(numel(shape)) * stored_bytes(dtype))
      fail(KD_LOAD_ERROR, where + " spans " + std::to_string(e.nbytes) + " bytes, its shape needs more or fewer");
  };
  for (const WeightSlot& slot : plan.slots()) {
    if (slot.int4) {
      const std::vector<int64_t> pshape{slot.n, slot.k / kInt4PerWord}, sshape{slot.n, slot.k / kInt4Group};
      const kd_tensor_entry& p = find(slot.module + ".weight_packed", "int32 " + shape_str(pshape));
      const kd_tensor_entry& sc = find(slot.module + ".weight_scale", "bfloat16 " + shape_str(sshape));
      const std::string pw = "tensor '" + slot.module + ".weight_packed' in " + p.file;
      const std::string sw = "tensor '" + slot.module + ".weight_scale' in " + sc.file;
      check_shape(p, pshape, KD_I32, pw, "int32 (eight 4-bit values per word)");
      check_shape(sc, sshape, KD_BF16, sw, "bfloat16 (one scale per 32 columns)");
      check_file(p, pw);
      check_file(sc, sw);
      jobs.push_back({p, &slot, &sc});
      continue;
    }
    auto it = by_name.find(slot.name);
    if (it == by_name.end())
      fail(KD_LOAD_ERROR, "tensor '" + slot.name + "' is missing from the checkpoint (expected shape " +
                              shape_str(slot.shape) + ")");
    const kd_tensor_entry& e = *it->second;
    const std::string where = "tensor '" + slot.name + "' in " + e.file;
    if (e.dtype != KD_F32 && e.dtype != KD_BF16)
      fail(KD_LOAD_ERROR, where + " has an unsupported element type (the engine reads float32 and bfloat16; "
                                  "INT4 only for routed experts declared in quantization_config)");
    if (e.ndim != static_cast<int>(slot.source_shape.size()) ||
        !std::equal(slot.source_shape.begin(), slot.source_shape.end(), e.shape))
      fail(KD_LOAD_ERROR, where + " has shape " + shape_str(e.shape, std::clamp(e.ndim, 0, 4)) + ", expected " +
                              shape_str(slot.source_shape));
    const uint64_t want = static_cast<uint64_t>(numel(slot.source_shape)) * stored_bytes(e.dtype);
    if (e.nbytes != want)
      fail(KD_LOAD_ERROR, where + " spans " + std::to_string(e.nbytes) + " bytes, its shape and type need " +
                              std::to_string(want));
    check_file(e, where);
    LoadJob job{e, &slot};
    if (slot.part.dim == 0) {  // rows: a contiguous range of the tensor's bytes
      const uint64_t row_bytes = e.nbytes / static_cast<uint64_t>(slot.source_shape[0]);
      job.entry.offset += static_cast<uint64_t>(slot.part.begin) * row_bytes;
      job.entry.nbytes = static_cast<uint64_t>(slot.part.count) * row_bytes;
    }
    jobs.push_back(job);
  }
  return jobs;
}

}  // namespace

namespace {

std::vector<int64_t> part_shape(const std::vector<int64_t>& shape, const TensorPart& part) {
  std::vector<int64_t> out = shape;
  if (part.dim >= 0) out[static_cast<size_t>(part.dim)] = part.count;
  return out;
}

}  // namespace

void WeightPlan::add(const std::string& name, std::vector<int64_t> shape, bool float32, TensorPart part) {
  WeightSlot s;
  s.name = name;
  s.float32 = float32;
  s.shape = part_shape(shape, part);
  s.source_shape = std::move(shape);
  s.part = part;
  s.bytes = static_cast<size_t>(numel(s.shape)) * element_bytes(float32);
  s.offset = layout_.add(s.bytes);
  slots_.push_back(std::move(s));
}

void WeightPlan::add_stack(const std::vector<std::string>& names, std::vector<int64_t> shape) {
  const size_t one = static_cast<size_t>(numel(shape)) * element_bytes(false);
  const size_t base = layout_.add(one * names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    WeightSlot s;
    s.name = names[i];
    s.shape = s.source_shape = shape;
    s.bytes = one;
    s.offset = base + i * one;
    slots_.push_back(std::move(s));
  }
}

void WeightPlan::add_rows(const std::vector<PlannedTensor>& parts) {
  size_t total = 0;
  for (const PlannedTensor& p : parts) total += static_cast<size_t>(numel(part_shape(p.shape, p.part))) * element_bytes(false);
  size_t at = layout_.add(total);
  for (const PlannedTensor& p : parts) {
    WeightSlot s;
    s.name = p.name;
    s.shape = part_shape(p.shape, p.part);
    s.source_shape = p.shape;
    s.part = p.part;
    s.bytes = static_cast<size_t>(numel(s.shape)) * element_bytes(false);
    s.offset = at;
    at += s.bytes;
    slots_.push_back(std::move(s));
  }
}

void WeightPlan::add_int4_stack(const std::vector<std::string>& modules, int64_t n, int64_t k) {
  const bool packed = dtype_ == ModelDType::kBF16;
  const size_t one = packed ? static_cast<size_t>(moe_w4a16_expert_words(static_cast<int>(n), static_cast<int>(k))) * 4
                            : static_cast<size_t>(n * k) * sizeof(float);
  const size_t base = layout_.add(one * modules.size());
  for (size_t i = 0; i < modules.size(); ++i) {
    WeightSlot s;
    s.name = modules[i] + (packed ? ".weight_packed" : ".weight");
    s.shape = s.source_shape = {n, k};
    s.bytes = one;
    s.offset = base + i * one;
    s.int4 = true;
    s.module = modules[i];
    s.n = n;
    s.k = k;
    slots_.push_back(std::move(s));
  }
}

void plan_target_weights(const TargetDims& t, WeightPlan* plan) {
  const int64_t H = t.hidden, V = t.vocab, nh = t.heads, hl = t.local_heads(), h0 = t.head_begin();
  const bool split = t.world > 1;
  auto rows = [&](int64_t begin, int64_t count) { return split ? TensorPart{0, begin, count} : TensorPart{}; };
  auto cols = [&](int64_t begin, int64_t count) { return split ? TensorPart{1, begin, count} : TensorPart{}; };
  plan->add("model.embed_tokens.weight", {V, H});  // replicated: every rank embeds every token
  plan->add("model.norm.weight", {H});
  // tied: each rank's lm_head part is a view of the embedding (vocab_head.h)
  if (!t.tie_embeddings) plan->add("lm_head.weight", {V, H}, false, rows(t.vocab_begin(), t.local_vocab()));
  for (int i = 0; i < t.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const std::string a = p + "self_attn.";
    plan->add(p + "input_layernorm.weight", {H});
    plan->add(p + "post_attention_layernorm.weight", {H});
    // the projections of the normalised hidden state, one matrix: [q_a | kv_a] or [q | kv_a]
    // (the latent kv_a and q_a are replicated: the cache is per token, not per head)
    if (t.q_lora == 0) {
      plan->add_rows({{a + "q_proj.weight", {nh * t.qk(), H}, rows(h0 * t.qk(), hl * t.qk())},
                      {a + "kv_a_proj_with_mqa.weight", {t.kv_lora + t.rope, H}}});
    } else {
      plan->add_rows({{a + "q_a_proj.weight", {t.q_lora, H}}, {a + "kv_a_proj_with_mqa.weight", {t.kv_lora + t.rope, H}}});
      plan->add(a + "q_a_layernorm.weight", {t.q_lora});
      plan->add(a + "q_b_proj.weight", {nh * t.qk(), t.q_lora}, false, rows(h0 * t.qk(), hl * t.qk()));
    }
    plan->add(a + "kv_a_layernorm.weight", {t.kv_lora});
    const int64_t kvb = t.nope + t.v_head;  // kv_b rows per head
    plan->add(a + "kv_b_proj.weight", {nh * kvb, t.kv_lora}, false, rows(h0 * kvb, hl * kvb));
    // o_proj's input columns of this rank's heads: the partial outputs are summed (all-reduce)
    plan->add(a + "o_proj.weight", {H, nh * t.v_head}, false, cols(h0 * t.v_head, hl * t.v_head));
    const std::string m = p + "mlp.";
    if (!t.moe_layer(i)) {  // gate and up as one [2I, H] matrix, this rank's intermediate columns
      const int64_t I = t.dense_inter, Il = t.local_dense_inter(), i0 = t.rank * Il;
      plan->add_rows({{m + "gate_proj.weight", {I, H}, rows(i0, Il)}, {m + "up_proj.weight", {I, H}, rows(i0, Il)}});
      plan->add(m + "down_proj.weight", {H, I}, false, cols(i0, Il));
      continue;
    }
    plan->add(m + "gate.weight", {t.experts, H}, /*float32=*/true);  // the router: replicated
    plan->add(m + "gate.e_score_correction_bias", {t.experts}, /*float32=*/true);
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
      const bool down = std::strcmp(proj, "down_proj") == 0;
      const int64_t n = down ? H : t.moe_inter, k = down ? t.moe_inter : H;
      std::vector<std::string> modules;  // this rank's experts, whole
      for (int e = t.expert_begin(); e < t.expert_begin() + t.local_experts(); ++e)
        modules.push_back(m + "experts." + std::to_string(e) + "." + proj);
      if (t.experts_int4) {
        plan->add_int4_stack(modules, n, k);
      } else {
        for (std::string& name : modules) name += ".weight";
        plan->add_stack(modules, {n, k});
      }
    }
    if (t.shared_experts > 0) {
      const int64_t I = t.shared_inter(), Il = t.local_shared_inter(), i0 = t.rank * Il;
      plan->add_rows({{m + "shared_experts.gate_proj.weight", {I, H}, rows(i0, Il)},
                      {m + "shared_experts.up_proj.weight", {I, H}, rows(i0, Il)}});
      plan->add(m + "shared_experts.down_proj.weight", {H, I}, false, cols(i0, Il));
    }
  }
}

void plan_drafter_weights(const DrafterDims& d, WeightPlan* plan) {
  const int64_t H = d.hidden, q = static_cast<int64_t>(d.heads) * d.head_dim;
  const int64_t kv = static_cast<int64_t>(d.kv_heads) * d.head_dim;
  plan->add("drafter.fc.weight", {H, d.features()});
  plan->add("drafter.hidden_norm.weight", {H});
  plan->add("drafter.norm.weight", {H});
  for (int i = 0; i < d.layers; ++i) {
    const std::string p = "drafter.layers." + std::to_string(i) + ".";
    plan->add(p + "input_layernorm.weight", {H});
    plan->add(p + "post_attention_layernorm.weight", {H});
    // [q | k | v] as one matrix: the block's projections in one GEMM, the context's (k, v) in one
    plan->add_rows({{p + "self_attn.q_proj.weight", {q, H}}, {p + "self_attn.k_proj.weight", {kv, H}},
                    {p + "self_attn.v_proj.weight", {kv, H}}});
    plan->add(p + "self_attn.o_proj.weight", {H, q});
    plan->add(p + "self_attn.q_norm.weight", {d.head_dim});
    plan->add(p + "self_attn.k_norm.weight", {d.head_dim});
    plan->add_rows({{p + "mlp.gate_proj.weight", {d.inter, H}}, {p + "mlp.up_proj.weight", {d.inter, H}}});
    plan->add(p + "mlp.down_proj.weight", {H, d.inter});
  }
}

const void* DeviceWeights::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const void* DeviceWeights::get(const std::string& name) const {
  const void* p = find(name);
  if (!p) fail(KD_INTERNAL, "weight '" + name + "' was not planned");
  return p;
}

DeviceWeights DeviceWeights::load(const WeightPlan& plan, const kd_tensor_entry* entries, int n_entries,
                                  const LoadOptions& options) {
  std::vector<LoadJob> jobs = match_entries(plan, entries, n_entries);
  DeviceWeights w;
  w.memory_ = DeviceBuffer(plan.total_bytes(), "the model weights");
  for (const WeightSlot& s : plan.slots()) w.by_name_[s.name] = w.memory_.bytes_ptr(s.offset);

  // one reader per file at a time, files dealt round-robin, each file's tensors in offset order
  std::sort(jobs.begin(), jobs.end(), [](const LoadJob& a, const LoadJob& b) {
    const int c = std::strcmp(a.entry.file, b.entry.file);
    return c != 0 ? c < 0 : a.entry.offset < b.entry.offset;
  });
  std::vector<std::vector<LoadJob>> per_file;
  for (const LoadJob& j : jobs) {
    if (per_file.empty() || std::strcmp(per_file.back().back().entry.file, j.entry.file) != 0) per_file.emplace_back();
    per_file.back().push_back(j);
  }
  uint64_t total = 0;
  for (const LoadJob& j : jobs) total += j.entry.nbytes + (j.scale ? j.scale->nbytes : 0);
#if defined(KD_SIMT_EMULATION)
  const int threads = 1;  // the CPU emulator runs one kernel at a time
#else
  const int threads = std::max(1, std::min<int>(options.threads, static_cast<int>(per_file.size())));
#endif
  std::atomic<uint64_t> done{0};
  std::atomic<bool> stop{false};
  std::atomic<size_t> next_file{0};
  std::mutex error_mutex;
  std::string first_error;
  int device = 0;
  KD_CUDA_CHECK(cudaGetDevice(&device));
  auto work = [&]() {
    (void)cudaSetDevice(device);  // a new thread starts on device 0
    Reader reader(w.memory_.bytes_ptr(), plan.dtype(), &done, &stop);
    for (size_t f = next_file++; f < per_file.size() && !stop.load(); f = next_file++) {
      const std::string err = reader.run(per_file[f]);
      if (!err.empty()) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (first_error.empty()) first_error = err;
        stop = true;
      }
    }
  };
  std::vector<std::thread> pool;
  std::mutex running_mutex;
  std::condition_variable finished;
  int running = threads;
  for (int i = 0; i < threads; ++i)
    pool.emplace_back([&]() {
      work();
      std::lock_guard<std::mutex> lock(running_mutex);
      --running;
      finished.notify_all();
    });
  {
    std::unique_lock<std::mutex> lock(running_mutex);
    while (running > 0) {
      if (options.progress) options.progress(options.progress_user, done.load(), total);
      finished.wait_for(lock, kProgressPeriod, [&] { return running == 0; });
    }
  }
  for (auto& t : pool) t.join();
  if (!first_error.empty()) fail(KD_LOAD_ERROR, first_error);  // w (and its memory) goes with the throw
  if (options.progress) options.progress(options.progress_user, total, total);
  return w;
}

namespace {

// Dummy INT4 experts: this many distinct random experts per stack, repeated through it (each
// expert still has its own bytes, so a round reads what a real checkpoint's would).
constexpr int kDummyDistinctExperts = 2;
// A vector weight (RMSNorm scale, router bias) near 1, as trained norms are.
constexpr float kDummyVectorLow = 0.9f, kDummyVectorHigh = 1.1f;
// An INT4 value spans -8..7: a scale of this over sqrt(k) keeps the product's spread near a
// dense matrix's 1/sqrt(fan-in).
constexpr float kDummyInt4ScaleNumerator = 0.25f;

// One random INT4 expert [n, k] in the engine's layout: W4A16 tiles (bf16 compute) or the
// dequantized float32 matrix (float32 compute), as the loader would store a checkpoint's.
std::vector<char> dummy_int4_expert(int n, int k, ModelDType compute, std::mt19937_64* rng) {
  std::vector<int32_t> packed(static_cast<size_t>(n) * k / kInt4PerWord);
  std::vector<uint16_t> scale(static_cast<size_t>(n) * k / kInt4Group);
  for (int32_t& w : packed) w = static_cast<int32_t>((*rng)());
  std::uniform_real_distribution<float> spread(0.5f, 1.5f);
  const float base = kDummyInt4ScaleNumerator / std::sqrt(static_cast<float>(k));
  for (uint16_t& sc : scale) {
    const float v = round_bf16(base * spread(*rng));
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    sc = static_cast<uint16_t>(bits >> 16);
  }
  std::vector<char> out;
  if (compute == ModelDType::kBF16) {
    out.resize(static_cast<size_t>(moe_w4a16_expert_words(n, k)) * sizeof(uint32_t));
    const KernelResult r = moe_w4a16_repack(packed.data(), scale.data(), n, k, reinterpret_cast<uint32_t*>(out.data()));
    if (!r.ok()) fail(KD_INTERNAL, "dummy INT4 expert: " + r.message);
    return out;
  }
  out.resize(static_cast<size_t>(n) * k * sizeof(float));
  float* full = reinterpret_cast<float*>(out.data());
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < k; ++c) {
      const uint32_t word = static_cast<uint32_t>(packed[static_cast<size_t>(r) * (k / kInt4PerWord) + c / kInt4PerWord]);
      const int q = static_cast<int>((word >> (4 * (c % kInt4PerWord))) & 0xfu) - kInt4Offset;
      full[static_cast<size_t>(r) * k + c] = round_bf16(static_cast<float>(q) * bf16_bits_to_float(scale[static_cast<size_t>(r) * (k / kInt4Group) + c / kInt4Group]));
    }
  return out;
}

}  // namespace

DeviceWeights DeviceWeights::dummy(const WeightPlan& plan, uint64_t seed, const LoadOptions& options) {
  DeviceWeights w;
  w.memory_ = DeviceBuffer(plan.total_bytes(), "the model weights");
  for (const WeightSlot& s : plan.slots()) w.by_name_[s.name] = w.memory_.bytes_ptr(s.offset);
  cudaStream_t stream = nullptr;
  KD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() {
      (void)cudaStreamSynchronize(s);
      (void)cudaStreamDestroy(s);
    }
  } guard{stream};
  std::mt19937_64 rng(seed);
  // the first slot holding each distinct expert of an INT4 stack, by (n, k, which)
  std::unordered_map<std::string, const WeightSlot*> distinct;
  uint64_t done = 0;
  const uint64_t total = plan.total_bytes();
  uint64_t index = 0;
  for (const WeightSlot& s : plan.slots()) {
    ++index;
    if (s.int4) {
      const int which = static_cast<int>(index % kDummyDistinctExperts);
      const std::string key = std::to_string(s.n) + "x" + std::to_string(s.k) + "#" + std::to_string(which);
      auto it = distinct.find(key);
      if (it == distinct.end()) {
        const std::vector<char> host = dummy_int4_expert(static_cast<int>(s.n), static_cast<int>(s.k), plan.dtype(), &rng);
        if (host.size() != s.bytes) fail(KD_INTERNAL, "dummy INT4 expert: " + s.module + " size differs from its plan");
        // synchronous: `host` is freed at the end of this block
        KD_CUDA_CHECK(cudaMemcpy(w.memory_.bytes_ptr(s.offset), host.data(), s.bytes, cudaMemcpyHostToDevice));
        distinct.emplace(key, &s);
      } else {
        KD_CUDA_CHECK(cudaMemcpyAsync(w.memory_.bytes_ptr(s.offset), w.memory_.bytes_ptr(it->second->offset), s.bytes,
                                      cudaMemcpyDeviceToDevice, stream));
      }
    } else {
      FillUniformParams p;
      p.dtype = s.float32 ? ModelDType::kF32 : plan.dtype();
      p.count = numel(s.shape);
      p.out = w.memory_.bytes_ptr(s.offset);
      p.seed = seed;
      p.stream = index;
      if (s.source_shape.size() == 1) {
        p.low = kDummyVectorLow;
        p.high = kDummyVectorHigh;
      } else {  // fan-in: a checkpoint matrix is [out, in]
        const float bound = 1.0f / std::sqrt(static_cast<float>(s.source_shape.back()));
        p.low = -bound;
        p.high = bound;
      }
      check_kernel(fill_uniform(p, stream));
    }
    done += s.bytes;
    if (options.progress) options.progress(options.progress_user, done, total);
  }
  KD_CUDA_CHECK(cudaStreamSynchronize(stream));
  return w;
}

}  // namespace kdtree::engine
