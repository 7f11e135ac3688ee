// Sampling: greedy, temperature, top-k, top-p, min-p, seeded reproducibility and the reported
// logprob (log_softmax of the raw logits).
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tandem/kernels/sampling.hpp"

using namespace tandem::kernels;

namespace {

const std::vector<float> kLogits{1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f};

double log_softmax(const std::vector<float>& l, int i) {
  double mx = -1e300, sum = 0;
  for (float x : l) mx = std::max(mx, static_cast<double>(x));
  for (float x : l) sum += std::exp(x - mx);
  return l[static_cast<size_t>(i)] - mx - std::log(sum);
}

std::map<int, int> histogram(const SamplingParams& p, std::uint64_t seed, int draws) {
  std::mt19937_64 rng(seed);
  std::map<int, int> h;
  for (int i = 0; i < draws; ++i) ++h[sample_cpu(kLogits, p, rng).token];
  return h;
}

}  // namespace

TEST_CASE("temperature 0 is greedy: first maximum, raw logprob, no draw from the generator") {
  std::mt19937_64 rng(1), untouched(1);
  const Sampled s = sample_cpu(kLogits, SamplingParams{0.0f, 0, 1.0f, 0.0f}, rng);
  CHECK(s.token == 1);
  CHECK(s.logprob == doctest::Approx(log_softmax(kLogits, 1)).epsilon(1e-6));
  CHECK(rng() == untouched());
  CHECK(argmax_cpu(kLogits).token == 1);
}

TEST_CASE("the same seed gives the same tokens; different seeds give different ones") {
  const SamplingParams p{1.0f, 0, 1.0f, 0.0f};
  auto draw = [&](std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<int> out;
    for (int i = 0; i < 64; ++i) out.push_back(sample_cpu(kLogits, p, rng).token);
    return out;
  };
  CHECK(draw(7) == draw(7));
  CHECK(draw(7) != draw(8));
}

TEST_CASE("temperature 1 follows the softmax; a logprob is the raw log-probability of the token") {
  const auto h = histogram(SamplingParams{1.0f, 0, 1.0f, 0.0f}, 3, 20000);
  for (int i = 0; i < 6; ++i) {
    const double freq = h.count(i) ? h.at(i) / 20000.0 : 0.0;
    CHECK(std::fabs(freq - std::exp(log_softmax(kLogits, i))) < 0.015);
  }
  std::mt19937_64 rng(5);
  const Sampled s = sample_cpu(kLogits, SamplingParams{0.7f, 0, 1.0f, 0.0f}, rng);
  CHECK(s.logprob == doctest::Approx(log_softmax(kLogits, s.token)).epsilon(1e-6));
}

TEST_CASE("top-k keeps the k most likely (ties by lower id); top-p the smallest head reaching p") {
  auto seen = [](const std::map<int, int>& h) {
    std::set<int> s;
    for (auto& [t, n] : h) s.insert(t);
    return s;
  };
  CHECK(seen(histogram(SamplingParams{1.0f, 1, 1.0f, 0.0f}, 1, 500)) == std::set<int>{1});
  CHECK(seen(histogram(SamplingParams{1.0f, 3, 1.0f, 0.0f}, 1, 2000)) == std::set<int>{1, 2, 3});
  // Probabilities: 3.0 -> 0.384 each (ids 1, 3), 2.0 -> 0.141, 1.0 -> 0.052, ...
  CHECK(seen(histogram(SamplingParams{1.0f, 0, 0.5f, 0.0f}, 1, 2000)) == std::set<int>{1, 3});
  CHECK(seen(histogram(SamplingParams{1.0f, 0, 0.8f, 0.0f}, 1, 2000)) == std::set<int>{1, 2, 3});
  CHECK(seen(histogram(SamplingParams{1.0f, 0, 0.01f, 0.0f}, 1, 500)) == std::set<int>{1});
}

TEST_CASE("min-p drops tokens below min_p times the best probability") {
  // exp(2 - 3) = 0.37 of the best: kept at min_p 0.3, dropped at 0.5.
  CHECK(histogram(SamplingParams{1.0f, 0, 1.0f, 0.3f}, 1, 3000).size() == 3);
  CHECK(histogram(SamplingParams{1.0f, 0, 1.0f, 0.5f}, 1, 3000).size() == 2);
}

TEST_CASE("bad sampling parameters are named") {
  CHECK(check_sampling_params(SamplingParams{}).ok());
  CHECK(check_sampling_params(SamplingParams{-1.0f, 0, 1.0f, 0.0f}).error().message.find("temperature") != std::string::npos);
  CHECK(check_sampling_params(SamplingParams{1.0f, -2, 1.0f, 0.0f}).error().message.find("top_k") != std::string::npos);
  CHECK(check_sampling_params(SamplingParams{1.0f, 0, 0.0f, 0.0f}).error().message.find("top_p") != std::string::npos);
  CHECK(check_sampling_params(SamplingParams{1.0f, 0, 1.0f, 2.0f}).error().message.find("min_p") != std::string::npos);
}
