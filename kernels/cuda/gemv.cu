// The decode-sized product (gemv.hpp): one warp per output row, weights streamed with 16-byte
// non-caching loads, several loads per lane in flight before any arithmetic, x rows from L1.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "common.cuh"
#include "gemv_tiles.hpp"
#include "tandem/kernels/gemv.hpp"
#include "tandem/kernels/launch.hpp"
#include "tandem/kernels/rows_mma.hpp"

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
// RW: weight rows per warp. A short row (in <= 1024) gives a lane only a few of the U loads one
// pass allows; a warp then takes RW rows side by side (U / RW loads each, the same count in flight),
// so a launch has RW times fewer blocks: one wave of blocks, whose loads are all issued before the
// wait, instead of a tail wave that starts its loads only after it (absorbed query, q_b, values).
// Each row's sum is built as with RW = 1 (lane l: chunks l, l + 32, ..; the same butterfly).
// From 4 x rows (no SiLU) a warp also takes RW rows, then to share each x chunk among them (SX).
// 8 weights (one 16-byte load) against 8 entries of an x row, in dot8's order: bf16 x one 16-byte
// load, fp32 x two.
__device__ __forceinline__ float dot8x(const uint4& w, const bf16* x) { return cuda::dot8(w, cuda::load16(x)); }
__device__ __forceinline__ float dot8x(const uint4& w, const float* x) {
  const float4 lo = *reinterpret_cast<const float4*>(x), hi = *reinterpret_cast<const float4*>(x + 4);
  const float xs[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&w);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fw = __bfloat1622float2(wp[i]);
    s = fmaf(fw.x, xs[2 * i], s);
    s = fmaf(fw.y, xs[2 * i + 1], s);
  }
  return s;
}

// 8 x entries as floats (bf16 converts exactly), for dot8f.
__device__ __forceinline__ void x8(const bf16* x, float (&v)[8]) {
  const uint4 raw = cuda::load16(x);
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(p[i]);
    v[2 * i] = f.x, v[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void x8(const float* x, float (&v)[8]) {
  const float4 lo = *reinterpret_cast<const float4*>(x), hi = *reinterpret_cast<const float4*>(x + 4);
  v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
}
// 8 weights (one 16-byte load) as floats, for dot8f.
__device__ __forceinline__ void w8(const uint4& w, float (&v)[8]) {
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&w);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(p[i]);
    v[2 * i] = f.x, v[2 * i + 1] = f.y;
  }
}
// dot8x's sum from weights and x entries already converted: the same fmaf chain, the same bits.
__device__ __forceinline__ float dot8f(const float (&w)[8], const float (&x)[8]) {
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) s = fmaf(w[i], x[i], s);
  return s;
}

// One pass of gemv_kernel's sums (U chunks a lane from c0) with each x chunk loaded and converted
// once for the warp's RW rows (SX).
template <int NT, int U, int RW, bool SILU, class XT>
__device__ __forceinline__ void pass_shared(const XT* xr, long ldx, int c0, int chunks, int nr, const uint4 (&wv)[RW][U],
                                            const uint4 (&uv)[RW][U], float (&acc)[RW][NT], float (&up)[RW][NT]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = c0 + 32 * u;
    if (c >= chunks) break;
    float wf[RW][8], uf[RW][8];
#pragma unroll
    for (int k = 0; k < RW; ++k) {
      w8(wv[k][u], wf[k]);
      if (SILU) w8(uv[k][u], uf[k]);
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t >= nr) break;
      float xf[8];
      x8(xr + t * ldx + 8 * c, xf);
#pragma unroll
      for (int k = 0; k < RW; ++k) {
        acc[k][t] += dot8f(wf[k], xf);
        if (SILU) up[k][t] += dot8f(uf[k], xf);
      }
    }
  }
}

// The same pass with each of the warp's rows reading its own group's x.
template <int NT, int U, int RW, bool SILU, class XT>
__device__ __forceinline__ void pass_apart(const GemvArgs& a, const int (&g)[RW], int r0, int c0, int chunks, int nr,
                                           const uint4 (&wv)[RW][U], const uint4 (&uv)[RW][U], float (&acc)[RW][NT],
                                           float (&up)[RW][NT]) {
#pragma unroll
  for (int k = 0; k < RW; ++k) {
    if (g[k] < 0) break;
    const XT* xr = static_cast<const XT*>(a.x) + g[k] * a.x_group + static_cast<long>(r0) * a.ldx;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + 32 * u;
      if (c >= chunks) break;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t >= nr) break;
        const XT* xc = xr + t * a.ldx + 8 * c;
        acc[k][t] += dot8x(wv[k][u], xc);
        if (SILU) up[k][t] += dot8x(uv[k][u], xc);
      }
    }
  }
}

// Blocks an SM must hold: 8 (64 registers a thread) for the 4-load, one-row-a-warp kernels of bf16
// x without SiLU (4 and 8 x rows). They are memory-bound with few loads a lane in flight, so a
// block fewer an SM is that many fewer loads in flight: at 68 registers (7 blocks) a batch-16 decode
// step of the 2 B model took 8% longer (9926ce1, engine/bench/results/h100-bisect22-2026-12-06.md).
// These fit 64 without spilling (ptxas -v); the 8-load, SiLU and fp32-x kernels would spill. The
// shared-x kernels (SX below, the default from 4 x rows without SiLU) take 79-165 registers and
// no minimum; they were measured so (engine/bench/results/h100-s14d-2026-12-07.md).
template <int NT, int U, int RW, bool SILU, class XT>
constexpr int kMinBlocks = (NT <= 8 && U == 4 && RW == 1 && !SILU && std::is_same_v<XT, bf16>) ? 8 : 1;

// SX (shared x, RW > 1): a warp's RW rows are of one group (gemv_shares_x), so each x chunk is
// loaded and converted once for all of them, and each weight chunk once for all x rows: with many
// x rows (6 to 16: batch 6 and 16 decode, verifications) the loop is otherwise bound by the L1
// reads of x (16 bytes per x row and weight chunk) and the conversions, not by the weight stream.
// The sums are the same fmaf chains in the same order as SX = false (dot8f).
template <int NT, int U, int RW, class OutT, bool SILU, class XT, bool SX = false>
__global__ void __launch_bounds__(kWarps * 32, (kMinBlocks<NT, U, RW, SILU, XT>)) gemv_kernel(GemvArgs a) {
  const long first = (static_cast<long>(blockIdx.x) * kWarps + threadIdx.x / 32) * RW;
  const int lane = threadIdx.x % 32;
  const long total = static_cast<long>(a.groups) * a.out;
  const int chunks = a.in / 8;
  const bf16 *wg[RW], *wu[RW];
  int g[RW], o[RW];
#pragma unroll
  for (int k = 0; k < RW; ++k) {
    const long row = first + k;
    const bool live = row < total;
    g[k] = live ? static_cast<int>(row / a.out) : -1, o[k] = live ? static_cast<int>(row % a.out) : 0;
    wg[k] = static_cast<const bf16*>(a.w) + (live ? g[k] : 0) * a.w_group + o[k] * a.ldw;
    wu[k] = wg[k] + a.up_offset * a.ldw;
  }
  uint4 wv[RW][U], uv[RW][U];
  if constexpr (SX) {  // a warp's rows past the end are summed (never stored): from zeros
#pragma unroll
    for (int k = 0; k < RW; ++k)
#pragma unroll
      for (int u = 0; u < U; ++u) wv[k][u] = uv[k][u] = make_uint4(0, 0, 0, 0);
  }
  auto load_pass = [&](int c0) {
#pragma unroll
    for (int k = 0; k < RW; ++k)
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + 32 * u;
        if (g[k] >= 0 && c < chunks) {
          wv[k][u] = cuda::load_nc16(wg[k] + 8 * c);
          if (SILU) uv[k][u] = cuda::load_nc16(wu[k] + 8 * c);
        }
      }
  };
  load_pass(lane);
  cuda::pdl_begin();
  if (g[0] < 0) return;
  const int r0 = static_cast<int>(blockIdx.y) * NT;
  const int nr = min(NT, a.rows - r0);
  float acc[RW][NT], up[RW][NT];
#pragma unroll
  for (int k = 0; k < RW; ++k)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[k][t] = 0.f, up[k][t] = 0.f;
  for (int c0 = lane; c0 < chunks; c0 += 32 * U) {
    if (c0 != lane) load_pass(c0);
    if constexpr (SX)
      pass_shared<NT, U, RW, SILU>(static_cast<const XT*>(a.x) + g[0] * a.x_group + static_cast<long>(r0) * a.ldx, a.ldx, c0,
                                   chunks, nr, wv, uv, acc, up);
    else
      pass_apart<NT, U, RW, SILU, XT>(a, g, r0, c0, chunks, nr, wv, uv, acc, up);
  }
  // Lane t writes x row r0 + t's result of each of the warp's rows.
#pragma unroll
  for (int k = 0; k < RW; ++k) {
    if (g[k] < 0) break;
    float mine = cuda::warp_rows_result<NT, SILU>(acc[k], up[k]);
    if (lane < nr) {
      const long row = first + k;
      if (!SILU && a.bias) mine += cuda::to_float(static_cast<const OutT*>(a.bias)[row]);
      static_cast<OutT*>(a.y)[(r0 + lane) * a.ldy + g[k] * a.y_group + o[k]] = cuda::from_float<OutT>(mine);
    }
  }
}

// One configuration of gemv_kernel: NT x rows a grid row, U loads a lane, RW weight rows a warp,
// SX: x shared by a warp's rows.
template <int NT, int U, int RW, class OutT, bool SILU, class XT, bool SX = false>
struct Gemv {
  static dim3 grid(const GemvArgs& a) {
    const long rows = static_cast<long>(a.groups) * a.out, warps = (rows + RW - 1) / RW;
    return dim3(static_cast<unsigned>((warps + kWarps - 1) / kWarps), static_cast<unsigned>((a.rows + NT - 1) / NT));
  }
  // Blocks of this configuration the whole GPU holds at once (registers decide), asked once.
  static long resident() {
    static const long n = [] {
      int dev = 0, sms = 0, per_sm = 0;
      cudaGetDevice(&dev);
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_kernel<NT, U, RW, OutT, SILU, XT, SX>, kWarps * 32, 0);
      return static_cast<long>(std::max(sms, 1)) * std::max(per_sm, 1);
    }();
    return n;
  }
  static bool one_wave(const GemvArgs& a) {
    const dim3 g = grid(a);
    return static_cast<long>(g.x) * g.y <= resident();
  }
  static cudaError_t launch(const GemvArgs& a, Stream stream) {
    return cuda::launch_pdl(gemv_kernel<NT, U, RW, OutT, SILU, XT, SX>, grid(a), dim3(kWarps * 32), 0, stream, a);
  }
};

// Weight rows a warp takes, sharing x, from 4 x rows without SiLU: TANDEM_GEMV_SHARED_ROWS=1|2|4
// (read once; 1: one row a warp, the kernel before x was shared), else by the x rows a grid row
// takes (NT): 4 from 16 (the 2 B model's batch-16 step 3.343 against 3.553 ms with 2, H100,
// engine/bench/results/h100-s15-2026-12-07.md), 2 below (batch 6: 2.001 against 2.026, no gain
// worth the registers). Every choice gives the same bits (gemv_kernel).
int shared_rows(int x_rows) {
  static const int forced = [] {
    const char* v = std::getenv("TANDEM_GEMV_SHARED_ROWS");
    const std::string s = v ? v : "";
    return s == "1" ? 1 : s == "2" ? 2 : s == "4" ? 4 : 0;
  }();
  return forced ? forced : x_rows >= 16 ? 4 : 2;
}

// A warp's RW consecutive weight rows are of one group (ungrouped, or groups of a multiple of RW rows).
bool gemv_shares_x(const GemvArgs& a, int rw) { return a.groups == 1 || a.out % rw == 0; }

// The configuration for NT x rows, handed to f, chosen by the shape alone: several weight rows a
// warp where one pass of 8 loads a lane covers them (NT <= 2, no SiLU: the 8-load configuration);
// from 4 x rows, without SiLU, several weight rows a warp sharing each x chunk (SX), 4 loads a
// lane in flight either way. With SiLU (gate and up rows: twice the registers) sharing x was
// slower: the 2 B model's dense gate_up at 6 / 16 rows took 65.9 / 149.9 us against 58.2 / 122.3
// (H100, engine/bench/results/h100-s14d-2026-12-07.md), so it keeps one row a warp.
template <int NT, class OutT, bool SILU, class XT, class F>
auto with_config(const GemvArgs& a, F&& f) {
  if constexpr (NT <= 2 && !SILU) {
    if (a.in <= 32 * 8 * 2) return f(Gemv<NT, 2, 4, OutT, SILU, XT>{});
    if (a.in <= 32 * 8 * 4) return f(Gemv<NT, 4, 2, OutT, SILU, XT>{});
    return f(Gemv<NT, 8, 1, OutT, SILU, XT>{});
  } else if constexpr (NT >= 4 && !SILU) {
    const int rw = shared_rows(NT);
    if (rw == 4 && gemv_shares_x(a, 4)) return f(Gemv<NT, 1, 4, OutT, SILU, XT, true>{});
    if (rw >= 2 && gemv_shares_x(a, 2)) return f(Gemv<NT, 2, 2, OutT, SILU, XT, true>{});
    return f(Gemv<NT, 4, 1, OutT, SILU, XT>{});
  } else {
    return f(Gemv<NT, 4, 1, OutT, SILU, XT>{});
  }
}

// The device's L2 in bytes, asked once.
long l2_bytes() {
  static const long n = [] {
    int dev = 0, bytes = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, dev);
    return static_cast<long>(bytes);
  }();
  return n;
}

// x rows per warp: the fewest whose grid still fits one wave of resident blocks, while the weight
// re-reads stay in L2. A warp's time grows with its rows (an 8-row `mlp down` of the DFlash pair's
// target cost 2.3x a 1-row one with the same 96 blocks: engine/bench/results/h100-verify21-2026-12-06.md),
// while more blocks cost little until they need a second wave. But each grid row reads the
// weights again: from L2 for the pair's small matrices, from memory once a launch's re-reads
// outgrow L2, so a smaller NT is taken only while its grid rows times the weight bytes fit in L2.
// (A guard by reasoning, not by a measured loss: the 2 B model's batch 6 and 16 steps read the
// same with and without it on an H100, engine/bench/results/h100-s4-merged-2026-12-06.md.)
// 16 rows a warp past 8 when 8's re-reads outgrow L2 or its grid a wave: a batch-16 step's LM head
// (630 MB) read twice from memory took 814 us of a 4.5 ms step on an H100, 2.6x its one read
// (profile-v3-b16.txt of engine/bench/results/h100-bisect22-2026-12-06/).
// A row's sum is the same whatever NT (gemv_kernel), so the choice never changes a result.
template <class OutT, bool SILU, class XT = bf16>
cudaError_t launch_rows(const GemvArgs& a, Stream stream) {
  const long weight_bytes = static_cast<long>(a.groups) * a.out * a.in * 2 * (SILU ? 2 : 1);
  auto in_l2 = [&](int nt) { return (a.rows + nt - 1) / nt * weight_bytes <= l2_bytes(); };
  auto fits = [&](auto config) { return config.one_wave(a); };
  auto go = [&](auto config) { return config.launch(a, stream); };
  if (a.rows <= 1 || (in_l2(1) && with_config<1, OutT, SILU, XT>(a, fits))) return with_config<1, OutT, SILU, XT>(a, go);
  if (a.rows <= 2 || (in_l2(2) && with_config<2, OutT, SILU, XT>(a, fits))) return with_config<2, OutT, SILU, XT>(a, go);
  if (a.rows <= 4 || (in_l2(4) && with_config<4, OutT, SILU, XT>(a, fits))) return with_config<4, OutT, SILU, XT>(a, go);
  if (a.rows <= 8 || (in_l2(8) && with_config<8, OutT, SILU, XT>(a, fits))) return with_config<8, OutT, SILU, XT>(a, go);
  return with_config<16, OutT, SILU, XT>(a, go);
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// An experiment, off unless TANDEM_GEMV_MMA=1: the ungrouped bf16 products without bias on the
// tensor cores (rows_mma.hpp) instead. A row's sum there depends on the inner size alone (four warps'
// fixed slabs, each tile's columns apart), not on the rows beside it, so it is as batch-invariant
// as this kernel, with another rounding; cuda_spec_check's bit-for-bit comparison of verified and
// decoded rows is what tells.
bool mma_instead(const GemvArgs& a, RowsMma& m) {
  static const bool on = [] {
    const char* v = std::getenv("TANDEM_GEMV_MMA");
    return v && std::string(v) == "1";
  }();
  if (!on || a.groups != 1 || a.bias || a.x_type != DType::bf16) return false;
  m.rows = a.rows, m.in = a.in, m.out = a.out, m.x = a.x, m.ldx = a.ldx, m.w = a.w, m.ldw = a.ldw;
  m.y = a.y, m.ldy = a.ldy, m.y_type = a.y_type, m.silu = a.silu_mul, m.up_offset = a.up_offset;
  return rows_mma_fits(m);
}

// The fewest x rows a launch has before the tiled kernel (gemv_tiles.hpp) takes it (gemv.hpp's
// set_gemv_tile_rows; 0: never).
std::atomic<int> tile_from{kGemvTileRows};  // gemv.hpp

// Whether the tiled kernel runs this launch: enough rows, operands it takes, weights of at most
// 4 MiB and their re-reads (one a tile of 8 rows) within L2. A small weight's product is bound by
// latency, which the tile shares out; a large one's by reading the weight, which gemv_kernel does
// once for up to 16 rows where the tiles read it once per 8 (not measured on large models: kept
// off them).
bool tiles_instead(const GemvArgs& a) {
  const int from = tile_from.load(std::memory_order_relaxed);
  if (from <= 0 || a.rows < from || !gemv_tiles_fit(a)) return false;
  const long weight_bytes = static_cast<long>(a.groups) * a.out * a.in * 2 * (a.silu_mul ? 2 : 1);
  return weight_bytes <= 4L << 20 && gemv_tiles_reads(a) * weight_bytes <= l2_bytes();
}

}  // namespace

void set_gemv_tile_rows(int rows) { tile_from.store(rows < 0 ? 0 : rows, std::memory_order_relaxed); }

bool gemv_fits(const GemvArgs& a) {
  return a.rows >= 1 && a.in % 8 == 0 && a.ldx % 8 == 0 && a.x_group % 8 == 0 &&
         a.ldw % 8 == 0 && a.w_group % 8 == 0 && aligned16(a.x) && aligned16(a.w);
}

Status gemv_cuda(const GemvArgs& a, Stream stream) {
  if (a.in <= 0 || a.out <= 0 || a.groups <= 0) return Error{"gemv: bad shape"};
  if (!gemv_fits(a)) return Error{"gemv: needs rows >= 1, in and the strides multiples of 8, 16-byte aligned x and w"};
  if (a.silu_mul && (a.y_type != DType::bf16 || a.bias)) return Error{"gemv: silu_mul needs a bf16 result and no bias"};
  if (a.x_type != DType::bf16 && a.x_type != DType::f32) return Error{"gemv: x must be bf16 or fp32"};
  if (RowsMma m; mma_instead(a, m)) return rows_mma(m, stream);
  if (tiles_instead(a)) return TANDEM_CUDA_STATUS(gemv_tiles_launch(a, stream), "launch gemv_tile_kernel");
  cudaError_t e;
  if (a.x_type == DType::f32) {
    if (a.silu_mul || a.y_type != DType::f32) return Error{"gemv: fp32 x takes an fp32 result and no silu_mul"};
    e = launch_rows<float, false, float>(a, stream);
  } else if (a.silu_mul) e = launch_rows<bf16, true>(a, stream);
  else if (a.y_type == DType::bf16) e = launch_rows<bf16, false>(a, stream);
  else if (a.y_type == DType::f32) e = launch_rows<float, false>(a, stream);
  else return Error{"gemv: the result must be bf16 or fp32"};
  return TANDEM_CUDA_STATUS(e, "launch gemv_kernel");
}

}  // namespace tandem::kernels
