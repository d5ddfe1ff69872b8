// Requests and continuous batching: submit queues a request; each step admits waiting
// requests into free slots (lowest first, so the batch stays dense), prefills them and emits
// their first token, then runs one round over the occupied slots. A finished request's slot
// goes back to the pool at once and is refilled at the next step; the others are unaffected
// (every kernel treats slots independently).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "common/cuda_check.h"
#include "engine/engine.h"
#include "engine/engine_error.h"
#include "kernels/sampling.cuh"

namespace kdtree::engine {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr int kMinPrefixBucket = 128;  // verify_attn's split plan is keyed by a power-of-two prefix bound

}  // namespace

int64_t Engine::submit(const kd_request& r) {
  const auto bad = [](const std::string& m) { fail(KD_INVALID_ARGUMENT, "request: " + m); };
  if (r.prompt_len < 1 || !r.prompt) bad("the prompt is empty");
  check_tokens(r.prompt, r.prompt_len, "request prompt");
  if (r.max_new_tokens < 1) bad("max_new_tokens must be >= 1, got " + std::to_string(r.max_new_tokens));
  if (static_cast<int64_t>(r.prompt_len) + r.max_new_tokens > limits_.max_tokens)
    fail(KD_OVER_LIMIT, "request: prompt (" + std::to_string(r.prompt_len) + ") + max_new_tokens (" +
                            std::to_string(r.max_new_tokens) + ") exceed the engine's max_tokens " +
                            std::to_string(limits_.max_tokens));
  if (!std::isfinite(r.temperature) || r.temperature < 0.0f) bad("temperature must be a number >= 0");
  if (r.n_stop < 0 || r.n_stop > kMaxStopIds || (r.n_stop > 0 && !r.stop_ids))
    bad("at most " + std::to_string(kMaxStopIds) + " stop ids");
  check_tokens(r.stop_ids, r.n_stop, "request stop ids");
  Request q;
  q.ar = r.ar != 0;
  if (!q.ar) {
    if (!drafter_) fail(KD_BAD_STATE, "request: DDTree needs a drafter; this engine has none (use ar = 1)");
    if (r.budget < 0 || r.budget > limits_.max_budget)
      fail(KD_OVER_LIMIT, "request: budget " + std::to_string(r.budget) + " outside the engine's 0.." +
                              std::to_string(limits_.max_budget));
    q.block = r.block_size > 0 ? r.block_size : ddims_->block_size;
    if (q.block < 2 || q.block > limits_.max_block)
      fail(KD_OVER_LIMIT, "request: block_size " + std::to_string(q.block) + " outside the engine's 2.." +
                              std::to_string(limits_.max_block));
    q.budget = r.budget;
  }
  q.id = next_id_++;
  q.prompt.assign(r.prompt, r.prompt + r.prompt_len);
  if (r.n_stop > 0) q.stop_ids.assign(r.stop_ids, r.stop_ids + r.n_stop);
  q.max_new = r.max_new_tokens;
  q.temperature = r.temperature;
  q.seed = r.seed;
  waiting_.push_back(q.id);
  requests_.emplace(q.id, std::move(q));
  return requests_.rbegin()->first;
}

void Engine::cancel(int64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) fail(KD_BAD_STATE, "cancel: no request " + std::to_string(id));
  Request& r = it->second;
  if (r.state == KD_REQ_WAITING) {
    waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), id), waiting_.end());
    r.state = KD_REQ_CANCELLED;
  } else if (r.state == KD_REQ_RUNNING) {
    finish_request(r, KD_REQ_CANCELLED);
  }
}

void Engine::start_request(Request& r, int slot) {
  const auto t0 = Clock::now();
  const SlotState& s = slots_->device();
  for (int32_t* f : {s.cache_len, s.drafter_len, s.ctx_count, s.out_count, s.done, s.live})
    write_field(f, slot, 0);
  write_field(s.max_new, slot, r.max_new);
  write_field(s.budget, slot, r.budget);
  write_field(s.ar, slot, r.ar ? 1 : 0);
  write_field(s.n_stop, slot, static_cast<int32_t>(r.stop_ids.size()));
  if (!r.stop_ids.empty())
    KD_CUDA_CHECK(cudaMemcpyAsync(s.stop_ids + slot * kMaxStopIds, r.stop_ids.data(), r.stop_ids.size() * 4,
                                  cudaMemcpyHostToDevice, stream_));
  const uint64_t zero = 0;
  KD_CUDA_CHECK(cudaMemcpyAsync(s.draw + slot, &zero, sizeof zero, cudaMemcpyHostToDevice, stream_));
  KD_CUDA_CHECK(cudaMemcpyAsync(slots_->seed() + slot, &r.seed, sizeof r.seed, cudaMemcpyHostToDevice, stream_));
  KD_CUDA_CHECK(cudaMemcpyAsync(slots_->temperature() + slot, &r.temperature, sizeof r.temperature,
                                cudaMemcpyHostToDevice, stream_));
  prefill_chunks(slot, r.prompt.data(), static_cast<int>(r.prompt.size()), /*feed_drafter=*/!r.ar, nullptr);
  // the first token: the choice at the prompt's last position (the target's logits buffer holds it)
  ChooseTokensParams ct;
  ct.batch = 1;
  ct.rows = 1;
  ct.vocab = tdims_.vocab;
  ct.logits = target_->logits();
  ct.row_stride = tdims_.vocab;
  ct.temperature = slots_->temperature() + slot;
  ct.seed = slots_->seed() + slot;
  ct.draw = s.draw + slot;
  ct.out = io_tokens_;
  check_kernel(choose_tokens(ct, stream_));
  write_field(s.live, slot, 1);
  CommitArParams ca;
  ca.batch = 1;
  ca.advance = 0;
  ca.state = slots_->at(slot);
  ca.choice = io_tokens_;
  check_kernel(commit_ar(ca, stream_));
  comm_->wait(stream_);
  r.state = KD_REQ_RUNNING;
  r.slot = slot;
  r.generated = 1;
  r.prefill_s = seconds_since(t0);
  slot_owner_[slot] = r.id;
  slot_len_[slot] = static_cast<int32_t>(r.prompt.size());
  if (read_field(s.done, slot)) finish_request(r, KD_REQ_DONE);
}

void Engine::finish_request(Request& r, kd_request_state state) {
  const int slot = r.slot;
  const int count = read_field(slots_->device().out_count, slot);
  r.tokens.resize(count);
  if (count > 0)
    KD_CUDA_CHECK(cudaMemcpyAsync(r.tokens.data(), slots_->device().out_tokens + static_cast<int64_t>(slot) * slots_->device().out_cap,
                                  count * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
  comm_->wait(stream_);
  // a free slot stays in the batch until the slots above it empty: keep it inert and short
  for (int32_t* f : {slots_->device().live, slots_->device().cache_len, slots_->device().drafter_len,
                     slots_->device().ctx_count})
    write_field(f, slot, 0);
  r.generated = count;
  r.state = state;
  r.slot = -1;
  slot_owner_[slot] = -1;
  slot_len_[slot] = 0;
}

void Engine::admit(kd_step_report* report) {
  while (!waiting_.empty()) {
    const auto free = std::find(slot_owner_.begin(), slot_owner_.end(), int64_t{-1});
    if (free == slot_owner_.end()) return;
    Request& r = requests_.at(waiting_.front());
    if (!r.ar) {  // a round has one block size: wait until the running DDTree requests with another finish
      for (int64_t owner : slot_owner_)
        if (owner >= 0 && !requests_.at(owner).ar && requests_.at(owner).block != r.block) return;
    }
    waiting_.pop_front();
    start_request(r, static_cast<int>(free - slot_owner_.begin()));
    ++report->admitted;
    if (r.state == KD_REQ_DONE) ++report->finished;
  }
}

int Engine::running_batch() const {
  for (int s = limits_.slots - 1; s >= 0; --s)
    if (slot_owner_[s] >= 0) return s + 1;
  return 0;
}

int Engine::prefix_bound(int needed) const {
  int bound = kMinPrefixBucket;
  while (bound < needed) bound *= 2;
  return std::min(bound, limits_.max_tokens);
}

void Engine::run_round(bool tree, bool want_tree, kd_step_report* report) {
  const auto t0 = Clock::now();
  RoundShape shape;
  shape.tree = tree;
  shape.batch = running_batch();
  int longest = 0, budget = 0, block = 1;
  bool sample = false;
  std::vector<int> members;
  for (int s = 0; s < shape.batch; ++s) {
    const int64_t owner = slot_owner_[s];
    if (owner < 0) continue;
    const Request& r = requests_.at(owner);
    longest = std::max(longest, slot_len_[s]);
    if (r.ar != !tree) continue;
    members.push_back(s);
    budget = std::max(budget, r.budget);
    block = std::max(block, r.block);
    sample = sample || r.temperature > 0.0f;
  }
  if (members.empty()) return;
  shape.rows = tree ? budget + 1 : 1;
  shape.block = tree ? block : 1;
  shape.topk = tree ? std::min(budget, tdims_.vocab) : 0;
  shape.sample = sample;
  shape.max_prefix = prefix_bound(longest);
  const RoundTimes times = round_->run(shape, stream_);
  const RoundReport* rep = round_->report();
  const double wall = seconds_since(t0);
  report->rounds += 1;
  report->batch = std::max(report->batch, shape.batch);
  report->graph_replayed = report->graph_replayed || times.graph;
  report->collectives += times.collectives;
  report->collective_us += times.collective_us;
  float gpu_us = 0.0f;
  for (int i = 0; i < 4; ++i) {
    report->stage_us[i] += times.stage_us[i];
    gpu_us += times.stage_us[i];
  }
  report->stage_us[4] += std::max(0.0f, static_cast<float>(wall * 1e6) - gpu_us);
  if (want_tree && tree && report->sampled_slot < 0) {
    // one tree per step for the monitor, taken from the slots in turn
    for (size_t k = 0; k < members.size(); ++k) {
      const int s = members[(static_cast<size_t>(sampled_slot_ + 1) + k) % members.size()];
      if (rep[s].accept_len <= 0) continue;
      const DecodeRound::TreeSample t = round_->tree_of(s, shape, stream_);
      sampled_slot_ = s;
      report->sampled_slot = s;
      report->sample_request = slot_owner_[s];
      report->sample_n = t.n;
      for (int i = 0; i <= t.n && i < shape.rows; ++i) {
        report->sample_parent[i] = t.parent[i];
        report->sample_token[i] = t.token[i];
      }
      report->sample_accept_len = t.accept_len;
      for (int j = 0; j < t.accept_len && j < static_cast<int>(t.accepted.size()); ++j)
        report->sample_accepted[j] = t.accepted[j];
      break;
    }
  }
  for (int s : members) {
    const RoundReport& x = rep[s];
    Request& r = requests_.at(slot_owner_[s]);
    if (x.accept_len <= 0) continue;
    r.rounds += 1;
    r.accepted += x.accept_len;
    r.generated = x.out_count;
    r.decode_s += wall;
    slot_len_[s] += x.accept_len;
    if (report->n_records < KD_MAX_BATCH) {
      kd_round_record& rec = report->records[report->n_records++];
      rec.request = r.id;
      rec.round = r.rounds - 1;
      rec.accept_len = x.accept_len;
      rec.tree_size = x.tree_size;
      rec.tree_depth = x.tree_depth;
      rec.tokens = x.out_count;
      rec.emitted = x.emitted;
      rec.done = x.done;
    }
    if (x.done) {
      finish_request(r, KD_REQ_DONE);
      ++report->finished;
    }
  }
}

void Engine::step(bool want_tree, kd_step_report* report) {
  std::memset(report, 0, sizeof *report);
  report->sampled_slot = -1;
  report->collectives_run = comm_->runs() ? 1 : 0;
  admit(report);
  run_round(/*tree=*/true, want_tree, report);
  run_round(/*tree=*/false, want_tree, report);
  report->waiting = static_cast<int32_t>(waiting_.size());
  report->running = static_cast<int32_t>(std::count_if(slot_owner_.begin(), slot_owner_.end(),
                                                       [](int64_t o) { return o >= 0; }));
}

void Engine::request_get(int64_t id, kd_request_info* info, int32_t* tokens, int32_t capacity) {
  auto it = requests_.find(id);
  if (it == requests_.end()) fail(KD_BAD_STATE, "no request " + std::to_string(id));
  const Request& r = it->second;
  std::vector<int32_t> running;
  const std::vector<int32_t>* out = &r.tokens;
  int count = r.generated;
  if (r.state == KD_REQ_RUNNING) {
    count = read_field(slots_->device().out_count, r.slot);
    running.resize(count);
    if (count > 0)
      KD_CUDA_CHECK(cudaMemcpyAsync(running.data(),
                                    slots_->device().out_tokens + static_cast<int64_t>(r.slot) * slots_->device().out_cap,
                                    count * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
    comm_->wait(stream_);
    out = &running;
  }
  if (info) {
    info->id = r.id;
    info->state = r.state;
    info->slot = r.slot;
    info->tokens = count;
    info->rounds = r.rounds;
    info->accepted = r.accepted;
    info->prefill_s = r.prefill_s;
    info->decode_s = r.decode_s;
  }
  if (tokens && capacity > 0)
    std::copy_n(out->begin(), std::min<size_t>(capacity, out->size()), tokens);
}

void Engine::release(int64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  if (it->second.state == KD_REQ_RUNNING || it->second.state == KD_REQ_WAITING)
    fail(KD_BAD_STATE, "release: request " + std::to_string(id) + " has not finished (cancel it first)");
  requests_.erase(it);
}

}  // namespace kdtree::engine
