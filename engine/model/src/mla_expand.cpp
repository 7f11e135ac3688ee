#include "mla_expand.hpp"

#include <algorithm>

#include "tandem/kernels/linear.hpp"

namespace tandem::model::detail {

MlaExpanded mla_expand(const KvRows& cached, int tokens, const std::vector<float>& kv_b, int heads, int nope, int rope,
                       int v_dim, int kv_lora) {
  const int qk = nope + rope;
  MlaExpanded e;
  e.kv_width = heads * (nope + v_dim);
  e.kv.resize(static_cast<size_t>(tokens) * static_cast<size_t>(e.kv_width));
  e.keys.resize(static_cast<size_t>(tokens) * static_cast<size_t>(heads * qk));
  for (int s = 0; s < tokens; ++s) {
    const float* row = cached.row(s);
    float* kvs = e.kv.data() + static_cast<long>(s) * e.kv_width;
    kernels::linear_cpu(row, kv_b.data(), nullptr, kvs, 1, kv_lora, e.kv_width);
    for (int h = 0; h < heads; ++h) {
      float* kh = e.keys.data() + (static_cast<long>(s) * heads + h) * qk;
      std::copy(kvs + h * (nope + v_dim), kvs + h * (nope + v_dim) + nope, kh);
      std::copy(row + kv_lora, row + kv_lora + rope, kh + nope);
    }
  }
  return e;
}

}  // namespace tandem::model::detail
