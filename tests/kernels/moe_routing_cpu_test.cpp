// MoE routing (GLM / DeepSeek "noaux_tc"): groups worth their top 2, the bias steers selection only,
// weights are the unbiased sigmoid scores, renormalised and scaled.
#include <doctest/doctest.h>

#include <vector>

#include "tandem/kernels/moe_routing.hpp"

using namespace tandem::kernels;

TEST_CASE("grouped top-k: a group is worth the sum of its two best, not its single best") {
  MoeRouting m;
  m.n_experts = 8;
  m.n_group = 4;
  m.topk_group = 1;
  m.top_k = 2;
  m.norm_topk_prob = true;
  m.routed_scaling_factor = 2.5f;
  // Group 0 = {0,1} holds the best single expert (0.9) but sums to 1.0; group 2 = {4,5} sums to 1.4.
  const std::vector<float> scores{0.9f, 0.1f, 0.3f, 0.2f, 0.7f, 0.7f, 0.05f, 0.05f}, bias(8, 0.f);
  std::vector<std::int32_t> e(2);
  std::vector<float> w(2);
  moe_route_cpu(m, scores.data(), bias.data(), e.data(), w.data());
  CHECK(e == std::vector<std::int32_t>{4, 5});  // equal scores: the lower index first
  CHECK(w[0] == doctest::Approx(0.5 * 2.5));
  CHECK(w[1] == doctest::Approx(0.5 * 2.5));
}

TEST_CASE("the correction bias picks the experts; the weights stay the unbiased scores") {
  MoeRouting m;
  m.n_experts = 4;
  m.n_group = 1;
  m.topk_group = 1;
  m.top_k = 2;
  m.norm_topk_prob = false;
  m.routed_scaling_factor = 1.0f;
  const std::vector<float> scores{0.8f, 0.6f, 0.4f, 0.2f}, bias{0.f, 0.f, 0.5f, 0.f};
  std::vector<std::int32_t> e(2);
  std::vector<float> w(2);
  moe_route_cpu(m, scores.data(), bias.data(), e.data(), w.data());
  CHECK(e == std::vector<std::int32_t>{2, 0});  // 0.4 + 0.5 beats 0.8
  CHECK(w == std::vector<float>{0.4f, 0.8f});    // no renormalisation asked for

  m.norm_topk_prob = true;
  m.routed_scaling_factor = 2.0f;
  moe_route_cpu(m, scores.data(), bias.data(), e.data(), w.data());
  CHECK(w[0] == doctest::Approx(0.4 / 1.2 * 2));
  CHECK(w[1] == doctest::Approx(0.8 / 1.2 * 2));
}

TEST_CASE("routing settings that cannot work are refused with the reason") {
  MoeRouting m;
  m.n_experts = 8;
  m.n_group = 3;
  m.topk_group = 1;
  m.top_k = 2;
  CHECK(!check_moe_routing(m).ok());  // 3 does not divide 8
  m.n_group = 8;
  CHECK(!check_moe_routing(m).ok());  // one expert per group has no top 2
  m.n_group = 4;
  CHECK(check_moe_routing(m).ok());
  m.top_k = 3;
  CHECK(!check_moe_routing(m).ok());  // only 2 experts in the 1 group allowed
  m.top_k = 2;
  m.topk_group = 5;
  CHECK(!check_moe_routing(m).ok());
}

TEST_CASE("the folded add + norm + router launch is taken only where the row fits its shared memory") {
  // GLM-4.5 (hidden 5120, 160 experts, 1 group) and the lite models fit; a model whose row alone
  // fills 48 KiB must take add_rmsnorm then the router, not fail its decode steps.
  CHECK(moe_norm_router_route_fits(5120, 160, 1));
  CHECK(moe_norm_router_route_fits(2048, 64, 1));
  CHECK(moe_norm_router_route_smem(5120, 160, 1) == 4u * (5120 + 480 + 1) + 160);
  CHECK_FALSE(moe_norm_router_route_fits(12288, 64, 1));
  CHECK_FALSE(moe_norm_router_route_fits(7168, 2048, 8));  // hidden + 3.25 E past 12288
  CHECK(moe_norm_router_route_fits(7168, 256, 8));         // DeepSeek-V3-sized: 7168 + 832 + 8 floats
}
