// The MoE decode kernels' grouped form (each chosen expert read once per step) against the per-pair
// form, bit for bit: every token's output and activations at 2 .. 16 tokens, random routing and
// many tokens on one expert, each down-kernel tile height (4, 2 and 1 rows a block); and a token
// alone (one token: the per-pair kernels) against the same token among 16 (grouped).
// Group "moe_grouped": the 2 B benchmark model's shape and the small ones; "moe_grouped_small":
// the small ones only (for compute-sanitizer).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>

#include "gpu_check.hpp"
#include "tandem/kernels/moe_decode.hpp"

namespace gpu_check {

namespace k = tandem::kernels;

namespace {

struct Shape {
  int E, top_k, hidden, width, shared_width;
};

// Token t's top_k distinct experts, from a seeded generator; `crowd`: every token also takes
// expert E - 1, at slot t % top_k (as many tokens on one expert as there are tokens).
std::vector<std::int32_t> routing(const Shape& s, int tokens, bool crowd, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::int32_t> expert(sz(static_cast<long>(tokens) * s.top_k));
  std::vector<int> ids(sz(s.E));
  for (int t = 0; t < tokens; ++t) {
    for (int e = 0; e < s.E; ++e) ids[sz(e)] = e;
    std::shuffle(ids.begin(), ids.end() - (crowd ? 1 : 0), rng);
    for (int j = 0; j < s.top_k; ++j) expert[sz(static_cast<long>(t) * s.top_k + j)] = ids[sz(j)];
    if (crowd) expert[sz(static_cast<long>(t) * s.top_k + t % s.top_k)] = s.E - 1;
  }
  return expert;
}

class Case {
 public:
  explicit Case(const Shape& s, int max_tokens)
      : s_(s),
        aw_(std::max(s.width, s.shared_width)),
        x_(DType::bf16, normal(sz(static_cast<long>(max_tokens) * s.hidden), 1.f, 91)),
        gu_(DType::bf16, normal(sz(static_cast<long>(s.E) * 2 * s.width * s.hidden), 0.05f, 92)),
        dn_(DType::bf16, normal(sz(static_cast<long>(s.E) * s.hidden * s.width), 0.05f, 93)),
        sgu_(DType::bf16, normal(sz(2L * std::max(s.shared_width, 1) * s.hidden), 0.05f, 94)),
        sdn_(DType::bf16, normal(sz(static_cast<long>(s.hidden) * std::max(s.shared_width, 1)), 0.05f, 95)),
        weight_(normal(sz(static_cast<long>(max_tokens) * s.top_k), 0.5f, 96)),
        groups_(sz(k::moe_decode_group_ints(s.E, s.top_k, max_tokens))) {}

  struct Result {
    std::vector<float> out, act;
    bool grouped = false;
  };

  // Tokens first .. first + tokens - 1 of the case's inputs, with `expert` routing them.
  Result run(int first, int tokens, const std::vector<std::int32_t>& expert, bool grouped) {
    Dev<std::int32_t> dexp(expert);
    Dev<float> dweight(std::vector<float>(weight_.begin() + static_cast<long>(first) * s_.top_k,
                                          weight_.begin() + static_cast<long>(first + tokens) * s_.top_k));
    DevAct act(DType::bf16, sz(static_cast<long>(tokens) * (s_.top_k + 1) * aw_)), out(DType::f32, sz(static_cast<long>(tokens) * s_.hidden));
    k::MoeDecodeArgs a;
    a.tokens = tokens, a.top_k = s_.top_k, a.hidden = s_.hidden, a.width = s_.width;
    a.x = static_cast<const std::uint16_t*>(x_.p()) + static_cast<long>(first) * s_.hidden;
    a.expert = dexp.p(), a.weight = dweight.p(), a.gate_up = gu_.p(), a.down = dn_.p(), a.act = act.p();
    a.out = static_cast<float*>(out.p());
    if (s_.shared_width > 0) a.shared_gate_up = sgu_.p(), a.shared_down = sdn_.p(), a.shared_width = s_.shared_width;
    if (grouped) a.experts = s_.E, a.groups = groups_.p();
    op_ok(k::moe_decode_cuda(a, nullptr));
    cuda_ok(cudaDeviceSynchronize(), "moe_decode");
    return {out.get(), act.get(), k::moe_decode_groups(a)};
  }

  const Shape& shape() const { return s_; }

 private:
  Shape s_;
  int aw_;
  DevAct x_, gu_, dn_, sgu_, sdn_;
  std::vector<float> weight_;
  Dev<std::int32_t> groups_;
};

long differ(const std::vector<float>& a, const std::vector<float>& b, long n) {
  long d = 0;
  for (long i = 0; i < n; ++i) d += std::memcmp(&a[sz(i)], &b[sz(i)], sizeof(float)) != 0;
  return d;
}

std::string name(const Shape& s) {
  char b[96];
  std::snprintf(b, sizeof b, "top %d of %d, %d x %d, shared %d", s.top_k, s.E, s.hidden, s.width, s.shared_width);
  return b;
}

// Grouped = per pair at 2 .. 16 tokens, random and crowded routing; the grouped launch must have
// been taken (else the comparison would be of one kernel with itself).
void grouped_vs_pairs(std::vector<Row>& rows, Case& c) {
  const Shape& s = c.shape();
  const long aw = std::max(s.width, s.shared_width);
  for (bool crowd : {false, true}) {
    long bad = 0;
    std::string note;
    for (int T = 2; T <= 16; ++T) {
      const auto expert = routing(s, T, crowd, 100 + static_cast<std::uint32_t>(T));
      const auto g = c.run(0, T, expert, true), p = c.run(0, T, expert, false);
      if (!g.grouped || p.grouped) note = "FAIL: the grouped launch was not taken";
      bad += differ(g.out, p.out, static_cast<long>(T) * s.hidden);
      // The activations: every slot's rows (the shared slot's, and the routed ones up to width).
      for (int t = 0; t < T; ++t)
        for (int j = 0; j <= s.top_k; ++j) {
          const long n = j < s.top_k ? s.width : s.shared_width, at = (static_cast<long>(t) * (s.top_k + 1) + j) * aw;
          for (long i = 0; i < n; ++i) bad += std::memcmp(&g.act[sz(at + i)], &p.act[sz(at + i)], sizeof(float)) != 0;
        }
    }
    rows.push_back({"moe_decode grouped", name(s) + ", 2..16 tok" + (crowd ? ", crowded" : ""), "= per pair", 0, -1, bad,
                    note.empty() ? "out and act bit for bit" : note});
  }
}

// Token t alone (the per-pair kernels) against token t among 16 (grouped), for several t.
void alone_vs_among(std::vector<Row>& rows, Case& c) {
  const Shape& s = c.shape();
  for (bool crowd : {false, true}) {
    const auto expert = routing(s, 16, crowd, 200);
    const auto all = c.run(0, 16, expert, true);
    long bad = 0;
    for (int t : {0, 5, 15}) {
      const std::vector<std::int32_t> mine(expert.begin() + static_cast<long>(t) * s.top_k, expert.begin() + static_cast<long>(t + 1) * s.top_k);
      const auto one = c.run(t, 1, mine, true);
      bad += differ(std::vector<float>(all.out.begin() + static_cast<long>(t) * s.hidden, all.out.end()), one.out, s.hidden);
    }
    rows.push_back({"moe_decode grouped", name(s) + ", token alone vs among 16" + (crowd ? ", crowded" : ""), "bit for bit", 0, -1,
                    bad, all.grouped ? "" : "FAIL: the grouped launch was not taken"});
  }
}

void run_shape(std::vector<Row>& rows, const Shape& s) {
  Case c(s, 16);
  grouped_vs_pairs(rows, c);
  alone_vs_among(rows, c);
}

void small_shapes(std::vector<Row>& rows) {
  run_shape(rows, {8, 3, 64, 32, 64});  // a down block of 4 rows
  run_shape(rows, {6, 2, 64, 24, 0});   // no shared experts; a lane's chunks straddle slots
  run_shape(rows, {64, 4, 64, 1536, 1536});  // wide experts: one row a block (R = 1)
  run_shape(rows, {8, 2, 384, 192, 192});    // the DFlash pair's target (models/dflash-pair)
}

}  // namespace

void check_moe_grouped(std::vector<Row>& rows) {
  run_shape(rows, {32, 4, 2048, 768, 768});  // the 2 B benchmark model (2 rows a block at 16 tokens)
  small_shapes(rows);
}

void check_moe_grouped_small(std::vector<Row>& rows) { small_shapes(rows); }

}  // namespace gpu_check
