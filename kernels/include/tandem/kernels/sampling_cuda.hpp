// Sampling on the GPU; the CPU reference and the order of the steps: sampling.hpp.
#pragma once
#include <cstdint>
#include <string>

#include "tandem/kernels/dtype.hpp"
#include "tandem/kernels/sampling_types.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels {

// CUDA back end for `rows` rows of `vocab` logits (fp32), one block per row. All pointers are device
// buffers: params[rows]; uniform[rows], each drawn on the host with sampling_uniform from the
// request's generator (greedy rows ignore theirs, and the host should draw none for them, as
// sample_cpu draws none); out[rows]; keep[rows * vocab] is workspace and on return holds the mask
// of the tokens the row drew from (1 = kept; greedy: the chosen token alone).
// Greedy picks exactly what argmax_cpu picks. The kept set equals sampling_support_cpu's; the draw
// walks it in token order rather than most-likely-first, so for temperature > 0 the GPU token can
// differ from the CPU one for the same uniform while following the same distribution.
Status sample_cuda(const float* logits, int rows, int vocab, const SamplingParams* params, const double* uniform,
                        Sampled* out, std::uint8_t* keep, Stream stream = nullptr);

// Greedy alone, for steps that want the token and not its logprob: each row's first largest logit
// (argmax_cpu's pick), over many blocks per row where sample_cuda gives a row one block. keys[rows]
// (device) holds each row's answer as a 64-bit key; argmax_key_index turns one into the token id.
Status argmax_rows_cuda(const float* logits, int rows, int vocab, unsigned long long* keys, Stream stream = nullptr);
inline int argmax_key_index(unsigned long long key) { return static_cast<int>(0xffffffffu - (key & 0xffffffffu)); }

}  // namespace tandem::kernels
