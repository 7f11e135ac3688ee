// Quantised weight formats as checkpoints store them, and the linear layer that reads them.
//
// fp8 block-scaled (Hugging Face "quant_method": "fp8", "weight_block_size": [128, 128], as in the
// DeepSeek-V3 and GLM FP8 checkpoints): `weight` is float8_e4m3 [out][in], `weight_scale_inv` is
// fp32 [ceil(out/128)][ceil(in/128)], and
//     w[o][i] = fp8(weight[o][i]) * weight_scale_inv[o / 128][i / 128]
// (the name says "inverse" because quantising divided by it).
//
// NVFP4 (ModelOpt "quant_algo": "NVFP4", group size 16): `weight` is uint8 [out][in/2], two e2m1
// values per byte, the element of even index in the low nibble; `weight_scale` is float8_e4m3
// [out][in/16], one per 16 consecutive inputs; `weight_scale_2` is one fp32 for the tensor:
//     w[o][i] = e2m1(nibble(o, i)) * fp8(weight_scale[o][i / 16]) * weight_scale_2
// e2m1 is 1 sign, 2 exponent and 1 mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives.
//
// The CUDA linear layers read the packed bytes and dequantise in registers, so a decode step
// moves 1 byte (fp8) or 0.5625 bytes (NVFP4) per weight instead of bf16's 2: for small batches the
// layer is bound by reading weights, so that is the speed. For large batches (prefill) dequantise
// once into a bf16 scratch and use the dense GEMM.
#pragma once
#include <cstdint>
#include <string>

#include "tandem/kernels/dtype.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels {

constexpr int kFp8Block = 128;   // weight_block_size of the fp8 checkpoints
constexpr int kNvfp4Group = 16;  // inputs per NVFP4 block scale

float e2m1_to_float(std::uint8_t nibble);
std::uint8_t e2m1_from_float(float x);  // round to nearest (ties to even), saturating at +-6

// Dequantise to fp32, [out][in] row-major.
void dequant_fp8_block_cpu(const std::uint8_t* w, const float* scale_inv, int out, int in, float* y);
void dequant_nvfp4_cpu(const std::uint8_t* packed, const std::uint8_t* scales, float global_scale, int out, int in,
                       float* y);

// Quantisers (what a checkpoint writer does; the tests and the GPU check make weights with them).
// fp8: each 128x128 block scaled so its largest |w| maps to 448. NVFP4: the global scale maps the
// tensor's largest |w| to 6 * 448, each group's fp8 scale maps the group's largest |w| to 6.
void quantize_fp8_block_cpu(const float* w, int out, int in, std::uint8_t* q, float* scale_inv);
void quantize_nvfp4_cpu(const float* w, int out, int in, std::uint8_t* packed, std::uint8_t* scales,
                        float* global_scale);

// y[r][o] = sum_i x[r][i] * w[o][i], with w dequantised as above (CPU reference).
void linear_fp8_block_cpu(const float* x, const std::uint8_t* w, const float* scale_inv, float* y, int rows, int in,
                          int out);
void linear_nvfp4_cpu(const float* x, const std::uint8_t* packed, const std::uint8_t* scales, float global_scale,
                      float* y, int rows, int in, int out);

// CUDA, device buffers. x is [rows][in] of type `xt` (f32 or bf16), y is [rows][out] fp32; fp32
// accumulation. Any rows; the kernels are shaped for decode (rows up to a few dozen): each warp
// owns output features and streams their packed weights once per 8 rows. `in` must be a
// multiple of 16.
Status linear_fp8_block_cuda(DType xt, const void* x, const std::uint8_t* w, const float* scale_inv, float* y,
                                  int rows, int in, int out, Stream stream = nullptr);
Status linear_nvfp4_cuda(DType xt, const void* x, const std::uint8_t* packed, const std::uint8_t* scales,
                              float global_scale, float* y, int rows, int in, int out, Stream stream = nullptr);

// CUDA dequantisation into a bf16 [out][in] scratch (for the dense GEMM at prefill sizes).
Status dequant_fp8_block_cuda(const std::uint8_t* w, const float* scale_inv, int out, int in,
                                   std::uint16_t* y_bf16, Stream stream = nullptr);
Status dequant_nvfp4_cuda(const std::uint8_t* packed, const std::uint8_t* scales, float global_scale, int out,
                               int in, std::uint16_t* y_bf16, Stream stream = nullptr);

}  // namespace tandem::kernels
