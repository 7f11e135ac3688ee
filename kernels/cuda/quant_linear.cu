// Linear layers over fp8 block-scaled and NVFP4 weights, dequantised in registers; and the
// dequantisation into a bf16 scratch for prefill-sized GEMMs. Formats: quant_weights.hpp.
//
// Decode shape: y[rows][out] with rows small. One warp per output feature o at a time; each lane
// takes 16 consecutive inputs per step (one 16-byte load of fp8, or one 8-byte load of NVFP4 plus
// its one scale byte), decodes them once and applies them to up to kRowTile rows of x, so the
// weights are streamed from memory once per kRowTile rows, which is what bounds decode.
#include <cuda_fp16.h>

#include <cstdint>

#include "common.cuh"
#include "tandem/kernels/quant_weights.hpp"

namespace tandem::kernels {
namespace {

constexpr int kRowTile = 8;
constexpr int kWarpsPerBlock = 8;

__device__ __forceinline__ float fp8_to_float(std::uint8_t b) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3)));
}

__device__ __forceinline__ float e2m1_value(unsigned nibble) {
  // 0, 0.5, 1, 1.5, 2, 3, 4, 6 by the low three bits; bit 3 is the sign.
  const unsigned m = nibble & 7u;
  const float v = m < 2 ? 0.5f * static_cast<float>(m) : static_cast<float>(1u << ((m >> 1) - 1)) * (m & 1u ? 1.5f : 1.f);
  return nibble & 8u ? -v : v;
}

// 16 inputs of row r starting at k, as floats.
__device__ __forceinline__ void load_x16(const float* x, long off, float* v) {
  const float4* p = reinterpret_cast<const float4*>(x + off);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float4 f = p[q];
    v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
  }
}
__device__ __forceinline__ void load_x16(const cuda::bf16* x, long off, float* v) { cuda::load_bf16x16(x + off, v); }

// Decodes the 16 weights of feature o at inputs [k, k+16).
struct Fp8Block {
  const std::uint8_t* w;
  const float* scale_inv;
  int in, bcols;
  __device__ void decode(int o, int k, float* wv) const {
    const uint4 u = *reinterpret_cast<const uint4*>(w + static_cast<long>(o) * in + k);
    const float s = scale_inv[(o / kFp8Block) * bcols + k / kFp8Block];  // 16 | 128: one block
    const unsigned words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
      for (int b = 0; b < 4; ++b) wv[4 * q + b] = fp8_to_float(static_cast<std::uint8_t>(words[q] >> (8 * b))) * s;
  }
};

struct Nvfp4 {
  const std::uint8_t* packed;
  const std::uint8_t* scales;
  float global_scale;
  int in;
  __device__ void decode(int o, int k, float* wv) const {
    const uint2 u = *reinterpret_cast<const uint2*>(packed + static_cast<long>(o) * (in / 2) + k / 2);
    const float s = fp8_to_float(scales[static_cast<long>(o) * (in / kNvfp4Group) + k / kNvfp4Group]) * global_scale;
    const unsigned words[2] = {u.x, u.y};
#pragma unroll
    for (int q = 0; q < 2; ++q)
#pragma unroll
      for (int n = 0; n < 8; ++n) wv[8 * q + n] = e2m1_value((words[q] >> (4 * n)) & 0xFu) * s;  // low nibble first
  }
};

template <class T, class W>
__global__ void quant_linear_kernel(const T* x, W weights, float* y, int rows, int in, int out) {
  const int lane = threadIdx.x % 32;
  const int warp = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int warps = gridDim.x * kWarpsPerBlock;
  for (int o = warp; o < out; o += warps) {
    for (int r0 = 0; r0 < rows; r0 += kRowTile) {
      const int nr = rows - r0 < kRowTile ? rows - r0 : kRowTile;
      float acc[kRowTile] = {};
      for (int k = lane * 16; k < in; k += 32 * 16) {
        float wv[16];
        weights.decode(o, k, wv);
#pragma unroll
        for (int r = 0; r < kRowTile; ++r) {
          if (r >= nr) break;
          float xv[16];
          load_x16(x, static_cast<long>(r0 + r) * in + k, xv);
#pragma unroll
          for (int j = 0; j < 16; ++j) acc[r] = fmaf(xv[j], wv[j], acc[r]);
        }
      }
#pragma unroll
      for (int r = 0; r < kRowTile; ++r) {
        const float s = cuda::warp_sum(acc[r]);
        if (lane == 0 && r < nr) y[static_cast<long>(r0 + r) * out + o] = s;
      }
    }
  }
}

template <class W>
__global__ void dequant_kernel(W weights, int out, int in, cuda::bf16* y) {
  const long chunks = static_cast<long>(out) * (in / 16);
  for (long c = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x; c < chunks;
       c += static_cast<long>(gridDim.x) * blockDim.x) {
    const int o = static_cast<int>(c / (in / 16)), k = static_cast<int>(c % (in / 16)) * 16;
    float wv[16];
    weights.decode(o, k, wv);
#pragma unroll
    for (int j = 0; j < 16; ++j) y[static_cast<long>(o) * in + k + j] = __float2bfloat16_rn(wv[j]);
  }
}

int blocks_for_features(int out) {
  const int b = (out + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return b < 4096 ? b : 4096;
}

Status check_shape(const char* op, int rows, int in, int out) {
  if (rows < 0 || out < 0 || in <= 0 || in % 16 != 0)
    return Error{std::string(op) + ": inputs must be a positive multiple of 16 (got " + std::to_string(in) + ")"};
  return {};
}

template <class W>
Status launch_linear(const char* op, DType xt, const void* x, W w, float* y, int rows, int in, int out,
                          Stream stream) {
  if (auto e = check_shape(op, rows, in, out); !e) return e;
  if (rows == 0 || out == 0) return {};
  return cuda::with_act_type(xt, op, [&](auto tag) -> Status {
    using T = decltype(tag);
    quant_linear_kernel<T, W><<<blocks_for_features(out), 32 * kWarpsPerBlock, 0, stream>>>(
        static_cast<const T*>(x), w, y, rows, in, out);
    return TANDEM_CUDA_LAUNCHED(op);
  });
}

template <class W>
Status launch_dequant(const char* op, W w, int out, int in, std::uint16_t* y, Stream stream) {
  if (auto e = check_shape(op, 0, in, out); !e) return e;
  const long chunks = static_cast<long>(out) * (in / 16);
  if (chunks == 0) return {};
  const long blocks = (chunks + 255) / 256;
  dequant_kernel<W><<<static_cast<int>(blocks < 65536 ? blocks : 65536), 256, 0, stream>>>(
      w, out, in, reinterpret_cast<cuda::bf16*>(y));
  return TANDEM_CUDA_LAUNCHED(op);
}

}  // namespace

Status linear_fp8_block_cuda(DType xt, const void* x, const std::uint8_t* w, const float* scale_inv, float* y,
                                  int rows, int in, int out, Stream stream) {
  return launch_linear("linear_fp8_block", xt, x, Fp8Block{w, scale_inv, in, (in + kFp8Block - 1) / kFp8Block}, y, rows,
                       in, out, stream);
}

Status linear_nvfp4_cuda(DType xt, const void* x, const std::uint8_t* packed, const std::uint8_t* scales,
                              float global_scale, float* y, int rows, int in, int out, Stream stream) {
  return launch_linear("linear_nvfp4", xt, x, Nvfp4{packed, scales, global_scale, in}, y, rows, in, out, stream);
}

Status dequant_fp8_block_cuda(const std::uint8_t* w, const float* scale_inv, int out, int in,
                                   std::uint16_t* y_bf16, Stream stream) {
  return launch_dequant("dequant_fp8_block", Fp8Block{w, scale_inv, in, (in + kFp8Block - 1) / kFp8Block}, out, in,
                        y_bf16, stream);
}

Status dequant_nvfp4_cuda(const std::uint8_t* packed, const std::uint8_t* scales, float global_scale, int out,
                               int in, std::uint16_t* y_bf16, Stream stream) {
  return launch_dequant("dequant_nvfp4", Nvfp4{packed, scales, global_scale, in}, out, in, y_bf16, stream);
}

}  // namespace tandem::kernels
