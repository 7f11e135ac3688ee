// head_prep.hpp: a warp per (token, head). The order of every rounding is that of the unfused
// kernels it replaces, so the DFlash drafter's rows are those of its earlier, unfused path:
//   rmsnorm_rows_kernel: 256 threads, thread i squares entry i (n <= 256), warp sums by butterfly,
//     the warps' sums added in warp order; here chunk c (entries 32c .. 32c + 31) is warp c's.
//   rope_kernel: the pair (i, i + half) from the bf16 normed values, angle pos * inv_freq[i] in
//     fp32, sin and cos in fp64, one bf16 rounding per result.
//   write_kv_kernel: bf16 in, bf16 out (a copy).
#include "common.cuh"
#include "tandem/kernels/head_prep.hpp"
#include "tandem/kernels/launch.hpp"

namespace tandem::kernels {
namespace {

using cuda::bf16;
constexpr int kWarps = 4, kMaxDim = 256;

__global__ void __launch_bounds__(kWarps * 32) head_prep_kernel(HeadPrep p) {
  cuda::pdl_begin();
  __shared__ float normed[kWarps][kMaxDim];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int per_token = p.q_heads + p.kv_heads;
  const long item = static_cast<long>(blockIdx.x) * kWarps + warp;
  if (item >= static_cast<long>(p.tokens) * per_token) return;  // no block-wide barrier below
  const int t = static_cast<int>(item / per_token), j = static_cast<int>(item % per_token);
  const bool query = j < p.q_heads;
  const int h = query ? j : j - p.q_heads, n = p.head_dim, half = n / 2;
  const long slot = query ? 0 : p.slot[t];
  if (slot < 0) return;
  const bf16* row = static_cast<const bf16*>(p.qkv) + t * p.ld;
  const bf16* x = query ? row + static_cast<long>(h) * n : row + p.k_at + static_cast<long>(h) * n;
  const bf16* w = static_cast<const bf16*>(query ? p.q_norm : p.k_norm);
  float total = 0.f;
  // Chunk c is warp c of rmsnorm_rows; its lanes past n square nothing (0), as threads past n do
  // there, and the warps wholly past n add 0 to its total.
  for (int c = 0; c < (n + 31) / 32; ++c) {
    const int i = 32 * c + lane;
    const float v = i < n ? __bfloat162float(x[i]) : 0.f;
    float s = 0.f;
    s += v * v;
    total += cuda::warp_sum(s);
  }
  const float r = rsqrtf(total / static_cast<float>(n) + p.eps);
  float* mine = normed[warp];
  for (int i = lane; i < n; i += 32)
    mine[i] = __bfloat162float(__float2bfloat16_rn(__bfloat162float(x[i]) * r * __bfloat162float(w[i])));
  __syncwarp();
  bf16* out = query ? static_cast<bf16*>(p.q_out) + (static_cast<long>(t) * p.q_heads + h) * n
                    : static_cast<bf16*>(p.k_cache) + slot * p.kv_heads * n + static_cast<long>(h) * n;
  const float position = static_cast<float>(p.pos[t]);
  for (int i = lane; i < half; i += 32) {
    const float a = mine[i], b = mine[i + half];
    const float angle = position * p.inv_freq[i];
    double sn, cs;
    sincos(static_cast<double>(angle), &sn, &cs);
    out[i] = __float2bfloat16_rn(static_cast<float>(a * cs - b * sn));
    out[i + half] = __float2bfloat16_rn(static_cast<float>(b * cs + a * sn));
  }
  if (query) return;
  const bf16* v = row + p.v_at + static_cast<long>(h) * n;
  bf16* vo = static_cast<bf16*>(p.v_cache) + slot * p.kv_heads * n + static_cast<long>(h) * n;
  for (int i = lane; i < n; i += 32) vo[i] = v[i];
}

}  // namespace

bool head_prep_fits(int head_dim) { return head_dim > 0 && head_dim % 2 == 0 && head_dim <= kMaxDim; }

Status head_prep(const HeadPrep& p, Stream stream) {
  if (!head_prep_fits(p.head_dim)) return Error{"head_prep: head_dim must be even (rotary pairs), at most 256"};
  if (p.tokens < 0 || p.q_heads < 0 || p.kv_heads <= 0) return Error{"head_prep: tokens, q_heads >= 0 and kv_heads > 0"};
  if (p.tokens == 0) return {};
  const long items = static_cast<long>(p.tokens) * (p.q_heads + p.kv_heads);
  const cudaError_t e = cuda::launch_pdl(head_prep_kernel, dim3(static_cast<unsigned>((items + kWarps - 1) / kWarps)),
                                         dim3(kWarps * 32), 0, stream, p);
  return TANDEM_CUDA_STATUS(e, "launch head_prep_kernel");
}

}  // namespace tandem::kernels
