// glm5_next's dense products by name, and which of them the CUDA model feeds fp32 activations
// (cuda_glm5_next.hpp: the others' inputs are rounded to bf16). Plain C++, built with the CPU
// library, so that the names and the list's parsing are tested without a GPU.
#pragma once
#include <string>

#include "tandem/model/result.hpp"

namespace tandem::model::detail {

// The dense products (the routed experts are not among them: always fp32 on CUDA).
enum class Glm5Product { kda_in, kda_gates, kda_o, dsa_in, dsa_q, dsa_o, mlp_gate_up, mlp_down, shared_gate_up, shared_down, lm_head, count };

// The products kept in fp32 unless TANDEM_GLM5_FP32_PRODUCTS names others ("all", "none" or a
// comma-separated list of glm5_product_name()s), and why (glm5_next_products.cpp).
extern const char* const kGlm5Fp32Default;
const char* glm5_product_name(Glm5Product p);
// Every product's bit ("all").
inline constexpr unsigned kGlm5AllProducts = (1u << static_cast<unsigned>(Glm5Product::count)) - 1;
// The set a list names (bit i: product i), or why not (the names it knows).
Result<unsigned> glm5_fp32_products(const std::string& list);

}  // namespace tandem::model::detail
