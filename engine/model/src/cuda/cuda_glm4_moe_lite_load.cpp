// The GLM decoder on CUDA (cuda_decoder.hpp), loading: the checkpoint's tensors onto the device in
// bf16 (gate and up fused per MLP and per expert), or as the checkpoint stores them where it
// quantised them (fp8 block-scaled, NVFP4: quant_plan.hpp decides per projection; a MoE layer's
// routed and shared experts are kept quantised together or not at all), the activation buffers a
// step of the configured size needs, and the paged pool; and glm4_moe_lite's MLA weights (its input
// projections fused into one) and buffers.
#include <algorithm>
#include <cstdlib>

#include "decoder.hpp"
#include "env_override.hpp"
#include "tensor_names.hpp"
#include "tandem/model/quant_plan.hpp"
#include "capture_buffer.hpp"
#include "cuda_glm4_moe_lite.hpp"
#include "tandem/kernels/gemv.hpp"
#include "tandem/kernels/glue.hpp"
#include "tandem/kernels/moe_decode.hpp"
#include "tandem/kernels/rope.hpp"
#include "tandem/kernels/sampling_cuda.hpp"

namespace tandem::model::cuda {

using detail::Tensor;
using detail::TensorNames;

// TANDEM_INVARIANT_TOKENS=N overrides CudaOptions::invariant_tokens and TANDEM_GROUP_PREFILL=0|1
// group_prefill, in any program (an A/B switch on one binary: 2048 takes every prompt chunk of up
// to 2048 tokens through the batch-invariant kernels, as every step of that size did before the
// phase split; and a fallback if a check fails). TANDEM_MOE_GROUPED=0 puts the MoE decode kernels
// back on one launch per (token, expert) pair (the same bits, only slower). TANDEM_QUANT_PREFILL=
// dequant|fused: how prefill-sized steps take quantised experts (dequantised whole into the scratch,
// or read as stored: the default; the same bits). TANDEM_GROUPED_MMA=0 takes bf16 prefill experts
// through the few-rows kernel instead of the tensor-core one (other summation order);
// bf16 prefill experts take the wgmma form where the GPU has it (sm_90), TANDEM_GROUPED_WGMMA=0
// the mma.sync form; TANDEM_GROUPED_WGMMA_TILE / _STAGES set its tile (wgmma_tile), and
// TANDEM_FUSED_SILU=0 runs the experts' SiLU-and-mul as its own launch again (the same bits).
// TANDEM_PREFILL_ATTN=flash|mla|generic|mha: the attention of prefill chunks of more than
// kMlaDecodeMaxTokens tokens (the absorbed flash prefill kernel; the MLA decode kernel in launches
// of that many; the generic paged kernel, as before; or the un-absorbed form where the step fits
// it, else flash: the default, cuda_glm4_moe_lite_mha.cpp; TANDEM_MHA_PASS_ROWS=N caps its
// context rows a pass, TANDEM_MHA_TILE_ROWS=auto|64|128 sets its kernel's queries a block,
// TANDEM_MHA_KERNEL=auto|mma|wgmma|wgmma-tma picks its kernel: mla_prefill.hpp's MlaMhaKernel).
// TANDEM_ATTN_SPLIT=0 splits the MLA decode
// attention by max-model-len as before instead of by each token's context (other bits, batch-
// invariant either way); TANDEM_QUANT_DECODE_MMA=0 takes quantised decode experts on the CUDA
// cores as before instead of the tensor cores; TANDEM_ATTN_SPLITS=N sets the most splits of a
// long context (default 132: an H100's multiprocessors; fewer splits, longer ones).
// TANDEM_GEMV_TILES=N: the fewest rows of a decode-sized product on the tiled gemv (kernels'
// set_gemv_tile_rows, process-wide; 0: never; the same bits either way). Before the buffers are sized (few_cap(),
// moe_groups_, wscratch_, the attention workspace).
Status GlmDecoderCuda::apply_env_overrides() {
  if (auto e = env_int("TANDEM_INVARIANT_TOKENS", 0, 1L << 20, opt_.invariant_tokens); !e) return e;
  if (auto e = env_int("TANDEM_MOE_GROUPED", 0, 1, moe_grouped_); !e) return e;
  if (auto e = env_int("TANDEM_GROUPED_MMA", 0, 1, grouped_mma_); !e) return e;
  if (auto e = env_int("TANDEM_GROUPED_WGMMA", 0, 1, grouped_wgmma_); !e) return e;
  int pairs = 0, stages = 0;
  if (auto e = env_choice("TANDEM_GROUPED_WGMMA_TILE", {"auto", "64", "128"}, pairs); !e) return e;
  if (auto e = env_choice("TANDEM_GROUPED_WGMMA_STAGES", {"auto", "3", "4"}, stages); !e) return e;
  wgmma_tile_pairs_ = pairs == 0 ? 0 : pairs == 1 ? 64 : 128;
  wgmma_stages_ = stages == 0 ? 0 : stages + 2;
  if (auto e = env_int("TANDEM_FUSED_SILU", 0, 1, fused_silu_); !e) return e;
  if (auto e = env_word("TANDEM_QUANT_PREFILL", "fused", "dequant", quant_prefill_dequant_); !e) return e;
  if (auto e = env_choice("TANDEM_PREFILL_ATTN", {"flash", "mla", "generic", "mha"}, prefill_attn_); !e) return e;
  if (auto e = env_int("TANDEM_MHA_PASS_ROWS", 0, 1L << 30, mha_pass_rows_); !e) return e;
  int tile = 0;  // TANDEM_MHA_TILE_ROWS=64|128: the kernel's choice otherwise
  if (auto e = env_choice("TANDEM_MHA_TILE_ROWS", {"auto", "64", "128"}, tile); !e) return e;
  mha_tile_rows_ = tile == 1 ? 64 : tile == 2 ? 128 : 0;
  int kernel = 0;
  if (auto e = env_choice("TANDEM_MHA_KERNEL", {"auto", "mma", "wgmma", "wgmma-tma"}, kernel); !e) return e;
  mha_kernel_ = static_cast<k::MlaMhaKernel>(kernel);
  if ((mha_kernel_ == k::MlaMhaKernel::wgmma || mha_kernel_ == k::MlaMhaKernel::wgmma_tma) && !k::mla_prefill_mha_wgmma_ready())
    return Error{"TANDEM_MHA_KERNEL=wgmma / wgmma-tma: this GPU or build has no wgmma kernel (it needs an sm_90 GPU and the sm_90a target)"};
  if (auto e = env_int("TANDEM_ATTN_SPLIT", 0, 1, attn_split_); !e) return e;
  if (auto e = env_int("TANDEM_QUANT_DECODE_MMA", 0, 1, quant_decode_mma_); !e) return e;
  if (auto e = env_int("TANDEM_ATTN_SPLITS", 1, 1024, attn_splits_); !e) return e;
  int tile_rows = -1;
  if (auto e = env_int("TANDEM_GEMV_TILES", 0, 1L << 20, tile_rows); !e) return e;
  if (tile_rows >= 0) k::set_gemv_tile_rows(tile_rows);
  return env_int("TANDEM_GROUP_PREFILL", 0, 1, opt_.group_prefill);
}

Status GlmDecoderCuda::load(const Checkpoint& ck) {
  if (auto e = apply_env_overrides(); !e) return e;
  if (cudaSetDevice(opt_.device) != cudaSuccess) return Error{"cannot use CUDA device " + std::to_string(opt_.device)};
  if (auto e = TANDEM_CUDA_STATUS(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream"); !e) return e;
  auto gemm = k::GemmRunner::create();
  if (!gemm) return gemm.error();
  gemm_ = std::move(*gemm);
  if (H_ % 8 != 0 || (E_ > 0 && I_ % 8 != 0))
    return Error{"the CUDA path needs hidden_size and moe_intermediate_size to be multiples of 8"};
  if (auto e = attention_shape_error(); !e) return e;
  if (E_ > 1024) return Error{"at most 1024 routed experts"};
  // From the head count every rank shares, so each refuses (not only the empty one, whose peers
  // would load and then fail on a lost peer without the reason).
  if (all_heads_ < tp_size_)
    return Error{std::to_string(tp_size_) + " tensor-parallel ranks over " + std::to_string(all_heads_) +
                 " attention heads leave a rank none; use at most " + std::to_string(all_heads_) + " ranks"};
  if (opt_.reduction_groups > 1 && ranks_ > 1 && opt_.reduction_groups != ranks_)
    return Error{"reduction groups " + std::to_string(opt_.reduction_groups) + " at " + std::to_string(ranks_) +
                 " tensor-parallel ranks: a rank's sums are the group's, so it takes 1 or " + std::to_string(ranks_)};
  if (slices_ > 1) {
    // The slices share the activation buffers and the attention's shapes: equal head counts.
    if (all_heads_ % slices_ != 0)
      return Error{"reduction groups " + std::to_string(slices_) + " do not divide the " + std::to_string(all_heads_) +
                   " attention heads (each group's slice must have the same shape)"};
    parked_.resize(static_cast<std::size_t>(slices_));
    for (Parked& p : parked_) p.kv_scales = kv_scales_;
  }
  if (auto e = load_weights(ck); !e) return e;
  return allocate_activations();
}

void GlmDecoderCuda::use_slice(int s) {
  if (slices_ == 1 || s == slice_) return;
  Parked& from = parked_[static_cast<std::size_t>(slice_)];
  from.layers = std::move(layers_), from.head = std::move(slice_head_), from.pool = std::move(pool_);
  from.kv_amax = std::move(kv_amax_), from.kv_scales = std::move(kv_scales_);
  Parked& to = parked_[static_cast<std::size_t>(s)];
  layers_ = std::move(to.layers), slice_head_ = std::move(to.head), pool_ = std::move(to.pool);
  kv_amax_ = std::move(to.kv_amax), kv_scales_ = std::move(to.kv_scales);
  slice_ = tp_rank_ = s;
  vocab_ = split(V_, s, slices_);
  experts_ = split(E_, s, slices_);
  slice_changed();
}

Status GlmDecoderCuda::make_device_pool(std::int32_t num_blocks, int block_size) {
  if (num_blocks <= 0 || block_size <= 0) return error("CUDA KV pool: no blocks");
  block_size_ = block_size;
  num_blocks_ = num_blocks;
  max_blocks_ = (max_len_ + block_size - 1) / block_size;
  const std::size_t per_layer = static_cast<std::size_t>(num_blocks + 1) * static_cast<std::size_t>(block_size) *
                                static_cast<std::size_t>(width_) * static_cast<std::size_t>(k::dtype_bytes(kv_type_));
  layer_bytes_ = per_layer;
  // (One pool per slice with reduction groups: each rank's pool holds its own rows.)
  if (auto e = for_each_slice([&] { return pool_.allocate(per_layer * static_cast<std::size_t>(d_.num_hidden_layers), "the KV pool"); }); !e)
    return e.error().with_context(std::to_string(num_blocks) + " blocks of " + std::to_string(block_size));
  // Inputs: tokens, positions, sequence of each token, logit rows, block tables (+ padding rows,
  // and the scratch sequence's of a padded graph step: run()).
  in_ints_ = 4 * static_cast<std::size_t>(t_cap_) + static_cast<std::size_t>(r_cap_) +
             static_cast<std::size_t>(s_cap_ + 1) * static_cast<std::size_t>(max_blocks_);
  if (auto e = inputs_.allocate(in_ints_ * 4, "step inputs"); !e) return e.error();
  if (auto e = TANDEM_CUDA_STATUS(cudaMallocHost(&host_in_, in_ints_ * 4), "pinned step inputs"); !e) return e.error();
  // Flash-decoding workspace for the largest split any step size can ask for.
  std::size_t ws = 0;
  for (int n = 1; n <= t_cap_; ++n) ws = std::max(ws, k::paged_attention_workspace_bytes(n, heads_, attn_layout(), max_len_));
  if (auto e = attn_ws_.allocate(std::max<std::size_t>(ws, 256), "attention workspace"); !e) return e.error();
  return Ok{};
}

Status GlmDecoderCuda::alloc_bf16(DeviceBuffer& b, std::size_t n, const std::string& what) {
  weight_bytes_ += n * 2;
  return b.allocate(n * 2, what);
}

void GlmDecoderCuda::note_format(const std::string& what, WeightFormat f, const std::string& why_dense) {
  format_counts_[f == WeightFormat::dense ? "bf16" : weight_format_name(f)] += 1;
  if (!why_dense.empty() && dense_notes_.size() < 600) dense_notes_ += "; " + what + " kept in bf16: " + why_dense;
}

Result<bool> GlmDecoderCuda::load_quant(const Checkpoint& ck, const std::vector<ProjectionPart>& parts, QuantWeight& q,
                                        bool allowed) {
  if (sharded()) {  // (parts name this rank's slice shapes, which the checkpoint's tensors do not have)
    note_format(parts[0].name, WeightFormat::dense, "");
    return false;
  }
  auto plan = plan_projection(ck, parts);
  if (!plan) return plan.error();
  if (plan->format == WeightFormat::dense || !allowed) {
    if (plan->format != WeightFormat::dense)
      plan->why_dense = "kept with the layer's routed experts, which are not all " + std::string(weight_format_name(plan->format));
    note_format(parts[0].name, WeightFormat::dense, plan->why_dense);
    return false;
  }
  if (auto e = upload_quant(q, ck, plan->format, plan->parts); !e) return e.error();
  weight_bytes_ += q.bytes();
  for (const StoredWeight& w : plan->parts) quantised_tensors_.push_back(w.name);
  note_format(parts[0].name, plan->format, {});
  return true;
}

Result<Range> GlmDecoderCuda::width_slice(int width, const std::string& what) const {
  const Range r = split(width, tp_rank_, tp_size_);
  if (sharded() && r.size() % 8 != 0)
    return error(what + ": rank " + std::to_string(tp_rank_) + " of " + std::to_string(tp_size_) + " would hold " +
                 std::to_string(r.size()) + " of its " + std::to_string(width) +
                 " columns; the CUDA kernels need a multiple of 8 per rank");
  return r;
}

// Column-parallel gate/up (this rank's rows of the width), row-parallel down (the same columns).
Status GlmDecoderCuda::load_mlp(Uploader& up, int l, bool shared, int full_width, Mlp& m, bool quantised) {
  auto mine = width_slice(full_width, "layer " + std::to_string(l) + "'s MLP width");
  if (!mine) return mine.error();
  const Range cols = mine.value();
  const int width = cols.size();
  m.width = width;
  const std::size_t n = static_cast<std::size_t>(width) * static_cast<std::size_t>(H_);
  const Checkpoint& ck = up.checkpoint();
  const TensorNames& names = this->names();
  const std::string gate = names(shared ? Tensor::shared_gate : Tensor::mlp_gate, l),
                    up_name = names(shared ? Tensor::shared_up : Tensor::mlp_up, l),
                    down_name = names(shared ? Tensor::shared_down : Tensor::mlp_down, l);
  auto gu = load_quant(ck, {{gate, width, H_}, {up_name, width, H_}}, m.gate_up_q, quantised);
  if (!gu) return gu.error();
  if (!gu.value()) {
    if (auto e = alloc_bf16(m.gate_up, 2 * n, gate + " and up"); !e) return e;
    up.bf16_rows(m.gate_up, 0, gate, {full_width, H_}, cols);
    up.bf16_rows(m.gate_up, n, up_name, {full_width, H_}, cols);
  }
  auto down = load_quant(ck, {{down_name, H_, width}}, m.down_q, quantised);
  if (!down) return down.error();
  if (!down.value()) {
    if (auto e = alloc_bf16(m.down, n, down_name); !e) return e;
    if (sharded()) up.bf16_cols(m.down, 0, down_name, {H_, full_width}, cols);
    else up.bf16(m.down, 0, down_name, {H_, width});
  }
  return {};
}

Result<bool> GlmDecoderCuda::load_quant_experts(const Checkpoint& ck, int l, Layer& a) {
  const TensorNames& names = this->names();
  if (ck.has(names(Tensor::experts_gate_up, l))) return false;  // the fused 3-D layout is read in bf16
  if (sharded()) {
    note_format("layer " + std::to_string(l) + "'s experts (routed and shared)", WeightFormat::dense,
                "a tensor-parallel rank loads its experts in bf16");
    return false;
  }
  const int shared_width = I_ * d_.moe.n_shared_experts;
  std::vector<ProjectionPart> gate_up, down, all;
  for (int e = 0; e < E_; ++e) {
    gate_up.push_back({names(Tensor::expert_gate, l, e), I_, H_});
    gate_up.push_back({names(Tensor::expert_up, l, e), I_, H_});
    down.push_back({names(Tensor::expert_down, l, e), H_, I_});
  }
  all = gate_up;
  all.insert(all.end(), down.begin(), down.end());
  if (shared_width > 0) {
    all.push_back({names(Tensor::shared_gate, l), shared_width, H_});
    all.push_back({names(Tensor::shared_up, l), shared_width, H_});
    all.push_back({names(Tensor::shared_down, l), H_, shared_width});
  }
  auto joint = plan_projection(ck, all);
  if (!joint) return joint.error();
  const std::string experts_name = "layer " + std::to_string(l) + "'s experts (routed and shared)";
  if (joint->format == WeightFormat::dense) {
    note_format(experts_name, WeightFormat::dense, joint->why_dense);
    return false;
  }
  const std::span<const StoredWeight> parts(joint->parts);
  if (auto e = upload_quant(a.experts_gate_up_q, ck, joint->format, parts.subspan(0, gate_up.size())); !e) return e.error();
  if (auto e = upload_quant(a.experts_down_q, ck, joint->format, parts.subspan(gate_up.size(), down.size())); !e)
    return e.error();
  weight_bytes_ += a.experts_gate_up_q.bytes() + a.experts_down_q.bytes();
  for (std::size_t i = 0; i < gate_up.size() + down.size(); ++i) quantised_tensors_.push_back(joint->parts[i].name);
  note_format(experts_name, joint->format, {});
  return true;
}

// The embedding, final norm and LM head, every slice's layers (load_layers), then the step-cost totals.
Status GlmDecoderCuda::load_weights(const Checkpoint& ck) {
  const DecoderConfig& d = d_;
  Uploader up(ck);
  const TensorNames& names = this->names();
  // Vocabulary-parallel: this rank's rows of the embedding and the LM head (all of them at one
  // rank; with reduction groups each slice's LM-head rows apart too, as its rank holds them).
  const Range rows = multi_rank() ? vocab_ : Range{0, V_};
  const std::size_t h = static_cast<std::size_t>(H_), v = static_cast<std::size_t>(rows.size());
  if (auto e = alloc_bf16(embed_, v * h, "embed_tokens"); !e) return e;
  up.bf16_rows(embed_, 0, names(Tensor::embed), {V_, H_}, rows);
  if (auto e = alloc_bf16(final_norm_, h, "norm"); !e) return e;
  up.bf16(final_norm_, 0, names(Tensor::final_norm), {H_});
  if (!d.tie_word_embeddings) {
    if (auto e = alloc_bf16(head_, v * h, "lm_head"); !e) return e;
    up.bf16_rows(head_, 0, names(Tensor::lm_head), {V_, H_}, rows);
  }
  if (slices_ > 1) {
    auto head_rows = for_each_slice([&]() -> Status {
      if (auto e = alloc_bf16(slice_head_, static_cast<std::size_t>(vocab_.size()) * h, "lm_head rows of a reduction group"); !e) return e;
      up.bf16_rows(slice_head_, 0, names(d.tie_word_embeddings ? Tensor::embed : Tensor::lm_head), {V_, H_}, vocab_);
      return Ok{};
    });
    if (!head_rows) return head_rows;
  }
  if (multi_rank() && opt_.drafter_vocab) {
    const std::size_t all = static_cast<std::size_t>(V_) * h;
    if (auto e = alloc_bf16(full_embed_, all, "embed_tokens (whole, for the drafter)"); !e) return e;
    up.bf16(full_embed_, 0, names(Tensor::embed), {V_, H_});
    if (!d.tie_word_embeddings) {
      if (auto e = alloc_bf16(full_head_, all, "lm_head (whole, for the drafter)"); !e) return e;
      up.bf16(full_head_, 0, names(Tensor::lm_head), {V_, H_});
    }
  }
  std::uint64_t fixed = 0;
  if (auto e = for_each_slice([&] { return load_layers(up, fixed); }); !e) return e;
  if (!up.ok()) return up.error();
  if (auto e = TANDEM_CUDA_STATUS(cudaDeviceSynchronize(), "uploading the weights"); !e) return e;  // cudaMemcpy may return early
  if (auto e = for_each_slice([&] { return finish_load(); }); !e) return e;
  std::vector<float> inv(static_cast<std::size_t>(rope_ / 2));
  k::rope_inv_freq(inv.data(), rope_, d.rope_theta);
  if (auto e = inv_freq_.allocate(inv.size() * 4, "rope frequencies"); !e) return e;
  if (auto e = TANDEM_CUDA_STATUS(cudaMemcpy(inv_freq_.get(), inv.data(), inv.size() * 4, cudaMemcpyHostToDevice), "rope"); !e)
    return e;
  // Plus the final norm, the LM head and the embedding rows (one per token; counted once).
  decode_bytes_.fixed = fixed + (h + v * h + h) * 2;
  decode_bytes_.experts = E_, decode_bytes_.top_k = K_;
  // The scratch larger steps dequantise a quantised projection into (the largest one; the experts
  // only where the grouped GEMM does not read them quantised: experts_read_quantised).
  std::size_t scratch = 0;
  for (const Layer& a : layers_) {
    for (const QuantWeight* q : {&a.w_in_q, &a.q_b_q, &a.o_q, &a.dense.gate_up_q, &a.dense.down_q, &a.shared.gate_up_q, &a.shared.down_q})
      scratch = std::max(scratch, q->dense_elements());
    for (const QuantWeight* q : {&a.experts_gate_up_q, &a.experts_down_q})
      if (!experts_read_quantised(*q)) scratch = std::max(scratch, q->dense_elements());
  }
  if (auto e = wscratch_.allocate(scratch * 2, "dequantised weight scratch"); !e) return e;
  weight_formats_.clear();
  for (const auto& [f, n] : format_counts_)
    weight_formats_ += (weight_formats_.empty() ? "" : ", ") + std::to_string(n) + " projections " + f;
  weight_formats_ += "; the embedding, the LM head, the norms and any projection not named here bf16, the routers fp32" + dense_notes_;
  if (sharded()) weight_formats_ += "; a tensor-parallel rank keeps its slices in bf16 (quantised slices are not built)";
  return {};
}

// long-function: a flat upload list, one tensor after another in checkpoint order, per layer (the current slice's).
Status GlmDecoderCuda::load_layers(Uploader& up, std::uint64_t& fixed) {
  const DecoderConfig& d = d_;
  const Checkpoint& ck = up.checkpoint();
  const TensorNames& names = this->names();
  const std::size_t h = static_cast<std::size_t>(H_);
  layers_.resize(static_cast<std::size_t>(d.num_hidden_layers));
  for (int l = 0; l < d.num_hidden_layers && up.ok(); ++l) {
    Layer& a = layers_[static_cast<std::size_t>(l)];
    const std::uint64_t before = weight_bytes_;
    if (auto e = load_attention(up, l, a); !e) return e;
    for (auto [buf, t] : {std::pair{&a.input_norm, Tensor::input_norm}, std::pair{&a.post_norm, Tensor::post_attention_norm}}) {
      const std::string name = names(t, l);
      if (auto e = alloc_bf16(*buf, h, name); !e) return e;
      up.bf16(*buf, 0, name, {H_});
    }
    fixed += weight_bytes_ - before;

    a.moe = d.layer_is_moe[static_cast<std::size_t>(l)];
    const std::uint64_t ffn_before = weight_bytes_;
    if (!a.moe) {
      if (auto e = load_mlp(up, l, false, d.intermediate_size, a.dense); !e) return e;
      fixed += weight_bytes_ - ffn_before;
      continue;
    }
    const std::size_t expert = static_cast<std::size_t>(I_) * h;
    const int held = experts_.size();  // this rank's whole experts; the router stays replicated
    const std::string router = names(Tensor::router, l), router_bias = names(Tensor::router_bias, l);
    if (auto e = a.router.allocate(static_cast<std::size_t>(E_) * h * 4, router); !e) return e;
    if (auto e = a.correction_bias.allocate(static_cast<std::size_t>(E_) * 4, router_bias); !e) return e;
    weight_bytes_ += static_cast<std::size_t>(E_) * (h + 1) * 4;
    up.f32(a.router, router, {E_, H_});
    up.f32(a.correction_bias, router_bias, {E_});
    auto quantised = load_quant_experts(ck, l, a);
    if (!quantised) return quantised.error();
    const bool experts_quantised = quantised.value();
    if (!experts_quantised) {
      if (auto e = alloc_bf16(a.experts_gate_up, static_cast<std::size_t>(held) * 2 * expert, names(Tensor::experts_gate_up, l));
          !e)
        return e;
      if (auto e = alloc_bf16(a.experts_down, static_cast<std::size_t>(held) * expert, names(Tensor::experts_down, l)); !e)
        return e;
    }
    if (!experts_quantised && ck.has(names(Tensor::experts_gate_up, l))) {
      up.bf16_rows(a.experts_gate_up, 0, names(Tensor::experts_gate_up, l), {E_, 2 * I_, H_}, experts_);
      up.bf16_rows(a.experts_down, 0, names(Tensor::experts_down, l), {E_, H_, I_}, experts_);
    } else if (!experts_quantised) {
      for (int e = experts_.begin; e < experts_.end && up.ok(); ++e) {
        const std::size_t at = static_cast<std::size_t>(e - experts_.begin) * expert;
        up.bf16(a.experts_gate_up, 2 * at, names(Tensor::expert_gate, l, e), {I_, H_});
        up.bf16(a.experts_gate_up, 2 * at + expert, names(Tensor::expert_up, l, e), {I_, H_});
        up.bf16(a.experts_down, at, names(Tensor::expert_down, l, e), {H_, I_});
      }
    }
    const std::uint64_t shared_before = weight_bytes_;
    if (d.moe.n_shared_experts > 0)
      if (auto e = load_mlp(up, l, true, I_ * d.moe.n_shared_experts, a.shared, experts_quantised); !e)
        return e;
    // A step reads the router and the shared experts once, and each expert chosen by any token.
    fixed += static_cast<std::uint64_t>(E_) * (h + 1) * 4 + (weight_bytes_ - shared_before);
    decode_bytes_.moe_layers += 1;
    decode_bytes_.per_expert = experts_quantised
                                   ? (a.experts_gate_up_q.bytes() + a.experts_down_q.bytes()) / static_cast<std::uint64_t>(held)
                                   : 3 * expert * 2;
  }
  return up.ok() ? Status(Ok{}) : Status(up.error());
}

Status GlmDecoderCuda::allocate_activations() {
  // R: logit rows (one per sequence, or 1 + k per sequence verifying k drafts).
  const std::size_t T = static_cast<std::size_t>(t_cap_), R = static_cast<std::size_t>(r_cap_);
  const std::size_t h = static_cast<std::size_t>(H_), P = T * static_cast<std::size_t>(std::max(K_, 1));
  int mlp_width = 0, shared_width = 0;
  (void)for_each_slice([&] {
    for (const Layer& a : layers_) mlp_width = std::max({mlp_width, a.dense.width, a.shared.width});
    for (const Layer& a : layers_) shared_width = std::max(shared_width, a.shared.width);
    return Status(Ok{});
  });
  slice_delta_.resize(static_cast<std::size_t>(slices_ - 1));
  for (DeviceBuffer& b : slice_delta_)
    if (auto e = b.allocate(T * h * 4, "a reduction group's delta (fp32)"); !e) return e;
  struct Want {
    DeviceBuffer* b;
    std::size_t bytes;
    const char* what;
  };
  const std::size_t heads = static_cast<std::size_t>(heads_);
  const Want wants[] = {
      {&x_, T * h * 4, "residual"},
      {&delta_, T * h * 4, "delta (fp32)"},
      {&embed_rows_, T * h * 2, "embedding rows"},
      {&h_, T * h * 2, "normed"},
      {&h32_, E_ > 0 ? T * h * 4 : 0, "normed, fp32 (router input)"},
      {&fused_, T * static_cast<std::size_t>(in_rows_) * 2, "fused projection"},
      {&q_, T * heads * static_cast<std::size_t>(qk_) * 2, "queries"},
      {&attn_, T * heads * static_cast<std::size_t>(vd_) * 2, "attention out"},
      {&mlp_gu_, T * 2 * static_cast<std::size_t>(std::max(mlp_width, 1)) * 2, "mlp gate_up"},
      {&mlp_act_, T * static_cast<std::size_t>(std::max(mlp_width, 1)) * 2, "mlp act"},
      {&shared_out_, T * h * 4, "shared experts out (fp32)"},
      {&router_logits_, T * static_cast<std::size_t>(std::max(E_, 1)) * 4, "router logits"},
      {&expert_, P * 4, "expert ids"},
      {&weight_, P * 4, "expert weights"},
      {&offsets_, static_cast<std::size_t>(E_ + 1) * 4, "expert offsets"},
      {&sorted_, P * 4, "sorted pairs"},
      {&pair_pos_, P * 4, "pair positions"},
      {&moe_gu_, P * 2 * static_cast<std::size_t>(std::max(I_, 1)) * 2, "expert gate_up"},
      {&moe_act_, P * static_cast<std::size_t>(std::max(I_, 1)) * 2, "expert act"},
      {&moe_out_, P * h * 2, "expert out"},
      {&head_in_, R * h * 2, "head rows"},
      {&logits_, R * static_cast<std::size_t>(V_) * 4, "logits"},
      {&sampled_, R * sizeof(k::Sampled), "sampled"},
      {&sample_params_, R * sizeof(k::SamplingParams), "sampling params"},
      {&uniform_, R * sizeof(double), "uniforms"},
      {&keep_, R * static_cast<std::size_t>(V_), "sampling mask"},
      {&argmax_keys_, R * sizeof(unsigned long long), "greedy keys"},
      {&moe_decode_act_, static_cast<std::size_t>(few_cap()) * static_cast<std::size_t>(K_ + 1) *
                             static_cast<std::size_t>(std::max({I_, shared_width, 1})) * 2, "decode expert act"},
      {&moe_groups_, moe_grouped_ ? static_cast<std::size_t>(k::moe_decode_group_ints(std::max(E_, 1), std::max(K_, 1), few_cap())) * 4 : 0,
       "decode expert groups"},
  };
  for (const Want& w : wants)
    if (auto e = w.b->allocate(w.bytes, w.what); !e) return e;
  if (auto e = allocate_attention(); !e) return e;
  return init_greedy_sampling(sample_params_, uniform_, R);
}

Status GlmDecoderCuda::set_capture(std::vector<int> layers) {
  if (auto e = allocate_capture(captured_, layers, d_.num_hidden_layers, t_cap_, H_); !e) return e.error();
  // The rows of a padded graph step, gathered into the items' order (run()).
  if (auto e = allocate_capture(capture_tmp_, layers, d_.num_hidden_layers, t_cap_, H_); !e) return e.error();
  capture_layers_ = std::move(layers);
  // Graphs captured before now lack the copies (or hold the old ones): capture them again.
  for (auto& [b, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
  return Ok{};
}

// --- glm4_moe_lite's MLA ---------------------------------------------------------------------

Status Glm4MoeLiteCuda::attention_shape_error() const {
  if (width_ > 576) return Error{"kv_lora_rank + qk_rope_head_dim must be at most 576 for the paged-attention kernel"};
  return Ok{};
}

Status Glm4MoeLiteCuda::load_attention(Uploader& up, int l, Layer& a) {
  const std::size_t h = static_cast<std::size_t>(H_);
  auto name = [&](Tensor t) { return names()(t, l); };
  const bool bias = c_.d.attention_bias;
  const Checkpoint& ck = up.checkpoint();
  const std::string q_name = name(lora_q_ > 0 ? Tensor::q_a : Tensor::q), kv_a = name(Tensor::kv_a);
  // Tensor parallel: a rank holds heads [first, first + heads_) (shard.hpp): their rows of q_b (or
  // q_proj) and kv_b, their input columns of o_proj; q_a and kv_a are replicated, so every rank
  // caches the whole latent row. o_proj's bias is rank 0's alone (the ranks' outputs are summed).
  const Range mine = split(all_heads_, tp_rank_, tp_size_);
  auto per_head = [&](int width) { return Range{mine.begin * width, mine.end * width}; };
  auto w_in_q = load_quant(ck, {{q_name, q_rows_, H_}, {kv_a, width_, H_}}, a.w_in_q);
  if (!w_in_q) return w_in_q.error();
  if (!w_in_q.value()) {
    if (auto e = alloc_bf16(a.w_in, static_cast<std::size_t>(in_rows_) * h, q_name + " and kv_a"); !e) return e;
    if (lora_q_ > 0) up.bf16(a.w_in, 0, q_name, {q_rows_, H_});
    else up.bf16_rows(a.w_in, 0, q_name, {all_heads_ * qk_, H_}, per_head(qk_));
    up.bf16(a.w_in, static_cast<std::size_t>(q_rows_) * h, kv_a, {width_, H_});
  }
  if (lora_q_ > 0) {
    if (auto e = alloc_bf16(a.q_a_norm, static_cast<std::size_t>(lora_q_), name(Tensor::q_a_norm)); !e) return e;
    up.bf16(a.q_a_norm, 0, name(Tensor::q_a_norm), {lora_q_});
    auto q_b_q = load_quant(ck, {{name(Tensor::q_b), heads_ * qk_, lora_q_}}, a.q_b_q);
    if (!q_b_q) return q_b_q.error();
    if (!q_b_q.value()) {
      if (auto e = alloc_bf16(a.q_b, static_cast<std::size_t>(heads_ * qk_) * static_cast<std::size_t>(lora_q_), name(Tensor::q_b));
          !e)
        return e;
      up.bf16_rows(a.q_b, 0, name(Tensor::q_b), {all_heads_ * qk_, lora_q_}, per_head(qk_));
    }
  }
  if (bias) {
    if (auto e = alloc_bf16(a.b_in, static_cast<std::size_t>(in_rows_), q_name + " and kv_a biases"); !e) return e;
    std::vector<float> zeros(static_cast<std::size_t>(q_rows_), 0.f);
    if (lora_q_ > 0) up.bf16(a.b_in, 0, name(Tensor::q_a_bias), {lora_q_});
    else up.bf16_from(a.b_in, 0, zeros, q_name + " (no bias)");
    up.bf16(a.b_in, static_cast<std::size_t>(q_rows_), name(Tensor::kv_a_bias), {width_});
    // fp32 (the bf16 values), since o_proj writes the fp32 delta and cuBLASLt's bias has the output's type.
    if (tp_rank_ == 0) {
      if (auto e = a.o_bias.allocate(h * 4, name(Tensor::o_bias)); !e) return e;
      weight_bytes_ += h * 4;
      up.f32_as_bf16(a.o_bias, name(Tensor::o_bias), {H_});
    }
  }
  if (auto e = alloc_bf16(a.kv_a_norm, static_cast<std::size_t>(lora_kv_), name(Tensor::kv_a_norm)); !e) return e;
  up.bf16(a.kv_a_norm, 0, name(Tensor::kv_a_norm), {lora_kv_});
  const int kvb_rows = heads_ * (nope_ + vd_);
  if (auto e = alloc_bf16(a.kv_b, static_cast<std::size_t>(kvb_rows) * static_cast<std::size_t>(lora_kv_), name(Tensor::kv_b));
      !e)
    return e;
  up.bf16_rows(a.kv_b, 0, name(Tensor::kv_b), {all_heads_ * (nope_ + vd_), lora_kv_}, per_head(nope_ + vd_));
  auto o_q = load_quant(ck, {{name(Tensor::o), H_, heads_ * vd_}}, a.o_q);
  if (!o_q) return o_q.error();
  if (!o_q.value()) {
    if (auto e = alloc_bf16(a.o, h * static_cast<std::size_t>(heads_ * vd_), name(Tensor::o)); !e) return e;
    if (sharded()) up.bf16_cols(a.o, 0, name(Tensor::o), {H_, all_heads_ * vd_}, per_head(vd_));
    else up.bf16(a.o, 0, name(Tensor::o), {H_, heads_ * vd_});
  }
  return {};
}

const detail::TensorNames& Glm4MoeLiteCuda::names() const { return TensorNames::glm4_moe_lite(); }

Status Glm4MoeLiteCuda::finish_load() {
  // A transposed copy of each W_kb for the decode path's gemv (not counted in the weights' bytes: a
  // step reads it instead of kv_b's key rows, never both).
  if (nope_ % 8 == 0)
    for (Layer& a : layers_) {
      const std::size_t n = static_cast<std::size_t>(heads_) * static_cast<std::size_t>(lora_kv_) * static_cast<std::size_t>(nope_);
      if (auto e = a.kb_t.allocate(n * 2, "kv_b key part, transposed"); !e) return e;
      if (auto e = kernels::transpose_kb(a.kv_b.get(), heads_, nope_, vd_, lora_kv_, a.kb_t.get(), stream_); !e) return e;
    }
  return TANDEM_CUDA_STATUS(cudaStreamSynchronize(stream_), "transposing kv_b");
}

Status Glm4MoeLiteCuda::allocate_attention() {
  const std::size_t T = static_cast<std::size_t>(t_cap_), heads = static_cast<std::size_t>(heads_);
  if (auto e = qlat_.allocate(T * static_cast<std::size_t>(std::max(lora_q_, 1)) * 2, "query latent"); !e) return e;
  if (auto e = rope_angles_.allocate(T * static_cast<std::size_t>(std::max(rope_, 2)) * sizeof(double), "rotary angles"); !e) return e;
  if (auto e = qattn_.allocate(T * heads * static_cast<std::size_t>(width_) * 2, "absorbed queries"); !e) return e;
  if (auto e = olat_.allocate(T * heads * static_cast<std::size_t>(lora_kv_) * 2, "attention latent"); !e) return e;
  // The un-absorbed prefill carries a context longer than one pass's expansion across passes.
  if (prefill_attn_ != kPrefillMha || max_len_ <= mha_rows()) return {};
  return mha_state_.allocate(T * heads * static_cast<std::size_t>(k::mla_mha_state_floats(vd_)) * 4, "un-absorbed prefill state");
}

Result<std::unique_ptr<CudaModel>> load_glm4_moe_lite_cuda(ModelConfig config, const Checkpoint& ck, comm::Communicator& comm,
                                                           const CudaOptions& options) {
  auto m = std::make_unique<Glm4MoeLiteCuda>(std::move(config), comm, options);
  if (auto e = m->load(ck); !e) return e.error().with_context("CUDA glm4_moe_lite");
  return std::unique_ptr<CudaModel>(std::move(m));
}

}  // namespace tandem::model::cuda
