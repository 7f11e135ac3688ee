// The shapes glm5_next's kernels (CPU references and CUDA alike) take, from the config: one place,
// so that the CPU path and the CUDA model hand the kernels the same numbers. The epsilons go in as
// fp32, as transformers adds them to fp32 tensors (the CPU path once added the config's doubles:
// the sparse fixture's logits then sat 3.84e-6 from transformers', now 3.76e-6).
#include "glm5_next_parts.hpp"

namespace tandem::model::detail {

kernels::HcShape hc_shape(const Glm5NextConfig& c) {
  kernels::HcShape s;
  s.hc = c.hc_mult, s.hidden = c.d.hidden_size, s.sinkhorn_iters = c.hc_sinkhorn_iters;
  s.rms_eps = static_cast<float>(c.d.rms_norm_eps), s.hc_eps = static_cast<float>(c.hc_eps);
  return s;
}

kernels::KdaShape kda_shape(const Glm5NextConfig& c) {
  kernels::KdaShape s;
  s.heads = c.linear_num_heads, s.head_dim = c.linear_head_dim, s.conv_kernel = c.linear_conv_kernel_dim;
  s.lower_bound_set = c.linear_lower_bound.has_value();
  s.lower_bound = static_cast<float>(c.linear_lower_bound.value_or(0.0));
  s.rms_eps = static_cast<float>(c.d.rms_norm_eps);
  return s;
}

kernels::DsaShape dsa_shape(const Glm5NextConfig& c, bool indexer) {
  kernels::DsaShape s;
  s.lora_q = c.q_lora_rank, s.lora_kv = c.kv_lora_rank, s.rope = c.qk_rope_head_dim;
  s.index_heads = c.index_n_heads, s.index_dim = c.index_head_dim, s.index_topk = c.index_topk, s.kpool = c.index_kpool;
  s.select_tail = c.index_kpool_always_select_tail, s.indexer = indexer;
  s.rms_eps = static_cast<float>(c.d.rms_norm_eps);
  return s;
}

int dsa_row_width(const Glm5NextConfig& c) { return c.kv_lora_rank + c.qk_rope_head_dim + 2 * c.index_head_dim; }

Result<kernels::DType> dsa_pool_type(const std::string& kv_cache_dtype) {
  const std::string& d = kv_cache_dtype;
  if (d.empty() || d == "auto" || d == "float32" || d == "fp32" || d == "float") return kernels::DType::f32;
  if (d == "bfloat16" || d == "bf16") return kernels::DType::bf16;
  if (d == "fp8" || d == "fp8_e4m3") return kernels::DType::fp8_e4m3;
  return error("`kv_cache_dtype` " + d + ": glm5_next's DSA pool holds auto (float32), bfloat16, fp8 or fp8_e4m3 rows");
}

}  // namespace tandem::model::detail
