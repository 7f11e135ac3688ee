// Programmatic dependent launch (Hopper and later): the decode kernels are launched so that the
// GPU may schedule a kernel's blocks while the kernel before it in the stream is still running;
// each such kernel first waits (griddepcontrol.wait) until its predecessor has finished and its
// writes are visible, then lets its own successor be scheduled. What this saves is the launch gap
// between back-to-back small kernels (a decode step is ~100 of them); the work itself is unchanged.
// Captured into CUDA graphs as programmatic edges. On by default; off: ordinary launches.
#pragma once

namespace tandem::kernels {

void set_programmatic_launch(bool on);
bool programmatic_launch();

}  // namespace tandem::kernels

#ifdef __CUDACC__
#include <cuda_runtime.h>

#include <utility>

namespace tandem::kernels::cuda {

// First thing in a kernel launched with launch_pdl: wait for the previous kernel, then let the next
// one be scheduled. A no-op when the kernel was launched normally.
__device__ __forceinline__ void pdl_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent launch when on.
template <class... Params, class... Args>
cudaError_t launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  if (programmatic_launch()) cfg.attrs = attr, cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace tandem::kernels::cuda
#endif
