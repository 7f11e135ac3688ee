// The routed and shared experts for a few tokens (moe_decode.hpp), per pair: two launches, one warp
// per output row, only the chosen experts' rows read (the grouped form: moe_decode_grouped.cu).
#include <cstdint>

#include "common.cuh"
#include "moe_decode_rows.cuh"
#include "tandem/kernels/launch.hpp"
#include "tandem/kernels/moe_decode.hpp"

namespace tandem::kernels {
namespace {

using cuda::bf16;
constexpr int kWarps = 4, kLoads = 8;

using moe_rows::act_width;

// Warp (t, slot, o): slots 0 .. top_k - 1 are token t's experts (width rows each), slot top_k the
// shared experts (shared_width rows). The shared experts' rows depend on no earlier kernel, so
// their first loads are issued before waiting for the router (programmatic dependent launch); a
// routed row needs the router's choice, so it waits first.
__global__ void __launch_bounds__(kWarps * 32) gate_up_kernel(MoeDecodeArgs a, long aw) {
  const long warp = static_cast<long>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const bool live = warp < a.tokens * (static_cast<long>(a.top_k) * a.width + a.shared_width);
  const moe_rows::GateUpRow row = live ? moe_rows::gate_up_row(a, warp) : moe_rows::GateUpRow{0, 0, 0, true};
  const int n = row.routed ? a.width : a.shared_width;
  const int chunks = a.hidden / 8;
  const bf16 *gate = nullptr, *up = nullptr;
  uint4 gv[kLoads], uv[kLoads];
  auto load_pass = [&](int c0) {
#pragma unroll
    for (int i = 0; i < kLoads; ++i)
      if (c0 + 32 * i < chunks) gv[i] = cuda::load_nc16(gate + 8 * (c0 + 32 * i)), uv[i] = cuda::load_nc16(up + 8 * (c0 + 32 * i));
  };
  auto rows_of = [&](const bf16* w) { gate = w + static_cast<long>(row.o) * a.hidden, up = w + static_cast<long>(n + row.o) * a.hidden; };
  if (live && !row.routed) rows_of(static_cast<const bf16*>(a.shared_gate_up)), load_pass(lane);
  cuda::pdl_begin();
  if (!live) return;
  if (row.routed) {
    rows_of(static_cast<const bf16*>(a.gate_up) + static_cast<long>(a.expert[row.t * a.top_k + row.slot]) * 2 * a.width * a.hidden);
    load_pass(lane);
  }
  const bf16* x = static_cast<const bf16*>(a.x) + static_cast<long>(row.t) * a.hidden;
  float g = 0.f, u = 0.f;
  for (int c0 = lane; c0 < chunks; c0 += 32 * kLoads) {
    if (c0 != lane) load_pass(c0);
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      if (c0 + 32 * i >= chunks) break;
      const uint4 xv = *reinterpret_cast<const uint4*>(x + 8 * (c0 + 32 * i));
      g += cuda::dot8(gv[i], xv), u += cuda::dot8(uv[i], xv);
    }
  }
  moe_rows::store_act(a, aw, row, cuda::warp_sum(g), cuda::warp_sum(u));
}

// Warp (t, o): the weighted sum over token t's slots of their down rows o, as one stream of chunks
// (slot by slot) so that every lane has kLoads loads in flight whatever the width.
// The first pass's weight loads are issued before waiting for gate_up's activations: the router's
// choice and weights they need were written by the kernel before gate_up, which had finished
// before gate_up's blocks passed their wait, and so before this kernel could start (read from L2,
// past L1, which an earlier layer's launch may hold stale).
__global__ void __launch_bounds__(kWarps * 32) down_kernel(MoeDecodeArgs a, long aw) {
  const long warp = static_cast<long>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const bool live = warp < static_cast<long>(a.tokens) * a.hidden;
  const int t = live ? static_cast<int>(warp / a.hidden) : 0, o = live ? static_cast<int>(warp % a.hidden) : 0;
  const int per = a.width / 8, routed = a.top_k * per, total = routed + a.shared_width / 8;
  const bf16* act = static_cast<const bf16*>(a.act) + static_cast<long>(t) * (a.top_k + 1) * aw;
  uint4 wv[kLoads];
  float scale[kLoads];
  const bf16* xp[kLoads];
  auto load_pass = [&](int c0) {
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int c = c0 + 32 * i;
      if (c >= total) break;
      const bf16* w;
      if (c < routed) {
        const int slot = c / per, cc = c % per;
        const long e = __ldcg(a.expert + t * a.top_k + slot);
        w = static_cast<const bf16*>(a.down) + (e * a.hidden + o) * a.width + 8 * cc;
        xp[i] = act + slot * aw + 8 * cc;
        scale[i] = __ldcg(a.weight + t * a.top_k + slot);
      } else {
        const int cc = c - routed;
        w = static_cast<const bf16*>(a.shared_down) + static_cast<long>(o) * a.shared_width + 8 * cc;
        xp[i] = act + a.top_k * aw + 8 * cc;
        scale[i] = 1.f;
      }
      wv[i] = cuda::load_nc16(w);
    }
  };
  if (live) load_pass(lane);
  cuda::pdl_begin();
  if (!live) return;
  float acc = 0.f;
  for (int c0 = lane; c0 < total; c0 += 32 * kLoads) {
    if (c0 != lane) load_pass(c0);
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      if (c0 + 32 * i >= total) break;
      acc += scale[i] * cuda::dot8(wv[i], cuda::load16(xp[i]));
    }
  }
  acc = cuda::warp_sum(acc);
  if (lane == 0) a.out[static_cast<long>(t) * a.hidden + o] = acc;
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

bool moe_decode_fits(const MoeDecodeArgs& a) {
  return a.hidden % 8 == 0 && a.width % 8 == 0 && a.shared_width % 8 == 0 && aligned16(a.x) && aligned16(a.gate_up) &&
         aligned16(a.down) && aligned16(a.act) && (a.shared_width == 0 || (aligned16(a.shared_gate_up) && aligned16(a.shared_down)));
}

Status moe_decode_cuda(const MoeDecodeArgs& a, Stream stream) {
  if (a.tokens < 0 || a.top_k <= 0 || a.hidden <= 0 || a.width <= 0 || a.shared_width < 0) return Error{"moe_decode: bad shape"};
  if (!moe_decode_fits(a)) return Error{"moe_decode: hidden and the widths must be multiples of 8, the buffers 16-byte aligned"};
  if (a.tokens == 0) return {};
  if (moe_decode_groups(a)) return moe_rows::grouped_cuda(a, stream);
  const long aw = act_width(a);
  const long gate_rows = a.tokens * (static_cast<long>(a.top_k) * a.width + a.shared_width);
  if (auto e = TANDEM_CUDA_STATUS(cuda::launch_pdl(gate_up_kernel, dim3(static_cast<unsigned>((gate_rows + kWarps - 1) / kWarps)),
                                               dim3(kWarps * 32), 0, stream, a, aw),
                              "moe_decode gate_up_kernel");
      !e)
    return e;
  const long out_rows = static_cast<long>(a.tokens) * a.hidden;
  return TANDEM_CUDA_STATUS(cuda::launch_pdl(down_kernel, dim3(static_cast<unsigned>((out_rows + kWarps - 1) / kWarps)),
                                         dim3(kWarps * 32), 0, stream, a, aw),
                        "moe_decode down_kernel");
}

}  // namespace tandem::kernels
