// Round glue kernels (API: round_ops.cuh): one thread per slot or per row, no barriers.
#include "device_compat.cuh"
#include "model_dtype.cuh"
#include "round_ops.cuh"

namespace kdtree {
namespace kern {

constexpr int kSlotThreads = 64;

KD_DEVICE int thread_index() { return static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); }

KD_DEVICE bool decoding(const SlotState& s, int b) { return s.live[b] && !s.done[b]; }

// finish_tokens: append t unless max_new is reached; a stop token ends the request.
KD_DEVICE bool emit_token(const SlotState& s, int b, int t) {
  int count = s.out_count[b];
  if (count >= s.max_new[b] || count >= s.out_cap) {
    s.done[b] = 1;
    return false;
  }
  s.out_tokens[static_cast<int64_t>(b) * s.out_cap + count] = t;
  s.out_count[b] = ++count;
  for (int i = 0; i < s.n_stop[b]; ++i)
    if (s.stop_ids[b * kMaxStopIds + i] == t) {
      s.done[b] = 1;
      return false;
    }
  if (count >= s.max_new[b]) s.done[b] = 1;
  return true;
}

__global__ void round_begin_kernel(const SlotState s, int batch) {
  const int b = thread_index();
  if (b < batch) s.round_budget[b] = decoding(s, b) && !s.ar[b] ? s.budget[b] : -1;
}

__global__ void block_inputs_kernel(const BlockInputsParams p) {
  const int i = thread_index();
  if (i >= p.batch * p.block) return;
  const int b = i / p.block, j = i % p.block;
  p.tokens[i] = j == 0 ? p.state.root_token[b] : p.mask_token;
  p.positions[i] = p.start[b] + j;
  if (p.gather && j > 0) p.gather[b * (p.block - 1) + j - 1] = i;
}

__global__ void extend_rows_kernel(const ExtendRowsParams p) {
  const int i = thread_index();
  if (i >= p.batch * p.max_rows) return;
  const int b = i / p.max_rows, j = i % p.max_rows;
  const int pos = p.state.drafter_len[b] + j;
  p.positions[i] = pos;
  p.dest[i] = j < p.state.ctx_count[b] && pos < p.capacity ? b * p.capacity + pos : -1;
}

__global__ void extend_commit_kernel(const SlotState s, int batch) {
  const int b = thread_index();
  if (b >= batch) return;
  s.drafter_len[b] += s.ctx_count[b];
  s.ctx_count[b] = 0;
}

__global__ void verify_inputs_kernel(const VerifyInputsParams p) {
  const int i = thread_index();
  if (i >= p.batch * p.rows) return;
  const int b = i / p.rows, r = i % p.rows;
  if (r <= p.n[b]) return;  // a real node (or the root of a built tree)
  p.tokens[i] = p.state.root_token[b];
  p.positions[i] = p.state.cache_len[b];
  uint32_t* row = p.vis + static_cast<int64_t>(i) * p.vis_words;
  row[0] = 1u;  // sees the root only
  for (int w = 1; w < p.vis_words; ++w) row[w] = 0u;
}

__global__ void commit_tree_kernel(const CommitTreeParams p) {
  const int b = thread_index();
  if (b >= p.batch) return;
  const SlotState& s = p.state;
  RoundReport rep{0, 0, 0, s.out_count[b], s.done[b], 0};
  const int m = p.accept_len[b];
  int32_t* fi = p.feat_index + b * p.max_path;
  for (int j = 0; j < p.max_path; ++j) fi[j] = -1;
  if (m > 0 && decoding(s, b)) {
    const int32_t* acc = p.accepted + b * p.max_path;
    const int before = s.out_count[b];
    bool more = true;
    for (int j = 1; j < m && more; ++j) more = emit_token(s, b, p.tree_tokens[b * p.rows + acc[j]]);
    if (more) emit_token(s, b, p.bonus[b]);
    for (int j = 0; j < m; ++j) fi[j] = b * p.rows + acc[j];
    s.cache_len[b] += m;
    s.ctx_count[b] = m;
    s.root_token[b] = p.bonus[b];
    s.draw[b] += 1;
    int depth = 0;
    for (int r = 1; r <= p.n[b]; ++r) depth = max(depth, p.tree_depth[b * p.rows + r]);
    rep = RoundReport{m, p.n[b], depth, s.out_count[b], s.done[b], s.out_count[b] - before};
  }
  if (p.report) p.report[b] = rep;
}

__global__ void commit_ar_kernel(const CommitArParams p) {
  const int b = thread_index();
  if (b >= p.batch) return;
  const SlotState& s = p.state;
  RoundReport rep{0, 0, 0, s.out_count[b], s.done[b], 0};
  if (decoding(s, b) && (s.ar[b] || !p.advance)) {
    const int before = s.out_count[b];
    emit_token(s, b, p.choice[b]);
    s.cache_len[b] += p.advance;
    s.root_token[b] = p.choice[b];
    s.draw[b] += 1;
    rep = RoundReport{p.advance, 0, 0, s.out_count[b], s.done[b], s.out_count[b] - before};
  }
  if (p.report) p.report[b] = rep;
}

inline int slot_blocks(int n) { return ceil_div(n > 0 ? n : 1, kSlotThreads); }

}  // namespace kern

namespace {
KernelResult need(bool ok, const char* what) {
  return ok ? KernelResult::success() : KernelResult::invalid(std::string(what));
}
bool state_ok(const SlotState& s) {
  return s.cache_len && s.drafter_len && s.ctx_count && s.root_token && s.live && s.done && s.out_count &&
         s.out_tokens && s.out_cap > 0 && s.max_new && s.stop_ids && s.n_stop && s.budget && s.round_budget && s.ar &&
         s.draw;
}
}  // namespace

KernelResult round_begin(const SlotState& s, int batch, cudaStream_t stream) {
  if (KernelResult r = need(batch >= 0 && state_ok(s), "round_begin: bad batch or slot state"); !r.ok()) return r;
  if (batch == 0) return KernelResult::success();
  KD_LAUNCH_FLAT(kern::round_begin_kernel, kern::slot_blocks(batch), kern::kSlotThreads, 0, stream, s, batch);
  return launch_status("round_begin_kernel launch");
}

KernelResult draft_block_inputs(const BlockInputsParams& p, cudaStream_t stream) {
  if (KernelResult r = need(p.batch >= 0 && p.block >= 1 && state_ok(p.state) && p.start && p.tokens && p.positions,
                            "draft_block_inputs: bad sizes or null pointers");
      !r.ok())
    return r;
  if (p.batch == 0) return KernelResult::success();
  KD_LAUNCH_FLAT(kern::block_inputs_kernel, kern::slot_blocks(p.batch * p.block), kern::kSlotThreads, 0, stream, p);
  return launch_status("block_inputs_kernel launch");
}

KernelResult extend_rows(const ExtendRowsParams& p, cudaStream_t stream) {
  if (KernelResult r = need(p.batch >= 0 && p.max_rows >= 1 && p.capacity >= 1 && state_ok(p.state) &&
                                p.positions && p.dest,
                            "extend_rows: bad sizes or null pointers");
      !r.ok())
    return r;
  if (p.batch == 0) return KernelResult::success();
  KD_LAUNCH_FLAT(kern::extend_rows_kernel, kern::slot_blocks(p.batch * p.max_rows), kern::kSlotThreads, 0, stream, p);
  return launch_status("extend_rows_kernel launch");
}

KernelResult extend_commit(const SlotState& s, int batch, cudaStream_t stream) {
  if (KernelResult r = need(batch >= 0 && state_ok(s), "extend_commit: bad batch or slot state"); !r.ok()) return r;
  if (batch == 0) return KernelResult::success();
  KD_LAUNCH_FLAT(kern::extend_commit_kernel, kern::slot_blocks(batch), kern::kSlotThreads, 0, stream, s, batch);
  return launch_status("extend_commit_kernel launch");
}

KernelResult verify_inputs(const VerifyInputsParams& p, cudaStream_t stream) {
  if (KernelResult r = need(p.batch >= 0 && p.rows >= 1 && p.vis_words >= (p.rows + 31) / 32 && state_ok(p.state) &&
                                p.n && p.tokens && p.positions && p.vis,
                            "verify_inputs: bad sizes or null pointers");
      !r.ok())
    return r;
  if (p.batch == 0) return KernelResult::success();
  KD_LAUNCH_FLAT(kern::verify_inputs_kernel, kern::slot_blocks(p.batch * p.rows), kern::kSlotThreads, 0, stream, p);
  return launch_status("verify_inputs_kernel launch");
}

KernelResult commit_tree(const CommitTreeParams& p, cudaStream_t stream) {
  if (KernelResult r = need(p.batch >= 0 && p.rows >= 1 && p.max_path >= 1 && state_ok(p.state) && p.n &&
                                p.tree_tokens && p.tree_depth && p.accepted && p.accept_len && p.bonus && p.feat_index,
                            "commit_tree: bad sizes or null pointers");
      !r.ok())
    return r;
  if (p.batch == 0) return KernelResult::success();
  KD_LAUNCH_FLAT(kern::commit_tree_kernel, kern::slot_blocks(p.batch), kern::kSlotThreads, 0, stream, p);
  return launch_status("commit_tree_kernel launch");
}

KernelResult commit_ar(const CommitArParams& p, cudaStream_t stream) {
  if (KernelResult r = need(p.batch >= 0 && state_ok(p.state) && p.choice, "commit_ar: bad batch or null pointers");
      !r.ok())
    return r;
  if (p.batch == 0) return KernelResult::success();
  KD_LAUNCH_FLAT(kern::commit_ar_kernel, kern::slot_blocks(p.batch), kern::kSlotThreads, 0, stream, p);
  return launch_status("commit_ar_kernel launch");
}

}  // namespace kdtree
