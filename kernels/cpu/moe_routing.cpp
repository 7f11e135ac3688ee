#include "tandem/kernels/moe_routing.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <vector>

namespace tandem::kernels {

namespace {

// Indices of the k largest values (ties: the lower index first, deterministic).
std::vector<int> top_k(const std::vector<float>& v, int k) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) {
    const float va = v[static_cast<size_t>(a)], vb = v[static_cast<size_t>(b)];
    return va > vb || (va == vb && a < b);
  });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

}  // namespace

Status check_moe_routing(const MoeRouting& m) {
  if (m.n_experts < 2 || m.n_experts > 1024) return Error{"n_experts must be in [2, 1024]"};
  if (m.n_group < 1 || m.n_experts % m.n_group != 0) return Error{"n_group must divide n_experts"};
  if (m.n_experts / m.n_group < 2) return Error{"each group needs at least 2 experts (a group is worth its top 2)"};
  if (m.topk_group < 1 || m.topk_group > m.n_group) return Error{"topk_group must be in [1, n_group]"};
  if (m.top_k < 1 || m.top_k > m.topk_group * (m.n_experts / m.n_group))
    return Error{"top_k must be in [1, experts in topk_group groups]"};
  return Ok{};
}

void moe_route_cpu(const MoeRouting& m, const float* scores, const float* correction_bias, std::int32_t* expert,
                   float* weight) {
  const int E = m.n_experts, per_group = E / m.n_group;
  std::vector<float> choice(static_cast<size_t>(E)), group_score(static_cast<size_t>(m.n_group));
  for (int e = 0; e < E; ++e) choice[static_cast<size_t>(e)] = scores[e] + correction_bias[e];
  for (int g = 0; g < m.n_group; ++g) {
    std::vector<float> members(choice.begin() + g * per_group, choice.begin() + (g + 1) * per_group);
    const auto best = top_k(members, 2);
    group_score[static_cast<size_t>(g)] = members[static_cast<size_t>(best[0])] + members[static_cast<size_t>(best[1])];
  }
  std::vector<bool> group_on(static_cast<size_t>(m.n_group), false);
  for (int g : top_k(group_score, m.topk_group)) group_on[static_cast<size_t>(g)] = true;
  for (int e = 0; e < E; ++e)
    if (!group_on[static_cast<size_t>(e / per_group)]) choice[static_cast<size_t>(e)] = -std::numeric_limits<float>::infinity();
  const auto chosen = top_k(choice, m.top_k);
  float sum = 0;
  for (size_t i = 0; i < chosen.size(); ++i) {
    expert[i] = chosen[i];
    weight[i] = scores[chosen[i]];
    sum += weight[i];
  }
  for (size_t i = 0; i < chosen.size(); ++i) {
    if (m.norm_topk_prob) weight[i] /= sum + 1e-20f;
    weight[i] *= m.routed_scaling_factor;
  }
}

}  // namespace tandem::kernels
