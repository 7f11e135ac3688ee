// Decode-sized products over weights kept quantised on the device (the formats of
// quant_weights.hpp: fp8 with 128x128 block scales, ModelOpt NVFP4), dequantised in registers, and
// their dequantisation into bf16 for prefill-sized GEMMs. Where quant_weights.hpp's linear layers
// take one tensor and write fp32 [rows][out], these are the model's: x bf16 with a row stride, y bf16
// or fp32 with a row stride and an optional bias, fused projections of several checkpoint tensors
// (q_a | kv_a, gate | up, every expert of a layer) and gate_up fused with the activation, as gemv.hpp.
//
// A weight is a stack of `count` matrices [rows][in] of one format, back to back, each with its own
// scales (a checkpoint tensor each):
//   fp8_block: data fp8 [count][rows][in]; scales fp32 [count][ceil(rows/128)][ceil(in/128)]
//   nvfp4:     data [count][rows][in/2] (two e2m1 per byte, even input in the low nibble);
//              scales fp8 [count][rows][in/16]; global fp32 [count] (weight_scale_2 per tensor)
// `in` must be a multiple of 16. Each lane takes 16 consecutive inputs of a row at a time (16 bytes
// of fp8, 8 of NVFP4). Every path computes with round_bf16(dequantised weight): the decode kernels
// round each weight in registers, the dequantisation writes bf16, so a quantised projection is the
// same function at every step size (as a bf16 model's is), the bf16 model of the dequantised tensor.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "tandem/kernels/dtype.hpp"
#include "tandem/kernels/moe_decode.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels {

enum class QuantFormat : int { fp8_block, nvfp4 };

struct QuantMatrices {
  QuantFormat format = QuantFormat::fp8_block;
  const std::uint8_t* data = nullptr;
  const void* scales = nullptr;
  const float* global = nullptr;  // nvfp4 only
  int count = 0, rows = 0, in = 0;
};

// Bytes of one matrix's data and of its scales.
std::size_t quant_data_bytes(QuantFormat f, int rows, int in);
std::size_t quant_scale_bytes(QuantFormat f, int rows, int in);

// Outputs, in order: every row of every matrix of w, then of w2 (a fused projection whose second
// part has other rows; count 0: none). With silu_mul (w2 unused, w.count == 2):
//   y[r][o] = silu(w[0] row o . x[r]) * (w[1] row o . x[r]),  o < w.rows.
struct QuantGemvArgs {
  int rows = 1;               // x rows, 1 .. kGemvMaxRows (gemv.hpp)
  const void* x = nullptr;    // [rows][ldx] of x_type, 16-byte aligned, ldx a multiple of 8
  long ldx = 0;
  DType x_type = DType::bf16;  // bf16, or f32 (glm5_next's fp32-input products: an fp32 y, no silu_mul)
  QuantMatrices w, w2;
  const void* bias = nullptr;  // of y's type, one per output, or nullptr
  void* y = nullptr;
  long ldy = 0;
  DType y_type = DType::bf16;  // bf16 or f32
  bool silu_mul = false;       // bf16 out, no bias
};

bool quant_gemv_fits(const QuantGemvArgs& a);
Status quant_gemv_cuda(const QuantGemvArgs& a, Stream stream = nullptr);

// Routed experts one (token, expert) pair per row, fp32 inputs and results (glm5_next keeps its
// experts' inputs in fp32; any number of pairs): pair r reads x row gather[r] (r without gather) and
//   y[r][o] = W_m row (o % w.rows) . x,  o < per_pair * w.rows,  m = row_matrix[r] * per_pair + o / w.rows
// (per_pair 2 over a stack of gate, up per expert gives [gate | up] rows). A negative row_matrix[r]
// (another tensor-parallel rank's expert) writes zeros. x 16-byte aligned, ldx a multiple of 4.
struct QuantPairsArgs {
  int pairs = 0, per_pair = 1;
  const float* x = nullptr;
  long ldx = 0;
  const std::int32_t* gather = nullptr;
  const std::int32_t* row_matrix = nullptr;
  QuantMatrices w;
  float* y = nullptr;
  long ldy = 0;
};
Status quant_pairs_f32_cuda(const QuantPairsArgs& a, Stream stream = nullptr);

// Every matrix of w into bf16 [count * rows][in] at y (the dense layout of the stack; y 16-byte aligned).
Status quant_dequant_bf16_cuda(const QuantMatrices& w, std::uint16_t* y, Stream stream = nullptr);

// moe_decode_cuda (moe_decode.hpp) over quantised experts: a.gate_up / down / shared_* are ignored,
// the stacks below are read instead, all of one format. gate_up: [E * 2] matrices [width][hidden]
// (expert e's gate, then its up); down: [E] of [hidden][width]; shared_gate_up: [2] of
// [shared_width][hidden] and shared_down [1] of [hidden][shared_width] when a.shared_width > 0.
// hidden, width and shared_width multiples of 16.
// tensor_cores: the launches of moe_decode_quant_mma.cu where moe_decode_quant_mma(a, q) holds (any
// token count up to kQuantDecodeTokens, one launch pair; a token's bits the same alone or among
// others), else the CUDA-core kernels (moe_decode_quant.cu and its grouped form).
struct MoeDecodeQuant {
  QuantMatrices gate_up, down, shared_gate_up, shared_down;
  bool tensor_cores = true;
};
bool moe_decode_quant_fits(const MoeDecodeArgs& a, const MoeDecodeQuant& q);
// Whether the launch takes the grouped form (moe_decode.hpp; a.groups set, two or more tokens,
// hidden / 16 <= 32 chunks a lane's loads, a row of every expert in use within shared memory).
bool moe_decode_quant_groups(const MoeDecodeArgs& a, const MoeDecodeQuant& q);
// Whether the launch takes the tensor-core form (q.tensor_cores, 1 .. 32 tokens, top_k <= 8; grouped
// by expert when a.groups is set and there are two or more tokens).
bool moe_decode_quant_mma(const MoeDecodeArgs& a, const MoeDecodeQuant& q);
Status moe_decode_quant_cuda(const MoeDecodeArgs& a, const MoeDecodeQuant& q, Stream stream = nullptr);

}  // namespace tandem::kernels
