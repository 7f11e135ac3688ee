// What a decoding step costs on this machine, measured as the engine runs: seconds of a target
// forward over n tokens (1: a plain decode; k + 1: verifying k drafts) and of one drafter proposal.
// The adaptive draft length weighs expected accepted tokens against these costs, so where
// verification is nearly free (a GPU, memory-bound) it drafts long, and where every verified token
// costs about as much as a decode (the CPU reference path) it drafts only when acceptance pays.
#pragma once
#include <optional>
#include <vector>

namespace tandem::spec {

class StepCost {
 public:
  explicit StepCost(int max_tokens, double smoothing = 0.1);
  void record_forward(int tokens, double seconds);
  void record_draft(double seconds);
  // Estimated seconds of a step whose forward covers `tokens` tokens, plus the proposal when
  // tokens > 1; nullopt until a plain decode has been timed. Sizes not timed yet are interpolated
  // between timed ones (flat beyond the largest timed size, which errs toward trying it).
  std::optional<double> step(int tokens) const;

 private:
  double smoothing_;
  std::vector<std::optional<double>> forward_;  // index: tokens
  std::optional<double> draft_;
};

}  // namespace tandem::spec
