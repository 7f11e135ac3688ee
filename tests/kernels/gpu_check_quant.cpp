// Quantised-weight linear layers (fp8 block-scaled, NVFP4) and their dequantisation on the GPU
// against the CPU references: the same bytes as a checkpoint holds, made by the CPU quantisers.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>

#include <cmath>

#include "gpu_check.hpp"
#include "gpu_check_quant.hpp"
#include "tandem/kernels/quant_gemv.hpp"
#include "tandem/kernels/quant_weights.hpp"

namespace gpu_check {

namespace k = tandem::kernels;

namespace {

struct Quantised {
  std::vector<std::uint8_t> fp8, nvfp4, nvfp4_scales;
  std::vector<float> fp8_scale_inv;
  float global = 0;
};

Quantised quantise(const std::vector<float>& w, int out, int in) {
  Quantised q;
  q.fp8.resize(w.size());
  q.fp8_scale_inv.resize(sz(static_cast<long>((out + 127) / 128) * ((in + 127) / 128)));
  k::quantize_fp8_block_cpu(w.data(), out, in, q.fp8.data(), q.fp8_scale_inv.data());
  q.nvfp4.resize(w.size() / 2);
  q.nvfp4_scales.resize(w.size() / 16);
  k::quantize_nvfp4_cpu(w.data(), out, in, q.nvfp4.data(), q.nvfp4_scales.data(), &q.global);
  return q;
}

void linear(std::vector<Row>& rows, DType xt, int n, int in, int out) {
  const auto w = normal(sz(static_cast<long>(out) * in), 0.02f, 21);
  const auto x = as_stored(xt, normal(sz(static_cast<long>(n) * in), 1.f, 22));
  const Quantised q = quantise(w, out, in);
  DevAct dx(xt, x);
  Dev<std::uint8_t> d8(q.fp8), d4(q.nvfp4), d4s(q.nvfp4_scales);
  Dev<float> d8s(q.fp8_scale_inv), dy(sz(static_cast<long>(n) * out));
  std::vector<float> ref(sz(static_cast<long>(n) * out));
  char shape[96];
  std::snprintf(shape, sizeof shape, "%d x %d -> %d", n, in, out);

  op_ok(k::linear_fp8_block_cuda(xt, dx.p(), d8.p(), d8s.p(), dy.p(), n, in, out));
  k::linear_fp8_block_cpu(x.data(), q.fp8.data(), q.fp8_scale_inv.data(), ref.data(), n, in, out);
  rows.push_back({"linear_fp8_block", shape, std::string(k::dtype_name(xt)) + " x, f32 y", max_rel_error(dy.get(), ref),
                  1e-4, 0, ""});

  op_ok(k::linear_nvfp4_cuda(xt, dx.p(), d4.p(), d4s.p(), q.global, dy.p(), n, in, out));
  k::linear_nvfp4_cpu(x.data(), q.nvfp4.data(), q.nvfp4_scales.data(), q.global, ref.data(), n, in, out);
  rows.push_back({"linear_nvfp4", shape, std::string(k::dtype_name(xt)) + " x, f32 y", max_rel_error(dy.get(), ref),
                  1e-4, 0, ""});
}

// The bf16 scratch must hold exactly round_bf16 of the CPU's dequantised weights.
void dequant(std::vector<Row>& rows, int out, int in) {
  const auto w = normal(sz(static_cast<long>(out) * in), 0.02f, 23);
  const Quantised q = quantise(w, out, in);
  Dev<std::uint8_t> d8(q.fp8), d4(q.nvfp4), d4s(q.nvfp4_scales);
  Dev<float> d8s(q.fp8_scale_inv);
  Dev<std::uint16_t> dy(w.size());
  std::vector<float> ref(w.size());
  char shape[96];
  std::snprintf(shape, sizeof shape, "%d x %d", out, in);
  auto differ = [&](const std::vector<float>& cpu) {
    const auto got = dy.get();
    long bad = 0;
    for (size_t i = 0; i < cpu.size(); ++i) bad += got[i] != k::bf16_from_float(cpu[i]);
    return bad;
  };
  op_ok(k::dequant_fp8_block_cuda(d8.p(), d8s.p(), out, in, dy.p()));
  k::dequant_fp8_block_cpu(q.fp8.data(), q.fp8_scale_inv.data(), out, in, ref.data());
  rows.push_back({"dequant_fp8_block", shape, "fp8 -> bf16", 0, -1, differ(ref), "bits exact"});
  op_ok(k::dequant_nvfp4_cuda(d4.p(), d4s.p(), q.global, out, in, dy.p()));
  k::dequant_nvfp4_cpu(q.nvfp4.data(), q.nvfp4_scales.data(), q.global, out, in, ref.data());
  rows.push_back({"dequant_nvfp4", shape, "nvfp4 -> bf16", 0, -1, differ(ref), "bits exact"});
}

double dot(const float* x, const float* w, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += static_cast<double>(x[i]) * w[i];
  return s;
}

// quant_gemv: two stacks (a fused projection of two row counts) with a bias, or gate | up with silu.
// xt f32: glm5_next's fp32-input products (an fp32 y, no silu).
void gemv(std::vector<Row>& rows, k::QuantFormat f, int n, int in, int rows_a, int count_a, int rows_b, bool silu, DType yt,
          DType xt = DType::bf16) {
  Stack a(f, silu ? 2 : count_a, rows_a, in, 31);
  Stack b(f, rows_b > 0 ? 1 : 0, rows_b > 0 ? rows_b : 16, in, 41);
  const int out = silu ? rows_a : count_a * rows_a + (rows_b > 0 ? rows_b : 0);
  const long ldx = in + 8, ldy = out + 3;
  const auto x = as_stored(xt, normal(sz(n * ldx), 1.f, 51));
  const auto bias = as_stored(yt, normal(sz(out), 0.5f, 52));
  DevAct dx(xt, x), dbias(yt, bias), dy(yt, sz(n * ldy));
  k::QuantGemvArgs g;
  g.rows = n, g.x = dx.p(), g.ldx = ldx, g.x_type = xt, g.w = a.m, g.y = dy.p(), g.ldy = ldy, g.y_type = yt, g.silu_mul = silu;
  if (rows_b > 0) g.w2 = b.m;
  if (!silu) g.bias = dbias.p();
  op_ok(k::quant_gemv_cuda(g));
  const auto got_all = dy.get();
  std::vector<float> got, ref;
  for (int r = 0; r < n; ++r)
    for (int o = 0; o < out; ++o) {
      const float* xr = x.data() + sz(r * ldx);
      double v;
      if (silu) {
        const double gv = dot(xr, a.dense.data() + sz(static_cast<long>(o) * in), in);
        const double uv = dot(xr, a.dense.data() + sz(static_cast<long>(rows_a + o) * in), in);
        v = gv / (1 + std::exp(-gv)) * uv;
      } else {
        const long first = static_cast<long>(count_a) * rows_a;
        const float* w = o < first ? a.dense.data() + sz(static_cast<long>(o) * in) : b.dense.data() + sz((o - first) * in);
        v = dot(xr, w, in) + bias[sz(o)];
      }
      ref.push_back(static_cast<float>(v));
      got.push_back(got_all[sz(r * ldy + o)]);
    }
  char shape[96];
  std::snprintf(shape, sizeof shape, "%d x %d -> %d%s", n, in, out, silu ? " (gate|up, silu)" : rows_b > 0 ? " (2 stacks, bias)" : " (bias)");
  rows.push_back({std::string("quant_gemv ") + name_of(f), shape, std::string(k::dtype_name(xt)) + " x, " + k::dtype_name(yt) + " y",
                  max_rel_error(got, ref), limit_for(yt), 0, ""});
}

// quant_pairs_f32 (glm5_next's routed experts): P pairs of gathered fp32 token rows, each through
// its expert's [gate | up] (per_pair 2) of a stack of 2E; one pair of another rank (-1: zeros).
void pairs(std::vector<Row>& rows, k::QuantFormat f, int E, int T, int K, int H, int I) {
  Stack a(f, 2 * E, I, H, 71);
  const int P = T * K;
  const long ldx = H + 4, ldy = 2L * I + 1;
  const auto x = normal(sz(T * ldx), 1.f, 72);
  std::vector<std::int32_t> gather(sz(P)), expert(sz(P));
  for (int p = 0; p < P; ++p) gather[sz(p)] = p / K, expert[sz(p)] = p == 1 ? -1 : (p * 5 + 3) % E;
  Dev<float> dx(x), dy(sz(P * ldy));
  Dev<std::int32_t> dg(gather), de(expert);
  k::QuantPairsArgs q;
  q.pairs = P, q.per_pair = 2, q.x = dx.p(), q.ldx = ldx, q.gather = dg.p(), q.row_matrix = de.p(), q.w = a.m, q.y = dy.p(), q.ldy = ldy;
  op_ok(k::quant_pairs_f32_cuda(q));
  const auto got_all = dy.get();
  std::vector<float> got, ref;
  for (int p = 0; p < P; ++p)
    for (int o = 0; o < 2 * I; ++o) {
      const int e = expert[sz(p)];
      const float* w = a.dense.data() + sz((static_cast<long>(e) * 2 * I + o) * H);
      ref.push_back(e < 0 ? 0.f : static_cast<float>(dot(x.data() + sz(gather[sz(p)] * ldx), w, H)));
      got.push_back(got_all[sz(p * ldy + o)]);
    }
  char shape[96];
  std::snprintf(shape, sizeof shape, "%d pairs x %d -> 2 x %d (of %d experts)", P, H, I, E);
  rows.push_back({std::string("quant_pairs_f32 ") + name_of(f), shape, "f32 x, f32 y", max_rel_error(got, ref), limit_for(DType::f32), 0,
                  ""});
}

// Dequantisation of a stack into bf16 against round_bf16 of the CPU's dequantised values.
void dequant_stack(std::vector<Row>& rows, k::QuantFormat f) {
  Stack a(f, 3, 80, 1040, 61);
  Dev<std::uint16_t> dy(a.dense.size());
  op_ok(k::quant_dequant_bf16_cuda(a.m, dy.p()));
  const auto bits = dy.get();
  std::vector<float> got(bits.size()), ref(a.dense.size());
  for (size_t i = 0; i < bits.size(); ++i) got[i] = k::bf16_to_float(bits[i]), ref[i] = a.dense[i];
  rows.push_back({std::string("quant_dequant_bf16 ") + name_of(f), "3 x 80 x 1040", "-> bf16", max_rel_error(got, ref), 0.0, 0,
                  "bits exact"});
}

// The expert shapes of a moe_decode check: E experts, top K, hidden H, width I, shared width S.
struct MoeShape {
  int E, K, H, I, S;
};

// moe_decode_quant against the CPU: per token, its top-k experts' SwiGLU weighted, plus the shared;
// on the tensor cores (mma: moe_decode_quant_mma.cu, grouped when `grouped`) or the CUDA cores.
void moe_decode(std::vector<Row>& rows, k::QuantFormat f, int tokens, bool mma, MoeShape sh = {8, 3, 256, 96, 160}, bool grouped = false,
                bool normwise = false) {
  const int E = sh.E, K = sh.K, H = sh.H, I = sh.I, S = sh.S;
  Stack gu(f, 2 * E, I, H, 71), dn(f, E, H, I, 81), sgu(f, 2, S, H, 91), sdn(f, 1, H, S, 101);
  const auto x = as_stored(DType::bf16, normal(sz(tokens * H), 1.f, 111));
  std::vector<std::int32_t> expert;
  std::vector<float> weight;
  for (int t = 0; t < tokens; ++t)
    for (int j = 0; j < K; ++j) expert.push_back((t * 5 + j * 3) % E), weight.push_back(0.2f + 0.1f * static_cast<float>(j));
  DevAct dx(DType::bf16, x), dact(DType::bf16, sz(tokens * (K + 1) * std::max(I, S)));
  Dev<std::int32_t> de(expert), groups(sz(k::moe_decode_group_ints(E, K, tokens)));
  Dev<float> dw(weight), dout(sz(tokens * H));
  k::MoeDecodeArgs a;
  a.tokens = tokens, a.top_k = K, a.hidden = H, a.width = I, a.x = dx.p(), a.expert = de.p(), a.weight = dw.p();
  a.shared_width = S, a.act = dact.p(), a.out = dout.p();
  if (grouped) a.experts = E, a.groups = groups.p();
  const k::MoeDecodeQuant q{gu.m, dn.m, sgu.m, sdn.m, mma};
  const bool taken = k::moe_decode_quant_mma(a, q) == mma;
  op_ok(k::moe_decode_quant_cuda(a, q));
  auto swiglu = [&](const float* xr, const std::vector<float>& w, long gate_row, long up_row, int width, int in, std::vector<float>& act) {
    act.assign(sz(width), 0.f);
    for (int o = 0; o < width; ++o) {
      const double g = dot(xr, w.data() + sz((gate_row + o) * in), in), u = dot(xr, w.data() + sz((up_row + o) * in), in);
      act[sz(o)] = k::round_bf16(static_cast<float>(g / (1 + std::exp(-g)) * u));  // bf16, as the kernel stores it
    }
  };
  std::vector<float> ref;
  for (int t = 0; t < tokens; ++t) {
    const float* xr = x.data() + sz(t * H);
    std::vector<double> acc(sz(H), 0.0);
    std::vector<float> act;
    for (int j = 0; j < K; ++j) {
      const long e = expert[sz(t * K + j)];
      swiglu(xr, gu.dense, 2 * e * I, (2 * e + 1) * I, I, H, act);
      for (int o = 0; o < H; ++o) acc[sz(o)] += weight[sz(t * K + j)] * dot(act.data(), dn.dense.data() + sz((e * H + o) * I), I);
    }
    swiglu(xr, sgu.dense, 0, S, S, H, act);
    for (int o = 0; o < H; ++o) acc[sz(o)] += dot(act.data(), sdn.dense.data() + sz(static_cast<long>(o) * S), S);
    for (double v : acc) ref.push_back(static_cast<float>(v));
  }
  char shape[96];
  std::snprintf(shape, sizeof shape, "%d tokens, E %d top %d, %d -> %d (+ shared %d)", tokens, E, K, H, I, S);
  // `normwise`: the tensor-core form sums gate_up in another order than the reference, so at
  // GLM-4.7-Flash's shapes (6 tokens, 2048 -> 1536) a few activations near a bf16 rounding boundary
  // round one ulp the other way: 2.1e-2 per element on outputs near zero in the first GPU run,
  // 2.7e-4 normwise (H100, 2026-12-07). Those rows are normwise with a bar of 1e-3; every other row
  // per element (2-5e-6 measured) with 1e-2.
  const std::string how = std::string(mma ? (grouped ? "mma grouped, " : "mma, ") : "") + (normwise ? "normwise, " : "");
  const auto got = dout.get();
  rows.push_back({std::string("moe_decode_quant ") + name_of(f), shape, how + "bf16 x, f32 out",
                  normwise ? max_norm_error(got, ref) : max_rel_error(got, ref), normwise ? 1e-3 : 1e-2, 0,
                  taken ? "" : "FAIL: the launch took the other form"});
}

// The grouped form (moe_decode_quant_grouped.cu) against the per-pair kernels, bit for bit: out
// and act at 2 .. 16 tokens, random routing and every token on expert E - 1 (slot t % K); and a
// token alone (per pair) against the same token among 16 (grouped).
// With mma the same for the tensor-core form (grouped against one source a pair) up to 32 tokens.
void moe_decode_grouped(std::vector<Row>& rows, k::QuantFormat f, int E, int K, int H, int I, int S, bool mma = false) {
  Stack gu(f, 2 * E, I, H, 171), dn(f, E, H, I, 181), sgu(f, 2, S, H, 191), sdn(f, 1, H, S, 201);
  const int max_tokens = mma ? 32 : 16, aw = std::max(I, S);
  DevAct dx(DType::bf16, normal(sz(max_tokens * H), 1.f, 211));
  const auto weight = normal(sz(max_tokens * K), 0.5f, 212);
  Dev<std::int32_t> groups(sz(k::moe_decode_group_ints(E, K, max_tokens)));
  struct Got {
    std::vector<float> out, act;
    bool grouped;
  };
  auto run = [&](int first, int T, const std::vector<std::int32_t>& expert, bool grouped) {
    Dev<std::int32_t> de(expert);
    Dev<float> dw(std::vector<float>(weight.begin() + first * K, weight.begin() + (first + T) * K));
    DevAct act(DType::bf16, sz(T * (K + 1) * aw)), out(DType::f32, sz(T * H));
    k::MoeDecodeArgs a;
    a.tokens = T, a.top_k = K, a.hidden = H, a.width = I, a.shared_width = S;
    a.x = static_cast<const std::uint16_t*>(dx.p()) + static_cast<long>(first) * H, a.expert = de.p(), a.weight = dw.p();
    a.act = act.p(), a.out = static_cast<float*>(out.p());
    if (grouped) a.experts = E, a.groups = groups.p();
    const k::MoeDecodeQuant q{gu.m, dn.m, sgu.m, sdn.m, mma};
    op_ok(k::moe_decode_quant_cuda(a, q));
    cuda_ok(cudaDeviceSynchronize(), "moe_decode_quant");
    // grouped: whether the form checked ran (mma: the tensor-core one, grouped or per pair as a says).
    return Got{out.get(), act.get(), mma ? k::moe_decode_quant_mma(a, q) : k::moe_decode_quant_groups(a, q)};
  };
  auto routing = [&](int T, bool crowd, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<std::int32_t> expert;
    std::vector<int> ids(sz(E));
    for (int t = 0; t < T; ++t) {
      for (int e = 0; e < E; ++e) ids[sz(e)] = e;
      std::shuffle(ids.begin(), ids.end() - (crowd ? 1 : 0), rng);
      for (int j = 0; j < K; ++j) expert.push_back(crowd && j == t % K ? E - 1 : ids[sz(j)]);
    }
    return expert;
  };
  auto differ = [](const float* a, const float* b, long n) {
    long d = 0;
    for (long i = 0; i < n; ++i) d += std::memcmp(a + i, b + i, sizeof(float)) != 0;
    return d;
  };
  char shape[96];
  std::snprintf(shape, sizeof shape, "E %d top %d, %d -> %d (+ shared %d)", E, K, H, I, S);
  for (bool crowd : {false, true}) {
    long bad = 0;
    bool taken = true;
    for (int T = 2; T <= max_tokens; ++T) {
      const auto expert = routing(T, crowd, 300 + static_cast<std::uint32_t>(T));
      const Got g = run(0, T, expert, true), p = run(0, T, expert, false);
      taken = taken && g.grouped && (mma ? p.grouped : !p.grouped);
      bad += differ(g.out.data(), p.out.data(), static_cast<long>(T) * H);
      for (int t = 0; t < T; ++t)
        for (int j = 0; j <= K; ++j) {
          const long at = (static_cast<long>(t) * (K + 1) + j) * aw;
          bad += differ(g.act.data() + at, p.act.data() + at, j < K ? I : S);
        }
    }
    const auto expert = routing(max_tokens, crowd, 400);
    const Got all = run(0, max_tokens, expert, true);
    for (int t : {0, 7, 15}) {
      const Got one = run(t, 1, std::vector<std::int32_t>(expert.begin() + t * K, expert.begin() + (t + 1) * K), true);
      bad += differ(all.out.data() + static_cast<long>(t) * H, one.out.data(), H);
    }
    rows.push_back({std::string(mma ? "moe_decode_quant mma grouped " : "moe_decode_quant grouped ") + name_of(f),
                    std::string(shape) + (crowd ? ", crowded" : ""), "= per pair, alone", 0, -1, bad,
                    taken && all.grouped ? (mma ? "2..32 tok bit for bit" : "2..16 tok bit for bit") : "FAIL: the grouped launch was not taken"});
  }
}

}  // namespace

void check_quant(std::vector<Row>& rows) {
  for (k::QuantFormat f : {k::QuantFormat::fp8_block, k::QuantFormat::nvfp4}) {
    gemv(rows, f, 1, 2048, 768, 1, 576, false, DType::bf16);   // q_a | kv_a
    gemv(rows, f, 3, 1040, 136, 1, 0, false, DType::f32);      // o_proj-like, rows not a multiple of 128
    gemv(rows, f, 8, 512, 200, 2, 0, true, DType::bf16);       // gate | up with silu
    gemv(rows, f, 5, 256, 64, 4, 48, false, DType::f32);       // a stack of 4, then a second stack
    gemv(rows, f, 8, 1040, 136, 1, 40, false, DType::f32, DType::f32);  // fp32 inputs (glm5_next)
    gemv(rows, f, 1, 64, 48, 1, 32, false, DType::f32, DType::f32);     // the fixture's DSA q_a | kv_a
    pairs(rows, f, 8, 3, 2, 64, 32);                                     // the fixture's experts
    pairs(rows, f, 18, 6, 8, 1024, 256);
    dequant_stack(rows, f);
    moe_decode(rows, f, 1, false);
    moe_decode(rows, f, 4, false);
    moe_decode_grouped(rows, f, 8, 3, 256, 96, 160);
    moe_decode_grouped(rows, f, 16, 4, 2048, 128, 128);   // hidden 2048: four chunks a lane
    moe_decode_grouped(rows, f, 64, 4, 128, 1536, 1536);  // GLM-4.7-Flash's expert width, 64 experts
  }
  for (DType xt : {DType::f32, DType::bf16}) {
    linear(rows, xt, 1, 2048, 1536);   // decode, one sequence
    linear(rows, xt, 5, 4096, 520);    // rows not a multiple of the row tile
    linear(rows, xt, 16, 1040, 3000);  // `in` not a multiple of the 128-wide fp8 block
  }
  dequant(rows, 1536, 2048);
  dequant(rows, 130, 1040);
}

// The tensor-core MoE decode (moe_decode_quant_mma.cu): against the CPU at odd sizes (hidden not a
// multiple of the 64-input k step, width above and below the shared width, 32 tokens: four column
// groups of the shared experts), grouped and per pair; and batch invariance bit for bit. The small
// group is the one a memcheck runs; the full one adds GLM-4.7-Flash's expert shapes.
void check_quant_mma_small(std::vector<Row>& rows) {
  for (k::QuantFormat f : {k::QuantFormat::fp8_block, k::QuantFormat::nvfp4}) {
    moe_decode(rows, f, 1, true);
    moe_decode(rows, f, 4, true);
    moe_decode(rows, f, 4, true, {8, 3, 256, 96, 160}, true);
    moe_decode(rows, f, 1, true, {8, 3, 1040, 208, 144});
    moe_decode(rows, f, 7, true, {8, 3, 1040, 208, 144}, true);
    moe_decode(rows, f, 32, true, {16, 4, 1040, 48, 80}, true);
    moe_decode_grouped(rows, f, 8, 3, 256, 96, 160, true);
    moe_decode_grouped(rows, f, 16, 8, 1040, 208, 144, true);  // top 8, odd sizes
  }
}

void check_quant_mma(std::vector<Row>& rows) {
  check_quant_mma_small(rows);
  for (k::QuantFormat f : {k::QuantFormat::fp8_block, k::QuantFormat::nvfp4}) {
    moe_decode(rows, f, 6, true, {5, 4, 2048, 1536, 1536}, true, true);  // GLM-4.7-Flash's expert shapes
    moe_decode_grouped(rows, f, 8, 4, 512, 1536, 1536, true);     // its expert width, 2..32 tokens
  }
}

}  // namespace gpu_check
