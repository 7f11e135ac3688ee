// One sequence's share of a worker step, as the model runs it (engine_step.cpp schedules and
// completes; run_job.cpp runs the forward, plain or speculative). Internal to the runtime.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <span>
#include <vector>

#include "rank_messages.hpp"
#include "scheduler.hpp"
#include "tandem/kernels/sampling.hpp"
#include "tandem/model/model.hpp"
#include "tandem/model/paged_kv.hpp"
#include "tandem/spec/device_drafter.hpp"
#include "tandem/spec/drafter.hpp"
#include "token_constraint.hpp"

namespace tandem::engine::runtime {

struct Job {
  sched::Work work;
  std::vector<std::int32_t> tokens;  // tokens[start, start + count)
  std::vector<std::int32_t> table;   // block table at schedule time (covers work.draft slots too)
  kernels::SamplingParams sampling;
  std::shared_ptr<TokenConstraint> constraint;
  std::mt19937_64* rng = nullptr;
  std::span<float> state;            // the request's recurrent state (hybrid models on the CPU; only this thread touches it)
  int state_slot = -1;               // its slot: a device model's (model::PagedWork::state_slot), or a CPU group's workers'
  // What the step yields when work.samples: the tokens in order (accepted drafts, then the
  // target's own) with their logprobs under the raw target distribution.
  std::vector<std::int32_t> emitted;
  std::vector<float> logprobs;
  int drafted = 0, accepted = 0;     // this step's speculation (0, 0 when it drafted nothing)
  // Timings of a decoding step (for spec::StepCost): the target forward over forward_tokens tokens
  // and the drafter's proposal; forward_tokens 0 when the job was a prefill chunk.
  int forward_tokens = 0;
  double forward_seconds = 0, draft_seconds = 0;
  // Seconds of the target forwards that verified this job's drafts (a rewind included); on a
  // device, where one forward verifies every drafting job, booked once like draft_seconds.
  double verify_seconds = 0;
  // Seconds the drafter spent on its context rows for this job's tokens (prefill chunk or the
  // verified block); the CPU path only (on a device the work is asynchronous: run_device_spec.cpp).
  double context_seconds = 0;
  std::string error;
  bool group_failed = false;         // the error is the tensor-parallel group's: the engine ends
};

// What a job needs besides itself. `announce` tells the worker ranks about a forward (tokens,
// start, table, logit rows of the last n tokens, and for a recurrent model what the workers do with
// the job's state slot first) before it runs; empty on a single rank.
struct JobContext {
  const model::Model& model;
  model::PagedKvPool& pool;
  model::PagedKvPool* draft_pool = nullptr;  // with a drafter
  const spec::Drafter* drafter = nullptr;
  std::function<tandem::Status(const Job&, std::span<const std::int32_t> tokens, int logit_rows, StateOp op)> announce;
};

// A job's plain share of a device step: its tokens, logits if it samples, its state slot, and the
// kept states its chunk starts from or ends in (prefix caching of a recurrent model).
model::PagedWork device_work(const Job& j);

// Runs the job's forward(s) and fills emitted/logprobs (or error).
void run_job(const JobContext& ctx, Job& job);

// Slots whose recurrent states every rank keeps aside, or puts back, before a step (DFlash on a
// recurrent model, run_device_spec.cpp: each rank holds its heads' part of each state).
struct StateSlots {
  std::span<const int> keep, restore;
};

// Under tensor parallelism: tells the worker ranks a device step before the head runs it (they run
// the same one: its collectives pair up). Empty: one rank.
using AnnounceStep = std::function<tandem::Status(std::span<const model::PagedWork>, StateSlots)>;

// Every job of one step of a device model (Model::step on its device pool), sampled; a failure is
// every job's.
void run_device_step(model::Model& m, std::vector<Job>& jobs, const AnnounceStep& announce = {});

// The same with a drafter on the device (run_device_spec.cpp): one batched proposal for the jobs
// that draft, one target step verifying their blocks beside the other jobs' work, context rows for
// every token of it, then acceptance or sampling per job. The drafter runs on this rank alone; each
// target step is announced.
void run_device_spec_step(model::Model& m, spec::DeviceDrafter& drafter, std::vector<Job>& jobs, const AnnounceStep& announce = {});

// Pieces both speculative paths share (run_job.cpp):
// Samples one token from a job's logits (after its constraint's mask) into emitted/logprobs.
void sample_into(Job& j, std::vector<float>& logits);
// A sampled draft token from one row of draft logits; its distribution q is appended to `q`.
std::int32_t draw_draft(Job& j, std::span<const float> draft_logits, std::vector<double>& q);
// Acceptance of `drafts` against the target's logits of the block (drafts.size() + 1 rows): fills
// emitted, logprobs (raw target distribution), drafted and accepted. `q`: the drafts' distributions
// when the job samples.
void accept_block(Job& j, std::span<const std::int32_t> drafts, std::span<const double> q, std::span<const float> logits, int V);
// Greedy acceptance from the target's greedy picks of the block's rows (Model::step_sample;
// drafts.size() + 1 of them): the same tokens, and each emitted token's logprob is its row's.
void accept_block_picked(Job& j, std::span<const std::int32_t> drafts, std::span<const kernels::Sampled> rows);
// Whether the device can sample a step (Model::step_sample) instead of handing the host its
// logits: no job that samples has a constraint (its mask needs the logits), and no job that drafts
// samples (rejection sampling needs both distributions).
bool device_sampling_serves(const std::vector<Job>& jobs);
// What step_sample takes for a job's logit rows: `rows` of them, each with the job's parameters
// and a uniform drawn from its generator as sample_cpu would draw it (none when greedy); the
// rows of a drafted block are greedy (greedy acceptance).
void add_sampling_rows(Job& j, int rows, bool drafted, std::vector<kernels::SamplingParams>& params, std::vector<double>& uniforms);

}  // namespace tandem::engine::runtime
