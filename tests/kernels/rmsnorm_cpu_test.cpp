#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "tandem/kernels/rmsnorm.hpp"

using tandem::kernels::rmsnorm_cpu;

TEST_CASE("rmsnorm of a row with known root-mean-square") {
  // x = [3, 4]: mean of squares 12.5, rms = sqrt(12.5)
  std::vector<float> x{3, 4}, w{1, 2}, y(2);
  rmsnorm_cpu(x.data(), w.data(), y.data(), 1, 2, 0.f);
  const float rms = std::sqrt(12.5f);
  CHECK(y[0] == doctest::Approx(3 / rms));
  CHECK(y[1] == doctest::Approx(2 * 4 / rms));
}

TEST_CASE("rmsnorm normalises each row on its own and eps keeps zeros finite") {
  std::vector<float> x{0, 0, 0, 1, 1, 1}, w{1, 1, 1}, y(6);
  rmsnorm_cpu(x.data(), w.data(), y.data(), 2, 3, 1e-6f);
  CHECK(y[0] == 0.f);
  CHECK(std::isfinite(y[1]));
  CHECK(y[3] == doctest::Approx(1.0).epsilon(1e-5));
}
