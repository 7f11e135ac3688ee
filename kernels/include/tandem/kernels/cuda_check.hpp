// A failed CUDA call as the project's Error: the call's text, the CUDA error's name and words, and
// where = "file.cu:line" of the check, so a failure deep in a decode step names the line that saw it.
//   TANDEM_CUDA_STATUS(cudaMemcpyAsync(...), "uploading x")  -> Status (Ok when cudaSuccess)
//   TANDEM_CUDA_LAUNCHED("gemv_kernel")                       -> Status of the last launch
// Host code only (CUDA sources and the decoders that call them).
#pragma once
#include <cuda_runtime.h>

#include <string>
#include <string_view>

#include "tandem/result.hpp"

namespace tandem::kernels {

// Error text of e, or Ok. `call` is the checked expression as written; `what` says what it was for
// (may be empty). `file` is __FILE__: only its last component is kept.
// "gemv.cu:88: uploading w: cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice) failed: cudaErrorInvalidValue: invalid argument"
inline Status cuda_status(cudaError_t e, const char* call, std::string_view what, const char* file, int line) {
  if (e == cudaSuccess) return Ok{};
  std::string_view f(file);
  if (const auto slash = f.find_last_of('/'); slash != std::string_view::npos) f.remove_prefix(slash + 1);
  std::string message;
  if (!what.empty()) message.append(what).append(": ");
  // A variable holding an earlier call's result says nothing by its name: only calls are quoted.
  if (std::string_view(call).find('(') != std::string_view::npos) message.append(call).append(" failed: ");
  message.append(cudaGetErrorName(e)).append(": ").append(cudaGetErrorString(e));
  return Error{std::move(message), std::string(f) + ":" + std::to_string(line)};
}

}  // namespace tandem::kernels

#define TANDEM_CUDA_STATUS(call, what) ::tandem::kernels::cuda_status((call), #call, (what), __FILE__, __LINE__)
#define TANDEM_CUDA_LAUNCHED(kernel) \
  ::tandem::kernels::cuda_status(cudaGetLastError(), "cudaGetLastError()", std::string("launch ") + (kernel), __FILE__, __LINE__)
