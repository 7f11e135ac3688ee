// What the bf16 and the quantised MoE decode kernels (moe_decode.cu, moe_decode_quant.cu) share
// beyond the weight format: which row a gate_up warp computes and where its activation goes.
#pragma once
#include "common.cuh"
#include "tandem/kernels/moe_decode.hpp"
#include "tandem/kernels/quant_gemv.hpp"

namespace tandem::kernels::moe_rows {

// The activation buffer's row width: routed and shared experts share one layout.
inline long act_width(const MoeDecodeArgs& a) { return a.width > a.shared_width ? a.width : a.shared_width; }

// A gate_up warp's row: token t, slot (0 .. top_k - 1: token t's experts, width rows each; top_k:
// the shared experts, shared_width rows) and output row o of that slot.
struct GateUpRow {
  int t, slot, o;
  bool routed;
};
__device__ __forceinline__ GateUpRow gate_up_row(const MoeDecodeArgs& a, long warp) {
  const long per_token = static_cast<long>(a.top_k) * a.width + a.shared_width;
  const int t = static_cast<int>(warp / per_token);
  const long r = warp % per_token;
  if (r < static_cast<long>(a.top_k) * a.width) return {t, static_cast<int>(r / a.width), static_cast<int>(r % a.width), true};
  return {t, a.top_k, static_cast<int>(r - static_cast<long>(a.top_k) * a.width), false};
}

// Lane 0 stores silu(g) * u, rounded to bf16, as row r's activation.
__device__ __forceinline__ void store_act(const MoeDecodeArgs& a, long aw, const GateUpRow& r, float g, float u) {
  if (threadIdx.x % 32 == 0)
    static_cast<cuda::bf16*>(a.act)[(static_cast<long>(r.t) * (a.top_k + 1) + r.slot) * aw + r.o] =
        __float2bfloat16_rn(cuda::silu_mul(g, u));
}

// The grouped form's workspace (moe_decode_grouped.cu): [0] experts in use; count[E]; used[E] (in
// expert order); index[E] (an expert's place in used); pos[tokens * top_k] (a pair's expert's place
// in used); list[E][tokens] (an expert's pairs t * top_k + slot, in pair order).
struct Groups {
  std::int32_t *n, *count, *used, *index, *pos, *list;
  __host__ __device__ Groups(std::int32_t* g, int E, int T, int K)
      : n(g), count(g + 1), used(g + 1 + E), index(g + 1 + 2 * E), pos(g + 1 + 3 * E), list(g + 1 + 3 * E + static_cast<long>(T) * K) {}
};

// The launch that fills the workspace from a.expert (after the router, before the grouped kernels).
Status group_cuda(const MoeDecodeArgs& a, Stream stream);
// moe_decode_grouped.cu's three launches (moe_decode_groups(a) holds).
Status grouped_cuda(const MoeDecodeArgs& a, Stream stream);
// moe_decode_quant_grouped.cu's (moe_decode_quant_groups(a, q) holds).
Status quant_grouped_cuda(const MoeDecodeArgs& a, const MoeDecodeQuant& q, Stream stream);
// moe_decode_quant_mma.cu's (moe_decode_quant_mma(a, q) holds).
Status quant_mma_cuda(const MoeDecodeArgs& a, const MoeDecodeQuant& q, Stream stream);

}  // namespace tandem::kernels::moe_rows
