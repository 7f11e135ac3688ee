#include "decoder.hpp"

#include <algorithm>

#include "tandem/kernels/rmsnorm.hpp"

namespace tandem::model::detail {

namespace k = tandem::kernels;

std::string layer_prefix(int layer) { return "model.layers." + std::to_string(layer) + "."; }

void Decoder::load_common(WeightReader& w, const TensorNames& names) {
  const DecoderConfig& d = config().decoder();
  const int64_t V = d.vocab_size, H = d.hidden_size;
  const Range vocab = vocab_range();
  embed_ = w.get_rows(names(Tensor::embed), {V, H}, vocab);
  blocks_.resize(static_cast<size_t>(d.num_hidden_layers));
  for (int l = 0; l < d.num_hidden_layers && w.ok(); ++l) {
    Block& b = blocks_[static_cast<size_t>(l)];
    b.input_norm = w.get(names(Tensor::input_norm, l), {H});
    b.post_attention_norm = w.get(names(Tensor::post_attention_norm, l), {H});
    load_ffn(w, names, l, d, d.layer_is_moe[static_cast<size_t>(l)], tp_rank(), tp_size(), b.ffn);
  }
  final_norm_ = w.get(names(Tensor::final_norm), {H});
  // A tied head is the embedding matrix, whether or not the file also carries a copy.
  if (!d.tie_word_embeddings) head_ = w.get_rows(names(Tensor::lm_head), {V, H}, vocab);
}

Result<std::vector<float>> Decoder::hidden_states(std::span<const int32_t> tokens, KvSequence& cache,
                                                  HiddenCapture* capture) const {
  const DecoderConfig& d = config().decoder();
  const int H = d.hidden_size, T = static_cast<int>(tokens.size());
  const int first = cache.length() - T;
  const float eps = static_cast<float>(d.rms_norm_eps);
  const size_t n = static_cast<size_t>(T) * static_cast<size_t>(H);
  const Range vocab = vocab_range();
  std::vector<float> x(n, 0.f), h(n), delta(n);
  for (int t = 0; t < T; ++t) {
    const int id = tokens[static_cast<size_t>(t)];
    if (!vocab.contains(id)) continue;  // another rank holds this row
    const float* e = embed_.data() + static_cast<long>(id - vocab.begin) * H;
    std::copy(e, e + H, x.begin() + static_cast<long>(t) * H);
  }
  if (auto s = comm().all_reduce_sum(x); !s) return s.error();
  const size_t n_capture = capture ? capture->layers.size() : 0;
  if (capture) capture->rows.assign(n * n_capture, 0.f);
  if (capture && capture->after_attention) capture->attention_rows.assign(n * n_capture, 0.f);
  // Row t of captured layer c of `to` (tokens x captured layers x hidden) takes x's row t.
  auto keep = [&](int l, std::vector<float>& to) {
    for (size_t c = 0; c < n_capture; ++c) {
      if (capture->layers[c] != l) continue;
      for (int t = 0; t < T; ++t)
        std::copy(x.begin() + static_cast<long>(t) * H, x.begin() + static_cast<long>(t + 1) * H,
                  to.begin() + static_cast<long>((static_cast<size_t>(t) * n_capture + c) * static_cast<size_t>(H)));
    }
  };
  for (int l = 0; l < d.num_hidden_layers; ++l) {
    const Block& b = blocks_[static_cast<size_t>(l)];
    k::rmsnorm_cpu(x.data(), b.input_norm.data(), h.data(), T, H, eps);
    attention(l, h.data(), T, first, cache, delta.data());
    if (auto s = comm().all_reduce_sum(delta); !s) return s.error();
    for (size_t i = 0; i < n; ++i) x[i] += delta[i];
    if (capture && capture->after_attention) keep(l, capture->attention_rows);
    k::rmsnorm_cpu(x.data(), b.post_attention_norm.data(), h.data(), T, H, eps);
    ffn_forward(b.ffn, d, h.data(), delta.data(), T);
    if (auto s = comm().all_reduce_sum(delta); !s) return s.error();
    for (size_t i = 0; i < n; ++i) x[i] += delta[i];
    // The residual stream after layer l is the same on every rank (all-reduced), so rank 0's copy
    // is the whole feature.
    if (capture) keep(l, capture->rows);
  }
  k::rmsnorm_cpu(x.data(), final_norm_.data(), h.data(), T, H, eps);
  return h;
}

}  // namespace tandem::model::detail
