// gpu_check: runs every CUDA kernel against its CPU reference and prints one table.
// Exit 0 when every row passes, 1 when one fails, 77 (skipped) without a CUDA device.
// Arguments, if any, name the groups to run (e.g. `gpu_check fused glue`); none: all of them.
// `gpu_check --list` prints the group names, one a line (scripts run each group in a process of
// its own when a kernel fault has left the device unusable for the groups after it). A name that
// is no group is refused (exit 2): a misspelt group would otherwise run nothing and pass.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "gpu_check.hpp"
#include "tandem/kernels/rmsnorm.hpp"

namespace {

struct Group {
  const char* name;
  void (*run)(std::vector<gpu_check::Row>&);
};

std::vector<Group> groups() {
  using namespace gpu_check;
  return {Group{"elementwise", check_elementwise}, Group{"sampling", check_sampling}, Group{"moe", check_moe},
          Group{"attention", check_attention}, Group{"gemm", check_gemm}, Group{"quant", check_quant},
          Group{"quant_mma", check_quant_mma}, Group{"quant_mma_small", check_quant_mma_small},
          Group{"decode", check_decode}, Group{"glue", check_glue}, Group{"fused", check_fused}, Group{"glm5_next", check_glm5_next},
          Group{"kda_chunk", check_kda_chunk}, Group{"kda_chunk_few", check_kda_chunk_few},
          Group{"rows_mma", check_rows_mma}, Group{"moe_grouped", check_moe_grouped},
          Group{"moe_grouped_small", check_moe_grouped_small}, Group{"quant_grouped", check_quant_grouped},
          Group{"quant_grouped_small", check_quant_grouped_small},
          Group{"mla_split", check_mla_split}, Group{"mla_flash", check_mla_flash},
          Group{"mla_flash_small", check_mla_flash_small}, Group{"mla_mha", check_mla_mha}, Group{"moe_f32", check_moe_f32}};
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpu_check;
  if (argc == 2 && std::strcmp(argv[1], "--list") == 0) {
    for (const Group& g : groups()) std::puts(g.name);
    return 0;
  }
  for (int i = 1; i < argc; ++i) {
    bool known = false;
    for (const Group& g : groups()) known = known || std::strcmp(argv[i], g.name) == 0;
    if (!known) {
      std::fprintf(stderr, "gpu_check: no group named '%s' (gpu_check --list names them)\n", argv[i]);
      return 2;
    }
  }
  if (!tandem::kernels::cuda_device_present()) {
    std::puts("SKIP: no CUDA device on this machine (GPU checks run on the GPU machine: deploy/gpu-check.sh)");
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  std::printf("rel. error = max |gpu - cpu| / max(|cpu|, 1e-2 * max|cpu|); limits: fp32 1e-4, bf16 out 1e-2;\n"
              "mismatches = entries that must be identical (ids, masks, cache bytes) and are not\n\n");

  std::vector<Row> rows;
  for (const Group& g : groups()) {
    // The *_small groups are parts of others (for compute-sanitizer): run only when named.
    const std::string name = g.name;
    bool wanted = argc < 2 && !(name.size() > 6 && name.compare(name.size() - 6, 6, "_small") == 0);
    for (int i = 1; i < argc; ++i) wanted = wanted || std::strcmp(argv[i], g.name) == 0;
    if (!wanted) continue;
    try {
      g.run(rows);
    } catch (const std::exception& e) {
      rows.push_back({g.name, "-", "-", 0, -1, 0, std::string("FAIL: ") + e.what()});
      cudaGetLastError();
    }
  }

  std::printf("%-20s %-48s %-17s %10s %8s %10s  %s\n", "op", "case", "dtype", "rel.err", "limit", "mismatch", "result");
  int failed = 0;
  for (const Row& r : rows) {
    char limit[16];
    if (r.limit < 0) std::snprintf(limit, sizeof limit, "exact");
    else std::snprintf(limit, sizeof limit, "%.0e", r.limit);
    std::printf("%-20s %-48s %-17s %10.3g %8s %10ld  %s%s%s\n", r.op.c_str(), r.shape.c_str(), r.dtype.c_str(),
                r.max_rel, limit, r.mismatches, r.ok() ? "ok" : "FAIL", r.note.empty() ? "" : "  ", r.note.c_str());
    failed += !r.ok();
  }
  std::printf("\n%zu passed, %d failed\n", rows.size() - static_cast<size_t>(failed), failed);
  return failed ? 1 : 0;
}
