// Rotary position embedding on the first `rot_dim` entries of each head (the rest passes through).
// Pair i (0 <= i < rot_dim/2) turns by the angle a_i = pos * theta^(-2i/rot_dim).
//
// Two layouts of the pairs exist in GLM checkpoints:
//   half:        pair i is (x[i], x[i + rot_dim/2])          ("rotate_half", GPT-NeoX / GLM-4.5)
//                  x[i]            <- x[i] cos a_i - x[i+h] sin a_i
//                  x[i + h]        <- x[i+h] cos a_i + x[i] sin a_i
//   interleaved: pair i is (x[2i], x[2i+1])                  (DeepSeek / GLM-4.7-Flash MLA)
//                  and, as transformers applies it, the result is written de-interleaved:
//                  x'[i]           =  x[2i] cos a_i - x[2i+1] sin a_i
//                  x'[i + h]       =  x[2i+1] cos a_i + x[2i] sin a_i
//   Queries and keys get the same layout, so q.k equals that of the interleaved rotation.
#pragma once

namespace tandem::kernels {

enum class RopeLayout { half, interleaved };

// Inverse frequencies theta^(-2i/rot_dim), rounded to fp32 as transformers computes them.
void rope_inv_freq(float* inv_freq, int rot_dim, double theta);

// CPU reference: rotates `heads` heads of `head_stride` floats each (in place), all at position pos.
void rope_cpu(float* x, int heads, int head_stride, int rot_dim, const float* inv_freq, int pos,
              RopeLayout layout);

}  // namespace tandem::kernels
