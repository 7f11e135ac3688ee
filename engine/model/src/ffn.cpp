#include "ffn.hpp"

#include <algorithm>
#include <limits>

#include "tandem/kernels/activation.hpp"
#include "tandem/kernels/linear.hpp"
#include "tandem/kernels/moe_routing.hpp"

namespace tandem::model::detail {

namespace k = tandem::kernels;

// Column-parallel gate/up (this rank's rows of the width), row-parallel down (the same columns);
// `shared` picks the shared experts' names (shared_*) over a dense MLP's (mlp_*).
static void load_mlp(WeightReader& w, const TensorNames& names, int layer, bool shared, int hidden, int width, int rank,
                     int ranks, DenseMlp& m) {
  const int64_t H = hidden, I = width;
  const Range mine = split(width, rank, ranks);
  m.width = mine.size();
  m.gate = w.get_rows(names(shared ? Tensor::shared_gate : Tensor::mlp_gate, layer), {I, H}, mine);
  m.up = w.get_rows(names(shared ? Tensor::shared_up : Tensor::mlp_up, layer), {I, H}, mine);
  m.down = w.get_cols(names(shared ? Tensor::shared_down : Tensor::mlp_down, layer), {H, I}, mine);
}

void load_ffn(WeightReader& w, const TensorNames& names, int layer, const DecoderConfig& d, bool moe, int rank, int ranks,
              Ffn& out) {
  out.moe = moe;
  if (!moe) return load_mlp(w, names, layer, false, d.hidden_size, d.intermediate_size, rank, ranks, out.dense);
  const MoeConfig& m = d.moe;
  const int64_t E = m.n_routed_experts, H = d.hidden_size, I = m.moe_intermediate_size;
  MoeBlock& b = out.routed;
  b.experts = split(m.n_routed_experts, rank, ranks);
  b.router = w.get(names(Tensor::router, layer), {E, H});
  b.correction_bias = w.get(names(Tensor::router_bias, layer), {E});
  // Experts come one tensor per expert (the released checkpoints) or fused into 3-D tensors
  // (transformers' in-memory layout: gate_up_proj [E, 2I, H] with gate rows first, down_proj [E, H, I]).
  const size_t expert_in = static_cast<size_t>(I * H);
  const int64_t held = b.experts.size();
  if (w.has(names(Tensor::experts_gate_up, layer))) {
    const auto gate_up = w.get_rows(names(Tensor::experts_gate_up, layer), {E, 2 * I, H}, b.experts);
    b.down = w.get_rows(names(Tensor::experts_down, layer), {E, H, I}, b.experts);
    if (!w.ok()) return;
    b.gate.resize(static_cast<size_t>(held) * expert_in);
    b.up.resize(b.gate.size());
    for (int64_t e = 0; e < held; ++e) {
      const float* src = gate_up.data() + static_cast<size_t>(e) * 2 * expert_in;
      std::copy(src, src + expert_in, b.gate.begin() + static_cast<long>(static_cast<size_t>(e) * expert_in));
      std::copy(src + expert_in, src + 2 * expert_in, b.up.begin() + static_cast<long>(static_cast<size_t>(e) * expert_in));
    }
  } else {
    for (int64_t e = b.experts.begin; e < b.experts.end && w.ok(); ++e) {
      const int expert = static_cast<int>(e);
      for (auto [which, dst, shape] : {std::tuple{Tensor::expert_gate, &b.gate, std::vector<int64_t>{I, H}},
                                       std::tuple{Tensor::expert_up, &b.up, std::vector<int64_t>{I, H}},
                                       std::tuple{Tensor::expert_down, &b.down, std::vector<int64_t>{H, I}}}) {
        const auto t = w.get(names(which, layer, expert), shape);
        dst->insert(dst->end(), t.begin(), t.end());
      }
    }
  }
  if (m.n_shared_experts > 0)
    load_mlp(w, names, layer, true, d.hidden_size, m.moe_intermediate_size * m.n_shared_experts, rank, ranks, b.shared);
}

// down(silu(gate x) * up x) for one token, accumulated into y with weight `scale`; with a
// swiglu limit L (glm5_next), gate x is clamped to <= L and up x to [-L, L] first (L = infinity:
// no clamp, and min/max with infinity change nothing).
static void mlp_add(const float* gate_w, const float* up_w, const float* down_w, int hidden, int width,
                    const float* x, float scale, float* y, std::vector<float>& g, std::vector<float>& u,
                    std::vector<float>& o, float limit) {
  g.resize(static_cast<size_t>(width));
  u.resize(static_cast<size_t>(width));
  o.resize(static_cast<size_t>(hidden));
  k::linear_cpu(x, gate_w, nullptr, g.data(), 1, hidden, width);
  k::linear_cpu(x, up_w, nullptr, u.data(), 1, hidden, width);
  k::clamped_swiglu_cpu(g.data(), u.data(), g.data(), width, limit);
  k::linear_cpu(g.data(), down_w, nullptr, o.data(), 1, width, hidden);
  for (int i = 0; i < hidden; ++i) y[i] += scale * o[static_cast<size_t>(i)];
}

void ffn_forward(const Ffn& f, const DecoderConfig& d, const float* x, float* y, int rows) {
  const int H = d.hidden_size;
  const float limit = d.swiglu_limit ? static_cast<float>(*d.swiglu_limit) : std::numeric_limits<float>::infinity();
  std::vector<float> g, u, o;
  std::fill(y, y + static_cast<long>(rows) * H, 0.f);
  if (!f.moe) {
    for (int r = 0; r < rows; ++r)
      mlp_add(f.dense.gate.data(), f.dense.up.data(), f.dense.down.data(), H, f.dense.width, x + static_cast<long>(r) * H,
              1.f, y + static_cast<long>(r) * H, g, u, o, limit);
    return;
  }
  const MoeConfig& m = d.moe;
  const MoeBlock& b = f.routed;
  const int E = m.n_routed_experts, I = m.moe_intermediate_size, K = m.num_experts_per_tok;
  const size_t expert_size = static_cast<size_t>(I) * static_cast<size_t>(H);
  std::vector<float> scores(static_cast<size_t>(E)), weight(static_cast<size_t>(K));
  std::vector<std::int32_t> expert(static_cast<size_t>(K));
  // Routing is the kernel layer's (kernels/cpu/moe_routing.cpp, with its CUDA twin).
  k::MoeRouting routing;
  routing.n_experts = E;
  routing.n_group = m.n_group;
  routing.topk_group = m.topk_group;
  routing.top_k = K;
  routing.norm_topk_prob = m.norm_topk_prob;
  routing.routed_scaling_factor = static_cast<float>(m.routed_scaling_factor);
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<long>(r) * H;
    float* yr = y + static_cast<long>(r) * H;
    k::linear_cpu(xr, b.router.data(), nullptr, scores.data(), 1, H, E);
    k::sigmoid_cpu(scores.data(), scores.data(), E);
    k::moe_route_cpu(routing, scores.data(), b.correction_bias.data(), expert.data(), weight.data());
    for (int i = 0; i < K; ++i) {
      const int e = expert[static_cast<size_t>(i)];
      if (!b.experts.contains(e)) continue;  // another rank adds this expert's share
      const size_t at = static_cast<size_t>(e - b.experts.begin) * expert_size;
      mlp_add(b.gate.data() + at, b.up.data() + at, b.down.data() + at, H, I, xr, weight[static_cast<size_t>(i)], yr, g, u, o, limit);
    }
    if (m.n_shared_experts > 0)
      mlp_add(b.shared.gate.data(), b.shared.up.data(), b.shared.down.data(), H, b.shared.width, xr, 1.f, yr, g, u, o, limit);
  }
}

}  // namespace tandem::model::detail
