#include "engine/decode_round.h"

#include <algorithm>

#include "common/cuda_check.h"
#include "engine/engine_error.h"
#include "kernels/elementwise.cuh"
#include "kernels/sampling.cuh"
#include "kernels/tree_accept.cuh"
#include "kernels/tree_build.cuh"
#include "kernels/verify_attn.cuh"

namespace kdtree::engine {

DecodeRound::DecodeRound(const EngineLimits& limits, int vocab, TargetModel* target, DrafterModel* drafter,
                         TargetCache* tcache, DrafterCache* dcache, SlotTable* slots, Collective* comm,
                         VocabHead* head)
    : limits_(limits), vocab_(vocab), target_(target), drafter_(drafter), tcache_(tcache), dcache_(dcache),
      slots_(slots), comm_(comm), head_(head) {
  vis_words_ = (limits.tree_rows() + 31) / 32;
}

DecodeRound::~DecodeRound() {
  drop_graphs();
  for (cudaEvent_t& e : events_)
    if (e) (void)cudaEventDestroy(e);
}

void DecodeRound::drop_graphs() {
  for (auto& [key, g] : graphs_)
    if (g.exec) (void)cudaGraphExecDestroy(g.exec);
  graphs_.clear();
}

void DecodeRound::declare(Workspace* ws) {
  const size_t S = static_cast<size_t>(limits_.slots), R = static_cast<size_t>(limits_.tree_rows());
  const size_t D = static_cast<size_t>(std::max(limits_.max_block - 1, 1));
  const size_t K = static_cast<size_t>(std::max(std::min(limits_.max_budget, vocab_), 1));
  const size_t mp = static_cast<size_t>(limits_.max_path());
  ws->declare(&logp_, S * D * K * sizeof(float));
  ws->declare(&tok_, S * D * K * sizeof(int32_t));
  ws->declare(&tree_n_, S * sizeof(int32_t));
  ws->declare(&tree_tokens_, S * R * sizeof(int32_t));
  ws->declare(&tree_depth_, S * R * sizeof(int32_t));
  ws->declare(&tree_parent_, S * R * sizeof(int32_t));
  ws->declare(&tree_pos_, S * R * sizeof(int32_t));
  ws->declare(&tree_vis_, S * R * vis_words_ * sizeof(uint32_t));
  ws->declare(&choice_, S * R * sizeof(int32_t));
  ws->declare(&accepted_, S * mp * sizeof(int32_t));
  ws->declare(&accept_len_, S * sizeof(int32_t));
  ws->declare(&bonus_, S * sizeof(int32_t));
  ws->declare(&feat_index_, S * mp * sizeof(int32_t));
  if (drafter_)
    ws->declare(&ctx_feat_, S * mp * target_->feature_width() * static_cast<size_t>(model_dtype_bytes(limits_.dtype)));
  ws->declare(&ar_tokens_, S * sizeof(int32_t));
  ws->declare(&ar_pos_, S * sizeof(int32_t));
  ws->declare(&ones_, S * sizeof(uint32_t));
  ws->declare(&report_, S * sizeof(RoundReport), /*zeroed=*/true);
}

void DecodeRound::init(cudaStream_t stream) {
  for (cudaEvent_t& e : events_) KD_CUDA_CHECK(cudaEventCreate(&e));
  host_report_ = PinnedBuffer(sizeof(RoundReport) * limits_.slots, "the round report");
  std::vector<uint32_t> ones(limits_.slots, 1u);
  KD_CUDA_CHECK(cudaMemcpyAsync(ones_, ones.data(), ones.size() * sizeof(uint32_t), cudaMemcpyHostToDevice, stream));
  KD_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void DecodeRound::record(int i, cudaStream_t stream, bool capturing) {
  // inside a capture an ordinary record is only an ordering edge; External makes it a real
  // event record node, so stage times work for graph replays too
  if (capturing) KD_CUDA_CHECK(cudaEventRecordWithFlags(events_[i], stream, cudaEventRecordExternal));
  else KD_CUDA_CHECK(cudaEventRecord(events_[i], stream));
}

void DecodeRound::body(const RoundShape& s, cudaStream_t stream, bool capturing) {
  if (s.tree) tree_body(s, stream, capturing);
  else ar_body(s, stream, capturing);
  KD_CUDA_CHECK(cudaMemcpyAsync(host_report_.data(), report_, sizeof(RoundReport) * s.batch, cudaMemcpyDeviceToHost,
                                stream));
  record(4, stream, capturing);
}

TreeArrays DecodeRound::tree_arrays(int rows) const {
  TreeArrays t;
  t.rows = rows;
  t.vis_words = vis_words_;
  t.n = tree_n_;
  t.tokens = tree_tokens_;
  t.depth = tree_depth_;
  t.parent = tree_parent_;
  t.positions = tree_pos_;
  t.vis = tree_vis_;
  return t;
}

void DecodeRound::tree_body(const RoundShape& s, cudaStream_t stream, bool capturing) {
  const SlotState& state = slots_->device();
  const int B = s.batch, R = s.rows, D = s.block - 1, mp = limits_.max_path();
  record(0, stream, capturing);
  check_kernel(round_begin(state, B, stream));
  drafter_->extend(0, B, mp, ctx_feat_, target_->feature_width(), *slots_, *dcache_, stream);
  drafter_->draft(0, B, s.block, *slots_, *dcache_, stream, merged_topk(s));
  record(1, stream, capturing);
  TopkRows topk;
  topk.k = s.topk;
  topk.logp = logp_;
  topk.tok = tok_;
  if (s.topk > 0 && merged_topk(s)) {
    head_->topk(B * D, s.topk, logp_, tok_, stream);
  } else if (s.topk > 0) {
    TopkLogits drafted;
    drafted.rows = B * D;
    drafted.vocab = vocab_;
    drafted.logits = drafter_->logits();
    check_kernel(topk_logprobs(make_topk_logprobs_params(drafted, topk), stream));
  }
  TreeRequests requests;
  requests.batch = B;
  requests.depth = D;
  requests.max_budget = R - 1;
  requests.budget = state.round_budget;
  requests.root_token = state.root_token;
  requests.start_pos = state.cache_len;
  const TreeArrays trees = tree_arrays(R);
  check_kernel(tree_build(make_tree_build_params(requests, topk, trees), stream));
  VerifyInputsParams vi;
  vi.batch = B;
  vi.rows = R;
  vi.vis_words = vis_words_;
  vi.state = state;
  vi.n = tree_n_;
  vi.tokens = tree_tokens_;
  vi.positions = tree_pos_;
  vi.vis = tree_vis_;
  check_kernel(verify_inputs(vi, stream));
  record(2, stream, capturing);
  TargetBatch tbatch;
  tbatch.batch = B;
  tbatch.tokens = R;
  tbatch.token_ids = tree_tokens_;
  tbatch.positions = tree_pos_;
  tbatch.vis = tree_vis_;
  tbatch.vis_words = vis_words_;
  tbatch.max_prefix = s.max_prefix;
  tbatch.logits = merged_argmax(s) ? LogitRows::kPart : LogitRows::kAll;
  tbatch.features = true;
  target_->forward(tbatch, *tcache_, state.cache_len, stream);
  record(3, stream, capturing);
  TargetChoice target;
  if (s.sample) {
    ChooseTokensParams ct;
    ct.batch = B;
    ct.rows = R;
    ct.vocab = vocab_;
    ct.logits = target_->logits();
    ct.row_stride = vocab_;
    ct.temperature = slots_->temperature();
    ct.seed = slots_->seed();
    ct.draw = state.draw;
    ct.out = choice_;
    check_kernel(choose_tokens(ct, stream));
    target = target_tokens(choice_);
  } else if (merged_argmax(s)) {  // greedy on a split model: every row's argmax, merged from the parts
    head_->argmax(B * R, choice_, stream);
    target = target_tokens(choice_);
  } else {
    target = target_argmax(target_->logits(), vocab_);  // greedy: the walk takes the argmax of the rows on its path
  }
  AcceptedPaths paths;
  paths.max_path = mp;
  paths.accepted = accepted_;
  paths.accept_len = accept_len_;
  paths.bonus = bonus_;
  check_kernel(tree_accept(make_tree_accept_params(B, trees, target, paths), stream));
  check_kernel(cache_compact(make_cache_compact_params(B, tcache_->words(), state.cache_len, paths), stream));
  CommitTreeParams ct;
  ct.batch = B;
  ct.rows = R;
  ct.max_path = mp;
  ct.state = state;
  ct.n = tree_n_;
  ct.tree_tokens = tree_tokens_;
  ct.tree_depth = tree_depth_;
  ct.accepted = accepted_;
  ct.accept_len = accept_len_;
  ct.bonus = bonus_;
  ct.feat_index = feat_index_;
  ct.report = report_;
  check_kernel(commit_tree(ct, stream));
  CopyRowsParams g;  // the accepted rows' features: the drafter's context next round
  g.in_dtype = g.out_dtype = limits_.dtype;
  g.rows = B * mp;
  g.cols = target_->feature_width();
  g.in = target_->features();
  g.in_stride = g.cols;
  g.index = feat_index_;
  g.out = ctx_feat_;
  g.out_stride = g.cols;
  check_kernel(copy_rows(g, stream));
}

void DecodeRound::ar_body(const RoundShape& s, cudaStream_t stream, bool capturing) {
  const SlotState& state = slots_->device();
  const int B = s.batch;
  record(0, stream, capturing);
  record(1, stream, capturing);
  BlockInputsParams bi;
  bi.batch = B;
  bi.block = 1;
  bi.state = state;
  bi.start = state.cache_len;
  bi.tokens = ar_tokens_;
  bi.positions = ar_pos_;
  check_kernel(draft_block_inputs(bi, stream));
  record(2, stream, capturing);
  TargetBatch tbatch;
  tbatch.batch = B;
  tbatch.tokens = 1;
  tbatch.token_ids = ar_tokens_;
  tbatch.positions = ar_pos_;
  tbatch.vis = ones_;
  tbatch.vis_words = 1;
  tbatch.max_prefix = s.max_prefix;
  tbatch.logits = LogitRows::kAll;
  target_->forward(tbatch, *tcache_, state.cache_len, stream);
  record(3, stream, capturing);
  ChooseTokensParams ct;
  ct.batch = B;
  ct.rows = 1;
  ct.vocab = vocab_;
  ct.logits = target_->logits();
  ct.row_stride = vocab_;
  ct.temperature = slots_->temperature();
  ct.seed = slots_->seed();
  ct.draw = state.draw;
  ct.out = choice_;
  check_kernel(choose_tokens(ct, stream));
  CommitArParams ca;
  ca.batch = B;
  ca.advance = 1;
  ca.state = state;
  ca.choice = choice_;
  ca.report = report_;
  check_kernel(commit_ar(ca, stream));
}

RoundTimes DecodeRound::run(const RoundShape& shape, cudaStream_t stream) {
  if (shape.tree && !drafter_) fail(KD_INTERNAL, "a DDTree round without a drafter");
  if (shape.batch < 1 || shape.batch > limits_.slots || shape.rows > limits_.tree_rows() ||
      shape.block > limits_.max_block)
    fail(KD_INTERNAL, "round shape outside the engine's limits");
  RoundTimes times;
  Graph& g = graphs_[shape.key()];
  comm_->timer().reset();  // the round's collectives take the timer's events in order
  if (limits_.graphs && comm_->capturable() && !g.failed && !g.exec && g.runs >= 1) {
    // capture this shape once; on any trouble, stay eager for it
    cudaGraph_t graph = nullptr;
    bool captured = false;
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
      try {
        body(shape, stream, /*capturing=*/true);
        g.collectives = comm_->timer().count();
        captured = cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph;
      } catch (const std::exception&) {
        cudaGraph_t dropped = nullptr;
        (void)cudaStreamEndCapture(stream, &dropped);
        if (dropped) (void)cudaGraphDestroy(dropped);
      }
    }
    if (captured && cudaGraphInstantiate(&g.exec, graph, 0) != cudaSuccess) g.exec = nullptr;
    if (graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();  // a refused capture leaves its error behind: not ours to report
    if (!g.exec) g.failed = true;
  }
  if (g.exec) {
    KD_CUDA_CHECK(cudaGraphLaunch(g.exec, stream));
    times.graph = true;
    times.collectives = g.collectives;
  } else {
    comm_->timer().reset();
    body(shape, stream, /*capturing=*/false);
    times.collectives = comm_->timer().count();
    ++g.runs;
  }
  comm_->wait(stream);
  times.collective_us = comm_->timer().elapsed_us(times.collectives);
  for (int i = 0; i < 4; ++i) {
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, events_[i], events_[i + 1]) == cudaSuccess) times.stage_us[i] = ms * 1000.0f;
    else (void)cudaGetLastError();  // timing is best effort; the emulator has no clock
  }
  return times;
}

DecodeRound::TreeSample DecodeRound::tree_of(int b, const RoundShape& shape, cudaStream_t stream) const {
  TreeSample t;
  const int R = shape.rows, mp = limits_.max_path();
  t.parent.resize(R);
  t.token.resize(R);
  t.accepted.resize(mp);
  KD_CUDA_CHECK(cudaMemcpyAsync(&t.n, tree_n_ + b, sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  KD_CUDA_CHECK(cudaMemcpyAsync(&t.accept_len, accept_len_ + b, sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  KD_CUDA_CHECK(cudaMemcpyAsync(t.parent.data(), tree_parent_ + static_cast<int64_t>(b) * R, R * sizeof(int32_t),
                                cudaMemcpyDeviceToHost, stream));
  KD_CUDA_CHECK(cudaMemcpyAsync(t.token.data(), tree_tokens_ + static_cast<int64_t>(b) * R, R * sizeof(int32_t),
                                cudaMemcpyDeviceToHost, stream));
  KD_CUDA_CHECK(cudaMemcpyAsync(t.accepted.data(), accepted_ + static_cast<int64_t>(b) * mp, mp * sizeof(int32_t),
                                cudaMemcpyDeviceToHost, stream));
  KD_CUDA_CHECK(cudaStreamSynchronize(stream));
  return t;
}

}  // namespace kdtree::engine
