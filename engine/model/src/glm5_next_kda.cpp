// KDA linear attention of glm5_next (transformers' Glm5NextTextLinearAttention), token by token
// (transformers' recurrent form; its chunked prefill computes the same recurrence in blocks):
//   u      = [q_proj x, k_proj x, v_proj x]
//   q,k,v  = split(silu(causal depthwise conv over the last `kernel` u's))
//   q, k   = per head l2-normalised (x / sqrt(|x|^2 + 1e-6)); q *= 1/sqrt(head_dim)
//   g      = f_b(f_a x) + dt_bias (one per key channel); log-decay
//            lower_bound * sigmoid(exp(A_log[h]) g)    with linear_lower_bound,
//            -exp(A_log[h]) softplus(g)                without
//   beta   = sigmoid(b_proj x)                         (one per head)
//   S     <- diag(exp(g)) S;   S += k (beta (v - S^T k))^T;   o = S^T q      (S: [key dim x value dim] per head)
//   out    = o_proj(rmsnorm(o) * o_norm * sigmoid(g_b(g_a x)))              (per head, rms_norm_eps)
// The state (per layer) is the conv's last kernel-1 inputs u, oldest first, then S of every head.
#include <cmath>

#include "glm5_next_parts.hpp"
#include "tandem/kernels/linear.hpp"

namespace tandem::model::detail {

namespace k = tandem::kernels;

long kda_state_floats(const Glm5NextConfig& c) {
  const long qk = static_cast<long>(c.linear_num_heads) * c.linear_head_dim;
  return static_cast<long>(c.linear_conv_kernel_dim - 1) * 3 * qk + qk * c.linear_head_dim;
}

namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

void l2normalise(float* x, int n, double scale) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double inv = scale / std::sqrt(ss + 1e-6);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] * inv);
}

}  // namespace

void kda_token(const KdaLayer& w, const Glm5NextConfig& c, const float* u, const float* g_raw, const float* beta_raw,
               const float* gate_raw, float* state, float* o) {
  const int heads = c.linear_num_heads, hd = c.linear_head_dim, K = c.linear_conv_kernel_dim;
  const int qk = heads * hd, channels = 3 * qk;
  float* history = state;                                   // [K - 1][channels]
  float* S = state + static_cast<long>(K - 1) * channels;   // [heads][hd (key)][hd (value)]
  std::vector<float> mixed(static_cast<size_t>(channels)), g(static_cast<size_t>(qk));
  std::vector<double> kv_mem(static_cast<size_t>(hd)), delta(static_cast<size_t>(hd));
  const double q_scale = 1.0 / std::sqrt(static_cast<double>(hd));
  // Causal conv: tap K-1 is the current token, tap j the input K-1-j tokens back.
  for (int ch = 0; ch < channels; ++ch) {
    const float* tap = w.conv.data() + static_cast<long>(ch) * K;
    double acc = static_cast<double>(tap[K - 1]) * u[ch];
    for (int j = 0; j < K - 1; ++j) acc += static_cast<double>(tap[j]) * history[static_cast<long>(j) * channels + ch];
    const float a = static_cast<float>(acc);
    mixed[static_cast<size_t>(ch)] = static_cast<float>(a / (1.0 + std::exp(-static_cast<double>(a))));
  }
  if (K > 1) {
    std::copy(history + channels, history + static_cast<long>(K - 1) * channels, history);
    std::copy(u, u + channels, history + static_cast<long>(K - 2) * channels);
  }
  float* q = mixed.data();
  float* kk = mixed.data() + qk;
  const float* v = mixed.data() + 2 * qk;
  for (int h = 0; h < heads; ++h) {
    l2normalise(q + h * hd, hd, q_scale);
    l2normalise(kk + h * hd, hd, 1.0);
  }
  // Forget gate (log-decay per key channel).
  for (int i = 0; i < qk; ++i) {
    const auto at = static_cast<size_t>(i);
    const double rate = std::exp(static_cast<double>(w.a_log[static_cast<size_t>(i / hd)]));
    const double gi = static_cast<double>(g_raw[i]) + w.dt_bias[at];
    const double softplus = gi > 20.0 ? gi : std::log(1.0 + std::exp(gi));
    g[at] = static_cast<float>(c.linear_lower_bound ? *c.linear_lower_bound * sigmoid(rate * gi) : -rate * softplus);
  }
  // Delta rule, per head.
  for (int h = 0; h < heads; ++h) {
    float* Sh = S + static_cast<long>(h) * hd * hd;
    const float* qh = q + h * hd;
    const float* kh = kk + h * hd;
    const float* vh = v + h * hd;
    const double b = sigmoid(beta_raw[h]);
    for (int i = 0; i < hd; ++i) {
      const float decay = static_cast<float>(std::exp(static_cast<double>(g[static_cast<size_t>(h * hd + i)])));
      for (int j = 0; j < hd; ++j) Sh[i * hd + j] *= decay;
    }
    std::fill(kv_mem.begin(), kv_mem.end(), 0.0);
    for (int i = 0; i < hd; ++i)
      for (int j = 0; j < hd; ++j) kv_mem[static_cast<size_t>(j)] += static_cast<double>(Sh[i * hd + j]) * kh[i];
    for (int j = 0; j < hd; ++j) delta[static_cast<size_t>(j)] = (vh[j] - kv_mem[static_cast<size_t>(j)]) * b;
    for (int i = 0; i < hd; ++i)
      for (int j = 0; j < hd; ++j)
        Sh[i * hd + j] = static_cast<float>(Sh[i * hd + j] + static_cast<double>(kh[i]) * delta[static_cast<size_t>(j)]);
    for (int j = 0; j < hd; ++j) {
      double acc = 0;
      for (int i = 0; i < hd; ++i) acc += static_cast<double>(Sh[i * hd + j]) * qh[i];
      o[h * hd + j] = static_cast<float>(acc);
    }
  }
  // Gated RMSNorm per head.
  for (int h = 0; h < heads; ++h) {
    float* oh = o + h * hd;
    double ss = 0;
    for (int j = 0; j < hd; ++j) ss += static_cast<double>(oh[j]) * oh[j];
    const double inv = 1.0 / std::sqrt(ss / hd + c.d.rms_norm_eps);
    for (int j = 0; j < hd; ++j)
      oh[j] = static_cast<float>(static_cast<float>(oh[j] * inv) * static_cast<double>(w.o_norm[static_cast<size_t>(j)]) *
                                 sigmoid(gate_raw[h * hd + j]));
  }
}

void kda_forward(const KdaLayer& w, const Glm5NextConfig& c, const float* x, int rows, std::span<float> state, float* out) {
  const int H = c.d.hidden_size, heads = c.linear_num_heads, hd = c.linear_head_dim;
  const int qk = heads * hd, channels = 3 * qk;
  std::vector<float> u(static_cast<size_t>(channels)), low(static_cast<size_t>(hd)), g(static_cast<size_t>(qk));
  std::vector<float> beta(static_cast<size_t>(heads)), gate(static_cast<size_t>(qk)), o(static_cast<size_t>(qk));
  for (int t = 0; t < rows; ++t) {
    const float* xt = x + static_cast<long>(t) * H;
    k::linear_cpu(xt, w.q.data(), nullptr, u.data(), 1, H, qk);
    k::linear_cpu(xt, w.k.data(), nullptr, u.data() + qk, 1, H, qk);
    k::linear_cpu(xt, w.v.data(), nullptr, u.data() + 2 * qk, 1, H, qk);
    k::linear_cpu(xt, w.f_a.data(), nullptr, low.data(), 1, H, hd);
    k::linear_cpu(low.data(), w.f_b.data(), nullptr, g.data(), 1, hd, qk);
    k::linear_cpu(xt, w.b.data(), nullptr, beta.data(), 1, H, heads);
    k::linear_cpu(xt, w.g_a.data(), nullptr, low.data(), 1, H, hd);
    k::linear_cpu(low.data(), w.g_b.data(), nullptr, gate.data(), 1, hd, qk);
    kda_token(w, c, u.data(), g.data(), beta.data(), gate.data(), state.data(), o.data());
    k::linear_cpu(o.data(), w.o.data(), nullptr, out + static_cast<long>(t) * H, 1, qk, H);
  }
}

}  // namespace tandem::model::detail
