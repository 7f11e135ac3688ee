// tandem-bf16-weight-effect FIXTURE_DIR WORK_DIR: how far rounding only the weights to bf16 moves the
// fp32 CPU reference's logits (relative error per position, as cuda_model_check measures it), on
// seeded prompts. It writes WORK_DIR as a copy of the checkpoint with every tensor rounded to bf16
// (stored as F32) and runs both. This is the floor under the CUDA model's error against fp32
// goldens: its weights are bf16 before any bf16 arithmetic happens.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "tandem/kernels/dtype.hpp"
#include "tandem/model/model.hpp"
#include "tandem/model/safetensors.hpp"

using namespace tandem::model;
namespace fs = std::filesystem;

namespace {

std::vector<float> as_f32(const TensorInfo& t) {
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

bool write_rounded(const fs::path& src, const fs::path& dst) {
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

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: tandem-bf16-weight-effect FIXTURE_DIR WORK_DIR\n");
    return 2;
  }
  if (!write_rounded(argv[1], argv[2])) return 1;
  auto exact = load_model(argv[1]), rounded = load_model(argv[2]);
  if (!exact || !rounded) return 1;
  const int V = exact.value()->vocab_size();
  std::mt19937 rng(7);
  double worst = 0;
  for (int len : {6, 11, 4, 16, 16}) {
    std::vector<int32_t> ids, pos;
    std::vector<int> rows;
    for (int i = 0; i < len; ++i)
      ids.push_back(static_cast<int32_t>(rng() % static_cast<unsigned>(V))), pos.push_back(i), rows.push_back(i);
    KvCache ca = exact.value()->new_cache(), cb = rounded.value()->new_cache();
    auto la = exact.value()->forward(ids, pos, ca, rows), lb = rounded.value()->forward(ids, pos, cb, rows);
    if (!la || !lb) return 1;
    for (int t = 0; t < len; ++t) {
      double diff = 0, scale = 0;
      for (int i = 0; i < V; ++i) {
        const size_t k = static_cast<size_t>(t) * static_cast<size_t>(V) + static_cast<size_t>(i);
        diff = std::max(diff, static_cast<double>(std::fabs(la.value()[k] - lb.value()[k])));
        scale = std::max(scale, static_cast<double>(std::fabs(la.value()[k])));
      }
      worst = std::max(worst, diff / scale);
      std::printf("%.4f ", diff / scale);
    }
    std::printf("\n");
  }
  std::printf("worst relative error from bf16 weights alone: %.4f\n", worst);
  return 0;
}
