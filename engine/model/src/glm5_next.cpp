// glm5_next_text (and the text stack of glm5_next) on the CPU reference path:
//   streams = hc_mult copies of embed[token]
//   per layer:  streams = hc(attn_hc, streams, x -> attention(rmsnorm(x)))      KDA or DSA by layer_types
//               streams = hc(ffn_hc,  streams, x -> ffn(rmsnorm(x)))            dense or MoE by mlp_layer_types
//   logits = lm_head(rmsnorm(mean of the streams))
// where hc(w, streams, f) collapses the streams into f's input and spreads f's output back
// (kernels::hc_collapse_cpu / hc_expand_cpu). KDA layers keep their state in the sequence's recurrent state (layer
// after layer, kda_state_floats each); DSA layers cache rows in their own slots (KvLayout counts
// DSA layers only: a KDA layer caches nothing per token). Weights are read under "model." (text
// checkpoints) or "model.language_model." (the multimodal wrapper's).
// Tensor parallel (shard.hpp, the split the GLM-4 decoders use; the CUDA decoder splits alike):
//   KDA    whole linear-attention heads (their rows of q/k/v, f_b, g_b, b, their conv channels,
//          a_log and dt_bias, o's matching columns; f_a, g_a and o_norm replicated), and only their
//          part of the recurrent state;
//   DSA    whole MLA heads (their rows of q_b and kv_b, o's matching columns; o's bias on rank 0);
//          q_a, kv_a, their norms and the indexer replicated, so every rank caches the whole row and
//          selects the same keys;
//   FFN    MLP and shared-expert width, whole routed experts (ffn.hpp);
//   vocab  embedding and LM-head rows.
// A rank's KDA and DSA layers run on its own heads only: the parts read a copy of the config whose
// head counts are this rank's (local_). The partial sums -- the embedding rows and each sublayer's
// output -- are all-reduced before the streams take them.
#include <algorithm>

#include "ffn.hpp"
#include "glm5_next_parts.hpp"
#include "tandem/kernels/glm5_next.hpp"
#include "tandem/kernels/rmsnorm.hpp"
#include "tandem/model/model.hpp"
#include "weights.hpp"

namespace tandem::model::detail {

namespace k = tandem::kernels;

namespace {

class Glm5Next final : public Model {
 public:
  Glm5Next(ModelConfig config, comm::Communicator& comm)
      : Model(std::move(config), comm), c_(std::get<Glm5NextConfig>(this->config().arch)), local_(c_) {
    const int rank = this->comm().rank(), ranks = this->comm().size();
    dsa_heads_ = split(c_.d.num_attention_heads, rank, ranks);
    kda_heads_ = split(c_.linear_num_heads, rank, ranks);
    local_.d.num_attention_heads = dsa_heads_.size();
    local_.linear_num_heads = kda_heads_.size();
  }

  Status load(const Checkpoint& ck) {
    const int rank = comm().rank(), ranks = comm().size();
    const auto& kinds = c_.layer_is_linear;
    const bool any_kda = std::find(kinds.begin(), kinds.end(), true) != kinds.end();
    const bool any_dsa = std::find(kinds.begin(), kinds.end(), false) != kinds.end();
    // Decided from the config alone, so every rank refuses with the reason: a refusal on the one
    // rank left without heads would leave the others loaded, to fail later on a lost peer.
    const bool kda_short = any_kda && c_.linear_num_heads < ranks;
    if (kda_short || (any_dsa && c_.d.num_attention_heads < ranks))
      return error(config().model_type + ": " + std::to_string(ranks) + " tensor-parallel ranks over " +
                   (kda_short ? std::to_string(c_.linear_num_heads) + " linear-attention heads"
                              : std::to_string(c_.d.num_attention_heads) + " attention heads") +
                   " leave a rank none; use at most " +
                   std::to_string(kda_short ? c_.linear_num_heads : c_.d.num_attention_heads) + " ranks");
    WeightReader w(ck);
    const DecoderConfig& d = c_.d;
    const TensorNames& text = TensorNames::glm5_next();
    const TensorNames wrapped = text.with_root("model.language_model.");
    const TensorNames& names = ck.has(wrapped(Tensor::embed)) ? wrapped : text;
    const int64_t V = d.vocab_size, H = d.hidden_size, hc = c_.hc_mult, mix = (2 + hc) * hc;
    embed_ = w.get_rows(names(Tensor::embed), {V, H}, vocab_range());
    final_norm_ = w.get(names(Tensor::final_norm), {H});
    head_ = w.get_rows(names(Tensor::lm_head), {V, H}, vocab_range());
    layers_.resize(static_cast<size_t>(d.num_hidden_layers));
    int dsa = 0;
    for (int l = 0; l < d.num_hidden_layers && w.ok(); ++l) {
      Layer& L = layers_[static_cast<size_t>(l)];
      L.input_norm = w.get(names(Tensor::input_norm, l), {H});
      L.post_attention_norm = w.get(names(Tensor::post_attention_norm, l), {H});
      L.attn_hc.fn = w.get(names(Tensor::attn_hc_fn, l), {mix, hc * H});
      L.attn_hc.base = w.get(names(Tensor::attn_hc_base, l), {mix});
      L.attn_hc.scale = w.get(names(Tensor::attn_hc_scale, l), {3});
      L.ffn_hc.fn = w.get(names(Tensor::ffn_hc_fn, l), {mix, hc * H});
      L.ffn_hc.base = w.get(names(Tensor::ffn_hc_base, l), {mix});
      L.ffn_hc.scale = w.get(names(Tensor::ffn_hc_scale, l), {3});
      load_ffn(w, names, l, d, d.layer_is_moe[static_cast<size_t>(l)], rank, ranks, L.ffn);
      L.linear = c_.layer_is_linear[static_cast<size_t>(l)];
      if (L.linear) {
        load_kda(w, names, l, L.kda);
        L.state_at = state_floats_;
        state_floats_ += k::kda_state_floats(kda_shape(local_));
      } else {
        load_dsa(w, names, l, !c_.indexer_is_shared[static_cast<size_t>(l)], L.dsa);
        L.slot = dsa++;
      }
    }
    if (!w.ok()) return w.error();
    n_dsa_ = dsa;
    return Ok{};
  }

  KvLayout kv_layout() const override { return {n_dsa_, dsa_row_width(c_), state_floats_}; }

 protected:
  Result<std::vector<float>> hidden_states(std::span<const int32_t> tokens, KvSequence& cache,
                                           HiddenCapture* capture) const override {
    const DecoderConfig& d = c_.d;
    const int H = d.hidden_size, T = static_cast<int>(tokens.size()), hc = c_.hc_mult;
    const int first = cache.length() - T;
    const std::span<float> state = cache.recurrent_state();
    if (static_cast<long>(state.size()) != state_floats_)
      return error(config().model_type + ": this KV store has no room for the linear-attention state (" +
                   std::to_string(state_floats_) + " floats per sequence); use a store made for kv_layout()");
    const float eps = static_cast<float>(d.rms_norm_eps);
    const size_t n = static_cast<size_t>(T) * static_cast<size_t>(H), width = static_cast<size_t>(hc) * static_cast<size_t>(H);
    std::vector<float> streams(static_cast<size_t>(T) * width), x(n, 0.f), h(n), y(n);
    // Vocabulary-parallel: this rank's rows, zeros for the others', summed (exact: one term each).
    const Range vocab = vocab_range();
    for (int t = 0; t < T; ++t)
      if (const int id = tokens[static_cast<size_t>(t)]; vocab.contains(id))
        std::copy_n(embed_.data() + static_cast<long>(id - vocab.begin) * H, H, x.data() + static_cast<long>(t) * H);
    if (auto s = comm().all_reduce_sum(x); !s) return s.error();
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < hc; ++i)
        std::copy_n(x.data() + static_cast<long>(t) * H, H,
                    streams.data() + static_cast<long>(t) * static_cast<long>(width) + static_cast<long>(i) * H);
    const size_t n_capture = capture ? capture->layers.size() : 0;
    if (capture) capture->rows.assign(n * n_capture, 0.f);
    const k::HcShape hs = hc_shape(c_);
    std::vector<float> post(static_cast<size_t>(T * hc)), comb(static_cast<size_t>(T * hc * hc));
    Selection selection;  // the previous DSA layer's, for a shared one
    // f's output is this rank's share (its heads, width or experts): summed over the ranks here.
    auto sublayer = [&](const HyperConnection& w, const std::vector<float>& norm, auto&& f) -> Status {
      k::hc_collapse_cpu(hs, streams.data(), T, w.fn.data(), w.base.data(), w.scale.data(), x.data(), post.data(),
                         comb.data());
      k::rmsnorm_cpu(x.data(), norm.data(), h.data(), T, H, eps);
      f(h.data(), y.data());
      if (auto s = comm().all_reduce_sum(y); !s) return s;
      k::hc_expand_cpu(hs, streams.data(), T, y.data(), post.data(), comb.data());
      return Ok{};
    };
    const long kda_floats = k::kda_state_floats(kda_shape(local_));  // this rank's heads'
    for (int l = 0; l < d.num_hidden_layers; ++l) {
      const Layer& L = layers_[static_cast<size_t>(l)];
      auto attention = [&](const float* in, float* out) {
        if (L.linear)
          return kda_forward(L.kda, local_, in, T,
                             state.subspan(static_cast<size_t>(L.state_at), static_cast<size_t>(kda_floats)), out);
        dsa_forward(L.dsa, local_, in, T, first, cache, L.slot, selection, out);
      };
      if (auto s = sublayer(L.attn_hc, L.input_norm, attention); !s) return s.error();
      if (auto s = sublayer(L.ffn_hc, L.post_attention_norm, [&](const float* in, float* out) { ffn_forward(L.ffn, d, in, out, T); }); !s)
        return s.error();
      // A drafter reads layer l's output as the head would read the last one: the streams' mean.
      for (size_t c = 0; c < n_capture; ++c) {
        if (capture->layers[c] != l) continue;
        k::hc_mean_cpu(streams.data(), T, hc, H, y.data());
        for (int t = 0; t < T; ++t)
          std::copy_n(y.data() + static_cast<long>(t) * H, H,
                      capture->rows.data() + static_cast<long>((static_cast<size_t>(t) * n_capture + c) * static_cast<size_t>(H)));
      }
    }
    // The head sees the plain mean of the streams.
    k::hc_mean_cpu(streams.data(), T, hc, H, x.data());
    k::rmsnorm_cpu(x.data(), final_norm_.data(), h.data(), T, H, eps);
    return h;
  }
  const float* lm_head() const override { return head_.data(); }

 private:
  struct Layer {
    std::vector<float> input_norm, post_attention_norm;
    HyperConnection attn_hc, ffn_hc;
    bool linear = false;
    KdaLayer kda;
    long state_at = 0;  // where this KDA layer's state starts in the sequence's state
    DsaLayer dsa;
    int slot = 0;       // this DSA layer's cache slot
    Ffn ffn;
  };

  // This rank's heads kda_heads_: rows [h0 * head_dim, h1 * head_dim) of the per-channel tensors
  // (each of the conv's q, k and v parts), rows [h0, h1) of the per-head ones, o's matching columns.
  void load_kda(WeightReader& w, const TensorNames& names, int l, KdaLayer& a) const {
    const int64_t H = c_.d.hidden_size, hd = c_.linear_head_dim, qk = c_.linear_num_heads * hd, K = c_.linear_conv_kernel_dim;
    const Range heads = kda_heads_, ch{heads.begin * static_cast<int>(hd), heads.end * static_cast<int>(hd)};
    a.q = w.get_rows(names(Tensor::kda_q, l), {qk, H}, ch);
    a.k = w.get_rows(names(Tensor::kda_k, l), {qk, H}, ch);
    a.v = w.get_rows(names(Tensor::kda_v, l), {qk, H}, ch);
    const std::vector<float> conv = w.get(names(Tensor::kda_conv, l), {3 * qk, 1, K});
    a.conv.clear();
    for (int part = 0; part < 3 && w.ok(); ++part)  // the q, k and v channels
      a.conv.insert(a.conv.end(), conv.begin() + (part * qk + ch.begin) * K, conv.begin() + (part * qk + ch.end) * K);
    a.f_a = w.get(names(Tensor::kda_f_a, l), {hd, H});
    a.f_b = w.get_rows(names(Tensor::kda_f_b, l), {qk, hd}, ch);
    a.dt_bias = w.get_rows(names(Tensor::kda_dt_bias, l), {qk}, ch);
    a.a_log = w.get_rows(names(Tensor::kda_a_log, l), {c_.linear_num_heads}, heads);
    a.b = w.get_rows(names(Tensor::kda_b, l), {c_.linear_num_heads, H}, heads);
    a.g_a = w.get(names(Tensor::kda_g_a, l), {hd, H});
    a.g_b = w.get_rows(names(Tensor::kda_g_b, l), {qk, hd}, ch);
    a.o_norm = w.get(names(Tensor::kda_o_norm, l), {hd});
    a.o = w.get_cols(names(Tensor::kda_o, l), {H, qk}, ch);
  }

  void load_dsa(WeightReader& w, const TensorNames& names, int l, bool indexer, DsaLayer& a) const {
    const DecoderConfig& d = c_.d;
    const int64_t H = d.hidden_size, heads = d.num_attention_heads, lq = c_.q_lora_rank, lkv = c_.kv_lora_rank;
    const int64_t rope = c_.qk_rope_head_dim, ih = c_.index_n_heads, id = c_.index_head_dim;
    a.q_a = w.get(names(Tensor::q_a, l), {lq, H});
    a.q_a_norm = w.get(names(Tensor::q_a_norm, l), {lq});
    const Range mine = dsa_heads_;
    auto per_head = [&](int64_t width) { return Range{mine.begin * static_cast<int>(width), mine.end * static_cast<int>(width)}; };
    a.q_b = w.get_rows(names(Tensor::q_b, l), {heads * c_.qk_head_dim(), lq}, per_head(c_.qk_head_dim()));
    a.kv_a = w.get(names(Tensor::kv_a, l), {lkv + rope, H});
    a.kv_a_norm = w.get(names(Tensor::kv_a_norm, l), {lkv});
    a.kv_b = w.get_rows(names(Tensor::kv_b, l), {heads * (c_.qk_nope_head_dim + c_.v_head_dim), lkv},
                        per_head(c_.qk_nope_head_dim + c_.v_head_dim));
    a.o = w.get_cols(names(Tensor::o, l), {H, heads * c_.v_head_dim}, per_head(c_.v_head_dim));
    if (d.attention_bias) {
      a.q_a_bias = w.get(names(Tensor::q_a_bias, l), {lq});
      a.kv_a_bias = w.get(names(Tensor::kv_a_bias, l), {lkv + rope});
      if (comm().rank() == 0) a.o_bias = w.get(names(Tensor::o_bias, l), {H});  // added once to the ranks' sum
    }
    a.indexer = indexer;
    if (!indexer) return;
    a.wq_b = w.get(names(Tensor::index_wq_b, l), {ih * id, lq});
    a.wk = w.get(names(Tensor::index_wk, l), {id, H});
    a.k_norm = w.get(names(Tensor::index_k_norm, l), {id});
    a.k_norm_bias = w.get(names(Tensor::index_k_norm_bias, l), {id});
    a.weights_proj = w.get(names(Tensor::index_weights, l), {ih, H});
    a.kpool_ape = w.get(names(Tensor::index_kpool_ape, l), {c_.index_kpool, id});
    a.kpool_gate = w.get(names(Tensor::index_kpool_gate, l), {id, H});
  }

  const Glm5NextConfig& c_;
  Glm5NextConfig local_;           // c_ with this rank's head counts: what its KDA and DSA layers run
  Range dsa_heads_, kda_heads_;    // this rank's heads of each kind
  std::vector<float> embed_, final_norm_, head_;  // this rank's vocabulary rows
  std::vector<Layer> layers_;
  int n_dsa_ = 0;
  long state_floats_ = 0;
};

}  // namespace

Result<std::unique_ptr<Model>> load_glm5_next(ModelConfig config, const Checkpoint& ck, comm::Communicator& comm) {
  auto m = std::make_unique<Glm5Next>(std::move(config), comm);
  if (auto s = m->load(ck); !s) return s.error();
  return std::unique_ptr<Model>(std::move(m));
}

}  // namespace tandem::model::detail
