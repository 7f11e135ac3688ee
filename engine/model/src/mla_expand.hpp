// MLA on the CPU reference path, unabsorbed: every cached row [latent c (kv_lora), shared rotary
// key (rope)] goes through kv_b into per-head [k_nope | v], and each head's key is [k_nope | the
// shared rotary key]. glm4_moe_lite and glm5_next's DSA layers both attend over these.
#pragma once
#include <vector>

#include "tandem/kernels/attention.hpp"
#include "tandem/model/kv_cache.hpp"

namespace tandem::model::detail {

struct MlaExpanded {
  int kv_width = 0;          // heads * (nope + v_dim): one token's row of `kv`
  std::vector<float> kv;     // [tokens, heads, nope + v_dim]: kv_b(c), values at offset nope
  std::vector<float> keys;   // [tokens, heads, nope + rope]
  // attention_cpu's shape for queries [tokens, heads, qk_dim (nope + rope)] against `keys` and the
  // values in `kv` (pass kv.data() + nope), out [tokens, heads, v_dim].
  kernels::AttentionShape attention_shape(int heads, int qk_dim, int nope, int v_dim) const {
    kernels::AttentionShape s;
    s.q_heads = s.kv_heads = heads;
    s.qk_dim = qk_dim;
    s.v_dim = v_dim;
    s.q_stride = s.k_stride = static_cast<long>(heads) * qk_dim;
    s.q_head_stride = s.k_head_stride = qk_dim;
    s.v_stride = kv_width;
    s.v_head_stride = nope + v_dim;
    s.out_stride = static_cast<long>(heads) * v_dim;
    return s;
  }
};

// The first `tokens` cached rows of `cached` expanded; kv_b is [heads * (nope + v_dim), kv_lora].
MlaExpanded mla_expand(const KvRows& cached, int tokens, const std::vector<float>& kv_b, int heads, int nope, int rope,
                       int v_dim, int kv_lora);

}  // namespace tandem::model::detail
