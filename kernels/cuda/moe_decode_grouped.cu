// moe_decode.hpp's grouped form: three launches, each chosen expert's rows read once per step.
//   group     one block: the pairs (token, slot) of each expert, the experts in use, in order
//   gate_up   a warp per (expert in use, row): the gate and up rows held in registers, applied to
//             each of the expert's pairs; the shared experts' rows to every token
//   down      a block per R output rows: those rows of every expert in use staged in shared
//             memory, then a warp per token sums its slots as moe_decode.cu's down kernel does
// Bit for bit the per-pair kernels' results: a gate_up row's lane sums run over the same chunks in
// the same order and meet in the same shuffle tree; a down output's lane runs one fp32 chain over
// its chunks slot by slot (so its experts cannot be summed apart and added after), which is why the
// down kernel gathers a row's experts in one block rather than holding one expert's rows a warp.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common.cuh"
#include "moe_decode_rows.cuh"
#include "tandem/kernels/launch.hpp"
#include "tandem/kernels/moe_decode.hpp"

namespace tandem::kernels {
namespace {

using cuda::bf16;
constexpr int kGroupThreads = 512, kWarps = 4, kDownWarps = 8, kLoads = 8;
// Shared memory a down block may take: up to this, two blocks an SM (the staging of one overlaps
// the sums of the other); a single row per block may take up to kDownSmemMax.
constexpr long kDownSmemPair = 113 * 1024, kDownSmemMax = 200 * 1024;
// Tokens a down block sums: more share the staged rows, fewer give more blocks.
constexpr int kDownTokens = 64;

using moe_rows::act_width;

__global__ void __launch_bounds__(kGroupThreads) group_kernel(MoeDecodeArgs a) {
  cuda::pdl_begin();
  const int E = a.experts, T = a.tokens, K = a.top_k, P = T * K;
  const moe_rows::Groups g(a.groups, E, T, K);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned below = (1u << lane) - 1;
  // A warp an expert: its pairs in pair order, 32 at a time (ballot, then each hit's rank).
  for (int e = warp; e < E; e += kGroupThreads / 32) {
    int n = 0;
    for (int p0 = 0; p0 < P; p0 += 32) {
      const int p = p0 + lane;
      const bool hit = p < P && __ldcg(a.expert + p) == e;
      const unsigned m = __ballot_sync(0xffffffffu, hit);
      if (hit) g.list[static_cast<long>(e) * T + n + __popc(m & below)] = p;
      n += __popc(m);
    }
    if (lane == 0) g.count[e] = n;
  }
  __syncthreads();
  if (warp == 0) {
    int n = 0;
    for (int e0 = 0; e0 < E; e0 += 32) {
      const int e = e0 + lane;
      const bool in_use = e < E && g.count[e] > 0;
      const unsigned m = __ballot_sync(0xffffffffu, in_use);
      if (in_use) {
        const int j = n + __popc(m & below);
        g.used[j] = e, g.index[e] = j;
      }
      n += __popc(m);
    }
    if (lane == 0) *g.n = n;
  }
  __syncthreads();
  for (int p = threadIdx.x; p < P; p += kGroupThreads) {
    const int e = __ldcg(a.expert + p);
    g.pos[p] = e >= 0 && e < E ? g.index[e] : 0;
  }
}

// Warp w < shared_width: the shared experts' row w for every token (slot top_k); beyond, warp
// (j, o): row o of the j-th expert in use for each of its pairs. The rows are loaded once into
// registers (hidden <= 32 * 8 * kLoads); the shared rows before waiting for the group kernel.
__global__ void __launch_bounds__(kWarps * 32) gate_up_kernel(MoeDecodeArgs a, long aw, int jcap) {
  const long warp = static_cast<long>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const bool live = warp < a.shared_width + static_cast<long>(jcap) * a.width, shared = warp < a.shared_width;
  const int chunks = a.hidden / 8;
  uint4 gv[kLoads], uv[kLoads];
  auto load_rows = [&](const bf16* gate, const bf16* up) {
#pragma unroll
    for (int i = 0; i < kLoads; ++i)
      if (lane + 32 * i < chunks) gv[i] = cuda::load_nc16(gate + 8 * (lane + 32 * i)), uv[i] = cuda::load_nc16(up + 8 * (lane + 32 * i));
  };
  const int so = static_cast<int>(warp);
  const bf16* sgu = static_cast<const bf16*>(a.shared_gate_up);
  if (live && shared) load_rows(sgu + static_cast<long>(so) * a.hidden, sgu + static_cast<long>(a.shared_width + so) * a.hidden);
  cuda::pdl_begin();
  if (!live) return;
  const moe_rows::Groups g(a.groups, a.experts, a.tokens, a.top_k);
  int o = so, n = a.tokens;
  const std::int32_t* list = nullptr;
  if (!shared) {
    const long r = warp - a.shared_width;
    const int j = static_cast<int>(r / a.width);
    o = static_cast<int>(r % a.width);
    if (j >= __ldcg(g.n)) return;
    const int e = __ldcg(g.used + j);
    n = __ldcg(g.count + e), list = g.list + static_cast<long>(e) * a.tokens;
    const bf16* w = static_cast<const bf16*>(a.gate_up) + static_cast<long>(e) * 2 * a.width * a.hidden;
    load_rows(w + static_cast<long>(o) * a.hidden, w + static_cast<long>(a.width + o) * a.hidden);
  }
  int pairs = 0;  // lane l: the expert's pair i0 + l (32 at a time, read ahead of their sums)
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
    for (int k = 0; k < kLoads; ++k) {
      if (lane + 32 * k >= chunks) break;
      const uint4 xv = cuda::load16(x + 8 * (lane + 32 * k));
      gs += cuda::dot8(gv[k], xv), us += cuda::dot8(uv[k], xv);
    }
    moe_rows::store_act(a, aw, moe_rows::GateUpRow{t, slot, o, !shared}, cuda::warp_sum(gs), cuda::warp_sum(us));
  }
}

// Block (rows o0 .. o0 + R - 1, tokens t0 .. t0 + kDownTokens - 1). Shared memory: R rows (each
// aw / 8 chunks) of the shared experts, then R rows of each expert in use (room for jcap), then
// the experts' ids. A warp a token: each
// lane runs moe_decode.cu's chain (chunk c = lane, lane + 32, ... over the slots then the shared
// experts, acc += scale * dot8) once per row, the activation chunk loaded once for the R rows.
template <int R>
__global__ void __launch_bounds__(kDownWarps * 32) down_kernel(MoeDecodeArgs a, long aw, int jcap) {
  extern __shared__ uint4 rows[];
  const int o0 = blockIdx.x * R, t0 = blockIdx.y * kDownTokens;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int per = a.width / 8, sper = a.shared_width / 8, stride = static_cast<int>(aw / 8);
  const int routed = a.top_k * per, total = routed + sper;
  for (int i = threadIdx.x; i < R * sper; i += kDownWarps * 32) {
    const int r = i / sper, c = i % sper;
    cuda::cp_async16(rows + r * stride + c, static_cast<const bf16*>(a.shared_down) + static_cast<long>(o0 + r) * a.shared_width + 8 * c);
  }
  cuda::pdl_begin();
  const moe_rows::Groups g(a.groups, a.experts, a.tokens, a.top_k);
  const int used = __ldcg(g.n);
  // The experts in use, copied first: the staging loop then issues its copies without an L2
  // round trip each.
  int* experts = reinterpret_cast<int*>(rows + (1 + jcap) * R * stride);
  for (int j = threadIdx.x; j < used; j += kDownWarps * 32) experts[j] = __ldcg(g.used + j);
  __syncthreads();
  for (int i = threadIdx.x; i < used * R * per; i += kDownWarps * 32) {
    const int j = i / (R * per), r = i / per % R, c = i % per;
    const long e = experts[j];
    cuda::cp_async16(rows + ((1 + j) * R + r) * stride + c, static_cast<const bf16*>(a.down) + (e * a.hidden + o0 + r) * a.width + 8 * c);
  }
  cuda::cp_async_wait_all();
  __syncthreads();
  const int t_end = min(a.tokens, t0 + kDownTokens);
  for (int t = t0 + warp; t < t_end; t += kDownWarps) {
    // Lane k < top_k holds slot k's place in `used` and weight; the chain's lanes read them by shuffle.
    const int my_pos = lane < a.top_k ? __ldcg(g.pos + t * a.top_k + lane) : 0;
    const float my_weight = lane < a.top_k ? __ldcg(a.weight + t * a.top_k + lane) : 0.f;
    const bf16* act = static_cast<const bf16*>(a.act) + static_cast<long>(t) * (a.top_k + 1) * aw;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.f;
    // kLoads whole-warp rounds at a time (the shuffles' source lanes live; a lane past the end adds
    // nothing): their activation loads issued together, then the chain in chunk order.
    for (int c0 = lane; c0 - lane < total; c0 += 32 * kLoads) {
      uint4 xv[kLoads];
      const uint4* wr[kLoads];
      float scale[kLoads];
#pragma unroll
      for (int i = 0; i < kLoads; ++i) {
        const int c = c0 + 32 * i;
        const int slot = c < routed ? c / per : a.top_k, cc = c < routed ? c % per : c - routed;
        const int place = __shfl_sync(0xffffffffu, my_pos, slot < a.top_k ? slot : 0);
        const float w = __shfl_sync(0xffffffffu, my_weight, slot < a.top_k ? slot : 0);
        scale[i] = slot < a.top_k ? w : 1.f;
        wr[i] = rows + (slot < a.top_k ? (1 + place) * R : 0) * stride + cc;
        if (c < total) xv[i] = cuda::load16(act + slot * aw + 8 * cc);
      }
#pragma unroll
      for (int i = 0; i < kLoads; ++i) {
        if (c0 + 32 * i >= total) break;
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] += scale[i] * cuda::dot8(wr[i][r * stride], xv[i]);
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float s = cuda::warp_sum(acc[r]);
      if (lane == 0) a.out[static_cast<long>(t) * a.hidden + o0 + r] = s;
    }
  }
}

int jcap_of(const MoeDecodeArgs& a) { return std::min(a.experts, a.tokens * a.top_k); }

long down_smem(const MoeDecodeArgs& a, int R) { return (1L + jcap_of(a)) * R * act_width(a) * 2 + 4L * jcap_of(a); }

// TANDEM_MOE_DOWN_ROWS=1|2|4 (read once; 0: unset): the rows a down block takes where they fit
// two blocks an SM, for measuring (a row's sum is the same chain whatever R).
int down_rows_setting() {
  static const int n = [] {
    const char* v = std::getenv("TANDEM_MOE_DOWN_ROWS");
    const std::string s = v ? v : "";
    return s == "1" ? 1 : s == "2" ? 2 : s == "4" ? 4 : 0;
  }();
  return n;
}

// Rows a down block takes: the most of 4, 2, 1 that divide hidden and fit two blocks an SM; else
// one row if it fits kDownSmemMax; 0 if none fits.
int down_rows(const MoeDecodeArgs& a) {
  if (const int R = down_rows_setting(); R > 0 && a.hidden % R == 0 && down_smem(a, R) <= kDownSmemPair) return R;
  for (int R : {4, 2})
    if (a.hidden % R == 0 && down_smem(a, R) <= kDownSmemPair) return R;
  return down_smem(a, 1) <= kDownSmemMax ? 1 : 0;
}

template <int R>
cudaError_t launch_down(const MoeDecodeArgs& a, long aw, Stream stream) {
  static const cudaError_t configured =
      cudaFuncSetAttribute(down_kernel<R>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kDownSmemMax));
  if (configured != cudaSuccess) return configured;
  const dim3 grid(static_cast<unsigned>(a.hidden / R), static_cast<unsigned>((a.tokens + kDownTokens - 1) / kDownTokens));
  return cuda::launch_pdl(down_kernel<R>, grid, dim3(kDownWarps * 32), static_cast<size_t>(down_smem(a, R)), stream, a, aw, jcap_of(a));
}

}  // namespace

long moe_decode_group_ints(int experts, int top_k, int tokens) {
  return 1 + 3L * experts + static_cast<long>(tokens) * top_k + static_cast<long>(experts) * tokens;
}

bool moe_decode_groups(const MoeDecodeArgs& a) {
  return a.groups && a.experts > 0 && a.tokens >= 2 && a.top_k <= 32 && a.hidden <= 32 * 8 * kLoads && moe_decode_fits(a) &&
         down_rows(a) > 0;
}

namespace moe_rows {

Status group_cuda(const MoeDecodeArgs& a, Stream stream) {
  return TANDEM_CUDA_STATUS(cuda::launch_pdl(group_kernel, dim3(1), dim3(kGroupThreads), 0, stream, a), "moe_decode group_kernel");
}

Status grouped_cuda(const MoeDecodeArgs& a, Stream stream) {
  const long aw = act_width(a);
  if (auto e = group_cuda(a, stream); !e) return e;
  const int jcap = jcap_of(a);
  const long warps = a.shared_width + static_cast<long>(jcap) * a.width;
  if (auto e = TANDEM_CUDA_STATUS(cuda::launch_pdl(gate_up_kernel, dim3(static_cast<unsigned>((warps + kWarps - 1) / kWarps)),
                                               dim3(kWarps * 32), 0, stream, a, aw, jcap),
                              "moe_decode grouped gate_up_kernel");
      !e)
    return e;
  const int R = down_rows(a);
  const cudaError_t down = R == 4 ? launch_down<4>(a, aw, stream) : R == 2 ? launch_down<2>(a, aw, stream) : launch_down<1>(a, aw, stream);
  return TANDEM_CUDA_STATUS(down, "moe_decode grouped down_kernel");
}

}  // namespace moe_rows
}  // namespace tandem::kernels
