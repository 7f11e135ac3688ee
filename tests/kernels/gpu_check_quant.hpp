// The GPU check's quantised weight stacks (gpu_check_quant.cpp, gpu_check_quant_grouped.cpp): made
// by the CPU quantisers, laid out on the device as quant_gemv.hpp's kernels read them.
#pragma once
#include <cstdint>
#include <vector>

#include "gpu_check.hpp"
#include "tandem/kernels/quant_gemv.hpp"
#include "tandem/kernels/quant_weights.hpp"

namespace gpu_check {

namespace k = tandem::kernels;

// A stack of `count` matrices [rows][in] quantised one by one (each its own scales), on the device
// as quant_gemv.hpp lays it out, and dequantised on the CPU and rounded to bf16 ([count * rows][in]).
struct Stack {
  std::vector<float> dense;
  std::vector<std::uint8_t> data, scales;
  std::vector<float> fp8_scales, globals;
  Dev<std::uint8_t> d_data, d_scales;
  Dev<float> d_fp8_scales, d_globals;
  k::QuantMatrices m;
  static std::vector<std::uint8_t> bytes(k::QuantFormat f, int count, int rows, int in, bool scales) {
    return std::vector<std::uint8_t>(sz(count) * (scales ? (f == k::QuantFormat::nvfp4 ? k::quant_scale_bytes(f, rows, in) : 0)
                                                          : k::quant_data_bytes(f, rows, in)));
  }
  Stack(k::QuantFormat f, int count, int rows, int in, std::uint32_t seed)
      : dense(sz(static_cast<long>(count) * rows * in)), data(bytes(f, count, rows, in, false)), scales(bytes(f, count, rows, in, true)),
        fp8_scales(f == k::QuantFormat::fp8_block ? sz(count) * k::quant_scale_bytes(f, rows, in) / 4 : 0), globals(sz(count)),
        d_data(data.size()), d_scales(scales.size()), d_fp8_scales(fp8_scales.size()), d_globals(globals.size()) {
    const size_t n = sz(static_cast<long>(rows) * in);
    for (int c = 0; c < count; ++c) {
      const auto w = normal(n, 0.02f * static_cast<float>(1 + c % 3), seed + static_cast<std::uint32_t>(c));
      float* out = dense.data() + sz(c) * n;
      if (f == k::QuantFormat::fp8_block) {
        const size_t ns = k::quant_scale_bytes(f, rows, in) / 4;
        k::quantize_fp8_block_cpu(w.data(), rows, in, data.data() + sz(c) * n, fp8_scales.data() + sz(c) * ns);
        k::dequant_fp8_block_cpu(data.data() + sz(c) * n, fp8_scales.data() + sz(c) * ns, rows, in, out);
      } else {
        k::quantize_nvfp4_cpu(w.data(), rows, in, data.data() + sz(c) * n / 2, scales.data() + sz(c) * n / 16, &globals[sz(c)]);
        k::dequant_nvfp4_cpu(data.data() + sz(c) * n / 2, scales.data() + sz(c) * n / 16, globals[sz(c)], rows, in, out);
      }
    }
    for (float& v : dense) v = k::round_bf16(v);  // the weights the kernels compute with
    d_data.put(data), d_scales.put(scales), d_fp8_scales.put(fp8_scales), d_globals.put(globals);
    m.format = f, m.data = d_data.p(), m.count = count, m.rows = rows, m.in = in;
    m.scales = f == k::QuantFormat::fp8_block ? static_cast<const void*>(d_fp8_scales.p()) : d_scales.p();
    m.global = d_globals.p();
  }
};

inline const char* name_of(k::QuantFormat f) { return f == k::QuantFormat::fp8_block ? "fp8_block" : "nvfp4"; }

}  // namespace gpu_check
