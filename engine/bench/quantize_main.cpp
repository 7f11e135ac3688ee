// tandem-quantize SRC DST fp8|nvfp4: a copy of the checkpoint SRC with its linear projections
// quantised as fp8 (128x128 block scales) or ModelOpt NVFP4 checkpoints store them
// (quantized_checkpoint.hpp); the benchmark's quantised rows are made with it (deploy/gpu-quant-bench.sh).
#include <chrono>
#include <cstdio>
#include <string>

#include "quantized_checkpoint.hpp"

int main(int argc, char** argv) {
  using namespace tandem::model::bench;
  const std::string as = argc == 4 ? argv[3] : "";
  if (as != "fp8" && as != "nvfp4") {
    std::fprintf(stderr, "usage: tandem-quantize SRC DST fp8|nvfp4\n");
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  int count = 0;
  const std::string e = write_quantized(argv[1], argv[2], as == "fp8" ? QuantizeAs::fp8_block : QuantizeAs::nvfp4, &count);
  if (!e.empty()) {
    std::fprintf(stderr, "tandem-quantize: %s\n", e.c_str());
    return 1;
  }
  std::printf("tandem-quantize: %s -> %s, %d projections in %s, %.1f s\n", argv[1], argv[2], count, as.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}
