// The C API (kdtree_engine.h) over engine::Engine: every exception becomes a status and the
// engine's last-error text; a CUDA failure marks the engine broken.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include "engine/engine.h"
#include "engine/engine_error.h"
#include "kernels/sampling.cuh"

struct kd_engine {
  std::unique_ptr<kdtree::engine::Engine> impl;
  std::string last_error;
  bool broken = false;
};

namespace {

using kdtree::engine::EngineError;

kd_status record(kd_engine* e, kd_status status, const std::string& message) {
  if (e) {
    e->last_error = message;
    if (status == KD_CUDA_ERROR) e->broken = true;
  }
  return status;
}

// Runs `body` on a usable engine, mapping exceptions to statuses. with_turn: the call runs
// device work, so a part of a simulated group waits for its turn (collective.h).
template <bool with_turn = false, class F>
kd_status guarded(kd_engine* e, F&& body) {
  if (!e || !e->impl) return KD_INVALID_ARGUMENT;
  if (e->broken)
    return record(e, KD_BAD_STATE, "the engine stopped after a CUDA error (" + e->last_error + "); free it and create a new one");
  try {
    if constexpr (with_turn) {
      kdtree::engine::CollectiveTurn turn(e->impl->collective());
      body(*e->impl);
    } else {
      body(*e->impl);
    }
    e->last_error.clear();
    return KD_OK;
  } catch (const EngineError& err) {
    return record(e, err.status, err.what());
  } catch (const kdtree::CudaError& err) {
    return record(e, KD_CUDA_ERROR, err.what());
  } catch (const std::bad_alloc&) {
    return record(e, KD_OUT_OF_MEMORY, "out of host memory");
  } catch (const std::exception& err) {
    return record(e, KD_INTERNAL, err.what());
  }
}

void copy_error(char* dst, size_t len, const std::string& msg) {
  if (!dst || len == 0) return;
  std::snprintf(dst, len, "%s", msg.c_str());
}

}  // namespace

extern "C" {

int32_t kd_abi_version(void) { return KD_ENGINE_ABI; }

kd_status kd_device_memory(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes) {
  if (cudaSetDevice(device) != cudaSuccess) {
    (void)cudaGetLastError();
    return KD_CUDA_ERROR;
  }
  size_t f = 0, t = 0;
  if (cudaMemGetInfo(&f, &t) != cudaSuccess) {
    (void)cudaGetLastError();
    return KD_CUDA_ERROR;
  }
  if (free_bytes) *free_bytes = f;
  if (total_bytes) *total_bytes = t;
  return KD_OK;
}

kd_status kd_engine_create(const kd_target_config* target, const kd_drafter_config* drafter,
                           const kd_tensor_entry* tensors, int32_t n_tensors, const kd_engine_options* options,
                           kd_progress_fn progress, void* progress_user, kd_engine** out, char* error,
                           size_t error_len) {
  if (out) *out = nullptr;
  if (!target || !options || !out) {
    copy_error(error, error_len, "kd_engine_create: target, options and out must be given");
    return KD_INVALID_ARGUMENT;
  }
  kd_status status = KD_OK;
  std::string message;
  try {
    auto e = std::make_unique<kd_engine>();
    e->impl = std::make_unique<kdtree::engine::Engine>(*target, drafter, tensors, n_tensors, *options, progress,
                                                        progress_user);
    *out = e.release();
    return KD_OK;
  } catch (const EngineError& err) {
    status = err.status;
    message = err.what();
  } catch (const kdtree::CudaError& err) {
    status = KD_CUDA_ERROR;
    message = err.what();
  } catch (const std::bad_alloc&) {
    status = KD_OUT_OF_MEMORY;
    message = "out of host memory";
  } catch (const std::exception& err) {
    status = KD_INTERNAL;
    message = err.what();
  }
  copy_error(error, error_len, message);
  return status;
}

void kd_engine_free(kd_engine* engine) { delete engine; }

const char* kd_engine_last_error(const kd_engine* engine) { return engine ? engine->last_error.c_str() : "no engine"; }

kd_status kd_engine_memory(kd_engine* e, kd_memory_report* report) {
  return guarded(e, [&](auto& x) {
    if (!report) kdtree::engine::fail(KD_INVALID_ARGUMENT, "report is null");
    *report = x.memory();
  });
}

int32_t kd_engine_weight_count(kd_engine* e) { return e && e->impl ? e->impl->weight_count() : -1; }

kd_status kd_engine_weight_info(kd_engine* e, int32_t index, kd_weight_info* info) {
  return guarded(e, [&](auto& x) {
    if (!info) kdtree::engine::fail(KD_INVALID_ARGUMENT, "info is null");
    x.weight_info(index, info);
  });
}

kd_status kd_engine_options_get(kd_engine* e, kd_engine_options* options) {
  return guarded(e, [&](auto& x) {
    if (!options) kdtree::engine::fail(KD_INVALID_ARGUMENT, "options is null");
    *options = x.options();
  });
}

kd_status kd_slot_reset(kd_engine* e, int32_t slot) { return guarded<true>(e, [&](auto& x) { x.slot_reset(slot); }); }

kd_status kd_slot_lengths(kd_engine* e, int32_t slot, int32_t* target_len, int32_t* drafter_len) {
  return guarded(e, [&](auto& x) { x.slot_lengths(slot, target_len, drafter_len); });
}

kd_status kd_prefill(kd_engine* e, int32_t slot, const int32_t* tokens, int32_t n, float* last_logits, float* hidden) {
  return guarded<true>(e, [&](auto& x) { x.prefill(slot, tokens, n, last_logits, hidden); });
}

kd_status kd_forward(kd_engine* e, int32_t first_slot, int32_t batch, int32_t tokens_per_slot, const int32_t* tokens,
                     const int32_t* positions, const uint32_t* vis, int32_t vis_words, int32_t commit, float* logits,
                     float* hidden) {
  return guarded<true>(e, [&](auto& x) {
    x.forward(first_slot, batch, tokens_per_slot, tokens, positions, vis, vis_words, commit != 0, logits, hidden);
  });
}

kd_status kd_slot_keep(kd_engine* e, int32_t slot, const int32_t* accepted, int32_t count) {
  return guarded<true>(e, [&](auto& x) { x.keep(slot, accepted, count); });
}

kd_status kd_draft(kd_engine* e, int32_t first_slot, int32_t batch, const float* ctx_features, const int32_t* ctx_count,
                   int32_t max_ctx, const int32_t* bonus, int32_t block_size, float* logits) {
  return guarded<true>(e, [&](auto& x) {
    if (!logits) kdtree::engine::fail(KD_INVALID_ARGUMENT, "draft: logits is null");
    x.draft(first_slot, batch, ctx_features, ctx_count, max_ctx, bonus, block_size, logits);
  });
}

kd_status kd_submit(kd_engine* e, const kd_request* request, int64_t* id) {
  return guarded(e, [&](auto& x) {
    if (!request || !id) kdtree::engine::fail(KD_INVALID_ARGUMENT, "submit: request and id must be given");
    *id = x.submit(*request);
  });
}

kd_status kd_cancel(kd_engine* e, int64_t id) { return guarded<true>(e, [&](auto& x) { x.cancel(id); }); }

kd_status kd_step(kd_engine* e, int32_t want_tree, kd_step_report* report) {
  return guarded<true>(e, [&](auto& x) {
    if (!report) kdtree::engine::fail(KD_INVALID_ARGUMENT, "step: report is null");
    x.step(want_tree != 0, report);
  });
}

kd_status kd_request_get(kd_engine* e, int64_t id, kd_request_info* info, int32_t* tokens, int32_t capacity) {
  return guarded(e, [&](auto& x) { x.request_get(id, info, tokens, capacity); });
}

kd_status kd_release(kd_engine* e, int64_t id) { return guarded(e, [&](auto& x) { x.release(id); }); }

void kd_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
  kdtree::philox4x32_10_host(counter, key, out);
}

}  // extern "C"
