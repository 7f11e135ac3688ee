// The MLA decode kernel with splits chosen from each token's own context (PagedKvLayout::
// context_splits 132, and 8), at GLM-4.7-Flash's shape (20 heads, latent 512 + rope 64):
// contexts 1, 31, 577, 4097 and 32768 (one split, one chunk, a split per chunk, a split per chunk
// past 128, 8 chunks a split), alone, in steps of 6 and 16 tokens and in verification blocks
// (consecutive positions of one sequence), bf16 and fp8 pools, against paged_attention_mla_cpu;
// and bitwise: every token's output in every step must be the bits of the same token computed
// alone (batch 1, a launch sized for 32768), and alone with a launch sized for its own context
// only (a smaller max_context, as an eager step passes it): issue 21's exactness for speculative
// decoding.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>

#include "gpu_check.hpp"
#include "tandem/kernels/paged_attention.hpp"

namespace gpu_check {

namespace k = tandem::kernels;

namespace {

constexpr int kHeads = 20, kQk = 576, kVd = 512, kBs = 64, kMaxCtx = 32768;

struct Spec {
  int seq, pos;  // the token: sequence and position (attends 0..pos)
};

struct Pool {
  std::vector<int> len;
  std::vector<std::int32_t> table;
  int max_blocks = 0;
  k::PagedKvLayout l;
  std::vector<std::uint8_t> bytes;  // the cache as written, for the CPU reference
  std::unique_ptr<Dev<std::uint8_t>> cache;
};

Pool make_pool(DType kv, const std::vector<int>& len, int target) {
  Pool p;
  p.len = len;
  int total_blocks = 2, total_keys = 0;
  for (int n : len) p.max_blocks = std::max(p.max_blocks, (n + kBs - 1) / kBs), total_blocks += (n + kBs - 1) / kBs, total_keys += n;
  std::vector<int> order(sz(total_blocks));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(71));
  const int S = static_cast<int>(len.size());
  p.table.assign(sz(static_cast<long>(S) * p.max_blocks), 0);
  std::vector<std::int32_t> slot;
  for (int s = 0, next = 0; s < S; ++s)
    for (int b = 0; b < (len[sz(s)] + kBs - 1) / kBs; ++b) p.table[sz(static_cast<long>(s) * p.max_blocks + b)] = order[sz(next++)];
  for (int s = 0; s < S; ++s)
    for (int j = 0; j < len[sz(s)]; ++j) slot.push_back(p.table[sz(static_cast<long>(s) * p.max_blocks + j / kBs)] * kBs + j % kBs);
  p.l.dtype = kv, p.l.block_size = kBs, p.l.kv_heads = 1, p.l.qk_dim = kQk, p.l.v_dim = kVd, p.l.v_in_k = true;
  p.l.context_splits = target;
  const auto rows_in = as_stored(DType::bf16, normal(sz(static_cast<long>(total_keys) * kQk), 1.f, 72));
  if (kv == DType::fp8_e4m3) {
    float m = 0;
    for (float v : rows_in) m = std::max(m, std::fabs(v));
    p.l.k_scale = p.l.v_scale = m / 448.f;
  }
  DevAct drows(DType::bf16, rows_in);
  Dev<std::int32_t> dslot(slot);
  p.cache = std::make_unique<Dev<std::uint8_t>>(sz(static_cast<long>(total_blocks) * kBs * kQk * k::dtype_bytes(kv)));
  op_ok(k::write_kv_cuda(DType::bf16, drows.p(), drows.p(), total_keys, dslot.p(), p.l, p.cache->p(), nullptr));
  p.bytes = p.cache->get();
  return p;
}

// One step: the tokens `ids` of `specs` (queries q[id]) in one launch sized for max_context.
std::vector<std::uint16_t> gpu_step(const Pool& p, const std::vector<Spec>& specs,
                                    const std::vector<float>& q, const std::vector<int>& ids, int max_context) {
  const int T = static_cast<int>(ids.size());
  const size_t qrow = sz(static_cast<long>(kHeads) * kQk);
  std::vector<float> qs;
  std::vector<std::int32_t> tseq, tpos;
  for (int id : ids) {
    qs.insert(qs.end(), q.begin() + static_cast<long>(sz(id) * qrow), q.begin() + static_cast<long>(sz(id + 1) * qrow));
    tseq.push_back(specs[sz(id)].seq), tpos.push_back(specs[sz(id)].pos);
  }
  DevAct dq(DType::bf16, qs);
  Dev<std::uint16_t> dout(sz(static_cast<long>(T) * kHeads * kVd));
  Dev<std::int32_t> dts(tseq), dtp(tpos), dtable(p.table);
  const size_t ws = k::paged_attention_workspace_bytes(T, kHeads, p.l, max_context);
  Dev<std::uint8_t> dws(ws);
  if (!k::paged_attention_mla_fits(DType::bf16, T, kHeads, p.l)) throw std::runtime_error("not served by the MLA decode kernel");
  op_ok(k::paged_attention_cuda(DType::bf16, dq.p(), T, dts.p(), dtp.p(), kHeads, p.l, p.cache->p(), nullptr, dtable.p(), p.max_blocks,
                                1.f / std::sqrt(256.f), dout.p(), max_context, ws ? dws.p() : nullptr, ws));
  return dout.get();
}

float bf16f(std::uint16_t b) { return k::bf16_to_float(b); }

// long-function: a GPU check script: one pool, its steps in order, a row of the results table each.
void run_split(std::vector<Row>& rows, DType kv, int target) {
  const Pool p = make_pool(kv, {1, 31, 577, 4097, kMaxCtx}, target);
  // Decode tokens (ids 0..4), verification blocks: 570..576 of the 577 (5..11), 4090..4096 of the
  // 4097 (12..18), 32764..32767 of the 32768 (19..22), 24..30 of the 31 (23..29).
  std::vector<Spec> specs;
  for (int s = 0; s < 5; ++s) specs.push_back({s, p.len[sz(s)] - 1});
  for (int pos = 570; pos < 577; ++pos) specs.push_back({2, pos});
  for (int pos = 4090; pos < 4097; ++pos) specs.push_back({3, pos});
  for (int pos = kMaxCtx - 4; pos < kMaxCtx; ++pos) specs.push_back({4, pos});
  for (int pos = 24; pos < 31; ++pos) specs.push_back({1, pos});
  const int N = static_cast<int>(specs.size());
  const size_t qrow = sz(static_cast<long>(kHeads) * kQk), orow = sz(static_cast<long>(kHeads) * kVd);
  const auto q = as_stored(DType::bf16, normal(sz(N) * qrow, 1.f, 73));
  std::vector<float> want(sz(N) * orow);
  {
    std::vector<std::int32_t> tseq, tpos;
    for (const Spec& s : specs) tseq.push_back(s.seq), tpos.push_back(s.pos);
    k::paged_attention_mla_cpu(q.data(), N, tseq.data(), tpos.data(), kHeads, p.l, p.bytes.data(), p.table.data(), p.max_blocks,
                               1.f / std::sqrt(256.f), want.data());
  }
  // Every token alone, in a launch sized for the longest context: the bits the others must give.
  std::vector<std::vector<std::uint16_t>> alone(sz(N));
  for (int i = 0; i < N; ++i) alone[sz(i)] = gpu_step(p, specs, q, {i}, kMaxCtx);
  const std::string dt = std::string("bf16/kv ") + k::dtype_name(kv) + ", " + std::to_string(target);
  auto row_for = [&](const char* what, const std::vector<int>& ids, const std::vector<std::uint16_t>& got) {
    std::vector<float> g, w;
    long differ = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      const size_t id = sz(ids[t]);
      for (size_t e = 0; e < orow; ++e) {
        g.push_back(bf16f(got[t * orow + e]));
        w.push_back(want[id * orow + e]);
        differ += got[t * orow + e] != alone[id][e];
      }
    }
    char shape[96];
    std::snprintf(shape, sizeof shape, "mla own split: %s", what);
    rows.push_back({"paged_attention", shape, dt, max_rel_error(g, w), limit_for(DType::bf16), differ,
                    differ ? "FAIL: bits differ from the token alone" : ""});
  };
  for (int i = 0; i < 5; ++i) {
    char what[64];
    std::snprintf(what, sizeof what, "batch 1, context %d", specs[sz(i)].pos + 1);
    row_for(what, {i}, alone[sz(i)]);
  }
  // Alone again, the launch sized for the token's own context (an eager step's max_context).
  {
    long differ = 0;
    for (int i = 0; i < N; ++i) {
      const auto got = gpu_step(p, specs, q, {i}, specs[sz(i)].pos + 1);
      for (size_t e = 0; e < orow; ++e) differ += got[e] != alone[sz(i)][e];
    }
    rows.push_back({"paged_attention", "mla own split: alone, max_context = own context", dt, 0, -1, differ,
                    differ ? "FAIL: bits depend on max_context" : ""});
  }
  const std::vector<int> b6{4, 0, 2, 3, 1, 9};
  row_for("batch 6, contexts 1..32768", b6, gpu_step(p, specs, q, b6, kMaxCtx));
  const std::vector<int> b16{3, 12, 0, 20, 1, 2, 4, 5, 19, 6, 23, 13, 14, 21, 29, 22};
  row_for("batch 16, contexts 1..32768 + blocks", b16, gpu_step(p, specs, q, b16, kMaxCtx));
  std::vector<int> v4097(7), v32768(4), v577(7), v31(7);
  std::iota(v577.begin(), v577.end(), 5);
  std::iota(v4097.begin(), v4097.end(), 12);
  std::iota(v32768.begin(), v32768.end(), 19);
  std::iota(v31.begin(), v31.end(), 23);
  row_for("verification block 4090..4096", v4097, gpu_step(p, specs, q, v4097, kMaxCtx));
  row_for("verification block 570..576, own max_context", v577, gpu_step(p, specs, q, v577, 577));
  row_for("verification block 24..30", v31, gpu_step(p, specs, q, v31, 32));
  std::vector<int> mixed = v32768;  // a step of two blocks and two decodes
  mixed.insert(mixed.end(), v4097.begin(), v4097.end());
  mixed.push_back(0), mixed.push_back(2);
  row_for("blocks 32764..32767 + 4090..4096 + 2 decodes", mixed, gpu_step(p, specs, q, mixed, kMaxCtx));
}

}  // namespace

void check_mla_split(std::vector<Row>& rows) {
  run_split(rows, DType::bf16, 132);
  run_split(rows, DType::fp8_e4m3, 132);
  run_split(rows, DType::bf16, 8);  // several chunks a split from 257 keys on (TANDEM_ATTN_SPLITS=8)
}

}  // namespace gpu_check
