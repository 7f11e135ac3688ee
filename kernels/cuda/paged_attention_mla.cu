// Decode attention for absorbed MLA over the paged latent pool (paged_attention_mla.hpp).
//
// Why a kernel of its own: in absorbed MLA every query head attends over the same row (the 512
// latent entries plus the 64 rope entries, which is also the value's source), so a block that
// serves all heads of a token reads each row once. Decode at batch 1 is latency-bound (a few
// hundred rows of 1 KB per layer), so the kernel is built to put few dependent steps between the
// launch and the result: a block takes a split of the context (flash-decoding), loads a chunk of
// 32 rows at once into shared memory (all loads in flight together), and does both products on
// the tensor cores (mma.sync m16n8k16, bf16 in, fp32 accumulate):
//   scores S = Q K^T: the queries and the rows are bf16 (an fp8 row converts to bf16 exactly; its
//     scale multiplies the scores), so every product is exact and only the fp32 summation order
//     differs from the CPU reference;
//   values O += P V: the probabilities are fp32; they go in as two bf16 terms, hi = bf16(p) and
//     lo = bf16(p - hi), so P is carried to about 16 bits instead of bf16's 8.
// An online softmax (running max and denominator per head, kept in shared memory) joins the chunks
// of a split; with several splits each leaves (max, denominator, unnormalised output) in the
// workspace and a combine kernel merges them, parallel over heads and value columns.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "common.cuh"
#include "paged_attention_mla.hpp"
#include "split_softmax.cuh"
#include "tandem/kernels/launch.hpp"

namespace tandem::kernels::mla {
namespace {

using cuda::bf16;
using fp8 = __nv_fp8_storage_t;

constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr int kChunk = 32;                  // rows per pass through shared memory
constexpr int kMaxQk = 576;                  // the latent row: 512 + 64 rope entries
constexpr int kRow = kMaxQk + 8;            // bf16 per shared row: 1168 bytes, fragment loads conflict-free
constexpr int kSRow = kChunk + 1;           // fp32 scores per head
constexpr int kPRow = kChunk + 8;           // bf16 probabilities per head, conflict-free fragment loads
using cuda::kMaxSplits;
constexpr int kCombineDims = 64, kCombineGroups = 4;  // combine: 64 columns x 4 groups over the splits
constexpr int kOwnCombineThreads = 256;     // mla_combine_own_kernel: 4 groups of 64 threads, 2 columns a thread
constexpr int kRotations = 64;              // query rotations computed before the wait, at most
constexpr int kRopeBatch = 8;               // query rope entries a thread loads at once

size_t shared_bytes(int mt) {
  const size_t r = static_cast<size_t>(mt) * 16;
  return (r + kChunk) * kRow * 2 + r * kSRow * 4 + 2 * r * kPRow * 2 + 3 * r * 4;
}

__device__ __forceinline__ std::uint32_t ld32(const bf16* p) { return *reinterpret_cast<const std::uint32_t*>(p); }
__device__ __forceinline__ std::uint32_t pack(bf16 lo, bf16 hi) {
  return static_cast<std::uint32_t>(__bfloat16_as_ushort(lo)) | static_cast<std::uint32_t>(__bfloat16_as_ushort(hi)) << 16;
}

using cuda::mma_m16n8k16;

// Cache rows are read in pieces of PB bytes (16, or 8 for fp8 rows whose width is not a multiple
// of 16): all of a thread's pieces of a chunk are loaded first (several loads in flight, a single
// memory latency), then converted to bf16 into shared memory; fp8 converts exactly (its scale is
// applied to the scores and the output instead).
template <int PB>
using Raw = std::conditional_t<PB == 16, uint4, uint2>;
__device__ __forceinline__ void stage(const uint4& raw, bf16* dst, bf16) { *reinterpret_cast<uint4*>(dst) = raw; }
__device__ __forceinline__ std::uint32_t fp8x2_to_bf16x2(std::uint32_t two_bytes) {
  const float2 f = cuda::fp8x2_to_float2(two_bytes);
  const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
  return pack(b.x, b.y);
}
__device__ __forceinline__ void stage(const uint4& raw, bf16* dst, fp8) {
  const std::uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  std::uint32_t o[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) o[i] = fp8x2_to_bf16x2(w[i / 2] >> (16 * (i % 2)));
  reinterpret_cast<uint4*>(dst)[0] = make_uint4(o[0], o[1], o[2], o[3]);
  reinterpret_cast<uint4*>(dst)[1] = make_uint4(o[4], o[5], o[6], o[7]);
}
__device__ __forceinline__ void stage(const uint2& raw, bf16* dst, fp8) {
  *reinterpret_cast<uint4*>(dst) = make_uint4(fp8x2_to_bf16x2(raw.x), fp8x2_to_bf16x2(raw.x >> 16), fp8x2_to_bf16x2(raw.y),
                                              fp8x2_to_bf16x2(raw.y >> 16));
}

struct Args {
  const bf16* q;
  const std::int32_t *token_seq, *token_pos, *block_tables;
  int q_heads, qk_dim, v_dim, block_size, max_blocks, per_split, splits;
  float score_scale, kv_scale;  // softmax scale x row scale; row scale alone (for the output)
  const bf16* rope_src;  // nullptr: q holds whole rows; else the last rope_dim entries come from here
  long rope_ld, rope_head;
  int rope_dim;
  const float* inv_freq;
  bool interleaved;
  const void* cache;
  bf16* out;
  float* part;  // [token][head][split][v_dim + 2]: max, denominator, unnormalised output
  bool combine;  // partials for the combine kernel (several splits, or a fixed split size)
  int context_splits;  // > 0: each token's splits from its own context (mla_context_splits), `splits` their most
};

// PagedKvLayout::context_splits' rule (paged_attention.hpp), on the device too.
static_assert(kMlaChunk == kChunk, "context_splits counts the kernel's chunks");

// Block (token, split), all heads; MT tiles of 16 query heads. Warp w owns value columns
// [64 w, 64 w + 64) of every head (its accumulators: MT x 8 tiles of 16 x 8).
// long-function: queries, then per chunk rows/scores/softmax/values, then merge: one smem carve-up and barrier chain.
template <class KV, int MT, int PB>
__global__ void __launch_bounds__(kThreads) mla_decode_kernel(Args a) {
  constexpr int R = MT * 16;
  constexpr int kE = PB / static_cast<int>(sizeof(KV));                  // row entries per piece
  constexpr int kLoads = (kChunk * (kMaxQk / kE) + kThreads - 1) / kThreads;  // pieces per thread and chunk, at most
  constexpr int kQLoads = (R * (kMaxQk / 8) + kThreads - 1) / kThreads;     // 16-byte query pieces per thread
  extern __shared__ uint4 smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* ks = qs + R * kRow;
  float* ss = reinterpret_cast<float*>(ks + kChunk * kRow);
  bf16* ph = reinterpret_cast<bf16*>(ss + R * kSRow);
  bf16* pl = ph + R * kPRow;
  float* m_s = reinterpret_cast<float*>(pl + R * kPRow);
  float* l_s = m_s + R;
  float* c_s = l_s + R;

  // Block (token, y) takes splits y, y + gridDim.y, ..: a split's partial is the same whichever
  // block computes it, and a graph step (splits over max-model-len) of many tokens then launches
  // a few blocks a token instead of one per split, most of them past the context.
  const int token = blockIdx.x, splits = a.splits;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int pos = a.token_pos[token];
  // With context_splits the token's own splits (at most `splits`, the workspace's stride: a
  // max_context too small for this token leaves its last split longer, never a write past it),
  // and a token of one split is written out directly; else the step's.
  const bool own = a.context_splits > 0;
  const int per_split = own ? mla_chunks_per_split(pos + 1, a.context_splits) * kChunk : a.per_split;
  const int token_splits = own ? min(splits, mla_context_splits(pos + 1, a.context_splits)) : splits;
  const bool to_part = a.combine && !(own && token_splits == 1);
  auto begin_of = [&](int split) { return split * per_split; };
  auto end_of = [&](int split) { return split == token_splits - 1 ? pos + 1 : min(pos + 1, begin_of(split) + per_split); };
  const long row0 = static_cast<long>(token) * a.q_heads;  // this token's first (token, head) row
  const KV* cache = static_cast<const KV*>(a.cache);
  const std::int32_t* table = a.block_tables + static_cast<long>(a.token_seq[token]) * a.max_blocks;
  // The step's inputs (positions, tables) were copied before the step's first kernel, and a row
  // asked into L2 cannot be stale (L2 is where the writes land): so this block's rows are
  // requested before waiting for the query's kernel (programmatic launch), overlapping its tail.
  {
    const int lines = static_cast<int>((a.qk_dim * sizeof(KV) + 127) / 128);
    for (int split = blockIdx.y; split < token_splits; split += gridDim.y) {
      const int begin = begin_of(split), end = end_of(split);
      for (int i = threadIdx.x; i < (end - begin) * lines; i += kThreads) {
        const int j = begin + i / lines;
        const long slot = static_cast<long>(table[j / a.block_size]) * a.block_size + j % a.block_size;
        asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<const char*>(cache + slot * a.qk_dim) + 128 * (i % lines)));
      }
    }
  }
  // The query's rotations depend only on the position: computed (fp64 sincos, slow) before the wait
  // too, once for all heads, where there are at most kRotations of them.
  __shared__ double rot[2][kRotations];
  const int rot_half = a.rope_src ? a.rope_dim / 2 : 0;
  const bool rot_early = rot_half <= kRotations;
  if (rot_early)
    for (int i = threadIdx.x; i < rot_half; i += kThreads)
      sincos(static_cast<double>(static_cast<float>(pos) * a.inv_freq[i]), &rot[0][i], &rot[1][i]);
  cuda::pdl_begin();
  for (int split = blockIdx.y; split < token_splits; split += gridDim.y) {
    const int begin = begin_of(split), end = end_of(split);
    if (begin >= end) {  // a split past this token's context: an empty partial
      for (int h = threadIdx.x; h < a.q_heads; h += kThreads) {
        float* pr = a.part + ((row0 + h) * splits + split) * (a.v_dim + 2);
        pr[0] = -INFINITY, pr[1] = 0.f;
      }
      continue;
    }

    // The token's queries (zero rows past q_heads), all of a thread's loads issued together; they
    // land in shared memory with the first chunk's rows. With rope_src the rope part is rotated
    // there, while the rows' loads are in flight. Columns up to qk16 (qk_dim rounded up to the
    // mma's 16) are zero in the queries and the rows.
    const int qk16 = (a.qk_dim + 15) / 16 * 16;
    const int rope_at = a.rope_src ? a.qk_dim - a.rope_dim : a.qk_dim;
    const int qv = rope_at / 8;
    uint4 qraw[kQLoads];
  #pragma unroll
    for (int u = 0; u < kQLoads; ++u) {
      const int i = threadIdx.x + u * kThreads, h = i / qv, c = i % qv;
      qraw[u] = make_uint4(0, 0, 0, 0);
      if (h < a.q_heads) qraw[u] = *reinterpret_cast<const uint4*>(a.q + (row0 + h) * a.qk_dim + 8 * c);
    }

    float acc[MT][8][4];
  #pragma unroll
    for (int mt = 0; mt < MT; ++mt)
  #pragma unroll
      for (int nt = 0; nt < 8; ++nt)
  #pragma unroll
        for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
    const int d_warp = warp * 64;  // this warp's value columns

    const int pieces = a.qk_dim / kE;
    for (int c0 = begin; c0 < end; c0 += kChunk) {
      const int n = min(kChunk, end - c0);
      __syncthreads();  // the last chunk's rows and probabilities are no longer read
      Raw<PB> raw[kLoads];
  #pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int i = threadIdx.x + u * kThreads, r = i / pieces, c = i % pieces;
        if (r < n) {
          const int j = c0 + r;
          const long slot = static_cast<long>(table[j / a.block_size]) * a.block_size + j % a.block_size;
          raw[u] = *reinterpret_cast<const Raw<PB>*>(cache + slot * a.qk_dim + kE * c);
        }
      }
      if (c0 == begin) {
  #pragma unroll
        for (int u = 0; u < kQLoads; ++u) {
          const int i = threadIdx.x + u * kThreads, h = i / qv, c = i % qv;
          if (h < R) *reinterpret_cast<uint4*>(qs + h * kRow + 8 * c) = qraw[u];
        }
        if (qk16 > a.qk_dim)
          for (int h = threadIdx.x; h < R; h += kThreads) *reinterpret_cast<uint4*>(qs + h * kRow + a.qk_dim) = make_uint4(0, 0, 0, 0);
        if (a.rope_src) {
          const int half = a.rope_dim / 2, n_rope = R * half;
          const float p = static_cast<float>(pos);
          // kRopeBatch entries a thread at a time: their loads first (one memory latency a batch,
          // not one an entry), then the rotations and the stores.
          for (int e0 = threadIdx.x; e0 < n_rope; e0 += kRopeBatch * kThreads) {
            float u[kRopeBatch], w[kRopeBatch];
  #pragma unroll
            for (int j = 0; j < kRopeBatch; ++j) {
              const int e = e0 + j * kThreads, h = e / half, i = e % half;
              u[j] = w[j] = 0.f;
              if (e < n_rope && h < a.q_heads) {
                const bf16* x = a.rope_src + token * a.rope_ld + h * a.rope_head;
                u[j] = __bfloat162float(a.interleaved ? x[2 * i] : x[i]);
                w[j] = __bfloat162float(a.interleaved ? x[2 * i + 1] : x[i + half]);
              }
            }
  #pragma unroll
            for (int j = 0; j < kRopeBatch; ++j) {
              const int e = e0 + j * kThreads, h = e / half, i = e % half;
              if (e >= n_rope) break;
              bf16* y = qs + h * kRow + rope_at;
              if (h >= a.q_heads) {
                y[i] = y[i + half] = __float2bfloat16_rn(0.f);
                continue;
              }
              double sn, cs;
              if (rot_early) sn = rot[0][i], cs = rot[1][i];  // (the chunk loop's barrier made them visible)
              else sincos(static_cast<double>(p * a.inv_freq[i]), &sn, &cs);
              y[i] = __float2bfloat16_rn(static_cast<float>(u[j] * cs - w[j] * sn));
              y[i + half] = __float2bfloat16_rn(static_cast<float>(w[j] * cs + u[j] * sn));
            }
          }
        }
        for (int h = threadIdx.x; h < R; h += kThreads) m_s[h] = -INFINITY, l_s[h] = 0.f;
      }
  #pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int i = threadIdx.x + u * kThreads, r = i / pieces, c = i % pieces;
        if (r >= kChunk) break;
        bf16* dst = ks + r * kRow + kE * c;
        if (r < n) {
          stage(raw[u], dst, KV{});
        } else {
  #pragma unroll
          for (int e = 0; e < kE; e += 8) *reinterpret_cast<uint4*>(dst + e) = make_uint4(0, 0, 0, 0);
        }
      }
      if (qk16 > a.qk_dim)
        for (int r = threadIdx.x; r < kChunk; r += kThreads) *reinterpret_cast<uint4*>(ks + r * kRow + a.qk_dim) = make_uint4(0, 0, 0, 0);
      __syncthreads();

      // Scores: tile (mt, nt) = heads 16 mt.., rows 8 nt..; two accumulator chains halve the mma latency chain.
      for (int tile = warp; tile < MT * 4; tile += kWarps) {
        const int mt = tile / 4, nt = tile % 4;
        const bf16* qa = qs + (mt * 16 + g) * kRow + 2 * t;
        const bf16* kb = ks + (nt * 8 + g) * kRow + 2 * t;
        float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        int kk = 0;
        for (; kk + 32 <= qk16; kk += 32) {
          const std::uint32_t a0[4] = {ld32(qa + kk), ld32(qa + 8 * kRow + kk), ld32(qa + kk + 8), ld32(qa + 8 * kRow + kk + 8)};
          mma_m16n8k16(c[0], a0, ld32(kb + kk), ld32(kb + kk + 8));
          const int k2 = kk + 16;
          const std::uint32_t a1[4] = {ld32(qa + k2), ld32(qa + 8 * kRow + k2), ld32(qa + k2 + 8), ld32(qa + 8 * kRow + k2 + 8)};
          mma_m16n8k16(c[1], a1, ld32(kb + k2), ld32(kb + k2 + 8));
        }
        if (kk < qk16) {
          const std::uint32_t a0[4] = {ld32(qa + kk), ld32(qa + 8 * kRow + kk), ld32(qa + kk + 8), ld32(qa + 8 * kRow + kk + 8)};
          mma_m16n8k16(c[0], a0, ld32(kb + kk), ld32(kb + kk + 8));
        }
        const int col = nt * 8 + 2 * t;
        float* s0 = ss + (mt * 16 + g) * kSRow + col;
        float* s1 = s0 + 8 * kSRow;
        s0[0] = col < n ? (c[0][0] + c[1][0]) * a.score_scale : -INFINITY;
        s0[1] = col + 1 < n ? (c[0][1] + c[1][1]) * a.score_scale : -INFINITY;
        s1[0] = col < n ? (c[0][2] + c[1][2]) * a.score_scale : -INFINITY;
        s1[1] = col + 1 < n ? (c[0][3] + c[1][3]) * a.score_scale : -INFINITY;
      }
      __syncthreads();

      // Online softmax, a warp per head and a lane per row of the chunk.
      for (int h = warp; h < R; h += kWarps) {
        const float s = ss[h * kSRow + lane];
        const float m_old = m_s[h], m_new = fmaxf(m_old, cuda::warp_max(s));
        const float p = s == -INFINITY ? 0.f : expf(s - m_new);
        const float correction = m_old == -INFINITY ? 0.f : expf(m_old - m_new);
        const float sum = cuda::warp_sum(p);
        const bf16 hi = __float2bfloat16_rn(p);
        ph[h * kPRow + lane] = hi;
        pl[h * kPRow + lane] = __float2bfloat16_rn(p - __bfloat162float(hi));
        if (lane == 0) m_s[h] = m_new, l_s[h] = l_s[h] * correction + sum, c_s[h] = correction;
      }
      __syncthreads();

      // Values: acc = acc * correction + P V over this warp's columns (rows past n have p = 0, V = 0).
      if (d_warp < a.v_dim) {
  #pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const float c_lo = c_s[mt * 16 + g], c_hi = c_s[mt * 16 + g + 8];
  #pragma unroll
          for (int nt = 0; nt < 8; ++nt) acc[mt][nt][0] *= c_lo, acc[mt][nt][1] *= c_lo, acc[mt][nt][2] *= c_hi, acc[mt][nt][3] *= c_hi;
        }
        for (int k0 = 0; k0 < n; k0 += 16) {
          std::uint32_t ahi[MT][4], alo[MT][4];
  #pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            const int r = (mt * 16 + g) * kPRow + k0 + 2 * t;
            ahi[mt][0] = ld32(ph + r), ahi[mt][1] = ld32(ph + r + 8 * kPRow), ahi[mt][2] = ld32(ph + r + 8),
            ahi[mt][3] = ld32(ph + r + 8 * kPRow + 8);
            alo[mt][0] = ld32(pl + r), alo[mt][1] = ld32(pl + r + 8 * kPRow), alo[mt][2] = ld32(pl + r + 8),
            alo[mt][3] = ld32(pl + r + 8 * kPRow + 8);
          }
  #pragma unroll
          for (int nt = 0; nt < 8; ++nt) {
            if (d_warp + nt * 8 >= a.v_dim) break;
            const bf16* vb = ks + (k0 + 2 * t) * kRow + d_warp + nt * 8 + g;
            const std::uint32_t b0 = pack(vb[0], vb[kRow]), b1 = pack(vb[8 * kRow], vb[9 * kRow]);
  #pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              mma_m16n8k16(acc[mt][nt], ahi[mt], b0, b1);
              mma_m16n8k16(acc[mt][nt], alo[mt], b0, b1);
            }
          }
        }
      }
    }

    // The result (one split), or this split's partial for the combine.
    if (d_warp < a.v_dim) {
  #pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
  #pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int h = mt * 16 + g + 8 * half;
          if (h >= a.q_heads) continue;
          const float f = !to_part ? (l_s[h] > 0.f ? a.kv_scale / l_s[h] : 0.f) : a.kv_scale;
  #pragma unroll
          for (int nt = 0; nt < 8; ++nt) {
            const int col = d_warp + nt * 8 + 2 * t;
            if (col >= a.v_dim) break;
            const float x = acc[mt][nt][2 * half] * f, y = acc[mt][nt][2 * half + 1] * f;
            if (!to_part) {
              *reinterpret_cast<__nv_bfloat162*>(a.out + (row0 + h) * a.v_dim + col) = __floats2bfloat162_rn(x, y);
            } else {
              float* pr = a.part + ((row0 + h) * splits + split) * (a.v_dim + 2);
              *reinterpret_cast<float2*>(pr + 2 + col) = make_float2(x, y);
            }
          }
        }
      }
    }
    if (to_part)
      for (int h = threadIdx.x; h < a.q_heads; h += kThreads) {
        float* pr = a.part + ((row0 + h) * splits + split) * (a.v_dim + 2);
        pr[0] = m_s[h], pr[1] = l_s[h];
      }
  }  // split
}

// Block (token-head row, 64 value columns): out = sum_s o_s w_s / sum_s l_s w_s, w_s = e^(m_s - M);
// four groups of 64 threads take every fourth split and add up through shared memory.
__global__ void __launch_bounds__(kCombineDims * kCombineGroups)
    mla_combine_kernel(const float* part, int splits, int v_dim, bf16* out) {
  cuda::pdl_begin();
  __shared__ float weight[kMaxSplits];
  __shared__ float sums[kCombineGroups][kCombineDims];
  __shared__ float scratch[32];
  const float* pr = part + static_cast<long>(blockIdx.x) * splits * (v_dim + 2);
  const float denom = cuda::split_weights(pr, splits, v_dim, weight, scratch);  // the weights visible on return
  const int group = threadIdx.x / kCombineDims, d = blockIdx.y * kCombineDims + threadIdx.x % kCombineDims;
  float o = 0.f;
  if (d < v_dim)
    for (int s = group; s < splits; s += kCombineGroups)
      if (weight[s] != 0.f) o += pr[static_cast<long>(s) * (v_dim + 2) + 2 + d] * weight[s];
  sums[group][threadIdx.x % kCombineDims] = o;
  __syncthreads();
  if (group == 0 && d < v_dim) {
    for (int k = 1; k < kCombineGroups; ++k) o += sums[k][threadIdx.x];
    out[static_cast<long>(blockIdx.x) * v_dim + d] = __float2bfloat16_rn(denom > 0.f ? o / denom : 0.f);
  }
}

// The combine of context_splits (mla_context_splits): block (token-head row, 128 value columns), four
// groups of 64 threads, group g adding up the splits g, g + 4, .. (several loads in flight a
// thread), then the groups in order through shared memory. Every order is fixed by the token's
// own split count (from its position), so the result does not depend on which blocks wrote the
// partials or on the step. A token of one split was written by the decode kernel.
__global__ void __launch_bounds__(kOwnCombineThreads)
    mla_combine_own_kernel(const float* part, const std::int32_t* token_pos, int q_heads, int max_splits, int target, int v_dim,
                           bf16* out) {
  cuda::pdl_begin();
  const int token = static_cast<int>(blockIdx.x) / q_heads;
  const int splits = min(max_splits, mla_context_splits(token_pos[token] + 1, target));
  if (splits == 1) return;
  constexpr int kGroups = kOwnCombineThreads / 64;
  __shared__ float weight[kMaxSplits];
  __shared__ float scratch[32];
  __shared__ float2 sums[kGroups][64];
  const long stride = v_dim + 2;
  const float* pr = part + static_cast<long>(blockIdx.x) * max_splits * stride;
  const float denom = cuda::split_weights(pr, splits, v_dim, weight, scratch);  // the weights visible on return
  const int group = threadIdx.x / 64, lane = threadIdx.x % 64, d = blockIdx.y * 128 + 2 * lane;
  float2 o = make_float2(0.f, 0.f);
  if (d < v_dim) {
#pragma unroll 8
    for (int s = group; s < splits; s += kGroups) {
      const float2 x = *reinterpret_cast<const float2*>(pr + s * stride + 2 + d);
      o.x += x.x * weight[s], o.y += x.y * weight[s];
    }
  }
  sums[group][lane] = o;
  __syncthreads();
  if (group == 0 && d < v_dim) {
    for (int g = 1; g < kGroups; ++g) o.x += sums[g][lane].x, o.y += sums[g][lane].y;
    const float inv = denom > 0.f ? 1.f / denom : 0.f;
    *reinterpret_cast<__nv_bfloat162*>(out + static_cast<long>(blockIdx.x) * v_dim + d) = __floats2bfloat162_rn(o.x * inv, o.y * inv);
  }
}

int multiprocessors() {
  static const int n = [] {
    int dev = 0, count = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev);
    return count > 0 ? count : 1;
  }();
  return n;
}

// Keys per split: whole chunks, as many splits as give about one block per multiprocessor (a
// block's time is mostly latency, nearly the same for 1 or 32 rows; over 128 registers a thread,
// one block of 256 threads fills a multiprocessor's registers), at most kMaxSplits.
int per_split_for(int n_tokens, int max_context) {
  const int chunks = (max_context + kChunk - 1) / kChunk;
  const int want = std::max(1, multiprocessors() / std::max(n_tokens, 1));
  int per = (chunks + std::min(chunks, want) - 1) / std::min(chunks, want);
  while ((chunks + per - 1) / per > kMaxSplits) ++per;
  return per * kChunk;
}

int splits_for(int n_tokens, int max_context, int split_keys) {
  if (split_keys > 0) return std::max(1, (max_context + split_keys - 1) / split_keys);
  if (max_context <= kChunk) return 1;
  const int per = per_split_for(n_tokens, max_context);
  return (max_context + per - 1) / per;
}

// Blocks a token gets: every split its own while the step's tokens x splits fill the GPU about
// twice (a decode, a short verification), else fewer, each taking several splits in turn (a split
// past the context costs a few stores, where a block of its own costs a launch slot of an SM).
int blocks_per_token(int n_tokens, int splits) {
  const int want = (2 * multiprocessors() + n_tokens - 1) / std::max(n_tokens, 1);
  return std::max(1, std::min(splits, want));
}

// Whether the splits leave partials for the combine kernel: always with a fixed split size (one
// split or several, the same arithmetic), else only when there are several.
bool combines(int splits, const PagedKvLayout& l) { return splits > 1 || l.split_keys > 0; }

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

template <class KV, int MT, int PB>
cudaError_t launch_with(dim3 grid, const Args& args, Stream stream) {
  static const cudaError_t configured = cudaFuncSetAttribute(
      mla_decode_kernel<KV, MT, PB>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared_bytes(MT)));
  if (configured != cudaSuccess) return configured;
  return cuda::launch_pdl(mla_decode_kernel<KV, MT, PB>, grid, dim3(kThreads), shared_bytes(MT), stream, args);
}

// 16-byte pieces, or 8-byte ones for fp8 rows of a width that is not a multiple of 16.
template <class KV, int MT>
cudaError_t launch(dim3 grid, const Args& args, Stream stream) {
  if constexpr (sizeof(KV) == 1)
    if (args.qk_dim % 16 != 0) return launch_with<KV, MT, 8>(grid, args, stream);
  return launch_with<KV, MT, 16>(grid, args, stream);
}

}  // namespace

bool fits(DType act, int n_tokens, int q_heads, const PagedKvLayout& l, const void* q, const void* k_cache,
          const void* out) {
  return paged_attention_mla_fits(act, n_tokens, q_heads, l) && aligned16(q) && aligned16(k_cache) && aligned16(out);
}

// context_splits: the most splits a token of up to max_context keys takes (mla_context_splits never
// exceeds its chunks nor the target).
int own_max_splits(int max_context, int target) {
  return std::max(1, std::min((std::max(max_context, 1) + kChunk - 1) / kChunk, target));
}

size_t workspace_bytes(int n_tokens, int q_heads, const PagedKvLayout& l, int max_context) {
  if (n_tokens <= 0 || q_heads <= 0) return 0;
  if (l.context_splits > 0) {
    const int most = own_max_splits(max_context, l.context_splits);
    if (most == 1) return 0;
    return sizeof(float) * static_cast<size_t>(n_tokens) * static_cast<size_t>(q_heads) * static_cast<size_t>(most) *
           static_cast<size_t>(l.v_dim + 2);
  }
  const int splits = splits_for(n_tokens, max_context, l.split_keys);
  if (!combines(splits, l)) return 0;
  return sizeof(float) * static_cast<size_t>(n_tokens) * static_cast<size_t>(q_heads) * static_cast<size_t>(splits) *
         static_cast<size_t>(l.v_dim + 2);
}

Status attention(const void* q, int n_tokens, const std::int32_t* token_seq, const std::int32_t* token_pos,
                      int q_heads, const PagedKvLayout& l, const void* k_cache, const std::int32_t* block_tables,
                      int max_blocks_per_seq, float scale, void* out, int max_context, void* workspace,
                      size_t workspace_bytes_given, Stream stream, const MlaQueryRope* rope) {
  const bool own = l.context_splits > 0;
  int splits = own ? own_max_splits(max_context, l.context_splits) : splits_for(n_tokens, max_context, l.split_keys);
  if (own && splits > 1 && workspace_bytes_given < workspace_bytes(n_tokens, q_heads, l, max_context))
    return Error{"paged_attention: context_splits needs a workspace of paged_attention_workspace_bytes (no silent single split: "
                 "the result would differ)"};
  if (!own && l.split_keys > 0 && (l.split_keys % kChunk != 0 || splits > kMaxSplits))
    return Error{"paged_attention: split_keys must be a multiple of 32 giving at most 1024 splits of max_context"};
  if (!own && combines(splits, l) && workspace_bytes_given < workspace_bytes(n_tokens, q_heads, l, max_context)) {
    if (workspace != nullptr || l.split_keys > 0) return Error{"paged_attention: workspace smaller than paged_attention_workspace_bytes"};
    splits = 1;  // no workspace: each block walks all of its token's keys
  }
  Args a{};
  a.q = static_cast<const bf16*>(q);
  a.token_seq = token_seq, a.token_pos = token_pos, a.block_tables = block_tables;
  a.q_heads = q_heads, a.qk_dim = l.qk_dim, a.v_dim = l.v_dim, a.block_size = l.block_size, a.max_blocks = max_blocks_per_seq;
  a.per_split = own ? 0 : l.split_keys > 0 ? l.split_keys : splits == 1 ? 0 : per_split_for(n_tokens, max_context);
  a.combine = own ? splits > 1 : combines(splits, l);
  a.context_splits = l.context_splits;
  a.kv_scale = l.dtype == DType::fp8_e4m3 ? l.k_scale : 1.f;
  a.score_scale = scale * a.kv_scale;
  if (rope) {
    a.rope_src = static_cast<const bf16*>(rope->src), a.rope_ld = rope->ld, a.rope_head = rope->head_stride;
    a.rope_dim = rope->dim, a.inv_freq = rope->inv_freq, a.interleaved = rope->interleaved;
  }
  a.cache = k_cache, a.out = static_cast<bf16*>(out), a.part = static_cast<float*>(workspace);
  a.splits = splits;
  const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>(blocks_per_token(n_tokens, splits)));
  const int mt = (q_heads + 15) / 16;
  cudaError_t e;
  if (l.dtype == DType::bf16)
    e = mt == 1 ? launch<bf16, 1>(grid, a, stream) : mt == 2 ? launch<bf16, 2>(grid, a, stream) : launch<bf16, 4>(grid, a, stream);
  else
    e = mt == 1 ? launch<fp8, 1>(grid, a, stream) : mt == 2 ? launch<fp8, 2>(grid, a, stream) : launch<fp8, 4>(grid, a, stream);
  if (auto err = TANDEM_CUDA_STATUS(e, "launch mla_decode_kernel"); !err || !a.combine) return err;
  if (own)
    return TANDEM_CUDA_STATUS(cuda::launch_pdl(mla_combine_own_kernel,
                                               dim3(static_cast<unsigned>(n_tokens * q_heads), static_cast<unsigned>((l.v_dim + 127) / 128)),
                                               dim3(kOwnCombineThreads),
                                               0, stream, static_cast<const float*>(workspace), token_pos, q_heads, splits,
                                               l.context_splits, l.v_dim, static_cast<bf16*>(out)),
                              "mla_combine_own_kernel");
  return TANDEM_CUDA_STATUS(
        cuda::launch_pdl(mla_combine_kernel,
                         dim3(static_cast<unsigned>(n_tokens * q_heads), static_cast<unsigned>((l.v_dim + kCombineDims - 1) / kCombineDims)),
                         dim3(kCombineDims * kCombineGroups), 0, stream, static_cast<const float*>(workspace), splits, l.v_dim,
                         static_cast<bf16*>(out)),
        "mla_combine_kernel");
}

}  // namespace tandem::kernels::mla

namespace tandem::kernels {

Status paged_attention_mla_rope_cuda(const void* q, int n_tokens, const std::int32_t* token_seq,
                                          const std::int32_t* token_pos, int q_heads, const PagedKvLayout& l,
                                          const void* k_cache, const std::int32_t* block_tables, int max_blocks_per_seq,
                                          float scale, const MlaQueryRope& rope, void* out, int max_context,
                                          void* workspace, size_t workspace_bytes, Stream stream) {
  if (n_tokens == 0) return {};
  if (!mla::fits(DType::bf16, n_tokens, q_heads, l, q, k_cache, out))
    return Error{"paged_attention_mla_rope: the call does not fit the MLA decode kernel (paged_attention_mla_fits, 16-byte alignment)"};
  if (rope.src == nullptr || rope.inv_freq == nullptr || rope.dim <= 0 || rope.dim % 2 != 0 || rope.dim > l.qk_dim ||
      (l.qk_dim - rope.dim) % 8 != 0)
    return Error{"paged_attention_mla_rope: rope needs src, inv_freq and an even dim with qk_dim - dim a multiple of 8"};
  if (max_blocks_per_seq <= 0) return Error{"paged_attention_mla_rope: max_blocks_per_seq must be > 0"};
  return mla::attention(q, n_tokens, token_seq, token_pos, q_heads, l, k_cache, block_tables, max_blocks_per_seq, scale, out,
                        max_context, workspace, workspace_bytes, stream, &rope);
}

}  // namespace tandem::kernels
