// Adaptive draft length of one request, from its own running acceptance.
//
// For each draft position i the controller keeps a running estimate r_i of "position i is accepted,
// given positions before it were" (an exponential average over the verifications that reached i).
// A step with k proposals then yields E(k) = 1 + sum_{j<=k} prod_{i<=j} r_i tokens on average.
//   With step costs (step_cost.hpp): k maximises E(k) / cost(k + 1 tokens), k = 0 (plain decoding)
//   included, so drafting happens only where it is expected to raise tokens per second. Until a
//   plain decode is timed, k = 0 (that step times one; after `probe_every` such steps without a
//   timing, the chance rule below decides).
//   Without: position j is drafted while prod_{i<=j} r_i, its chance of being accepted at all, stays
//   at or above `min_chance`.
// When k comes out 0 the request decodes plainly (no drafter, no wider verify), and every
// `probe_every` plain steps it drafts once to measure again: the full length without costs, else
// the longest draft whose step costs at most `probe_cost` plain steps (at least one draft; where
// even that costs more, probes come proportionally less often, see probe_interval). Text where
// drafting does not pay then costs at most (probe_cost - 1) / probe_every of plain speed.
#pragma once
#include <cstddef>
#include <vector>

#include "tandem/spec/step_cost.hpp"

namespace tandem::spec {

struct DraftLengthPolicy {
  double min_chance = 0.2;   // without costs: draft position j while its chance of acceptance >= this
  bool use_cost = true;      // weigh acceptance against measured step costs when the engine has them
  double smoothing = 0.25;   // weight of the newest verification in each r_i
  int probe_every = 16;      // plain steps between probes once drafting stopped paying
  double probe_cost = 1.5;   // with costs: a probe's step costs at most this many plain steps
};

class DraftLength {
 public:
  DraftLength(int max_draft, DraftLengthPolicy p = {});
  // How many tokens to draft in the next step (0: decode plainly); `cost` when timings are known.
  int next(const StepCost* cost = nullptr);
  // A verification of `drafted` proposals kept the first `accepted`.
  void record(int drafted, int accepted);
  // r_i; a position no verification reached yet takes the estimate of the one before it.
  double estimate(int position) const;
  // How many tokens a probe drafts (see above); `plain` is cost->step(1) when cost is given.
  int probe_length(const StepCost* cost, double plain) const;
  // Plain steps between probes: probe_every, or more where a probe costs more than probe_cost
  // plain steps, so that probing never costs more than (probe_cost - 1) / probe_every.
  int probe_interval(const StepCost* cost, double plain) const;
  // A controller for a new request that starts from these estimates (the engine keeps one fed by
  // every verification, so a new request does not relearn from an optimistic start).
  DraftLength fresh() const {
    DraftLength d = *this;
    d.plain_steps_ = 0;
    return d;
  }

 private:
  int max_;
  DraftLengthPolicy p_;
  std::vector<double> rate_;  // r_i for positions 0 .. max-1 (position 0 is the first draft)
  std::vector<bool> tried_;   // whether a verification reached position i
  int plain_steps_ = 0;
  int untimed_steps_ = 0;  // steps decoded plainly to time a plain decode (see next())
};

}  // namespace tandem::spec
