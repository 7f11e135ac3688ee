// The kernels glm5_next_text needs on CUDA beyond the op layer's, each with its CPU reference beside
// it (the *_cpu functions, kernels/cpu/glm5_next.cpp; the model's CPU path runs on them, and
// tests/kernels/gpu_check_glm5_next.cpp compares each kernel with its reference). Where the
// reference is an op of the layer already it is named here instead:
//   rms_norm_f32 rmsnorm_cpu (rmsnorm.hpp)    to_bf16 / to_f32 round_bf16 (dtype.hpp)
//   linear_f32   linear_cpu (linear.hpp)      dsa_attention     attention_cpu (attention.hpp) over the selected rows
// Written correct before fast: fp32 activations and state, mostly one block per token (or per
// sequence and head for the recurrence); the decode-sized glue (the collapse, the indexer, the
// absorptions, the MoE combine) since spread wider, as each says. CUDA sources: cuda/glm5_next.cu,
// cuda/glm5_next_dsa.cu (the DSA attention), cuda/kda_chunk.cu (the chunked recurrence). All pointers of the
// CUDA functions are device buffers, of the CPU ones host memory; "bf16" pointers hold
// __nv_bfloat16. nvcc compiles this header as C++17.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tandem/kernels/dtype.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels {


// ---- glue -------------------------------------------------------------------------------------
// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w (fp32 x and w); into y_f32 and/or y_bf16 (either may
// be null; y_f32 may be x). Leading dimensions in elements.
Status rms_norm_f32(const float* x, long ldx, int rows, int n, const float* w, float eps, float* y_f32, long ldy,
                         void* y_bf16, long ldb, Stream stream);
// bf16 <-> fp32 copies of rows of n entries.
Status to_bf16(const float* x, long ldx, int rows, int n, void* y, long ldy, Stream stream);
Status to_f32(const void* x, long ldx, int rows, int n, float* y, long ldy, Stream stream);
// x split in two bf16 parts, hi = bf16(x) and lo = bf16(x - hi) (round to nearest even): hi + lo
// holds x to about 2^-17 of |x| where bf16 alone keeps 2^-9, so two bf16 products (tensor cores,
// fp32 sums) of the same weights, hi W^T + lo W^T, give an fp32 input's product within fp32-like error.
Status to_bf16_split(const float* x, long ldx, int rows, int n, void* hi, void* lo, long ld, Stream stream);
// streams[t][i] = table[ids[t]] for each of the hc streams (bf16 table, fp32 streams).
Status hc_embed_cuda(const void* table, const std::int32_t* ids, int tokens, int hc, int hidden, float* streams,
                          Stream stream);
// out[t] = mean over the hc streams of token t.
Status hc_mean_cuda(const float* streams, int tokens, int hc, int hidden, float* out, Stream stream);
// CPU references (an fp32 table for hc_embed; hc_mean sums in fp64).
void hc_embed_cpu(const float* table, const std::int32_t* ids, int tokens, int hc, int hidden, float* streams);
void hc_mean_cpu(const float* streams, int tokens, int hc, int hidden, float* out);

// ---- hyper-connections ------------------------------------------------------------------------
struct HcShape {
  int hc = 0, hidden = 0, sinkhorn_iters = 1;
  float rms_eps = 1e-5f, hc_eps = 1e-6f;
};
constexpr int kMaxHc = 8;
// Per token: collapsed [hidden], post [hc], comb [hc * hc] (row j, column i: how much of stream j
// goes to stream i) from streams [hc * hidden]; fn [(2 + hc) * hc, hc * hidden], base
// [(2 + hc) * hc], scale [3], all fp32. scratch: device floats, hc_collapse_scratch_floats(s, tokens)
// (the mix rows' partial dots, many blocks a token: fn is read at the memory's rate, not one SM's).
long hc_collapse_scratch_floats(const HcShape& s, int tokens);
Status hc_collapse_cuda(const HcShape& s, const float* streams, int tokens, const float* fn, const float* base,
                             const float* scale, float* collapsed, float* post, float* comb, float* scratch, Stream stream);
// streams[t][i] = post[t][i] * y[t] + sum_j comb[t][j][i] * streams[t][j].
Status hc_expand_cuda(const HcShape& s, float* streams, int tokens, const float* y, const float* post,
                           const float* comb, Stream stream);
void hc_collapse_cpu(const HcShape& s, const float* streams, int tokens, const float* fn, const float* base,
                     const float* scale, float* collapsed, float* post, float* comb);
void hc_expand_cpu(const HcShape& s, float* streams, int tokens, const float* y, const float* post, const float* comb);

// ---- KDA linear attention ---------------------------------------------------------------------
struct KdaShape {
  int heads = 0, head_dim = 0, conv_kernel = 0;
  bool lower_bound_set = false;
  // kda_recurrent_cuda: the head's state in registers for the step (up to head_dim 128) instead of
  // in memory. The glm5_next decoder sets it (TANDEM_KDA_REGISTERS=0 clears it); checked on a GPU
  // since 2026-12-07.
  bool state_in_registers = false;
  float lower_bound = 0.f, rms_eps = 1e-5f;
};
// The sequences' tokens lie one sequence after another: sequence s owns tokens
// [seq_begin[s], seq_begin[s + 1]) and the state at state + slot[s] * state_stride + layer_at
// (kda_state_floats floats, the CPU layout: the conv history, then S of every head); reset[s] != 0
// zeroes it first (a sequence starting at position 0). Per token, the projections: u [3 * heads *
// head_dim] (ld_u), g_raw [heads * head_dim] (ld_g), beta_raw [heads] (ld_beta), gate_raw
// [heads * head_dim] (ld_gate); out o [heads * head_dim] (ld_o). conv [3 * heads * head_dim,
// conv_kernel], a_log [heads], dt_bias [heads * head_dim], o_norm [head_dim]: fp32.
// One block per (sequence, head), walking the sequence's tokens in order, the head's state held in
// registers for the step up to head_dim 128 where s.state_in_registers (read and written once a
// step), else in memory.
// head_dim <= 1024.
struct KdaWeights {
  const float *conv = nullptr, *a_log = nullptr, *dt_bias = nullptr, *o_norm = nullptr;
};
struct KdaIo {
  const float* u = nullptr;
  long ld_u = 0;
  const float* g_raw = nullptr;
  long ld_g = 0;
  const float* beta_raw = nullptr;
  long ld_beta = 0;
  const float* gate_raw = nullptr;
  long ld_gate = 0;
  float* o = nullptr;
  long ld_o = 0;
};
Status kda_recurrent_cuda(const KdaShape& s, const KdaWeights& w, const KdaIo& io, int sequences,
                               const std::int32_t* seq_begin, const std::int32_t* slot, const std::int32_t* reset,
                               float* state, long state_stride, long layer_at, Stream stream);
// Floats of one layer's state of one sequence: the conv's last conv_kernel - 1 inputs u, oldest
// first, then one [head_dim (key) x head_dim (value)] matrix S per head.
long kda_state_floats(const KdaShape& s);
// The CPU reference, one token: the kernel's work for one token of a sequence whose state (one
// layer's, kda_state_floats) is `state`; u, g_raw, beta_raw, gate_raw as a row of KdaIo; writes o.
void kda_token_cpu(const KdaShape& s, const KdaWeights& w, const float* u, const float* g_raw, const float* beta_raw,
                   const float* gate_raw, float* state, float* o);
// The same recurrence over `tokens` consecutive tokens of one sequence (rows of io), `chunk` tokens
// at a time in the chunked form (kda_chunk.cpp: a triangular solve and chunk x chunk products per
// head): the reference of kda_chunk_cuda. Equal to kda_token_cpu token by token to fp32 roundoff
// (the state is rounded once a chunk, not once a token).
void kda_chunk_cpu(const KdaShape& s, const KdaWeights& w, const KdaIo& io, int tokens, int chunk, float* state);
// The prefill form of kda_recurrent_cuda (same sequences, slots, resets and io; `tokens` =
// seq_begin[sequences]): each sequence's tokens `chunk` (1..kKdaMaxChunk) at a time in the chunked
// form (kernels/cuda/kda_chunk.cu), the state carried between chunks in fp32. scratch: device
// floats, kda_chunk_scratch_floats(s, tokens). head_dim: a multiple of 16. Chunks are shortened where a block's shared memory
// does not hold the requested size (head_dim 128 fits chunk 64 on sm_90).
constexpr int kKdaMaxChunk = 64;
long kda_chunk_scratch_floats(const KdaShape& s, int tokens);
Status kda_chunk_cuda(const KdaShape& s, const KdaWeights& w, const KdaIo& io, int sequences, int tokens,
                      const std::int32_t* seq_begin, const std::int32_t* slot, const std::int32_t* reset, float* state,
                      long state_stride, long layer_at, int chunk, float* scratch, Stream stream);

// ---- DSA sparse attention ---------------------------------------------------------------------
// The paged pool of one DSA layer: rows of `width` = kv_lora + rope + 2 * index_head_dim
// ([normed latent | raw shared key | indexer key | k-pool gate score]); token at position p of
// sequence s in row tables[s * max_blocks + p / block_size] * block_size + p % block_size.
// Elements of `type`: fp32, bf16 (round to nearest even), or fp8_e4m3 holding x / scale (read back
// as fp8 * scale; dtype.hpp's conversions, the CPU references' too, so both see the same numbers).
struct DsaPool {
  void* rows = nullptr;
  DType type = DType::f32;
  float scale = 1.f;
  // The CUDA kernels read the scale from here when set (device memory: a scale calibrated on the
  // device by the first step, dsa_scale_from_amax_cuda, with no copy to the host in between).
  const float* scale_at = nullptr;
  int width = 0;
  const std::int32_t* tables = nullptr;
  int max_blocks = 0, block_size = 0;
};
struct DsaShape {
  int lora_q = 0, lora_kv = 0, rope = 0;
  int index_heads = 0, index_dim = 0, index_topk = 0, kpool = 1;
  bool select_tail = true, indexer = true;  // indexer false: a shared layer (its rows' indexer part zero)
  float rms_eps = 1e-5f;
};
// Per token from its fused projection proj = [q_a (lora_q) | kv_a (lora_kv + rope) | wk (index_dim)
// | kpool_gate (index_dim) | weights_proj (index_heads)] (the indexer's parts only on an indexer
// layer): qr = rmsnorm(q_a) * q_a_norm into qr [lora_q]; the row [rmsnorm(c) * kv_a_norm, kr,
// LayerNorm(wk x) * k_norm + k_norm_bias (eps 1e-6), kpool_gate x] into the pool; index weights
// weights_proj x / sqrt(index_heads) into iw [index_heads].
struct DsaNorms {
  const float *q_a_norm = nullptr, *kv_a_norm = nullptr, *k_norm = nullptr, *k_norm_bias = nullptr;
};
// With `amax` (a device float), the rows are measured instead of stored: *amax = max(*amax, |entry|)
// over every entry they would hold (an fp8 pool's calibration; qr and iw are written as always).
Status dsa_prepare_cuda(const DsaShape& s, const DsaNorms& n, const float* proj, long ld_proj, int tokens,
                             const std::int32_t* token_seq, const std::int32_t* token_pos, const DsaPool& pool,
                             float* qr, float* iw, Stream stream, float* amax = nullptr);
// *scale = *amax / target where *amax is positive and finite, else 1 (device floats; as
// model::fp8_kv_scale_from_amax on the host).
Status dsa_scale_from_amax_cuda(const float* amax, float target, float* scale, Stream stream);
void dsa_prepare_cpu(const DsaShape& s, const DsaNorms& n, const float* proj, long ld_proj, int tokens,
                     const std::int32_t* token_seq, const std::int32_t* token_pos, const DsaPool& pool, float* qr,
                     float* iw);
// The keys each token attends to (positions, ascending) into sel [tokens, max_sel], their count into
// sel_n: the best index_topk / kpool complete pools the token sees (score = sum_h iw[h] *
// relu(iq_h . poolkey / sqrt(index_dim)); among equal scores the earlier pool: NOT the CPU
// reference's rule, which follows torch.topk's CPU kernel, std::nth_element / partial_sort order;
// the two agree on the scores chosen, not always on which of equally scored pools) plus the tail after the last
// complete pool. iq [index_heads * index_dim] per token (ld_iq); kpool_ape [kpool, index_dim].
// scores / chosen: scratch of tokens * max_pools. max_sel >= index_topk + kpool; index_heads <= 64,
// index_dim <= 256.
Status dsa_select_cuda(const DsaShape& s, const DsaPool& pool, const float* iq, long ld_iq, const float* iw,
                            const float* kpool_ape, int tokens, const std::int32_t* token_seq,
                            const std::int32_t* token_pos, float* scores, std::int32_t* chosen, int max_pools,
                            std::int32_t* sel, std::int32_t* sel_n, int max_sel, Stream stream);
// The CPU reference in its parts: the pool keys of the complete pools among the first n tokens of
// sequence seq ([n / kpool, index_dim], fp64); one pool's score for a query (iq [index_heads *
// index_dim], iw [index_heads]); and the keys (ascending) the query at index i of the n cached
// tokens (positions pos[0..n)) attends to, equal scores broken as torch.topk's CPU kernel breaks them.
std::vector<double> dsa_pool_keys_cpu(const DsaShape& s, const DsaPool& pool, int seq, const float* kpool_ape, int n);
float dsa_pool_score_cpu(const DsaShape& s, const double* pool_key, const float* iq, const float* iw);
std::vector<int> dsa_select_keys_cpu(const DsaShape& s, const std::vector<double>& pools, const float* iq,
                                     const float* iw, const std::int32_t* pos, int n, int i);
// Absorbed attention over the selected rows, per token and head: score_j = (q_lat . c_j +
// q_rope . kr_j) * scale, out_lat = softmax . c_j. q_lat [tokens, heads, lora_kv] (ld per token:
// heads * lora_kv); q_rope: the rope part of each head's query (q + t * ld_q + h * head_stride);
// out_lat like q_lat.
Status dsa_attention_cuda(const DsaShape& s, const DsaPool& pool, int heads, const float* q_lat, const float* q_rope,
                               long ld_q, long head_stride, int tokens, const std::int32_t* token_seq,
                               const std::int32_t* sel, const std::int32_t* sel_n, int max_sel, float scale,
                               float* out_lat, Stream stream);

// ---- products with fp32 activations ----------------------------------------------------------
// Rounding the activations to bf16 at every GEMM input moved the fixture's logits by up to 2.6e-2
// (first H200 run), so this version multiplies fp32 activations by the bf16 (or fp32) weights in
// a plain kernel, fp32 sums (one warp per output; slow for long prefills):
//   y[r][o] = sum_i x[g(r)][i] * W_e(r)[o][i]    g(r) = gather ? gather[r] : r;
//   W_e = w + (row_expert ? row_expert[r] : 0) * expert_stride  ([out, in] rows of ldw)
// w_type: bf16 or f32. A row whose row_expert is negative (another tensor-parallel rank's expert)
// is written as zeros.
Status linear_f32_cuda(const float* x, long ldx, const std::int32_t* gather, int rows, int in, const void* w,
                            DType w_type, long ldw, const std::int32_t* row_expert, long expert_stride, int out,
                            float* y, long ldy, Stream stream);
// MLA absorption per head h of kv_b ([heads * (nope + vd), lora_kv] bf16):
//   q_lat[t][h][d] = sum_n q[t][h * head_stride + n] * kv_b[h * (nope + vd) + n][d]      (n < nope)
//   out[t][h][v]   = sum_d lat[t][h][d] * kv_b[h * (nope + vd) + nope + v][d]           (v < vd)
Status absorb_query_cuda(const float* q, long ld_q, long head_stride, int tokens, int heads, int nope, int vd,
                              int lora_kv, const void* kv_b, float* q_lat, Stream stream);
Status absorb_values_cuda(const float* lat, int tokens, int heads, int nope, int vd, int lora_kv, const void* kv_b,
                               float* out, Stream stream);
// CPU references, kv_b as fp32 (the bf16 values widened).
void absorb_query_cpu(const float* q, long ld_q, long head_stride, int tokens, int heads, int nope, int vd, int lora_kv,
                      const float* kv_b, float* q_lat);
void absorb_values_cpu(const float* lat, int tokens, int heads, int nope, int vd, int lora_kv, const float* kv_b,
                       float* out);

// ---- MoE --------------------------------------------------------------------------------------
// y[r] = silu(min(gate, limit)) * clamp(up, -limit, limit) on rows [gate (d) | up (d)]; bf16.
Status clamped_silu_and_mul_cuda(const void* gate_up, void* y, int rows, int d, float limit, Stream stream);
// The same on fp32 rows.
Status clamped_silu_and_mul_f32_cuda(const float* gate_up, float* y, int rows, int d, float limit, Stream stream);
// y[t] = sum_k weight[i] * pair_out[row(i)] (+ add[t]), i = t * top_k + k, fp32 rows of `hidden`:
// row(i) = i, or pair_pos[i] where the pairs' rows are sorted by expert (moe_sort_cuda; -1, another
// tensor-parallel rank's expert, adds nothing). (moe_experts.hpp's overload takes bf16 rows.)
Status moe_combine_f32_cuda(const float* pair_out, const std::int32_t* pair_pos, const float* weight, int tokens, int top_k,
                            int hidden, const float* add, float* y, Stream stream);
// Tensor parallel: expert[p] -= first for the pairs routed to this rank's experts [first, first +
// count), -1 for the others (linear_f32_cuda then gives them zero rows).
Status moe_local_experts_cuda(std::int32_t* expert, int pairs, int first, int count, Stream stream);
// CPU references: the fp32 form of both clamped SwiGLUs (on bf16 inputs the bf16 kernel's output
// is this rounded; per row, clamped_swiglu_cpu of activation.hpp); the combine; the local experts.
void clamped_silu_and_mul_cpu(const float* gate_up, float* y, int rows, int d, float limit);
void moe_combine_f32_cpu(const float* pair_out, const std::int32_t* pair_pos, const float* weight, int tokens, int top_k,
                         int hidden, const float* add, float* y);
void moe_local_experts_cpu(std::int32_t* expert, int pairs, int first, int count);

}  // namespace tandem::kernels
