// glm5_next_text on CUDA, on a GPU (exits 77, "skipped", without one); a program rather than a
// doctest binary so that engine/bench/gpu builds it with CUDA alone. Two parts:
//   kernels  each new kernel (tandem/kernels/glm5_next.hpp) against its CPU reference on seeded inputs:
//            hc_collapse/hc_expand, the KDA recurrence (two sequences, one resumed from a state,
//            one reset), the indexer's selection (the CPU's scores and tail, with a top-k that
//            leaves pools out; equal scores may pick other pools than the CPU's torch.topk order),
//            attention over the selected latents, the clamped SwiGLU, the fp32-activation products;
//   model    the fixture tests/model/fixtures/glm5_next_text (bf16 weights; transformers' fp32
//            logits on them are the goldens): every position one token per step, all sequences'
//            prompts in one step, chunks of 3 against one shot (logits and recurrent state),
//            the recurrent state against the CPU reference's, and 16 greedy tokens of all
//            sequences batched == transformers'.
// relative error = max|ours - ref| / max|ref|.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <nlohmann/json.hpp>

#include "bf16_checkpoint.hpp"
#include "cuda/cuda_glm5_next.hpp"
#include "tandem/kernels/glm5_next.hpp"
#include "ffn.hpp"
#include "glm5_next_parts.hpp"
#include "tandem/kernels/attention.hpp"
#include "tandem/kernels/dtype.hpp"
#include "tandem/kernels/linear.hpp"
#include "tandem/model/config.hpp"
#include "tandem/model/cuda_model.hpp"
#include "tandem/model/safetensors.hpp"

using namespace tandem::model;
namespace fs = std::filesystem;
namespace dcuda = tandem::model::cuda;
namespace kern = tandem::kernels;
namespace det = tandem::model::detail;

namespace {

int failures = 0;
void check(bool ok, const std::string& what) {
  std::printf("  %s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

double rel_error(const float* ours, const float* ref, size_t n) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(ours[i] - ref[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(ref[i])));
  }
  return scale > 0 ? diff / scale : diff;
}
double rel_error(const std::vector<float>& ours, const std::vector<float>& ref) {
  return ours.size() == ref.size() ? rel_error(ours.data(), ref.data(), ours.size()) : INFINITY;
}

std::string sci(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3e", x);
  return b;
}

std::mt19937 rng(2026);
std::vector<float> random(size_t n, float scale = 1.f) {
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// A device copy of host data, freed at scope end.
template <class T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) {
    if (cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)) != cudaSuccess) p = nullptr;
    if (p) cudaMemset(p, 0, std::max<size_t>(n, 1) * sizeof(T));
  }
  explicit Dev(const std::vector<T>& h) : Dev(h.size()) {
    if (p && n) cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  std::vector<T> host() const {
    std::vector<T> h(n);
    cudaDeviceSynchronize();
    if (n) cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
};

bool ran(const tandem::Status& e, const char* what) {
  if (e && cudaDeviceSynchronize() == cudaSuccess) return true;
  check(false, std::string(what) + ": " + (e ? cudaGetErrorString(cudaGetLastError()) : e.error().text()));
  return false;
}

Glm5NextConfig fixture_config(const fs::path& dir) {
  auto c = load_config(dir);
  return c ? std::get<Glm5NextConfig>(c->arch) : Glm5NextConfig{};
}

// ---- kernels ------------------------------------------------------------------------------------

void check_hc(const Glm5NextConfig& c) {
  const int hc = c.hc_mult, H = c.d.hidden_size, M = (2 + hc) * hc, T = 5;
  det::HyperConnection w;
  w.fn = random(static_cast<size_t>(M * hc * H), 0.05f);
  w.base = random(static_cast<size_t>(M), 0.5f);
  w.scale = {0.7f, 1.3f, 0.9f};
  const auto streams = random(static_cast<size_t>(T * hc * H));
  const auto y = random(static_cast<size_t>(T * H));
  std::vector<float> collapsed(static_cast<size_t>(T * H)), post, comb, expanded = streams;
  for (int t = 0; t < T; ++t) {
    det::HcMix mix;
    det::hc_collapse(w, c, streams.data() + t * hc * H, collapsed.data() + t * H, mix);
    post.insert(post.end(), mix.post.begin(), mix.post.end());
    comb.insert(comb.end(), mix.comb.begin(), mix.comb.end());
    det::hc_expand(c, mix, y.data() + t * H, expanded.data() + t * hc * H);
  }
  Dev<float> d_streams(streams), d_fn(w.fn), d_base(w.base), d_scale(w.scale), d_y(y);
  Dev<float> d_col(collapsed.size()), d_post(post.size()), d_comb(comb.size());
  kern::HcShape s;
  s.hc = hc, s.hidden = H, s.sinkhorn_iters = c.hc_sinkhorn_iters;
  s.rms_eps = static_cast<float>(c.d.rms_norm_eps), s.hc_eps = static_cast<float>(c.hc_eps);
  if (!ran(kern::hc_collapse_cuda(s, d_streams.p, T, d_fn.p, d_base.p, d_scale.p, d_col.p, d_post.p, d_comb.p, nullptr),
           "hc_collapse_cuda"))
    return;
  if (!ran(kern::hc_expand_cuda(s, d_streams.p, T, d_y.p, d_post.p, d_comb.p, nullptr), "hc_expand_cuda")) return;
  const double e1 = rel_error(d_col.host(), collapsed), e2 = rel_error(d_post.host(), post), e3 = rel_error(d_comb.host(), comb);
  const double e4 = rel_error(d_streams.host(), expanded);
  check(std::max({e1, e2, e3, e4}) <= 1e-4, "hyper-connections (hc " + std::to_string(hc) + ", " + std::to_string(c.hc_sinkhorn_iters) +
                                                " Sinkhorn iterations): collapsed " + std::to_string(e1) + ", post " +
                                                std::to_string(e2) + ", comb " + std::to_string(e3) + ", expanded streams " +
                                                std::to_string(e4) + " (<= 1e-4)");
}

void check_kda(Glm5NextConfig c, const std::string& name) {
  const int heads = c.linear_num_heads, hd = c.linear_head_dim, K = c.linear_conv_kernel_dim, qk = heads * hd;
  const long sf = det::kda_state_floats(c);
  det::KdaLayer w;
  w.conv = random(static_cast<size_t>(3 * qk * K), 0.5f);
  w.a_log = random(static_cast<size_t>(heads), 0.5f);
  w.dt_bias = random(static_cast<size_t>(qk), 0.5f);
  w.o_norm = random(static_cast<size_t>(hd), 1.f);
  // Two sequences: A (5 tokens, state slot 2, resumed from a random state), B (3 tokens, slot 0, reset).
  const int lens[2] = {5, 3}, slots[2] = {2, 0}, resets[2] = {0, 1};
  const int T = lens[0] + lens[1], slots_n = 3;
  const auto u = random(static_cast<size_t>(T * 3 * qk)), g = random(static_cast<size_t>(T * qk));
  const auto beta = random(static_cast<size_t>(T * heads)), gate = random(static_cast<size_t>(T * qk));
  auto state = random(static_cast<size_t>(slots_n * sf), 0.3f);
  Dev<float> d_state(state);  // before the CPU advances it
  std::vector<float> o(static_cast<size_t>(T * qk));
  int t = 0;
  for (int s = 0; s < 2; ++s) {
    float* st = state.data() + slots[s] * sf;
    if (resets[s]) std::fill(st, st + sf, 0.f);
    for (int i = 0; i < lens[s]; ++i, ++t)
      det::kda_token(w, c, u.data() + t * 3 * qk, g.data() + t * qk, beta.data() + t * heads, gate.data() + t * qk, st,
                     o.data() + t * qk);
  }
  Dev<float> d_u(u), d_g(g), d_beta(beta), d_gate(gate), d_o(o.size());
  Dev<float> d_conv(w.conv), d_alog(w.a_log), d_dt(w.dt_bias), d_norm(w.o_norm);
  Dev<std::int32_t> d_begin(std::vector<std::int32_t>{0, lens[0], T}), d_slot(std::vector<std::int32_t>{slots[0], slots[1]});
  Dev<std::int32_t> d_reset(std::vector<std::int32_t>{resets[0], resets[1]});
  kern::KdaShape s;
  s.heads = heads, s.head_dim = hd, s.conv_kernel = K;
  s.lower_bound_set = c.linear_lower_bound.has_value(), s.lower_bound = static_cast<float>(c.linear_lower_bound.value_or(0));
  s.rms_eps = static_cast<float>(c.d.rms_norm_eps);
  kern::KdaIo io;
  io.u = d_u.p, io.ld_u = 3 * qk, io.g_raw = d_g.p, io.ld_g = qk, io.beta_raw = d_beta.p, io.ld_beta = heads;
  io.gate_raw = d_gate.p, io.ld_gate = qk, io.o = d_o.p, io.ld_o = qk;
  if (!ran(kern::kda_recurrent_cuda(s, {d_conv.p, d_alog.p, d_dt.p, d_norm.p}, io, 2, d_begin.p, d_slot.p, d_reset.p, d_state.p,
                                     sf, 0, nullptr),
           "kda_recurrent_cuda"))
    return;
  const double eo = rel_error(d_o.host(), o), es = rel_error(d_state.host(), state);
  check(std::max(eo, es) <= 1e-4, "KDA recurrence (" + name + "): outputs " + std::to_string(eo) + ", states of all slots " +
                                      std::to_string(es) + " (<= 1e-4)");
}

// long-function: one DSA layer checked in the order it runs: inputs, indexer selection, then attention vs the CPU.
void check_dsa(Glm5NextConfig c, const std::string& name) {
  const int kp = c.index_kpool, D = c.index_head_dim, IH = c.index_n_heads, L = c.kv_lora_rank, R = c.qk_rope_head_dim;
  const int width = det::dsa_row_width(c), n = 37, block = 8, blocks = (n + block - 1) / block;
  // One sequence of n cached tokens, its blocks in a shuffled order of a pool of blocks + 3.
  std::vector<std::int32_t> table(static_cast<size_t>(blocks));
  for (int b = 0; b < blocks; ++b) table[static_cast<size_t>(b)] = (b * 5 + 3) % (blocks + 3);
  auto pool = random(static_cast<size_t>((blocks + 3) * block * width));
  det::DsaLayer w;
  w.kpool_ape = random(static_cast<size_t>(kp * D), 0.5f);
  const KvRows rows{pool.data(), table.data(), block, width};
  const auto keys = det::dsa_pool_keys(w, c, rows, n);
  std::vector<int> pos(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = i;
  // Queries at the last 6 positions and a few early ones.
  const std::vector<int> at = {0, 3, 4, 9, n - 6, n - 5, n - 4, n - 3, n - 2, n - 1};
  const int T = static_cast<int>(at.size());
  const auto iq = random(static_cast<size_t>(T * IH * D));
  auto iw = random(static_cast<size_t>(T * IH));
  std::vector<std::vector<int>> want;
  for (int t = 0; t < T; ++t)
    want.push_back(det::dsa_select_keys(c, keys, iq.data() + t * IH * D, iw.data() + t * IH, pos, at[static_cast<size_t>(t)]));
  const int max_sel = c.index_topk + kp, max_pools = n / kp + 1;
  Dev<float> d_pool(pool), d_iq(iq), d_iw(iw), d_ape(w.kpool_ape), d_scores(static_cast<size_t>(T * max_pools));
  Dev<std::int32_t> d_table(table), d_seq(std::vector<std::int32_t>(static_cast<size_t>(T), 0)), d_pos(at);
  Dev<std::int32_t> d_chosen(static_cast<size_t>(T * max_pools)), d_sel(static_cast<size_t>(T * max_sel)), d_n(static_cast<size_t>(T));
  kern::DsaPool p{d_pool.p, width, d_table.p, blocks, block};
  kern::DsaShape s;
  s.lora_kv = L, s.rope = R, s.index_heads = IH, s.index_dim = D, s.index_topk = c.index_topk, s.kpool = kp;
  s.select_tail = c.index_kpool_always_select_tail;
  if (!ran(kern::dsa_select_cuda(s, p, d_iq.p, IH * D, d_iw.p, d_ape.p, T, d_seq.p, d_pos.p, d_scores.p, d_chosen.p, max_pools,
                                  d_sel.p, d_n.p, max_sel, nullptr),
           "dsa_select_cuda"))
    return;
  const auto got_sel = d_sel.host();
  const auto got_n = d_n.host();
  // The GPU breaks equal pool scores by pool order, the CPU as torch.topk's CPU kernel does
  // (glm5_next_dsa.cpp), so a selection counts as right when it has the CPU's tail and its pools
  // carry the same scores (the CPU's fp64 scores, for both) as the CPU's pools.
  auto pool_score = [&](int t, int pool_at) {
    double score = 0;
    for (int h = 0; h < IH; ++h) {
      double dot = 0;
      for (int d = 0; d < D; ++d)
        dot += static_cast<double>(iq[static_cast<size_t>((t * IH + h) * D + d)]) * keys[static_cast<size_t>(pool_at * D + d)];
      score += static_cast<double>(iw[static_cast<size_t>(t * IH + h)]) *
               std::max(0.0, static_cast<double>(static_cast<float>(dot / std::sqrt(static_cast<double>(D)))));
    }
    return static_cast<float>(score);
  };
  auto split = [&](int t, const std::vector<int>& sel, std::vector<float>& scores, std::vector<int>& tail) {
    const int visible = at[static_cast<size_t>(t)] + 1, tail_at = kp > 1 && c.index_kpool_always_select_tail ? visible - visible % kp : visible;
    for (int j : sel) {
      if (j >= tail_at) tail.push_back(j);
      else if (j % kp == 0) scores.push_back(pool_score(t, j / kp));
    }
    std::sort(scores.begin(), scores.end());
  };
  int same = 0, equivalent = 0, left_out = 0;
  for (int t = 0; t < T; ++t) {
    const auto& wnt = want[static_cast<size_t>(t)];
    std::vector<int> got(got_sel.begin() + t * max_sel, got_sel.begin() + t * max_sel + got_n[static_cast<size_t>(t)]);
    same += got == wnt;
    std::vector<float> s_got, s_want;
    std::vector<int> tail_got, tail_want;
    split(t, got, s_got, tail_got);
    split(t, wnt, s_want, tail_want);
    equivalent += s_got == s_want && tail_got == tail_want && got.size() == wnt.size();
    left_out += at[static_cast<size_t>(t)] + 1 - static_cast<int>(wnt.size());
  }
  check(equivalent == T, "indexer selection (" + name + "): " + std::to_string(equivalent) + "/" + std::to_string(T) +
                             " queries pick pools of the CPU's scores and its tail (" + std::to_string(same) +
                             " the very same keys; equal scores may pick other pools), " + std::to_string(left_out) +
                             " visible keys left out in all");

  // Attention over the selected latents: per head, q = [q_lat (L), q_rope (R)] against rows [c, kr], values c.
  // The reference attends over the keys the GPU selected (which may differ from the CPU's at equal
  // scores: the selection itself is checked above), so this row checks the attention alone.
  const int heads = 3, W = L + R;
  const auto qlat = random(static_cast<size_t>(T * heads * L)), qall = random(static_cast<size_t>(T * heads * (8 + R)));
  std::vector<float> out(static_cast<size_t>(T * heads * L));
  const float scale = 0.2f;
  for (int t = 0; t < T; ++t) {
    const std::vector<int> sel(got_sel.begin() + t * max_sel, got_sel.begin() + t * max_sel + got_n[static_cast<size_t>(t)]);
    std::vector<float> k_rows, q(static_cast<size_t>(heads * W));
    std::vector<int> kpos;
    for (int j : sel) {
      k_rows.insert(k_rows.end(), rows.row(j), rows.row(j) + W);
      kpos.push_back(j);
    }
    for (int h = 0; h < heads; ++h) {
      std::copy_n(qlat.data() + (t * heads + h) * L, L, q.data() + h * W);
      std::copy_n(qall.data() + t * heads * (8 + R) + h * (8 + R) + 8, R, q.data() + h * W + L);
    }
    tandem::kernels::AttentionShape a;
    a.q_heads = heads, a.kv_heads = 1, a.qk_dim = W, a.v_dim = L;
    a.q_stride = heads * W, a.q_head_stride = W, a.k_stride = W, a.v_stride = W, a.out_stride = heads * L;
    tandem::kernels::attention_cpu(q.data(), &at[static_cast<size_t>(t)], 1, k_rows.data(), k_rows.data(), kpos.data(),
                                   static_cast<int>(sel.size()), out.data() + t * heads * L, a, scale);
  }
  Dev<float> d_qlat(qlat), d_qall(qall), d_out(out.size());
  if (!ran(kern::dsa_attention_cuda(s, p, heads, d_qlat.p, d_qall.p + 8, heads * (8 + R), 8 + R, T, d_seq.p, d_sel.p, d_n.p,
                                     max_sel, scale, d_out.p, nullptr),
           "dsa_attention_cuda"))
    return;
  const double e = rel_error(d_out.host(), out);
  check(e <= 1e-4, "attention over the selected latents (" + name + "): " + std::to_string(e) + " (<= 1e-4)");
}

void check_swiglu(float limit) {
  const int rows = 7, d = 40;
  auto gu = random(static_cast<size_t>(rows * 2 * d), 2.f);
  std::vector<std::uint16_t> bits(gu.size());
  for (size_t i = 0; i < gu.size(); ++i) bits[i] = tandem::kernels::bf16_from_float(gu[i]), gu[i] = tandem::kernels::bf16_to_float(bits[i]);
  std::vector<float> want(static_cast<size_t>(rows * d));
  det::clamped_silu_and_mul_cpu(gu.data(), want.data(), rows, d, limit);
  Dev<std::uint16_t> d_gu(bits), d_y(want.size());
  if (!ran(kern::clamped_silu_and_mul_cuda(d_gu.p, d_y.p, rows, d, limit, nullptr), "clamped_silu_and_mul_cuda")) return;
  const auto y = d_y.host();
  std::vector<float> got(y.size());
  for (size_t i = 0; i < y.size(); ++i) got[i] = tandem::kernels::bf16_to_float(y[i]);
  const double e = rel_error(got, want);
  // The fp32 twin (the model's) on the same inputs.
  Dev<float> d_gu32(gu), d_y32(want.size());
  if (!ran(kern::clamped_silu_and_mul_f32_cuda(d_gu32.p, d_y32.p, rows, d, limit, nullptr), "clamped_silu_and_mul_f32_cuda")) return;
  const double e32 = rel_error(d_y32.host(), want);
  check(e <= 8e-3 && e32 <= 1e-6, "clamped SwiGLU (limit " + std::to_string(limit) + "): bf16 out " + std::to_string(e) +
                                       " (<= 8e-3), fp32 " + std::to_string(e32) + " (<= 1e-6)");
}

// linear_f32_cuda with a gather and per-row experts (the routed experts' form), and the MLA
// absorption kernels, against plain loops over the same bf16 weights.
void check_products() {
  const int rows = 6, in = 40, out = 24, experts = 3, src_rows = 4;
  const auto x = random(static_cast<size_t>(src_rows * in));
  auto w = random(static_cast<size_t>(experts * out * in));
  std::vector<std::uint16_t> wb(w.size());
  for (size_t i = 0; i < w.size(); ++i) wb[i] = tandem::kernels::bf16_from_float(w[i]), w[i] = tandem::kernels::bf16_to_float(wb[i]);
  const std::vector<std::int32_t> gather = {0, 0, 3, 1, 2, 3}, expert = {2, 0, 1, 1, 2, 0};
  std::vector<float> want(static_cast<size_t>(rows * out));
  for (int r = 0; r < rows; ++r)
    tandem::kernels::linear_cpu(x.data() + gather[static_cast<size_t>(r)] * in, w.data() + expert[static_cast<size_t>(r)] * out * in,
                                nullptr, want.data() + r * out, 1, in, out);
  Dev<float> d_x(x), d_y(want.size());
  Dev<std::uint16_t> d_w(wb);
  Dev<std::int32_t> d_g(gather), d_e(expert);
  if (!ran(kern::linear_f32_cuda(d_x.p, in, d_g.p, rows, in, d_w.p, tandem::kernels::DType::bf16, in, d_e.p, out * in, out, d_y.p,
                                  out, nullptr),
           "linear_f32_cuda"))
    return;
  const double e1 = rel_error(d_y.host(), want);
  // Absorption: kv_b [heads * (nope + vd), L].
  const int T = 3, heads = 2, nope = 5, vd = 4, L = 8, qk = 7;
  auto kvb = random(static_cast<size_t>(heads * (nope + vd) * L));
  std::vector<std::uint16_t> kvbb(kvb.size());
  for (size_t i = 0; i < kvb.size(); ++i) kvbb[i] = tandem::kernels::bf16_from_float(kvb[i]), kvb[i] = tandem::kernels::bf16_to_float(kvbb[i]);
  const auto q = random(static_cast<size_t>(T * heads * qk)), lat = random(static_cast<size_t>(T * heads * L));
  std::vector<float> qlat(static_cast<size_t>(T * heads * L)), vals(static_cast<size_t>(T * heads * vd));
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < heads; ++h) {
      for (int d = 0; d < L; ++d) {
        double a = 0;
        for (int n = 0; n < nope; ++n) a += static_cast<double>(q[static_cast<size_t>((t * heads + h) * qk + n)]) * kvb[static_cast<size_t>((h * (nope + vd) + n) * L + d)];
        qlat[static_cast<size_t>((t * heads + h) * L + d)] = static_cast<float>(a);
      }
      for (int v = 0; v < vd; ++v) {
        double a = 0;
        for (int d = 0; d < L; ++d) a += static_cast<double>(lat[static_cast<size_t>((t * heads + h) * L + d)]) * kvb[static_cast<size_t>((h * (nope + vd) + nope + v) * L + d)];
        vals[static_cast<size_t>((t * heads + h) * vd + v)] = static_cast<float>(a);
      }
    }
  Dev<float> d_q(q), d_lat(lat), d_ql(qlat.size()), d_v(vals.size());
  Dev<std::uint16_t> d_kvb(kvbb);
  if (!ran(kern::absorb_query_cuda(d_q.p, heads * qk, qk, T, heads, nope, vd, L, d_kvb.p, d_ql.p, nullptr), "absorb_query_cuda")) return;
  if (!ran(kern::absorb_values_cuda(d_lat.p, T, heads, nope, vd, L, d_kvb.p, d_v.p, nullptr), "absorb_values_cuda")) return;
  const double e2 = rel_error(d_ql.host(), qlat), e3 = rel_error(d_v.host(), vals);
  check(std::max({e1, e2, e3}) <= 1e-5, "fp32-activation products: gathered rows of per-row experts " + std::to_string(e1) +
                                            ", absorbed query " + std::to_string(e2) + ", absorbed values " + std::to_string(e3) +
                                            " (<= 1e-5)");
}

// ---- the model ----------------------------------------------------------------------------------

struct Sequence {
  std::vector<int32_t> ids, greedy;
  std::vector<float> logits;  // [ids x vocab]
};

constexpr int kBlock = 16, kBlocksPerSeq = 8;  // 128 positions per sequence

std::vector<int32_t> table_of(int seq) {
  std::vector<int32_t> t(kBlocksPerSeq);
  for (int b = 0; b < kBlocksPerSeq; ++b) t[static_cast<size_t>(b)] = seq * kBlocksPerSeq + b;
  return t;
}

// Speculative rollback on the device (what the engine's run_device_spec does for a hybrid model):
// keep the state, verify a block of 4 (its tokens folded into the state), restore, advance over
// the one kept token. Slot 0's state and next logits must then be bit for bit those of slot 1,
// which never saw the block.
void check_rollback(dcuda::Glm5NextCuda& m, const Sequence& q) {
  const int n = static_cast<int>(q.ids.size());
  const std::vector<int32_t> block = {q.greedy[0], 11, 12, 13}, kept = {q.greedy[0]}, next = {q.greedy[1]};
  const auto t0 = table_of(0), t1 = table_of(1);
  auto one = [&](std::span<const int32_t> tokens, int start, const std::vector<int32_t>& table, int slot, bool all) {
    PagedWork w{tokens, start, table, true, slot, all};
    return m.step(std::span<const PagedWork>(&w, 1));
  };
  const int slots[] = {0};
  bool ok = one(q.ids, 0, t0, 0, false).ok() && one(q.ids, 0, t1, 1, false).ok();
  ok = ok && m.keep_states(slots).ok() && one(block, n, t0, 0, true).ok();
  auto dirty = m.recurrent_state(0);
  ok = ok && dirty.ok() && m.restore_states(slots).ok() && one(kept, n, t0, 0, false).ok() && one(kept, n, t1, 1, false).ok();
  auto a = m.recurrent_state(0), b = m.recurrent_state(1);
  auto la = one(next, n + 1, t0, 0, false), lb = one(next, n + 1, t1, 1, false);
  if (!ok || !a || !b || !la || !lb) return check(false, "rollback: a step, keep or restore failed");
  check(dirty.value() != b.value(), "rollback: the verified block changed the state (the check has something to undo)");
  check(a.value() == b.value() && la.value() == lb.value(),
        "rollback: keep, verify 4 tokens, restore, advance 1: state and next logits bit-identical to never seeing the block");
}

// long-function: a check script per model dir: load, one token per step vs goldens, all prompts in one step, states.
void check_model(const fs::path& dir) {
  std::printf("## model: %s\n", dir.filename().c_str());
  std::vector<Sequence> seqs;
  {
    std::ifstream in(dir / "golden.json");
    const auto doc = nlohmann::json::parse(in);
    auto file = SafetensorsFile::open(dir / "golden.safetensors");
    if (!file) return check(false, "golden.safetensors: " + file.error().message);
    for (size_t i = 0; i < doc["sequences"].size(); ++i) {
      Sequence s;
      s.ids = doc["sequences"][i]["input_ids"].get<std::vector<int32_t>>();
      s.greedy = doc["sequences"][i]["greedy"].get<std::vector<int32_t>>();
      s.logits = bench::as_f32(file.value()->tensors().at("seq" + std::to_string(i) + ".logits"));
      seqs.push_back(std::move(s));
    }
  }
  CudaOptions opt;
  opt.max_num_seqs = 8;
  opt.max_num_batched_tokens = 128;
  opt.max_model_len = kBlock * kBlocksPerSeq;
  auto loaded = load_cuda_model(dir, opt);
  if (!loaded) return check(false, "CUDA model: " + loaded.error().message);
  auto& m = dynamic_cast<dcuda::Glm5NextCuda&>(*loaded.value());
  if (auto s = m.make_device_pool(8 * kBlocksPerSeq, kBlock); !s) return check(false, "pool: " + s.error().message);
  const int V = m.vocab_size(), S = static_cast<int>(seqs.size());
  const double tol = 1e-2;

  // Every position, one token per step (sequence s in slot s, blocks of sequence 4 + s).
  double worst = 0;
  for (int s = 0; s < S; ++s) {
    const auto& q = seqs[static_cast<size_t>(s)];
    const auto table = table_of(4 + s);
    for (size_t t = 0; t < q.ids.size(); ++t) {
      PagedWork w{std::span<const int32_t>(&q.ids[t], 1), static_cast<int>(t), table, true, s};
      auto l = m.step(std::span<const PagedWork>(&w, 1));
      if (!l) return check(false, "decode: " + l.error().message);
      const double e = rel_error(l->data(), q.logits.data() + t * static_cast<size_t>(V), static_cast<size_t>(V));
      if (t == 0 || t + 1 == q.ids.size()) std::printf("    sequence %d position %zu: %.3e\n", s, t, e);
      worst = std::max(worst, e);
    }
  }
  check(worst <= tol, "one token per step, every position of " + std::to_string(S) + " sequences vs transformers: worst " +
                          std::to_string(worst) + " (<= 1e-2)");

  // All prompts in one step: last-position logits; then the states against the CPU reference's.
  std::vector<std::vector<float>> one_shot(static_cast<size_t>(S)), one_shot_state(static_cast<size_t>(S));
  {
    std::vector<std::vector<int32_t>> tables;
    for (int s = 0; s < S; ++s) tables.push_back(table_of(s));
    std::vector<PagedWork> work;
    for (int s = 0; s < S; ++s) work.push_back({seqs[static_cast<size_t>(s)].ids, 0, tables[static_cast<size_t>(s)], true, s});
    auto l = m.step(work);
    if (!l) return check(false, "prefill: " + l.error().message);
    worst = 0;
    for (int s = 0; s < S; ++s) {
      const auto& q = seqs[static_cast<size_t>(s)];
      const float* ours = l->data() + static_cast<size_t>(s) * static_cast<size_t>(V);
      one_shot[static_cast<size_t>(s)].assign(ours, ours + V);
      worst = std::max(worst, rel_error(ours, q.logits.data() + (q.ids.size() - 1) * static_cast<size_t>(V), static_cast<size_t>(V)));
      auto st = m.recurrent_state(s);
      if (!st) return check(false, st.error().message);
      one_shot_state[static_cast<size_t>(s)] = st.value();
    }
    check(worst <= tol, "all prompts in one step, last position vs transformers: worst " + std::to_string(worst) + " (<= 1e-2)");
  }
  if (auto cpu = load_model(dir); cpu) {
    double es = 0;
    for (int s = 0; s < S; ++s) {
      const auto& q = seqs[static_cast<size_t>(s)];
      std::vector<int32_t> pos(q.ids.size());
      for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
      KvCache cache = cpu.value()->new_cache();
      const int last = static_cast<int>(q.ids.size()) - 1;
      if (!cpu.value()->forward(q.ids, pos, cache, std::span<const int>(&last, 1))) return check(false, "CPU forward");
      const auto rs = cache.recurrent_state();
      es = std::max(es, rel_error(one_shot_state[static_cast<size_t>(s)], std::vector<float>(rs.begin(), rs.end())));
    }
    check(es <= 2e-2, "recurrent state after each prompt vs the fp32 CPU reference's: " + std::to_string(es) + " (<= 2e-2)");
  } else {
    check(false, "CPU model: " + cpu.error().message);
  }

  // Chunks of 3 against one shot (slot s again, reset by the first chunk; blocks of sequence s).
  double chunk_vs_shot = 0, chunk_vs_golden = 0, state_diff = 0;
  for (int s = 0; s < S; ++s) {
    const auto& q = seqs[static_cast<size_t>(s)];
    const auto table = table_of(s);
    const int n = static_cast<int>(q.ids.size());
    std::vector<float> last;
    for (int at = 0; at < n; at += 3) {
      const int len = std::min(3, n - at);
      PagedWork w{std::span<const int32_t>(q.ids.data() + at, static_cast<size_t>(len)), at, table, true, s};
      auto l = m.step(std::span<const PagedWork>(&w, 1));
      if (!l) return check(false, "chunked: " + l.error().message);
      chunk_vs_golden = std::max(chunk_vs_golden, rel_error(l->data(), q.logits.data() + static_cast<size_t>(at + len - 1) * static_cast<size_t>(V),
                                                            static_cast<size_t>(V)));
      last = l.value();
    }
    chunk_vs_shot = std::max(chunk_vs_shot, rel_error(last, one_shot[static_cast<size_t>(s)]));
    auto st = m.recurrent_state(s);
    if (!st) return check(false, st.error().message);
    state_diff = std::max(state_diff, rel_error(st.value(), one_shot_state[static_cast<size_t>(s)]));
  }
  check(chunk_vs_golden <= tol, "prefill in chunks of 3, each chunk's last position vs transformers: " + std::to_string(chunk_vs_golden) +
                                    " (<= 1e-2)");
  check(chunk_vs_shot <= 5e-3 && state_diff <= 5e-3,
        "chunks of 3 vs one shot: last logits " + sci(chunk_vs_shot) + ", recurrent state " + sci(state_diff) + " (<= 5e-3)");

  // Greedy, all sequences batched: prefill, then 15 steps of one token each.
  std::vector<std::vector<int32_t>> tables, got(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s) tables.push_back(table_of(s));
  std::vector<PagedWork> work;
  for (int s = 0; s < S; ++s) work.push_back({seqs[static_cast<size_t>(s)].ids, 0, tables[static_cast<size_t>(s)], true, s});
  auto first = m.step_greedy(work);
  if (!first) return check(false, "greedy: " + first.error().message);
  for (int s = 0; s < S; ++s) got[static_cast<size_t>(s)].push_back(first.value()[static_cast<size_t>(s)]);
  const size_t steps = seqs[0].greedy.size();
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 1; i < steps; ++i) {
    work.clear();
    for (int s = 0; s < S; ++s) {
      const auto& g = got[static_cast<size_t>(s)];
      work.push_back({std::span<const int32_t>(&g.back(), 1), static_cast<int>(seqs[static_cast<size_t>(s)].ids.size() + i - 1),
                      tables[static_cast<size_t>(s)], true, s});
    }
    auto next = m.step_greedy(work);
    if (!next) return check(false, "greedy: " + next.error().message);
    for (int s = 0; s < S; ++s) got[static_cast<size_t>(s)].push_back(next.value()[static_cast<size_t>(s)]);
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("  info %zu batched decode steps of %d sequences: %.2f ms a step (eager, naive kernels; the tiny fixture)\n",
              steps - 1, S, ms / static_cast<double>(steps - 1));
  int same = 0, total = 0;
  for (int s = 0; s < S; ++s)
    for (size_t i = 0; i < steps; ++i, ++total) same += got[static_cast<size_t>(s)][i] == seqs[static_cast<size_t>(s)].greedy[i];
  check(same == total, "greedy, " + std::to_string(S) + " sequences batched: " + std::to_string(same) + "/" + std::to_string(total) +
                           " tokens as transformers'");
  check_rollback(m, seqs[0]);
}

}  // namespace

// argv[1]: the fixtures directory, when the binary runs away from the tree it was built in.
int main(int argc, char** argv) {
  fs::path fixtures = TANDEM_FIXTURES;
  if (argc > 1) fixtures = argv[1];
  if (auto there = cuda_model_available(); !there) {
    std::printf("skipped: no CUDA device (%s)\n", there.error().text().c_str());
    return 77;
  }
  const fs::path dir = fixtures / "glm5_next_text";
  Glm5NextConfig c = fixture_config(dir);
  if (c.hc_mult == 0 || c.linear_num_heads == 0) {
    std::printf("FAIL: cannot read %s/config.json\n", dir.c_str());
    return 1;
  }
  std::printf("## kernels\n");
  check_hc(c);
  Glm5NextConfig wide = c;
  wide.hc_mult = 3, wide.hc_sinkhorn_iters = 5;
  check_hc(wide);
  check_kda(c, "fixture shape, lower-bounded forget gate");
  Glm5NextConfig kda2 = c;
  kda2.linear_num_heads = 3, kda2.linear_head_dim = 64, kda2.linear_conv_kernel_dim = 3, kda2.linear_lower_bound.reset();
  check_kda(kda2, "3 heads of 64, kernel 3, softplus forget gate");
  Glm5NextConfig sparse = c;
  sparse.index_topk = 12;  // 3 pools of 4 out of up to 9: the top-k leaves pools out
  check_dsa(sparse, "kpool 4, top-k 12, tail");
  Glm5NextConfig single = c;
  single.index_kpool = 1, single.index_topk = 10, single.qk_rope_head_dim = 8;
  check_dsa(single, "kpool 1, top-k 10, rope 8");
  check_swiglu(1.5f);
  check_swiglu(INFINITY);
  check_products();
  check_model(dir);
  check_model(fixtures / "glm5_next_text_sparse");  // the indexer drops keys here
  std::printf("%s: %d failed\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
