// The buffer a drafter on the same device reads the target's hidden states from
// (CudaModel::set_capture), as every CUDA model sizes it: bf16, one row per token of the largest
// step, the captured layers side by side.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "tandem/model/cuda/device_buffer.hpp"
#include "tandem/result.hpp"

namespace tandem::model::cuda {

// Ok or why not: a layer that does not exist, or no device memory.
inline Status allocate_capture(DeviceBuffer& buf, const std::vector<int>& layers, int num_layers, int max_tokens, int hidden) {
  for (int l : layers)
    if (l < 0 || l >= num_layers)
      return Error{"hidden-state capture: layer " + std::to_string(l) + " does not exist (the model has " + std::to_string(num_layers) + ")"};
  const std::size_t width = layers.size() * static_cast<std::size_t>(hidden);
  return buf.allocate(static_cast<std::size_t>(max_tokens) * width * 2, "captured hidden states");
}

}  // namespace tandem::model::cuda
