// The grouped expert GEMM on fp32 inputs (grouped_gemm_f32_cuda over bf16 experts,
// grouped_gemm_quant_f32_cuda over fp8 / NVFP4 stacks: glm5_next's routed experts at decode sizes)
// against the CPU (fp64 sums of the bf16-rounded weights), the quantised form bit for bit against
// the per-pair kernel it replaces (quant_pairs_f32_cuda on the same sorted pairs), and each form's
// batch invariance: a pair alone gives the same bits as among all of its expert's pairs.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_check.hpp"
#include "gpu_check_quant.hpp"
#include "tandem/kernels/moe_experts.hpp"

namespace gpu_check {

namespace {

struct Case {
  const char* what;
  std::vector<int> counts;   // pairs of each expert
  int tokens, k, per, rows;  // x rows (with gather), inputs, matrices an expert and their rows
  bool gather;
  long pad_x = 0, pad_y = 0;  // row strides past k and n (pad_x a multiple of 4)
};

double dot(const float* x, const float* w, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += static_cast<double>(x[i]) * w[i];
  return s;
}

struct Pairs {
  std::vector<std::int32_t> off, gather, expert;  // expert: of each sorted pair
  int pairs = 0;
};

Pairs pairs_of(const Case& c) {
  Pairs p;
  const int E = static_cast<int>(c.counts.size());
  p.off.assign(sz(E + 1), 0);
  for (int e = 0; e < E; ++e) p.off[sz(e + 1)] = p.off[sz(e)] + c.counts[sz(e)];
  p.pairs = p.off[sz(E)];
  for (int e = 0; e < E; ++e)
    for (int i = 0; i < c.counts[sz(e)]; ++i) p.expert.push_back(e);
  for (int i = 0; i < p.pairs; ++i) p.gather.push_back(c.gather ? (i * 7 + i / 3) % c.tokens : i);
  return p;
}

long bit_diff(const std::vector<float>& a, const std::vector<float>& b, int pairs, int n, long ldy) {
  long d = 0;
  for (int p = 0; p < pairs; ++p) d += std::memcmp(a.data() + p * ldy, b.data() + p * ldy, sz(n) * sizeof(float)) != 0;
  return d;
}

// The last pair of the expert with the most pairs, alone (offsets of one pair on that expert):
// its row must be the bits it had among all of them.
template <class Launch>
long alone_differs(const Case& c, const Pairs& p, const std::vector<float>& all, int n, long ldy, Launch&& launch) {
  const int E = static_cast<int>(c.counts.size());
  int big = 0;
  for (int e = 1; e < E; ++e)
    if (c.counts[sz(e)] > c.counts[sz(big)]) big = e;
  const int last = p.off[sz(big + 1)] - 1;
  std::vector<std::int32_t> off(sz(E + 1), 0);
  for (int e = big + 1; e <= E; ++e) off[sz(e)] = 1;
  Dev<std::int32_t> doff(off), dg(std::vector<std::int32_t>{p.gather[sz(last)]});
  Dev<float> dy(sz(ldy));
  launch(doff.p(), dg.p(), dy.p(), last);
  const auto one = dy.get();
  return std::memcmp(one.data(), all.data() + last * ldy, sz(n) * sizeof(float)) != 0;
}

// long-function: one case's inputs, the grouped launch, the per-pair launch, the CPU and the lone pair.
void quantised(std::vector<Row>& rows, k::QuantFormat f, const Case& c) {
  const int E = static_cast<int>(c.counts.size()), n = c.per * c.rows;
  const Pairs p = pairs_of(c);
  const long ldx = c.k + c.pad_x, ldy = n + c.pad_y;
  const auto x = normal(sz((c.gather ? c.tokens : p.pairs) * ldx), 1.f, 161);
  Stack w(f, E * c.per, c.rows, c.k, 162);
  Dev<float> dx(x), dy(sz(p.pairs * ldy)), dref(sz(p.pairs * ldy));
  Dev<std::int32_t> doff(p.off), dgather(p.gather), dexp(p.expert);
  const std::int32_t* g = c.gather ? dgather.p() : nullptr;
  op_ok(k::grouped_gemm_quant_f32_cuda(dx.p(), ldx, g, doff.p(), E, w.m, dy.p(), ldy));
  k::QuantPairsArgs q;  // what it replaces: one pair at a time
  q.pairs = p.pairs, q.per_pair = c.per, q.x = dx.p(), q.ldx = ldx, q.gather = g, q.row_matrix = dexp.p(), q.w = w.m;
  q.y = dref.p(), q.ldy = ldy;
  op_ok(k::quant_pairs_f32_cuda(q));
  const auto got = dy.get(), per_pair = dref.get();
  std::vector<float> mine, ref;
  for (int i = 0; i < p.pairs; ++i)
    for (int o = 0; o < n; ++o) {
      const long m = static_cast<long>(p.expert[sz(i)]) * c.per + o / c.rows;
      ref.push_back(static_cast<float>(dot(x.data() + p.gather[sz(i)] * ldx, w.dense.data() + (m * c.rows + o % c.rows) * c.k, c.k)));
      mine.push_back(got[sz(i * ldy + o)]);
    }
  const long alone = alone_differs(c, p, got, n, ldy, [&](const std::int32_t* off, const std::int32_t* g1, float* y, int) {
    op_ok(k::grouped_gemm_quant_f32_cuda(dx.p(), ldx, g1, off, E, w.m, y, ldy));
  });
  char s[128];
  std::snprintf(s, sizeof s, "%s: %d pairs, %d experts, %d -> %d x %d%s", c.what, p.pairs, E, c.k, c.per, c.rows, c.gather ? "" : ", no gather");
  const std::string op = std::string("grouped_gemm_quant_f32 ") + name_of(f);
  rows.push_back({op, s, "f32 x, f32 y", max_rel_error(mine, ref), limit_for(DType::f32), 0, "vs CPU"});
  rows.push_back({op, s, "= quant_pairs_f32", 0, -1, bit_diff(got, per_pair, p.pairs, n, ldy), "pairs differing, bit for bit"});
  rows.push_back({op, s, "a pair alone", 0, -1, alone, "differs from among its expert's pairs"});
}

void dense(std::vector<Row>& rows, const Case& c) {
  const int E = static_cast<int>(c.counts.size()), n = c.per * c.rows;
  const Pairs p = pairs_of(c);
  const long ldx = c.k + c.pad_x, ldy = n + c.pad_y;
  const auto x = normal(sz((c.gather ? c.tokens : p.pairs) * ldx), 1.f, 171);
  const auto w = as_stored(DType::bf16, normal(sz(static_cast<long>(E) * n * c.k), 0.05f, 172));
  std::vector<std::uint16_t> bits(w.size());
  for (size_t i = 0; i < w.size(); ++i) bits[i] = k::bf16_from_float(w[i]);
  Dev<float> dx(x), dy(sz(p.pairs * ldy));
  Dev<std::uint16_t> dw(bits);
  Dev<std::int32_t> doff(p.off), dgather(p.gather);
  const std::int32_t* g = c.gather ? dgather.p() : nullptr;
  op_ok(k::grouped_gemm_f32_cuda(dx.p(), ldx, g, doff.p(), E, dw.p(), n, c.k, dy.p(), ldy));
  const auto got = dy.get();
  std::vector<float> mine, ref;
  for (int i = 0; i < p.pairs; ++i)
    for (int o = 0; o < n; ++o) {
      const long row = static_cast<long>(p.expert[sz(i)]) * n + o;
      ref.push_back(static_cast<float>(dot(x.data() + p.gather[sz(i)] * ldx, w.data() + row * c.k, c.k)));
      mine.push_back(got[sz(i * ldy + o)]);
    }
  const long alone = alone_differs(c, p, got, n, ldy, [&](const std::int32_t* off, const std::int32_t* g1, float* y, int) {
    op_ok(k::grouped_gemm_f32_cuda(dx.p(), ldx, g1, off, E, dw.p(), n, c.k, y, ldy));
  });
  char s[128];
  std::snprintf(s, sizeof s, "%s: %d pairs, %d experts, %d -> %d%s", c.what, p.pairs, E, c.k, n, c.gather ? "" : ", no gather");
  rows.push_back({"grouped_gemm_f32 bf16", s, "f32 x, f32 y", max_rel_error(mine, ref), limit_for(DType::f32), 0, "vs CPU"});
  rows.push_back({"grouped_gemm_f32 bf16", s, "a pair alone", 0, -1, alone, "differs from among its expert's pairs"});
}

// Pair counts of `pairs` pairs spread over E experts by a fixed hash (about even, as a random router).
std::vector<int> spread(int pairs, int E) {
  std::vector<int> c(sz(E), 0);
  for (int i = 0; i < pairs; ++i) ++c[(static_cast<unsigned>(i) * 2654435761u >> 7) % static_cast<unsigned>(E)];
  return c;
}

}  // namespace

// glm5_next's expert shapes scaled down (18 experts, top 8 at batch 6 and 16: 48 and 128 pairs),
// the benchmark model's 4096 inputs, and odd sizes: a partial row tile, empty experts, more than
// eight pairs on one expert (several passes), padded strides.
void check_moe_f32(std::vector<Row>& rows) {
  const Case cases[] = {
      {"b6 gate_up", spread(48, 18), 6, 512, 2, 128, true},
      {"b16 down", spread(128, 18), 128, 256, 1, 512, false},
      {"4096 in", {3, 0, 1, 9}, 16, 4096, 2, 64, true},
      {"odd", {0, 1, 9, 17, 0, 3}, 11, 80, 2, 45, true, 4, 3},
      {"odd", {2, 0, 20}, 22, 48, 1, 70, false, 8, 1},
  };
  for (k::QuantFormat f : {k::QuantFormat::fp8_block, k::QuantFormat::nvfp4})
    for (const Case& c : cases) quantised(rows, f, c);
  for (const Case& c : cases) dense(rows, c);
}

}  // namespace gpu_check
