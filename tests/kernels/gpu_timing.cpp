// gpu_timing: how long the CUDA kernels take at serving sizes (CUDA events, the mean of 20 runs
// after 3 warm-ups), and the bandwidth that implies against the bytes each must move. Not a check:
// the numbers say where the first versions stand.
#include <cstdio>
#include <cstring>
#include <functional>

#include "gpu_check.hpp"
#include "tandem/kernels/activation.hpp"
#include "tandem/kernels/gemv.hpp"
#include "tandem/kernels/glm5_next.hpp"
#include "tandem/kernels/moe_decode.hpp"
#include "tandem/kernels/moe_routing.hpp"
#include "tandem/kernels/paged_attention.hpp"
#include "tandem/kernels/quant_weights.hpp"
#include "tandem/kernels/rmsnorm.hpp"
#include "tandem/kernels/sampling_cuda.hpp"

using namespace gpu_check;
namespace k = tandem::kernels;

namespace {

double time_us(const std::function<void()>& launch) {
  for (int i = 0; i < 3; ++i) launch();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  for (int i = 0; i < 20; ++i) launch();
  cudaEventRecord(b);
  cuda_ok(cudaEventSynchronize(b), "timing");
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms * 1000.0 / 20;
}

void report(const char* what, double us, double bytes) {
  if (bytes > 0) std::printf("%-62s %10.1f us %9.0f GB/s\n", what, us, bytes / us / 1e3);
  else std::printf("%-62s %10.1f us\n", what, us);
}

void ok(const tandem::Status& err) {
  if (!err) throw std::runtime_error(err.error().text());
}

void attention(DType kv, int seqs, int ctx) {
  const int qh = 32, kvh = 8, d = 128, bs = 16, blocks_per = ctx / bs;
  k::PagedKvLayout l;
  l.dtype = kv;
  l.block_size = bs;
  l.kv_heads = kvh;
  l.qk_dim = l.v_dim = d;
  l.k_scale = l.v_scale = 0.01f;
  const size_t cache = sz(static_cast<long>(seqs) * ctx * kvh * d * k::dtype_bytes(kv));
  Dev<std::uint8_t> kc(cache), vc(cache);
  cuda_ok(cudaMemset(kc.p(), 0x31, cache), "memset");
  cuda_ok(cudaMemset(vc.p(), 0x32, cache), "memset");
  std::vector<std::int32_t> table(sz(static_cast<long>(seqs) * blocks_per)), tseq, tpos;
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<std::int32_t>(i);
  for (int s = 0; s < seqs; ++s) tseq.push_back(s), tpos.push_back(ctx - 1);
  Dev<std::int32_t> dt(table), ds(tseq), dp(tpos);
  DevAct q(DType::bf16, normal(sz(static_cast<long>(seqs) * qh * d), 1.f, 1)), out(DType::bf16, sz(static_cast<long>(seqs) * qh * d));
  const size_t ws = k::paged_attention_workspace_bytes(seqs, qh, l, ctx);
  Dev<std::uint8_t> dws(ws);
  const double us = time_us([&] {
    ok(k::paged_attention_cuda(DType::bf16, q.p(), seqs, ds.p(), dp.p(), qh, l, kc.p(), vc.p(), dt.p(), blocks_per,
                               0.088f, out.p(), ctx, dws.p(), ws));
  });
  char what[96];
  std::snprintf(what, sizeof what, "paged_attention decode, kv %s, %d seqs x %d ctx, 32/8 heads d128", k::dtype_name(kv),
                seqs, ctx);
  report(what, us, 2.0 * static_cast<double>(cache));
}

// The MLA decode attention at GLM-4.7-Flash's shape (20 heads, rows of 512 + 64, pool blocks of 16)
// for `seqs` decode tokens of `ctx` keys each: the split by the step (split_keys of max-model-len
// `max_len`, as TANDEM_ATTN_SPLIT=0 serves) against the split by each token's own context
// (context_splits, `own` its target), launched for max_len as a CUDA graph step is; bytes = the
// latent rows.
void mla_attention(DType kv, int seqs, int ctx, int max_len, int own) {
  const int qh = 20, qk = 576, vd = 512, bs = 16, blocks_per = (max_len + bs - 1) / bs;
  k::PagedKvLayout l;
  l.dtype = kv, l.block_size = bs, l.kv_heads = 1, l.qk_dim = qk, l.v_dim = vd, l.v_in_k = true;
  l.k_scale = l.v_scale = 0.01f;
  if (own > 0) l.context_splits = own;
  else l.split_keys = 32 * (((max_len + 31) / 32 + 255) / 256);
  const long rows = static_cast<long>(seqs) * ((ctx + bs - 1) / bs) * bs;
  const size_t cache = sz(rows * qk * k::dtype_bytes(kv));
  Dev<std::uint8_t> kc(cache);
  cuda_ok(cudaMemset(kc.p(), 0x31, cache), "memset");
  std::vector<std::int32_t> table(sz(static_cast<long>(seqs) * blocks_per), 0), tseq, tpos;
  for (int s = 0, next = 0; s < seqs; ++s)
    for (int b = 0; b < (ctx + bs - 1) / bs; ++b) table[sz(static_cast<long>(s) * blocks_per + b)] = next++;
  for (int s = 0; s < seqs; ++s) tseq.push_back(s), tpos.push_back(ctx - 1);
  Dev<std::int32_t> dt(table), ds(tseq), dp(tpos);
  DevAct q(DType::bf16, normal(sz(static_cast<long>(seqs) * qh * qk), 1.f, 1)), out(DType::bf16, sz(static_cast<long>(seqs) * qh * vd));
  const size_t ws = k::paged_attention_workspace_bytes(seqs, qh, l, max_len);
  Dev<std::uint8_t> dws(ws);
  const double us = time_us([&] {
    ok(k::paged_attention_cuda(DType::bf16, q.p(), seqs, ds.p(), dp.p(), qh, l, kc.p(), nullptr, dt.p(), blocks_per, 0.0625f, out.p(),
                               max_len, dws.p(), ws));
  });
  char what[112];
  if (own > 0)
    std::snprintf(what, sizeof what, "mla decode own split %3d, kv %s, %2d x %5d ctx, max-len %6d", own, k::dtype_name(kv), seqs, ctx, max_len);
  else
    std::snprintf(what, sizeof what, "mla decode step split, kv %s, %2d x %5d ctx, max-len %6d", k::dtype_name(kv), seqs, ctx, max_len);
  report(what, us, static_cast<double>(seqs) * ctx * qk * k::dtype_bytes(kv));
}

// The MoE layer's residual add + RMSNorm + router + routing in one launch at GLM-4.7-Flash's shape
// (hidden 2048, 64 experts in one group, top 4), `tokens` tokens; bytes = the fp32 router, the
// rows read and written.
void norm_router_route(int tokens) {
  const int hidden = 2048, E = 64;
  const k::MoeRouting m{E, 1, 1, 4, true, 1.8f};
  Dev<float> x(normal(sz(static_cast<long>(tokens) * hidden), 1.f, 21)), delta(normal(sz(static_cast<long>(tokens) * hidden), 0.5f, 22));
  Dev<float> router(normal(sz(static_cast<long>(E) * hidden), 0.05f, 23)), bias(normal(sz(E), 0.3f, 24)), w(sz(tokens * 4));
  DevAct norm(DType::bf16, normal(sz(hidden), 0.3f, 25)), h(DType::bf16, sz(static_cast<long>(tokens) * hidden));
  Dev<std::int32_t> e(sz(tokens * 4));
  char what[96];
  std::snprintf(what, sizeof what, "moe_norm_router_route, %2d tokens, hidden 2048, E 64 top 4", tokens);
  report(what, time_us([&] {
           ok(k::moe_norm_router_route_cuda(m, x.p(), delta.p(), norm.p(), 1e-5f, hidden, router.p(), bias.p(), tokens, h.p(), e.p(), w.p()));
         }),
         4.0 * E * hidden + static_cast<double>(tokens) * hidden * (4 * 3 + 2));
}

void sampling(const char* what, k::SamplingParams p) {
  const int rows = 64, V = 151552;
  Dev<float> logits(normal(sz(static_cast<long>(rows) * V), 3.f, 2));
  Dev<k::SamplingParams> params(std::vector<k::SamplingParams>(rows, p));
  Dev<double> u(std::vector<double>(rows, 0.5));
  Dev<k::Sampled> out(rows);
  Dev<std::uint8_t> keep(sz(static_cast<long>(rows) * V));
  report(what, time_us([&] { ok(k::sample_cuda(logits.p(), rows, V, params.p(), u.p(), out.p(), keep.p())); }),
         4.0 * rows * V);
}

// A decode projection over quantised weights: rows x in -> out, bytes = the packed weights and
// their scales (what bounds it), the activations and the output.
void quant_linear(int rows, int in, int out) {
  const long n = static_cast<long>(in) * out;
  Dev<std::uint8_t> w8(sz(n)), w4(sz(n / 2)), s4(sz(n / 16));
  cuda_ok(cudaMemset(w8.p(), 0x38, sz(n)), "memset");
  cuda_ok(cudaMemset(w4.p(), 0x21, sz(n / 2)), "memset");
  cuda_ok(cudaMemset(s4.p(), 0x38, sz(n / 16)), "memset");
  Dev<float> s8(std::vector<float>(sz(static_cast<long>((out + 127) / 128) * ((in + 127) / 128)), 0.01f));
  DevAct x(DType::bf16, normal(sz(static_cast<long>(rows) * in), 1.f, 8));
  Dev<float> y(sz(static_cast<long>(rows) * out));
  const double io = 2.0 * rows * in + 4.0 * rows * out;
  char what[96];
  std::snprintf(what, sizeof what, "linear_fp8_block, %d x %d -> %d", rows, in, out);
  report(what, time_us([&] { ok(k::linear_fp8_block_cuda(DType::bf16, x.p(), w8.p(), s8.p(), y.p(), rows, in, out)); }),
         static_cast<double>(n) + io);
  std::snprintf(what, sizeof what, "linear_nvfp4, %d x %d -> %d", rows, in, out);
  report(what, time_us([&] { ok(k::linear_nvfp4_cuda(DType::bf16, x.p(), w4.p(), s4.p(), 1.f, y.p(), rows, in, out)); }),
         static_cast<double>(n) * (0.5 + 1.0 / 16) + io);
}

// KDA prefill of one sequence of `tokens` in the transformers default's shape (64 heads of 128,
// conv 4, lower bound -5): the token-by-token kernel against the chunked one (chunk 64), both from
// a reset state; the recurrence only (the projections around it are not timed).
void kda_prefill(int tokens) {
  k::KdaShape s;
  s.heads = 64, s.head_dim = 128, s.conv_kernel = 4, s.lower_bound_set = true, s.lower_bound = -5.f;
  const int qk = s.heads * s.head_dim;
  const long n = static_cast<long>(tokens);
  Dev<float> u(normal(sz(n * 3 * qk), 1.f, 11)), g(normal(sz(n * qk), 1.f, 12)), beta(normal(sz(n * s.heads), 1.f, 13));
  Dev<float> gate(normal(sz(n * qk), 1.f, 14)), o(sz(n * qk)), state(sz(k::kda_state_floats(s)));
  Dev<float> conv(normal(sz(3L * qk * s.conv_kernel), 0.5f, 15)), a_log(normal(sz(s.heads), 0.5f, 16));
  Dev<float> dt(normal(sz(qk), 0.5f, 17)), norm(normal(sz(s.head_dim), 1.f, 18));
  Dev<float> scratch(sz(k::kda_chunk_scratch_floats(s, tokens)));
  Dev<std::int32_t> begin(std::vector<std::int32_t>{0, tokens}), slot(std::vector<std::int32_t>{0}),
      reset(std::vector<std::int32_t>{1});
  const k::KdaWeights w{conv.p(), a_log.p(), dt.p(), norm.p()};
  k::KdaIo io;
  io.u = u.p(), io.ld_u = 3 * qk, io.g_raw = g.p(), io.ld_g = qk, io.beta_raw = beta.p(), io.ld_beta = s.heads;
  io.gate_raw = gate.p(), io.ld_gate = qk, io.o = o.p(), io.ld_o = qk;
  const long sf = k::kda_state_floats(s);
  char what[96];
  std::snprintf(what, sizeof what, "kda prefill 1 x %d, 64 heads of 128: token by token", tokens);
  const double by_token = time_us([&] {
    ok(k::kda_recurrent_cuda(s, w, io, 1, begin.p(), slot.p(), reset.p(), state.p(), sf, 0, nullptr));
  });
  report(what, by_token, 0);
  std::snprintf(what, sizeof what, "kda prefill 1 x %d, 64 heads of 128: chunks of 64", tokens);
  const double chunked = time_us([&] {
    ok(k::kda_chunk_cuda(s, w, io, 1, tokens, begin.p(), slot.p(), reset.p(), state.p(), sf, 0, 64, scratch.p(), nullptr));
  });
  report(what, chunked, 0);
  std::printf("%-62s %10.2f x (%.0f tokens/s chunked, %.0f token by token)\n", "  speed-up", by_token / chunked,
              tokens / chunked * 1e6, tokens / by_token * 1e6);
  for (int chunk : {16, 32}) {  // how the cost moves with the chunk (the per-chunk part grows with it)
    std::snprintf(what, sizeof what, "kda prefill 1 x %d, 64 heads of 128: chunks of %d", tokens, chunk);
    report(what, time_us([&] {
             ok(k::kda_chunk_cuda(s, w, io, 1, tokens, begin.p(), slot.p(), reset.p(), state.p(), sf, 0, chunk, scratch.p(),
                                  nullptr));
           }),
           0);
  }
}

// The decode products of hf_bench.py's 2 B model at `rows` x rows (a batch of that many tokens):
// weight bytes over time. TANDEM_GEMV_SHARED_ROWS (gemv.cu) picks the kernel's weight rows a warp.
void gemv_2b(int rows) {
  struct Shape {
    const char* name;
    int in, out, groups;
    bool silu;
  };
  for (const Shape& sh : {Shape{"in_proj (q_a | kv_a)", 2048, 1344, 1, false}, Shape{"q_b", 768, 5120, 1, false},
                          Shape{"absorb query (20 heads)", 192, 512, 20, false}, Shape{"values (20 heads)", 512, 256, 20, false},
                          Shape{"o_proj", 5120, 2048, 1, false}, Shape{"dense gate_up + silu", 2048, 10240, 1, true},
                          Shape{"dense down", 10240, 2048, 1, false}, Shape{"lm_head", 2048, 151552, 1, false}}) {
    const int wrows = sh.silu ? 2 * sh.out : sh.out;
    const long w_elems = static_cast<long>(sh.groups) * wrows * sh.in;
    DevAct x(DType::bf16, normal(sz(static_cast<long>(rows) * sh.groups * sh.in), 1.f, 71));
    DevAct w(DType::bf16, sz(w_elems)), y(DType::bf16, sz(static_cast<long>(rows) * sh.groups * sh.out));
    k::GemvArgs a;
    a.rows = rows, a.in = sh.in, a.out = sh.out, a.groups = sh.groups, a.x = x.p(), a.ldx = static_cast<long>(sh.groups) * sh.in;
    a.x_group = sh.in, a.w = w.p(), a.ldw = sh.in, a.w_group = static_cast<long>(wrows) * sh.in, a.y = y.p();
    a.ldy = static_cast<long>(sh.groups) * sh.out, a.y_group = sh.out, a.y_type = DType::bf16, a.silu_mul = sh.silu, a.up_offset = sh.out;
    char what[96];
    std::snprintf(what, sizeof what, "gemv %s, %d rows", sh.name, rows);
    report(what, time_us([&] { ok(k::gemv_cuda(a, nullptr)); }), 2.0 * static_cast<double>(w_elems));
  }
}

// The 2 B model's routed + shared experts at `tokens` tokens (32 experts, top 4, 2048 x 768,
// shared 768; token t's experts (7 t + 3 j) % 32): the bytes of the experts in use over time.
void moe_2b(int tokens) {
  const int E = 32, K = 4, hidden = 2048, width = 768;
  DevAct x(DType::bf16, normal(sz(static_cast<long>(tokens) * hidden), 1.f, 81));
  DevAct gu(DType::bf16, sz(static_cast<long>(E) * 2 * width * hidden)), dn(DType::bf16, sz(static_cast<long>(E) * hidden * width));
  DevAct sgu(DType::bf16, sz(2L * width * hidden)), sdn(DType::bf16, sz(static_cast<long>(hidden) * width));
  DevAct act(DType::bf16, sz(static_cast<long>(tokens) * (K + 1) * width));
  Dev<float> out(sz(static_cast<long>(tokens) * hidden)), weight(normal(sz(static_cast<long>(tokens) * K), 0.5f, 82));
  std::vector<std::int32_t> expert(sz(static_cast<long>(tokens) * K));
  std::vector<bool> used(E, false);
  for (int t = 0; t < tokens; ++t)
    for (int j = 0; j < K; ++j) used[sz((7 * t + 3 * j) % E)] = true, expert[sz(t * K + j)] = (7 * t + 3 * j) % E;
  int n_used = 0;
  for (bool u : used) n_used += u;
  Dev<std::int32_t> dexp(expert), groups(sz(k::moe_decode_group_ints(E, K, tokens)));
  k::MoeDecodeArgs a;
  a.tokens = tokens, a.top_k = K, a.hidden = hidden, a.width = width, a.x = x.p(), a.expert = dexp.p(), a.weight = weight.p();
  a.gate_up = gu.p(), a.down = dn.p(), a.shared_gate_up = sgu.p(), a.shared_down = sdn.p(), a.shared_width = width;
  a.act = act.p(), a.out = out.p(), a.experts = E, a.groups = tokens > 1 ? groups.p() : nullptr;
  char what[96];
  std::snprintf(what, sizeof what, "moe_decode %s, %d tokens, %d experts in use", a.groups ? "grouped" : "per pair", tokens, n_used);
  report(what, time_us([&] { ok(k::moe_decode_cuda(a, nullptr)); }), 3.0 * 2 * width * hidden * (n_used + 1));
}

}  // namespace

// Arguments, if any: `kda` times only the KDA prefill, `mla` only the MLA decode attention (and
// the MoE norm + router + route at the same shape), `decode2b` the 2 B model's decode products
// and experts at 1, 6 and 16 rows.
int main(int argc, char** argv) {
  if (!k::cuda_device_present()) {
    std::puts("SKIP: no CUDA device");
    return 77;
  }
  try {
    if (argc > 1 && std::strcmp(argv[1], "mla") == 0) {
      // One chunk (no combine): the decode kernel's own latency.
      for (int ctx : {32, 577}) mla_attention(DType::bf16, 1, ctx, ctx, 132);
      for (DType kv : {DType::bf16, DType::fp8_e4m3})
        for (int seqs : {1, 6, 16})
          for (int ctx : {577, 4097, 32768}) {
            if (kv == DType::fp8_e4m3 && ctx != 577 && seqs != 1) continue;
            // The bench's max-model-len (prompt + decode + a margin) and a serving one.
            mla_attention(kv, seqs, ctx, ctx + 100, 0);
            mla_attention(kv, seqs, ctx, 131072, 0);
            mla_attention(kv, seqs, ctx, 131072, 132);
          }
      for (int tokens : {1, 6, 16}) norm_router_route(tokens);
      // Fewer, longer splits (TANDEM_ATTN_SPLITS): the partials and the combine's reads shrink,
      // each block walks more chunks.
      for (int seqs : {1, 16})
        for (int ctx : {577, 4097})
          for (int target : {33, 16, 8, 4}) mla_attention(DType::bf16, seqs, ctx, ctx + 100, target);
      return 0;
    }
    if (argc > 1 && std::strcmp(argv[1], "decode2b") == 0) {
      for (int rows : {1, 6, 16}) gemv_2b(rows);
      for (int tokens : {1, 6, 16}) moe_2b(tokens);
      return 0;
    }
    if (argc > 1 && std::strcmp(argv[1], "kda") == 0) {
      kda_prefill(512);
      kda_prefill(32768);
      return 0;
    }
    const int tokens = 4096, hidden = 4096, inter = 1408;
    DevAct x(DType::bf16, normal(sz(static_cast<long>(tokens) * hidden), 1.f, 3)), r(DType::bf16, x.get()),
        w(DType::bf16, normal(sz(hidden), 1.f, 4)), y(DType::bf16, sz(static_cast<long>(tokens) * hidden));
    report("rmsnorm_residual bf16, 4096 x 4096", time_us([&] {
             ok(k::rmsnorm_residual_cuda(DType::bf16, x.p(), r.p(), w.p(), y.p(), tokens, hidden, 1e-5f));
           }),
           4.0 * 2 * tokens * hidden);
    DevAct gu(DType::bf16, normal(sz(2L * tokens * inter), 1.f, 5)), act(DType::bf16, sz(static_cast<long>(tokens) * inter));
    report("silu_and_mul bf16, 4096 x 1408", time_us([&] {
             ok(k::silu_and_mul_cuda(DType::bf16, gu.p(), act.p(), tokens, inter));
           }),
           3.0 * 2 * tokens * inter);
    k::MoeRouting m{160, 1, 1, 8, true, 2.5f};
    Dev<float> rl(normal(sz(64L * 160), 1.f, 6)), bias(normal(160, 0.1f, 7));
    Dev<std::int32_t> e(64 * 8);
    Dev<float> ew(64 * 8);
    report("moe_route, 64 tokens, E 160 top 8", time_us([&] { ok(k::moe_route_cuda(m, rl.p(), bias.p(), 64, e.p(), ew.p())); }), 0);
    sampling("sample greedy, 64 rows x 151552", {0.f, 0, 1.f, 0.f});
    sampling("sample T 0.7 top_k 50, 64 rows x 151552", {0.7f, 50, 1.f, 0.f});
    sampling("sample T 0.7 top_k 50 top_p 0.9, 64 rows x 151552", {0.7f, 50, 0.9f, 0.f});
    sampling("sample T 0.7 top_p 0.9 (whole vocab), 64 rows x 151552", {0.7f, 0, 0.9f, 0.f});
    attention(DType::bf16, 1, 4096);
    attention(DType::bf16, 64, 4096);
    attention(DType::fp8_e4m3, 64, 4096);
    attention(DType::bf16, 1, 32768);
    attention(DType::fp8_e4m3, 1, 32768);
    attention(DType::bf16, 8, 8192);
    quant_linear(1, 4096, 12288);
    quant_linear(8, 4096, 12288);
    quant_linear(16, 4096, 12288);
    quant_linear(1, 2048, 1536);
    kda_prefill(512);
    kda_prefill(32768);
  } catch (const std::exception& ex) {
    std::printf("FAIL: %s\n", ex.what());
    return 1;
  }
  return 0;
}
