#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "common/cuda_check.h"
#include "engine/engine_error.h"
#include "kernels/elementwise.cuh"
#include "kernels/tree_accept.cuh"
#include "kernels/verify_attn.cuh"

namespace kdtree::engine {

Engine::Engine(const kd_target_config& target, const kd_drafter_config* drafter, const kd_tensor_entry* tensors,
               int n_tensors, const kd_engine_options& options, kd_progress_fn progress, void* progress_user) {
  tdims_ = check_target_config(target);
  if (drafter) ddims_ = check_drafter_config(*drafter, tdims_);
  limits_ = check_options(options, ddims_ ? &*ddims_ : nullptr);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    (void)cudaGetLastError();
    fail(KD_CUDA_ERROR, "no CUDA device is visible (cudaGetDeviceCount); the native engine needs an NVIDIA GPU");
  }
  if (limits_.device >= devices)
    fail(KD_INVALID_ARGUMENT, "device " + std::to_string(limits_.device) + " does not exist (" +
                                  std::to_string(devices) + " visible)");
  KD_CUDA_CHECK(cudaSetDevice(limits_.device));
  comm_ = make_collective(options, limits_.device);  // NCCL: every rank joins here
  comm_kind_ = comm_->split() ? options.comm : KD_COMM_NONE;
  split_target(&tdims_, comm_->rank(), comm_->world());
  const auto [free_before, total] = device_memory_info();
  memory_.device_total = total;
  memory_.device_free_before = free_before;
  KD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));

  WeightPlan plan(limits_.dtype);
  plan_target_weights(tdims_, &plan);
  memory_.target_weights = plan.total_bytes();
  if (ddims_) plan_drafter_weights(*ddims_, &plan);
  memory_.drafter_weights = plan.total_bytes() - memory_.target_weights;
  plan_memory_limit(options, free_before, total);
  memory_.weights = plan.total_bytes();
  memory_.target_cache = TargetCache::bytes_for(tdims_, limits_);
  memory_.drafter_cache = ddims_ ? DrafterCache::bytes_for(*ddims_, limits_) : 0;
  check_memory_fits(/*workspace=*/0);
  LoadOptions lo;
  lo.threads = limits_.load_threads;
  lo.progress = progress;
  lo.progress_user = progress_user;
  load_format_ = options.load_format;
  dummy_seed_ = options.dummy_seed;
  memory_limit_ = options.memory_limit;
  for (const WeightSlot& w : plan.slots()) weight_shapes_.push_back({w.name, w.shape, w.bytes});
  const auto load_start = std::chrono::steady_clock::now();
  if (options.load_format == KD_LOAD_DUMMY) {
    if (n_tensors != 0)
      fail(KD_INVALID_ARGUMENT, "engine options: load_format dummy makes every weight itself; pass no tensor table (got " +
                                    std::to_string(n_tensors) + " entries)");
    weights_ = DeviceWeights::dummy(plan, options.dummy_seed, lo);
  } else if (options.load_format == KD_LOAD_CHECKPOINT) {
    weights_ = DeviceWeights::load(plan, tensors, n_tensors, lo);
  } else {
    fail(KD_INVALID_ARGUMENT, "engine options: load_format " + std::to_string(options.load_format) +
                                  " is neither KD_LOAD_CHECKPOINT (0) nor KD_LOAD_DUMMY (1)");
  }
  memory_.load_us = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - load_start).count());

  gemm_.init(stream_);
  const std::vector<int> feature_layers = ddims_ ? ddims_->target_layers : std::vector<int>{};
  target_ = std::make_unique<TargetModel>(tdims_, limits_, feature_layers, weights_, &gemm_, comm_.get());
  head_ = std::make_unique<VocabHead>(tdims_, target_->lm_head(), limits_.dtype, &gemm_, comm_.get());
  target_->set_vocab_head(head_.get());
  if (comm_->split() && options.overlap_collectives) {
    KD_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
    target_->set_collective_stream(comm_stream_);
  }
  if (ddims_)
    drafter_ = std::make_unique<DrafterModel>(*ddims_, tdims_, limits_, weights_, target_->embedding(), head_.get(),
                                              &gemm_);
  tcache_ = std::make_unique<TargetCache>(tdims_, limits_, stream_);
  if (ddims_) dcache_ = std::make_unique<DrafterCache>(*ddims_, limits_, stream_);
  slots_ = std::make_unique<SlotTable>(limits_, stream_);
  round_ = std::make_unique<DecodeRound>(limits_, tdims_.vocab, target_.get(), drafter_.get(), tcache_.get(),
                                         dcache_.get(), slots_.get(), comm_.get(), head_.get());

  target_->declare(&ws_);
  head_->declare(&ws_, std::max(limits_.forward_rows(), drafter_ ? drafter_->max_draft_rows() : 0),
                 std::min(limits_.max_budget, tdims_.vocab));  // the round's top-K: min(budget, vocab)
  if (drafter_) drafter_->declare(&ws_);
  round_->declare(&ws_);
  const int rows = std::max(limits_.forward_rows(), drafter_ ? drafter_->max_context_rows() : 0);
  io_vis_words_ = (std::max(limits_.tree_rows(), limits_.prefill_chunk) + 31) / 32;
  ws_.declare(&io_tokens_, rows * sizeof(int32_t));
  ws_.declare(&io_positions_, rows * sizeof(int32_t));
  ws_.declare(&io_vis_, static_cast<size_t>(limits_.forward_rows()) * io_vis_words_ * sizeof(uint32_t));
  ws_.declare(&io_keep_, static_cast<size_t>(std::max(limits_.tree_rows(), limits_.max_block) + 1) * sizeof(int32_t));
  ws_.declare(&io_counts_, 2 * static_cast<size_t>(limits_.slots) * sizeof(int32_t));
  memory_.drafter_cache += slots_->bytes();
  check_memory_fits(ws_.total() + gemm_.workspace_bytes());
  ws_.allocate(stream_);
  target_->upload_constants(stream_);
  if (drafter_) drafter_->upload_constants(stream_);
  round_->init(stream_);
  comm_->wait(stream_);

  slot_owner_.assign(limits_.slots, -1);
  slot_len_.assign(limits_.slots, 0);
  memory_.weights = weights_.bytes();
  memory_.target_cache = tcache_->bytes();
  memory_.drafter_cache = (dcache_ ? dcache_->bytes() : 0) + slots_->bytes();
  memory_.workspace = ws_.bytes() + gemm_.workspace_bytes();
  memory_.total = memory_.weights + memory_.target_cache + memory_.drafter_cache + memory_.workspace;
  memory_.device_free_after = device_memory_info().first;
}

namespace {

std::string gib(uint64_t bytes) {  // GiB, or MiB below one
  constexpr double kMiB = 1 << 20, kGiB = 1 << 30;
  char text[32];
  if (bytes < (uint64_t{1} << 30)) std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / kMiB);
  else std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / kGiB);
  return text;
}

}  // namespace

void Engine::plan_memory_limit(const kd_engine_options& options, uint64_t free_before, uint64_t device_total) {
  if (options.memory_limit == 0) {
    memory_.limit = free_before;  // 0 when the device cannot say: no check before allocating
    return;
  }
  if (device_total != 0 && options.memory_limit > free_before)
    fail(KD_INVALID_ARGUMENT, "engine options: memory_limit " + gib(options.memory_limit) + " is more than device " +
                                  std::to_string(limits_.device) + " has free (" + gib(free_before) + " of " +
                                  gib(device_total) + "); lower --gpu-memory-limit");
  memory_.limit = options.memory_limit;
}

void Engine::check_memory_fits(uint64_t workspace) const {
  if (memory_.limit == 0) return;
  const uint64_t caches = memory_.target_cache + memory_.drafter_cache;
  const uint64_t need = memory_.weights + caches + workspace;
  if (need <= memory_.limit) return;
  std::string parts = "weights " + gib(memory_.weights) + " (target " + gib(memory_.target_weights) + ", drafter " +
                      gib(memory_.drafter_weights) + "), target cache " + gib(memory_.target_cache) +
                      ", drafter cache and slots " + gib(memory_.drafter_cache);
  if (workspace) parts += ", workspace " + gib(workspace);
  const bool weights_alone = memory_.weights > memory_.limit;
  const std::string change =
      weights_alone ? "the weights alone are over it: split the model over more GPUs (--world-size / --gpus), drop the "
                      "drafter, or raise the limit"
                    : "lower --max-tokens (tokens per slot: " + std::to_string(limits_.max_tokens) + ") or --max-slots (" +
                          std::to_string(limits_.slots) + ")" + (workspace ? " or --budget (" + std::to_string(limits_.max_budget) + ")" : "") +
                          ", or raise the limit";
  fail(KD_OUT_OF_MEMORY, "the engine needs " + gib(need) + " of GPU memory but may use " + gib(memory_.limit) + " (" +
                             parts + "): " + change);
}

Engine::~Engine() {
  round_.reset();  // graphs first: they reference the workspace
  if (stream_) {
    (void)cudaStreamSynchronize(stream_);
    (void)cudaStreamDestroy(stream_);
  }
  if (comm_stream_) {
    (void)cudaStreamSynchronize(comm_stream_);
    (void)cudaStreamDestroy(comm_stream_);
  }
}

kd_engine_options Engine::options() const {
  kd_engine_options o{};
  o.abi_version = KD_ENGINE_ABI;
  o.dtype = limits_.dtype == ModelDType::kF32 ? KD_F32 : KD_BF16;
  o.device = limits_.device;
  o.max_slots = limits_.slots;
  o.max_tokens = limits_.max_tokens;
  o.max_budget = limits_.max_budget;
  o.max_block_size = limits_.max_block;
  o.prefill_chunk = limits_.prefill_chunk;
  o.use_graphs = limits_.graphs;
  o.load_threads = limits_.load_threads;
  o.world_size = comm_->world();
  o.rank = comm_->rank();
  o.comm = comm_kind_;
  o.overlap_collectives = comm_stream_ ? 1 : 0;
  o.load_format = load_format_;
  o.dummy_seed = dummy_seed_;
  o.memory_limit = memory_limit_;
  return o;
}

void Engine::weight_info(int index, kd_weight_info* out) const {
  if (index < 0 || index >= static_cast<int>(weight_shapes_.size()))
    fail(KD_OVER_LIMIT, "weight " + std::to_string(index) + " outside 0.." + std::to_string(weight_shapes_.size() - 1));
  const WeightShape& w = weight_shapes_[static_cast<size_t>(index)];
  std::memset(out, 0, sizeof *out);
  std::snprintf(out->name, sizeof out->name, "%s", w.name.c_str());
  out->ndim = static_cast<int32_t>(w.shape.size());
  for (size_t i = 0; i < w.shape.size() && i < 4; ++i) out->shape[i] = w.shape[i];
  out->bytes = w.bytes;
}

void Engine::check_slot_range(int first, int count, const char* what) const {
  if (first < 0 || count < 1 || first + count > limits_.slots)
    fail(KD_OVER_LIMIT, std::string(what) + ": slots " + std::to_string(first) + ".." +
                            std::to_string(first + count - 1) + " outside the engine's 0.." +
                            std::to_string(limits_.slots - 1));
}

void Engine::check_tokens(const int32_t* tokens, int64_t n, const char* what) const {
  if (n > 0 && !tokens) fail(KD_INVALID_ARGUMENT, std::string(what) + ": tokens is null");
  for (int64_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= tdims_.vocab)
      fail(KD_INVALID_ARGUMENT, std::string(what) + ": token " + std::to_string(tokens[i]) + " at index " +
                                    std::to_string(i) + " is outside the vocabulary 0.." +
                                    std::to_string(tdims_.vocab - 1));
}

int32_t Engine::read_field(const int32_t* field, int slot) const { return read_fields(field, slot, 1)[0]; }

std::vector<int32_t> Engine::read_fields(const int32_t* field, int first, int count) const {
  std::vector<int32_t> v(count);
  KD_CUDA_CHECK(cudaMemcpyAsync(v.data(), field + first, count * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
  comm_->wait(stream_);
  return v;
}

void Engine::write_field(int32_t* field, int slot, int32_t value) const { slots_->set(field, slot, value, stream_); }

void Engine::slot_reset(int slot) {
  check_slot_range(slot, 1, "slot_reset");
  if (slot_owner_[slot] >= 0)
    fail(KD_BAD_STATE, "slot " + std::to_string(slot) + " runs request " + std::to_string(slot_owner_[slot]));
  const SlotState& s = slots_->device();
  for (int32_t* f : {s.cache_len, s.drafter_len, s.ctx_count, s.out_count, s.done, s.live}) write_field(f, slot, 0);
}

void Engine::slot_lengths(int slot, int32_t* target_len, int32_t* drafter_len) {
  check_slot_range(slot, 1, "slot_lengths");
  if (target_len) *target_len = read_field(slots_->device().cache_len, slot);
  if (drafter_len) *drafter_len = read_field(slots_->device().drafter_len, slot);
}

void Engine::upload_inputs(const int32_t* tokens, const int32_t* positions, int rows) {
  KD_CUDA_CHECK(cudaMemcpyAsync(io_tokens_, tokens, rows * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  KD_CUDA_CHECK(cudaMemcpyAsync(io_positions_, positions, rows * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  comm_->wait(stream_);  // the caller's arrays may go once we return
}

const uint32_t* Engine::causal_vis(int tokens) {
  if (causal_uploaded_ != tokens) {
    const int words = (tokens + 31) / 32;
    std::vector<uint32_t> vis(static_cast<size_t>(tokens) * words, 0u);
    for (int t = 0; t < tokens; ++t)
      for (int j = 0; j <= t; ++j) vis[static_cast<size_t>(t) * words + j / 32] |= 1u << (j % 32);
    KD_CUDA_CHECK(cudaMemcpyAsync(io_vis_, vis.data(), vis.size() * sizeof(uint32_t), cudaMemcpyHostToDevice, stream_));
    comm_->wait(stream_);
    causal_uploaded_ = tokens;
  }
  return io_vis_;
}

void Engine::ensure_host_io() {
  if (io_f32_.size() > 0) return;
  const size_t width = std::max<size_t>(target_->feature_width(), 1);
  const size_t rows = static_cast<size_t>(std::max(limits_.forward_rows(), drafter_ ? drafter_->max_context_rows() : 0));
  io_f32_ = DeviceBuffer(rows * width * sizeof(float), "float32 staging for hidden states");
}

void Engine::copy_features_to_host(int rows, float* hidden) {
  if (!hidden) return;
  if (!drafter_) fail(KD_INVALID_ARGUMENT, "hidden states: the engine has no drafter, so no target_layer_ids to return");
  ensure_host_io();
  CopyRowsParams c;
  c.in_dtype = limits_.dtype;
  c.out_dtype = ModelDType::kF32;
  c.rows = rows;
  c.cols = target_->feature_width();
  c.in = target_->features();
  c.in_stride = c.cols;
  c.out = io_f32_.data();
  c.out_stride = c.cols;
  check_kernel(copy_rows(c, stream_));
  KD_CUDA_CHECK(cudaMemcpyAsync(hidden, io_f32_.data(), static_cast<size_t>(rows) * c.cols * sizeof(float),
                                cudaMemcpyDeviceToHost, stream_));
  comm_->wait(stream_);
}

void Engine::prefill_chunks(int slot, const int32_t* tokens, int n, bool feed_drafter, float* hidden) {
  const int start = read_field(slots_->device().cache_len, slot);
  if (start + n > limits_.max_tokens)
    fail(KD_OVER_LIMIT, "prefill: the slot holds " + std::to_string(start) + " tokens; " + std::to_string(n) +
                            " more exceed the engine's max_tokens " + std::to_string(limits_.max_tokens));
  const bool drafter = feed_drafter && drafter_;
  for (int c0 = 0; c0 < n; c0 += limits_.prefill_chunk) {
    const int T = std::min(limits_.prefill_chunk, n - c0);
    std::vector<int32_t> pos(T);
    for (int i = 0; i < T; ++i) pos[i] = start + c0 + i;
    upload_inputs(tokens + c0, pos.data(), T);
    TargetBatch b;
    b.first_slot = slot;
    b.batch = 1;
    b.tokens = T;
    b.token_ids = io_tokens_;
    b.positions = io_positions_;
    b.vis = causal_vis(T);
    b.vis_words = (T + 31) / 32;
    b.max_prefix = start + c0;
    b.logits = c0 + T == n ? LogitRows::kLastPerSlot : LogitRows::kNone;
    b.features = drafter || hidden;
    target_->forward(b, *tcache_, slots_->device().cache_len, stream_);
    write_field(slots_->device().cache_len, slot, start + c0 + T);
    if (hidden) copy_features_to_host(T, hidden + static_cast<int64_t>(c0) * target_->feature_width());
    if (drafter) {
      write_field(slots_->device().ctx_count, slot, T);
      drafter_->extend(slot, 1, T, target_->features(), target_->feature_width(), *slots_, *dcache_, stream_);
    }
  }
}

void Engine::prefill(int slot, const int32_t* tokens, int n, float* last_logits, float* hidden) {
  check_slot_range(slot, 1, "prefill");
  if (slot_owner_[slot] >= 0) fail(KD_BAD_STATE, "prefill: slot " + std::to_string(slot) + " runs a request");
  if (n < 1) fail(KD_INVALID_ARGUMENT, "prefill: needs at least one token");
  check_tokens(tokens, n, "prefill");
  prefill_chunks(slot, tokens, n, /*feed_drafter=*/true, hidden);
  if (last_logits) {
    KD_CUDA_CHECK(cudaMemcpyAsync(last_logits, target_->logits(), tdims_.vocab * sizeof(float), cudaMemcpyDeviceToHost,
                                  stream_));
  }
  comm_->wait(stream_);
}

void Engine::forward(int first, int batch, int T, const int32_t* tokens, const int32_t* positions,
                     const uint32_t* vis, int vis_words, bool commit, float* logits, float* hidden) {
  check_slot_range(first, batch, "forward");
  for (int s = first; s < first + batch; ++s)
    if (slot_owner_[s] >= 0) fail(KD_BAD_STATE, "forward: slot " + std::to_string(s) + " runs a request");
  if (T < 1 || T > kVerifyMaxTreeLen)
    fail(KD_OVER_LIMIT, "forward: tokens_per_slot " + std::to_string(T) + " outside 1.." + std::to_string(kVerifyMaxTreeLen));
  const int rows = batch * T;
  if (rows > limits_.forward_rows())
    fail(KD_OVER_LIMIT, "forward: " + std::to_string(rows) + " rows, over the engine's " +
                            std::to_string(limits_.forward_rows()) + " (max_slots x (1 + max_budget), or prefill_chunk)");
  check_tokens(tokens, rows, "forward");
  if (!positions) fail(KD_INVALID_ARGUMENT, "forward: positions is null");
  for (int i = 0; i < rows; ++i)
    if (positions[i] < 0) fail(KD_INVALID_ARGUMENT, "forward: negative position at index " + std::to_string(i));
  const int words = (T + 31) / 32;
  if (vis && (vis_words < words || vis_words > io_vis_words_))
    fail(KD_INVALID_ARGUMENT, "forward: vis_words " + std::to_string(vis_words) + " outside " + std::to_string(words) +
                                  ".." + std::to_string(io_vis_words_));
  const std::vector<int32_t> lens = read_fields(slots_->device().cache_len, first, batch);
  int max_len = 0;
  for (int b = 0; b < batch; ++b) {
    if (lens[b] + T > tcache_->capacity() - 1 || (commit && lens[b] + T > limits_.max_tokens))
      fail(KD_OVER_LIMIT, "forward: slot " + std::to_string(first + b) + " holds " + std::to_string(lens[b]) +
                              " tokens; " + std::to_string(T) + " more exceed max_tokens " +
                              std::to_string(limits_.max_tokens));
    max_len = std::max(max_len, lens[b]);
  }
  upload_inputs(tokens, positions, rows);
  TargetBatch b;
  b.first_slot = first;
  b.batch = batch;
  b.tokens = T;
  b.token_ids = io_tokens_;
  b.positions = io_positions_;
  if (vis) {
    // repack to the mask's own word count (the kernels read ceil(T/32) words per row)
    std::vector<uint32_t> packed(static_cast<size_t>(rows) * words);
    for (int r = 0; r < rows; ++r)
      std::memcpy(&packed[static_cast<size_t>(r) * words], vis + static_cast<size_t>(r) * vis_words, words * 4);
    KD_CUDA_CHECK(cudaMemcpyAsync(io_vis_, packed.data(), packed.size() * 4, cudaMemcpyHostToDevice, stream_));
    comm_->wait(stream_);
    causal_uploaded_ = -1;
    b.vis = io_vis_;
  } else {
    // a causal mask per slot: the same [T, words] block repeated
    const int words_c = words;
    std::vector<uint32_t> one(static_cast<size_t>(T) * words_c, 0u);
    for (int t = 0; t < T; ++t)
      for (int j = 0; j <= t; ++j) one[static_cast<size_t>(t) * words_c + j / 32] |= 1u << (j % 32);
    std::vector<uint32_t> all;
    for (int s = 0; s < batch; ++s) all.insert(all.end(), one.begin(), one.end());
    KD_CUDA_CHECK(cudaMemcpyAsync(io_vis_, all.data(), all.size() * 4, cudaMemcpyHostToDevice, stream_));
    comm_->wait(stream_);
    causal_uploaded_ = batch == 1 ? T : -1;
    b.vis = io_vis_;
  }
  b.vis_words = words;
  b.max_prefix = max_len;
  b.logits = logits ? LogitRows::kAll : LogitRows::kNone;
  b.features = hidden != nullptr;
  target_->forward(b, *tcache_, slots_->device().cache_len, stream_);
  if (commit)
    for (int s = 0; s < batch; ++s) write_field(slots_->device().cache_len, first + s, lens[s] + T);
  if (logits)
    KD_CUDA_CHECK(cudaMemcpyAsync(logits, target_->logits(), static_cast<size_t>(rows) * tdims_.vocab * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream_));
  if (hidden) copy_features_to_host(rows, hidden);
  comm_->wait(stream_);
}

void Engine::keep(int slot, const int32_t* accepted, int count) {
  check_slot_range(slot, 1, "keep");
  if (slot_owner_[slot] >= 0) fail(KD_BAD_STATE, "keep: slot " + std::to_string(slot) + " runs a request");
  if (count < 1 || count > kAcceptMaxPath || !accepted)
    fail(KD_INVALID_ARGUMENT, "keep: count must be in 1.." + std::to_string(kAcceptMaxPath));
  if (accepted[0] != 0) fail(KD_INVALID_ARGUMENT, "keep: accepted[0] must be 0 (the root)");
  for (int j = 1; j < count; ++j)
    if (accepted[j] <= accepted[j - 1] || accepted[j] >= kVerifyMaxTreeLen)
      fail(KD_INVALID_ARGUMENT, "keep: accepted indices must increase and stay below " + std::to_string(kVerifyMaxTreeLen));
  const int len = read_field(slots_->device().cache_len, slot);
  if (len + accepted[count - 1] >= tcache_->capacity())
    fail(KD_INVALID_ARGUMENT, "keep: accepted index past the slot's uncommitted rows");
  KD_CUDA_CHECK(cudaMemcpyAsync(io_keep_, accepted, count * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  const int32_t c = count;
  KD_CUDA_CHECK(cudaMemcpyAsync(io_counts_, &c, sizeof c, cudaMemcpyHostToDevice, stream_));
  AcceptedPaths kept;
  kept.max_path = count;
  kept.accepted = io_keep_;
  kept.accept_len = io_counts_;
  check_kernel(cache_compact(make_cache_compact_params(1, tcache_->words(slot), slots_->device().cache_len + slot, kept), stream_));
  comm_->wait(stream_);
  write_field(slots_->device().cache_len, slot, len + count);
}

void Engine::draft(int first, int batch, const float* ctx_features, const int32_t* ctx_count, int max_ctx,
                   const int32_t* bonus, int block, float* logits) {
  if (!drafter_) fail(KD_BAD_STATE, "draft: the engine was created without a drafter");
  check_slot_range(first, batch, "draft");
  for (int s = first; s < first + batch; ++s)
    if (slot_owner_[s] >= 0) fail(KD_BAD_STATE, "draft: slot " + std::to_string(s) + " runs a request");
  if (block < 2 || block > limits_.max_block)
    fail(KD_OVER_LIMIT, "draft: block_size " + std::to_string(block) + " outside 2.." + std::to_string(limits_.max_block));
  if (!ctx_count || !bonus) fail(KD_INVALID_ARGUMENT, "draft: ctx_count and bonus must be given");
  check_tokens(bonus, batch, "draft (bonus)");
  if (max_ctx < 0 || static_cast<int64_t>(batch) * std::max(max_ctx, 1) > drafter_->max_context_rows())
    fail(KD_OVER_LIMIT, "draft: batch x max_ctx over the engine's " + std::to_string(drafter_->max_context_rows()) + " rows");
  const std::vector<int32_t> dlen = read_fields(slots_->device().drafter_len, first, batch);
  bool any = false;
  for (int b = 0; b < batch; ++b) {
    if (ctx_count[b] < 0 || ctx_count[b] > max_ctx) fail(KD_INVALID_ARGUMENT, "draft: ctx_count outside 0..max_ctx");
    if (dlen[b] + ctx_count[b] + block > tcache_->capacity())
      fail(KD_OVER_LIMIT, "draft: slot " + std::to_string(first + b) + "'s context would exceed the cache");
    any = any || ctx_count[b] > 0;
  }
  if (any) {
    if (!ctx_features) fail(KD_INVALID_ARGUMENT, "draft: ctx_features is null but ctx_count is not all 0");
    ensure_host_io();
    const int width = target_->feature_width();
    const size_t n = static_cast<size_t>(batch) * max_ctx * width;
    KD_CUDA_CHECK(cudaMemcpyAsync(io_f32_.data(), ctx_features, n * sizeof(float), cudaMemcpyHostToDevice, stream_));
    CopyRowsParams c;
    c.in_dtype = ModelDType::kF32;
    c.out_dtype = limits_.dtype;
    c.rows = batch * max_ctx;
    c.cols = width;
    c.in = io_f32_.data();
    c.in_stride = width;
    c.out = drafter_->stage_features();
    c.out_stride = width;
    check_kernel(copy_rows(c, stream_));
    KD_CUDA_CHECK(cudaMemcpyAsync(slots_->device().ctx_count + first, ctx_count, batch * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, stream_));
    drafter_->extend(first, batch, max_ctx, drafter_->stage_features(), width, *slots_, *dcache_, stream_);
  }
  KD_CUDA_CHECK(cudaMemcpyAsync(slots_->device().root_token + first, bonus, batch * sizeof(int32_t),
                                cudaMemcpyHostToDevice, stream_));
  drafter_->draft(first, batch, block, *slots_, *dcache_, stream_);
  KD_CUDA_CHECK(cudaMemcpyAsync(logits, drafter_->logits(),
                                static_cast<size_t>(batch) * (block - 1) * tdims_.vocab * sizeof(float),
                                cudaMemcpyDeviceToHost, stream_));
  comm_->wait(stream_);
}

}  // namespace kdtree::engine
