// CPU references of the ops the CUDA back end fuses or batches: residual-add RMSNorm, rotary at
// per-token positions, SiLU-and-mul on fused gate_up rows, the embedding gather, the KV cache
// round trip and the sampling support set.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "tandem/kernels/activation.hpp"
#include "tandem/kernels/dtype.hpp"
#include "tandem/kernels/embedding.hpp"
#include "tandem/kernels/paged_attention.hpp"
#include "tandem/kernels/rmsnorm.hpp"
#include "tandem/kernels/rope.hpp"
#include "tandem/kernels/sampling.hpp"

using namespace tandem::kernels;

TEST_CASE("rmsnorm_residual: x becomes x + residual, y is rmsnorm of the new x") {
  std::vector<float> x{1, 2, 3, 4}, r{1, 0, -1, 2}, w{1, 1, 2, 0.5f}, y(4), want(4);
  const std::vector<float> sum{2, 2, 2, 6};
  rmsnorm_cpu(sum.data(), w.data(), want.data(), 2, 2, 1e-6f);
  rmsnorm_residual_cpu(x.data(), r.data(), w.data(), y.data(), 2, 2, 1e-6f);
  CHECK(x == sum);
  for (int i = 0; i < 4; ++i) CHECK(y[static_cast<size_t>(i)] == doctest::Approx(want[static_cast<size_t>(i)]));
  CHECK(y[0] == doctest::Approx(1.0));  // 2 / sqrt((4 + 4) / 2)

  std::vector<float> xb{1.0f}, rb{0x1p-9f}, wb{1.0f}, yb(1);  // 1 + 2^-9 is not a bf16: rounds to 1
  rmsnorm_residual_cpu(xb.data(), rb.data(), wb.data(), yb.data(), 1, 1, 0.f, true);
  CHECK(xb[0] == 1.0f);
  CHECK(yb[0] == 1.0f);
}

TEST_CASE("rope_tokens: each token turns by its own position; position 0 is the identity") {
  const int rot = 4, head = 6, heads = 2;
  std::vector<float> inv(2);
  rope_inv_freq(inv.data(), rot, 100.0);
  std::vector<float> x(2 * heads * head);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3.f;
  std::vector<float> one = x;
  const std::vector<int> pos{0, 5};
  rope_tokens_cpu(x.data(), 2, heads * head, heads, head, rot, inv.data(), pos.data(), RopeLayout::half);
  for (int i = 0; i < heads * head; ++i) CHECK(x[static_cast<size_t>(i)] == one[static_cast<size_t>(i)]);
  rope_cpu(one.data() + heads * head, heads, head, rot, inv.data(), 5, RopeLayout::half);
  CHECK(x == one);
  CHECK(x[static_cast<size_t>(heads * head + 4)] == one[static_cast<size_t>(heads * head + 4)]);  // past rot_dim: untouched
}

TEST_CASE("silu_and_mul reads [gate | up] rows") {
  const std::vector<float> gu{0, 2, 5, 1, /* row 1 */ -3, 1, 2, 4};
  std::vector<float> y(4);
  silu_and_mul_cpu(gu.data(), y.data(), 2, 2);
  CHECK(y[0] == 0.f);
  CHECK(y[1] == doctest::Approx(2 / (1 + std::exp(-2.0)) * 1));
  CHECK(y[2] == doctest::Approx(-3 / (1 + std::exp(3.0)) * 2));
  CHECK(y[3] == doctest::Approx(1 / (1 + std::exp(-1.0)) * 4));
}

TEST_CASE("embedding gathers rows; an id outside the vocabulary gives zeros") {
  const std::vector<float> table{1, 2, 3, 4, 5, 6};  // 3 tokens x 2
  const std::vector<std::int32_t> ids{2, 0, 3, -1};
  std::vector<float> out(8, 9.f);
  embedding_cpu(table.data(), 3, 2, ids.data(), 4, out.data());
  CHECK(out == std::vector<float>{5, 6, 1, 2, 0, 0, 0, 0});
}

TEST_CASE("KV round trip: bf16 rounds, fp8 stores x / scale and reads back times scale") {
  CHECK(kv_roundtrip_cpu(DType::bf16, 1.0f + 0x1p-10f, 7.f) == 1.0f);
  CHECK(kv_roundtrip_cpu(DType::fp8_e4m3, 3.0f, 0.5f) == 3.0f);     // 6 is an fp8 value
  CHECK(kv_roundtrip_cpu(DType::fp8_e4m3, 1000.f, 1.0f) == 448.f);  // saturates at the scale's range
  CHECK(kv_roundtrip_cpu(DType::fp8_e4m3, 1000.f, 4.0f) == 1024.f);  // 250 -> 256 (step 16 there)
}

TEST_CASE("sampling support: top-k then top-p then min-p, ties by lower id; sample_cpu draws inside it") {
  const std::vector<float> l{1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f};
  auto tokens = [&](const SamplingParams& p) {
    std::vector<int> t;
    for (const auto& c : sampling_support_cpu(l, p)) t.push_back(c.token);
    return t;
  };
  CHECK(tokens({1.f, 3, 1.f, 0.f}) == std::vector<int>{1, 3, 2});
  CHECK(tokens({1.f, 1, 1.f, 0.f}) == std::vector<int>{1});     // tie at 3.0: the lower id
  CHECK(tokens({1.f, 0, 0.5f, 0.f}) == std::vector<int>{1, 3});  // 0.36 + 0.36 >= 0.5
  CHECK(tokens({1.f, 0, 0.3f, 0.f}) == std::vector<int>{1});
  CHECK(tokens({1.f, 0, 1.f, 0.5f}) == std::vector<int>{1, 3});  // e^-1 < 0.5 drops token 2
  const auto all = sampling_support_cpu(l, {1.f, 0, 1.f, 0.f});
  CHECK(all.size() == 6);
  double total = 0;
  for (const auto& c : all) total += c.prob;
  CHECK(total == doctest::Approx(1.0));

  const SamplingParams p{0.7f, 3, 0.9f, 0.f};
  std::set<int> support;
  for (const auto& c : sampling_support_cpu(l, p)) support.insert(c.token);
  std::mt19937_64 rng(5);
  for (int i = 0; i < 200; ++i) CHECK(support.count(sample_cpu(l, p, rng).token) == 1);
}
