// A copy of a checkpoint with its linear projections quantised as Hugging Face fp8 checkpoints
// (quant_method "fp8", weight_block_size [128, 128]) or ModelOpt NVFP4 checkpoints store them
// (kernels/quant_weights.hpp): every 2-D `*.weight` but the embedding, the LM head and the MoE
// routers (`mlp.gate.weight`), which those checkpoints keep in bf16; NVFP4 also leaves projections
// whose inputs are not a multiple of 16 (its group) unquantised. Other tensors are copied as they
// are (experts fused into 3-D tensors are split into one tensor per expert first). One
// model.safetensors, config.json with its quantization_config. Tensors are quantised on
// every core (a 2 B model takes seconds). For the fixture checks and the benchmark's quantised rows
// (cuda_model_check, tandem-quantize); the CPU reader's own format test writes its bytes by hand.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/kernels/quant_weights.hpp"
#include "tandem/model/safetensors.hpp"

namespace tandem::model::bench {

enum class QuantizeAs { fp8_block, nvfp4 };

inline bool quantized_projection(const std::string& name, const std::vector<int64_t>& shape, QuantizeAs as) {
  auto ends = [&](const std::string& tail) {
    return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (shape.size() != 2 || !ends(".weight") || ends("embed_tokens.weight") || ends("lm_head.weight") || ends(".mlp.gate.weight"))
    return false;
  return as == QuantizeAs::fp8_block || shape[1] % kernels::kNvfp4Group == 0;
}

// One tensor as it is written: its safetensors dtype and shape, and its bytes (empty while only
// the layout is wanted).
struct StoredTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<std::uint8_t> bytes;
};

inline std::size_t dtype_size(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  return 1;
}

inline std::size_t stored_bytes(const StoredTensor& t) {
  std::size_t n = dtype_size(t.dtype);
  for (int64_t d : t.shape) n *= static_cast<std::size_t>(d);
  return n;
}

// The tensors a projection [out][in] is stored as in format `as` (the weight and its scales), bytes
// left empty; one F32 tensor where the format does not quantise it (quantized_projection).
inline std::vector<StoredTensor> projection_layout(const std::string& name, int64_t out, int64_t in, QuantizeAs as) {
  if (!quantized_projection(name, {out, in}, as)) return {{name, "F32", {out, in}, {}}};
  if (as == QuantizeAs::fp8_block) {
    const int64_t br = (out + kernels::kFp8Block - 1) / kernels::kFp8Block, bc = (in + kernels::kFp8Block - 1) / kernels::kFp8Block;
    return {{name, "F8_E4M3", {out, in}, {}}, {name + "_scale_inv", "F32", {br, bc}, {}}};
  }
  return {{name, "U8", {out, in / 2}, {}},
          {name + "_scale", "F8_E4M3", {out, in / kernels::kNvfp4Group}, {}},
          {name + "_scale_2", "F32", {}, {}}};
}

// Appends projection_layout(...) with its bytes: w ([out][in], fp32) quantised, or copied as F32.
inline void quantise_projection(std::vector<StoredTensor>& to, const std::string& name, int out, int in, const float* w,
                                QuantizeAs as) {
  std::vector<StoredTensor> parts = projection_layout(name, out, in, as);
  for (StoredTensor& p : parts) p.bytes.resize(stored_bytes(p));
  const std::size_t n = static_cast<std::size_t>(out) * static_cast<std::size_t>(in);
  if (parts.size() == 1) {
    std::memcpy(parts[0].bytes.data(), w, n * 4);
  } else if (as == QuantizeAs::fp8_block) {
    kernels::quantize_fp8_block_cpu(w, out, in, parts[0].bytes.data(), reinterpret_cast<float*>(parts[1].bytes.data()));
  } else {
    float g = 0;
    kernels::quantize_nvfp4_cpu(w, out, in, parts[0].bytes.data(), parts[1].bytes.data(), &g);
    std::memcpy(parts[2].bytes.data(), &g, 4);
  }
  for (StoredTensor& p : parts) to.push_back(std::move(p));
}

// config.json's quantization_config for `as`, as those checkpoints write it.
inline nlohmann::json quantization_config(QuantizeAs as) {
  return as == QuantizeAs::fp8_block
             ? nlohmann::json{{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}}
             : nlohmann::json{{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}, {"group_size", 16}};
}

// The safetensors header of `tensors` stored back to back in this order; `offsets` gets where
// each one's data starts in the data section. Prefixed by its 8-byte length, as the file begins.
inline std::string safetensors_prefix(const std::vector<const StoredTensor*>& tensors, std::vector<std::size_t>* offsets = nullptr) {
  nlohmann::json header = nlohmann::json::object();
  std::size_t at = 0;
  for (const StoredTensor* t : tensors) {
    if (offsets) offsets->push_back(at);
    const std::size_t n = stored_bytes(*t);
    header[t->name] = {{"dtype", t->dtype}, {"shape", t->shape}, {"data_offsets", {at, at + n}}};
    at += n;
  }
  const std::string h = header.dump();
  const std::uint64_t len = h.size();
  return std::string(reinterpret_cast<const char*>(&len), 8) + h;
}

// Writes dst (created) from src; "" or what failed. `count` gets how many tensors were quantised.
// long-function: a test-data writer (benchmarks and GPU checks only): read, quantise each 2-D
// projection, write the safetensors header and data, in one pass.
inline std::string write_quantized(const std::filesystem::path& src, const std::filesystem::path& dst, QuantizeAs as,
                                   int* count = nullptr) {
  namespace fs = std::filesystem;
  auto ck = Checkpoint::open(src);
  if (!ck) return ck.error().message;
  const std::vector<std::string> names = ck->names();
  std::vector<std::vector<StoredTensor>> outs(names.size());
  std::vector<std::string> errors(names.size());
  std::atomic<std::size_t> next{0};
  auto bytes_of = [](const void* p, std::size_t n) {
    std::vector<std::uint8_t> v(n);
    std::memcpy(v.data(), p, n);
    return v;
  };
  auto quantise = [&](std::vector<StoredTensor>& to, const std::string& name, int out, int in, const float* w) {
    quantise_projection(to, name, out, in, w, as);
  };
  auto ends = [](const std::string& name, const std::string& tail) {
    return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  auto work = [&] {
    for (std::size_t i = next++; i < names.size(); i = next++) {
      const TensorInfo* t = ck->find(names[i]);
      // Experts fused into 3-D tensors (transformers' in-memory layout) are written one tensor per
      // expert, as the released checkpoints (and their quantised versions) store them.
      const bool fused = t->shape.size() == 3 && (ends(t->name, "experts.gate_up_proj") || ends(t->name, "experts.down_proj"));
      if (!fused && !quantized_projection(t->name, t->shape, as)) {
        outs[i].push_back({t->name, t->dtype, t->shape, bytes_of(t->data, t->nbytes)});
        continue;
      }
      auto w = ck->read(t->name, t->shape);
      if (!w) {
        errors[i] = w.error().message;
        continue;
      }
      if (!fused) {
        quantise(outs[i], t->name, static_cast<int>(t->shape[0]), static_cast<int>(t->shape[1]), w->data());
        continue;
      }
      const std::string base = t->name.substr(0, t->name.rfind('.') + 1);  // "...experts."
      const int E = static_cast<int>(t->shape[0]), rows = static_cast<int>(t->shape[1]), in = static_cast<int>(t->shape[2]);
      const std::size_t per = static_cast<std::size_t>(rows) * static_cast<std::size_t>(in);
      for (int e = 0; e < E; ++e) {
        const float* we = w->data() + static_cast<std::size_t>(e) * per;
        const std::string ep = base + std::to_string(e) + ".";
        if (ends(t->name, "down_proj")) {
          quantise(outs[i], ep + "down_proj.weight", rows, in, we);
        } else {
          quantise(outs[i], ep + "gate_proj.weight", rows / 2, in, we);
          quantise(outs[i], ep + "up_proj.weight", rows / 2, in, we + per / 2);
        }
      }
    }
  };
  std::vector<std::thread> pool;
  const unsigned n = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  for (unsigned i = 0; i < n; ++i) pool.emplace_back(work);
  for (auto& th : pool) th.join();
  for (const auto& e : errors)
    if (!e.empty()) return e;

  fs::create_directories(dst);
  std::vector<const StoredTensor*> all;
  int quantised = 0;
  for (const auto& group : outs)
    for (const StoredTensor& o : group) {
      quantised += ends(o.name, "_scale_inv") || ends(o.name, "_scale_2");  // one per quantised tensor
      all.push_back(&o);
    }
  if (count) *count = quantised;
  std::ofstream file(dst / "model.safetensors", std::ios::binary);
  file << safetensors_prefix(all);
  for (const StoredTensor* o : all) file.write(reinterpret_cast<const char*>(o->bytes.data()), static_cast<std::streamsize>(o->bytes.size()));
  if (!file) return "writing " + (dst / "model.safetensors").string();
  file.close();

  std::ifstream in(src / "config.json");
  if (!in) return "no " + (src / "config.json").string();
  auto config = nlohmann::json::parse(in, nullptr, false);
  if (config.is_discarded()) return "cannot parse " + (src / "config.json").string();
  config["quantization_config"] = quantization_config(as);
  std::ofstream(dst / "config.json") << config.dump(1) << "\n";
  for (const char* f : {"generation_config.json", "tokenizer.json", "tokenizer_config.json"})
    if (fs::exists(src / f)) fs::copy_file(src / f, dst / f, fs::copy_options::overwrite_existing);
  return {};
}

}  // namespace tandem::model::bench
