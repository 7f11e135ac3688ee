#include "tandem/kernels/embedding.hpp"

#include <algorithm>

namespace tandem::kernels {

void embedding_cpu(const float* table, int vocab, int hidden, const std::int32_t* ids, int n, float* out) {
  for (int t = 0; t < n; ++t) {
    float* o = out + static_cast<long>(t) * hidden;
    if (ids[t] < 0 || ids[t] >= vocab) {
      std::fill(o, o + hidden, 0.f);
      continue;
    }
    std::copy_n(table + static_cast<long>(ids[t]) * hidden, hidden, o);
  }
}

}  // namespace tandem::kernels
