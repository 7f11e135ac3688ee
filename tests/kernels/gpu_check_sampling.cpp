// Sampling on the GPU against the CPU reference: greedy tokens identical; for temperature > 0 the
// kept set (after top-k, top-p, min-p) identical to sampling_support_cpu's and the drawn token inside
// it; over many uniforms the GPU's draws follow the CPU's probabilities.
#include <algorithm>
#include <cstdio>
#include <set>

#include "gpu_check.hpp"
#include "tandem/kernels/sampling.hpp"
#include "tandem/kernels/sampling_cuda.hpp"

namespace gpu_check {

namespace k = tandem::kernels;

namespace {

double raw_logprob(const float* l, int V, int tok) {
  double mx = -INFINITY, sum = 0;
  for (int i = 0; i < V; ++i) mx = std::max(mx, static_cast<double>(l[i]));
  for (int i = 0; i < V; ++i) sum += std::exp(static_cast<double>(l[i]) - mx);
  return l[tok] - mx - std::log(sum);
}

struct Case {
  const char* name;
  k::SamplingParams p;
  bool coarse;  // logits rounded to 0.5: many ties at every cut
};

void rows_of_one_vocab(std::vector<Row>& rows) {
  const int V = 151552;  // GLM-4.5's vocabulary
  const std::vector<Case> cases{
      {"greedy", {0.f, 0, 1.f, 0.f}, false},
      {"greedy, tied maximum", {0.f, 0, 1.f, 0.f}, true},
      {"T 1, top_k 50", {1.f, 50, 1.f, 0.f}, false},
      {"T 0.7, top_p 0.9", {0.7f, 0, 0.9f, 0.f}, false},
      {"T 0.7, top_k 40, top_p 0.8", {0.7f, 40, 0.8f, 0.f}, false},
      {"T 1, min_p 0.05", {1.f, 0, 1.f, 0.05f}, false},
      {"T 1.5, no filter", {1.5f, 0, 1.f, 0.f}, false},
      {"T 1, top_k 1", {1.f, 1, 1.f, 0.f}, false},
      {"T 1, top_p 1e-6", {1.f, 0, 1e-6f, 0.f}, false},
      {"T 1, top_k 1000, ties", {1.f, 1000, 1.f, 0.f}, true},
      {"T 1, top_p 0.5, ties", {1.f, 0, 0.5f, 0.f}, true},
      {"T 0.3, k 20, p 0.95, min_p 0.1", {0.3f, 20, 0.95f, 0.1f}, false},
  };
  const int R = static_cast<int>(cases.size());
  std::vector<float> logits = normal(sz(static_cast<long>(R) * V), 3.f, 21);
  for (int r = 0; r < R; ++r)
    if (cases[static_cast<size_t>(r)].coarse)
      for (int i = 0; i < V; ++i) {
        float& x = logits[sz(static_cast<long>(r) * V) + static_cast<size_t>(i)];
        x = std::round(x * 2.f) / 2.f;
      }
  logits[1 * static_cast<size_t>(V) + 77777] = 50.f;  // "greedy, tied maximum": two maxima, the first wins
  logits[1 * static_cast<size_t>(V) + 1234] = 50.f;
  std::vector<k::SamplingParams> params;
  std::vector<double> uniform;
  std::mt19937_64 rng(22);
  for (const Case& c : cases) {
    params.push_back(c.p);
    uniform.push_back(c.p.temperature > 0.f ? k::sampling_uniform(rng) : 0.0);
  }
  Dev<float> dl(logits);
  Dev<k::SamplingParams> dp(params);
  Dev<double> du(uniform);
  Dev<k::Sampled> dout(static_cast<size_t>(R));
  Dev<std::uint8_t> dkeep(sz(static_cast<long>(R) * V));
  op_ok(k::sample_cuda(dl.p(), R, V, dp.p(), du.p(), dout.p(), dkeep.p()));
  const auto out = dout.get();
  const auto keep = dkeep.get();

  for (int r = 0; r < R; ++r) {
    const Case& c = cases[static_cast<size_t>(r)];
    const float* l = logits.data() + sz(static_cast<long>(r) * V);
    const std::uint8_t* mask = keep.data() + sz(static_cast<long>(r) * V);
    const k::Sampled got = out[static_cast<size_t>(r)];
    std::vector<std::uint8_t> want(static_cast<size_t>(V), 0);
    long differ = 0;
    std::string note;
    if (c.p.temperature == 0.f) {
      const int best = k::argmax_cpu({l, static_cast<size_t>(V)}).token;
      want[static_cast<size_t>(best)] = 1;
      differ += got.token != best;
      note = "token " + std::to_string(got.token) + " (cpu " + std::to_string(best) + ")";
    } else {
      const auto support = k::sampling_support_cpu({l, static_cast<size_t>(V)}, c.p);
      for (const auto& s : support) want[static_cast<size_t>(s.token)] = 1;
      note = "kept " + std::to_string(support.size());
      if (got.token < 0 || got.token >= V || !want[static_cast<size_t>(got.token)]) {
        ++differ;
        note += ", FAIL: drew a token outside the kept set";
      }
    }
    for (int i = 0; i < V; ++i) differ += mask[i] != want[static_cast<size_t>(i)];
    double lp_err = INFINITY;
    if (got.token >= 0 && got.token < V) {
      const double ref = raw_logprob(l, V, got.token);
      lp_err = std::fabs(got.logprob - ref) / std::max(std::fabs(ref), 1e-2);
    }
    rows.push_back({"sample (mask)", c.name + std::string(", V 151552"), "fp32", lp_err, 1e-5, differ,
                    note + "; rel.err: logprob"});
  }
}

// One small row drawn 20000 times with fresh uniforms: the GPU's frequencies against the CPU's
// probabilities (4 standard deviations is about 0.014 at the most likely token).
void distribution(std::vector<Row>& rows) {
  const int V = 64, R = 20000;
  const auto one = normal(static_cast<size_t>(V), 1.5f, 31);
  const k::SamplingParams p{0.8f, 20, 0.9f, 0.f};
  std::vector<float> logits;
  for (int r = 0; r < R; ++r) logits.insert(logits.end(), one.begin(), one.end());
  std::vector<k::SamplingParams> params(static_cast<size_t>(R), p);
  std::vector<double> uniform(static_cast<size_t>(R));
  std::mt19937_64 rng(32);
  for (auto& u : uniform) u = k::sampling_uniform(rng);
  Dev<float> dl(logits);
  Dev<k::SamplingParams> dp(params);
  Dev<double> du(uniform);
  Dev<k::Sampled> dout(static_cast<size_t>(R));
  Dev<std::uint8_t> dkeep(sz(static_cast<long>(R) * V));
  op_ok(k::sample_cuda(dl.p(), R, V, dp.p(), du.p(), dout.p(), dkeep.p()));
  std::vector<double> freq(static_cast<size_t>(V), 0.0), prob(static_cast<size_t>(V), 0.0);
  for (const auto& s : dout.get()) freq[static_cast<size_t>(s.token)] += 1.0 / R;
  double total = 0;
  const auto support = k::sampling_support_cpu(one, p);
  for (const auto& c : support) total += c.prob;
  for (const auto& c : support) prob[static_cast<size_t>(c.token)] = c.prob / total;
  double worst = 0;
  for (int i = 0; i < V; ++i) worst = std::max(worst, std::fabs(freq[static_cast<size_t>(i)] - prob[static_cast<size_t>(i)]));
  char note[64];
  std::snprintf(note, sizeof note, "rel.err: max |freq - p| = %.4f", worst);
  rows.push_back({"sample (draws)", "T 0.8, k 20, p 0.9, V 64, 20000 draws", "fp32", worst, 0.02, 0, note});
}

}  // namespace

void check_sampling(std::vector<Row>& rows) {
  rows_of_one_vocab(rows);
  distribution(rows);
}

}  // namespace gpu_check
