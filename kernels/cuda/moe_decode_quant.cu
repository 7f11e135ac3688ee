// moe_decode.cu's two launches over quantised expert stacks (quant_gemv.hpp): only the chosen
// experts' rows are read, 16 inputs a chunk, several chunks per lane in flight.
#include <cstdint>

#include "common.cuh"
#include "moe_decode_rows.cuh"
#include "quant_chunk.cuh"
#include "tandem/kernels/launch.hpp"
#include "tandem/kernels/quant_gemv.hpp"

namespace tandem::kernels {
namespace {

using cuda::bf16;
constexpr int kWarps = 4;
using quant::kLoads;

using moe_rows::act_width;

// Warp (t, slot, o): slots 0 .. top_k - 1 are token t's experts (width rows each), slot top_k the
// shared experts (shared_width rows). As in moe_decode.cu, the shared experts' first loads are
// issued before waiting for the router (programmatic launch), a routed row's after.
template <QuantFormat F>
__global__ void __launch_bounds__(kWarps * 32) gate_up_kernel(MoeDecodeArgs a, MoeDecodeQuant q, long aw) {
  const long warp = static_cast<long>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const bool live = warp < a.tokens * (static_cast<long>(a.top_k) * a.width + a.shared_width);
  const moe_rows::GateUpRow row = live ? moe_rows::gate_up_row(a, warp) : moe_rows::GateUpRow{0, 0, 0, true};
  const int o = row.o;
  const QuantMatrices w = row.routed ? q.gate_up : q.shared_gate_up;
  const int chunks = a.hidden / 16;
  long gate = 0;  // matrix index of the gate rows; the up rows are the next matrix
  quant::Chunk gc[kLoads<F>], uc[kLoads<F>];
  auto load_pass = [&](int c0) {
#pragma unroll
    for (int i = 0; i < kLoads<F>; ++i)
      if (c0 + 32 * i < chunks) {
        gc[i] = quant::load_chunk<F>(w, gate, o, 16 * (c0 + 32 * i));
        uc[i] = quant::load_chunk<F>(w, gate + 1, o, 16 * (c0 + 32 * i));
      }
  };
  if (live && !row.routed) load_pass(lane);
  cuda::pdl_begin();
  if (!live) return;
  if (row.routed) gate = 2L * a.expert[row.t * a.top_k + row.slot], load_pass(lane);
  const bf16* x = static_cast<const bf16*>(a.x) + static_cast<long>(row.t) * a.hidden;
  float g = 0.f, u = 0.f;
  for (int c0 = lane; c0 < chunks; c0 += 32 * kLoads<F>) {
    if (c0 != lane) load_pass(c0);
#pragma unroll
    for (int i = 0; i < kLoads<F>; ++i) {
      if (c0 + 32 * i >= chunks) break;
      float wv[16];
      const bf16* xr = x + 16 * (c0 + 32 * i);
      quant::decode<F>(gc[i], wv);
      g += quant::dot16(wv, xr);
      quant::decode<F>(uc[i], wv);
      u += quant::dot16(wv, xr);
    }
  }
  moe_rows::store_act(a, aw, row, cuda::warp_sum(g), cuda::warp_sum(u));
}

// Warp (t, o): the weighted sum over token t's slots of their down rows o, as one stream of chunks
// (slot by slot) so that every lane has kLoads loads in flight whatever the width. The first
// pass's loads go before the wait, as in moe_decode.cu (the router's choice read from L2).
template <QuantFormat F>
__global__ void __launch_bounds__(kWarps * 32) down_kernel(MoeDecodeArgs a, MoeDecodeQuant q, long aw) {
  const long warp = static_cast<long>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const bool live = warp < static_cast<long>(a.tokens) * a.hidden;
  const int t = live ? static_cast<int>(warp / a.hidden) : 0, o = live ? static_cast<int>(warp % a.hidden) : 0;
  const int per = a.width / 16, routed = a.top_k * per, total = routed + a.shared_width / 16;
  const bf16* act = static_cast<const bf16*>(a.act) + static_cast<long>(t) * (a.top_k + 1) * aw;
  quant::Chunk wc[kLoads<F>];
  float weight[kLoads<F>];
  const bf16* xp[kLoads<F>];
  auto load_pass = [&](int c0) {
#pragma unroll
    for (int i = 0; i < kLoads<F>; ++i) {
      const int c = c0 + 32 * i;
      if (c >= total) break;
      if (c < routed) {
        const int slot = c / per, cc = c % per;
        wc[i] = quant::load_chunk<F>(q.down, __ldcg(a.expert + t * a.top_k + slot), o, 16 * cc);
        xp[i] = act + slot * aw + 16 * cc;
        weight[i] = __ldcg(a.weight + t * a.top_k + slot);
      } else {
        const int cc = c - routed;
        wc[i] = quant::load_chunk<F>(q.shared_down, 0, o, 16 * cc);
        xp[i] = act + a.top_k * aw + 16 * cc;
        weight[i] = 1.f;
      }
    }
  };
  if (live) load_pass(lane);
  cuda::pdl_begin();
  if (!live) return;
  float acc = 0.f;
  for (int c0 = lane; c0 < total; c0 += 32 * kLoads<F>) {
    if (c0 != lane) load_pass(c0);
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

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

bool stack_fits(const QuantMatrices& w, QuantFormat f, int count, int rows, int in) {
  return w.format == f && w.count >= count && w.rows == rows && w.in == in && w.data && w.scales && aligned16(w.data) &&
         (f == QuantFormat::fp8_block || w.global);
}

template <QuantFormat F>
Status launch(const MoeDecodeArgs& a, const MoeDecodeQuant& q, Stream stream) {
  const long aw = act_width(a);
  const long gate_rows = a.tokens * (static_cast<long>(a.top_k) * a.width + a.shared_width);
  if (auto e = TANDEM_CUDA_STATUS(cuda::launch_pdl(gate_up_kernel<F>, dim3(static_cast<unsigned>((gate_rows + kWarps - 1) / kWarps)),
                                               dim3(kWarps * 32), 0, stream, a, q, aw),
                              "moe_decode_quant gate_up_kernel");
      !e)
    return e;
  const long out_rows = static_cast<long>(a.tokens) * a.hidden;
  return TANDEM_CUDA_STATUS(cuda::launch_pdl(down_kernel<F>, dim3(static_cast<unsigned>((out_rows + kWarps - 1) / kWarps)),
                                         dim3(kWarps * 32), 0, stream, a, q, aw),
                        "moe_decode_quant down_kernel");
}

}  // namespace

bool moe_decode_quant_fits(const MoeDecodeArgs& a, const MoeDecodeQuant& q) {
  const QuantFormat f = q.gate_up.format;
  if (a.hidden % 16 != 0 || a.width % 16 != 0 || a.shared_width % 16 != 0 || !aligned16(a.x) || !aligned16(a.act)) return false;
  const int experts = q.down.count;
  if (experts <= 0 || !stack_fits(q.gate_up, f, 2 * experts, a.width, a.hidden) || !stack_fits(q.down, f, experts, a.hidden, a.width))
    return false;
  return a.shared_width == 0 || (stack_fits(q.shared_gate_up, f, 2, a.shared_width, a.hidden) &&
                                 stack_fits(q.shared_down, f, 1, a.hidden, a.shared_width));
}

Status moe_decode_quant_cuda(const MoeDecodeArgs& a, const MoeDecodeQuant& q, Stream stream) {
  if (a.tokens < 0 || a.top_k <= 0 || a.hidden <= 0 || a.width <= 0 || a.shared_width < 0) return Error{"moe_decode_quant: bad shape"};
  if (!moe_decode_quant_fits(a, q))
    return Error{"moe_decode_quant: hidden and the widths must be multiples of 16, every stack of one format with the experts' shapes"};
  if (a.tokens == 0) return {};
  if (moe_decode_quant_mma(a, q)) return moe_rows::quant_mma_cuda(a, q, stream);
  if (moe_decode_quant_groups(a, q)) return moe_rows::quant_grouped_cuda(a, q, stream);
  return q.gate_up.format == QuantFormat::fp8_block ? launch<QuantFormat::fp8_block>(a, q, stream)
                                                    : launch<QuantFormat::nvfp4>(a, q, stream);
}

}  // namespace tandem::kernels
