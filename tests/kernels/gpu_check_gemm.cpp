// The dense and grouped products on the GPU against linear_cpu: cuBLASLt (GemmRunner: plain, with a
// bias, fp32 out, strided-batched per head as the absorbed MLA uses it), the few-rows kernel
// (skinny_gemm), and the MoE pieces (router logits, the expert sort, the grouped expert GEMM,
// the weighted combine). Inputs are rounded to bf16 first, so only the GPU's bf16 output rounding
// and its summation order differ from the fp64-summed reference.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "gpu_check.hpp"
#include "tandem/kernels/activation.hpp"
#include "tandem/kernels/gemm.hpp"
#include "tandem/kernels/linear.hpp"
#include "tandem/kernels/moe_experts.hpp"
#include "tandem/kernels/skinny_gemm.hpp"

namespace gpu_check {

namespace k = tandem::kernels;

namespace {

std::string shape_of(int m, int kk, int n, const char* extra = "") {
  char s[96];
  std::snprintf(s, sizeof s, "%d x %d -> %d%s", m, kk, n, extra);
  return s;
}

// y = x w^T (+ b), one way or another; returns the GPU's y.
using Run = std::vector<float> (*)(k::GemmRunner&, const DevAct&, const DevAct&, const DevAct*, int, int, int, DType);

void dense(std::vector<Row>& rows, k::GemmRunner& g, const char* op, Run run, int m, int kk, int n, bool bias, DType out) {
  const auto x = as_stored(DType::bf16, normal(sz(static_cast<long>(m) * kk), 1.f, 21));
  const auto w = as_stored(DType::bf16, normal(sz(static_cast<long>(n) * kk), 0.05f, 22));
  const auto b = as_stored(DType::bf16, normal(sz(n), 0.5f, 23));
  std::vector<float> ref(sz(static_cast<long>(m) * n));
  k::linear_cpu(x.data(), w.data(), bias ? b.data() : nullptr, ref.data(), m, kk, n);
  DevAct dx(DType::bf16, x), dw(DType::bf16, w), db(DType::bf16, b);
  const auto got = run(g, dx, dw, bias ? &db : nullptr, m, kk, n, out);
  rows.push_back({op, shape_of(m, kk, n, bias ? " +bias" : ""), out == DType::f32 ? "bf16->fp32" : "bf16",
                  max_rel_error(got, out == DType::f32 ? ref : as_stored(DType::bf16, ref)), limit_for(DType::bf16), 0, ""});
}

std::vector<float> via_lt(k::GemmRunner& g, const DevAct& x, const DevAct& w, const DevAct* b, int m, int kk, int n, DType out) {
  DevAct y(out, sz(static_cast<long>(m) * n));
  k::GemmArgs a;
  a.rows = m, a.in = kk, a.out = n, a.x = x.p(), a.ldx = kk, a.w = w.p(), a.ldw = kk, a.y = y.p(), a.ldy = n;
  a.bias = b ? b->p() : nullptr, a.y_type = out;
  op_ok(g.run(a, nullptr));
  return y.get();
}

std::vector<float> via_skinny(k::GemmRunner&, const DevAct& x, const DevAct& w, const DevAct* b, int m, int kk, int n, DType out) {
  DevAct y(out, sz(static_cast<long>(m) * n));
  op_ok(k::skinny_gemm_cuda(x.p(), kk, m, w.p(), kk, n, b ? b->p() : nullptr, y.p(), n, out));
  return y.get();
}

// Per head h: y[:, h] = x[:, h] . W_h (W_h: [in][out], not transposed), heads strided in wide rows.
void batched(std::vector<Row>& rows, k::GemmRunner& g, int m, int heads, int kk, int n) {
  const long xw = static_cast<long>(heads) * kk, yw = static_cast<long>(heads) * n;
  const auto x = as_stored(DType::bf16, normal(sz(m * xw), 1.f, 31));
  const auto w = as_stored(DType::bf16, normal(sz(static_cast<long>(heads) * kk * n), 0.05f, 32));
  std::vector<float> ref(sz(m * yw)), xt(sz(kk)), wt(sz(static_cast<long>(n) * kk));
  for (int h = 0; h < heads; ++h)
    for (int r = 0; r < m; ++r) {
      for (int i = 0; i < kk; ++i) xt[sz(i)] = x[sz(r * xw + static_cast<long>(h) * kk + i)];
      for (int o = 0; o < n; ++o)
        for (int i = 0; i < kk; ++i) wt[sz(static_cast<long>(o) * kk + i)] = w[sz((static_cast<long>(h) * kk + i) * n + o)];
      k::linear_cpu(xt.data(), wt.data(), nullptr, ref.data() + r * yw + static_cast<long>(h) * n, 1, kk, n);
    }
  DevAct dx(DType::bf16, x), dw(DType::bf16, w), dy(DType::bf16, sz(m * yw));
  k::GemmArgs a;
  a.rows = m, a.in = kk, a.out = n, a.batch = heads, a.w_trans = false;
  a.x = dx.p(), a.ldx = xw, a.stride_x = kk, a.w = dw.p(), a.ldw = n, a.stride_w = static_cast<long>(kk) * n;
  a.y = dy.p(), a.ldy = yw, a.stride_y = n;
  op_ok(g.run(a, nullptr));
  char extra[32];
  std::snprintf(extra, sizeof extra, " x %d heads", heads);
  rows.push_back({"gemm (cuBLASLt, batched)", shape_of(m, kk, n, extra), "bf16", max_rel_error(dy.get(), as_stored(DType::bf16, ref)),
                  limit_for(DType::bf16), 0, ""});
}

// Router logits, sort, grouped gate_up-like GEMM over the sorted pairs, and the weighted combine.
void experts(std::vector<Row>& rows, int tokens, int E, int top_k, int hidden, int width) {
  const auto x = as_stored(DType::bf16, normal(sz(static_cast<long>(tokens) * hidden), 1.f, 41));
  const auto router = normal(sz(static_cast<long>(E) * hidden), 0.05f, 42);
  std::vector<float> logits_ref(sz(static_cast<long>(tokens) * E));
  k::linear_cpu(x.data(), router.data(), nullptr, logits_ref.data(), tokens, hidden, E);
  DevAct dx(DType::bf16, x);
  Dev<float> drouter(router), dlogits(logits_ref.size());
  op_ok(k::router_logits_cuda(dx.p(), tokens, hidden, drouter.p(), E, dlogits.p()));
  char s[96];
  std::snprintf(s, sizeof s, "%d tok, E %d, hidden %d", tokens, E, hidden);
  rows.push_back({"router_logits", s, "bf16 x fp32", max_rel_error(dlogits.get(), logits_ref), 1e-5, 0, ""});
  {
    const auto x32 = normal(sz(static_cast<long>(tokens) * hidden), 1.f, 44);  // not bf16-representable
    std::vector<float> ref32(logits_ref.size());
    k::linear_cpu(x32.data(), router.data(), nullptr, ref32.data(), tokens, hidden, E);
    Dev<float> dx32(x32), dl32(ref32.size());
    op_ok(k::router_logits_f32_cuda(dx32.p(), tokens, hidden, drouter.p(), E, dl32.p()));
    rows.push_back({"router_logits", s, "fp32 x fp32", max_rel_error(dl32.get(), ref32), 1e-5, 0, ""});
  }

  // Each token's experts: distinct, spread (token t takes (t * 7 + j * 3) % E for j < top_k).
  std::vector<std::int32_t> expert(sz(static_cast<long>(tokens) * top_k));
  for (int t = 0; t < tokens; ++t)
    for (int j = 0; j < top_k; ++j) expert[sz(static_cast<long>(t) * top_k + j)] = (t * 7 + j * 3) % E;
  const auto weight = normal(expert.size(), 0.5f, 43);
  Dev<std::int32_t> dexp(expert), offsets(sz(E + 1)), sorted(expert.size()), pos(expert.size());
  op_ok(k::moe_sort_cuda(dexp.p(), tokens, top_k, 0, E, offsets.p(), sorted.p(), pos.p()));
  const auto off = offsets.get(), srt = sorted.get(), pp = pos.get();
  long bad = off[0] != 0 || off[sz(E)] != static_cast<int>(expert.size());
  for (size_t i = 0; i < expert.size(); ++i) {
    const int p = pp[i], e = expert[i];
    bad += p < off[sz(e)] || p >= off[sz(e + 1)] || srt[sz(p)] != static_cast<int>(i) / top_k;
  }
  rows.push_back({"moe_sort", s, "int32", 0, -1, bad, "placement exact"});

  // Grouped: y[p] = W[e(p)] x[token(p)]; reference per pair.
  const auto w = as_stored(DType::bf16, normal(sz(static_cast<long>(E) * width * hidden), 0.05f, 44));
  DevAct dw(DType::bf16, w), dy(DType::bf16, sz(static_cast<long>(expert.size()) * width));
  op_ok(k::grouped_gemm_cuda(dx.p(), hidden, sorted.p(), offsets.p(), E, dw.p(), width, hidden, dy.p(), width));
  std::vector<float> ref(sz(static_cast<long>(expert.size()) * width));
  for (size_t i = 0; i < expert.size(); ++i)
    k::linear_cpu(x.data() + static_cast<long>(i / sz(top_k)) * hidden, w.data() + static_cast<long>(expert[i]) * width * hidden,
                  nullptr, ref.data() + static_cast<long>(pp[i]) * width, 1, hidden, width);
  std::snprintf(s, sizeof s, "%d pairs over %d experts, %d x %d", static_cast<int>(expert.size()), E, hidden, width);
  const auto got = dy.get();
  rows.push_back({"grouped_gemm", s, "bf16", max_rel_error(got, as_stored(DType::bf16, ref)), limit_for(DType::bf16), 0, ""});

  // Combine (width plays hidden here): out[t] = sum_j weight * y[pos] + add[t].
  const auto add = as_stored(DType::bf16, normal(sz(static_cast<long>(tokens) * width), 1.f, 45));
  DevAct dadd(DType::bf16, add), dout(DType::bf16, sz(static_cast<long>(tokens) * width));
  Dev<float> dweight(weight);
  op_ok(k::moe_combine_cuda(dy.p(), pos.p(), dweight.p(), tokens, top_k, width, dadd.p(), dout.p()));
  std::vector<float> cref(add);
  for (int t = 0; t < tokens; ++t)
    for (int j = 0; j < top_k; ++j) {
      const size_t i = sz(static_cast<long>(t) * top_k + j);
      for (int c = 0; c < width; ++c)
        cref[sz(static_cast<long>(t) * width + c)] += weight[i] * got[sz(static_cast<long>(pp[i]) * width + c)];
    }
  std::snprintf(s, sizeof s, "%d tok, top %d, %d wide", tokens, top_k, width);
  rows.push_back({"moe_combine", s, "bf16", max_rel_error(dout.get(), as_stored(DType::bf16, cref)), limit_for(DType::bf16), 0, ""});
  // The fp32 form: the same sums, not rounded (fp32 add and out).
  Dev<float> dadd32(add), dout32(cref.size());
  op_ok(k::moe_combine_f32_cuda(dy.p(), pos.p(), dweight.p(), tokens, top_k, width, dadd32.p(), dout32.p()));
  rows.push_back({"moe_combine", s, "fp32 out", max_rel_error(dout32.get(), cref), 1e-5, 0, ""});
}

// The wgmma form's other tiles (pairs x stages) give the default tile's bits (base), and its SiLU
// form gives grouped_gemm then silu_and_mul_cuda's bits, for every tile.
void wgmma_tiles(std::vector<Row>& rows, const char* s, const DevAct& dx, const std::int32_t* gather, const Dev<std::int32_t>& doff,
                 const DevAct& dw, int pairs, int E, int n, int kk, const std::vector<float>& base) {
  const k::WgmmaTile tiles[] = {{64, 4}, {64, 3}, {128, 3}, {128, 4}};
  for (const k::WgmmaTile& tile : tiles) {
    char name[96];
    if (tile.pairs != 64 || tile.stages != 4) {
      DevAct dy(DType::bf16, sz(static_cast<long>(pairs) * n));
      op_ok(k::grouped_gemm_cuda(dx.p(), kk, gather, doff.p(), E, dw.p(), n, kk, dy.p(), n, nullptr, k::GroupedForm::wgmma, tile));
      std::snprintf(name, sizeof name, "grouped_gemm wgmma %dx%d vs 64x4", tile.pairs, tile.stages);
      rows.push_back({name, s, "bf16", 0, -1, bits_differ(dy.get(), base), "bit for bit, all pairs"});
    }
    if (n % 4 != 0) continue;  // the SiLU form's d = n / 2 must be even
    const int d = n / 2;
    DevAct dgu(DType::bf16, base), dref(DType::bf16, sz(static_cast<long>(pairs) * d)), dy(DType::bf16, sz(static_cast<long>(pairs) * d));
    op_ok(k::silu_and_mul_cuda(DType::bf16, dgu.p(), dref.p(), pairs, d));
    op_ok(k::grouped_gemm_silu_cuda(dx.p(), kk, gather, doff.p(), E, dw.p(), d, kk, dy.p(), d, nullptr, tile));
    std::snprintf(name, sizeof name, "grouped_gemm_silu wgmma %dx%d vs gemm + silu_and_mul", tile.pairs, tile.stages);
    rows.push_back({name, s, "bf16", 0, -1, bits_differ(dy.get(), dref.get()), "bit for bit, all pairs"});
  }
}

// The grouped GEMM's two forms over pairs sorted here: counts[e] pairs for expert e (zeros too),
// pair p reading x row gather[p] (a scrambled token) or, without gather, row p. The reference is
// every pair's own linear_cpu; where that is costly on the CPU it takes every fifth pair of each
// expert and its last. A third row holds the forms to each other over all pairs.
void grouped(std::vector<Row>& rows, const char* what, const std::vector<int>& counts, int tokens, int kk, int n,
             bool with_gather) {
  const int E = static_cast<int>(counts.size());
  std::vector<std::int32_t> off(sz(E + 1), 0);
  for (int e = 0; e < E; ++e) off[sz(e + 1)] = off[sz(e)] + counts[sz(e)];
  const int pairs = off[sz(E)];
  std::vector<std::int32_t> gather(sz(pairs));
  for (int p = 0; p < pairs; ++p) gather[sz(p)] = (p * 7 + p / 3) % tokens;
  const int xrows = with_gather ? tokens : pairs;
  const auto x = as_stored(DType::bf16, normal(sz(static_cast<long>(xrows) * kk), 1.f, 51));
  const auto w = as_stored(DType::bf16, normal(sz(static_cast<long>(E) * n * kk), 0.05f, 52));
  const int stride = static_cast<double>(pairs) * n * kk > 2e8 ? 5 : 1;
  std::vector<int> picked;
  std::vector<float> ref;
  for (int e = 0; e < E; ++e)
    for (int p = off[sz(e)]; p < off[sz(e + 1)]; ++p) {
      if ((p - off[sz(e)]) % stride != 0 && p != off[sz(e + 1)] - 1) continue;
      picked.push_back(p);
      ref.resize(ref.size() + sz(n));
      const long row = with_gather ? gather[sz(p)] : p;
      k::linear_cpu(x.data() + row * kk, w.data() + static_cast<long>(e) * n * kk, nullptr, ref.data() + ref.size() - sz(n), 1, kk, n);
    }
  DevAct dx(DType::bf16, x), dw(DType::bf16, w);
  Dev<std::int32_t> doff(off), dgather(gather);
  char s[128];
  std::snprintf(s, sizeof s, "%s: %d pairs, %d experts, %d -> %d%s", what, pairs, E, kk, n, with_gather ? "" : ", no gather");
  std::vector<k::GroupedForm> forms{k::GroupedForm::mma, k::GroupedForm::rows};
  if (k::grouped_wgmma_ready()) forms.push_back(k::GroupedForm::wgmma);
  const char* names[3] = {"grouped_gemm (mma)", "grouped_gemm (rows)", "grouped_gemm (wgmma)"};
  std::vector<std::vector<float>> all;
  for (size_t f = 0; f < forms.size(); ++f) {
    DevAct dy(DType::bf16, sz(static_cast<long>(pairs) * n));
    op_ok(k::grouped_gemm_cuda(dx.p(), kk, with_gather ? dgather.p() : nullptr, doff.p(), E, dw.p(), n, kk, dy.p(), n, nullptr,
                               forms[f]));
    all.push_back(dy.get());
    std::vector<float> got;
    for (int p : picked) got.insert(got.end(), all[f].begin() + static_cast<long>(p) * n, all[f].begin() + static_cast<long>(p + 1) * n);
    rows.push_back({names[f], s, "bf16", max_rel_error(got, as_stored(DType::bf16, ref)), limit_for(DType::bf16), 0,
                    stride > 1 ? "every 5th pair" : ""});
  }
  rows.push_back({"grouped_gemm mma vs rows", s, "bf16", max_rel_error(all[0], all[1]), limit_for(DType::bf16), 0, "all pairs"});
  if (all.size() == 3) {
    rows.push_back({"grouped_gemm wgmma vs mma", s, "bf16", max_rel_error(all[2], all[0]), limit_for(DType::bf16), 0, "all pairs"});
    wgmma_tiles(rows, s, dx, with_gather ? dgather.p() : nullptr, doff, dw, pairs, E, n, kk, all[2]);
  }
}

// Pair counts of `pairs` pairs spread over E experts by a fixed hash (about even, as a random router).
std::vector<int> spread(int pairs, int E) {
  std::vector<int> c(sz(E), 0);
  for (int i = 0; i < pairs; ++i) ++c[(static_cast<unsigned>(i) * 2654435761u >> 7) % static_cast<unsigned>(E)];
  return c;
}

// One expert with most of the pairs, several with none, the rest a few each.
std::vector<int> skewed() {
  std::vector<int> c(32, 0);
  c[3] = 1700;
  for (int e = 6; e < 32; ++e) c[sz(e)] = e % 3 == 0 ? 0 : 19 + e % 5;
  return c;
}

}  // namespace

void check_gemm(std::vector<Row>& rows) {
  auto runner = k::GemmRunner::create();
  if (!runner) throw std::runtime_error(runner.error().text());
  auto& g = *runner;
  dense(rows, *g, "gemm (cuBLASLt)", via_lt, 1, 2048, 1536, false, DType::bf16);
  dense(rows, *g, "gemm (cuBLASLt)", via_lt, 37, 512, 576, true, DType::bf16);
  dense(rows, *g, "gemm (cuBLASLt)", via_lt, 16, 256, 3000, false, DType::f32);
  dense(rows, *g, "skinny_gemm", via_skinny, 1, 2048, 1536, false, DType::bf16);
  dense(rows, *g, "skinny_gemm", via_skinny, 5, 24, 64, true, DType::bf16);
  dense(rows, *g, "skinny_gemm", via_skinny, 16, 256, 3000, false, DType::f32);
  dense(rows, *g, "skinny_gemm", via_skinny, 11, 80, 72, true, DType::bf16);
  batched(rows, *g, 3, 20, 192, 512);
  batched(rows, *g, 7, 4, 16, 32);
  experts(rows, 1, 32, 4, 2048, 1536);
  experts(rows, 21, 6, 2, 64, 48);
  experts(rows, 300, 64, 4, 256, 96);
  experts(rows, 9, 8, 3, 40, 44);  // rows not whole 16-byte units: the combine's one-a-thread path
  // The 2 B glm4_moe_lite's routed experts at a 512-token prefill (top 4 of 32): gate_up, down.
  grouped(rows, "2B gate_up", spread(2048, 32), 512, 2048, 2 * 768, true);
  grouped(rows, "2B down", spread(2048, 32), 512, 768, 2048, false);
  grouped(rows, "skewed", skewed(), 512, 256, 200, true);
  grouped(rows, "odd", {0, 1, 65, 63, 130, 0}, 50, 72, 45, true);
  grouped(rows, "odd", {3, 0, 64, 129}, 196, 136, 70, false);
}

}  // namespace gpu_check
