// The feed-forward half of a GLM block: a dense SwiGLU MLP, or a mixture of experts with
// sigmoid routing, grouped top-k, a selection-only correction bias and always-on shared experts.
// A tensor-parallel rank holds a slice of every MLP's width and a range of whole routed experts
// (the router is replicated, so every rank routes alike); its output is a partial sum.
#pragma once
#include <string>
#include <vector>

#include "tandem/model/config.hpp"
#include "tensor_names.hpp"
#include "weights.hpp"

namespace tandem::model::detail {

struct DenseMlp {
  int width = 0;                       // this rank's slice of the intermediate width
  std::vector<float> gate, up, down;  // [width, hidden], [width, hidden], [hidden, width]
};

struct MoeBlock {
  Range experts;                       // the routed experts this rank holds
  std::vector<float> router;           // [experts, hidden]
  std::vector<float> correction_bias;  // [experts]: steers which experts are chosen, not their weight
  std::vector<float> gate, up, down;   // per held expert: [width, hidden], [width, hidden], [hidden, width]
  DenseMlp shared;                     // of width moe_intermediate_size * n_shared_experts
};

struct Ffn {
  bool moe = false;
  DenseMlp dense;
  MoeBlock routed;
};

// Layer `layer`'s feed-forward block, named by `names`; the slice of rank `rank` of `ranks`.
void load_ffn(WeightReader& w, const TensorNames& names, int layer, const DecoderConfig& d, bool moe, int rank, int ranks,
              Ffn& out);

// y = ffn(x) for `rows` tokens of d.hidden_size floats (this rank's part of it).
void ffn_forward(const Ffn& f, const DecoderConfig& d, const float* x, float* y, int rows);

}  // namespace tandem::model::detail
