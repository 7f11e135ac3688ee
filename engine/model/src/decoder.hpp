// The skeleton both GLM lines share (pre-norm residual blocks):
//   x = embed[token]
//   per layer:  x += attention(rmsnorm(x));  x += ffn(rmsnorm(x))
//   logits = lm_head(rmsnorm(x))
// Each architecture supplies its attention (weights, cache row and math). Under tensor parallelism
// attention and ffn return this rank's partial sums, and the embedding lookup finds only this
// rank's vocabulary rows; the decoder all-reduces the three.
#pragma once
#include <string>
#include <vector>

#include "ffn.hpp"
#include "tensor_names.hpp"
#include "tandem/model/model.hpp"
#include "weights.hpp"

namespace tandem::model::detail {

class Decoder : public Model {
 protected:
  Decoder(ModelConfig config, comm::Communicator& comm) : Model(std::move(config), comm) {}
  int tp_rank() const { return comm().rank(); }
  int tp_size() const { return comm().size(); }

  // Embedding, norms, feed-forward blocks and head, under the names of the architecture's table.
  void load_common(WeightReader& w, const TensorNames& names);
  // attention(rmsnorm(x)) of layer `layer` for the `rows` new tokens, which sit at cache indices
  // first .. first+rows-1 (the cache already has room for them; the attention fills their rows);
  // this rank's heads only, so `out` is a partial sum.
  virtual void attention(int layer, const float* x, int rows, int first, KvSequence& cache, float* out) const = 0;

  Result<std::vector<float>> hidden_states(std::span<const int32_t> tokens, KvSequence& cache,
                                           HiddenCapture* capture) const override;
  const float* lm_head() const override { return head_.empty() ? embed_.data() : head_.data(); }

 private:
  struct Block {
    std::vector<float> input_norm, post_attention_norm;
    Ffn ffn;
  };
  std::vector<float> embed_, final_norm_, head_;  // this rank's vocab rows; head_ empty when tied
  std::vector<Block> blocks_;
};

std::string layer_prefix(int layer);  // "model.layers.<i>."

}  // namespace tandem::model::detail
