#include "tandem/model/safetensors.hpp"

#include "tandem/kernels/quant_weights.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

namespace tandem::model {

using nlohmann::json;

float bf16_to_f32(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;  // bf16 is the top half of an fp32
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

float f16_to_f32(uint16_t bits) {
  const int sign = (bits >> 15) & 1, exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  float magnitude;
  if (exponent == 0) magnitude = std::ldexp(static_cast<float>(mantissa), -24);  // zero, subnormal
  else if (exponent == 31) magnitude = mantissa ? NAN : INFINITY;
  else magnitude = std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
  return sign ? -magnitude : magnitude;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

static size_t dtype_size(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype.rfind("F8_", 0) == 0) return 1;
  return 0;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, size_);
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string where = path.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return error(where + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return error(where + ": cannot stat: " + std::strerror(errno));
  }
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ < 8) {
    ::close(fd);
    return error(where + ": truncated: " + std::to_string(f->size_) + " bytes, too short for a safetensors header");
  }
  f->map_ = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file
  if (f->map_ == MAP_FAILED) {
    f->map_ = nullptr;
    return error(where + ": mmap failed: " + std::strerror(errno));
  }
  const auto* base = static_cast<const std::byte*>(f->map_);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | std::to_integer<uint64_t>(base[i]);
  if (header_len > f->size_ - 8)
    return error(where + ": truncated: header says " + std::to_string(header_len) + " bytes of JSON but the file has " +
                 std::to_string(f->size_ - 8) + " after the length");
  const char* text = reinterpret_cast<const char*>(base + 8);
  json header = json::parse(text, text + header_len, nullptr, false);
  if (header.is_discarded() || !header.is_object()) return error(where + ": header is not a JSON object");
  const size_t data_start = 8 + header_len;
  const size_t data_size = f->size_ - data_start;
  for (const auto& [name, desc] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string at = where + ": tensor '" + name + "'";
    if (!desc.is_object() || !desc.contains("dtype") || !desc.contains("shape") || !desc.contains("data_offsets") ||
        !desc["dtype"].is_string() || !desc["shape"].is_array() || !desc["data_offsets"].is_array() ||
        desc["data_offsets"].size() != 2)
      return error(at + ": malformed header entry " + desc.dump());
    TensorInfo t;
    t.name = name;
    t.file = where;
    t.dtype = desc["dtype"].get<std::string>();
    // Readers size their copies from the shape, so it must describe exactly the bytes checked
    // below: every dimension and the element count fit in int64 (no wrap-around to a small size).
    uint64_t elements = 1;
    for (const auto& d : desc["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) ||
          __builtin_mul_overflow(elements, d.get<uint64_t>(), &elements) || elements > static_cast<uint64_t>(INT64_MAX))
        return error(at + ": malformed shape " + desc["shape"].dump());
      t.shape.push_back(d.get<int64_t>());
    }
    const auto& off = desc["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned() || off[1].get<uint64_t>() < off[0].get<uint64_t>())
      return error(at + ": malformed data_offsets " + off.dump());
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (end > data_size)
      return error(at + " needs bytes [" + std::to_string(begin) + ", " + std::to_string(end) +
                   ") of the data section but the file holds only " + std::to_string(data_size) + " (truncated file?)");
    const size_t item = dtype_size(t.dtype);
    uint64_t bytes = 0;
    if (item && (__builtin_mul_overflow(elements, item, &bytes) || bytes != end - begin))
      return error(at + ": " + std::to_string(end - begin) + " bytes do not hold " + t.dtype + " " + shape_str(t.shape));
    t.data = base + data_start + begin;
    t.nbytes = static_cast<size_t>(end - begin);
    f->tensors_.emplace(name, std::move(t));
  }
  return f;
}

Result<Checkpoint> Checkpoint::open(const std::filesystem::path& dir) {
  Checkpoint c;
  c.dir_ = dir;
  const auto index_path = dir / "model.safetensors.index.json";
  const auto single_path = dir / "model.safetensors";
  if (std::filesystem::exists(index_path)) {
    std::ifstream in(index_path);
    json index = json::parse(in, nullptr, false);
    if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      return error(index_path.string() + ": not a safetensors index (no weight_map object)");
    std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
    for (const auto& [name, file] : index["weight_map"].items()) {
      if (!file.is_string()) return error(index_path.string() + ": weight_map['" + name + "'] is not a file name");
      const std::string fname = file.get<std::string>();
      if (fname.find('/') != std::string::npos || fname == "..")
        return error(index_path.string() + ": shard name '" + fname + "' must be a plain file name");
      auto& shard = shards[fname];
      if (!shard) {
        auto opened = SafetensorsFile::open(dir / fname);
        if (!opened) return opened.error();
        shard = std::move(opened.value());
        c.files_.push_back(shard);
      }
      auto it = shard->tensors().find(name);
      if (it == shard->tensors().end())
        return error(index_path.string() + ": lists tensor '" + name + "' in " + fname + ", which does not hold it");
      c.index_[name] = &it->second;
    }
  } else if (std::filesystem::exists(single_path)) {
    auto opened = SafetensorsFile::open(single_path);
    if (!opened) return opened.error();
    std::shared_ptr<SafetensorsFile> file = std::move(opened.value());
    for (const auto& [name, info] : file->tensors()) c.index_[name] = &info;
    c.files_.push_back(std::move(file));
  } else {
    return error(dir.string() + ": no model.safetensors or model.safetensors.index.json");
  }
  return c;
}

const TensorInfo* Checkpoint::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, info] : index_) out.push_back(name);
  return out;
}

Result<std::vector<float>> Checkpoint::read(const std::string& name, const std::vector<int64_t>& shape) const {
  const TensorInfo* t = find(name);
  if (!t) return error(dir_.string() + ": missing tensor '" + name + "' (expected shape " + shape_str(shape) + ")");
  if (t->dtype == "F8_E4M3" && has(name + "_scale_inv")) return read_fp8_block(*t, shape);
  if (t->dtype == "U8" && has(name + "_scale") && has(name + "_scale_2")) return read_nvfp4(*t, shape);
  if (t->shape != shape)
    return error(t->file + ": tensor '" + name + "' has shape " + shape_str(t->shape) + ", expected " + shape_str(shape));
  size_t n = 1;
  for (auto d : shape) n *= static_cast<size_t>(d);
  std::vector<float> out(n);
  // The data section need not be aligned for floats: copy element by element.
  if (t->dtype == "F32") {
    if (n) std::memcpy(out.data(), t->data, n * sizeof(float));  // an empty vector's data() may be null
  } else if (t->dtype == "BF16" || t->dtype == "F16") {
    const bool bf = t->dtype == "BF16";
    for (size_t i = 0; i < n; ++i) {
      uint16_t bits;
      std::memcpy(&bits, t->data + 2 * i, 2);
      out[i] = bf ? bf16_to_f32(bits) : f16_to_f32(bits);
    }
  } else {
    return error(t->file + ": tensor '" + name + "' has dtype " + t->dtype + "; tandem's CPU path reads BF16, F16 and F32");
  }
  return out;
}

// fp8 with 128x128 block scales: `name` is float8_e4m3 [out][in], `name`_scale_inv is
// [ceil(out/128)][ceil(in/128)] (fp32 or bf16).
Result<std::vector<float>> Checkpoint::read_fp8_block(const TensorInfo& t, const std::vector<int64_t>& shape) const {
  if (shape.size() != 2 || t.shape != shape)
    return error(t.file + ": fp8 tensor '" + t.name + "' has shape " + shape_str(t.shape) + ", expected " + shape_str(shape) +
                 " (block-scaled fp8 is read for 2-D weights)");
  const int64_t out = shape[0], in = shape[1];
  const int64_t b = kernels::kFp8Block;
  auto scale = read(t.name + "_scale_inv", {(out + b - 1) / b, (in + b - 1) / b});
  if (!scale) return scale.error();
  std::vector<float> w(static_cast<size_t>(out * in));
  kernels::dequant_fp8_block_cpu(reinterpret_cast<const uint8_t*>(t.data), scale->data(), static_cast<int>(out),
                                 static_cast<int>(in), w.data());
  return w;
}

// ModelOpt NVFP4: `name` is uint8 [out][in/2] (two e2m1 per byte), `name`_scale float8_e4m3
// [out][in/16], `name`_scale_2 one fp32.
Result<std::vector<float>> Checkpoint::read_nvfp4(const TensorInfo& t, const std::vector<int64_t>& shape) const {
  if (shape.size() != 2 || shape[1] % kernels::kNvfp4Group != 0 || t.shape != std::vector<int64_t>{shape[0], shape[1] / 2})
    return error(t.file + ": NVFP4 tensor '" + t.name + "' has packed shape " + shape_str(t.shape) + ", expected " +
                 shape_str({shape.size() == 2 ? shape[0] : 0, shape.size() == 2 ? shape[1] / 2 : 0}) + " for weights " +
                 shape_str(shape) + " (2-D, inputs a multiple of 16)");
  const int64_t out = shape[0], in = shape[1];
  const TensorInfo* s = find(t.name + "_scale");
  if (s->dtype != "F8_E4M3" || s->shape != std::vector<int64_t>{out, in / kernels::kNvfp4Group})
    return error(s->file + ": NVFP4 scales '" + s->name + "' are " + s->dtype + " " + shape_str(s->shape) +
                 ", expected F8_E4M3 " + shape_str({out, in / kernels::kNvfp4Group}));
  const TensorInfo* g = find(t.name + "_scale_2");
  if (g->dtype != "F32" || g->nbytes != 4)
    return error(g->file + ": NVFP4 global scale '" + g->name + "' must be one F32 (is " + g->dtype + " " +
                 shape_str(g->shape) + ")");
  float global = 0;
  std::memcpy(&global, g->data, 4);
  std::vector<float> w(static_cast<size_t>(out * in));
  kernels::dequant_nvfp4_cpu(reinterpret_cast<const uint8_t*>(t.data), reinterpret_cast<const uint8_t*>(s->data), global,
                             static_cast<int>(out), static_cast<int>(in), w.data());
  return w;
}

}  // namespace tandem::model
