// The CPU reference's side of cuda_model_check's trace: for one position of one prompt, every
// layer's cache row (latent), residual stream after the attention and after the FFN, and for MoE
// layers the routing recomputed from that residual (which experts, their weights, and how far the
// last chosen expert's choice value lies above the best one left out: a margin near zero is a
// near-tie that any rounding may flip). Header-only: the stand-alone GPU build
// (engine/bench/gpu) compiles only cuda_model_check.cpp.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "tandem/kernels/activation.hpp"
#include "tandem/kernels/linear.hpp"
#include "tandem/kernels/moe_routing.hpp"
#include "tandem/kernels/rmsnorm.hpp"
#include "tandem/model/model.hpp"
#include "tandem/model/safetensors.hpp"

namespace tandem::model::check {

struct Route {
  std::vector<std::int32_t> experts;
  std::vector<float> weights;
  // The smaller of two gaps: the choice of the last chosen expert minus the best unchosen one within
  // the kept groups, and (n_group > 1) the score of the lowest kept group minus the best dropped
  // one (a group's score: the sum of its two best choices); either near zero flips the experts.
  float margin = 0;
  float choice_max = 0;  // the largest |choice| (score + correction bias): the margin's scale
};

// The routing of one token of MoE layer `layer` whose residual stream after the attention is `x`:
// rmsnorm with post_attention_layernorm, the router, sigmoid, then moe_route_cpu; weights as the
// checkpoint `ck` holds them.
inline Result<Route> route_of(const Checkpoint& ck, const DecoderConfig& d, int layer, const float* x) {
  const int H = d.hidden_size, E = d.moe.n_routed_experts, K = d.moe.num_experts_per_tok;
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  auto norm = ck.read(p + "post_attention_layernorm.weight", {H});
  auto router = ck.read(p + "mlp.gate.weight", {E, H});
  auto bias = ck.read(p + "mlp.gate.e_score_correction_bias", {E});
  if (!norm) return norm.error();
  if (!router) return router.error();
  if (!bias) return bias.error();
  std::vector<float> h(static_cast<size_t>(H)), scores(static_cast<size_t>(E));
  kernels::rmsnorm_cpu(x, norm->data(), h.data(), 1, H, static_cast<float>(d.rms_norm_eps));
  kernels::linear_cpu(h.data(), router->data(), nullptr, scores.data(), 1, H, E);
  kernels::sigmoid_cpu(scores.data(), scores.data(), E);
  kernels::MoeRouting m;
  m.n_experts = E, m.n_group = d.moe.n_group, m.topk_group = d.moe.topk_group, m.top_k = K;
  m.norm_topk_prob = d.moe.norm_topk_prob, m.routed_scaling_factor = static_cast<float>(d.moe.routed_scaling_factor);
  Route r;
  r.experts.resize(static_cast<size_t>(K)), r.weights.resize(static_cast<size_t>(K));
  kernels::moe_route_cpu(m, scores.data(), bias->data(), r.experts.data(), r.weights.data());
  // The margin among the experts of the groups that stayed (those of the chosen experts' groups).
  const int per_group = E / d.moe.n_group;
  float last = INFINITY, best_out = -INFINITY;
  for (int e = 0; e < E; ++e) {
    const float choice = scores[static_cast<size_t>(e)] + (*bias)[static_cast<size_t>(e)];
    r.choice_max = std::max(r.choice_max, std::fabs(choice));
    const bool chosen = std::find(r.experts.begin(), r.experts.end(), e) != r.experts.end();
    const bool kept = std::any_of(r.experts.begin(), r.experts.end(), [&](int c) { return c / per_group == e / per_group; });
    if (chosen) last = std::min(last, choice);
    else if (kept) best_out = std::max(best_out, choice);
  }
  r.margin = last - best_out;
  if (d.moe.n_group > 1 && d.moe.topk_group < d.moe.n_group) {
    float kept_low = INFINITY, dropped_high = -INFINITY;
    for (int g = 0; g < d.moe.n_group; ++g) {
      std::vector<float> c(static_cast<size_t>(per_group));
      for (int i = 0; i < per_group; ++i) c[static_cast<size_t>(i)] = scores[static_cast<size_t>(g * per_group + i)] + (*bias)[static_cast<size_t>(g * per_group + i)];
      std::partial_sort(c.begin(), c.begin() + 2, c.end(), std::greater<float>());
      const float score = c[0] + c[1];
      const bool kept = std::any_of(r.experts.begin(), r.experts.end(), [&](int e) { return e / per_group == g; });
      if (kept) kept_low = std::min(kept_low, score);
      else dropped_high = std::max(dropped_high, score);
    }
    r.margin = std::min(r.margin, kept_low - dropped_high);
  }
  return r;
}

struct ReferenceTrace {
  // Per layer, the one position's row.
  std::vector<std::vector<float>> latent, after_attention, after_ffn;
  std::vector<Route> routes;  // per layer; empty experts for dense layers
};

// `ids[0..pos]` through the CPU reference in one forward; the rows of position `pos`.
inline Result<ReferenceTrace> reference_trace(const Model& cpu, const Checkpoint& ck, const std::vector<int32_t>& ids, int pos) {
  const DecoderConfig& d = cpu.config().decoder();
  const int L = d.num_hidden_layers, H = d.hidden_size;
  std::vector<int32_t> prefix(ids.begin(), ids.begin() + pos + 1), positions(prefix.size());
  std::iota(positions.begin(), positions.end(), 0);
  HiddenCapture cap;
  cap.layers.resize(static_cast<size_t>(L));
  std::iota(cap.layers.begin(), cap.layers.end(), 0);
  cap.after_attention = true;
  KvCache cache = cpu.new_cache();
  const int last = pos;
  auto logits = cpu.forward(prefix, positions, cache, std::span<const int>(&last, 1), &cap);
  if (!logits) return logits.error();
  ReferenceTrace t;
  const int W = cache.row_width();
  auto row_of = [&](const std::vector<float>& all, int l) {
    const float* r = all.data() + (static_cast<size_t>(pos) * static_cast<size_t>(L) + static_cast<size_t>(l)) * static_cast<size_t>(H);
    return std::vector<float>(r, r + H);
  };
  for (int l = 0; l < L; ++l) {
    const float* lat = static_cast<const KvCache&>(cache).row(l, pos);
    t.latent.emplace_back(lat, lat + W);
    t.after_attention.push_back(row_of(cap.attention_rows, l));
    t.after_ffn.push_back(row_of(cap.rows, l));
    Route r;
    if (d.layer_is_moe[static_cast<size_t>(l)]) {
      auto got = route_of(ck, d, l, t.after_attention.back().data());
      if (!got) return got.error();
      r = std::move(got).value();
    }
    t.routes.push_back(std::move(r));
  }
  return t;
}

}  // namespace tandem::model::check
