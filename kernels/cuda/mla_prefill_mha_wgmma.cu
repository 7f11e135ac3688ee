// The un-absorbed MLA prefill's attention on Hopper's warpgroup MMA (mla_prefill.hpp: the contract;
// mla_prefill_mha.cu: the mma.sync kernel, its fallback). Built for the sm_90a target only
// (kernels/CMakeLists.txt): elsewhere the kernel is empty and wgmma_ready() says no.
//
// Why: the mma.sync kernel's warps each read every key and value of a chunk from shared memory
// through ldmatrix, and wait on each read; wgmma reads B straight from shared memory for a
// warpgroup of 64 queries at once, asynchronously. The walk is the same: a block takes 128 (or 64)
// queries of one head, a warpgroup per 64; chunks of 64 keys, cp.async double-buffered; per chunk
// S = Q K^T (16 products of 64 x 64 x 16, both operands in shared memory), the online softmax in
// registers (mla_prefill_mha.cuh, shared with the other kernel), then O += P V with P from
// registers (rounded to bf16 as FlashAttention does) and V N-major in shared memory, four products
// of 64 value columns per 16 keys. Shared tiles use the 128-byte swizzle (wgmma.cuh: slabs of 64
// columns), for the queries, keys and values alike. In blocks of 128 queries the two warpgroups
// take turns on the tensor cores (Turns below). The TMA form (MlaMhaKernel::wgmma_tma, shapes
// whose nope and v_dim are multiples of 64 and rope 64) loads each chunk's keys and values as
// 64 x 64 boxes through tensor maps, issued by one thread and counted on an mbarrier, instead of
// every thread's cp.async pieces (their address arithmetic and zero-filling).
#include <algorithm>
#include <cstdint>

#include "mla_prefill_mha.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

namespace tandem::kernels::mha {
namespace {

// The queries, two key buffers and two value buffers, each a multiple of 1024 bytes, plus the
// slack to start them on 1024 bytes (the swizzle's period), plus the two buffers' mbarriers.
template <int ROWS>
constexpr size_t smem_bytes() {
  return static_cast<size_t>(ROWS + 4 * kKeys) * kMaxDim * 2 + 1024 + 64;
}

// The TMA form's tensor maps (MlaMhaKernel::wgmma_tma; tma_fits): head h's key columns
// h * k_head_stride .. + nope of k_nope's rows, the rope rows, head h's value columns; rows are the
// launch's segment, zeros past it.
struct Maps {
  CUtensorMap kn, rope, v;
};

// TMA coordinates are 32-bit: a head's last column must fit.
bool tma_fits(const MlaMhaPrefill& p) {
  const long k_cols = static_cast<long>(p.heads - 1) * p.k_head_stride + p.nope, v_cols = static_cast<long>(p.heads - 1) * p.v_head_stride + p.v_dim;
  return p.nope % 64 == 0 && p.rope == 64 && p.v_dim % 64 == 0 && k_cols <= 0x7fffffffL && v_cols <= 0x7fffffffL;
}

// `n_rows` rows of a tile of `tile_rows` into the slab layout: 16-byte pieces c < pieces of row r
// from src(r, c) where live(r, c), zeros elsewhere (a zero row times a zero probability stays zero,
// where stale bits could be NaN).
template <int THREADS, class Live, class Src>
__device__ __forceinline__ void load_tile(bf16* dst, int tile_rows, int n_rows, int pieces, Live live, Src src) {
  for (int i = threadIdx.x; i < n_rows * pieces; i += THREADS) {
    const int r = i / pieces, c = i % pieces;
    const bool in = live(r, c);
    cuda::cp_async16_fill(dst + cuda::sw128(r, 8 * c, tile_rows), in ? src(r, c) : src(0, 0), in ? 16 : 0);
  }
}

// Keys and values c0 .. c0 + 63 of head h (key j is row j - key_begin of this launch's segment);
// rows past `last` and columns from nope + rope and v_dim up to 256 zero.
template <int THREADS>
__device__ __forceinline__ void load_chunk(const MlaMhaPrefill& p, int h, int c0, int last, bf16* ks, bf16* vs) {
  const int qk_pieces = (p.nope + p.rope) / 8, nope_pieces = p.nope / 8, v_pieces = p.v_dim / 8;
  const bf16* kn = static_cast<const bf16*>(p.k_nope) + static_cast<long>(h) * p.k_head_stride;
  const bf16* kr = static_cast<const bf16*>(p.k_rope);
  const bf16* v = static_cast<const bf16*>(p.v) + static_cast<long>(h) * p.v_head_stride;
  const auto row = [&](int r) { return static_cast<long>(c0 + r - p.key_begin); };
  load_tile<THREADS>(
      ks, kKeys, kKeys, kMaxDim / 8, [&](int r, int c) { return c0 + r <= last && c < qk_pieces; },
      [&](int r, int c) { return c < nope_pieces ? kn + row(r) * p.k_stride + 8 * c : kr + row(r) * p.rope_stride + 8 * (c - nope_pieces); });
  load_tile<THREADS>(
      vs, kKeys, kKeys, kMaxDim / 8, [&](int r, int c) { return c0 + r <= last && c < v_pieces; },
      [&](int r, int c) { return v + row(r) * p.v_stride + 8 * c; });
}

// Blocks of 128 queries take turns on the tensor cores (FA3's ping-pong): warpgroup w issues a
// batch of products only after the other has issued its batch, so the two batches run one after
// the other and each warpgroup's softmax runs while the other's products do. Named barriers 1 and
// 2 (1 + w: "w's turn"), both warpgroups counted: one waits on it, the other arrives. Warpgroup 1
// arrives once before the first chunk, so warpgroup 0 goes first.
template <int ROWS>
struct Turns {
  int wg;
  __device__ __forceinline__ void wait() const {
    if (ROWS == 128) asm volatile("bar.sync %0, 256;" ::"r"(1 + wg) : "memory");
  }
  __device__ __forceinline__ void pass() const {
    if (ROWS == 128) asm volatile("bar.arrive %0, 256;" ::"r"(2 - wg) : "memory");
  }
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Keys and values c0 .. c0 + 63 of head h by TMA, issued by one thread: nope / 64 key slabs and the
// rope slab, then v_dim / 64 value slabs, counted on bar. The slabs a smaller shape does not fill
// stay the zeros written once (zero_unfilled).
__device__ __forceinline__ void tma_chunk(const Args& a, const Maps& m, int h, int c0, bf16* ks, bf16* vs, std::uint64_t* bar) {
  const MlaMhaPrefill& p = a.p;
  const int row = c0 - p.key_begin, k_slabs = p.nope / 64, v_slabs = p.v_dim / 64;
  cuda::mbar_expect(bar, static_cast<unsigned>((k_slabs + 1 + v_slabs) * kKeys * 64 * 2));
  for (int j = 0; j < k_slabs; ++j) cuda::tma_load(ks + j * kKeys * 64, m.kn, h * p.k_head_stride + 64 * j, row, bar);
  cuda::tma_load(ks + k_slabs * kKeys * 64, m.rope, 0, row, bar);
  for (int j = 0; j < v_slabs; ++j) cuda::tma_load(vs + j * kKeys * 64, m.v, h * p.v_head_stride + 64 * j, row, bar);
}

// Zeros in the slabs past nope + rope and v_dim of both buffers (every thread; the products run
// 256 + 256 wide).
template <int THREADS>
__device__ __forceinline__ void zero_unfilled(const MlaMhaPrefill& p, bf16* kb0, bf16* kb1, bf16* vb0, bf16* vb1) {
  const int k_from = (p.nope + p.rope) / 64, v_from = p.v_dim / 64, per = kKeys * 64 / 8;  // 16-byte pieces a slab
  for (int i = threadIdx.x; i < 4 * per * 2; i += THREADS) {
    const int slab = i / per % 4, buf = i / (4 * per), j = i % per;
    if (slab >= k_from) reinterpret_cast<uint4*>((buf ? kb1 : kb0) + slab * kKeys * 64)[j] = uint4{0, 0, 0, 0};
    if (slab >= v_from) reinterpret_cast<uint4*>((buf ? vb1 : vb0) + slab * kKeys * 64)[j] = uint4{0, 0, 0, 0};
  }
}

// One chunk for a warpgroup: its 64 rows' scores against the chunk's 64 keys, the softmax's update,
// then O += P V over the chunk for every value column. Every shape runs as 256 + 256 wide, its
// padding zeros (exact): branches between the products would make ptxas fence before each one.
template <int ROWS>
__device__ __forceinline__ void chunk_step(const Args& a, const bf16* qs, const bf16* ks, const bf16* vs, int c0, const int (&lim)[2],
                                           cuda::FlashSoftmax& sm, float (&acc)[kMaxDim / 8][4], const Turns<ROWS>& turns) {
  const int wg = threadIdx.x / 128;
  float s[kKeys / 8][4];
#pragma unroll
  for (int n = 0; n < kKeys / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
  turns.wait();
  cuda::wgmma_fence();
#pragma unroll
  for (int k = 0; k < kMaxDim / 16; ++k) {
    const int slab = k / 4, col = (k % 4) * 16;  // 16 columns of a 64-column slab
    const bf16* qa = qs + slab * ROWS * 64 + wg * 64 * 64 + col;
    const bf16* kb = ks + slab * kKeys * 64 + col;
    cuda::wgmma_m64n64k16_ss(s, cuda::sw128_desc(qa, 16), cuda::sw128_desc(kb, 16), 1);
  }
  cuda::wgmma_commit();
  turns.pass();
  cuda::wgmma_wait<0>();
  cuda::wgmma_settle(s);

  float base[2];
  softmax_update(s, c0, lim, a.score_log2, sm, acc, base);
  unsigned pf[kKeys / 16][4];
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) probs(s, kk, base, sm, pf[kk]);
  turns.wait();
  cuda::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk)
#pragma unroll
    for (int sl = 0; sl < kMaxDim / 64; ++sl) {
      // Value columns 64 sl .. + 63 are accumulator tiles 8 sl .. 8 sl + 7.
      float(&d)[8][4] = *reinterpret_cast<float(*)[8][4]>(&acc[8 * sl]);
      cuda::wgmma_m64n64k16_rs_nmajor(d, pf[kk], cuda::sw128_desc(vs + sl * kKeys * 64 + kk * 16 * 64, kKeys * 64 * 2));
    }
  cuda::wgmma_commit();
  turns.pass();
  cuda::wgmma_wait<0>();
  cuda::wgmma_settle(acc);
}
#endif

// long-function: one smem carve-up around the double-buffered chunk loop, as the mma.sync kernel's.
template <int ROWS, bool TMA>
__global__ void __launch_bounds__(ROWS * 2, 1) mla_prefill_mha_wgmma_kernel(const __grid_constant__ Args a, const __grid_constant__ Maps m) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kThreads = ROWS * 2;  // a warpgroup per 64 queries
  extern __shared__ uint4 smem_raw[];
  const unsigned pad = (1024 - cuda::smem_addr(smem_raw) % 1024) % 1024;
  bf16* qs = reinterpret_cast<bf16*>(reinterpret_cast<char*>(smem_raw) + pad);
  auto kbuf = [&](int i) { return qs + (ROWS + 2 * i * kKeys) * kMaxDim; };
  auto vbuf = [&](int i) { return qs + (ROWS + (2 * i + 1) * kKeys) * kMaxDim; };
  std::uint64_t* bars = reinterpret_cast<std::uint64_t*>(qs + (ROWS + 4 * kKeys) * kMaxDim);
  cuda::pdl_begin();  // the queries and keys come from the kernels before
  const MlaMhaPrefill& p = a.p;
  const Tile tl = block_tile<ROWS>(a);
  if (tl.last < p.key_begin && !p.finish) return;  // its state passes on as it is

  int lim[2];
  row_limits(a, tl, lim);
  float acc[kMaxDim / 8][4];
  cuda::FlashSoftmax sm;
  begin_rows(a, tl, lim, acc, sm);

  if (tl.last >= p.key_begin) {
    const int qk_pieces = (p.nope + p.rope) / 8;
    const bf16* q = static_cast<const bf16*>(p.q) + static_cast<long>(tl.h) * p.q_head_stride;
    load_tile<kThreads>(
        qs, ROWS, ROWS, kMaxDim / 8, [&](int r, int c) { return r < tl.rows && c < qk_pieces; },
        [&](int r, int c) { return q + static_cast<long>(tl.q0 + r) * p.q_stride + 8 * c; });
    const int c_first = p.key_begin / kKeys, c_last = tl.last / kKeys;
    // The warpgroup's last key: one past its rows' chunks it skips together (wgmma is issued by all four warps).
    const int wg = threadIdx.x / 128;
    const int wg_last = wg * 64 < tl.rows ? p.first_pos + tl.q0 + min(wg * 64 + 63, tl.rows - 1) : -1;
    const Turns<ROWS> turns{wg};
    if (wg == 1) turns.pass();  // warpgroup 0 first
    if constexpr (TMA) {
      if (threadIdx.x == 0) cuda::mbar_init(&bars[0]), cuda::mbar_init(&bars[1]), cuda::mbar_fence_init();
      zero_unfilled<kThreads>(p, kbuf(0), kbuf(1), vbuf(0), vbuf(1));
      __syncthreads();  // the barriers are initialised
      if (threadIdx.x == 0) tma_chunk(a, m, tl.h, c_first * kKeys, kbuf(0), vbuf(0), &bars[0]);
    } else {
      load_chunk<kThreads>(p, tl.h, c_first * kKeys, tl.last, kbuf(0), vbuf(0));
    }
    cuda::cp_async_commit();
    for (int c = c_first; c <= c_last; ++c) {
      const int buf = (c - c_first) % 2;
      if constexpr (TMA) {
        // The other buffer was freed by the barrier ending the chunk before.
        if (c < c_last && threadIdx.x == 0) tma_chunk(a, m, tl.h, (c + 1) * kKeys, kbuf(1 - buf), vbuf(1 - buf), &bars[1 - buf]);
        if (c == c_first) cuda::cp_async_wait<0>();  // the queries
        cuda::mbar_wait(&bars[buf], static_cast<unsigned>((c - c_first) / 2 % 2));  // the buffer's use, its phase
      } else if (c < c_last) {
        load_chunk<kThreads>(p, tl.h, (c + 1) * kKeys, tl.last, kbuf(1 - buf), vbuf(1 - buf));
        cuda::cp_async_commit();
        cuda::cp_async_wait<1>();
      } else {
        cuda::cp_async_wait<0>();
      }
      cuda::fence_proxy_async();  // this thread's pieces of chunk c, visible to wgmma after the barrier
      __syncthreads();
      // Rows that all end before this chunk would add exact zeros (p = 0, the rescale 1); the
      // warpgroup still takes its two turns.
      if (wg_last >= c * kKeys) {
        chunk_step<ROWS>(a, qs, kbuf(buf), vbuf(buf), c * kKeys, lim, sm, acc, turns);
      } else {
        turns.wait(), turns.pass(), turns.wait(), turns.pass();
      }
      __syncthreads();  // chunk c's buffers are free for chunk c + 2
    }
    if (wg == 0) turns.wait();  // warpgroup 1's last pass: no barrier is left half-arrived
  }
  end_rows(a, tl, lim, acc, sm);
#else
  (void)a;
#endif
}

template <int ROWS, bool TMA>
Status launch_rows(const Args& a, const Maps& m, unsigned blocks, Stream stream) {
  static const cudaError_t configured = cudaFuncSetAttribute(mla_prefill_mha_wgmma_kernel<ROWS, TMA>,
                                                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes<ROWS>()));
  if (configured != cudaSuccess) return TANDEM_CUDA_STATUS(configured, "mla_prefill_mha (wgmma): shared memory attribute");
  return TANDEM_CUDA_STATUS(
      cuda::launch_pdl(mla_prefill_mha_wgmma_kernel<ROWS, TMA>, dim3(blocks), dim3(ROWS * 2), smem_bytes<ROWS>(), stream, a, m),
      "launch mla_prefill_mha_wgmma_kernel");
}

// The tensor maps of this launch's segment (tma_fits shapes): its rows up to the last query's key
// (a key_end past it may end the caller's buffers there; the cp.async loads stop there too).
Status encode_maps(const MlaMhaPrefill& p, Maps& m) {
  const long last_key = p.first_pos + static_cast<long>(p.n_queries);
  const long rows = (p.key_end > 0 ? std::min<long>(p.key_end, last_key) : last_key) - p.key_begin;
  if (auto e = cuda::encode_bf16_map(m.kn, p.k_nope, static_cast<long>(p.heads - 1) * p.k_head_stride + p.nope, rows, p.k_stride); !e)
    return e;
  if (auto e = cuda::encode_bf16_map(m.rope, p.k_rope, p.rope, rows, p.rope_stride); !e) return e;
  return cuda::encode_bf16_map(m.v, p.v, static_cast<long>(p.heads - 1) * p.v_head_stride + p.v_dim, rows, p.v_stride);
}

}  // namespace

bool wgmma_ready() {
  // sm_90 exactly: the sm_90a code runs on no other (later GPUs take the mma.sync kernel).
  static const bool ready = cuda::wgmma_device(smem_bytes<128>());
  return ready;
}

Status launch_wgmma(const Args& a, int rows, unsigned blocks, Stream stream, bool tma) {
  if (!wgmma_ready())
    return Error{"mla_prefill_mha: the wgmma kernel needs an sm_90 GPU (H100 / H200) and a build with the sm_90a target"};
  Maps m{};
  tma = tma && tma_fits(a.p);
  if (tma)
    if (auto e = encode_maps(a.p, m); !e) {
      if (a.p.kernel == MlaMhaKernel::wgmma_tma) return e;  // asked for by name: say why not
      tma = false;  // automatic: the cp.async loads, the same bits, a little slower
    }
  if (rows == 128) return tma ? launch_rows<128, true>(a, m, blocks, stream) : launch_rows<128, false>(a, m, blocks, stream);
  return tma ? launch_rows<64, true>(a, m, blocks, stream) : launch_rows<64, false>(a, m, blocks, stream);
}

}  // namespace tandem::kernels::mha
