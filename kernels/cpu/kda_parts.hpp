// The per-token pieces of the KDA CPU references that the token step (glm5_next.cpp) and the chunked
// form (kda_chunk.cpp) share, so both see the same q, k, v, decays and output norm bit for bit.
#pragma once
#include "tandem/kernels/glm5_next.hpp"

namespace tandem::kernels::kda_detail {

// One token's inputs to the delta rule: the causal conv + SiLU of u over `history` (the state's
// first (conv_kernel - 1) * 3 * heads * head_dim floats, shifted to take u), then mixed = [q | k | v]
// with q and k l2-normalised per head (q also by 1/sqrt(head_dim)), and g the log-decay per key
// channel [heads * head_dim].
void token_inputs(const KdaShape& s, const KdaWeights& w, const float* u, const float* g_raw, float* history,
                  float* mixed, float* g);
// o = rmsnorm(o) * o_norm * sigmoid(gate_raw), per head, in place.
void out_norm(const KdaShape& s, const KdaWeights& w, const float* gate_raw, float* o);

}  // namespace tandem::kernels::kda_detail
