// Elementwise and row-wise kernels: residual-add RMSNorm, rotary, SiLU-and-mul, embedding, and the
// bf16 / fp8 conversions of the cache write against the CPU's (byte for byte).
#include <cstdio>

#include "gpu_check.hpp"
#include "tandem/kernels/activation.hpp"
#include "tandem/kernels/embedding.hpp"
#include "tandem/kernels/paged_attention.hpp"
#include "tandem/kernels/rmsnorm.hpp"
#include "tandem/kernels/rope.hpp"

namespace gpu_check {

namespace k = tandem::kernels;

namespace {

std::string by(int a, int b) { return std::to_string(a) + " x " + std::to_string(b); }

void rmsnorm_residual(std::vector<Row>& rows, DType t, int n_rows, int n) {
  const auto x0 = as_stored(t, normal(sz(static_cast<long>(n_rows) * n), 2.f, 1));
  const auto res = as_stored(t, normal(x0.size(), 1.f, 2));
  const auto w = as_stored(t, normal(static_cast<size_t>(n), 1.f, 3));
  DevAct dx(t, x0), dr(t, res), dw(t, w), dy(t, x0.size());
  op_ok(k::rmsnorm_residual_cuda(t, dx.p(), dr.p(), dw.p(), dy.p(), n_rows, n, 1e-5f));
  auto x = x0;
  std::vector<float> y(x.size());
  k::rmsnorm_residual_cpu(x.data(), res.data(), w.data(), y.data(), n_rows, n, 1e-5f, t == DType::bf16);
  const auto gx = dx.get();
  long differ = 0;
  for (size_t i = 0; i < x.size(); ++i) differ += gx[i] != x[i];  // the residual stream: the same adds
  rows.push_back({"rmsnorm_residual", by(n_rows, n), k::dtype_name(t), max_rel_error(dy.get(), y),
                  limit_for(t), differ, "x += residual exact"});
}

// A rotation's inputs: inverse frequencies (base 1e6) and `tokens` positions below 131072 from seed.
struct RopeInputs {
  std::vector<float> inv;
  std::vector<int> pos;
};
RopeInputs rope_inputs(int rot_dim, int tokens, unsigned seed) {
  RopeInputs r{std::vector<float>(sz(rot_dim / 2)), std::vector<int>(sz(tokens))};
  k::rope_inv_freq(r.inv.data(), rot_dim, 1e6);
  std::mt19937 rng(seed);
  for (auto& p : r.pos) p = static_cast<int>(rng() % 131072);
  return r;
}

void rope(std::vector<Row>& rows, DType t, k::RopeLayout layout, int head_dim, int rot_dim) {
  const int tokens = 19, heads = 16;
  const long stride = static_cast<long>(heads) * head_dim;
  auto x = as_stored(t, normal(static_cast<size_t>(tokens * stride), 1.f, 4));
  auto [inv, pos] = rope_inputs(rot_dim, tokens, 5);
  pos[0] = 0;
  DevAct dx(t, x);
  Dev<float> dinv(inv);
  Dev<int> dpos(pos);
  op_ok(k::rope_cuda(t, dx.p(), tokens, stride, heads, head_dim, rot_dim, dinv.p(), dpos.p(), layout));
  k::rope_tokens_cpu(x.data(), tokens, stride, heads, head_dim, rot_dim, inv.data(), pos.data(), layout,
                     t == DType::bf16);
  rows.push_back({"rope", std::string(layout == k::RopeLayout::half ? "half" : "interleaved") + ", rot " +
                              std::to_string(rot_dim) + " of " + std::to_string(head_dim) + ", 19 tok x 16 heads",
                  k::dtype_name(t), max_rel_error(dx.get(), x), limit_for(t), 0, "positions < 131072"});
}

// rope_copy_cuda against rope_cuda in place: the rotated entries bit for bit, at dst's own stride
// (the MLA query's: 64 rope entries after the 512 absorbed ones), the rest of dst untouched.
void rope_copy(std::vector<Row>& rows, DType t, k::RopeLayout layout, int head_dim, int rot_dim) {
  const int tokens = 37, heads = 20, dst_head = rot_dim + 24;
  const long stride = static_cast<long>(heads) * head_dim, dstride = static_cast<long>(heads) * dst_head;
  const auto x = as_stored(t, normal(sz(tokens * stride), 1.f, 14));
  const auto [inv, pos] = rope_inputs(rot_dim, tokens, 15);
  DevAct dx(t, x), dref(t, x), ddst(t, std::vector<float>(sz(tokens * dstride), 7.f));
  Dev<float> dinv(inv);
  Dev<int> dpos(pos);
  k::RopeCopy c;
  c.src = dx.p(), c.src_token_stride = stride, c.src_head_stride = head_dim;
  c.dst = ddst.p(), c.dst_token_stride = dstride, c.dst_head_stride = dst_head;
  op_ok(k::rope_copy_cuda(t, c, tokens, heads, rot_dim, dinv.p(), dpos.p(), layout));
  op_ok(k::rope_cuda(t, dref.p(), tokens, stride, heads, head_dim, rot_dim, dinv.p(), dpos.p(), layout));
  const auto got = ddst.get(), ref = dref.get();
  long differ = 0;
  for (long tk = 0; tk < tokens; ++tk)
    for (long h = 0; h < heads; ++h)
      for (long i = 0; i < dst_head; ++i) {
        const float g = got[sz(tk * dstride + h * dst_head + i)];
        differ += i < rot_dim ? g != ref[sz(tk * stride + h * head_dim + i)] : g != 7.f;
      }
  rows.push_back({"rope_copy", std::string(layout == k::RopeLayout::half ? "half" : "interleaved") + ", rot " + std::to_string(rot_dim) +
                                   " of " + std::to_string(head_dim) + " -> stride " + std::to_string(dst_head) + ", 37 tok x 20 heads",
                  k::dtype_name(t), 0, -1, differ, "= rope_cuda in place"});
}

// rope_copy_cuda in place (src == dst, the un-absorbed MLA prefill's query: rope after 192 nope
// entries of each 256-wide head) against rope_cuda in place: every entry bit for bit.
void rope_copy_in_place(std::vector<Row>& rows, DType t, k::RopeLayout layout) {
  const int tokens = 37, heads = 20, head_dim = 256, nope = 192, rot_dim = 64;
  const long stride = static_cast<long>(heads) * head_dim;
  const auto x = as_stored(t, normal(sz(tokens * stride), 1.f, 16));
  const auto [inv, pos] = rope_inputs(rot_dim, tokens, 17);
  DevAct dref(t, x);
  Dev<float> dinv(inv);
  Dev<int> dpos(pos);
  const long off = nope * (t == DType::f32 ? 4 : 2);
  k::RopeCopy c;  // src = dst: each pass's own copy of x, below
  c.src_token_stride = c.dst_token_stride = stride;
  c.src_head_stride = c.dst_head_stride = head_dim;
  op_ok(k::rope_cuda(t, static_cast<char*>(dref.p()) + off, tokens, stride, heads, head_dim, rot_dim, dinv.p(), dpos.p(), layout));
  const auto ref = dref.get();
  // Angles formed in the kernel, then read from rope_angles_cuda's table (a prefill's, once a step).
  Dev<double> dangles(sz(tokens * rot_dim));
  op_ok(k::rope_angles_cuda(dinv.p(), dpos.p(), tokens, rot_dim, dangles.p()));
  for (const bool table : {false, true}) {
    DevAct dy(t, x);
    c.src = c.dst = static_cast<char*>(dy.p()) + off;
    c.angles = table ? dangles.p() : nullptr;
    op_ok(k::rope_copy_cuda(t, c, tokens, heads, rot_dim, dinv.p(), dpos.p(), layout));
    const auto got = dy.get();
    const long differ = values_differ(got, ref);
    rows.push_back({"rope_copy", std::string(layout == k::RopeLayout::half ? "half" : "interleaved") +
                                     ", in place, rot 64 after 192 of 256, 37 tok x 20 heads" + (table ? ", angles from the table" : ""),
                    k::dtype_name(t), 0, -1, differ, "= rope_cuda in place"});
  }
}

void silu_and_mul(std::vector<Row>& rows, DType t, int n_rows, int d) {
  const auto gu = as_stored(t, normal(sz(2L * n_rows * d), 3.f, 6));
  DevAct dgu(t, gu), dy(t, sz(static_cast<long>(n_rows) * d));
  op_ok(k::silu_and_mul_cuda(t, dgu.p(), dy.p(), n_rows, d));
  std::vector<float> y(sz(static_cast<long>(n_rows) * d));
  k::silu_and_mul_cpu(gu.data(), y.data(), n_rows, d, t == DType::bf16);
  rows.push_back({"silu_and_mul", by(n_rows, d), k::dtype_name(t), max_rel_error(dy.get(), y),
                  limit_for(t), 0, ""});
}

void embedding(std::vector<Row>& rows, DType t) {
  const int vocab = 1000, hidden = 768;
  const auto table = as_stored(t, normal(static_cast<size_t>(vocab) * hidden, 1.f, 7));
  std::vector<std::int32_t> ids{0, 999, 5, 5, -1, 1000, 123, 77};
  DevAct dt(t, table), dout(t, ids.size() * hidden);
  Dev<std::int32_t> dids(ids);
  op_ok(k::embedding_cuda(t, dt.p(), vocab, hidden, dids.p(), static_cast<int>(ids.size()), dout.p()));
  std::vector<float> out(ids.size() * hidden);
  k::embedding_cpu(table.data(), vocab, hidden, ids.data(), static_cast<int>(ids.size()), out.data());
  const auto got = dout.get();
  long differ = 0;
  for (size_t i = 0; i < out.size(); ++i) differ += got[i] != out[i];
  rows.push_back({"embedding", "8 ids of 1000 x 768, 2 out of range", k::dtype_name(t), 0, -1, differ, ""});
}

// write_kv with scale 1 is a plain conversion: compare its bytes with the CPU's over many values,
// from subnormals to past the fp8 range, halfway cases included.
void conversions(std::vector<Row>& rows, DType act, DType kv) {
  std::vector<float> x;
  std::mt19937 rng(8);
  for (int i = 0; i < 1 << 18; ++i) {
    const float mag = std::ldexp(1.f + static_cast<float>(rng() % 4096) / 4096.f, static_cast<int>(rng() % 32) - 14);
    x.push_back(rng() % 2 ? mag : -mag);
  }
  for (int c = 0; c < 0x7E; ++c)  // fp8 midpoints and their neighbours
    for (float m : {0.5f, 0.4999f, 0.5001f}) {
      const float lo = k::fp8_e4m3_to_float(static_cast<std::uint8_t>(c)), hi = k::fp8_e4m3_to_float(static_cast<std::uint8_t>(c + 1));
      x.push_back(lo + (hi - lo) * m);
    }
  x.push_back(0.f);
  x.push_back(-0.f);
  x.push_back(1e30f);
  while (x.size() % 64) x.push_back(1.f);
  x = as_stored(act, x);
  k::PagedKvLayout l;
  l.dtype = kv;
  l.block_size = 1;
  l.kv_heads = 1;
  l.qk_dim = l.v_dim = 64;
  const int n = static_cast<int>(x.size() / 64);
  std::vector<std::int32_t> slot(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) slot[static_cast<size_t>(i)] = n - 1 - i;  // reversed: slots are honoured
  DevAct dk(act, x);
  Dev<std::int32_t> dslot(slot);
  const size_t bytes = x.size() * static_cast<size_t>(k::dtype_bytes(kv));
  Dev<std::uint8_t> kc(bytes), vc(bytes);
  op_ok(k::write_kv_cuda(act, dk.p(), dk.p(), n, dslot.p(), l, kc.p(), vc.p()));
  const auto got = kc.get();
  long differ = 0;
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < 64; ++i) {
      const float v = x[static_cast<size_t>(t * 64 + i)];
      const size_t at = static_cast<size_t>(slot[static_cast<size_t>(t)] * 64 + i);
      if (kv == DType::fp8_e4m3) {
        differ += got[at] != k::fp8_e4m3_from_float(v);
      } else {
        const std::uint16_t b = k::bf16_from_float(v);
        differ += got[2 * at] != (b & 0xFF) || got[2 * at + 1] != (b >> 8);
      }
    }
  rows.push_back({"convert (write_kv)", std::to_string(x.size()) + " values, scale 1",
                  std::string(k::dtype_name(act)) + "->" + k::dtype_name(kv), 0, -1, differ, "bytes vs CPU"});
}

}  // namespace

void check_elementwise(std::vector<Row>& rows) {
  for (DType t : {DType::f32, DType::bf16}) {
    rmsnorm_residual(rows, t, 37, 4096);
    rmsnorm_residual(rows, t, 5, 5000);
    rope(rows, t, k::RopeLayout::half, 128, 64);
    rope(rows, t, k::RopeLayout::interleaved, 192, 64);
    rope(rows, t, k::RopeLayout::half, 128, 128);
    rope_copy(rows, t, k::RopeLayout::interleaved, 256, 64);
    rope_copy(rows, t, k::RopeLayout::half, 128, 64);
    rope_copy_in_place(rows, t, k::RopeLayout::interleaved);
    rope_copy_in_place(rows, t, k::RopeLayout::half);
    silu_and_mul(rows, t, 33, 1408);
    embedding(rows, t);
  }
  conversions(rows, DType::f32, DType::fp8_e4m3);
  conversions(rows, DType::f32, DType::bf16);
}

}  // namespace gpu_check
