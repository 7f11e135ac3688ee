// The chunked KDA prefill (kda_chunk_cuda) against the token recurrence (kda_token_cpu, token by
// token) and the chunked CPU form (kda_chunk_cpu), for every chunk size 1..64, in three shapes:
// the fixture's (2 heads of 16, conv 4, lower bound -5), 3 heads of 48 (a value slice of 16 columns
// beside one of 32; softplus gate) and 2 heads of 128 (the transformers default's head size).
// Four sequences in one call: A resumed from a random state, B reset, C one token (a decode-sized
// sequence in a prefill step), D empty (its state must stay as it was); then a second call goes on
// with A and B (a prompt split across calls, the state and conv history carried by the device).
// Bar: the recurrence's own, 1e-4 of max|ref| in fp32 (kda_recurrent's row): the chunked form sums
// the same products in another order (per chunk instead of per token), so it differs from the
// token form by fp32 roundoff growing with the chunk, measured about 1e-6; the max abs error is
// in the note. Group kda_chunk_few: chunks 1, 7 and 64 only (for the sanitizers).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "../model/check_program.hpp"
#include "gpu_check.hpp"
#include "tandem/kernels/glm5_next.hpp"

namespace gpu_check {

namespace k = tandem::kernels;

namespace {

double max_abs(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m;
}

struct Seq {
  int len[2];  // tokens in the first and the second call
  int slot;
  bool reset;  // in the first call
};

struct Case {
  k::KdaShape s;
  std::string name;
  std::vector<Seq> seqs;
};

// long-function: one shape checked: the inputs, the CPU references, then every chunk size on the GPU.
void check_case(std::vector<Row>& rows, const Case& c, const std::vector<int>& chunks, std::uint32_t seed) {
  const k::KdaShape& s = c.s;
  const int heads = s.heads, hd = s.head_dim, K = s.conv_kernel, qk = heads * hd;
  const long sf = k::kda_state_floats(s);
  const int S = static_cast<int>(c.seqs.size()), slots = 4;
  const auto conv = normal(sz(3 * qk * K), 0.5f, seed), a_log = normal(sz(heads), 0.5f, seed + 1);
  const auto dt_bias = normal(sz(qk), 0.5f, seed + 2), o_norm = normal(sz(hd), 1.f, seed + 3);
  const k::KdaWeights w{conv.data(), a_log.data(), dt_bias.data(), o_norm.data()};
  // Token rows of call 0 then call 1; in each call the sequences' tokens one sequence after another.
  std::vector<std::int32_t> begin[2];
  int T[2] = {0, 0};
  for (int call = 0; call < 2; ++call) {
    for (const Seq& q : c.seqs) begin[call].push_back(T[call]), T[call] += q.len[call];
    begin[call].push_back(T[call]);
  }
  const int all = T[0] + T[1];
  const auto u = normal(sz(all * 3 * qk), 1.f, seed + 4), g = normal(sz(all * qk), 1.f, seed + 5);
  const auto beta = normal(sz(all * heads), 1.f, seed + 6), gate = normal(sz(all * qk), 1.f, seed + 7);
  const auto state0 = normal(sz(slots * sf), 0.3f, seed + 8);
  // The token recurrence, call by call.
  std::vector<float> state = state0, o(sz(all * qk));
  for (int call = 0, row0 = 0; call < 2; row0 += T[call], ++call)
    for (int q = 0; q < S; ++q) {
      float* st = state.data() + c.seqs[sz(q)].slot * sf;
      if (call == 0 && c.seqs[sz(q)].reset) std::fill(st, st + sf, 0.f);
      for (int t = row0 + begin[call][sz(q)]; t < row0 + begin[call][sz(q + 1)]; ++t)
        k::kda_token_cpu(s, w, u.data() + t * 3 * qk, g.data() + t * qk, beta.data() + t * heads, gate.data() + t * qk, st,
                         o.data() + t * qk);
    }
  Dev<float> d_u(u), d_g(g), d_beta(beta), d_gate(gate), d_o(o.size()), d_state(state0);
  Dev<float> d_conv(conv), d_alog(a_log), d_dt(dt_bias), d_norm(o_norm);
  Dev<float> d_scratch(sz(k::kda_chunk_scratch_floats(s, std::max(T[0], T[1]))));
  std::vector<std::int32_t> slot_of, reset_of[2];
  for (const Seq& q : c.seqs) slot_of.push_back(q.slot), reset_of[0].push_back(q.reset), reset_of[1].push_back(0);
  Dev<std::int32_t> d_begin0(begin[0]), d_begin1(begin[1]), d_slot(slot_of), d_reset0(reset_of[0]), d_reset1(reset_of[1]);
  const k::KdaWeights dw{d_conv.p(), d_alog.p(), d_dt.p(), d_norm.p()};
  double worst = 0, worst_abs = 0;
  int worst_chunk = 0;
  for (int chunk : chunks) {
    d_state.put(state0);
    for (int call = 0, row0 = 0; call < 2; row0 += T[call], ++call) {
      k::KdaIo io;
      io.u = d_u.p() + row0 * 3L * qk, io.ld_u = 3 * qk, io.g_raw = d_g.p() + row0 * static_cast<long>(qk), io.ld_g = qk;
      io.beta_raw = d_beta.p() + row0 * static_cast<long>(heads), io.ld_beta = heads;
      io.gate_raw = d_gate.p() + row0 * static_cast<long>(qk), io.ld_gate = qk;
      io.o = d_o.p() + row0 * static_cast<long>(qk), io.ld_o = qk;
      op_ok(k::kda_chunk_cuda(s, dw, io, S, T[call], call ? d_begin1.p() : d_begin0.p(), d_slot.p(),
                              call ? d_reset1.p() : d_reset0.p(), d_state.p(), sf, 0, chunk, d_scratch.p(), nullptr));
    }
    const auto got_o = d_o.get(), got_s = d_state.get();
    double err = std::max(check_program::rel_error(got_o, o), check_program::rel_error(got_s, state));
    if (std::isnan(err)) err = INFINITY;
    if (err > worst || worst_chunk == 0) worst = err, worst_chunk = chunk;
    worst_abs = std::max({worst_abs, max_abs(got_o, o), max_abs(got_s, state)});
  }
  char note[96];
  std::snprintf(note, sizeof note, "max abs %.2g; worst at chunk %d", worst_abs, worst_chunk);
  const std::string which = chunks.size() == static_cast<size_t>(k::kKdaMaxChunk) ? "chunks 1..64" : "chunks 1, 7, 64";
  rows.push_back({"kda_chunk", c.name + "; " + which + " vs token", "f32", worst, 1e-4, 0, note});

  // Against the chunked CPU form: sequence A's first call alone, at chunks 16 and 64.
  const Seq& a = c.seqs[0];
  double vs_chunk = 0, vs_chunk_abs = 0;
  for (int chunk : {16, 64}) {
    std::vector<float> st = state0, oc(sz(a.len[0] * qk));
    k::KdaIo io;
    io.u = u.data(), io.ld_u = 3 * qk, io.g_raw = g.data(), io.ld_g = qk, io.beta_raw = beta.data(), io.ld_beta = heads;
    io.gate_raw = gate.data(), io.ld_gate = qk, io.o = oc.data(), io.ld_o = qk;
    k::kda_chunk_cpu(s, w, io, a.len[0], chunk, st.data() + a.slot * sf);
    d_state.put(state0);
    k::KdaIo dio = io;
    dio.u = d_u.p(), dio.g_raw = d_g.p(), dio.beta_raw = d_beta.p(), dio.gate_raw = d_gate.p(), dio.o = d_o.p();
    Dev<std::int32_t> b1(std::vector<std::int32_t>{0, a.len[0]}), s1(std::vector<std::int32_t>{a.slot}),
        r1(std::vector<std::int32_t>{0});
    op_ok(k::kda_chunk_cuda(s, dw, dio, 1, a.len[0], b1.p(), s1.p(), r1.p(), d_state.p(), sf, 0, chunk, d_scratch.p(), nullptr));
    auto got_o = d_o.get();
    got_o.resize(oc.size());
    const auto got_s = d_state.get();
    vs_chunk = std::max({vs_chunk, check_program::rel_error(got_o, oc), check_program::rel_error(got_s, st)});
    vs_chunk_abs = std::max({vs_chunk_abs, max_abs(got_o, oc), max_abs(got_s, st)});
  }
  std::snprintf(note, sizeof note, "max abs %.2g", vs_chunk_abs);
  rows.push_back({"kda_chunk", c.name + "; chunks 16, 64 vs kda_chunk_cpu", "f32", vs_chunk, 1e-4, 0, note});
}

void kda_chunk_cases(std::vector<Row>& rows, const std::vector<int>& chunks) {
  // A: resumed, B: reset, C: one token, D: empty; the second call continues A and B.
  const std::vector<Seq> seqs = {{{100, 29}, 2, false}, {{70, 50}, 0, true}, {{1, 0}, 1, false}, {{0, 0}, 3, false}};
  k::KdaShape fixture;
  fixture.heads = 2, fixture.head_dim = 16, fixture.conv_kernel = 4;
  fixture.lower_bound_set = true, fixture.lower_bound = -5.f;
  k::KdaShape odd;
  odd.heads = 3, odd.head_dim = 48, odd.conv_kernel = 3;
  k::KdaShape big = fixture;
  big.head_dim = 128;
  check_case(rows, {fixture, "2 heads of 16, kernel 4, lower bound -5", seqs}, chunks, 301);
  check_case(rows, {odd, "3 heads of 48, kernel 3, softplus gate", seqs}, chunks, 311);
  check_case(rows, {big, "2 heads of 128, kernel 4, lower bound -5", seqs}, chunks, 321);
}

}  // namespace

void check_kda_chunk(std::vector<Row>& rows) {
  std::vector<int> all;
  for (int c = 1; c <= k::kKdaMaxChunk; ++c) all.push_back(c);
  kda_chunk_cases(rows, all);
}

void check_kda_chunk_few(std::vector<Row>& rows) { kda_chunk_cases(rows, {1, 7, k::kKdaMaxChunk}); }

}  // namespace gpu_check
