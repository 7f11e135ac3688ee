// DSA attention of glm5_next (transformers' Glm5NextTextAttention + Glm5NextTextIndexer):
//   qr     = rmsnorm(q_a x);  q = q_b(qr)                            [heads, nope + rope]
//   c, kr  = split(kv_a x, [kv_lora, rope]); c = rmsnorm(c)         cached; no rotary (NoPE)
//   k_nope, v = split(kv_b(c)) per head;  k = [k_nope, kr]
//   indexer (a "full" layer):
//     iq = wq_b(qr) [index heads, index_head_dim];  ik = LayerNorm(wk x) (eps 1e-6);  ig = kpool_gate x
//     complete k-pools of index_kpool consecutive tokens: pool key = per channel softmax over the
//     pool's tokens of (ig + kpool_ape[slot]) weighting ik
//     score(query, pool) = sum_h weights_proj(x)[h] / sqrt(index heads) * relu(iq_h . poolkey / sqrt(index_head_dim))
//     keys = tokens of the best index_topk / index_kpool pools whose last token the query sees,
//            plus (index_kpool_always_select_tail) the visible tokens after the last complete pool
//   a "shared" layer takes the previous layer's keys;
//   out = o_proj(softmax over the selected keys of q.k / sqrt(nope + rope), times v)
// Equal pool scores are broken as torch.topk's CPU kernel breaks them (kernels::dsa_select_keys_cpu).
// The norms of the fused projection, the pool keys and the selection are the kernels' CPU references
// (tandem/kernels/glm5_next.hpp); the projections and the attention over the selection are here.
#include <algorithm>
#include <cmath>

#include "glm5_next_parts.hpp"
#include "mla_expand.hpp"
#include "tandem/kernels/attention.hpp"
#include "tandem/kernels/glm5_next.hpp"
#include "tandem/kernels/linear.hpp"

namespace tandem::model::detail {

namespace k = tandem::kernels;

// long-function: the CPU reference of one DSA attention layer, its stages in the order the model
// computes them, so that it reads against the model's definition and the CUDA path.
void dsa_forward(const DsaLayer& w, const Glm5NextConfig& c, const float* x, int rows, int first, KvSequence& cache,
                 int slot, Selection& selection, float* out) {
  const int H = c.d.hidden_size, heads = c.d.num_attention_heads;
  const int nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim, qk = c.qk_head_dim(), vd = c.v_head_dim;
  const int lora_q = c.q_lora_rank, lora_kv = c.kv_lora_rank, ih = c.index_n_heads, id = c.index_head_dim;
  const auto bias = [](const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); };
  // Each token's fused projection [q_a | kv_a | wk | kpool_gate | weights_proj] (the indexer's parts
  // on a full layer only), as the CUDA model computes it, for dsa_prepare_cpu.
  const int kv_at = lora_q, wk_at = kv_at + lora_kv + rope, ld_proj = wk_at + 2 * id + ih;
  std::vector<float> proj(static_cast<size_t>(rows) * static_cast<size_t>(ld_proj), 0.f);
  for (int t = 0; t < rows; ++t) {
    const float* xt = x + static_cast<long>(t) * H;
    float* p = proj.data() + static_cast<long>(t) * ld_proj;
    k::linear_cpu(xt, w.q_a.data(), bias(w.q_a_bias), p, 1, H, lora_q);
    k::linear_cpu(xt, w.kv_a.data(), bias(w.kv_a_bias), p + kv_at, 1, H, lora_kv + rope);
    if (!w.indexer) continue;
    k::linear_cpu(xt, w.wk.data(), nullptr, p + wk_at, 1, H, id);
    k::linear_cpu(xt, w.kpool_gate.data(), nullptr, p + wk_at + id, 1, H, id);
    k::linear_cpu(xt, w.weights_proj.data(), nullptr, p + wk_at + 2 * id, 1, H, ih);
  }
  // The cache as the kernels' pool: one sequence, its tokens addressed by cache index.
  const KvRows cached = cache.rows(slot);
  const int S = cache.length();
  const k::DsaShape dsa = dsa_shape(c, w.indexer);
  k::DsaPool pool;  // fp32 rows (rounded below where they stand for another type)
  pool.rows = cached.base, pool.width = cached.row_width, pool.tables = cached.block_table;
  pool.max_blocks = (S + cached.block_size - 1) / cached.block_size, pool.block_size = cached.block_size;
  std::vector<std::int32_t> seq(static_cast<size_t>(rows), 0), index(static_cast<size_t>(rows));
  for (int t = 0; t < rows; ++t) index[static_cast<size_t>(t)] = first + t;
  std::vector<float> qr(static_cast<size_t>(rows) * static_cast<size_t>(lora_q)),
      iw(static_cast<size_t>(rows) * static_cast<size_t>(ih));
  k::dsa_prepare_cpu(dsa, {w.q_a_norm.data(), w.kv_a_norm.data(), bias(w.k_norm), bias(w.k_norm_bias)}, proj.data(),
                     ld_proj, rows, seq.data(), index.data(), pool, qr.data(), iw.data());
  // Rows that stand for a bf16 / fp8 device pool hold what that pool reads back.
  if (cached.element != k::DType::f32)
    for (int t = 0; t < rows; ++t) {
      float* r = cached.row(first + t);
      for (int i = 0; i < cached.row_width; ++i) r[i] = k::round_to(cached.element, r[i], cached.scale);
    }
  std::vector<float> q(static_cast<size_t>(rows) * static_cast<size_t>(heads * qk));
  std::vector<float> iq(static_cast<size_t>(rows) * static_cast<size_t>(ih * id));
  for (int t = 0; t < rows; ++t) {
    const float* qrt = qr.data() + static_cast<long>(t) * lora_q;
    k::linear_cpu(qrt, w.q_b.data(), nullptr, q.data() + static_cast<long>(t) * heads * qk, 1, lora_q, heads * qk);
    if (w.indexer)
      k::linear_cpu(qrt, w.wq_b.data(), nullptr, iq.data() + static_cast<long>(t) * ih * id, 1, lora_q, ih * id);
  }

  const std::span<const int> pos = cache.positions();
  if (w.indexer) {
    const auto pools = k::dsa_pool_keys_cpu(dsa, pool, 0, w.kpool_ape.data(), S);
    selection.assign(static_cast<size_t>(rows), {});
    for (int t = 0; t < rows; ++t)
      selection[static_cast<size_t>(t)] =
          k::dsa_select_keys_cpu(dsa, pools, iq.data() + static_cast<long>(t) * ih * id,
                                 iw.data() + static_cast<long>(t) * ih, pos.data(), S, first + t);
  }

  // Keys and values of every cached token (kv_b of the latent; the reference path does not absorb it).
  const MlaExpanded e = mla_expand(cached, S, w.kv_b, heads, nope, rope, vd, lora_kv);
  const int kv_w = e.kv_width;
  const std::vector<float>& kv = e.kv;
  const std::vector<float>& keys = e.keys;
  const k::AttentionShape shape = e.attention_shape(heads, qk, nope, vd);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(qk)));
  std::vector<float> attn(static_cast<size_t>(rows) * static_cast<size_t>(heads * vd));
  std::vector<float> sel_k, sel_v;
  std::vector<int> sel_pos;
  for (int t = 0; t < rows; ++t) {
    const auto& chosen = selection[static_cast<size_t>(t)];
    const int n = static_cast<int>(chosen.size());
    sel_k.resize(static_cast<size_t>(n) * static_cast<size_t>(heads * qk));
    sel_v.resize(static_cast<size_t>(n) * static_cast<size_t>(kv_w));
    sel_pos.resize(static_cast<size_t>(n));
    for (int s = 0; s < n; ++s) {
      const int j = chosen[static_cast<size_t>(s)];
      std::copy_n(keys.data() + static_cast<long>(j) * heads * qk, heads * qk, sel_k.data() + static_cast<long>(s) * heads * qk);
      std::copy_n(kv.data() + static_cast<long>(j) * kv_w, kv_w, sel_v.data() + static_cast<long>(s) * kv_w);
      sel_pos[static_cast<size_t>(s)] = pos[static_cast<size_t>(j)];
    }
    k::attention_cpu(q.data() + static_cast<long>(t) * heads * qk, pos.data() + first + t, 1, sel_k.data(),
                     sel_v.data() + nope, sel_pos.data(), n, attn.data() + static_cast<long>(t) * heads * vd, shape, scale);
  }
  k::linear_cpu(attn.data(), w.o.data(), bias(w.o_bias), out, rows, heads * vd, H);
}

}  // namespace tandem::model::detail
