// The three parts of a glm5_next_text layer that the GLM-4 decoders do not have, their weights and
// forward passes on the CPU op layer in fp32 (fp64 sums), following transformers 5.17's
// modeling_glm5_next; the math of each lives in kernels (tandem/kernels/glm5_next.hpp: the *_cpu
// references of the CUDA kernels), the shapes those take from the config are made here:
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
#include <string>
#include <vector>

#include "tandem/kernels/glm5_next.hpp"
#include "tandem/model/config.hpp"
#include "tandem/model/kv_cache.hpp"

namespace tandem::model::detail {

// ---- hyper-connections ----------------------------------------------------------------------
struct HyperConnection {
  std::vector<float> fn;     // [(2 + hc) * hc, hc * hidden]
  std::vector<float> base;   // [(2 + hc) * hc]
  std::vector<float> scale;  // [3]: pre, post, comb
};

// The kernels' shape of the hyper-connections (each sublayer collapses with hc_collapse_cpu and
// expands with hc_expand_cpu).
kernels::HcShape hc_shape(const Glm5NextConfig& c);

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
// The kernels' shape of a KDA layer (its state: kernels::kda_state_floats of it).
kernels::KdaShape kda_shape(const Glm5NextConfig& c);
// out = kda(x) for `rows` consecutive new tokens [rows, hidden]; `state` (kda_state_floats) is
// advanced over them, token by token (kernels::kda_token_cpu), so any split of a sequence into
// calls gives the same bits.
void kda_forward(const KdaLayer& w, const Glm5NextConfig& c, const float* x, int rows, std::span<float> state,
                 float* out);

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
// The kernels' shape of a DSA layer (indexer: a full layer).
kernels::DsaShape dsa_shape(const Glm5NextConfig& c, bool indexer);
// The element type of the DSA pool a `kv_cache_dtype` asks for: fp32 for auto (the fixtures' bars
// hold with it), bf16, or fp8_e4m3; an error naming those for anything else.
Result<kernels::DType> dsa_pool_type(const std::string& kv_cache_dtype);
// out = attention(x) for the `rows` new tokens at cache indices first..first+rows-1 of `layer`
// (cache slot `slot`); fills their cache rows. Reads `selection` on a shared layer, writes it on
// a full one (kernels::dsa_prepare_cpu, dsa_pool_keys_cpu, dsa_select_keys_cpu).
void dsa_forward(const DsaLayer& w, const Glm5NextConfig& c, const float* x, int rows, int first, KvSequence& cache,
                 int slot, Selection& selection, float* out);

}  // namespace tandem::model::detail
