// tandem-random-checkpoint DIR fp8|nvfp4 [--model glm4_moe_lite|glm5_next] [--layers N] [--experts E]
//                          [--seed S] [--threads T]:
// GLM-4.7-Flash's shape (transformers' glm4_moe_lite defaults; fewer layers with --layers) or
// glm5_next_text's defaults (--model glm5_next; fewer layers and routed experts with --layers and
// --experts: 8 and 18 give the 5.2 B benchmark model) with random weights, written straight as an
// fp8 block-scaled or NVFP4 checkpoint (random_checkpoint.hpp), for engine/bench/gpu-real-shape.sh
// and gpu-glm5-quant.sh. Prints one line: bytes, projections quantised, seconds, GB/s.
#include <cstdio>
#include <string>
#include <thread>

#include "random_checkpoint.hpp"

int main(int argc, char** argv) {
  using namespace tandem::model::bench;
  const std::string as = argc >= 3 ? argv[2] : "";
  int layers = 0, experts = 0;  // 0: the model's default
  std::string model = "glm4_moe_lite";
  unsigned long long seed = 1;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  bool ok = as == "fp8" || as == "nvfp4";
  for (int i = 3; ok && i < argc; i += 2) {
    const std::string a = argv[i];
    if (i + 1 >= argc) ok = false;
    else if (a == "--layers") layers = std::atoi(argv[i + 1]);
    else if (a == "--experts") experts = std::atoi(argv[i + 1]);
    else if (a == "--model") model = argv[i + 1];
    else if (a == "--seed") seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--threads") threads = static_cast<unsigned>(std::atoi(argv[i + 1]));
    else ok = false;
  }
  const bool glm5 = model == "glm5_next";
  if (layers == 0) layers = glm5 ? 45 : 47;
  if (experts == 0) experts = glm5 ? 288 : 64;
  if (!ok || layers < 1 || layers > (glm5 ? 45 : 47) || experts < 8 || (!glm5 && experts != 64) || (!glm5 && model != "glm4_moe_lite")) {
    std::fprintf(stderr,
                 "usage: tandem-random-checkpoint DIR fp8|nvfp4 [--model glm4_moe_lite|glm5_next] [--layers N (1..47, glm5_next 1..45)] "
                 "[--experts E (glm5_next, >= 8)] [--seed S] [--threads T]\n");
    return 2;
  }
  RandomCheckpointStats st;
  const std::string e = write_random_checkpoint(argv[1], glm5 ? glm5_next_config(layers, experts) : glm47_flash_config(layers),
                                                as == "fp8" ? QuantizeAs::fp8_block : QuantizeAs::nvfp4, seed, threads, &st);
  if (!e.empty()) {
    std::fprintf(stderr, "tandem-random-checkpoint: %s\n", e.c_str());
    return 1;
  }
  std::printf("tandem-random-checkpoint: %s, %s %s, %d layers: %.2f GB, %d projections quantised, %.1f s (%.2f GB/s, %u threads)\n",
              argv[1], model.c_str(), as.c_str(), layers, static_cast<double>(st.bytes) / 1e9, st.quantised, st.seconds,
              static_cast<double>(st.bytes) / 1e9 / st.seconds, threads);
  return 0;
}
