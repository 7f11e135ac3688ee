// What the GPU check programs of tests/model share (plain programs, not doctest, so that
// engine/bench/gpu builds them with CUDA alone): one "ok"/"FAIL" line per check, counted, and the
// relative error they measure logits and states in.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace check_program {

inline int failures = 0;

inline void check(bool ok, const std::string& what) {
  std::printf("  %s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

// max|ours - ref| / max|ref| over n entries (max|ours - ref| where ref is all zeros); infinite
// where one side is NaN and the other is not (std::max would drop a NaN difference, so logits a
// kernel left all NaN would otherwise measure 0 and pass).
template <class N>
double rel_error(const float* ours, const float* ref, N n) {
  double diff = 0, scale = 0;
  for (N i = 0; i < n; ++i) {
    if (std::isnan(ours[i]) != std::isnan(ref[i])) return INFINITY;
    diff = std::max(diff, static_cast<double>(std::fabs(ours[i] - ref[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(ref[i])));
  }
  return scale > 0 ? diff / scale : diff;
}
inline double rel_error(const std::vector<float>& ours, const std::vector<float>& ref) {
  return ours.size() == ref.size() ? rel_error(ours.data(), ref.data(), ours.size()) : INFINITY;
}

}  // namespace check_program
