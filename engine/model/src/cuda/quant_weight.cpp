// Uploading quantised projections (quant_weight.hpp).
#include "tandem/model/cuda/quant_weight.hpp"

#include <cuda_runtime.h>

namespace tandem::model::cuda {

namespace {

namespace k = tandem::kernels;

Status copy(DeviceBuffer& dst, std::size_t at, const void* src, std::size_t n, const std::string& what) {
  if (at + n > dst.bytes()) return Error{"uploading " + what + ": it does not fit its device buffer"};
  return TANDEM_CUDA_STATUS(cudaMemcpy(static_cast<char*>(dst.get()) + at, src, n, cudaMemcpyHostToDevice), "uploading " + what);
}

Status upload_stack(QuantStack& s, const Checkpoint& ck, k::QuantFormat f, std::span<const StoredWeight> parts) {
  const int rows = static_cast<int>(parts[0].out), in = static_cast<int>(parts[0].in), count = static_cast<int>(parts.size());
  const std::size_t data = k::quant_data_bytes(f, rows, in), scales = k::quant_scale_bytes(f, rows, in);
  const std::string what = parts[0].name + (count > 1 ? " and the " + std::to_string(count - 1) + " parts after it" : "");
  if (auto e = s.data.allocate(data * parts.size(), what); !e) return e;
  if (auto e = s.scales.allocate(scales * parts.size(), what + " (scales)"); !e) return e;
  std::vector<float> globals;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const StoredWeight& w = parts[i];
    if (w.data->nbytes != data) return Error{"uploading " + w.name + ": " + std::to_string(w.data->nbytes) + " bytes, expected " + std::to_string(data)};
    if (auto e = copy(s.data, i * data, w.data->data, data, w.name); !e) return e;
    if (f == k::QuantFormat::fp8_block) {
      auto v = ck.read(w.scale->name, w.scale->shape);  // F32 or BF16 -> fp32
      if (!v) return v.error();
      if (auto e = copy(s.scales, i * scales, v->data(), v->size() * 4, w.scale->name); !e) return e;
    } else {
      if (auto e = copy(s.scales, i * scales, w.scale->data, scales, w.scale->name); !e) return e;
      globals.push_back(w.global_scale);
    }
  }
  if (!globals.empty()) {
    if (auto e = s.global.allocate(globals.size() * 4, what + " (global scales)"); !e) return e;
    if (auto e = copy(s.global, 0, globals.data(), globals.size() * 4, what + " (global scales)"); !e) return e;
  }
  s.m.format = f;
  s.m.data = s.data.as<std::uint8_t>();
  s.m.scales = s.scales.get();
  s.m.global = s.global.as<float>();
  s.m.count = count, s.m.rows = rows, s.m.in = in;
  return {};
}

}  // namespace

Status upload_quant(QuantWeight& q, const Checkpoint& ck, WeightFormat format, std::span<const StoredWeight> parts) {
  if (parts.empty()) return Error{"a quantised projection without parts"};
  const k::QuantFormat f = format == WeightFormat::nvfp4 ? k::QuantFormat::nvfp4 : k::QuantFormat::fp8_block;
  std::size_t run = 1;
  while (run < parts.size() && parts[run].out == parts[0].out && parts[run].in == parts[0].in) ++run;
  for (std::size_t i = run + 1; i < parts.size(); ++i)
    if (parts[i].out != parts[run].out || parts[i].in != parts[run].in)
      return Error{"projection " + parts[0].name + ": its parts have more than two shapes"};
  if (run < parts.size() && parts[run].in != parts[0].in)
    return Error{"projection " + parts[0].name + ": its parts have different input widths"};
  if (auto e = upload_stack(q.a, ck, f, parts.subspan(0, run)); !e) return e;
  if (run < parts.size()) return upload_stack(q.b, ck, f, parts.subspan(run));
  return {};
}

Status dequant_bf16(const QuantWeight& q, std::uint16_t* y, kernels::Stream stream) {
  if (auto e = kernels::quant_dequant_bf16_cuda(q.a.m, y, stream); !e || q.b.m.count == 0) return e;
  const std::size_t first = static_cast<std::size_t>(q.a.m.count) * static_cast<std::size_t>(q.a.m.rows) * static_cast<std::size_t>(q.a.m.in);
  return kernels::quant_dequant_bf16_cuda(q.b.m, y + first, stream);
}

}  // namespace tandem::model::cuda
