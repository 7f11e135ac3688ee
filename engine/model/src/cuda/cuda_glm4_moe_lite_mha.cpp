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
// rows of the latent's width) and the expansion to olat_ (t_cap x heads x kv_lora), mha_rows()
// context rows a pass. The step's sequences are cut into spans of keys that passes take in order;
// a context longer than a pass is attended span by span, the softmax's partial state carried in
// mha_state_ between them (the same bits as one span). The query is rotated in place (q_ is not
// read after).
#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda_glm4_moe_lite.hpp"
#include "tandem/kernels/glue.hpp"
#include "tandem/kernels/rope.hpp"

namespace tandem::model::cuda {

namespace {
// Sequences a step may have on this path: the kernel runs once per sequence and span.
constexpr std::size_t kMhaMaxSequences = 16;
}  // namespace

int Glm4MoeLiteCuda::mha_rows() const {
  const long expanded = static_cast<long>(heads_) * (nope_ + vd_), cap = static_cast<long>(t_cap_) * heads_;
  const long rows = std::min({cap, cap * lora_kv_ / std::max(expanded, 1L), mha_pass_rows_ > 0 ? mha_pass_rows_ : 1L << 30});
  return static_cast<int>(rows / k::kMlaMhaSegmentAlign * k::kMlaMhaSegmentAlign);
}

// The kernel's arguments every launch of this decoder shares (shape, strides, scale): the query
// where attention() leaves it (the fused rows without a query LoRA), the expansion's rows, the
// gathered latent rows' rope part, attn_'s rows.
k::MlaMhaPrefill Glm4MoeLiteCuda::mha_args() const {
  k::MlaMhaPrefill m;
  const long expanded = static_cast<long>(heads_) * (nope_ + vd_);
  m.q_stride = lora_q_ == 0 ? in_rows_ : static_cast<long>(heads_) * qk_, m.q_head_stride = qk_;
  m.k_stride = m.v_stride = expanded, m.k_head_stride = m.v_head_stride = nope_ + vd_;
  m.rope_stride = width_, m.out_stride = static_cast<long>(heads_) * vd_, m.out_head_stride = vd_;
  m.heads = heads_, m.nope = nope_, m.rope = rope_, m.v_dim = vd_;
  m.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(qk_)));
  m.tile_rows = mha_tile_rows_, m.kernel = mha_kernel_;
  return m;
}

bool Glm4MoeLiteCuda::mha_prefill(int l, int T) const {
  (void)l;
  const int cap = mha_rows();
  if (prefill_attn_ != kPrefillMha || few() || T <= k::kMlaDecodeMaxTokens || step_sequences_.empty() ||
      step_sequences_.size() > kMhaMaxSequences || cap < k::kMlaMhaSegmentAlign)
    return false;
  long tokens = 0;
  bool split = false;
  for (const StepSequence& s : step_sequences_) tokens += s.tokens, split = split || s.start + s.tokens > cap;
  return tokens == T && (!split || !mha_state_.empty()) && lora_kv_ % 8 == 0 && k::mla_prefill_mha_fits(mha_args());
}

Status Glm4MoeLiteCuda::mha_attention(int l, const Layer& a, int T, const char* layer_pool) {
  FirstError err;
  const auto layout = c_.rope_interleave ? k::RopeLayout::interleaved : k::RopeLayout::half;
  // Without a query LoRA the query is the first heads x qk entries of the fused rows.
  auto* q = lora_q_ == 0 ? fused_.as<std::uint16_t>() : q_.as<std::uint16_t>();
  // In place, a block a token (its angles once for every head): rope_cuda's bits.
  k::RopeCopy rc;
  rc.src = rc.dst = q + nope_, rc.src_token_stride = rc.dst_token_stride = mha_args().q_stride;
  rc.src_head_stride = rc.dst_head_stride = qk_;
  rc.angles = rope_angles_.as<double>();  // attention(): formed at the first layer (mha_prefill excludes few-token steps)
  err(k::rope_copy_cuda(kBf16, rc, T, heads_, rope_, inv_freq_.as<float>(), in_pos(), layout, stream_));
  mark("attn rope (query, in place)", 4.0 * T * heads_ * rope_);
  std::vector<int> contexts;
  for (const StepSequence& s : step_sequences_) contexts.push_back(s.start + s.tokens);
  for (const auto& pass : plan_mha_passes(contexts, mha_rows())) err(mha_pass(l, a, pass, q, layer_pool));
  return err.status;
}

// long-function: the spans' gathers, one expansion GEMM, the kernel per span.
Status Glm4MoeLiteCuda::mha_pass(int l, const Layer& a, std::span<const MhaSpan> spans, const std::uint16_t* q,
                                 const char* layer_pool) {
  FirstError err;
  const k::PagedKvLayout pool = attn_layout(l);
  const float pool_scale = kv_type_ == k::DType::fp8_e4m3 ? pool.k_scale : 1.f;
  auto* lat = qattn_.as<std::uint16_t>();
  int rows = 0;
  for (const MhaSpan& sp : spans) {
    err(k::latent_gather(layer_pool, kv_type_, pool_scale, in_tables() + static_cast<long>(sp.seq) * max_blocks_, block_size_, sp.k0,
                         sp.k1 - sp.k0, width_, lat + static_cast<long>(rows) * width_, stream_));
    rows += sp.k1 - sp.k0;
  }
  mark("attn latent gather (context rows)", static_cast<double>(rows) * width_ * (k::dtype_bytes(kv_type_) + 2));

  // [rows, kv_lora] x kv_b^T: every head's K_nope and V for every gathered row.
  const int expanded = heads_ * (nope_ + vd_);
  k::GemmArgs e = linear(lat, a.kv_b, olat_.get(), rows, lora_kv_, expanded);
  e.ldx = width_;
  err(gemm(e));
  mark("attn kv_b expansion (K_nope, V)", 2.0 * expanded * lora_kv_ + 2.0 * rows * (width_ + expanded));

  const auto* kv = olat_.as<std::uint16_t>();
  k::MlaMhaPrefill m = mha_args();
  const long state_row = static_cast<long>(heads_) * k::mla_mha_state_floats(vd_);
  double tiles = 0, bytes = 0;
  rows = 0;
  for (const MhaSpan& sp : spans) {
    const StepSequence& sq = step_sequences_[static_cast<std::size_t>(sp.seq)];
    m.q = q + sq.first * m.q_stride;
    m.k_nope = kv + static_cast<long>(rows) * expanded, m.v = kv + static_cast<long>(rows) * expanded + nope_;
    m.k_rope = lat + static_cast<long>(rows) * width_ + lora_kv_;
    m.out = attn_.as<std::uint16_t>() + static_cast<long>(sq.first) * heads_ * vd_;
    m.n_queries = sq.tokens, m.first_pos = sq.start;
    m.key_begin = sp.k0, m.key_end = sp.k1;
    m.resume = sp.k0 > 0, m.finish = sp.k1 == sq.start + sq.tokens;
    m.state = mha_state_.empty() ? nullptr : mha_state_.as<float>() + static_cast<long>(sq.first) * state_row;
    err(k::mla_prefill_mha_cuda(m, stream_));
    // Each 128-query tile reads the span's keys and values up to its last query (at most all).
    tiles += (sq.tokens + 127) / 128 * static_cast<double>(sp.k1 - sp.k0);
    bytes += 2.0 * sq.tokens * heads_ * (qk_ + vd_);
    rows += sp.k1 - sp.k0;
  }
  // Bytes: the queries and outputs, and the tiles' passes over keys and values (an upper bound).
  mark("attn flash prefill attention (un-absorbed)", bytes + tiles * heads_ * (qk_ + vd_) * 2.0);
  return err.status;
}

}  // namespace tandem::model::cuda
