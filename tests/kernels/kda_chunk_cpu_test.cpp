// The chunked KDA reference (kda_chunk_cpu) against the token recurrence (kda_token_cpu): the same
// outputs and end state, to fp32 roundoff (measured about 1e-7; bar 1e-6), for any chunk size, from a random state and a fresh
// one, with and without the lower-bounded decay; and chunks that leave the state where the next
// call resumes (a prefill in calls).
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "../model/check_program.hpp"  // rel_error: the measure the model checks use
#include "tandem/kernels/glm5_next.hpp"

namespace k = tandem::kernels;
using check_program::rel_error;

namespace {

std::vector<float> normal(size_t n, float sd, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

struct Case {
  k::KdaShape s;
  std::vector<float> conv, a_log, dt_bias, o_norm, u, g, beta, gate, state;
  int T;
  k::KdaWeights weights() const { return {conv.data(), a_log.data(), dt_bias.data(), o_norm.data()}; }
  k::KdaIo io(float* o) const {
    const int qk = s.heads * s.head_dim;
    k::KdaIo x;
    x.u = u.data(), x.ld_u = 3 * qk, x.g_raw = g.data(), x.ld_g = qk, x.beta_raw = beta.data(), x.ld_beta = s.heads;
    x.gate_raw = gate.data(), x.ld_gate = qk, x.o = o, x.ld_o = qk;
    return x;
  }
};

Case make(int heads, int hd, int K, int T, bool lower_bound, bool fresh, unsigned seed) {
  Case c;
  c.s.heads = heads, c.s.head_dim = hd, c.s.conv_kernel = K;
  c.s.lower_bound_set = lower_bound, c.s.lower_bound = -5.f;
  const size_t qk = static_cast<size_t>(heads * hd);
  c.T = T;
  c.conv = normal(3 * qk * static_cast<size_t>(K), 0.5f, seed), c.a_log = normal(static_cast<size_t>(heads), 0.5f, seed + 1);
  c.dt_bias = normal(qk, 0.5f, seed + 2), c.o_norm = normal(static_cast<size_t>(hd), 1.f, seed + 3);
  c.u = normal(static_cast<size_t>(T) * 3 * qk, 1.f, seed + 4), c.g = normal(static_cast<size_t>(T) * qk, 1.f, seed + 5);
  c.beta = normal(static_cast<size_t>(T * heads), 1.f, seed + 6), c.gate = normal(static_cast<size_t>(T) * qk, 1.f, seed + 7);
  c.state = normal(static_cast<size_t>(k::kda_state_floats(c.s)), 0.3f, seed + 8);
  if (fresh) std::fill(c.state.begin(), c.state.end(), 0.f);
  return c;
}

// The token recurrence over all T tokens: outputs [T, qk] and the end state.
std::pair<std::vector<float>, std::vector<float>> by_token(const Case& c) {
  const int qk = c.s.heads * c.s.head_dim;
  std::vector<float> o(static_cast<size_t>(c.T) * static_cast<size_t>(qk)), st = c.state;
  const k::KdaWeights w = c.weights();
  for (int t = 0; t < c.T; ++t)
    k::kda_token_cpu(c.s, w, c.u.data() + t * 3 * qk, c.g.data() + t * qk, c.beta.data() + t * c.s.heads,
                     c.gate.data() + t * qk, st.data(), o.data() + t * qk);
  return {o, st};
}

void check_chunks(const Case& c, int chunk) {
  const auto [o_ref, st_ref] = by_token(c);
  std::vector<float> o(o_ref.size()), st = c.state;
  k::kda_chunk_cpu(c.s, c.weights(), c.io(o.data()), c.T, chunk, st.data());
  CAPTURE(chunk);
  CHECK(rel_error(o, o_ref) < 1e-6);
  CHECK(rel_error(st, st_ref) < 1e-6);
}

}  // namespace

TEST_CASE("kda chunked form equals the token recurrence for every chunk size") {
  const Case c = make(2, 16, 4, 37, false, false, 11);  // resumed from a random state
  for (int chunk : {1, 2, 5, 16, 37, 64}) check_chunks(c, chunk);
}

TEST_CASE("kda chunked form: a fresh state, the lower-bounded decay, one head, a 2-tap conv") {
  check_chunks(make(2, 32, 4, 24, true, true, 21), 8);
  check_chunks(make(1, 8, 2, 19, false, true, 31), 7);
}

TEST_CASE("kda chunked form resumes where a previous call left the state") {
  const Case c = make(2, 16, 4, 30, false, false, 41);
  const auto [o_ref, st_ref] = by_token(c);
  const int qk = 2 * 16;
  std::vector<float> o(o_ref.size()), st = c.state;
  // 11 tokens in chunks of 4, then the other 19 in chunks of 8, from the state the first call left.
  k::KdaIo first = c.io(o.data());
  k::kda_chunk_cpu(c.s, c.weights(), first, 11, 4, st.data());
  k::KdaIo rest = c.io(o.data() + 11 * qk);
  rest.u += 11 * rest.ld_u, rest.g_raw += 11 * rest.ld_g, rest.beta_raw += 11 * rest.ld_beta, rest.gate_raw += 11 * rest.ld_gate;
  k::kda_chunk_cpu(c.s, c.weights(), rest, 19, 8, st.data());
  CHECK(rel_error(o, o_ref) < 1e-6);
  CHECK(rel_error(st, st_ref) < 1e-6);
}

TEST_CASE("kda chunked form is not the token recurrence when a decay is dropped") {
  // The check can fail: a chunk form that forgot the intra-chunk decays (all g = 0 here instead)
  // must measure far off, so the bar above is not met by accident.
  const Case c = make(2, 16, 4, 20, false, false, 51);
  const auto [o_ref, st_ref] = by_token(c);
  Case wrong = c;
  std::fill(wrong.dt_bias.begin(), wrong.dt_bias.end(), -30.f);  // softplus ~ 0: no decay at all
  std::vector<float> o(o_ref.size()), st = c.state;
  k::kda_chunk_cpu(wrong.s, wrong.weights(), wrong.io(o.data()), wrong.T, 8, st.data());
  CHECK(rel_error(st, st_ref) > 1e-2);
}
