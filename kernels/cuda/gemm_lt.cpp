// GemmRunner on cuBLASLt. Row-major y[M][N] = x[M][K] w^T is, in cuBLAS's column-major terms,
// Y^T[N][M] = op(W)[N][K] X^T[K][M]: A = w (transposed when w is [out][in]), B = x, D = y.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "tandem/kernels/cuda_check.hpp"
#include "tandem/kernels/gemm.hpp"

namespace tandem::kernels {

struct GemmRunner::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

namespace {

cudaDataType_t cuda_type(DType t) { return t == DType::f32 ? CUDA_R_32F : CUDA_R_16BF; }

// A failed cuBLASLt call as an Error located at the check (as TANDEM_CUDA_STATUS does for CUDA).
Status lt_status(cublasStatus_t s, const char* call, const char* what, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return Ok{};
  return Error{std::string("cuBLASLt ") + what + ": " + call + " failed: " + cublasLtGetStatusString(s),
               "gemm_lt.cpp:" + std::to_string(line)};
}
#define lt_error(call, what) lt_status((call), #call, (what), __LINE__)

// The largest power of two (up to 256) that divides the address: algorithms that need more are excluded.
int alignment(const void* p) {
  const auto v = reinterpret_cast<std::uintptr_t>(p);
  int a = 256;
  while (a > 1 && v % static_cast<std::uintptr_t>(a) != 0) a /= 2;
  return a;
}

Status set_batch(cublasLtMatrixLayout_t l, int batch, long stride) {
  if (batch == 1) return {};
  const int32_t count = batch;
  const int64_t offset = stride;
  if (auto e = lt_error(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
                        "batch count");
      !e)
    return e;
  return lt_error(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &offset, sizeof(offset)),
                  "batch stride");
}

}  // namespace

Result<std::unique_ptr<GemmRunner>> GemmRunner::create(size_t workspace_bytes) {
  std::unique_ptr<GemmRunner> r(new GemmRunner());
  cublasLtHandle_t h = nullptr;
  if (auto e = lt_error(cublasLtCreate(&h), "create"); !e) return e.error();
  r->handle_ = h;
  if (auto e = TANDEM_CUDA_STATUS(cudaMalloc(&r->workspace_, workspace_bytes),
                                  "cuBLASLt workspace of " + std::to_string(workspace_bytes >> 20) + " MiB");
      !e)
    return e.error();
  r->workspace_bytes_ = workspace_bytes;
  return r;
}

GemmRunner::~GemmRunner() {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

Status GemmRunner::run(const GemmArgs& g, Stream stream) {
  if (g.rows <= 0 || g.in <= 0 || g.out <= 0 || g.batch <= 0) return Error{"gemm: empty shape"};
  if (g.bias && g.batch != 1) return Error{"gemm: a bias needs batch 1"};
  if (g.bias && g.accumulate) return Error{"gemm: accumulate takes no bias (it would be added twice)"};
  if (g.xw_type == DType::f32 && g.y_type != DType::f32) return Error{"gemm: fp32 operands need an fp32 result"};
  const int align = std::min({alignment(g.x), alignment(g.w), alignment(g.y), g.bias ? alignment(g.bias) : 256});
  const auto key = std::make_tuple(g.rows, g.in, g.out, g.ldx, g.stride_x, g.ldw, g.stride_w, g.ldy, g.stride_y,
                                   static_cast<int>(g.w_trans), g.bias != nullptr ? 1 : 0, g.batch,
                                   static_cast<int>(g.xw_type), static_cast<int>(g.y_type), align);
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    auto p = std::make_unique<Plan>();
    const cudaDataType_t xt = cuda_type(g.xw_type), yt = cuda_type(g.y_type);
    if (auto e = lt_error(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc"); !e) return e;
    const cublasOperation_t ta = g.w_trans ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    if (g.bias) {
      const cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep));
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &yt, sizeof(yt));
    }
    // A as stored: [K][N] column-major when transposed (w is [N][K] row-major), else [N][K].
    const uint64_t a_rows = static_cast<uint64_t>(g.w_trans ? g.in : g.out), a_cols = static_cast<uint64_t>(g.w_trans ? g.out : g.in);
    if (auto e = lt_error(cublasLtMatrixLayoutCreate(&p->a, xt, a_rows, a_cols, g.ldw), "layout w"); !e) return e;
    if (auto e = lt_error(cublasLtMatrixLayoutCreate(&p->b, xt, static_cast<uint64_t>(g.in), static_cast<uint64_t>(g.rows), g.ldx), "layout x");
        !e)
      return e;
    if (auto e = lt_error(cublasLtMatrixLayoutCreate(&p->d, yt, static_cast<uint64_t>(g.out), static_cast<uint64_t>(g.rows), g.ldy), "layout y");
        !e)
      return e;
    for (auto [l, s] : {std::pair{p->a, g.stride_w}, std::pair{p->b, g.stride_x}, std::pair{p->d, g.stride_y}})
      if (auto e = set_batch(l, g.batch, s); !e) return e;

    cublasLtMatmulPreference_t pref = nullptr;
    cublasLtMatmulPreferenceCreate(&pref);
    const uint64_t ws = workspace_bytes_;
    const uint32_t al = static_cast<uint32_t>(align);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof(al));
    cublasLtMatmulHeuristicResult_t found{};
    int n = 0;
    const auto s = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), p->op, p->a, p->b, p->d, p->d,
                                                  pref, 1, &found, &n);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || n == 0)
      return Error{"cuBLASLt: no algorithm for " + std::to_string(g.rows) + "x" + std::to_string(g.in) + " * " +
             std::to_string(g.out) + " (batch " + std::to_string(g.batch) + "): " + cublasLtGetStatusString(s)};
    p->algo = found.algo;
    it = plans_.emplace(key, std::move(p)).first;
  }
  Plan& p = *it->second;
  if (g.bias) cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias));
  const float one = 1.0f, zero = 0.0f;
  return lt_error(cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p.op, &one, g.w, p.a, g.x, p.b, g.accumulate ? &one : &zero, g.y, p.d,
                                 g.y, p.d, &p.algo, workspace_, workspace_bytes_, stream),
                  "matmul");
}

}  // namespace tandem::kernels
