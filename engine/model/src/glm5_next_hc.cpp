// Hyper-connections of glm5_next (transformers' Glm5NextTextHyperConnection), for one token:
//   flat  = streams (hc x hidden, flattened) / rms(streams)           (unweighted RMSNorm, rms_norm_eps)
//   m     = fn . flat                                                  ((2 + hc) * hc mix logits)
//   pre   = sigmoid(m[0:hc] * scale[0] + base[0:hc]) + hc_eps
//   post  = 2 sigmoid(m[hc:2hc] * scale[1] + base[hc:2hc])
//   comb  = softmax_row(m[2hc:] * scale[2] + base[2hc:]) + hc_eps, then column-normalised, then
//           (hc_sinkhorn_iters - 1) times row- and column-normalised (each sum + hc_eps)
//   input = sum_i pre[i] streams[i]
#include <cmath>

#include "glm5_next_parts.hpp"

namespace tandem::model::detail {

namespace {
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
}  // namespace

void hc_collapse(const HyperConnection& w, const Glm5NextConfig& c, const float* streams, float* collapsed, HcMix& mix) {
  const int hc = c.hc_mult, D = c.d.hidden_size, n = hc * D, M = (2 + hc) * hc;
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(streams[i]) * streams[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / n + c.d.rms_norm_eps));
  std::vector<float> flat(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) flat[static_cast<size_t>(i)] = streams[i] * inv;
  std::vector<double> m(static_cast<size_t>(M));
  for (int r = 0; r < M; ++r) {
    const float* row = w.fn.data() + static_cast<long>(r) * n;
    double acc = 0;
    for (int i = 0; i < n; ++i) acc += static_cast<double>(row[i]) * flat[static_cast<size_t>(i)];
    m[static_cast<size_t>(r)] = static_cast<float>(acc);  // transformers' fp32 linear output
  }
  const double eps = c.hc_eps;
  std::vector<double> pre(static_cast<size_t>(hc));
  mix.post.assign(static_cast<size_t>(hc), 0.f);
  for (int i = 0; i < hc; ++i) {
    const auto u = static_cast<size_t>(i);
    pre[u] = sigmoid(m[u] * w.scale[0] + w.base[u]) + eps;
    mix.post[u] = static_cast<float>(2.0 * sigmoid(m[u + static_cast<size_t>(hc)] * w.scale[1] + w.base[u + static_cast<size_t>(hc)]));
  }
  std::vector<double> comb(static_cast<size_t>(hc * hc));
  auto at = [&](int i, int j) -> double& { return comb[static_cast<size_t>(i * hc + j)]; };
  for (int i = 0; i < hc; ++i) {
    double top = -INFINITY;
    for (int j = 0; j < hc; ++j) {
      const size_t k = static_cast<size_t>(2 * hc + i * hc + j);
      at(i, j) = m[k] * w.scale[2] + w.base[k];
      top = std::max(top, at(i, j));
    }
    double sum = 0;
    for (int j = 0; j < hc; ++j) sum += (at(i, j) = std::exp(at(i, j) - top));
    for (int j = 0; j < hc; ++j) at(i, j) = at(i, j) / sum + eps;
  }
  auto normalise_columns = [&] {
    for (int j = 0; j < hc; ++j) {
      double sum = 0;
      for (int i = 0; i < hc; ++i) sum += at(i, j);
      for (int i = 0; i < hc; ++i) at(i, j) /= sum + eps;
    }
  };
  normalise_columns();
  for (int it = 1; it < c.hc_sinkhorn_iters; ++it) {
    for (int i = 0; i < hc; ++i) {
      double sum = 0;
      for (int j = 0; j < hc; ++j) sum += at(i, j);
      for (int j = 0; j < hc; ++j) at(i, j) /= sum + eps;
    }
    normalise_columns();
  }
  mix.comb.assign(comb.begin(), comb.end());
  for (int d = 0; d < D; ++d) {
    double acc = 0;
    for (int i = 0; i < hc; ++i) acc += pre[static_cast<size_t>(i)] * streams[static_cast<long>(i) * D + d];
    collapsed[d] = static_cast<float>(acc);
  }
}

void hc_expand(const Glm5NextConfig& c, const HcMix& mix, const float* y, float* streams) {
  const int hc = c.hc_mult, D = c.d.hidden_size;
  std::vector<float> old(streams, streams + static_cast<long>(hc) * D);
  for (int i = 0; i < hc; ++i)
    for (int d = 0; d < D; ++d) {
      double acc = static_cast<double>(mix.post[static_cast<size_t>(i)]) * y[d];
      for (int j = 0; j < hc; ++j)
        acc += static_cast<double>(mix.comb[static_cast<size_t>(j * hc + i)]) * old[static_cast<size_t>(j * D + d)];
      streams[static_cast<long>(i) * D + d] = static_cast<float>(acc);
    }
}

}  // namespace tandem::model::detail
