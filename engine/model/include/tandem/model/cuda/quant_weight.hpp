// A projection kept quantised on the device (tandem/model/quant_plan.hpp decides which): its
// checkpoint tensors' bytes and scales uploaded as the checkpoint stores them, as the stacks the
// quantised kernels read (kernels/quant_gemv.hpp). Consecutive parts of one shape make one stack:
// gate | up is a stack of 2, a layer's experts a stack of 2E (gate_up) and one of E (down); q_a |
// kv_a (other row counts) are two stacks, a then b.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tandem/model/cuda/device_buffer.hpp"
#include "tandem/kernels/quant_gemv.hpp"
#include "tandem/model/quant_plan.hpp"
#include "tandem/result.hpp"

namespace tandem::model::cuda {

struct QuantStack {
  DeviceBuffer data, scales, global;
  kernels::QuantMatrices m;  // count 0: empty
  std::uint64_t bytes() const { return data.bytes() + scales.bytes() + global.bytes(); }
};

struct QuantWeight {
  QuantStack a, b;
  bool on() const { return a.m.count > 0; }
  std::uint64_t bytes() const { return a.bytes() + b.bytes(); }
  // Elements of the dense [rows][in] layout of both stacks (what dequantising it writes).
  std::size_t dense_elements() const {
    auto n = [](const kernels::QuantMatrices& m) {
      return static_cast<std::size_t>(m.count) * static_cast<std::size_t>(m.rows) * static_cast<std::size_t>(m.in);
    };
    return n(a.m) + n(b.m);
  }
};

// Uploads `parts` (all of `format`, quantised) into q; names what failed. Host-side conversions:
// fp8 block scales stored in bf16 become fp32 (the kernels read fp32).
Status upload_quant(QuantWeight& q, const Checkpoint& ck, WeightFormat format, std::span<const StoredWeight> parts);

// Both stacks of q dequantised into bf16 at y, b's rows after a's (dense_elements() of them): the
// form prefill-sized steps read where no kernel takes the quantised weight.
Status dequant_bf16(const QuantWeight& q, std::uint16_t* y, kernels::Stream stream);

}  // namespace tandem::model::cuda
