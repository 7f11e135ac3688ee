#include "tandem/spec/step_cost.hpp"

#include <algorithm>

namespace tandem::spec {

StepCost::StepCost(int max_tokens, double smoothing) : smoothing_(smoothing), forward_(static_cast<size_t>(std::max(max_tokens, 1)) + 1) {}

void StepCost::Average::add(double x, double a) {
  // The first sample of a shape is a warm-up (a CUDA graph captured, a GEMM plan chosen, pages
  // first touched): the second replaces it. After that a sample enters at most at twice the
  // average: one stalled step would otherwise raise a plain decode's estimate for many steps and
  // make drafting look better than it is; a real change of cost still comes through in a few.
  ++samples;
  if (samples <= 2 || value <= 0) value = x;
  else value = (1 - a) * value + a * std::min(x, 2 * value);
}

void StepCost::record_forward(int tokens, double seconds) {
  if (tokens < 1 || tokens >= static_cast<int>(forward_.size())) return;
  forward_[static_cast<size_t>(tokens)].add(seconds, smoothing_);
}

void StepCost::record_draft(double seconds) { draft_.add(seconds, smoothing_); }

std::optional<double> StepCost::step(int tokens) const {
  if (tokens < 1 || tokens >= static_cast<int>(forward_.size()) || !forward_[1].known()) return std::nullopt;
  const auto timed = [&](int n) { return forward_[static_cast<size_t>(n)].known(); };
  double fwd = 0;
  if (timed(tokens)) {
    fwd = forward_[static_cast<size_t>(tokens)].value;
  } else {
    int lo = tokens - 1, hi = tokens + 1;
    while (!timed(lo)) --lo;  // forward_[1] is timed
    while (hi < static_cast<int>(forward_.size()) && !timed(hi)) ++hi;
    const double a = forward_[static_cast<size_t>(lo)].value;
    if (hi == static_cast<int>(forward_.size())) {
      fwd = a;
    } else {
      const double b = forward_[static_cast<size_t>(hi)].value;
      fwd = a + (b - a) * (tokens - lo) / static_cast<double>(hi - lo);
    }
  }
  return fwd + (tokens > 1 && draft_.known() ? draft_.value : 0.0);
}

}  // namespace tandem::spec
