// CPU references of glm5_next's kernels (glm5_next.hpp, cuda/glm5_next.cu and glm5_next_dsa.cu), following transformers
// 5.17's modeling_glm5_next in fp32 with fp64 sums. The model's CPU path (engine/model/src/glm5_next*.cpp)
// runs on these, so the reference the GPU is checked against is the one checked against transformers.
#include <algorithm>
#include <cmath>
#include <limits>

#include "tandem/kernels/activation.hpp"
#include "tandem/kernels/glm5_next.hpp"
#include "tandem/kernels/rmsnorm.hpp"
#include "kda_parts.hpp"

namespace tandem::kernels {

namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
size_t at(long i) { return static_cast<size_t>(i); }

// x / sqrt(|x|^2 + 1e-6) * scale, in place.
void l2normalise(float* x, int n, double scale) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double inv = scale / std::sqrt(ss + 1e-6);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] * inv);
}

// The slot of position pos of sequence seq; its row's entries are DsaPool::type (dtype.hpp's
// load_element / store_element).
long pool_slot(const DsaPool& p, int seq, int pos) {
  return static_cast<long>(p.tables[static_cast<long>(seq) * p.max_blocks + pos / p.block_size]) * p.block_size +
         pos % p.block_size;
}
float pool_get(const DsaPool& p, int seq, int pos, int i) {
  return load_element(p.type, p.rows, pool_slot(p, seq, pos) * p.width + i, p.scale);
}
// Stores a computed row's first n entries.
void pool_put(const DsaPool& p, int seq, int pos, const float* row, int n) {
  const long e = pool_slot(p, seq, pos) * p.width;
  for (int i = 0; i < n; ++i) store_element(p.type, p.rows, e + i, row[i], p.scale);
}

}  // namespace

// ---- glue ---------------------------------------------------------------------------------------

void hc_embed_cpu(const float* table, const std::int32_t* ids, int tokens, int hc, int hidden, float* streams) {
  for (int t = 0; t < tokens; ++t)
    for (int i = 0; i < hc; ++i)
      std::copy_n(table + static_cast<long>(ids[t]) * hidden, hidden,
                  streams + (static_cast<long>(t) * hc + i) * hidden);
}

void hc_mean_cpu(const float* streams, int tokens, int hc, int hidden, float* out) {
  for (int t = 0; t < tokens; ++t)
    for (int e = 0; e < hidden; ++e) {
      double acc = 0;
      for (int i = 0; i < hc; ++i) acc += streams[(static_cast<long>(t) * hc + i) * hidden + e];
      out[static_cast<long>(t) * hidden + e] = static_cast<float>(acc / hc);
    }
}

// ---- hyper-connections --------------------------------------------------------------------------
//   flat  = streams (hc x hidden, flattened) / rms(streams)           (unweighted RMSNorm)
//   m     = fn . flat                                                  ((2 + hc) * hc mix logits)
//   pre   = sigmoid(m[0:hc] * scale[0] + base[0:hc]) + hc_eps
//   post  = 2 sigmoid(m[hc:2hc] * scale[1] + base[hc:2hc])
//   comb  = softmax_row(m[2hc:] * scale[2] + base[2hc:]) + hc_eps, then column-normalised, then
//           (sinkhorn_iters - 1) times row- and column-normalised (each sum + hc_eps)
//   collapsed = sum_i pre[i] streams[i]

// long-function: one token's mix in the order transformers computes it (norm, logits, pre/post, Sinkhorn, collapse).
void hc_collapse_cpu(const HcShape& s, const float* streams, int tokens, const float* fn, const float* base,
                     const float* scale, float* collapsed, float* post, float* comb) {
  const int hc = s.hc, D = s.hidden, n = hc * D, M = (2 + hc) * hc;
  const double eps = s.hc_eps;
  std::vector<float> flat(at(n));
  std::vector<double> m(at(M)), pre(at(hc)), mix(at(hc * hc));
  auto c = [&](int i, int j) -> double& { return mix[at(i * hc + j)]; };
  for (int t = 0; t < tokens; ++t) {
    const float* st = streams + static_cast<long>(t) * n;
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += static_cast<double>(st[i]) * st[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / n + s.rms_eps));
    for (int i = 0; i < n; ++i) flat[at(i)] = st[i] * inv;
    for (int r = 0; r < M; ++r) {
      const float* row = fn + static_cast<long>(r) * n;
      double acc = 0;
      for (int i = 0; i < n; ++i) acc += static_cast<double>(row[i]) * flat[at(i)];
      m[at(r)] = static_cast<float>(acc);  // transformers' fp32 linear output
    }
    for (int i = 0; i < hc; ++i) {
      pre[at(i)] = sigmoid(m[at(i)] * scale[0] + base[i]) + eps;
      post[static_cast<long>(t) * hc + i] = static_cast<float>(2.0 * sigmoid(m[at(i + hc)] * scale[1] + base[i + hc]));
    }
    for (int i = 0; i < hc; ++i) {
      double top = -INFINITY;
      for (int j = 0; j < hc; ++j) {
        const int k = 2 * hc + i * hc + j;
        c(i, j) = m[at(k)] * scale[2] + base[k];
        top = std::max(top, c(i, j));
      }
      double sum = 0;
      for (int j = 0; j < hc; ++j) sum += (c(i, j) = std::exp(c(i, j) - top));
      for (int j = 0; j < hc; ++j) c(i, j) = c(i, j) / sum + eps;
    }
    auto normalise_columns = [&] {
      for (int j = 0; j < hc; ++j) {
        double sum = 0;
        for (int i = 0; i < hc; ++i) sum += c(i, j);
        for (int i = 0; i < hc; ++i) c(i, j) /= sum + eps;
      }
    };
    normalise_columns();
    for (int it = 1; it < s.sinkhorn_iters; ++it) {
      for (int i = 0; i < hc; ++i) {
        double sum = 0;
        for (int j = 0; j < hc; ++j) sum += c(i, j);
        for (int j = 0; j < hc; ++j) c(i, j) /= sum + eps;
      }
      normalise_columns();
    }
    for (int k = 0; k < hc * hc; ++k) comb[static_cast<long>(t) * hc * hc + k] = static_cast<float>(mix[at(k)]);
    for (int d = 0; d < D; ++d) {
      double acc = 0;
      for (int i = 0; i < hc; ++i) acc += pre[at(i)] * st[static_cast<long>(i) * D + d];
      collapsed[static_cast<long>(t) * D + d] = static_cast<float>(acc);
    }
  }
}

void hc_expand_cpu(const HcShape& s, float* streams, int tokens, const float* y, const float* post, const float* comb) {
  const int hc = s.hc, D = s.hidden;
  std::vector<float> old(at(static_cast<long>(hc) * D));
  for (int t = 0; t < tokens; ++t) {
    float* st = streams + static_cast<long>(t) * hc * D;
    const float* pt = post + static_cast<long>(t) * hc;
    const float* ct = comb + static_cast<long>(t) * hc * hc;
    std::copy_n(st, old.size(), old.begin());
    for (int i = 0; i < hc; ++i)
      for (int d = 0; d < D; ++d) {
        double acc = static_cast<double>(pt[i]) * y[static_cast<long>(t) * D + d];
        for (int j = 0; j < hc; ++j) acc += static_cast<double>(ct[j * hc + i]) * old[at(j * D + d)];
        st[static_cast<long>(i) * D + d] = static_cast<float>(acc);
      }
  }
}

// ---- KDA ----------------------------------------------------------------------------------------

long kda_state_floats(const KdaShape& s) {
  const long qk = static_cast<long>(s.heads) * s.head_dim;
  return static_cast<long>(s.conv_kernel - 1) * 3 * qk + qk * s.head_dim;
}

// long-function: the recurrence's stages for one token (conv, l2 norms, forget gate, delta rule, gated
// norm) in the order the model defines them, to read against transformers and the CUDA kernel.
namespace kda_detail {

void token_inputs(const KdaShape& s, const KdaWeights& w, const float* u, const float* g_raw, float* history,
                  float* mixed, float* g) {
  const int heads = s.heads, hd = s.head_dim, K = s.conv_kernel;
  const int qk = heads * hd, channels = 3 * qk;
  const double q_scale = 1.0 / std::sqrt(static_cast<double>(hd));
  // Causal conv: tap K-1 is the current token, tap j the input K-1-j tokens back.
  for (int ch = 0; ch < channels; ++ch) {
    const float* tap = w.conv + static_cast<long>(ch) * K;
    double acc = static_cast<double>(tap[K - 1]) * u[ch];
    for (int j = 0; j < K - 1; ++j) acc += static_cast<double>(tap[j]) * history[static_cast<long>(j) * channels + ch];
    const float a = static_cast<float>(acc);
    mixed[ch] = static_cast<float>(a / (1.0 + std::exp(-static_cast<double>(a))));
  }
  if (K > 1) {
    std::copy(history + channels, history + static_cast<long>(K - 1) * channels, history);
    std::copy(u, u + channels, history + static_cast<long>(K - 2) * channels);
  }
  for (int h = 0; h < heads; ++h) {
    l2normalise(mixed + h * hd, hd, q_scale);
    l2normalise(mixed + qk + h * hd, hd, 1.0);
  }
  // Forget gate (log-decay per key channel).
  for (int i = 0; i < qk; ++i) {
    const double rate = std::exp(static_cast<double>(w.a_log[i / hd]));
    const double gi = static_cast<double>(g_raw[i]) + w.dt_bias[i];
    const double softplus = gi > 20.0 ? gi : std::log(1.0 + std::exp(gi));
    g[i] = static_cast<float>(s.lower_bound_set ? static_cast<double>(s.lower_bound) * sigmoid(rate * gi) : -rate * softplus);
  }
}

void out_norm(const KdaShape& s, const KdaWeights& w, const float* gate_raw, float* o) {
  const int hd = s.head_dim;
  for (int h = 0; h < s.heads; ++h) {
    float* oh = o + h * hd;
    double ss = 0;
    for (int j = 0; j < hd; ++j) ss += static_cast<double>(oh[j]) * oh[j];
    const double inv = 1.0 / std::sqrt(ss / hd + static_cast<double>(s.rms_eps));
    for (int j = 0; j < hd; ++j)
      oh[j] = static_cast<float>(static_cast<float>(oh[j] * inv) * static_cast<double>(w.o_norm[j]) *
                                 sigmoid(gate_raw[h * hd + j]));
  }
}

}  // namespace kda_detail

void kda_token_cpu(const KdaShape& s, const KdaWeights& w, const float* u, const float* g_raw, const float* beta_raw,
                   const float* gate_raw, float* state, float* o) {
  const int heads = s.heads, hd = s.head_dim, K = s.conv_kernel;
  const int qk = heads * hd, channels = 3 * qk;
  float* S = state + static_cast<long>(K - 1) * channels;  // [heads][hd (key)][hd (value)]
  std::vector<float> mixed(at(channels)), g(at(qk));
  std::vector<double> kv_mem(at(hd)), delta(at(hd));
  kda_detail::token_inputs(s, w, u, g_raw, state, mixed.data(), g.data());
  float* q = mixed.data();
  float* kk = mixed.data() + qk;
  const float* v = mixed.data() + 2 * qk;
  // Delta rule, per head.
  for (int h = 0; h < heads; ++h) {
    float* Sh = S + static_cast<long>(h) * hd * hd;
    const float* qh = q + h * hd;
    const float* kh = kk + h * hd;
    const float* vh = v + h * hd;
    const double b = sigmoid(beta_raw[h]);
    for (int i = 0; i < hd; ++i) {
      const float decay = static_cast<float>(std::exp(static_cast<double>(g[at(h * hd + i)])));
      for (int j = 0; j < hd; ++j) Sh[i * hd + j] *= decay;
    }
    std::fill(kv_mem.begin(), kv_mem.end(), 0.0);
    for (int i = 0; i < hd; ++i)
      for (int j = 0; j < hd; ++j) kv_mem[at(j)] += static_cast<double>(Sh[i * hd + j]) * kh[i];
    for (int j = 0; j < hd; ++j) delta[at(j)] = (vh[j] - kv_mem[at(j)]) * b;
    for (int i = 0; i < hd; ++i)
      for (int j = 0; j < hd; ++j)
        Sh[i * hd + j] = static_cast<float>(Sh[i * hd + j] + static_cast<double>(kh[i]) * delta[at(j)]);
    for (int j = 0; j < hd; ++j) {
      double acc = 0;
      for (int i = 0; i < hd; ++i) acc += static_cast<double>(Sh[i * hd + j]) * qh[i];
      o[h * hd + j] = static_cast<float>(acc);
    }
  }
  kda_detail::out_norm(s, w, gate_raw, o);
}

// ---- DSA ----------------------------------------------------------------------------------------

void dsa_prepare_cpu(const DsaShape& s, const DsaNorms& n, const float* proj, long ld_proj, int tokens,
                     const std::int32_t* token_seq, const std::int32_t* token_pos, const DsaPool& pool, float* qr,
                     float* iw) {
  const int D = s.index_dim;
  std::vector<float> computed(at(s.lora_kv + s.rope + 2 * D));
  for (int t = 0; t < tokens; ++t) {
    const float* p = proj + static_cast<long>(t) * ld_proj;
    float* row = computed.data();
    rmsnorm_cpu(p, n.q_a_norm, qr + static_cast<long>(t) * s.lora_q, 1, s.lora_q, s.rms_eps);
    const float* c = p + s.lora_q;
    rmsnorm_cpu(c, n.kv_a_norm, row, 1, s.lora_kv, s.rms_eps);
    std::copy_n(c + s.lora_kv, s.rope, row + s.lora_kv);
    float* ik = row + s.lora_kv + s.rope;
    if (!s.indexer) {
      std::fill(ik, ik + 2 * D, 0.f);  // a shared layer's rows hold no indexer state
      pool_put(pool, token_seq[t], token_pos[t], row, s.lora_kv + s.rope + 2 * D);
      continue;
    }
    // LayerNorm (eps 1e-6) of the indexer key, then the k-pool gate score as it is.
    const float* k = c + s.lora_kv + s.rope;
    double mean = 0, var = 0;
    for (int d = 0; d < D; ++d) mean += k[d];
    mean /= D;
    for (int d = 0; d < D; ++d) var += (k[d] - mean) * (k[d] - mean);
    const double inv = 1.0 / std::sqrt(var / D + 1e-6);
    for (int d = 0; d < D; ++d) ik[d] = static_cast<float>((k[d] - mean) * inv * n.k_norm[d] + n.k_norm_bias[d]);
    std::copy_n(k + D, D, ik + D);
    pool_put(pool, token_seq[t], token_pos[t], row, s.lora_kv + s.rope + 2 * D);
    const float wscale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.index_heads)));
    for (int h = 0; h < s.index_heads; ++h) iw[static_cast<long>(t) * s.index_heads + h] = k[2 * D + h] * wscale;
  }
}

std::vector<double> dsa_pool_keys_cpu(const DsaShape& s, const DsaPool& pool, int seq, const float* kpool_ape, int n) {
  const int kp = s.kpool, D = s.index_dim, P = n / kp;
  const int ik_at = s.lora_kv + s.rope, ig_at = ik_at + D;
  std::vector<double> keys(at(static_cast<long>(P) * D)), logit(at(kp));
  for (int p = 0; p < P; ++p)
    for (int d = 0; d < D; ++d) {
      double top = -INFINITY;
      for (int m = 0; m < kp; ++m) {
        logit[at(m)] = static_cast<double>(pool_get(pool, seq, p * kp + m, ig_at + d)) + kpool_ape[m * D + d];
        top = std::max(top, logit[at(m)]);
      }
      double sum = 0, acc = 0;
      for (int m = 0; m < kp; ++m) sum += (logit[at(m)] = std::exp(logit[at(m)] - top));
      for (int m = 0; m < kp; ++m) acc += logit[at(m)] / sum * pool_get(pool, seq, p * kp + m, ik_at + d);
      keys[at(p * D + d)] = acc;
    }
  return keys;
}

float dsa_pool_score_cpu(const DsaShape& s, const double* pool_key, const float* iq, const float* iw) {
  const int D = s.index_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  double score = 0;
  for (int h = 0; h < s.index_heads; ++h) {
    double dot = 0;
    for (int d = 0; d < D; ++d) dot += static_cast<double>(iq[h * D + d]) * pool_key[d];
    score += static_cast<double>(iw[h]) * std::max(0.0, static_cast<double>(static_cast<float>(dot * scale)));
  }
  return static_cast<float>(score);
}

std::vector<int> dsa_select_keys_cpu(const DsaShape& s, const std::vector<double>& pools, const float* iq,
                                     const float* iw, const std::int32_t* pos, int n, int i) {
  const int kp = s.kpool, D = s.index_dim, P = static_cast<int>(pools.size()) / D;
  // Every pool the cache holds, complete or not, as torch.topk sees them: (score, pool) in pool
  // order, the lowest float where the query may not use the pool (incomplete, or its last token
  // not visible).
  const int all = (n + kp - 1) / kp;
  std::vector<std::pair<float, long>> candidates;
  std::vector<bool> usable(at(all), false);
  for (int p = 0; p < all; ++p) {
    float value = std::numeric_limits<float>::lowest();
    if (p < P && pos[p * kp + kp - 1] <= pos[i]) {
      value = dsa_pool_score_cpu(s, pools.data() + static_cast<long>(p) * D, iq, iw);
      usable[at(p)] = true;
    }
    candidates.emplace_back(value, p);
  }
  // The winners as torch.topk's CPU kernel picks them: std::nth_element (std::partial_sort when
  // k * 64 <= n) ordering by "greater score". Equal scores are common (the ReLU makes many exactly
  // 0), and which of them win is that algorithm's choice, so the same algorithm makes it here.
  const size_t budget = std::min(candidates.size(), static_cast<size_t>(s.index_topk / kp));
  const auto greater = [](const std::pair<float, long>& a, const std::pair<float, long>& b) {
    return a.first > b.first;
  };
  if (budget > 0 && budget * 64 <= candidates.size())
    std::partial_sort(candidates.begin(), candidates.begin() + static_cast<long>(budget), candidates.end(), greater);
  else if (budget > 0)
    std::nth_element(candidates.begin(), candidates.begin() + static_cast<long>(budget) - 1, candidates.end(), greater);
  std::vector<int> keys;
  for (size_t c = 0; c < budget; ++c) {
    const long p = candidates[c].second;
    if (!usable[at(p)]) continue;
    for (int m = 0; m < kp; ++m) keys.push_back(static_cast<int>(p) * kp + m);
  }
  if (s.select_tail && kp > 1) {
    int visible = 0;
    for (int j = 0; j < n; ++j) visible += pos[j] <= pos[i];
    for (int j = visible - visible % kp; j < visible; ++j)
      if (pos[j] <= pos[i]) keys.push_back(j);
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

// ---- products -----------------------------------------------------------------------------------

void absorb_query_cpu(const float* q, long ld_q, long head_stride, int tokens, int heads, int nope, int vd, int lora_kv,
                      const float* kv_b, float* q_lat) {
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h)
      for (int d = 0; d < lora_kv; ++d) {
        double a = 0;
        for (int n = 0; n < nope; ++n)
          a += static_cast<double>(q[t * ld_q + h * head_stride + n]) *
               kv_b[(static_cast<long>(h) * (nope + vd) + n) * lora_kv + d];
        q_lat[(static_cast<long>(t) * heads + h) * lora_kv + d] = static_cast<float>(a);
      }
}

void absorb_values_cpu(const float* lat, int tokens, int heads, int nope, int vd, int lora_kv, const float* kv_b,
                       float* out) {
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h)
      for (int v = 0; v < vd; ++v) {
        double a = 0;
        for (int d = 0; d < lora_kv; ++d)
          a += static_cast<double>(lat[(static_cast<long>(t) * heads + h) * lora_kv + d]) *
               kv_b[(static_cast<long>(h) * (nope + vd) + nope + v) * lora_kv + d];
        out[(static_cast<long>(t) * heads + h) * vd + v] = static_cast<float>(a);
      }
}

// ---- MoE ----------------------------------------------------------------------------------------

void clamped_silu_and_mul_cpu(const float* gate_up, float* y, int rows, int d, float limit) {
  std::vector<float> row(at(2L * d));
  for (int r = 0; r < rows; ++r) {
    std::copy_n(gate_up + static_cast<long>(r) * 2 * d, 2L * d, row.begin());
    clamped_swiglu_cpu(row.data(), row.data() + d, y + static_cast<long>(r) * d, d, limit);
  }
}

void moe_combine_f32_cpu(const float* pair_out, const std::int32_t* pair_pos, const float* weight, int tokens, int top_k,
                         int hidden, const float* add, float* y) {
  for (int t = 0; t < tokens; ++t)
    for (int e = 0; e < hidden; ++e) {
      float acc = 0.f;
      for (int k = 0; k < top_k; ++k) {
        const long i = static_cast<long>(t) * top_k + k, row = pair_pos ? pair_pos[i] : i;
        if (row >= 0) acc += weight[i] * pair_out[row * hidden + e];
      }
      y[static_cast<long>(t) * hidden + e] = acc + (add ? add[static_cast<long>(t) * hidden + e] : 0.f);
    }
}

void moe_local_experts_cpu(std::int32_t* expert, int pairs, int first, int count) {
  for (int p = 0; p < pairs; ++p) {
    const int e = expert[p] - first;
    expert[p] = e >= 0 && e < count ? e : -1;
  }
}

}  // namespace tandem::kernels
