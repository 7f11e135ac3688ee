// moe_decode_quant.cu's grouped form (moe_decode_grouped.cu's, over quantised stacks): the token
// lists of the bf16 form's group kernel, then
//   gate_up   a warp per (expert in use, row): the gate and up chunks held in registers, decoded
//             and applied to each of the expert's pairs; the shared experts' rows to every token
//   down      a block per output row: that row's chunks (raw bytes and scale) of every expert in
//             use staged in shared memory, then a warp a token runs moe_decode_quant.cu's chain
// Bit for bit the per-pair kernels' results, for the reasons moe_decode_grouped.cu gives.
#include <algorithm>
#include <cstdint>

#include "common.cuh"
#include "moe_decode_rows.cuh"
#include "quant_chunk.cuh"
#include "tandem/kernels/launch.hpp"
#include "tandem/kernels/quant_gemv.hpp"

namespace tandem::kernels {
namespace {

using cuda::bf16;
constexpr int kWarps = 4, kDownWarps = 8;
using quant::kLoads;
// The gate_up rows' chunks a lane holds: hidden <= 32 * 16 * kRowChunks (2048). Fewer than NVFP4's
// kLoads, whose 8 chunks a lane held for gate and up spill registers.
constexpr int kRowChunks = 4;
using moe_rows::act_width;
// A down block's shared memory at most (one block an SM; a step's experts in use usually take less).
constexpr long kDownSmemMax = 200 * 1024;

// Warp w < shared_width: the shared experts' row w for every token (slot top_k); beyond, warp
// (j, o): row o of the j-th expert in use for each of its pairs; the shared rows' loads before the
// wait, as in moe_decode_quant.cu.
template <QuantFormat F>
__global__ void __launch_bounds__(kWarps * 32) gate_up_kernel(MoeDecodeArgs a, MoeDecodeQuant q, long aw, int jcap) {
  const long warp = static_cast<long>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const bool live = warp < a.shared_width + static_cast<long>(jcap) * a.width, shared = warp < a.shared_width;
  const QuantMatrices w = shared ? q.shared_gate_up : q.gate_up;
  const int chunks = a.hidden / 16;
  int o = static_cast<int>(warp);
  long gate = 0;  // matrix index of the gate rows; the up rows are the next matrix
  quant::Chunk gc[kRowChunks], uc[kRowChunks];
  auto load_rows = [&] {
#pragma unroll
    for (int i = 0; i < kRowChunks; ++i)
      if (lane + 32 * i < chunks) {
        gc[i] = quant::load_chunk<F>(w, gate, o, 16 * (lane + 32 * i));
        uc[i] = quant::load_chunk<F>(w, gate + 1, o, 16 * (lane + 32 * i));
      }
  };
  if (live && shared) load_rows();
  cuda::pdl_begin();
  if (!live) return;
  const moe_rows::Groups g(a.groups, a.experts, a.tokens, a.top_k);
  int n = a.tokens;
  const std::int32_t* list = nullptr;
  if (!shared) {
    const long r = warp - a.shared_width;
    const int j = static_cast<int>(r / a.width);
    o = static_cast<int>(r % a.width);
    if (j >= __ldcg(g.n)) return;
    const int e = __ldcg(g.used + j);
    n = __ldcg(g.count + e), list = g.list + static_cast<long>(e) * a.tokens;
    gate = 2L * e;
    load_rows();
  }
  int pairs = 0;  // lane l: the expert's pair i0 + l (32 at a time)
  for (int i = 0; i < n; ++i) {
    if (!shared && i % 32 == 0) pairs = i + lane < n ? __ldcg(list + i + lane) : 0;
    int t = i, slot = a.top_k;
    if (!shared) {
      const int p = __shfl_sync(0xffffffffu, pairs, i % 32);
      t = p / a.top_k, slot = p % a.top_k;
    }
    const bf16* x = static_cast<const bf16*>(a.x) + static_cast<long>(t) * a.hidden;
    float gs = 0.f, us = 0.f;
#pragma unroll
    for (int k = 0; k < kRowChunks; ++k) {
      if (lane + 32 * k >= chunks) break;
      float wv[16];
      const bf16* xr = x + 16 * (lane + 32 * k);
      quant::decode<F>(gc[k], wv);
      gs += quant::dot16(wv, xr);
      quant::decode<F>(uc[k], wv);
      us += quant::dot16(wv, xr);
    }
    moe_rows::store_act(a, aw, moe_rows::GateUpRow{t, slot, o, !shared}, cuda::warp_sum(gs), cuda::warp_sum(us));
  }
}

// Block (output row o, tokens t0 .. t0 + 63). Shared memory: the row's chunks (aw / 16 a row) of
// the shared experts, then of each expert in use (room for jcap): raw bytes, then their scales,
// then the experts' ids. A warp a token, each lane moe_decode_quant.cu's chain over its chunks.
template <QuantFormat F>
__global__ void __launch_bounds__(kDownWarps * 32) down_kernel(MoeDecodeArgs a, MoeDecodeQuant q, long aw, int jcap) {
  extern __shared__ uint4 smem[];
  const int stride = static_cast<int>(aw / 16), rows = 1 + jcap;
  uint4* raw = smem;
  float* scale = reinterpret_cast<float*>(smem + rows * stride);
  int* experts = reinterpret_cast<int*>(scale + rows * stride);
  const int o = blockIdx.x, t0 = blockIdx.y * 64;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, threads = kDownWarps * 32;
  const int per = a.width / 16, sper = a.shared_width / 16;
  const int routed = a.top_k * per, total = routed + sper;
  // Copies through registers, four chunks a thread in flight: the shared experts' row first.
  for (int base = threadIdx.x; base < sper; base += 4 * threads) {
    quant::Chunk c[4];
#pragma unroll
    for (int u = 0; u < 4; ++u)
      if (base + u * threads < sper) c[u] = quant::load_chunk<F>(q.shared_down, 0, o, 16 * (base + u * threads));
#pragma unroll
    for (int u = 0; u < 4; ++u)
      if (base + u * threads < sper) raw[base + u * threads] = c[u].q, scale[base + u * threads] = c[u].scale;
  }
  cuda::pdl_begin();
  const moe_rows::Groups g(a.groups, a.experts, a.tokens, a.top_k);
  const int used = __ldcg(g.n);
  for (int j = threadIdx.x; j < used; j += threads) experts[j] = __ldcg(g.used + j);
  __syncthreads();
  for (int base = threadIdx.x; base < used * per; base += 4 * threads) {
    quant::Chunk c[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int i = base + u * threads;
      if (i < used * per) c[u] = quant::load_chunk<F>(q.down, experts[i / per], o, 16 * (i % per));
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int i = base + u * threads;
      if (i < used * per) {
        const int at = (1 + i / per) * stride + i % per;
        raw[at] = c[u].q, scale[at] = c[u].scale;
      }
    }
  }
  __syncthreads();
  const int t_end = min(a.tokens, t0 + 64);
  for (int t = t0 + warp; t < t_end; t += kDownWarps) {
    const int my_pos = lane < a.top_k ? __ldcg(g.pos + t * a.top_k + lane) : 0;
    const float my_weight = lane < a.top_k ? __ldcg(a.weight + t * a.top_k + lane) : 0.f;
    const bf16* act = static_cast<const bf16*>(a.act) + static_cast<long>(t) * (a.top_k + 1) * aw;
    float acc = 0.f;
    // kLoads whole-warp rounds at a time (the shuffles' source lanes live), then the chain in order.
    for (int c0 = lane; c0 - lane < total; c0 += 32 * kLoads<F>) {
      quant::Chunk wc[kLoads<F>];
      float weight[kLoads<F>];
      const bf16* xp[kLoads<F>];
#pragma unroll
      for (int i = 0; i < kLoads<F>; ++i) {
        const int c = c0 + 32 * i;
        const int slot = c < routed ? c / per : a.top_k, cc = c < routed ? c % per : c - routed;
        const int place = __shfl_sync(0xffffffffu, my_pos, slot < a.top_k ? slot : 0);
        const float w = __shfl_sync(0xffffffffu, my_weight, slot < a.top_k ? slot : 0);
        weight[i] = slot < a.top_k ? w : 1.f;
        xp[i] = act + slot * aw + 16 * cc;
        const int at = (slot < a.top_k ? 1 + place : 0) * stride + cc;
        if (c < total) wc[i].q = raw[at], wc[i].scale = scale[at];
      }
#pragma unroll
      for (int i = 0; i < kLoads<F>; ++i) {
        if (c0 + 32 * i >= total) break;
        float wv[16];
        quant::decode<F>(wc[i], wv);
        acc = fmaf(weight[i], quant::dot16(wv, xp[i]), acc);
      }
    }
    acc = cuda::warp_sum(acc);
    if (lane == 0) a.out[static_cast<long>(t) * a.hidden + o] = acc;
  }
}

int jcap_of(const MoeDecodeArgs& a) { return std::min(a.experts, a.tokens * a.top_k); }

long down_smem(const MoeDecodeArgs& a) { return (1L + jcap_of(a)) * (act_width(a) / 16) * (16 + 4) + 4L * jcap_of(a); }

template <QuantFormat F>
Status launch(const MoeDecodeArgs& a, const MoeDecodeQuant& q, Stream stream) {
  const long aw = act_width(a);
  if (auto e = moe_rows::group_cuda(a, stream); !e) return e;
  const int jcap = jcap_of(a);
  const long warps = a.shared_width + static_cast<long>(jcap) * a.width;
  if (auto e = TANDEM_CUDA_STATUS(cuda::launch_pdl(gate_up_kernel<F>, dim3(static_cast<unsigned>((warps + kWarps - 1) / kWarps)),
                                               dim3(kWarps * 32), 0, stream, a, q, aw, jcap),
                              "moe_decode_quant grouped gate_up_kernel");
      !e)
    return e;
  static const cudaError_t configured =
      cudaFuncSetAttribute(down_kernel<F>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kDownSmemMax));
  if (auto e = TANDEM_CUDA_STATUS(configured, "moe_decode_quant grouped down_kernel's shared memory"); !e) return e;
  return TANDEM_CUDA_STATUS(cuda::launch_pdl(down_kernel<F>, dim3(static_cast<unsigned>(a.hidden), static_cast<unsigned>((a.tokens + 63) / 64)),
                                         dim3(kDownWarps * 32), static_cast<size_t>(down_smem(a)), stream, a, q, aw, jcap),
                        "moe_decode_quant grouped down_kernel");
}

}  // namespace

bool moe_decode_quant_groups(const MoeDecodeArgs& a, const MoeDecodeQuant& q) {
  return a.groups && a.experts > 0 && a.experts <= q.down.count && a.tokens >= 2 && a.top_k <= 32 &&
         a.hidden / 16 <= 32 * kRowChunks && down_smem(a) <= kDownSmemMax && moe_decode_quant_fits(a, q);
}

namespace moe_rows {

Status quant_grouped_cuda(const MoeDecodeArgs& a, const MoeDecodeQuant& q, Stream stream) {
  return q.gate_up.format == QuantFormat::fp8_block ? launch<QuantFormat::fp8_block>(a, q, stream)
                                                    : launch<QuantFormat::nvfp4>(a, q, stream);
}

}  // namespace moe_rows
}  // namespace tandem::kernels
