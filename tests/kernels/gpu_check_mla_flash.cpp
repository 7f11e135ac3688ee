// The flash MLA prefill kernel (mla_prefill.hpp) against paged_attention_mla_cpu: several prompts of
// different lengths in one launch, chunks that start mid-sequence (their earlier context already
// in the pool), tokens of two sequences interleaved, odd head counts and row widths, block
// tables shuffled, bf16 and fp8 pools; and bitwise: a prompt's tokens must give the same bits
// whether the prompt comes in one launch or in chunks of odd sizes (issue 22's chunk independence).
// Two bars (flash_row, gpu_check.hpp): normwise and per element. A single key of a
// few hundred left out would shift outputs by about 1e-3 normwise, under that noise: the
// bitwise chunking check and cuda_model_check's prompts are where such a mask bug shows.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>

#include "gpu_check.hpp"
#include "tandem/kernels/mla_prefill.hpp"
#include "tandem/kernels/paged_attention.hpp"

namespace gpu_check {

namespace k = tandem::kernels;

namespace {

struct Shape {
  int heads, qk, vd, block_size;
};

// Sequences of the given lengths, every row written, their blocks shuffled over the pool.
struct Pool {
  Shape s;
  std::vector<int> len;
  std::vector<std::int32_t> table;
  int max_blocks = 0;
  k::PagedKvLayout l;
  std::vector<std::uint8_t> bytes;  // the cache as written, for the CPU reference
  std::unique_ptr<Dev<std::uint8_t>> cache;
};

Pool make_pool(const Shape& s, DType kv, const std::vector<int>& len, std::uint32_t seed) {
  Pool p;
  p.s = s, p.len = len;
  const int bs = s.block_size;
  int total_blocks = 3, total_keys = 0;
  for (int n : len) p.max_blocks = std::max(p.max_blocks, (n + bs - 1) / bs), total_blocks += (n + bs - 1) / bs, total_keys += n;
  std::vector<int> order(sz(total_blocks));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  p.table.assign(sz(static_cast<long>(len.size()) * p.max_blocks), 0);
  std::vector<std::int32_t> slot;
  for (size_t q = 0, next = 0; q < len.size(); ++q)
    for (int b = 0; b < (len[q] + bs - 1) / bs; ++b) p.table[q * sz(p.max_blocks) + sz(b)] = order[next++];
  for (size_t q = 0; q < len.size(); ++q)
    for (int j = 0; j < len[q]; ++j) slot.push_back(p.table[q * sz(p.max_blocks) + sz(j / bs)] * bs + j % bs);
  p.l.dtype = kv, p.l.block_size = bs, p.l.kv_heads = 1, p.l.qk_dim = s.qk, p.l.v_dim = s.vd, p.l.v_in_k = true;
  const auto rows_in = as_stored(DType::bf16, normal(sz(static_cast<long>(total_keys) * s.qk), 1.f, seed + 1));
  if (kv == DType::fp8_e4m3) {
    float m = 0;
    for (float v : rows_in) m = std::max(m, std::fabs(v));
    p.l.k_scale = p.l.v_scale = m / 448.f;
  }
  DevAct drows(DType::bf16, rows_in);
  Dev<std::int32_t> dslot(slot);
  p.cache = std::make_unique<Dev<std::uint8_t>>(sz(static_cast<long>(total_blocks) * bs * s.qk * k::dtype_bytes(kv)));
  cuda_ok(cudaMemset(p.cache->p(), 0xff, sz(static_cast<long>(total_blocks) * bs * s.qk * k::dtype_bytes(kv))), "poison");  // NaN rows
  op_ok(k::write_kv_cuda(DType::bf16, drows.p(), drows.p(), total_keys, dslot.p(), p.l, p.cache->p(), nullptr));
  p.bytes = p.cache->get();
  return p;
}

struct Tok {
  int seq, pos;
};

float scale_of(const Shape& s) { return 1.f / std::sqrt(static_cast<float>(s.qk) / 3.f); }

// The launch over `toks` (queries q: a row of heads x qk per token), bf16 bits out.
std::vector<std::uint16_t> gpu_run(const Pool& p, const std::vector<Tok>& toks, const std::vector<float>& q) {
  const int T = static_cast<int>(toks.size());
  std::vector<std::int32_t> tseq, tpos;
  for (const Tok& t : toks) tseq.push_back(t.seq), tpos.push_back(t.pos);
  DevAct dq(DType::bf16, q);
  Dev<std::uint16_t> dout(sz(static_cast<long>(T) * p.s.heads * p.s.vd));
  Dev<std::int32_t> dts(tseq), dtp(tpos), dtable(p.table);
  op_ok(k::mla_prefill_flash_cuda(dq.p(), T, dts.p(), dtp.p(), p.s.heads, p.l, p.cache->p(), dtable.p(), p.max_blocks, scale_of(p.s),
                                  dout.p()));
  return dout.get();
}

std::vector<float> cpu_run(const Pool& p, const std::vector<Tok>& toks, const std::vector<float>& q) {
  std::vector<std::int32_t> tseq, tpos;
  for (const Tok& t : toks) tseq.push_back(t.seq), tpos.push_back(t.pos);
  std::vector<float> out(toks.size() * sz(static_cast<long>(p.s.heads) * p.s.vd));
  k::paged_attention_mla_cpu(q.data(), static_cast<int>(toks.size()), tseq.data(), tpos.data(), p.s.heads, p.l, p.bytes.data(),
                             p.table.data(), p.max_blocks, scale_of(p.s), out.data());
  return out;
}

std::vector<float> to_float(const std::vector<std::uint16_t>& b) {
  std::vector<float> x(b.size());
  for (size_t i = 0; i < b.size(); ++i) x[i] = k::bf16_to_float(b[i]);
  return x;
}

std::string dt_of(const Pool& p) { return std::string("bf16/kv ") + k::dtype_name(p.l.dtype); }

// One launch of `toks` against the CPU reference, a row of the table.
std::vector<std::uint16_t> check_launch(std::vector<Row>& rows, const Pool& p, const std::vector<Tok>& toks, const char* what,
                                        std::uint32_t seed) {
  const auto q = as_stored(DType::bf16, normal(toks.size() * sz(static_cast<long>(p.s.heads) * p.s.qk), 1.f, seed));
  const auto got = gpu_run(p, toks, q);
  char shape[96];
  std::snprintf(shape, sizeof shape, "%s, %dh %d/%d bs%d", what, p.s.heads, p.s.qk, p.s.vd, p.s.block_size);
  rows.push_back(flash_row("mla_prefill_flash", shape, dt_of(p), to_float(got), cpu_run(p, toks, q), 0, ""));
  return got;
}

std::vector<Tok> prompt(int seq, int from, int to) {  // positions from .. to - 1
  std::vector<Tok> t;
  for (int i = from; i < to; ++i) t.push_back({seq, i});
  return t;
}

// long-function: a GPU check script: the pool's launches in order, a row of the results table each.
void run_shape(std::vector<Row>& rows, const Shape& s, DType kv) {
  const Pool p = make_pool(s, kv, {1, 77, 300, 130, 64}, 91);
  // Whole prompts of lengths 1, 77, 130 and 64 in one launch.
  std::vector<Tok> all = prompt(0, 0, 1);
  for (int q : {1, 3, 4}) {
    const auto part = prompt(q, 0, p.len[sz(q)]);
    all.insert(all.end(), part.begin(), part.end());
  }
  check_launch(rows, p, all, "prompts 1+77+130+64", 92);
  // Chunks starting mid-sequence: 300's keys 129..228 and 130's 70..129 (the rest already cached).
  std::vector<Tok> mid = prompt(2, 129, 229);
  const auto tail = prompt(3, 70, 130);
  mid.insert(mid.end(), tail.begin(), tail.end());
  check_launch(rows, p, mid, "chunks from 129 and 70", 93);
  // Tokens of two sequences interleaved (a tile holds several runs of each).
  std::vector<Tok> mixed;
  for (int i = 0; i < 40; ++i) mixed.push_back({i % 2 ? 1 : 2, i % 2 ? 30 + i : 250 + i});
  check_launch(rows, p, mixed, "two sequences interleaved", 94);
}

// A 300-token prompt in one launch and in chunks 0..46, 47..170, 171..299: the same bits a token.
void run_chunking(std::vector<Row>& rows, const Shape& s, DType kv) {
  const Pool p = make_pool(s, kv, {300}, 95);
  const auto toks = prompt(0, 0, 300);
  const size_t row = sz(static_cast<long>(s.heads) * s.qk), orow = sz(static_cast<long>(s.heads) * s.vd);
  const auto q = as_stored(DType::bf16, normal(toks.size() * row, 1.f, 96));
  const auto whole = gpu_run(p, toks, q);
  long differ = 0;
  for (auto [from, to] : {std::pair{0, 47}, std::pair{47, 171}, std::pair{171, 300}}) {
    const std::vector<Tok> part(toks.begin() + from, toks.begin() + to);
    const std::vector<float> qp(q.begin() + static_cast<long>(sz(from) * row), q.begin() + static_cast<long>(sz(to) * row));
    const auto got = gpu_run(p, part, qp);
    for (size_t e = 0; e < got.size(); ++e) differ += got[e] != whole[sz(from) * orow + e];
  }
  rows.push_back(flash_row("mla_prefill_flash", "300 tokens whole vs chunks 47+124+129, 20h", dt_of(p), to_float(whole), cpu_run(p, toks, q), differ,
                           differ ? "FAIL: bits depend on the chunking" : ""));
}

// GLM-4.7-Flash's shape; odd heads; widths that are not multiples of 16 (72 / 40); the fixtures'.
const Shape glm{20, 576, 512, 64}, odd{7, 576, 512, 16}, small{3, 72, 40, 32}, fixture{4, 40, 32, 16};

bool device_fits(std::vector<Row>& rows) {
  k::PagedKvLayout l;
  l.block_size = 64, l.kv_heads = 1, l.qk_dim = 576, l.v_dim = 512, l.v_in_k = true;
  if (k::mla_prefill_flash_fits(DType::bf16, glm.heads, l)) return true;
  rows.push_back({"mla_prefill_flash", "-", "-", 0, -1, 0, "FAIL: the kernel does not fit this device"});
  return false;
}

}  // namespace

void check_mla_flash(std::vector<Row>& rows) {
  if (!device_fits(rows)) return;
  run_shape(rows, glm, DType::bf16);
  run_shape(rows, glm, DType::fp8_e4m3);
  run_shape(rows, odd, DType::bf16);
  run_shape(rows, small, DType::bf16);
  run_shape(rows, small, DType::fp8_e4m3);
  run_shape(rows, fixture, DType::bf16);
  run_chunking(rows, glm, DType::bf16);
  run_chunking(rows, glm, DType::fp8_e4m3);
}

// The small shapes alone (for compute-sanitizer's racecheck, which is slow on the big ones).
void check_mla_flash_small(std::vector<Row>& rows) {
  if (!device_fits(rows)) return;
  run_shape(rows, small, DType::bf16);
  run_shape(rows, fixture, DType::fp8_e4m3);
}

}  // namespace gpu_check
