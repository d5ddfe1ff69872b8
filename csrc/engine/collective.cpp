#include "engine/collective.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "common/cuda_check.h"
#include "engine/engine_error.h"
#include "kernels/elementwise.cuh"

// The C API's handle of a simulated group (kdtree_engine.h).
struct kd_sim_group {
  int world = 0;
  std::mutex mutex;
  std::condition_variable changed;
  int turn = 0;         // the part that may run now
  bool broken = false;  // a part failed: every waiting part fails too
  std::string why;
  // the buffers of the collective in progress, one per part
  const void* send[KD_MAX_WORLD] = {};
  void* recv[KD_MAX_WORLD] = {};
};

namespace kdtree::engine {
namespace {

constexpr double kDefaultTimeoutS = 300.0;  // a healthy collective takes microseconds to milliseconds
// How often a wait looks at the stream: short enough to add little to a round's latency.
constexpr auto kPollPeriod = std::chrono::microseconds(20);

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  KD_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status == cudaStreamCaptureStatusActive;
}

class SoloCollective final : public Collective {
 public:
  SoloCollective() : Collective(0, 1, 0.0) {}

 protected:
  void do_all_reduce(void*, size_t, ModelDType, cudaStream_t) override {}
  void do_all_gather(const void* send, void* recv, size_t bytes, cudaStream_t stream) override {
    if (send != recv) KD_CUDA_CHECK(cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, stream));
  }
};

// One rank's share of a split model, alone on its GPU: every collective does nothing, so the
// rank computes exactly its part of a round (the sizes and the work of each of `world`
// GPUs) with no peers. An all-gather leaves the other ranks' parts zero: outputs mean nothing.
class ShareCollective final : public Collective {
 public:
  ShareCollective(int rank, int world) : Collective(rank, world, 0.0) {}
  bool runs() const override { return false; }
  void wait(cudaStream_t stream) override { KD_CUDA_CHECK(cudaStreamSynchronize(stream)); }

 protected:
  void do_all_reduce(void*, size_t, ModelDType, cudaStream_t) override {}
  void do_all_gather(const void* send, void* recv, size_t bytes, cudaStream_t stream) override {
    char* base = static_cast<char*>(recv);
    char* own = base + static_cast<size_t>(rank_) * bytes;
    char* after = own + bytes;
    if (rank_ > 0) KD_CUDA_CHECK(cudaMemsetAsync(base, 0, static_cast<size_t>(own - base), stream));
    if (rank_ + 1 < world_) KD_CUDA_CHECK(cudaMemsetAsync(after, 0, bytes * static_cast<size_t>(world_ - rank_ - 1), stream));
    if (send != own) KD_CUDA_CHECK(cudaMemcpyAsync(own, send, bytes, cudaMemcpyDeviceToDevice, stream));
  }
};

// Parts take turns in rank order between collectives: part r runs until its next
// collective, leaves its buffers and passes the turn to r + 1; the last part combines every
// part's buffers (in rank order) and passes the turn back to part 0. One thread per part.
class SimulatedCollective final : public Collective {
 public:
  SimulatedCollective(int rank, kd_sim_group* group, double timeout_s)
      : Collective(rank, group->world, timeout_s), g_(group) {}
  bool capturable() const override { return false; }

  void enter() override {
    std::unique_lock<std::mutex> lock(g_->mutex);
    wait_turn(lock);
  }

  void leave(bool failed) override {
    std::lock_guard<std::mutex> lock(g_->mutex);
    if (failed && !g_->broken) {
      g_->broken = true;
      g_->why = "part " + std::to_string(rank_) + " failed";
    }
    pass_turn();
  }

 protected:
  void do_all_reduce(void* buf, size_t count, ModelDType dtype, cudaStream_t stream) override {
    meet(buf, buf, [&] {
      SumRanksParams p;
      p.dtype = dtype;
      p.count = static_cast<int64_t>(count);
      p.ranks = world_;
      for (int r = 0; r < world_; ++r) {
        p.src[r] = g_->send[r];
        p.dst[r] = g_->recv[r];
      }
      check_kernel(sum_ranks(p, stream));
    }, stream);
  }

  void do_all_gather(const void* send, void* recv, size_t bytes, cudaStream_t stream) override {
    meet(send, recv, [&] {
      for (int to = 0; to < world_; ++to)
        for (int from = 0; from < world_; ++from)
          KD_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(g_->recv[to]) + from * bytes, g_->send[from], bytes,
                                        cudaMemcpyDeviceToDevice, stream));
    }, stream);
  }

 private:
  template <class Combine>
  void meet(const void* send, void* recv, Combine&& combine, cudaStream_t stream) {
    KD_CUDA_CHECK(cudaStreamSynchronize(stream));  // this part's buffer is complete
    std::unique_lock<std::mutex> lock(g_->mutex);
    g_->send[rank_] = send;
    g_->recv[rank_] = recv;
    if (rank_ == world_ - 1) {  // every part has left its buffers: combine them for all
      combine();
      KD_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    pass_turn();
    wait_turn(lock);
  }

  void pass_turn() {
    g_->turn = (rank_ + 1) % world_;
    g_->changed.notify_all();
  }

  void wait_turn(std::unique_lock<std::mutex>& lock) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
    while (!g_->broken && g_->turn != rank_)
      if (g_->changed.wait_until(lock, deadline) == std::cv_status::timeout && g_->turn != rank_)
        fail(KD_CUDA_ERROR, "simulated part " + std::to_string(rank_) + ": the other parts did not reach the "
                            "same call within " + std::to_string(static_cast<int>(timeout_s_)) +
                            " s (every part must make the same calls, each from its own thread)");
    if (g_->broken) fail(KD_CUDA_ERROR, "simulated group stopped: " + g_->why);
  }

  kd_sim_group* g_;
};

}  // namespace

CollectiveTimer::~CollectiveTimer() {
  for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
}

void CollectiveTimer::start(cudaStream_t stream) {
  while (static_cast<int>(events_.size()) < 2 * (next_ + 1)) {
    cudaEvent_t e = nullptr;
    KD_CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
  cudaEvent_t e = events_[2 * next_];
  // inside a capture an ordinary record is only an ordering edge; External makes it a node
  if (capturing(stream)) KD_CUDA_CHECK(cudaEventRecordWithFlags(e, stream, cudaEventRecordExternal));
  else KD_CUDA_CHECK(cudaEventRecord(e, stream));
}

void CollectiveTimer::stop(cudaStream_t stream) {
  cudaEvent_t e = events_[2 * next_ + 1];
  if (capturing(stream)) KD_CUDA_CHECK(cudaEventRecordWithFlags(e, stream, cudaEventRecordExternal));
  else KD_CUDA_CHECK(cudaEventRecord(e, stream));
  ++next_;
}

float CollectiveTimer::elapsed_us(int count) const {
  float total = 0.0f;
  for (int i = 0; i < count && 2 * i + 1 < static_cast<int>(events_.size()); ++i) {
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, events_[2 * i], events_[2 * i + 1]) == cudaSuccess) total += ms * 1000.0f;
    else (void)cudaGetLastError();  // timing is best effort
  }
  return total;
}

void Collective::all_reduce_sum(void* buf, size_t count, ModelDType dtype, cudaStream_t stream) {
  if (!split()) return;
  if (!runs()) return timer_.count_untimed();
  timer_.start(stream);
  do_all_reduce(buf, count, dtype, stream);
  timer_.stop(stream);
}

void Collective::all_gather(const void* send, void* recv, size_t bytes, cudaStream_t stream) {
  const bool timed = split() && runs();
  if (split() && !runs()) timer_.count_untimed();
  if (timed) timer_.start(stream);
  do_all_gather(send, recv, bytes, stream);
  if (timed) timer_.stop(stream);
}

void Collective::wait(cudaStream_t stream) {
  if (!split()) {
    KD_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  // poll rather than block: a collective whose peer has died never completes
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
  for (;;) {
    const cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) KD_CUDA_CHECK(e);
    if (std::chrono::steady_clock::now() > deadline)
      fail(KD_CUDA_ERROR, "rank " + std::to_string(rank_) + " of " + std::to_string(world_) +
                              ": a collective did not finish within " + std::to_string(static_cast<int>(timeout_s_)) +
                              " s: another rank has stopped or hangs; this run cannot continue");
    std::this_thread::sleep_for(kPollPeriod);
  }
}

std::unique_ptr<Collective> make_collective(const kd_engine_options& o, int device) {
  (void)device;
  const int world = o.world_size > 0 ? o.world_size : 1;
  const double timeout = o.collective_timeout_s > 0 ? o.collective_timeout_s : kDefaultTimeoutS;
  if (world > KD_MAX_WORLD)
    fail(KD_INVALID_ARGUMENT, "engine options: world_size " + std::to_string(world) + " over " +
                                  std::to_string(KD_MAX_WORLD));
  if (o.rank < 0 || o.rank >= world)
    fail(KD_INVALID_ARGUMENT, "engine options: rank " + std::to_string(o.rank) + " outside 0.." + std::to_string(world - 1));
  if (world == 1) {
    if (o.comm == KD_COMM_SIMULATED && o.sim_group && o.sim_group->world != 1)
      fail(KD_INVALID_ARGUMENT, "engine options: a simulated group of " + std::to_string(o.sim_group->world) +
                                    " parts needs world_size " + std::to_string(o.sim_group->world));
    return std::make_unique<SoloCollective>();
  }
  switch (o.comm) {
    case KD_COMM_NONE: return std::make_unique<ShareCollective>(o.rank, world);
    case KD_COMM_NCCL: return make_nccl_collective(o.rank, world, o.nccl_id, timeout);
    case KD_COMM_SIMULATED:
      if (!o.sim_group) fail(KD_INVALID_ARGUMENT, "engine options: KD_COMM_SIMULATED needs sim_group");
      if (o.sim_group->world != world)
        fail(KD_INVALID_ARGUMENT, "engine options: world_size " + std::to_string(world) + " but the simulated group has " +
                                      std::to_string(o.sim_group->world) + " parts");
      return std::make_unique<SimulatedCollective>(o.rank, o.sim_group, timeout);
    default:
      fail(KD_INVALID_ARGUMENT, "engine options: world_size " + std::to_string(world) +
                                    " needs comm KD_COMM_NONE (one rank's share), KD_COMM_NCCL or KD_COMM_SIMULATED");
  }
}

}  // namespace kdtree::engine

extern "C" {

kd_status kd_sim_group_create(int32_t world_size, kd_sim_group** out, char* error, size_t error_len) {
  if (out) *out = nullptr;
  if (!out || world_size < 1 || world_size > KD_MAX_WORLD) {
    if (error && error_len)
      std::snprintf(error, error_len, "kd_sim_group_create: world_size %d outside 1..%d (or out is null)", world_size,
                    KD_MAX_WORLD);
    return KD_INVALID_ARGUMENT;
  }
  auto* g = new (std::nothrow) kd_sim_group;
  if (!g) return KD_OUT_OF_MEMORY;
  g->world = world_size;
  *out = g;
  return KD_OK;
}

void kd_sim_group_free(kd_sim_group* group) { delete group; }

}  // extern "C"
