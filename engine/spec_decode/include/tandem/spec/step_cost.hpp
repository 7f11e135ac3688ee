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
  // tokens > 1; nullopt until a plain decode has been timed. A size counts as timed from its
  // second sample (the first is a warm-up); sizes not timed yet are interpolated between timed
  // ones (flat beyond the largest timed size, which errs toward trying it).
  std::optional<double> step(int tokens) const;

 private:
  struct Average {
    int samples = 0;
    double value = 0;
    void add(double x, double smoothing);
    bool known() const { return samples >= 2; }
  };
  double smoothing_;
  std::vector<Average> forward_;  // index: tokens
  Average draft_;
};

}  // namespace tandem::spec
