// Small helpers shared by the CUDA kernels: element loads/stores by type, warp/block reductions,
// and the activation-type dispatch (CUDA errors: tandem/kernels/cuda_check.hpp).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <string>

#include "tandem/kernels/cuda_check.hpp"
#include "tandem/kernels/dtype.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels::cuda {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float x) { return __float2bfloat16_rn(x); }

// A cache element of type float, bf16 or __nv_fp8_storage_t (holding x / scale, saturating), written
// and read back as the CPU's conversions in dtype.hpp do (store_element / load_element there).
__device__ __forceinline__ void store_scaled(float* p, float x, float) { *p = x; }
__device__ __forceinline__ void store_scaled(bf16* p, float x, float) { *p = __float2bfloat16_rn(x); }
__device__ __forceinline__ void store_scaled(__nv_fp8_storage_t* p, float x, float scale) {
  *p = __nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3);
}
__device__ __forceinline__ float load_scaled(const float* p, float) { return *p; }
__device__ __forceinline__ float load_scaled(const bf16* p, float) { return __bfloat162float(*p); }
__device__ __forceinline__ float load_scaled(const __nv_fp8_storage_t* p, float scale) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(*p, __NV_E4M3))) * scale;
}

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Each warp's sum of v into scratch[warp] (blockDim.x a multiple of 32, at most 1024), visible to
// the whole block on return. It begins with a barrier, so that a reduction may follow another on
// the same scratch without one in between.
template <class T>
__device__ __forceinline__ void warp_partials(T v, T* scratch) {
  v = warp_sum(v);
  __syncthreads();
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
}

// Sum over the block; every thread gets the result. `scratch` holds 32 values.
template <class T>
__device__ T block_sum(T v, T* scratch) {
  warp_partials(v, scratch);
  const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
  return warp_sum(lane < warps ? scratch[lane] : T(0));
}

// The same with the warps' partial sums added one after another in warp order rather than as a
// tree: the order the decoder's row norms (glue.cu) were written with. Kept apart from block_sum
// because a fused kernel and the unfused ones it replaces must round alike, bit for bit.
__device__ __forceinline__ float block_sum_in_order(float v, float* scratch) {
  warp_partials(v, scratch);
  float total = 0.f;
  for (int i = 0; i < static_cast<int>(blockDim.x / 32); ++i) total += scratch[i];
  return total;
}

// Max over the block, as block_sum. Lanes past the last warp count as -FLT_MAX, so a block whose
// values are all -inf gets -FLT_MAX (a finite shift for the softmaxes that use it).
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = lane < warps ? scratch[lane] : -FLT_MAX;
  return warp_max(total);
}

// 1 / sqrt(mean(x[0:n]^2) + eps) of a bf16 row, summed by the whole block in block_sum_in_order's
// order (every thread gets it).
__device__ __forceinline__ float row_rms_scale(const bf16* x, int n, float eps, float* scratch) {
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = __bfloat162float(x[i]);
    s += v * v;
  }
  return rsqrtf(block_sum_in_order(s, scratch) / static_cast<float>(n) + eps);
}

// Weights are read once per step: 16- and 8-byte loads that keep them out of L1.
__device__ __forceinline__ uint4 load_nc16(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
// Activations (written by an earlier kernel, read by many warps): one 16-byte load through L1.
// Passing *reinterpret_cast<const uint4*>(x) to dot8's reference let the compiler read the bf16
// pairs one 4-byte load at a time, four times the load instructions (ptxas: ld.global.v2.u16 in
// place of ld.global.v4.u32), which cost the gemv 6-12% of a batch-6/16 decode step (issue 22).
__device__ __forceinline__ uint4 load16(const void* p) { return __ldca(static_cast<const uint4*>(p)); }
// Asynchronous 16-byte copies into shared memory (through L2 only): the zero-filling form copies
// `bytes` (0 or 16) and zeroes the rest, for tiles that run past a matrix's edge.
__device__ __forceinline__ void cp_async16(void* smem, const void* global) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(global) : "memory");
}
__device__ __forceinline__ void cp_async16_fill(void* smem, const void* global, int bytes) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(global), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
__device__ __forceinline__ uint2 load_nc8(const void* p) {
  uint2 v;
  asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// The dot product of two chunks of eight bf16s, one fmaf chain in entry order (the decode
// products' rounding: gemv.cu, moe_decode.cu).
__device__ __forceinline__ float dot8(const uint4& a, const uint4& b) {
  const __nv_bfloat162* x = reinterpret_cast<const __nv_bfloat162*>(&a);
  const __nv_bfloat162* y = reinterpret_cast<const __nv_bfloat162*>(&b);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fx = __bfloat1622float2(x[i]), fy = __bfloat1622float2(y[i]);
    s = fmaf(fx.x, fy.x, s);
    s = fmaf(fx.y, fy.y, s);
  }
  return s;
}

// 16 bf16s at x (16-byte aligned) as floats: a bf16 is the top half of an fp32.
__device__ __forceinline__ void load_bf16x16(const bf16* x, float* v) {
  const uint4* p = reinterpret_cast<const uint4*>(x);
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const uint4 u = p[q];
    const unsigned words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      v[8 * q + 2 * w] = __uint_as_float(words[w] << 16);
      v[8 * q + 2 * w + 1] = __uint_as_float(words[w] & 0xFFFF0000u);
    }
  }
}

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.f + expf(-g)) * u; }

// The end of a warp-per-output-row product over NT x rows (gemv.cu, quant_gemv.cu): each row's
// lane sums reduced by warp_sum, then lane t holds row t's result, silu(gate) * up when SILU, else
// the sum (0 on lanes >= NT). Registers are indexed by constants only, hence the select loop.
template <int NT, bool SILU>
__device__ __forceinline__ float warp_rows_result(float (&acc)[NT], float (&up)[NT]) {
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    acc[t] = warp_sum(acc[t]);
    if (SILU) up[t] = warp_sum(up[t]);
  }
  const int lane = threadIdx.x % 32;
  float mine = 0.f;
#pragma unroll
  for (int t = 0; t < NT; ++t)
    if (lane == t) mine = SILU ? silu_mul(acc[t], up[t]) : acc[t];
  return mine;
}


// c += a b on the tensor cores: mma.sync m16n8k16, bf16 in, fp32 accumulate. PTX's fragment
// layouts: lane 4 g + t holds a's rows g, g + 8 at columns 2t, 2t + 1 (a0, a1; +8 for a2, a3),
// b's column g at rows 2t, 2t + 1 (b0; +8 for b1), c's rows g, g + 8 at columns 2t, 2t + 1.
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                             unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// The same with a's four registers as ldmatrix.x4 loads them.
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  mma_m16n8k16(c, a[0], a[1], a[2], a[3], b0, b1);
}

// Four 8x8 bf16 matrices from shared memory in mma.sync's fragment layout (ldmatrix.x4): lane l
// gives the address of row l % 8 of matrix l / 8; the .trans form transposes each matrix (a B
// operand stored k-major, as attention's values are).
__device__ __forceinline__ unsigned smem_addr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
// Element offset of 16-byte unit u of row r in shared rows of `width` bf16 entries (a multiple of
// 64), units XOR-swizzled by row (u ^ (r % 8)) so that ldmatrix's eight rows, at row offsets that
// are multiples of 8, fall in eight different bank groups without padding.
__device__ __forceinline__ int swz(int r, int u, int width) { return r * width + ((u ^ (r % 8)) * 8); }
// Two floats as a bf16 pair in one register (lo in the low half), round to nearest.
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
  const __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&b);
}

// The two fp8_e4m3 values in the low 16 bits of `two` (the lower first) as floats, exactly
// (through fp16, which holds every e4m3 value).
__device__ __forceinline__ float2 fp8x2_to_float2(unsigned two) {
  return __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3)));
}

// The shared memory a block may opt in to on the current device (0 if it cannot be read).
inline int smem_optin() {
  static const int n = [] {
    int dev = 0, bytes = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    if (cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) return 0;
    return bytes;
  }();
  return n;
}

// The current device's multiprocessors (1 if it cannot be read).
inline int sm_count() {
  static const int n = [] {
    int dev = 0, count = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 1;
    if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || count < 1) return 1;
    return count;
  }();
  return n;
}

// Runs f.template operator()<T>() for the activation type t (f32 or bf16); otherwise an error.
template <class F>
Status with_act_type(DType t, const char* op, F&& f) {
  if (t == DType::f32) return f(float{});
  if (t == DType::bf16) return f(bf16{});
  return Error{std::string(op) + ": activations must be fp32 or bf16, not " + dtype_name(t)};
}

}  // namespace tandem::kernels::cuda
