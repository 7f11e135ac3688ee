// glm4_moe (GLM-4.5 / 4.6) on CUDA: the GLM decoder (cuda_decoder.hpp) with grouped-query attention
// with partial rotary. Per layer, with T tokens of every sequence of the step at once:
//   fused = x W_in^T (+b)            W_in = [q_proj | k_proj | v_proj]    [T, (heads + 2 kv_heads) D]
//   with use_qk_norm: rmsnorm per head of q and k (in place)
//   rotary (rotate-half) on the first rotary_dim entries of every q and k head (in place)
//   cache <- [k, v]: the pool's layer part is a K pool and a V pool, [slots, kv_heads, D] each
//   out   = paged attention of q over them (query head h reads kv head h / (heads / kv_heads))
//   delta = o_proj(out)                                                   (no bias)
// The math and names follow glm4_moe.cpp, the CPU reference it is checked against. The cache row
// [k, v] is contiguous in the fused rows, so the base's fp8 scale measurement and trace read it
// there as they read MLA's latent; one fp8 scale per layer serves K and V.
// Tensor parallel (shard.hpp, as glm4_moe.cpp): a rank holds whole key/value heads with their query
// heads (their rows of q/k/v_proj and their biases, their input columns of o_proj), so its pool
// caches only its kv heads; the qk norms are per head dimension, replicated.
#include <cmath>

#include "decoder.hpp"
#include "tensor_names.hpp"
#include "tandem/model/cuda/cuda_decoder.hpp"
#include "tandem/kernels/glue.hpp"
#include "tandem/kernels/gqa.hpp"
#include "tandem/kernels/rope.hpp"

namespace tandem::model::cuda {

namespace {

using detail::Tensor;

class Glm4MoeCuda final : public GlmDecoderCuda {
 public:
  Glm4MoeCuda(ModelConfig config, comm::Communicator& comm, const CudaOptions& opt)
      : GlmDecoderCuda(std::move(config), comm, opt), c_(std::get<Glm4MoeConfig>(this->config().arch)) {
    const int all_kv = c_.d.num_key_value_heads;
    group_ = all_kv > 0 ? all_heads_ / all_kv : 0;
    kv_mine_ = split(all_kv, tp_rank_, tp_size_);
    heads_ = kv_mine_.size() * group_;  // this rank's query heads: its kv heads' groups
    D_ = c_.head_dim, kv_heads_ = kv_mine_.size(), kv_w_ = kv_heads_ * D_;
    rope_ = c_.rotary_dim, qk_ = vd_ = D_;
    q_rows_ = heads_ * D_, width_ = 2 * kv_w_, in_rows_ = q_rows_ + width_;
  }

 private:
  k::PagedKvLayout attn_layout(int layer = 0) const override {
    k::PagedKvLayout l = pool_layout(layer);
    l.kv_heads = kv_heads_;
    l.qk_dim = l.v_dim = D_;
    return l;
  }

  Status attention_shape_error() const override {
    const int all_kv = c_.d.num_key_value_heads;
    if (all_kv <= 0 || all_heads_ % all_kv != 0) return Error{"num_attention_heads must be a multiple of num_key_value_heads"};
    if (all_kv < tp_size_)  // every rank decides alike (see cuda_glm4_moe_lite_load.cpp)
      return Error{std::to_string(tp_size_) + " tensor-parallel ranks over " + std::to_string(all_kv) +
                   " key/value heads leave a rank none; use at most " + std::to_string(all_kv) + " ranks"};
    if (slices_ > 1 && all_kv % slices_ != 0)
      return Error{"reduction groups " + std::to_string(slices_) + " do not divide the " + std::to_string(all_kv) +
                   " key/value heads (each group's slice must have the same shape)"};
    if (D_ > 576) return Error{"head_dim must be at most 576 for the paged-attention kernel"};
    return {};
  }

  const detail::TensorNames& names() const override { return detail::TensorNames::glm4_moe(); }

  void slice_changed() override { kv_mine_ = split(c_.d.num_key_value_heads, tp_rank_, tp_size_); }

  Status load_attention(Uploader& up, int l, Layer& a) override {
    const std::size_t h = static_cast<std::size_t>(H_), q = static_cast<std::size_t>(q_rows_), kv = static_cast<std::size_t>(kv_w_);
    auto name = [&](Tensor t) { return names()(t, l); };
    if (auto e = alloc_bf16(a.w_in, static_cast<std::size_t>(in_rows_) * h, name(Tensor::q) + " with k and v"); !e) return e;
    const int all_kv = c_.d.num_key_value_heads, q_all = all_heads_ * D_, kv_all = all_kv * D_;
    const Range q_mine{kv_mine_.begin * group_ * D_, kv_mine_.end * group_ * D_}, kv_rows{kv_mine_.begin * D_, kv_mine_.end * D_};
    up.bf16_rows(a.w_in, 0, name(Tensor::q), {q_all, H_}, q_mine);
    up.bf16_rows(a.w_in, q * h, name(Tensor::k), {kv_all, H_}, kv_rows);
    up.bf16_rows(a.w_in, (q + kv) * h, name(Tensor::v), {kv_all, H_}, kv_rows);
    if (c_.d.attention_bias) {
      if (auto e = alloc_bf16(a.b_in, static_cast<std::size_t>(in_rows_), name(Tensor::q_bias) + " with k and v"); !e)
        return e;
      up.bf16_rows(a.b_in, 0, name(Tensor::q_bias), {q_all}, q_mine);
      up.bf16_rows(a.b_in, q, name(Tensor::k_bias), {kv_all}, kv_rows);
      up.bf16_rows(a.b_in, q + kv, name(Tensor::v_bias), {kv_all}, kv_rows);
    }
    if (c_.use_qk_norm) {
      if (auto e = alloc_bf16(a.q_norm, static_cast<std::size_t>(D_), name(Tensor::q_norm)); !e) return e;
      if (auto e = alloc_bf16(a.k_norm, static_cast<std::size_t>(D_), name(Tensor::k_norm)); !e) return e;
      up.bf16(a.q_norm, 0, name(Tensor::q_norm), {D_});
      up.bf16(a.k_norm, 0, name(Tensor::k_norm), {D_});
    }
    if (auto e = alloc_bf16(a.o, h * q, name(Tensor::o)); !e) return e;
    if (sharded()) up.bf16_cols(a.o, 0, name(Tensor::o), {H_, q_all}, q_mine);
    else up.bf16(a.o, 0, name(Tensor::o), {H_, q_rows_});
    return {};
  }

  Status attention(int l, const Layer& a, int T, int max_context) override {
    FirstError err;
    auto* fused = fused_.as<std::uint16_t>();
    k::GemmArgs in = linear(h_.get(), a.w_in, fused, T, H_, in_rows_);
    in.bias = a.b_in.get();
    err(gemm(in));
    mark("attn qkv_proj", 2.0 * in_rows_ * H_);
    if (c_.use_qk_norm) {
      err(kernels::head_rmsnorm(fused, in_rows_, T, heads_, kv_heads_, D_, a.q_norm.get(), a.k_norm.get(),
                       static_cast<float>(c_.d.rms_norm_eps), stream_));
      mark("attn qk norm", 4.0 * T * (heads_ + kv_heads_) * D_);
    }
    // The key heads follow the query heads in each row: one rotation for both.
    err(k::rope_cuda(kBf16, fused, T, in_rows_, heads_ + kv_heads_, D_, rope_, inv_freq_.as<float>(), in_pos(), k::RopeLayout::half,
                     stream_));
    mark("attn rope (q, k)", 4.0 * T * (heads_ + kv_heads_) * rope_);
    std::uint16_t* kv_rows = fused + q_rows_;  // [k | v] of each token: the cache row
    err(trace(TracePoint::latent, l, T));
    if (measuring_) err(kernels::latent_amax(kv_rows, in_rows_, T, width_, kv_amax_.as<float>() + l, stream_));
    char* k_pool = pool_.as<char>() + static_cast<std::size_t>(l) * layer_bytes_;
    char* v_pool = k_pool + layer_bytes_ / 2;  // the layer's part: K slots, then V slots (width_ = 2 kv_w_)
    const float scale = kv_scales_[static_cast<std::size_t>(l)];
    for (int part = 0; part < 2; ++part)
      err(kernels::latent_cache_write(kv_rows + part * kv_w_, in_rows_, T, kv_w_, in_seq(), in_pos(), in_tables(), max_blocks_, block_size_,
                             kv_type_, scale, part == 0 ? k_pool : v_pool, stream_));
    mark("attn cache write (k, v)", T * (2.0 * width_ + static_cast<double>(width_) * k::dtype_bytes(kv_type_)));
    // The kernel reads the queries as [T, heads, D] rows.
    err(TANDEM_CUDA_STATUS(cudaMemcpy2DAsync(q_.get(), static_cast<std::size_t>(q_rows_) * 2, fused, static_cast<std::size_t>(in_rows_) * 2,
                                     static_cast<std::size_t>(q_rows_) * 2, static_cast<std::size_t>(T), cudaMemcpyDeviceToDevice, stream_),
                   "query copy"));
    mark("attn query copy", 4.0 * T * q_rows_);
    const float softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D_)));
    err(k::paged_attention_cuda(kBf16, q_.get(), T, in_seq(), in_pos(), heads_, attn_layout(l), k_pool, v_pool, in_tables(),
                                max_blocks_, softmax_scale, attn_.get(), max_context, attn_ws_.get(), attn_ws_.bytes(), stream_));
    mark("attn paged attention", static_cast<double>(T) * max_context * width_ * k::dtype_bytes(kv_type_));
    k::GemmArgs o = linear(attn_.get(), a.o, delta_.get(), T, q_rows_, H_);
    o.y_type = k::DType::f32;
    err(gemm(o));
    mark("attn o_proj", 2.0 * H_ * q_rows_);
    return err.status;
  }

  const Glm4MoeConfig& c_;
  int D_ = 0, kv_heads_ = 0, kv_w_ = 0;  // head_dim, this rank's key/value heads, their row width (kv_heads * D)
  int group_ = 0;                        // query heads per key/value head
  Range kv_mine_;                        // this rank's key/value heads
};

}  // namespace

Result<std::unique_ptr<CudaModel>> load_glm4_moe_cuda(ModelConfig config, const Checkpoint& ck, comm::Communicator& comm,
                                                      const CudaOptions& options) {
  auto m = std::make_unique<Glm4MoeCuda>(std::move(config), comm, options);
  if (auto e = m->load(ck); !e) return e.error().with_context("CUDA glm4_moe");
  return std::unique_ptr<CudaModel>(std::move(m));
}

}  // namespace tandem::model::cuda
