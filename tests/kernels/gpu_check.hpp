// The GPU check: every CUDA kernel against its CPU reference, one line per case in a table.
// Helpers: device buffers, activations stored as fp32 or bf16, the error measure, the table.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "tandem/kernels/dtype.hpp"
#include "tandem/result.hpp"

namespace gpu_check {

using tandem::kernels::DType;

// One row of the table. `limit` < 0 means the check is exact (mismatches must be 0).
struct Row {
  std::string op, shape, dtype;
  double max_rel = 0;  // max |gpu - cpu| / max(|cpu|, 1e-2 * max|cpu|)
  double limit = -1;
  long mismatches = 0;  // entries that must agree exactly and do not (ids, masks, bytes)
  std::string note;
  bool ok() const { return mismatches == 0 && (limit < 0 || max_rel <= limit) && note.rfind("FAIL", 0) != 0; }
};

// Each check group appends its rows; a thrown std::runtime_error becomes a failing row.
void check_elementwise(std::vector<Row>& rows);
void check_sampling(std::vector<Row>& rows);
void check_moe(std::vector<Row>& rows);
void check_attention(std::vector<Row>& rows);
void check_gemm(std::vector<Row>& rows);
void check_quant(std::vector<Row>& rows);
void check_quant_mma(std::vector<Row>& rows);        // the tensor-core quantised MoE decode
void check_quant_mma_small(std::vector<Row>& rows);  // its small shapes (for a memcheck)
void check_decode(std::vector<Row>& rows);
void check_glue(std::vector<Row>& rows);
void check_fused(std::vector<Row>& rows);
void check_glm5_next(std::vector<Row>& rows);
void check_kda_chunk(std::vector<Row>& rows);
void check_kda_chunk_few(std::vector<Row>& rows);
void check_rows_mma(std::vector<Row>& rows);
void check_moe_grouped(std::vector<Row>& rows);
void check_moe_grouped_small(std::vector<Row>& rows);
void check_quant_grouped(std::vector<Row>& rows);
void check_quant_grouped_small(std::vector<Row>& rows);
void check_mla_split(std::vector<Row>& rows);
void check_mla_flash(std::vector<Row>& rows);
void check_mla_flash_small(std::vector<Row>& rows);
void check_mla_mha(std::vector<Row>& rows);  // the un-absorbed MLA prefill and its latent gather
void check_moe_f32(std::vector<Row>& rows);

// Sizes are computed in long and handed to the containers through this one cast.
inline size_t sz(long n) { return static_cast<size_t>(n); }

inline double limit_for(DType out) { return out == DType::f32 ? 1e-4 : 1e-2; }

inline void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
inline void op_ok(const tandem::Status& err) {
  if (!err) throw std::runtime_error(err.error().text());
  cuda_ok(cudaDeviceSynchronize(), "kernel");
}

// A device allocation of n T's, freed on scope exit.
template <class T>
class Dev {
 public:
  explicit Dev(size_t n) : n_(n) { cuda_ok(cudaMalloc(&p_, sizeof(T) * (n ? n : 1)), "cudaMalloc"); }
  explicit Dev(const std::vector<T>& h) : Dev(h.size()) { put(h); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  ~Dev() { cudaFree(p_); }
  void put(const std::vector<T>& h) { cuda_ok(cudaMemcpy(p_, h.data(), sizeof(T) * h.size(), cudaMemcpyHostToDevice), "upload"); }
  std::vector<T> get() const {
    std::vector<T> h(n_);
    cuda_ok(cudaMemcpy(h.data(), p_, sizeof(T) * n_, cudaMemcpyDeviceToHost), "download");
    return h;
  }
  T* p() const { return p_; }

 private:
  T* p_ = nullptr;
  size_t n_;
};

// Host bytes of x as type t stores it (fp8_e4m3: x / scale), and back (dtype.hpp's conversions).
inline std::vector<std::uint8_t> encode(DType t, const std::vector<float>& x, float scale = 1.f) {
  std::vector<std::uint8_t> bytes(x.size() * static_cast<size_t>(tandem::kernels::dtype_bytes(t)));
  for (size_t i = 0; i < x.size(); ++i) tandem::kernels::store_element(t, bytes.data(), static_cast<long>(i), x[i], scale);
  return bytes;
}
inline std::vector<float> decode(DType t, const std::vector<std::uint8_t>& bytes, float scale = 1.f) {
  std::vector<float> x(bytes.size() / static_cast<size_t>(tandem::kernels::dtype_bytes(t)));
  for (size_t i = 0; i < x.size(); ++i) x[i] = tandem::kernels::load_element(t, bytes.data(), static_cast<long>(i), scale);
  return x;
}

// A device buffer of n values of type t (fp32, bf16 or fp8_e4m3 of x / scale), read back as floats.
class DevAct {
 public:
  DevAct(DType t, const std::vector<float>& x, float scale = 1.f) : t_(t), scale_(scale), raw_(encode(t, x, scale)) {}
  DevAct(DType t, size_t n) : DevAct(t, std::vector<float>(n, 0.f)) {}
  std::vector<float> get() const { return decode(t_, raw_.get(), scale_); }
  void* p() const { return raw_.p(); }

 private:
  DType t_;
  float scale_;
  Dev<std::uint8_t> raw_;
};

// What a buffer of type t holds for x (the CPU reference starts from these values).
inline std::vector<float> as_stored(DType t, std::vector<float> x, float scale = 1.f) {
  for (auto& v : x) v = tandem::kernels::round_to(t, v, scale);
  return x;
}

inline std::vector<float> normal(size_t n, float sigma, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, sigma);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  return x;
}

// The largest difference against the reference's largest value (normwise). For kernels that round
// an intermediate to bf16 where the reference keeps it exact (flash attention's probabilities, an
// activation rounded from another summation order): max_rel_error's per-element floor (1% of the
// largest value) turns that rounding into 5e-2 on outputs that cancel to near zero, a bug or not;
// a bug (a key, an expert or a row missed) is still of the order of the values themselves.
inline double max_norm_error(const std::vector<float>& got, const std::vector<float>& ref) {
  double scale = 0, worst = 0;
  for (float r : ref) scale = std::fmax(scale, std::fabs(r));
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(ref[i])) return INFINITY;
    worst = std::fmax(worst, std::fabs(static_cast<double>(got[i]) - ref[i]));
  }
  return worst / (scale > 0 ? scale : 1e-30);
}

inline double max_rel_error(const std::vector<float>& got, const std::vector<float>& ref) {
  double scale = 0;
  for (float r : ref) scale = std::fmax(scale, std::fabs(r));
  const double floor = 1e-2 * scale > 0 ? 1e-2 * scale : 1e-30;
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (std::isnan(got[i]) != std::isnan(ref[i])) return INFINITY;
    worst = std::fmax(worst, d / std::fmax(std::fabs(ref[i]), floor));
  }
  return worst;
}

// Entries whose values differ (a != b: +0 equals -0, NaN differs from everything): a result held
// to a CPU reference that does the same arithmetic, or to another GPU form where a zero's sign is
// not part of the claim. Vectors of unequal size count the longer one.
inline long values_differ(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return static_cast<long>(std::max(a.size(), b.size()));
  long n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

// Entries whose bits differ (memcmp, a zero's sign included): two GPU forms of one computation
// that must give the same bits.
inline long bits_differ(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return static_cast<long>(std::max(a.size(), b.size()));
  long n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

// A row of a flash-attention kernel, which rounds its probabilities to bf16 for the tensor cores
// as FlashAttention does: that alone measures 5-8e-2 per element where outputs cancel to near zero
// (the first GPU run, H100, 2026-12-07; a numpy model of bf16 probabilities gives the same 5-6e-2)
// and 2-3e-3 normwise. The row fails past kFlashNormBar normwise (the table's number) or
// kFlashElementBar per element (its note): a row, head or chunk served wrongly exceeds both by far.
constexpr double kFlashNormBar = 5e-3, kFlashElementBar = 0.15;
inline Row flash_row(std::string op, std::string shape, std::string dtype, const std::vector<float>& got, const std::vector<float>& ref,
                     long differ, std::string note) {
  const double element = max_rel_error(got, ref);
  char el[64];
  std::snprintf(el, sizeof el, "per element %.3g", element);
  if (element > kFlashElementBar) note = std::string("FAIL: ") + el + " (bar " + std::to_string(kFlashElementBar) + ")";
  else note = note.empty() ? el : note + ", " + el;
  return {std::move(op), std::move(shape), std::move(dtype) + ", normwise", max_norm_error(got, ref), kFlashNormBar, differ, note};
}

}  // namespace gpu_check
