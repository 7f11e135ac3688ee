// MoE routing on the GPU against moe_route_cpu: the same experts in the same order, the same weights.
#include <cstdio>

#include "gpu_check.hpp"
#include "tandem/kernels/activation.hpp"
#include "tandem/kernels/moe_routing.hpp"

namespace gpu_check {

namespace k = tandem::kernels;

namespace {

void route(std::vector<Row>& rows, const char* name, const k::MoeRouting& m, int tokens) {
  const int E = m.n_experts;
  const auto logits = normal(sz(static_cast<long>(tokens) * E), 2.f, 11);
  auto bias = normal(static_cast<size_t>(E), 0.3f, 12);
  Dev<float> dl(logits), db(bias);
  Dev<std::int32_t> de(sz(static_cast<long>(tokens) * m.top_k));
  Dev<float> dw(sz(static_cast<long>(tokens) * m.top_k));
  op_ok(k::moe_route_cuda(m, dl.p(), db.p(), tokens, de.p(), dw.p()));
  std::vector<std::int32_t> expert(sz(static_cast<long>(tokens) * m.top_k));
  std::vector<float> weight(expert.size()), scores(static_cast<size_t>(E));
  for (int t = 0; t < tokens; ++t) {
    k::sigmoid_cpu(logits.data() + static_cast<long>(t) * E, scores.data(), E);
    k::moe_route_cpu(m, scores.data(), bias.data(), expert.data() + static_cast<long>(t) * m.top_k,
                     weight.data() + static_cast<long>(t) * m.top_k);
  }
  const auto ge = de.get();
  long differ = 0;
  for (size_t i = 0; i < expert.size(); ++i) differ += ge[i] != expert[i];
  char shape[96];
  std::snprintf(shape, sizeof shape, "%s: E %d, groups %d/%d, top %d, %d tok", name, E, m.topk_group, m.n_group,
                m.top_k, tokens);
  rows.push_back({"moe_route", shape, "fp32", max_rel_error(dw.get(), weight), 1e-6, differ, "ids exact"});
}

}  // namespace

void check_moe(std::vector<Row>& rows) {
  k::MoeRouting glm45{160, 1, 1, 8, true, 2.5f};      // GLM-4.5 (Air: 128 experts), ungrouped
  k::MoeRouting deepseek{256, 8, 4, 8, true, 2.5f};  // grouped as DeepSeek-V3
  k::MoeRouting flash{64, 1, 1, 4, true, 1.8f};      // a GLM-4.7-Flash-sized router
  k::MoeRouting unnormed{32, 4, 2, 6, false, 1.0f};
  route(rows, "glm4.5", glm45, 333);
  route(rows, "grouped", deepseek, 333);
  route(rows, "flash", flash, 64);
  route(rows, "no renorm", unnormed, 100);
}

}  // namespace gpu_check
