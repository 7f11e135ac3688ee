// The decoder's own kernels (glue.hpp, gqa.hpp, capture.hpp) against their CPU references: the
// strided and residual RMSNorms, the per-head q/k norm, the latent's cache write and amax, the row
// gather and the capture's bf16 conversion.
#include <algorithm>

#include "gpu_check.hpp"
#include "tandem/kernels/capture.hpp"
#include "tandem/kernels/glue.hpp"
#include "tandem/kernels/gqa.hpp"
#include "tandem/kernels/rope.hpp"

namespace gpu_check {

namespace k = tandem::kernels;
namespace g = tandem::kernels;

namespace {

std::string by(int a, int b) { return std::to_string(a) + " x " + std::to_string(b); }

// Rows of n entries at stride ldx > n (a slice of a fused projection), normalised into rows at ldy.
void rmsnorm_rows(std::vector<Row>& rows, int n_rows, int n, long ldx, long ldy) {
  const auto x = as_stored(DType::bf16, normal(sz(n_rows * ldx), 2.f, 21));
  const auto w = as_stored(DType::bf16, normal(sz(n), 1.f, 22));
  DevAct dx(DType::bf16, x), dw(DType::bf16, w), dy(DType::bf16, sz(n_rows * ldy));
  op_ok(g::rmsnorm_rows(dx.p(), ldx, n_rows, n, dw.p(), dy.p(), ldy, 1e-6f, nullptr));
  std::vector<float> y(sz(n_rows * ldy), 0.f);
  g::rmsnorm_rows_cpu(x.data(), ldx, n_rows, n, w.data(), y.data(), ldy, 1e-6f);
  auto got = dy.get();
  std::vector<float> got_rows, ref_rows;  // the entries written (the rest of dy is not)
  for (int r = 0; r < n_rows; ++r)
    for (int i = 0; i < n; ++i) got_rows.push_back(got[sz(r * ldy + i)]), ref_rows.push_back(y[sz(r * ldy + i)]);
  rows.push_back({"rmsnorm_rows", by(n_rows, n) + ", ldx " + std::to_string(ldx), "bf16", max_rel_error(got_rows, ref_rows),
                  limit_for(DType::bf16), 0, ""});
}

void add_rmsnorm(std::vector<Row>& rows, DType delta_type, int n_rows, int n) {
  const auto x0 = normal(sz(static_cast<long>(n_rows) * n), 2.f, 23);
  const auto delta = as_stored(delta_type, normal(x0.size(), 1.f, 24));
  const auto w = as_stored(DType::bf16, normal(sz(n), 1.f, 25));
  Dev<float> dx(x0), dy32(x0.size());
  DevAct dd(delta_type, delta), dw(DType::bf16, w), dy(DType::bf16, x0.size());
  op_ok(g::add_rmsnorm(dx.p(), dd.p(), delta_type, dw.p(), dy.p(), n_rows, n, 1e-5f, nullptr, dy32.p()));
  auto x = x0;
  std::vector<float> y(x.size()), y32(x.size());
  g::add_rmsnorm_cpu(x.data(), delta.data(), w.data(), y.data(), n_rows, n, 1e-5f, y32.data());
  const double err = std::max(max_rel_error(dy.get(), y), max_rel_error(dy32.get(), y32));
  rows.push_back({"add_rmsnorm", by(n_rows, n) + ", delta " + k::dtype_name(delta_type), "f32 x, bf16/f32 y", err,
                  limit_for(DType::bf16), values_differ(dx.get(), x), "x += delta exact"});
}

void head_rmsnorm(std::vector<Row>& rows, int tokens, int q_heads, int k_heads, int dim) {
  const long ld = static_cast<long>(q_heads + k_heads + 2) * dim;  // v heads after q and k, untouched
  auto x = as_stored(DType::bf16, normal(sz(tokens * ld), 1.5f, 26));
  const auto qw = as_stored(DType::bf16, normal(sz(dim), 1.f, 27)), kw = as_stored(DType::bf16, normal(sz(dim), 1.f, 28));
  DevAct dx(DType::bf16, x), dq(DType::bf16, qw), dk(DType::bf16, kw);
  op_ok(g::head_rmsnorm(dx.p(), ld, tokens, q_heads, k_heads, dim, dq.p(), dk.p(), 1e-6f, nullptr));
  g::head_rmsnorm_cpu(x.data(), ld, tokens, q_heads, k_heads, dim, qw.data(), kw.data(), 1e-6f);
  rows.push_back({"head_rmsnorm", std::to_string(tokens) + " tok, " + std::to_string(q_heads) + "+" +
                                      std::to_string(k_heads) + " heads x " + std::to_string(dim),
                  "bf16", max_rel_error(dx.get(), x), limit_for(DType::bf16), 0, ""});
}

// Tokens of two sequences into shuffled blocks of a bf16 pool; the slots no token maps to stay 0.
void latent_cache(std::vector<Row>& rows) {
  const int tokens = 37, width = 576, block = 16, max_blocks = 4, blocks = 8;
  const long ld = 1024;
  const auto src = as_stored(DType::bf16, normal(sz(tokens * ld), 3.f, 29));
  std::vector<std::int32_t> seq(sz(tokens)), pos(sz(tokens)), tables{5, 2, 7, 0, 1, 6, 3, 4};
  for (int t = 0; t < tokens; ++t) seq[sz(t)] = t % 2, pos[sz(t)] = t / 2 + (t % 2) * 20;
  const std::vector<float> zeros(sz(static_cast<long>(blocks) * block * width), 0.f);
  DevAct dsrc(DType::bf16, src), dcache(DType::bf16, zeros);
  Dev<std::int32_t> dseq(seq), dpos(pos), dtab(tables);
  op_ok(g::latent_cache_write(dsrc.p(), ld, tokens, width, dseq.p(), dpos.p(), dtab.p(), max_blocks, block, DType::bf16, 1.f,
                              dcache.p(), nullptr));
  auto cache = zeros;
  g::latent_cache_write_cpu(src.data(), ld, tokens, width, seq.data(), pos.data(), tables.data(), max_blocks, block,
                            cache.data());
  rows.push_back({"latent_cache_write", "37 tok of 2 seqs, 576 wide, 16-slot blocks", "bf16", 0, -1,
                  values_differ(dcache.get(), cache), "slot from the block table"});
  Dev<float> damax(std::vector<float>{0.25f});
  op_ok(g::latent_amax(dsrc.p(), ld, tokens, width, damax.p(), nullptr));
  const float amax = g::latent_amax_cpu(src.data(), ld, tokens, width, 0.25f);
  rows.push_back({"latent_amax", "37 tok x 576 of ld 1024", "bf16", 0, -1, damax.get()[0] != amax, "running max"});
}

// latent_prep (the MLA glue in one launch) against its unfused launches (rmsnorm_rows twice,
// rope_cuda, latent_cache_write) on the GLM-4.7-Flash shapes (query LoRA 768, latent 512 + rope 64
// in fused rows of 1344), bit for bit: the query latent and the pool, with the angles computed in
// the kernel and taken from rope_angles_cuda (a prefill's once-a-step table).
void latent_prep(std::vector<Row>& rows) {
  const int tokens = 37, lora_q = 768, lora_kv = 512, rope = 64, width = lora_kv + rope, block = 16, max_blocks = 4, blocks = 8;
  const long ld = lora_q + width;
  const auto fused = as_stored(DType::bf16, normal(sz(tokens * ld), 2.f, 34));
  const auto qn = as_stored(DType::bf16, normal(sz(lora_q), 0.3f, 35)), kvn = as_stored(DType::bf16, normal(sz(lora_kv), 0.3f, 36));
  std::vector<std::int32_t> seq(sz(tokens)), pos(sz(tokens)), tables{5, 2, 7, 0, 1, 6, 3, 4};
  for (int t = 0; t < tokens; ++t) seq[sz(t)] = t % 2, pos[sz(t)] = t / 2 + (t % 2) * 20;
  std::vector<float> inv(sz(rope / 2));
  k::rope_inv_freq(inv.data(), rope, 1e6);
  const std::vector<float> zeros(sz(static_cast<long>(blocks) * block * width), 0.f);
  DevAct dfused(DType::bf16, fused), dqn(DType::bf16, qn), dkvn(DType::bf16, kvn), dref(DType::bf16, zeros);
  DevAct dqlat_ref(DType::bf16, sz(tokens * lora_q));
  Dev<std::int32_t> dseq(seq), dpos(pos), dtab(tables);
  Dev<float> dinv(inv);
  Dev<double> dangles(sz(tokens * rope));
  op_ok(k::rope_angles_cuda(dinv.p(), dpos.p(), tokens, rope, dangles.p(), nullptr));
  for (const bool table : {false, true}) {
    DevAct dcache(DType::bf16, zeros), dqlat(DType::bf16, sz(tokens * lora_q));
    k::LatentPrep p;
    p.fused = dfused.p(), p.ld = ld, p.tokens = tokens, p.lora_q = lora_q, p.kv_at = lora_q, p.lora_kv = lora_kv, p.rope_dim = rope;
    p.q_norm = dqn.p(), p.qlat = dqlat.p(), p.kv_norm = dkvn.p(), p.eps = 1e-6f, p.inv_freq = dinv.p(), p.interleaved = true;
    p.token_seq = dseq.p(), p.token_pos = dpos.p(), p.block_tables = dtab.p(), p.max_blocks = max_blocks, p.block_size = block;
    p.cache_type = DType::bf16, p.cache = dcache.p(), p.angles = table ? dangles.p() : nullptr;
    op_ok(k::latent_prep(p, nullptr));
    if (!table) {  // the unfused launches, on a copy of the fused rows (the latent part is rewritten in place)
      DevAct dwork(DType::bf16, fused);
      auto* latent = static_cast<std::uint16_t*>(dwork.p()) + lora_q;
      op_ok(g::rmsnorm_rows(dwork.p(), ld, tokens, lora_q, dqn.p(), dqlat_ref.p(), lora_q, 1e-6f, nullptr));
      op_ok(g::rmsnorm_rows(latent, ld, tokens, lora_kv, dkvn.p(), latent, ld, 1e-6f, nullptr));
      op_ok(k::rope_cuda(DType::bf16, latent + lora_kv, tokens, ld, 1, rope, rope, dinv.p(), dpos.p(), k::RopeLayout::interleaved, nullptr));
      op_ok(g::latent_cache_write(latent, ld, tokens, width, dseq.p(), dpos.p(), dtab.p(), max_blocks, block, DType::bf16, 1.f, dref.p(),
                                  nullptr));
    }
    rows.push_back({"latent_prep", std::string("37 tok, LoRA 768, latent 512 + rope 64") + (table ? ", angles from the table" : ""),
                    "bf16", 0, -1, values_differ(dcache.get(), dref.get()) + values_differ(dqlat.get(), dqlat_ref.get()),
                    "= the unfused glue, bit for bit"});
  }
}

// Rows of whole 16-byte units (768: the copy in 8-entry pieces) and of odd width (770: entry by entry).
void gather(std::vector<Row>& rows, int width) {
  const int n_src = 40;
  const auto src = as_stored(DType::bf16, normal(sz(n_src * width), 1.f, 30));
  const std::vector<std::int32_t> pick{39, 0, 7, 7, 12};
  DevAct dsrc(DType::bf16, src), ddst(DType::bf16, pick.size() * sz(width));
  Dev<std::int32_t> dpick(pick);
  op_ok(g::gather_rows(dsrc.p(), width, dpick.p(), static_cast<int>(pick.size()), ddst.p(), nullptr));
  std::vector<float> dst(pick.size() * sz(width));
  g::gather_rows_cpu(src.data(), width, pick.data(), static_cast<int>(pick.size()), dst.data());
  rows.push_back({"gather_rows", "5 of 40 rows x " + std::to_string(width), "bf16", 0, -1, values_differ(ddst.get(), dst), ""});
}

void gather_and_capture(std::vector<Row>& rows) {
  gather(rows, 768);
  gather(rows, 770);

  const int rows_n = 9, w = 300;
  const long ldd = 1000;
  const auto x = normal(sz(rows_n * w), 4.f, 31);
  Dev<float> dx(x);
  Dev<std::uint16_t> dout(std::vector<std::uint16_t>(sz(rows_n * ldd), 0));
  op_ok(g::rows_to_bf16(dx.p(), w, rows_n, dout.p(), ldd, nullptr));
  std::vector<std::uint16_t> out(sz(rows_n * ldd), 0);
  g::rows_to_bf16_cpu(x.data(), w, rows_n, out.data(), ldd);
  const auto got = dout.get();
  long differ = 0;
  for (size_t i = 0; i < out.size(); ++i) differ += got[i] != out[i];
  rows.push_back({"rows_to_bf16", "9 x 300 into rows of 1000", "f32 -> bf16", 0, -1, differ, "bit patterns"});

  // Two partials summed as a tensor-parallel all-reduce sums them: every entry bit for bit.
  const std::size_t n = 70000;
  auto a = normal(n, 3.f, 32);
  const auto b = normal(n, 3.f, 33);
  Dev<float> da(a), db(b);
  op_ok(g::add_f32(da.p(), db.p(), n, nullptr));
  g::add_f32_cpu(a.data(), b.data(), n);
  rows.push_back({"add_f32", "70000 entries", "f32", 0, -1, values_differ(da.get(), a), "bit for bit"});
}

}  // namespace

void check_glue(std::vector<Row>& rows) {
  rmsnorm_rows(rows, 7, 512, 2112, 512);
  rmsnorm_rows(rows, 3, 1536, 2112, 2112);
  add_rmsnorm(rows, DType::f32, 5, 2048);
  add_rmsnorm(rows, DType::bf16, 3, 4096);
  head_rmsnorm(rows, 6, 8, 2, 128);
  latent_cache(rows);
  latent_prep(rows);
  gather_and_capture(rows);
}

}  // namespace gpu_check
