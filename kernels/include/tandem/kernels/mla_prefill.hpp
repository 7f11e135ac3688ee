// Flash-style prefill attention for absorbed MLA over the paged latent pool (mla_prefill_flash.cu).
//
// The same contract as paged_attention_cuda for an absorbed-MLA layout (v_in_k, one kv head whose
// row is both key and value): q is [n_tokens, q_heads, qk_dim] bf16, out [n_tokens, q_heads,
// v_dim] bf16; token t attends keys 0..token_pos[t] of sequence token_seq[t] through block_tables
// (causal), the pool bf16 or fp8_e4m3 (read as fp8 * k_scale). The CPU reference is
// paged_attention_mla_cpu (paged_attention.hpp).
//
// Where the MLA decode kernel serves a token per block and reads its whole context for it, this
// kernel tiles the (token, head) rows 64 at a time: a block reads each key row of its tokens'
// context once for those 64 rows, so a prompt of n tokens costs n * heads / 64 passes over the
// context instead of n. A token's result does not depend on the other tokens of the launch nor on
// how a prompt is split into chunks (every row walks its keys in the same fixed chunks of 64 from
// key 0; chunks past its position leave it exactly as it was), but it is not the decode kernel's
// bits: speculative verification stays on the decode kernel (the decoder's batch-invariant pass).
#pragma once
#include <cstdint>

#include "tandem/kernels/paged_attention.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels {

// Whether mla_prefill_flash_cuda serves this shape on this device: bf16 activations, v_in_k with
// one kv head (block_size and k_scale > 0), qk_dim and v_dim multiples of 8 with v_dim <= qk_dim
// <= 576 and v_dim <= 512, a bf16 or fp8_e4m3 pool, q_heads >= 1, and a device that gives a block
// the kernel's 219 KiB of shared memory (sm_90: yes; a 99 KiB part: no).
bool mla_prefill_flash_fits(DType act, int q_heads, const PagedKvLayout& l);

// The attention of n_tokens query tokens (see above); q, cache and out 16-byte aligned. Needs no
// workspace and no max_context: each block reads its own tokens' positions.
Status mla_prefill_flash_cuda(const void* q, int n_tokens, const std::int32_t* token_seq, const std::int32_t* token_pos,
                              int q_heads, const PagedKvLayout& l, const void* cache, const std::int32_t* block_tables,
                              int max_blocks_per_seq, float scale, void* out, Stream stream = nullptr);


// The un-absorbed (multi-head) form of MLA prefill attention, for one sequence (mla_prefill_mha.cu).
//
// The absorbed kernel above attends in the latent space: every (query, key) pair costs
// 2 (qk_dim + v_dim) = 2 (576 + 512) flops at GLM-4.7-Flash's shape. A prompt's keys and values can
// instead be expanded once per head through kv_b (K_nope = W_UK c, V = W_UV c: one dense GEMM over
// the context's latent rows, as vLLM and SGLang prefill MLA), after which a pair costs
// 2 (nope + rope + v_dim) = 2 (256 + 256): 2.1x fewer flops where attention dominates long prompts.
// The expansion costs what the absorbed form's query absorption and value projection cost for a
// fresh prompt, so this form pays where the step's queries are a large share of their context.
//
// Query i (0 .. n_queries - 1) is at position first_pos + i and attends keys 0 .. first_pos + i of
// the sequence (causal). Key j of head h is [k_nope(j, h) | k_rope(j)] (the rotary part shared by
// all heads, as the latent pool keeps it); its value v(j, h). All bf16; strides in elements.
//   out(i, h) = sum_j softmax_j(scale q(i, h) . k(j, h)) v(j, h)
// The CPU reference is attention_cpu (attention.hpp) over the same keys laid out per head.
enum class MlaMhaKernel { automatic, mma, wgmma, wgmma_tma };

struct MlaMhaPrefill {
  const void* q = nullptr;  // [n_queries] rows: head h at h * q_head_stride, nope then rope entries (rotated)
  long q_stride = 0;
  int q_head_stride = 0;
  const void* k_nope = nullptr;  // [context] rows: head h's nope entries at h * k_head_stride
  long k_stride = 0;
  int k_head_stride = 0;
  const void* k_rope = nullptr;  // [context] rows of rope entries, shared by every head
  long rope_stride = 0;
  const void* v = nullptr;  // [context] rows: head h's v_dim entries at h * v_head_stride
  long v_stride = 0;
  int v_head_stride = 0;
  void* out = nullptr;  // [n_queries] rows: head h's v_dim entries at h * out_head_stride
  long out_stride = 0;
  int out_head_stride = 0;
  int heads = 0, nope = 0, rope = 0, v_dim = 0;
  int n_queries = 0, first_pos = 0;
  float scale = 0.f;
  // A context too long for one expansion is attended in segments of keys: this launch's k_nope,
  // k_rope and v rows are keys key_begin .. key_end - 1 (key_begin a multiple of
  // kMlaMhaSegmentAlign; key_end 0: through the last query's position; else a multiple of the
  // same, or past the last query's position). The softmax's partial
  // state of every (query, head) passes between a sequence's launches, in key order, through
  // `state` ([n_queries][heads][mla_mha_state_floats(v_dim)] fp32): `resume` reads it, and a
  // launch that does not `finish` writes it instead of `out`. The bits are one launch's.
  int key_begin = 0, key_end = 0;
  float* state = nullptr;
  bool resume = false, finish = true;
  // Queries a block: 64 or 128 (the same bits either way); 0: 128 unless that leaves
  // multiprocessors idle (short prompts).
  int tile_rows = 0;
  // Which kernel: mma.sync (any sm_80+ GPU; a warp per 16 queries) or wgmma (sm_90 with the sm_90a
  // target built: a warpgroup per 64 queries); automatic: wgmma_tma where ready, else mma.sync. The
  // two sum in different orders, so their bits differ (each within the reference's bar); a key
  // segment's state from either resumes in the other. wgmma_tma: the wgmma kernel with its keys and
  // values loaded by TMA where nope and v_dim are multiples of 64 and rope is 64 (else as wgmma;
  // the same bits as wgmma); named, a driver that cannot encode its tensor maps is an error,
  // automatic then takes the cp.async loads.
  MlaMhaKernel kernel = MlaMhaKernel::automatic;
};

constexpr int kMlaMhaSegmentAlign = 64;  // the kernel's chunk of keys
// fp32 entries of a (query, head)'s partial state: the unnormalised output, the running max and
// the four lanes' shares of the running sum, padded to 16 bytes.
constexpr int mla_mha_state_floats(int v_dim) { return v_dim + 8; }

// Whether mla_prefill_mha_cuda serves this shape on this device: nope, rope and v_dim multiples of
// 8 (16-byte pieces), nope + rope and v_dim up to 256, every pointer 16-byte aligned and every
// stride a multiple of 8 entries, and a device that gives a block 192 KiB of shared memory (sm_90).
bool mla_prefill_mha_fits(const MlaMhaPrefill& a);
// Whether this build and device have the wgmma kernel (MlaMhaKernel::wgmma).
bool mla_prefill_mha_wgmma_ready();

Status mla_prefill_mha_cuda(const MlaMhaPrefill& a, Stream stream = nullptr);

}  // namespace tandem::kernels
