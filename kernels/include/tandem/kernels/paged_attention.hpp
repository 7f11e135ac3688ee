// Paged attention on the GPU, over a KV cache of bf16 or fp8_e4m3 with one scale per tensor.
//
// Cache layout (vLLM's "flash" layout), K and V in separate pools:
//   k_cache: [num_blocks, block_size, kv_heads, qk_dim]   v_cache: [num_blocks, block_size, kv_heads, v_dim]
// Sequence s keeps key j in slot block_tables[s * max_blocks_per_seq + j / block_size] * block_size
// + j % block_size. fp8 stores fp8(x / scale) and reads fp8 * scale; bf16 stores bf16(x), scale unused.
//
// Queries: n_tokens rows of [q_heads, qk_dim]; token t belongs to sequence token_seq[t], sits at
// position token_pos[t] and attends keys 0..token_pos[t] of its sequence (causal). Decode is one
// token per sequence at its last position; prefill and chunked prefill are many tokens of a sequence.
// Grouped-query: query head h reads kv head h / (q_heads / kv_heads).
// The CPU reference is attention_paged_cpu (attention.hpp) over the dequantised cache.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "tandem/kernels/dtype.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels {

struct PagedKvLayout {
  DType dtype = DType::bf16;  // bf16 or fp8_e4m3
  int block_size = 16;
  int kv_heads = 0;
  int qk_dim = 0, v_dim = 0;  // each at most 576 (MLA's absorbed 512 + 64)
  float k_scale = 1.0f, v_scale = 1.0f;
  // MLA (absorbed): the value is the first v_dim entries of the key row (the latent), so there is
  // no V pool: v_cache is not read, writes store K only, and v_scale must equal k_scale.
  bool v_in_k = false;
  // Keys per split of the MLA decode kernel (a multiple of 32), for batch-invariant results: every
  // split starts at a multiple of it and the splits are always merged by the combine kernel, so a
  // token's output depends only on its own query and context, not on the step's token count or
  // longest context (which choose the split otherwise). 0: chosen by the step's shape.
  int split_keys = 0;
  // The MLA decode kernel's splits chosen from each token's own context n alone (preferred over
  // split_keys when > 0): c = ceil(n / 32) chunks of 32 keys, ceil(c / min(c, context_splits))
  // chunks a split, so a short context gets a block per chunk and a long one about context_splits
  // blocks, whatever the step's token count, the token's place in it or max_context (which must
  // bound every token's context and only sizes the launch and the workspace). A token of one
  // split is written by its block directly, several are merged by the combine kernel in split
  // order: its result is the same bits in any step.
  int context_splits = 0;
  // Keys per split of the other (generic) kernel, fixed (a multiple of 32): the splits are
  // ceil(max_context / fixed_split_keys), so a CUDA graph captured for max-model-len gives a short
  // context a few busy splits (those past a token's position return at once) instead of a few
  // blocks that each walk a long share of it (the DFlash drafter's proposals). 0: chosen by the
  // step's shape (and MLA's split_keys does not apply to this kernel).
  int fixed_split_keys = 0;
};

// The value a cache of this type reads back for x (CPU reference of the quantisation).
float kv_roundtrip_cpu(DType kv, float x, float scale);

// Writes n_tokens new keys and values ([n, kv_heads, qk_dim] / [n, kv_heads, v_dim] of type `act`,
// f32 or bf16) into the slots slot_mapping[t] (a negative slot is skipped: padding). Device buffers.
Status write_kv_cuda(DType act, const void* k, const void* v, int n_tokens, const std::int32_t* slot_mapping,
                          const PagedKvLayout& l, void* k_cache, void* v_cache, Stream stream = nullptr);

// Workspace paged_attention_cuda needs to split the keys of contexts up to max_context (the
// largest token_pos + 1) over several blocks; 0 when it would not split.
size_t paged_attention_workspace_bytes(int n_tokens, int q_heads, const PagedKvLayout& l, int max_context);

// out: [n_tokens, q_heads, v_dim] of type `act` (f32 or bf16), q likewise. Device buffers.
// A block serves one token, one kv head and up to 8 of its query heads (K and V are read once for
// them); its warps split the keys, each with an online softmax, and the block merges them. With
// few queries and long contexts the keys are split over several blocks too (flash-decoding):
// that needs max_context and a workspace of paged_attention_workspace_bytes; without a workspace
// it does not split. Prefill is correct but not tiled for the tensor cores.
// Absorbed MLA calls that paged_attention_mla_fits (and with 16-byte aligned q, cache and out) go
// to the MLA decode kernel instead (kernels/cuda/paged_attention_mla.cu): a block per (token,
// split of the context) serving all query heads from each row load, products on the tensor cores.
// That kernel reads token_seq, token_pos and block_tables before waiting on the kernel launched
// before it (programmatic launch), to ask L2 for its rows early: they must not be written by that
// kernel (a step's inputs come from a host copy before its first kernel).
Status paged_attention_cuda(DType act, const void* q, int n_tokens, const std::int32_t* token_seq,
                                 const std::int32_t* token_pos, int q_heads, const PagedKvLayout& l,
                                 const void* k_cache, const void* v_cache, const std::int32_t* block_tables,
                                 int max_blocks_per_seq, float scale, void* out, int max_context = 0,
                                 void* workspace = nullptr, size_t workspace_bytes = 0, Stream stream = nullptr);

// PagedKvLayout::context_splits' rule, the one both the kernel and the launch follow: a context of
// n keys in chunks of kMlaChunk keys, at most `target` splits of whole chunks, as even as that
// allows; split s covers keys [s * per, min(n, (s + 1) * per)), per = mla_chunks_per_split * kMlaChunk.
// (constexpr: the CUDA kernel calls it on the device.)
constexpr int kMlaChunk = 32;
constexpr int mla_chunks_per_split(int n, int target) {
  const int chunks = (n + kMlaChunk - 1) / kMlaChunk, s = chunks < target ? chunks : target;
  return s > 0 ? (chunks + s - 1) / s : 1;
}
constexpr int mla_context_splits(int n, int target) {
  const int per = mla_chunks_per_split(n, target) * kMlaChunk;
  return n > 0 ? (n + per - 1) / per : 1;
}

// Tokens up to which absorbed MLA takes the MLA decode kernel (decode batches, small prefill chunks).
constexpr int kMlaDecodeMaxTokens = 64;

// Whether paged_attention_cuda serves these shapes with the MLA decode kernel: v_in_k with one kv
// head (block_size and k_scale > 0), bf16 activations, 1..kMlaDecodeMaxTokens tokens, at most 64
// query heads, qk_dim a multiple of 8 up to 576, v_dim a multiple of 8 up to 512, a bf16 or
// fp8_e4m3 cache.
bool paged_attention_mla_fits(DType act, int n_tokens, int q_heads, const PagedKvLayout& l);

// The query's rope part, rotated by the MLA decode kernel as it loads the queries (instead of a
// launch of its own before it): token t's head h has its rope_dim unrotated entries at
// src + t * ld + h * head_stride (bf16), pairs (2i, 2i+1) when interleaved, else (i, i + dim/2);
// they become the last `dim` entries of the query row, de-interleaved and rounded to bf16, as
// rope_tokens_cpu(..., bf16 = true) computes them (angle pos * inv_freq[i] in fp32, cos/sin in fp64).
struct MlaQueryRope {
  const void* src = nullptr;
  long ld = 0, head_stride = 0;
  int dim = 0;
  const float* inv_freq = nullptr;  // device, dim / 2 entries
  bool interleaved = false;
};

// paged_attention_cuda for a call that paged_attention_mla_fits, the queries' last rope.dim entries
// taken from `rope` (q's are not read); rope.dim even, qk_dim - rope.dim a multiple of 8.
Status paged_attention_mla_rope_cuda(const void* q, int n_tokens, const std::int32_t* token_seq,
                                          const std::int32_t* token_pos, int q_heads, const PagedKvLayout& l,
                                          const void* k_cache, const std::int32_t* block_tables, int max_blocks_per_seq,
                                          float scale, const MlaQueryRope& rope, void* out, int max_context,
                                          void* workspace, size_t workspace_bytes, Stream stream = nullptr);

// CPU reference of paged attention over an absorbed-MLA pool as the GPU stores it: `cache` holds
// the raw rows (bf16, or fp8_e4m3 read as fp8 * k_scale), qk_dim entries a slot; the value is a
// row's first v_dim entries. q: [n_tokens, q_heads, qk_dim], out: [n_tokens, q_heads, v_dim], fp32;
// token t attends keys 0..token_pos[t] of sequence token_seq[t]. Sums in double.
void paged_attention_mla_cpu(const float* q, int n_tokens, const std::int32_t* token_seq, const std::int32_t* token_pos,
                             int q_heads, const PagedKvLayout& l, const std::uint8_t* cache,
                             const std::int32_t* block_tables, int max_blocks_per_seq, float scale, float* out);

}  // namespace tandem::kernels
