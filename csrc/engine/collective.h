// The collectives of a model split over several GPUs, behind one interface so the forward
// is written once: Solo (one GPU: nothing to do), Nccl (one process per GPU; NCCL's own
// transports carry the same calls across hosts) and Simulated (every part in one process on
// one GPU, run one after another and reduced in rank order: the check of the split against
// the whole model, on a GPU or the CPU emulator).
//
// Every rank makes the same collective calls in the same order with the same sizes; the
// results are identical on every rank, so replicated work after them (routing, tree build,
// accept) takes the same decisions everywhere without broadcasting them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "engine/kdtree_engine.h"
#include "kernels/model_dtype.cuh"

namespace kdtree::engine {

// Times every collective with a pair of CUDA events (as real event nodes inside a graph
// capture), so a round can report the collectives' share.
class CollectiveTimer {
 public:
  ~CollectiveTimer();
  void reset() { next_ = untimed_ = 0; }
  int count() const { return next_ + untimed_; }  // timed or not
  void start(cudaStream_t stream);
  void stop(cudaStream_t stream);
  void count_untimed() { ++untimed_; }  // a rank share's collective: counted, not run
  float elapsed_us(int count) const;  // after the stream has finished

 private:
  std::vector<cudaEvent_t> events_;  // start, stop per collective
  int next_ = 0;     // timed collectives since reset()
  int untimed_ = 0;  // counted ones since reset()
};

class Collective {
 public:
  virtual ~Collective() = default;
  int rank() const { return rank_; }
  int world() const { return world_; }
  bool split() const { return world_ > 1; }
  // false for one rank's share alone (KD_COMM_NONE, world > 1): its collectives do nothing
  virtual bool runs() const { return true; }
  // Graph capture of a round (a simulated group synchronises on the host: no capture).
  virtual bool capturable() const { return true; }

  // in place: buf = the sum over ranks of buf
  void all_reduce_sum(void* buf, size_t count, ModelDType dtype, cudaStream_t stream);
  // recv = [rank 0's send | rank 1's send | ...], `bytes` from each rank
  void all_gather(const void* send, void* recv, size_t bytes, cudaStream_t stream);
  // Waits for the stream, failing (never hanging) when a collective on it does not finish
  // within the timeout: a peer rank has stopped.
  virtual void wait(cudaStream_t stream);
  // Brackets one API call's device work (the simulated group runs one part at a time).
  virtual void enter() {}
  virtual void leave(bool failed) { (void)failed; }

  CollectiveTimer& timer() { return timer_; }

 protected:
  Collective(int rank, int world, double timeout_s) : rank_(rank), world_(world), timeout_s_(timeout_s) {}
  virtual void do_all_reduce(void* buf, size_t count, ModelDType dtype, cudaStream_t stream) = 0;
  virtual void do_all_gather(const void* send, void* recv, size_t bytes, cudaStream_t stream) = 0;
  int rank_, world_;
  double timeout_s_;
  CollectiveTimer timer_;
};

// The C API's options -> the collective of this engine (throws EngineError on bad options):
// Solo, Nccl, Simulated, or Share (one rank's part alone: collectives that do nothing).
std::unique_ptr<Collective> make_collective(const kd_engine_options& options, int device);

// Holds a Collective's turn for one API call (see Collective::enter).
class CollectiveTurn {
 public:
  explicit CollectiveTurn(Collective* c) : c_(c) {
    c_->enter();
    c_->timer().reset();  // the call's collectives take the timer's events from the first
  }
  ~CollectiveTurn() { c_->leave(std::uncaught_exceptions() > entry_exceptions_); }
  CollectiveTurn(const CollectiveTurn&) = delete;
  CollectiveTurn& operator=(const CollectiveTurn&) = delete;

 private:
  Collective* c_;
  int entry_exceptions_ = std::uncaught_exceptions();
};

// NCCL, loaded on first use (nccl_collective.cpp).
std::unique_ptr<Collective> make_nccl_collective(int rank, int world, const uint8_t* id, double timeout_s);
void nccl_unique_id(uint8_t* id);

}  // namespace kdtree::engine
