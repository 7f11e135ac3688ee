// Safetensors checkpoints, memory-mapped: one file (model.safetensors) or shards listed by
// model.safetensors.index.json. A file is 8 bytes of little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__": {...}}, then the data section
// the offsets point into. Tensors are handed out converted to fp32 (the CPU path's type),
// quantised ones (fp8 block-scaled, NVFP4) dequantised.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tandem/model/result.hpp"

namespace tandem::model {

struct TensorInfo {
  std::string name;
  std::string dtype;              // as the file spells it: "BF16", "F16", "F32", ...
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  size_t nbytes = 0;
  std::string file;               // for error messages
};

// One memory-mapped .safetensors file; every tensor's bytes are checked to lie inside the file.
class SafetensorsFile {
 public:
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }

 private:
  SafetensorsFile() = default;
  void* map_ = nullptr;
  size_t size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
};

class Checkpoint {
 public:
  // <dir>/model.safetensors.index.json when present, else <dir>/model.safetensors.
  static Result<Checkpoint> open(const std::filesystem::path& dir);

  const TensorInfo* find(const std::string& name) const;
  bool has(const std::string& name) const { return find(name) != nullptr; }
  std::vector<std::string> names() const;
  // The tensor converted to fp32, after checking that it exists, has `shape` and a float dtype.
  // Quantised weights are dequantised: fp8 with a `<name>_scale_inv` beside it (128x128 blocks),
  // and ModelOpt NVFP4 (uint8, `<name>_scale` and `<name>_scale_2` beside it); `shape` is then the
  // logical [out][in] of the weight.
  Result<std::vector<float>> read(const std::string& name, const std::vector<int64_t>& shape) const;

 private:
  Result<std::vector<float>> read_fp8_block(const TensorInfo& t, const std::vector<int64_t>& shape) const;
  Result<std::vector<float>> read_nvfp4(const TensorInfo& t, const std::vector<int64_t>& shape) const;
  std::filesystem::path dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> index_;
};

float bf16_to_f32(uint16_t bits);
float f16_to_f32(uint16_t bits);
std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace tandem::model
