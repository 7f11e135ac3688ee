// The DFlash drafter's fused glue against the unfused kernels it replaces, bit for bit: head_prep
// (rmsnorm_rows per head, rope_cuda, write_kv_cuda), embed_rmsnorm (embedding_cuda, a zeroed x,
// add_rmsnorm) and add_rmsnorm's picked rows (add_rmsnorm, then gather_rows). Equal bits are the
// point: the drafter's rows must not move when its launches are fused.
#include <algorithm>

#include "gpu_check.hpp"
#include "tandem/kernels/embedding.hpp"
#include "tandem/kernels/glue.hpp"
#include "tandem/kernels/head_prep.hpp"
#include "tandem/kernels/paged_attention.hpp"
#include "tandem/kernels/rope.hpp"

namespace gpu_check {

namespace k = tandem::kernels;

namespace {

// T tokens of a q|k|v row (q_heads, kv_heads of dim each), slots shuffled, one token's slot -1.
void head_prep(std::vector<Row>& rows, int T, int q_heads, int kv_heads, int dim, bool queries) {
  const int qw = q_heads * dim, kvw = kv_heads * dim, ld = qw + 2 * kvw, slots = 2 * T;
  const auto qkv = as_stored(DType::bf16, normal(sz(static_cast<long>(T) * ld), 2.f, 41));
  const auto qn = as_stored(DType::bf16, normal(sz(dim), 1.f, 42)), kn = as_stored(DType::bf16, normal(sz(dim), 1.f, 43));
  std::vector<float> inv(sz(dim / 2));
  k::rope_inv_freq(inv.data(), dim, 1e6);
  std::vector<std::int32_t> pos(sz(T)), slot(sz(T));
  for (int t = 0; t < T; ++t) pos[sz(t)] = 3 * t + 100, slot[sz(t)] = t == 1 ? -1 : (7 * t + 3) % slots;
  DevAct dqkv(DType::bf16, qkv), dqn(DType::bf16, qn), dkn(DType::bf16, kn);
  Dev<float> dinv(inv);
  Dev<std::int32_t> dpos(pos), dslot(slot);
  k::PagedKvLayout l;
  l.dtype = DType::bf16, l.block_size = 16, l.kv_heads = kv_heads, l.qk_dim = l.v_dim = dim;
  // Unfused: the drafter's former path on contiguous copies of q and k (its q_ and kv_ buffers).
  std::vector<float> q(sz(static_cast<long>(T) * qw)), kk(sz(static_cast<long>(T) * kvw)), vv(kk.size());
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < qw + 2 * kvw; ++i) {
      const float x = qkv[sz(static_cast<long>(t) * ld + i)];
      if (i < qw) q[sz(static_cast<long>(t) * qw + i)] = x;
      else if (i < qw + kvw) kk[sz(static_cast<long>(t) * kvw + i - qw)] = x;
      else vv[sz(static_cast<long>(t) * kvw + i - qw - kvw)] = x;
    }
  DevAct uq(DType::bf16, q), uk(DType::bf16, kk), uv(DType::bf16, vv);
  const size_t pool = sz(static_cast<long>(slots) * kvw);
  DevAct ukc(DType::bf16, pool), uvc(DType::bf16, pool), fkc(DType::bf16, pool), fvc(DType::bf16, pool), fq(DType::bf16, q.size());
  if (queries) {
    op_ok(k::rmsnorm_rows(uq.p(), dim, T * q_heads, dim, dqn.p(), uq.p(), dim, 1e-6f, nullptr));
    op_ok(k::rope_cuda(DType::bf16, uq.p(), T, qw, q_heads, dim, dim, dinv.p(), dpos.p(), k::RopeLayout::half, nullptr));
  }
  op_ok(k::rmsnorm_rows(uk.p(), dim, T * kv_heads, dim, dkn.p(), uk.p(), dim, 1e-6f, nullptr));
  op_ok(k::rope_cuda(DType::bf16, uk.p(), T, kvw, kv_heads, dim, dim, dinv.p(), dpos.p(), k::RopeLayout::half, nullptr));
  op_ok(k::write_kv_cuda(DType::bf16, uk.p(), uv.p(), T, dslot.p(), l, ukc.p(), uvc.p(), nullptr));
  k::HeadPrep p;
  p.qkv = dqkv.p(), p.ld = ld, p.k_at = qw, p.v_at = qw + kvw;
  p.tokens = T, p.q_heads = queries ? q_heads : 0, p.kv_heads = kv_heads, p.head_dim = dim;
  p.q_norm = dqn.p(), p.k_norm = dkn.p(), p.eps = 1e-6f, p.inv_freq = dinv.p(), p.pos = dpos.p(), p.slot = dslot.p();
  p.q_out = fq.p(), p.k_cache = fkc.p(), p.v_cache = fvc.p();
  op_ok(k::head_prep(p, nullptr));
  long differ = values_differ(fkc.get(), ukc.get()) + values_differ(fvc.get(), uvc.get());
  if (queries) differ += values_differ(fq.get(), uq.get());
  rows.push_back({"head_prep", std::to_string(T) + " tok, " + std::to_string(queries ? q_heads : 0) + "+" + std::to_string(kv_heads) +
                                   " heads x " + std::to_string(dim),
                  "bf16", 0, -1, differ, "= rmsnorm_rows, rope, write_kv bit for bit"});
}

void embed_and_pick(std::vector<Row>& rows, int T, int n, int vocab) {
  const auto table = as_stored(DType::bf16, normal(sz(static_cast<long>(vocab) * n), 1.f, 44));
  const auto w = as_stored(DType::bf16, normal(sz(n), 1.f, 45));
  std::vector<std::int32_t> ids(sz(T));
  for (int t = 0; t < T; ++t) ids[sz(t)] = t == 2 ? vocab : (t * 37 + 5) % vocab;  // one id outside: a zero row
  DevAct dtab(DType::bf16, table), dw(DType::bf16, w), emb(DType::bf16, sz(static_cast<long>(T) * n));
  DevAct uy(DType::bf16, sz(static_cast<long>(T) * n)), fy(DType::bf16, sz(static_cast<long>(T) * n));
  Dev<std::int32_t> dids(ids);
  Dev<float> ux(std::vector<float>(sz(static_cast<long>(T) * n), 0.f)), fx(std::vector<float>(sz(static_cast<long>(T) * n), 7.f));
  op_ok(k::embedding_cuda(DType::bf16, dtab.p(), vocab, n, dids.p(), T, emb.p(), nullptr));
  op_ok(k::add_rmsnorm(ux.p(), emb.p(), DType::bf16, dw.p(), uy.p(), T, n, 1e-6f, nullptr));
  op_ok(k::embed_rmsnorm(dtab.p(), vocab, dids.p(), fx.p(), dw.p(), fy.p(), T, n, 1e-6f, nullptr));
  rows.push_back({"embed_rmsnorm", std::to_string(T) + " tok x " + std::to_string(n), "bf16", 0, -1,
                  values_differ(fy.get(), uy.get()) + values_differ(fx.get(), ux.get()), "= embedding, add_rmsnorm bit for bit"});
  // A second add (the residual now non-zero) of every row then a gather, against the picked rows.
  const auto delta = as_stored(DType::bf16, normal(sz(static_cast<long>(T) * n), 1.f, 46));
  const std::vector<std::int32_t> pick{T - 1, 0, 3};
  DevAct dd(DType::bf16, delta), all(DType::bf16, sz(static_cast<long>(T) * n)), gathered(DType::bf16, pick.size() * sz(n)),
      picked(DType::bf16, pick.size() * sz(n));
  Dev<std::int32_t> dpick(pick);
  op_ok(k::add_rmsnorm(ux.p(), dd.p(), DType::bf16, dw.p(), all.p(), T, n, 1e-6f, nullptr));
  op_ok(k::gather_rows(all.p(), n, dpick.p(), static_cast<int>(pick.size()), gathered.p(), nullptr));
  op_ok(k::add_rmsnorm(fx.p(), dd.p(), DType::bf16, dw.p(), picked.p(), static_cast<int>(pick.size()), n, 1e-6f, nullptr, nullptr,
                       dpick.p()));
  rows.push_back({"add_rmsnorm picked rows", "3 of " + std::to_string(T) + " x " + std::to_string(n), "bf16", 0, -1,
                  values_differ(picked.get(), gathered.get()), "= add_rmsnorm, gather_rows bit for bit"});
}

}  // namespace

void check_fused(std::vector<Row>& rows) {
  head_prep(rows, 8, 6, 2, 64, true);
  head_prep(rows, 48, 32, 8, 128, true);
  head_prep(rows, 5, 4, 4, 96, false);
  head_prep(rows, 6, 4, 2, 16, true);   // under a warp (a fixture drafter's heads)
  head_prep(rows, 3, 2, 2, 80, true);   // a partial last chunk
  embed_and_pick(rows, 8, 384, 4096);
  embed_and_pick(rows, 48, 4096, 1000);
}

}  // namespace gpu_check
