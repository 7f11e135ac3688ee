// Quantised-weight linear layers (fp8 block-scaled, NVFP4) and their dequantisation on the GPU
// against the CPU references: the same bytes as a checkpoint holds, made by the CPU quantisers.
#include <cstdio>

#include "gpu_check.hpp"
#include "tandem/kernels/quant_weights.hpp"

namespace gpu_check {

namespace k = tandem::kernels;

namespace {

struct Quantised {
  std::vector<std::uint8_t> fp8, nvfp4, nvfp4_scales;
  std::vector<float> fp8_scale_inv;
  float global = 0;
};

Quantised quantise(const std::vector<float>& w, int out, int in) {
  Quantised q;
  q.fp8.resize(w.size());
  q.fp8_scale_inv.resize(sz(static_cast<long>((out + 127) / 128) * ((in + 127) / 128)));
  k::quantize_fp8_block_cpu(w.data(), out, in, q.fp8.data(), q.fp8_scale_inv.data());
  q.nvfp4.resize(w.size() / 2);
  q.nvfp4_scales.resize(w.size() / 16);
  k::quantize_nvfp4_cpu(w.data(), out, in, q.nvfp4.data(), q.nvfp4_scales.data(), &q.global);
  return q;
}

void linear(std::vector<Row>& rows, DType xt, int n, int in, int out) {
  const auto w = normal(sz(static_cast<long>(out) * in), 0.02f, 21);
  const auto x = as_stored(xt, normal(sz(static_cast<long>(n) * in), 1.f, 22));
  const Quantised q = quantise(w, out, in);
  DevAct dx(xt, x);
  Dev<std::uint8_t> d8(q.fp8), d4(q.nvfp4), d4s(q.nvfp4_scales);
  Dev<float> d8s(q.fp8_scale_inv), dy(sz(static_cast<long>(n) * out));
  std::vector<float> ref(sz(static_cast<long>(n) * out));
  char shape[96];
  std::snprintf(shape, sizeof shape, "%d x %d -> %d", n, in, out);

  op_ok(k::linear_fp8_block_cuda(xt, dx.p(), d8.p(), d8s.p(), dy.p(), n, in, out));
  k::linear_fp8_block_cpu(x.data(), q.fp8.data(), q.fp8_scale_inv.data(), ref.data(), n, in, out);
  rows.push_back({"linear_fp8_block", shape, std::string(k::dtype_name(xt)) + " x, f32 y", max_rel_error(dy.get(), ref),
                  1e-4, 0, ""});

  op_ok(k::linear_nvfp4_cuda(xt, dx.p(), d4.p(), d4s.p(), q.global, dy.p(), n, in, out));
  k::linear_nvfp4_cpu(x.data(), q.nvfp4.data(), q.nvfp4_scales.data(), q.global, ref.data(), n, in, out);
  rows.push_back({"linear_nvfp4", shape, std::string(k::dtype_name(xt)) + " x, f32 y", max_rel_error(dy.get(), ref),
                  1e-4, 0, ""});
}

// The bf16 scratch must hold exactly round_bf16 of the CPU's dequantised weights.
void dequant(std::vector<Row>& rows, int out, int in) {
  const auto w = normal(sz(static_cast<long>(out) * in), 0.02f, 23);
  const Quantised q = quantise(w, out, in);
  Dev<std::uint8_t> d8(q.fp8), d4(q.nvfp4), d4s(q.nvfp4_scales);
  Dev<float> d8s(q.fp8_scale_inv);
  Dev<std::uint16_t> dy(w.size());
  std::vector<float> ref(w.size());
  char shape[96];
  std::snprintf(shape, sizeof shape, "%d x %d", out, in);
  auto differ = [&](const std::vector<float>& cpu) {
    const auto got = dy.get();
    long bad = 0;
    for (size_t i = 0; i < cpu.size(); ++i) bad += got[i] != k::bf16_from_float(cpu[i]);
    return bad;
  };
  op_ok(k::dequant_fp8_block_cuda(d8.p(), d8s.p(), out, in, dy.p()));
  k::dequant_fp8_block_cpu(q.fp8.data(), q.fp8_scale_inv.data(), out, in, ref.data());
  rows.push_back({"dequant_fp8_block", shape, "fp8 -> bf16", 0, -1, differ(ref), "bits exact"});
  op_ok(k::dequant_nvfp4_cuda(d4.p(), d4s.p(), q.global, out, in, dy.p()));
  k::dequant_nvfp4_cpu(q.nvfp4.data(), q.nvfp4_scales.data(), q.global, out, in, ref.data());
  rows.push_back({"dequant_nvfp4", shape, "nvfp4 -> bf16", 0, -1, differ(ref), "bits exact"});
}

}  // namespace

void check_quant(std::vector<Row>& rows) {
  for (DType xt : {DType::f32, DType::bf16}) {
    linear(rows, xt, 1, 2048, 1536);   // decode, one sequence
    linear(rows, xt, 5, 4096, 520);    // rows not a multiple of the row tile
    linear(rows, xt, 16, 1040, 3000);  // `in` not a multiple of the 128-wide fp8 block
  }
  dequant(rows, 1536, 2048);
  dequant(rows, 130, 1040);
}

}  // namespace gpu_check
