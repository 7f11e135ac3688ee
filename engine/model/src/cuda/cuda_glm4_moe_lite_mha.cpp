// glm4_moe_lite's un-absorbed (multi-head) prefill attention (TANDEM_PREFILL_ATTN=mha).
//
// The absorbed path attends in the latent space: a (query, key) pair costs 2 (576 + 512) flops at
// GLM-4.7-Flash's shape. For a prefill step, each sequence's context is expanded instead, as vLLM
// and SGLang prefill MLA: its latent rows are gathered from the pool (latent_gather), one GEMM
// through kv_b gives every head's K_nope and V ([context, heads x (nope + v_dim)]), and the flash
// kernel attends over [K_nope | k_rope] and V per head (mla_prefill_mha_cuda): 2 (256 + 256) flops
// a pair. The expansion's GEMM costs what the absorbed query and value projections cost for a
// fresh prompt, so the form pays where the step's tokens are a large share of their context.
//
// Buffers: the gathered latent rows go to qattn_ (the absorbed queries' buffer, t_cap x heads
// rows of the latent's width) and the expansion to olat_ (t_cap x heads x kv_lora): mha_prefill
// admits a step whose contexts fit them. The query is rotated in place (q_ is not read after).
#include "cuda_glm4_moe_lite.hpp"
#include "tandem/kernels/glue.hpp"
#include "tandem/kernels/rope.hpp"

namespace tandem::model::cuda {

namespace {
// Sequences a step may have on this path: the kernel runs once per sequence.
constexpr std::size_t kMhaMaxSequences = 16;
}  // namespace

bool Glm4MoeLiteCuda::mha_prefill(int l, int T) const {
  (void)l;
  if (prefill_attn_ != kPrefillMha || few() || T <= k::kMlaDecodeMaxTokens || step_sequences_.empty() ||
      step_sequences_.size() > kMhaMaxSequences)
    return false;
  long tokens = 0, context = 0;
  for (const StepSequence& s : step_sequences_) tokens += s.tokens, context += s.start + s.tokens;
  const long expanded = static_cast<long>(heads_) * (nope_ + vd_);
  const bool fits = tokens == T && context <= static_cast<long>(t_cap_) * heads_ &&
                    context * expanded <= static_cast<long>(t_cap_) * heads_ * lora_kv_;
  k::MlaMhaPrefill probe;
  probe.heads = heads_, probe.nope = nope_, probe.rope = rope_, probe.v_dim = vd_;
  probe.q_stride = lora_q_ == 0 ? in_rows_ : static_cast<long>(heads_) * qk_, probe.q_head_stride = qk_;
  probe.k_stride = probe.v_stride = expanded, probe.k_head_stride = probe.v_head_stride = nope_ + vd_;
  probe.rope_stride = width_, probe.out_stride = static_cast<long>(heads_) * vd_, probe.out_head_stride = vd_;
  return fits && lora_kv_ % 8 == 0 && k::mla_prefill_mha_fits(probe);
}

// long-function: the query's rotation, then per sequence the gather, one expansion GEMM, per sequence the kernel.
Status Glm4MoeLiteCuda::mha_attention(int l, const Layer& a, int T, const char* layer_pool) {
  FirstError err;
  const auto layout = c_.rope_interleave ? k::RopeLayout::interleaved : k::RopeLayout::half;
  // Without a query LoRA the query is the first heads x qk entries of the fused rows.
  const bool q_in_fused = lora_q_ == 0;
  auto* q = q_in_fused ? fused_.as<std::uint16_t>() : q_.as<std::uint16_t>();
  const long q_ld = q_in_fused ? in_rows_ : static_cast<long>(heads_) * qk_;
  err(k::rope_cuda(kBf16, q + nope_, T, q_ld, heads_, qk_, rope_, inv_freq_.as<float>(), in_pos(), layout, stream_));
  mark("attn rope (query, in place)", 4.0 * T * heads_ * rope_);

  const k::PagedKvLayout pool = attn_layout(l);
  const float pool_scale = kv_type_ == k::DType::fp8_e4m3 ? pool.k_scale : 1.f;
  auto* lat = qattn_.as<std::uint16_t>();
  int rows = 0;
  for (std::size_t s = 0; s < step_sequences_.size() && err.ok(); ++s) {
    const StepSequence& sq = step_sequences_[s];
    const int context = sq.start + sq.tokens;
    err(k::latent_gather(layer_pool, kv_type_, pool_scale, in_tables() + static_cast<long>(s) * max_blocks_, block_size_, context, width_,
                         lat + static_cast<long>(rows) * width_, stream_));
    rows += context;
  }
  mark("attn latent gather (context rows)", static_cast<double>(rows) * width_ * (k::dtype_bytes(kv_type_) + 2));

  // [rows, kv_lora] x kv_b^T: every head's K_nope and V for every context row.
  const int expanded = heads_ * (nope_ + vd_);
  k::GemmArgs e = linear(lat, a.kv_b, olat_.get(), rows, lora_kv_, expanded);
  e.ldx = width_;
  err(gemm(e));
  mark("attn kv_b expansion (K_nope, V)", 2.0 * expanded * lora_kv_ + 2.0 * rows * (width_ + expanded));

  const auto* kv = olat_.as<std::uint16_t>();
  k::MlaMhaPrefill m;
  m.q_stride = q_ld, m.q_head_stride = qk_;
  m.k_stride = m.v_stride = expanded, m.k_head_stride = m.v_head_stride = nope_ + vd_;
  m.rope_stride = width_, m.out_stride = static_cast<long>(heads_) * vd_, m.out_head_stride = vd_;
  m.heads = heads_, m.nope = nope_, m.rope = rope_, m.v_dim = vd_;
  m.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(qk_)));
  double pairs = 0;
  rows = 0;
  for (const StepSequence& sq : step_sequences_) {
    m.q = q + static_cast<long>(sq.first) * q_ld;
    m.k_nope = kv + static_cast<long>(rows) * expanded, m.v = kv + static_cast<long>(rows) * expanded + nope_;
    m.k_rope = lat + static_cast<long>(rows) * width_ + lora_kv_;
    m.out = attn_.as<std::uint16_t>() + static_cast<long>(sq.first) * heads_ * vd_;
    m.n_queries = sq.tokens, m.first_pos = sq.start;
    err(k::mla_prefill_mha_cuda(m, stream_));
    pairs += static_cast<double>(sq.tokens) * (sq.start + (sq.tokens + 1) / 2.0);
    rows += sq.start + sq.tokens;
  }
  // Bytes: the step's queries and outputs, and each tile's pass over its context's keys and values.
  mark("attn flash prefill attention (un-absorbed)", 2.0 * T * heads_ * (qk_ + vd_) + pairs / 128.0 * heads_ * (qk_ + vd_) * 2.0);
  return err.status;
}

}  // namespace tandem::model::cuda
