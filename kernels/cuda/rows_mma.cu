// rows_mma.hpp: a few rows' product on the tensor cores. Block = 4 warps on 16 output rows (16 gate
// + 16 up rows with silu) and NT tiles of 8 x rows; warp w takes the 32-wide slabs w, w + 4, .. of
// the inner dimension, two m16n8k16 products a slab and tile; warp 0 adds the four partial tiles
// and writes them (the slab's product and its load pattern: rows_mma.cuh).
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
constexpr int kMaxRows = 4096;
constexpr std::size_t kMaxSmem = 32 * 1024;  // dynamic, beside up to 12 KB static (the 48 KB a block gets unasked)

// long-function: weight loads before the wait, the staged or global x, the slab loop, then warp 0's merge and epilogue.
template <int NT, bool SILU, bool NORM, class OutT>
__global__ void __launch_bounds__(kWarps * 32) rows_mma_kernel(RowsMma a) {
  constexpr int U = 4;  // slabs a warp loads before its products
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float red[kWarps - 1][NT][SILU ? 8 : 4][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
  const int o0 = static_cast<int>(blockIdx.x) * 16, n_base = static_cast<int>(blockIdx.y) * NT * 8;
  const int slabs = a.in / 32;
  const bool live0 = o0 + g < a.out, live1 = o0 + g + 8 < a.out;
  const bf16* w0 = static_cast<const bf16*>(a.w) + static_cast<long>(live0 ? o0 + g : 0) * a.ldw + 8 * tig;
  const bf16* w1 = static_cast<const bf16*>(a.w) + static_cast<long>(live1 ? o0 + g + 8 : 0) * a.ldw + 8 * tig;
  const long up = a.up_offset * a.ldw;
  uint4 wa[U][2], ua[U][2];
  auto load_w = [&](int j0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int s = warp + kWarps * (j0 + u);
      if (s < slabs) {
        const uint4 z = make_uint4(0, 0, 0, 0);
        wa[u][0] = live0 ? cuda::load_nc16(w0 + 32 * s) : z;
        wa[u][1] = live1 ? cuda::load_nc16(w1 + 32 * s) : z;
        if (SILU) {
          ua[u][0] = live0 ? cuda::load_nc16(w0 + up + 32 * s) : z;
          ua[u][1] = live1 ? cuda::load_nc16(w1 + up + 32 * s) : z;
        }
      }
    }
  };
  load_w(0);  // the weights do not depend on the kernel before: loaded before waiting for it
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
  float acc[NT][4], acu[NT][4];
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[t][c] = 0.f, acu[t][c] = 0.f;
  const bf16* xg = static_cast<const bf16*>(a.x);
  for (int j0 = 0; warp + kWarps * j0 < slabs; j0 += U) {
    if (j0 > 0) load_w(j0);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int s = warp + kWarps * (j0 + u);
      if (s >= slabs) break;
      const int k0 = 32 * s + 8 * tig;
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
        mma_slab(acc[t], wa[u][0], wa[u][1], xv);
        if (SILU) mma_slab(acu[t], ua[u][0], ua[u][1], xv);
      }
    }
  }
  if (warp > 0) {
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        red[warp - 1][t][c][lane] = acc[t][c];
        if (SILU) red[warp - 1][t][4 + c][lane] = acu[t][c];
      }
  }
  __syncthreads();
  if (warp > 0) return;
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    if (t >= tiles) break;
    float v[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      float s = acc[t][c], su = acu[t][c];
#pragma unroll
      for (int w = 0; w < kWarps - 1; ++w) {
        s += red[w][t][c][lane];
        if (SILU) su += red[w][t][4 + c][lane];
      }
      v[c] = SILU ? cuda::silu_mul(s, su) : s;
    }
    // v[0], v[1]: output row o0 + g, x rows na, na + 1; v[2], v[3]: output row o0 + g + 8.
    const int na = n_base + t * 8 + 2 * tig;
    if (a.y) {
      OutT* y = static_cast<OutT*>(a.y);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int n = na + (c & 1);
        const bool live = c < 2 ? live0 : live1;
        if (live && n < a.rows) y[static_cast<long>(n) * a.ldy + o0 + g + (c < 2 ? 0 : 8)] = cuda::from_float<OutT>(v[c]);
      }
    }
    if (a.keys) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        unsigned long long k = 0;
        if (live0) k = argmax_key(v[c], o0 + g);
        if (live1) {
          const unsigned long long k1 = argmax_key(v[c + 2], o0 + g + 8);
          k = k1 > k ? k1 : k;
        }
        for (int o = 4; o < 32; o *= 2) {
          const unsigned long long other = __shfl_xor_sync(0xffffffffu, k, o);
          k = other > k ? other : k;
        }
        const int n = na + c;
        if (g == 0 && n < a.rows) atomicMax(a.keys + n, k);
      }
    }
  }
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

bool normed(const RowsMma& a) { return a.x32 != nullptr || a.table != nullptr; }

std::size_t smem_bytes(const RowsMma& a, int nt) {
  return normed(a) ? static_cast<std::size_t>(nt) * 8 * static_cast<std::size_t>(a.in + kPad) * 2 : 0;
}

template <int NT, bool SILU, bool NORM, class OutT>
cudaError_t launch(const RowsMma& a, Stream stream) {
  const dim3 grid(static_cast<unsigned>((a.out + 15) / 16), static_cast<unsigned>((a.rows + 8 * NT - 1) / (8 * NT)));
  return cuda::launch_pdl(rows_mma_kernel<NT, SILU, NORM, OutT>, grid, dim3(kWarps * 32), smem_bytes(a, NT), stream, a);
}

template <bool SILU, bool NORM, class OutT>
cudaError_t launch_nt(const RowsMma& a, Stream stream) {
  // Tiles a block: the fewest that keep the grid within about four blocks a multiprocessor (a
  // tile more a block re-reads the weights less), and whose staged rows fit the shared memory.
  const long cols = (a.out + 15) / 16, tiles = (a.rows + 7) / 8, room = 4L * sm_count();
  auto fits = [&](int nt) { return smem_bytes(a, nt) <= kMaxSmem; };
  if (tiles <= 1 || (cols * tiles <= room && fits(1)) || !fits(2)) return launch<1, SILU, NORM, OutT>(a, stream);
  if (tiles <= 2 || (cols * ((tiles + 1) / 2) <= room) || !fits(4)) return launch<2, SILU, NORM, OutT>(a, stream);
  return launch<4, SILU, NORM, OutT>(a, stream);
}

template <bool NORM>
cudaError_t dispatch(const RowsMma& a, Stream stream) {
  if (a.silu) return launch_nt<true, NORM, bf16>(a, stream);
  if (a.y_type == DType::f32) return launch_nt<false, NORM, float>(a, stream);
  return launch_nt<false, NORM, bf16>(a, stream);
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

bool rows_mma_fits(const RowsMma& a) {
  const bool norm = normed(a);
  return a.rows >= 1 && a.rows <= kMaxRows && a.in > 0 && a.in % 32 == 0 && a.out > 0 && a.ldw % 8 == 0 && aligned16(a.w) &&
         (norm ? a.norm_w != nullptr && smem_bytes(a, 1) <= kMaxSmem && (!a.table || (a.ids && a.vocab > 0 && !a.x32)) : a.ldx % 8 == 0 && aligned16(a.x)) &&
         (!a.silu || a.y_type == DType::bf16) && (a.y_type == DType::bf16 || a.y_type == DType::f32);
}

Status rows_mma(const RowsMma& a, Stream stream) {
  if (!rows_mma_fits(a))
    return Error{"rows_mma: needs 1..4096 rows, in a multiple of 32, strides multiples of 8, 16-byte aligned x and w, a bf16 y "
                 "with silu, and with norm rows that fit 48 KB of shared memory"};
  if (!a.y && !a.keys) return Error{"rows_mma: neither a result nor argmax keys asked"};
  const cudaError_t e = normed(a) ? dispatch<true>(a, stream) : dispatch<false>(a, stream);
  return TANDEM_CUDA_STATUS(e, "launch rows_mma_kernel");
}

}  // namespace tandem::kernels
