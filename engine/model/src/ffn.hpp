// The feed-forward half of a GLM block: a dense SwiGLU MLP, or a mixture of experts with
// sigmoid routing, grouped top-k, a selection-only correction bias and always-on shared experts.
#pragma once
#include <string>
#include <vector>

#include "tandem/model/config.hpp"
#include "weights.hpp"

namespace tandem::model::detail {

struct DenseMlp {
  int width = 0;
  std::vector<float> gate, up, down;  // [width, hidden], [width, hidden], [hidden, width]
};

struct MoeBlock {
  std::vector<float> router;           // [experts, hidden]
  std::vector<float> correction_bias;  // [experts]: steers which experts are chosen, not their weight
  std::vector<float> gate, up, down;   // per expert: [width, hidden], [width, hidden], [hidden, width]
  DenseMlp shared;                     // width moe_intermediate_size * n_shared_experts
};

struct Ffn {
  bool moe = false;
  DenseMlp dense;
  MoeBlock routed;
};

// prefix: "model.layers.<i>.mlp."
void load_ffn(WeightReader& w, const std::string& prefix, const DecoderConfig& d, bool moe, Ffn& out);

// y = ffn(x) for `rows` tokens of d.hidden_size floats.
void ffn_forward(const Ffn& f, const DecoderConfig& d, const float* x, float* y, int rows);

// Routing of one token: from the sigmoid scores of every expert, the chosen expert ids and their
// weights (num_experts_per_tok of each).
void select_experts(const MoeConfig& m, const float* scores, const float* correction_bias, int* expert,
                    float* weight);

}  // namespace tandem::model::detail
