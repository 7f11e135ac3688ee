// Linked instead of kernels/cuda/*.cu when the build has no CUDA back end: every CUDA entry point
// answers that it is missing, so a caller gets a clear error rather than a link failure.
#include "tandem/kernels/activation.hpp"
#include "tandem/kernels/embedding.hpp"
#include "tandem/kernels/moe_routing.hpp"
#include "tandem/kernels/paged_attention.hpp"
#include "tandem/kernels/rmsnorm.hpp"
#include "tandem/kernels/rope.hpp"
#include "tandem/kernels/sampling_cuda.hpp"

namespace tandem::kernels {

namespace {
Error missing() { return Error{"this build has no CUDA back end (nvcc was not found at configure time)"}; }
}  // namespace

bool cuda_device_present() { return false; }

Status rmsnorm_cuda(const float*, const float*, float*, int, int, float) { return missing(); }
Status rmsnorm_residual_cuda(DType, void*, const void*, const void*, void*, int, int, float, Stream) {
  return missing();
}
Status rope_cuda(DType, void*, int, long, int, int, int, const float*, const int*, RopeLayout, Stream) {
  return missing();
}
Status silu_and_mul_cuda(DType, const void*, void*, int, int, Stream) { return missing(); }
Status embedding_cuda(DType, const void*, int, int, const std::int32_t*, int, void*, Stream) { return missing(); }
Status moe_route_cuda(const MoeRouting&, const float*, const float*, int, std::int32_t*, float*, Stream) {
  return missing();
}
Status sample_cuda(const float*, int, int, const SamplingParams*, const double*, Sampled*, std::uint8_t*, Stream) {
  return missing();
}
Status write_kv_cuda(DType, const void*, const void*, int, const std::int32_t*, const PagedKvLayout&, void*, void*,
                          Stream) {
  return missing();
}
Status paged_attention_cuda(DType, const void*, int, const std::int32_t*, const std::int32_t*, int,
                                 const PagedKvLayout&, const void*, const void*, const std::int32_t*, int, float, void*,
                                 int, void*, size_t, Stream) {
  return missing();
}
size_t paged_attention_workspace_bytes(int, int, const PagedKvLayout&, int) { return 0; }
Status paged_attention_mla_rope_cuda(const void*, int, const std::int32_t*, const std::int32_t*, int,
                                          const PagedKvLayout&, const void*, const std::int32_t*, int, float,
                                          const MlaQueryRope&, void*, int, void*, size_t, Stream) {
  return missing();
}

}  // namespace tandem::kernels
