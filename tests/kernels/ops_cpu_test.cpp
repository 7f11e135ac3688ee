// The CPU reference ops the model is built from, on cases small enough to check by hand.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "tandem/kernels/activation.hpp"
#include "tandem/kernels/attention.hpp"
#include "tandem/kernels/linear.hpp"
#include "tandem/kernels/rope.hpp"

using namespace tandem::kernels;

TEST_CASE("linear is x W^T + b with W stored [out][in]") {
  const std::vector<float> x{1, 2, 3, 4};           // 2 rows x 2
  const std::vector<float> w{1, 0, 0, 1, 1, 1};     // 3 outputs x 2 inputs
  const std::vector<float> b{0.5f, -1, 0};
  std::vector<float> y(6);
  linear_cpu(x.data(), w.data(), b.data(), y.data(), 2, 2, 3);
  CHECK(y == std::vector<float>{1.5f, 1, 3, 3.5f, 3, 7});
  linear_cpu(x.data(), w.data(), nullptr, y.data(), 1, 2, 3);
  CHECK(y[0] == 1.f);
}

TEST_CASE("swiglu and sigmoid") {
  const std::vector<float> g{0, 2, -3}, u{5, 1, 2};
  std::vector<float> y(3);
  swiglu_cpu(g.data(), u.data(), y.data(), 3);
  CHECK(y[0] == 0.f);
  CHECK(y[1] == doctest::Approx(2 / (1 + std::exp(-2.0))));
  CHECK(y[2] == doctest::Approx(2 * -3 / (1 + std::exp(3.0))));
  sigmoid_cpu(g.data(), y.data(), 3);
  CHECK(y[0] == 0.5f);
}

TEST_CASE("rope: position 0 is the identity; pairs turn by pos * theta^(-2i/d) in either layout") {
  const int d = 4;
  std::vector<float> inv(2);
  rope_inv_freq(inv.data(), d, 100.0);
  CHECK(inv[0] == 1.f);
  CHECK(inv[1] == doctest::Approx(0.1));
  std::vector<float> x{1, 2, 3, 4, 9};  // 4 rotated + 1 passed through
  rope_cpu(x.data(), 1, 5, d, inv.data(), 0, RopeLayout::half);
  CHECK(x == std::vector<float>{1, 2, 3, 4, 9});

  const int pos = 3;
  const double a0 = pos * 1.0, a1 = pos * 0.1;
  std::vector<float> h{1, 2, 3, 4, 9};
  rope_cpu(h.data(), 1, 5, d, inv.data(), pos, RopeLayout::half);  // pairs (x0, x2), (x1, x3)
  CHECK(h[0] == doctest::Approx(1 * std::cos(a0) - 3 * std::sin(a0)));
  CHECK(h[2] == doctest::Approx(3 * std::cos(a0) + 1 * std::sin(a0)));
  CHECK(h[1] == doctest::Approx(2 * std::cos(a1) - 4 * std::sin(a1)));
  CHECK(h[3] == doctest::Approx(4 * std::cos(a1) + 2 * std::sin(a1)));
  CHECK(h[4] == 9.f);

  std::vector<float> v{1, 2, 3, 4};
  rope_cpu(v.data(), 1, 4, d, inv.data(), pos, RopeLayout::interleaved);  // pairs (x0, x1), (x2, x3)
  CHECK(v[0] == doctest::Approx(1 * std::cos(a0) - 2 * std::sin(a0)));
  CHECK(v[2] == doctest::Approx(2 * std::cos(a0) + 1 * std::sin(a0)));  // written de-interleaved
  CHECK(v[1] == doctest::Approx(3 * std::cos(a1) - 4 * std::sin(a1)));
  CHECK(v[3] == doctest::Approx(4 * std::cos(a1) + 3 * std::sin(a1)));
}

TEST_CASE("attention: causal by position, softmax-weighted values, grouped heads share K/V") {
  // 2 query heads, 1 kv head, dims 2; keys at positions 0 and 1.
  AttentionShape s;
  s.q_heads = 2;
  s.kv_heads = 1;
  s.qk_dim = s.v_dim = 2;
  s.q_stride = 4;
  s.q_head_stride = 2;
  s.k_stride = s.v_stride = 2;
  s.k_head_stride = s.v_head_stride = 2;
  s.out_stride = 4;
  const std::vector<float> k{1, 0, 0, 1}, v{10, 0, 0, 20};
  const std::vector<int> key_pos{0, 1};
  const std::vector<float> q{1, 0, 0, 1, 1, 0, 0, 1};  // two queries, at positions 0 and 1
  const std::vector<int> q_pos{0, 1};
  std::vector<float> out(8);
  attention_cpu(q.data(), q_pos.data(), 2, k.data(), v.data(), key_pos.data(), 2, out.data(), s, 1.f);
  // Query at position 0 sees only key 0.
  CHECK(out[0] == 10.f);
  CHECK(out[1] == 0.f);
  CHECK(out[2] == 10.f);
  // Query at position 1, head 0 (q = [1, 0]): scores [1, 0].
  const double p0 = std::exp(1.0) / (std::exp(1.0) + 1);
  CHECK(out[4] == doctest::Approx(10 * p0));
  CHECK(out[5] == doctest::Approx(20 * (1 - p0)));
  // Head 1 (q = [0, 1]): scores [0, 1].
  CHECK(out[6] == doctest::Approx(10 * (1 - p0)));
  CHECK(out[7] == doctest::Approx(20 * p0));
}
