// glm5_next_text on CUDA, one step (eager): inputs staged, then per layer, for T tokens of every
// sequence of the step at once,
//   attention sublayer   x, post, comb = hc_collapse(streams); h = rmsnorm(x)
//                        y = KDA(h) (recurrent state of each sequence's slot) or DSA(h) (pool rows)
//                        streams = hc_expand(streams, y, post, comb)
//   FFN sublayer         the same around the dense or MoE FFN (clamped SwiGLU)
// and logits = lm_head(rmsnorm(mean of the streams)) for the rows asked for. DSA runs absorbed:
// the query is projected into the latent space per head (kv_b's key part), attends to the cached
// latents the indexer selected, and the values come out of the latent (kv_b's value part).
#include <algorithm>
#include <cmath>

#include "cuda_glm5_next.hpp"
#include "glue_kernels.hpp"
#include "tandem/kernels/moe_experts.hpp"
#include "tandem/kernels/moe_routing.hpp"
#include "tandem/kernels/sampling_cuda.hpp"

namespace tandem::model::cuda {

Result<std::vector<float>> Glm5NextCuda::step(std::span<const PagedWork> work) {
  auto rows = run(work);
  if (!rows) return rows.error();
  std::vector<float> out(static_cast<std::size_t>(rows.value()) * static_cast<std::size_t>(V_));
  FirstError err;
  if (!out.empty())
    err(cuda_error(cudaMemcpyAsync(out.data(), logits_.get(), out.size() * 4, cudaMemcpyDeviceToHost, stream_), "logits"));
  err(cuda_error(cudaStreamSynchronize(stream_), "step"));
  if (!err.ok()) return error(err.message);
  return out;
}

Result<std::vector<std::int32_t>> Glm5NextCuda::step_greedy(std::span<const PagedWork> work) {
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

Result<int> Glm5NextCuda::run(std::span<const PagedWork> work) {
  if (pool_.empty()) return error("CUDA model: make_device_pool first");
  const int S = static_cast<int>(work.size());
  if (S == 0) return 0;
  if (S > s_cap_) return error("CUDA step: " + std::to_string(S) + " sequences, more than max-num-seqs " + std::to_string(s_cap_));
  int T = 0, R = 0;
  std::vector<bool> slot_used(static_cast<std::size_t>(s_cap_), false);
  for (const PagedWork& w : work) {
    const int n = static_cast<int>(w.tokens.size());
    const int end = w.start + n;
    if (w.start < 0 || end > max_len_)
      return error("CUDA step: positions " + std::to_string(w.start) + ".." + std::to_string(end) + " exceed max-model-len " +
                   std::to_string(max_len_));
    const int need = (end + block_size_ - 1) / block_size_;
    if (static_cast<int>(w.block_table.size()) < need)
      return error("CUDA step: the sequence needs " + std::to_string(need) + " blocks, the table has " +
                   std::to_string(w.block_table.size()));
    for (int b = 0; b < need; ++b)
      if (w.block_table[static_cast<std::size_t>(b)] < 0 || w.block_table[static_cast<std::size_t>(b)] >= num_blocks_)
        return error("CUDA step: block id " + std::to_string(w.block_table[static_cast<std::size_t>(b)]) + " is outside the pool");
    for (auto id : w.tokens)
      if (id < 0 || id >= V_) return error("CUDA step: token id " + std::to_string(id) + " is outside the vocabulary");
    if (state_floats_ > 0) {
      if (w.state_slot < 0 || w.state_slot >= s_cap_)
        return error("CUDA step: " + config().model_type + " keeps a recurrent state per sequence; PagedWork::state_slot must be in [0, " +
                     std::to_string(s_cap_) + "), got " + std::to_string(w.state_slot));
      if (slot_used[static_cast<std::size_t>(w.state_slot)])
        return error("CUDA step: two sequences of one step share recurrent-state slot " + std::to_string(w.state_slot));
      slot_used[static_cast<std::size_t>(w.state_slot)] = true;
    }
    if (w.logits && n == 0) return error("CUDA step: logits asked for a sequence with no new token");
    T += n, R += w.logits ? 1 : 0;
  }
  if (T > t_cap_) return error("CUDA step: " + std::to_string(T) + " tokens, more than the " + std::to_string(t_cap_) + " a step holds");

  std::int32_t* tok = host_in_.data();
  std::int32_t* pos = tok + t_cap_;
  std::int32_t* seq = pos + t_cap_;
  std::int32_t* begin = seq + t_cap_;
  std::int32_t* slot = begin + s_cap_ + 1;
  std::int32_t* reset = slot + s_cap_;
  std::int32_t* rows = reset + s_cap_;
  std::int32_t* tables = rows + s_cap_;
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
    for (std::size_t i = 0; i < w.tokens.size(); ++i, ++t)
      tok[t] = w.tokens[i], pos[t] = w.start + static_cast<int>(i), seq[t] = s;
    if (w.logits) rows[r++] = t - 1;
  }
  begin[S] = t;
  // The whole staging area in one copy (synchronous: the host buffer is reused by the next step).
  if (auto e = cuda_error(cudaMemcpyAsync(inputs_.get(), host_in_.data(), in_ints_ * 4, cudaMemcpyHostToDevice, stream_),
                          "step inputs");
      !e.empty())
    return error(e);
  if (auto e = enqueue(T, S, R); !e.empty()) return error("CUDA step: " + e);
  return R;
}

std::string Glm5NextCuda::gemm(const void* x, long ldx, int rows, int in, const DeviceBuffer& w, int out, void* y, long ldy,
                               k::DType y_type) {
  k::GemmArgs g;
  g.rows = rows, g.in = in, g.out = out;
  g.x = x, g.ldx = ldx, g.w = w.get(), g.ldw = in, g.y = y, g.ldy = ldy;
  g.y_type = y_type;
  return gemm_->run(g, stream_);
}

std::string Glm5NextCuda::gemm_f32(const float* x, long ldx, int rows, int in, const DeviceBuffer& w, int out, float* y, long ldy) {
  FirstError err;
  err(to_bf16(x, ldx, rows, in, scratch_bf_.get(), in, stream_));
  err(gemm(scratch_bf_.get(), in, rows, in, w, out, y, ldy));
  return err.message;
}

DsaPool Glm5NextCuda::pool_of(int slot) const {
  DsaPool p;
  p.rows = pool_.as<float>() + static_cast<long>(slot) * static_cast<long>(layer_rows_) * width_;
  p.width = width_;
  p.tables = in_tables();
  p.max_blocks = max_blocks_;
  p.block_size = block_size_;
  return p;
}

std::string Glm5NextCuda::enqueue(int T, int S, int R) {
  const DecoderConfig& d = c_.d;
  const float eps = static_cast<float>(d.rms_norm_eps);
  FirstError err;
  err(hc_embed_cuda(embed_.get(), in_tokens(), T, hc_, H_, streams_.as<float>(), stream_));
  for (int l = 0; l < d.num_hidden_layers && err.ok(); ++l) {
    const Glm5Layer& L = layers_[static_cast<std::size_t>(l)];
    err(sublayer(L.attn_hc, L.input_norm, T, 0, L, S));
    err(sublayer(L.ffn_hc, L.post_norm, T, 1, L, S));
  }
  err(hc_mean_cuda(streams_.as<float>(), T, hc_, H_, mean_.as<float>(), stream_));
  err(rms_norm_f32(mean_.as<float>(), H_, T, H_, final_norm_.as<float>(), eps, nullptr, 0, h_.get(), H_, stream_));
  if (R > 0) {
    err(gather_rows(h_.get(), H_, in_rows(), R, head_in_.get(), stream_));
    err(gemm(head_in_.get(), H_, R, H_, head_, V_, logits_.get(), V_));
  }
  return err.message;
}

std::string Glm5NextCuda::sublayer(const Glm5Hc& hc, const DeviceBuffer& norm, int T, int which, const Glm5Layer& L, int S) {
  HcShape s;
  s.hc = hc_, s.hidden = H_, s.sinkhorn_iters = c_.hc_sinkhorn_iters;
  s.rms_eps = static_cast<float>(c_.d.rms_norm_eps), s.hc_eps = static_cast<float>(c_.hc_eps);
  FirstError err;
  err(hc_collapse_cuda(s, streams_.as<float>(), T, hc.fn.as<float>(), hc.base.as<float>(), hc.scale.as<float>(), x_.as<float>(),
                       post_.as<float>(), comb_.as<float>(), stream_));
  err(rms_norm_f32(x_.as<float>(), H_, T, H_, norm.as<float>(), s.rms_eps, nullptr, 0, h_.get(), H_, stream_));
  if (which == 0) err(L.linear ? kda(L, T, S) : dsa(L, T));
  else err(ffn(L, T));
  err(hc_expand_cuda(s, streams_.as<float>(), T, y_.as<float>(), post_.as<float>(), comb_.as<float>(), stream_));
  return err.message;
}

std::string Glm5NextCuda::kda(const Glm5Layer& L, int T, int S) {
  FirstError err;
  float* proj = kproj_.as<float>();
  err(gemm(h_.get(), H_, T, H_, L.w_in, kda_in_, proj, kda_in_));
  err(gemm_f32(proj + 3 * lqk_, kda_in_, T, lhd_, L.f_b, lqk_, graw_.as<float>(), lqk_));
  err(gemm_f32(proj + 3 * lqk_ + lhd_, kda_in_, T, lhd_, L.g_b, lqk_, gate_.as<float>(), lqk_));
  KdaShape s;
  s.heads = lh_, s.head_dim = lhd_, s.conv_kernel = c_.linear_conv_kernel_dim;
  s.lower_bound_set = c_.linear_lower_bound.has_value();
  s.lower_bound = static_cast<float>(c_.linear_lower_bound.value_or(0.0));
  s.rms_eps = static_cast<float>(c_.d.rms_norm_eps);
  KdaWeights w{L.conv.as<float>(), L.a_log.as<float>(), L.dt_bias.as<float>(), L.o_norm.as<float>()};
  KdaIo io;
  io.u = proj, io.ld_u = kda_in_;
  io.g_raw = graw_.as<float>(), io.ld_g = lqk_;
  io.beta_raw = proj + 3 * lqk_ + 2 * lhd_, io.ld_beta = kda_in_;
  io.gate_raw = gate_.as<float>(), io.ld_gate = lqk_;
  io.o = kout_.as<float>(), io.ld_o = lqk_;
  err(kda_recurrent_cuda(s, w, io, S, in_begin(), in_slot(), in_reset(), state_.as<float>(), state_floats_, L.state_at, stream_));
  err(gemm_f32(kout_.as<float>(), lqk_, T, lqk_, L.o, H_, y_.as<float>(), H_));
  return err.message;
}

std::string Glm5NextCuda::dsa(const Glm5Layer& L, int T) {
  FirstError err;
  DsaShape s;
  s.lora_q = lora_q_, s.lora_kv = lora_kv_, s.rope = rope_;
  s.index_heads = ih_, s.index_dim = id_, s.index_topk = c_.index_topk, s.kpool = c_.index_kpool;
  s.select_tail = c_.index_kpool_always_select_tail, s.indexer = L.indexer;
  s.rms_eps = static_cast<float>(c_.d.rms_norm_eps);
  const int P = lora_q_ + lora_kv_ + rope_ + (L.indexer ? 2 * id_ + ih_ : 0);
  float* proj = dproj_.as<float>();
  err(gemm(h_.get(), H_, T, H_, L.w_in, P, proj, P));
  const DsaPool pool = pool_of(L.slot);
  DsaNorms norms{L.q_a_norm.as<float>(), L.kv_a_norm.as<float>(), L.k_norm.as<float>(), L.k_norm_bias.as<float>()};
  err(dsa_prepare_cuda(s, norms, proj, P, T, in_seq(), in_pos(), pool, qr_.get(), iw_.as<float>(), stream_));
  const int q_rows = heads_ * qk_ + (L.indexer ? ih_ * id_ : 0);
  float* q = qall_.as<float>();
  err(gemm(qr_.get(), lora_q_, T, lora_q_, L.q_all, q_rows, q, q_all_));
  if (L.indexer)
    err(dsa_select_cuda(s, pool, q + heads_ * qk_, q_all_, iw_.as<float>(), L.kpool_ape.as<float>(), T, in_seq(), in_pos(),
                        scores_.as<float>(), chosen_.as<std::int32_t>(), max_pools_, sel_.as<std::int32_t>(),
                        sel_n_.as<std::int32_t>(), max_sel_, stream_));
  // Absorbed query: q_nope[h] . W_kb[h] (W_kb[h] = kv_b rows h*(nope+vd) .. +nope, [nope, kv_lora]).
  err(to_bf16(q, q_all_, T, heads_ * qk_, qall_bf_.get(), q_all_, stream_));
  const long kvb_stride = static_cast<long>(nope_ + vd_) * lora_kv_;
  k::GemmArgs qa;
  qa.rows = T, qa.in = nope_, qa.out = lora_kv_, qa.batch = heads_;
  qa.x = qall_bf_.get(), qa.ldx = q_all_, qa.stride_x = qk_;
  qa.w = L.kv_b.get(), qa.ldw = lora_kv_, qa.stride_w = kvb_stride, qa.w_trans = false;
  qa.y = qlat_.get(), qa.ldy = static_cast<long>(heads_) * lora_kv_, qa.stride_y = lora_kv_;
  qa.y_type = k::DType::f32;
  err(gemm_->run(qa, stream_));
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(qk_)));
  err(dsa_attention_cuda(s, pool, heads_, qlat_.as<float>(), q + nope_, q_all_, qk_, T, in_seq(), sel_.as<std::int32_t>(),
                         sel_n_.as<std::int32_t>(), max_sel_, scale, olat_.as<float>(), stream_));
  // Values: O[h] . W_v[h]^T (W_v[h] = kv_b rows h*(nope+vd)+nope .. +vd, [vd, kv_lora]).
  err(to_bf16(olat_.as<float>(), static_cast<long>(heads_) * lora_kv_, T, heads_ * lora_kv_, olat_bf_.get(),
              static_cast<long>(heads_) * lora_kv_, stream_));
  k::GemmArgs va;
  va.rows = T, va.in = lora_kv_, va.out = vd_, va.batch = heads_;
  va.x = olat_bf_.get(), va.ldx = static_cast<long>(heads_) * lora_kv_, va.stride_x = lora_kv_;
  va.w = L.kv_b.as<std::uint16_t>() + static_cast<long>(nope_) * lora_kv_, va.ldw = lora_kv_, va.stride_w = kvb_stride;
  va.y = attn_.get(), va.ldy = static_cast<long>(heads_) * vd_, va.stride_y = vd_;
  va.y_type = k::DType::f32;
  err(gemm_->run(va, stream_));
  err(gemm_f32(attn_.as<float>(), static_cast<long>(heads_) * vd_, T, heads_ * vd_, L.o, H_, y_.as<float>(), H_));
  return err.message;
}

std::string Glm5NextCuda::mlp(const Glm5Mlp& m, int T, void* out, k::DType out_type) {
  FirstError err;
  err(gemm(h_.get(), H_, T, H_, m.gate_up, 2 * m.width, mlp_gu_.get(), 2 * m.width, k::DType::bf16));
  err(clamped_silu_and_mul_cuda(mlp_gu_.get(), mlp_act_.get(), T, m.width, swiglu_limit_, stream_));
  err(gemm(mlp_act_.get(), m.width, T, m.width, m.down, H_, out, H_, out_type));
  return err.message;
}

std::string Glm5NextCuda::ffn(const Glm5Layer& L, int T) {
  if (!L.moe) return mlp(L.dense, T, y_.get(), k::DType::f32);
  const MoeConfig& m = c_.d.moe;
  k::MoeRouting routing;
  routing.n_experts = E_, routing.n_group = m.n_group, routing.topk_group = m.topk_group, routing.top_k = K_;
  routing.norm_topk_prob = m.norm_topk_prob;
  routing.routed_scaling_factor = static_cast<float>(m.routed_scaling_factor);
  FirstError err;
  err(k::router_logits_cuda(h_.get(), T, H_, L.router.as<float>(), E_, router_logits_.as<float>(), stream_));
  err(k::moe_route_cuda(routing, router_logits_.as<float>(), L.correction_bias.as<float>(), T, expert_.as<std::int32_t>(),
                        weight_.as<float>(), stream_));
  err(k::moe_sort_cuda(expert_.as<std::int32_t>(), T, K_, 0, E_, offsets_.as<std::int32_t>(), sorted_.as<std::int32_t>(),
                       pair_pos_.as<std::int32_t>(), stream_));
  err(k::grouped_gemm_cuda(h_.get(), H_, sorted_.as<std::int32_t>(), offsets_.as<std::int32_t>(), E_, L.experts_gate_up.get(),
                           2 * I_, H_, moe_gu_.get(), 2L * I_, stream_));
  err(clamped_silu_and_mul_cuda(moe_gu_.get(), moe_act_.get(), T * K_, I_, swiglu_limit_, stream_));
  err(k::grouped_gemm_cuda(moe_act_.get(), I_, nullptr, offsets_.as<std::int32_t>(), E_, L.experts_down.get(), H_, I_,
                           moe_out_.get(), H_, stream_));
  const bool shared = L.shared.width > 0;
  if (shared) err(mlp(L.shared, T, shared_out_.get(), k::DType::bf16));
  err(k::moe_combine_cuda(moe_out_.get(), pair_pos_.as<std::int32_t>(), weight_.as<float>(), T, K_, H_,
                          shared ? shared_out_.get() : nullptr, ybf_.get(), stream_));
  err(to_f32(ybf_.get(), H_, T, H_, y_.as<float>(), H_, stream_));
  return err.message;
}

}  // namespace tandem::model::cuda
