// The tensor-core forms (quant_mma.cuh) of quant_gemv and moe_decode_quant. A block is 8 warps on
// one 16-row tile; its k blocks are dealt to the warps round-robin (two to four in flight a warp,
// the first before the programmatic-launch wait where they do not depend on it) and the
// warps' fragments summed in warp order, so every result has one fixed summation order, whatever
// the other rows or tokens of the launch.
//   quant_gemv   block per tile of the outputs (gate | up: the gate tile and the up tile), every
//                x row a column
//   moe gate_up  block per (token, slot, tile) with the token as the only column; the shared
//                experts' tiles take 8 tokens a block as columns
//   moe down     block per (token, tile of hidden): units (slot, k block) over the token's slots
//                then the shared experts, each scaled by its routing weight
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common.cuh"
#include "moe_decode_rows.cuh"
#include "quant_mma.cuh"
#include "tandem/kernels/gemv.hpp"
#include "tandem/kernels/launch.hpp"
#include "tandem/kernels/quant_gemv.hpp"

namespace tandem::kernels {
namespace {

using cuda::bf16;
using namespace qmma;
constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr long kSmemMax = 200 * 1024;
// down's units in flight a warp: 256 bytes a lane either way (an NVFP4 unit is half an fp8 one).
template <QuantFormat F>
constexpr int kDownLoads = F == QuantFormat::nvfp4 ? 8 : 4;
// Shared memory after the staged x: the warps' fragments (two matrices) and two 16 x 8 results.
constexpr long kTail = (2L * kWarps * 128 + 2 * 128) * 4;

std::atomic<int> g_mma{-1};

__host__ __device__ int tiles(int rows) { return (rows + 15) / 16; }

// A warp's k blocks kb = warp, warp + 8, ... of M matrices of one stack (same rows), two at a time
// in flight. load(kb) issues the loads of a pair; the caller issues the first pair's (kb = warp),
// before the programmatic-launch wait where the rows do not depend on the previous kernel; run
// issues the rest.
// (w: a copy in registers, not a kernel parameter's address, which would move it to local memory.)
template <QuantFormat F, int M>
struct TileLoop {
  const QuantMatrices& w;
  const long (&m)[M];
  int row0, nkb;
  Raw<F> r[M][2];

  __device__ __forceinline__ void load(int kb) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int j = 0; j < M; ++j) {
      if (kb < nkb) load_block<F>(w, m[j], row0, kb, lane, r[j][0]);
      if (kb + kWarps < nkb) load_block<F>(w, m[j], row0, kb + kWarps, lane, r[j][1]);
    }
  }
  // acc[j] += matrix m[j]'s tile . x over the warp's k blocks; the first pair loaded already.
  __device__ __forceinline__ void run(const __half* xrow, float (&acc)[M][4]) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int kb = warp; kb < nkb; kb += 2 * kWarps) {
      if (kb != warp) load(kb);
#pragma unroll
      for (int j = 0; j < M; ++j) {
        mma_block<F>(r[j][0], xrow, kb, lane, 1.f, acc[j]);
        if (kb + kWarps < nkb) mma_block<F>(r[j][1], xrow, kb + kWarps, lane, 1.f, acc[j]);
      }
    }
  }
};

// ---- quant_gemv -------------------------------------------------------------------------------

template <QuantFormat F, class OutT, bool SILU>
__global__ void __launch_bounds__(kThreads) gemv_kernel(QuantGemvArgs a) {
  extern __shared__ uint4 smem[];
  const int kp = kpad(a.w.in), nkb = kp / kK, warp = threadIdx.x / 32;
  __half* xs = reinterpret_cast<__half*>(smem);
  float* red = reinterpret_cast<float*>(xs + static_cast<long>(a.rows) * kp);
  float* out = red + 2 * kWarps * 128;
  // The block's tile: of w (matrix m, rows row0 ..), or of w2 after all of w's.
  const int tw = tiles(a.w.rows), b = blockIdx.x;
  const long wtiles = SILU ? tw : static_cast<long>(a.w.count) * tw;
  const bool second = b >= wtiles;
  const QuantMatrices w = second ? a.w2 : a.w;
  const int tb = second ? static_cast<int>(b - wtiles) : b, tn = tiles(w.rows);
  const long m = SILU ? 0 : tb / tn;
  const int row0 = (tb % tn) * 16;
  const long first_out = second ? static_cast<long>(a.w.count) * a.w.rows : 0;
  const int g = (threadIdx.x % 32) / 4;
  constexpr int M = SILU ? 2 : 1;
  long ms[M];
#pragma unroll
  for (int j = 0; j < M; ++j) ms[j] = m + j;  // gate | up: matrices 0 and 1
  TileLoop<F, M> loop{w, ms, row0, nkb, {}};
  loop.load(warp);
  cuda::pdl_begin();
  for (int r = 0; r < a.rows; ++r) stage_row<F>(xs + r * kp, static_cast<const bf16*>(a.x) + r * a.ldx, a.w.in, threadIdx.x, kThreads);
  __syncthreads();
  float acc[M][4] = {};
  loop.run(g < a.rows ? xs + g * kp : nullptr, acc);
#pragma unroll
  for (int j = 0; j < M; ++j) combine(acc[j], red, out + 128 * j, kWarps);
  for (int i = threadIdx.x; i < 16 * 8; i += kThreads) {
    const int row = i / 8, col = i % 8;
    if (col >= a.rows || row0 + row >= w.rows) continue;
    const long o = first_out + m * w.rows + row0 + row;
    float v = out[i];
    if (SILU) v = cuda::silu_mul(v, out[128 + i]);
    if (!SILU && a.bias) v += cuda::to_float(static_cast<const OutT*>(a.bias)[o]);
    static_cast<OutT*>(a.y)[col * a.ldy + o] = cuda::from_float<OutT>(v);
  }
}

long gemv_smem(const QuantGemvArgs& a) { return static_cast<long>(a.rows) * kpad(a.w.in) * 2 + kTail; }

template <class K>
cudaError_t configured(K kernel) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmemMax));
}

template <QuantFormat F, class OutT, bool SILU>
cudaError_t gemv_launch(const QuantGemvArgs& a, Stream stream) {
  static const cudaError_t ready = configured(gemv_kernel<F, OutT, SILU>);
  if (ready != cudaSuccess) return ready;
  const long blocks = SILU ? tiles(a.w.rows) : static_cast<long>(a.w.count) * tiles(a.w.rows) + static_cast<long>(a.w2.count) * tiles(a.w2.rows);
  return cuda::launch_pdl(gemv_kernel<F, OutT, SILU>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads),
                          static_cast<size_t>(gemv_smem(a)), stream, a);
}

template <QuantFormat F>
cudaError_t gemv_format(const QuantGemvArgs& a, Stream stream) {
  if (a.silu_mul) return gemv_launch<F, bf16, true>(a, stream);
  if (a.y_type == DType::bf16) return gemv_launch<F, bf16, false>(a, stream);
  return gemv_launch<F, float, false>(a, stream);
}

// ---- moe_decode_quant ---------------------------------------------------------------------------

template <QuantFormat F>
__global__ void __launch_bounds__(kThreads) moe_gate_up_kernel(MoeDecodeArgs a, MoeDecodeQuant q, long aw) {
  extern __shared__ uint4 smem[];
  const int kp = kpad(a.hidden), tw = tiles(a.width);
  const long routed = static_cast<long>(a.tokens) * a.top_k * tw;
  const bool shared = blockIdx.x >= routed;
  int t0, cols, slot, row0;
  long gate = 0;
  if (!shared) {
    const long p = blockIdx.x / tw;
    t0 = static_cast<int>(p / a.top_k), slot = static_cast<int>(p % a.top_k), cols = 1;
    row0 = static_cast<int>(blockIdx.x % tw) * 16;
  } else {
    const long b = blockIdx.x - routed;
    const int ts = tiles(a.shared_width);
    t0 = static_cast<int>(b / ts) * 8, slot = a.top_k, cols = min(8, a.tokens - t0);
    row0 = static_cast<int>(b % ts) * 16;
  }
  __half* xs = reinterpret_cast<__half*>(smem);
  float* red = reinterpret_cast<float*>(xs + static_cast<long>(cols) * kp);
  float* out = red + 2 * kWarps * 128;
  const QuantMatrices w = shared ? q.shared_gate_up : q.gate_up;
  const int nkb = kp / kK, warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4;
  long ms[2] = {0, 1};
  TileLoop<F, 2> loop{w, ms, row0, nkb, {}};
  if (shared) loop.load(warp);  // the shared experts' rows before the wait; a routed row's after
  cuda::pdl_begin();
  if (!shared) {
    gate = 2L * __ldcg(a.expert + t0 * a.top_k + slot);
    ms[0] = gate, ms[1] = gate + 1;
    loop.load(warp);
  }
  for (int c = 0; c < cols; ++c)
    stage_row<F>(xs + c * kp, static_cast<const bf16*>(a.x) + static_cast<long>(t0 + c) * a.hidden, a.hidden, threadIdx.x, kThreads);
  __syncthreads();
  float acc[2][4] = {};
  loop.run(g < cols ? xs + g * kp : nullptr, acc);
  combine(acc[0], red, out, kWarps);
  combine(acc[1], red, out + 128, kWarps);
  for (int i = threadIdx.x; i < 16 * 8; i += kThreads) {
    const int row = i / 8, col = i % 8;
    if (col >= cols || row0 + row >= w.rows) continue;
    static_cast<bf16*>(a.act)[(static_cast<long>(t0 + col) * (a.top_k + 1) + slot) * aw + row0 + row] =
        __float2bfloat16_rn(cuda::silu_mul(out[i], out[128 + i]));
  }
}

// Block (token t, tile of hidden): units u = (slot, k block), the routed slots' then the shared
// experts', dealt to the warps round-robin, two in flight.
template <QuantFormat F>
__global__ void __launch_bounds__(kThreads) moe_down_kernel(MoeDecodeArgs a, MoeDecodeQuant q, long aw) {
  extern __shared__ uint4 smem[];
  const int th = tiles(a.hidden), t = static_cast<int>(blockIdx.x / th), row0 = static_cast<int>(blockIdx.x % th) * 16;
  const int kr = kpad(a.width), ks = a.shared_width > 0 ? kpad(a.shared_width) : 0;
  __half* xs = reinterpret_cast<__half*>(smem);
  float* red = reinterpret_cast<float*>(xs + static_cast<long>(a.top_k) * kr + ks);
  float* out = red + 2 * kWarps * 128;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int nkr = kr / kK, routed = a.top_k * nkr, units = routed + ks / kK;
  const QuantMatrices dn = q.down, sd = q.shared_down;
  struct Unit {
    bool shared;
    long m;
    int kb, slot;
    float mult;
  };
  auto unit = [&](int u) {
    if (u < routed) {
      const int s = u / nkr;
      return Unit{false, __ldcg(a.expert + t * a.top_k + s), u % nkr, s, __ldcg(a.weight + t * a.top_k + s)};
    }
    return Unit{true, 0, u - routed, a.top_k, 1.f};
  };
  // kDownLoads<F> units a warp in flight: u0, u0 + 8, ...; the first round's loads before the wait
  // (the router's choice, written before the previous kernel began, read from L2).
  Unit us[kDownLoads<F>];
  Raw<F> r[kDownLoads<F>];
  auto load = [&](int u0) {
#pragma unroll
    for (int i = 0; i < kDownLoads<F>; ++i) {
      const int u = u0 + i * kWarps;
      if (u < units) {
        us[i] = unit(u);
        if (us[i].shared) load_block<F>(sd, us[i].m, row0, us[i].kb, lane, r[i]);
        else load_block<F>(dn, us[i].m, row0, us[i].kb, lane, r[i]);
      }
    }
  };
  load(warp);
  cuda::pdl_begin();
  const bf16* act = static_cast<const bf16*>(a.act) + static_cast<long>(t) * (a.top_k + 1) * aw;
  for (int s = 0; s < a.top_k; ++s) stage_row<F>(xs + s * kr, act + s * aw, a.width, threadIdx.x, kThreads);
  if (ks) stage_row<F>(xs + a.top_k * kr, act + a.top_k * aw, a.shared_width, threadIdx.x, kThreads);
  __syncthreads();
  const bool live = lane / 4 == 0;  // column 0: the token
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int u0 = warp; u0 < units; u0 += kDownLoads<F> * kWarps) {
    if (u0 != warp) load(u0);
#pragma unroll
    for (int i = 0; i < kDownLoads<F>; ++i)
      if (u0 + i * kWarps < units) mma_block<F>(r[i], live ? xs + us[i].slot * kr : nullptr, us[i].kb, lane, us[i].mult, acc);
  }
  combine(acc, red, out, kWarps);
  if (threadIdx.x < 16 && row0 + static_cast<int>(threadIdx.x) < a.hidden)
    a.out[static_cast<long>(t) * a.hidden + row0 + threadIdx.x] = out[threadIdx.x * 8];
}

long moe_gate_up_smem(const MoeDecodeArgs& a) { return 8L * kpad(a.hidden) * 2 + kTail; }
long moe_down_smem(const MoeDecodeArgs& a) {
  return (static_cast<long>(a.top_k) * kpad(a.width) + (a.shared_width > 0 ? kpad(a.shared_width) : 0)) * 2 + kTail;
}

template <QuantFormat F>
Status moe_launch(const MoeDecodeArgs& a, const MoeDecodeQuant& q, Stream stream) {
  static const cudaError_t ready = configured(moe_gate_up_kernel<F>) == cudaSuccess ? configured(moe_down_kernel<F>) : cudaErrorInvalidValue;
  if (auto e = TANDEM_CUDA_STATUS(ready, "moe_decode_quant mma kernels' shared memory"); !e) return e;
  const long aw = moe_rows::act_width(a);
  const long blocks = static_cast<long>(a.tokens) * a.top_k * tiles(a.width) +
                      (a.shared_width > 0 ? static_cast<long>((a.tokens + 7) / 8) * tiles(a.shared_width) : 0);
  if (auto e = TANDEM_CUDA_STATUS(cuda::launch_pdl(moe_gate_up_kernel<F>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads),
                                               static_cast<size_t>(moe_gate_up_smem(a)), stream, a, q, aw),
                              "moe_decode_quant mma gate_up");
      !e)
    return e;
  return TANDEM_CUDA_STATUS(cuda::launch_pdl(moe_down_kernel<F>, dim3(static_cast<unsigned>(static_cast<long>(a.tokens) * tiles(a.hidden))),
                                         dim3(kThreads), static_cast<size_t>(moe_down_smem(a)), stream, a, q, aw),
                        "moe_decode_quant mma down");
}

}  // namespace

bool quant_mma_on() {
  int v = g_mma.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* e = std::getenv("TANDEM_QUANT_MMA");
    v = e && std::strcmp(e, "0") == 0 ? 0 : 1;
    g_mma.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

void quant_mma_set(bool on) { g_mma.store(on ? 1 : 0, std::memory_order_relaxed); }

namespace qmma {

bool gemv_fits(const QuantGemvArgs& a) { return gemv_smem(a) <= kSmemMax; }

cudaError_t gemv_cuda(const QuantGemvArgs& a, Stream stream) {
  return a.w.format == QuantFormat::fp8_block ? gemv_format<QuantFormat::fp8_block>(a, stream) : gemv_format<QuantFormat::nvfp4>(a, stream);
}

bool moe_fits(const MoeDecodeArgs& a) { return moe_gate_up_smem(a) <= kSmemMax && moe_down_smem(a) <= kSmemMax; }

Status moe_cuda(const MoeDecodeArgs& a, const MoeDecodeQuant& q, Stream stream) {
  return q.gate_up.format == QuantFormat::fp8_block ? moe_launch<QuantFormat::fp8_block>(a, q, stream)
                                                    : moe_launch<QuantFormat::nvfp4>(a, q, stream);
}

}  // namespace qmma
}  // namespace tandem::kernels
