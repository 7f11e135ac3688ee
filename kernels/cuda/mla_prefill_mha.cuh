// What the two kernels of the un-absorbed MLA prefill share (mla_prefill_mha.cu: mma.sync, a warp
// per 16 queries; mla_prefill_mha_wgmma.cu: Hopper's warpgroup MMA, a warpgroup per 64 queries).
// Both keep a warp's 16 rows in mma.sync's accumulator layout (lane 4 g + t: rows g and g + 8,
// columns 2t and 2t + 1 of every 8), which is also wgmma's, so the online softmax, the partial
// state carried between key segments and the output's write are one code, and a segment's state
// from either kernel resumes in the other.
#pragma once
#include <cstdint>

#include "common.cuh"
#include "flash_tiles.cuh"
#include "tandem/kernels/launch.hpp"
#include "tandem/kernels/mla_prefill.hpp"

namespace tandem::kernels::mha {

using cuda::bf16;

constexpr int kKeys = 64;     // keys a chunk
constexpr int kMaxDim = 256;  // nope + rope, and v_dim
static_assert(kKeys == kMlaMhaSegmentAlign, "segments start on the kernels' chunks of keys");

struct Args {
  MlaMhaPrefill p;
  int head_tiles;    // ceil(n_queries / queries a block)
  float score_log2;  // scale x log2(e): scores in the exp2 domain
};

// A block's queries q0 .. q0 + rows - 1 of head h; `last`: its last key in this launch's segment.
struct Tile {
  int h, q0, rows, last;
};

// The longest tiles (the prompt's last queries) of every head first, so the short ones fill the tail.
template <int ROWS>
__device__ __forceinline__ Tile block_tile(const Args& a) {
  const MlaMhaPrefill& p = a.p;
  Tile t;
  const int tile = a.head_tiles - 1 - static_cast<int>(blockIdx.x) / p.heads;
  t.h = static_cast<int>(blockIdx.x) % p.heads;
  t.q0 = tile * ROWS, t.rows = min(ROWS, p.n_queries - t.q0);
  t.last = min(p.first_pos + t.q0 + t.rows - 1, p.key_end > 0 ? p.key_end - 1 : 0x7fffffff);
  return t;
}

// Each of this thread's two rows' last key (-1: a row past the tile's end, which gets no keys, stays
// empty and is not written).
__device__ __forceinline__ void row_limits(const Args& a, const Tile& t, int (&lim)[2]) {
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4;
  lim[0] = warp * 16 + g < t.rows ? a.p.first_pos + t.q0 + warp * 16 + g : -1;
  lim[1] = warp * 16 + g + 8 < t.rows ? a.p.first_pos + t.q0 + warp * 16 + g + 8 : -1;
}

__device__ __forceinline__ float* state_row(const Args& a, const Tile& t, int hh) {
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4;
  return a.p.state + (static_cast<long>(t.q0 + warp * 16 + g + 8 * hh) * a.p.heads + t.h) * mla_mha_state_floats(a.p.v_dim);
}

// The accumulators and softmax state at the segment's start: zeros, or what the last segment left.
__device__ __forceinline__ void begin_rows(const Args& a, const Tile& t, const int (&lim)[2], float (&acc)[kMaxDim / 8][4],
                                           cuda::FlashSoftmax& sm) {
  const MlaMhaPrefill& p = a.p;
  const int lt = threadIdx.x % 4;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const bool mine = p.resume && lim[hh] >= 0;
    const float* st = mine ? state_row(a, t, hh) : nullptr;
#pragma unroll
    for (int n = 0; n < kMaxDim / 8; ++n) {
      const bool in = mine && 8 * n < p.v_dim;
      acc[n][2 * hh] = in ? st[8 * n + 2 * lt] : 0.f;
      acc[n][2 * hh + 1] = in ? st[8 * n + 2 * lt + 1] : 0.f;
    }
    if (mine) sm.m[hh] = st[p.v_dim], sm.l[hh] = st[p.v_dim + 1 + lt];
  }
}

// The segment's end: its partial state, exactly, for the next one, or O / l as bf16. A row past
// the tile skips both, after its quad's shuffles, which every lane of the warp takes part in.
__device__ __forceinline__ void end_rows(const Args& a, const Tile& t, const int (&lim)[2], const float (&acc)[kMaxDim / 8][4],
                                         const cuda::FlashSoftmax& sm) {
  const MlaMhaPrefill& p = a.p;
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, lt = threadIdx.x % 4;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    // The row's sum over its quad, by every lane of the warp before any leaves the row: a full-mask
    // shuffle needs all 32 (rows past the last query included; their sums are not used).
    float l = sm.l[hh];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (lim[hh] < 0) continue;
    if (!p.finish) {
      float* st = state_row(a, t, hh);
#pragma unroll
      for (int n = 0; n < kMaxDim / 8; ++n)
        if (8 * n < p.v_dim) st[8 * n + 2 * lt] = acc[n][2 * hh], st[8 * n + 2 * lt + 1] = acc[n][2 * hh + 1];
      st[p.v_dim + 1 + lt] = sm.l[hh];
      if (lt == 0) st[p.v_dim] = sm.m[hh];
      continue;
    }
    const float f = l > 0.f ? 1.f / l : 0.f;
    bf16* o = static_cast<bf16*>(p.out) + (t.q0 + warp * 16 + g + 8 * hh) * p.out_stride + static_cast<long>(t.h) * p.out_head_stride;
#pragma unroll
    for (int n = 0; n < kMaxDim / 8; ++n) {
      if (8 * n >= p.v_dim) break;
      *reinterpret_cast<unsigned*>(o + 8 * n + 2 * lt) = cuda::pack_bf16(acc[n][2 * hh] * f, acc[n][2 * hh + 1] * f);
    }
  }
}

// A chunk's scores s (keys c0 ..) into the online softmax: masked by each row's last key, the
// running max raised, what is accumulated rescaled; base: each row's max to subtract.
__device__ __forceinline__ void softmax_update(float (&s)[kKeys / 8][4], int c0, const int (&lim)[2], float score_log2,
                                               cuda::FlashSoftmax& sm, float (&acc)[kMaxDim / 8][4], float (&base)[2]) {
  float mx[2];
  cuda::flash_mask_max(s, c0, lim, score_log2, mx);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float m_new = fmaxf(sm.m[h], mx[h]);
    base[h] = m_new == -INFINITY ? 0.f : m_new;  // a row with nothing yet: every p is 0, no NaN
    const float corr = exp2f(sm.m[h] - base[h]);
    sm.m[h] = m_new;
    sm.l[h] *= corr;
#pragma unroll
    for (int n = 0; n < kMaxDim / 8; ++n) acc[n][2 * h] *= corr, acc[n][2 * h + 1] *= corr;
  }
}

// Probabilities of keys 16 kk .. + 15 as the A operand of a 16-key product (the accumulators of key
// tiles 2 kk and 2 kk + 1 are its layout), rounded to bf16 as FlashAttention rounds them; their
// fp32 values are added to the running sums.
__device__ __forceinline__ void probs(const float (&s)[kKeys / 8][4], int kk, const float (&base)[2], cuda::FlashSoftmax& sm,
                                      unsigned (&pf)[4]) {
  float p[2][4];
#pragma unroll
  for (int x = 0; x < 2; ++x)
#pragma unroll
    for (int e = 0; e < 4; ++e) p[x][e] = exp2f(s[2 * kk + x][e] - base[e / 2]);
  sm.l[0] += p[0][0] + p[0][1] + p[1][0] + p[1][1];
  sm.l[1] += p[0][2] + p[0][3] + p[1][2] + p[1][3];
  pf[0] = cuda::pack_bf16(p[0][0], p[0][1]), pf[1] = cuda::pack_bf16(p[0][2], p[0][3]);
  pf[2] = cuda::pack_bf16(p[1][0], p[1][1]), pf[3] = cuda::pack_bf16(p[1][2], p[1][3]);
}

// The warpgroup kernel (mla_prefill_mha_wgmma.cu): whether this build and device have it (sm_90 with
// the sm_90a target built), and its launch for blocks of `rows` (64 or 128) queries (`tma`: its
// loads by TMA where the shape allows).
bool wgmma_ready();
Status launch_wgmma(const Args& a, int rows, unsigned blocks, Stream stream, bool tma);

}  // namespace tandem::kernels::mha
