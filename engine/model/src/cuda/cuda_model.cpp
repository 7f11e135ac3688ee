// load_cuda_model (dispatch on model_type), the device's KV budget, and whether a device is there.
#include <cuda_runtime.h>

#include "tandem/kernels/cuda_check.hpp"
#include "tandem/model/cuda_model.hpp"
#include "tandem/model/safetensors.hpp"

namespace tandem::model {

namespace cuda {
Result<std::unique_ptr<CudaModel>> load_glm4_moe_lite_cuda(ModelConfig config, const Checkpoint& ck, comm::Communicator& comm,
                                                           const CudaOptions& options);
Result<std::unique_ptr<CudaModel>> load_glm4_moe_cuda(ModelConfig config, const Checkpoint& ck, comm::Communicator& comm,
                                                      const CudaOptions& options);
Result<std::unique_ptr<CudaModel>> load_glm5_next_cuda(ModelConfig config, const Checkpoint& ck, comm::Communicator& comm,
                                                       const CudaOptions& options);
}  // namespace cuda

Status cuda_model_available() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return Error{std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e)};
  }
  if (n == 0) return Error{"no CUDA device is visible"};
  return Ok{};
}

Result<std::uint64_t> cuda_kv_budget(int device, double gpu_memory_utilization) {
  if (!(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0))
    return error("`gpu_memory_utilization` must be in (0, 1], got " + std::to_string(gpu_memory_utilization));
  std::size_t free = 0, total = 0;
  const std::string what = "cannot read the memory of CUDA device " + std::to_string(device);
  if (auto set = TANDEM_CUDA_STATUS(cudaSetDevice(device), what); !set) return set.error();
  if (auto info = TANDEM_CUDA_STATUS(cudaMemGetInfo(&free, &total), what); !info) return info.error();
  const double allowed = gpu_memory_utilization * static_cast<double>(total);
  const double in_use = static_cast<double>(total - free);
  if (allowed <= in_use)
    return error("`gpu_memory_utilization` " + std::to_string(gpu_memory_utilization) + " allows " +
                 std::to_string(static_cast<std::uint64_t>(allowed) >> 20) + " MiB of the device but " +
                 std::to_string(static_cast<std::uint64_t>(in_use) >> 20) + " MiB are in use; nothing is left for the KV pool");
  return static_cast<std::uint64_t>(allowed - in_use);
}

Result<std::unique_ptr<CudaModel>> load_cuda_model(const std::filesystem::path& dir, const CudaOptions& options) {
  static comm::SingleRank alone;
  return load_cuda_model(dir, options, alone);
}

Result<std::unique_ptr<CudaModel>> load_cuda_model(const std::filesystem::path& dir, const CudaOptions& options,
                                                   comm::Communicator& comm) {
  if (auto there = cuda_model_available(); !there) return there.error().with_context("`device` cuda");
  auto config = load_config(dir);
  if (!config) return config.error();
  // Every CUDA decoder shards (shard.hpp: heads, MLP widths, whole experts, vocabulary); the
  // partial sums go through the DeviceAllReduce the caller sets once the group is joined.
  // Reduction groups (one rank summing as TP-N does) are built for the GLM decoder (cuda_decoder.hpp).
  if (options.reduction_groups > 1 && config->model_type != "glm4_moe_lite" && config->model_type != "glm4_moe")
    return error("reduction groups (`reduction_groups` " + std::to_string(options.reduction_groups) +
                 ": one rank summing as tensor-parallel ranks do) are built for glm4_moe_lite and glm4_moe, not " + config->model_type);
  auto ck = Checkpoint::open(dir);
  if (!ck) return ck.error();
  if (config->model_type == "glm4_moe_lite") return cuda::load_glm4_moe_lite_cuda(std::move(config).value(), ck.value(), comm, options);
  if (config->model_type == "glm4_moe") return cuda::load_glm4_moe_cuda(std::move(config).value(), ck.value(), comm, options);
  if (config->model_type == "glm5_next" || config->model_type == "glm5_next_text")
    return cuda::load_glm5_next_cuda(std::move(config).value(), ck.value(), comm, options);
  return error("the CUDA back end runs glm4_moe_lite, glm4_moe and glm5_next(_text) so far; " + config->model_type + " runs on `device` cpu");
}

}  // namespace tandem::model
