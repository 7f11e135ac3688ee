// Small kernels the CUDA decoder needs around the op layer's (kernels/): strided RMSNorm (the MLA
// LoRA norms act on slices of a fused projection), the MLA latent's write into the paged pool
// (slot from the block table on the device, so a captured graph replays with new tables), and the
// gather of the rows whose logits are wanted. bf16 activations; device buffers. nvcc compiles this
// header as C++17: plain types only. Each kernel's CPU reference (kernels/cpu/glue.cpp: fp32 buffers
// holding the bf16 values, fp64 sums, outputs rounded to bf16 where the kernel stores bf16) is
// declared beside it and checked against it by gpu_check.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "tandem/kernels/dtype.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels {

// y[r][i] = x[r][i] / sqrt(mean(x[r]^2) + eps) * w[i]; rows at strides ldx / ldy (y may be x).
Status rmsnorm_rows(const void* x, long ldx, int rows, int n, const void* w, void* y, long ldy, float eps,
                         Stream stream);
void rmsnorm_rows_cpu(const float* x, long ldx, int rows, int n, const float* w, float* y, long ldy, float eps);

// The residual stream in fp32: x[r] += delta[r] (fp32, or bf16 for the embedding rows);
// y[r] = rmsnorm(x[r]) * w (bf16), fp32 sums. Keeping x and the layers' outputs in fp32 keeps
// bf16 rounding out of what piles up across layers.
// With y32, the normalised rows also in fp32 (the MoE router's input: a choice between near-tied
// experts should not hang on bf16's rounding of its input). With pick, y's row i (and y32's) is
// x's row pick[i] (the rows a last norm feeds to an LM head; the others stay as they were).
Status add_rmsnorm(float* x, const void* delta, DType delta_type, const void* w, void* y, int rows, int n,
                        float eps, Stream stream, float* y32 = nullptr, const std::int32_t* pick = nullptr);
// The first layer's add_rmsnorm of embedding rows: x[r] = table[ids[r]] (bf16 rows, n wide, widened;
// an id outside [0, vocab) gives a zero row), y[r] = rmsnorm(x[r]) * w. One launch for
// embedding_cuda, zeroing x and add_rmsnorm, rounding as they do.
Status embed_rmsnorm(const void* table, int vocab, const std::int32_t* ids, float* x, const void* w, void* y, int rows, int n,
                     float eps, Stream stream);
void add_rmsnorm_cpu(float* x, const float* delta, const float* w, float* y, int rows, int n, float eps,
                     float* y32 = nullptr);

// Token t's row src[t][0:width] into the slot of position token_pos[t] of sequence token_seq[t]
// (block_tables[seq * max_blocks + pos / block_size] * block_size + pos % block_size), stored as
// bf16 or as fp8_e4m3 of x / scale.
Status latent_cache_write(const void* src, long ld, int tokens, int width, const std::int32_t* token_seq,
                               const std::int32_t* token_pos, const std::int32_t* block_tables, int max_blocks,
                               int block_size, DType cache_type, float scale, void* cache,
                               Stream stream);
// The bf16 cache's reference (fp8's conversion is write_kv's, checked by gpu_check's conversions).
void latent_cache_write_cpu(const float* src, long ld, int tokens, int width, const std::int32_t* token_seq,
                            const std::int32_t* token_pos, const std::int32_t* block_tables, int max_blocks,
                            int block_size, float* cache);

// The inverse of the write for one sequence: dst[j] = its pool row first + j (row i at slot
// block_table[i / block_size] * block_size + i % block_size) for j < n, as bf16 (an fp8_e4m3 row
// read as x * scale): a span of the context's latent rows, contiguous, for the un-absorbed
// prefill's expansion (mla_prefill.hpp).
Status latent_gather(const void* cache, DType cache_type, float scale, const std::int32_t* block_table, int block_size, int first,
                     int n, int width, void* dst, Stream stream);
void latent_gather_cpu(const float* cache, const std::int32_t* block_table, int block_size, int first, int n, int width, float* dst);

// *amax = max(*amax, max |src[t][i]|) over tokens t and i < width (rows at stride ld); *amax >= 0.
Status latent_amax(const void* src, long ld, int tokens, int width, float* amax, Stream stream);
float latent_amax_cpu(const float* src, long ld, int tokens, int width, float amax);

// dst[i] = src[rows[i]] (width entries each).
Status gather_rows(const void* src, int width, const std::int32_t* rows, int n, void* dst, Stream stream);
void gather_rows_cpu(const float* src, int width, const std::int32_t* rows, int n, float* dst);

// y[i] = y[i] + x[i] over n fp32 entries, one rounding each: the sum of two tensor-parallel ranks'
// partials as their all-reduce forms it (model::CudaOptions::reduction_groups).
Status add_f32(float* y, const float* x, std::size_t n, Stream stream);
void add_f32_cpu(float* y, const float* x, std::size_t n);

// The MLA glue between the input projection and the attention, one launch for what rmsnorm_rows
// (twice), rope_cuda and latent_cache_write do one after another, with the same roundings: for
// each token t of fused ([T, ld] bf16: the query LoRA's lora_q entries, then at kv_at the latent's
// lora_kv entries and rope_dim key entries),
//   qlat[t] = rmsnorm(fused[t][0:lora_q]) * q_norm              (when lora_q > 0)
//   cache slot of (seq[t], pos[t]) = [rmsnorm(latent) * kv_norm, rope(key at pos[t])]
struct LatentPrep {
  const void* fused = nullptr;
  long ld = 0;
  int tokens = 0, lora_q = 0, kv_at = 0, lora_kv = 0, rope_dim = 0;
  const void* q_norm = nullptr;
  void* qlat = nullptr;  // [T, lora_q]
  const void* kv_norm = nullptr;
  float eps = 0.f;
  const float* inv_freq = nullptr;
  bool interleaved = false;
  const std::int32_t *token_seq = nullptr, *token_pos = nullptr, *block_tables = nullptr;
  int max_blocks = 0, block_size = 0;
  DType cache_type = DType::bf16;
  float scale = 1.f;
  void* cache = nullptr;
  // The step's angles (rope.hpp's rope_angles_cuda), when given: read after the wait, not computed.
  const double* angles = nullptr;
};
Status latent_prep(const LatentPrep& p, Stream stream);

// The absorbed query for a few tokens, one launch for the batched cuBLASLt product, the copy of the
// rope entries and their rotation: per token t and head h,
//   qattn[t][h][0:lora_kv] = q[t][h][0:nope] . kv_b[h * kvb_stride : nope rows of lora_kv]
//   qattn[t][h][lora_kv:]  = rope(q[t][h][nope:nope + rope_dim]) at pos[t]
// q: [T, heads, qk] bf16 (qk = nope + rope_dim); qattn: [T, heads, lora_kv + rope_dim] bf16.
// products = false: the rope entries alone (the products then come from gemv over kb_t below).
Status absorb_query(const void* q, int tokens, int heads, int nope, int rope_dim, const void* kv_b, long kvb_stride,
                         int lora_kv, const float* inv_freq, const std::int32_t* token_pos, bool interleaved, void* qattn,
                         bool products, Stream stream);

// kb_t[h][j][d] = kv_b[h * (nope + vd) + d][j] for d < nope, j < lora_kv: W_kb with its rows along
// nope, so the absorbed query is a gemv (a warp per output streams one contiguous row).
Status transpose_kb(const void* kv_b, int heads, int nope, int vd, int lora_kv, void* kb_t, Stream stream);

}  // namespace tandem::kernels
