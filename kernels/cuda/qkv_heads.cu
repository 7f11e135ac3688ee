// rows_mma.hpp's qkv_heads: block (head, tile group) = 4 warps, warp w the head's 16-row sub-tiles
// w, w + 4, .. over every slab (rows_mma.cuh's slab product), the head's rows of the block's x rows
// then in shared memory, rounded to bf16 as a stored product; then a warp per x row does head_prep's
// steps for this head in head_prep's order (head_prep.cu): the norm's chunk sums, the bf16 normed
// values, the rotation with fp64 sin and cos, one rounding per result; values copied.
#include <algorithm>
#include <cstdint>

#include "common.cuh"
#include "rows_mma.cuh"
#include "tandem/kernels/launch.hpp"
#include "tandem/kernels/rows_mma.hpp"

namespace tandem::kernels {
namespace {

using cuda::bf16;
using namespace mma_rows;
constexpr std::size_t kMaxSmem = 32 * 1024;  // dynamic (staged normed rows), beside the static tile

// long-function: weight loads before the wait, the slab loop over the head's rows, then each row's head_prep.
template <int ST, int NT, bool NORM>
__global__ void __launch_bounds__(kWarps * 32) qkv_heads_kernel(RowsMma a, HeadPrep p) {
  constexpr int U = 4, HD = 64 * ST;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float tile[NT * 8][HD + 1];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
  const int head = static_cast<int>(blockIdx.x), n_base = static_cast<int>(blockIdx.y) * NT * 8;
  const int slabs = a.in / 32;
  const bf16* wr[ST][2];
#pragma unroll
  for (int st = 0; st < ST; ++st) {
    const long o = static_cast<long>(head) * HD + 16 * (warp + kWarps * st) + g;
    wr[st][0] = static_cast<const bf16*>(a.w) + o * a.ldw + 8 * tig;
    wr[st][1] = wr[st][0] + 8 * a.ldw;
  }
  uint4 wa[U][ST][2];
  auto load_w = [&](int j0) {
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (j0 + u < slabs)
#pragma unroll
        for (int st = 0; st < ST; ++st) {
          wa[u][st][0] = cuda::load_nc16(wr[st][0] + 32 * (j0 + u));
          wa[u][st][1] = cuda::load_nc16(wr[st][1] + 32 * (j0 + u));
        }
  };
  load_w(0);  // the weights do not depend on the kernel before
  cuda::pdl_begin();
  if (a.clear && blockIdx.x == 0 && blockIdx.y == 0)
    for (int i = threadIdx.x; i < a.clear_words; i += blockDim.x) a.clear[i] = 0ull;
  const int tiles = min(NT, (a.rows - n_base + 7) / 8);
  bf16* xs = reinterpret_cast<bf16*>(smem);
  const int lds = a.in + kPad;
  if (NORM) {
    stage_normed(a, n_base, NT * 8, xs);
    __syncthreads();
  }
  float acc[ST][NT][4];
#pragma unroll
  for (int st = 0; st < ST; ++st)
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[st][t][c] = 0.f;
  const bf16* xg = static_cast<const bf16*>(a.x);
  for (int j0 = 0; j0 < slabs; j0 += U) {
    if (j0 > 0) load_w(j0);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (j0 + u >= slabs) break;
      const int k0 = 32 * (j0 + u) + 8 * tig;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t >= tiles) break;
        uint4 xv;
        if (NORM) {
          xv = *reinterpret_cast<const uint4*>(xs + static_cast<long>(t * 8 + g) * lds + k0);
        } else {
          const int r = n_base + t * 8 + g;
          xv = r < a.rows ? *reinterpret_cast<const uint4*>(xg + static_cast<long>(r) * a.ldx + k0) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int st = 0; st < ST; ++st) mma_slab(acc[st][t], wa[u][st][0], wa[u][st][1], xv);
      }
    }
  }
  // c0, c1: head row 16 (warp + 4 st) + g, x rows 2 tig, 2 tig + 1 of the tile; c2, c3: head row + 8.
#pragma unroll
  for (int st = 0; st < ST; ++st)
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t >= tiles) break;
      const int n = t * 8 + 2 * tig, o = 16 * (warp + kWarps * st) + g;
      auto bf = [](float v) { return __bfloat162float(__float2bfloat16_rn(v)); };
      tile[n][o] = bf(acc[st][t][0]), tile[n + 1][o] = bf(acc[st][t][1]);
      tile[n][o + 8] = bf(acc[st][t][2]), tile[n + 1][o + 8] = bf(acc[st][t][3]);
    }
  __syncthreads();
  const int kind = head < p.q_heads ? 0 : head < p.q_heads + p.kv_heads ? 1 : 2;  // query, key, value
  const int h = kind == 0 ? head : kind == 1 ? head - p.q_heads : head - p.q_heads - p.kv_heads;
  for (int rr = warp; rr < tiles * 8; rr += kWarps) {
    const int t = n_base + rr;
    if (t >= a.rows) break;
    const long slot = kind == 0 ? 0 : p.slot[t];
    if (slot < 0) continue;
    float* x = tile[rr];
    if (kind == 2) {
      bf16* vo = static_cast<bf16*>(p.v_cache) + slot * p.kv_heads * HD + static_cast<long>(h) * HD;
      for (int i = lane; i < HD; i += 32) vo[i] = __float2bfloat16_rn(x[i]);
      continue;
    }
    float total = 0.f;
#pragma unroll
    for (int c = 0; c < HD / 32; ++c) {
      const float v = x[32 * c + lane];
      float s = 0.f;
      s += v * v;
      total += cuda::warp_sum(s);
    }
    const float r = rsqrtf(total / static_cast<float>(HD) + p.eps);
    const bf16* w = static_cast<const bf16*>(kind == 0 ? p.q_norm : p.k_norm);
    for (int i = lane; i < HD; i += 32) x[i] = __bfloat162float(__float2bfloat16_rn(x[i] * r * __bfloat162float(w[i])));
    __syncwarp();
    bf16* out = kind == 0 ? static_cast<bf16*>(p.q_out) + (static_cast<long>(t) * p.q_heads + h) * HD
                          : static_cast<bf16*>(p.k_cache) + slot * p.kv_heads * HD + static_cast<long>(h) * HD;
    const float position = static_cast<float>(p.pos[t]);
    for (int i = lane; i < HD / 2; i += 32) {
      const float va = x[i], vb = x[i + HD / 2];
      const float angle = position * p.inv_freq[i];
      double sn, cs;
      sincos(static_cast<double>(angle), &sn, &cs);
      out[i] = __float2bfloat16_rn(static_cast<float>(va * cs - vb * sn));
      out[i + HD / 2] = __float2bfloat16_rn(static_cast<float>(vb * cs + va * sn));
    }
  }
}

bool normed(const RowsMma& a) { return a.x32 != nullptr || a.table != nullptr; }
std::size_t smem_bytes(const RowsMma& a, int nt) {
  return normed(a) ? static_cast<std::size_t>(nt) * 8 * static_cast<std::size_t>(a.in + kPad) * 2 : 0;
}

int sm_count() {
  static const int n = [] {
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    return std::max(sms, 1);
  }();
  return n;
}

template <int ST, int NT, bool NORM>
cudaError_t launch(const RowsMma& a, const HeadPrep& p, Stream stream) {
  const dim3 grid(static_cast<unsigned>(p.q_heads + 2 * p.kv_heads), static_cast<unsigned>((a.rows + 8 * NT - 1) / (8 * NT)));
  return cuda::launch_pdl(qkv_heads_kernel<ST, NT, NORM>, grid, dim3(kWarps * 32), smem_bytes(a, NT), stream, a, p);
}

template <int ST, bool NORM>
cudaError_t launch_nt(const RowsMma& a, const HeadPrep& p, Stream stream) {
  // Two tiles a block where one would need more than about four blocks a multiprocessor.
  const long heads = p.q_heads + 2 * p.kv_heads, tiles = (a.rows + 7) / 8;
  if (tiles > 1 && heads * tiles > 4L * sm_count() && smem_bytes(a, 2) <= kMaxSmem) return launch<ST, 2, NORM>(a, p, stream);
  return launch<ST, 1, NORM>(a, p, stream);
}

bool aligned16(const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; }

}  // namespace

bool qkv_heads_fits(const RowsMma& m, const HeadPrep& p) {
  const bool norm = normed(m);
  return (p.head_dim == 64 || p.head_dim == 128) && p.q_heads >= 0 && p.kv_heads > 0 && m.out == (p.q_heads + 2 * p.kv_heads) * p.head_dim &&
         m.rows >= 1 && m.rows <= 4096 && m.in > 0 && m.in % 32 == 0 && m.ldw % 8 == 0 && aligned16(m.w) &&
         (norm ? m.norm_w != nullptr && smem_bytes(m, 1) <= kMaxSmem && (!m.table || (m.ids && m.vocab > 0 && !m.x32))
               : m.ldx % 8 == 0 && aligned16(m.x)) &&
         p.pos && p.slot && p.inv_freq && p.k_norm && p.k_cache && p.v_cache && (p.q_heads == 0 || (p.q_norm && p.q_out));
}

Status qkv_heads(const RowsMma& m, const HeadPrep& p, Stream stream) {
  if (!qkv_heads_fits(m, p))
    return Error{"qkv_heads: needs head_dim 64 or 128, out = (q_heads + 2 kv_heads) * head_dim, rows_mma's operand rules and "
                 "head_prep's pointers"};
  const bool norm = normed(m);
  cudaError_t e;
  if (p.head_dim == 64) e = norm ? launch_nt<1, true>(m, p, stream) : launch_nt<1, false>(m, p, stream);
  else e = norm ? launch_nt<2, true>(m, p, stream) : launch_nt<2, false>(m, p, stream);
  return TANDEM_CUDA_STATUS(e, "launch qkv_heads_kernel");
}

}  // namespace tandem::kernels
