// CPU reference of grouped_gemm_quant_cuda (moe_experts.hpp): every expert's matrices dequantised
// by quant_weights.hpp's references and rounded to bf16 (the weights the GPU multiplies by), then
// each sorted pair's row of x times its expert's rows, summed in fp64.
#include <cstddef>
#include <vector>

#include "tandem/kernels/moe_experts.hpp"
#include "tandem/kernels/quant_weights.hpp"

namespace tandem::kernels {

namespace {

// Matrix m of the stack as fp32 [rows][in], rounded to bf16.
std::vector<float> dense_matrix(const QuantMatrices& w, long m) {
  const std::size_t n = static_cast<std::size_t>(w.rows) * static_cast<std::size_t>(w.in);
  std::vector<float> out(n);
  if (w.format == QuantFormat::fp8_block) {
    const std::size_t scales = quant_scale_bytes(w.format, w.rows, w.in) / 4;
    dequant_fp8_block_cpu(w.data + static_cast<std::size_t>(m) * n, static_cast<const float*>(w.scales) + static_cast<std::size_t>(m) * scales,
                          w.rows, w.in, out.data());
  } else {
    const std::size_t scales = quant_scale_bytes(w.format, w.rows, w.in);
    dequant_nvfp4_cpu(w.data + static_cast<std::size_t>(m) * n / 2, static_cast<const std::uint8_t*>(w.scales) + static_cast<std::size_t>(m) * scales,
                      w.global[m], w.rows, w.in, out.data());
  }
  for (float& v : out) v = round_bf16(v);
  return out;
}

}  // namespace

void grouped_gemm_quant_cpu(const float* x, long ldx, const std::int32_t* gather, const std::int32_t* offsets, int n_experts,
                            const QuantMatrices& w, float* y, long ldy) {
  const int per = w.count / n_experts, k = w.in;
  for (int e = 0; e < n_experts; ++e) {
    if (offsets[e] == offsets[e + 1]) continue;
    std::vector<std::vector<float>> mats;
    for (int j = 0; j < per; ++j) mats.push_back(dense_matrix(w, static_cast<long>(e) * per + j));
    for (int p = offsets[e]; p < offsets[e + 1]; ++p) {
      const float* xr = x + (gather ? gather[p] : p) * ldx;
      for (int j = 0; j < per; ++j)
        for (int o = 0; o < w.rows; ++o) {
          const float* wr = mats[static_cast<std::size_t>(j)].data() + static_cast<std::size_t>(o) * static_cast<std::size_t>(k);
          double s = 0;
          for (int i = 0; i < k; ++i) s += static_cast<double>(xr[i]) * wr[i];
          y[p * ldy + static_cast<long>(j) * w.rows + o] = static_cast<float>(s);
        }
    }
  }
}

}  // namespace tandem::kernels
