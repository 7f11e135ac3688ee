// A copy of a checkpoint with every tensor the CUDA model stores in bf16 rounded to bf16 (stored as
// F32, so the fp32 CPU reference loads it as it is): the reference a bf16-weight model can be held
// to. The MoE routers (mlp.gate.weight, e_score_correction_bias) stay as they are: the CUDA model
// keeps them in fp32 (as transformers and vLLM run the router), and a reference with other router
// weights than the model's moves near-tied routing choices by itself. Used by
// tandem-bf16-weight-effect and tests/model/cuda_model_check.cpp.
#pragma once
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/kernels/dtype.hpp"
#include "tandem/model/safetensors.hpp"

namespace tandem::model::bench {

namespace fs = std::filesystem;

inline std::vector<float> as_f32(const TensorInfo& t) {
  const bool wide = t.dtype == "F32";
  std::vector<float> out(wide ? t.nbytes / 4 : t.nbytes / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    if (wide) {
      std::memcpy(&out[i], t.data + 4 * i, 4);
    } else {
      std::uint16_t b = 0;
      std::memcpy(&b, t.data + 2 * i, 2);
      out[i] = t.dtype == "BF16" ? bf16_to_f32(b) : f16_to_f32(b);
    }
  }
  return out;
}

// Whether the CUDA model keeps this tensor in fp32 (the routers), not bf16.
inline bool kept_in_fp32(const std::string& name) {
  auto ends = [&](const std::string& tail) { return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0; };
  return ends(".mlp.gate.weight") || ends(".mlp.gate.e_score_correction_bias");
}

inline bool write_rounded(const fs::path& src, const fs::path& dst) {
  fs::create_directories(dst);
  for (const char* f : {"config.json", "generation_config.json"})
    if (fs::exists(src / f)) fs::copy_file(src / f, dst / f, fs::copy_options::overwrite_existing);
  auto ck = Checkpoint::open(src);
  if (!ck) return false;
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& name : ck->names()) {
    const TensorInfo* t = ck->find(name);
    auto v = as_f32(*t);
    if (!kept_in_fp32(name))
      for (auto& x : v) x = tandem::kernels::round_bf16(x);
    header[name] = {{"dtype", "F32"}, {"shape", t->shape}, {"data_offsets", {data.size(), data.size() + v.size() * 4}}};
    data.append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  }
  const std::string h = header.dump();
  const std::uint64_t len = h.size();
  std::ofstream out(dst / "model.safetensors", std::ios::binary);
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << h << data;
  return static_cast<bool>(out);
}

}  // namespace tandem::model::bench
