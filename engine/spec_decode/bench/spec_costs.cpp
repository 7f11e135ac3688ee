#include "spec_costs.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <stdexcept>

#include "event_timer.hpp"
#include "tandem/model/cuda_model.hpp"
#include "tandem/spec/dflash_cuda.hpp"

namespace tandem::spec::bench {

namespace {

template <class F>
double mean_seconds(int warmup, int iters, F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

template <class R>
void must(const R& r, const char* what) {
  if (!r) throw std::runtime_error(std::string(what) + ": " + r.error().message);
}

// Where a decode step's and a verification's device time goes: `steps` eager steps of each with a
// CUDA event after every op (queued behind a host wait, so the ops run back to back as in a graph;
// an op's time is its kernels plus its launch gap), per op and step, side by side.
void print_op_profile(model::CudaModel& target, std::span<const model::PagedWork> decode, std::span<const model::PagedWork> verify,
                      int batch, int k, int steps) {
  tandem::bench::EventTimer timer;
  timer.queue_ahead = true;
  target.set_enforce_eager(true);
  for (int i = 0; i < 2; ++i) must(target.step(decode), "decode"), must(target.step(verify), "verify");  // eager warm-up
  target.set_op_timer(&timer);
  auto ops_of = [&](std::span<const model::PagedWork> work, const char* what) {
    timer.ops.clear();
    for (int i = 0; i < steps; ++i) must(target.step(work), what), timer.end_step();
    return timer.ops;
  };
  const auto dec = ops_of(decode, "profiled decode");
  const auto ver = ops_of(verify, "profiled verify");
  target.set_op_timer(nullptr);
  target.set_enforce_eager(false);
  if (timer.failed_marks > 0)
    std::printf("warning: %d op marks dropped (CUDA could not create or record an event): the profile is incomplete\n",
                timer.failed_marks);
  std::vector<std::pair<std::string, double>> rows;
  double td = 0, tv = 0;
  for (const auto& [op, o] : ver) rows.push_back({op, o.us / steps}), tv += o.us / steps;
  for (const auto& [op, o] : dec) {
    td += o.us / steps;
    if (!ver.count(op)) rows.push_back({op, 0.0});
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::printf("\nOp profile, batch %d: a decode step (%d rows) vs a verification (%d rows), eager, %d steps each, us per step\n\n"
              "| op | decode us | verify us | verify - decode |\n|---|---|---|---|\n",
              batch, batch, batch * (k + 1), steps);
  for (const auto& [op, us] : rows) {
    const auto d = dec.find(op);
    const double du = d == dec.end() ? 0.0 : d->second.us / steps;
    std::printf("| %s | %.1f | %.1f | %+.1f |\n", op.c_str(), du, us, us - du);
  }
  std::printf("| total | %.1f | %.1f | %+.1f |\n", td, tv, tv - td);
  std::fflush(stdout);
}

// Where an eager proposal's device time goes: `steps` proposals with a CUDA event after every op
// of the drafter (as print_op_profile), us per proposal.
void print_drafter_profile(spec::DeviceDrafter& drafter, std::span<const spec::DraftItem> items, int steps) {
  tandem::bench::EventTimer timer;
  timer.queue_ahead = true;
  drafter.set_op_timer(&timer);
  for (int i = 0; i < steps; ++i) must(drafter.propose(items, false), "profiled propose"), timer.end_step();
  drafter.set_op_timer(nullptr);
  std::vector<std::pair<std::string, tandem::bench::EventTimer::Op>> rows(timer.ops.begin(), timer.ops.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.order < b.second.order; });
  std::printf("\nDrafter profile: an eager proposal of %zu x %d rows, %d proposals, us per proposal\n\n"
              "| op | launches' marks per proposal | us |\n|---|---|---|\n",
              items.size(), items.empty() ? 0 : items[0].n + 1, steps);
  double total = 0;
  for (const auto& [op, o] : rows) {
    std::printf("| %s | %.0f | %.1f |\n", op.c_str(), static_cast<double>(o.calls) / steps, o.us / steps);
    total += o.us / steps;
  }
  std::printf("| total | | %.1f |\n", total);
  std::fflush(stdout);
}

}  // namespace

// long-function: a measurement script: each device cost measured, then the table of them, in order.
void print_costs(const std::string& target_dir, const std::string& drafter_dir, int batch, int k,
                 const std::vector<std::pair<std::string, double>>& lengths) {
  const int max_len = 1024, block = 16, per_seq = max_len / block, prompt = 128;
  model::CudaOptions o;
  o.max_num_seqs = batch;
  o.max_model_len = max_len;
  o.max_logit_rows = batch * (k + 1);
  auto m = model::load_cuda_model(target_dir, o);
  must(m, "target");
  spec::DFlashCudaOptions d;
  d.max_num_seqs = batch;
  d.max_model_len = max_len;
  auto dr = spec::load_dflash_cuda(drafter_dir, *m.value(), d);
  must(dr, "drafter");
  model::CudaModel& target = *m.value();
  spec::DeviceDrafter& drafter = *dr.value();
  must(target.make_device_pool(batch * per_seq, block), "pool");
  must(drafter.make_pool(batch * per_seq, block), "drafter pool");

  const int V = target.vocab_size();
  std::mt19937 rng(11);
  std::vector<std::vector<std::int32_t>> tables(static_cast<size_t>(batch)), prompts(tables.size()), blocks(tables.size());
  std::vector<std::int32_t> one(1, 5);
  for (int s = 0; s < batch; ++s) {
    for (int b = 0; b < per_seq; ++b) tables[static_cast<size_t>(s)].push_back(s * per_seq + b);
    for (int t = 0; t < prompt; ++t) prompts[static_cast<size_t>(s)].push_back(static_cast<std::int32_t>(2 + rng() % static_cast<unsigned>(V - 2)));
    for (int t = 0; t <= k; ++t) blocks[static_cast<size_t>(s)].push_back(static_cast<std::int32_t>(2 + rng() % static_cast<unsigned>(V - 2)));
  }
  std::vector<model::PagedWork> prefill, decode, verify, mixed;
  std::vector<spec::DraftItem> items;
  for (size_t s = 0; s < tables.size(); ++s) {
    prefill.push_back({prompts[s], 0, tables[s], true});
    decode.push_back({one, prompt, tables[s], true});
    verify.push_back({blocks[s], prompt, tables[s], false, -1, true});
    items.push_back({one[0], prompt, k, tables[s]});
    // Mixed draft lengths (the adaptive policy at batch > 1): sequence s verifies 1 + (s % k + 1)
    // tokens, the first one k; sequence 1 decodes plainly where k > 1.
    const int n = s == 0 ? k : static_cast<int>(s) % k + 1;
    if (s == 1 && k > 1) mixed.push_back({one, prompt, tables[s], true});
    else mixed.push_back({std::span<const std::int32_t>(blocks[s]).first(static_cast<size_t>(n) + 1), prompt, tables[s], false, -1, true});
  }
  must(target.step(prefill), "prefill");
  must(drafter.add_context(prefill), "prefill context");

  const int warmup = 5, iters = 200;
  const double t_plain = mean_seconds(warmup, iters, [&] { must(target.step(decode), "decode"); });
  const double t_draft = mean_seconds(warmup, iters, [&] { must(drafter.propose(items, false), "propose"); });
  const double t_verify = mean_seconds(warmup, iters, [&] {
    must(target.step(verify), "verify");
    must(drafter.add_context(verify), "context");
  });
  // What the drafter's context rows add: to a plain step (the engine hands them over after every
  // step while a drafter is loaded, drafting or not; the drafter copies them aside and writes them
  // before its next proposal, or when a step's worth of rows waits) and to a verification.
  const double t_plain_ctx = mean_seconds(warmup, iters, [&] {
    must(target.step(decode), "decode");
    must(drafter.add_context(decode), "context");
  });
  const double t_verify_fwd = mean_seconds(warmup, iters, [&] { must(target.step(verify), "verify"); });
  // A whole DFlash step as the engine runs it: the proposal (which first writes the last step's
  // context rows), the verification and the hand-over of its rows.
  const double t_cycle = mean_seconds(warmup, iters, [&] {
    must(drafter.propose(items, false), "propose");
    must(target.step(verify), "verify");
    must(drafter.add_context(verify), "context");
  });
  const double t_mixed = mean_seconds(warmup, iters, [&] {
    must(target.step(mixed), "mixed verify");
    must(drafter.add_context(mixed), "context");
  });
  // The same steps reading back each row's greedy token instead of its logits (step_greedy): what
  // the logits' copy to the host costs a step (V floats a row; 8 rows a block when verifying).
  const double g_plain = mean_seconds(warmup, iters, [&] { must(target.step_greedy(decode), "greedy decode"); });
  const double g_verify = mean_seconds(warmup, iters, [&] {
    must(target.step_greedy(verify), "greedy verify");
    must(drafter.add_context(verify), "context");
  });
  // The same two target steps without CUDA graphs, for comparison (the engine replays graphs for
  // both unless --enforce-eager).
  target.set_enforce_eager(true);
  const double e_plain = mean_seconds(warmup, iters, [&] { must(target.step(decode), "decode"); });
  const double e_verify = mean_seconds(warmup, iters, [&] {
    must(target.step(verify), "verify");
    must(drafter.add_context(verify), "context");
  });
  target.set_enforce_eager(false);
  d.enforce_eager = true;
  auto eager_drafter = spec::load_dflash_cuda(drafter_dir, target, d);
  must(eager_drafter, "eager drafter");
  must(eager_drafter.value()->make_pool(batch * per_seq, block), "eager drafter pool");
  must(eager_drafter.value()->add_context(prefill), "eager drafter context");  // stale features: for timing only
  const double e_draft = mean_seconds(warmup, iters, [&] { must(eager_drafter.value()->propose(items, false), "propose"); });
  const double spec = t_draft + t_verify;
  std::printf("| batch %d, k %d | t_plain %.3f ms (eager %.3f) | t_draft %.3f ms (eager %.3f) | t_verify %.3f ms (eager %.3f) | "
              "break-even L %.2f |",
              batch, k, t_plain * 1e3, e_plain * 1e3, t_draft * 1e3, e_draft * 1e3, t_verify * 1e3, e_verify * 1e3, spec / t_plain);
  for (const auto& [name, L] : lengths) std::printf(" %s: L %.2f -> bound %.2fx |", name.c_str(), L, L * t_plain / spec);
  std::printf("\n| batch %d, k %d | context rows: plain step + rows %.3f ms (+%.3f) | verify forward alone %.3f ms (rows +%.3f) |"
              " mixed lengths verify %.3f ms |\n",
              batch, k, t_plain_ctx * 1e3, (t_plain_ctx - t_plain) * 1e3, t_verify_fwd * 1e3, (t_verify - t_verify_fwd) * 1e3,
              t_mixed * 1e3);
  // The issue-21 ratios: a verification of k + 1 tokens (context rows included) and a proposal,
  // each against a plain decode step of the same batch.
  std::printf("| batch %d, k %d | ratios to t_plain: verify %.2fx (goal <= 1.3x), mixed verify %.2fx, proposal %.2fx (goal <= 0.3x), "
              "whole step (proposal + verify + context) %.2fx (goal <= 1.6x) |\n",
              batch, k, t_verify / t_plain, t_mixed / t_plain, t_draft / t_plain, t_cycle / t_plain);
  std::printf("| batch %d, k %d | tokens read back instead of logits: t_plain %.3f ms, t_verify %.3f ms, ratio %.2fx |\n", batch, k,
              g_plain * 1e3, g_verify * 1e3, g_verify / g_plain);
  std::fflush(stdout);
  print_op_profile(target, decode, verify, batch, k, 20);
  print_drafter_profile(*eager_drafter.value(), items, 20);
}

}  // namespace tandem::spec::bench
