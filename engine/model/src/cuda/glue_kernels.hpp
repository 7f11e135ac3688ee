// Small kernels the CUDA decoder needs around the op layer's (kernels/): strided RMSNorm (the MLA
// LoRA norms act on slices of a fused projection), the MLA latent's write into the paged pool
// (slot from the block table on the device, so a captured graph replays with new tables), and the
// gather of the rows whose logits are wanted. bf16 activations; device buffers. nvcc compiles this
// header as C++17: plain types only.
#pragma once
#include <cstdint>
#include <string>

#include "tandem/kernels/dtype.hpp"

namespace tandem::model::cuda {

// y[r][i] = x[r][i] / sqrt(mean(x[r]^2) + eps) * w[i]; rows at strides ldx / ldy (y may be x).
std::string rmsnorm_rows(const void* x, long ldx, int rows, int n, const void* w, void* y, long ldy, float eps,
                         kernels::Stream stream);

// The residual stream in fp32: x[r] += delta[r] (fp32, or bf16 for the embedding rows);
// y[r] = rmsnorm(x[r]) * w (bf16), fp32 sums. Keeping x and the layers' outputs in fp32 keeps
// bf16 rounding out of what piles up across layers.
// With y32, the normalised rows also in fp32 (the MoE router's input: a choice between near-tied
// experts should not hang on bf16's rounding of its input).
std::string add_rmsnorm(float* x, const void* delta, kernels::DType delta_type, const void* w, void* y, int rows, int n,
                        float eps, kernels::Stream stream, float* y32 = nullptr);

// Token t's row src[t][0:width] into the slot of position token_pos[t] of sequence token_seq[t]
// (block_tables[seq * max_blocks + pos / block_size] * block_size + pos % block_size), stored as
// bf16 or as fp8_e4m3 of x / scale.
std::string latent_cache_write(const void* src, long ld, int tokens, int width, const std::int32_t* token_seq,
                               const std::int32_t* token_pos, const std::int32_t* block_tables, int max_blocks,
                               int block_size, kernels::DType cache_type, float scale, void* cache,
                               kernels::Stream stream);

// *amax = max(*amax, max |src[t][i]|) over tokens t and i < width (rows at stride ld); *amax >= 0.
std::string latent_amax(const void* src, long ld, int tokens, int width, float* amax, kernels::Stream stream);

// dst[i] = src[rows[i]] (width entries each).
std::string gather_rows(const void* src, int width, const std::int32_t* rows, int n, void* dst, kernels::Stream stream);

}  // namespace tandem::model::cuda
