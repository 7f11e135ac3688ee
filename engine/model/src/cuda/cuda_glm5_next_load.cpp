// glm5_next_text on CUDA, loading: the checkpoint's tensors onto the device (projections that read
// the same input fused into one matrix), the activation buffers a step of the configured size
// needs, the DSA pool and the recurrent-state slots.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "glm5_next_parts.hpp"
#include "capture_buffer.hpp"
#include "cuda_glm5_next.hpp"
#include "env_override.hpp"
#include "tandem/kernels/sampling_cuda.hpp"
#include "tandem/kernels/cuda_check.hpp"

namespace tandem::model::cuda {

using detail::Tensor;

Glm5NextCuda::Glm5NextCuda(ModelConfig config, comm::Communicator& comm, const CudaOptions& opt)
    : CudaModel(std::move(config), comm), c_(std::get<Glm5NextConfig>(this->config().arch)), opt_(opt) {
  const DecoderConfig& d = c_.d;
  tp_rank_ = comm.rank(), tp_size_ = comm.size();
  all_heads_ = d.num_attention_heads, all_lh_ = c_.linear_num_heads;
  E_ = d.moe.n_routed_experts, K_ = d.moe.num_experts_per_tok, I_ = d.moe.moe_intermediate_size;
  V_ = d.vocab_size;
  dsa_heads_ = split(all_heads_, tp_rank_, tp_size_);
  kda_heads_ = split(all_lh_, tp_rank_, tp_size_);
  vocab_ = split(V_, tp_rank_, tp_size_);
  experts_ = split(E_, tp_rank_, tp_size_);
  H_ = d.hidden_size, hc_ = c_.hc_mult, heads_ = dsa_heads_.size();
  nope_ = c_.qk_nope_head_dim, rope_ = c_.qk_rope_head_dim, qk_ = c_.qk_head_dim(), vd_ = c_.v_head_dim;
  lora_q_ = c_.q_lora_rank, lora_kv_ = c_.kv_lora_rank, width_ = detail::dsa_row_width(c_);
  lh_ = kda_heads_.size(), lhd_ = c_.linear_head_dim, lqk_ = lh_ * lhd_;
  kda_in_ = 3 * lqk_ + 2 * lhd_ + lh_;
  ih_ = c_.index_n_heads, id_ = c_.index_head_dim;
  dsa_in_ = lora_q_ + lora_kv_ + rope_ + 2 * id_ + ih_;
  q_all_ = heads_ * qk_ + ih_ * id_;
  max_len_ = opt.max_model_len > 0 ? opt.max_model_len : d.max_position_embeddings;
  t_cap_ = std::max(opt.max_num_batched_tokens, opt.max_num_seqs);
  s_cap_ = opt.max_num_seqs;
  r_cap_ = std::max(opt.max_logit_rows, s_cap_);
  max_sel_ = c_.index_topk + c_.index_kpool;
  max_pools_ = max_len_ / std::max(c_.index_kpool, 1) + 1;
  swiglu_limit_ = d.swiglu_limit ? static_cast<float>(*d.swiglu_limit) : INFINITY;
  const char* fp32 = std::getenv("TANDEM_GLM5_FP32_PRODUCTS");
  auto products = detail::glm5_fp32_products(fp32 ? fp32 : detail::kGlm5Fp32Default);
  if (products) fp32_ = products.value();
  else fp32_error_ = products.error().with_context("TANDEM_GLM5_FP32_PRODUCTS").message;
  // The constructor cannot fail: the first bad switch is kept for load() to refuse.
  for (Status e : {env_int("TANDEM_KDA_CHUNK", 0, kernels::kKdaMaxChunk, kda_chunk_),
                   env_int("TANDEM_KDA_CHUNK_MIN", 1, 1 << 30, kda_chunk_min_),
                   env_word("TANDEM_GLM5_FP32_KERNEL", "cuda_cores", "split", split_fp32_),
                   env_word("TANDEM_GLM5_EXPERTS", "pairs", "grouped", grouped_experts_),
                   env_int("TANDEM_KDA_REGISTERS", 0, 1, kda_registers_)})
    if (!e && fp32_error_.empty()) fp32_error_ = e.error().message;
  if (lhd_ % 16 != 0) kda_chunk_ = 0;  // kda_chunk_cuda's tensor-core tiles need it; token by token then
  if (H_ % 16 != 0 || I_ % 16 != 0) grouped_experts_ = false;  // the grouped kernels' loads; per pair then
}

Status Glm5NextCuda::load(const Checkpoint& ck) {
  const DecoderConfig& d = c_.d;
  if (!fp32_error_.empty()) return Error{fp32_error_};
  if (auto type = detail::dsa_pool_type(opt_.kv_cache_dtype); type) kv_type_ = type.value();
  else return type.error();
  kv_scale_ = kv_type_ == kernels::DType::fp8_e4m3 && opt_.kv_scale > 0.f ? opt_.kv_scale : 1.f;
  calibrate_ = kv_type_ == kernels::DType::fp8_e4m3 && !(opt_.kv_scale > 0.f);
  if (d.attention_bias) return Error{"attention_bias is not implemented for glm5_next on CUDA yet"};
  if (hc_ < 1 || hc_ > kernels::kMaxHc) return Error{"hc_mult must be in [1, 8] on CUDA"};
  if (lhd_ > 1024) return Error{"linear_head_dim must be at most 1024 on CUDA"};
  if (ih_ > 64) return Error{"index_n_heads must be at most 64 on CUDA"};
  if (id_ > 256) return Error{"index_head_dim must be at most 256 on CUDA"};
  if (lora_kv_ % 8 != 0 || lora_kv_ > 1024) return Error{"kv_lora_rank must be a multiple of 8, at most 1024, on CUDA"};
  if (H_ % 8 != 0 || (E_ > 0 && I_ % 8 != 0)) return Error{"hidden_size and moe_intermediate_size must be multiples of 8"};
  if (E_ > 1024) return Error{"at most 1024 routed experts"};
  // Every rank must hold at least one head of each attention kind: an empty slice would leave a
  // KDA layer without state or a DSA layer without queries on that rank. Decided from the head
  // counts, not this rank's slice, so every rank refuses with the reason (a refusal on the empty
  // rank alone would leave the others loaded, to fail later on a lost peer).
  const bool any_kda = std::find(c_.layer_is_linear.begin(), c_.layer_is_linear.end(), true) != c_.layer_is_linear.end();
  const bool any_dsa = std::find(c_.layer_is_linear.begin(), c_.layer_is_linear.end(), false) != c_.layer_is_linear.end();
  const bool dsa_short = any_dsa && all_heads_ < tp_size_;
  if (dsa_short || (any_kda && all_lh_ < tp_size_))
    return Error{std::to_string(tp_size_) + " tensor-parallel ranks over " +
                 (dsa_short ? std::to_string(all_heads_) + " attention heads"
                            : std::to_string(all_lh_) + " linear-attention heads") +
                 " leave a rank none; use at most " + std::to_string(dsa_short ? all_heads_ : all_lh_) + " ranks"};
  if (cudaSetDevice(opt_.device) != cudaSuccess) return Error{"cannot use CUDA device " + std::to_string(opt_.device)};
  if (auto e = TANDEM_CUDA_STATUS(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream"); !e) return e;
  auto gemm = k::GemmRunner::create();
  if (!gemm) return gemm.error().with_context("cuBLASLt");
  gemm_ = std::move(gemm).value();
  Uploader up(ck);
  const detail::TensorNames& text = detail::TensorNames::glm5_next();
  const detail::TensorNames wrapped = text.with_root("model.language_model.");
  names_ = ck.has(wrapped(Tensor::embed)) ? wrapped : text;
  // Vocabulary-parallel: this rank's rows of the embedding and the LM head.
  const std::size_t h = static_cast<std::size_t>(H_), v = static_cast<std::size_t>(vocab_.size());
  if (auto e = alloc_bf16(embed_, v * h, "embed_tokens"); !e) return e;
  up.bf16_rows(embed_, 0, names_(Tensor::embed), {V_, H_}, vocab_);
  if (auto e = alloc_f32(up, final_norm_, names_(Tensor::final_norm), {H_}); !e) return e;
  if (auto e = alloc_bf16(head_, v * h, "lm_head"); !e) return e;
  up.bf16_rows(head_, 0, names_(Tensor::lm_head), {V_, H_}, vocab_);
  std::uint64_t drafter_bytes = 0;  // the whole copies a drafter reads, not the step
  if (sharded() && opt_.drafter_vocab) {
    const std::size_t all = static_cast<std::size_t>(V_) * h;
    drafter_bytes = 2 * all * 2;
    if (auto e = alloc_bf16(full_embed_, all, "embed_tokens (whole, for the drafter)"); !e) return e;
    up.bf16(full_embed_, 0, names_(Tensor::embed), {V_, H_});
    if (auto e = alloc_bf16(full_head_, all, "lm_head (whole, for the drafter)"); !e) return e;
    up.bf16(full_head_, 0, names_(Tensor::lm_head), {V_, H_});
  }
  layers_.resize(static_cast<std::size_t>(d.num_hidden_layers));
  for (int l = 0; l < d.num_hidden_layers && up.ok(); ++l)
    if (auto e = load_layer(up, ck, l, layers_[static_cast<std::size_t>(l)]); !e) return e;
  if (!up.ok()) return up.error();
  if (auto e = finish_formats(); !e) return e;
  // A decode step reads every weight but the routed experts once, and each expert chosen by any token.
  // (A tensor-parallel rank counts its own weights: the experts it holds.)
  std::uint64_t expert = std::uint64_t{6} * static_cast<std::uint64_t>(I_) * h;
  for (const Glm5Layer& L : layers_)
    if (L.experts_gate_up_q.on()) expert = (L.experts_gate_up_q.bytes() + L.experts_down_q.bytes()) / static_cast<std::uint64_t>(E_);
  decode_bytes_.per_expert = expert;
  decode_bytes_.experts = E_, decode_bytes_.top_k = K_;
  decode_bytes_.fixed = weight_bytes_ - drafter_bytes - static_cast<std::uint64_t>(decode_bytes_.moe_layers) * static_cast<std::uint64_t>(experts_.size()) * expert;
  return allocate_activations();
}

Status Glm5NextCuda::alloc_bf16(DeviceBuffer& b, std::size_t n, const std::string& what) {
  weight_bytes_ += n * 2;
  return b.allocate(n * 2, what);
}

Status Glm5NextCuda::alloc_f32(Uploader& up, DeviceBuffer& b, const std::string& name, const std::vector<int64_t>& shape) {
  std::size_t n = 1;
  for (auto s : shape) n *= static_cast<std::size_t>(s);
  weight_bytes_ += n * 4;
  if (auto e = b.allocate(n * 4, name); !e) return e;
  up.f32(b, name, shape);
  return {};
}

void Glm5NextCuda::note_format(const std::string& what, WeightFormat f, const std::string& why_dense) {
  format_counts_[f == WeightFormat::dense ? "bf16" : weight_format_name(f)] += 1;
  if (!why_dense.empty() && dense_notes_.size() < 600) dense_notes_ += "; " + what + " kept in bf16: " + why_dense;
}

// Each part planned alone (stored_weight): consecutive quantised parts of one shape make a stack,
// consecutive bf16 parts one bf16 run. A projection whose parts are all bf16 is left to the caller.
Result<bool> Glm5NextCuda::load_quant(const Checkpoint& ck, const std::vector<ProjectionPart>& parts, Glm5Weight& W) {
  if (sharded()) {  // (parts name whole tensors; a rank holds slices)
    note_format(parts[0].name, WeightFormat::dense, "");
    return false;
  }
  std::vector<StoredWeight> stored;
  bool any = false;
  for (const ProjectionPart& p : parts) {
    auto w = stored_weight(ck, p.name, p.out, p.in);
    if (!w) return w.error();
    if (w->format != WeightFormat::dense && w->in % 16 != 0) w->format = WeightFormat::dense;  // read dequantised
    any = any || w->format != WeightFormat::dense;
    stored.push_back(std::move(w.value()));
  }
  if (!any) {
    note_format(parts[0].name, WeightFormat::dense, "");
    return false;
  }
  const std::span<const StoredWeight> all(stored);
  int first = 0;
  for (std::size_t i = 0; i < all.size();) {
    const bool quant = all[i].format != WeightFormat::dense;
    std::size_t j = i + 1;
    int rows = static_cast<int>(all[i].out);
    while (j < all.size() && all[j].format == all[i].format && (!quant || (all[j].out == all[i].out && all[j].in == all[i].in)))
      rows += static_cast<int>(all[j++].out);
    Glm5QuantRun& r = W.runs.emplace_back();
    r.first = first, r.rows = rows;
    first += rows;
    if (quant) {
      if (auto e = upload_quant(r.q, ck, all[i].format, all.subspan(i, j - i)); !e) return e.error();
      weight_bytes_ += r.q.bytes();
      for (std::size_t k = i; k < j; ++k) quantised_tensors_.push_back(all[k].name);
      note_format(all[i].name, all[i].format, {});
    } else {
      if (auto e = alloc_bf16(r.dense, static_cast<std::size_t>(rows) * static_cast<std::size_t>(all[i].in), all[i].name); !e) return e.error();
      Uploader up(ck);
      std::size_t at = 0;
      for (std::size_t k = i; k < j; ++k, at += static_cast<std::size_t>(all[k - 1].out * all[k - 1].in))
        up.bf16(r.dense, at, all[k].name, {all[k].out, all[k].in});
      if (!up.ok()) return up.error();
      note_format(all[i].name, WeightFormat::dense, "");
    }
    i = j;
  }
  return true;
}

// The routed experts kept quantised when every expert's gate, up and down are of one format.
Result<bool> Glm5NextCuda::load_quant_experts(const Checkpoint& ck, int l, Glm5Layer& L) {
  if (ck.has(names_(Tensor::experts_gate_up, l))) return false;  // the fused 3-D layout is read in bf16
  const std::string what = "layer " + std::to_string(l) + "'s routed experts";
  if (sharded()) {
    note_format(what, WeightFormat::dense, "a tensor-parallel rank loads its experts in bf16");
    return false;
  }
  std::vector<ProjectionPart> gate_up, all;
  for (int e = 0; e < E_; ++e) {
    gate_up.push_back({names_(Tensor::expert_gate, l, e), I_, H_});
    gate_up.push_back({names_(Tensor::expert_up, l, e), I_, H_});
  }
  all = gate_up;
  for (int e = 0; e < E_; ++e) all.push_back({names_(Tensor::expert_down, l, e), H_, I_});
  auto plan = plan_projection(ck, all);
  if (!plan) return plan.error();
  if (plan->format == WeightFormat::dense) {
    note_format(what, WeightFormat::dense, plan->why_dense);
    return false;
  }
  const std::span<const StoredWeight> parts(plan->parts);
  if (auto e = upload_quant(L.experts_gate_up_q, ck, plan->format, parts.subspan(0, gate_up.size())); !e) return e.error();
  if (auto e = upload_quant(L.experts_down_q, ck, plan->format, parts.subspan(gate_up.size())); !e) return e.error();
  weight_bytes_ += L.experts_gate_up_q.bytes() + L.experts_down_q.bytes();
  for (const StoredWeight& w : plan->parts) quantised_tensors_.push_back(w.name);
  note_format(what, plan->format, {});
  return true;
}

// The dequantisation scratch (the largest quantised run) and the formats' summary.
Status Glm5NextCuda::finish_formats() {
  std::size_t scratch = 0;
  auto take = [&](const Glm5Weight& w) {
    for (const Glm5QuantRun& r : w.runs) scratch = std::max(scratch, r.q.dense_elements());
  };
  for (const Glm5Layer& L : layers_)
    for (const Glm5Weight* w : {&L.w_in, &L.f_b, &L.g_b, &L.o, &L.q_all, &L.dense.gate_up, &L.dense.down, &L.shared.gate_up, &L.shared.down})
      take(*w);
  if (scratch > 0)
    if (auto e = wscratch_.allocate(scratch * 2, "dequantised weight scratch"); !e) return e;
  // Quantised weights take every product's input in fp32 unless TANDEM_GLM5_FP32_PRODUCTS says
  // otherwise: with the default bf16 inputs of the four output projections the fixtures' NVFP4
  // rewrites move by up to 0.55 of their logits from the fp32 reference, on the CPU as on the
  // device (engine/bench/results/glm5-quant-2026-12-06.md), and quant_gemv reads fp32 rows for the
  // price of the activations' bytes, small beside the weights'.
  const bool all_fp32 = !quantised_tensors_.empty() && !std::getenv("TANDEM_GLM5_FP32_PRODUCTS");
  if (all_fp32) fp32_ = detail::kGlm5AllProducts;
  weight_formats_.clear();
  for (const auto& [f, n] : format_counts_) weight_formats_ += (weight_formats_.empty() ? "" : ", ") + std::to_string(n) + " parts " + f;
  weight_formats_ += "; the embedding, the LM head, kv_b, the norms and the hyper-connections bf16/fp32, the routers fp32" + dense_notes_;
  if (all_fp32) weight_formats_ += "; every product's input fp32";
  return {};
}

// Column-parallel gate/up (this rank's rows of the width), row-parallel down (the same columns).
Status Glm5NextCuda::load_mlp(Uploader& up, int l, bool shared, int full_width, Glm5Mlp& m) {
  const Range cols = split(full_width, tp_rank_, tp_size_);
  const int width = cols.size();
  m.width = width;
  // Decided from the full width, not this rank's slice, so every rank refuses alike (the first
  // ranks take the remainder: a refusal on the empty last rank alone would leave the others loaded).
  if (full_width < tp_size_)
    return Error{"layer " + std::to_string(l) + ": " + std::to_string(tp_size_) + " tensor-parallel ranks over an MLP width of " +
                 std::to_string(full_width) + " leave a rank none; use at most " + std::to_string(full_width) + " ranks"};
  const std::size_t n = static_cast<std::size_t>(width) * static_cast<std::size_t>(H_);
  const std::string gate = names_(shared ? Tensor::shared_gate : Tensor::mlp_gate, l),
                    up_name = names_(shared ? Tensor::shared_up : Tensor::mlp_up, l),
                    down = names_(shared ? Tensor::shared_down : Tensor::mlp_down, l);
  const Checkpoint& ck = up.checkpoint();
  auto gu = load_quant(ck, {{gate, width, H_}, {up_name, width, H_}}, m.gate_up);
  if (!gu) return gu.error();
  if (!gu.value()) {
    if (auto e = alloc_bf16(m.gate_up.dense, 2 * n, gate + " and up"); !e) return e;
    up.bf16_rows(m.gate_up.dense, 0, gate, {full_width, H_}, cols);
    up.bf16_rows(m.gate_up.dense, n, up_name, {full_width, H_}, cols);
  }
  auto dq = load_quant(ck, {{down, H_, width}}, m.down);
  if (!dq) return dq.error();
  if (dq.value()) return {};
  if (auto e = alloc_bf16(m.down.dense, n, down); !e) return e;
  if (sharded()) up.bf16_cols(m.down.dense, 0, down, {H_, full_width}, cols);
  else up.bf16(m.down.dense, 0, down, {H_, width});
  return {};
}

Status Glm5NextCuda::load_layer(Uploader& up, const Checkpoint& ck, int l, Glm5Layer& L) {
  const DecoderConfig& d = c_.d;
  auto name = [&](Tensor t) { return names_(t, l); };
  const int mix = (2 + hc_) * hc_;
  if (auto e = alloc_f32(up, L.input_norm, name(Tensor::input_norm), {H_}); !e) return e;
  if (auto e = alloc_f32(up, L.post_norm, name(Tensor::post_attention_norm), {H_}); !e) return e;
  struct HcNames {
    Tensor fn, base, scale;
    Glm5Hc* hc;
  };
  for (const HcNames& n : {HcNames{Tensor::attn_hc_fn, Tensor::attn_hc_base, Tensor::attn_hc_scale, &L.attn_hc},
                           HcNames{Tensor::ffn_hc_fn, Tensor::ffn_hc_base, Tensor::ffn_hc_scale, &L.ffn_hc}}) {
    if (auto e = alloc_f32(up, n.hc->fn, name(n.fn), {mix, hc_ * H_}); !e) return e;
    if (auto e = alloc_f32(up, n.hc->base, name(n.base), {mix}); !e) return e;
    if (auto e = alloc_f32(up, n.hc->scale, name(n.scale), {3}); !e) return e;
  }
  L.linear = c_.layer_is_linear[static_cast<std::size_t>(l)];
  if (auto e = L.linear ? load_kda(up, l, L) : load_dsa(up, l, L); !e) return e;
  L.moe = d.layer_is_moe[static_cast<std::size_t>(l)];
  if (!L.moe) return load_mlp(up, l, false, d.intermediate_size, L.dense);
  if (auto e = load_experts(up, ck, l, L); !e) return e;
  decode_bytes_.moe_layers += 1;
  if (d.moe.n_shared_experts > 0) return load_mlp(up, l, true, I_ * d.moe.n_shared_experts, L.shared);
  return {};
}

// One KDA layer's upload list, one tensor per line in checkpoint order. This rank's heads
// kda_heads_: rows [h0 * head_dim, h1 * head_dim) of every per-channel tensor (the conv's three
// parts q, k, v each), rows [h0, h1) of the per-head ones, o's matching columns.
Status Glm5NextCuda::load_kda(Uploader& up, int l, Glm5Layer& L) {
  auto name = [&](Tensor t) { return names_(t, l); };
  const std::size_t h = static_cast<std::size_t>(H_), qk = static_cast<std::size_t>(lqk_), hd = static_cast<std::size_t>(lhd_);
  const int all_qk = all_lh_ * lhd_, K = c_.linear_conv_kernel_dim;
  const Range heads = kda_heads_, channels{heads.begin * lhd_, heads.end * lhd_};
  const Checkpoint& ck = up.checkpoint();
  auto qin = load_quant(ck, {{name(Tensor::kda_q), lqk_, H_}, {name(Tensor::kda_k), lqk_, H_}, {name(Tensor::kda_v), lqk_, H_},
                             {name(Tensor::kda_f_a), lhd_, H_}, {name(Tensor::kda_g_a), lhd_, H_}, {name(Tensor::kda_b), lh_, H_}},
                        L.w_in);
  if (!qin) return qin.error();
  if (!qin.value()) {
    DeviceBuffer& w = L.w_in.dense;
    if (auto e = alloc_bf16(w, static_cast<std::size_t>(kda_in_) * h, name(Tensor::kda_q) + " with k, v, f_a, g_a and b"); !e) return e;
    up.bf16_rows(w, 0, name(Tensor::kda_q), {all_qk, H_}, channels);
    up.bf16_rows(w, qk * h, name(Tensor::kda_k), {all_qk, H_}, channels);
    up.bf16_rows(w, 2 * qk * h, name(Tensor::kda_v), {all_qk, H_}, channels);
    up.bf16(w, 3 * qk * h, name(Tensor::kda_f_a), {lhd_, H_});
    up.bf16(w, (3 * qk + hd) * h, name(Tensor::kda_g_a), {lhd_, H_});
    up.bf16_rows(w, (3 * qk + 2 * hd) * h, name(Tensor::kda_b), {all_lh_, H_}, heads);
  }
  for (auto [W, t] : {std::pair{&L.f_b, Tensor::kda_f_b}, std::pair{&L.g_b, Tensor::kda_g_b}}) {
    auto q = load_quant(ck, {{name(t), lqk_, lhd_}}, *W);
    if (!q) return q.error();
    if (q.value()) continue;
    if (auto e = alloc_bf16(W->dense, qk * hd, name(t)); !e) return e;
    up.bf16_rows(W->dense, 0, name(t), {all_qk, lhd_}, channels);
  }
  auto qo = load_quant(ck, {{name(Tensor::kda_o), H_, lqk_}}, L.o);
  if (!qo) return qo.error();
  if (!qo.value()) {
    if (auto e = alloc_bf16(L.o.dense, h * qk, name(Tensor::kda_o)); !e) return e;
    if (sharded()) up.bf16_cols(L.o.dense, 0, name(Tensor::kda_o), {H_, all_qk}, channels);
    else up.bf16(L.o.dense, 0, name(Tensor::kda_o), {H_, lqk_});
  }
  const std::string conv = name(Tensor::kda_conv);
  const std::size_t conv_n = 3 * qk * static_cast<std::size_t>(K);
  weight_bytes_ += conv_n * 4;
  if (auto e = L.conv.allocate(conv_n * 4, conv); !e) return e;
  for (int part = 0; part < 3; ++part)  // q, k, v channels
    up.f32_rows(L.conv, static_cast<std::size_t>(part) * qk * static_cast<std::size_t>(K), conv, {3 * all_qk, 1, K},
                Range{part * all_qk + channels.begin, part * all_qk + channels.end});
  auto sliced = [&](DeviceBuffer& b, Tensor t, int all, Range r) -> Status {
    weight_bytes_ += static_cast<std::uint64_t>(r.size()) * 4;
    if (auto e = b.allocate(static_cast<std::size_t>(r.size()) * 4, name(t)); !e) return e;
    up.f32_rows(b, 0, name(t), {all}, r);
    return {};
  };
  if (auto e = sliced(L.a_log, Tensor::kda_a_log, all_lh_, heads); !e) return e;
  if (auto e = sliced(L.dt_bias, Tensor::kda_dt_bias, all_qk, channels); !e) return e;
  if (auto e = alloc_f32(up, L.o_norm, name(Tensor::kda_o_norm), {lhd_}); !e) return e;
  L.state_at = state_floats_;
  state_floats_ += kernels::kda_state_floats(kda_shape());  // this rank's heads' state, the CPU layout
  return {};
}

// One DSA layer's upload list, one tensor per line in checkpoint order. This rank's heads
// dsa_heads_: their rows of q_b and kv_b, o's matching columns; the rest whole.
Status Glm5NextCuda::load_dsa(Uploader& up, int l, Glm5Layer& L) {
  auto name = [&](Tensor t) { return names_(t, l); };
  const std::size_t h = static_cast<std::size_t>(H_);
  const Checkpoint& ck = up.checkpoint();
  const Range mine = dsa_heads_;
  auto per_head = [&](int width) { return Range{mine.begin * width, mine.end * width}; };
  L.indexer = !c_.indexer_is_shared[static_cast<std::size_t>(l)];
  L.slot = n_dsa_++;
  const int rows = lora_q_ + lora_kv_ + rope_ + (L.indexer ? 2 * id_ + ih_ : 0);
  std::vector<ProjectionPart> in_parts{{name(Tensor::q_a), lora_q_, H_}, {name(Tensor::kv_a), lora_kv_ + rope_, H_}};
  if (L.indexer)
    in_parts.insert(in_parts.end(),
                    {{name(Tensor::index_wk), id_, H_}, {name(Tensor::index_kpool_gate), id_, H_}, {name(Tensor::index_weights), ih_, H_}});
  auto qin = load_quant(ck, in_parts, L.w_in);
  if (!qin) return qin.error();
  if (!qin.value()) {
    if (auto e = alloc_bf16(L.w_in.dense, static_cast<std::size_t>(rows) * h, name(Tensor::q_a) + " with kv_a and the indexer's"); !e)
      return e;
    std::size_t at = 0;
    for (const ProjectionPart& p : in_parts) {
      up.bf16(L.w_in.dense, at, p.name, {p.out, H_});
      at += static_cast<std::size_t>(p.out) * h;
    }
  }
  const int q_rows = heads_ * qk_ + (L.indexer ? ih_ * id_ : 0);
  std::vector<ProjectionPart> q_parts{{name(Tensor::q_b), heads_ * qk_, lora_q_}};
  if (L.indexer) q_parts.push_back({name(Tensor::index_wq_b), ih_ * id_, lora_q_});
  auto qq = load_quant(ck, q_parts, L.q_all);
  if (!qq) return qq.error();
  if (!qq.value()) {
    if (auto e = alloc_bf16(L.q_all.dense, static_cast<std::size_t>(q_rows) * static_cast<std::size_t>(lora_q_), name(Tensor::q_b)); !e)
      return e;
    up.bf16_rows(L.q_all.dense, 0, name(Tensor::q_b), {all_heads_ * qk_, lora_q_}, per_head(qk_));
    if (L.indexer)
      up.bf16(L.q_all.dense, static_cast<std::size_t>(heads_ * qk_) * static_cast<std::size_t>(lora_q_), name(Tensor::index_wq_b),
              {ih_ * id_, lora_q_});
  }
  if (L.indexer) {
    if (auto e = alloc_f32(up, L.k_norm, name(Tensor::index_k_norm), {id_}); !e) return e;
    if (auto e = alloc_f32(up, L.k_norm_bias, name(Tensor::index_k_norm_bias), {id_}); !e) return e;
    if (auto e = alloc_f32(up, L.kpool_ape, name(Tensor::index_kpool_ape), {c_.index_kpool, id_}); !e) return e;
  }
  if (auto e = alloc_f32(up, L.q_a_norm, name(Tensor::q_a_norm), {lora_q_}); !e) return e;
  if (auto e = alloc_f32(up, L.kv_a_norm, name(Tensor::kv_a_norm), {lora_kv_}); !e) return e;
  // kv_b stays bf16 (dequantised if stored quantised), as on the GLM decoder: the absorbed
  // attention reads it per head.
  const int kvb_rows = heads_ * (nope_ + vd_);
  if (auto e = alloc_bf16(L.kv_b, static_cast<std::size_t>(kvb_rows) * static_cast<std::size_t>(lora_kv_), name(Tensor::kv_b)); !e)
    return e;
  up.bf16_rows(L.kv_b, 0, name(Tensor::kv_b), {all_heads_ * (nope_ + vd_), lora_kv_}, per_head(nope_ + vd_));
  auto qo = load_quant(ck, {{name(Tensor::o), H_, heads_ * vd_}}, L.o);
  if (!qo) return qo.error();
  if (qo.value()) return {};
  if (auto e = alloc_bf16(L.o.dense, h * static_cast<std::size_t>(heads_ * vd_), name(Tensor::o)); !e) return e;
  if (sharded()) up.bf16_cols(L.o.dense, 0, name(Tensor::o), {H_, all_heads_ * vd_}, per_head(vd_));
  else up.bf16(L.o.dense, 0, name(Tensor::o), {H_, heads_ * vd_});
  return {};
}

// The router and its bias whole (every rank routes alike); this rank's whole experts experts_.
Status Glm5NextCuda::load_experts(Uploader& up, const Checkpoint& ck, int l, Glm5Layer& L) {
  auto name = [&](Tensor t) { return names_(t, l); };
  const std::size_t expert = static_cast<std::size_t>(I_) * static_cast<std::size_t>(H_), held = static_cast<std::size_t>(experts_.size());
  if (auto e = alloc_f32(up, L.router, name(Tensor::router), {E_, H_}); !e) return e;
  if (auto e = alloc_f32(up, L.correction_bias, name(Tensor::router_bias), {E_}); !e) return e;
  if (E_ < tp_size_)  // from the full count, as load_mlp's width: every rank refuses alike
    return Error{std::to_string(tp_size_) + " tensor-parallel ranks over " + std::to_string(E_) +
                 " routed experts leave a rank none; use at most " + std::to_string(E_) + " ranks"};
  auto quant = load_quant_experts(ck, l, L);
  if (!quant) return quant.error();
  if (quant.value()) return {};
  if (auto e = alloc_bf16(L.experts_gate_up, held * 2 * expert, name(Tensor::experts_gate_up)); !e) return e;
  if (auto e = alloc_bf16(L.experts_down, held * expert, name(Tensor::experts_down)); !e) return e;
  if (ck.has(name(Tensor::experts_gate_up))) {
    up.bf16_rows(L.experts_gate_up, 0, name(Tensor::experts_gate_up), {E_, 2 * I_, H_}, experts_);
    up.bf16_rows(L.experts_down, 0, name(Tensor::experts_down), {E_, H_, I_}, experts_);
    return {};
  }
  for (int e = experts_.begin; e < experts_.end && up.ok(); ++e) {
    const std::size_t at = static_cast<std::size_t>(e - experts_.begin) * expert;
    up.bf16(L.experts_gate_up, 2 * at, names_(Tensor::expert_gate, l, e), {I_, H_});
    up.bf16(L.experts_gate_up, 2 * at + expert, names_(Tensor::expert_up, l, e), {I_, H_});
    up.bf16(L.experts_down, at, names_(Tensor::expert_down, l, e), {H_, I_});
  }
  return {};
}

Status Glm5NextCuda::allocate_activations() {
  const std::size_t T = static_cast<std::size_t>(t_cap_), S = static_cast<std::size_t>(s_cap_), R = static_cast<std::size_t>(r_cap_);
  const std::size_t h = static_cast<std::size_t>(H_), P = T * static_cast<std::size_t>(std::max(K_, 1));
  std::size_t mlp_width = 1;
  for (const Glm5Layer& L : layers_)
    mlp_width = std::max({mlp_width, static_cast<std::size_t>(L.dense.width), static_cast<std::size_t>(L.shared.width)});
  // The widest input a bf16 product rounds into xb_ (the LM head's rows are gathered there too).
  const std::size_t widest = std::max({h, mlp_width, static_cast<std::size_t>(std::max(lqk_, 1)), static_cast<std::size_t>(lhd_),
                                       static_cast<std::size_t>(lora_q_), static_cast<std::size_t>(heads_ * vd_)});
  struct Want {
    DeviceBuffer* b;
    std::size_t bytes;
    const char* what;
  };
  const std::size_t I = static_cast<std::size_t>(std::max(I_, 1));
  const Want wants[] = {
      {&streams_, T * static_cast<std::size_t>(hc_) * h * 4, "hyper-connection streams"},
      {&x_, T * h * 4, "collapsed"},
      {&post_, T * static_cast<std::size_t>(hc_) * 4, "hc post"},
      {&comb_, T * static_cast<std::size_t>(hc_ * hc_) * 4, "hc comb"},
      {&hc_scratch_, static_cast<std::size_t>(kernels::hc_collapse_scratch_floats(detail::hc_shape(c_), t_cap_)) * 4,
       "hc mix partial sums"},
      {&h_, T * h * 4, "normed"},
      {&hb_, T * h * 2, "normed (bf16)"},
      {&xb_, std::max(T, R) * widest * 2, "product input (bf16)"},
      {&xlo_, split_fp32_ ? std::max(T, R) * widest * 2 : 2, "product input's low part (bf16)"},
      {&y_, T * h * 4, "sublayer out"},
      {&kproj_, T * static_cast<std::size_t>(std::max(kda_in_, 1)) * 4, "KDA projections"},
      {&graw_, T * static_cast<std::size_t>(std::max(lqk_, 1)) * 4, "KDA forget gate"},
      {&gate_, T * static_cast<std::size_t>(std::max(lqk_, 1)) * 4, "KDA output gate"},
      {&kout_, T * static_cast<std::size_t>(std::max(lqk_, 1)) * 4, "KDA out"},
      {&kchunk_, static_cast<std::size_t>(std::max(k::kda_chunk_scratch_floats(kda_shape(), static_cast<int>(T)), 1L)) * 4, "KDA chunk scratch"},
      {&dproj_, T * static_cast<std::size_t>(dsa_in_) * 4, "DSA projections"},
      {&qr_, T * static_cast<std::size_t>(std::max(lora_q_, 1)) * 4, "query latent"},
      {&qall_, T * static_cast<std::size_t>(q_all_) * 4, "queries"},
      {&iw_, T * static_cast<std::size_t>(std::max(ih_, 1)) * 4, "index weights"},
      {&qlat_, T * static_cast<std::size_t>(heads_ * lora_kv_) * 4, "absorbed queries"},
      {&olat_, T * static_cast<std::size_t>(heads_ * lora_kv_) * 4, "attention latent"},
      {&attn_, T * static_cast<std::size_t>(heads_ * vd_) * 4, "attention out"},
      {&scores_, T * static_cast<std::size_t>(max_pools_) * 4, "pool scores"},
      {&chosen_, T * static_cast<std::size_t>(max_pools_) * 4, "chosen pools"},
      {&sel_, T * static_cast<std::size_t>(max_sel_) * 4, "selected keys"},
      {&sel_n_, T * 4, "selected counts"},
      {&mlp_gu_, T * 2 * mlp_width * 4, "mlp gate_up"},
      {&mlp_act_, T * mlp_width * 4, "mlp act"},
      {&shared_out_, T * h * 4, "shared experts out"},
      {&router_logits_, T * static_cast<std::size_t>(std::max(E_, 1)) * 4, "router logits"},
      {&expert_, P * 4, "expert ids"},
      {&weight_, P * 4, "expert weights"},
      {&pair_token_, P * 4, "token of each pair"},
      {&moe_gu_, P * 2 * I * 4, "expert gate_up"},
      {&moe_act_, P * I * 4, "expert act"},
      {&moe_out_, P * h * 4, "expert out"},
      {&offsets_, static_cast<std::size_t>(std::max(E_, 1) + 1) * 4, "experts' pair offsets"},
      {&sorted_token_, P * 4, "token of each sorted pair"},
      {&pair_pos_, P * 4, "sorted place of each pair"},
      {&mean_, T * h * 4, "streams' mean"},
      {&logits_, R * static_cast<std::size_t>(V_) * 4, "logits"},
      {&sampled_, R * sizeof(k::Sampled), "sampled"},
      {&sample_params_, R * sizeof(k::SamplingParams), "sampling params"},
      {&uniform_, R * sizeof(double), "uniforms"},
      {&keep_, R * static_cast<std::size_t>(V_), "sampling mask"},
  };
  for (const Want& w : wants)
    if (auto e = w.b->allocate(w.bytes, w.what); !e) return e;
  // The DSA pool's scales (every layer at the fixed one until a calibrating step replaces them).
  const std::size_t n_dsa = static_cast<std::size_t>(std::max(n_dsa_, 1));
  kv_scales_.assign(static_cast<std::size_t>(n_dsa_), kv_scale_);
  if (auto e = kv_scale_dev_.allocate(n_dsa * 4, "KV scales"); !e) return e;
  if (auto e = kv_amax_.allocate(n_dsa * 4, "KV amax"); !e) return e;
  if (auto e = TANDEM_CUDA_STATUS(cudaMemcpy(kv_scale_dev_.get(), kv_scales_.data(), kv_scales_.size() * 4, cudaMemcpyHostToDevice),
                                  "KV scales");
      !e)
    return e;
  return init_activations(T, S, P);
}

// The buffers' first contents: zeros where a graph step may read what it never wrote, the
// recurrent state, the constant pair-to-token map, and the sharded ranks' row indices.
Status Glm5NextCuda::init_activations(std::size_t T, std::size_t S, std::size_t P) {
  const std::size_t h = static_cast<std::size_t>(H_), R = static_cast<std::size_t>(r_cap_);
  // A padding token of a graph step (run()) reads rows of the recurrence's output it never wrote:
  // zeros, not whatever the allocation held.
  if (auto e = TANDEM_CUDA_STATUS(cudaMemset(kout_.get(), 0, T * static_cast<std::size_t>(std::max(lqk_, 1)) * 4), "KDA out"); !e)
    return e;
  if (state_floats_ > 0) {
    const std::size_t bytes = S * static_cast<std::size_t>(state_floats_) * 4;
    if (auto e = state_.allocate(bytes, "recurrent state"); !e) return e;
    if (auto e = TANDEM_CUDA_STATUS(cudaMemset(state_.get(), 0, bytes), "recurrent state"); !e) return e;
  }
  std::vector<std::int32_t> pair_token(P);
  for (std::size_t p = 0; p < P; ++p) pair_token[p] = static_cast<std::int32_t>(p / static_cast<std::size_t>(std::max(K_, 1)));
  if (auto e = TANDEM_CUDA_STATUS(cudaMemcpy(pair_token_.get(), pair_token.data(), P * 4, cudaMemcpyHostToDevice), "pair tokens"); !e)
    return e;
  if (sharded()) {  // the summed embedding rows, spread into the streams by row index (iota_)
    if (auto e = embed_rows_.allocate(T * h * 2, "embedding rows"); !e) return e;
    if (auto e = iota_.allocate(T * 4, "row indices"); !e) return e;
    std::vector<std::int32_t> iota(T);
    for (std::size_t t = 0; t < T; ++t) iota[t] = static_cast<std::int32_t>(t);
    if (auto e = TANDEM_CUDA_STATUS(cudaMemcpy(iota_.get(), iota.data(), T * 4, cudaMemcpyHostToDevice), "row indices"); !e) return e;
  }
  return init_greedy_sampling(sample_params_, uniform_, R);
}

Status Glm5NextCuda::make_device_pool(std::int32_t num_blocks, int block_size) {
  if (num_blocks <= 0 || block_size <= 0) return error("CUDA KV pool: no blocks");
  drop_graphs();  // they read the pool and the inputs being replaced
  block_size_ = block_size;
  num_blocks_ = num_blocks;
  max_blocks_ = (max_len_ + block_size - 1) / block_size;
  // One block more than asked: the scratch block padding sequences of a graph step write (run()).
  layer_rows_ = static_cast<std::size_t>(num_blocks + 1) * static_cast<std::size_t>(block_size);
  const std::size_t bytes = layer_rows_ * static_cast<std::size_t>(width_) * static_cast<std::size_t>(kernels::dtype_bytes(kv_type_)) *
                            static_cast<std::size_t>(std::max(n_dsa_, 1));
  if (auto e = pool_.allocate(bytes, "the KV pool"); !e)
    return e.error().with_context(std::to_string(num_blocks) + " blocks of " + std::to_string(block_size));
  in_ints_ = 4 * static_cast<std::size_t>(t_cap_) + 3 * static_cast<std::size_t>(s_cap_) + 1 + static_cast<std::size_t>(r_cap_) +
             static_cast<std::size_t>(s_cap_) * static_cast<std::size_t>(max_blocks_);
  if (auto e = inputs_.allocate(in_ints_ * 4, "step inputs"); !e) return e.error();
  host_in_.assign(in_ints_, 0);
  return Ok{};
}

// A drafter attaching means speculative steps will follow: the kept copies of the recurrent states
// are allocated now, before the KV budget is measured, so that memory is counted as in use.
Status Glm5NextCuda::set_capture(std::vector<int> layers) {
  if (auto e = allocate_capture(captured_, layers, c_.d.num_hidden_layers, t_cap_, H_); !e) return e.error();
  if (auto e = allocate_kept_states(); !e) return e.error();
  capture_layers_ = std::move(layers);
  drop_graphs();  // captured before: without the copies (or with the old ones)
  return Ok{};
}

Status Glm5NextCuda::allocate_kept_states() {
  if (state_floats_ == 0 || !kept_state_.empty()) return {};
  return kept_state_.allocate(static_cast<std::size_t>(s_cap_) * static_cast<std::size_t>(state_floats_) * 4, "kept recurrent states");
}

// Enqueued on the model's stream, so a keep orders after the steps before it and a restore before
// the steps after it. Every slot is checked before any copy is enqueued.
Status Glm5NextCuda::copy_states(std::span<const int> slots, bool keep) {
  if (state_floats_ == 0) return error(config().model_type + " has no recurrent state to keep or restore");
  for (int s : slots)
    if (s < 0 || s >= s_cap_) return error("recurrent states: no slot " + std::to_string(s));
  if (auto e = allocate_kept_states(); !e) return e.error();
  const std::size_t bytes = static_cast<std::size_t>(state_floats_) * 4;
  FirstError err;
  for (int s : slots) {
    float* live = state_.as<float>() + static_cast<long>(s) * state_floats_;
    float* kept = kept_state_.as<float>() + static_cast<long>(s) * state_floats_;
    err(TANDEM_CUDA_STATUS(cudaMemcpyAsync(keep ? kept : live, keep ? live : kept, bytes, cudaMemcpyDeviceToDevice, stream_),
                   keep ? "keeping recurrent states" : "restoring recurrent states"));
  }
  if (!err.ok()) return err.status.error();
  return Ok{};
}

Status Glm5NextCuda::make_state_snapshots(int count) {
  if (state_floats_ == 0) return error(config().model_type + " has no recurrent state to keep");
  if (count < 0 || !snapshots_.empty()) return error("make_state_snapshots: once, with a count >= 0");
  if (count == 0) return Ok{};
  if (auto e = snapshots_.allocate(static_cast<std::size_t>(count) * static_cast<std::size_t>(state_floats_) * 4, "kept recurrent states (prefix caching)"); !e)
    return e.error();
  n_snapshots_ = count;
  return Ok{};
}

// Enqueued on the model's stream: a load orders before the step's kernels, a save after them.
Status Glm5NextCuda::copy_snapshots(std::span<const PagedWork> work, bool load) {
  const std::size_t bytes = static_cast<std::size_t>(state_floats_) * 4;
  FirstError err;
  for (const PagedWork& w : work) {
    const int kept = load ? w.state_load : w.state_save;
    if (kept < 0) continue;
    float* live = state_.as<float>() + static_cast<long>(w.state_slot) * state_floats_;
    float* copy = snapshots_.as<float>() + static_cast<long>(kept) * state_floats_;
    err(TANDEM_CUDA_STATUS(cudaMemcpyAsync(load ? live : copy, load ? copy : live, bytes, cudaMemcpyDeviceToDevice, stream_),
                   load ? "resuming a recurrent state from a kept prefix" : "keeping a prefix's recurrent state"));
  }
  if (!err.ok()) return err.status.error();
  return Ok{};
}

Result<std::vector<float>> Glm5NextCuda::recurrent_state(int slot) const {
  if (slot < 0 || slot >= s_cap_) return error("recurrent_state: no slot " + std::to_string(slot));
  std::vector<float> out(static_cast<std::size_t>(state_floats_));
  if (out.empty()) return out;
  if (auto e = TANDEM_CUDA_STATUS(cudaStreamSynchronize(stream_), "step"); !e) return e.error();
  if (auto e = TANDEM_CUDA_STATUS(cudaMemcpy(out.data(), state_.as<float>() + static_cast<long>(slot) * state_floats_, out.size() * 4,
                                     cudaMemcpyDeviceToHost),
                          "recurrent state");
      !e)
    return e.error();
  return out;
}

Result<std::unique_ptr<CudaModel>> load_glm5_next_cuda(ModelConfig config, const Checkpoint& ck, comm::Communicator& comm,
                                                       const CudaOptions& options) {
  auto m = std::make_unique<Glm5NextCuda>(std::move(config), comm, options);
  if (auto e = m->load(ck); !e) return e.error().with_context("CUDA " + m->config().model_type);
  return std::unique_ptr<CudaModel>(std::move(m));
}

}  // namespace tandem::model::cuda
