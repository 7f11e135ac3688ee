#include "tandem/spec/acceptance.hpp"

#include <algorithm>

namespace tandem::spec {

namespace {
std::span<const float> row(std::span<const float> m, int i, int vocab) {
  return m.subspan(static_cast<size_t>(i) * static_cast<size_t>(vocab), static_cast<size_t>(vocab));
}
}  // namespace

Verdict accept_greedy(std::span<const std::int32_t> drafts, std::span<const float> target_logits, int vocab) {
  Verdict v;
  const int n = static_cast<int>(drafts.size());
  for (int i = 0;; ++i) {
    const std::int32_t want = kernels::argmax_cpu(row(target_logits, i, vocab)).token;
    if (i == n || drafts[static_cast<size_t>(i)] != want) {
      v.next = want;
      return v;
    }
    ++v.accepted;
  }
}

Verdict accept_greedy_tokens(std::span<const std::int32_t> drafts, std::span<const std::int32_t> target_tokens) {
  Verdict v;
  const size_t n = std::min(drafts.size(), target_tokens.size() - 1);  // callers pass n + 1 rows
  while (static_cast<size_t>(v.accepted) < n && drafts[static_cast<size_t>(v.accepted)] == target_tokens[static_cast<size_t>(v.accepted)])
    ++v.accepted;
  v.next = target_tokens[static_cast<size_t>(v.accepted)];
  return v;
}

std::vector<double> sampling_distribution(std::span<const float> logits, const kernels::SamplingParams& p) {
  std::vector<double> out(logits.size(), 0.0);
  double total = 0;
  for (const auto& c : kernels::sampling_support_cpu(logits, p)) {
    out[static_cast<size_t>(c.token)] = c.prob;
    total += c.prob;
  }
  for (auto& x : out) x /= total;
  return out;
}

std::int32_t draw(std::span<const double> probs, std::mt19937_64& rng) {
  const double u = kernels::sampling_uniform(rng);
  double acc = 0;
  std::int32_t last = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0) continue;
    last = static_cast<std::int32_t>(i);
    acc += probs[i];
    if (u < acc) return last;
  }
  return last;  // rounding left u above the total: the last possible token
}

Verdict accept_sampled(std::span<const std::int32_t> drafts, std::span<const double> draft_probs,
                       std::span<const float> target_logits, int vocab, const kernels::SamplingParams& p,
                       std::mt19937_64& rng) {
  Verdict v;
  const int n = static_cast<int>(drafts.size());
  const size_t V = static_cast<size_t>(vocab);
  for (int i = 0; i < n; ++i) {
    const auto target = sampling_distribution(row(target_logits, i, vocab), p);
    const auto q = draft_probs.subspan(static_cast<size_t>(i) * V, V);
    const auto d = static_cast<size_t>(drafts[static_cast<size_t>(i)]);
    // Keep with probability min(1, p/q): u * q < p.
    if (kernels::sampling_uniform(rng) * q[d] < target[d]) {
      ++v.accepted;
      continue;
    }
    std::vector<double> residual(V);
    double total = 0;
    for (size_t t = 0; t < V; ++t) total += residual[t] = std::max(target[t] - q[t], 0.0);
    if (total > 0) {
      for (auto& x : residual) x /= total;
      v.next = draw(residual, rng);
    } else {
      v.next = draw(target, rng);  // p == q up to rounding: the residual is p itself
    }
    return v;
  }
  v.next = draw(sampling_distribution(row(target_logits, n, vocab), p), rng);
  return v;
}

}  // namespace tandem::spec
