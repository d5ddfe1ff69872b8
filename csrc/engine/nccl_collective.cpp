// The NCCL collective: one process per GPU, one communicator per engine. NCCL is opened at
// run time (dlopen) so a one-GPU engine needs no NCCL at all; its header, found by
// `kdtree build` in the CUDA toolkit or the nvidia-nccl-cu13 wheel, gives the types.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/cuda_check.h"
#include "engine/collective.h"
#include "engine/engine_error.h"

#if defined(KD_HAVE_NCCL) && !defined(KD_SIMT_EMULATION)
#include <dlfcn.h>
#include <nccl.h>

#include <mutex>

static_assert(NCCL_UNIQUE_ID_BYTES == KD_NCCL_ID_BYTES, "the C API's id size is ncclUniqueId's");

namespace kdtree::engine {
namespace {

struct NcclApi {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) init_rank = nullptr;
  decltype(&ncclCommDestroy) destroy = nullptr;
  decltype(&ncclCommAbort) abort = nullptr;
  decltype(&ncclCommGetAsyncError) async_error = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
};

const NcclApi& nccl() {
  static NcclApi api;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string tried;
    void* lib = nullptr;
    auto attempt = [&](const char* path) {
      if (lib || !path || !*path) return;
      lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (!lib) tried += std::string("\n  ") + path + ": " + dlerror();
    };
    attempt(std::getenv("KDTREE_NCCL_LIBRARY"));
#ifdef KD_NCCL_LIBRARY_HINT
    attempt(KD_NCCL_LIBRARY_HINT);  // the library next to the header the build used
#endif
    attempt("libnccl.so.2");
    if (!lib) {
      error = "cannot load NCCL (install the nvidia-nccl-cu13 wheel, or set KDTREE_NCCL_LIBRARY):" + tried;
      return;
    }
    auto sym = [&](auto* fn, const char* name) {
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(lib, name));
      if (!*fn && error.empty()) error = std::string("NCCL library lacks ") + name;
    };
    sym(&api.get_unique_id, "ncclGetUniqueId");
    sym(&api.init_rank, "ncclCommInitRank");
    sym(&api.destroy, "ncclCommDestroy");
    sym(&api.abort, "ncclCommAbort");
    sym(&api.async_error, "ncclCommGetAsyncError");
    sym(&api.all_reduce, "ncclAllReduce");
    sym(&api.all_gather, "ncclAllGather");
    sym(&api.error_string, "ncclGetErrorString");
  });
  if (!error.empty()) fail(KD_INVALID_ARGUMENT, error);
  return api;
}

void check_nccl(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return;
  fail(KD_CUDA_ERROR, std::string(what) + ": " + nccl().error_string(r));
}

class NcclCollective final : public Collective {
 public:
  NcclCollective(int rank, int world, const uint8_t* id, double timeout_s) : Collective(rank, world, timeout_s) {
    ncclUniqueId uid;
    std::memcpy(uid.internal, id, sizeof uid.internal);
    check_nccl(nccl().init_rank(&comm_, world, uid, rank), "ncclCommInitRank (every rank must join with the same id)");
  }
  ~NcclCollective() override {
    if (!comm_) return;
    if (aborted_) return;
    (void)nccl().destroy(comm_);
  }

  void wait(cudaStream_t stream) override {
    try {
      Collective::wait(stream);
      ncclResult_t async = ncclSuccess;
      if (nccl().async_error(comm_, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress)
        fail(KD_CUDA_ERROR, std::string("NCCL: ") + nccl().error_string(async));
    } catch (...) {
      // a collective that cannot finish holds the GPU: abort the communicator to free it
      if (!aborted_) (void)nccl().abort(comm_);
      aborted_ = true;
      throw;
    }
  }

 protected:
  void do_all_reduce(void* buf, size_t count, ModelDType dtype, cudaStream_t stream) override {
    check_usable();
    check_nccl(nccl().all_reduce(buf, buf, count, nccl_type(dtype), ncclSum, comm_, stream), "ncclAllReduce");
  }
  void do_all_gather(const void* send, void* recv, size_t bytes, cudaStream_t stream) override {
    check_usable();
    check_nccl(nccl().all_gather(send, recv, bytes, ncclUint8, comm_, stream), "ncclAllGather");
  }

 private:
  static ncclDataType_t nccl_type(ModelDType t) { return t == ModelDType::kF32 ? ncclFloat32 : ncclBfloat16; }
  void check_usable() const {
    if (aborted_) fail(KD_BAD_STATE, "the NCCL communicator was aborted after a failed collective");
  }
  ncclComm_t comm_ = nullptr;
  bool aborted_ = false;
};

}  // namespace

std::unique_ptr<Collective> make_nccl_collective(int rank, int world, const uint8_t* id, double timeout_s) {
  return std::make_unique<NcclCollective>(rank, world, id, timeout_s);
}

void nccl_unique_id(uint8_t* id) {
  ncclUniqueId uid;
  check_nccl(nccl().get_unique_id(&uid), "ncclGetUniqueId");
  std::memcpy(id, uid.internal, sizeof uid.internal);
}

}  // namespace kdtree::engine

#else  // built without NCCL (no header found) or for the CPU emulator

namespace kdtree::engine {

[[noreturn]] static void no_nccl() {
#if defined(KD_SIMT_EMULATION)
  fail(KD_INVALID_ARGUMENT, "the emulated engine has no NCCL: use KD_COMM_SIMULATED to split a model on the CPU");
#else
  fail(KD_INVALID_ARGUMENT, "this engine was built without NCCL (no nccl.h found): pip install nvidia-nccl-cu13, "
                            "then `kdtree build` again");
#endif
}

std::unique_ptr<Collective> make_nccl_collective(int, int, const uint8_t*, double) { no_nccl(); }
void nccl_unique_id(uint8_t*) { no_nccl(); }

}  // namespace kdtree::engine

#endif

extern "C" kd_status kd_nccl_unique_id(uint8_t* id, char* error, size_t error_len) {
  try {
    if (!id) kdtree::engine::fail(KD_INVALID_ARGUMENT, "kd_nccl_unique_id: id is null");
    kdtree::engine::nccl_unique_id(id);
    return KD_OK;
  } catch (const kdtree::engine::EngineError& e) {
    if (error && error_len) std::snprintf(error, error_len, "%s", e.what());
    return e.status;
  } catch (const std::exception& e) {
    if (error && error_len) std::snprintf(error, error_len, "%s", e.what());
    return KD_INTERNAL;
  }
}
