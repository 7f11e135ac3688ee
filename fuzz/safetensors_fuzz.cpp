// Safetensors checkpoints: the input is written as <tmp>/model.safetensors and opened as tandem-serve
// opens a model, then every tensor is read as the loader would: with its own shape (and, for the
// quantised layouts, the logical shape the scales imply). The header is untrusted: its offsets,
// shapes and dtypes must never make a read leave the file.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tandem/model/safetensors.hpp"

namespace {

const std::filesystem::path& dir() {
  static const std::filesystem::path d = [] {
    auto p = std::filesystem::temp_directory_path() / ("tandem-fuzz-safetensors-" + std::to_string(::getpid()));
    std::filesystem::create_directories(p);
    std::atexit([] { std::filesystem::remove_all(dir()); });
    return p;
  }();
  return d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  {
    std::ofstream out(dir() / "model.safetensors", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) {
      std::perror("writing the fuzz input");
      std::abort();
    }
  }
  auto ckpt = tandem::model::Checkpoint::open(dir());
  if (!ckpt) return 0;
  for (const auto& name : ckpt.value().names()) {
    const auto* t = ckpt.value().find(name);
    (void)ckpt.value().read(name, t->shape);
    // NVFP4 packs two values a byte: the logical [out][in] is twice as wide.
    if (t->shape.size() == 2 && t->shape[1] >= 0 && t->shape[1] <= INT64_MAX / 2) {
      (void)ckpt.value().read(name, {t->shape[0], t->shape[1] * 2});
    }
  }
  return 0;
}
