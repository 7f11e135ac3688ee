// glm4_moe_lite on CUDA, one step: inputs staged, the forward enqueued, decode replayed from CUDA
// graphs (cuda_model.hpp). The math per layer, with T tokens of every sequence of the step at once:
//   fused = x W_in^T (+b)            W_in = [q_a | kv_a] (or [q_proj | kv_a] without a query LoRA)
//   q     = q_b(rmsnorm(fused[:, q_a]))                          [T, heads, nope + rope]
//   latent= [rmsnorm(c), rope(kr)] = fused[:, kv_a] normalised and rotated; written to the pool
//   Q     = [q_nope . W_kb[h], rope(q_rope)]   per head            [T, heads, kv_lora + rope]
//   O     = paged attention of Q over the latents (the value is the latent itself)
//   attn  = O . W_v[h]^T per head; delta = o_proj(attn)
// then the FFN (dense, or routed experts + shared experts) and the residual adds fused into the
// next RMSNorm. The math and names follow glm4_moe_lite.cpp, the CPU reference it is checked against.
#include <algorithm>
#include <cmath>

#include "cuda_glm4_moe_lite.hpp"
#include "glue_kernels.hpp"
#include "tandem/kernels/activation.hpp"
#include "tandem/kernels/embedding.hpp"
#include "tandem/kernels/moe_experts.hpp"
#include "tandem/kernels/moe_routing.hpp"
#include "tandem/kernels/sampling_cuda.hpp"
#include "tandem/kernels/skinny_gemm.hpp"
#include "tandem/kernels/rope.hpp"

namespace tandem::model::cuda {

Result<std::vector<float>> Glm4MoeLiteCuda::step(std::span<const PagedWork> work) {
  auto rows = run(work);
  if (!rows) return rows.error();
  std::vector<float> out(static_cast<std::size_t>(rows.value()) * static_cast<std::size_t>(V_));
  FirstError err;
  err(cuda_error(cudaMemcpyAsync(out.data(), logits_.get(), out.size() * 4, cudaMemcpyDeviceToHost, stream_), "logits"));
  err(cuda_error(cudaStreamSynchronize(stream_), "step"));
  if (!err.ok()) return error(err.message);
  return out;
}

Result<std::vector<std::int32_t>> Glm4MoeLiteCuda::step_greedy(std::span<const PagedWork> work) {
  auto rows = run(work);
  if (!rows) return rows.error();
  const int R = rows.value();
  FirstError err;
  std::vector<k::Sampled> got(static_cast<std::size_t>(R));
  if (R > 0) {
    err(k::sample_cuda(logits_.as<float>(), R, V_, sample_params_.as<k::SamplingParams>(), uniform_.as<double>(),
                       sampled_.as<k::Sampled>(), keep_.as<std::uint8_t>(), stream_));
    err(cuda_error(cudaMemcpyAsync(got.data(), sampled_.get(), got.size() * sizeof(k::Sampled), cudaMemcpyDeviceToHost, stream_),
                   "tokens"));
  }
  err(cuda_error(cudaStreamSynchronize(stream_), "step"));
  if (!err.ok()) return error(err.message);
  std::vector<std::int32_t> ids;
  for (const auto& s : got) ids.push_back(s.token);
  return ids;
}

Result<int> Glm4MoeLiteCuda::run(std::span<const PagedWork> work) {
  if (pool_.empty()) return error("CUDA model: make_device_pool first");
  const int S = static_cast<int>(work.size());
  if (S == 0) return 0;
  if (S > s_cap_) return error("CUDA step: " + std::to_string(S) + " sequences, more than max-num-seqs " + std::to_string(s_cap_));
  int T = 0, R = 0, max_context = 0;
  bool decode = true;
  for (const PagedWork& w : work) {
    const int n = static_cast<int>(w.tokens.size());
    if (n == 0) return error("CUDA step: an item without tokens");
    const int end = w.start + n;
    if (w.start < 0 || end > max_len_)
      return error("CUDA step: positions up to " + std::to_string(end) + " exceed max-model-len " + std::to_string(max_len_));
    const int need = (end + block_size_ - 1) / block_size_;
    if (need > static_cast<int>(w.block_table.size()))
      return error("CUDA step: " + std::to_string(end) + " tokens need " + std::to_string(need) + " blocks, the table has " +
                   std::to_string(w.block_table.size()));
    for (int b = 0; b < need; ++b)
      if (w.block_table[static_cast<std::size_t>(b)] < 0 || w.block_table[static_cast<std::size_t>(b)] >= num_blocks_)
        return error("CUDA step: block id " + std::to_string(w.block_table[static_cast<std::size_t>(b)]) + " is outside the pool");
    for (auto id : w.tokens)
      if (id < 0 || id >= V_) return error("CUDA step: token id " + std::to_string(id) + " is outside the vocabulary");
    T += n, R += w.logits ? 1 : 0, max_context = std::max(max_context, end);
    decode = decode && n == 1 && w.logits;
  }
  if (T > t_cap_) return error("CUDA step: " + std::to_string(T) + " tokens, more than the " + std::to_string(t_cap_) + " a step holds");

  const bool graph = decode && !opt_.enforce_eager;
  const int B = graph ? std::min(next_pow2(S), s_cap_) : S;  // padded to the graph's bucket
  const int Tn = graph ? B : T, Rn = graph ? B : R;
  std::int32_t* tok = host_in_;
  std::int32_t* pos = tok + t_cap_;
  std::int32_t* seq = pos + t_cap_;
  std::int32_t* rows = seq + t_cap_;
  std::int32_t* tables = rows + s_cap_;
  const std::size_t mb = static_cast<std::size_t>(max_blocks_);
  int t = 0, r = 0;
  for (int s = 0; s < B; ++s) {
    std::int32_t* table = tables + static_cast<std::size_t>(s) * mb;
    if (s >= S) {  // padding: token 0 at position 0 of a sequence that owns only the scratch block
      std::fill(table, table + mb, num_blocks_);
      tok[t] = 0, pos[t] = 0, seq[t] = s, rows[r++] = t, ++t;
      continue;
    }
    const PagedWork& w = work[static_cast<std::size_t>(s)];
    const std::size_t have = std::min(mb, w.block_table.size());
    std::copy(w.block_table.begin(), w.block_table.begin() + static_cast<long>(have), table);
    std::fill(table + have, table + mb, num_blocks_);
    for (std::size_t i = 0; i < w.tokens.size(); ++i, ++t)
      tok[t] = w.tokens[i], pos[t] = w.start + static_cast<int>(i), seq[t] = s;
    if (w.logits) rows[r++] = t - 1;
  }
  FirstError err;
  auto copy = [&](std::int32_t* dst, const std::int32_t* src, std::size_t n) {
    if (n > 0) err(cuda_error(cudaMemcpyAsync(dst, src, n * 4, cudaMemcpyHostToDevice, stream_), "step inputs"));
  };
  copy(in_tokens(), tok, static_cast<std::size_t>(Tn));
  copy(in_pos(), pos, static_cast<std::size_t>(Tn));
  copy(in_seq(), seq, static_cast<std::size_t>(Tn));
  copy(in_rows(), rows, static_cast<std::size_t>(Rn));
  copy(in_tables(), tables, static_cast<std::size_t>(B) * mb);
  if (!err.ok()) return error(err.message);
  if (calibrate_) {
    err(calibrate(T, R, max_context));  // before any graph is captured: graphs bake the scales in
    if (!err.ok()) return error("CUDA step: " + err.message);
  }

  if (graph) {
    if (auto it = graphs_.find(B); it != graphs_.end()) {
      err(cuda_error(cudaGraphLaunch(it->second, stream_), "graph launch"));
    } else {
      // First step of this size: run it eagerly (which also plans its GEMMs), then capture the
      // same enqueue, attending up to max-model-len so the graph serves every later context.
      err(enqueue(B, B, max_context));
      if (err.ok()) err(capture(B));
    }
  } else {
    err(enqueue(T, R, max_context));
  }
  if (!err.ok()) return error("CUDA step: " + err.message);
  return R;
}

std::string Glm4MoeLiteCuda::capture(int B) {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  FirstError err;
  err(cuda_error(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "begin capture"));
  if (!err.ok()) return err.message;
  err(enqueue(B, B, max_len_));
  const cudaError_t end = cudaStreamEndCapture(stream_, &g);
  err(cuda_error(end, "end capture"));
  if (err.ok()) err(cuda_error(cudaGraphInstantiate(&exec, g, 0), "instantiate graph"));
  if (g) cudaGraphDestroy(g);
  if (!err.ok()) return err.message;
  graphs_[B] = exec;
  return {};
}

std::string Glm4MoeLiteCuda::calibrate(int T, int R, int max_context) {
  const std::size_t L = kv_scales_.size();
  FirstError err;
  if (kv_amax_.empty()) err(kv_amax_.allocate(L * 4, "KV amax"));
  err(cuda_error(cudaMemsetAsync(kv_amax_.get(), 0, L * 4, stream_), "KV amax"));
  measuring_ = true;
  err(enqueue(T, R, max_context));
  measuring_ = false;
  std::vector<float> amax(L);
  err(cuda_error(cudaMemcpyAsync(amax.data(), kv_amax_.get(), L * 4, cudaMemcpyDeviceToHost, stream_), "KV amax"));
  err(cuda_error(cudaStreamSynchronize(stream_), "KV scale calibration"));
  if (!err.ok()) return err.message;
  for (std::size_t l = 0; l < L; ++l) kv_scales_[l] = fp8_kv_scale_from_amax(amax[l]);
  calibrate_ = false;
  return {};
}

std::string Glm4MoeLiteCuda::all_reduce(DeviceBuffer& b, int T) {
  if (!all_reduce_) return {};
  auto s = all_reduce_->all_reduce_sum(b.get(), static_cast<std::size_t>(T) * static_cast<std::size_t>(H_), k::DType::f32, stream_);
  return s ? std::string() : s.error().message;
}

std::string Glm4MoeLiteCuda::gemm(const k::GemmArgs& g) {
  // (The few-rows kernel's bias is bf16; fp32 outputs carry fp32 biases, which go to cuBLASLt.)
  if (g.batch == 1 && g.w_trans && g.xw_type == kBf16 && g.rows <= opt_.skinny_rows && k::skinny_gemm_fits(g.x, g.ldx, g.w, g.in) &&
      !(g.bias && g.y_type != kBf16))
    return k::skinny_gemm_cuda(g.x, g.ldx, g.rows, g.w, g.in, g.out, g.bias, g.y, g.ldy, g.y_type, stream_);
  return gemm_->run(g, stream_);
}

std::string Glm4MoeLiteCuda::enqueue(int T, int R, int max_context) {
  const DecoderConfig& d = c_.d;
  const float eps = static_cast<float>(d.rms_norm_eps);
  FirstError err;
  err(k::embedding_cuda(kBf16, embed_.get(), V_, H_, in_tokens(), T, embed_rows_.get(), stream_));
  err(cuda_error(cudaMemsetAsync(x_.get(), 0, static_cast<std::size_t>(T) * static_cast<std::size_t>(H_) * 4, stream_), "zero"));
  for (int l = 0; l < d.num_hidden_layers && err.ok(); ++l) {
    const Layer& a = layers_[static_cast<std::size_t>(l)];
    // x += delta (the embedding, or the last FFN's output); h = rmsnorm(x)
    // The first layer adds the embedding rows (bf16), the others the last FFN's output (fp32).
    err(add_rmsnorm(x_.as<float>(), l == 0 ? embed_rows_.get() : delta_.get(), l == 0 ? kBf16 : k::DType::f32,
                    a.input_norm.get(), h_.get(), T, H_, eps, stream_));
    if (l > 0) err(trace(TracePoint::after_ffn, l - 1, T));
    err(attention(l, a, T, max_context));
    err(all_reduce(delta_, T));
    err(add_rmsnorm(x_.as<float>(), delta_.get(), k::DType::f32, a.post_norm.get(), h_.get(), T, H_, eps, stream_,
                    a.moe ? h32_.as<float>() : nullptr));
    err(trace(TracePoint::after_attention, l, T));
    err(a.moe ? moe(a, T) : mlp(a.dense, T, delta_.get()));
    err(all_reduce(delta_, T));
  }
  err(add_rmsnorm(x_.as<float>(), delta_.get(), k::DType::f32, final_norm_.get(), h_.get(), T, H_, eps, stream_));
  err(trace(TracePoint::after_ffn, d.num_hidden_layers - 1, T));
  if (R > 0) {
    err(gather_rows(h_.get(), H_, in_rows(), R, head_in_.get(), stream_));
    k::GemmArgs g = linear(head_in_.get(), head_.empty() ? embed_ : head_, logits_.get(), R, H_, V_);
    g.y_type = k::DType::f32;
    err(gemm(g));
  }
  return err.message;
}

std::string Glm4MoeLiteCuda::attention(int l, const Layer& a, int T, int max_context) {
  FirstError err;
  auto* fused = fused_.as<std::uint16_t>();
  k::GemmArgs in = linear(h_.get(), a.w_in, fused, T, H_, in_rows_);
  in.bias = a.b_in.get();
  err(gemm(in));
  const long qw = static_cast<long>(heads_) * qk_;
  if (lora_q_ > 0) {
    err(rmsnorm_rows(fused, in_rows_, T, lora_q_, a.q_a_norm.get(), qlat_.get(), lora_q_, kLoraNormEps, stream_));
    err(gemm(linear(qlat_.get(), a.q_b, q_.get(), T, lora_q_, static_cast<int>(qw))));
  } else {
    err(cuda_error(cudaMemcpy2DAsync(q_.get(), static_cast<std::size_t>(qw) * 2, fused, static_cast<std::size_t>(in_rows_) * 2,
                                     static_cast<std::size_t>(qw) * 2, static_cast<std::size_t>(T), cudaMemcpyDeviceToDevice, stream_),
                   "query copy"));
  }
  // The latent row: rmsnorm(c), rope(kr), into the pool.
  std::uint16_t* latent = fused + q_rows_;
  const auto layout = c_.rope_interleave ? k::RopeLayout::interleaved : k::RopeLayout::half;
  err(rmsnorm_rows(latent, in_rows_, T, lora_kv_, a.kv_a_norm.get(), latent, in_rows_, kLoraNormEps, stream_));
  err(k::rope_cuda(kBf16, latent + lora_kv_, T, in_rows_, 1, rope_, rope_, inv_freq_.as<float>(), in_pos(), layout, stream_));
  err(trace(TracePoint::latent, l, T));
  if (measuring_) err(latent_amax(latent, in_rows_, T, width_, kv_amax_.as<float>() + l, stream_));
  char* layer_pool = pool_.as<char>() + static_cast<std::size_t>(l) * layer_bytes_;
  err(latent_cache_write(latent, in_rows_, T, width_, in_seq(), in_pos(), in_tables(), max_blocks_, block_size_, kv_type_,
                         kv_scales_[static_cast<std::size_t>(l)], layer_pool, stream_));

  // Absorbed query: q_nope[h] . W_kb[h] (W_kb[h] = kv_b rows h*(nope+vd) .. +nope, [nope, kv_lora]).
  const long kvb_stride = static_cast<long>(nope_ + vd_) * lora_kv_;
  auto* qattn = qattn_.as<std::uint16_t>();
  k::GemmArgs qa;
  qa.rows = T, qa.in = nope_, qa.out = lora_kv_, qa.batch = heads_;
  qa.x = q_.get(), qa.ldx = qw, qa.stride_x = qk_;
  qa.w = a.kv_b.get(), qa.ldw = lora_kv_, qa.stride_w = kvb_stride, qa.w_trans = false;
  qa.y = qattn, qa.ldy = static_cast<long>(heads_) * width_, qa.stride_y = width_;
  err(gemm(qa));
  err(cuda_error(cudaMemcpy2DAsync(qattn + lora_kv_, static_cast<std::size_t>(width_) * 2, q_.as<std::uint16_t>() + nope_,
                                   static_cast<std::size_t>(qk_) * 2, static_cast<std::size_t>(rope_) * 2,
                                   static_cast<std::size_t>(T) * static_cast<std::size_t>(heads_), cudaMemcpyDeviceToDevice, stream_),
                 "query rope copy"));
  err(k::rope_cuda(kBf16, qattn + lora_kv_, T, static_cast<long>(heads_) * width_, heads_, width_, rope_, inv_freq_.as<float>(),
                   in_pos(), layout, stream_));

  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(qk_)));
  err(k::paged_attention_cuda(kBf16, qattn, T, in_seq(), in_pos(), heads_, attn_layout(l), layer_pool, layer_pool, in_tables(),
                              max_blocks_, scale, olat_.get(), max_context, attn_ws_.get(), attn_ws_.bytes(), stream_));

  // Values: O[h] . W_v[h]^T (W_v[h] = kv_b rows h*(nope+vd)+nope .. +vd, [vd, kv_lora]).
  k::GemmArgs va;
  va.rows = T, va.in = lora_kv_, va.out = vd_, va.batch = heads_;
  va.x = olat_.get(), va.ldx = static_cast<long>(heads_) * lora_kv_, va.stride_x = lora_kv_;
  va.w = a.kv_b.as<std::uint16_t>() + static_cast<long>(nope_) * lora_kv_, va.ldw = lora_kv_, va.stride_w = kvb_stride;
  va.y = attn_.get(), va.ldy = static_cast<long>(heads_) * vd_, va.stride_y = vd_;
  err(gemm(va));
  k::GemmArgs o = linear(attn_.get(), a.o, delta_.get(), T, heads_ * vd_, H_);
  o.bias = a.o_bias.get();  // fp32, as the output
  o.y_type = k::DType::f32;
  err(gemm(o));
  return err.message;
}

std::string Glm4MoeLiteCuda::mlp(const Mlp& m, int T, void* out) {
  FirstError err;
  err(gemm(linear(h_.get(), m.gate_up, mlp_gu_.get(), T, H_, 2 * m.width)));
  err(k::silu_and_mul_cuda(kBf16, mlp_gu_.get(), mlp_act_.get(), T, m.width, stream_));
  k::GemmArgs down = linear(mlp_act_.get(), m.down, out, T, m.width, H_);
  down.y_type = k::DType::f32;  // into the fp32 delta or shared-expert sum
  err(gemm(down));
  return err.message;
}

std::string Glm4MoeLiteCuda::moe(const Layer& a, int T) {
  const MoeConfig& m = c_.d.moe;
  k::MoeRouting routing;
  routing.n_experts = E_, routing.n_group = m.n_group, routing.topk_group = m.topk_group, routing.top_k = K_;
  routing.norm_topk_prob = m.norm_topk_prob;
  routing.routed_scaling_factor = static_cast<float>(m.routed_scaling_factor);
  FirstError err;
  err(k::router_logits_f32_cuda(h32_.as<float>(), T, H_, a.router.as<float>(), E_, router_logits_.as<float>(), stream_));
  err(k::moe_route_cuda(routing, router_logits_.as<float>(), a.correction_bias.as<float>(), T, expert_.as<std::int32_t>(),
                        weight_.as<float>(), stream_));
  err(trace(TracePoint::routing, -1, T));
  err(k::moe_sort_cuda(expert_.as<std::int32_t>(), T, K_, 0, E_, offsets_.as<std::int32_t>(), sorted_.as<std::int32_t>(),
                       pair_pos_.as<std::int32_t>(), stream_));
  err(k::grouped_gemm_cuda(h_.get(), H_, sorted_.as<std::int32_t>(), offsets_.as<std::int32_t>(), E_, a.experts_gate_up.get(),
                           2 * I_, H_, moe_gu_.get(), 2L * I_, stream_));
  err(k::silu_and_mul_cuda(kBf16, moe_gu_.get(), moe_act_.get(), T * K_, I_, stream_));
  err(k::grouped_gemm_cuda(moe_act_.get(), I_, nullptr, offsets_.as<std::int32_t>(), E_, a.experts_down.get(), H_, I_,
                           moe_out_.get(), H_, stream_));
  const bool shared = a.shared.width > 0;
  if (shared) err(mlp(a.shared, T, shared_out_.get()));
  err(k::moe_combine_f32_cuda(moe_out_.get(), pair_pos_.as<std::int32_t>(), weight_.as<float>(), T, K_, H_,
                              shared ? shared_out_.as<float>() : nullptr, delta_.as<float>(), stream_));
  return err.message;
}

}  // namespace tandem::model::cuda
