// The routed experts of a MoE block on the GPU, as one grouped computation rather than a loop of
// small launches per expert:
//   router_logits   [tokens, E] fp32 = x (bf16 or fp32) . router^T (fp32 weights, fp32 sums)
//   moe_sort        the tokens * top_k (token, expert) pairs sorted by expert: offsets[E + 1], the
//                   token of each sorted pair, and where each pair went (pair_pos)
//   grouped_gemm    y[p] = W[e(p)] x[row(p)] for every sorted pair p, one launch for all experts:
//                   on the tensor cores, a block per (expert, 64 outputs, slot of 64-pair tiles)
//                   with both operands staged in shared memory (grouped_mma.cuh; on sm_90 its wgmma
//                   form, grouped_wgmma.cu, which can also apply SiLU-and-mul); or the few-rows
//                   kernel, a block per (expert, 32 outputs) applying each weight to the expert's
//                   pairs eight at a time (rows_gemv.cuh)
//   grouped_gemm_quant  the same over quantised experts (fp8 block-scaled, NVFP4), each weight tile
//                   decoded to bf16 in shared memory as the tensor-core form stages it
//   moe_combine     out[t] = sum_k weight[t][k] * y[pair_pos[t][k]] (+ add[t])
// All pointers are device buffers; everything here is graph-capturable (no host synchronisation:
// the launch grids depend on E and the capacity, not on how many tokens each expert got).
#pragma once
#include <cstdint>
#include <string>

#include "tandem/kernels/dtype.hpp"
#include "tandem/kernels/quant_gemv.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels {

// x: [tokens, hidden] bf16; router: [E, hidden] fp32; logits: [tokens, E] fp32.
Status router_logits_cuda(const void* x, int tokens, int hidden, const float* router, int n_experts, float* logits,
                               Stream stream = nullptr);
// The same with x in fp32 (as the fp32 CPU reference routes).
Status router_logits_f32_cuda(const float* x, int tokens, int hidden, const float* router, int n_experts, float* logits,
                                   Stream stream = nullptr);

// expert: [tokens * top_k] (moe_route_cuda's output). Pairs whose expert is outside
// [first_expert, first_expert + n_experts) (another tensor-parallel rank's) are left out of the sort
// and get pair_pos -1. n_experts <= 1024.
Status moe_sort_cuda(const std::int32_t* expert, int tokens, int top_k, int first_expert, int n_experts,
                          std::int32_t* offsets, std::int32_t* sorted_token, std::int32_t* pair_pos,
                          Stream stream = nullptr);

// y[p][n] = sum_k x[row(p)][k] * w[e][n][k] for each expert e < n_experts and each p in
// [offsets[e], offsets[e + 1]); row(p) = gather[p] when gather is given, else p. bf16 in and out,
// fp32 sums. w: [n_experts, n, k]; k must be a multiple of 8 and rows 16-byte aligned. form picks
// the kernel: the tensor-core one (mma.sync, grouped_mma.cuh), its wgmma form (sm_90 with the
// sm_90a target built: grouped_wgmma.cu, tiles of 64 pairs x 128 outputs), or one warp per few
// rows (kept for A/B timings, the decoder's TANDEM_GROUPED_MMA=0). Each sums in its own order.
enum class GroupedForm { mma, rows, wgmma };
// Whether this build and device have GroupedForm::wgmma.
bool grouped_wgmma_ready();
// The wgmma form's tile: 64 or 128 pairs (128 stages each weight tile once for twice the pairs:
// for experts averaging more than 64 pairs) and 3 or 4 copy stages in flight (3: more blocks an
// SM). The bits do not depend on it.
struct WgmmaTile {
  int pairs = 64;
  int stages = 4;
};
Status grouped_gemm_cuda(const void* x, long ldx, const std::int32_t* gather, const std::int32_t* offsets,
                              int n_experts, const void* w, int n, int k, void* y, long ldy, Stream stream = nullptr,
                              GroupedForm form = GroupedForm::mma, WgmmaTile tile = {});
// y[p][j] = silu(g) * u for j < d, g and u being grouped_gemm's outputs j and d + j over w [n_experts,
// 2 d, k] rounded to bf16: grouped_gemm_cuda then silu_and_mul_cuda (activation.hpp) in one
// launch, bit for bit equal to that pair over the wgmma form, without writing gate_up. wgmma form
// only (grouped_wgmma_ready()); d a multiple of 2.
Status grouped_gemm_silu_cuda(const void* x, long ldx, const std::int32_t* gather, const std::int32_t* offsets, int n_experts,
                              const void* w, int d, int k, void* y, long ldy, Stream stream = nullptr, WgmmaTile tile = {});

// grouped_gemm_cuda's tensor-core form over quantised experts (a stack of quant_gemv.hpp, device
// pointers): expert e's weight is matrices e * per .. e * per + per - 1 of w one under another (per
// = w.count / n_experts; gate then up: n = per * w.rows outputs, k = w.in inputs, a multiple of
// 16). Each weight is rounded to bf16 as quant_dequant_bf16_cuda writes it, so y is bit for bit
// grouped_gemm_cuda(GroupedForm::mma) over the dequantised stack, which is never written.
Status grouped_gemm_quant_cuda(const void* x, long ldx, const std::int32_t* gather, const std::int32_t* offsets, int n_experts,
                               const QuantMatrices& w, void* y, long ldy, Stream stream = nullptr);
// Its CPU reference (host pointers; kernels/cpu/moe_experts_quant.cpp): x fp32, y fp32 [pairs][ldy],
// the weights dequantised and rounded to bf16, fp64 sums.
void grouped_gemm_quant_cpu(const float* x, long ldx, const std::int32_t* gather, const std::int32_t* offsets, int n_experts,
                            const QuantMatrices& w, float* y, long ldy);

// The few-rows form on fp32 x into fp32 y (glm5_next's routed experts, which keep their inputs in
// fp32), for decode-sized steps: a block per (expert, 32 outputs) reads those weight rows once and
// applies them to the expert's pairs eight at a time (kernels/cuda/moe_experts_f32.cu). Each pair's
// result is the same bits whatever pairs share its expert (batch-invariant). Over bf16 weights
// [n_experts, n, k] (k a multiple of 8), or a quantised stack as grouped_gemm_quant_cuda takes it
// (w.count = per * n_experts); the quantised form's sums are quant_pairs_f32_cuda's, bit for bit.
// x 16-byte aligned with ldx a multiple of 4; offsets required.
Status grouped_gemm_f32_cuda(const float* x, long ldx, const std::int32_t* gather, const std::int32_t* offsets, int n_experts,
                             const void* w, int n, int k, float* y, long ldy, Stream stream = nullptr);
Status grouped_gemm_quant_f32_cuda(const float* x, long ldx, const std::int32_t* gather, const std::int32_t* offsets, int n_experts,
                                   const QuantMatrices& w, float* y, long ldy, Stream stream = nullptr);

// out[t] = sum_k weight[t * top_k + k] * y[pair_pos[t * top_k + k]] (+ add[t] when given): bf16.
Status moe_combine_cuda(const void* y, const std::int32_t* pair_pos, const float* weight, int tokens, int top_k,
                             int hidden, const void* add, void* out, Stream stream = nullptr);
// The same with add and out in fp32 (the sum is not rounded to bf16 before the fp32 residual).
Status moe_combine_f32_cuda(const void* y, const std::int32_t* pair_pos, const float* weight, int tokens, int top_k,
                                 int hidden, const float* add, float* out, Stream stream = nullptr);

}  // namespace tandem::kernels
