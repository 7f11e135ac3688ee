// The MLA decode attention kernel (paged_attention_mla.cu), reached through paged_attention_cuda:
// absorbed MLA (one kv head whose row is both key and value, v_in_k), bf16 queries, few tokens.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "tandem/kernels/paged_attention.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels::mla {

// paged_attention_mla_fits (the shapes) and 16-byte aligned q, cache and out.
bool fits(DType act, int n_tokens, int q_heads, const PagedKvLayout& l, const void* q, const void* k_cache,
          const void* out);

// Workspace for the split-K partials (0 when contexts up to max_context are not split).
size_t workspace_bytes(int n_tokens, int q_heads, const PagedKvLayout& l, int max_context);

// paged_attention_cuda's contract for a call that fits (checked by the caller).
Status attention(const void* q, int n_tokens, const std::int32_t* token_seq, const std::int32_t* token_pos,
                      int q_heads, const PagedKvLayout& l, const void* k_cache, const std::int32_t* block_tables,
                      int max_blocks_per_seq, float scale, void* out, int max_context, void* workspace,
                      size_t workspace_bytes, Stream stream, const MlaQueryRope* rope = nullptr);

}  // namespace tandem::kernels::mla
