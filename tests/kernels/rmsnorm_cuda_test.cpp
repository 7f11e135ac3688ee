// CUDA rmsnorm against the CPU reference. Exit 77 (ctest: skipped) without a CUDA device.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#if __has_include(<cuda_runtime.h>)  // a build without the CUDA toolkit (CI) has no cuda_check.hpp to test
#include "tandem/kernels/cuda_check.hpp"
#define TANDEM_TEST_CUDA_CHECK 1
#endif
#include "tandem/kernels/rmsnorm.hpp"

int main() {
  using namespace tandem::kernels;
#ifdef TANDEM_TEST_CUDA_CHECK
  // The CUDA check's Error (no device needed): the call as written, CUDA's name for the error, and
  // the file's last component with the line.
  const auto failed = cuda_status(cudaErrorInvalidValue, "cudaMemcpy(dst, src, n, kind)", "copy x", "/src/kernels/cuda/gemv.cu", 88);
  const std::string want = "gemv.cu:88: copy x: cudaMemcpy(dst, src, n, kind) failed: cudaErrorInvalidValue: invalid argument";
  if (failed || failed.error().text() != want) {
    std::printf("FAIL: cuda_status gave '%s', want '%s'\n", failed ? "Ok" : failed.error().text().c_str(), want.c_str());
    return 1;
  }
  if (!cuda_status(cudaSuccess, "cudaFree(p)", "", __FILE__, __LINE__)) return 1;
#endif
  if (!cuda_device_present()) {
    std::puts("SKIP: no CUDA device on this machine (GPU checks run on the GPU machine via the device tool)");
    return 77;
  }
  const int rows = 37, n = 4096;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.f, 2.f);
  std::vector<float> x(static_cast<size_t>(rows * n)), w(n), ref(x.size()), got(x.size());
  for (auto& v : x) v = dist(rng);
  for (auto& v : w) v = dist(rng);
  rmsnorm_cpu(x.data(), w.data(), ref.data(), rows, n, 1e-5f);
  tandem::Status err = rmsnorm_cuda(x.data(), w.data(), got.data(), rows, n, 1e-5f);
  if (!err) {
    std::printf("FAIL: %s\n", err.error().text().c_str());
    return 1;
  }
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i)
    worst = std::fmax(worst, std::fabs(got[i] - ref[i]) / (std::fabs(ref[i]) + 1e-3));
  std::printf("rmsnorm cuda vs cpu: %d x %d, max relative error %.3g\n", rows, n, worst);
  if (worst > 1e-4) {
    std::puts("FAIL: relative error above 1e-4");
    return 1;
  }
  std::puts("1 passed, 0 failed");
  return 0;
}
