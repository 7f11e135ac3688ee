// Paged attention on the GPU against attention_paged_cpu over the same (dequantised) cache.
// The cache is written by write_kv_cuda (its bytes checked against the CPU's quantisation first),
// through a shuffled block table; queries are decode tokens (last position of each sequence) and
// a run of prefill tokens, grouped-query heads throughout.
#include <algorithm>
#include <cstdio>
#include <numeric>

#include "gpu_check.hpp"
#include "tandem/kernels/attention.hpp"
#include "tandem/kernels/paged_attention.hpp"
#include "tandem/kernels/rope.hpp"

namespace gpu_check {

namespace k = tandem::kernels;

namespace {

struct Config {
  const char* name;
  DType act, kv;
  int q_heads, kv_heads, qk_dim, v_dim, block_size;
  bool decode_only;  // the 5 decode tokens alone: few blocks, so the keys are split (flash-decoding)
};

float amax(const std::vector<float>& x) {
  float m = 0;
  for (float v : x) m = std::max(m, std::fabs(v));
  return m;
}

// long-function: a GPU check script: one shape, every attention kernel against its CPU reference, a
// row of the results table each, in order.
void run(std::vector<Row>& rows, const Config& c) {
  const std::vector<int> seq_len{1, 17, 300, 1000, 2049};
  const int S = static_cast<int>(seq_len.size()), bs = c.block_size;
  int max_blocks = 0, total_blocks = 0, total_keys = 0;
  for (int n : seq_len) {
    max_blocks = std::max(max_blocks, (n + bs - 1) / bs);
    total_blocks += (n + bs - 1) / bs;
    total_keys += n;
  }
  total_blocks += 3;  // spare blocks nobody uses
  // A shuffled assignment of blocks to sequences.
  std::vector<int> order(static_cast<size_t>(total_blocks));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(41));
  std::vector<std::int32_t> table(static_cast<size_t>(S * max_blocks), 0);
  for (int s = 0, next = 0; s < S; ++s)
    for (int b = 0; b < (seq_len[static_cast<size_t>(s)] + bs - 1) / bs; ++b)
      table[static_cast<size_t>(s * max_blocks + b)] = order[static_cast<size_t>(next++)];

  // New keys and values for every position of every sequence, and their slots.
  const long krow = static_cast<long>(c.kv_heads) * c.qk_dim, vrow = static_cast<long>(c.kv_heads) * c.v_dim;
  const auto knew = as_stored(c.act, normal(static_cast<size_t>(total_keys * krow), 1.f, 42));
  const auto vnew = as_stored(c.act, normal(static_cast<size_t>(total_keys * vrow), 1.f, 43));
  std::vector<std::int32_t> slot;
  for (int s = 0; s < S; ++s)
    for (int j = 0; j < seq_len[static_cast<size_t>(s)]; ++j)
      slot.push_back(table[static_cast<size_t>(s * max_blocks + j / bs)] * bs + j % bs);
  k::PagedKvLayout l;
  l.dtype = c.kv;
  l.block_size = bs;
  l.kv_heads = c.kv_heads;
  l.qk_dim = c.qk_dim;
  l.v_dim = c.v_dim;
  if (c.kv == DType::fp8_e4m3) {  // per-tensor scales, as a calibration would give
    l.k_scale = amax(knew) / 448.f;
    l.v_scale = amax(vnew) / 448.f;
  }
  const size_t slots = sz(static_cast<long>(total_blocks) * bs), eb = static_cast<size_t>(k::dtype_bytes(c.kv));
  DevAct dk(c.act, knew), dv(c.act, vnew);
  Dev<std::int32_t> dslot(slot);
  Dev<std::uint8_t> kc(slots * sz(krow) * eb), vc(slots * sz(vrow) * eb);
  op_ok(k::write_kv_cuda(c.act, dk.p(), dv.p(), total_keys, dslot.p(), l, kc.p(), vc.p()));

  // The CPU's view of the cache: one fp32 pool row per slot, [K heads | V heads], dequantised.
  const long row = krow + vrow;
  std::vector<float> pool(slots * static_cast<size_t>(row), 0.f);
  const auto kbytes = kc.get(), vbytes = vc.get();
  long byte_differ = 0;
  auto stored = [&](const std::vector<std::uint8_t>& bytes, size_t at) {
    if (c.kv == DType::fp8_e4m3) return static_cast<unsigned>(bytes[at]);
    return static_cast<unsigned>(bytes[2 * at] | (bytes[2 * at + 1] << 8));
  };
  auto expect = [&](float x, float scale) {
    return c.kv == DType::fp8_e4m3 ? static_cast<unsigned>(k::fp8_e4m3_from_float(x / scale))
                                   : static_cast<unsigned>(k::bf16_from_float(x));
  };
  for (size_t t = 0; t < slot.size(); ++t) {
    const size_t s = static_cast<size_t>(slot[t]);
    for (long i = 0; i < krow; ++i) {
      const float x = knew[t * static_cast<size_t>(krow) + static_cast<size_t>(i)];
      byte_differ += stored(kbytes, s * static_cast<size_t>(krow) + static_cast<size_t>(i)) != expect(x, l.k_scale);
      pool[s * static_cast<size_t>(row) + static_cast<size_t>(i)] = k::kv_roundtrip_cpu(c.kv, x, l.k_scale);
    }
    for (long i = 0; i < vrow; ++i) {
      const float x = vnew[t * static_cast<size_t>(vrow) + static_cast<size_t>(i)];
      byte_differ += stored(vbytes, s * static_cast<size_t>(vrow) + static_cast<size_t>(i)) != expect(x, l.v_scale);
      pool[s * static_cast<size_t>(row) + static_cast<size_t>(krow + i)] = k::kv_roundtrip_cpu(c.kv, x, l.v_scale);
    }
  }

  // Queries: a decode token per sequence, then 64 prefill tokens of sequence 3 (positions 0..63)
  // and the last 8 of sequence 4.
  std::vector<std::int32_t> tseq, tpos;
  for (int s = 0; s < S; ++s) tseq.push_back(s), tpos.push_back(seq_len[static_cast<size_t>(s)] - 1);
  if (!c.decode_only) {
    for (int p = 0; p < 64; ++p) tseq.push_back(3), tpos.push_back(p);
    for (int p = 2041; p < 2049; ++p) tseq.push_back(4), tpos.push_back(p);
  }
  const int T = static_cast<int>(tseq.size());
  const auto q = as_stored(c.act, normal(sz(static_cast<long>(T) * c.q_heads * c.qk_dim), 1.f, 44));
  const float scale = 1.f / std::sqrt(static_cast<float>(c.qk_dim));
  DevAct dq(c.act, q), dout(c.act, sz(static_cast<long>(T) * c.q_heads * c.v_dim));
  Dev<std::int32_t> dts(tseq), dtp(tpos), dtable(table);
  const size_t ws = k::paged_attention_workspace_bytes(T, c.q_heads, l, 2049);
  Dev<std::uint8_t> dws(ws);
  op_ok(k::paged_attention_cuda(c.act, dq.p(), T, dts.p(), dtp.p(), c.q_heads, l, kc.p(), vc.p(), dtable.p(),
                                max_blocks, scale, dout.p(), 2049, dws.p(), ws));

  k::AttentionShape sh;
  sh.q_heads = c.q_heads;
  sh.kv_heads = c.kv_heads;
  sh.qk_dim = c.qk_dim;
  sh.v_dim = c.v_dim;
  sh.q_stride = static_cast<long>(c.q_heads) * c.qk_dim;
  sh.q_head_stride = c.qk_dim;
  sh.k_head_stride = c.qk_dim;
  sh.v_head_stride = c.v_dim;
  sh.out_stride = static_cast<long>(c.q_heads) * c.v_dim;
  std::vector<float> want(sz(static_cast<long>(T) * c.q_heads * c.v_dim));
  std::vector<int> key_pos(2049);
  std::iota(key_pos.begin(), key_pos.end(), 0);
  for (int t = 0; t < T; ++t) {
    const int s = tseq[static_cast<size_t>(t)];
    k::PagedRows pr{pool.data(), table.data() + s * max_blocks, bs, row};
    const int pos = tpos[static_cast<size_t>(t)];
    k::attention_paged_cpu(q.data() + t * sh.q_stride, &pos, 1, pr, 0, krow, key_pos.data(),
                           seq_len[static_cast<size_t>(s)], want.data() + t * sh.out_stride, sh, scale);
  }
  char shape[96];
  std::snprintf(shape, sizeof shape, "%s: %d/%d heads, d %d/%d, bs %d, %d q%s", c.name, c.q_heads, c.kv_heads,
                c.qk_dim, c.v_dim, bs, T, ws > 0 ? ", split" : "");
  rows.push_back({"paged_attention", shape, std::string(k::dtype_name(c.act)) + "/kv " + k::dtype_name(c.kv),
                  max_rel_error(dout.get(), want), limit_for(c.act), byte_differ, "mismatch: cache bytes"});
}

// The MLA decode kernel (absorbed MLA: one latent row per slot, key and value) against
// paged_attention_mla_cpu over the same cache bytes. Decode tokens of sequences 1..2049 long; with
// `chunk` also 24 prefill tokens in the middle of sequence 3 and the last 8 of sequence 4 (causal
// limits inside a split); without a workspace every block walks its whole context (many chunks).
// With `rope`, the queries' last 64 entries come rotated from a [T][heads][192 + 64] buffer, as the
// model's q_b output holds them (paged_attention_mla_rope_cuda); q's own last 64 are noise then.
struct MlaConfig {
  DType kv;
  int q_heads;
  bool chunk, workspace, rope = false;
  int qk = 576, vd = 512, rd = 64;  // row width, value width, rope entries
};

void run_mla(std::vector<Row>& rows, const MlaConfig& c) {
  const std::vector<int> seq_len{1, 17, 300, 1000, 2049};
  const int S = static_cast<int>(seq_len.size()), bs = 64, qk = c.qk, vd = c.vd;
  int max_blocks = 0, total_blocks = 3, total_keys = 0;
  for (int n : seq_len) max_blocks = std::max(max_blocks, (n + bs - 1) / bs), total_blocks += (n + bs - 1) / bs, total_keys += n;
  std::vector<int> order(static_cast<size_t>(total_blocks));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(51));
  std::vector<std::int32_t> table(static_cast<size_t>(S * max_blocks), 0), slot;
  for (int s = 0, next = 0; s < S; ++s)
    for (int b = 0; b < (seq_len[static_cast<size_t>(s)] + bs - 1) / bs; ++b)
      table[static_cast<size_t>(s * max_blocks + b)] = order[static_cast<size_t>(next++)];
  for (int s = 0; s < S; ++s)
    for (int j = 0; j < seq_len[static_cast<size_t>(s)]; ++j)
      slot.push_back(table[static_cast<size_t>(s * max_blocks + j / bs)] * bs + j % bs);

  k::PagedKvLayout l;
  l.dtype = c.kv, l.block_size = bs, l.kv_heads = 1, l.qk_dim = qk, l.v_dim = vd, l.v_in_k = true;
  const auto rows_in = as_stored(DType::bf16, normal(sz(static_cast<long>(total_keys) * qk), 1.f, 52));
  if (c.kv == DType::fp8_e4m3) l.k_scale = l.v_scale = amax(rows_in) / 448.f;
  DevAct drows(DType::bf16, rows_in);
  Dev<std::int32_t> dslot(slot);
  Dev<std::uint8_t> cache(sz(static_cast<long>(total_blocks) * bs * qk * k::dtype_bytes(c.kv)));
  op_ok(k::write_kv_cuda(DType::bf16, drows.p(), drows.p(), total_keys, dslot.p(), l, cache.p(), nullptr));

  std::vector<std::int32_t> tseq, tpos;
  for (int s = 0; s < S; ++s) tseq.push_back(s), tpos.push_back(seq_len[static_cast<size_t>(s)] - 1);
  if (c.chunk) {
    for (int p = 500; p < 524; ++p) tseq.push_back(3), tpos.push_back(p);
    for (int p = 2041; p < 2049; ++p) tseq.push_back(4), tpos.push_back(p);
  }
  const int T = static_cast<int>(tseq.size());
  auto q = as_stored(DType::bf16, normal(sz(static_cast<long>(T) * c.q_heads * qk), 1.f, 53));
  const float scale = 1.f / std::sqrt(192.f + 64.f);  // the model's 1/sqrt(qk_head_dim), not the latent width
  DevAct dq(DType::bf16, q), dout(DType::bf16, sz(static_cast<long>(T) * c.q_heads * vd));
  Dev<std::int32_t> dts(tseq), dtp(tpos), dtable(table);
  const size_t ws = c.workspace ? k::paged_attention_workspace_bytes(T, c.q_heads, l, 2049) : 0;
  Dev<std::uint8_t> dws(ws);
  const int rd = c.rd, src_w = 192 + rd;
  const auto src = as_stored(DType::bf16, normal(sz(static_cast<long>(T) * c.q_heads * src_w), 1.f, 54));
  std::vector<float> inv_freq(sz(rd / 2));
  k::rope_inv_freq(inv_freq.data(), rd, 1e6);
  DevAct dsrc(DType::bf16, src);
  Dev<float> dfreq(inv_freq);
  if (c.rope) {
    k::MlaQueryRope r;
    r.src = static_cast<const std::uint16_t*>(dsrc.p()) + 192, r.ld = static_cast<long>(c.q_heads) * src_w, r.head_stride = src_w;
    r.dim = rd, r.inv_freq = dfreq.p(), r.interleaved = true;
    op_ok(k::paged_attention_mla_rope_cuda(dq.p(), T, dts.p(), dtp.p(), c.q_heads, l, cache.p(), dtable.p(), max_blocks, scale,
                                           r, dout.p(), 2049, c.workspace ? dws.p() : nullptr, ws));
    // The reference's queries: q's first 512 entries, then the rotated rope entries (bf16-rounded).
    std::vector<float> rot(sz(static_cast<long>(T) * c.q_heads * rd));
    const size_t urd = sz(rd), uw = sz(src_w), uqk = sz(qk);
    for (size_t i = 0; i < rot.size(); ++i) rot[i] = src[i / urd * uw + 192 + i % urd];
    k::rope_tokens_cpu(rot.data(), T, static_cast<long>(c.q_heads) * rd, c.q_heads, rd, rd, inv_freq.data(), tpos.data(),
                       k::RopeLayout::interleaved, true);
    for (size_t i = 0; i < rot.size(); ++i) q[i / urd * uqk + (uqk - urd) + i % urd] = rot[i];
  } else {
    op_ok(k::paged_attention_cuda(DType::bf16, dq.p(), T, dts.p(), dtp.p(), c.q_heads, l, cache.p(), nullptr, dtable.p(),
                                  max_blocks, scale, dout.p(), 2049, c.workspace ? dws.p() : nullptr, ws));
  }

  std::vector<float> want(sz(static_cast<long>(T) * c.q_heads * vd));
  const auto bytes = cache.get();
  k::paged_attention_mla_cpu(q.data(), T, tseq.data(), tpos.data(), c.q_heads, l, bytes.data(), table.data(), max_blocks,
                             scale, want.data());
  char shape[96];
  std::snprintf(shape, sizeof shape, "mla decode kernel%s: %d heads, d %d/%d, bs %d, %d q%s", c.rope ? " + q rope" : "",
                c.q_heads, qk, vd, bs, T, ws > 0 ? ", split" : ", one block a token");
  Row row{"paged_attention", shape, std::string("bf16/kv ") + k::dtype_name(c.kv), max_rel_error(dout.get(), want),
          limit_for(DType::bf16), 0, ""};
  if (!k::paged_attention_mla_fits(DType::bf16, T, c.q_heads, l)) row.note = "FAIL: not served by the MLA decode kernel";
  rows.push_back(row);
}

}  // namespace

void check_attention(std::vector<Row>& rows) {
  run(rows, {"gqa", DType::bf16, DType::bf16, 32, 4, 128, 128, 16, false});
  run(rows, {"gqa", DType::bf16, DType::fp8_e4m3, 32, 4, 128, 128, 16, false});
  run(rows, {"gqa", DType::f32, DType::bf16, 32, 4, 128, 128, 16, false});
  run(rows, {"gqa", DType::f32, DType::fp8_e4m3, 12, 2, 96, 64, 32, false});
  run(rows, {"gqa", DType::bf16, DType::bf16, 16, 2, 256, 256, 16, false});
  run(rows, {"mla-like", DType::bf16, DType::fp8_e4m3, 20, 1, 576, 512, 64, false});
  run(rows, {"decode", DType::bf16, DType::bf16, 32, 4, 128, 128, 16, true});
  run(rows, {"decode", DType::f32, DType::fp8_e4m3, 32, 8, 128, 128, 16, true});
  run(rows, {"decode", DType::bf16, DType::bf16, 12, 4, 256, 256, 16, true});
  run(rows, {"decode mla-like", DType::bf16, DType::fp8_e4m3, 20, 1, 576, 512, 64, true});
  run_mla(rows, {DType::bf16, 20, false, true});
  run_mla(rows, {DType::fp8_e4m3, 20, false, true});
  run_mla(rows, {DType::bf16, 20, true, true});
  run_mla(rows, {DType::fp8_e4m3, 20, true, false});
  run_mla(rows, {DType::bf16, 16, true, false});
  run_mla(rows, {DType::fp8_e4m3, 64, false, true});
  run_mla(rows, {DType::bf16, 40, false, true});
  run_mla(rows, {DType::bf16, 20, false, true, true});
  run_mla(rows, {DType::fp8_e4m3, 20, true, false, true});
  run_mla(rows, {DType::bf16, 4, true, true, true, 40, 32, 8});  // the glm4_moe_lite fixture's shape: 32 + 8 wide
  run_mla(rows, {DType::fp8_e4m3, 4, true, false, false, 40, 32, 8});
}

}  // namespace gpu_check
