// The serving engine on the CPU reference path. One worker thread loops:
//   schedule (continuous batching, chunked prefill, preemption)  ->  run every Work item through
//   the model against the paged KV pool  ->  sample  ->  scheduler.complete  ->  deliver events.
// submit() and cancel() may be called from any thread; events are delivered on the worker thread,
// outside the engine's lock, so a callback may submit or cancel (it should not block for long).
//
// Tensor parallelism: when the model was loaded into a group of N ranks, this engine is rank 0's
// (the head). It tells the worker ranks the pool geometry at start and announces every forward
// before running it (rank_messages.hpp), sends a heartbeat each second while idle, and a shutdown
// when it stops. A failure of the group is fatal: every request ends with the error, new ones are
// refused, and on_fatal is called once (tandem-serve exits on it).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kv_manager.hpp"
#include "scheduler.hpp"
#include "tandem/kernels/sampling.hpp"
#include "tandem/model/model.hpp"
#include "tandem/model/paged_kv.hpp"
#include "tandem/model/result.hpp"
#include "tandem/spec/draft_length.hpp"
#include "tandem/spec/device_drafter.hpp"
#include "tandem/spec/drafter.hpp"
#include "tandem/spec/step_cost.hpp"
#include "token_constraint.hpp"

namespace tandem::engine::runtime {

struct Job;  // step_job.hpp: one sequence's share of a worker step

using tandem::Result;
using RequestId = std::int64_t;
using sched::FinishReason;

struct EngineConfig {
  int max_model_len = 0;             // 0: the model's max_position_embeddings
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;  // token budget of one step (prefill chunks + decodes)
  int block_size = 16;
  std::string kv_cache_dtype = "auto";           // sizes the pool (see pool_plan.hpp)
  std::optional<std::uint64_t> kv_cache_memory;  // bytes; else a share of system memory
  double gpu_memory_utilization = 0.9;
  bool enable_prefix_caching = true;
  // A model with a recurrent state (glm5_next): how many copies of a sequence's state, each taken
  // at its prompt's last block boundary, prefix caching keeps (a hit resumes from one). -1: one
  // per `max_num_seqs` up to 8 (a few shared prefixes, system prompts and agents' contexts, make
  // most hits), within an eighth of the KV budget left after the sequences' own states; 0: prefix
  // caching off for such a model. Engine::start writes back the number it keeps.
  int prefix_state_copies = -1;
  std::function<void(const std::string&)> log;   // start-up lines; stderr when empty
  std::function<void(const std::string&)> on_fatal;  // the engine cannot go on (a rank was lost)
  std::chrono::milliseconds heartbeat{1000};     // idle heartbeat to worker ranks
  // Speculative decoding (engine/spec_decode): with a drafter, every target forward also feeds the
  // drafter's context, and decoding requests draft up to num_speculative_tokens tokens per step
  // (fewer when their own acceptance says drafting does not pay; none under a token constraint).
  std::shared_ptr<const spec::Drafter> drafter;
  // Or, for a model whose KV cache is on its device (CUDA), a drafter on that device
  // (spec/device_drafter.hpp; engine/spec_decode/cuda's load_dflash_cuda makes one). One or the other.
  std::shared_ptr<spec::DeviceDrafter> device_drafter;
  int num_speculative_tokens = 0;
  spec::DraftLengthPolicy draft_policy;
};

// One event per generated token; the last one carries the finish reason. A request that is
// cancelled or fails gets one final event without a token (reason abort, error set on failure).
struct TokenEvent {
  RequestId id = 0;
  std::optional<std::int32_t> token;
  float logprob = 0.0f;              // of `token` under the raw model distribution
  FinishReason finish = FinishReason::none;
  std::string error;
  // The request's speculative counts so far: draft tokens proposed, and accepted by the target.
  std::int64_t drafted = 0, accepted = 0;
  // Token events: seconds from submit() until the request was first scheduled (its queue time),
  // and the engine step that made the token. Tokens of one step (a verified draft) arrive
  // together, so an inter-token interval is measured per step, as vLLM does.
  double queued_seconds = 0;
  std::int64_t step = 0;
};

struct GenerateRequest {
  std::vector<std::int32_t> prompt;
  kernels::SamplingParams sampling;  // temperature 0: greedy
  std::optional<std::uint64_t> seed;  // same seed, same prompt, same params: same tokens
  std::vector<std::int32_t> stop_token_ids;
  bool ignore_eos = false;            // else the model's eos ids stop it too
  int max_tokens = 16;
  bool use_prefix_cache = true;       // false: neither reuse nor publish cached blocks
  std::shared_ptr<TokenConstraint> constraint;  // structured output: masks logits, may end the request
  std::function<void(const TokenEvent&)> on_event;
};

struct EngineMetrics {
  std::int64_t requests_running = 0, requests_waiting = 0;
  std::int64_t requests_finished = 0, requests_aborted = 0;
  std::int64_t prompt_tokens = 0;      // of accepted requests
  std::int64_t generation_tokens = 0;  // tokens delivered
  std::int32_t kv_blocks_used = 0, kv_blocks_total = 0;
  std::int64_t preemptions = 0;
  std::int64_t prefix_cache_hit_tokens = 0;  // prompt tokens whose KV came from the prefix cache
  std::int64_t steps = 0;
  // Speculative decoding: verifications with at least one draft, draft tokens, accepted drafts,
  // and per draft position (0 = first draft) how often it was proposed and accepted.
  std::int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  std::vector<std::int64_t> spec_drafted_at, spec_accepted_at;
  // The adaptive draft length's view (spec/draft_length.hpp): how often a decoding request's step
  // chose k drafts (index k; 0 = plain decoding), the measured cost of a step over n tokens
  // (index n, with the proposal when n > 1; 0 while not timed) and the acceptance rate per draft
  // position that new requests start from.
  std::vector<std::int64_t> spec_chosen_length;
  std::vector<double> spec_step_cost_seconds, spec_position_rate;
  // Where the time goes: wall seconds of the steps' model work (forwards, drafting, sampling),
  // and the drafter's part of it: proposing drafts, and adding context rows for the tokens the
  // target ran (on a device: the pass that writes the rows waiting for a proposal, timed on the
  // device; their copy after each step is not timed apart). Under tensor parallelism the drafter
  // runs on the head rank only, while the other ranks wait: its share of the step is what sharding
  // it could win back. spec_verify_seconds: the target forwards of the steps that verified drafts
  // (with their rewinds on a recurrent model); what a DFlash step costs beyond drafting and
  // verifying is model_seconds less both.
  double model_seconds = 0, spec_draft_seconds = 0, spec_context_seconds = 0, spec_verify_seconds = 0;
};

class Engine {
 public:
  // Sizes and allocates the pool, logs the "KV pool: ..." line and starts the worker.
  static Result<std::unique_ptr<Engine>> start(std::unique_ptr<model::Model> model, EngineConfig cfg);
  // Stops the worker; requests still open get an abort event.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request, or says why not (prompt too long for max-model-len, token outside the
  // vocabulary, bad sampling parameters, ...).
  Result<RequestId> submit(GenerateRequest r);
  // The client went away: the request leaves the scheduler and its blocks return to the pool at
  // once; its callback gets a final abort event. false when the id is unknown or already done.
  bool cancel(RequestId id);

  EngineMetrics metrics() const;
  const kv::PoolSize& pool() const { return pool_size_; }
  int max_model_len() const { return sched_cfg_.max_model_len; }
  const model::Model& model() const { return *model_; }

 private:
  struct RequestState;  // request_state.hpp
  struct PendingEvent {
    std::shared_ptr<RequestState> req;
    TokenEvent event;
  };

  Engine(std::unique_ptr<model::Model> model, std::unique_ptr<model::PagedKvPool> pool,
         std::unique_ptr<model::PagedKvPool> draft_pool, kv::PoolSize size, sched::SchedulerConfig sched_cfg,
         const EngineConfig& cfg);
  void loop();
  // One scheduler step; called with `lk` held, drops it while the model runs. Returns false when
  // the scheduler can make no progress at all.
  bool step(std::unique_lock<std::mutex>& lk);
  // The step's parts (engine_step.cpp), in order. Under the lock: what to run this step (and the
  // preempted requests' bookkeeping); each Work item as a Job with its request.
  sched::Step schedule();
  void gather_jobs(const sched::Step& st, std::vector<Job>& jobs, std::vector<std::shared_ptr<RequestState>>& reqs);
  // Without the lock: the forwards and sampling; returns the tensor-parallel group's failure, or "".
  std::string run_model(std::vector<Job>& jobs);
  // Under the lock again: failed jobs end their requests, timings and speculation are counted, and
  // each sampling job's tokens are collected for the scheduler (`emitted`).
  void record_jobs(const std::vector<Job>& jobs, const std::vector<std::shared_ptr<RequestState>>& reqs,
                   std::vector<PendingEvent>& events, std::vector<std::vector<sched::Token>>& emitted);
  void record_speculation(const Job& j, RequestState& r);
  // The scheduler keeps what it accepts (stop tokens, lengths); token and finish events follow.
  void complete(const sched::Step& st, const std::vector<Job>& jobs, const std::vector<std::shared_ptr<RequestState>>& reqs,
                const std::vector<std::vector<sched::Token>>& emitted, std::vector<PendingEvent>& events);
  void deliver(std::unique_lock<std::mutex>& lk, std::vector<PendingEvent> events);
  void fail_all(const std::string& why);
  // Tensor parallelism: the group failed; called with the lock held.
  void go_fatal(const std::string& why);

  std::unique_ptr<model::Model> model_;
  std::unique_ptr<model::PagedKvPool> pool_;
  // The drafter's context rows: same block geometry and tables as pool_ (null without a drafter).
  std::unique_ptr<model::PagedKvPool> draft_pool_;
  std::shared_ptr<const spec::Drafter> drafter_;
  std::shared_ptr<spec::DeviceDrafter> device_drafter_;  // its context pool is on the device
  bool drafting() const { return drafter_ || device_drafter_; }
  int num_spec_ = 0;
  spec::DraftLengthPolicy draft_policy_;
  spec::StepCost step_cost_{1};  // measured decode/verify costs (worker thread, under mu_)
  spec::DraftLength draft_prior_{0};  // acceptance over all requests: where new requests start
  kv::PoolSize pool_size_;
  sched::SchedulerConfig sched_cfg_;
  std::vector<std::int32_t> eos_ids_;
  const bool tp_;  // rank 0 of a tensor-parallel group
  std::function<void(const std::string&)> on_fatal_;
  std::chrono::milliseconds heartbeat_;

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable wake_;
  kv::KvManager kv_;
  sched::Scheduler sched_;
  std::unordered_map<RequestId, std::shared_ptr<RequestState>> requests_;
  std::vector<PendingEvent> pending_;  // abort events from cancel(), delivered by the worker
  RequestId next_id_ = 1;
  bool stop_ = false;
  EngineMetrics counters_;
  std::string fatal_;  // set once the group failed
  // The CPU path's kept recurrent states for prefix caching (kv::StateSnapshots names them; a
  // device model keeps its own on the device): filled on first use.
  std::vector<std::vector<float>> state_copies_;
  std::thread worker_;  // last: starts after everything above exists
};

// The KV blocks `cfg` allows `model` (what Engine::start would size before the group agrees):
// a worker rank's own count (WorkerOptions::own_kv_blocks).
Result<std::int64_t> pool_blocks(const model::Model& model, EngineConfig cfg);

}  // namespace tandem::engine::runtime
