// The three parts of a glm5_next_text layer that the GLM-4 decoders do not have, each on the CPU
// op layer in fp32 (fp64 sums), following transformers 5.17's modeling_glm5_next:
//   hyper-connections  hc_mult copies ("streams") of the hidden state; before each sublayer a
//                      learned, input-dependent mix collapses them into its input, after it the
//                      output is spread back and the streams are mixed by a Sinkhorn-normalised
//                      (doubly stochastic) matrix;
//   KDA                Kimi-style gated delta-rule linear attention with a short causal conv:
//                      its only memory of the past is a fixed-size state per sequence;
//   DSA                multi-head latent attention without rotary, each query attending only to
//                      the keys the lightning indexer selects (top-k k-pools plus the tail).
#pragma once
#include <span>
#include <vector>

#include "tandem/model/config.hpp"
#include "tandem/model/kv_cache.hpp"

namespace tandem::model::detail {

// ---- hyper-connections ----------------------------------------------------------------------
struct HyperConnection {
  std::vector<float> fn;     // [(2 + hc) * hc, hc * hidden]
  std::vector<float> base;   // [(2 + hc) * hc]
  std::vector<float> scale;  // [3]: pre, post, comb
};

// The mix of one token: its sublayer input (pre-weighted sum of the streams), `post` [hc] (how
// much of the sublayer output each stream gets) and `comb` [hc x hc] (stream mixer).
struct HcMix {
  std::vector<float> post, comb;
};
// streams: [hc, hidden] of one token; collapsed: [hidden].
void hc_collapse(const HyperConnection& w, const Glm5NextConfig& c, const float* streams, float* collapsed, HcMix& mix);
// streams[i] <- post[i] * y + sum_j comb[j][i] * streams[j]
void hc_expand(const Glm5NextConfig& c, const HcMix& mix, const float* y, float* streams);

// ---- KDA linear attention -------------------------------------------------------------------
struct KdaLayer {
  std::vector<float> q, k, v;            // [heads * head_dim, hidden]
  std::vector<float> conv;               // [3 * heads * head_dim, kernel] depthwise, no bias
  std::vector<float> f_a, f_b, dt_bias;  // forget gate: [head_dim, hidden], [heads * head_dim, head_dim], [heads * head_dim]
  std::vector<float> a_log;              // [heads]
  std::vector<float> b;                  // [heads, hidden]: beta = sigmoid(b x)
  std::vector<float> g_a, g_b;           // output gate: [head_dim, hidden], [heads * head_dim, head_dim]
  std::vector<float> o_norm;             // [head_dim]
  std::vector<float> o;                  // [hidden, heads * head_dim]
};
// Floats of one KDA layer's state: the conv's last kernel-1 inputs and one [head_dim x head_dim]
// matrix per head.
long kda_state_floats(const Glm5NextConfig& c);
// out = kda(x) for `rows` consecutive new tokens [rows, hidden]; `state` (kda_state_floats) is
// advanced over them, token by token, so any split of a sequence into calls gives the same bits.
void kda_forward(const KdaLayer& w, const Glm5NextConfig& c, const float* x, int rows, std::span<float> state, float* out);
// One token after its projections (what kda_forward does between them, and the CPU reference of
// the CUDA kernel kda_recurrent_cuda): u = [q_proj x | k_proj x | v_proj x], g_raw = f_b(f_a x)
// (before dt_bias), beta_raw = b_proj x (before the sigmoid), gate_raw = g_b(g_a x); reads conv,
// a_log, dt_bias and o_norm of w; advances `state` (kda_state_floats) and writes the gated, normed
// o [heads * head_dim] (o_proj's input).
void kda_token(const KdaLayer& w, const Glm5NextConfig& c, const float* u, const float* g_raw, const float* beta_raw,
               const float* gate_raw, float* state, float* o);

// ---- DSA sparse attention -------------------------------------------------------------------
struct DsaLayer {
  std::vector<float> q_a, q_a_bias, q_a_norm, q_b;  // query LoRA
  std::vector<float> kv_a, kv_a_bias, kv_a_norm, kv_b;
  std::vector<float> o, o_bias;
  bool indexer = false;  // false: a "shared" layer, it reuses the previous layer's selection
  std::vector<float> wq_b, wk, k_norm, k_norm_bias, weights_proj, kpool_ape, kpool_gate;
};
// What a DSA layer caches per token: the normed latent, the shared raw key part, and the
// indexer's key and k-pool gate score.
int dsa_row_width(const Glm5NextConfig& c);
// The keys each new token attends to (cache indices, ascending); handed to a following "shared" layer.
using Selection = std::vector<std::vector<int>>;
// out = attention(x) for the `rows` new tokens at cache indices first..first+rows-1 of `layer`
// (cache slot `slot`); fills their cache rows. Reads `selection` on a shared layer, writes it on
// a full one.
// The indexer's parts (CPU references of dsa_select_cuda): the pool keys of the complete pools among
// the first n cached tokens ([n / index_kpool, index_head_dim]) and the keys the query at cache
// index i attends to (iq [index heads, index_head_dim], weights [index heads] already scaled by
// 1/sqrt(index heads); pos: the cached tokens' positions).
std::vector<double> dsa_pool_keys(const DsaLayer& w, const Glm5NextConfig& c, const KvRows& rows, int n);
std::vector<int> dsa_select_keys(const Glm5NextConfig& c, const std::vector<double>& pools, const float* iq, const float* weights,
                                 std::span<const int> pos, int i);
void dsa_forward(const DsaLayer& w, const Glm5NextConfig& c, const float* x, int rows, int first, KvSequence& cache,
                 int slot, Selection& selection, float* out);

}  // namespace tandem::model::detail
