// Decode-sized products (any number of rows of x, kGemvMaxRows a pass), bf16 weights, fp32 sums:
// each row's result is the same whatever rows share the launch (batch-invariant). One warp per output
// row streams that weight row once with 16-byte loads and applies it to every x row, so the weight
// is read from memory once and every multiprocessor takes part (a block of four warps per four
// output rows: thousands of blocks even for a 2048-row projection). At these sizes the product is
// memory-bound and cuBLASLt's tensor-core tiles leave most of the GPU idle (and the older few-rows
// kernel, skinny_gemm.hpp, gives each block 32 rows: too few blocks for the small projections).
//
// Rows of the weight may come in groups (heads): for g < groups and o < out,
//   y[r][g * y_group + o] = sum_i x[r][g * x_group + i] * w[g * w_group + o * ldw + i]  (+ bias[g * out + o])
// With silu_mul, each output row o is the gated pair of weight rows o and o + up_offset:
//   y[r][o] = silu(W[o] x[r]) * (W[o + up_offset] x[r])       (gate_up fused with the activation)
// x may be fp32 (glm5_next's products that need unrounded activations): the same kernel, reading
// 32 bytes of x per 16 bytes of weights, the weights still read once.
// CPU reference: linear_cpu (and silu_and_mul_cpu). All pointers are device buffers.
#pragma once
#include <string>

#include "tandem/kernels/dtype.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels {

// x rows per block (a launch of more rows has a block per kGemvMaxRows rows and output rows);
// quant_gemv.hpp takes at most this many rows a launch.
constexpr int kGemvMaxRows = 8;

struct GemvArgs {
  int rows = 1;              // x rows, >= 1
  int in = 0, out = 0;       // per group
  int groups = 1;
  const void* x = nullptr;   // of x_type
  long ldx = 0, x_group = 0;
  DType x_type = DType::bf16;  // bf16, or f32 (then an fp32 y and no silu_mul)
  const void* w = nullptr;   // bf16
  long ldw = 0, w_group = 0;
  const void* bias = nullptr;  // [groups * out] of y's type (bf16 or fp32), or nullptr
  void* y = nullptr;
  long ldy = 0, y_group = 0;
  DType y_type = DType::bf16;  // bf16 or f32
  bool silu_mul = false;       // bf16 out only
  long up_offset = 0;          // rows from a gate row to its up row (silu_mul)
};

// Whether gemv_cuda takes these operands: in, ldx, x_group, ldw and w_group multiples of 8, x and
// w 16-byte aligned, rows >= 1.
bool gemv_fits(const GemvArgs& a);

Status gemv_cuda(const GemvArgs& a, Stream stream = nullptr);

// Launches of at least this many x rows and weights of up to 4 MiB take the tiled form (a warp per 4 output rows by 8 x rows,
// each 16-byte weight load and x chunk serving the whole tile): the same bits for every row, so a
// verification's rows still equal their decodes. 16 is the intended threshold (a verification of
// 8-token blocks from batch 2, not a decode of up to 15 sequences), set with the decoders'
// TANDEM_GEMV_TILES (0: never, process-wide); the default since its first GPU run (H100, 2026-12-07:
// gpu_check and cuda_spec_check pass; an 8-token verification at batch 6 2.18x a decode, 2.58x before).
constexpr int kGemvTileRows = 16;
void set_gemv_tile_rows(int rows);

}  // namespace tandem::kernels
