// glm4_moe_lite on CUDA: the GLM decoder (cuda_decoder.hpp) with absorbed MLA. Its loading
// (load_attention etc.) is in cuda_glm4_moe_lite_load.cpp, its attention in
// cuda_glm4_moe_lite_step.cpp (the math is described there).
#pragma once
#include <span>

#include "mha_spans.hpp"
#include "tandem/kernels/mla_prefill.hpp"
#include "tandem/model/cuda/cuda_decoder.hpp"

namespace tandem::model::cuda {

constexpr float kLoraNormEps = 1e-6f;  // transformers' RMSNorm default for q_a / kv_a norms

class Glm4MoeLiteCuda final : public GlmDecoderCuda {
 public:
  Glm4MoeLiteCuda(ModelConfig config, comm::Communicator& comm, const CudaOptions& opt)
      : GlmDecoderCuda(std::move(config), comm, opt), c_(std::get<Glm4MoeLiteConfig>(this->config().arch)) {
    nope_ = c_.qk_nope_head_dim, rope_ = c_.qk_rope_head_dim, qk_ = c_.qk_head_dim(), vd_ = c_.v_head_dim;
    lora_q_ = c_.q_lora_rank, lora_kv_ = c_.kv_lora_rank, width_ = lora_kv_ + rope_;
    q_rows_ = lora_q_ > 0 ? lora_q_ : heads_ * qk_;
    in_rows_ = q_rows_ + width_;
  }

 private:
  // One pool row per token: the latent and the rotated shared key, read as the key of one kv head;
  // the value is the latent (its first kv_lora entries).
  k::PagedKvLayout attn_layout(int layer = 0) const override {
    k::PagedKvLayout l = pool_layout(layer);
    l.kv_heads = 1;
    l.qk_dim = width_;
    l.v_dim = lora_kv_;
    l.v_in_k = true;
    // The split of a token's keys depends on its own context alone (about attn_splits_ blocks for
    // a long one, a block per 32 keys for a short one; a constant, not the device's count of
    // multiprocessors, so every GPU gives the same bits): the MLA kernel's result for a token then
    // does not depend on the step (batch-invariant; a verification row gives a plain decode's
    // bits). TANDEM_ATTN_SPLIT=0: a fixed split of max-model-len (whole chunks of 32, at most 256
    // splits), as before.
    if (attn_split_) {
      l.context_splits = attn_splits_;
      return l;
    }
    const int chunks = (max_len_ + 31) / 32;
    l.split_keys = 32 * ((chunks + 255) / 256);
    return l;
  }
  Status attention_shape_error() const override;
  const detail::TensorNames& names() const override;
  Status load_attention(Uploader& up, int l, Layer& a) override;
  Status finish_load() override;
  Status allocate_attention() override;
  Status attention(int l, const Layer& a, int T, int max_context) override;
  // Whether a step of T tokens attends with the flash prefill kernel: TANDEM_PREFILL_ATTN=flash (the
  // default; or =mha where mha_prefill does not admit the step), a prefill-class pass (few() is
  // false: a decode or verification pass keeps the batch-invariant decode kernel, whose bits
  // speculative decoding compares), more tokens than one launch of the decode kernel takes, and a
  // shape and device the kernel serves.
  bool flash_prefill(int l, int T) const {
    return (prefill_attn_ == kPrefillFlash || prefill_attn_ == kPrefillMha) && !few() && T > k::kMlaDecodeMaxTokens &&
           k::mla_prefill_flash_fits(kBf16, heads_, attn_layout(l));
  }

  // The attention after the latent's write, into attn_: in the latent space (absorbed), or
  // un-absorbed (multi-head) for a prefill step that mha_prefill admits (cuda_glm4_moe_lite_mha.cpp).
  Status absorbed_attention(int l, const Layer& a, int T, int max_context, const char* layer_pool);
  Status mha_attention(int l, const Layer& a, int T, const char* layer_pool);
  bool mha_prefill(int l, int T) const;
  // One pass of spans (mha_spans.hpp): gathered, expanded by one GEMM and attended; mha_rows() of
  // them fit the buffers.
  Status mha_pass(int l, const Layer& a, std::span<const MhaSpan> spans, const std::uint16_t* q, const char* layer_pool);
  int mha_rows() const;
  k::MlaMhaPrefill mha_args() const;

  const Glm4MoeLiteConfig& c_;
  int nope_ = 0, lora_q_ = 0, lora_kv_ = 0;
  DeviceBuffer qlat_, qattn_, olat_;  // query latent, absorbed queries, attention's latent output
  // A prefill step's rotary cosines and sines (rope.hpp's rope_angles_cuda), formed at its first
  // layer for every layer's key and query rotations: [t_cap][rope_] doubles.
  DeviceBuffer rope_angles_;
  DeviceBuffer mha_state_;  // the un-absorbed prefill's partial softmax state (contexts longer than mha_rows())
};

}  // namespace tandem::model::cuda
