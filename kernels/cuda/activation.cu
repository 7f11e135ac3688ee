// SiLU-and-mul on the fused gate_up rows, and the embedding gather: elementwise, grid-stride.
#include <cstdint>

#include "common.cuh"
#include "tandem/kernels/activation.hpp"
#include "tandem/kernels/embedding.hpp"

namespace tandem::kernels {
namespace {

template <class T>
__global__ void silu_and_mul_kernel(const T* gate_up, T* y, int rows, int d) {
  const long total = static_cast<long>(rows) * d;
  for (long k = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<long>(gridDim.x) * blockDim.x) {
    const long r = k / d, i = k % d;
    const float g = cuda::to_float(gate_up[2 * r * d + i]), u = cuda::to_float(gate_up[2 * r * d + d + i]);
    y[k] = cuda::from_float<T>(g / (1.f + expf(-g)) * u);
  }
}

template <class T>
__global__ void embedding_kernel(const T* table, int vocab, int hidden, const std::int32_t* ids, int n, T* out) {
  const long total = static_cast<long>(n) * hidden;
  for (long k = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<long>(gridDim.x) * blockDim.x) {
    const long t = k / hidden, i = k % hidden;
    const std::int32_t id = ids[t];
    out[k] = (id >= 0 && id < vocab) ? table[static_cast<long>(id) * hidden + i] : cuda::from_float<T>(0.f);
  }
}

int grid_for(long total) {
  const long blocks = (total + 255) / 256;
  return static_cast<int>(blocks < 65536 ? blocks : 65536);
}

}  // namespace

Status silu_and_mul_cuda(DType t, const void* gate_up, void* y, int rows, int d, Stream stream) {
  if (rows < 0 || d <= 0) return Error{"silu_and_mul: rows must be >= 0 and d > 0"};
  if (rows == 0) return {};
  return cuda::with_act_type(t, "silu_and_mul", [&](auto tag) {
    using T = decltype(tag);
    silu_and_mul_kernel<T><<<grid_for(static_cast<long>(rows) * d), 256, 0, stream>>>(static_cast<const T*>(gate_up),
                                                                                     static_cast<T*>(y), rows, d);
    return TANDEM_CUDA_LAUNCHED("silu_and_mul_kernel");
  });
}

Status embedding_cuda(DType t, const void* table, int vocab, int hidden, const std::int32_t* ids, int n,
                           void* out, Stream stream) {
  if (vocab <= 0 || hidden <= 0 || n < 0) return Error{"embedding: vocab and hidden must be > 0, n >= 0"};
  if (n == 0) return {};
  return cuda::with_act_type(t, "embedding", [&](auto tag) {
    using T = decltype(tag);
    embedding_kernel<T><<<grid_for(static_cast<long>(n) * hidden), 256, 0, stream>>>(
        static_cast<const T*>(table), vocab, hidden, ids, n, static_cast<T*>(out));
    return TANDEM_CUDA_LAUNCHED("embedding_kernel");
  });
}

}  // namespace tandem::kernels
