#include "engine/target_model.h"

#include <algorithm>

#include "common/cuda_check.h"
#include "engine/engine_error.h"
#include "kernels/elementwise.cuh"
#include "kernels/mla_cache.cuh"
#include "kernels/moe_gemm.cuh"
#include "kernels/moe_gemm_w4a16.cuh"
#include "kernels/moe_route.cuh"
#include "kernels/norm.cuh"
#include "kernels/rope.cuh"
#include "kernels/verify_attn.cuh"

namespace kdtree::engine {
namespace {

AttnDType attn_type(ModelDType t) { return t == ModelDType::kF32 ? AttnDType::kF32 : AttnDType::kBF16; }

// A row-major operand in the compute dtype.
Matrix mat(const void* p, int64_t ld, ModelDType t) { return Matrix{p, ld, t}; }
MatrixOut out(void* p, int64_t ld, ModelDType t) { return MatrixOut{p, ld, t}; }

void* at(void* base, int64_t elements, ModelDType t) {
  return static_cast<char*>(base) + elements * model_dtype_bytes(t);
}
const void* at(const void* base, int64_t elements, ModelDType t) {
  return static_cast<const char*>(base) + elements * model_dtype_bytes(t);
}

}  // namespace

TargetModel::TargetModel(const TargetDims& dims, const EngineLimits& limits, const std::vector<int>& feature_layers,
                         const DeviceWeights& w, Gemm* gemm, Collective* comm)
    : dims_(dims), limits_(limits), feature_layers_(feature_layers), gemm_(gemm), comm_(comm), dt_(limits.dtype) {
  embed_ = w.get("model.embed_tokens.weight");
  norm_ = w.get("model.norm.weight");
  // this rank's lm_head rows (tied: a view of the replicated embedding)
  lm_head_ = dims.tie_embeddings ? at(embed_, static_cast<int64_t>(dims.vocab_begin()) * dims.hidden, dt_)
                                 : w.get("lm_head.weight");
  for (int i = 0; i < dims.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const std::string a = p + "self_attn.", m = p + "mlp.";
    Layer L{};
    L.input_norm = w.get(p + "input_layernorm.weight");
    L.post_norm = w.get(p + "post_attention_layernorm.weight");
    if (dims.q_lora == 0) {
      L.q_proj = w.get(a + "q_proj.weight");
    } else {
      L.q_a = w.get(a + "q_a_proj.weight");
      L.q_a_norm = w.get(a + "q_a_layernorm.weight");
      L.q_b = w.get(a + "q_b_proj.weight");
    }
    L.kv_a = w.get(a + "kv_a_proj_with_mqa.weight");
    L.kv_a_norm = w.get(a + "kv_a_layernorm.weight");
    L.kv_b = w.get(a + "kv_b_proj.weight");
    L.o_proj = w.get(a + "o_proj.weight");
    if (!dims.moe_layer(i)) {
      L.gate = w.get(m + "gate_proj.weight");
      L.up = w.get(m + "up_proj.weight");
      L.down = w.get(m + "down_proj.weight");
    } else {
      L.router = static_cast<const float*>(w.get(m + "gate.weight"));
      L.router_bias = static_cast<const float*>(w.get(m + "gate.e_score_correction_bias"));
      // stacked: expert e follows the first at a fixed stride (INT4 in bf16 compute: W4A16 tiles)
      const char* suffix = int4_packed() ? ".weight_packed" : ".weight";
      const std::string first = m + "experts." + std::to_string(dims.expert_begin()) + ".";  // this rank's first
      L.experts_gate = w.get(first + "gate_proj" + suffix);
      L.experts_up = w.get(first + "up_proj" + suffix);
      L.experts_down = w.get(first + "down_proj" + suffix);
      if (dims.shared_experts > 0) {
        L.shared_gate = w.get(m + "shared_experts.gate_proj.weight");
        L.shared_up = w.get(m + "shared_experts.up_proj.weight");
        L.shared_down = w.get(m + "shared_experts.down_proj.weight");
      }
    }
    layers_.push_back(L);
  }
  inv_freq_host_ = dims.rope_inv_freq;
}

TargetModel::~TargetModel() {
  for (auto* events : {&ready_, &reduced_})
    for (auto& pair : *events)
      for (cudaEvent_t e : pair)
        if (e) (void)cudaEventDestroy(e);
}

void TargetModel::set_collective_stream(cudaStream_t stream) {
  comm_stream_ = stream;
  if (!stream) return;
  for (auto* events : {&ready_, &reduced_})
    for (auto& pair : *events)
      for (cudaEvent_t& e : pair)
        if (!e) KD_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

size_t TargetModel::attention_workspace_bytes() const {
  // the largest split-KV workspace over every forward the engine accepts: any number of slots
  // with any tokens per slot (trees, AR steps, drafter blocks, prefill chunks, the C API's
  // forward) that fit forward_rows, at any prefix up to the cache capacity (the plan's
  // prefix-independent bound: the split count is not monotone in the prefix)
  const int capacity = limits_.cache_capacity();
  size_t most = 0;
  for (int batch = 1; batch <= limits_.slots; ++batch)
    for (int rows = 1; rows <= kVerifyMaxTreeLen && batch * rows <= limits_.forward_rows(); ++rows) {
      if (capacity - rows < 0) break;
      VerifyQueries q;
      q.dtype = attn_type(dt_);
      q.batch = batch;
      q.tree_len = rows;
      q.heads = dims_.local_heads();
      q.scale = dims_.softmax_scale;
      most = std::max(most, verify_attn_workspace_bound_bytes(make_verify_attn_plan_params(q, capacity)));
    }
  return most;
}

void TargetModel::declare(Workspace* ws) {
  const size_t N = static_cast<size_t>(limits_.forward_rows());
  const size_t el = static_cast<size_t>(model_dtype_bytes(dt_));
  const TargetDims& t = dims_;
  const size_t H = t.hidden, heads = t.local_heads();
  ws->declare(&x_, N * H * el);
  ws->declare(&hn_, N * H * el);
  ws->declare(&proj_, N * proj_width() * el);
  if (t.q_lora) ws->declare(&q_, N * heads * t.qk() * el);
  // zeroed: a model narrower than 512 / 64 leaves the padding columns at zero for good
  ws->declare(&q_lat_, N * heads * kVerifyLatentDim * el, /*zeroed=*/true);
  ws->declare(&q_pe_, N * heads * kVerifyRopeDim * el, /*zeroed=*/true);
  ws->declare(&o_lat_, N * heads * kVerifyLatentDim * el);
  ws->declare(&o_, N * heads * t.v_head * el);
  ws->declare(&attn_out_, N * H * el);
  const size_t inter = std::max<size_t>(t.first_dense > 0 ? t.local_dense_inter() : 0,
                                        static_cast<size_t>(t.local_shared_inter()));
  if (inter > 0) {
    ws->declare(&gate_up_, N * 2 * inter * el);
    ws->declare(&act_, N * inter * el);
  }
  ws->declare(&ffn_out_, N * H * el);
  if (t.has_moe()) {
    const size_t pairs = N * t.topk;
    if (dt_ != ModelDType::kF32) ws->declare(&h32_, N * H * sizeof(float));
    ws->declare(&router_logits_, N * t.experts * sizeof(float));
    ws->declare(&topk_ids_, pairs * sizeof(int32_t));
    ws->declare(&topk_weights_, pairs * sizeof(float));
    ws->declare(&expert_offsets_, (t.experts + 1) * sizeof(int32_t));
    ws->declare(&active_experts_, t.local_experts() * sizeof(int32_t));  // this rank's, for the W4A16 GEMMs
    // the W4A16 pair's slot hand-off: zero at rest, every pair leaves it zero
    ws->declare(&moe_slot_sync_, moe_w4a16_slot_sync_words(t.local_experts(), static_cast<int>(pairs)) * sizeof(uint32_t),
                /*zeroed=*/true);
    ws->declare(&row_token_, pairs * sizeof(int32_t));
    ws->declare(&pair_row_, pairs * sizeof(int32_t));
    ws->declare(&expert_act_, pairs * t.moe_inter * el);
    ws->declare(&expert_out_, pairs * H * el);
    if (t.shared_experts > 0) ws->declare(&shared_out_, N * H * el);
  }
  ws->declare(&logits_, N * t.vocab * sizeof(float));
  if (!feature_layers_.empty()) ws->declare(&features_, N * feature_width() * el);
  ws->declare(&inv_freq_dev_, inv_freq_host_.size() * sizeof(float));
  attn_workspace_bytes_ = attention_workspace_bytes();
  ws->declare(&attn_workspace_, std::max<size_t>(attn_workspace_bytes_, 1));
}

int64_t TargetModel::proj_width() const {
  const TargetDims& t = dims_;
  return (t.q_lora ? t.q_lora : static_cast<int64_t>(t.local_heads()) * t.qk()) + t.kv_lora + t.rope;
}

void TargetModel::upload_constants(cudaStream_t stream) {
  KD_CUDA_CHECK(cudaMemcpyAsync(inv_freq_dev_, inv_freq_host_.data(), inv_freq_host_.size() * sizeof(float),
                                cudaMemcpyHostToDevice, stream));
  KD_CUDA_CHECK(cudaStreamSynchronize(stream));  // the host vector may not outlive the copy otherwise
  inv_freq_ = inv_freq_dev_;
}

void TargetModel::forward(const TargetBatch& b, const TargetCache& cache, const int32_t* cache_len,
                          cudaStream_t stream) {
  const TargetDims& t = dims_;
  const int rows = b.batch * b.tokens;
  if (rows <= 0) return;
  if (rows > limits_.forward_rows()) fail(KD_INTERNAL, "target forward of " + std::to_string(rows) + " rows over the workspace");
  const int64_t H = t.hidden;
  EmbedParams e;
  e.dtype = dt_;
  e.rows = rows;
  e.dim = t.hidden;
  e.vocab = t.vocab;
  e.ids = b.token_ids;
  e.table = embed_;
  e.out = x_;
  e.out_stride = H;
  check_kernel(embed(e, stream));

  RmsNormParams n;  // the first layer's input norm; every later norm comes with its residual add
  n.dtype = dt_;
  n.rows = rows;
  n.dim = t.hidden;
  n.x = x_;
  n.x_stride = H;
  n.out = hn_;
  n.out_stride = H;
  n.eps = t.eps;
  n.weight = layers_[0].input_norm;
  check_kernel(rms_norm(n, stream));

  // A split model with several slots runs the batch as two halves of slots, so that each
  // all-reduce (on the collective stream) overlaps the other half's compute; otherwise one
  // half, reduced in line. Per layer and half: attention, all-reduce, residual + norm, MLP,
  // all-reduce; the residual + next norm (and the features) start the next layer.
  const bool overlap = comm_->split() && comm_stream_ && b.batch >= 2;
  const int halves = overlap ? 2 : 1;
  Half half[2];
  for (int h = 0; h < halves; ++h) {
    const int s0 = h == 0 ? 0 : b.batch / 2, ns = halves == 1 ? b.batch : (h == 0 ? b.batch / 2 : b.batch - b.batch / 2);
    half[h].b = b;
    half[h].b.first_slot = b.first_slot + s0;
    half[h].b.batch = ns;
    half[h].b.token_ids = b.token_ids + static_cast<int64_t>(s0) * b.tokens;
    half[h].b.positions = b.positions + static_cast<int64_t>(s0) * b.tokens;
    half[h].b.vis = b.vis + static_cast<int64_t>(s0) * b.tokens * b.vis_words;
    half[h].r0 = s0 * b.tokens;
    half[h].rows = ns * b.tokens;
  }
  auto reduce = [&](int h, void* buf, int which) {  // buf's rows of half h, summed over the ranks
    const size_t count = static_cast<size_t>(half[h].rows) * H;
    void* rows_of = at(buf, half[h].r0 * H, dt_);
    if (!overlap) return comm_->all_reduce_sum(rows_of, count, dt_, stream);
    KD_CUDA_CHECK(cudaEventRecord(ready_[h][which], stream));
    KD_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, ready_[h][which], 0));
    comm_->all_reduce_sum(rows_of, count, dt_, comm_stream_);
    KD_CUDA_CHECK(cudaEventRecord(reduced_[h][which], comm_stream_));
  };
  auto await = [&](int h, int which) {
    if (overlap) KD_CUDA_CHECK(cudaStreamWaitEvent(stream, reduced_[h][which], 0));
  };
  auto residual = [&](int h, const void* y, const void* weight) {  // x += y; hn = norm(x), the half's rows
    AddRmsNormParams an;
    an.dtype = dt_;
    an.rows = half[h].rows;
    an.dim = t.hidden;
    an.x = at(x_, half[h].r0 * H, dt_);
    an.x_stride = H;
    an.y = at(y, half[h].r0 * H, dt_);
    an.y_stride = H;
    an.out = at(hn_, half[h].r0 * H, dt_);
    an.out_stride = H;
    an.eps = t.eps;
    an.weight = weight;
    check_kernel(add_rms_norm(an, stream));
  };
  auto features = [&](int h, int l) {  // the residual after layer l, where the drafter reads it
    if (!b.features) return;
    for (size_t f = 0; f < feature_layers_.size(); ++f) {
      if (feature_layers_[f] != l) continue;
      CopyRowsParams c;
      c.in_dtype = c.out_dtype = dt_;
      c.rows = half[h].rows;
      c.cols = t.hidden;
      c.in = at(x_, half[h].r0 * H, dt_);
      c.in_stride = H;
      c.out = at(features_, static_cast<int64_t>(half[h].r0) * feature_width() + static_cast<int64_t>(f) * H, dt_);
      c.out_stride = feature_width();
      check_kernel(copy_rows(c, stream));
    }
  };
  constexpr int kAttn = 0, kFfn = 1;
  for (int l = 0; l < t.layers; ++l) {
    const Layer& w = layers_[l];
    for (int h = 0; h < halves; ++h) {
      if (l > 0) {
        await(h, kFfn);
        residual(h, ffn_out_, w.input_norm);
        features(h, l - 1);
      }
      attention(w, l, half[h].b, at(hn_, half[h].r0 * H, dt_), at(attn_out_, half[h].r0 * H, dt_), cache, cache_len,
                stream);
      reduce(h, attn_out_, kAttn);  // o_proj over the heads of all ranks
    }
    for (int h = 0; h < halves; ++h) {
      await(h, kAttn);
      residual(h, attn_out_, w.post_norm);
      const void* hn = at(hn_, half[h].r0 * H, dt_);
      void* out = at(ffn_out_, half[h].r0 * H, dt_);
      if (t.moe_layer(l)) moe_ffn(w, half[h].rows, hn, out, stream);
      else dense_ffn(w.gate, w.down, t.local_dense_inter(), half[h].rows, hn, out, stream);
      reduce(h, ffn_out_, kFfn);  // the parts' partial sums
    }
  }
  for (int h = 0; h < halves; ++h) {
    await(h, kFfn);
    residual(h, ffn_out_, norm_);  // the last layer's: the final norm
    features(h, t.layers - 1);
  }
  if (b.logits == LogitRows::kNone) return;
  if (!head_) fail(KD_INTERNAL, "the target has no vocab head");
  if (b.logits == LogitRows::kPart) {
    head_->project_part(rows, hn_, H, stream);
  } else if (b.logits == LogitRows::kAll) {
    head_->project(rows, hn_, H, logits_, stream);
  } else {  // the last row of each slot: rows T-1, 2T-1, ... are a matrix of leading dimension T * H
    head_->project(b.batch, at(hn_, (b.tokens - 1) * H, dt_), b.tokens * H, logits_, stream);
  }
}

void TargetModel::attention(const Layer& w, int layer, const TargetBatch& b, const void* hn, void* attn_out,
                            const TargetCache& cache, const int32_t* cache_len, cudaStream_t stream) {
  const TargetDims& t = dims_;
  const int rows = b.batch * b.tokens;
  const int64_t H = t.hidden, qk = t.qk(), heads = t.local_heads();  // this rank's heads
  // one GEMM for everything read from hn: [q_a | kv_a] (q LoRA) or [q | kv_a]
  const int64_t pw = proj_width();
  const int64_t qa = t.q_lora ? t.q_lora : heads * qk;  // width of the first part
  gemm_->linear(rows, static_cast<int>(pw), t.hidden, mat(hn, H, dt_), mat(w.q_a ? w.q_a : w.q_proj, H, dt_),
                out(proj_, pw, dt_));
  const void* q = proj_;  // [rows, heads, nope + rope] at leading dimension q_ld
  int64_t q_ld = pw;
  if (t.q_lora) {
    RmsNormParams qn;
    qn.dtype = dt_;
    qn.rows = rows;
    qn.dim = t.q_lora;
    qn.x = qn.out = proj_;
    qn.x_stride = qn.out_stride = pw;
    qn.weight = w.q_a_norm;
    qn.eps = t.latent_eps;
    check_kernel(rms_norm(qn, stream));
    gemm_->linear(rows, static_cast<int>(heads * qk), t.q_lora, mat(proj_, pw, dt_), mat(w.q_b, t.q_lora, dt_),
                  out(q_, heads * qk, dt_));
    q = q_;
    q_ld = heads * qk;
  }
  MlaCacheWriteParams cw;
  cw.dtype = dt_;
  cw.batch = b.batch;
  cw.tokens = b.tokens;
  cw.kv_lora = t.kv_lora;
  cw.rope_dim = t.rope;
  cw.kv_a = at(proj_, qa, dt_);  // the kv_a part of the projection rows
  cw.kv_a_stride = pw;
  cw.norm_weight = w.kv_a_norm;
  cw.eps = t.latent_eps;
  cw.positions = b.positions;
  cw.inv_freq = inv_freq_;
  cw.attention_factor = t.rope_factor;
  cw.interleave = t.rope_interleave;
  cw.cache = cache.layer(layer, b.first_slot);
  cw.row_stride = kVerifyQKDim;
  cw.batch_stride = cache.slot_stride();
  cw.cache_len = cache_len + b.first_slot;
  cw.capacity = cache.capacity();
  check_kernel(mla_cache_write(cw, stream));
  // q_pe = RoPE(q[..., nope:]) into the 64-wide rope block of each head
  RopeParams rp;
  rp.dtype = dt_;
  rp.tokens = rows;
  rp.heads = static_cast<int>(heads);
  rp.dim = t.rope;
  rp.x = at(q, t.nope, dt_);
  rp.x_token_stride = q_ld;
  rp.x_head_stride = qk;
  rp.out = q_pe_;
  rp.out_token_stride = heads * kVerifyRopeDim;
  rp.out_head_stride = kVerifyRopeDim;
  rp.positions = b.positions;
  rp.inv_freq = inv_freq_;
  rp.attention_factor = t.rope_factor;
  rp.interleave = t.rope_interleave;
  check_kernel(rope(rp, stream));
  // absorbed queries: q_lat[:, h] = q_nope[:, h] @ w_kc[h], w_kc[h] = kv_b rows h*(nope+v) .. +nope
  const int64_t head_rows = static_cast<int64_t>(t.nope + t.v_head) * t.kv_lora;  // kv_b elements per head
  gemm_->batched(static_cast<int>(heads), rows, t.kv_lora, t.nope, mat(q, q_ld, dt_), qk, mat(w.kv_b, t.kv_lora, dt_), head_rows,
                 /*transpose_w=*/false, out(q_lat_, heads * kVerifyLatentDim, dt_), kVerifyLatentDim);
  VerifyQueries queries;
  queries.dtype = attn_type(dt_);
  queries.batch = b.batch;
  queries.tree_len = b.tokens;
  queries.heads = static_cast<int>(heads);
  queries.q_lat = q_lat_;
  queries.q_pe = q_pe_;
  queries.scale = t.softmax_scale;
  VerifyKeys keys;
  keys.kv = cache.layer(layer, b.first_slot);
  keys.batch_stride = cache.slot_stride();
  keys.max_prefix = std::min(b.max_prefix, cache.capacity() - b.tokens);
  keys.prefix_len = cache_len + b.first_slot;
  TreeMask mask;
  mask.vis = b.vis;
  mask.words = b.vis_words;
  VerifyOutputs outputs;
  outputs.out = o_lat_;
  outputs.workspace = attn_workspace_;
  outputs.workspace_bytes = attn_workspace_bytes_;
  check_kernel(verify_attn(make_verify_attn_params(queries, keys, mask, outputs), stream));
  // o[:, h] = o_lat[:, h] @ w_vc[h]^T, w_vc[h] = kv_b rows h*(nope+v)+nope .. +v
  gemm_->batched(static_cast<int>(heads), rows, t.v_head, t.kv_lora, mat(o_lat_, heads * kVerifyLatentDim, dt_), kVerifyLatentDim,
                 mat(at(w.kv_b, static_cast<int64_t>(t.nope) * t.kv_lora, dt_), t.kv_lora, dt_), head_rows,
                 /*transpose_w=*/true, out(o_, heads * t.v_head, dt_), t.v_head);
  gemm_->linear(rows, t.hidden, static_cast<int>(heads * t.v_head), mat(o_, heads * t.v_head, dt_),
                mat(w.o_proj, heads * t.v_head, dt_), out(attn_out, H, dt_));
}

void TargetModel::dense_ffn(const void* gate_up, const void* down, int inter, int rows, const void* hn, void* dst,
                            cudaStream_t stream) {
  const int64_t H = dims_.hidden;
  // gate and up are one [2I, H] matrix (weights.cpp): one GEMM, then silu(gate) * up
  gemm_->linear(rows, 2 * inter, dims_.hidden, mat(hn, H, dt_), mat(gate_up, H, dt_), out(gate_up_, 2 * inter, dt_));
  SiluMulParams s;
  s.dtype = dt_;
  s.rows = rows;
  s.dim = inter;
  s.gate = gate_up_;
  s.gate_stride = 2 * inter;
  s.up = at(gate_up_, inter, dt_);
  s.up_stride = 2 * inter;
  s.out = act_;
  s.out_stride = inter;
  check_kernel(silu_mul(s, stream));
  gemm_->linear(rows, dims_.hidden, inter, mat(act_, inter, dt_), mat(down, inter, dt_), out(dst, H, dt_));
}

void TargetModel::moe_ffn(const Layer& w, int rows, const void* hn, void* out_rows, cudaStream_t stream) {
  const TargetDims& t = dims_;
  const int64_t H = t.hidden;
  // the router runs in float32 on a float32 copy of the normalised hidden state
  const float* h32 = static_cast<const float*>(hn);
  if (dt_ != ModelDType::kF32) {
    CopyRowsParams c;
    c.in_dtype = dt_;
    c.out_dtype = ModelDType::kF32;
    c.rows = rows;
    c.cols = t.hidden;
    c.in = hn;
    c.in_stride = H;
    c.out = h32_;
    c.out_stride = H;
    check_kernel(copy_rows(c, stream));
    h32 = h32_;
  }
  gemm_->linear(rows, t.experts, t.hidden, mat(h32, H, ModelDType::kF32), mat(w.router, H, ModelDType::kF32),
                out(router_logits_, t.experts, ModelDType::kF32));
  MoeTopk topk;  // the router's picks: moe_route writes them, moe_group and moe_combine read them
  topk.tokens = rows;
  topk.topk = t.topk;
  topk.ids = topk_ids_;
  topk.weights = topk_weights_;
  MoeRouter router;
  router.experts = t.experts;
  router.groups = t.n_group;
  router.topk_group = t.topk_group;
  router.norm_topk = t.norm_topk;
  router.scaling = t.scaling;
  router.bias = w.router_bias;
  check_kernel(moe_route(make_moe_route_params(router, router_logits_, topk), stream));
  MoeGroupOutputs grouped;
  grouped.offsets = expert_offsets_;
  grouped.row_token = row_token_;
  grouped.pair_row = pair_row_;
  // this rank's experts own the grouped rows offsets[e0] .. offsets[e0 + El]: the GEMMs see
  // only them (their weights are stacked from the rank's first expert)
  const int El = t.local_experts();
  MoeExpertRange local;
  local.begin = t.expert_begin();
  local.end = t.expert_begin() + El;
  MoeActiveList active;
  if (int4_packed()) {  // the W4A16 GEMMs' slot -> expert list, relative to e0
    active.experts = active_experts_;
    active.begin = local.begin;
    active.end = local.end;
  }
  check_kernel(moe_group(make_moe_group_params(topk, t.experts, grouped, active), stream));
  MoeRoutedRows routed;
  routed.experts = El;
  routed.rows = rows * t.topk;
  routed.offsets = expert_offsets_ + local.begin;
  routed.active_experts = active.experts;
  routed.max_rows_per_expert = rows;  // an expert is picked at most once per token
  MoeInputRows tokens_in;  // gate/up: each grouped row reads its token's hidden state
  tokens_in.x = hn;
  tokens_in.x_stride = H;
  tokens_in.x_row = row_token_;
  MoeOutputRows act_out;
  act_out.out = expert_act_;
  act_out.out_stride = t.moe_inter;
  MoeInputRows act_in;  // down: grouped row r reads row r of the gate/up output
  act_in.x = expert_act_;
  act_in.x_stride = t.moe_inter;
  MoeOutputRows down_out;
  down_out.out = expert_out_;
  down_out.out_stride = H;
  if (int4_packed()) {  // W4A16: the experts stay packed, dequantized in registers
    MoeW4a16Weights gate_up;
    gate_up.w = static_cast<const uint32_t*>(w.experts_gate);
    gate_up.w_up = static_cast<const uint32_t*>(w.experts_up);
    gate_up.w_expert_stride = moe_w4a16_expert_words(t.moe_inter, t.hidden);
    gate_up.n = t.moe_inter;
    gate_up.k = t.hidden;
    MoeW4a16Params up = make_moe_w4a16_params(routed, tokens_in, gate_up, act_out);
    up.slot_sync = moe_slot_sync_;  // decode sizes: the down CTAs wait per expert slot, not for the grid
    check_kernel(moe_gemm_w4a16(up, stream));
    MoeW4a16Weights down_w;
    down_w.w = static_cast<const uint32_t*>(w.experts_down);
    down_w.w_expert_stride = moe_w4a16_expert_words(t.hidden, t.moe_inter);
    down_w.n = t.hidden;
    down_w.k = t.moe_inter;
    MoeW4a16Params down = make_moe_w4a16_params(routed, act_in, down_w, down_out);
    down.slot_sync = moe_slot_sync_;  // the pair's words, as on the gate/up launch
    down.overlap_previous = true;     // the gate/up launch just above wrote only its x
    check_kernel(moe_gemm_w4a16(down, stream));
  } else {
    MoeExpertWeights gate_up;
    gate_up.w = w.experts_gate;
    gate_up.w_up = w.experts_up;
    gate_up.w_expert_stride = static_cast<int64_t>(t.moe_inter) * H;
    gate_up.n = t.moe_inter;
    gate_up.k = t.hidden;
    check_kernel(moe_gemm(make_moe_gemm_params(dt_, routed, tokens_in, gate_up, act_out), stream));
    MoeExpertWeights down_w;
    down_w.w = w.experts_down;
    down_w.w_expert_stride = static_cast<int64_t>(t.moe_inter) * H;
    down_w.n = t.hidden;
    down_w.k = t.moe_inter;
    check_kernel(moe_gemm(make_moe_gemm_params(dt_, routed, act_in, down_w, down_out), stream));
  }
  if (t.shared_experts > 0)
    dense_ffn(w.shared_gate, w.shared_down, t.local_shared_inter(), rows, hn, shared_out_, stream);
  MoeCombineInputs summed;
  summed.hidden = t.hidden;
  summed.expert_out = expert_out_;
  summed.pair_row = pair_row_;
  summed.shared_out = t.shared_experts > 0 ? shared_out_ : nullptr;
  // pairs routed to another rank's experts add nothing here
  check_kernel(moe_combine(make_moe_combine_params(dt_, topk, summed, local, out_rows), stream));
}

}  // namespace kdtree::engine
