// glm4_moe (GLM-4.5 / 4.6): grouped-query attention with partial rotary.
//
//   q, k, v = q_proj(x) + bq, k_proj(x) + bk, v_proj(x) + bv      (biases when attention_bias)
//   with use_qk_norm: q, k = rmsnorm per head (eps rms_norm_eps)
//   rotary (rotate-half pairs) on the first rotary_dim = head_dim * partial_rotary_factor dims
//   cache  <- [k, v]                                             (2 * kv_heads * head_dim floats)
//   (attention reads the cached rows through the sequence's block table: contiguous or paged)
//   out    = o_proj(softmax(q.k / sqrt(head_dim)) v)             (o_proj has no bias)
// Query head h reads key/value head h / (heads / kv_heads). A tensor-parallel rank holds whole
// key/value heads with their query heads, and the matching input columns of o_proj.
#include <cmath>

#include "decoder.hpp"
#include "tandem/kernels/attention.hpp"
#include "tandem/kernels/linear.hpp"
#include "tandem/kernels/rmsnorm.hpp"
#include "tandem/kernels/rope.hpp"

namespace tandem::model::detail {

namespace k = tandem::kernels;

namespace {

class Glm4Moe final : public Decoder {
 public:
  Glm4Moe(ModelConfig config, comm::Communicator& comm)
      : Decoder(std::move(config), comm), c_(std::get<Glm4MoeConfig>(this->config().arch)) {}

  Status load(const Checkpoint& ck) {
    const DecoderConfig& d = c_.d;
    if (d.num_key_value_heads < tp_size())
      return error("tensor parallelism: num_key_value_heads " + std::to_string(d.num_key_value_heads) +
                   " is less than the tensor-parallel size " + std::to_string(tp_size()) +
                   " (each rank needs at least one key/value head)");
    const int group = d.num_attention_heads / d.num_key_value_heads;
    const Range kv = split(d.num_key_value_heads, tp_rank(), tp_size());
    kv_heads_ = kv.size();
    heads_ = kv_heads_ * group;
    const int64_t H = d.hidden_size, D = c_.head_dim, q_out = d.num_attention_heads * D, kv_out = d.num_key_value_heads * D;
    const Range q_rows{kv.begin * group * static_cast<int>(D), kv.end * group * static_cast<int>(D)};
    const Range kv_rows{kv.begin * static_cast<int>(D), kv.end * static_cast<int>(D)};
    WeightReader w(ck);
    const TensorNames& names = TensorNames::glm4_moe();
    load_common(w, names);
    layers_.resize(static_cast<size_t>(d.num_hidden_layers));
    for (int l = 0; l < d.num_hidden_layers && w.ok(); ++l) {
      Layer& a = layers_[static_cast<size_t>(l)];
      a.q = w.get_rows(names(Tensor::q, l), {q_out, H}, q_rows);
      a.k = w.get_rows(names(Tensor::k, l), {kv_out, H}, kv_rows);
      a.v = w.get_rows(names(Tensor::v, l), {kv_out, H}, kv_rows);
      if (d.attention_bias) {
        a.q_bias = w.get_rows(names(Tensor::q_bias, l), {q_out}, q_rows);
        a.k_bias = w.get_rows(names(Tensor::k_bias, l), {kv_out}, kv_rows);
        a.v_bias = w.get_rows(names(Tensor::v_bias, l), {kv_out}, kv_rows);
      }
      if (c_.use_qk_norm) {
        a.q_norm = w.get(names(Tensor::q_norm, l), {D});
        a.k_norm = w.get(names(Tensor::k_norm, l), {D});
      }
      a.o = w.get_cols(names(Tensor::o, l), {H, q_out}, q_rows);
    }
    if (!w.ok()) return w.error();
    inv_freq_.resize(static_cast<size_t>(c_.rotary_dim / 2));
    k::rope_inv_freq(inv_freq_.data(), c_.rotary_dim, d.rope_theta);
    return Ok{};
  }

  KvLayout kv_layout() const override { return {c_.d.num_hidden_layers, 2 * kv_heads_ * c_.head_dim}; }

 protected:
  void attention(int layer, const float* x, int rows, int first, KvSequence& cache, float* out) const override {
    const Layer& a = layers_[static_cast<size_t>(layer)];
    const DecoderConfig& d = c_.d;
    const int H = d.hidden_size, D = c_.head_dim, heads = heads_, kv_heads = kv_heads_;
    const int kv_w = kv_heads * D;
    const float eps = static_cast<float>(d.rms_norm_eps);
    const int* pos = cache.positions().data();
    auto bias = [](const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); };

    std::vector<float> q(static_cast<size_t>(rows) * static_cast<size_t>(heads * D));
    for (int t = 0; t < rows; ++t) {
      const float* xt = x + static_cast<long>(t) * H;
      float* qt = q.data() + static_cast<long>(t) * heads * D;
      float* kt = cache.row(layer, first + t);
      float* vt = kt + kv_w;
      k::linear_cpu(xt, a.q.data(), bias(a.q_bias), qt, 1, H, heads * D);
      k::linear_cpu(xt, a.k.data(), bias(a.k_bias), kt, 1, H, kv_w);
      k::linear_cpu(xt, a.v.data(), bias(a.v_bias), vt, 1, H, kv_w);
      if (c_.use_qk_norm) {
        k::rmsnorm_cpu(qt, a.q_norm.data(), qt, heads, D, eps);
        k::rmsnorm_cpu(kt, a.k_norm.data(), kt, kv_heads, D, eps);
      }
      k::rope_cpu(qt, heads, D, c_.rotary_dim, inv_freq_.data(), pos[first + t], k::RopeLayout::half);
      k::rope_cpu(kt, kv_heads, D, c_.rotary_dim, inv_freq_.data(), pos[first + t], k::RopeLayout::half);
    }

    k::AttentionShape shape;
    shape.q_heads = heads;
    shape.kv_heads = kv_heads;
    shape.qk_dim = shape.v_dim = D;
    shape.q_stride = heads * D;
    shape.q_head_stride = shape.k_head_stride = shape.v_head_stride = D;
    shape.out_stride = heads * D;
    std::vector<float> attn(static_cast<size_t>(rows) * static_cast<size_t>(heads * D));
    // Keys and values are read where they lie, through the sequence's block table.
    const KvRows kv = cache.rows(layer);
    const k::PagedRows paged{kv.base, kv.block_table, kv.block_size, kv.row_width};
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
    k::attention_paged_cpu(q.data(), pos + first, rows, paged, 0, kv_w, pos, cache.length(), attn.data(), shape, scale);
    k::linear_cpu(attn.data(), a.o.data(), nullptr, out, rows, heads * D, H);
  }

 private:
  struct Layer {
    std::vector<float> q, k, v, q_bias, k_bias, v_bias, q_norm, k_norm, o;
  };
  const Glm4MoeConfig& c_;
  int heads_ = 0, kv_heads_ = 0;  // this rank's query and key/value heads
  std::vector<Layer> layers_;
  std::vector<float> inv_freq_;
};

}  // namespace

Result<std::unique_ptr<Model>> load_glm4_moe(ModelConfig config, const Checkpoint& ck, comm::Communicator& comm) {
  auto m = std::make_unique<Glm4Moe>(std::move(config), comm);
  if (auto s = m->load(ck); !s) return s.error();
  return std::unique_ptr<Model>(std::move(m));
}

}  // namespace tandem::model::detail
