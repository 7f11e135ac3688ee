// Dense GEMMs on the GPU through cuBLASLt: bf16 (or fp32) operands, fp32 accumulation, in the
// model's row-major layout (PyTorch's nn.Linear), optionally strided-batched:
//   y[b][r][o] = sum_i x[b][r][i] * w[b][o][i] (+ bias[o])     w_trans: w is [out][in] (nn.Linear)
//   y[b][r][o] = sum_i x[b][r][i] * w[b][i][o]                 !w_trans: w is [in][out]
// Leading dimensions and batch strides are in elements, so operands may live inside wider rows
// (per-head slices of fused projections). The CPU reference of one such product is linear_cpu.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "tandem/kernels/dtype.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels {

struct GemmArgs {
  int rows = 0, in = 0, out = 0;  // M, K, N
  const void* x = nullptr;
  long ldx = 0, stride_x = 0;
  const void* w = nullptr;
  long ldw = 0, stride_w = 0;
  bool w_trans = true;
  void* y = nullptr;
  long ldy = 0, stride_y = 0;
  const void* bias = nullptr;  // [out] of y's type; only without batching
  int batch = 1;
  DType xw_type = DType::bf16;  // x and w: bf16 or f32
  DType y_type = DType::bf16;   // bf16 or f32 (f32 needs bf16 operands or f32 everything)
  bool accumulate = false;      // y += the product (no bias): a second product summed into the first
};

// One cuBLASLt handle with its workspace and the algorithm chosen per shape (the heuristic runs
// once per shape, so a captured CUDA graph replays without host work). Not thread-safe: one per
// model, used on one stream at a time.
class GemmRunner {
 public:
  // Fails (a message) without a CUDA device or when cuBLASLt cannot start.
  static Result<std::unique_ptr<GemmRunner>> create(size_t workspace_bytes = size_t{32} << 20);
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  // Ok or what failed (bad shape, no algorithm, the launch).
  Status run(const GemmArgs& a, Stream stream);

 private:
  struct Plan;
  GemmRunner() = default;
  void* handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<std::tuple<int, int, int, long, long, long, long, long, long, int, int, int, int, int, int>, std::unique_ptr<Plan>>
      plans_;
};

}  // namespace tandem::kernels
