// The chunked form of the KDA delta rule (kda_chunk_cpu, glm5_next.hpp): the reference a chunked
// prefill kernel (kernels/cuda/kda_chunk.cu) is checked against (issue 23). For a chunk
// of C tokens of one head, with G_t the cumulative log-decay up to token t (per key channel) and
// S_0 the state before the chunk, the token recurrence
//   S_t = diag(exp g_t) S_{t-1};  u_t = beta_t (v_t - S_t^T k_t);  S_t += k_t u_t^T;  o_t = S_t^T q_t
// unrolls to
//   u_t = beta_t (v_t - S_0^T (e^{G_t} k_t) - sum_{s<t} M_ts u_s),   M_ts = sum_i k_ti k_si e^{G_ti - G_si}
//   o_t = S_0^T (e^{G_t} q_t) + sum_{s<=t} P_ts u_s,                 P_ts = sum_i q_ti k_si e^{G_ti - G_si}
//   S_C = diag(e^{G_C}) S_0 + sum_s (e^{G_C - G_s} k_s) u_s^T
// a lower-triangular solve and C x C products (what tensor cores take), with every exponent <= 0.
// Sums in fp64; the state is rounded to fp32 once a chunk (the token step rounds it every token),
// so the two agree to fp32 roundoff, not bit for bit.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kda_parts.hpp"
#include "tandem/kernels/glm5_next.hpp"

namespace tandem::kernels {

namespace {

size_t at(long i) { return static_cast<size_t>(i); }

// The chunk's tokens of one head, as token_inputs left them.
struct HeadChunk {
  int n = 0, hd = 0;
  const float *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr;  // row t at t * ld
  long ld = 0, ld_g = 0;
  const double* beta = nullptr;                                           // [n]
};

// Advances one head's state S [hd key x hd value] over the chunk; writes o_t (before the norm).
void head_chunk(const HeadChunk& c, float* S, float* o, long ld_o) {
  const int n = c.n, hd = c.hd;
  std::vector<double> G(at(static_cast<long>(n) * hd)), U(at(static_cast<long>(n) * hd)), S0(at(static_cast<long>(hd) * hd));
  for (int i = 0; i < hd; ++i) {
    double acc = 0;
    for (int t = 0; t < n; ++t) G[at(static_cast<long>(t) * hd + i)] = acc += c.g[t * c.ld_g + i];
  }
  std::copy(S, S + static_cast<long>(hd) * hd, S0.begin());
  auto pair = [&](const float* a, int t, int s) {  // sum_i a_i k_si e^{G_ti - G_si}
    double acc = 0;
    for (int i = 0; i < hd; ++i)
      acc += static_cast<double>(a[i]) * c.k[s * c.ld + i] * std::exp(G[at(static_cast<long>(t) * hd + i)] - G[at(static_cast<long>(s) * hd + i)]);
    return acc;
  };
  auto from_s0 = [&](const float* a, int t, int j) {  // (S_0^T (e^{G_t} a))_j
    double acc = 0;
    for (int i = 0; i < hd; ++i) acc += S0[at(static_cast<long>(i) * hd + j)] * std::exp(G[at(static_cast<long>(t) * hd + i)]) * a[i];
    return acc;
  };
  for (int t = 0; t < n; ++t) {
    const float* kt = c.k + t * c.ld;
    std::vector<double> m(at(t));
    for (int s = 0; s < t; ++s) m[at(s)] = pair(kt, t, s);
    for (int j = 0; j < hd; ++j) {
      double r = c.v[t * c.ld + j] - from_s0(kt, t, j);
      for (int s = 0; s < t; ++s) r -= m[at(s)] * U[at(static_cast<long>(s) * hd + j)];
      U[at(static_cast<long>(t) * hd + j)] = c.beta[t] * r;
    }
  }
  for (int t = 0; t < n; ++t) {
    const float* qt = c.q + t * c.ld;
    std::vector<double> p(at(t + 1));
    for (int s = 0; s <= t; ++s) p[at(s)] = pair(qt, t, s);
    for (int j = 0; j < hd; ++j) {
      double acc = from_s0(qt, t, j);
      for (int s = 0; s <= t; ++s) acc += p[at(s)] * U[at(static_cast<long>(s) * hd + j)];
      o[t * ld_o + j] = static_cast<float>(acc);
    }
  }
  const long last = static_cast<long>(n - 1) * hd;
  for (int i = 0; i < hd; ++i)
    for (int j = 0; j < hd; ++j) {
      double acc = std::exp(G[at(last + i)]) * S0[at(static_cast<long>(i) * hd + j)];
      for (int s = 0; s < n; ++s)
        acc += std::exp(G[at(last + i)] - G[at(static_cast<long>(s) * hd + i)]) * c.k[s * c.ld + i] * U[at(static_cast<long>(s) * hd + j)];
      S[static_cast<long>(i) * hd + j] = static_cast<float>(acc);
    }
}

}  // namespace

// The CUDA form's scratch (kda_chunk.cu, struct Scratch): per token q, k, v, the log-decays and
// e^{G_last} (heads * head_dim each), and P's rows (heads * kKdaMaxChunk).
long kda_chunk_scratch_floats(const KdaShape& s, int tokens) {
  return static_cast<long>(tokens) * s.heads * (5L * s.head_dim + kKdaMaxChunk);
}

void kda_chunk_cpu(const KdaShape& s, const KdaWeights& w, const KdaIo& io, int tokens, int chunk, float* state) {
  const int heads = s.heads, hd = s.head_dim, qk = heads * hd, channels = 3 * qk;
  float* S = state + static_cast<long>(s.conv_kernel - 1) * channels;
  for (int t0 = 0; t0 < tokens; t0 += chunk) {
    const int n = std::min(chunk, tokens - t0);
    std::vector<float> mixed(at(static_cast<long>(n) * channels)), g(at(static_cast<long>(n) * qk));
    std::vector<double> beta(at(static_cast<long>(n) * heads));
    for (int t = 0; t < n; ++t) {
      const long r = t0 + t;
      kda_detail::token_inputs(s, w, io.u + r * io.ld_u, io.g_raw + r * io.ld_g, state, mixed.data() + t * channels, g.data() + t * qk);
      for (int h = 0; h < heads; ++h) beta[at(t * heads + h)] = 1.0 / (1.0 + std::exp(-static_cast<double>(io.beta_raw[r * io.ld_beta + h])));
    }
    for (int h = 0; h < heads; ++h) {
      std::vector<double> bh(at(n));
      for (int t = 0; t < n; ++t) bh[at(t)] = beta[at(t * heads + h)];
      HeadChunk c{n, hd, mixed.data() + h * hd, mixed.data() + qk + h * hd, mixed.data() + 2 * qk + h * hd, g.data() + h * hd,
                  channels, qk, bh.data()};
      head_chunk(c, S + static_cast<long>(h) * hd * hd, io.o + t0 * io.ld_o + h * hd, io.ld_o);
    }
    for (int t = 0; t < n; ++t) kda_detail::out_norm(s, w, io.gate_raw + (t0 + t) * io.ld_gate, io.o + (t0 + t) * io.ld_o);
  }
}

}  // namespace tandem::kernels
