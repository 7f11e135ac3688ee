// Helpers for the model tests: fixture paths, fp32 tensors of a safetensors file, a small
// safetensors writer, and temp copies of fixture directories to break on purpose.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem::model {
class Model;
}

namespace tandem::model::test {

std::filesystem::path fixture_dir(const std::string& name);

// Every tensor of one safetensors file as fp32 (any float dtype).
std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> read_all(const std::filesystem::path& file);

struct RawTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
void write_safetensors(const std::filesystem::path& file, const std::map<std::string, RawTensor>& tensors);
RawTensor f32_tensor(const std::vector<int64_t>& shape, const std::vector<float>& values);

// Rewrites the JSON header of a safetensors file in place, keeping its data section.
void edit_header(const std::filesystem::path& file, const std::function<void(nlohmann::json&)>& edit);

nlohmann::json read_json(const std::filesystem::path& file);
void write_json(const std::filesystem::path& file, const nlohmann::json& doc);

// A fresh copy of a fixture directory under the temp dir, removed when this goes out of scope.
class TempCopy {
 public:
  explicit TempCopy(const std::string& fixture);
  ~TempCopy();
  TempCopy(const TempCopy&) = delete;
  TempCopy& operator=(const TempCopy&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Logits of the first golden sequence's last position, computed by `m` / as the fixture stores them
// (for "loads and still computes the same").
std::vector<float> last_logits(const Model& m, const std::string& fixture);
std::vector<float> golden_last_logits(const std::string& fixture);

// max |a - b| / max |b| over one row: the per-position relative error the golden tests bound.
double relative_error(const float* a, const float* b, int n);

}  // namespace tandem::model::test
