// The un-absorbed MLA prefill kernel (mla_prefill_mha_cuda) against attention_cpu, with its keys
// and values laid out as the decoder lays them out: per-head nope and value entries side by side
// in the expansion's rows, the rotary part once per row in the gathered latent rows. Whole prompts
// (one query, a partial last tile, several tiles), chunks that start mid-sequence; the shapes of
// GLM-4.7-Flash, DeepSeek (qk 192, v 128), the fixture (qk 24: padded to 16s) and an odd one (v 24);
// and bitwise: a prompt's queries give the same bits in one launch or in chunks of odd sizes (each
// walks its keys in the same chunks of 64), and in one launch or in key segments (the state
// carried between). Each for both kernels (mma.sync: rows "mla_prefill_mha"; wgmma, where the
// device and build have it: "mla_prefill_mha_wgmma"), and key segments that alternate between
// the two. Bars: flash_row (gpu_check.hpp). Also latent_gather (glue.hpp), exactly, from bf16 and
// fp8 pools.
#include <algorithm>
#include <cstdio>
#include <numeric>

#include "gpu_check.hpp"
#include "tandem/kernels/attention.hpp"
#include "tandem/kernels/glue.hpp"
#include "tandem/kernels/mla_prefill.hpp"

namespace gpu_check {

namespace k = tandem::kernels;

namespace {

struct Shape {
  int heads, nope, rope, vd;
  int qk() const { return nope + rope; }
};

// A sequence's context as the decoder holds it for the kernel: `ctx` rows of the expansion
// (heads x [nope | v]) and of the latent (lora entries, then the rope part), bf16 values.
struct Context {
  Shape s;
  int ctx = 0, lora = 0;
  std::vector<float> kv, lat;
  long kv_row() const { return static_cast<long>(s.heads) * (s.nope + s.vd); }
  long lat_row() const { return lora + s.rope; }
};

Context make_context(const Shape& s, int ctx, std::uint32_t seed) {
  Context c;
  c.s = s, c.ctx = ctx, c.lora = 64;
  c.kv = as_stored(DType::bf16, normal(sz(ctx * c.kv_row()), 1.f, seed));
  c.lat = as_stored(DType::bf16, normal(sz(ctx * c.lat_row()), 1.f, seed + 1));
  return c;
}

long q_row(const Shape& s) { return static_cast<long>(s.heads) * s.qk(); }
float scale_of(const Shape& s) { return 1.f / std::sqrt(static_cast<float>(s.qk())); }

// How the kernel is launched: its keys in segments starting at each of `cuts` (multiples of 64
// after 0; {0}: one launch), the block's queries, which kernel (`alternate`: the other one for
// every second segment).
struct Launch {
  std::vector<int> cuts{0};
  int tile_rows = 0;
  k::MlaMhaKernel kernel = k::MlaMhaKernel::mma;
  bool alternate = false;
};

k::MlaMhaKernel other(k::MlaMhaKernel kernel) {
  return kernel == k::MlaMhaKernel::mma ? k::MlaMhaKernel::wgmma : k::MlaMhaKernel::mma;
}
const char* op_name(k::MlaMhaKernel kernel) {
  return kernel == k::MlaMhaKernel::wgmma_tma ? "mla_prefill_mha_wgmma_tma"
         : kernel == k::MlaMhaKernel::wgmma   ? "mla_prefill_mha_wgmma"
                                              : "mla_prefill_mha";
}

// The kernel over queries first_pos .. first_pos + n - 1 (q: n rows of heads x (nope + rope)), each
// launch given only its segment's rows, as the decoder gives them.
std::vector<float> gpu_run(const Context& c, const std::vector<float>& q, int n, int first_pos, Launch l = {}) {
  std::vector<int>& cuts = l.cuts;
  const Shape& s = c.s;
  DevAct dq(DType::bf16, q), dkv(DType::bf16, c.kv), dlat(DType::bf16, c.lat), dout(DType::bf16, sz(static_cast<long>(n) * s.heads * s.vd));
  Dev<float> state(sz(static_cast<long>(n) * s.heads * k::mla_mha_state_floats(s.vd)));
  k::MlaMhaPrefill a;
  a.q = dq.p(), a.q_stride = q_row(s), a.q_head_stride = s.qk();
  a.k_stride = c.kv_row(), a.k_head_stride = s.nope + s.vd, a.rope_stride = c.lat_row();
  a.v_stride = c.kv_row(), a.v_head_stride = s.nope + s.vd;
  a.out = dout.p(), a.out_stride = static_cast<long>(s.heads) * s.vd, a.out_head_stride = s.vd;
  a.heads = s.heads, a.nope = s.nope, a.rope = s.rope, a.v_dim = s.vd, a.n_queries = n, a.first_pos = first_pos;
  a.scale = scale_of(s), a.state = cuts.size() > 1 ? state.p() : nullptr, a.tile_rows = l.tile_rows;
  const int keys = first_pos + n;
  cuts.push_back(keys);
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    const long k0 = cuts[i];
    a.k_nope = static_cast<std::uint16_t*>(dkv.p()) + k0 * c.kv_row();
    a.v = static_cast<std::uint16_t*>(dkv.p()) + k0 * c.kv_row() + s.nope;
    a.k_rope = static_cast<std::uint16_t*>(dlat.p()) + k0 * c.lat_row() + c.lora;
    a.key_begin = cuts[i], a.key_end = cuts[i + 1], a.resume = i > 0, a.finish = i + 2 == cuts.size();
    a.kernel = l.alternate && i % 2 == 1 ? other(l.kernel) : l.kernel;
    op_ok(k::mla_prefill_mha_cuda(a));
  }
  return dout.get();
}

// attention_cpu over the same keys, laid out [ctx][heads][nope + rope] and [ctx][heads][vd].
std::vector<float> cpu_run(const Context& c, const std::vector<float>& q, int n, int first_pos) {
  const Shape& s = c.s;
  const int qk = s.qk(), keys = first_pos + n;
  std::vector<float> kk(sz(static_cast<long>(keys) * s.heads * qk)), vv(sz(static_cast<long>(keys) * s.heads * s.vd));
  for (int j = 0; j < keys; ++j)
    for (int h = 0; h < s.heads; ++h) {
      const float* e = c.kv.data() + j * c.kv_row() + static_cast<long>(h) * (s.nope + s.vd);
      float* kd = kk.data() + (static_cast<long>(j) * s.heads + h) * qk;
      std::copy(e, e + s.nope, kd);
      std::copy(c.lat.data() + j * c.lat_row() + c.lora, c.lat.data() + (j + 1) * c.lat_row(), kd + s.nope);
      std::copy(e + s.nope, e + s.nope + s.vd, vv.data() + (static_cast<long>(j) * s.heads + h) * s.vd);
    }
  std::vector<int> qpos(sz(n)), kpos(sz(keys));
  std::iota(qpos.begin(), qpos.end(), first_pos);
  std::iota(kpos.begin(), kpos.end(), 0);
  k::AttentionShape sh;
  sh.q_heads = sh.kv_heads = s.heads, sh.qk_dim = qk, sh.v_dim = s.vd;
  sh.q_stride = q_row(s), sh.k_stride = static_cast<long>(s.heads) * qk, sh.v_stride = static_cast<long>(s.heads) * s.vd;
  sh.out_stride = static_cast<long>(s.heads) * s.vd, sh.q_head_stride = qk, sh.k_head_stride = qk, sh.v_head_stride = s.vd;
  std::vector<float> out(sz(static_cast<long>(n) * s.heads * s.vd));
  k::attention_cpu(q.data(), qpos.data(), n, kk.data(), vv.data(), kpos.data(), keys, out.data(), sh, scale_of(s));
  return out;
}

std::string shape_name(const Shape& s, const char* what, int n, int first_pos) {
  char b[128];
  std::snprintf(b, sizeof b, "%s: %d queries from %d, %dh %d+%d/%d", what, n, first_pos, s.heads, s.nope, s.rope, s.vd);
  return b;
}

void run_shape(std::vector<Row>& rows, const Shape& s, k::MlaMhaKernel kernel) {
  const Context c = make_context(s, 430, 101);
  for (auto [n, from, what] : {std::tuple{1, 0, "one query"}, std::tuple{300, 0, "prompt"}, std::tuple{100, 129, "chunk"},
                               std::tuple{64, 366, "last chunk"}}) {
    const auto q = as_stored(DType::bf16, normal(sz(n * q_row(s)), 1.f, 102 + static_cast<std::uint32_t>(n)));
    rows.push_back(flash_row(op_name(kernel), shape_name(s, what, n, from), "bf16", gpu_run(c, q, n, from, {.kernel = kernel}),
                             cpu_run(c, q, n, from), 0, ""));
  }
}

// A 300-query prompt in one launch and in chunks 0..46, 47..170, 171..299: the same bits a query.
void run_chunking(std::vector<Row>& rows, const Shape& s, k::MlaMhaKernel kernel) {
  const Context c = make_context(s, 300, 103);
  const long row = q_row(s), orow = static_cast<long>(s.heads) * s.vd;
  const auto q = as_stored(DType::bf16, normal(sz(300 * row), 1.f, 104));
  const auto whole = gpu_run(c, q, 300, 0, {.kernel = kernel});
  long differ = 0;
  for (auto [from, to] : {std::pair{0, 47}, std::pair{47, 171}, std::pair{171, 300}}) {
    const std::vector<float> qp(q.begin() + from * row, q.begin() + to * row);
    const auto got = gpu_run(c, qp, to - from, from, {.kernel = kernel});
    for (size_t e = 0; e < got.size(); ++e) differ += got[e] != whole[sz(from * orow) + e];
  }
  rows.push_back(flash_row(op_name(kernel), shape_name(s, "whole vs chunks 47+124+129", 300, 0), "bf16", whole, cpu_run(c, q, 300, 0),
                           differ, differ ? "FAIL: bits depend on the chunking" : ""));
}

// Keys in segments (a context longer than the decoder's expansion buffer): the bits of one launch.
void run_segments(std::vector<Row>& rows, const Shape& s, k::MlaMhaKernel kernel) {
  const Context c = make_context(s, 300, 107);
  for (auto [n, from, cuts] : {std::tuple{300, 0, std::vector<int>{0, 128, 256}}, std::tuple{100, 129, std::vector<int>{0, 64, 192}},
                               std::tuple{36, 264, std::vector<int>{0, 192}}}) {
    const auto q = as_stored(DType::bf16, normal(sz(n * q_row(s)), 1.f, 108 + static_cast<std::uint32_t>(n)));
    const auto whole = gpu_run(c, q, n, from, {.kernel = kernel}), parts = gpu_run(c, q, n, from, {.cuts = cuts, .kernel = kernel});
    long differ = 0;
    for (size_t e = 0; e < whole.size(); ++e) differ += whole[e] != parts[e];
    rows.push_back(flash_row(op_name(kernel), shape_name(s, "key segments vs one launch", n, from), "bf16", parts,
                             cpu_run(c, q, n, from), differ, differ ? "FAIL: bits depend on the segments" : ""));
  }
}

// Blocks of 64 and of 128 queries: the same bits (a warp's products do not depend on its block).
void run_tiles(std::vector<Row>& rows, const Shape& s, k::MlaMhaKernel kernel) {
  const Context c = make_context(s, 300, 109);
  const auto q = as_stored(DType::bf16, normal(sz(300 * q_row(s)), 1.f, 110));
  const auto big = gpu_run(c, q, 300, 0, {.tile_rows = 128, .kernel = kernel}), small = gpu_run(c, q, 300, 0, {.tile_rows = 64, .kernel = kernel});
  long differ = 0;
  for (size_t e = 0; e < big.size(); ++e) differ += big[e] != small[e];
  rows.push_back(flash_row(op_name(kernel), shape_name(s, "blocks of 64 vs 128 queries", 300, 0), "bf16", small, cpu_run(c, q, 300, 0),
                           differ, differ ? "FAIL: bits depend on the block's queries" : ""));
}

// Key segments that alternate between a wgmma form and mma.sync: one's partial state resumes in
// the other.
void run_alternating(std::vector<Row>& rows, const Shape& s, k::MlaMhaKernel kernel) {
  const Context c = make_context(s, 300, 111);
  const auto q = as_stored(DType::bf16, normal(sz(300 * q_row(s)), 1.f, 112));
  const auto got = gpu_run(c, q, 300, 0, {.cuts = {0, 64, 192}, .kernel = kernel, .alternate = true});
  rows.push_back(flash_row(op_name(kernel), shape_name(s, "segments wgmma, mma.sync, wgmma", 300, 0), "bf16", got, cpu_run(c, q, 300, 0),
                           0, ""));
}

// The TMA loads give the cp.async loads' bits (whole prompt, a chunk mid-sequence, key segments).
void run_same_bits(std::vector<Row>& rows, const Shape& s) {
  const Context c = make_context(s, 430, 115);
  long differ = 0;
  for (auto [n, from] : {std::pair{300, 0}, std::pair{100, 129}}) {
    const auto q = as_stored(DType::bf16, normal(sz(n * q_row(s)), 1.f, 116 + static_cast<std::uint32_t>(n)));
    for (const std::vector<int>& cuts : {std::vector<int>{0}, std::vector<int>{0, 64, 192}}) {
      const auto a = gpu_run(c, q, n, from, {.cuts = cuts, .kernel = k::MlaMhaKernel::wgmma});
      const auto b = gpu_run(c, q, n, from, {.cuts = cuts, .kernel = k::MlaMhaKernel::wgmma_tma});
      differ += values_differ(a, b);
    }
  }
  rows.push_back({"mla_prefill_mha_wgmma_tma", shape_name(s, "= wgmma (cp.async), whole, chunk, segments", 300, 0), "bf16", 0, -1, differ,
                  differ ? "FAIL: the loads change the bits" : "bit for bit"});
}

// latent_gather of a sequence's rows 17 .. 166 from a pool whose blocks are shuffled: exact.
void run_gather(std::vector<Row>& rows, DType kv) {
  const int bs = 16, width = 576, blocks = 12, first = 17, n = 150;
  std::vector<std::int32_t> table(sz(blocks));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(105));
  std::vector<float> pool = as_stored(DType::bf16, normal(sz(static_cast<long>(blocks) * bs * width), 1.f, 106));
  float scale = 1.f;
  std::vector<std::uint8_t> bytes;
  if (kv == DType::fp8_e4m3) {
    scale = 3.f / 448.f;
    for (float& v : pool) bytes.push_back(k::fp8_e4m3_from_float(v / scale)), v = k::round_bf16(k::fp8_e4m3_to_float(bytes.back()) * scale);
  } else {
    for (float v : pool) {
      const std::uint16_t b = k::bf16_from_float(v);
      bytes.push_back(static_cast<std::uint8_t>(b & 0xff)), bytes.push_back(static_cast<std::uint8_t>(b >> 8));
    }
  }
  Dev<std::uint8_t> dpool(bytes);
  Dev<std::int32_t> dtable(table);
  DevAct dout(DType::bf16, sz(static_cast<long>(n) * width));
  op_ok(k::latent_gather(dpool.p(), kv, scale, dtable.p(), bs, first, n, width, dout.p(), nullptr));
  std::vector<float> ref(sz(static_cast<long>(n) * width));
  k::latent_gather_cpu(pool.data(), table.data(), bs, first, n, width, ref.data());
  const auto got = dout.get();
  const long differ = values_differ(got, ref);
  rows.push_back({"latent_gather", "rows 17..166 of 576, bs16, shuffled", k::dtype_name(kv), 0, -1, differ, ""});
}

}  // namespace

void check_mla_mha(std::vector<Row>& rows) {
  const Shape glm{20, 192, 64, 256}, deepseek{3, 128, 64, 128}, fixture{4, 16, 8, 16}, odd{3, 32, 8, 24};
  k::MlaMhaPrefill probe;
  probe.heads = glm.heads, probe.nope = glm.nope, probe.rope = glm.rope, probe.v_dim = glm.vd;
  if (!k::mla_prefill_mha_fits(probe)) {
    rows.push_back({"mla_prefill_mha", "-", "-", 0, -1, 0, "FAIL: the kernel does not fit this device"});
    return;
  }
  std::vector<k::MlaMhaKernel> kernels{k::MlaMhaKernel::mma};
  if (k::mla_prefill_mha_wgmma_ready()) kernels.insert(kernels.end(), {k::MlaMhaKernel::wgmma, k::MlaMhaKernel::wgmma_tma});
  else rows.push_back({"mla_prefill_mha_wgmma", "-", "-", 0, -1, 0, "skipped: this device or build has no wgmma (sm_90 with sm_90a)"});
  for (const auto kernel : kernels) {
    run_shape(rows, glm, kernel);
    run_shape(rows, deepseek, kernel);
    run_shape(rows, fixture, kernel);
    run_shape(rows, odd, kernel);
    run_chunking(rows, glm, kernel);
    run_segments(rows, glm, kernel);
    run_segments(rows, fixture, kernel);
    run_tiles(rows, glm, kernel);
  }
  if (kernels.size() > 1) {
    run_alternating(rows, glm, k::MlaMhaKernel::wgmma);
    run_alternating(rows, glm, k::MlaMhaKernel::wgmma_tma);
    run_same_bits(rows, deepseek);
  }
  run_gather(rows, DType::bf16);
  run_gather(rows, DType::fp8_e4m3);
}

}  // namespace gpu_check
