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
#include <string>

#include "tandem/kernels/dtype.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels {

enum class RopeLayout { half, interleaved };

// Inverse frequencies theta^(-2i/rot_dim), rounded to fp32 as transformers computes them.
void rope_inv_freq(float* inv_freq, int rot_dim, double theta);

// CPU reference: rotates `heads` heads of `head_stride` floats each (in place), all at position pos.
void rope_cpu(float* x, int heads, int head_stride, int rot_dim, const float* inv_freq, int pos,
              RopeLayout layout);

// Many tokens, each at its own position: token t's heads start at x + t * token_stride.
// `bf16`: the rotated entries are rounded to bf16 (what the bf16 GPU path stores).
void rope_tokens_cpu(float* x, int tokens, long token_stride, int heads, int head_stride, int rot_dim,
                     const float* inv_freq, const int* pos, RopeLayout layout, bool bf16 = false);

// CUDA back end, the same operation on device buffers of type `t` (f32 or bf16); inv_freq (fp32,
// rot_dim/2 entries) and pos (tokens entries) are device buffers too. One thread per pair; the angle
// is pos * inv_freq in fp32 and its cosine and sine are taken in fp64, as the CPU reference does.
Status rope_cuda(DType t, void* x, int tokens, long token_stride, int heads, int head_stride, int rot_dim,
                      const float* inv_freq, const int* pos, RopeLayout layout, Stream stream = nullptr);

// rope_cuda's rotation of the first rot_dim entries of each head, read from src and written to dst
// (other strides, or dst == src with the same strides: in place; otherwise not overlapping src;
// dst's entries past rot_dim are not touched): the same bits as copying those entries and
// rotating them in place, in one launch. One block a token: its angles' cosines and sines are
// taken once for all its heads (an MLA prefill's query: 20 heads), and its pairs are read before
// any is written. heads x rot_dim at most 11264.
struct RopeCopy {
  const void* src = nullptr;
  long src_token_stride = 0;
  int src_head_stride = 0;
  void* dst = nullptr;
  long dst_token_stride = 0;
  int dst_head_stride = 0;
  // The step's angles from rope_angles_cuda, when given: read, not computed again (the same values).
  const double* angles = nullptr;
};
// The cosines and sines every rope kernel here forms, once for a step's tokens (a prefill's layers
// all rotate at the same positions): angles[t * rot_dim + i] = cos and [t * rot_dim + half + i] =
// sin of fp64(fp32(pos[t]) * inv_freq[i]), i < half = rot_dim / 2, as rope_kernel computes them.
// A few-token step computes them in place (behind its programmatic-launch wait); a long prompt's
// fp64 sincos, taken in every block of every layer, costs more than the rotation itself.
Status rope_angles_cuda(const float* inv_freq, const int* pos, int tokens, int rot_dim, double* angles, Stream stream = nullptr);

Status rope_copy_cuda(DType t, const RopeCopy& c, int tokens, int heads, int rot_dim, const float* inv_freq, const int* pos,
                      RopeLayout layout, Stream stream = nullptr);

}  // namespace tandem::kernels
