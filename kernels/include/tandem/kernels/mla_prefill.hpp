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

}  // namespace tandem::kernels
