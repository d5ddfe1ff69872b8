#include "engine/workspace.h"

#include "common/cuda_check.h"

namespace kdtree::engine {

void Workspace::allocate(cudaStream_t stream) {
  memory_ = DeviceBuffer(layout_.total(), "the activation workspace");
  for (const Entry& e : entries_) {
    *e.slot = memory_.bytes_ptr(e.offset);
    if (e.zeroed) KD_CUDA_CHECK(cudaMemsetAsync(*e.slot, 0, e.bytes, stream));
  }
}

}  // namespace kdtree::engine
