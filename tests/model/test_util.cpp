#include "test_util.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include <unistd.h>

#include "tandem/model/model.hpp"
#include "tandem/model/safetensors.hpp"

#include <doctest/doctest.h>

namespace tandem::model::test {

namespace fs = std::filesystem;

fs::path fixture_dir(const std::string& name) { return fs::path(TANDEM_SOURCE_DIR) / "tests/model/fixtures" / name; }

static std::vector<uint8_t> slurp(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + file.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

static void spit(const fs::path& file, const std::vector<uint8_t>& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> read_all(const fs::path& file) {
  auto f = SafetensorsFile::open(file);
  if (!f) throw std::runtime_error(f.error().message);
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> out;
  for (const auto& [name, t] : f.value()->tensors()) {
    size_t n = 1;
    for (auto d : t.shape) n *= static_cast<size_t>(d);
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) {
      if (t.dtype == "F32") {
        std::memcpy(&v[i], t.data + 4 * i, 4);
      } else {
        uint16_t bits;
        std::memcpy(&bits, t.data + 2 * i, 2);
        v[i] = t.dtype == "BF16" ? bf16_to_f32(bits) : f16_to_f32(bits);
      }
    }
    out[name] = {t.shape, std::move(v)};
  }
  return out;
}

RawTensor f32_tensor(const std::vector<int64_t>& shape, const std::vector<float>& values) {
  RawTensor t{"F32", shape, std::vector<uint8_t>(values.size() * 4)};
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

static std::vector<uint8_t> with_header(const nlohmann::json& header, const uint8_t* data, size_t n) {
  std::string text = header.dump();
  std::vector<uint8_t> out(8);
  uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(len >> (8 * i));
  out.insert(out.end(), text.begin(), text.end());
  out.insert(out.end(), data, data + n);
  return out;
}

void write_safetensors(const fs::path& file, const std::map<std::string, RawTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::vector<uint8_t> data;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data.insert(data.end(), t.bytes.begin(), t.bytes.end());
  }
  header["__metadata__"] = {{"format", "pt"}};
  spit(file, with_header(header, data.data(), data.size()));
}

void edit_header(const fs::path& file, const std::function<void(nlohmann::json&)>& edit) {
  const auto bytes = slurp(file);
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | bytes[static_cast<size_t>(i)];
  auto header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(len));
  edit(header);
  const size_t data_at = 8 + static_cast<size_t>(len);
  spit(file, with_header(header, bytes.data() + data_at, bytes.size() - data_at));
}

nlohmann::json read_json(const fs::path& file) {
  std::ifstream in(file);
  return nlohmann::json::parse(in);
}

void write_json(const fs::path& file, const nlohmann::json& doc) {
  std::ofstream out(file, std::ios::trunc);
  out << doc.dump(2);
}

TempCopy::TempCopy(const std::string& fixture) {
  static std::atomic<int> counter{0};
  path_ = fs::temp_directory_path() /
          ("tandem-model-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + "-" + fixture);
  fs::remove_all(path_);
  fs::copy(fixture_dir(fixture), path_, fs::copy_options::recursive);
  for (const auto& e : fs::directory_iterator(path_))
    fs::permissions(e.path(), fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
}

TempCopy::~TempCopy() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

double relative_error(const float* a, const float* b, int n) {
  double diff = 0, scale = 0;
  for (int i = 0; i < n; ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

// Logits of the first golden sequence's last position, for "loads and still computes the same".
std::vector<float> last_logits(const Model& m, const std::string& fixture) {
  const auto doc = read_json(fixture_dir(fixture) / "golden.json");
  const auto ids = doc["sequences"][0]["input_ids"].get<std::vector<int32_t>>();
  std::vector<int32_t> pos(ids.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
  KvCache cache = m.new_cache();
  const int last = static_cast<int>(ids.size()) - 1;
  auto l = m.forward(ids, pos, cache, std::vector<int>{last});
  REQUIRE(l.ok());
  return l.value();
}

std::vector<float> golden_last_logits(const std::string& fixture) {
  const auto doc = read_json(fixture_dir(fixture) / "golden.json");
  const size_t T = doc["sequences"][0]["input_ids"].size();
  const auto& [shape, v] = read_all(fixture_dir(fixture) / "golden.safetensors").at("seq0.logits");
  const size_t V = static_cast<size_t>(shape[1]);
  return {v.begin() + static_cast<long>((T - 1) * V), v.begin() + static_cast<long>(T * V)};
}

}  // namespace tandem::model::test
