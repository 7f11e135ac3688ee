// glm5_next's dense products by name, and the ones the CUDA model keeps in fp32 (glm5_next_products.hpp).
#include "glm5_next_products.hpp"

#include <algorithm>

namespace tandem::model::detail {

// The products whose bf16 inputs move the fixtures past their bars (1e-2 on the logits, greedy
// tokens equal), measured per product on the CPU reference with each product's input rounded
// (engine/bench/results/glm5-next-bf16-inputs-2026-12-06.md): everything that feeds a sparse DSA
// layer's indexer flips its top-k on glm5_next_text_sparse (logits 0.17-0.52 off) and the LM head
// flips a near-tied greedy token there; the output projections together stay within the bar
// (8.3e-3, greedy 64/64 on both fixtures).
const char* const kGlm5Fp32Default = "kda_in,kda_gates,dsa_in,dsa_q,mlp_gate_up,shared_gate_up,lm_head";

// Named so that a measurement can pick them (TANDEM_GLM5_FP32_PRODUCTS).
const char* glm5_product_name(Glm5Product p) {
  switch (p) {
    case Glm5Product::kda_in: return "kda_in";
    case Glm5Product::kda_gates: return "kda_gates";
    case Glm5Product::kda_o: return "kda_o";
    case Glm5Product::dsa_in: return "dsa_in";
    case Glm5Product::dsa_q: return "dsa_q";
    case Glm5Product::dsa_o: return "dsa_o";
    case Glm5Product::mlp_gate_up: return "mlp_gate_up";
    case Glm5Product::mlp_down: return "mlp_down";
    case Glm5Product::shared_gate_up: return "shared_gate_up";
    case Glm5Product::shared_down: return "shared_down";
    case Glm5Product::lm_head: return "lm_head";
    case Glm5Product::count: break;
  }
  return "?";
}

Result<unsigned> glm5_fp32_products(const std::string& list) {
  const unsigned n = static_cast<unsigned>(Glm5Product::count);
  if (list == "all") return kGlm5AllProducts;
  if (list == "none" || list.empty()) return 0u;
  unsigned set = 0;
  std::size_t at = 0;
  while (at <= list.size()) {
    const std::size_t end = std::min(list.find(',', at), list.size());
    const std::string name = list.substr(at, end - at);
    unsigned i = 0;
    while (i < n && name != glm5_product_name(static_cast<Glm5Product>(i))) ++i;
    if (i == n) {
      std::string known;
      for (unsigned j = 0; j < n; ++j) known += std::string(j ? ", " : "") + glm5_product_name(static_cast<Glm5Product>(j));
      return error("no product \"" + name + "\" (all, none, or a comma-separated list of: " + known + ")");
    }
    set |= 1u << i;
    at = end + 1;
  }
  return set;
}

}  // namespace tandem::model::detail
