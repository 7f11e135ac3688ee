// Model::forward (argument checks, logits), Model::step_sample on the host, load_model (dispatch on model_type), greedy decoding.
#include "tandem/model/model.hpp"

#include <algorithm>

#include "tandem/kernels/linear.hpp"
#include "tandem/kernels/sampling.hpp"
#include "tandem/model/safetensors.hpp"

namespace tandem::model {

namespace detail {
Result<std::unique_ptr<Model>> load_glm4_moe_lite(ModelConfig config, const Checkpoint& ck, comm::Communicator& comm);
Result<std::unique_ptr<Model>> load_glm4_moe(ModelConfig config, const Checkpoint& ck, comm::Communicator& comm);
Result<std::unique_ptr<Model>> load_glm5_next(ModelConfig config, const Checkpoint& ck, comm::Communicator& comm);
}  // namespace detail

Result<std::vector<float>> Model::forward(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                                          KvSequence& cache, std::span<const int> logit_rows,
                                          HiddenCapture* capture) const {
  const int V = vocab_size(), H = config_.decoder().hidden_size;
  const int T = static_cast<int>(tokens.size());
  if (T == 0) return error("forward: no tokens");
  if (positions.size() != tokens.size())
    return error("forward: " + std::to_string(tokens.size()) + " tokens but " + std::to_string(positions.size()) + " positions");
  if (cache.layout() != kv_layout())
    return error("forward: the cache was not made for this model (new_cache() or a pool of kv_layout())");
  for (int t = 0; t < T; ++t) {
    const auto tok = tokens[static_cast<size_t>(t)];
    if (tok < 0 || tok >= V)
      return error("forward: token id " + std::to_string(tok) + " at index " + std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(V) + ")");
    if (positions[static_cast<size_t>(t)] < 0) return error("forward: negative position at index " + std::to_string(t));
  }
  for (int r : logit_rows)
    if (r < 0 || r >= T) return error("forward: logit row " + std::to_string(r) + " is not one of the " + std::to_string(T) + " tokens");
  if (capture)
    for (int l : capture->layers)
      if (l < 0 || l >= config_.decoder().num_hidden_layers)
        return error("forward: capture of layer " + std::to_string(l) + ", but the model has " +
                     std::to_string(config_.decoder().num_hidden_layers) + " layers");

  if (auto s = cache.append(std::span<const int>(positions.data(), positions.size())); !s) return s.error();
  auto hidden = hidden_states(tokens, cache, capture);
  if (!hidden) return hidden.error();
  // Each rank scores its slice of the vocabulary; the slices are gathered into whole rows.
  const Range mine = vocab_range();
  const size_t R = logit_rows.size();
  std::vector<float> local(R * static_cast<size_t>(mine.size()));
  for (size_t i = 0; i < R; ++i)
    kernels::linear_cpu(hidden->data() + static_cast<long>(logit_rows[i]) * H, lm_head(), nullptr,
                        local.data() + static_cast<long>(i) * mine.size(), 1, H, mine.size());
  if (comm_->size() == 1 || R == 0) return local;
  auto gathered = comm_->all_gather(local);
  if (!gathered) return gathered.error();
  std::vector<float> logits(R * static_cast<size_t>(V));
  size_t at = 0;  // rank r's block: R rows of its slice, one after another
  for (int r = 0; r < comm_->size(); ++r) {
    const Range part = split(V, r, comm_->size());
    for (size_t i = 0; i < R; ++i, at += static_cast<size_t>(part.size()))
      std::copy(gathered->begin() + static_cast<long>(at), gathered->begin() + static_cast<long>(at) + part.size(),
                logits.begin() + static_cast<long>(i * static_cast<size_t>(V)) + part.begin);
  }
  if (at != gathered->size()) return error("forward: the ranks' logit slices do not add up to the vocabulary");
  return logits;
}

Result<std::vector<kernels::Sampled>> Model::step_sample(std::span<const PagedWork> work, std::span<const kernels::SamplingParams> params,
                                                         std::span<const double> uniforms) {
  auto logits = step(work);
  if (!logits) return logits.error();
  const size_t V = static_cast<size_t>(vocab_size()), rows = logits->size() / V;
  if (params.size() != rows || uniforms.size() != rows)
    return error("step_sample: " + std::to_string(rows) + " logit rows, but " + std::to_string(params.size()) + " sampling parameters and " +
                 std::to_string(uniforms.size()) + " uniforms");
  std::vector<kernels::Sampled> picks;
  for (size_t r = 0; r < rows; ++r)
    picks.push_back(kernels::sample_with_uniform(std::span<const float>(logits->data() + r * V, V), params[r], uniforms[r]));
  return picks;
}

Result<std::unique_ptr<Model>> load_model(const std::filesystem::path& dir) {
  static comm::SingleRank alone;  // stateless: one is enough for every model
  return load_model(dir, alone);
}

Result<std::unique_ptr<Model>> load_model(const std::filesystem::path& dir, comm::Communicator& comm) {
  auto config = load_config(dir);
  if (!config) return config.error();
  auto ck = Checkpoint::open(dir);
  if (!ck) return ck.error();
  if (config->model_type == "glm4_moe_lite") return detail::load_glm4_moe_lite(std::move(config).value(), ck.value(), comm);
  if (std::holds_alternative<Glm5NextConfig>(config->arch))
    return detail::load_glm5_next(std::move(config).value(), ck.value(), comm);
  return detail::load_glm4_moe(std::move(config).value(), ck.value(), comm);
}

Result<std::vector<int32_t>> greedy_generate(const Model& model, std::span<const int32_t> prompt, int max_new_tokens) {
  if (prompt.empty()) return error("greedy_generate: empty prompt");
  if (max_new_tokens <= 0) return std::vector<int32_t>{};
  KvCache cache = model.new_cache();
  std::vector<int32_t> tokens(prompt.begin(), prompt.end()), positions(prompt.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int32_t>(i);
  std::vector<int32_t> out;
  const int last = static_cast<int>(tokens.size()) - 1;
  auto logits = model.forward(tokens, positions, cache, std::span<const int>(&last, 1));
  while (true) {
    if (!logits) return logits.error();
    const auto& l = logits.value();
    // First maximum on ties, as torch.argmax does.
    const auto next = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    out.push_back(next);
    if (static_cast<int>(out.size()) >= max_new_tokens) return out;
    const int32_t pos = static_cast<int32_t>(prompt.size() + out.size() - 1);
    const int row = 0;
    logits = model.forward(std::span<const int32_t>(&next, 1), std::span<const int32_t>(&pos, 1), cache,
                           std::span<const int>(&row, 1));
  }
}

}  // namespace tandem::model
