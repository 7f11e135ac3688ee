// MLA on the CPU reference path, unabsorbed: every cached row [latent c (kv_lora), shared rotary
// key (rope)] goes through kv_b into per-head [k_nope | v], and each head's key is [k_nope | the
// shared rotary key]. glm4_moe_lite and glm5_next's DSA layers both attend over these.
#pragma once
#include <vector>

#include "tandem/model/kv_cache.hpp"

namespace tandem::model::detail {

struct MlaExpanded {
  int kv_width = 0;          // heads * (nope + v_dim): one token's row of `kv`
  std::vector<float> kv;     // [tokens, heads, nope + v_dim]: kv_b(c), values at offset nope
  std::vector<float> keys;   // [tokens, heads, nope + rope]
};

// The first `tokens` cached rows of `cached` expanded; kv_b is [heads * (nope + v_dim), kv_lora].
MlaExpanded mla_expand(const KvRows& cached, int tokens, const std::vector<float>& kv_b, int heads, int nope, int rope,
                       int v_dim, int kv_lora);

}  // namespace tandem::model::detail
