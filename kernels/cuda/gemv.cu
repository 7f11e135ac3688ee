// The decode-sized product (gemv.hpp): one warp per output row, weights streamed with 16-byte
// non-caching loads, several loads per lane in flight before any arithmetic, x rows from L1.
#include <algorithm>
#include <cstdint>

#include "common.cuh"
#include "tandem/kernels/gemv.hpp"
#include "tandem/kernels/launch.hpp"

namespace tandem::kernels {
namespace {

using cuda::bf16;
constexpr int kWarps = 4;

// NT: x rows per block (a launch of more rows has a grid row of blocks per NT rows: blockIdx.y);
// U: 16-byte weight loads per lane in flight. Each x row's sum is built in the same order whatever
// NT, U or the launch's row count: lane l adds chunks l, l + 32, l + 64, .. (one fmaf chain per
// chunk), then the warp's fixed butterfly. So a row's result does not depend on how many rows share
// the launch (a decode row, a verification's rows and a prefill chunk's rows agree bit for bit):
// the engine's greedy output with a drafter equals plain greedy output (engine/spec_decode/README.md).
// The groups of NT rows run side by side, each block reading its weight rows (from L2 after the
// first): one group after another in a warp made a 48-row step cost six decode steps (H100, run
// 1 of engine/spec_decode/bench/results/h100-dflash-2026-12-06.md).
// The weights do not depend on the kernel before this one (only x does), so the first pass's
// weight loads are issued before waiting for it (programmatic dependent launch): the weight
// stream overlaps the previous kernel's tail. (Asking L2 for the rest of the row as well was
// measured slower on an H200: run 8 of engine/bench/results/h200-2026-12-03.md.)
template <int NT, int U, class OutT, bool SILU>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(GemvArgs a) {
  const long row = static_cast<long>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const bool live = row < static_cast<long>(a.groups) * a.out;
  const int g = live ? static_cast<int>(row / a.out) : 0, o = live ? static_cast<int>(row % a.out) : 0;
  const bf16* wg = static_cast<const bf16*>(a.w) + g * a.w_group + o * a.ldw;
  const bf16* wu = wg + a.up_offset * a.ldw;
  const int chunks = a.in / 8;
  uint4 wv[U], uv[U];
  auto load_pass = [&](int c0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + 32 * u;
      if (c < chunks) {
        wv[u] = cuda::load_nc16(wg + 8 * c);
        if (SILU) uv[u] = cuda::load_nc16(wu + 8 * c);
      }
    }
  };
  if (live) load_pass(lane);
  cuda::pdl_begin();
  if (!live) return;
  const bf16* xg = static_cast<const bf16*>(a.x) + g * a.x_group;
  {
    const int r0 = static_cast<int>(blockIdx.y) * NT;
    const int nr = min(NT, a.rows - r0);
    const bf16* xr = xg + static_cast<long>(r0) * a.ldx;
    float acc[NT], up[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = 0.f, up[t] = 0.f;
    for (int c0 = lane; c0 < chunks; c0 += 32 * U) {
      if (c0 != lane) load_pass(c0);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + 32 * u;
        if (c >= chunks) break;
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          if (t >= nr) break;
          const uint4 xv = *reinterpret_cast<const uint4*>(xr + t * a.ldx + 8 * c);
          acc[t] += cuda::dot8(wv[u], xv);
          if (SILU) up[t] += cuda::dot8(uv[u], xv);
        }
      }
    }
    // Lane t writes x row r0 + t's result.
    float mine = cuda::warp_rows_result<NT, SILU>(acc, up);
    if (lane < nr) {
      if (!SILU && a.bias) mine += cuda::to_float(static_cast<const OutT*>(a.bias)[row]);
      static_cast<OutT*>(a.y)[(r0 + lane) * a.ldy + g * a.y_group + o] = cuda::from_float<OutT>(mine);
    }
  }
}

template <int NT, bool SILU>
constexpr int kLoadsPerLane = (NT <= 2 && !SILU) ? 8 : 4;

template <int NT, class OutT, bool SILU>
cudaError_t launch(const GemvArgs& a, Stream stream) {
  constexpr int U = kLoadsPerLane<NT, SILU>;
  const long rows = static_cast<long>(a.groups) * a.out;
  return cuda::launch_pdl(gemv_kernel<NT, U, OutT, SILU>,
                          dim3(static_cast<unsigned>((rows + kWarps - 1) / kWarps), static_cast<unsigned>((a.rows + NT - 1) / NT)),
                          dim3(kWarps * 32), 0, stream, a);
}

// Blocks of gemv_kernel<NT, ..> the whole GPU holds at once (registers decide), asked once.
template <int NT, class OutT, bool SILU>
long resident_blocks() {
  static const long n = [] {
    int dev = 0, sms = 0, per_sm = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_kernel<NT, kLoadsPerLane<NT, SILU>, OutT, SILU>, kWarps * 32, 0);
    return static_cast<long>(std::max(sms, 1)) * std::max(per_sm, 1);
  }();
  return n;
}

// x rows per warp: the fewest whose grid still fits one wave of resident blocks. A warp's time
// grows with its rows (an 8-row `mlp down` of the DFlash pair's target cost 2.3x a 1-row one with
// the same 96 blocks: engine/bench/results/h100-verify21-2026-12-06.md), while more blocks cost
// little until they need a second wave. A row's sum is the same whatever NT (gemv_kernel), so the
// choice never changes a result.
template <class OutT, bool SILU>
cudaError_t launch_rows(const GemvArgs& a, Stream stream) {
  const long per_row = (static_cast<long>(a.groups) * a.out + kWarps - 1) / kWarps;  // blocks per grid row
  auto fits = [&](int nt, long resident) { return per_row * ((a.rows + nt - 1) / nt) <= resident; };
  if (a.rows <= 1 || fits(1, resident_blocks<1, OutT, SILU>())) return launch<1, OutT, SILU>(a, stream);
  if (a.rows <= 2 || fits(2, resident_blocks<2, OutT, SILU>())) return launch<2, OutT, SILU>(a, stream);
  if (a.rows <= 4 || fits(4, resident_blocks<4, OutT, SILU>())) return launch<4, OutT, SILU>(a, stream);
  return launch<8, OutT, SILU>(a, stream);
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

bool gemv_fits(const GemvArgs& a) {
  return a.rows >= 1 && a.in % 8 == 0 && a.ldx % 8 == 0 && a.x_group % 8 == 0 &&
         a.ldw % 8 == 0 && a.w_group % 8 == 0 && aligned16(a.x) && aligned16(a.w);
}

Status gemv_cuda(const GemvArgs& a, Stream stream) {
  if (a.in <= 0 || a.out <= 0 || a.groups <= 0) return Error{"gemv: bad shape"};
  if (!gemv_fits(a)) return Error{"gemv: needs rows >= 1, in and the strides multiples of 8, 16-byte aligned x and w"};
  if (a.silu_mul && (a.y_type != DType::bf16 || a.bias)) return Error{"gemv: silu_mul needs a bf16 result and no bias"};
  cudaError_t e;
  if (a.silu_mul) e = launch_rows<bf16, true>(a, stream);
  else if (a.y_type == DType::bf16) e = launch_rows<bf16, false>(a, stream);
  else if (a.y_type == DType::f32) e = launch_rows<float, false>(a, stream);
  else return Error{"gemv: the result must be bf16 or fp32"};
  return TANDEM_CUDA_STATUS(e, "launch gemv_kernel");
}

}  // namespace tandem::kernels
