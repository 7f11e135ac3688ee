// Flash-style prefill attention for absorbed MLA (mla_prefill.hpp).
//
// A block takes 64 consecutive (token, head) rows of the queries (3.2 tokens at 20 heads) and walks
// their sequence's keys from key 0 in chunks of 64 rows, each chunk loaded once into shared memory
// (cp.async, double-buffered: the next chunk lands while this one is used; fp8 rows are converted
// to bf16 on the way, exactly, their scale applied to the scores and the output). Eight warps in
// four pairs: the pair of warps w and w + 4 owns query rows 16 w .. + 15, warp w value columns
// 0..255 and warp w + 4 columns 256..511 (the latent output's 512 columns are too many
// accumulators for one warp). Each warp of a pair scores half of the chunk's keys (S = Q K^T on
// the tensor cores, mma.sync m16n8k16, bf16 in, fp32 accumulate); the pair swaps its row maxima
// and writes its probabilities (bf16) to shared memory, and each warp then adds P V over all 64
// keys for its columns (O += P V, V = the chunk's first v_dim columns). The online softmax (running
// max and sum per row) is kept in registers by both warps alike: the same values, the same bits.
// Rows of a tile that belong to different sequences (several prompts in one launch) are served in
// runs of consecutive tokens of one sequence; a row outside the run is masked for it.
// Shared rows are 576 entries without padding; 16-byte units are XOR-swizzled by row (unit u of
// row r at u ^ (r % 8)) so that ldmatrix's eight rows fall in eight different bank groups: the
// padding's 3 KB would not leave room for the probabilities beside the 216 KB of queries and keys.
#include <algorithm>
#include <cstdint>

#include "common.cuh"
#include "flash_tiles.cuh"
#include "tandem/kernels/launch.hpp"
#include "tandem/kernels/mla_prefill.hpp"

namespace tandem::kernels {
namespace {

using cuda::aligned16;
using cuda::bf16;
using fp8 = __nv_fp8_storage_t;

constexpr int kRows = 64;                   // (token, head) rows a block
constexpr int kKeys = 64;                   // key rows a chunk
constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr int kMaxQk = 576, kMaxV = 512;
constexpr int kRow = kMaxQk;                // bf16 per shared row (swizzled, not padded)
constexpr int kColsPerWarp = kMaxV / 2;     // value columns a warp accumulates
constexpr int kHalfKeys = kKeys / 2;        // keys a warp scores
// Queries, two key buffers, the probabilities [64 rows][64 keys] bf16, the row maxima [2][64].
constexpr size_t kSmem = static_cast<size_t>(kRows + 2 * kKeys) * kRow * 2 + kRows * kKeys * 2 + 2 * kRows * 4;

struct Args {
  const bf16* q;
  const std::int32_t *token_seq, *token_pos, *block_tables;
  const void* cache;
  bf16* out;
  int n_tokens, q_heads, qk_dim, v_dim, block_size, max_blocks;
  int qk16;  // qk_dim rounded up to the mma's 16 (the columns past qk_dim zero in shared memory)
  float score_log2;  // softmax scale x row scale x log2(e): scores in the exp2 domain
  float out_scale;   // row scale (fp8), applied to the output
};

using cuda::ldsm_x4;
using cuda::ldsm_x4_trans;
using cuda::mma_m16n8k16;
using cuda::pack_bf16;
using cuda::smem_optin;
using cuda::swz;
__device__ __forceinline__ std::uint32_t fp8x2_to_bf16x2(std::uint32_t two) {
  const float2 f = cuda::fp8x2_to_float2(two);
  return pack_bf16(f.x, f.y);
}

// Key rows c0 .. c0 + 63 of the table's sequence into ks (rows past `last` zero: a zero row scores
// finite, and is masked), and zeros in the columns from qk_dim up to the mma's multiple of 16; bf16
// rows by cp.async (committed by the caller), fp8 ones loaded and converted here.
template <class KV>
__device__ __forceinline__ void load_keys(const Args& a, const std::int32_t* table, int c0, int last, bf16* ks) {
  const KV* cache = static_cast<const KV*>(a.cache);
  const int pieces = a.qk16 / 8;  // 8 entries a piece
  for (int i = threadIdx.x; i < kKeys * pieces; i += kThreads) {
    const int r = i / pieces, c = i % pieces, j = c0 + r;
    bf16* dst = ks + swz(r, c, kRow);
    const bool live = j <= last && 8 * c < a.qk_dim;
    const long slot = live ? static_cast<long>(table[j / a.block_size]) * a.block_size + j % a.block_size : 0;
    const KV* src = cache + slot * a.qk_dim + 8 * c;
    if constexpr (sizeof(KV) == 2) {
      cuda::cp_async16_fill(dst, src, live ? 16 : 0);
    } else {
      uint4 o = make_uint4(0, 0, 0, 0);
      if (live) {
        const uint2 raw = *reinterpret_cast<const uint2*>(src);
        o = make_uint4(fp8x2_to_bf16x2(raw.x), fp8x2_to_bf16x2(raw.x >> 16), fp8x2_to_bf16x2(raw.y), fp8x2_to_bf16x2(raw.y >> 16));
      }
      *reinterpret_cast<uint4*>(dst) = o;
    }
  }
}

__device__ __forceinline__ void pair_sync(int rg) { asm volatile("bar.sync %0, 64;" ::"r"(1 + rg) : "memory"); }

// One chunk for a warp: scores of its 16 rows against its half of the chunk's keys, masked by each
// row's last key (lim); the row maxima swapped with the other warp of the pair (mxs) and the
// online softmax's update; its probabilities into ps; then O += P V over all 64 keys for the
// warp's value columns. Both warps of a pair call it for the same chunks (they have the same lim).
// long-function: scores, the pair's max swap, P, values: one sequence between the pair's two barriers.
__device__ __forceinline__ void chunk_step(const Args& a, const bf16* qs, const bf16* ks, bf16* ps, float* mxs, int c0,
                                           const int (&lim)[2], cuda::FlashSoftmax& sm, float (&acc)[kColsPerWarp / 8][4]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, sw = lane % 8;
  const int rg = warp % 4, half = warp / 4, col0 = half * kColsPerWarp, key0 = half * kHalfKeys;
  float s[kHalfKeys / 8][4];
#pragma unroll
  for (int n = 0; n < kHalfKeys / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
  // ldmatrix rows: lane l gives row l % 8 (+ 8) of its matrix; every base row is a multiple of 8,
  // so the lane's swizzle is l % 8.
  const bf16* qa = qs + (rg * 16 + lane % 8 + 8 * ((lane / 8) % 2)) * kRow;
  const int qu = lane / 16;
  const bf16* kb = ks + (key0 + lane % 8 + 8 * (lane / 16)) * kRow;
  const int ku = (lane / 8) % 2;
  for (int k0 = 0; k0 < a.qk16; k0 += 16) {
    std::uint32_t qf[4];
    ldsm_x4(qf, qa + (((k0 / 8 + qu) ^ sw) * 8));
#pragma unroll
    for (int np = 0; np < kHalfKeys / 16; ++np) {
      std::uint32_t kf[4];
      ldsm_x4(kf, kb + np * 16 * kRow + (((k0 / 8 + ku) ^ sw) * 8));
      mma_m16n8k16(s[2 * np], qf, kf[0], kf[1]);
      mma_m16n8k16(s[2 * np + 1], qf, kf[2], kf[3]);
    }
  }
  // Mask, row max (the row's four lanes, then the pair's two warps), rescale.
  float mx[2];
  cuda::flash_mask_max(s, c0 + key0, lim, a.score_log2, mx);
  if (t == 0) mxs[half * kRows + rg * 16 + g] = mx[0], mxs[half * kRows + rg * 16 + g + 8] = mx[1];
  pair_sync(rg);
  float corr[2], base[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float other = mxs[(1 - half) * kRows + rg * 16 + g + 8 * h];
    const float m_new = fmaxf(sm.m[h], fmaxf(mx[h], other));
    base[h] = m_new == -INFINITY ? 0.f : m_new;  // a row with nothing yet: every p is 0, no NaN
    corr[h] = exp2f(sm.m[h] - base[h]);
    sm.m[h] = m_new;
    sm.l[h] *= corr[h];
  }
#pragma unroll
  for (int n = 0; n < kColsPerWarp / 8; ++n) acc[n][0] *= corr[0], acc[n][1] *= corr[0], acc[n][2] *= corr[1], acc[n][3] *= corr[1];
  // P = exp2(s - max) as bf16 pairs into ps (row-major, 64 keys a row: 8 units, swizzled).
#pragma unroll
  for (int n = 0; n < kHalfKeys / 8; ++n) {
    const float p0 = exp2f(s[n][0] - base[0]), p1 = exp2f(s[n][1] - base[0]), p2 = exp2f(s[n][2] - base[1]), p3 = exp2f(s[n][3] - base[1]);
    sm.l[0] += p0 + p1, sm.l[1] += p2 + p3;
    const int r = rg * 16 + g, u = (key0 / 8) + n;
    *reinterpret_cast<std::uint32_t*>(ps + swz(r, u, kKeys) + 2 * t) = pack_bf16(p0, p1);
    *reinterpret_cast<std::uint32_t*>(ps + swz(r + 8, u, kKeys) + 2 * t) = pack_bf16(p2, p3);
  }
  pair_sync(rg);
  // O += P V: P's 16 x 16 blocks as the A operand, V's through ldmatrix.trans (keys down, columns across).
  const bf16* pa = ps + (rg * 16 + lane % 8 + 8 * ((lane / 8) % 2)) * kKeys;
  const bf16* vb = ks + (lane % 8 + 8 * ((lane / 8) % 2)) * kRow;
  const int vu = col0 / 8 + lane / 16;
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    std::uint32_t pf[4];
    ldsm_x4(pf, pa + (((2 * kk + lane / 16) ^ sw) * 8));
#pragma unroll
    for (int dp = 0; dp < kColsPerWarp / 16; ++dp) {
      if (col0 + dp * 16 >= a.v_dim) break;
      std::uint32_t vf[4];
      ldsm_x4_trans(vf, vb + kk * 16 * kRow + (((vu + 2 * dp) ^ sw) * 8));
      mma_m16n8k16(acc[2 * dp], pf, vf[0], vf[1]);
      mma_m16n8k16(acc[2 * dp + 1], pf, vf[2], vf[3]);
    }
  }
}

// long-function: one smem carve-up; the run loop (a sequence's rows) around the double-buffered chunk loop.
template <class KV>
__global__ void __launch_bounds__(kThreads, 1) mla_prefill_flash_kernel(Args a) {
  extern __shared__ uint4 smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  auto kbuf = [&](int i) { return qs + (kRows + i * kKeys) * kRow; };  // the two key buffers
  bf16* ps = qs + (kRows + 2 * kKeys) * kRow;
  float* mxs = reinterpret_cast<float*>(ps + kRows * kKeys);
  __shared__ int row_lim[kRows];  // the run's last key of each row, -1 for a row outside the run
  cuda::pdl_begin();  // the queries come from the kernel before

  // The longest contexts first (the last tiles of a prompt), so the short ones fill the tail.
  const int tile = static_cast<int>(gridDim.x - 1 - blockIdx.x);
  const long R = static_cast<long>(a.n_tokens) * a.q_heads, row0 = static_cast<long>(tile) * kRows;
  const int rows = static_cast<int>(min(static_cast<long>(kRows), R - row0));
  const int tok0 = static_cast<int>(row0 / a.q_heads), tok1 = static_cast<int>((row0 + rows - 1) / a.q_heads);

  // The queries (rows past the last and columns past qk_dim zero), with the first chunk's keys.
  for (int i = threadIdx.x; i < kRows * (a.qk16 / 8); i += kThreads) {
    const int r = i / (a.qk16 / 8), c = i % (a.qk16 / 8);
    const bool live = r < rows && 8 * c < a.qk_dim;
    cuda::cp_async16_fill(qs + swz(r, c, kRow), a.q + (live ? (row0 + r) * a.qk_dim + 8 * c : 0), live ? 16 : 0);
  }

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int rg = warp % 4, col0 = (warp / 4) * kColsPerWarp;
  float acc[kColsPerWarp / 8][4];
#pragma unroll
  for (int n = 0; n < kColsPerWarp / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  cuda::FlashSoftmax sm;

  for (int run0 = tok0; run0 <= tok1;) {
    const int seq = a.token_seq[run0];
    int run1 = run0, last = a.token_pos[run0];
    while (run1 < tok1 && a.token_seq[run1 + 1] == seq) ++run1, last = max(last, a.token_pos[run1]);
    __syncthreads();  // the last run's row_lim and key buffers are no longer read
    for (int r = threadIdx.x; r < kRows; r += kThreads) {
      const long tok = (row0 + r) / a.q_heads;
      row_lim[r] = r < rows && tok >= run0 && tok <= run1 ? a.token_pos[tok] : -1;
    }
    const std::int32_t* table = a.block_tables + static_cast<long>(seq) * a.max_blocks;
    load_keys<KV>(a, table, 0, last, kbuf(0));
    cuda::cp_async_commit();
    __syncthreads();  // row_lim visible
    const int lim[2] = {row_lim[rg * 16 + g], row_lim[rg * 16 + g + 8]};
    const int chunks = last / kKeys + 1;
    for (int c = 0; c < chunks; ++c) {
      if (c + 1 < chunks) {
        load_keys<KV>(a, table, (c + 1) * kKeys, last, kbuf((c + 1) % 2));
        cuda::cp_async_commit();
        cuda::cp_async_wait<1>();
      } else {
        cuda::cp_async_wait<0>();
      }
      __syncthreads();  // chunk c (and the queries) landed for every thread
      // A pair whose rows all end before this chunk skips it: for them it would add exact zeros
      // (both warps of a pair see the same rows, so they skip together, as their barriers need).
      if (__any_sync(0xffffffffu, max(lim[0], lim[1]) >= c * kKeys)) chunk_step(a, qs, kbuf(c % 2), ps, mxs, c * kKeys, lim, sm, acc);
      __syncthreads();  // chunk c's buffer is free for chunk c + 2
    }
    run0 = run1 + 1;
  }

  // O / l (the sum over the row's four lanes and the pair's two warps, each of which summed its
  // own keys), times the row scale, as bf16.
  const int half = warp / 4;
  float lq[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    lq[h] = sm.l[h];
    lq[h] += __shfl_xor_sync(0xffffffffu, lq[h], 1);
    lq[h] += __shfl_xor_sync(0xffffffffu, lq[h], 2);
  }
  __syncthreads();  // every pair is past its last use of mxs
  if (t == 0) mxs[half * kRows + rg * 16 + g] = lq[0], mxs[half * kRows + rg * 16 + g + 8] = lq[1];
  __syncthreads();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = rg * 16 + g + 8 * h;
    const float l = lq[h] + mxs[(1 - half) * kRows + r];  // the same sum in both warps (a + b == b + a)
    if (r >= rows) continue;
    const float f = l > 0.f ? a.out_scale / l : 0.f;
    bf16* o = a.out + (row0 + r) * a.v_dim;
#pragma unroll
    for (int n = 0; n < kColsPerWarp / 8; ++n) {
      const int col = col0 + 8 * n + 2 * t;
      if (col >= a.v_dim) break;
      *reinterpret_cast<std::uint32_t*>(o + col) = pack_bf16(acc[n][2 * h] * f, acc[n][2 * h + 1] * f);
    }
  }
}

template <class KV>
cudaError_t launch(const Args& args, unsigned tiles, Stream stream) {
  static const cudaError_t configured =
      cudaFuncSetAttribute(mla_prefill_flash_kernel<KV>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem));
  if (configured != cudaSuccess) return configured;
  return cuda::launch_pdl(mla_prefill_flash_kernel<KV>, dim3(tiles), dim3(kThreads), kSmem, stream, args);
}

}  // namespace

bool mla_prefill_flash_fits(DType act, int q_heads, const PagedKvLayout& l) {
  return act == DType::bf16 && l.v_in_k && l.kv_heads == 1 && l.block_size > 0 && l.k_scale > 0.f && q_heads >= 1 &&
         l.qk_dim % 8 == 0 && l.v_dim % 8 == 0 && l.v_dim >= 8 && l.v_dim <= l.qk_dim && l.qk_dim <= kMaxQk && l.v_dim <= kMaxV &&
         (l.dtype == DType::bf16 || l.dtype == DType::fp8_e4m3) && static_cast<size_t>(smem_optin()) >= kSmem + kRows * sizeof(int);
}

Status mla_prefill_flash_cuda(const void* q, int n_tokens, const std::int32_t* token_seq, const std::int32_t* token_pos,
                              int q_heads, const PagedKvLayout& l, const void* cache, const std::int32_t* block_tables,
                              int max_blocks_per_seq, float scale, void* out, Stream stream) {
  if (n_tokens == 0) return {};
  if (n_tokens < 0 || !mla_prefill_flash_fits(DType::bf16, q_heads, l))
    return Error{"mla_prefill_flash: the shape does not fit (mla_prefill_flash_fits: absorbed MLA, qk_dim/v_dim multiples of 8 up to "
                 "576/512, bf16 or fp8 pool, 219 KiB of shared memory a block)"};
  if (!aligned16(q) || !aligned16(cache) || !aligned16(out)) return Error{"mla_prefill_flash: q, cache and out must be 16-byte aligned"};
  if (max_blocks_per_seq <= 0) return Error{"mla_prefill_flash: max_blocks_per_seq must be > 0"};
  Args a{};
  a.q = static_cast<const bf16*>(q), a.token_seq = token_seq, a.token_pos = token_pos, a.block_tables = block_tables;
  a.cache = cache, a.out = static_cast<bf16*>(out);
  a.n_tokens = n_tokens, a.q_heads = q_heads, a.qk_dim = l.qk_dim, a.v_dim = l.v_dim, a.block_size = l.block_size;
  a.max_blocks = max_blocks_per_seq, a.qk16 = (l.qk_dim + 15) / 16 * 16;
  a.out_scale = l.dtype == DType::fp8_e4m3 ? l.k_scale : 1.f;
  a.score_log2 = scale * a.out_scale * 1.4426950408889634f;
  const long tiles = (static_cast<long>(n_tokens) * q_heads + kRows - 1) / kRows;
  if (tiles > 0x7fffffffL) return Error{"mla_prefill_flash: too many rows for one launch"};
  const cudaError_t e = l.dtype == DType::bf16 ? launch<bf16>(a, static_cast<unsigned>(tiles), stream)
                                                : launch<fp8>(a, static_cast<unsigned>(tiles), stream);
  return TANDEM_CUDA_STATUS(e, "launch mla_prefill_flash_kernel");
}

}  // namespace tandem::kernels
