// The decode-sized kernels against their CPU references: gemv (plain, bias, fp32 out, per-head
// groups, gate_up fused with SiLU, fp32 activations), the MoE decode pair (chosen experts and shared experts), the
// router fused with the routing, and the many-block greedy argmax.
#include <cstdio>
#include <span>

#include "gpu_check.hpp"
#include "tandem/kernels/activation.hpp"
#include "tandem/kernels/gemv.hpp"
#include "tandem/kernels/glue.hpp"
#include "tandem/kernels/linear.hpp"
#include "tandem/kernels/moe_decode.hpp"
#include "tandem/kernels/moe_routing.hpp"
#include "tandem/kernels/rmsnorm.hpp"
#include "tandem/kernels/sampling.hpp"
#include "tandem/kernels/sampling_cuda.hpp"

namespace gpu_check {

namespace k = tandem::kernels;

namespace {

std::vector<float> silu_mul(const std::vector<float>& gu, int rows, int d) {
  std::vector<float> y(sz(static_cast<long>(rows) * d));
  k::silu_and_mul_cpu(gu.data(), y.data(), rows, d);
  return y;
}

// y[r][g][o] = x[r][g] . w[g][o] (+ b); silu: out = width of a [2 * width] gate_up per group.
// x_type f32: unrounded fp32 activations (glm5_next), the reference's own input.
void gemv(std::vector<Row>& rows, int m, int groups, int in, int out, bool bias, bool silu, DType y_type,
          DType x_type = DType::bf16) {
  const int wrows = silu ? 2 * out : out;
  const long xw = static_cast<long>(groups) * in, yw = static_cast<long>(groups) * out;
  const auto x = x_type == DType::f32 ? normal(sz(m * xw), 1.f, 51) : as_stored(DType::bf16, normal(sz(m * xw), 1.f, 51));
  const auto w = as_stored(DType::bf16, normal(sz(static_cast<long>(groups) * wrows * in), 0.05f, 52));
  const auto b = as_stored(y_type, normal(sz(yw), 0.5f, 53));
  std::vector<float> ref(sz(m * yw)), xg(sz(static_cast<long>(m) * in)), yg(sz(static_cast<long>(m) * wrows));
  for (int g = 0; g < groups; ++g) {
    for (int r = 0; r < m; ++r)
      for (int i = 0; i < in; ++i) xg[sz(static_cast<long>(r) * in + i)] = x[sz(r * xw + static_cast<long>(g) * in + i)];
    k::linear_cpu(xg.data(), w.data() + static_cast<long>(g) * wrows * in, bias ? b.data() + static_cast<long>(g) * out : nullptr,
                  yg.data(), m, in, wrows);
    const auto yo = silu ? silu_mul(yg, m, out) : yg;
    for (int r = 0; r < m; ++r)
      for (int o = 0; o < out; ++o) ref[sz(r * yw + static_cast<long>(g) * out + o)] = yo[sz(static_cast<long>(r) * out + o)];
  }
  DevAct dx(x_type, x), dw(DType::bf16, w), db(y_type, b), dy(y_type, sz(m * yw));
  k::GemvArgs a;
  a.rows = m, a.in = in, a.out = out, a.groups = groups;
  a.x = dx.p(), a.ldx = xw, a.x_group = in, a.w = dw.p(), a.ldw = in, a.w_group = static_cast<long>(wrows) * in;
  a.bias = bias ? db.p() : nullptr, a.y = dy.p(), a.ldy = yw, a.y_group = out, a.y_type = y_type;
  a.silu_mul = silu, a.up_offset = out, a.x_type = x_type;
  op_ok(k::gemv_cuda(a, nullptr));
  char s[96];
  std::snprintf(s, sizeof s, "%d x %d -> %d%s%s%s", m, in, out, groups > 1 ? " per group" : "", bias ? " +bias" : "",
                silu ? " silu(gate)*up" : "");
  if (groups > 1) std::snprintf(s + std::strlen(s), sizeof s - std::strlen(s), ", %d groups", groups);
  rows.push_back({"gemv", s, x_type == DType::f32 ? "fp32 x, bf16 w->fp32" : y_type == DType::f32 ? "bf16->fp32" : "bf16",
                  max_rel_error(dy.get(), y_type == DType::f32 ? ref : as_stored(DType::bf16, ref)), limit_for(x_type == DType::f32 ? DType::f32 : DType::bf16),
                  0, ""});
}

// Token t's experts are (t * 5 + j * 3) % E (distinct for E >= 3 * top_k).
void moe(std::vector<Row>& rows, int tokens, int E, int top_k, int hidden, int width, int shared_width) {
  const auto x = as_stored(DType::bf16, normal(sz(static_cast<long>(tokens) * hidden), 1.f, 61));
  const auto gu = as_stored(DType::bf16, normal(sz(static_cast<long>(E) * 2 * width * hidden), 0.05f, 62));
  const auto dn = as_stored(DType::bf16, normal(sz(static_cast<long>(E) * hidden * width), 0.05f, 63));
  const auto sgu = as_stored(DType::bf16, normal(sz(2L * shared_width * hidden), 0.05f, 64));
  const auto sdn = as_stored(DType::bf16, normal(sz(static_cast<long>(hidden) * shared_width), 0.05f, 65));
  const auto weight = normal(sz(static_cast<long>(tokens) * top_k), 0.5f, 66);
  std::vector<std::int32_t> expert(weight.size());
  for (int t = 0; t < tokens; ++t)
    for (int j = 0; j < top_k; ++j) expert[sz(static_cast<long>(t) * top_k + j)] = (t * 5 + j * 3) % E;
  // Reference: each expert's MLP with its activation rounded to bf16 (as the kernel stores it).
  std::vector<float> ref(sz(static_cast<long>(tokens) * hidden), 0.f), h(sz(2L * std::max(width, shared_width))), y(sz(hidden));
  auto expert_mlp = [&](const float* xt, const float* g, const float* d, int n, float scale, float* out) {
    k::linear_cpu(xt, g, nullptr, h.data(), 1, hidden, 2 * n);
    auto a = as_stored(DType::bf16, silu_mul(std::vector<float>(h.begin(), h.begin() + 2 * n), 1, n));
    k::linear_cpu(a.data(), d, nullptr, y.data(), 1, n, hidden);
    for (int o = 0; o < hidden; ++o) out[o] += scale * y[sz(o)];
  };
  for (int t = 0; t < tokens; ++t) {
    const float* xt = x.data() + static_cast<long>(t) * hidden;
    float* out = ref.data() + static_cast<long>(t) * hidden;
    for (int j = 0; j < top_k; ++j) {
      const long e = expert[sz(static_cast<long>(t) * top_k + j)];
      expert_mlp(xt, gu.data() + e * 2 * width * hidden, dn.data() + e * hidden * width, width,
                 weight[sz(static_cast<long>(t) * top_k + j)], out);
    }
    if (shared_width > 0) expert_mlp(xt, sgu.data(), sdn.data(), shared_width, 1.f, out);
  }
  DevAct dx(DType::bf16, x), dgu(DType::bf16, gu), ddn(DType::bf16, dn), dsgu(DType::bf16, sgu), dsdn(DType::bf16, sdn);
  DevAct act(DType::bf16, sz(static_cast<long>(tokens) * (top_k + 1) * std::max(width, shared_width)));
  DevAct dout(DType::f32, sz(static_cast<long>(tokens) * hidden));
  Dev<std::int32_t> dexp(expert);
  Dev<float> dweight(weight);
  k::MoeDecodeArgs a;
  a.tokens = tokens, a.top_k = top_k, a.hidden = hidden, a.width = width, a.x = dx.p(), a.expert = dexp.p();
  a.weight = dweight.p(), a.gate_up = dgu.p(), a.down = ddn.p(), a.act = act.p(), a.out = static_cast<float*>(dout.p());
  if (shared_width > 0) a.shared_gate_up = dsgu.p(), a.shared_down = dsdn.p(), a.shared_width = shared_width;
  op_ok(k::moe_decode_cuda(a, nullptr));
  char s[96];
  std::snprintf(s, sizeof s, "%d tok, top %d of %d, %d x %d, shared %d", tokens, top_k, E, hidden, width, shared_width);
  rows.push_back({"moe_decode", s, "bf16->fp32", max_rel_error(dout.get(), ref), limit_for(DType::bf16), 0, ""});
}

// A row's result must not depend on how many rows share the launch (decode vs verification rows):
// the first and the last of m rows alone (one row: several weight rows a warp where rows are short)
// against the same rows among m (one weight row a warp; from 16 rows the tiled kernel,
// gemv_tiles.cu), bit for bit. silu: gate_up + SiLU into bf16; bias: an fp32 bias.
void gemv_rows_agree(std::vector<Row>& rows, int m, int groups, int in, int out, bool silu = false, bool bias = false) {
  const int wrows = silu ? 2 * out : out;
  const DType y_type = silu ? DType::bf16 : DType::f32;
  const long xw = static_cast<long>(groups) * in, yw = static_cast<long>(groups) * out;
  DevAct dx(DType::bf16, normal(sz(m * xw), 1.f, 54)), dw(DType::bf16, normal(sz(static_cast<long>(groups) * wrows * in), 0.05f, 55));
  DevAct db(DType::f32, normal(sz(yw), 0.5f, 56)), all(y_type, sz(m * yw)), one(y_type, sz(yw));
  k::GemvArgs a;
  a.in = in, a.out = out, a.groups = groups, a.x = dx.p(), a.ldx = xw, a.x_group = in, a.w = dw.p(), a.ldw = in;
  a.w_group = static_cast<long>(wrows) * in, a.ldy = yw, a.y_group = out, a.y_type = y_type;
  a.silu_mul = silu, a.up_offset = out, a.bias = bias ? db.p() : nullptr;
  a.rows = m, a.y = all.p();
  op_ok(k::gemv_cuda(a, nullptr));
  const auto ya = all.get();
  long differ = 0;
  for (const int r : {0, m - 1}) {
    a.rows = 1, a.y = one.p(), a.x = static_cast<const std::uint16_t*>(dx.p()) + r * xw;
    op_ok(k::gemv_cuda(a, nullptr));
    const auto y1 = one.get();
    for (long i = 0; i < yw; ++i) differ += ya[sz(r * yw + i)] != y1[sz(i)];
  }
  char s[112];
  std::snprintf(s, sizeof s, "rows 0, %d of %d vs alone: %d -> %d, %d groups%s%s", m - 1, m, in, out, groups, silu ? ", silu" : "",
                bias ? ", bias" : "");
  rows.push_back({"gemv", s, silu ? "bf16" : "bf16->fp32", 0, -1, differ, "bit for bit"});
}

// The CPU reference of the router kernels: fp32 logits of each row, sigmoid, moe_route_cpu.
void route_cpu(const k::MoeRouting& m, const std::vector<float>& x, const std::vector<float>& router, const std::vector<float>& bias,
               int tokens, int hidden, std::vector<std::int32_t>& expert, std::vector<float>& weight) {
  const int E = m.n_experts;
  std::vector<float> logits(sz(static_cast<long>(tokens) * E)), scores(sz(E));
  k::linear_cpu(x.data(), router.data(), nullptr, logits.data(), tokens, hidden, E);
  expert.assign(sz(static_cast<long>(tokens) * m.top_k), 0);
  weight.assign(expert.size(), 0.f);
  for (int t = 0; t < tokens; ++t) {
    k::sigmoid_cpu(logits.data() + static_cast<long>(t) * E, scores.data(), E);
    k::moe_route_cpu(m, scores.data(), bias.data(), expert.data() + static_cast<long>(t) * m.top_k,
                     weight.data() + static_cast<long>(t) * m.top_k);
  }
}

void router_route(std::vector<Row>& rows, const k::MoeRouting& m, int tokens, int hidden) {
  const int E = m.n_experts;
  const auto x = normal(sz(static_cast<long>(tokens) * hidden), 1.f, 71);
  const auto router = normal(sz(static_cast<long>(E) * hidden), 0.05f, 72);
  const auto bias = normal(sz(E), 0.3f, 73);
  std::vector<std::int32_t> expert;
  std::vector<float> weight;
  route_cpu(m, x, router, bias, tokens, hidden, expert, weight);
  Dev<float> dx(x), drouter(router), dbias(bias), dw(weight.size());
  Dev<std::int32_t> de(expert.size());
  op_ok(k::moe_router_route_cuda(m, dx.p(), hidden, drouter.p(), dbias.p(), tokens, de.p(), dw.p()));
  const auto ge = de.get();
  long differ = 0;
  for (size_t i = 0; i < expert.size(); ++i) differ += ge[i] != expert[i];
  char s[96];
  std::snprintf(s, sizeof s, "E %d, groups %d/%d, top %d, %d tok, hidden %d", E, m.topk_group, m.n_group, m.top_k, tokens, hidden);
  rows.push_back({"moe_router_route", s, "fp32", max_rel_error(dw.get(), weight), 1e-5, differ, "ids exact"});
}

// The residual add and RMSNorm folded in front of the router: the updated x (exact: one fp32 add),
// the bf16 h against rmsnorm_cpu (fp64 sums), the ids exactly and the weights.
void norm_router_route(std::vector<Row>& rows, const k::MoeRouting& m, int tokens, int hidden) {
  const int E = m.n_experts;
  const float eps = 1e-5f;
  const auto x = normal(sz(static_cast<long>(tokens) * hidden), 1.f, 74);
  const auto delta = normal(sz(static_cast<long>(tokens) * hidden), 0.5f, 75);
  const auto w = as_stored(DType::bf16, normal(sz(hidden), 0.3f, 76));
  const auto router = normal(sz(static_cast<long>(E) * hidden), 0.05f, 77);
  const auto bias = normal(sz(E), 0.3f, 78);
  std::vector<float> x_new(x.size()), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) x_new[i] = x[i] + delta[i];
  k::rmsnorm_cpu(x_new.data(), w.data(), y.data(), tokens, hidden, eps);
  std::vector<std::int32_t> expert;
  std::vector<float> weight;
  route_cpu(m, y, router, bias, tokens, hidden, expert, weight);
  Dev<float> dx(x), ddelta(delta), drouter(router), dbias(bias), dw(weight.size());
  DevAct dnorm(DType::bf16, w), dh(DType::bf16, x.size());
  Dev<std::int32_t> de(expert.size());
  op_ok(k::moe_norm_router_route_cuda(m, dx.p(), ddelta.p(), dnorm.p(), eps, hidden, drouter.p(), dbias.p(), tokens, dh.p(),
                                      de.p(), dw.p()));
  const auto ge = de.get();
  const auto gx = dx.get();
  long differ = 0;
  for (size_t i = 0; i < expert.size(); ++i) differ += ge[i] != expert[i];
  for (size_t i = 0; i < x.size(); ++i) differ += gx[i] != x_new[i];
  char s[96];
  std::snprintf(s, sizeof s, "E %d, top %d, %d tok, hidden %d", E, m.top_k, tokens, hidden);
  rows.push_back({"moe_norm_router_route", s, "fp32 weights", max_rel_error(dw.get(), weight), 1e-5, differ,
                  "ids and x exact"});
  rows.push_back({"moe_norm_router_route", s, "bf16 h", max_rel_error(dh.get(), as_stored(DType::bf16, y)),
                  limit_for(DType::bf16), 0, ""});
  // The decoder takes the fused kernel at a few tokens and add_rmsnorm + moe_router_route beyond:
  // a decode row and a verification row must agree bit for bit, so the two paths must.
  Dev<float> ux(x), uy32(x.size()), uw(weight.size());
  DevAct uh(DType::bf16, x.size());
  Dev<std::int32_t> ue(expert.size());
  op_ok(k::add_rmsnorm(ux.p(), ddelta.p(), DType::f32, dnorm.p(), uh.p(), tokens, hidden, eps, nullptr, uy32.p()));
  op_ok(k::moe_router_route_cuda(m, uy32.p(), hidden, drouter.p(), dbias.p(), tokens, ue.p(), uw.p()));
  long unequal = 0;
  const auto fw = dw.get(), gw = uw.get(), fh = dh.get(), gh = uh.get();
  const auto gue = ue.get();
  for (size_t i = 0; i < expert.size(); ++i) unequal += ge[i] != gue[i] || fw[i] != gw[i];
  for (size_t i = 0; i < x.size(); ++i) unequal += fh[i] != gh[i];
  rows.push_back({"moe_norm_router_route", s, "= add_rmsnorm + router", 0, -1, unequal, "ids, weights, h bitwise"});
}

// Random logits with the maximum planted twice (the first must win), rows of V entries.
void argmax(std::vector<Row>& rows, int R, int V) {
  auto logits = normal(sz(static_cast<long>(R) * V), 3.f, 81);
  for (int r = 0; r < R; ++r) {
    float* l = logits.data() + static_cast<long>(r) * V;
    const int a = (r * 7919 + 13) % V, b = (a + V / 2 + 1) % V;
    l[a] = l[b] = 100.f + static_cast<float>(r);
  }
  Dev<float> dl(logits);
  Dev<unsigned long long> keys(sz(R));
  op_ok(k::argmax_rows_cuda(dl.p(), R, V, keys.p()));
  const auto got = keys.get();
  long differ = 0;
  for (int r = 0; r < R; ++r) {
    const auto want = k::argmax_cpu(std::span<const float>(logits.data() + static_cast<long>(r) * V, sz(V))).token;
    differ += k::argmax_key_index(got[sz(r)]) != want;
  }
  char s[64];
  std::snprintf(s, sizeof s, "%d rows x %d, tied maxima", R, V);
  rows.push_back({"argmax_rows", s, "fp32", 0, -1, differ, "ids exact"});
}

}  // namespace

void check_decode(std::vector<Row>& rows) {
  gemv(rows, 1, 1, 2048, 1344, false, false, DType::bf16);    // MLA input projection
  gemv(rows, 3, 1, 5120, 2048, true, false, DType::bf16);     // o_proj with a bias, 3 rows
  gemv(rows, 8, 1, 2048, 3001, false, false, DType::f32);     // LM head-like, fp32 logits
  gemv(rows, 1, 1, 5120, 2048, true, false, DType::f32);      // o_proj into the fp32 residual delta, fp32 bias
  gemv(rows, 2, 20, 512, 256, false, false, DType::bf16);     // the values: per head of kv_b
  gemv(rows, 1, 1, 2048, 768, false, true, DType::bf16);      // shared expert gate_up + SiLU
  gemv(rows, 5, 1, 64, 48, false, true, DType::bf16);         // fixture-sized, odd rows
  // fp32 activations (glm5_next's products that keep them): fp32 sums of exact products.
  gemv(rows, 1, 1, 2048, 1344, false, false, DType::f32, DType::f32);
  gemv(rows, 7, 1, 5120, 2048, false, false, DType::f32, DType::f32);
  gemv(rows, 3, 1, 64, 130, false, false, DType::f32, DType::f32);  // fixture-sized
  gemv(rows, 1, 20, 192, 512, false, false, DType::bf16);     // absorbed query: 4 short rows a warp
  gemv(rows, 1, 1, 768, 5120, false, false, DType::bf16);     // q_b: 2 rows a warp
  gemv(rows, 2, 3, 96, 37, true, false, DType::f32);          // a last warp with fewer rows than it takes
  gemv_rows_agree(rows, 5, 20, 192, 512);
  gemv_rows_agree(rows, 6, 1, 768, 640);
  gemv_rows_agree(rows, 3, 3, 96, 37);
  // Past 8 rows with a grid of 8 beyond one wave: 16 rows a warp (a batch-16 LM head), whole and
  // partial (12 rows), plain and gate_up + SiLU; a row alone equals it among 16.
  gemv(rows, 16, 1, 2048, 3001, false, false, DType::f32);
  gemv(rows, 12, 1, 1024, 6000, false, true, DType::bf16);
  gemv_rows_agree(rows, 16, 1, 2048, 3001);
  // From 4 rows (no SiLU) a warp takes 2 weight rows (4 with TANDEM_GEMV_SHARED_ROWS=4; none with
  // =1) that share each x chunk: batch 6 and 16's shapes, a bias, groups (the values at batch 16:
  // 5 MB, past the tiled kernel), each row equal to itself alone; and the SiLU form at 6 rows (one
  // row a warp) beside them.
  gemv_rows_agree(rows, 6, 1, 2048, 768, true);
  gemv_rows_agree(rows, 12, 1, 2048, 1344);
  gemv_rows_agree(rows, 8, 1, 5120, 2048, false, true);
  gemv_rows_agree(rows, 16, 20, 512, 256);
  gemv(rows, 6, 20, 512, 256, false, false, DType::bf16);
  gemv(rows, 16, 1, 1536, 2048, true, false, DType::f32);
  // The tiled kernel (16 rows and more): a batch-6 verification of the DFlash pair's target (48
  // rows: LM head, gate_up + SiLU, down, grouped values), a partial last tile, an odd width, a bias.
  gemv(rows, 48, 1, 384, 4096, false, false, DType::f32);
  gemv(rows, 21, 1, 1152, 384, true, false, DType::bf16);
  gemv(rows, 19, 6, 96, 48, true, false, DType::bf16);
  gemv_rows_agree(rows, 48, 1, 384, 4096);
  gemv_rows_agree(rows, 48, 1, 384, 1152, true);
  gemv_rows_agree(rows, 48, 1, 1152, 384);
  gemv_rows_agree(rows, 48, 6, 96, 48);
  gemv_rows_agree(rows, 21, 1, 288, 37, false, true);
  gemv_rows_agree(rows, 17, 3, 2048, 3001);
  moe(rows, 1, 32, 4, 2048, 768, 768);
  moe(rows, 4, 8, 3, 64, 32, 64);
  moe(rows, 3, 6, 2, 64, 24, 0);
  router_route(rows, k::MoeRouting{32, 1, 1, 4, true, 1.8f}, 4, 2048);
  router_route(rows, k::MoeRouting{256, 8, 4, 8, true, 2.5f}, 3, 1024);
  router_route(rows, k::MoeRouting{6, 1, 1, 2, false, 2.5f}, 5, 64);
  norm_router_route(rows, k::MoeRouting{32, 1, 1, 4, true, 1.8f}, 4, 2048);
  norm_router_route(rows, k::MoeRouting{6, 1, 1, 2, false, 2.5f}, 3, 64);
  // A cluster of 8 blocks a token, a warp an expert (glm4_moe_lite's router); several experts a
  // warp, with expert groups; experts past a whole round of the cluster's warps.
  norm_router_route(rows, k::MoeRouting{64, 1, 1, 4, true, 1.8f}, 2, 2048);
  norm_router_route(rows, k::MoeRouting{256, 8, 4, 8, true, 2.5f}, 3, 1024);
  norm_router_route(rows, k::MoeRouting{160, 1, 1, 6, true, 1.f}, 1, 5120);
  argmax(rows, 1, 151552);
  argmax(rows, 5, 384);
  argmax(rows, 8, 4096);  // the largest vocabulary of one block a row (no key clearing)
}

}  // namespace gpu_check
