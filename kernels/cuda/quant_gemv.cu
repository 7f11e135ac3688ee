// Decode-sized products over quantised weight stacks, and their dequantisation into bf16
// (quant_gemv.hpp). The product has gemv.cu's shape: one warp per output row, its weight row
// streamed once with several loads per lane in flight and applied to every x row.
#include <cstdint>

#include "common.cuh"
#include "quant_chunk.cuh"
#include "tandem/kernels/gemv.hpp"
#include "tandem/kernels/launch.hpp"
#include "tandem/kernels/quant_gemv.hpp"

namespace tandem::kernels {
namespace {

using cuda::bf16;
constexpr int kWarps = 4;
using quant::kLoads;

long outputs(const QuantGemvArgs& a) {
  if (a.silu_mul) return a.w.rows;
  return static_cast<long>(a.w.count) * a.w.rows + static_cast<long>(a.w2.count) * a.w2.rows;
}

// NT: x rows per pass (rows <= NT); XT: x's element type (bf16, or float for fp32 inputs).
template <QuantFormat F, int NT, class OutT, bool SILU, class XT>
__global__ void __launch_bounds__(kWarps * 32) quant_gemv_kernel(QuantGemvArgs a, long total) {
  const long row = static_cast<long>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const bool live = row < total;
  const long first = static_cast<long>(a.w.count) * a.w.rows;
  const bool second = !SILU && row >= first;
  const QuantMatrices w = second ? a.w2 : a.w;
  const long r = second ? row - first : row;
  const long m = SILU || !live ? 0 : r / w.rows;  // (past the end w may be an empty w2)
  const int o = live ? static_cast<int>(r % w.rows) : 0;
  const XT* x = static_cast<const XT*>(a.x);
  float acc[NT], up[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.f, up[t] = 0.f;
  const int chunks = w.in / 16;
  quant::Chunk wc[kLoads<F>], uc[kLoads<F>];
  auto load_pass = [&](int c0) {
#pragma unroll
    for (int u = 0; u < kLoads<F>; ++u) {
      const int c = c0 + 32 * u;
      if (c < chunks) {
        wc[u] = quant::load_chunk<F>(w, m, o, 16 * c);
        if (SILU) uc[u] = quant::load_chunk<F>(w, 1, o, 16 * c);
      }
    }
  };
  // The first pass's weight loads before the wait for the kernel that writes x (programmatic
  // launch): they are in flight while that kernel finishes.
  if (live) load_pass(lane);
  cuda::pdl_begin();
  if (!live) return;
  for (int c0 = lane; c0 < chunks; c0 += 32 * kLoads<F>) {
    if (c0 != lane) load_pass(c0);
#pragma unroll
    for (int u = 0; u < kLoads<F>; ++u) {
      const int c = c0 + 32 * u;
      if (c >= chunks) break;
      float wv[16], uv[16];
      quant::decode<F>(wc[u], wv);
      if (SILU) quant::decode<F>(uc[u], uv);
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t >= a.rows) break;
        const XT* xr = x + t * a.ldx + 16 * c;
        acc[t] += quant::dot16(wv, xr);
        if (SILU) up[t] += quant::dot16(uv, xr);
      }
    }
  }
  // Lane t writes x row t's result.
  float mine = cuda::warp_rows_result<NT, SILU>(acc, up);
  if (lane < a.rows) {
    if (!SILU && a.bias) mine += cuda::to_float(static_cast<const OutT*>(a.bias)[row]);
    static_cast<OutT*>(a.y)[lane * a.ldy + row] = cuda::from_float<OutT>(mine);
  }
}

template <QuantFormat F, int NT, class OutT, bool SILU, class XT>
cudaError_t launch(const QuantGemvArgs& a, Stream stream) {
  const long total = outputs(a);
  return cuda::launch_pdl(quant_gemv_kernel<F, NT, OutT, SILU, XT>, dim3(static_cast<unsigned>((total + kWarps - 1) / kWarps)),
                          dim3(kWarps * 32), 0, stream, a, total);
}

template <QuantFormat F, class OutT, bool SILU, class XT = bf16>
cudaError_t launch_rows(const QuantGemvArgs& a, Stream stream) {
  if (a.rows <= 1) return launch<F, 1, OutT, SILU, XT>(a, stream);
  if (a.rows <= 2) return launch<F, 2, OutT, SILU, XT>(a, stream);
  if (a.rows <= 4) return launch<F, 4, OutT, SILU, XT>(a, stream);
  return launch<F, 8, OutT, SILU, XT>(a, stream);
}

template <QuantFormat F>
cudaError_t launch_format(const QuantGemvArgs& a, Stream stream) {
  if (a.x_type == DType::f32) return launch_rows<F, float, false, float>(a, stream);
  if (a.silu_mul) return launch_rows<F, bf16, true>(a, stream);
  if (a.y_type == DType::bf16) return launch_rows<F, bf16, false>(a, stream);
  return launch_rows<F, float, false>(a, stream);
}

// One warp per output of one pair (blockIdx.x: a prefill has more pairs than grid.y's 65535), the
// chunks of its weight row in lane order.
template <QuantFormat F>
__global__ void __launch_bounds__(kWarps * 32) quant_pairs_kernel(QuantPairsArgs a) {
  const int r = blockIdx.x, lane = threadIdx.x % 32;
  const int o = blockIdx.y * kWarps + threadIdx.x / 32;
  if (o >= a.per_pair * a.w.rows) return;
  const int e = a.row_matrix[r];
  float* y = a.y + static_cast<long>(r) * a.ldy + o;
  if (e < 0) {
    if (lane == 0) *y = 0.f;
    return;
  }
  const float* x = a.x + static_cast<long>(a.gather ? a.gather[r] : r) * a.ldx;
  const long m = static_cast<long>(e) * a.per_pair + o / a.w.rows;
  const int row = o % a.w.rows;
  float acc = 0.f;
  for (int c = lane; c < a.w.in / 16; c += 32) {
    float wv[16];
    quant::decode<F>(quant::load_chunk<F>(a.w, m, row, 16 * c), wv);
    acc += quant::dot16(wv, x + 16 * c);
  }
  acc = cuda::warp_sum(acc);
  if (lane == 0) *y = acc;
}

template <QuantFormat F>
__global__ void dequant_kernel(QuantMatrices w, bf16* y) {
  const long per = w.in / 16, chunks = static_cast<long>(w.count) * w.rows * per;
  for (long c = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x; c < chunks; c += static_cast<long>(gridDim.x) * blockDim.x) {
    const long row = c / per;
    const int k = static_cast<int>(c % per) * 16;
    const quant::Chunk q = quant::load_chunk<F>(w, row / w.rows, static_cast<int>(row % w.rows), k);
    // Two 16-byte stores (rows of a multiple of 16 entries), where 16 two-byte ones made each
    // warp store touch 32 sectors for 64 bytes: a prefill step dequantises every projection.
    unsigned v[8];
    quant::decode_bf16<F>(q, v);
    uint4* dst = reinterpret_cast<uint4*>(y + row * w.in + k);
    dst[0] = make_uint4(v[0], v[1], v[2], v[3]);
    dst[1] = make_uint4(v[4], v[5], v[6], v[7]);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

bool matrices_fit(const QuantMatrices& w) {
  return w.count > 0 && w.rows > 0 && w.in > 0 && w.in % 16 == 0 && w.data && w.scales &&
         (w.format == QuantFormat::fp8_block || w.global) && aligned16(w.data);
}

}  // namespace

bool quant_gemv_fits(const QuantGemvArgs& a) {
  if (a.rows < 1 || a.rows > kGemvMaxRows || a.ldx % 8 != 0 || !aligned16(a.x) || !matrices_fit(a.w)) return false;
  if (a.x_type != DType::bf16 && (a.x_type != DType::f32 || a.silu_mul || a.y_type != DType::f32)) return false;
  if (a.silu_mul) return a.w.count == 2 && a.y_type == DType::bf16 && !a.bias;
  return a.w2.count == 0 || (matrices_fit(a.w2) && a.w2.format == a.w.format && a.w2.in == a.w.in);
}

Status quant_gemv_cuda(const QuantGemvArgs& a, Stream stream) {
  if (!quant_gemv_fits(a))
    return Error{"quant_gemv: needs 1 <= rows <= 8, x 16-byte aligned with ldx a multiple of 8, inputs a multiple of 16, "
           "one format and one input width, fp32 x only into an fp32 result without silu_mul, and for silu_mul a stack of 2 "
           "with a bf16 result and no bias"};
  if (a.y_type != DType::bf16 && a.y_type != DType::f32) return Error{"quant_gemv: the result must be bf16 or fp32"};
  const cudaError_t e = a.w.format == QuantFormat::fp8_block ? launch_format<QuantFormat::fp8_block>(a, stream)
                                                             : launch_format<QuantFormat::nvfp4>(a, stream);
  return TANDEM_CUDA_STATUS(e, "launch quant_gemv_kernel");
}

Status quant_pairs_f32_cuda(const QuantPairsArgs& a, Stream stream) {
  if (a.pairs == 0) return {};
  if (!matrices_fit(a.w) || a.per_pair < 1 || !a.row_matrix || !a.x || !a.y || a.ldx % 4 != 0 || !aligned16(a.x))
    return Error{"quant_pairs_f32: needs a quantised stack with inputs a multiple of 16, expert ids, and fp32 x 16-byte aligned "
                 "with ldx a multiple of 4"};
  const dim3 grid(static_cast<unsigned>(a.pairs), static_cast<unsigned>((a.per_pair * a.w.rows + kWarps - 1) / kWarps));
  if (a.w.format == QuantFormat::fp8_block)
    quant_pairs_kernel<QuantFormat::fp8_block><<<grid, kWarps * 32, 0, stream>>>(a);
  else
    quant_pairs_kernel<QuantFormat::nvfp4><<<grid, kWarps * 32, 0, stream>>>(a);
  return TANDEM_CUDA_LAUNCHED("quant_pairs_f32");
}

Status quant_dequant_bf16_cuda(const QuantMatrices& w, std::uint16_t* y, Stream stream) {
  if (!matrices_fit(w)) return Error{"quant_dequant_bf16: bad stack (inputs must be a multiple of 16)"};
  if (!aligned16(y)) return Error{"quant_dequant_bf16: the bf16 destination must be 16-byte aligned"};
  const long chunks = static_cast<long>(w.count) * w.rows * (w.in / 16);
  const long blocks = (chunks + 255) / 256;
  const dim3 grid(static_cast<unsigned>(blocks < 65536 ? blocks : 65536));
  if (w.format == QuantFormat::fp8_block)
    dequant_kernel<QuantFormat::fp8_block><<<grid, 256, 0, stream>>>(w, reinterpret_cast<bf16*>(y));
  else
    dequant_kernel<QuantFormat::nvfp4><<<grid, 256, 0, stream>>>(w, reinterpret_cast<bf16*>(y));
  return TANDEM_CUDA_LAUNCHED("quant_dequant_bf16");
}

}  // namespace tandem::kernels
