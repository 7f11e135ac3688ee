// What cuda_model_check holds the CUDA model to, tested without a GPU: the bf16-weight checkpoint
// (engine/bench/bf16_checkpoint.hpp) rounds exactly the tensors the CUDA model stores in bf16, and
// the reference trace (reference_trace.hpp) routes as the model does and measures its margin.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "bf16_checkpoint.hpp"
#include "reference_trace.hpp"
#include "test_util.hpp"

using namespace tandem::model;
using namespace tandem::model::test;

namespace {

// The router's choice values of layer l (sigmoid of the logits plus the correction bias), computed
// here from the residual after attention, in double: what the trace's margins must agree with.
std::vector<double> choices(const DecoderConfig& d, const Checkpoint& ck, int l, const std::vector<float>& after_attention) {
  const int H = d.hidden_size, E = d.moe.n_routed_experts;
  const std::string p = "model.layers." + std::to_string(l) + ".";
  auto norm = ck.read(p + "post_attention_layernorm.weight", {H});
  auto router = ck.read(p + "mlp.gate.weight", {E, H});
  auto bias = ck.read(p + "mlp.gate.e_score_correction_bias", {E});
  REQUIRE((norm.ok() && router.ok() && bias.ok()));
  std::vector<float> h(static_cast<size_t>(H));
  tandem::kernels::rmsnorm_cpu(after_attention.data(), norm->data(), h.data(), 1, H, static_cast<float>(d.rms_norm_eps));
  std::vector<double> choice(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) {
    double s = 0;
    for (int i = 0; i < H; ++i) s += static_cast<double>(h[static_cast<size_t>(i)]) * (*router)[static_cast<size_t>(e * H + i)];
    choice[static_cast<size_t>(e)] = 1.0 / (1.0 + std::exp(-s)) + (*bias)[static_cast<size_t>(e)];
  }
  return choice;
}

}  // namespace

TEST_CASE("the bf16-weight checkpoint rounds every tensor but the routers, which the CUDA model keeps in fp32") {
  const auto src = fixture_dir("glm4_moe_lite_variant");
  const auto dst = std::filesystem::temp_directory_path() / "tandem-test-bf16-rounded";
  REQUIRE(bench::write_rounded(src, dst));
  auto a = Checkpoint::open(src);
  auto b = Checkpoint::open(dst);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  int routers = 0, moved = 0;
  for (const auto& name : a->names()) {
    const auto x = bench::as_f32(*a->find(name));
    const auto y = bench::as_f32(*b->find(name));
    REQUIRE(x.size() == y.size());
    const bool router = bench::kept_in_fp32(name);
    routers += router;
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = router ? x[i] : tandem::kernels::round_bf16(x[i]);
      if (y[i] != want) FAIL_CHECK(name << "[" << i << "] = " << y[i] << ", want " << want);
      moved += y[i] != x[i];
    }
  }
  CHECK(routers == 2);  // one MoE layer: gate.weight and e_score_correction_bias
  CHECK(moved > 0);     // fp16 values lose bits in bf16
  CHECK(bench::kept_in_fp32("model.layers.1.mlp.gate.weight"));
  CHECK_FALSE(bench::kept_in_fp32("model.layers.1.mlp.gate_proj.weight"));
  CHECK_FALSE(bench::kept_in_fp32("model.layers.1.mlp.shared_experts.gate_proj.weight"));
  std::filesystem::remove_all(dst);
}

TEST_CASE("the reference trace routes as the model and its margin is the gap to the best expert left out") {
  const auto dir = fixture_dir("glm4_moe_lite_variant");
  auto m = load_model(dir);
  auto ck = Checkpoint::open(dir);
  REQUIRE(m.ok());
  REQUIRE(ck.ok());
  const DecoderConfig& d = m.value()->config().decoder();
  const std::vector<int32_t> ids{7, 30, 101, 4, 55, 200};
  auto t = check::reference_trace(*m.value(), ck.value(), ids, 4);
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.error().message));
  REQUIRE(t->routes.size() == static_cast<size_t>(d.num_hidden_layers));
  for (int l = 0; l < d.num_hidden_layers; ++l) {
    const auto& r = t->routes[static_cast<size_t>(l)];
    if (!d.layer_is_moe[static_cast<size_t>(l)]) {
      CHECK(r.experts.empty());
      continue;
    }
    REQUIRE(r.experts.size() == static_cast<size_t>(d.moe.num_experts_per_tok));
    CHECK(r.margin >= 0.f);  // the chosen are at least as good as the rest
    // Recompute the choices from the captured residual: the margin is the K-th best minus the
    // (K+1)-th best choice value (n_group is 1 in this fixture: every expert is in play).
    REQUIRE(d.moe.n_group == 1);
    const std::vector<double> choice = choices(d, ck.value(), l, t->after_attention[static_cast<size_t>(l)]);
    std::vector<double> sorted = choice;
    std::sort(sorted.rbegin(), sorted.rend());
    const size_t K = r.experts.size();
    CHECK(std::fabs(r.margin - (sorted[K - 1] - sorted[K])) < 1e-5);
    for (auto e : r.experts) CHECK(choice[static_cast<size_t>(e)] >= sorted[K - 1] - 1e-6);
  }
  // The cache row of the traced position is the latent width (kv_lora + rope) wide.
  CHECK(t->latent[0].size() == static_cast<size_t>(std::get<Glm4MoeLiteConfig>(m.value()->config().arch).kv_lora_rank +
                                                   std::get<Glm4MoeLiteConfig>(m.value()->config().arch).qk_rope_head_dim));
}

TEST_CASE("with expert groups the margin is also the gap between the lowest kept group and the best dropped one") {
  const auto dir = fixture_dir("glm4_moe");  // n_group 2, topk_group 1
  auto m = load_model(dir);
  auto ck = Checkpoint::open(dir);
  REQUIRE(m.ok());
  REQUIRE(ck.ok());
  const DecoderConfig& d = m.value()->config().decoder();
  REQUIRE(d.moe.n_group == 2);
  REQUIRE(d.moe.topk_group == 1);
  const int E = d.moe.n_routed_experts, per_group = E / d.moe.n_group;
  // The fixture's golden prompt 1, whose position 9 routes layer 1 by a near-tie between the groups.
  const std::vector<int32_t> ids{210, 249, 280, 62, 251, 194, 214, 175, 43, 180};
  int group_bound = 0;  // layers and positions where the group gap is the smaller one
  for (int pos = 0; pos < static_cast<int>(ids.size()); ++pos) {
    auto t = check::reference_trace(*m.value(), ck.value(), ids, pos);
    REQUIRE(t.ok());
    for (int l = 0; l < d.num_hidden_layers; ++l) {
      const auto& r = t->routes[static_cast<size_t>(l)];
      if (!d.layer_is_moe[static_cast<size_t>(l)]) continue;
      const std::vector<double> choice = choices(d, ck.value(), l, t->after_attention[static_cast<size_t>(l)]);
      double biggest = 0;
      for (double c : choice) biggest = std::max(biggest, std::fabs(c));
      // Group scores (sum of the two best choices), the kept group (the chosen experts' own).
      std::vector<double> score(2);
      for (int g = 0; g < 2; ++g) {
        std::vector<double> c(choice.begin() + g * per_group, choice.begin() + (g + 1) * per_group);
        std::sort(c.rbegin(), c.rend());
        score[static_cast<size_t>(g)] = c[0] + c[1];
      }
      const int kept = r.experts[0] / per_group;
      for (auto e : r.experts) CHECK(e / per_group == kept);
      CHECK(score[static_cast<size_t>(kept)] >= score[static_cast<size_t>(1 - kept)] - 1e-6);
      std::vector<double> in_kept(choice.begin() + kept * per_group, choice.begin() + (kept + 1) * per_group);
      std::sort(in_kept.rbegin(), in_kept.rend());
      const size_t K = r.experts.size();
      const double expert_gap = in_kept[K - 1] - in_kept[K];
      const double group_gap = score[static_cast<size_t>(kept)] - score[static_cast<size_t>(1 - kept)];
      CHECK(std::fabs(r.margin - std::min(expert_gap, group_gap)) < 1e-5);
      CHECK(std::fabs(r.choice_max - biggest) < 1e-5);
      group_bound += group_gap < expert_gap;
    }
  }
  CHECK(group_bound > 0);  // the group level does bind somewhere here, so the test sees it
}
