#include "tandem/kernels/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace tandem::kernels {

float raw_logprob(std::span<const float> logits, std::int32_t token) {
  double mx = -std::numeric_limits<double>::infinity();
  for (float l : logits) mx = std::max(mx, static_cast<double>(l));
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - mx);
  return static_cast<float>(static_cast<double>(logits[static_cast<size_t>(token)]) - mx - std::log(sum));
}

namespace {

// Uniform in [0, 1) from the top 53 bits of one draw: the same on every standard library.
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace

Status check_sampling_params(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) return Error{"temperature must be a finite number >= 0"};
  if (p.top_k < -1) return Error{"top_k must be -1, 0 (off) or a positive count"};
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return Error{"top_p must be in (0, 1]"};
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return Error{"min_p must be in [0, 1]"};
  return Ok{};
}

Sampled argmax_cpu(std::span<const float> logits) {
  const auto best = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  return {best, raw_logprob(logits, best)};
}

namespace {

// Candidate order and probabilities, as sample_cpu draws: ids[0..keep) most likely first (or in id
// order when neither top-k nor top-p asked for sorting), prob[i] for ids[i] (0 when min-p dropped it).
void support(std::span<const float> logits, const SamplingParams& p, std::vector<std::int32_t>& ids,
             std::vector<double>& prob, size_t& keep) {
  const auto V = static_cast<std::int32_t>(logits.size());

  // Candidates. Top-k and top-p need them most likely first (lower id first on ties, so the order
  // is total and portable); without either, id order avoids sorting the whole vocabulary.
  ids.resize(static_cast<size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  auto more_likely = [&](std::int32_t a, std::int32_t b) {
    const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
  keep = static_cast<size_t>(V);
  if (p.top_k > 0 && p.top_k < V) {
    keep = static_cast<size_t>(p.top_k);
    std::partial_sort(ids.begin(), ids.begin() + static_cast<long>(keep), ids.end(), more_likely);
  } else if (p.top_p < 1.0f) {
    std::sort(ids.begin(), ids.end(), more_likely);
  }

  // Softmax of logits / temperature over the survivors of top-k.
  const double inv_t = 1.0 / static_cast<double>(p.temperature);
  double mx = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < keep; ++i) mx = std::max(mx, static_cast<double>(logits[static_cast<size_t>(ids[i])]) * inv_t);
  prob.resize(keep);
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) {
    prob[i] = std::exp(static_cast<double>(logits[static_cast<size_t>(ids[i])]) * inv_t - mx);
    sum += prob[i];
  }
  for (auto& x : prob) x /= sum;

  // top-p: the shortest head whose mass reaches top_p (always at least one token; ids are sorted).
  if (p.top_p < 1.0f) {
    double mass = 0;
    size_t n = 0;
    while (n < keep && mass < static_cast<double>(p.top_p)) mass += prob[n++];
    keep = std::max<size_t>(n, 1);
  }
  // min-p: relative to the most likely survivor; dropped tokens get probability 0.
  if (p.min_p > 0.0f) {
    const double top = *std::max_element(prob.begin(), prob.begin() + static_cast<long>(keep));
    const double floor = static_cast<double>(p.min_p) * top;
    for (size_t i = 0; i < keep; ++i)
      if (prob[i] < floor) prob[i] = 0;
  }
}

}  // namespace

double sampling_uniform(std::mt19937_64& rng) { return uniform01(rng); }

std::vector<Candidate> sampling_support_cpu(std::span<const float> logits, const SamplingParams& p) {
  std::vector<std::int32_t> ids;
  std::vector<double> prob;
  size_t keep = 0;
  support(logits, p, ids, prob, keep);
  std::vector<Candidate> out;
  for (size_t i = 0; i < keep; ++i)
    if (prob[i] > 0) out.push_back({ids[i], prob[i]});
  return out;
}

Sampled sample_cpu(std::span<const float> logits, const SamplingParams& p, std::mt19937_64& rng) {
  if (p.temperature == 0.0f) return argmax_cpu(logits);
  return sample_with_uniform(logits, p, uniform01(rng));
}

Sampled sample_with_uniform(std::span<const float> logits, const SamplingParams& p, double uniform) {
  if (p.temperature == 0.0f) return argmax_cpu(logits);
  std::vector<std::int32_t> ids;
  std::vector<double> prob;
  size_t keep = 0;
  support(logits, p, ids, prob, keep);

  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += prob[i];
  const double u = uniform * total;
  double acc = 0;
  size_t pick = 0;
  for (size_t i = 0; i < keep; ++i) {
    if (prob[i] == 0) continue;
    pick = i;  // rounding can leave u just above the last partial sum: then the last live token
    acc += prob[i];
    if (u < acc) {
      pick = i;
      break;
    }
  }
  return {ids[pick], raw_logprob(logits, ids[pick])};
}

}  // namespace tandem::kernels
