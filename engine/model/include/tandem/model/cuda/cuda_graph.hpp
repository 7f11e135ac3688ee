// Recording a CUDA graph: one home for the begin / enqueue / end / instantiate sequence the decoders'
// decode graphs and the DFlash drafter's proposal and context graphs share.
#pragma once
#include <cuda_runtime.h>

#include <functional>
#include <string>

#include "tandem/kernels/cuda_check.hpp"
#include "tandem/result.hpp"

namespace tandem::model::cuda {

// What `enqueue` puts on `stream` (thread-local capture: other threads' work is not recorded),
// instantiated; the caller destroys the executable graph (cudaGraphExecDestroy). The capture is
// ended even when the enqueue failed, so the stream leaves capture mode; the first error, with
// `what` (e.g. "decode graph of 4 sequences") as its context, is returned then.
inline tandem::Result<cudaGraphExec_t> capture_graph(cudaStream_t stream, const std::function<tandem::Status()>& enqueue,
                                                     const std::string& what) {
  if (auto e = TANDEM_CUDA_STATUS(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture"); !e)
    return e.error().with_context("capturing the " + what);
  tandem::Status status = enqueue();
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  const tandem::Status end = TANDEM_CUDA_STATUS(cudaStreamEndCapture(stream, &g), "end capture");
  if (status.ok()) status = end;
  if (status.ok()) status = TANDEM_CUDA_STATUS(cudaGraphInstantiate(&exec, g, 0), "instantiate graph");
  if (g) cudaGraphDestroy(g);
  if (!status.ok()) return status.error().with_context("capturing the " + what);
  return exec;
}

}  // namespace tandem::model::cuda
