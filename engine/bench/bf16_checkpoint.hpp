// A copy of a checkpoint with every tensor the CUDA model stores in bf16 rounded to bf16 (stored as
// F32, so the fp32 CPU reference loads it as it is): the reference a bf16-weight model can be held
// to. The MoE routers (mlp.gate.weight, e_score_correction_bias) stay as they are: the CUDA model
// keeps them in fp32 (as transformers and vLLM run the router), and a reference with other router
// weights than the model's moves near-tied routing choices by itself. Quantised tensors (fp8
// block-scaled, NVFP4) are written dequantised and rounded to bf16, what the CUDA model computes
// with whether it keeps them quantised (kernels/quant_gemv.hpp) or dequantises them at loading;
// their scale tensors are dropped. Used by
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

// The logical [out][in] of a quantised weight as Checkpoint::read detects it; empty when `t` is not one.
inline std::vector<int64_t> quantised_shape(const Checkpoint& ck, const TensorInfo& t) {
  if (t.dtype == "F8_E4M3" && ck.has(t.name + "_scale_inv")) return t.shape;
  if (t.dtype == "U8" && ck.has(t.name + "_scale") && ck.has(t.name + "_scale_2") && t.shape.size() == 2)
    return {t.shape[0], 2 * t.shape[1]};
  return {};
}

// Whether `name` is the scale of a quantised weight beside it.
inline bool quant_scale(const Checkpoint& ck, const std::string& name) {
  for (const char* tail : {"_scale_inv", "_scale_2", "_scale"}) {
    const std::string t = tail;
    if (name.size() > t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0) {
      const TensorInfo* base = ck.find(name.substr(0, name.size() - t.size()));
      if (base && !quantised_shape(ck, *base).empty()) return true;
    }
  }
  return false;
}

// round false: the dequantised values as they are (the CPU reader's own view of a quantised checkpoint).
inline bool write_rounded(const fs::path& src, const fs::path& dst, bool round = true) {
  fs::create_directories(dst);
  for (const char* f : {"config.json", "generation_config.json"})
    if (fs::exists(src / f)) fs::copy_file(src / f, dst / f, fs::copy_options::overwrite_existing);
  auto ck = Checkpoint::open(src);
  if (!ck) return false;
  if (fs::exists(dst / "config.json")) {  // the copy's weights are plain F32
    std::ifstream in(dst / "config.json");
    auto config = nlohmann::json::parse(in, nullptr, false);
    in.close();
    if (config.is_object() && config.contains("quantization_config")) {
      config.erase("quantization_config");
      std::ofstream(dst / "config.json") << config.dump(1) << "\n";
    }
  }
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& name : ck->names()) {
    const TensorInfo* t = ck->find(name);
    if (quant_scale(*ck, name)) continue;
    const std::vector<int64_t> qshape = quantised_shape(*ck, *t);
    std::vector<float> v;
    if (qshape.empty()) {
      v = as_f32(*t);
    } else {
      auto r = ck->read(name, qshape);
      if (!r) return false;
      v = std::move(r.value());
    }
    if (round && !kept_in_fp32(name))
      for (auto& x : v) x = tandem::kernels::round_bf16(x);
    const std::vector<int64_t>& shape = qshape.empty() ? t->shape : qshape;
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {data.size(), data.size() + v.size() * 4}}};
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
