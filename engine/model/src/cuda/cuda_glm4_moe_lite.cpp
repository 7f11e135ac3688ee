// glm4_moe_lite on CUDA (cuda_model.hpp): loading onto the device, the pool, and the batched step
// with its CUDA graphs. The math per layer, with T tokens of every sequence of the step at once:
//   fused = x W_in^T (+b)            W_in = [q_a | kv_a] (or [q_proj | kv_a] without a query LoRA)
//   q     = q_b(rmsnorm(fused[:, q_a]))                          [T, heads, nope + rope]
//   latent= [rmsnorm(c), rope(kr)] = fused[:, kv_a] normalised and rotated; written to the pool
//   Q     = [q_nope . W_kb[h], rope(q_rope)]   per head            [T, heads, kv_lora + rope]
//   O     = paged attention of Q over the latents (the value is the latent itself)
//   attn  = O . W_v[h]^T per head; delta = o_proj(attn)
// then the FFN (dense, or routed experts + shared experts) and the residual adds fused into the
// next RMSNorm. The math and names follow glm4_moe_lite.cpp, the CPU reference it is checked against.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "../decoder.hpp"
#include "device_buffer.hpp"
#include "glue_kernels.hpp"
#include "tandem/kernels/activation.hpp"
#include "tandem/kernels/embedding.hpp"
#include "tandem/kernels/gemm.hpp"
#include "tandem/kernels/moe_experts.hpp"
#include "tandem/kernels/moe_routing.hpp"
#include "tandem/kernels/paged_attention.hpp"
#include "tandem/kernels/rmsnorm.hpp"
#include "tandem/kernels/rope.hpp"
#include "tandem/kernels/sampling_cuda.hpp"
#include "tandem/kernels/skinny_gemm.hpp"
#include "tandem/model/cuda_model.hpp"

namespace tandem::model::cuda {

namespace k = tandem::kernels;
using detail::layer_prefix;

namespace {

constexpr float kLoraNormEps = 1e-6f;  // transformers' RMSNorm default for q_a / kv_a norms
constexpr k::DType kBf16 = k::DType::bf16;

std::string cuda_error(cudaError_t e, const char* what) {
  return e == cudaSuccess ? std::string() : std::string(what) + ": " + cudaGetErrorString(e);
}

// The first error of a sequence of enqueued operations.
struct FirstError {
  std::string message;
  void operator()(std::string e) {
    if (message.empty() && !e.empty()) message = std::move(e);
  }
  bool ok() const { return message.empty(); }
};

struct Mlp {
  int width = 0;
  DeviceBuffer gate_up, down;  // [2 * width, hidden] (gate rows, then up rows), [hidden, width]
};

struct Layer {
  DeviceBuffer w_in, b_in, q_a_norm, q_b, kv_a_norm, kv_b, o, o_bias;
  DeviceBuffer input_norm, post_norm;
  bool moe = false;
  Mlp dense;                                  // !moe
  DeviceBuffer router, correction_bias;       // fp32 [E, hidden], [E]
  DeviceBuffer experts_gate_up, experts_down; // [E, 2I, hidden], [E, hidden, I]
  Mlp shared;
};

int next_pow2(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

class Glm4MoeLiteCuda final : public CudaModel {
 public:
  Glm4MoeLiteCuda(ModelConfig config, comm::Communicator& comm, const CudaOptions& opt)
      : CudaModel(std::move(config), comm), c_(std::get<Glm4MoeLiteConfig>(this->config().arch)), opt_(opt) {
    const DecoderConfig& d = c_.d;
    H_ = d.hidden_size, V_ = d.vocab_size, heads_ = d.num_attention_heads;
    nope_ = c_.qk_nope_head_dim, rope_ = c_.qk_rope_head_dim, qk_ = c_.qk_head_dim(), vd_ = c_.v_head_dim;
    lora_q_ = c_.q_lora_rank, lora_kv_ = c_.kv_lora_rank, width_ = lora_kv_ + rope_;
    q_rows_ = lora_q_ > 0 ? lora_q_ : heads_ * qk_;
    in_rows_ = q_rows_ + width_;
    E_ = d.moe.n_routed_experts, K_ = d.moe.num_experts_per_tok, I_ = d.moe.moe_intermediate_size;
    max_len_ = opt.max_model_len > 0 ? opt.max_model_len : d.max_position_embeddings;
    kv_type_ = (opt.kv_cache_dtype == "fp8" || opt.kv_cache_dtype == "fp8_e4m3") ? k::DType::fp8_e4m3 : kBf16;
    t_cap_ = std::max(opt.max_num_batched_tokens, opt.max_num_seqs);
    s_cap_ = opt.max_num_seqs;
  }
  ~Glm4MoeLiteCuda() override {
    for (auto& [b, exec] : graphs_) cudaGraphExecDestroy(exec);
    if (stream_) cudaStreamDestroy(stream_);
    if (host_in_) cudaFreeHost(host_in_);
  }

  std::string load(const Checkpoint& ck) {
    if (cudaSetDevice(opt_.device) != cudaSuccess) return "cannot use CUDA device " + std::to_string(opt_.device);
    if (auto e = cuda_error(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream"); !e.empty()) return e;
    std::string why;
    gemm_ = k::GemmRunner::create(&why);
    if (!gemm_) return why;
    if (H_ % 8 != 0 || (E_ > 0 && I_ % 8 != 0))
      return "the CUDA path needs hidden_size and moe_intermediate_size to be multiples of 8";
    if (width_ > 576) return "kv_lora_rank + qk_rope_head_dim must be at most 576 for the paged-attention kernel";
    if (E_ > 1024) return "at most 1024 routed experts";
    if (auto e = load_weights(ck); !e.empty()) return e;
    return allocate_activations();
  }

  KvLayout kv_layout() const override { return {c_.d.num_hidden_layers, width_}; }

  Status make_device_pool(std::int32_t num_blocks, int block_size) override {
    if (num_blocks <= 0 || block_size <= 0) return error("CUDA KV pool: no blocks");
    block_size_ = block_size;
    num_blocks_ = num_blocks;
    max_blocks_ = (max_len_ + block_size - 1) / block_size;
    const std::size_t per_layer = static_cast<std::size_t>(num_blocks + 1) * static_cast<std::size_t>(block_size) *
                                  static_cast<std::size_t>(width_) * static_cast<std::size_t>(k::dtype_bytes(kv_type_));
    layer_bytes_ = per_layer;
    if (auto e = pool_.allocate(per_layer * static_cast<std::size_t>(c_.d.num_hidden_layers), "the KV pool"); !e.empty())
      return error(e + " (" + std::to_string(num_blocks) + " blocks of " + std::to_string(block_size) + ")");
    // Inputs: tokens, positions, sequence of each token, logit rows, block tables (+ padding rows).
    in_ints_ = 3 * static_cast<std::size_t>(t_cap_) + static_cast<std::size_t>(s_cap_) +
               static_cast<std::size_t>(s_cap_) * static_cast<std::size_t>(max_blocks_);
    if (auto e = inputs_.allocate(in_ints_ * 4, "step inputs"); !e.empty()) return error(e);
    if (auto e = cuda_error(cudaMallocHost(&host_in_, in_ints_ * 4), "pinned step inputs"); !e.empty()) return error(e);
    // Flash-decoding workspace for the largest split any step size can ask for.
    std::size_t ws = 0;
    for (int n = 1; n <= t_cap_; ++n) ws = std::max(ws, k::paged_attention_workspace_bytes(n, heads_, attn_layout(), max_len_));
    if (auto e = attn_ws_.allocate(std::max<std::size_t>(ws, 256), "attention workspace"); !e.empty()) return error(e);
    return Ok{};
  }

  Result<std::vector<float>> step(std::span<const PagedWork> work) override {
    auto rows = run(work);
    if (!rows) return rows.error();
    std::vector<float> out(static_cast<std::size_t>(rows.value()) * static_cast<std::size_t>(V_));
    FirstError err;
    err(cuda_error(cudaMemcpyAsync(out.data(), logits_.get(), out.size() * 4, cudaMemcpyDeviceToHost, stream_), "logits"));
    err(cuda_error(cudaStreamSynchronize(stream_), "step"));
    if (!err.ok()) return error(err.message);
    return out;
  }

  Result<std::vector<std::int32_t>> step_greedy(std::span<const PagedWork> work) override {
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

  std::uint64_t weight_bytes() const override { return weight_bytes_; }
  DecodeBytes decode_bytes() const override { return decode_bytes_; }
  void set_enforce_eager(bool eager) override { opt_.enforce_eager = eager; }
  std::uint64_t kv_bytes_per_token() const override {
    return static_cast<std::uint64_t>(c_.d.num_hidden_layers) * static_cast<std::uint64_t>(width_) *
           static_cast<std::uint64_t>(k::dtype_bytes(kv_type_));
  }
  void set_all_reduce(DeviceAllReduce* ar) override { all_reduce_ = ar; }

 protected:
  Result<std::vector<float>> hidden_states(std::span<const int32_t>, KvSequence&) const override {
    return error("the CUDA model runs through step() on its device pool, not forward()");
  }
  const float* lm_head() const override { return nullptr; }

 private:
  k::PagedKvLayout attn_layout() const {
    k::PagedKvLayout l;
    l.dtype = kv_type_;
    l.block_size = block_size_ > 0 ? block_size_ : 16;
    l.kv_heads = 1;
    l.qk_dim = width_;
    l.v_dim = lora_kv_;
    l.k_scale = l.v_scale = opt_.kv_scale;
    l.v_in_k = true;
    return l;
  }

  std::string alloc_bf16(DeviceBuffer& b, std::size_t n, const std::string& what) {
    weight_bytes_ += n * 2;
    return b.allocate(n * 2, what);
  }

  // gate_proj and up_proj of `prefix` (width rows each) into one [2 * width, hidden] buffer.
  std::string load_mlp(Uploader& up, const std::string& prefix, int width, Mlp& m) {
    m.width = width;
    const std::size_t n = static_cast<std::size_t>(width) * static_cast<std::size_t>(H_);
    if (auto e = alloc_bf16(m.gate_up, 2 * n, prefix + "gate_up"); !e.empty()) return e;
    if (auto e = alloc_bf16(m.down, n, prefix + "down_proj"); !e.empty()) return e;
    up.bf16(m.gate_up, 0, prefix + "gate_proj.weight", {width, H_});
    up.bf16(m.gate_up, n, prefix + "up_proj.weight", {width, H_});
    up.bf16(m.down, 0, prefix + "down_proj.weight", {H_, width});
    return {};
  }

  std::string load_weights(const Checkpoint& ck) {
    const DecoderConfig& d = c_.d;
    Uploader up(ck);
    const std::size_t h = static_cast<std::size_t>(H_), v = static_cast<std::size_t>(V_);
    if (auto e = alloc_bf16(embed_, v * h, "embed_tokens"); !e.empty()) return e;
    up.bf16(embed_, 0, "model.embed_tokens.weight", {V_, H_});
    if (auto e = alloc_bf16(final_norm_, h, "norm"); !e.empty()) return e;
    up.bf16(final_norm_, 0, "model.norm.weight", {H_});
    if (!d.tie_word_embeddings) {
      if (auto e = alloc_bf16(head_, v * h, "lm_head"); !e.empty()) return e;
      up.bf16(head_, 0, "lm_head.weight", {V_, H_});
    }
    const bool bias = d.attention_bias;
    layers_.resize(static_cast<std::size_t>(d.num_hidden_layers));
    std::uint64_t fixed = 0;
    for (int l = 0; l < d.num_hidden_layers && up.ok(); ++l) {
      Layer& a = layers_[static_cast<std::size_t>(l)];
      const std::string p = layer_prefix(l), sa = p + "self_attn.";
      const std::uint64_t before = weight_bytes_;
      if (auto e = alloc_bf16(a.w_in, static_cast<std::size_t>(in_rows_) * h, sa + "w_in"); !e.empty()) return e;
      const std::size_t kv_at = static_cast<std::size_t>(q_rows_) * h;
      if (lora_q_ > 0) {
        up.bf16(a.w_in, 0, sa + "q_a_proj.weight", {lora_q_, H_});
        if (auto e = alloc_bf16(a.q_a_norm, static_cast<std::size_t>(lora_q_), sa + "q_a_layernorm"); !e.empty()) return e;
        up.bf16(a.q_a_norm, 0, sa + "q_a_layernorm.weight", {lora_q_});
        if (auto e = alloc_bf16(a.q_b, static_cast<std::size_t>(heads_ * qk_) * static_cast<std::size_t>(lora_q_), sa + "q_b");
            !e.empty())
          return e;
        up.bf16(a.q_b, 0, sa + "q_b_proj.weight", {heads_ * qk_, lora_q_});
      } else {
        up.bf16(a.w_in, 0, sa + "q_proj.weight", {heads_ * qk_, H_});
      }
      up.bf16(a.w_in, kv_at, sa + "kv_a_proj_with_mqa.weight", {width_, H_});
      if (bias) {
        if (auto e = alloc_bf16(a.b_in, static_cast<std::size_t>(in_rows_), sa + "bias"); !e.empty()) return e;
        std::vector<float> zeros(static_cast<std::size_t>(q_rows_), 0.f);
        if (lora_q_ > 0) up.bf16(a.b_in, 0, sa + "q_a_proj.bias", {lora_q_});
        else up.bf16_from(a.b_in, 0, zeros, sa + "q_proj (no bias)");
        up.bf16(a.b_in, static_cast<std::size_t>(q_rows_), sa + "kv_a_proj_with_mqa.bias", {width_});
        if (auto e = alloc_bf16(a.o_bias, h, sa + "o_proj.bias"); !e.empty()) return e;
        up.bf16(a.o_bias, 0, sa + "o_proj.bias", {H_});
      }
      if (auto e = alloc_bf16(a.kv_a_norm, static_cast<std::size_t>(lora_kv_), sa + "kv_a_layernorm"); !e.empty()) return e;
      up.bf16(a.kv_a_norm, 0, sa + "kv_a_layernorm.weight", {lora_kv_});
      const int kvb_rows = heads_ * (nope_ + vd_);
      if (auto e = alloc_bf16(a.kv_b, static_cast<std::size_t>(kvb_rows) * static_cast<std::size_t>(lora_kv_), sa + "kv_b");
          !e.empty())
        return e;
      up.bf16(a.kv_b, 0, sa + "kv_b_proj.weight", {kvb_rows, lora_kv_});
      if (auto e = alloc_bf16(a.o, h * static_cast<std::size_t>(heads_ * vd_), sa + "o_proj"); !e.empty()) return e;
      up.bf16(a.o, 0, sa + "o_proj.weight", {H_, heads_ * vd_});
      for (auto [buf, name] : {std::pair{&a.input_norm, "input_layernorm.weight"}, std::pair{&a.post_norm, "post_attention_layernorm.weight"}}) {
        if (auto e = alloc_bf16(*buf, h, p + name); !e.empty()) return e;
        up.bf16(*buf, 0, p + name, {H_});
      }
      fixed += weight_bytes_ - before;

      const std::string mp = p + "mlp.";
      a.moe = d.layer_is_moe[static_cast<std::size_t>(l)];
      const std::uint64_t ffn_before = weight_bytes_;
      if (!a.moe) {
        if (auto e = load_mlp(up, mp, d.intermediate_size, a.dense); !e.empty()) return e;
        fixed += weight_bytes_ - ffn_before;
        continue;
      }
      const std::size_t expert = static_cast<std::size_t>(I_) * h;
      if (auto e = a.router.allocate(static_cast<std::size_t>(E_) * h * 4, mp + "gate"); !e.empty()) return e;
      if (auto e = a.correction_bias.allocate(static_cast<std::size_t>(E_) * 4, mp + "gate bias"); !e.empty()) return e;
      weight_bytes_ += static_cast<std::size_t>(E_) * (h + 1) * 4;
      up.f32(a.router, mp + "gate.weight", {E_, H_});
      up.f32(a.correction_bias, mp + "gate.e_score_correction_bias", {E_});
      if (auto e = alloc_bf16(a.experts_gate_up, static_cast<std::size_t>(E_) * 2 * expert, mp + "experts gate_up"); !e.empty())
        return e;
      if (auto e = alloc_bf16(a.experts_down, static_cast<std::size_t>(E_) * expert, mp + "experts down"); !e.empty()) return e;
      if (ck.has(mp + "experts.gate_up_proj")) {
        up.bf16(a.experts_gate_up, 0, mp + "experts.gate_up_proj", {E_, 2 * I_, H_});
        up.bf16(a.experts_down, 0, mp + "experts.down_proj", {E_, H_, I_});
      } else {
        for (int e = 0; e < E_ && up.ok(); ++e) {
          const std::string ep = mp + "experts." + std::to_string(e) + ".";
          const std::size_t at = static_cast<std::size_t>(e) * expert;
          up.bf16(a.experts_gate_up, 2 * at, ep + "gate_proj.weight", {I_, H_});
          up.bf16(a.experts_gate_up, 2 * at + expert, ep + "up_proj.weight", {I_, H_});
          up.bf16(a.experts_down, at, ep + "down_proj.weight", {H_, I_});
        }
      }
      const std::uint64_t shared_before = weight_bytes_;
      if (d.moe.n_shared_experts > 0)
        if (auto e = load_mlp(up, mp + "shared_experts.", I_ * d.moe.n_shared_experts, a.shared); !e.empty()) return e;
      // A step reads the router and the shared experts once, and each expert chosen by any token.
      fixed += static_cast<std::uint64_t>(E_) * (h + 1) * 4 + (weight_bytes_ - shared_before);
      decode_bytes_.moe_layers += 1;
      decode_bytes_.per_expert = 3 * expert * 2;
    }
    if (!up.ok()) return up.error();
    std::vector<float> inv(static_cast<std::size_t>(rope_ / 2));
    k::rope_inv_freq(inv.data(), rope_, d.rope_theta);
    if (auto e = inv_freq_.allocate(inv.size() * 4, "rope frequencies"); !e.empty()) return e;
    if (auto e = cuda_error(cudaMemcpy(inv_freq_.get(), inv.data(), inv.size() * 4, cudaMemcpyHostToDevice), "rope"); !e.empty())
      return e;
    // Plus the final norm, the LM head and the embedding rows (one per token; counted once).
    decode_bytes_.fixed = fixed + (h + v * h + h) * 2;
    decode_bytes_.experts = E_, decode_bytes_.top_k = K_;
    return {};
  }

  std::string allocate_activations() {
    const std::size_t T = static_cast<std::size_t>(t_cap_), S = static_cast<std::size_t>(s_cap_);
    const std::size_t h = static_cast<std::size_t>(H_), P = T * static_cast<std::size_t>(std::max(K_, 1));
    int mlp_width = 0;
    for (const Layer& a : layers_) mlp_width = std::max({mlp_width, a.dense.width, a.shared.width});
    struct Want {
      DeviceBuffer* b;
      std::size_t bytes;
      const char* what;
    };
    const std::size_t heads = static_cast<std::size_t>(heads_);
    const Want wants[] = {
        {&x_, T * h * 4, "residual"},
        {&delta_, T * h * 2, "delta"},
        {&h_, T * h * 2, "normed"},
        {&fused_, T * static_cast<std::size_t>(in_rows_) * 2, "fused projection"},
        {&qlat_, T * static_cast<std::size_t>(std::max(lora_q_, 1)) * 2, "query latent"},
        {&q_, T * heads * static_cast<std::size_t>(qk_) * 2, "queries"},
        {&qattn_, T * heads * static_cast<std::size_t>(width_) * 2, "absorbed queries"},
        {&olat_, T * heads * static_cast<std::size_t>(lora_kv_) * 2, "attention latent"},
        {&attn_, T * heads * static_cast<std::size_t>(vd_) * 2, "attention out"},
        {&mlp_gu_, T * 2 * static_cast<std::size_t>(std::max(mlp_width, 1)) * 2, "mlp gate_up"},
        {&mlp_act_, T * static_cast<std::size_t>(std::max(mlp_width, 1)) * 2, "mlp act"},
        {&shared_out_, T * h * 2, "shared experts out"},
        {&router_logits_, T * static_cast<std::size_t>(std::max(E_, 1)) * 4, "router logits"},
        {&expert_, P * 4, "expert ids"},
        {&weight_, P * 4, "expert weights"},
        {&offsets_, static_cast<std::size_t>(E_ + 1) * 4, "expert offsets"},
        {&sorted_, P * 4, "sorted pairs"},
        {&pair_pos_, P * 4, "pair positions"},
        {&moe_gu_, P * 2 * static_cast<std::size_t>(std::max(I_, 1)) * 2, "expert gate_up"},
        {&moe_act_, P * static_cast<std::size_t>(std::max(I_, 1)) * 2, "expert act"},
        {&moe_out_, P * h * 2, "expert out"},
        {&head_in_, S * h * 2, "head rows"},
        {&logits_, S * static_cast<std::size_t>(V_) * 4, "logits"},
        {&sampled_, S * sizeof(k::Sampled), "sampled"},
        {&sample_params_, S * sizeof(k::SamplingParams), "sampling params"},
        {&uniform_, S * sizeof(double), "uniforms"},
        {&keep_, S * static_cast<std::size_t>(V_), "sampling mask"},
    };
    for (const Want& w : wants)
      if (auto e = w.b->allocate(w.bytes, w.what); !e.empty()) return e;
    std::vector<k::SamplingParams> greedy(S);
    for (auto& g : greedy) g.temperature = 0.f;
    if (auto e = cuda_error(cudaMemcpy(sample_params_.get(), greedy.data(), S * sizeof(k::SamplingParams), cudaMemcpyHostToDevice),
                            "sampling params");
        !e.empty())
      return e;
    return cuda_error(cudaMemset(uniform_.get(), 0, S * sizeof(double)), "uniforms");
  }

  // --- one step ------------------------------------------------------------------------------

  std::int32_t* in_tokens() const { return inputs_.as<std::int32_t>(); }
  std::int32_t* in_pos() const { return in_tokens() + t_cap_; }
  std::int32_t* in_seq() const { return in_pos() + t_cap_; }
  std::int32_t* in_rows() const { return in_seq() + t_cap_; }
  std::int32_t* in_tables() const { return in_rows() + s_cap_; }

  // Checks the items, stages the inputs, enqueues the forward (replaying a graph for decode
  // steps); returns how many logit rows logits_ holds (in the items' order).
  Result<int> run(std::span<const PagedWork> work) {
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

  std::string capture(int B) {
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

  std::string all_reduce(DeviceBuffer& b, int T) {
    if (!all_reduce_) return {};
    auto s = all_reduce_->all_reduce_sum(b.get(), static_cast<std::size_t>(T) * static_cast<std::size_t>(H_), kBf16, stream_);
    return s ? std::string() : s.error().message;
  }

  // A plain (unbatched, nn.Linear) product: the few-rows kernel at decode sizes, else cuBLASLt.
  std::string gemm(const k::GemmArgs& g) {
    if (g.batch == 1 && g.w_trans && g.xw_type == kBf16 && g.rows <= opt_.skinny_rows && k::skinny_gemm_fits(g.x, g.ldx, g.w, g.in))
      return k::skinny_gemm_cuda(g.x, g.ldx, g.rows, g.w, g.in, g.out, g.bias, g.y, g.ldy, g.y_type, stream_);
    return gemm_->run(g, stream_);
  }

  k::GemmArgs linear(const void* x, const DeviceBuffer& w, void* y, int rows, int in, int out) const {
    k::GemmArgs g;
    g.rows = rows, g.in = in, g.out = out;
    g.x = x, g.ldx = in, g.w = w.get(), g.ldw = in, g.y = y, g.ldy = out;
    return g;
  }

  // The whole forward of T tokens (R logit rows) on the stream; no host synchronisation.
  std::string enqueue(int T, int R, int max_context) {
    const DecoderConfig& d = c_.d;
    const float eps = static_cast<float>(d.rms_norm_eps);
    FirstError err;
    err(k::embedding_cuda(kBf16, embed_.get(), V_, H_, in_tokens(), T, delta_.get(), stream_));
    err(cuda_error(cudaMemsetAsync(x_.get(), 0, static_cast<std::size_t>(T) * static_cast<std::size_t>(H_) * 4, stream_), "zero"));
    for (int l = 0; l < d.num_hidden_layers && err.ok(); ++l) {
      const Layer& a = layers_[static_cast<std::size_t>(l)];
      // x += delta (the embedding, or the last FFN's output); h = rmsnorm(x)
      err(add_rmsnorm(x_.as<float>(), delta_.get(), a.input_norm.get(), h_.get(), T, H_, eps, stream_));
      err(attention(l, a, T, max_context));
      err(all_reduce(delta_, T));
      err(add_rmsnorm(x_.as<float>(), delta_.get(), a.post_norm.get(), h_.get(), T, H_, eps, stream_));
      err(a.moe ? moe(a, T) : mlp(a.dense, T, delta_.get()));
      err(all_reduce(delta_, T));
    }
    err(add_rmsnorm(x_.as<float>(), delta_.get(), final_norm_.get(), h_.get(), T, H_, eps, stream_));
    if (R > 0) {
      err(gather_rows(h_.get(), H_, in_rows(), R, head_in_.get(), stream_));
      k::GemmArgs g = linear(head_in_.get(), head_.empty() ? embed_ : head_, logits_.get(), R, H_, V_);
      g.y_type = k::DType::f32;
      err(gemm(g));
    }
    return err.message;
  }

  std::string attention(int l, const Layer& a, int T, int max_context) {
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
    char* layer_pool = pool_.as<char>() + static_cast<std::size_t>(l) * layer_bytes_;
    err(latent_cache_write(latent, in_rows_, T, width_, in_seq(), in_pos(), in_tables(), max_blocks_, block_size_, kv_type_,
                           opt_.kv_scale, layer_pool, stream_));

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
    err(k::paged_attention_cuda(kBf16, qattn, T, in_seq(), in_pos(), heads_, attn_layout(), layer_pool, layer_pool, in_tables(),
                                max_blocks_, scale, olat_.get(), max_context, attn_ws_.get(), attn_ws_.bytes(), stream_));

    // Values: O[h] . W_v[h]^T (W_v[h] = kv_b rows h*(nope+vd)+nope .. +vd, [vd, kv_lora]).
    k::GemmArgs va;
    va.rows = T, va.in = lora_kv_, va.out = vd_, va.batch = heads_;
    va.x = olat_.get(), va.ldx = static_cast<long>(heads_) * lora_kv_, va.stride_x = lora_kv_;
    va.w = a.kv_b.as<std::uint16_t>() + static_cast<long>(nope_) * lora_kv_, va.ldw = lora_kv_, va.stride_w = kvb_stride;
    va.y = attn_.get(), va.ldy = static_cast<long>(heads_) * vd_, va.stride_y = vd_;
    err(gemm(va));
    k::GemmArgs o = linear(attn_.get(), a.o, delta_.get(), T, heads_ * vd_, H_);
    o.bias = a.o_bias.get();
    err(gemm(o));
    return err.message;
  }

  std::string mlp(const Mlp& m, int T, void* out) {
    FirstError err;
    err(gemm(linear(h_.get(), m.gate_up, mlp_gu_.get(), T, H_, 2 * m.width)));
    err(k::silu_and_mul_cuda(kBf16, mlp_gu_.get(), mlp_act_.get(), T, m.width, stream_));
    err(gemm(linear(mlp_act_.get(), m.down, out, T, m.width, H_)));
    return err.message;
  }

  std::string moe(const Layer& a, int T) {
    const MoeConfig& m = c_.d.moe;
    k::MoeRouting routing;
    routing.n_experts = E_, routing.n_group = m.n_group, routing.topk_group = m.topk_group, routing.top_k = K_;
    routing.norm_topk_prob = m.norm_topk_prob;
    routing.routed_scaling_factor = static_cast<float>(m.routed_scaling_factor);
    FirstError err;
    err(k::router_logits_cuda(h_.get(), T, H_, a.router.as<float>(), E_, router_logits_.as<float>(), stream_));
    err(k::moe_route_cuda(routing, router_logits_.as<float>(), a.correction_bias.as<float>(), T, expert_.as<std::int32_t>(),
                          weight_.as<float>(), stream_));
    err(k::moe_sort_cuda(expert_.as<std::int32_t>(), T, K_, 0, E_, offsets_.as<std::int32_t>(), sorted_.as<std::int32_t>(),
                         pair_pos_.as<std::int32_t>(), stream_));
    err(k::grouped_gemm_cuda(h_.get(), H_, sorted_.as<std::int32_t>(), offsets_.as<std::int32_t>(), E_, a.experts_gate_up.get(),
                             2 * I_, H_, moe_gu_.get(), 2L * I_, stream_));
    err(k::silu_and_mul_cuda(kBf16, moe_gu_.get(), moe_act_.get(), T * K_, I_, stream_));
    err(k::grouped_gemm_cuda(moe_act_.get(), I_, nullptr, offsets_.as<std::int32_t>(), E_, a.experts_down.get(), H_, I_,
                             moe_out_.get(), H_, stream_));
    const bool shared = a.shared.width > 0;
    if (shared) err(mlp(a.shared, T, shared_out_.get()));
    err(k::moe_combine_cuda(moe_out_.get(), pair_pos_.as<std::int32_t>(), weight_.as<float>(), T, K_, H_,
                            shared ? shared_out_.get() : nullptr, delta_.get(), stream_));
    return err.message;
  }

  const Glm4MoeLiteConfig& c_;
  CudaOptions opt_;
  int H_ = 0, V_ = 0, heads_ = 0, nope_ = 0, rope_ = 0, qk_ = 0, vd_ = 0, lora_q_ = 0, lora_kv_ = 0, width_ = 0;
  int q_rows_ = 0, in_rows_ = 0, E_ = 0, K_ = 0, I_ = 0, max_len_ = 0, t_cap_ = 0, s_cap_ = 0;
  k::DType kv_type_ = kBf16;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<k::GemmRunner> gemm_;
  DeviceAllReduce* all_reduce_ = nullptr;
  std::uint64_t weight_bytes_ = 0;
  DecodeBytes decode_bytes_;

  DeviceBuffer embed_, final_norm_, head_, inv_freq_;
  std::vector<Layer> layers_;

  DeviceBuffer pool_;
  std::size_t layer_bytes_ = 0;
  std::int32_t num_blocks_ = 0;
  int block_size_ = 0, max_blocks_ = 0;

  DeviceBuffer x_, delta_, h_, fused_, qlat_, q_, qattn_, olat_, attn_, mlp_gu_, mlp_act_, shared_out_;
  DeviceBuffer router_logits_, expert_, weight_, offsets_, sorted_, pair_pos_, moe_gu_, moe_act_, moe_out_;
  DeviceBuffer head_in_, logits_, sampled_, sample_params_, uniform_, keep_, attn_ws_, inputs_;
  std::size_t in_ints_ = 0;
  std::int32_t* host_in_ = nullptr;
  std::map<int, cudaGraphExec_t> graphs_;
};

}  // namespace

Result<std::unique_ptr<CudaModel>> load_glm4_moe_lite_cuda(ModelConfig config, const Checkpoint& ck, comm::Communicator& comm,
                                                           const CudaOptions& options) {
  auto m = std::make_unique<Glm4MoeLiteCuda>(std::move(config), comm, options);
  if (auto e = m->load(ck); !e.empty()) return error("CUDA glm4_moe_lite: " + e);
  return std::unique_ptr<CudaModel>(std::move(m));
}

}  // namespace tandem::model::cuda
