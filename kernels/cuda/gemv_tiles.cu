// The decode-sized product for many x rows (gemv_tiles.hpp): a warp takes a tile of output rows
// by x rows instead of one output row, so each 16-byte weight load and each x chunk serves the
// whole tile, and the tile's lane sums are reduced together (31 shuffles for 32 sums instead of
// five a sum). Every sum is rounded exactly as in gemv_kernel (gemv.cu): lane l adds the dot8 of
// chunks l, l + 32, .. in order, starting from zero, and the lanes' sums meet in the tree of the
// xor butterfly (pairs 16 apart first, then 8, 4, 2, 1). A reduce-scatter over the same pairs
// builds that tree (each step adds a lane's own sum and its partner's, and a + b == b + a in
// IEEE arithmetic), so a row's result is the same bits whichever kernel computes it: a decode
// (gemv_kernel) and a verification of many rows (this one) agree, as cuda_spec_check demands.
#include <cstdint>

#include "common.cuh"
#include "gemv_tiles.hpp"
#include "tandem/kernels/launch.hpp"

namespace tandem::kernels {
namespace {

using cuda::bf16;
constexpr int kWarps = 4;

// O output rows (gate/up pairs when SILU) by T x rows a warp: 32 sums a lane either way.
template <bool SILU>
constexpr int kOut = SILU ? 2 : 4;
constexpr int kTile = 8;

// Reduces v[0..32) over the warp as warp_sum does each of them, leaving lane l the total of v[l].
// Step `off`: a lane keeps the half of its sums that its bit `off` selects (the lower half when
// clear), adds its partner's copy of that half and sends the other; after 16, 8, 4, 2 and 1 lane l
// holds index 16 b4 + 8 b3 + 4 b2 + 2 b1 + b0 = l.
template <int HALF>
__device__ __forceinline__ void scatter_step(float (&v)[32], int lane) {
  const bool upper = (lane & HALF) != 0;  // the offset of step HALF is HALF
#pragma unroll
  for (int i = 0; i < HALF; ++i) {
    const float send = upper ? v[i] : v[i + HALF];
    const float keep = upper ? v[i + HALF] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, HALF);
  }
}
__device__ __forceinline__ float reduce_scatter32(float (&v)[32]) {
  const int lane = threadIdx.x % 32;
  scatter_step<16>(v, lane);
  scatter_step<8>(v, lane);
  scatter_step<4>(v, lane);
  scatter_step<2>(v, lane);
  scatter_step<1>(v, lane);
  return v[0];
}

template <bool SILU, class OutT>
__global__ void __launch_bounds__(kWarps * 32) gemv_tile_kernel(GemvArgs a) {
  constexpr int O = kOut<SILU>, S = SILU ? 2 : 1;
  static_assert(O * kTile * S == 32, "a lane reduces 32 sums");
  const int lane = threadIdx.x % 32;
  const long total = static_cast<long>(a.groups) * a.out;
  const long first = (static_cast<long>(blockIdx.x) * kWarps + threadIdx.x / 32) * O;
  const int chunks = a.in / 8;
  // A warp's rows share a group (gemv_tiles_fit: out % O == 0 when grouped).
  const int g = static_cast<int>((first < total ? first : total - 1) / a.out);
  const bf16* w[O];
#pragma unroll
  for (int o = 0; o < O; ++o) {
    const long row = first + o < total ? first + o : total - 1;  // rows past the end: a real row, not stored
    w[o] = static_cast<const bf16*>(a.w) + g * a.w_group + (row - static_cast<long>(g) * a.out) * a.ldw;
  }
  uint4 wv[O][S];
  auto load_w = [&](int c) {
#pragma unroll
    for (int o = 0; o < O; ++o)
#pragma unroll
      for (int s = 0; s < S; ++s) wv[o][s] = cuda::load_nc16(w[o] + s * a.up_offset * a.ldw + 8 * c);
  };
  if (lane < chunks) load_w(lane);  // the weights do not depend on the kernel before this one
  cuda::pdl_begin();
  if (first >= total) return;
  const int r0 = static_cast<int>(blockIdx.y) * kTile;
  const int nr = min(kTile, a.rows - r0);
  const bf16* x[kTile];
#pragma unroll
  for (int t = 0; t < kTile; ++t)
    x[t] = static_cast<const bf16*>(a.x) + g * a.x_group + static_cast<long>(r0 + (t < nr ? t : 0)) * a.ldx;
  float acc[32];  // index (t * O + o) * S + s
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = 0.f;
  for (int c = lane; c < chunks; c += 32) {
    if (c != lane) load_w(c);
#pragma unroll
    for (int t = 0; t < kTile; ++t) {
      const uint4 xv = cuda::load16(x[t] + 8 * c);
#pragma unroll
      for (int o = 0; o < O; ++o)
#pragma unroll
        for (int s = 0; s < S; ++s) acc[(t * O + o) * S + s] += cuda::dot8(wv[o][s], xv);
    }
  }
  float mine = reduce_scatter32(acc);  // lane l: sum (t * O + o) * S + s = l
  int pair = lane;
  if (SILU) {
    const float up = __shfl_down_sync(0xffffffffu, mine, 1);  // even lanes: the gate, their neighbour the up
    mine = cuda::silu_mul(mine, up);
    pair = lane / 2;
    if (lane % 2) return;
  }
  const int t = pair / O, o = pair % O;
  const long row = first + o;
  if (t >= nr || row >= total) return;
  const int oo = static_cast<int>(row - static_cast<long>(g) * a.out);
  if (!SILU && a.bias) mine += cuda::to_float(static_cast<const OutT*>(a.bias)[row]);
  static_cast<OutT*>(a.y)[(r0 + t) * a.ldy + g * a.y_group + oo] = cuda::from_float<OutT>(mine);
}

template <bool SILU, class OutT>
cudaError_t launch_tiles(const GemvArgs& a, Stream stream) {
  const long total = static_cast<long>(a.groups) * a.out, warps = (total + kOut<SILU> - 1) / kOut<SILU>;
  const dim3 grid(static_cast<unsigned>((warps + kWarps - 1) / kWarps), static_cast<unsigned>((a.rows + kTile - 1) / kTile));
  return cuda::launch_pdl(gemv_tile_kernel<SILU, OutT>, grid, dim3(kWarps * 32), 0, stream, a);
}

}  // namespace

bool gemv_tiles_fit(const GemvArgs& a) {
  return a.x_type == DType::bf16 && (a.groups == 1 || a.out % kOut<true> == 0 && a.out % kOut<false> == 0) &&
         (a.y_type == DType::bf16 || (a.y_type == DType::f32 && !a.silu_mul));
}

long gemv_tiles_reads(const GemvArgs& a) { return (a.rows + kTile - 1) / kTile; }

cudaError_t gemv_tiles_launch(const GemvArgs& a, Stream stream) {
  if (a.silu_mul) return launch_tiles<true, bf16>(a, stream);
  if (a.y_type == DType::f32) return launch_tiles<false, float>(a, stream);
  return launch_tiles<false, bf16>(a, stream);
}

}  // namespace tandem::kernels
