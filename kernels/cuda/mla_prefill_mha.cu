// Flash attention for the un-absorbed (multi-head) form of MLA prefill (mla_prefill.hpp).
//
// A block takes 128 (or 64) consecutive queries of one head and walks their keys from key 0 in
// chunks of 64, each chunk's keys and values loaded once into shared memory (cp.async, double-
// buffered: the next chunk lands while this one is used). A warp per 16 queries, warp w owning queries 16 w .. + 15 with
// every value column: S = Q K^T on the tensor cores (mma.sync m16n8k16, bf16 in, fp32 accumulate),
// the online softmax (running max and sum per row) in registers, and O += P V with P taken straight
// from S's accumulators (an m16n8 accumulator pair is the m16k16 A operand's layout), rounded to
// bf16 as FlashAttention rounds it. Unlike the absorbed kernel, a warp scores all of a chunk's keys
// itself, so no probabilities pass through shared memory and no warps pair up.
// Shared rows are 256 entries, 16-byte units XOR-swizzled by row (cuda::swz).
#include <algorithm>
#include <cstdint>
#include <string>

#include "mla_prefill_mha.cuh"

namespace tandem::kernels {
namespace {

using cuda::aligned16;
using cuda::bf16;
using mha::Args;
using mha::kKeys;
using mha::kMaxDim;

constexpr int kRow = kMaxDim;  // bf16 per shared row
// The queries, two key buffers and two value buffers.
// Queries a block: 128 (8 warps), or 64 (4 warps) where 128s would leave multiprocessors idle.
template <int ROWS>
constexpr size_t smem_bytes() { return static_cast<size_t>(ROWS + 4 * kKeys) * kRow * 2; }

// Keys and values c0 .. c0 + 63 of head h into ks, vs (rows past `last` zero: a zero value row
// times a zero probability stays zero, where a stale one could be NaN), and zeros in the columns
// from nope + rope and v_dim up to the mma's multiple of 16.
template <int THREADS>
__device__ __forceinline__ void load_chunk(const MlaMhaPrefill& p, int h, int c0, int last, bf16* ks, bf16* vs) {
  // Key j is row j - key_begin of this launch's segment.
  const int qk_pieces = (p.nope + p.rope) / 8, nope_pieces = p.nope / 8, v_pieces = p.v_dim / 8;
  const int qk16_pieces = (qk_pieces + 1) / 2 * 2, v16_pieces = (v_pieces + 1) / 2 * 2;
  const bf16* kn = static_cast<const bf16*>(p.k_nope) + static_cast<long>(h) * p.k_head_stride;
  const bf16* kr = static_cast<const bf16*>(p.k_rope);
  const bf16* v = static_cast<const bf16*>(p.v) + static_cast<long>(h) * p.v_head_stride;
  for (int i = threadIdx.x; i < kKeys * qk16_pieces; i += THREADS) {
    const int r = i / qk16_pieces, c = i % qk16_pieces, j = c0 + r;
    const bool live = j <= last && c < qk_pieces;
    const long jj = live ? j - p.key_begin : 0;
    const bf16* src = c < nope_pieces ? kn + jj * p.k_stride + 8 * c : kr + jj * p.rope_stride + 8 * (c - nope_pieces);
    cuda::cp_async16_fill(ks + cuda::swz(r, c, kRow), src, live ? 16 : 0);
  }
  for (int i = threadIdx.x; i < kKeys * v16_pieces; i += THREADS) {
    const int r = i / v16_pieces, c = i % v16_pieces, j = c0 + r;
    const bool live = j <= last && c < v_pieces;
    cuda::cp_async16_fill(vs + cuda::swz(r, c, kRow), v + (live ? j - p.key_begin : 0) * p.v_stride + 8 * c, live ? 16 : 0);
  }
}

// One chunk for a warp: scores of its 16 rows against the chunk's 64 keys, masked by each row's
// last key (lim), the online softmax's update, then O += P V over the chunk for every value column.
// long-function: scores, softmax update and values form one sequence over the same registers.
__device__ __forceinline__ void chunk_step(const Args& a, const bf16* qs, const bf16* ks, const bf16* vs, int c0, const int (&lim)[2],
                                           cuda::FlashSoftmax& sm, float (&acc)[kMaxDim / 8][4]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sw = lane % 8;
  const int qk16 = (a.p.nope + a.p.rope + 15) / 16 * 16;
  float s[kKeys / 8][4];
#pragma unroll
  for (int n = 0; n < kKeys / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
  // ldmatrix rows: lane l gives row l % 8 (+ 8) of its matrix; every base row is a multiple of 8,
  // so the lane's swizzle is l % 8.
  const bf16* qa = qs + (warp * 16 + lane % 8 + 8 * ((lane / 8) % 2)) * kRow;
  const int qu = lane / 16;
  const bf16* kb = ks + (lane % 8 + 8 * (lane / 16)) * kRow;
  const int ku = (lane / 8) % 2;
#pragma unroll 2
  for (int k0 = 0; k0 < qk16; k0 += 16) {
    unsigned qf[4];
    cuda::ldsm_x4(qf, qa + (((k0 / 8 + qu) ^ sw) * 8));
#pragma unroll
    for (int np = 0; np < kKeys / 16; ++np) {
      unsigned kf[4];
      cuda::ldsm_x4(kf, kb + np * 16 * kRow + (((k0 / 8 + ku) ^ sw) * 8));
      cuda::mma_m16n8k16(s[2 * np], qf, kf[0], kf[1]);
      cuda::mma_m16n8k16(s[2 * np + 1], qf, kf[2], kf[3]);
    }
  }
  float base[2];
  mha::softmax_update(s, c0, lim, a.score_log2, sm, acc, base);
  // P V, 16 keys at a time: the accumulators of key tiles 2 kk and 2 kk + 1 are the A fragment.
  const bf16* vb = vs + (lane % 8 + 8 * ((lane / 8) % 2)) * kRow;
  const int vu = lane / 16;
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    unsigned pf[4];
    mha::probs(s, kk, base, sm, pf);
#pragma unroll
    for (int dp = 0; dp < kMaxDim / 16; ++dp) {
      if (dp * 16 >= a.p.v_dim) break;
      unsigned vf[4];
      cuda::ldsm_x4_trans(vf, vb + kk * 16 * kRow + (((vu + 2 * dp) ^ sw) * 8));
      cuda::mma_m16n8k16(acc[2 * dp], pf, vf[0], vf[1]);
      cuda::mma_m16n8k16(acc[2 * dp + 1], pf, vf[2], vf[3]);
    }
  }
}

// long-function: one smem carve-up around the double-buffered chunk loop and the output's write.
template <int ROWS>
__global__ void __launch_bounds__(ROWS * 2, 1) mla_prefill_mha_kernel(Args a) {
  constexpr int kRows = ROWS, kThreads = ROWS * 2;  // a warp per 16 queries
  extern __shared__ uint4 smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  auto kbuf = [&](int i) { return qs + (kRows + 2 * i * kKeys) * kRow; };
  auto vbuf = [&](int i) { return qs + (kRows + (2 * i + 1) * kKeys) * kRow; };
  cuda::pdl_begin();  // the queries and keys come from the kernels before
  const MlaMhaPrefill& p = a.p;
  const mha::Tile tl = mha::block_tile<kRows>(a);
  const int h = tl.h, q0 = tl.q0, rows = tl.rows, last = tl.last;
  if (last < p.key_begin && !p.finish) return;  // its state passes on as it is

  int lim[2];
  mha::row_limits(a, tl, lim);
  float acc[kMaxDim / 8][4];
  cuda::FlashSoftmax sm;
  mha::begin_rows(a, tl, lim, acc, sm);

  if (last >= p.key_begin) {
    const int qk_pieces = (p.nope + p.rope) / 8, qk16_pieces = (qk_pieces + 1) / 2 * 2;
    const bf16* q = static_cast<const bf16*>(p.q) + static_cast<long>(h) * p.q_head_stride;
    for (int i = threadIdx.x; i < kRows * qk16_pieces; i += kThreads) {
      const int r = i / qk16_pieces, c = i % qk16_pieces;
      const bool live = r < rows && c < qk_pieces;
      cuda::cp_async16_fill(qs + cuda::swz(r, c, kRow), q + (live ? q0 + r : 0) * p.q_stride + 8 * c, live ? 16 : 0);
    }
    const int c_first = p.key_begin / kKeys, c_last = last / kKeys;
    load_chunk<kThreads>(p, h, c_first * kKeys, last, kbuf(0), vbuf(0));
    cuda::cp_async_commit();
    for (int c = c_first; c <= c_last; ++c) {
      const int buf = (c - c_first) % 2;
      if (c < c_last) {
        load_chunk<kThreads>(p, h, (c + 1) * kKeys, last, kbuf(1 - buf), vbuf(1 - buf));
        cuda::cp_async_commit();
        cuda::cp_async_wait<1>();
      } else {
        cuda::cp_async_wait<0>();
      }
      __syncthreads();  // chunk c (and the queries) landed for every thread
      // A warp whose rows all end before this chunk skips it: it would add exact zeros.
      if (__any_sync(0xffffffffu, max(lim[0], lim[1]) >= c * kKeys)) chunk_step(a, qs, kbuf(buf), vbuf(buf), c * kKeys, lim, sm, acc);
      __syncthreads();  // chunk c's buffers are free for chunk c + 2
    }
  }

  mha::end_rows(a, tl, lim, acc, sm);
}

template <int ROWS>
Status launch(const Args& a, unsigned blocks, Stream stream) {
  static const cudaError_t configured = cudaFuncSetAttribute(mla_prefill_mha_kernel<ROWS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                             static_cast<int>(smem_bytes<ROWS>()));
  if (configured != cudaSuccess) return TANDEM_CUDA_STATUS(configured, "mla_prefill_mha: shared memory attribute");
  return TANDEM_CUDA_STATUS(cuda::launch_pdl(mla_prefill_mha_kernel<ROWS>, dim3(blocks), dim3(ROWS * 2), smem_bytes<ROWS>(), stream, a),
                            "launch mla_prefill_mha_kernel");
}

}  // namespace

bool mla_prefill_mha_fits(const MlaMhaPrefill& a) {
  const int qk = a.nope + a.rope;
  const bool dims = a.heads >= 1 && a.nope >= 0 && a.rope >= 0 && a.nope % 8 == 0 && a.rope % 8 == 0 && qk >= 8 && qk <= kMaxDim &&
                    a.v_dim % 8 == 0 && a.v_dim >= 8 && a.v_dim <= kMaxDim;
  const bool strides = a.q_stride % 8 == 0 && a.q_head_stride % 8 == 0 && a.k_stride % 8 == 0 && a.k_head_stride % 8 == 0 &&
                       a.rope_stride % 8 == 0 && a.v_stride % 8 == 0 && a.v_head_stride % 8 == 0 && a.out_stride % 8 == 0 &&
                       a.out_head_stride % 8 == 0;
  const bool pointers = aligned16(a.q) && aligned16(a.k_nope) && aligned16(a.k_rope) && aligned16(a.v) && aligned16(a.out);
  return dims && strides && pointers && static_cast<size_t>(cuda::smem_optin()) >= smem_bytes<128>();
}

Status mla_prefill_mha_cuda(const MlaMhaPrefill& p, Stream stream) {
  if (p.n_queries < 0 || p.first_pos < 0) return Error{"mla_prefill_mha: n_queries and first_pos must be >= 0"};
  if (p.n_queries == 0) return {};
  if (!mla_prefill_mha_fits(p))
    return Error{"mla_prefill_mha: the shape does not fit (mla_prefill_mha_fits: nope, rope and v_dim multiples of 8, qk and v_dim up to 256, "
                 "16-byte aligned pointers, strides multiples of 8, 192 KiB of shared memory a block)"};
  // A segment ends on a chunk of keys or past the last query: the mask is each query's position,
  // so a chunk cut short before it would score the zero rows past key_end.
  const bool end_ok = p.key_end == 0 || (p.key_end > p.key_begin && (p.key_end % kMlaMhaSegmentAlign == 0 ||
                                                                      p.key_end >= p.first_pos + p.n_queries));
  if (p.key_begin < 0 || p.key_begin % kMlaMhaSegmentAlign != 0 || !end_ok)
    return Error{"mla_prefill_mha: key_begin must be a multiple of " + std::to_string(kMlaMhaSegmentAlign) +
                 ", key_end 0 or past key_begin, and a multiple of it unless past the last query"};
  if ((p.resume || !p.finish) && (p.state == nullptr || !aligned16(p.state)))
    return Error{"mla_prefill_mha: a segment that resumes or does not finish needs a 16-byte aligned state"};
  Args a{};
  a.p = p;
  a.score_log2 = p.scale * 1.4426950408889634f;
  // 128 queries a block unless that leaves multiprocessors idle (a query's bits are the same either
  // way: its warp does the same products in the same order).
  const int rows = p.tile_rows == 64 || p.tile_rows == 128 ? p.tile_rows
                   : static_cast<long>((p.n_queries + 127) / 128) * p.heads >= cuda::sm_count() ? 128 : 64;
  a.head_tiles = (p.n_queries + rows - 1) / rows;
  const long blocks = static_cast<long>(a.head_tiles) * p.heads;
  if (blocks > 0x7fffffffL) return Error{"mla_prefill_mha: too many queries for one launch"};
  // Automatic: wgmma with TMA loads where this build and device have it (1.3-1.7x the mma.sync
  // kernel on an H100, engine/bench/results/h100-s12-wgmma-2026-12-07.md; TMA 1.15x / 1.39x the
  // cp.async loads' step at 1x4096 / 32768, h100-s12-tma-2026-12-07.md).
  const bool tma = p.kernel == MlaMhaKernel::wgmma_tma || (p.kernel == MlaMhaKernel::automatic && mha::wgmma_ready());
  const bool wgmma = tma || p.kernel == MlaMhaKernel::wgmma;
  if (wgmma) return mha::launch_wgmma(a, rows, static_cast<unsigned>(blocks), stream, tma);
  return rows == 128 ? launch<128>(a, static_cast<unsigned>(blocks), stream) : launch<64>(a, static_cast<unsigned>(blocks), stream);
}

bool mla_prefill_mha_wgmma_ready() { return mha::wgmma_ready(); }

}  // namespace tandem::kernels
