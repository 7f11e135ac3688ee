// glm4_moe_lite (GLM-4.7-Flash): multi-head latent attention (DeepSeek-V2 style MLA).
//
//   q      = q_b(rmsnorm(q_a(x)))            or q_proj(x) without a query LoRA    [heads, nope + rope]
//   c, kr  = split(kv_a(x), [kv_lora, rope]); c = rmsnorm(c)                     latent + shared key part
//   q_rope, kr rotated at the token's position (one rotary for all heads of kr)
//   cache  <- [c, kr]                                                            (kv_lora + rope floats)
//   k_nope, v = split(kv_b(c), per head [nope, v])
//   k      = [k_nope, kr],  q = [q_nope, q_rope]
//   out    = o_proj(softmax(q.k / sqrt(nope + rope)) v)
// With attention_bias, q_a, kv_a and o_proj carry biases (q_proj and q_b/kv_b never do).
// A tensor-parallel rank holds a range of heads (their rows of q_b/q_proj and kv_b, their input
// columns of o_proj); q_a and kv_a are replicated, so every rank caches the whole latent row.
// o_proj's bias is added by rank 0 alone, since the ranks' outputs are summed.
#include <cmath>

#include "decoder.hpp"
#include "mla_expand.hpp"
#include "tandem/kernels/attention.hpp"
#include "tandem/kernels/linear.hpp"
#include "tandem/kernels/rmsnorm.hpp"
#include "tandem/kernels/rope.hpp"

namespace tandem::model::detail {

namespace k = tandem::kernels;

namespace {

// transformers builds q_a_layernorm and kv_a_layernorm with the RMSNorm default eps of 1e-6, not
// the config's rms_norm_eps; so do we.
constexpr float kLoraNormEps = 1e-6f;

class Glm4MoeLite final : public Decoder {
 public:
  Glm4MoeLite(ModelConfig config, comm::Communicator& comm)
      : Decoder(std::move(config), comm), c_(std::get<Glm4MoeLiteConfig>(this->config().arch)) {}

  Status load(const Checkpoint& ck) {
    WeightReader w(ck);
    const TensorNames& names = TensorNames::glm4_moe_lite();
    load_common(w, names);
    const DecoderConfig& d = c_.d;
    const int64_t H = d.hidden_size, heads = d.num_attention_heads, qk = c_.qk_head_dim();
    const int64_t lora_q = c_.q_lora_rank, lora_kv = c_.kv_lora_rank, rope = c_.qk_rope_head_dim;
    const bool bias = d.attention_bias;
    const Range mine = split(d.num_attention_heads, tp_rank(), tp_size());
    heads_ = mine.size();
    auto per_head = [&](int64_t width) { return Range{mine.begin * static_cast<int>(width), mine.end * static_cast<int>(width)}; };
    const Range q_rows = per_head(qk), kv_b_rows = per_head(c_.qk_nope_head_dim + c_.v_head_dim), o_cols = per_head(c_.v_head_dim);
    layers_.resize(static_cast<size_t>(d.num_hidden_layers));
    for (int l = 0; l < d.num_hidden_layers && w.ok(); ++l) {
      Layer& a = layers_[static_cast<size_t>(l)];
      if (lora_q > 0) {
        a.q_a = w.get(names(Tensor::q_a, l), {lora_q, H});
        if (bias) a.q_a_bias = w.get(names(Tensor::q_a_bias, l), {lora_q});
        a.q_a_norm = w.get(names(Tensor::q_a_norm, l), {lora_q});
        a.q_b = w.get_rows(names(Tensor::q_b, l), {heads * qk, lora_q}, q_rows);
      } else {
        a.q = w.get_rows(names(Tensor::q, l), {heads * qk, H}, q_rows);
      }
      a.kv_a = w.get(names(Tensor::kv_a, l), {lora_kv + rope, H});
      if (bias) a.kv_a_bias = w.get(names(Tensor::kv_a_bias, l), {lora_kv + rope});
      a.kv_a_norm = w.get(names(Tensor::kv_a_norm, l), {lora_kv});
      a.kv_b = w.get_rows(names(Tensor::kv_b, l), {heads * (c_.qk_nope_head_dim + c_.v_head_dim), lora_kv}, kv_b_rows);
      a.o = w.get_cols(names(Tensor::o, l), {H, heads * c_.v_head_dim}, o_cols);
      if (bias && tp_rank() == 0) a.o_bias = w.get(names(Tensor::o_bias, l), {H});
    }
    if (!w.ok()) return w.error();
    inv_freq_.resize(static_cast<size_t>(rope / 2));
    k::rope_inv_freq(inv_freq_.data(), static_cast<int>(rope), d.rope_theta);
    return Ok{};
  }

  KvLayout kv_layout() const override { return {c_.d.num_hidden_layers, c_.kv_lora_rank + c_.qk_rope_head_dim}; }

 protected:
  void attention(int layer, const float* x, int rows, int first, KvSequence& cache, float* out) const override {
    const Layer& a = layers_[static_cast<size_t>(layer)];
    const DecoderConfig& d = c_.d;
    const int H = d.hidden_size, heads = heads_;
    const int nope = c_.qk_nope_head_dim, rope = c_.qk_rope_head_dim, qk = c_.qk_head_dim(), vd = c_.v_head_dim;
    const int lora_kv = c_.kv_lora_rank, lora_q = c_.q_lora_rank, width = lora_kv + rope;
    const auto layout = c_.rope_interleave ? k::RopeLayout::interleaved : k::RopeLayout::half;
    const int* pos = cache.positions().data();

    // Queries of the new tokens, and their cache rows [c, kr].
    std::vector<float> q(static_cast<size_t>(rows) * static_cast<size_t>(heads * qk)), q_lat(static_cast<size_t>(lora_q));
    for (int t = 0; t < rows; ++t) {
      const float* xt = x + static_cast<long>(t) * H;
      float* qt = q.data() + static_cast<long>(t) * heads * qk;
      if (lora_q > 0) {
        k::linear_cpu(xt, a.q_a.data(), a.q_a_bias.empty() ? nullptr : a.q_a_bias.data(), q_lat.data(), 1, H, lora_q);
        k::rmsnorm_cpu(q_lat.data(), a.q_a_norm.data(), q_lat.data(), 1, lora_q, kLoraNormEps);
        k::linear_cpu(q_lat.data(), a.q_b.data(), nullptr, qt, 1, lora_q, heads * qk);
      } else {
        k::linear_cpu(xt, a.q.data(), nullptr, qt, 1, H, heads * qk);
      }
      k::rope_cpu(qt + nope, heads, qk, rope, inv_freq_.data(), pos[first + t], layout);

      float* row = cache.row(layer, first + t);
      k::linear_cpu(xt, a.kv_a.data(), a.kv_a_bias.empty() ? nullptr : a.kv_a_bias.data(), row, 1, H, width);
      k::rmsnorm_cpu(row, a.kv_a_norm.data(), row, 1, lora_kv, kLoraNormEps);
      k::rope_cpu(row + lora_kv, 1, rope, rope, inv_freq_.data(), pos[first + t], layout);
    }

    // Expand every cached latent into per-head keys and values (the reference path does not
    // absorb kv_b into the query; a fast path may). Latents are read through the block table.
    const int S = cache.length();
    const KvRows cached = cache.rows(layer);
    const MlaExpanded e = mla_expand(cached, S, a.kv_b, heads, nope, width - lora_kv, vd, lora_kv);
    const k::AttentionShape shape = e.attention_shape(heads, qk, nope, vd);
    std::vector<float> attn(static_cast<size_t>(rows) * static_cast<size_t>(heads * vd));
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(qk)));
    // A rank may hold no heads (more ranks than heads): it still caches the latent rows above,
    // and contributes nothing but, on rank 0, o_proj's bias.
    if (heads > 0)
      k::attention_cpu(q.data(), pos + first, rows, e.keys.data(), e.kv.data() + nope, pos, S, attn.data(), shape,
                       scale);
    k::linear_cpu(attn.data(), a.o.data(), a.o_bias.empty() ? nullptr : a.o_bias.data(), out, rows, heads * vd, H);
  }

 private:
  struct Layer {
    std::vector<float> q_a, q_a_bias, q_a_norm, q_b, q;
    std::vector<float> kv_a, kv_a_bias, kv_a_norm, kv_b;
    std::vector<float> o, o_bias;
  };
  const Glm4MoeLiteConfig& c_;
  int heads_ = 0;  // this rank's attention heads
  std::vector<Layer> layers_;
  std::vector<float> inv_freq_;
};

}  // namespace

Result<std::unique_ptr<Model>> load_glm4_moe_lite(ModelConfig config, const Checkpoint& ck, comm::Communicator& comm) {
  auto m = std::make_unique<Glm4MoeLite>(std::move(config), comm);
  if (auto s = m->load(ck); !s) return s.error();
  return std::unique_ptr<Model>(std::move(m));
}

}  // namespace tandem::model::detail
