// Small helpers shared by the CUDA kernels: element loads/stores by type, warp/block reductions,
// and the activation-type dispatch (CUDA errors: tandem/kernels/cuda_check.hpp).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

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

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 values; the call begins and ends with a barrier so it can be called back to back.
template <class T>
__device__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = lane < warps ? scratch[lane] : T(0);
  total = warp_sum(total);
  return total;
}


// Runs f.template operator()<T>() for the activation type t (f32 or bf16); otherwise an error.
template <class F>
Status with_act_type(DType t, const char* op, F&& f) {
  if (t == DType::f32) return f(float{});
  if (t == DType::bf16) return f(bf16{});
  return Error{std::string(op) + ": activations must be fp32 or bf16, not " + dtype_name(t)};
}

}  // namespace tandem::kernels::cuda
