// HiddenCapture's residual rows after each layer's attention (what cuda_model_check's trace holds
// the CUDA model to): captured at the right point of the block, and asking for them changes
// nothing else.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tandem/kernels/linear.hpp"
#include "tandem/kernels/rmsnorm.hpp"
#include "tandem/model/model.hpp"
#include "tandem/model/safetensors.hpp"
#include "test_util.hpp"

using namespace tandem::model;
using namespace tandem::model::test;

namespace {

std::vector<float> read(const Checkpoint& ck, const std::string& name, const std::vector<int64_t>& shape) {
  auto t = ck.read(name, shape);
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.error().message));
  return t.value();
}

}  // namespace

TEST_CASE("the residual after each attention is captured between the attention and the FFN") {
  const auto dir = fixture_dir("glm4_moe_lite");
  auto m = load_model(dir);
  REQUIRE(m.ok());
  const DecoderConfig& d = m.value()->config().decoder();
  const int L = d.num_hidden_layers, H = d.hidden_size, I = d.intermediate_size;
  REQUIRE_FALSE(d.layer_is_moe[0]);  // layer 0 is dense: its FFN is recomputed below
  const std::vector<int32_t> ids{5, 9, 3, 17, 40};
  const std::vector<int32_t> pos{0, 1, 2, 3, 4};
  const std::vector<int> rows{4};
  const size_t T = ids.size();

  HiddenCapture plain, both;
  plain.layers.resize(static_cast<size_t>(L));
  std::iota(plain.layers.begin(), plain.layers.end(), 0);
  both.layers = plain.layers;
  both.after_attention = true;
  KvCache c1 = m.value()->new_cache(), c2 = m.value()->new_cache();
  auto l1 = m.value()->forward(ids, pos, c1, rows, &plain);
  auto l2 = m.value()->forward(ids, pos, c2, rows, &both);
  REQUIRE(l1.ok());
  REQUIRE(l2.ok());
  CHECK(l1.value() == l2.value());
  CHECK(plain.rows == both.rows);
  CHECK(plain.attention_rows.empty());
  REQUIRE(both.attention_rows.size() == both.rows.size());

  auto at = [&](const std::vector<float>& v, size_t t, int l) { return v.data() + (t * static_cast<size_t>(L) + static_cast<size_t>(l)) * static_cast<size_t>(H); };
  auto ck = Checkpoint::open(dir);
  REQUIRE(ck.ok());
  const auto embed = read(ck.value(), "model.embed_tokens.weight", {d.vocab_size, H});
  const auto norm = read(ck.value(), "model.layers.0.post_attention_layernorm.weight", {H});
  const auto gate = read(ck.value(), "model.layers.0.mlp.gate_proj.weight", {I, H});
  const auto up = read(ck.value(), "model.layers.0.mlp.up_proj.weight", {I, H});
  const auto down = read(ck.value(), "model.layers.0.mlp.down_proj.weight", {H, I});
  std::vector<float> h(static_cast<size_t>(H)), g(static_cast<size_t>(I)), u(static_cast<size_t>(I)), o(static_cast<size_t>(H));
  for (size_t t = 0; t < T; ++t) {
    const float* a0 = at(both.attention_rows, t, 0);
    const float* x0 = at(both.rows, t, 0);
    // The attention added something to the embedding row.
    double moved = 0;
    for (int i = 0; i < H; ++i)
      moved = std::max(moved, std::fabs(static_cast<double>(a0[i]) - embed[static_cast<size_t>(ids[t]) * static_cast<size_t>(H) + static_cast<size_t>(i)]));
    CHECK(moved > 1e-4);
    // After layer 0 = after its attention + the dense MLP of rmsnorm(after its attention).
    tandem::kernels::rmsnorm_cpu(a0, norm.data(), h.data(), 1, H, static_cast<float>(d.rms_norm_eps));
    tandem::kernels::linear_cpu(h.data(), gate.data(), nullptr, g.data(), 1, H, I);
    tandem::kernels::linear_cpu(h.data(), up.data(), nullptr, u.data(), 1, H, I);
    for (int i = 0; i < I; ++i) g[static_cast<size_t>(i)] = g[static_cast<size_t>(i)] / (1.f + std::exp(-g[static_cast<size_t>(i)])) * u[static_cast<size_t>(i)];
    tandem::kernels::linear_cpu(g.data(), down.data(), nullptr, o.data(), 1, I, H);
    double diff = 0, scale = 0;
    for (int i = 0; i < H; ++i) {
      diff = std::max(diff, std::fabs(static_cast<double>(x0[i] - a0[i] - o[static_cast<size_t>(i)])));
      scale = std::max(scale, std::fabs(static_cast<double>(o[static_cast<size_t>(i)])));
    }
    CHECK(diff <= 1e-5 * scale);
    // Layer 1's attention row is its own point, not layer 0's output.
    double apart = 0;
    for (int i = 0; i < H; ++i) apart = std::max(apart, std::fabs(static_cast<double>(at(both.attention_rows, t, 1)[i] - x0[i])));
    CHECK(apart > 1e-4);
  }
}
