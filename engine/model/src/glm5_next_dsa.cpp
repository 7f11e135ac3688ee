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
// Equal pool scores are broken as torch.topk's CPU kernel breaks them (see dsa_select_keys).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "glm5_next_parts.hpp"
#include "mla_expand.hpp"
#include "tandem/kernels/attention.hpp"
#include "tandem/kernels/linear.hpp"
#include "tandem/kernels/rmsnorm.hpp"

namespace tandem::model::detail {

namespace k = tandem::kernels;

int dsa_row_width(const Glm5NextConfig& c) { return c.kv_lora_rank + c.qk_rope_head_dim + 2 * c.index_head_dim; }

// Pool keys of the complete pools among the first n cached tokens: [n / kpool, index_head_dim].
std::vector<double> dsa_pool_keys(const DsaLayer& w, const Glm5NextConfig& c, const KvRows& rows, int n) {
  const int P = n / c.index_kpool, kp = c.index_kpool, D = c.index_head_dim;
  const int ik_at = c.kv_lora_rank + c.qk_rope_head_dim, ig_at = ik_at + D;
  std::vector<double> keys(static_cast<size_t>(P) * static_cast<size_t>(D)), logit(static_cast<size_t>(kp));
  for (int p = 0; p < P; ++p)
    for (int d = 0; d < D; ++d) {
      double top = -INFINITY;
      for (int m = 0; m < kp; ++m) {
        const float* row = rows.row(p * kp + m);
        logit[static_cast<size_t>(m)] = static_cast<double>(row[ig_at + d]) + w.kpool_ape[static_cast<size_t>(m * D + d)];
        top = std::max(top, logit[static_cast<size_t>(m)]);
      }
      double sum = 0, acc = 0;
      for (int m = 0; m < kp; ++m) sum += (logit[static_cast<size_t>(m)] = std::exp(logit[static_cast<size_t>(m)] - top));
      for (int m = 0; m < kp; ++m) acc += logit[static_cast<size_t>(m)] / sum * rows.row(p * kp + m)[ik_at + d];
      keys[static_cast<size_t>(p * D + d)] = acc;
    }
  return keys;
}

// The keys the query at cache index `i` attends to.
std::vector<int> dsa_select_keys(const Glm5NextConfig& c, const std::vector<double>& pools, const float* iq,
                                 const float* weights, std::span<const int> pos, int i) {
  const int kp = c.index_kpool, D = c.index_head_dim, P = static_cast<int>(pools.size()) / D;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  // Every pool the cache holds, complete or not, as torch.topk sees them: (score, pool) in pool
  // order, the lowest float where the query may not use the pool (incomplete, or its last token
  // not visible).
  const int all = (static_cast<int>(pos.size()) + kp - 1) / kp;
  std::vector<std::pair<float, long>> candidates;
  std::vector<bool> usable(static_cast<size_t>(all), false);
  for (int p = 0; p < all; ++p) {
    float value = std::numeric_limits<float>::lowest();
    if (p < P && pos[static_cast<size_t>(p * kp + kp - 1)] <= pos[static_cast<size_t>(i)]) {
      double score = 0;
      for (int h = 0; h < c.index_n_heads; ++h) {
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += static_cast<double>(iq[h * D + d]) * pools[static_cast<size_t>(p * D + d)];
        score += static_cast<double>(weights[h]) * std::max(0.0, static_cast<double>(static_cast<float>(dot * scale)));
      }
      value = static_cast<float>(score);
      usable[static_cast<size_t>(p)] = true;
    }
    candidates.emplace_back(value, p);
  }
  // The winners as torch.topk's CPU kernel picks them: std::nth_element (std::partial_sort when
  // k * 64 <= n) ordering by "greater score". Equal scores are common (the ReLU makes many exactly
  // 0), and which of them win is that algorithm's choice, so the same algorithm makes it here.
  const size_t budget = std::min(candidates.size(), static_cast<size_t>(c.index_topk / kp));
  const auto greater = [](const std::pair<float, long>& a, const std::pair<float, long>& b) { return a.first > b.first; };
  if (budget > 0 && budget * 64 <= candidates.size())
    std::partial_sort(candidates.begin(), candidates.begin() + static_cast<long>(budget), candidates.end(), greater);
  else if (budget > 0)
    std::nth_element(candidates.begin(), candidates.begin() + static_cast<long>(budget) - 1, candidates.end(), greater);
  std::vector<int> keys;
  for (size_t s = 0; s < budget; ++s) {
    const long p = candidates[s].second;
    if (!usable[static_cast<size_t>(p)]) continue;
    for (int m = 0; m < kp; ++m) keys.push_back(static_cast<int>(p) * kp + m);
  }
  if (c.index_kpool_always_select_tail && kp > 1) {
    int visible = 0;
    for (size_t j = 0; j < pos.size(); ++j) visible += pos[j] <= pos[static_cast<size_t>(i)];
    for (int j = visible - visible % kp; j < visible; ++j)
      if (pos[static_cast<size_t>(j)] <= pos[static_cast<size_t>(i)]) keys.push_back(j);
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

// long-function: the CPU reference of one DSA attention layer, its stages in the order the model
// computes them, so that it reads against the model's definition and the CUDA path.
void dsa_forward(const DsaLayer& w, const Glm5NextConfig& c, const float* x, int rows, int first, KvSequence& cache,
                 int slot, Selection& selection, float* out) {
  const int H = c.d.hidden_size, heads = c.d.num_attention_heads;
  const int nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim, qk = c.qk_head_dim(), vd = c.v_head_dim;
  const int lora_q = c.q_lora_rank, lora_kv = c.kv_lora_rank, ih = c.index_n_heads, id = c.index_head_dim;
  const float eps = static_cast<float>(c.d.rms_norm_eps);
  const auto bias = [](const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); };
  std::vector<float> q(static_cast<size_t>(rows) * static_cast<size_t>(heads * qk)), qr(static_cast<size_t>(lora_q));
  std::vector<float> iq(static_cast<size_t>(rows) * static_cast<size_t>(ih * id)), iw(static_cast<size_t>(rows) * static_cast<size_t>(ih));
  const KvRows cached = cache.rows(slot);
  for (int t = 0; t < rows; ++t) {
    const float* xt = x + static_cast<long>(t) * H;
    k::linear_cpu(xt, w.q_a.data(), bias(w.q_a_bias), qr.data(), 1, H, lora_q);
    k::rmsnorm_cpu(qr.data(), w.q_a_norm.data(), qr.data(), 1, lora_q, eps);
    k::linear_cpu(qr.data(), w.q_b.data(), nullptr, q.data() + static_cast<long>(t) * heads * qk, 1, lora_q, heads * qk);
    float* row = cached.row(first + t);
    k::linear_cpu(xt, w.kv_a.data(), bias(w.kv_a_bias), row, 1, H, lora_kv + rope);
    k::rmsnorm_cpu(row, w.kv_a_norm.data(), row, 1, lora_kv, eps);
    float* ik = row + lora_kv + rope;
    if (!w.indexer) {
      std::fill(ik, ik + 2 * id, 0.f);  // a shared layer's rows hold no indexer state
      continue;
    }
    k::linear_cpu(qr.data(), w.wq_b.data(), nullptr, iq.data() + static_cast<long>(t) * ih * id, 1, lora_q, ih * id);
    k::linear_cpu(xt, w.wk.data(), nullptr, ik, 1, H, id);
    double mean = 0, var = 0;
    for (int d = 0; d < id; ++d) mean += ik[d];
    mean /= id;
    for (int d = 0; d < id; ++d) var += (ik[d] - mean) * (ik[d] - mean);
    const double inv = 1.0 / std::sqrt(var / id + 1e-6);
    for (int d = 0; d < id; ++d)
      ik[d] = static_cast<float>((ik[d] - mean) * inv * w.k_norm[static_cast<size_t>(d)] + w.k_norm_bias[static_cast<size_t>(d)]);
    k::linear_cpu(xt, w.kpool_gate.data(), nullptr, ik + id, 1, H, id);
    k::linear_cpu(xt, w.weights_proj.data(), nullptr, iw.data() + static_cast<long>(t) * ih, 1, H, ih);
    for (int h = 0; h < ih; ++h) iw[static_cast<size_t>(t * ih + h)] *= static_cast<float>(1.0 / std::sqrt(static_cast<double>(ih)));
  }

  const int S = cache.length();
  const std::span<const int> pos = cache.positions();
  if (w.indexer) {
    const auto pools = dsa_pool_keys(w, c, cached, S);
    selection.assign(static_cast<size_t>(rows), {});
    for (int t = 0; t < rows; ++t)
      selection[static_cast<size_t>(t)] = dsa_select_keys(c, pools, iq.data() + static_cast<long>(t) * ih * id,
                                                      iw.data() + static_cast<long>(t) * ih, pos, first + t);
  }

  // Keys and values of every cached token (kv_b of the latent; the reference path does not absorb it).
  const MlaExpanded e = mla_expand(cached, S, w.kv_b, heads, nope, rope, vd, lora_kv);
  const int kv_w = e.kv_width;
  const std::vector<float>& kv = e.kv;
  const std::vector<float>& keys = e.keys;
  k::AttentionShape shape;
  shape.q_heads = shape.kv_heads = heads;
  shape.qk_dim = qk;
  shape.v_dim = vd;
  shape.q_stride = shape.k_stride = heads * qk;
  shape.q_head_stride = shape.k_head_stride = qk;
  shape.v_stride = kv_w;
  shape.v_head_stride = nope + vd;
  shape.out_stride = heads * vd;
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
