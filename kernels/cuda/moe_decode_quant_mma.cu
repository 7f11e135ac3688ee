// moe_decode_quant.cu's two launches on the tensor cores (mma.sync m16n8k16, bf16 in, fp32 sums).
//
// Why: the CUDA-core kernels spend about six lane instructions a weight beyond its decoding (the
// bf16 rounding as a float, the input's conversion, one fmaf), which caps fp8 experts near 40% of
// the bandwidth and leaves NVFP4 (half the bytes, the same instructions) no faster. Here a weight
// costs its decoding into bf16 pairs only (quant::decode_bf16: the very bf16 weights the
// dequantisation writes and the CPU reference multiplies by), and the tensor core does the
// products. So the function is unchanged: bf16(value * scale) times bf16 inputs, summed in fp32
// (in another order than the CUDA-core chain: results agree to fp32 rounding, not bit for bit).
// NVFP4 pairs a word's nibbles i and i + 4 (quant::decode_bf16_nvfp4_paired, x paired alike),
// which halves the bit placement's instructions.
//
// A "source" is what one set of weight rows is applied to: a routed expert with its columns (the
// (token, slot) pairs routed to it: grouped by moe_rows::group_cuda when there are a workspace and
// two or more tokens, else one source a pair), or the shared experts with every token as a column.
// The columns of a source are the mma's n dimension, 8 at a time.
//   gate_up  a block per (source, 16 rows): its 4 warps split `hidden` in fixed ranges, each lane
//            decodes the 16-input chunks of rows g and g + 8 (g = lane / 4) at input 64 s + 16 (lane
//            % 4) of k step s; the warps' sums are added in warp order, then silu(gate) * up -> act.
//   down     a block per 16 output rows: its warps take (source, split) items, each the source's
//            inputs in one of kSplits fixed ranges, and leave per-column sums in shared memory; then
//            per token: sum over slots in order of weight * (its splits in order), plus the shared.
// A column's sums depend only on its own inputs and these fixed ranges, never on the other columns
// (the tensor core computes each column alone), so a token gets the same bits alone, per pair or
// grouped, whatever the other tokens of the step (batch invariance; gpu_check compares them).
#include <algorithm>
#include <cstdint>

#include "common.cuh"
#include "moe_decode_rows.cuh"
#include "quant_chunk.cuh"
#include "rows_mma.cuh"
#include "tandem/kernels/launch.hpp"
#include "tandem/kernels/quant_gemv.hpp"

namespace tandem::kernels {
namespace {

using cuda::bf16;
constexpr int kTile = 16;        // weight rows a tile (the mma's m)
constexpr int kGateWarps = 4;    // a gate_up block's warps, splitting hidden
constexpr int kDownWarps = 8;    // a down block's warps, taking (source, split) items
constexpr int kSplits = 4;       // down: each source's inputs in kSplits ranges
constexpr int kMaxCols = 32;     // columns a source holds (kQuantDecodeTokens tokens of the shared experts)
constexpr int kGroups = kMaxCols / 8;
// A launch's kernels hold NG groups of 8 columns in registers (1, 2 or 4: the step's tokens), the
// same sums for a column whatever NG.
constexpr int kTopKMax = 8;
// k steps whose chunks a lane has in flight: 128 bytes of gate_up weights (4 chunks a step), 192
// of down's (2 a step) in fp8; NVFP4 chunks are half the bytes.
template <QuantFormat F>
constexpr int kGateLoads = F == QuantFormat::nvfp4 ? 4 : 2;
template <QuantFormat F>
constexpr int kDownLoads = F == QuantFormat::nvfp4 ? 8 : 6;
constexpr long kDownSmemMax = 160 * 1024;

using moe_rows::act_width;

__host__ __device__ inline bool grouped_mode(const MoeDecodeArgs& a) { return a.groups && a.tokens >= 2; }
// Routed sources at most: experts in use (grouped) or pairs.
int routed_cap(const MoeDecodeArgs& a) { return grouped_mode(a) ? std::min(a.experts, a.tokens * a.top_k) : a.tokens * a.top_k; }

// Routed source j of the launch: its expert, column count and column -> pair map.
struct Source {
  int expert = 0, cols = 0;
  const std::int32_t* list = nullptr;  // grouped: the expert's pairs; nullptr: column 0 is pair `pair`
  int pair = 0;
  bool live = false;
  __device__ int pair_of(int col) const { return list ? __ldcg(list + col) : pair; }
};
__device__ __forceinline__ Source routed_source(const MoeDecodeArgs& a, int j) {
  Source s;
  if (grouped_mode(a)) {
    const moe_rows::Groups g(a.groups, a.experts, a.tokens, a.top_k);
    if (j >= __ldcg(g.n)) return s;
    s.expert = __ldcg(g.used + j);
    s.cols = __ldcg(g.count + s.expert), s.list = g.list + static_cast<long>(s.expert) * a.tokens;
  } else {
    if (j >= a.tokens * a.top_k) return s;
    s.expert = __ldcg(a.expert + j), s.cols = 1, s.pair = j;
  }
  s.live = true;
  return s;
}

// The 16 inputs 16 c .. 16 c + 15 of a bf16 row as two mma x slabs, paired as decode_or_zero pairs
// the weights (zeros past the row's chunks or for an absent column).
template <QuantFormat F>
__device__ __forceinline__ void load_x(const bf16* row, int c, bool in, uint4& x0, uint4& x1) {
  if (row && in) {
    const uint4* p = reinterpret_cast<const uint4*>(row + 16L * c);
    x0 = p[0], x1 = p[1];
    if constexpr (F == QuantFormat::nvfp4) x0 = quant::pair_x_nvfp4(x0), x1 = quant::pair_x_nvfp4(x1);
  } else {
    x0 = x1 = make_uint4(0u, 0u, 0u, 0u);
  }
}
__device__ __forceinline__ uint4 words(const unsigned (&w)[8], int half) {
  return make_uint4(w[4 * half], w[4 * half + 1], w[4 * half + 2], w[4 * half + 3]);
}
// c += (rows g, g + 8 of a chunk's 16 inputs) . (x column's same 16 inputs).
__device__ __forceinline__ void mma_chunk(float (&c)[4], const unsigned (&r0)[8], const unsigned (&r1)[8], const uint4& x0,
                                          const uint4& x1) {
  mma_rows::mma_slab(c, words(r0, 0), words(r1, 0), x0);
  mma_rows::mma_slab(c, words(r0, 1), words(r1, 1), x1);
}
// A chunk's weights as mma pairs (NVFP4 in decode_bf16_nvfp4_paired's pairing, which load_x
// gives x too), or zeros past the row.
template <QuantFormat F>
__device__ __forceinline__ void decode_or_zero(const quant::Chunk& c, bool in, unsigned (&w)[8]) {
  if (in) {
    if constexpr (F == QuantFormat::nvfp4)
      quant::decode_bf16_nvfp4_paired(c, w);
    else
      quant::decode_bf16<F>(c, w);
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = 0u;
  }
}

// The gate_up block's results into act: per (row, column) its warps' sums in warp order, then
// silu(gate) * up rounded to bf16. Result (row, col) sits at lane (row % 8) * 4 + (col % 8) / 2,
// entry (row / 8) * 2 + col % 2 of its column group (gate entries 0..3, up 4..7).
template <int NG>
__device__ __forceinline__ void store_act(const MoeDecodeArgs& a, long aw, const Source& src, bool shared, int o0,
                                          const float (&red)[kGateWarps][NG][32][8]) {
  for (int i = threadIdx.x; i < kTile * src.cols; i += kGateWarps * 32) {
    const int row = i % kTile, col = i / kTile, cg = col / 8, n = col % 8;
    const int l = (row % 8) * 4 + n / 2, e = (row / 8) * 2 + n % 2;
    float gs = 0.f, us = 0.f;
    for (int v = 0; v < kGateWarps; ++v) gs += red[v][cg][l][e], us += red[v][cg][l][4 + e];
    int t = col, slot = a.top_k;
    if (!shared) {
      const int p = src.pair_of(col);
      t = p / a.top_k, slot = p % a.top_k;
    }
    static_cast<bf16*>(a.act)[(static_cast<long>(t) * (a.top_k + 1) + slot) * aw + o0 + row] = __float2bfloat16_rn(cuda::silu_mul(gs, us));
  }
}

// Block: the shared experts' row tiles first (shared_width / 16), then routed source j's tiles
// (width / 16 each).
template <QuantFormat F, int NG>
__global__ void __launch_bounds__(kGateWarps * 32, 3) gate_up_kernel(MoeDecodeArgs a, MoeDecodeQuant q, long aw) {
  __shared__ float red[kGateWarps][NG][32][8];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t4 = lane % 4;
  const int shared_tiles = a.shared_width / kTile, tiles = a.width / kTile;
  const bool shared = static_cast<int>(blockIdx.x) < shared_tiles;
  const int r = static_cast<int>(blockIdx.x) - shared_tiles;
  const int o0 = kTile * (shared ? static_cast<int>(blockIdx.x) : r % tiles);
  const QuantMatrices w = shared ? q.shared_gate_up : q.gate_up;
  const int chunks = a.hidden / 16, steps = (chunks + 3) / 4;
  const int s0 = warp * steps / kGateWarps, s1 = (warp + 1) * steps / kGateWarps;
  long gate = 0;  // matrix index of the gate rows; the up rows are the next matrix
  quant::Chunk raw[kGateLoads<F>][4];  // [step][gate g, gate g + 8, up g, up g + 8]
  auto load = [&](int s) {
#pragma unroll
    for (int i = 0; i < kGateLoads<F>; ++i) {
      const int c = 4 * (s + i) + t4;
      if (s + i < s1 && c < chunks) {
#pragma unroll
        for (int m = 0; m < 4; ++m) raw[i][m] = quant::load_chunk<F>(w, gate + m / 2, o0 + g + 8 * (m % 2), 16 * c);
      }
    }
  };
  if (shared) load(s0);  // the shared experts' weights before the wait for the router (programmatic launch)
  cuda::pdl_begin();
  Source src;
  if (shared) {
    src.cols = a.tokens, src.live = true;
  } else {
    src = routed_source(a, r / tiles);
    if (!src.live) return;
    gate = 2L * src.expert;
    load(s0);
  }
  const int groups = (src.cols + 7) / 8;
  // This lane's x column in each group of 8 (column cg * 8 + g).
  const bf16* xr[NG];
#pragma unroll
  for (int cg = 0; cg < NG; ++cg) {
    const int col = cg * 8 + g;
    xr[cg] = nullptr;
    if (col < src.cols) {
      const int t = shared ? col : src.pair_of(col) / a.top_k;
      xr[cg] = static_cast<const bf16*>(a.x) + static_cast<long>(t) * a.hidden;
    }
  }
  float acc[NG][2][4] = {};
  for (int s = s0; s < s1; s += kGateLoads<F>) {
    if (s != s0) load(s);
#pragma unroll
    for (int i = 0; i < kGateLoads<F>; ++i) {
      if (s + i >= s1) break;
      const int c = 4 * (s + i) + t4;
      const bool in = c < chunks;
      unsigned wd[4][8];
#pragma unroll
      for (int m = 0; m < 4; ++m) decode_or_zero<F>(raw[i][m], in, wd[m]);
#pragma unroll
      for (int cg = 0; cg < NG; ++cg) {
        if (cg >= groups) break;
        uint4 x0, x1;
        load_x<F>(xr[cg], c, in, x0, x1);
        mma_chunk(acc[cg][0], wd[0], wd[1], x0, x1);
        mma_chunk(acc[cg][1], wd[2], wd[3], x0, x1);
      }
    }
  }
#pragma unroll
  for (int cg = 0; cg < NG; ++cg)
    if (cg < groups)
#pragma unroll
      for (int e = 0; e < 4; ++e) red[warp][cg][lane][e] = acc[cg][0][e], red[warp][cg][lane][4 + e] = acc[cg][1][e];
  __syncthreads();
  store_act<NG>(a, aw, src, shared, o0, red);
}

// Down item (source si, split): the source's rows o0 .. o0 + 15 over its inputs of that split,
// applied to each of its columns, the sums into part[pair][split][row] (see down_kernel). The
// warp's first loads go before the programmatic-launch wait (`waited`): only act is gate_up's; the
// routing (and its groups) was complete before gate_up's blocks passed their own wait.
template <QuantFormat F, int NG>
__device__ __forceinline__ void down_item(const MoeDecodeArgs& a, const MoeDecodeQuant& q, long aw, int o0, int si, int split, int routed,
                                          float* part, bool& waited) {
  const int lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4, T = a.tokens, K = a.top_k;
  const bool shared = si == routed;
  Source src;
  if (shared)
    src.cols = T, src.live = true;
  else
    src = routed_source(a, si);
  const QuantMatrices w = shared ? q.shared_down : q.down;
  const long m = shared ? 0 : src.expert;
  const int chunks = (shared ? a.shared_width : a.width) / 16, steps = (chunks + 3) / 4;
  const int s0 = split * steps / kSplits, s1 = (split + 1) * steps / kSplits;
  const int groups = (src.cols + 7) / 8;
  auto pair = [&](int col) { return shared ? T * K + col : src.pair_of(col); };
  const bf16* xr[NG];  // this lane's act row in each group of 8 columns (column cg * 8 + g)
#pragma unroll
  for (int cg = 0; cg < NG; ++cg) {
    const int col = cg * 8 + g, p = col < src.cols ? pair(col) : 0;
    const int t = shared ? col : p / K, slot = shared ? K : p % K;
    xr[cg] = col < src.cols ? static_cast<const bf16*>(a.act) + (static_cast<long>(t) * (K + 1) + slot) * aw : nullptr;
  }
  float acc[NG][4] = {};
  quant::Chunk raw[kDownLoads<F>][2];
  for (int s = s0; s < s1; s += kDownLoads<F>) {
#pragma unroll
    for (int i = 0; i < kDownLoads<F>; ++i) {
      const int c = 4 * (s + i) + t4;
      if (s + i < s1 && c < chunks)
#pragma unroll
        for (int h = 0; h < 2; ++h) raw[i][h] = quant::load_chunk<F>(w, m, o0 + g + 8 * h, 16 * c);
    }
    if (!waited) cuda::pdl_begin(), waited = true;
#pragma unroll
    for (int i = 0; i < kDownLoads<F>; ++i) {
      if (s + i >= s1) break;
      const int c = 4 * (s + i) + t4;
      const bool in = c < chunks;
      unsigned wd[2][8];
      decode_or_zero<F>(raw[i][0], in, wd[0]);
      decode_or_zero<F>(raw[i][1], in, wd[1]);
#pragma unroll
      for (int cg = 0; cg < NG; ++cg) {
        if (cg >= groups) break;
        uint4 x0, x1;
        load_x<F>(xr[cg], c, in, x0, x1);
        mma_chunk(acc[cg], wd[0], wd[1], x0, x1);
      }
    }
  }
  // c0, c1: row g, columns 2 t4, 2 t4 + 1; c2, c3: row g + 8.
#pragma unroll
  for (int cg = 0; cg < NG; ++cg)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = cg * 8 + 2 * t4 + e % 2, row = g + 8 * (e / 2);
      if (cg < groups && col < src.cols) part[(static_cast<long>(pair(col)) * kSplits + split) * kTile + row] = acc[cg][e];
    }
}

// Block: output rows o0 .. o0 + 15. Shared memory: part[pair][split][row], the routed pairs
// (t * top_k + slot) first, then the shared experts' (tokens * top_k + t).
template <QuantFormat F, int NG>
__global__ void __launch_bounds__(kDownWarps * 32) down_kernel(MoeDecodeArgs a, MoeDecodeQuant q, long aw) {
  extern __shared__ float part[];
  const int o0 = static_cast<int>(blockIdx.x) * kTile, T = a.tokens, K = a.top_k;
  int routed = T * K;
  if (grouped_mode(a)) routed = __ldcg(moe_rows::Groups(a.groups, a.experts, T, K).n);
  const int sources = routed + (a.shared_width > 0 ? 1 : 0);
  bool waited = false;
  for (int item = threadIdx.x / 32; item < sources * kSplits; item += kDownWarps)
    down_item<F, NG>(a, q, aw, o0, item / kSplits, item % kSplits, routed, part, waited);
  if (!waited) cuda::pdl_begin();
  __syncthreads();
  for (int i = threadIdx.x; i < T * kTile; i += kDownWarps * 32) {
    const int t = i / kTile, row = i % kTile;
    auto sum = [&](int p) {
      float s = 0.f;
      for (int v = 0; v < kSplits; ++v) s += part[(static_cast<long>(p) * kSplits + v) * kTile + row];
      return s;
    };
    float acc = 0.f;
    for (int j = 0; j < K; ++j) acc = fmaf(__ldcg(a.weight + t * K + j), sum(t * K + j), acc);
    if (a.shared_width > 0) acc += sum(T * K + t);
    a.out[static_cast<long>(t) * a.hidden + o0 + row] = acc;
  }
}

long down_smem(const MoeDecodeArgs& a) { return static_cast<long>(a.tokens) * (a.top_k + 1) * kSplits * kTile * 4; }

template <QuantFormat F, int NG>
Status launch(const MoeDecodeArgs& a, const MoeDecodeQuant& q, Stream stream) {
  const long aw = act_width(a);
  if (grouped_mode(a))
    if (auto e = moe_rows::group_cuda(a, stream); !e) return e;
  const long blocks = a.shared_width / kTile + static_cast<long>(routed_cap(a)) * (a.width / kTile);
  if (auto e = TANDEM_CUDA_STATUS(cuda::launch_pdl(gate_up_kernel<F, NG>, dim3(static_cast<unsigned>(blocks)), dim3(kGateWarps * 32), 0,
                                                   stream, a, q, aw),
                                  "moe_decode_quant mma gate_up_kernel");
      !e)
    return e;
  static const cudaError_t configured =
      cudaFuncSetAttribute(down_kernel<F, NG>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kDownSmemMax));
  if (auto e = TANDEM_CUDA_STATUS(configured, "moe_decode_quant mma down_kernel's shared memory"); !e) return e;
  return TANDEM_CUDA_STATUS(cuda::launch_pdl(down_kernel<F, NG>, dim3(static_cast<unsigned>(a.hidden / kTile)), dim3(kDownWarps * 32),
                                             static_cast<size_t>(down_smem(a)), stream, a, q, aw),
                            "moe_decode_quant mma down_kernel");
}

// Column groups by the step's tokens (every source's columns are at most its tokens).
template <QuantFormat F>
Status launch(const MoeDecodeArgs& a, const MoeDecodeQuant& q, Stream stream) {
  if (a.tokens <= 8) return launch<F, 1>(a, q, stream);
  if (a.tokens <= 16) return launch<F, 2>(a, q, stream);
  return launch<F, kGroups>(a, q, stream);
}

}  // namespace

bool moe_decode_quant_mma(const MoeDecodeArgs& a, const MoeDecodeQuant& q) {
  if (!q.tensor_cores || a.tokens < 1 || a.tokens > kMaxCols || a.top_k > kTopKMax || down_smem(a) > kDownSmemMax) return false;
  if (grouped_mode(a) && (a.experts <= 0 || a.experts > q.down.count)) return false;
  return moe_decode_quant_fits(a, q);
}

namespace moe_rows {

Status quant_mma_cuda(const MoeDecodeArgs& a, const MoeDecodeQuant& q, Stream stream) {
  return q.gate_up.format == QuantFormat::fp8_block ? launch<QuantFormat::fp8_block>(a, q, stream)
                                                    : launch<QuantFormat::nvfp4>(a, q, stream);
}

}  // namespace moe_rows
}  // namespace tandem::kernels
