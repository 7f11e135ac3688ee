#include "tandem/spec/step_cost.hpp"

#include <algorithm>

namespace tandem::spec {

StepCost::StepCost(int max_tokens, double smoothing) : smoothing_(smoothing), forward_(static_cast<size_t>(std::max(max_tokens, 1)) + 1) {}

namespace {
// A sample enters the average at most at twice it: one stalled step (first touch of fresh KV
// pages, the OS running something else) would otherwise raise a plain decode's estimate for many
// steps and make drafting look better than it is. A real change of cost still comes through,
// within a few steps.
void blend(std::optional<double>& avg, double x, double a) { avg = avg ? (1 - a) * *avg + a * std::min(x, 2 * *avg) : x; }
}  // namespace

void StepCost::record_forward(int tokens, double seconds) {
  if (tokens < 1 || tokens >= static_cast<int>(forward_.size())) return;
  blend(forward_[static_cast<size_t>(tokens)], seconds, smoothing_);
}

void StepCost::record_draft(double seconds) { blend(draft_, seconds, smoothing_); }

std::optional<double> StepCost::step(int tokens) const {
  if (tokens < 1 || tokens >= static_cast<int>(forward_.size()) || !forward_[1]) return std::nullopt;
  double fwd = 0;
  if (forward_[static_cast<size_t>(tokens)]) {
    fwd = *forward_[static_cast<size_t>(tokens)];
  } else {
    int lo = tokens - 1, hi = tokens + 1;
    while (!forward_[static_cast<size_t>(lo)]) --lo;  // forward_[1] is timed
    while (hi < static_cast<int>(forward_.size()) && !forward_[static_cast<size_t>(hi)]) ++hi;
    const double a = *forward_[static_cast<size_t>(lo)];
    if (hi == static_cast<int>(forward_.size())) {
      fwd = a;
    } else {
      const double b = *forward_[static_cast<size_t>(hi)];
      fwd = a + (b - a) * (tokens - lo) / static_cast<double>(hi - lo);
    }
  }
  return fwd + (tokens > 1 && draft_ ? *draft_ : 0.0);
}

}  // namespace tandem::spec
