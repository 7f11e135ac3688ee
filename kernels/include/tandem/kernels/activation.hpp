// Gated activations of the feed-forward blocks.
//   swiglu: y[i] = silu(gate[i]) * up[i],  silu(g) = g / (1 + exp(-g))
#pragma once

namespace tandem::kernels {

// CPU reference; y may alias gate or up.
void swiglu_cpu(const float* gate, const float* up, float* y, long n);

// Logistic sigmoid, elementwise; y may alias x. (The MoE router scores experts with it.)
void sigmoid_cpu(const float* x, float* y, long n);

}  // namespace tandem::kernels
