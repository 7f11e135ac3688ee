// glm5_next's kernels (glm5_next.hpp) against their CPU references on seeded inputs, in the shapes of
// the fixture tests/model/fixtures/glm5_next_text (hc 4 x 64 with 20 Sinkhorn iterations; KDA 2 heads
// of 16, conv 4, lower bound -5; DSA latent 32, indexer 2 heads of 16, k-pools of 4) and variants:
// hyper-connections, the KDA recurrence (two sequences, one resumed from a state, one reset), the
// indexer's selection (the CPU's scores and tail, with a top-k that leaves pools out; equal scores
// may pick other pools than the CPU's torch.topk order), attention over the selected latents, the
// clamped SwiGLU, the fp32-activation products, the streams' embedding and mean, the MoE combine and
// local-expert renumbering,
// the fp32 RMSNorm and bf16 conversions, and the DSA layer's input preparation.
// Errors here are max|gpu - cpu| / max|cpu| (the measure these bars were set in), noted per row.
#include <algorithm>
#include <cmath>

#include "../model/check_program.hpp"  // rel_error: the measure the model checks use too
#include "gpu_check.hpp"
#include "tandem/kernels/attention.hpp"
#include "tandem/kernels/glm5_next.hpp"
#include "tandem/kernels/linear.hpp"
#include "tandem/kernels/rmsnorm.hpp"

namespace gpu_check {

namespace k = tandem::kernels;

namespace {

const char* kMeasure = "max|d|/max|ref|";

void push(std::vector<Row>& rows, const char* op, const std::string& shape, double err, double limit) {
  rows.push_back({op, shape, "f32", err, limit, 0, kMeasure});
}

// Values as a bf16 buffer holds them, with the bits for the device.
std::vector<std::uint16_t> bf16_bits(std::vector<float>& x) {
  std::vector<std::uint16_t> b(x.size());
  for (size_t i = 0; i < x.size(); ++i) b[i] = k::bf16_from_float(x[i]), x[i] = k::bf16_to_float(b[i]);
  return b;
}

// hidden 64 is one chunk of the mix's partial dots; wider ones (hc_collapse_cuda splits hc * hidden
// into 512-input chunks) several, the last one short where 512 does not divide it. The last token
// alone must equal itself in the batch, bit for bit (the chunks are added in order per token).
void hyper_connections(std::vector<Row>& rows, int hc, int iters, std::uint32_t seed, int hidden = 64) {
  k::HcShape s;
  s.hc = hc, s.hidden = hidden, s.sinkhorn_iters = iters, s.rms_eps = 1e-5f, s.hc_eps = 1e-6f;
  const int H = s.hidden, M = (2 + hc) * hc, T = 5;
  const auto fn = normal(sz(M * hc * H), 0.05f, seed), base = normal(sz(M), 0.5f, seed + 1);
  const std::vector<float> scale = {0.7f, 1.3f, 0.9f};
  const auto streams = normal(sz(T * hc * H), 1.f, seed + 2), y = normal(sz(T * H), 1.f, seed + 3);
  std::vector<float> collapsed(sz(T * H)), post(sz(T * hc)), comb(sz(T * hc * hc)), expanded = streams;
  k::hc_collapse_cpu(s, streams.data(), T, fn.data(), base.data(), scale.data(), collapsed.data(), post.data(),
                     comb.data());
  k::hc_expand_cpu(s, expanded.data(), T, y.data(), post.data(), comb.data());
  Dev<float> d_streams(streams), d_fn(fn), d_base(base), d_scale(scale), d_y(y);
  Dev<float> d_col(collapsed.size()), d_post(post.size()), d_comb(comb.size());
  Dev<float> d_scratch(sz(k::hc_collapse_scratch_floats(s, T)));
  op_ok(k::hc_collapse_cuda(s, d_streams.p(), T, d_fn.p(), d_base.p(), d_scale.p(), d_col.p(), d_post.p(), d_comb.p(),
                            d_scratch.p(), nullptr));
  const auto col = d_col.get(), pst = d_post.get(), cmb = d_comb.get();
  // The last token alone (its streams at the start of the buffer).
  Dev<float> d_last(std::vector<float>(streams.end() - hc * H, streams.end()));
  Dev<float> d_col1(sz(H)), d_post1(sz(hc)), d_comb1(sz(hc * hc));
  op_ok(k::hc_collapse_cuda(s, d_last.p(), 1, d_fn.p(), d_base.p(), d_scale.p(), d_col1.p(), d_post1.p(), d_comb1.p(),
                            d_scratch.p(), nullptr));
  const bool alone = d_col1.get() == std::vector<float>(col.end() - H, col.end()) &&
                     d_post1.get() == std::vector<float>(pst.end() - hc, pst.end()) &&
                     d_comb1.get() == std::vector<float>(cmb.end() - hc * hc, cmb.end());
  op_ok(k::hc_expand_cuda(s, d_streams.p(), T, d_y.p(), d_post.p(), d_comb.p(), nullptr));
  const double err = std::max({check_program::rel_error(col, collapsed), check_program::rel_error(pst, post),
                               check_program::rel_error(cmb, comb), check_program::rel_error(d_streams.get(), expanded)});
  const std::string what = "hc " + std::to_string(hc) + " x " + std::to_string(H) + ", " + std::to_string(iters) + " Sinkhorn, 5 tokens";
  push(rows, "hc_collapse+expand", what, err, 1e-4);
  rows.push_back({"hc_collapse", what + "; the last token alone", "f32", 0, -1, alone ? 0 : 1,
                  alone ? "bit for bit its batched result" : "differs from its batched result"});
}

void streams_embed_mean(std::vector<Row>& rows) {
  const int V = 50, H = 64, hc = 4, T = 6;
  auto table = normal(sz(V * H), 1.f, 71);
  const auto bits = bf16_bits(table);
  const std::vector<std::int32_t> ids = {3, 0, 49, 3, 17, 8};
  std::vector<float> streams(sz(T * hc * H)), mean(sz(T * H));
  k::hc_embed_cpu(table.data(), ids.data(), T, hc, H, streams.data());
  const auto mixed = normal(streams.size(), 1.f, 72);
  k::hc_mean_cpu(mixed.data(), T, hc, H, mean.data());
  Dev<std::uint16_t> d_table(bits);
  Dev<std::int32_t> d_ids(ids);
  Dev<float> d_streams(streams.size()), d_mixed(mixed), d_mean(mean.size());
  op_ok(k::hc_embed_cuda(d_table.p(), d_ids.p(), T, hc, H, d_streams.p(), nullptr));
  op_ok(k::hc_mean_cuda(d_mixed.p(), T, hc, H, d_mean.p(), nullptr));
  const auto got = d_streams.get();
  long differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += got[i] != streams[i];
  rows.push_back({"hc_embed", "6 tokens x 4 streams x 64", "bf16 -> f32", 0, -1, differ, "exact"});
  push(rows, "hc_mean", "6 tokens x 4 streams x 64", check_program::rel_error(d_mean.get(), mean), 1e-6);
}

// The fp32 glue: strided RMSNorm into fp32 and bf16 (rmsnorm_cpu is its reference), and the
// bf16 <-> fp32 row copies (the CPU's conversions, bit for bit).
void glue_f32(std::vector<Row>& rows) {
  const int n_rows = 5, n = 96;
  const long ldx = 128, ldy = 100, ldb = 112;
  const auto x = normal(sz(n_rows * ldx), 2.f, 75), w = normal(sz(n), 1.f, 76);
  std::vector<float> packed(sz(n_rows * n)), want(sz(n_rows * n));
  for (int r = 0; r < n_rows; ++r) std::copy_n(x.data() + r * ldx, n, packed.data() + r * n);
  k::rmsnorm_cpu(packed.data(), w.data(), want.data(), n_rows, n, 1e-5f);
  Dev<float> d_x(x), d_w(w), d_y(std::vector<float>(sz(n_rows * ldy), 0.f));
  Dev<std::uint16_t> d_b(std::vector<std::uint16_t>(sz(n_rows * ldb), 0));
  op_ok(k::rms_norm_f32(d_x.p(), ldx, n_rows, n, d_w.p(), 1e-5f, d_y.p(), ldy, d_b.p(), ldb, nullptr));
  const auto y = d_y.get();
  const auto b = d_b.get();
  std::vector<float> got(want.size()), got_b(want.size()), want_b(want.size());
  for (int r = 0; r < n_rows; ++r)
    for (int i = 0; i < n; ++i) {
      got[sz(r * n + i)] = y[sz(r * ldy + i)];
      got_b[sz(r * n + i)] = k::bf16_to_float(b[sz(r * ldb + i)]);
      want_b[sz(r * n + i)] = k::round_bf16(want[sz(r * n + i)]);
    }
  push(rows, "rms_norm_f32", "5 x 96 of rows of 128, fp32 out", check_program::rel_error(got, want), 1e-5);
  rows.push_back({"rms_norm_f32", "5 x 96 of rows of 128, bf16 out", "bf16", max_rel_error(got_b, want_b),
                  limit_for(DType::bf16), 0, ""});

  Dev<std::uint16_t> d_h(std::vector<std::uint16_t>(sz(n_rows * ldb), 0));
  Dev<float> d_back(std::vector<float>(sz(n_rows * ldy), 0.f));
  op_ok(k::to_bf16(d_x.p(), ldx, n_rows, n, d_h.p(), ldb, nullptr));
  op_ok(k::to_f32(d_h.p(), ldb, n_rows, n, d_back.p(), ldy, nullptr));
  const auto h = d_h.get();
  const auto back = d_back.get();
  long differ = 0;
  for (int r = 0; r < n_rows; ++r)
    for (int i = 0; i < n; ++i) {
      const std::uint16_t want_bits = k::bf16_from_float(x[sz(r * ldx + i)]);
      differ += h[sz(r * ldb + i)] != want_bits;
      differ += back[sz(r * ldy + i)] != k::bf16_to_float(want_bits);
    }
  rows.push_back({"to_bf16+to_f32", "5 x 96, strided rows", "f32 <-> bf16", 0, -1, differ, "bit patterns"});

  // The split of an fp32 product's input: hi and lo bit for bit, and hi + lo within 2^-16 of x.
  Dev<std::uint16_t> d_lo(std::vector<std::uint16_t>(sz(n_rows * ldb), 0));
  op_ok(k::to_bf16_split(d_x.p(), ldx, n_rows, n, d_h.p(), d_lo.p(), ldb, nullptr));
  const auto hi = d_h.get(), lo = d_lo.get();
  long split_differ = 0;
  double split_err = 0;
  for (int r = 0; r < n_rows; ++r)
    for (int i = 0; i < n; ++i) {
      const float v = x[sz(r * ldx + i)], want_hi = k::round_bf16(v);
      split_differ += hi[sz(r * ldb + i)] != k::bf16_from_float(v);
      split_differ += lo[sz(r * ldb + i)] != k::bf16_from_float(v - want_hi);
      const double sum = static_cast<double>(k::bf16_to_float(hi[sz(r * ldb + i)])) + k::bf16_to_float(lo[sz(r * ldb + i)]);
      if (v != 0.f) split_err = std::max(split_err, std::fabs(sum - v) / std::fabs(v));
    }
  rows.push_back({"to_bf16_split", "5 x 96, strided rows: hi, lo bits", "f32 -> 2 bf16", 0, -1, split_differ, "bit patterns"});
  rows.push_back({"to_bf16_split", "5 x 96: |hi + lo - x| / |x|", "f32 -> 2 bf16", split_err, 1.0 / 65536, 0, ""});
}

void kda(std::vector<Row>& rows, const k::KdaShape& s, const std::string& name, std::uint32_t seed) {
  const int heads = s.heads, hd = s.head_dim, K = s.conv_kernel, qk = heads * hd;
  const long sf = k::kda_state_floats(s);
  const auto conv = normal(sz(3 * qk * K), 0.5f, seed), a_log = normal(sz(heads), 0.5f, seed + 1);
  const auto dt_bias = normal(sz(qk), 0.5f, seed + 2), o_norm = normal(sz(hd), 1.f, seed + 3);
  const k::KdaWeights w{conv.data(), a_log.data(), dt_bias.data(), o_norm.data()};
  // Two sequences: A (5 tokens, state slot 2, resumed from a random state), B (3 tokens, slot 0, reset).
  const int lens[2] = {5, 3}, slots[2] = {2, 0}, resets[2] = {0, 1};
  const int T = lens[0] + lens[1], slots_n = 3;
  const auto u = normal(sz(T * 3 * qk), 1.f, seed + 4), g = normal(sz(T * qk), 1.f, seed + 5);
  const auto beta = normal(sz(T * heads), 1.f, seed + 6), gate = normal(sz(T * qk), 1.f, seed + 7);
  auto state = normal(sz(slots_n * sf), 0.3f, seed + 8);
  Dev<float> d_state(state);  // before the CPU advances it
  std::vector<float> o(sz(T * qk));
  int t = 0;
  for (int q = 0; q < 2; ++q) {
    float* st = state.data() + slots[q] * sf;
    if (resets[q]) std::fill(st, st + sf, 0.f);
    for (int i = 0; i < lens[q]; ++i, ++t)
      k::kda_token_cpu(s, w, u.data() + t * 3 * qk, g.data() + t * qk, beta.data() + t * heads, gate.data() + t * qk,
                       st, o.data() + t * qk);
  }
  Dev<float> d_u(u), d_g(g), d_beta(beta), d_gate(gate), d_o(o.size());
  Dev<float> d_conv(conv), d_alog(a_log), d_dt(dt_bias), d_norm(o_norm);
  Dev<std::int32_t> d_begin(std::vector<std::int32_t>{0, lens[0], T}),
      d_slot(std::vector<std::int32_t>{slots[0], slots[1]});
  Dev<std::int32_t> d_reset(std::vector<std::int32_t>{resets[0], resets[1]});
  k::KdaIo io;
  io.u = d_u.p(), io.ld_u = 3 * qk, io.g_raw = d_g.p(), io.ld_g = qk, io.beta_raw = d_beta.p(), io.ld_beta = heads;
  io.gate_raw = d_gate.p(), io.ld_gate = qk, io.o = d_o.p(), io.ld_o = qk;
  op_ok(k::kda_recurrent_cuda(s, {d_conv.p(), d_alog.p(), d_dt.p(), d_norm.p()}, io, 2, d_begin.p(), d_slot.p(),
                              d_reset.p(), d_state.p(), sf, 0, nullptr));
  const double err = std::max(check_program::rel_error(d_o.get(), o), check_program::rel_error(d_state.get(), state));
  push(rows, "kda_recurrent", name + "; outputs, all slots' states", err, 1e-4);
}

// A DSA pool of `type` over `bytes` (host or device) for one sequence.
k::DsaPool dsa_pool(void* bytes, k::DType type, float scale, int width, const std::int32_t* table, int blocks, int block) {
  k::DsaPool p;
  p.rows = bytes, p.type = type, p.scale = scale, p.width = width, p.tables = table, p.max_blocks = blocks, p.block_size = block;
  return p;
}
// fp8 pools are checked at a scale other than 1, so that the kernels' x / scale and fp8 * scale are.
float pool_scale(k::DType type) { return type == k::DType::fp8_e4m3 ? 0.75f : 1.f; }

// long-function: one DSA layer checked in the order it runs: inputs, indexer selection, then attention vs the CPU.
void dsa(std::vector<Row>& rows, const k::DsaShape& s, const std::string& name, std::uint32_t seed, k::DType type) {
  const int kp = s.kpool, D = s.index_dim, IH = s.index_heads, L = s.lora_kv, R = s.rope;
  const int width = L + R + 2 * D, n = 37, block = 8, blocks = (n + block - 1) / block;
  const float ps = pool_scale(type);
  const std::string of = name + (type == k::DType::f32 ? "" : std::string(", ") + k::dtype_name(type) + " pool");
  // One sequence of n cached tokens, its blocks in a shuffled order of a pool of blocks + 3.
  std::vector<std::int32_t> table(sz(blocks));
  for (int b = 0; b < blocks; ++b) table[sz(b)] = (b * 5 + 3) % (blocks + 3);
  auto pool_bytes = encode(type, normal(sz((blocks + 3) * block * width), 1.f, seed), ps);
  const auto pool = decode(type, pool_bytes, ps);  // the values both sides read
  const auto ape = normal(sz(kp * D), 0.5f, seed + 1);
  const k::DsaPool host = dsa_pool(pool_bytes.data(), type, ps, width, table.data(), blocks, block);
  const auto keys = k::dsa_pool_keys_cpu(s, host, 0, ape.data(), n);
  std::vector<std::int32_t> pos(sz(n));
  for (int i = 0; i < n; ++i) pos[sz(i)] = i;
  // Queries at the last 6 positions and a few early ones.
  const std::vector<std::int32_t> at = {0, 3, 4, 9, n - 6, n - 5, n - 4, n - 3, n - 2, n - 1};
  const int T = static_cast<int>(at.size());
  const auto iq = normal(sz(T * IH * D), 1.f, seed + 2), iw = normal(sz(T * IH), 1.f, seed + 3);
  std::vector<std::vector<int>> want;
  for (int t = 0; t < T; ++t)
    want.push_back(
        k::dsa_select_keys_cpu(s, keys, iq.data() + t * IH * D, iw.data() + t * IH, pos.data(), n, at[sz(t)]));
  const int max_sel = s.index_topk + kp, max_pools = n / kp + 1;
  Dev<std::uint8_t> d_pool(pool_bytes);
  Dev<float> d_iq(iq), d_iw(iw), d_ape(ape), d_scores(sz(T * max_pools));
  Dev<std::int32_t> d_table(table), d_seq(std::vector<std::int32_t>(sz(T), 0)), d_pos(at);
  Dev<std::int32_t> d_chosen(sz(T * max_pools)), d_sel(sz(T * max_sel)), d_n(sz(T));
  const k::DsaPool dev = dsa_pool(d_pool.p(), type, ps, width, d_table.p(), blocks, block);
  op_ok(k::dsa_select_cuda(s, dev, d_iq.p(), IH * D, d_iw.p(), d_ape.p(), T, d_seq.p(), d_pos.p(), d_scores.p(),
                           d_chosen.p(), max_pools, d_sel.p(), d_n.p(), max_sel, nullptr));
  const auto got_sel = d_sel.get();
  const auto got_n = d_n.get();
  // The GPU breaks equal pool scores by pool order, the CPU as torch.topk's CPU kernel does, so a
  // selection counts as right when it has the CPU's tail and its pools carry the same scores (the
  // CPU's, for both) as the CPU's pools.
  auto split = [&](int t, const std::vector<int>& sel, std::vector<float>& scores, std::vector<int>& tail) {
    const int visible = at[sz(t)] + 1, tail_at = kp > 1 && s.select_tail ? visible - visible % kp : visible;
    for (int j : sel) {
      if (j >= tail_at)
        tail.push_back(j);
      else if (j % kp == 0)
        scores.push_back(k::dsa_pool_score_cpu(s, keys.data() + static_cast<long>(j / kp) * D, iq.data() + t * IH * D,
                                               iw.data() + t * IH));
    }
    std::sort(scores.begin(), scores.end());
  };
  int same = 0, equivalent = 0, left_out = 0;
  for (int t = 0; t < T; ++t) {
    const auto& wnt = want[sz(t)];
    std::vector<int> got(got_sel.begin() + t * max_sel, got_sel.begin() + t * max_sel + got_n[sz(t)]);
    same += got == wnt;
    std::vector<float> s_got, s_want;
    std::vector<int> tail_got, tail_want;
    split(t, got, s_got, tail_got);
    split(t, wnt, s_want, tail_want);
    equivalent += s_got == s_want && tail_got == tail_want && got.size() == wnt.size();
    left_out += at[sz(t)] + 1 - static_cast<int>(wnt.size());
  }
  rows.push_back({"dsa_select", of + ", 10 queries of 37 keys", "f32 -> ids", 0, -1, T - equivalent,
                  std::to_string(same) + "/" + std::to_string(T) +
                      " the very same keys (equal scores may pick other pools), " + std::to_string(left_out) +
                      " visible keys left out"});

  // Attention over the selected latents: per head, q = [q_lat (L), q_rope (R)] against rows [c, kr],
  // values c. The reference attends over the keys the GPU selected (which may differ from the CPU's
  // at equal scores: the selection itself is checked above), so this row checks the attention alone.
  const int heads = 3, W = L + R;
  const auto qlat = normal(sz(T * heads * L), 1.f, seed + 4), qall = normal(sz(T * heads * (8 + R)), 1.f, seed + 5);
  std::vector<float> out(sz(T * heads * L));
  const float scale = 0.2f;
  for (int t = 0; t < T; ++t) {
    const std::vector<int> sel(got_sel.begin() + t * max_sel, got_sel.begin() + t * max_sel + got_n[sz(t)]);
    std::vector<float> k_rows, q(sz(heads * W));
    for (int j : sel) {
      const float* row = pool.data() + (static_cast<long>(table[sz(j / block)]) * block + j % block) * width;
      k_rows.insert(k_rows.end(), row, row + W);
    }
    for (int h = 0; h < heads; ++h) {
      std::copy_n(qlat.data() + (t * heads + h) * L, L, q.data() + h * W);
      std::copy_n(qall.data() + t * heads * (8 + R) + h * (8 + R) + 8, R, q.data() + h * W + L);
    }
    k::AttentionShape a;
    a.q_heads = heads, a.kv_heads = 1, a.qk_dim = W, a.v_dim = L;
    a.q_stride = heads * W, a.q_head_stride = W, a.k_stride = W, a.v_stride = W, a.out_stride = heads * L;
    k::attention_cpu(q.data(), &at[sz(t)], 1, k_rows.data(), k_rows.data(), sel.data(), static_cast<int>(sel.size()),
                     out.data() + t * heads * L, a, scale);
  }
  Dev<float> d_qlat(qlat), d_qall(qall), d_out(out.size());
  op_ok(k::dsa_attention_cuda(s, dev, heads, d_qlat.p(), d_qall.p() + 8, heads * (8 + R), 8 + R, T, d_seq.p(),
                              d_sel.p(), d_n.p(), max_sel, scale, d_out.p(), nullptr));
  push(rows, "dsa_attention", of + ", 3 heads over the selection", check_program::rel_error(d_out.get(), out), 1e-4);
}

// dsa_prepare: one fused projection per token into the query's normed LoRA, the pool row and the
// index weights, on a full (indexer) layer and on a shared one (its rows' indexer part zero).
// A bf16 / fp8 pool's rows are held to one rounding step of their type: a last-bit difference of
// the fp32 value (the CPU sums in fp64) may round the other way.
void dsa_prepare(std::vector<Row>& rows, k::DsaShape s, bool indexer, std::uint32_t seed, k::DType type) {
  s.indexer = indexer;
  const int D = s.index_dim, width = s.lora_kv + s.rope + 2 * D, T = 6, block = 4, blocks = 3;
  const long ld = s.lora_q + s.lora_kv + s.rope + 2 * D + s.index_heads;
  const auto proj = normal(sz(T * ld), 1.5f, seed);
  const auto qn = normal(sz(s.lora_q), 1.f, seed + 1), kvn = normal(sz(s.lora_kv), 1.f, seed + 2);
  const auto kn = normal(sz(D), 1.f, seed + 3), kb = normal(sz(D), 0.3f, seed + 4);
  const std::vector<std::int32_t> table = {2, 0, 1}, seq(sz(T), 0), pos = {0, 1, 5, 6, 9, 10};
  const float ps = pool_scale(type);
  const size_t n_pool = sz(blocks * block * width);
  std::vector<float> qr(sz(T * s.lora_q)), iw(sz(T * s.index_heads), 0.f);
  auto pool_bytes = encode(type, std::vector<float>(n_pool, 0.f), ps);
  const k::DsaPool host = dsa_pool(pool_bytes.data(), type, ps, width, table.data(), blocks, block);
  k::dsa_prepare_cpu(s, {qn.data(), kvn.data(), kn.data(), kb.data()}, proj.data(), ld, T, seq.data(), pos.data(), host,
                     qr.data(), iw.data());
  const auto pool = decode(type, pool_bytes, ps);
  Dev<float> d_proj(proj), d_qn(qn), d_kvn(kvn), d_kn(kn), d_kb(kb);
  Dev<float> d_qr(qr.size()), d_iw(std::vector<float>(iw.size(), 0.f));
  DevAct d_pool(type, std::vector<float>(n_pool, 0.f), ps);
  Dev<std::int32_t> d_table(table), d_seq(seq), d_pos(pos);
  const k::DsaPool dev = dsa_pool(d_pool.p(), type, ps, width, d_table.p(), blocks, block);
  op_ok(k::dsa_prepare_cuda(s, {d_qn.p(), d_kvn.p(), d_kn.p(), d_kb.p()}, d_proj.p(), ld, T, d_seq.p(), d_pos.p(), dev,
                            d_qr.p(), d_iw.p(), nullptr));
  const auto got_pool = d_pool.get();
  int same = 0;
  for (size_t i = 0; i < n_pool; ++i) same += got_pool[i] == pool[i];
  const double err = std::max(check_program::rel_error(d_qr.get(), qr), check_program::rel_error(d_iw.get(), iw));
  const double rows_err = check_program::rel_error(got_pool, pool);
  const double step = type == k::DType::f32 ? 1e-4 : type == k::DType::bf16 ? 0x1p-7 : 0x1p-3;
  const std::string what = std::string(indexer ? "full" : "shared") + " layer, 6 tokens, rope " + std::to_string(s.rope);
  push(rows, "dsa_prepare", what + "; qr, index weights", err, 1e-4);
  push(rows, "dsa_prepare",
       what + "; " + k::dtype_name(type) + " pool rows (" + std::to_string(same) + "/" + std::to_string(n_pool) + " equal)",
       rows_err, step);
}

void clamped_swiglu(std::vector<Row>& rows, float limit) {
  const int n_rows = 7, d = 40;
  auto gu = normal(sz(n_rows * 2 * d), 2.f, 81);
  const auto bits = bf16_bits(gu);
  std::vector<float> want(sz(n_rows * d));
  k::clamped_silu_and_mul_cpu(gu.data(), want.data(), n_rows, d, limit);
  Dev<std::uint16_t> d_gu(bits), d_y(want.size());
  op_ok(k::clamped_silu_and_mul_cuda(d_gu.p(), d_y.p(), n_rows, d, limit, nullptr));
  const auto y = d_y.get();
  std::vector<float> got(y.size());
  for (size_t i = 0; i < y.size(); ++i) got[i] = k::bf16_to_float(y[i]);
  const std::string shape = "7 x 40, limit " + (std::isinf(limit) ? std::string("inf") : std::to_string(limit));
  rows.push_back({"clamped_silu_and_mul", shape, "bf16", check_program::rel_error(got, want), 8e-3, 0, kMeasure});
  // The fp32 twin (the model's) on the same inputs.
  Dev<float> d_gu32(gu), d_y32(want.size());
  op_ok(k::clamped_silu_and_mul_f32_cuda(d_gu32.p(), d_y32.p(), n_rows, d, limit, nullptr));
  push(rows, "clamped_silu_and_mul", shape, check_program::rel_error(d_y32.get(), want), 1e-6);
}

// linear_f32_cuda with a gather and per-row experts (the routed experts' form), the MLA absorption
// kernels and the MoE combine.
// MLA absorption: kv_b [heads * (nope + vd), L] (bf16 on the device).
void absorption(std::vector<Row>& rows, int T, int heads, int nope, int vd, int L, std::uint32_t seed) {
  const int qk = nope + 2;
  auto kvb = normal(sz(heads * (nope + vd) * L), 1.f, seed);
  const auto kvbb = bf16_bits(kvb);
  const auto q = normal(sz(T * heads * qk), 1.f, seed + 1), lat = normal(sz(T * heads * L), 1.f, seed + 2);
  std::vector<float> qlat(sz(T * heads * L)), vals(sz(T * heads * vd));
  k::absorb_query_cpu(q.data(), heads * qk, qk, T, heads, nope, vd, L, kvb.data(), qlat.data());
  k::absorb_values_cpu(lat.data(), T, heads, nope, vd, L, kvb.data(), vals.data());
  Dev<float> d_q(q), d_lat(lat), d_ql(qlat.size()), d_v(vals.size());
  Dev<std::uint16_t> d_kvb(kvbb);
  op_ok(k::absorb_query_cuda(d_q.p(), heads * qk, qk, T, heads, nope, vd, L, d_kvb.p(), d_ql.p(), nullptr));
  op_ok(k::absorb_values_cuda(d_lat.p(), T, heads, nope, vd, L, d_kvb.p(), d_v.p(), nullptr));
  const std::string shape = std::to_string(T) + " tokens, " + std::to_string(heads) + " heads, ";
  push(rows, "absorb_query", shape + "nope " + std::to_string(nope) + " -> latent " + std::to_string(L),
       check_program::rel_error(d_ql.get(), qlat), 1e-5);
  push(rows, "absorb_values", shape + "latent " + std::to_string(L) + " -> " + std::to_string(vd),
       check_program::rel_error(d_v.get(), vals), 1e-5);
}

void products(std::vector<Row>& rows) {
  const int n_rows = 6, in = 40, out = 24, experts = 3, src_rows = 4;
  const auto x = normal(sz(src_rows * in), 1.f, 91);
  auto w = normal(sz(experts * out * in), 1.f, 92);
  const auto wb = bf16_bits(w);
  const std::vector<std::int32_t> gather = {0, 0, 3, 1, 2, 3}, expert = {2, 0, 1, 1, 2, 0};
  std::vector<float> want(sz(n_rows * out));
  for (int r = 0; r < n_rows; ++r)
    k::linear_cpu(x.data() + gather[sz(r)] * in, w.data() + expert[sz(r)] * out * in, nullptr, want.data() + r * out, 1,
                  in, out);
  Dev<float> d_x(x), d_y(want.size());
  Dev<std::uint16_t> d_w(wb);
  Dev<std::int32_t> d_g(gather), d_e(expert);
  op_ok(k::linear_f32_cuda(d_x.p(), in, d_g.p(), n_rows, in, d_w.p(), DType::bf16, in, d_e.p(), out * in, out, d_y.p(),
                           out, nullptr));
  push(rows, "linear_f32", "6 gathered rows of 3 experts, 40 -> 24", check_program::rel_error(d_y.get(), want), 1e-5);
  absorption(rows, 3, 2, 5, 4, 8, 93);
  absorption(rows, 2, 2, 24, 16, 512, 193);  // the default shape's latent: 2 chunks of 8 a lane
  absorption(rows, 1, 3, 9, 5, 264, 293);    // 33 chunks: the second round of lanes partial
  // Combine: 5 tokens of top 3 pairs, with and without the shared experts' rows added.
  const int tokens = 5, top_k = 3, hidden = 300;  // two blocks of 256 channels a token, the second partial
  const auto pair_out = normal(sz(tokens * top_k * hidden), 1.f, 96), weight = normal(sz(tokens * top_k), 0.5f, 97);
  const auto add = normal(sz(tokens * hidden), 1.f, 98);
  // With pair_pos: the pairs' rows sorted by expert elsewhere (a permutation), one of another rank (-1).
  std::vector<std::int32_t> pos(sz(tokens * top_k));
  for (int i = 0; i < tokens * top_k; ++i) pos[sz(i)] = (i * 7 + 4) % (tokens * top_k);
  pos[5] = -1;
  Dev<std::int32_t> d_pos(pos);
  for (const bool with_add : {false, true})
    for (const bool sorted : {false, true}) {
      std::vector<float> y(sz(tokens * hidden));
      k::moe_combine_f32_cpu(pair_out.data(), sorted ? pos.data() : nullptr, weight.data(), tokens, top_k, hidden,
                             with_add ? add.data() : nullptr, y.data());
      Dev<float> d_pairs(pair_out), d_weight(weight), d_add(add), d_out(y.size());
      op_ok(k::moe_combine_f32_cuda(d_pairs.p(), sorted ? d_pos.p() : nullptr, d_weight.p(), tokens, top_k, hidden,
                                    with_add ? d_add.p() : nullptr, d_out.p(), nullptr));
      push(rows, "moe_combine_f32",
           std::string("5 tokens x top 3 x 300") + (with_add ? " + shared" : "") + (sorted ? ", pair_pos (one -1)" : ""),
           check_program::rel_error(d_out.get(), y), 1e-5);
    }
  // Tensor parallel: the pairs routed to this rank's experts [3, 6) renumbered, the others -1.
  std::vector<std::int32_t> pairs = {0, 3, 5, 6, 7, 4, 2, 3, 5, 1};
  Dev<std::int32_t> d_pairs(pairs);
  op_ok(k::moe_local_experts_cuda(d_pairs.p(), static_cast<int>(pairs.size()), 3, 3, nullptr));
  k::moe_local_experts_cpu(pairs.data(), static_cast<int>(pairs.size()), 3, 3);
  const auto got = d_pairs.get();
  long differ = 0;
  for (size_t i = 0; i < pairs.size(); ++i) differ += got[i] != pairs[i];
  rows.push_back({"moe_local_experts", "10 pairs, experts [3, 6) of 8", "ids", 0, -1, differ, ""});
}

}  // namespace

void check_glm5_next(std::vector<Row>& rows) {
  hyper_connections(rows, 4, 20, 61);
  hyper_connections(rows, 3, 5, 64);
  hyper_connections(rows, 4, 20, 62, 1024);  // 8 chunks
  hyper_connections(rows, 3, 20, 63, 200);   // 600 inputs: a chunk of 512 and one of 88
  streams_embed_mean(rows);
  glue_f32(rows);
  k::KdaShape fixture;
  fixture.heads = 2, fixture.head_dim = 16, fixture.conv_kernel = 4;
  fixture.lower_bound_set = true, fixture.lower_bound = -5.f, fixture.rms_eps = 1e-5f;
  kda(rows, fixture, "2 heads of 16, kernel 4, lower bound -5", 101);
  k::KdaShape wide;
  wide.heads = 3, wide.head_dim = 64, wide.conv_kernel = 3, wide.rms_eps = 1e-5f;
  kda(rows, wide, "3 heads of 64, kernel 3, softplus gate", 111);
  k::KdaShape bench = wide;  // the default shape's heads (128 channels), 100 (rows past the head), 200 (in memory)
  bench.heads = 2, bench.head_dim = 128, bench.conv_kernel = 4;
  kda(rows, bench, "2 heads of 128, kernel 4", 113);
  bench.state_in_registers = true;  // the register kernel from here on (200: in memory still)
  kda(rows, bench, "2 heads of 128, kernel 4, state in registers", 113);
  wide.state_in_registers = true;
  kda(rows, wide, "3 heads of 64, kernel 3, state in registers", 111);
  bench.head_dim = 100;
  kda(rows, bench, "2 heads of 100 (register rows past the head)", 115);
  bench.head_dim = 200;
  kda(rows, bench, "2 heads of 200 (the state in memory)", 117);
  k::DsaShape sparse;
  sparse.lora_q = 48, sparse.lora_kv = 32, sparse.rope = 0, sparse.index_heads = 2, sparse.index_dim = 16;
  sparse.index_topk = 12, sparse.kpool = 4, sparse.select_tail = true;  // 3 pools of 4 out of up to 9
  k::DsaShape single = sparse;
  single.kpool = 1, single.index_topk = 10, single.rope = 8;
  k::DsaShape wide_keys = sparse;  // channels past a warp's 32 lanes (3 a lane, the last partial)
  wide_keys.index_dim = 80, wide_keys.index_heads = 3, wide_keys.kpool = 2, wide_keys.index_topk = 8;
  dsa(rows, wide_keys, "kpool 2, top-k 8, index_dim 80, 3 index heads", 137, k::DType::f32);
  for (const k::DType pool : {k::DType::f32, k::DType::bf16, k::DType::fp8_e4m3}) {  // kv_cache_dtype's pools
    dsa(rows, sparse, "kpool 4, top-k 12, tail", 121, pool);
    dsa(rows, single, "kpool 1, top-k 10, rope 8", 131, pool);
    dsa_prepare(rows, sparse, true, 141, pool);
    dsa_prepare(rows, single, false, 151, pool);
  }
  clamped_swiglu(rows, 1.5f);
  clamped_swiglu(rows, INFINITY);
  products(rows);
}

}  // namespace gpu_check
