// The GLM decoder on CUDA (cuda_decoder.hpp), one step: inputs staged, the forward enqueued, decode
// replayed from CUDA graphs (cuda_model.hpp); the FFN (dense, or routed experts + shared experts)
// and the residual adds fused into the next RMSNorm. And glm4_moe_lite's attention (absorbed MLA),
// per layer, with T tokens of every sequence of the step at once:
//   fused = x W_in^T (+b)            W_in = [q_a | kv_a] (or [q_proj | kv_a] without a query LoRA)
//   q     = q_b(rmsnorm(fused[:, q_a]))                          [T, heads, nope + rope]
//   latent= [rmsnorm(c), rope(kr)] = fused[:, kv_a] normalised and rotated; written to the pool
//   Q     = [q_nope . W_kb[h], rope(q_rope)]   per head            [T, heads, kv_lora + rope]
//   O     = paged attention of Q over the latents (the value is the latent itself)
//   attn  = O . W_v[h]^T per head; delta = o_proj(attn)
// The math and names follow glm4_moe_lite.cpp, the CPU reference it is checked against.
#include <algorithm>
#include <cmath>

#include "cuda_glm4_moe_lite.hpp"
#include "tandem/kernels/capture.hpp"
#include "tandem/kernels/glue.hpp"
#include "tandem/kernels/mla_prefill.hpp"
#include "tandem/kernels/activation.hpp"
#include "tandem/kernels/embedding.hpp"
#include "tandem/kernels/moe_decode.hpp"
#include "tandem/kernels/quant_gemv.hpp"
#include "tandem/kernels/moe_experts.hpp"
#include "tandem/kernels/moe_routing.hpp"
#include "tandem/kernels/sampling_cuda.hpp"
#include "tandem/kernels/skinny_gemm.hpp"
#include "tandem/kernels/rope.hpp"
#include "tandem/kernels/cuda_check.hpp"

namespace tandem::model::cuda {

Result<std::vector<float>> GlmDecoderCuda::step(std::span<const PagedWork> work) {
  int R = 0;
  for (const PagedWork& w : work) R += logit_rows(w);
  const std::size_t row = static_cast<std::size_t>(V_);
  const std::size_t n = static_cast<std::size_t>(R) * row;
  // Into the pinned staging where it fits (run() checks R before any pass runs).
  std::vector<float> out;
  const bool pinned = R <= r_cap_ && host_logits_for(n);
  if (!pinned) out.resize(n);
  float* dst = pinned ? host_logits_ : out.data();
  auto rows = run(work, [&](std::span<const int> to) { return item_rows_to_host(dst, logits_.get(), row * 4, to, "logits"); });
  if (!rows) return rows.error();
  if (auto e = sync(); !e) return e.error();
  if (pinned) out.assign(host_logits_, host_logits_ + n);
  return out;
}

bool GlmDecoderCuda::host_logits_for(std::size_t n) {
  if (n <= host_logits_floats_) return true;
  if (n * 4 > kHostLogitsBytes) return false;
  // Grown to a power of two of rows' worth, so a few steps of rising size do not each reallocate.
  std::size_t want = static_cast<std::size_t>(V_);
  while (want < n) want *= 2;
  want = std::min(want, kHostLogitsBytes / 4);
  if (host_logits_) cudaFreeHost(host_logits_);
  host_logits_ = nullptr, host_logits_floats_ = 0;
  void* p = nullptr;
  if (cudaMallocHost(&p, want * 4) != cudaSuccess) {
    (void)cudaGetLastError();  // the pageable copy serves instead
    return false;
  }
  host_logits_ = static_cast<float*>(p), host_logits_floats_ = want;
  return true;
}

Result<std::vector<k::Sampled>> GlmDecoderCuda::step_sample(std::span<const PagedWork> work, std::span<const k::SamplingParams> params,
                                                            std::span<const double> uniforms) {
  auto all_greedy = begin_step_sample(work, params, uniforms, sample_params_, uniform_, static_cast<std::size_t>(r_cap_), sample_params_greedy_);
  if (!all_greedy) return all_greedy.error();
  const bool greedy = *all_greedy;
  std::vector<k::Sampled> got(params.size());
  std::deque<SamplingRows> staged;  // each pass's rows, until sync()
  auto rows = run(work, [&](std::span<const int> to) {
    const int n = static_cast<int>(to.size());
    if (n == 0) return Status(Ok{});
    FirstError err;
    const int computed = pick_.empty() ? n : pick_.back() + 1;  // a padded graph step's rows
    if (!greedy) {
      err(stage_sampling_rows(params, uniforms, pick_, to, computed, sample_params_, uniform_, stream_, staged));
      sample_params_greedy_ = false;
    }
    // One block a row: the token with its raw logprob.
    err(k::sample_cuda(logits_.as<float>(), computed, V_, sample_params_.as<k::SamplingParams>(), uniform_.as<double>(),
                       sampled_.as<k::Sampled>(), keep_.as<std::uint8_t>(), stream_));
    mark(greedy ? "sample (sampler, greedy)" : "sample (sampler)", static_cast<double>(computed) * V_ * 4);
    err(item_rows_to_host(got.data(), sampled_.get(), sizeof(k::Sampled), to, "sampled tokens"));
    return err.status;
  });
  if (!rows) return rows.error();
  if (auto e = sync(); !e) return e.error();
  return got;
}

Result<std::vector<std::int32_t>> GlmDecoderCuda::step_greedy(std::span<const PagedWork> work) {
  // Without the decode kernels: the sampler's greedy row, as before the argmax kernel.
  if (!opt_.decode_kernels) return greedy_tokens_by_sampling(*this, work);
  std::vector<std::int32_t> ids;
  int R = 0;
  for (const PagedWork& w : work) R += logit_rows(w);
  std::vector<unsigned long long> keys(static_cast<std::size_t>(R));
  auto rows = run(work, [&](std::span<const int> to) {
    const int n = static_cast<int>(to.size());
    if (n == 0) return Status(Ok{});
    FirstError err;
    const int computed = pick_.empty() ? n : pick_.back() + 1;  // a padded graph step's rows
    err(k::argmax_rows_cuda(logits_.as<float>(), computed, V_, argmax_keys_.as<unsigned long long>(), stream_));
    mark("sample (argmax)", static_cast<double>(computed) * V_ * 4);
    err(item_rows_to_host(keys.data(), argmax_keys_.get(), sizeof(unsigned long long), to, "tokens"));
    return err.status;
  });
  if (!rows) return rows.error();
  if (auto e = sync(); !e) return e.error();
  for (const auto key : keys) ids.push_back(k::argmax_key_index(key));
  return ids;
}

Status GlmDecoderCuda::item_rows_to_host(void* dst, const void* src, std::size_t row_bytes, std::span<const int> to, const char* what) {
  auto* d = static_cast<char*>(dst);
  const auto* from = static_cast<const char*>(src);
  // One copy per run of consecutive rows (an item's block is one run).
  FirstError err;
  for (const RowRun& r : row_runs(pick_, to))
    err(TANDEM_CUDA_STATUS(cudaMemcpyAsync(d + static_cast<std::size_t>(r.to) * row_bytes, from + static_cast<std::size_t>(r.from) * row_bytes,
                                           static_cast<std::size_t>(r.n) * row_bytes, cudaMemcpyDeviceToHost, stream_),
                           what));
  return err.status;
}

Result<int> GlmDecoderCuda::run(std::span<const PagedWork> work, const Deliver& deliver) {
  if (pool_.empty()) return error("CUDA model: make_device_pool first");
  const int S = static_cast<int>(work.size());
  if (S == 0) return 0;
  if (S > s_cap_) return error("CUDA step: " + std::to_string(S) + " sequences, more than max-num-seqs " + std::to_string(s_cap_));
  int T = 0, R = 0;
  for (const PagedWork& w : work) {
    if (w.tokens.empty()) return error("CUDA step: an item without tokens");
    if (auto bad = check_work_item(w, max_len_, block_size_, num_blocks_, V_); !bad) return bad.error();
    T += static_cast<int>(w.tokens.size()), R += logit_rows(w);
  }
  if (T > t_cap_) return error("CUDA step: " + std::to_string(T) + " tokens, more than the " + std::to_string(t_cap_) + " a step holds");
  if (R > r_cap_)
    return error("CUDA step: " + std::to_string(R) + " logit rows, more than the " + std::to_string(r_cap_) +
                 " it was sized for (CudaOptions::max_logit_rows)");
  // Without the decode-sized kernels (a benchmark's reference): one pass of everything, as before.
  const auto passes = opt_.decode_kernels ? plan_step_passes(work, invariant_chunk(), opt_.group_prefill)
                                          : plan_step_passes(work, 0, true);
  if (trace_ && passes.size() > 1)
    return error("step_traced: a step of " + std::to_string(passes.size()) +
                 " forward passes (decode-class and prefill-class sequences, or several prompts): trace them apart");
  FirstError err;
  // Several passes: each one's captured rows (its tokens, in its order, from row 0) go to their
  // rows of the step in capture_tmp_, then back into captured_ (what captured() shows). The
  // decode-class pass goes first: a padded graph step gathers its rows through capture_tmp_.
  const bool merge = passes.size() > 1 && !capture_layers_.empty();
  const std::size_t cap_row = capture_layers_.size() * static_cast<std::size_t>(H_) * 2;
  std::vector<PagedWork> items;
  for (const StepPass& p : passes) {
    if (!err.ok()) break;
    items.clear();
    for (int s : p.items) items.push_back(work[static_cast<std::size_t>(s)]);
    err(run_pass(items, p.invariant));
    if (err.ok()) err(deliver(p.rows));
    if (!merge || !err.ok()) continue;
    for (const RowRun& r : row_runs({}, p.tokens))
      err(TANDEM_CUDA_STATUS(cudaMemcpyAsync(capture_tmp_.as<char>() + static_cast<std::size_t>(r.to) * cap_row,
                                             captured_.as<char>() + static_cast<std::size_t>(r.from) * cap_row,
                                             static_cast<std::size_t>(r.n) * cap_row, cudaMemcpyDeviceToDevice, stream_),
                             "captured rows of a pass"));
  }
  if (merge && err.ok())
    err(TANDEM_CUDA_STATUS(cudaMemcpyAsync(captured_.get(), capture_tmp_.get(), static_cast<std::size_t>(T) * cap_row,
                                           cudaMemcpyDeviceToDevice, stream_),
                           "captured rows"));
  if (!err.ok()) return err.status.error().with_context("CUDA step");
  return R;
}

// long-function: a pass's staging (buckets, graph padding, tables, one input copy), then eager run or graph replay.
Status GlmDecoderCuda::run_pass(std::span<const PagedWork> work, bool invariant) {
  const int S = static_cast<int>(work.size());
  int T = 0, R = 0, max_context = 0;
  bool decode = true;
  for (const PagedWork& w : work) {
    const int n = static_cast<int>(w.tokens.size());
    T += n, R += logit_rows(w), max_context = std::max(max_context, w.start + n);
    decode = decode && n == 1 && (w.logits || w.all_logits);
  }
  invariant_pass_ = invariant;
  FirstError err;
  // The previous pass's input copy may still be waiting on the stream: host_in_ is restaged after it.
  if (!staged_) err(TANDEM_CUDA_STATUS(cudaEventCreateWithFlags(&staged_, cudaEventDisableTiming), "staging event"));
  else err(TANDEM_CUDA_STATUS(cudaEventSynchronize(staged_), "the last pass's input copy"));
  if (!err.ok()) return err.status;

  // A speculative verification (blocks of up to n tokens with every row's logits, beside decodes)
  // repeats its shape from step to step as decode does, so it replays a graph too, per (bucket, n):
  // each item is padded to n tokens (mixed draft lengths included). A padding token belongs to a
  // sequence that owns only the scratch block (table row B), so it writes and reads nothing of a
  // real one; the kernels are batch-invariant, so the real tokens' results are those of an eager
  // step. pick_ then names the graph's logit rows that are the items' rows.
  // (At TP > 1 only over a transport whose collectives can be captured: NCCL, not host-staged.)
  // (A prefill-class pass runs eagerly: its kernels are not batch-invariant, so padding would
  // change its rows; without the decode-sized kernels, graphs as before.)
  const bool graphs = (invariant || !opt_.decode_kernels) && !opt_.enforce_eager &&
                      (!multi_rank() || (all_reduce_ && all_reduce_->capturable()));
  bool graph = decode && graphs;
  int per = 1;  // tokens of each sequence in a graph step
  pick_.clear();
  if (!decode && graphs) {
    int n = 0;
    bool fits = true;
    for (const PagedWork& w : work) {
      const int m = static_cast<int>(w.tokens.size());
      fits = fits && (w.all_logits || (w.logits && m == 1)) && w.start + m <= max_len_;
      n = std::max(n, m);
    }
    fits = fits && n <= block_size_;  // a padding sequence's n rows fit the scratch block
    const int b = std::min(next_pow2(S), s_cap_);
    if (fits && b * n <= t_cap_ && b * n <= r_cap_) graph = true, per = n;
  }
  const int B = graph ? std::min(next_pow2(S), s_cap_) : S;  // padded to the graph's bucket
  step_sequences_.clear();
  for (int s = 0, first = 0; s < S && !graph; ++s) {
    const PagedWork& w = work[static_cast<std::size_t>(s)];
    step_sequences_.push_back({first, static_cast<int>(w.tokens.size()), w.start});
    first += static_cast<int>(w.tokens.size());
  }
  std::int32_t* tok = host_in_;
  std::int32_t* pos = tok + t_cap_;
  std::int32_t* seq = pos + t_cap_;
  std::int32_t* rows = seq + t_cap_;
  std::int32_t* local = rows + r_cap_;
  std::int32_t* tables = local + t_cap_;
  const std::size_t mb = static_cast<std::size_t>(max_blocks_);
  int t = 0, r = 0;
  for (int s = 0; s < B; ++s) {
    std::int32_t* table = tables + static_cast<std::size_t>(s) * mb;
    if (s >= S) {  // padding: token 0 at positions 0.. of a sequence that owns only the scratch block
      std::fill(table, table + mb, num_blocks_);
      for (int i = 0; i < per; ++i) tok[t] = 0, pos[t] = i, seq[t] = s, rows[r++] = t, ++t;
      continue;
    }
    const PagedWork& w = work[static_cast<std::size_t>(s)];
    const std::size_t have = std::min(mb, w.block_table.size());
    std::copy(w.block_table.begin(), w.block_table.begin() + static_cast<long>(have), table);
    std::fill(table + have, table + mb, num_blocks_);
    const int first = t;
    for (std::size_t i = 0; i < w.tokens.size(); ++i, ++t)
      tok[t] = w.tokens[i], pos[t] = w.start + static_cast<int>(i), seq[t] = s;
    if (w.all_logits)
      for (int i = first; i < t; ++i) rows[r++] = i;
    else if (w.logits)
      rows[r++] = t - 1;
    if (graph && per > 1) {
      for (int i = first; i < t && (w.all_logits || i == t - 1); ++i) pick_.push_back(i);
      // Token 0 at positions 0.. of the scratch sequence, as the padding sequences have: every
      // padding run writes the same rows there, before reading them, whatever runs share the step.
      for (int i = 0; t - first < per; ++i, ++t) tok[t] = 0, pos[t] = i, seq[t] = B;
    }
  }
  if (static_cast<int>(pick_.size()) == B * per) pick_.clear();  // every row is an item's: no picking
  // The drafter reads the captured rows in the items' token order (T rows): a step whose items were
  // padded inside gathers them back, by the real tokens' places staged in the rows input (which a
  // graph step does not read otherwise).
  bool padded = false;
  if (graph && per > 1) {
    int at = 0, real = 0;
    for (const PagedWork& w : work) {
      const int m = static_cast<int>(w.tokens.size());
      padded = padded || m < per;
      for (int i = 0; i < m; ++i) rows[real++] = at + i;
      at += per;
    }
  }
  const bool regather = padded && !capture_layers_.empty();
  // The scratch sequence's table (padding tokens of mixed lengths): one row past the bucket's.
  const int table_rows = graph && per > 1 ? B + 1 : B;
  if (table_rows > B) std::fill(tables + static_cast<std::size_t>(B) * mb, tables + static_cast<std::size_t>(B + 1) * mb, num_blocks_);
  for (int i = 0; i < t; ++i) local[i] = tok[i] - vocab_.begin;
  // One copy of the staged inputs (the host buffer has the device buffer's layout) up to the last
  // table used: a copy costs microseconds of host time whatever its size, and a decode step is short.
  const std::size_t ints = static_cast<std::size_t>(tables - tok) + static_cast<std::size_t>(table_rows) * mb;
  err(TANDEM_CUDA_STATUS(cudaMemcpyAsync(in_tokens(), tok, ints * 4, cudaMemcpyHostToDevice, stream_), "step inputs"));
  err(TANDEM_CUDA_STATUS(cudaEventRecord(staged_, stream_), "staging event"));
  if (!err.ok()) return err.status;
  if (calibrate_) {
    // Before any graph is captured (graphs bake the scales in); a graph step's staged rows are padded.
    err(calibrate(graph ? B * per : T, graph ? B * per : R, max_context));
    if (!err.ok()) return err.status;
  }
  mark("start", 0);

  if (graph) {
    if (auto it = graphs_.find({B, per}); it != graphs_.end()) {
      err(TANDEM_CUDA_STATUS(cudaGraphLaunch(it->second, stream_), "graph launch"));
      mark("graph (whole forward)", 0);
    } else {
      // First step of this size: run it eagerly (which also plans its GEMMs), then capture the
      // same enqueue, attending up to max-model-len so the graph serves every later context.
      err(enqueue(B * per, B * per, max_context));
      if (err.ok()) err(capture(B, per));
    }
  } else {
    err(enqueue(T, R, max_context));
  }
  if (regather) {
    const int width = static_cast<int>(capture_layers_.size()) * H_;
    err(kernels::gather_rows(captured_.get(), width, in_rows(), T, capture_tmp_.get(), stream_));
    err(TANDEM_CUDA_STATUS(cudaMemcpyAsync(captured_.get(), capture_tmp_.get(), static_cast<std::size_t>(T) * static_cast<std::size_t>(width) * 2,
                                   cudaMemcpyDeviceToDevice, stream_),
                   "captured rows"));
  }
  return err.status;
}

Status GlmDecoderCuda::capture(int B, int per) {
  capturing_ = true;
  auto exec = capture_graph(stream_, [&] { return enqueue(B * per, B * per, max_len_); },
                            "step graph of " + std::to_string(B) + " x " + std::to_string(per) + " tokens");
  capturing_ = false;
  if (!exec) return exec.error();
  graphs_[{B, per}] = exec.value();
  return {};
}

Status GlmDecoderCuda::calibrate(int T, int R, int max_context) {
  const std::size_t L = kv_scales_.size();
  FirstError err;
  // (Each slice of reduction groups measures its own rows, as its rank would.)
  err(for_each_slice([&] {
    FirstError e;
    if (kv_amax_.empty()) e(kv_amax_.allocate(L * 4, "KV amax"));
    e(TANDEM_CUDA_STATUS(cudaMemsetAsync(kv_amax_.get(), 0, L * 4, stream_), "KV amax"));
    return e.status;
  }));
  measuring_ = true;
  err(enqueue(T, R, max_context));
  measuring_ = false;
  err(for_each_slice([&] {
    FirstError e;
    std::vector<float> amax(L);
    e(TANDEM_CUDA_STATUS(cudaMemcpyAsync(amax.data(), kv_amax_.get(), L * 4, cudaMemcpyDeviceToHost, stream_), "KV amax"));
    e(TANDEM_CUDA_STATUS(cudaStreamSynchronize(stream_), "KV scale calibration"));
    if (e.ok())
      for (std::size_t l = 0; l < L; ++l) kv_scales_[l] = fp8_kv_scale_from_amax(amax[l]);
    return e.status;
  }));
  if (!err.ok()) return err.status;
  calibrate_ = false;
  return {};
}

Status GlmDecoderCuda::sync() {
  if (multi_rank() && all_reduce_) return all_reduce_->wait(stream_);
  return TANDEM_CUDA_STATUS(cudaStreamSynchronize(stream_), "step");
}

Status GlmDecoderCuda::all_reduce(DeviceBuffer& b, int rows, int width, k::DType type) {
  if (!multi_rank()) return Ok{};
  if (!all_reduce_) return Error{"tensor-parallel rank " + std::to_string(tp_rank_) + " has no device all-reduce (set_all_reduce)"};
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(width > 0 ? width : H_);
  auto s = all_reduce_->all_reduce_sum(b.get(), n, type, stream_);
  return s;
}

Status GlmDecoderCuda::gemm(const k::GemmArgs& g) {
  if (g.batch == 1 && g.w_trans && g.xw_type == kBf16 && few()) {  // bias of y's type
    k::GemvArgs v;
    v.rows = g.rows, v.in = g.in, v.out = g.out;
    v.x = g.x, v.ldx = g.ldx, v.w = g.w, v.ldw = g.ldw, v.bias = g.bias, v.y = g.y, v.ldy = g.ldy, v.y_type = g.y_type;
    if (k::gemv_fits(v)) return k::gemv_cuda(v, stream_);
  }
  // (The few-rows kernel's bias is bf16; fp32 outputs carry fp32 biases, which go to cuBLASLt.)
  if (g.batch == 1 && g.w_trans && g.xw_type == kBf16 && g.rows <= opt_.skinny_rows && k::skinny_gemm_fits(g.x, g.ldx, g.w, g.in) &&
      !(g.bias && g.y_type != kBf16))
    return k::skinny_gemm_cuda(g.x, g.ldx, g.rows, g.w, g.in, g.out, g.bias, g.y, g.ldy, g.y_type, stream_);
  return gemm_->run(g, stream_);
}

Status GlmDecoderCuda::quant_gemv(k::QuantGemvArgs v, int T) {
  const std::size_t y_bytes = v.y_type == kBf16 ? 2 : 4;
  FirstError err;
  for (int r0 = 0; r0 < T && err.ok(); r0 += k::kGemvMaxRows) {
    v.rows = std::min(k::kGemvMaxRows, T - r0);
    err(k::quant_gemv_cuda(v, stream_));
    v.x = static_cast<const std::uint16_t*>(v.x) + static_cast<long>(k::kGemvMaxRows) * v.ldx;
    v.y = static_cast<char*>(v.y) + static_cast<std::size_t>(k::kGemvMaxRows) * static_cast<std::size_t>(v.ldy) * y_bytes;
  }
  return err.status;
}

Status GlmDecoderCuda::qgemm(k::GemmArgs g, const QuantWeight& q) {
  if (!q.on()) return gemm(g);
  if (g.batch == 1 && g.w_trans && g.xw_type == kBf16 && few_quant(g.rows)) {
    k::QuantGemvArgs v;
    v.rows = std::min(g.rows, k::kGemvMaxRows), v.x = g.x, v.ldx = g.ldx, v.w = q.a.m, v.w2 = q.b.m;
    v.bias = g.bias, v.y = g.y, v.ldy = g.ldy, v.y_type = g.y_type;
    if (k::quant_gemv_fits(v)) return quant_gemv(v, g.rows);
  }
  if (auto e = dequant_bf16(q, wscratch_.as<std::uint16_t>(), stream_); !e) return e;
  g.w = wscratch_.get(), g.ldw = g.in;
  return gemm(g);
}

bool GlmDecoderCuda::experts_fuse_silu(const QuantWeight& q) const {
  return fused_silu_ && grouped_mma_ && grouped_wgmma_ && k::grouped_wgmma_ready() && !(q.on() && experts_read_quantised(q));
}

k::WgmmaTile GlmDecoderCuda::wgmma_tile(int T) const {
  // 128-pair tiles in 3 stages (each weight tile staged once for up to 128 pairs, two blocks an
  // SM) where experts average 256 pairs or more, else 64 pairs in 4 stages. Measured on an H100
  // (engine/bench/results/h100-s13-tiles2-2026-12-07.md): 128 x 3 took a 1 x 4096 step (512 pairs
  // an expert) from 13.3 to 13.0-13.1 ms and a 1 x 512 step (64) from 2.6-2.7 to 2.9.
  const bool wide = static_cast<long>(T) * K_ >= 256L * E_;
  k::WgmmaTile tile;
  tile.pairs = wgmma_tile_pairs_ ? wgmma_tile_pairs_ : wide ? 128 : 64;
  tile.stages = wgmma_stages_ ? wgmma_stages_ : wide ? 3 : 4;
  return tile;
}

Status GlmDecoderCuda::expert_gemm(const void* x, long ldx, const std::int32_t* gather, const DeviceBuffer& w, const QuantWeight& q,
                                   int n, int k, void* y, long ldy, int T, bool silu) {
  const auto* offsets = offsets_.as<std::int32_t>();
  const int E = experts_.size();
  const auto form = !grouped_mma_                                ? k::GroupedForm::rows
                    : grouped_wgmma_ && k::grouped_wgmma_ready() ? k::GroupedForm::wgmma
                                                                 : k::GroupedForm::mma;
  const k::WgmmaTile tile = wgmma_tile(T);
  auto bf16_stack = [&](const void* stack) {
    return silu ? k::grouped_gemm_silu_cuda(x, ldx, gather, offsets, E, stack, n, k, y, ldy, stream_, tile)
                : k::grouped_gemm_cuda(x, ldx, gather, offsets, E, stack, n, k, y, ldy, stream_, form, tile);
  };
  if (silu && !experts_fuse_silu(q)) return Error{"expert_gemm: the fused SiLU needs the wgmma form on bf16 experts"};
  if (!q.on()) return bf16_stack(w.get());
  if (experts_read_quantised(q)) return k::grouped_gemm_quant_cuda(x, ldx, gather, offsets, E, q.a.m, y, ldy, stream_);
  if (auto e = dequant_bf16(q, wscratch_.as<std::uint16_t>(), stream_); !e) return e;
  return bf16_stack(wscratch_.get());
}

Status GlmDecoderCuda::enqueue(int T, int R, int max_context) {
  const DecoderConfig& d = d_;
  const float eps = static_cast<float>(d.rms_norm_eps);
  const double act = static_cast<double>(T) * H_;  // entries of one [T, hidden] activation
  FirstError err;
  // Vocabulary-parallel: a rank embeds the ids in its rows (the others as zeros) and the ranks' rows
  // are summed, which is exact (one term is not zero).
  err(k::embedding_cuda(kBf16, embed_.get(), multi_rank() ? vocab_.size() : V_, H_, multi_rank() ? in_local_tokens() : in_tokens(), T,
                        embed_rows_.get(), stream_));
  err(all_reduce(embed_rows_, T, H_, kBf16));
  err(TANDEM_CUDA_STATUS(cudaMemsetAsync(x_.get(), 0, static_cast<std::size_t>(T) * static_cast<std::size_t>(H_) * 4, stream_), "zero"));
  mark("embedding", act * 2 * 2 + act * 4);
  for (int l = 0; l < d.num_hidden_layers && err.ok(); ++l) {
    const Layer& a = layers_[static_cast<std::size_t>(l)];
    // x += delta (the embedding, or the last FFN's output); h = rmsnorm(x)
    // The first layer adds the embedding rows (bf16), the others the last FFN's output (fp32).
    err(kernels::add_rmsnorm(x_.as<float>(), l == 0 ? embed_rows_.get() : delta_.get(), l == 0 ? kBf16 : k::DType::f32,
                    a.input_norm.get(), h_.get(), T, H_, eps, stream_));
    mark("add_rmsnorm", act * (4 * 2 + 4 + 2));
    if (l > 0) err(trace(TracePoint::after_ffn, l - 1, T));
    if (l > 0) err(capture_layer(l - 1, T));
    err(reduce(l, T, [&](const Layer& slice) { return attention(l, slice, T, max_context); }));
    // The router's launch does the add and norm, where the row fits its shared memory.
    const bool fold_norm = a.moe && moe_decodes(a, T) && k::moe_norm_router_route_fits(H_, E_, d_.moe.n_group);
    if (!fold_norm) {
      err(kernels::add_rmsnorm(x_.as<float>(), delta_.get(), k::DType::f32, a.post_norm.get(), h_.get(), T, H_, eps, stream_,
                      a.moe ? h32_.as<float>() : nullptr));
      mark("add_rmsnorm", act * (4 * 2 + 4 + 2));
    }
    // With fold_norm the router's launch adds the attention's output: moe traces the residual then.
    if (fold_norm) trace_layer_ = l;
    else err(trace(TracePoint::after_attention, l, T));
    err(reduce(l, T, [&](const Layer& slice) { return slice.moe ? moe(slice, T, fold_norm) : mlp(slice.dense, T, delta_.get()); }));
  }
  err(kernels::add_rmsnorm(x_.as<float>(), delta_.get(), k::DType::f32, final_norm_.get(), h_.get(), T, H_, eps, stream_));
  mark("add_rmsnorm", act * (4 * 2 + 4 + 2));
  err(trace(TracePoint::after_ffn, d.num_hidden_layers - 1, T));
  err(capture_layer(d.num_hidden_layers - 1, T));
  if (R > 0) {
    // Every token a logits row (T == R: decode) means the rows in order: no gather.
    const void* rows = h_.get();
    if (R != T) {
      err(kernels::gather_rows(h_.get(), H_, in_rows(), R, head_in_.get(), stream_));
      rows = head_in_.get();
    }
    // Vocabulary-parallel: each rank writes its columns of zeroed rows, and the sum over the ranks
    // is the gather of the logits (exact: every entry has one term), through the same seam.
    // (Reduction groups: each slice's columns, as that rank writes them; together every column.)
    if (multi_rank())
      err(TANDEM_CUDA_STATUS(cudaMemsetAsync(logits_.get(), 0, static_cast<std::size_t>(R) * static_cast<std::size_t>(V_) * 4, stream_),
                     "zero logits"));
    err(for_each_slice([&] {
      k::GemmArgs g = linear(rows, slices_ > 1 ? slice_head_ : head_.empty() ? embed_ : head_, logits_.as<float>() + vocab_.begin, R, H_,
                             vocab_.size());
      g.ldy = V_;
      g.y_type = k::DType::f32;
      return gemm(g);
    }));
    err(all_reduce(logits_, R, V_));
    mark("lm_head", 2.0 * vocab_.size() * H_ + 4.0 * R * V_);
  }
  return err.status;
}

Status GlmDecoderCuda::capture_layer(int layer, int T) {
  FirstError err;
  const int n = static_cast<int>(capture_layers_.size());
  for (int j = 0; j < n; ++j)
    if (capture_layers_[static_cast<std::size_t>(j)] == layer)
      err(kernels::rows_to_bf16(x_.as<float>(), H_, T, captured_.as<std::uint16_t>() + static_cast<long>(j) * H_,
                       static_cast<long>(n) * H_, stream_));
  return err.status;
}

// long-function: one layer's MLA launches, in the order they run and are marked for profiling (in_proj .. out_proj).
Status Glm4MoeLiteCuda::attention(int l, const Layer& a, int T, int max_context) {
  FirstError err;
  auto* fused = fused_.as<std::uint16_t>();
  k::GemmArgs in = linear(h_.get(), a.w_in, fused, T, H_, in_rows_);
  in.bias = a.b_in.get();
  err(qgemm(in, a.w_in_q));
  mark("attn in_proj (q_a | kv_a)", weight_read(a.w_in_q, 2.0 * in_rows_ * H_));
  const long qw = static_cast<long>(heads_) * qk_;
  const auto layout = c_.rope_interleave ? k::RopeLayout::interleaved : k::RopeLayout::half;
  std::uint16_t* latent = fused + q_rows_;
  char* layer_pool = pool_.as<char>() + static_cast<std::size_t>(l) * layer_bytes_;
  const double kv_row = static_cast<double>(width_) * k::dtype_bytes(kv_type_);
  // A prefill-class step's rotary angles, once for all layers (few-token steps form theirs in the
  // kernels, behind their programmatic-launch wait).
  const double* angles = few() ? nullptr : rope_angles_.as<double>();
  if (angles && l == 0) {
    err(k::rope_angles_cuda(inv_freq_.as<float>(), in_pos(), T, rope_, rope_angles_.as<double>(), stream_));
    mark("attn rope angles (once a step)", 4.0 * T + 8.0 * T * rope_);
  }
  // The LoRA norms, the key's rotation and the latent's write into the pool: one launch, except in
  // a prefill that measures the fp8 cache's scales (latent_amax reads the normalised latent rows),
  // which runs them one by one (the same roundings: glue.hpp), as does CudaOptions::decode_kernels
  // off.
  if (opt_.decode_kernels && !measuring_) {
    kernels::LatentPrep p;
    p.angles = angles;
    p.fused = fused, p.ld = in_rows_, p.tokens = T, p.lora_q = lora_q_, p.kv_at = q_rows_, p.lora_kv = lora_kv_;
    p.rope_dim = rope_, p.q_norm = a.q_a_norm.get(), p.qlat = qlat_.get(), p.kv_norm = a.kv_a_norm.get();
    p.eps = kLoraNormEps, p.inv_freq = inv_freq_.as<float>(), p.interleaved = c_.rope_interleave;
    p.token_seq = in_seq(), p.token_pos = in_pos(), p.block_tables = in_tables(), p.max_blocks = max_blocks_;
    p.block_size = block_size_, p.cache_type = kv_type_, p.scale = kv_scales_[static_cast<std::size_t>(l)], p.cache = layer_pool;
    err(kernels::latent_prep(p, stream_));
    mark("attn latent prep (norms, rope, cache write)", 2.0 * T * in_rows_ * 2 + T * kv_row);
    if (trace_) {
      // The cache row latent_prep wrote, for the trace: the unfused glue on the latent part of the
      // fused rows, which nothing reads after latent_prep (the same roundings: glue.hpp).
      err(kernels::rmsnorm_rows(latent, in_rows_, T, lora_kv_, a.kv_a_norm.get(), latent, in_rows_, kLoraNormEps, stream_));
      err(k::rope_cuda(kBf16, latent + lora_kv_, T, in_rows_, 1, rope_, rope_, inv_freq_.as<float>(), in_pos(), layout, stream_));
      err(trace(TracePoint::latent, l, T));
    }
  } else {
    if (lora_q_ > 0) {
      err(kernels::rmsnorm_rows(fused, in_rows_, T, lora_q_, a.q_a_norm.get(), qlat_.get(), lora_q_, kLoraNormEps, stream_));
      mark("attn q_a norm", 4.0 * T * lora_q_);
    }
    // The latent row: rmsnorm(c), rope(kr), into the pool.
    err(kernels::rmsnorm_rows(latent, in_rows_, T, lora_kv_, a.kv_a_norm.get(), latent, in_rows_, kLoraNormEps, stream_));
    mark("attn kv_a norm", 4.0 * T * lora_kv_);
    err(k::rope_cuda(kBf16, latent + lora_kv_, T, in_rows_, 1, rope_, rope_, inv_freq_.as<float>(), in_pos(), layout, stream_));
    mark("attn rope (key)", 4.0 * T * rope_);
    err(trace(TracePoint::latent, l, T));
    if (measuring_) err(kernels::latent_amax(latent, in_rows_, T, width_, kv_amax_.as<float>() + l, stream_));
    err(kernels::latent_cache_write(latent, in_rows_, T, width_, in_seq(), in_pos(), in_tables(), max_blocks_, block_size_, kv_type_,
                           kv_scales_[static_cast<std::size_t>(l)], layer_pool, stream_));
    mark("attn cache write", T * (2.0 * width_ + kv_row));
  }
  if (lora_q_ > 0) {
    err(qgemm(linear(qlat_.get(), a.q_b, q_.get(), T, lora_q_, static_cast<int>(qw)), a.q_b_q));
    mark("attn q_b", weight_read(a.q_b_q, 2.0 * static_cast<double>(qw) * lora_q_));
  }

  // The attention proper, into attn_ ([T, heads * v_dim]): un-absorbed where the step fits it
  // (cuda_glm4_moe_lite_mha.cpp), else in the latent space.
  err(mha_prefill(l, T) ? mha_attention(l, a, T, layer_pool) : absorbed_attention(l, a, T, max_context, layer_pool));
  k::GemmArgs o = linear(attn_.get(), a.o, delta_.get(), T, heads_ * vd_, H_);
  o.bias = a.o_bias.get();  // fp32, as the output
  o.y_type = k::DType::f32;
  err(qgemm(o, a.o_q));
  mark("attn o_proj", weight_read(a.o_q, 2.0 * H_ * heads_ * vd_));
  return err.status;
}

// long-function: the absorbed query, the attention kernel of the step's class, the values' projection.
Status Glm4MoeLiteCuda::absorbed_attention(int l, const Layer& a, int T, int max_context, const char* layer_pool) {
  FirstError err;
  auto* fused = fused_.as<std::uint16_t>();
  const long qw = static_cast<long>(heads_) * qk_;
  const auto layout = c_.rope_interleave ? k::RopeLayout::interleaved : k::RopeLayout::half;
  const double kv_row = static_cast<double>(width_) * k::dtype_bytes(kv_type_);
  // Absorbed query: q_nope[h] . W_kb[h] (W_kb[h] = kv_b rows h*(nope+vd) .. +nope, [nope, kv_lora]).
  const long kvb_stride = static_cast<long>(nope_ + vd_) * lora_kv_;
  auto* qattn = qattn_.as<std::uint16_t>();
  k::GemvArgs ab;  // over kb_t: [heads][lora_kv][nope]
  ab.rows = T, ab.in = nope_, ab.out = lora_kv_, ab.groups = heads_;
  // Without a query LoRA the query is the first qw entries of the fused rows: the gemv and the
  // attention's rope read it there (no copy into q_) where the rope is done in the attention.
  const bool q_in_fused = lora_q_ == 0;
  const std::uint16_t* q_src = q_in_fused ? fused : q_.as<std::uint16_t>();
  const long q_ld = q_in_fused ? in_rows_ : qw;
  ab.x = q_src, ab.ldx = q_ld, ab.x_group = qk_;
  ab.w = a.kb_t.get(), ab.ldw = nope_, ab.w_group = static_cast<long>(lora_kv_) * nope_;
  ab.y = qattn, ab.ldy = static_cast<long>(heads_) * width_, ab.y_group = width_;
  // The MLA decode kernel rotates the query's rope part itself as it loads the queries (one launch
  // fewer) when the absorbed product comes from the gemv.
  // (It serves up to kMlaDecodeMaxTokens tokens a launch; more take several, each token's result
  // the same either way: the split of its keys is fixed, attn_layout.)
  const int mla_tokens = std::min(T, k::kMlaDecodeMaxTokens);
  const bool rope_in_attention = few() && !a.kb_t.empty() && k::gemv_fits(ab) &&
                                 k::paged_attention_mla_fits(kBf16, mla_tokens, heads_, attn_layout(l)) && (lora_kv_ % 8 == 0);
  if (q_in_fused && !rope_in_attention) {  // the other paths read the query from q_
    err(TANDEM_CUDA_STATUS(cudaMemcpy2DAsync(q_.get(), static_cast<std::size_t>(qw) * 2, fused, static_cast<std::size_t>(in_rows_) * 2,
                                     static_cast<std::size_t>(qw) * 2, static_cast<std::size_t>(T), cudaMemcpyDeviceToDevice, stream_),
                   "query copy"));
    mark("attn query copy", 4.0 * T * static_cast<double>(qw));
  }
  if (few() && !a.kb_t.empty() && k::gemv_fits(ab)) {
    err(k::gemv_cuda(ab, stream_));
    mark("attn absorb query", 2.0 * heads_ * nope_ * lora_kv_);
    if (!rope_in_attention) {
      err(kernels::absorb_query(q_.get(), T, heads_, nope_, rope_, a.kv_b.get(), kvb_stride, lora_kv_, inv_freq_.as<float>(), in_pos(),
                       c_.rope_interleave, qattn, false, stream_));
      mark("attn rope (query)", 4.0 * T * heads_ * rope_);
    }
  } else if (few()) {
    err(kernels::absorb_query(q_.get(), T, heads_, nope_, rope_, a.kv_b.get(), kvb_stride, lora_kv_, inv_freq_.as<float>(), in_pos(),
                     c_.rope_interleave, qattn, true, stream_));
    mark("attn absorb query (+ rope)", 2.0 * heads_ * nope_ * lora_kv_);
  } else {
    k::GemmArgs qa;
    qa.rows = T, qa.in = nope_, qa.out = lora_kv_, qa.batch = heads_;
    qa.x = q_.get(), qa.ldx = qw, qa.stride_x = qk_;
    qa.w = a.kv_b.get(), qa.ldw = lora_kv_, qa.stride_w = kvb_stride, qa.w_trans = false;
    qa.y = qattn, qa.ldy = static_cast<long>(heads_) * width_, qa.stride_y = width_;
    err(gemm(qa));
    mark("attn absorb query", 2.0 * heads_ * nope_ * lora_kv_);
    // The rope part of each head rotated from q_ into its place beside the absorbed part (one
    // launch, where a strided copy of 128-byte rows and a rotation in place took two).
    k::RopeCopy rc;
    rc.src = q_.as<std::uint16_t>() + nope_, rc.src_token_stride = static_cast<long>(heads_) * qk_, rc.src_head_stride = qk_;
    rc.dst = qattn + lora_kv_, rc.dst_token_stride = static_cast<long>(heads_) * width_, rc.dst_head_stride = width_;
    err(k::rope_copy_cuda(kBf16, rc, T, heads_, rope_, inv_freq_.as<float>(), in_pos(), layout, stream_));
    mark("attn rope (query, copied beside the absorbed part)", 4.0 * T * heads_ * rope_);
  }

  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(qk_)));
  if (rope_in_attention) {
    k::MlaQueryRope r;
    r.src = q_src + nope_, r.ld = q_ld, r.head_stride = qk_, r.dim = rope_;
    r.inv_freq = inv_freq_.as<float>(), r.interleaved = c_.rope_interleave;
    const long q_row = static_cast<long>(heads_) * width_, o_row = static_cast<long>(heads_) * lora_kv_;
    for (int t0 = 0; t0 < T && err.ok(); t0 += mla_tokens) {
      k::MlaQueryRope rt = r;
      rt.src = q_src + static_cast<long>(t0) * q_ld + nope_;
      err(k::paged_attention_mla_rope_cuda(qattn + t0 * q_row, std::min(mla_tokens, T - t0), in_seq() + t0, in_pos() + t0, heads_,
                                           attn_layout(l), layer_pool, in_tables(), max_blocks_, scale, rt,
                                           olat_.as<std::uint16_t>() + t0 * o_row, max_context, attn_ws_.get(), attn_ws_.bytes(),
                                           stream_));
    }
    mark("attn paged attention (+ query rope)", static_cast<double>(T) * max_context * kv_row);
  } else if (flash_prefill(l, T)) {
    // A prefill chunk: the flash kernel reads each latent row once per 64 (token, head) rows (the
    // decode kernel once per token, and in launches of kMlaDecodeMaxTokens tokens).
    err(k::mla_prefill_flash_cuda(qattn, T, in_seq(), in_pos(), heads_, attn_layout(l), layer_pool, in_tables(), max_blocks_, scale,
                                  olat_.get(), stream_));
    mark("attn flash prefill attention", static_cast<double>(max_context) * kv_row + 2.0 * T * heads_ * (width_ + lora_kv_));
  } else {
    // TANDEM_PREFILL_ATTN=mla: a prefill chunk takes the MLA decode kernel (paged_attention_cuda's
    // choice up to kMlaDecodeMaxTokens tokens: each latent row read once for all heads, the
    // products on the tensor cores), in launches of that many tokens, where the generic kernel
    // (CUDA cores, a row read per four heads) cost a 32K-token prompt about 3 s a layer. A token's
    // result does not depend on its launch (attn_layout's fixed split). =generic: as before that.
    const int per = prefill_attn_ != kPrefillGeneric && k::paged_attention_mla_fits(kBf16, mla_tokens, heads_, attn_layout(l)) ? mla_tokens : T;
    const long q_row = static_cast<long>(heads_) * width_, o_row = static_cast<long>(heads_) * lora_kv_;
    for (int t0 = 0; t0 < T && err.ok(); t0 += per)
      err(k::paged_attention_cuda(kBf16, qattn + t0 * q_row, std::min(per, T - t0), in_seq() + t0, in_pos() + t0, heads_, attn_layout(l),
                                  layer_pool, layer_pool, in_tables(), max_blocks_, scale, olat_.as<std::uint16_t>() + t0 * o_row,
                                  max_context, attn_ws_.get(), attn_ws_.bytes(), stream_));
    mark("attn paged attention", static_cast<double>(T) * max_context * kv_row);
  }

  // Values: O[h] . W_v[h]^T (W_v[h] = kv_b rows h*(nope+vd)+nope .. +vd, [vd, kv_lora]).
  const auto* w_v = a.kv_b.as<std::uint16_t>() + static_cast<long>(nope_) * lora_kv_;
  k::GemvArgs v;
  v.rows = T, v.in = lora_kv_, v.out = vd_, v.groups = heads_;
  v.x = olat_.get(), v.ldx = static_cast<long>(heads_) * lora_kv_, v.x_group = lora_kv_;
  v.w = w_v, v.ldw = lora_kv_, v.w_group = kvb_stride;
  v.y = attn_.get(), v.ldy = static_cast<long>(heads_) * vd_, v.y_group = vd_;
  if (few() && k::gemv_fits(v)) {
    err(k::gemv_cuda(v, stream_));
  } else {
    k::GemmArgs va;
    va.rows = T, va.in = lora_kv_, va.out = vd_, va.batch = heads_;
    va.x = olat_.get(), va.ldx = static_cast<long>(heads_) * lora_kv_, va.stride_x = lora_kv_;
    va.w = w_v, va.ldw = lora_kv_, va.stride_w = kvb_stride;
    va.y = attn_.get(), va.ldy = static_cast<long>(heads_) * vd_, va.stride_y = vd_;
    err(gemm(va));
  }
  mark("attn values (kv_b v part)", 2.0 * heads_ * vd_ * lora_kv_);
  return err.status;
}

Status GlmDecoderCuda::mlp(const Mlp& m, int T, void* out) {
  FirstError err;
  const double gu = 2.0 * 2 * m.width * H_, down_bytes = 2.0 * m.width * H_;
  k::GemvArgs v;
  v.rows = T, v.in = H_, v.out = m.width, v.x = h_.get(), v.ldx = H_, v.w = m.gate_up.get(), v.ldw = H_;
  v.y = mlp_act_.get(), v.ldy = m.width, v.silu_mul = true, v.up_offset = m.width;
  k::QuantGemvArgs qv;
  qv.rows = std::min(T, k::kGemvMaxRows), qv.x = h_.get(), qv.ldx = H_, qv.w = m.gate_up_q.a.m, qv.y = mlp_act_.get();
  qv.ldy = m.width, qv.silu_mul = true;
  if (few_quant(T) && m.gate_up_q.on() && k::quant_gemv_fits(qv)) {
    err(quant_gemv(qv, T));
    mark("mlp gate_up + silu (quantised)", static_cast<double>(m.gate_up_q.bytes()));
  } else if (few() && !m.gate_up_q.on() && k::gemv_fits(v)) {
    err(k::gemv_cuda(v, stream_));
    mark("mlp gate_up + silu", gu);
  } else {
    err(qgemm(linear(h_.get(), m.gate_up, mlp_gu_.get(), T, H_, 2 * m.width), m.gate_up_q));
    mark("mlp gate_up", weight_read(m.gate_up_q, gu));
    err(k::silu_and_mul_cuda(kBf16, mlp_gu_.get(), mlp_act_.get(), T, m.width, stream_));
    mark("mlp silu", 2.0 * T * 3 * m.width);
  }
  k::GemmArgs down = linear(mlp_act_.get(), m.down, out, T, m.width, H_);
  down.y_type = k::DType::f32;  // into the fp32 delta or shared-expert sum
  err(qgemm(down, m.down_q));
  mark("mlp down", weight_read(m.down_q, down_bytes));
  return err.status;
}

k::MoeDecodeArgs GlmDecoderCuda::moe_decode_args(const Layer& a, int T) {
  k::MoeDecodeArgs dec;
  dec.tokens = T, dec.top_k = K_, dec.hidden = H_, dec.width = I_, dec.x = h_.get();
  dec.expert = expert_.as<std::int32_t>(), dec.weight = weight_.as<float>();
  dec.gate_up = a.experts_gate_up.get(), dec.down = a.experts_down.get();
  dec.shared_gate_up = a.shared.gate_up.get(), dec.shared_down = a.shared.down.get(), dec.shared_width = a.shared.width;
  dec.act = moe_decode_act_.get(), dec.out = delta_.as<float>();
  if (!moe_groups_.empty()) dec.experts = E_, dec.groups = moe_groups_.as<std::int32_t>();
  return dec;
}

// The decode-sized experts of a step whose routing is done (moe()): bf16, or quantised in one
// grouped launch or in launches of kMoeDecodeTokens tokens.
Status GlmDecoderCuda::moe_decode_experts(const Layer& a, int T, const k::MoeDecodeArgs& dec, double chosen) {
  FirstError err;
  const double expert = 3.0 * 2 * I_ * H_, shared = 3.0 * 2 * a.shared.width * H_;
  const bool quantised = a.experts_gate_up_q.on();
  if (!quantised) {
    err(k::moe_decode_cuda(dec, stream_));
    // Grouped, each chosen expert is read once (the expected count under uniform routing).
    if (k::moe_decode_groups(dec))
      mark("moe experts (decode, grouped: gate_up + silu, down + sum, shared)", chosen * expert + shared);
    else
      mark("moe experts (decode: gate_up + silu, down + sum, shared)", T * K_ * expert + shared);
    return err.status;
  }
  const k::MoeDecodeQuant qdec = moe_decode_quant_args(a);
  const bool mma = k::moe_decode_quant_mma(dec, qdec);
  if (mma && (!dec.groups || T == 1)) {  // tensor cores, one source a (token, expert) pair
    err(k::moe_decode_quant_cuda(dec, qdec, stream_));
    mark("moe experts (decode, quantised, tensor cores: gate_up + silu, down + sum, shared)",
         T * K_ * static_cast<double>(decode_bytes_.per_expert) + static_cast<double>(a.shared.gate_up_q.bytes() + a.shared.down_q.bytes()));
    return err.status;
  }
  if (mma || k::moe_decode_quant_groups(dec, qdec)) {  // all the tokens in one grouped launch
    err(k::moe_decode_quant_cuda(dec, qdec, stream_));
    mark(mma ? "moe experts (decode, quantised, tensor cores, grouped: gate_up + silu, down + sum, shared)"
             : "moe experts (decode, quantised, grouped: gate_up + silu, down + sum, shared)",
         chosen * static_cast<double>(decode_bytes_.per_expert) + static_cast<double>(a.shared.gate_up_q.bytes() + a.shared.down_q.bytes()));
    return err.status;
  }
  for (int t0 = 0; t0 < T; t0 += k::kMoeDecodeTokens) {
    k::MoeDecodeArgs part = dec;
    part.tokens = std::min(k::kMoeDecodeTokens, T - t0);
    part.x = h_.as<std::uint16_t>() + static_cast<long>(t0) * H_;
    part.expert = expert_.as<std::int32_t>() + static_cast<long>(t0) * K_;
    part.weight = weight_.as<float>() + static_cast<long>(t0) * K_;
    part.out = delta_.as<float>() + static_cast<long>(t0) * H_;
    err(k::moe_decode_quant_cuda(part, qdec, stream_));
  }
  mark("moe experts (decode, quantised: gate_up + silu, down + sum, shared)",
       T * K_ * static_cast<double>(decode_bytes_.per_expert) + static_cast<double>(a.shared.gate_up_q.bytes() + a.shared.down_q.bytes()));
  return err.status;
}

// fp32 router logits of a step that routes apart from the decode kernels: a warp per (token,
// expert) dot product, whose bits do not depend on the step's other tokens; a prefill-class step
// of kRouterGemmRows tokens or more takes one cuBLASLt fp32 product instead (fp32 compute, no
// TF32; its algorithm depends on the row count), which reads the router's weights once per tile
// of tokens where the warps read them once per token (at 1x4096 on the 2 B model: 0.70 ms of a
// 38.5 ms step). Decode-class passes (few(): a verification, or decode on ranks with sharded
// experts) keep the warps, so a verification's rows route as their decodes do.
Status GlmDecoderCuda::router_logits(const Layer& a, int T) {
  if (T < kRouterGemmRows || few())
    return k::router_logits_f32_cuda(h32_.as<float>(), T, H_, a.router.as<float>(), E_, router_logits_.as<float>(), stream_);
  k::GemmArgs g;
  g.rows = T, g.in = H_, g.out = E_, g.xw_type = k::DType::f32, g.y_type = k::DType::f32;
  g.x = h32_.get(), g.ldx = H_, g.w = a.router.get(), g.ldw = H_, g.y = router_logits_.get(), g.ldy = E_;
  return gemm_->run(g, stream_);
}

Status GlmDecoderCuda::moe(const Layer& a, int T, bool fold_norm) {
  const MoeConfig& m = d_.moe;
  k::MoeRouting routing;
  routing.n_experts = E_, routing.n_group = m.n_group, routing.topk_group = m.topk_group, routing.top_k = K_;
  routing.norm_topk_prob = m.norm_topk_prob;
  routing.routed_scaling_factor = static_cast<float>(m.routed_scaling_factor);
  FirstError err;
  const double router = 4.0 * E_ * H_, expert = 3.0 * 2 * I_ * H_;
  const double chosen = E_ * (1.0 - std::pow(1.0 - static_cast<double>(K_) / E_, T));  // expected, uniform routing
  const k::MoeDecodeArgs dec = moe_decode_args(a, T);
  const bool quantised = a.experts_gate_up_q.on();
  if (moe_decodes(a, T) || moe_decodes_quant(a, T)) {
    if (fold_norm) {
      err(k::moe_norm_router_route_cuda(routing, x_.as<float>(), delta_.as<float>(), a.post_norm.get(),
                                        static_cast<float>(d_.rms_norm_eps), H_, a.router.as<float>(),
                                        a.correction_bias.as<float>(), T, h_.get(), expert_.as<std::int32_t>(),
                                        weight_.as<float>(), stream_));
      mark("moe add_rmsnorm + router + route", router + static_cast<double>(T) * H_ * (4 * 2 + 4 + 2));
    } else {
      err(k::moe_router_route_cuda(routing, h32_.as<float>(), H_, a.router.as<float>(), a.correction_bias.as<float>(), T,
                                   expert_.as<std::int32_t>(), weight_.as<float>(), stream_));
      mark("moe router + route", router);
    }
    if (fold_norm) err(trace(TracePoint::after_attention, trace_layer_, T));
    err(trace(TracePoint::routing, -1, T));
    return err.ok() ? moe_decode_experts(a, T, dec, chosen) : err.status;
  }
  err(router_logits(a, T));
  mark("moe router logits", router);
  err(k::moe_route_cuda(routing, router_logits_.as<float>(), a.correction_bias.as<float>(), T, expert_.as<std::int32_t>(),
                        weight_.as<float>(), stream_));
  mark("moe route", 4.0 * T * E_);
  err(trace(TracePoint::routing, -1, T));
  // Pairs routed to another rank's experts are left out (pair_pos -1): the combine skips them.
  err(k::moe_sort_cuda(expert_.as<std::int32_t>(), T, K_, experts_.begin, experts_.size(), offsets_.as<std::int32_t>(), sorted_.as<std::int32_t>(),
                       pair_pos_.as<std::int32_t>(), stream_));
  mark("moe sort", 4.0 * T * K_);
  const double expert_bytes = quantised ? static_cast<double>(decode_bytes_.per_expert) : expert;
  if (experts_fuse_silu(a.experts_gate_up_q)) {
    err(expert_gemm(h_.get(), H_, sorted_.as<std::int32_t>(), a.experts_gate_up, a.experts_gate_up_q, I_, H_, moe_act_.get(), I_, T, true));
    mark("moe experts gate_up + silu", chosen * expert_bytes * 2 / 3);
  } else {
    err(expert_gemm(h_.get(), H_, sorted_.as<std::int32_t>(), a.experts_gate_up, a.experts_gate_up_q, 2 * I_, H_, moe_gu_.get(), 2L * I_, T));
    mark("moe experts gate_up", chosen * expert_bytes * 2 / 3);
    err(k::silu_and_mul_cuda(kBf16, moe_gu_.get(), moe_act_.get(), T * K_, I_, stream_));
    mark("moe silu", 2.0 * T * K_ * 3 * I_);
  }
  err(expert_gemm(moe_act_.get(), I_, nullptr, a.experts_down, a.experts_down_q, H_, I_, moe_out_.get(), H_, T));
  mark("moe experts down", chosen * expert_bytes / 3);
  const bool has_shared = a.shared.width > 0;
  if (has_shared) err(mlp(a.shared, T, shared_out_.get()));
  err(k::moe_combine_f32_cuda(moe_out_.get(), pair_pos_.as<std::int32_t>(), weight_.as<float>(), T, K_, H_,
                              has_shared ? shared_out_.as<float>() : nullptr, delta_.as<float>(), stream_));
  mark("moe combine", 4.0 * T * H_ * (K_ + 2));
  return err.status;
}

}  // namespace tandem::model::cuda
