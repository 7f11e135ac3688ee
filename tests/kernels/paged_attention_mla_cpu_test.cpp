// paged_attention_mla_cpu (the MLA decode kernel's CPU reference, which reads the pool's bytes)
// against attention_paged_cpu over the same pool dequantised to fp32, and the rule that says
// which calls the MLA decode kernel serves.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "tandem/kernels/attention.hpp"
#include "tandem/kernels/paged_attention.hpp"

using namespace tandem::kernels;

namespace {

// Sequences of 5 and 11 rows through a shuffled block table of 4-row blocks; 3 query heads over
// rows of 24 entries whose first 16 are the value; token 0 decodes sequence 0, tokens 1..3 are
// positions 6, 9 and 10 of sequence 1.
void check_against_paged(DType kv) {
  const int bs = 4, qk = 24, vd = 16, heads = 3, max_blocks = 3, blocks = 6;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> rows(static_cast<size_t>(blocks * bs * qk));
  for (auto& x : rows) x = normal(rng);
  PagedKvLayout l;
  l.dtype = kv, l.block_size = bs, l.kv_heads = 1, l.qk_dim = qk, l.v_dim = vd, l.v_in_k = true;
  if (kv == DType::fp8_e4m3) l.k_scale = l.v_scale = 0.01f;
  // The pool's bytes and the fp32 values they read back as.
  const size_t eb = kv == DType::fp8_e4m3 ? 1 : 2;
  std::vector<std::uint8_t> bytes(rows.size() * eb);
  std::vector<float> pool(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    if (kv == DType::fp8_e4m3) {
      bytes[i] = fp8_e4m3_from_float(rows[i] / l.k_scale);
      pool[i] = fp8_e4m3_to_float(bytes[i]) * l.k_scale;
    } else {
      const std::uint16_t b = bf16_from_float(rows[i]);
      std::memcpy(bytes.data() + 2 * i, &b, 2);
      pool[i] = bf16_to_float(b);
    }
  }
  std::vector<std::int32_t> order(blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  const std::vector<std::int32_t> table{order[0], order[1], 0, order[2], order[3], order[4]};  // [2][max_blocks]
  const std::vector<std::int32_t> seq{0, 1, 1, 1}, pos{4, 6, 9, 10};
  const int T = static_cast<int>(seq.size());
  std::vector<float> q(static_cast<size_t>(T * heads * qk));
  for (auto& x : q) x = normal(rng);
  const float scale = 0.3f;
  std::vector<float> got(static_cast<size_t>(T * heads * vd)), want(got.size());
  paged_attention_mla_cpu(q.data(), T, seq.data(), pos.data(), heads, l, bytes.data(), table.data(), max_blocks, scale,
                          got.data());

  AttentionShape s;
  s.q_heads = heads, s.kv_heads = 1, s.qk_dim = qk, s.v_dim = vd;
  s.q_head_stride = qk, s.k_head_stride = qk, s.v_head_stride = qk;
  std::vector<int> key_pos(11);
  std::iota(key_pos.begin(), key_pos.end(), 0);
  for (int t = 0; t < T; ++t) {
    const PagedRows pr{pool.data(), table.data() + seq[static_cast<size_t>(t)] * max_blocks, bs, qk};
    const int n_kv = seq[static_cast<size_t>(t)] == 0 ? 5 : 11, p = pos[static_cast<size_t>(t)];
    attention_paged_cpu(q.data() + t * heads * qk, &p, 1, pr, 0, 0, key_pos.data(), n_kv, want.data() + t * heads * vd, s, scale);
  }
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
  CHECK(worst < 1e-5);
}

}  // namespace

TEST_CASE("paged_attention_mla_cpu equals attention_paged_cpu over the dequantised pool") {
  SUBCASE("bf16 rows") { check_against_paged(DType::bf16); }
  SUBCASE("fp8_e4m3 rows with a scale") { check_against_paged(DType::fp8_e4m3); }
}

TEST_CASE("paged_attention_mla_fits: absorbed MLA, bf16 activations, few tokens") {
  PagedKvLayout l;
  l.dtype = DType::bf16, l.block_size = 64, l.kv_heads = 1, l.qk_dim = 576, l.v_dim = 512, l.v_in_k = true;
  CHECK(paged_attention_mla_fits(DType::bf16, 1, 20, l));
  CHECK(paged_attention_mla_fits(DType::bf16, kMlaDecodeMaxTokens, 64, l));
  CHECK_FALSE(paged_attention_mla_fits(DType::f32, 1, 20, l));
  CHECK_FALSE(paged_attention_mla_fits(DType::bf16, kMlaDecodeMaxTokens + 1, 20, l));
  CHECK_FALSE(paged_attention_mla_fits(DType::bf16, 1, 65, l));
  PagedKvLayout gqa = l;
  gqa.v_in_k = false;
  CHECK_FALSE(paged_attention_mla_fits(DType::bf16, 1, 20, gqa));
  PagedKvLayout two = l;
  two.kv_heads = 2;
  CHECK_FALSE(paged_attention_mla_fits(DType::bf16, 1, 20, two));
  PagedKvLayout odd = l;
  odd.qk_dim = 572;
  CHECK_FALSE(paged_attention_mla_fits(DType::bf16, 1, 20, odd));
  PagedKvLayout small = l;
  small.qk_dim = 40, small.v_dim = 32;  // the glm4_moe_lite fixture's row
  CHECK(paged_attention_mla_fits(DType::bf16, 3, 4, small));
}

// The split of a context by its own length (PagedKvLayout::context_splits), which the MLA decode
// kernel and its launch both follow: whole chunks of 32 keys, at most `target` splits, the splits
// covering the context exactly with no empty one, and the counts the GPU checks rely on.
TEST_CASE("mla_context_splits: whole chunks, at most the target, every key in one non-empty split") {
  for (int target : {1, 4, 8, 33, 132}) {
    for (int n = 1; n <= 40000; n += (n < 2200 ? 1 : 97)) {
      const int per = mla_chunks_per_split(n, target) * kMlaChunk, splits = mla_context_splits(n, target);
      const int chunks = (n + kMlaChunk - 1) / kMlaChunk;
      CHECK(splits >= 1);
      CHECK(splits <= std::min(chunks, target));
      CHECK(static_cast<long>(splits - 1) * per < n);  // the last split starts inside the context
      CHECK(static_cast<long>(splits) * per >= n);     // and the splits reach its end
    }
  }
  CHECK(mla_context_splits(1, 132) == 1);
  CHECK(mla_context_splits(31, 132) == 1);
  CHECK(mla_context_splits(33, 132) == 2);
  CHECK(mla_context_splits(577, 132) == 19);  // a split per chunk
  CHECK(mla_context_splits(4097, 132) == 129);
  CHECK(mla_chunks_per_split(32768, 132) == 8);
  CHECK(mla_context_splits(32768, 132) == 128);
  CHECK(mla_chunks_per_split(577, 8) == 3);
  CHECK(mla_context_splits(577, 8) == 7);
}
