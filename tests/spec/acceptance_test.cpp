// Verification rules: greedy acceptance, and the losslessness of speculative sampling checked
// statistically (chi-square against the target distribution, with a fixed seed).
#include <doctest/doctest.h>

#include <algorithm>

#include <cmath>
#include <random>
#include <vector>

#include "tandem/spec/acceptance.hpp"
#include "tandem/spec/draft_length.hpp"

using namespace tandem;
using spec::Verdict;

namespace {

// Pearson's statistic of `counts` against probabilities `p` (cells with p = 0 must be empty).
double chi_square(const std::vector<long>& counts, const std::vector<double>& p, long n) {
  double x = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      CHECK(counts[i] == 0);
      continue;
    }
    const double e = p[i] * static_cast<double>(n);
    x += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
  }
  return x;
}

}  // namespace

TEST_CASE("greedy acceptance keeps the drafts equal to the target's argmax, then takes the target's token") {
  const int V = 4;
  // Target argmax per row: 2, 1, 3, 0.
  const std::vector<float> logits = {0, 1, 5, 2, /**/ 0, 9, 1, 1, /**/ 1, 1, 1, 4, /**/ 7, 0, 0, 0};
  Verdict v = spec::accept_greedy(std::vector<std::int32_t>{2, 1, 3}, logits, V);
  CHECK(v.accepted == 3);
  CHECK(v.next == 0);  // the bonus token from the last row
  v = spec::accept_greedy(std::vector<std::int32_t>{2, 0, 3}, logits, V);
  CHECK(v.accepted == 1);
  CHECK(v.next == 1);  // the correction: the target's own token at the first mismatch
  v = spec::accept_greedy(std::vector<std::int32_t>{3, 1, 3}, logits, V);
  CHECK(v.accepted == 0);
  CHECK(v.next == 2);
}

TEST_CASE("greedy acceptance from the rows' picks gives the verdict of their logits") {
  const int V = 4;
  const std::vector<float> logits = {0, 1, 5, 2, /**/ 0, 9, 1, 1, /**/ 1, 1, 1, 4, /**/ 7, 0, 0, 0};
  const std::vector<std::int32_t> picks = {2, 1, 3, 0};
  for (const std::vector<std::int32_t>& drafts :
       {std::vector<std::int32_t>{2, 1, 3}, {2, 0, 3}, {3, 1, 3}, {2, 1, 0}, {2}, {}}) {
    CAPTURE(drafts.size());
    const std::span<const std::int32_t> rows(picks.data(), drafts.size() + 1);
    const Verdict a = spec::accept_greedy(drafts, logits, V), b = spec::accept_greedy_tokens(drafts, rows);
    CHECK(a.accepted == b.accepted);
    CHECK(a.next == b.next);
  }
}

TEST_CASE("speculative sampling emits tokens distributed as plain sampling from the target (chi-square)") {
  const int V = 5;
  kernels::SamplingParams sp;
  sp.temperature = 0.8f;
  // Two verification rows and a bonus row; the drafter's distributions differ from the target's.
  const std::vector<float> target = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, /**/ 0.3f, 1.5f, 0.3f, -1.0f, 0.8f, /**/ 0, 0, 0, 0, 3};
  const std::vector<float> draft_logits = {2.5f, 0.0f, 0.0f, 0.5f, -1.0f, /**/ 0.0f, 0.0f, 2.0f, 0.0f, 0.0f};
  std::vector<double> q;
  for (int i = 0; i < 2; ++i) {
    auto qi = spec::sampling_distribution(std::span<const float>(draft_logits).subspan(static_cast<size_t>(i * V), V), sp);
    q.insert(q.end(), qi.begin(), qi.end());
  }
  const auto p0 = spec::sampling_distribution(std::span<const float>(target).subspan(0, V), sp);
  const auto p1 = spec::sampling_distribution(std::span<const float>(target).subspan(V, V), sp);

  std::mt19937_64 rng(12345);
  const long N = 40000;
  std::vector<long> first(V, 0), second(V, 0), drafted_first(V, 0);
  long seconds = 0;
  for (long n = 0; n < N; ++n) {
    std::vector<std::int32_t> drafts;
    for (int i = 0; i < 2; ++i) drafts.push_back(spec::draw(std::span<const double>(q).subspan(static_cast<size_t>(i * V), V), rng));
    const Verdict v = spec::accept_sampled(drafts, q, target, V, sp, rng);
    const std::int32_t t0 = v.accepted >= 1 ? drafts[0] : v.next;
    ++first[static_cast<size_t>(t0)];
    ++drafted_first[static_cast<size_t>(drafts[0])];
    if (v.accepted >= 1) {  // the step also produced a second token: it must follow p1
      ++second[static_cast<size_t>(v.accepted >= 2 ? drafts[1] : v.next)];
      ++seconds;
    }
  }
  // 4 degrees of freedom: P(chi2 > 18.47) = 0.001. Fixed seed, so the outcome is deterministic.
  CHECK(chi_square(first, p0, N) < 18.47);
  CHECK(chi_square(second, p1, seconds) < 18.47);
  CHECK(seconds > N / 10);
  // The statistic has power: the drafter's own samples, which plain sampling would not give, fail it.
  CHECK(chi_square(drafted_first, p0, N) > 1000);
}

TEST_CASE("a draft the target cannot produce is always rejected and the residual excludes it") {
  const int V = 3;
  kernels::SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 2;  // the target can only produce its two most likely tokens: 0 and 1
  const std::vector<float> target = {2.0f, 1.0f, 0.0f, /**/ 0, 0, 0};
  const std::vector<double> q = {0.0, 0.0, 1.0};  // the drafter is sure of token 2
  std::mt19937_64 rng(7);
  for (int n = 0; n < 200; ++n) {
    const Verdict v = spec::accept_sampled(std::vector<std::int32_t>{2}, q, target, V, sp, rng);
    CHECK(v.accepted == 0);
    CHECK(v.next != 2);
  }
}

TEST_CASE("the adaptive draft length follows acceptance and probes again after plain steps") {
  spec::DraftLength d(4);
  CHECK(d.next() == 4);  // optimistic at first
  for (int i = 0; i < 20; ++i) d.record(4, 4);
  CHECK(d.next() == 4);
  // Only the first draft is ever accepted: the later positions stop paying.
  for (int i = 0; i < 20; ++i) d.record(4, 1);
  CHECK(d.next() == 1);
  // Nothing is accepted: drafting stops, with a full-length probe every 16 plain steps.
  for (int i = 0; i < 20; ++i) d.record(1, 0);
  int probes = 0, plain = 0;
  for (int i = 0; i < 32; ++i) {
    const int k = d.next();
    if (k == 0) {
      ++plain;
    } else {
      ++probes;
      CHECK(k == 4);
    }
  }
  CHECK(probes == 2);
  CHECK(plain == 30);
}

TEST_CASE("a draft position no verification reached is taken to be as likely as the one before it") {
  spec::DraftLength d(7);
  CHECK(d.estimate(6) == 1.0);  // nothing known: optimistic
  // Short drafts, the first kept a quarter of the time: positions 1.. are never reached.
  for (int i = 0; i < 40; ++i) d.record(1, i % 4 == 0 ? 1 : 0);
  CHECK(d.estimate(0) == doctest::Approx(0.25).epsilon(0.5));
  CHECK(d.estimate(6) == d.estimate(0));  // not 1.0: the later positions are not expected to be free
  // Without costs the chance rule then stops at the position where the product falls below 0.2.
  CHECK(d.next() <= 1);
  // Once reached, a position keeps its own estimate.
  for (int i = 0; i < 20; ++i) d.record(3, 3);
  CHECK(d.estimate(2) > 0.9);
  CHECK(d.estimate(4) == d.estimate(2));
}

namespace {
// A size's first timing is a warm-up that the second replaces: these record each twice.
void time_twice(spec::StepCost& c, int tokens, double seconds) {
  c.record_forward(tokens, seconds);
  c.record_forward(tokens, seconds);
}
void time_draft_twice(spec::StepCost& c, double seconds) {
  c.record_draft(seconds);
  c.record_draft(seconds);
}
}  // namespace

TEST_CASE("with step costs a probe drafts only as long as costs at most probe_cost plain steps") {
  spec::StepCost gpu(8), cpu(8);
  for (int n = 1; n <= 8; ++n) {
    time_twice(gpu, n, 1.0 + 0.02 * n);  // verifying is nearly free
    time_twice(cpu, n, 1.0 * n);         // every verified token costs a decode
  }
  time_draft_twice(gpu, 0.2);
  time_draft_twice(cpu, 0.2);
  auto never = [] {
    spec::DraftLength d(7);
    for (int i = 0; i < 20; ++i) d.record(7, 0);
    return d;
  };
  for (auto* cost : {&gpu, &cpu}) {
    spec::DraftLength d = never();
    // gpu: a probe costs at most 1.5 plain steps, so one every 16; cpu: the shortest probe, one
    // draft, costs step(2) = 2.2 plain steps, so probes come 16 x 1.2 / 0.5 = 38.4 -> 39 apart and
    // cost no more than the 0.5 plain steps per 16 that the policy allows.
    const int interval = cost == &gpu ? 16 : 39;
    CHECK(d.probe_interval(cost, cost->step(1).value()) == interval);
    int probes = 0, plain = 0, longest = 0;
    double spent = 0;  // plain steps' worth of time beyond plain decoding
    for (int i = 0; i < 2 * interval; ++i) {
      const int k = d.next(cost);
      if (k == 0) {
        ++plain;
      } else {
        ++probes, longest = std::max(longest, k);
        spent += cost->step(k + 1).value() / cost->step(1).value() - 1.0;
      }
    }
    CHECK(probes == 2);
    CHECK(plain == 2 * interval - 2);
    CHECK(spent / (2 * interval) <= 0.5 / 16 + 1e-9);
    // gpu: step(8) = 1.16 + 0.2 <= 1.5 x 1.02: the full 7; cpu: step(2) = 2.2 > 1.5: still one draft.
    CHECK(longest == (cost == &gpu ? 7 : 1));
  }
}

TEST_CASE("with measured step costs the draft length maximises expected tokens per second") {
  // Every draft position is accepted half the time: E(k) = 1 + 1/2 + 1/4 + ... (< 2).
  auto half = [] {
    spec::DraftLength d(4);
    for (int i = 0; i < 40; ++i) d.record(4, i % 2);  // alternately: first refused, first kept
    return d;
  };
  spec::StepCost flat(5), linear(5);
  for (int n = 1; n <= 5; ++n) {
    time_twice(flat, n, 1.0);        // verification is nearly free (a GPU's case)
    time_twice(linear, n, 1.0 * n);  // every verified token costs a decode (the CPU path's case)
  }
  time_draft_twice(flat, 0.1);
  time_draft_twice(linear, 0.1);
  spec::DraftLength a = half();
  CHECK(a.next(&flat) >= 1);    // drafting raises tokens per second
  spec::DraftLength b = half();
  CHECK(b.next(&linear) == 0);  // it cannot: decode plainly
  // Without a timed plain decode it decodes plainly (which times one); without costs at all, or
  // with use_cost off, the chance rule decides.
  spec::StepCost none(5);
  spec::DraftLength c = half();
  CHECK(c.next() >= 1);
  CHECK(c.next(&none) == 0);
  spec::DraftLength chance_only(4, {.use_cost = false});
  CHECK(chance_only.next(&none) == 4);
  // ... and if no plain decode gets timed for probe_every steps, the chance rule takes over.
  spec::DraftLength starved(4);
  for (int i = 0; i < 16; ++i) CHECK(starved.next(&none) == 0);
  CHECK(starved.next(&none) == 4);
  // The first sample of a size is a warm-up (a CUDA graph captured): one sample is not a timing,
  // and the second replaces it.
  spec::StepCost warm(2);
  warm.record_forward(1, 50.0);
  CHECK_FALSE(warm.step(1).has_value());
  warm.record_forward(1, 1.0);
  CHECK(warm.step(1).value() == 1.0);
  // One stalled decode (10x the others) moves the estimate as a sample of 2x would, not 10x.
  spec::StepCost jitter(2);
  for (int i = 0; i < 20; ++i) jitter.record_forward(1, 1.0);
  jitter.record_forward(1, 10.0);
  CHECK(jitter.step(1).value() == doctest::Approx(1.1));
  for (int i = 0; i < 40; ++i) jitter.record_forward(1, 3.0);  // a lasting change comes through
  CHECK(jitter.step(1).value() == doctest::Approx(3.0).epsilon(0.02));
  // Sizes not timed are interpolated between timed ones and held flat beyond them.
  spec::StepCost some(8);
  time_twice(some, 1, 1.0);
  time_twice(some, 5, 3.0);
  CHECK(some.step(3).value() == doctest::Approx(2.0));
  CHECK(some.step(8).value() == doctest::Approx(3.0));
  CHECK_FALSE(some.step(9).has_value());
}
