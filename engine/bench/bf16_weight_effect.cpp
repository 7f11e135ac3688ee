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
#include "bf16_checkpoint.hpp"

using namespace tandem::model;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: tandem-bf16-weight-effect FIXTURE_DIR WORK_DIR\n");
    return 2;
  }
  if (!bench::write_rounded(argv[1], argv[2])) return 1;
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
