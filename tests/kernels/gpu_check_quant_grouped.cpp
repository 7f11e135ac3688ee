// The grouped expert GEMM over quantised experts (grouped_gemm_quant_cuda) against its CPU
// reference (grouped_gemm_quant_cpu) and, bit for bit, against what it replaces: the stack
// dequantised into bf16 (quant_dequant_bf16_cuda) and the bf16 grouped GEMM's tensor-core form.
#include <cstdio>
#include <cstring>
#include <vector>

#include "gpu_check.hpp"
#include "gpu_check_quant.hpp"
#include "tandem/kernels/moe_experts.hpp"

namespace gpu_check {

namespace {

struct Case {
  const char* what;
  std::vector<int> counts;  // pairs of each expert
  int tokens, k, per, rows;  // x rows (with gather), inputs, matrices an expert and their rows
  bool gather;
  long pad_x = 0, pad_y = 0;  // row strides past k and n
};

// long-function: one case's inputs, three launches and the two comparisons.
void grouped(std::vector<Row>& rows, k::QuantFormat f, const Case& c) {
  const int E = static_cast<int>(c.counts.size()), n = c.per * c.rows;
  std::vector<std::int32_t> off(sz(E + 1), 0);
  for (int e = 0; e < E; ++e) off[sz(e + 1)] = off[sz(e)] + c.counts[sz(e)];
  const int pairs = off[sz(E)];
  std::vector<std::int32_t> gather(sz(pairs));
  for (int p = 0; p < pairs; ++p) gather[sz(p)] = c.gather ? (p * 7 + p / 3) % c.tokens : p;
  const long ldx = c.k + c.pad_x, ldy = n + c.pad_y;
  const auto x = as_stored(DType::bf16, normal(sz((c.gather ? c.tokens : pairs) * ldx), 1.f, 61));
  Stack w(f, E * c.per, c.rows, c.k, 62);
  DevAct dx(DType::bf16, x);
  Dev<std::int32_t> doff(off), dgather(gather);
  const std::int32_t* g = c.gather ? dgather.p() : nullptr;
  DevAct dy(DType::bf16, sz(pairs * ldy)), dref(DType::bf16, sz(pairs * ldy));
  op_ok(k::grouped_gemm_quant_cuda(dx.p(), ldx, g, doff.p(), E, w.m, dy.p(), ldy));
  // What it replaces: the dequantised stack ([E][n][k]) and the bf16 tensor-core form.
  Dev<std::uint16_t> dense(sz(static_cast<long>(E) * n * c.k));
  op_ok(k::quant_dequant_bf16_cuda(w.m, dense.p()));
  op_ok(k::grouped_gemm_cuda(dx.p(), ldx, g, doff.p(), E, dense.p(), n, c.k, dref.p(), ldy, nullptr, k::GroupedForm::mma));
  const auto got = dy.get(), ref = dref.get();
  long differ = 0;
  for (int p = 0; p < pairs; ++p) differ += std::memcmp(got.data() + p * ldy, ref.data() + p * ldy, sz(n) * sizeof(float)) != 0;
  // The CPU reference over every fifth pair of each expert and its last where the whole is costly.
  const int stride = static_cast<double>(pairs) * n * c.k > 2e8 ? 5 : 1;
  std::vector<std::int32_t> sub_off(1, 0), sub_rows;
  for (int e = 0; e < E; ++e) {
    for (int p = off[sz(e)]; p < off[sz(e + 1)]; ++p)
      if ((p - off[sz(e)]) % stride == 0 || p == off[sz(e + 1)] - 1) sub_rows.push_back(p);
    sub_off.push_back(static_cast<std::int32_t>(sub_rows.size()));
  }
  std::vector<std::int32_t> sub_gather;
  for (std::int32_t p : sub_rows) sub_gather.push_back(gather[sz(p)]);
  // (The CPU reads the stack's bytes from the host copies the Stack made them from.)
  k::QuantMatrices host = w.m;
  host.data = w.data.data();
  host.scales = f == k::QuantFormat::fp8_block ? static_cast<const void*>(w.fp8_scales.data()) : w.scales.data();
  host.global = w.globals.data();
  std::vector<float> cpu(sub_rows.size() * sz(n)), mine;
  k::grouped_gemm_quant_cpu(x.data(), ldx, sub_gather.data(), sub_off.data(), E, host, cpu.data(), n);
  for (std::int32_t p : sub_rows) mine.insert(mine.end(), got.begin() + p * ldy, got.begin() + p * ldy + n);
  char s[128];
  std::snprintf(s, sizeof s, "%s: %d pairs, %d experts, %d -> %d x %d%s", c.what, pairs, E, c.k, c.per, c.rows, c.gather ? "" : ", no gather");
  const std::string op = std::string("grouped_gemm_quant ") + name_of(f);
  rows.push_back({op, s, "bf16", max_rel_error(mine, as_stored(DType::bf16, cpu)), limit_for(DType::bf16), 0,
                  stride > 1 ? "vs CPU, every 5th pair" : "vs CPU"});
  rows.push_back({op, s, "= dequant + mma", 0, -1, differ, "pairs differing, bit for bit"});
}

// Pair counts of `pairs` pairs spread over E experts by a fixed hash (about even, as a random router).
std::vector<int> spread(int pairs, int E) {
  std::vector<int> c(sz(E), 0);
  for (int i = 0; i < pairs; ++i) ++c[(static_cast<unsigned>(i) * 2654435761u >> 7) % static_cast<unsigned>(E)];
  return c;
}

// Odd sizes: k past the last 64-wide step (and for NVFP4 rows of 8-byte multiples), output tiles
// across two matrices of an expert and past n, row strides past k and n, empty experts.
const Case kOdd[] = {
    {"odd", {0, 1, 65, 63, 130, 0}, 50, 80, 2, 45, true, 8, 3},
    {"odd", {3, 0, 64, 129}, 196, 144, 1, 70, false, 0, 0},
};

}  // namespace

void check_quant_grouped(std::vector<Row>& rows) {
  std::vector<int> skewed(32, 0);  // one expert with most pairs, several with none
  skewed[3] = 1700;
  for (int e = 6; e < 32; ++e) skewed[sz(e)] = e % 3 == 0 ? 0 : 19 + e % 5;
  const std::vector<int> real = {300, 0, 5, 64, 129, 1, 0, 40};  // GLM-4.7-Flash's experts, 8 of its 64
  for (k::QuantFormat f : {k::QuantFormat::fp8_block, k::QuantFormat::nvfp4}) {
    // The 2 B glm4_moe_lite's expert shapes at a 512-token prefill (8 of its 32 experts).
    grouped(rows, f, {"2B gate_up", spread(512, 8), 512, 2048, 2, 768, true});
    grouped(rows, f, {"2B down", spread(512, 8), 512, 768, 1, 2048, false});
    grouped(rows, f, {"real gate_up", real, 600, 2048, 2, 1536, true});
    grouped(rows, f, {"real down", real, 600, 1536, 1, 2048, false});
    grouped(rows, f, {"skewed", skewed, 512, 256, 2, 100, true});
    for (const Case& c : kOdd) grouped(rows, f, c);
  }
}

// The odd sizes alone (for compute-sanitizer, which runs the kernels many times slower).
void check_quant_grouped_small(std::vector<Row>& rows) {
  for (k::QuantFormat f : {k::QuantFormat::fp8_block, k::QuantFormat::nvfp4})
    for (const Case& c : kOdd) grouped(rows, f, c);
}

}  // namespace gpu_check
