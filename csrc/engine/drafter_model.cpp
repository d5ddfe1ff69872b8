#include "engine/drafter_model.h"

#include <algorithm>
#include <cmath>

#include "common/cuda_check.h"
#include "engine/engine_error.h"
#include "kernels/drafter_attn.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/norm.cuh"
#include "kernels/rope.cuh"
#include "kernels/round_ops.cuh"

namespace kdtree::engine {
namespace {

Matrix mat(const void* p, int64_t ld, ModelDType t) { return Matrix{p, ld, t}; }
MatrixOut out(void* p, int64_t ld, ModelDType t) { return MatrixOut{p, ld, t}; }

}  // namespace

DrafterModel::DrafterModel(const DrafterDims& dims, const TargetDims& target, const EngineLimits& limits,
                           const DeviceWeights& w, const void* embedding, VocabHead* head, Gemm* gemm)
    : dims_(dims), vocab_(target.vocab), limits_(limits), gemm_(gemm), dt_(limits.dtype), embed_(embedding),
      head_(head) {
  fc_ = w.get("drafter.fc.weight");
  hidden_norm_ = w.get("drafter.hidden_norm.weight");
  norm_ = w.get("drafter.norm.weight");
  for (int i = 0; i < dims.layers; ++i) {
    const std::string p = "drafter.layers." + std::to_string(i) + ".";
    Layer L;
    L.input_norm = w.get(p + "input_layernorm.weight");
    L.post_norm = w.get(p + "post_attention_layernorm.weight");
    L.q = w.get(p + "self_attn.q_proj.weight");
    L.k = w.get(p + "self_attn.k_proj.weight");
    L.v = w.get(p + "self_attn.v_proj.weight");
    L.o = w.get(p + "self_attn.o_proj.weight");
    L.q_norm = w.get(p + "self_attn.q_norm.weight");
    L.k_norm = w.get(p + "self_attn.k_norm.weight");
    L.gate = w.get(p + "mlp.gate_proj.weight");
    L.up = w.get(p + "mlp.up_proj.weight");
    L.down = w.get(p + "mlp.down_proj.weight");
    layers_.push_back(L);
  }
  inv_freq_host_ = dims.rope_inv_freq;
}

int DrafterModel::max_draft_rows() const { return std::max(limits_.slots * (limits_.max_block - 1), 1); }

int DrafterModel::max_context_rows() const {
  return std::max(limits_.slots * limits_.max_path(), limits_.prefill_chunk);
}

// The attention's launch for a draft call's sizes (pointers set by draft).
DrafterAttnParams DrafterModel::attention_params(int batch, int block) const {
  DrafterAttnParams a;
  a.dtype = dt_;
  a.batch = batch;
  a.q_len = block;
  a.heads = dims_.heads;
  a.kv_heads = dims_.kv_heads;
  a.head_dim = dims_.head_dim;
  a.max_ctx = limits_.cache_capacity();
  a.scale = 1.0f / std::sqrt(static_cast<float>(dims_.head_dim));
  return a;
}

size_t DrafterModel::attention_workspace_bytes() const {
  size_t most = 0;
  for (int batch = 1; batch <= limits_.slots; ++batch)
    for (int block = 1; block <= limits_.max_block; ++block) {
      DrafterAttnPlan plan;
      if (KernelResult r = drafter_attn_plan(attention_params(batch, block), &plan); !r.ok())
        fail(KD_INVALID_ARGUMENT, "the drafter's attention cannot run here: " + r.message);
      most = std::max(most, plan.workspace_bytes);
    }
  return most;
}

void DrafterModel::declare(Workspace* ws) {
  const size_t el = static_cast<size_t>(model_dtype_bytes(dt_));
  const size_t H = dims_.hidden, kvw = static_cast<size_t>(dims_.kv_heads) * dims_.head_dim;
  const size_t qw = static_cast<size_t>(dims_.heads) * dims_.head_dim;
  const size_t Ne = static_cast<size_t>(max_context_rows());
  const size_t Nb = static_cast<size_t>(limits_.slots) * limits_.max_block;
  const size_t Nd = static_cast<size_t>(limits_.slots) * (limits_.max_block - 1);
  ws->declare(&ext_feat_, Ne * dims_.features() * el);
  ws->declare(&ext_c_, Ne * H * el);
  ws->declare(&ext_kv_, Ne * 2 * kvw * el);
  ws->declare(&ext_pos_, Ne * sizeof(int32_t));
  ws->declare(&ext_dest_, Ne * sizeof(int32_t));
  ws->declare(&blk_tokens_, Nb * sizeof(int32_t));
  ws->declare(&blk_pos_, Nb * sizeof(int32_t));
  ws->declare(&gather_, std::max<size_t>(Nd, 1) * sizeof(int32_t));
  ws->declare(&x_, Nb * H * el);
  ws->declare(&h_, Nb * H * el);
  ws->declare(&qkv_, Nb * (qw + 2 * kvw) * el);
  ws->declare(&attn_, Nb * qw * el);
  ws->declare(&o_, Nb * H * el);
  ws->declare(&gate_up_, Nb * 2 * dims_.inter * el);
  ws->declare(&act_, Nb * dims_.inter * el);
  ws->declare(&hs_, std::max<size_t>(Nd, 1) * H * el);
  ws->declare(&logits_, std::max<size_t>(Nd, 1) * vocab_ * sizeof(float));
  ws->declare(&inv_freq_, inv_freq_host_.size() * sizeof(float));
  attn_workspace_bytes_ = attention_workspace_bytes();
  ws->declare(&attn_workspace_, std::max<size_t>(attn_workspace_bytes_, 1));
}

void DrafterModel::upload_constants(cudaStream_t stream) {
  KD_CUDA_CHECK(cudaMemcpyAsync(inv_freq_, inv_freq_host_.data(), inv_freq_host_.size() * sizeof(float),
                                cudaMemcpyHostToDevice, stream));
  KD_CUDA_CHECK(cudaStreamSynchronize(stream));
}

// K (normalised per head, rotated) of rows of [.. | k | v ..] laid out `stride` apart, in place.
void DrafterModel::norm_rope_heads(void* x, int64_t stride, int rows, int heads, const void* norm_weight,
                                   const int32_t* positions, cudaStream_t stream) {
  const int64_t hd = dims_.head_dim;
  RmsNormParams n;
  n.dtype = dt_;
  n.rows = rows;
  n.heads = heads;
  n.dim = dims_.head_dim;
  n.x = n.out = x;
  n.x_stride = n.out_stride = stride;
  n.x_head_stride = n.out_head_stride = hd;
  n.weight = norm_weight;
  n.eps = dims_.eps;
  check_kernel(rms_norm(n, stream));
  RopeParams r;
  r.dtype = dt_;
  r.tokens = rows;
  r.heads = heads;
  r.dim = dims_.head_dim;
  r.x = r.out = x;
  r.x_token_stride = r.out_token_stride = stride;
  r.x_head_stride = r.out_head_stride = hd;
  r.positions = positions;
  r.inv_freq = inv_freq_;
  r.attention_factor = dims_.rope_factor;
  r.interleave = false;
  check_kernel(rope(r, stream));
}

void DrafterModel::extend(int first_slot, int batch, int max_rows, const void* features, int64_t feat_stride,
                          const SlotTable& slots, const DrafterCache& cache, cudaStream_t stream) {
  const int rows = batch * max_rows;
  if (rows <= 0) return;
  if (rows > max_context_rows()) fail(KD_INTERNAL, "drafter context extension over its workspace");
  const SlotState state = slots.at(first_slot);
  ExtendRowsParams er;
  er.batch = batch;
  er.max_rows = max_rows;
  er.capacity = cache.capacity();
  er.state = state;
  er.positions = ext_pos_;
  er.dest = ext_dest_;
  check_kernel(extend_rows(er, stream));
  const int64_t H = dims_.hidden, kvw = static_cast<int64_t>(dims_.kv_heads) * dims_.head_dim;
  gemm_->linear(rows, dims_.hidden, dims_.features(), mat(features, feat_stride, dt_), mat(fc_, dims_.features(), dt_),
                out(ext_c_, H, dt_));
  RmsNormParams n;
  n.dtype = dt_;
  n.rows = rows;
  n.dim = dims_.hidden;
  n.x = n.out = ext_c_;
  n.x_stride = n.out_stride = H;
  n.weight = hidden_norm_;
  n.eps = dims_.eps;
  check_kernel(rms_norm(n, stream));
  for (int l = 0; l < dims_.layers; ++l) {
    // [k | v] of the context rows in one GEMM (k_proj and v_proj are adjacent rows of one matrix)
    gemm_->linear(rows, static_cast<int>(2 * kvw), dims_.hidden, mat(ext_c_, H, dt_), mat(layers_[l].k, H, dt_),
                  out(ext_kv_, 2 * kvw, dt_));
    norm_rope_heads(ext_kv_, 2 * kvw, rows, dims_.kv_heads, layers_[l].k_norm, ext_pos_, stream);
    for (int which = 0; which < 2; ++which) {
      CopyRowsParams c;
      c.in_dtype = c.out_dtype = dt_;
      c.rows = rows;
      c.cols = static_cast<int>(kvw);
      c.in = static_cast<char*>(ext_kv_) + which * kvw * model_dtype_bytes(dt_);
      c.in_stride = 2 * kvw;
      c.out_index = ext_dest_;
      c.out = which == 0 ? cache.keys(l, first_slot) : cache.values(l, first_slot);
      c.out_stride = kvw;
      check_kernel(copy_rows(c, stream));
    }
  }
  check_kernel(extend_commit(state, batch, stream));
}

void DrafterModel::draft(int first_slot, int batch, int block, const SlotTable& slots, const DrafterCache& cache,
                         cudaStream_t stream, bool part) {
  const int rows = batch * block;
  if (rows <= 0) return;
  if (block > limits_.max_block || batch > limits_.slots) fail(KD_INTERNAL, "drafter block over its workspace");
  const SlotState state = slots.at(first_slot);
  BlockInputsParams bi;
  bi.batch = batch;
  bi.block = block;
  bi.mask_token = dims_.mask_token;
  bi.state = state;
  bi.start = state.drafter_len;
  bi.tokens = blk_tokens_;
  bi.positions = blk_pos_;
  bi.gather = gather_;
  check_kernel(draft_block_inputs(bi, stream));
  const int64_t H = dims_.hidden, hd = dims_.head_dim;
  const int64_t qw = dims_.heads * hd, kvw = dims_.kv_heads * hd;
  EmbedParams e;
  e.dtype = dt_;
  e.rows = rows;
  e.dim = dims_.hidden;
  e.vocab = vocab_;
  e.ids = blk_tokens_;
  e.table = embed_;
  e.scale = dims_.embed_scale;
  e.out = x_;
  e.out_stride = H;
  check_kernel(embed(e, stream));
  RmsNormParams n;
  n.dtype = dt_;
  n.rows = rows;
  n.dim = dims_.hidden;
  n.x = x_;
  n.x_stride = H;
  n.out = h_;
  n.out_stride = H;
  n.eps = dims_.eps;
  AddParams add;
  add.dtype = dt_;
  add.rows = rows;
  add.dim = dims_.hidden;
  add.x = x_;
  add.x_stride = H;
  add.y = o_;
  add.y_stride = H;
  for (int l = 0; l < dims_.layers; ++l) {
    const Layer& w = layers_[l];
    n.weight = w.input_norm;
    check_kernel(rms_norm(n, stream));
    // [q | k | v] of the block in one GEMM; q and k normalised per head and rotated in place
    const int64_t qkv = qw + 2 * kvw;
    gemm_->linear(rows, static_cast<int>(qkv), dims_.hidden, mat(h_, H, dt_), mat(w.q, H, dt_), out(qkv_, qkv, dt_));
    norm_rope_heads(qkv_, qkv, rows, dims_.heads, w.q_norm, blk_pos_, stream);
    void* k = static_cast<char*>(qkv_) + qw * model_dtype_bytes(dt_);
    void* v = static_cast<char*>(qkv_) + (qw + kvw) * model_dtype_bytes(dt_);
    norm_rope_heads(k, qkv, rows, dims_.kv_heads, w.k_norm, blk_pos_, stream);
    DrafterAttnParams a = attention_params(batch, block);
    a.q = qkv_;
    a.q_stride = qkv;
    a.ctx_k = cache.keys(l, first_slot);
    a.ctx_v = cache.values(l, first_slot);
    a.ctx_batch_stride = cache.slot_stride();
    a.ctx_len = state.drafter_len;
    a.blk_k = k;
    a.blk_v = v;
    a.blk_stride = qkv;
    a.out = attn_;
    a.workspace = attn_workspace_;
    a.workspace_bytes = attn_workspace_bytes_;
    check_kernel(drafter_attn(a, stream));
    gemm_->linear(rows, dims_.hidden, static_cast<int>(qw), mat(attn_, qw, dt_), mat(w.o, qw, dt_), out(o_, H, dt_));
    check_kernel(add_inplace(add, stream));
    n.weight = w.post_norm;
    check_kernel(rms_norm(n, stream));
    const int I = dims_.inter;
    gemm_->linear(rows, 2 * I, dims_.hidden, mat(h_, H, dt_), mat(w.gate, H, dt_), out(gate_up_, 2 * I, dt_));
    SiluMulParams s;
    s.dtype = dt_;
    s.rows = rows;
    s.dim = I;
    s.gate = gate_up_;
    s.gate_stride = 2 * I;
    s.up = static_cast<char*>(gate_up_) + I * model_dtype_bytes(dt_);
    s.up_stride = 2 * I;
    s.out = act_;
    s.out_stride = I;
    check_kernel(silu_mul(s, stream));
    gemm_->linear(rows, dims_.hidden, dims_.inter, mat(act_, dims_.inter, dt_), mat(w.down, dims_.inter, dt_),
                  out(o_, H, dt_));
    check_kernel(add_inplace(add, stream));
  }
  const int drafts = batch * (block - 1);
  CopyRowsParams c;
  c.in_dtype = c.out_dtype = dt_;
  c.rows = drafts;
  c.cols = dims_.hidden;
  c.in = x_;
  c.in_stride = H;
  c.index = gather_;
  c.out = hs_;
  c.out_stride = H;
  check_kernel(copy_rows(c, stream));
  RmsNormParams fn;
  fn.dtype = dt_;
  fn.rows = drafts;
  fn.dim = dims_.hidden;
  fn.x = fn.out = hs_;
  fn.x_stride = fn.out_stride = H;
  fn.weight = norm_;
  fn.eps = dims_.eps;
  check_kernel(rms_norm(fn, stream));
  LogitsTransformParams lt;
  lt.rows = drafts;
  if (part) {  // elementwise: the transform applies to a slice as to the whole row
    head_->project_part(drafts, hs_, H, stream);
    lt.logits = head_->part();
    lt.cols = lt.stride = head_->part_vocab();
  } else {
    head_->project(drafts, hs_, H, logits_, stream);
    lt.logits = logits_;
    lt.cols = lt.stride = vocab_;
  }
  lt.multiplier = dims_.output_multiplier;
  lt.softcap = dims_.softcap;
  check_kernel(logits_transform(lt, stream));
}

}  // namespace kdtree::engine
