// glm5_next_text on CUDA, one step: inputs staged, then (eagerly, or replayed from the CUDA graph
// of a decode step's batch bucket) per layer, for T tokens of every sequence of the step at once,
//   attention sublayer   x, post, comb = hc_collapse(streams); h = rmsnorm(x)
//                        y = KDA(h) (recurrent state of each sequence's slot) or DSA(h) (pool rows)
//                        streams = hc_expand(streams, y, post, comb)
//   FFN sublayer         the same around the dense or MoE FFN (clamped SwiGLU)
// and logits = lm_head(rmsnorm(mean of the streams)) for the rows asked for. DSA runs absorbed:
// the query is projected into the latent space per head (kv_b's key part), attends to the cached
// latents the indexer selected, and the values come out of the latent (kv_b's value part).
// The dense products take bf16 inputs or fp32 ones, per product (Glm5Product, lin()): with every
// input in bf16 the fixture's logits were 2.6e-2 off transformers'. Past gemv's rows both run on
// the tensor cores, an fp32 input as two bf16 parts.
// Tensor parallel (cuda_glm5_next.hpp): every partial sum goes through reduce(), called from three
// places only: embed(), sublayer() and lm_head_rows().
#include <algorithm>
#include <deque>
#include <numeric>
#include <cmath>

#include "tandem/kernels/capture.hpp"
#include "tandem/kernels/embedding.hpp"
#include "tandem/kernels/glue.hpp"
#include "cuda_glm5_next.hpp"
#include "glm5_next_parts.hpp"
#include "tandem/kernels/moe_experts.hpp"
#include "tandem/kernels/moe_routing.hpp"
#include "tandem/kernels/quant_gemv.hpp"
#include "tandem/kernels/sampling_cuda.hpp"
#include "tandem/kernels/cuda_check.hpp"

namespace tandem::model::cuda {

Result<std::vector<float>> Glm5NextCuda::step(std::span<const PagedWork> work) {
  auto rows = run(work);
  if (!rows) return rows.error();
  std::vector<float> out(static_cast<std::size_t>(rows.value()) * static_cast<std::size_t>(V_));
  FirstError err;
  if (!out.empty())
    err(TANDEM_CUDA_STATUS(cudaMemcpyAsync(out.data(), logits_.get(), out.size() * 4, cudaMemcpyDeviceToHost, stream_), "logits"));
  err(TANDEM_CUDA_STATUS(cudaStreamSynchronize(stream_), "step"));
  if (!err.ok()) return err.status.error();
  return out;
}

Result<std::vector<std::int32_t>> Glm5NextCuda::step_greedy(std::span<const PagedWork> work) {
  return greedy_tokens_by_sampling(*this, work);
}

// The logit rows are the items' in order (run): row i takes params[i] and uniforms[i].
Result<std::vector<k::Sampled>> Glm5NextCuda::step_sample(std::span<const PagedWork> work, std::span<const k::SamplingParams> params,
                                                          std::span<const double> uniforms) {
  auto all_greedy = begin_step_sample(work, params, uniforms, sample_params_, uniform_, static_cast<std::size_t>(r_cap_), sample_params_greedy_);
  if (!all_greedy) return all_greedy.error();
  const bool greedy = *all_greedy;
  const int want = static_cast<int>(params.size());
  auto rows = run(work);
  if (!rows) return rows.error();
  const int R = rows.value();
  if (R != want) return error("CUDA step_sample: the step gave " + std::to_string(R) + " logit rows, not " + std::to_string(want));
  FirstError err;
  std::vector<k::Sampled> got(static_cast<std::size_t>(R));
  std::deque<SamplingRows> staged;  // until the stream synchronises below
  if (R > 0) {
    if (!greedy) {
      std::vector<int> to(static_cast<std::size_t>(R));
      std::iota(to.begin(), to.end(), 0);
      err(stage_sampling_rows(params, uniforms, {}, to, R, sample_params_, uniform_, stream_, staged));
      sample_params_greedy_ = false;
    }
    err(k::sample_cuda(logits_.as<float>(), R, V_, sample_params_.as<k::SamplingParams>(), uniform_.as<double>(),
                       sampled_.as<k::Sampled>(), keep_.as<std::uint8_t>(), stream_));
    mark(greedy ? "sample (greedy)" : "sample", static_cast<double>(R) * V_ * 4);
    err(TANDEM_CUDA_STATUS(cudaMemcpyAsync(got.data(), sampled_.get(), got.size() * sizeof(k::Sampled), cudaMemcpyDeviceToHost, stream_),
                   "tokens"));
  }
  err(TANDEM_CUDA_STATUS(cudaStreamSynchronize(stream_), "step"));
  if (!err.ok()) return err.status.error();
  return got;
}

// long-function: a step's checks, its staging (graph padding, tables, one input copy), then an eager
// run or a graph replay.
Result<int> Glm5NextCuda::run(std::span<const PagedWork> work) {
  if (pool_.empty()) return error("CUDA model: make_device_pool first");
  const int S = static_cast<int>(work.size());
  if (S == 0) return 0;
  if (S > s_cap_) return error("CUDA step: " + std::to_string(S) + " sequences, more than max-num-seqs " + std::to_string(s_cap_));
  int T = 0, R = 0, longest = 0;
  bool decode = true;
  std::vector<bool> slot_used(static_cast<std::size_t>(s_cap_), false);
  for (const PagedWork& w : work) {
    const int n = static_cast<int>(w.tokens.size());
    if (auto bad = check_work_item(w, max_len_, block_size_, num_blocks_, V_); !bad) return bad.error();
    if (state_floats_ > 0) {
      if (w.state_slot < 0 || w.state_slot >= s_cap_)
        return error("CUDA step: " + config().model_type + " keeps a recurrent state per sequence; PagedWork::state_slot must be in [0, " +
                     std::to_string(s_cap_) + "), got " + std::to_string(w.state_slot));
      if (slot_used[static_cast<std::size_t>(w.state_slot)])
        return error("CUDA step: two sequences of one step share recurrent-state slot " + std::to_string(w.state_slot));
      slot_used[static_cast<std::size_t>(w.state_slot)] = true;
    }
    for (const int kept : {w.state_load, w.state_save})
      if (kept < -1 || kept >= n_snapshots_ || (kept >= 0 && state_floats_ == 0))
        return error("CUDA step: kept recurrent state " + std::to_string(kept) + " out of range (" + std::to_string(n_snapshots_) +
                     " kept; make_state_snapshots)");
    if ((w.logits || w.all_logits) && n == 0) return error("CUDA step: logits asked for a sequence with no new token");
    T += n, R += w.all_logits ? n : w.logits ? 1 : 0, longest = std::max(longest, n);
    decode = decode && n == 1 && (w.logits || w.all_logits);
  }
  if (T > t_cap_) return error("CUDA step: " + std::to_string(T) + " tokens, more than the " + std::to_string(t_cap_) + " a step holds");
  if (R > r_cap_)
    return error("CUDA step: " + std::to_string(R) + " logit rows, more than the " + std::to_string(r_cap_) +
                 " a step holds (CudaOptions::max_logit_rows)");
  // A decode step replays its bucket's graph: B sequences, the S real ones first (their tokens and
  // logit rows 0..S-1), then padding sequences of token 0 at position 0 whose tables name only the
  // scratch block (num_blocks_) and whose recurrence ranges are empty (begin = S: no state slot is
  // read or reset). (At TP > 1 only where the all-reduce can be captured: NCCL, not host-staged.)
  // (The step that calibrates an fp8 pool's scales runs eagerly: no graph may hold its measuring.)
  const bool graph = decode && !calibrate_ && !opt_.enforce_eager && (!sharded() || (all_reduce_ && all_reduce_->capturable()));
  const int B = graph ? std::min(next_pow2(S), s_cap_) : S;
  // A step with a long enough prompt runs every sequence's recurrence in the chunked form; decode
  // steps (graphs or eager, so that the two stay bit-identical) and short prompts walk the tokens
  // one by one.
  kda_chunked_ = !decode && kda_chunk_ > 0 && longest >= kda_chunk_min_;

  std::int32_t* tok = host_in_.data();
  std::int32_t* pos = tok + t_cap_;
  std::int32_t* seq = pos + t_cap_;
  std::int32_t* begin = seq + t_cap_;
  std::int32_t* slot = begin + s_cap_ + 1;
  std::int32_t* reset = slot + s_cap_;
  std::int32_t* rows = reset + s_cap_;
  std::int32_t* tables = rows + r_cap_;
  const std::size_t mb = static_cast<std::size_t>(max_blocks_);
  int t = 0, r = 0;
  for (int s = 0; s < S; ++s) {
    const PagedWork& w = work[static_cast<std::size_t>(s)];
    std::int32_t* table = tables + static_cast<std::size_t>(s) * mb;
    const std::size_t have = std::min(mb, w.block_table.size());
    std::copy(w.block_table.begin(), w.block_table.begin() + static_cast<long>(have), table);
    std::fill(table + have, table + mb, 0);
    begin[s] = t;
    slot[s] = std::max(w.state_slot, 0);
    reset[s] = w.start == 0;
    for (std::size_t i = 0; i < w.tokens.size(); ++i, ++t) {
      tok[t] = w.tokens[i], pos[t] = w.start + static_cast<int>(i), seq[t] = s;
      if (w.all_logits) rows[r++] = t;
    }
    if (w.logits && !w.all_logits) rows[r++] = t - 1;
  }
  for (int s = S; s < B; ++s) {  // padding (graph steps)
    std::fill(tables + static_cast<std::size_t>(s) * mb, tables + static_cast<std::size_t>(s + 1) * mb, num_blocks_);
    begin[s] = T, slot[s] = 0, reset[s] = 0;
    tok[t] = 0, pos[t] = 0, seq[t] = s, rows[r++] = t, ++t;
  }
  begin[B] = T;
  // Vocabulary-parallel: the ids in this rank's embedding rows (the others fall outside and embed as zeros).
  std::int32_t* local = tables + static_cast<std::size_t>(s_cap_) * mb;  // in_local()'s host side
  if (sharded())
    for (int i = 0; i < t; ++i) local[i] = tok[i] - vocab_.begin;
  // The whole staging area in one copy (synchronous: the host buffer is reused by the next step).
  if (auto e = TANDEM_CUDA_STATUS(cudaMemcpyAsync(inputs_.get(), host_in_.data(), in_ints_ * 4, cudaMemcpyHostToDevice, stream_),
                          "step inputs");
      !e)
    return e.error();
  FirstError err;
  err(copy_snapshots(work, true));
  mark("start", 0);
  if (calibrate_) {
    const std::size_t bytes = kv_scales_.size() * 4;
    err(TANDEM_CUDA_STATUS(cudaMemsetAsync(kv_amax_.get(), 0, bytes, stream_), "KV amax"));
    measuring_ = true;
    err(enqueue(T, S, R));
    measuring_ = false;
    err(TANDEM_CUDA_STATUS(cudaMemcpyAsync(kv_scales_.data(), kv_scale_dev_.get(), bytes, cudaMemcpyDeviceToHost, stream_), "KV scales"));
    err(TANDEM_CUDA_STATUS(cudaStreamSynchronize(stream_), "KV scale calibration"));
    calibrate_ = !err.ok();
  } else if (!graph) {
    err(enqueue(T, S, R));
  } else if (auto it = graphs_.find(B); it != graphs_.end()) {
    err(TANDEM_CUDA_STATUS(cudaGraphLaunch(it->second, stream_), "graph launch"));
    mark("graph (whole forward)", 0);
  } else {
    // First step of this bucket: run it eagerly (which also plans any cuBLASLt product), then
    // capture the same enqueue for the steps after it.
    err(enqueue(B, B, B));
    if (err.ok()) err(capture(B));
  }
  if (err.ok()) err(copy_snapshots(work, false));
  if (!err.ok()) return err.status.error().with_context("CUDA step");
  return R;
}

Status Glm5NextCuda::capture(int B) {
  capturing_ = true;
  auto exec = capture_graph(stream_, [&] { return enqueue(B, B, B); }, "decode graph of " + std::to_string(B) + " sequences");
  capturing_ = false;
  if (!exec) return exec.error();
  graphs_[B] = exec.value();
  return {};
}

void Glm5NextCuda::drop_graphs() {
  for (auto& [b, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
}

Status Glm5NextCuda::lin(Glm5Product p, const float* x, long ldx, int rows, int in, const void* w, int out, float* y, long ldy,
                         const void* xb, long ldxb) {
  if (rows == 0) return {};
  // Decode-sized steps through gemv (batch-invariant: a token's result whatever shares the step),
  // as the GLM decoder's gemm() does: on the fp32 rows themselves, or rounded to bf16; more rows, or
  // operands gemv does not take, through linear_f32_cuda (fp32) or cuBLASLt (bf16).
  const bool few = opt_.decode_kernels && rows <= opt_.step_invariant_tokens;
  k::GemvArgs v;
  v.rows = rows, v.in = in, v.out = out, v.w = w, v.ldw = in, v.y = y, v.ldy = ldy, v.y_type = k::DType::f32;
  if (fp32(p)) {
    v.x = x, v.ldx = ldx, v.x_type = k::DType::f32;
    if (few && k::gemv_fits(v)) return k::gemv_cuda(v, stream_);
    if (!split_fp32_) return kernels::linear_f32_cuda(x, ldx, nullptr, rows, in, w, kBf16, in, nullptr, 0, out, y, ldy, stream_);
    // hi W^T, then lo W^T summed into it: the bf16 weights times either part are exact in fp32.
    FirstError err;
    err(kernels::to_bf16_split(x, ldx, rows, in, xb_.get(), xlo_.get(), in, stream_));
    k::GemmArgs g;
    g.rows = rows, g.in = in, g.out = out;
    g.x = xb_.get(), g.ldx = in, g.w = w, g.ldw = in, g.y = y, g.ldy = ldy, g.y_type = k::DType::f32;
    err(gemm_->run(g, stream_));
    g.x = xlo_.get(), g.accumulate = true;
    err(gemm_->run(g, stream_));
    return err.status;
  }
  FirstError err;
  if (!xb) {
    err(kernels::to_bf16(x, ldx, rows, in, xb_.get(), in, stream_));
    xb = xb_.get(), ldxb = in;
  }
  v.x = xb, v.ldx = ldxb;
  if (few && k::gemv_fits(v)) {
    err(k::gemv_cuda(v, stream_));
    return err.status;
  }
  k::GemmArgs g;
  g.rows = rows, g.in = in, g.out = out;
  g.x = xb, g.ldx = ldxb, g.w = w, g.ldw = in, g.y = y, g.ldy = ldy, g.y_type = k::DType::f32;
  err(gemm_->run(g, stream_));
  return err.status;
}

// Steps of up to this many rows run a quantised run through quant_gemv (kGemvMaxRows a launch, each
// reading the weights once: batch-invariant, as the dense products' gemv); larger ones dequantise
// the run into wscratch_ once and take lin()'s tensor-core paths.
constexpr int kQuantGemvRows = 4 * k::kGemvMaxRows;

Status Glm5NextCuda::lin(Glm5Product p, const float* x, long ldx, int rows, int in, const Glm5Weight& W, int out, float* y, long ldy,
                         const void* xb, long ldxb) {
  if (!W.quantised()) return lin(p, x, ldx, rows, in, W.dense.get(), out, y, ldy, xb, ldxb);
  if (rows == 0) return {};
  FirstError err;
  const bool f32 = fp32(p);
  if (!f32 && !xb) {  // rounded once for every run
    err(kernels::to_bf16(x, ldx, rows, in, xb_.get(), in, stream_));
    xb = xb_.get(), ldxb = in;
  }
  const bool few = opt_.decode_kernels && rows <= std::min(kQuantGemvRows, opt_.step_invariant_tokens);
  for (const Glm5QuantRun& r : W.runs) {
    float* yr = y + r.first;
    if (!r.q.on()) {
      err(lin(p, x, ldx, rows, in, r.dense.get(), r.rows, yr, ldy, xb, ldxb));
      continue;
    }
    k::QuantGemvArgs v;
    v.x = f32 ? static_cast<const void*>(x) : xb, v.ldx = f32 ? ldx : ldxb, v.x_type = f32 ? k::DType::f32 : kBf16;
    v.w = r.q.a.m, v.w2 = r.q.b.m, v.y = yr, v.ldy = ldy, v.y_type = k::DType::f32;
    v.rows = std::min(rows, k::kGemvMaxRows);
    if (few && k::quant_gemv_fits(v)) {
      const std::size_t x_bytes = f32 ? 4 : 2;
      for (int r0 = 0; r0 < rows && err.ok(); r0 += k::kGemvMaxRows) {
        v.rows = std::min(k::kGemvMaxRows, rows - r0);
        v.x = static_cast<const char*>(f32 ? static_cast<const void*>(x) : xb) + static_cast<std::size_t>(r0) * static_cast<std::size_t>(v.ldx) * x_bytes;
        v.y = yr + static_cast<long>(r0) * ldy;
        err(k::quant_gemv_cuda(v, stream_));
      }
      continue;
    }
    err(dequant_bf16(r.q, wscratch_.as<std::uint16_t>(), stream_));
    err(lin(p, x, ldx, rows, in, wscratch_.get(), r.rows, yr, ldy, xb, ldxb));
  }
  return err.status;
}

kernels::DsaPool Glm5NextCuda::pool_of(int slot) const {
  kernels::DsaPool p;
  p.rows = static_cast<std::uint8_t*>(pool_.get()) + static_cast<std::size_t>(slot) * layer_rows_ * static_cast<std::size_t>(width_) *
                                                      static_cast<std::size_t>(kernels::dtype_bytes(kv_type_));
  p.type = kv_type_;
  p.scale = kv_scale_;
  if (kv_type_ == kernels::DType::fp8_e4m3) p.scale_at = kv_scale_dev_.as<float>() + slot;  // calibrated on the device
  p.width = width_;
  p.tables = in_tables();
  p.max_blocks = max_blocks_;
  p.block_size = block_size_;
  return p;
}

Status Glm5NextCuda::enqueue(int T, int S, int R) {
  const DecoderConfig& d = c_.d;
  const float eps = static_cast<float>(d.rms_norm_eps);
  FirstError err;
  err(embed(T));
  mark("embedding", 2.0 * T * H_ + 4.0 * T * hc_ * H_);
  for (int l = 0; l < d.num_hidden_layers && err.ok(); ++l) {
    const Glm5Layer& L = layers_[static_cast<std::size_t>(l)];
    err(sublayer(L.attn_hc, L.input_norm, T, 0, L, S));
    err(sublayer(L.ffn_hc, L.post_norm, T, 1, L, S));
    if (!capture_layers_.empty()) err(capture_layer(l, T));
  }
  err(kernels::hc_mean_cuda(streams_.as<float>(), T, hc_, H_, mean_.as<float>(), stream_));
  err(kernels::rms_norm_f32(mean_.as<float>(), H_, T, H_, final_norm_.as<float>(), eps, h_.as<float>(), H_, hb_.get(), H_, stream_));
  mark("final mean + norm", 4.0 * T * (hc_ + 2) * H_);
  if (R > 0) err(lm_head_rows(R));
  mark("lm_head", 2.0 * vocab_.size() * H_ + 4.0 * R * V_);
  return err.status;
}

Status Glm5NextCuda::reduce(void* b, int rows, int width, k::DType type) {
  if (!sharded()) return Ok{};
  if (!all_reduce_) return Error{"tensor-parallel rank " + std::to_string(tp_rank_) + " has no device all-reduce (set_all_reduce)"};
  return all_reduce_->all_reduce_sum(b, static_cast<std::size_t>(rows) * static_cast<std::size_t>(width), type, stream_);
}

// Vocabulary-parallel: a rank embeds the ids in its rows (the others as zeros) and the ranks' rows
// are summed, which is exact (one term is not zero); the sum is then spread into the streams.
Status Glm5NextCuda::embed(int T) {
  if (!sharded()) return kernels::hc_embed_cuda(embed_.get(), in_tokens(), T, hc_, H_, streams_.as<float>(), stream_);
  FirstError err;
  err(k::embedding_cuda(kBf16, embed_.get(), vocab_.size(), H_, in_local(), T, embed_rows_.get(), stream_));
  err(reduce(embed_rows_.get(), T, H_, kBf16));
  err(kernels::hc_embed_cuda(embed_rows_.get(), iota_.as<std::int32_t>(), T, hc_, H_, streams_.as<float>(), stream_));
  return err.status;
}

// Vocabulary-parallel: each rank writes its columns of zeroed rows and the ranks' rows are summed:
// the gather of the logits (exact: every entry has one term), through the same seam.
Status Glm5NextCuda::lm_head_rows(int R) {
  FirstError err;
  if (sharded())
    err(TANDEM_CUDA_STATUS(cudaMemsetAsync(logits_.get(), 0, static_cast<std::size_t>(R) * static_cast<std::size_t>(V_) * 4, stream_),
                           "zero logits"));
  float* y = logits_.as<float>() + vocab_.begin;
  if (fp32(Glm5Product::lm_head)) {  // the rows asked for into mean_ (free after the final norm); an fp32 row is 2 H bf16's bits
    err(kernels::gather_rows(h_.get(), 2 * H_, in_rows(), R, mean_.get(), stream_));
    err(lin(Glm5Product::lm_head, mean_.as<float>(), H_, R, H_, head_.get(), vocab_.size(), y, V_));
  } else {  // the rows asked for, already rounded by the final norm
    err(kernels::gather_rows(hb_.get(), H_, in_rows(), R, xb_.get(), stream_));
    err(lin(Glm5Product::lm_head, nullptr, 0, R, H_, head_.get(), vocab_.size(), y, V_, xb_.get(), H_));
  }
  err(reduce(logits_.get(), R, V_, k::DType::f32));
  return err.status;
}

// A drafter reads the mean of the hyper-connection streams after a layer (the CPU path's capture).
Status Glm5NextCuda::capture_layer(int layer, int T) {
  FirstError err;
  const int n = static_cast<int>(capture_layers_.size());
  bool meaned = false;
  for (int j = 0; j < n; ++j) {
    if (capture_layers_[static_cast<std::size_t>(j)] != layer) continue;
    if (!meaned) err(kernels::hc_mean_cuda(streams_.as<float>(), T, hc_, H_, mean_.as<float>(), stream_));
    meaned = true;
    err(kernels::rows_to_bf16(mean_.as<float>(), H_, T, captured_.as<std::uint16_t>() + static_cast<long>(j) * H_, static_cast<long>(n) * H_,
                     stream_));
  }
  return err.status;
}

Status Glm5NextCuda::sublayer(const Glm5Hc& hc, const DeviceBuffer& norm, int T, int which, const Glm5Layer& L, int S) {
  const kernels::HcShape s = detail::hc_shape(c_);
  FirstError err;
  err(kernels::hc_collapse_cuda(s, streams_.as<float>(), T, hc.fn.as<float>(), hc.base.as<float>(), hc.scale.as<float>(), x_.as<float>(),
                       post_.as<float>(), comb_.as<float>(), hc_scratch_.as<float>(), stream_));
  err(kernels::rms_norm_f32(x_.as<float>(), H_, T, H_, norm.as<float>(), s.rms_eps, h_.as<float>(), H_, hb_.get(), H_, stream_));
  mark("hc collapse + norm", 4.0 * T * (hc_ + 2) * H_ + 4.0 * hc_ * (hc_ + 2) * hc_ * H_);
  if (which == 0) err(L.linear ? kda(L, T, S) : dsa(L, T));
  else err(ffn(L, T));
  err(reduce(y_.get(), T, H_, k::DType::f32));  // this rank's heads', width's or experts' share
  if (sharded()) mark("all-reduce", 8.0 * T * H_);
  err(kernels::hc_expand_cuda(s, streams_.as<float>(), T, y_.as<float>(), post_.as<float>(), comb_.as<float>(), stream_));
  mark("hc expand", 4.0 * T * (2 * hc_ + 1) * H_);
  return err.status;
}

Status Glm5NextCuda::kda(const Glm5Layer& L, int T, int S) {
  FirstError err;
  float* proj = kproj_.as<float>();
  err(lin(Glm5Product::kda_in, h_.as<float>(), H_, T, H_, L.w_in, kda_in_, proj, kda_in_, hb_.get(), H_));
  mark("kda in_proj (q, k, v, f_a, g_a, b)", static_cast<double>(L.w_in.bytes()) + 4.0 * T * (H_ + kda_in_));
  err(lin(Glm5Product::kda_gates, proj + 3 * lqk_, kda_in_, T, lhd_, L.f_b, lqk_, graw_.as<float>(), lqk_));
  err(lin(Glm5Product::kda_gates, proj + 3 * lqk_ + lhd_, kda_in_, T, lhd_, L.g_b, lqk_, gate_.as<float>(), lqk_));
  mark("kda gates (f_b, g_b)", static_cast<double>(L.f_b.bytes() + L.g_b.bytes()) + 8.0 * T * (lhd_ + lqk_));
  const kernels::KdaShape s = kda_shape();
  kernels::KdaWeights w{L.conv.as<float>(), L.a_log.as<float>(), L.dt_bias.as<float>(), L.o_norm.as<float>()};
  kernels::KdaIo io;
  io.u = proj, io.ld_u = kda_in_;
  io.g_raw = graw_.as<float>(), io.ld_g = lqk_;
  io.beta_raw = proj + 3 * lqk_ + 2 * lhd_, io.ld_beta = kda_in_;
  io.gate_raw = gate_.as<float>(), io.ld_gate = lqk_;
  io.o = kout_.as<float>(), io.ld_o = lqk_;
  if (kda_chunked_)
    err(kernels::kda_chunk_cuda(s, w, io, S, T, in_begin(), in_slot(), in_reset(), state_.as<float>(), state_floats_, L.state_at, kda_chunk_,
                                kchunk_.as<float>(), stream_));
  else
    err(kernels::kda_recurrent_cuda(s, w, io, S, in_begin(), in_slot(), in_reset(), state_.as<float>(), state_floats_, L.state_at, stream_));
  // The state of each sequence read and written (this layer's part), and the token's inputs.
  mark("kda recurrence", 8.0 * S * static_cast<double>(lqk_) * lhd_ + 4.0 * T * (kda_in_ + 3.0 * lqk_));
  err(lin(Glm5Product::kda_o, kout_.as<float>(), lqk_, T, lqk_, L.o, H_, y_.as<float>(), H_));
  mark("kda o_proj", static_cast<double>(L.o.bytes()) + 4.0 * T * (lqk_ + H_));
  return err.status;
}

Status Glm5NextCuda::dsa(const Glm5Layer& L, int T) {
  FirstError err;
  const kernels::DsaShape s = detail::dsa_shape(c_, L.indexer);
  const int P = lora_q_ + lora_kv_ + rope_ + (L.indexer ? 2 * id_ + ih_ : 0);
  float* proj = dproj_.as<float>();
  err(lin(Glm5Product::dsa_in, h_.as<float>(), H_, T, H_, L.w_in, P, proj, P, hb_.get(), H_));
  mark("dsa in_proj (q_a, kv_a, indexer)", static_cast<double>(L.w_in.bytes()) + 4.0 * T * (H_ + P));
  const kernels::DsaPool pool = pool_of(L.slot);
  kernels::DsaNorms norms{L.q_a_norm.as<float>(), L.kv_a_norm.as<float>(), L.k_norm.as<float>(), L.k_norm_bias.as<float>()};
  if (measuring_) {  // the calibrating step: this layer's scale from its rows' amax, before they are written
    float* amax = kv_amax_.as<float>() + L.slot;
    err(kernels::dsa_prepare_cuda(s, norms, proj, P, T, in_seq(), in_pos(), pool, qr_.as<float>(), iw_.as<float>(), stream_, amax));
    err(kernels::dsa_scale_from_amax_cuda(amax, kFp8KvAmaxTarget, kv_scale_dev_.as<float>() + L.slot, stream_));
  }
  err(kernels::dsa_prepare_cuda(s, norms, proj, P, T, in_seq(), in_pos(), pool, qr_.as<float>(), iw_.as<float>(), stream_));
  mark("dsa prepare (norms, rope, pool write)", 8.0 * T * P + 4.0 * T * width_);
  const int q_rows = heads_ * qk_ + (L.indexer ? ih_ * id_ : 0);
  float* q = qall_.as<float>();
  err(lin(Glm5Product::dsa_q, qr_.as<float>(), lora_q_, T, lora_q_, L.q_all, q_rows, q, q_all_));
  mark("dsa q_b (+ indexer q)", static_cast<double>(L.q_all.bytes()) + 4.0 * T * (lora_q_ + q_rows));
  if (L.indexer)
    err(kernels::dsa_select_cuda(s, pool, q + heads_ * qk_, q_all_, iw_.as<float>(), L.kpool_ape.as<float>(), T, in_seq(), in_pos(),
                        scores_.as<float>(), chosen_.as<std::int32_t>(), max_pools_, sel_.as<std::int32_t>(),
                        sel_n_.as<std::int32_t>(), max_sel_, stream_));
  if (L.indexer) mark("dsa indexer select", 4.0 * T * (ih_ * id_ + max_sel_));
  // Absorbed query: q_nope[h] . W_kb[h]; the values come out of the attended latent through W_v[h].
  err(kernels::absorb_query_cuda(q, q_all_, qk_, T, heads_, nope_, vd_, lora_kv_, L.kv_b.get(), qlat_.as<float>(), stream_));
  mark("dsa absorb query (kv_b k part)", 2.0 * heads_ * nope_ * lora_kv_ + 4.0 * T * heads_ * (nope_ + lora_kv_));
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(qk_)));
  err(kernels::dsa_attention_cuda(s, pool, heads_, qlat_.as<float>(), q + nope_, q_all_, qk_, T, in_seq(), sel_.as<std::int32_t>(),
                         sel_n_.as<std::int32_t>(), max_sel_, scale, olat_.as<float>(), stream_));
  mark("dsa attention", 4.0 * T * max_sel_ * width_ + 8.0 * T * heads_ * lora_kv_);
  err(kernels::absorb_values_cuda(olat_.as<float>(), T, heads_, nope_, vd_, lora_kv_, L.kv_b.get(), attn_.as<float>(), stream_));
  mark("dsa absorb values (kv_b v part)", 2.0 * heads_ * vd_ * lora_kv_ + 4.0 * T * heads_ * (lora_kv_ + vd_));
  err(lin(Glm5Product::dsa_o, attn_.as<float>(), static_cast<long>(heads_) * vd_, T, heads_ * vd_, L.o, H_, y_.as<float>(), H_));
  mark("dsa o_proj", static_cast<double>(L.o.bytes()) + 4.0 * T * (heads_ * vd_ + H_));
  return err.status;
}

Status Glm5NextCuda::mlp(const Glm5Mlp& m, int T, float* out, bool shared) {
  FirstError err;
  err(lin(shared ? Glm5Product::shared_gate_up : Glm5Product::mlp_gate_up, h_.as<float>(), H_, T, H_, m.gate_up, 2 * m.width,
          mlp_gu_.as<float>(), 2 * m.width, hb_.get(), H_));
  mark(shared ? "shared gate_up" : "mlp gate_up", static_cast<double>(m.gate_up.bytes()) + 4.0 * T * (H_ + 2.0 * m.width));
  err(kernels::clamped_silu_and_mul_f32_cuda(mlp_gu_.as<float>(), mlp_act_.as<float>(), T, m.width, swiglu_limit_, stream_));
  mark(shared ? "shared swiglu" : "mlp swiglu", 12.0 * T * m.width);
  err(lin(shared ? Glm5Product::shared_down : Glm5Product::mlp_down, mlp_act_.as<float>(), m.width, T, m.width, m.down, H_, out, H_));
  mark(shared ? "shared down" : "mlp down", static_cast<double>(m.down.bytes()) + 4.0 * T * (m.width + H_));
  return err.status;
}

double Glm5NextCuda::expert_read(int T, bool gate_up) const {
  if (E_ == 0) return 0;
  const double distinct = E_ * (1.0 - std::pow(1.0 - static_cast<double>(K_) / E_, T));
  return distinct * static_cast<double>(decode_bytes_.per_expert) * (gate_up ? 2.0 / 3.0 : 1.0 / 3.0);
}

// Routing by the kernel layer's moe_route_cuda; then every (token, expert) pair's clamped SwiGLU in
// fp32 (experts()), and the weighted sum plus the shared experts.
Status Glm5NextCuda::ffn(const Glm5Layer& L, int T) {
  if (!L.moe) return mlp(L.dense, T, y_.as<float>());
  const MoeConfig& m = c_.d.moe;
  k::MoeRouting routing;
  routing.n_experts = E_, routing.n_group = m.n_group, routing.topk_group = m.topk_group, routing.top_k = K_;
  routing.norm_topk_prob = m.norm_topk_prob;
  routing.routed_scaling_factor = static_cast<float>(m.routed_scaling_factor);
  const int P = T * K_;
  FirstError err;
  err(kernels::linear_f32_cuda(h_.as<float>(), H_, nullptr, T, H_, L.router.get(), k::DType::f32, H_, nullptr, 0, E_,
                      router_logits_.as<float>(), E_, stream_));
  mark("moe router", 4.0 * E_ * H_ + 4.0 * T * H_);
  err(k::moe_route_cuda(routing, router_logits_.as<float>(), L.correction_bias.as<float>(), T, expert_.as<std::int32_t>(),
                        weight_.as<float>(), stream_));
  if (sharded()) err(kernels::moe_local_experts_cuda(expert_.as<std::int32_t>(), P, experts_.begin, experts_.size(), stream_));
  mark("moe route", 8.0 * T * E_);
  err(experts(L, T));
  const bool shared = L.shared.width > 0;
  if (shared) err(mlp(L.shared, T, shared_out_.as<float>(), true));
  err(kernels::moe_combine_f32_cuda(moe_out_.as<float>(), grouped_experts_ ? pair_pos_.as<std::int32_t>() : nullptr, weight_.as<float>(), T,
                                    K_, H_, shared ? shared_out_.as<float>() : nullptr, y_.as<float>(), stream_));
  mark("moe combine", 4.0 * (P + (shared ? 2 : 1) * T) * H_);
  return err.status;
}

// The routed experts' gate_up, clamped SwiGLU and down for the step's P = T * K_ pairs: grouped by
// expert (moe_sort_cuda; rows in sorted order, pair_pos_ says where each pair went) or one pair at
// a time in the pairs' order (TANDEM_GLM5_EXPERTS=pairs).
Status Glm5NextCuda::experts(const Glm5Layer& L, int T) {
  const int P = T * K_, local = experts_.size();
  const long expert = static_cast<long>(I_) * H_;
  const std::int32_t* off = offsets_.as<std::int32_t>();
  FirstError err;
  if (grouped_experts_) {
    err(k::moe_sort_cuda(expert_.as<std::int32_t>(), T, K_, 0, local, offsets_.as<std::int32_t>(), sorted_token_.as<std::int32_t>(),
                         pair_pos_.as<std::int32_t>(), stream_));
    mark("moe sort", 12.0 * P);
    if (L.experts_gate_up_q.on())
      err(k::grouped_gemm_quant_f32_cuda(h_.as<float>(), H_, sorted_token_.as<std::int32_t>(), off, local, L.experts_gate_up_q.a.m,
                                         moe_gu_.as<float>(), 2L * I_, stream_));
    else
      err(k::grouped_gemm_f32_cuda(h_.as<float>(), H_, sorted_token_.as<std::int32_t>(), off, local, L.experts_gate_up.get(), 2 * I_, H_,
                                   moe_gu_.as<float>(), 2L * I_, stream_));
  } else if (L.experts_gate_up_q.on()) {
    k::QuantPairsArgs q;
    q.pairs = P, q.per_pair = 2, q.x = h_.as<float>(), q.ldx = H_, q.gather = pair_token_.as<std::int32_t>();
    q.row_matrix = expert_.as<std::int32_t>(), q.w = L.experts_gate_up_q.a.m, q.y = moe_gu_.as<float>(), q.ldy = 2L * I_;
    err(k::quant_pairs_f32_cuda(q, stream_));
  } else {
    err(kernels::linear_f32_cuda(h_.as<float>(), H_, pair_token_.as<std::int32_t>(), P, H_, L.experts_gate_up.get(), kBf16, H_,
                                 expert_.as<std::int32_t>(), 2 * expert, 2 * I_, moe_gu_.as<float>(), 2L * I_, stream_));
  }
  mark("moe experts gate_up", expert_read(T, true) + 4.0 * P * (H_ + 2.0 * I_));
  err(kernels::clamped_silu_and_mul_f32_cuda(moe_gu_.as<float>(), moe_act_.as<float>(), P, I_, swiglu_limit_, stream_));
  mark("moe experts swiglu", 12.0 * P * I_);
  if (grouped_experts_) {
    if (L.experts_down_q.on())
      err(k::grouped_gemm_quant_f32_cuda(moe_act_.as<float>(), I_, nullptr, off, local, L.experts_down_q.a.m, moe_out_.as<float>(), H_,
                                         stream_));
    else
      err(k::grouped_gemm_f32_cuda(moe_act_.as<float>(), I_, nullptr, off, local, L.experts_down.get(), H_, I_, moe_out_.as<float>(), H_,
                                   stream_));
  } else if (L.experts_down_q.on()) {
    k::QuantPairsArgs q;
    q.pairs = P, q.per_pair = 1, q.x = moe_act_.as<float>(), q.ldx = I_, q.row_matrix = expert_.as<std::int32_t>();
    q.w = L.experts_down_q.a.m, q.y = moe_out_.as<float>(), q.ldy = H_;
    err(k::quant_pairs_f32_cuda(q, stream_));
  } else {
    err(kernels::linear_f32_cuda(moe_act_.as<float>(), I_, nullptr, P, I_, L.experts_down.get(), kBf16, I_, expert_.as<std::int32_t>(),
                                 expert, H_, moe_out_.as<float>(), H_, stream_));
  }
  mark("moe experts down", expert_read(T, false) + 4.0 * P * (I_ + H_));
  return err.status;
}

}  // namespace tandem::model::cuda
