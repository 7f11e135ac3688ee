// A glm4_moe_lite (or glm5_next_text) checkpoint of random weights written straight in fp8 (128x128 block scales) or
// NVFP4, tensor by tensor, as tandem-quantize would write it from a bf16 one (the formats, names
// and config are quantized_checkpoint.hpp's): GLM-4.7-Flash's real shape is about 30 B parameters,
// 60 GB in bf16, which the GPU machine's disk cannot hold beside the quantised copies, so bf16 is
// never written. Values: seeded, normal-like with transformers' init std (initializer_range 0.02)
// for the projections, the embedding, the LM head and the routers; norms 1, router biases 0 (as
// transformers initialises them). Each tensor (row chunk, for the unquantised embedding and LM
// head) is generated, quantised and written at its offset (pwrite) by one of `threads` workers, so
// memory stays at a few of the largest projections. For engine/bench/gpu-real-shape.sh
// (tandem-random-checkpoint) and its CPU test (tests/model/random_checkpoint_test.cpp).
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "quantized_checkpoint.hpp"
#include "tandem/kernels/dtype.hpp"
#include "tensor_names.hpp"

namespace tandem::model::bench {

// GLM-4.7-Flash: transformers' Glm4MoeLiteConfig defaults (47 layers, hidden 2048, 64 routed
// experts of 1536 top-4 plus one shared, MLA with q_lora 768 and a 512 latent, vocabulary 154880),
// rope_theta as the released config sets it; `layers` < 47 keeps the first dense layer and fewer MoE ones.
inline nlohmann::json glm47_flash_config(int layers = 47) {
  nlohmann::json types = nlohmann::json::array();
  for (int l = 0; l < layers; ++l) types.push_back(l == 0 ? "dense" : "sparse");
  return {{"architectures", {"Glm4MoeLiteForCausalLM"}},
          {"model_type", "glm4_moe_lite"},
          {"vocab_size", 154880},
          {"hidden_size", 2048},
          {"intermediate_size", 10240},
          {"moe_intermediate_size", 1536},
          {"num_hidden_layers", layers},
          {"mlp_layer_types", types},
          {"num_attention_heads", 20},
          {"num_key_value_heads", 20},
          {"n_shared_experts", 1},
          {"n_routed_experts", 64},
          {"num_experts_per_tok", 4},
          {"routed_scaling_factor", 1.8},
          {"kv_lora_rank", 512},
          {"q_lora_rank", 768},
          {"qk_rope_head_dim", 64},
          {"qk_nope_head_dim", 192},
          {"v_head_dim", 256},
          {"n_group", 1},
          {"topk_group", 1},
          {"norm_topk_prob", true},
          {"hidden_act", "silu"},
          {"max_position_embeddings", 202752},
          {"initializer_range", 0.02},
          {"rms_norm_eps", 1e-5},
          {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1000000.0}}},
          {"rope_interleave", true},
          {"attention_bias", false},
          {"tie_word_embeddings", false},
          {"bos_token_id", 0},
          {"eos_token_id", {1}},
          {"dtype", "bfloat16"}};
}

// One tensor of the checkpoint before it is stored: its logical shape and how it is initialised.
struct RandomTensor {
  enum class Init { normal, ones, zeros };
  std::string name;
  std::vector<int64_t> shape;
  Init init = Init::normal;
  std::string dtype = "BF16";  // where it is not a quantised projection
};

// Layer l's feed-forward tensors, the same in both GLM layouts: a dense MLP, or the router, the
// routed experts (one tensor per expert) and the shared experts.
inline void append_ffn(std::vector<RandomTensor>& t, const detail::TensorNames& n, const nlohmann::json& c, int l) {
  using detail::Tensor;
  using Init = RandomTensor::Init;
  const int64_t H = c.at("hidden_size"), I = c.at("intermediate_size");
  const int64_t E = c.at("n_routed_experts"), Im = c.at("moe_intermediate_size"), shared = Im * c.at("n_shared_experts").get<int64_t>();
  if (c.at("mlp_layer_types").at(static_cast<std::size_t>(l)) == "dense") {
    t.push_back({n(Tensor::mlp_gate, l), {I, H}});
    t.push_back({n(Tensor::mlp_up, l), {I, H}});
    t.push_back({n(Tensor::mlp_down, l), {H, I}});
    return;
  }
  t.push_back({n(Tensor::router, l), {E, H}});
  t.push_back({n(Tensor::router_bias, l), {E}, Init::zeros, "F32"});
  for (int e = 0; e < E; ++e) {
    t.push_back({n(Tensor::expert_gate, l, e), {Im, H}});
    t.push_back({n(Tensor::expert_up, l, e), {Im, H}});
    t.push_back({n(Tensor::expert_down, l, e), {H, Im}});
  }
  if (shared > 0) {
    t.push_back({n(Tensor::shared_gate, l), {shared, H}});
    t.push_back({n(Tensor::shared_up, l), {shared, H}});
    t.push_back({n(Tensor::shared_down, l), {H, shared}});
  }
}

// Every tensor of a glm4_moe_lite with `config`, routed experts one tensor per expert (the released
// checkpoints' layout), named by the model's own table (tensor_names.hpp).
inline std::vector<RandomTensor> glm4_moe_lite_tensors(const nlohmann::json& c) {
  using detail::Tensor;
  using Init = RandomTensor::Init;
  const auto& n = detail::TensorNames::glm4_moe_lite();
  const int64_t H = c.at("hidden_size"), V = c.at("vocab_size"), heads = c.at("num_attention_heads");
  const int64_t qr = c.at("q_lora_rank"), kvr = c.at("kv_lora_rank"), rope = c.at("qk_rope_head_dim");
  const int64_t nope = c.at("qk_nope_head_dim"), vd = c.at("v_head_dim");
  const int layers = c.at("num_hidden_layers");
  std::vector<RandomTensor> t{{n(Tensor::embed), {V, H}}};
  for (int l = 0; l < layers; ++l) {
    t.push_back({n(Tensor::input_norm, l), {H}, Init::ones});
    t.push_back({n(Tensor::post_attention_norm, l), {H}, Init::ones});
    t.push_back({n(Tensor::q_a, l), {qr, H}});
    t.push_back({n(Tensor::q_a_norm, l), {qr}, Init::ones});
    t.push_back({n(Tensor::q_b, l), {heads * (nope + rope), qr}});
    t.push_back({n(Tensor::kv_a, l), {kvr + rope, H}});
    t.push_back({n(Tensor::kv_a_norm, l), {kvr}, Init::ones});
    t.push_back({n(Tensor::kv_b, l), {heads * (nope + vd), kvr}});
    t.push_back({n(Tensor::o, l), {H, heads * vd}});
    append_ffn(t, n, c, l);
  }
  t.push_back({n(Tensor::final_norm), {H}, Init::ones});
  t.push_back({n(Tensor::lm_head), {V, H}});
  return t;
}

// transformers' Glm5NextTextConfig defaults (5.17: 45 layers, hidden 4096, 288 routed experts of
// 2048 top-8 plus one shared, KDA with 64 heads of 128, DSA (MLA without rope, q_lora 1536, a 512
// latent) every fourth layer with a 32-head indexer, hyper-connections of 4 streams, vocabulary
// 154880) with the first `layers` layers of its pattern and `experts` routed experts: the 60 GB
// default does not fit the GPU machine's disk beside anything else (8 layers and 18 experts: the
// 5.2 B model glm5_next_bench_model.py writes in bf16).
inline nlohmann::json glm5_next_config(int layers = 45, int experts = 288) {
  nlohmann::json kinds = nlohmann::json::array(), mlp = nlohmann::json::array(), indexer = nlohmann::json::array();
  for (int l = 0; l < layers; ++l) {
    kinds.push_back(l % 4 == 3 ? "deepseek_sparse_attention" : "linear_attention");
    mlp.push_back(l < 3 ? "dense" : "sparse");
    indexer.push_back("full");
  }
  return {{"architectures", {"Glm5NextTextCausalLM"}}, {"model_type", "glm5_next_text"},
          {"vocab_size", 154880}, {"hidden_size", 4096}, {"intermediate_size", 12288}, {"moe_intermediate_size", 2048},
          {"num_hidden_layers", layers}, {"layer_types", kinds}, {"mlp_layer_types", mlp}, {"indexer_types", indexer},
          {"num_attention_heads", 64}, {"num_key_value_heads", 64}, {"head_dim", 0},
          {"n_shared_experts", 1}, {"n_routed_experts", experts}, {"num_experts_per_tok", 8}, {"routed_scaling_factor", 2.5},
          {"n_group", 1}, {"topk_group", 1}, {"norm_topk_prob", true}, {"swiglu_limit", 10.0},
          {"kv_lora_rank", 512}, {"q_lora_rank", 1536}, {"qk_rope_head_dim", 0}, {"qk_nope_head_dim", 256},
          {"qk_head_dim", 256}, {"v_head_dim", 256},
          {"index_topk", 2048}, {"index_head_dim", 128}, {"index_n_heads", 32}, {"index_kpool", 16},
          {"index_kpool_always_select_tail", true},
          {"linear_head_dim", 128}, {"linear_num_heads", 64}, {"linear_conv_kernel_dim", 4}, {"linear_lower_bound", -5.0},
          {"hc_mult", 4}, {"hc_eps", 1e-6}, {"hc_sinkhorn_iters", 20},
          {"hidden_act", "silu"}, {"max_position_embeddings", 1048576}, {"initializer_range", 0.02}, {"rms_norm_eps", 1e-5},
          {"attention_bias", false}, {"attention_dropout", 0.0}, {"tie_word_embeddings", false},
          {"pad_token_id", 154820}, {"dtype", "bfloat16"}};
}

// Every tensor of a glm5_next_text with `config` (the names of tensor_names.hpp's glm5_next table;
// routed experts one tensor per expert, as quantised checkpoints store them). Inits: projections,
// the hyper-connections' mixers and the indexer's pool embedding normal; norms and the mixers'
// scales 1; biases, A_log and dt_bias 0.
// long-function: a flat tensor list, one line per tensor, per layer kind.
inline std::vector<RandomTensor> glm5_next_tensors(const nlohmann::json& c) {
  using detail::Tensor;
  using Init = RandomTensor::Init;
  const auto& n = detail::TensorNames::glm5_next();
  const int64_t H = c.at("hidden_size"), V = c.at("vocab_size"), heads = c.at("num_attention_heads");
  const int64_t qr = c.at("q_lora_rank"), kvr = c.at("kv_lora_rank"), rope = c.at("qk_rope_head_dim");
  const int64_t nope = c.at("qk_nope_head_dim"), vd = c.at("v_head_dim");
  const int64_t lh = c.at("linear_num_heads"), lhd = c.at("linear_head_dim"), lqk = lh * lhd, K = c.at("linear_conv_kernel_dim");
  const int64_t ih = c.at("index_n_heads"), id = c.at("index_head_dim"), kpool = c.at("index_kpool");
  const int64_t hc = c.at("hc_mult"), mix = (2 + hc) * hc;
  const int layers = c.at("num_hidden_layers");
  std::vector<RandomTensor> t{{n(Tensor::embed), {V, H}}};
  for (int l = 0; l < layers; ++l) {
    t.push_back({n(Tensor::input_norm, l), {H}, Init::ones});
    t.push_back({n(Tensor::post_attention_norm, l), {H}, Init::ones});
    for (auto [fn, base, scale] : {std::tuple{Tensor::attn_hc_fn, Tensor::attn_hc_base, Tensor::attn_hc_scale},
                                   std::tuple{Tensor::ffn_hc_fn, Tensor::ffn_hc_base, Tensor::ffn_hc_scale}}) {
      t.push_back({n(fn, l), {mix, hc * H}});
      t.push_back({n(base, l), {mix}, Init::zeros});
      t.push_back({n(scale, l), {3}, Init::ones});
    }
    const std::size_t li = static_cast<std::size_t>(l);
    if (c.at("layer_types").at(li) == "linear_attention") {
      for (Tensor p : {Tensor::kda_q, Tensor::kda_k, Tensor::kda_v}) t.push_back({n(p, l), {lqk, H}});
      t.push_back({n(Tensor::kda_conv, l), {3 * lqk, 1, K}});
      t.push_back({n(Tensor::kda_f_a, l), {lhd, H}});
      t.push_back({n(Tensor::kda_f_b, l), {lqk, lhd}});
      t.push_back({n(Tensor::kda_dt_bias, l), {lqk}, Init::zeros});
      t.push_back({n(Tensor::kda_a_log, l), {lh}, Init::zeros});
      t.push_back({n(Tensor::kda_b, l), {lh, H}});
      t.push_back({n(Tensor::kda_g_a, l), {lhd, H}});
      t.push_back({n(Tensor::kda_g_b, l), {lqk, lhd}});
      t.push_back({n(Tensor::kda_o_norm, l), {lhd}, Init::ones});
      t.push_back({n(Tensor::kda_o, l), {H, lqk}});
    } else {
      t.push_back({n(Tensor::q_a, l), {qr, H}});
      t.push_back({n(Tensor::q_a_norm, l), {qr}, Init::ones});
      t.push_back({n(Tensor::q_b, l), {heads * (nope + rope), qr}});
      t.push_back({n(Tensor::kv_a, l), {kvr + rope, H}});
      t.push_back({n(Tensor::kv_a_norm, l), {kvr}, Init::ones});
      t.push_back({n(Tensor::kv_b, l), {heads * (nope + vd), kvr}});
      t.push_back({n(Tensor::o, l), {H, heads * vd}});
      if (c.at("indexer_types").at(li) == "full") {
        t.push_back({n(Tensor::index_wq_b, l), {ih * id, qr}});
        t.push_back({n(Tensor::index_wk, l), {id, H}});
        t.push_back({n(Tensor::index_k_norm, l), {id}, Init::ones});
        t.push_back({n(Tensor::index_k_norm_bias, l), {id}, Init::zeros});
        t.push_back({n(Tensor::index_weights, l), {ih, H}});
        t.push_back({n(Tensor::index_kpool_ape, l), {kpool, id}});
        t.push_back({n(Tensor::index_kpool_gate, l), {id, H}});
      }
    }
    append_ffn(t, n, c, l);
  }
  t.push_back({n(Tensor::final_norm), {H}, Init::ones});
  t.push_back({n(Tensor::lm_head), {V, H}});
  return t;
}

// Seeded normal-like values, std `std`: each a sum of four 16-bit uniforms (Irwin-Hall, bounded at
// 3.5 std) from one xorshift64* draw, so ~30 G values take seconds on a few cores.
inline void fill_random(float* out, std::size_t n, std::uint64_t seed, float std) {
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  s ^= s >> 31;
  if (s == 0) s = 1;
  // The sum of 4 uniforms on [0, 65536) has mean 131070 and std 65536 * sqrt(4 / 12).
  const float scale = std / (65536.0f * std::sqrt(1.0f / 3.0f));
  for (std::size_t i = 0; i < n; ++i) {
    s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
    const std::uint64_t r = s * 0x2545F4914F6CDD1Dull;
    const auto sum = static_cast<std::uint32_t>((r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48));
    out[i] = (static_cast<float>(sum) - 131070.0f) * scale;
  }
}

// Values per row of the first dimension (glm5_next's conv1d weight is 3-D).
inline int64_t row_width(const std::vector<int64_t>& shape) {
  int64_t w = 1;
  for (std::size_t i = 1; i < shape.size(); ++i) w *= shape[i];
  return w;
}

struct RandomCheckpointStats {
  std::uint64_t bytes = 0;  // of model.safetensors
  int quantised = 0;        // projections stored quantised
  double seconds = 0;
};

// Writes dir/model.safetensors and dir/config.json (with its quantization_config); "" or what failed.
// long-function: one pass, plan (layout and offsets), then the workers' generate-quantise-pwrite loop.
inline std::string write_random_checkpoint(const std::filesystem::path& dir, const nlohmann::json& config, QuantizeAs as,
                                           std::uint64_t seed, unsigned threads, RandomCheckpointStats* stats = nullptr) {
  namespace fs = std::filesystem;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<RandomTensor> tensors =
      config.value("model_type", "") == "glm5_next_text" ? glm5_next_tensors(config) : glm4_moe_lite_tensors(config);
  const float std_dev = config.value("initializer_range", 0.02f);
  // The stored layout: a 2-D `.weight` as projection_layout stores it (its unquantised ones in
  // BF16, as a bf16 checkpoint's would be), anything else as it is.
  std::vector<std::vector<StoredTensor>> layout(tensors.size());
  int quantised = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const RandomTensor& t = tensors[i];
    if (t.shape.size() == 2 && quantized_projection(t.name, t.shape, as)) {
      layout[i] = projection_layout(t.name, t.shape[0], t.shape[1], as);
      ++quantised;
    } else {
      layout[i] = {{t.name, t.dtype, t.shape, {}}};
    }
  }
  std::vector<const StoredTensor*> all;
  for (const auto& parts : layout)
    for (const StoredTensor& p : parts) all.push_back(&p);
  std::vector<std::size_t> offsets;
  const std::string prefix = safetensors_prefix(all, &offsets);
  std::vector<std::vector<std::size_t>> at(tensors.size());  // file offset of each stored part
  for (std::size_t i = 0, k = 0; i < tensors.size(); ++i)
    for (std::size_t p = 0; p < layout[i].size(); ++p, ++k) at[i].push_back(prefix.size() + offsets[k]);
  const std::uint64_t total = prefix.size() + (all.empty() ? 0 : offsets.back() + stored_bytes(*all.back()));

  fs::create_directories(dir);
  const fs::path file = dir / "model.safetensors";
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return "cannot create " + file.string() + ": " + std::strerror(errno);
  auto write_at = [fd](const void* p, std::size_t n, std::size_t off) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      const ssize_t w = ::pwrite(fd, c, n, static_cast<off_t>(off));
      if (w <= 0) return false;
      c += w, n -= static_cast<std::size_t>(w), off += static_cast<std::size_t>(w);
    }
    return true;
  };
  std::atomic<bool> failed{::ftruncate(fd, static_cast<off_t>(total)) != 0 || !write_at(prefix.data(), prefix.size(), 0)};
  // Work units: a whole tensor (a quantised one is quantised whole: NVFP4's global scale is the
  // tensor's), or a chunk of rows of an unquantised one (the embedding and the LM head are 300 M values).
  struct Unit {
    std::size_t tensor;
    int64_t row0, rows;
  };
  std::vector<Unit> units;
  constexpr int64_t kChunk = int64_t{1} << 22;  // values per chunk of an unquantised tensor
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& s = tensors[i].shape;
    const int64_t rows = s.empty() ? 1 : s[0], width = row_width(s);
    const int64_t step = layout[i].size() > 1 ? rows : std::max<int64_t>(1, kChunk / width);
    for (int64_t r = 0; r < rows; r += step) units.push_back({i, r, std::min(step, rows - r)});
  }
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    std::vector<float> w;
    std::vector<std::uint8_t> bytes;
    for (std::size_t u = next++; u < units.size() && !failed; u = next++) {
      const Unit& unit = units[u];
      const RandomTensor& t = tensors[unit.tensor];
      const int64_t width = row_width(t.shape);
      const std::size_t n = static_cast<std::size_t>(unit.rows * width);
      w.assign(n, t.init == RandomTensor::Init::ones ? 1.f : 0.f);
      if (t.init == RandomTensor::Init::normal) fill_random(w.data(), n, seed ^ (unit.tensor << 24) ^ static_cast<std::uint64_t>(unit.row0), std_dev);
      const StoredTensor& first = layout[unit.tensor][0];
      if (layout[unit.tensor].size() > 1) {  // quantised: the weight and its scales
        std::vector<StoredTensor> parts;
        quantise_projection(parts, t.name, static_cast<int>(t.shape[0]), static_cast<int>(width), w.data(), as);
        for (std::size_t p = 0; p < parts.size(); ++p)
          if (!write_at(parts[p].bytes.data(), parts[p].bytes.size(), at[unit.tensor][p])) failed = true;
        continue;
      }
      const std::size_t elem = dtype_size(first.dtype), off = at[unit.tensor][0] + static_cast<std::size_t>(unit.row0 * width) * elem;
      bytes.resize(n * elem);
      for (std::size_t k = 0; k < n; ++k) {
        if (elem == 4) {
          std::memcpy(bytes.data() + 4 * k, &w[k], 4);
        } else {
          const std::uint16_t b = kernels::bf16_from_float(w[k]);
          std::memcpy(bytes.data() + 2 * k, &b, 2);
        }
      }
      if (!write_at(bytes.data(), bytes.size(), off)) failed = true;
    }
  };
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < std::max(1u, threads); ++i) pool.emplace_back(work);
  for (auto& th : pool) th.join();
  const bool closed = ::close(fd) == 0;
  if (failed || !closed) return "writing " + file.string() + ": " + std::strerror(errno) + " (disk full?)";

  nlohmann::json c = config;
  c["quantization_config"] = quantization_config(as);
  std::ofstream out(dir / "config.json");
  out << c.dump(1) << "\n";
  if (!out) return "writing " + (dir / "config.json").string();
  if (stats) *stats = {total, quantised, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
  return {};
}

}  // namespace tandem::model::bench
