// The GLM MoE decoder on CUDA, all but its attention: embedding, pre-norm residual blocks whose
// FFN is a dense MLP or routed + shared experts, the LM head, the paged device pool, step inputs,
// CUDA graphs, fp8 KV scale calibration, hidden-state capture and the traced step. Each architecture
// is a subclass that loads and runs its attention (what the CPU's Decoder is to its models):
// glm4_moe_lite's absorbed MLA (cuda_glm4_moe_lite.hpp) and glm4_moe's GQA (cuda_glm4_moe.cpp).
// The shared methods are defined in cuda_glm4_moe_lite_load.cpp (weights, buffers, the pool),
// cuda_glm4_moe_lite_step.cpp (the step and its forward) and cuda_glm4_moe_lite_trace.cpp, where
// they began. The public face is cuda_model.hpp.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tandem/model/cuda/cuda_graph.hpp"
#include "tandem/model/cuda/device_buffer.hpp"
#include "tandem/model/cuda/quant_weight.hpp"
#include "tandem/kernels/cuda_check.hpp"
#include "tandem/kernels/gemm.hpp"
#include "tandem/kernels/gemv.hpp"
#include "tandem/kernels/glue.hpp"
#include "tandem/kernels/mla_prefill.hpp"
#include "tandem/kernels/moe_decode.hpp"
#include "tandem/kernels/moe_experts.hpp"
#include "tandem/kernels/paged_attention.hpp"
#include "tandem/kernels/sampling_types.hpp"
#include "tandem/model/cuda_model.hpp"
#include "tandem/model/shard.hpp"
#include "tandem/model/step_passes.hpp"

namespace tandem::model::detail {
class TensorNames;  // tensor_names.hpp (the library's own)
}

namespace tandem::model::cuda {

namespace k = tandem::kernels;

constexpr k::DType kBf16 = k::DType::bf16;
// Steps of up to this many tokens read quantised projections through the decode kernels, 8 rows
// (4 tokens for the routed experts) a launch, each launch reading the weights again: up to here that
// is fewer bytes than dequantising the whole projection into bf16 and running cuBLASLt on it.
constexpr int kQuantDecodeTokens = 32;

// The first error of a sequence of enqueued operations.
struct FirstError {
  Status status;
  void operator()(Status s) {
    if (status.ok() && !s.ok()) status = std::move(s);
  }
  bool ok() const { return status.ok(); }
};

// What every CUDA model checks of one item of a step before staging it: its positions within
// max_len, blocks enough in its table and each inside the pool of num_blocks, its token ids inside
// the vocabulary. The error names the limit it broke.
inline Status check_work_item(const PagedWork& w, int max_len, int block_size, int num_blocks, int vocab) {
  const int end = w.start + static_cast<int>(w.tokens.size());
  if (w.start < 0 || end > max_len)
    return error("CUDA step: positions " + std::to_string(w.start) + ".." + std::to_string(end) +
                 " exceed max-model-len " + std::to_string(max_len));
  const int need = (end + block_size - 1) / block_size;
  if (need > static_cast<int>(w.block_table.size()))
    return error("CUDA step: " + std::to_string(end) + " tokens need " + std::to_string(need) +
                 " blocks, the table has " + std::to_string(w.block_table.size()));
  for (int b = 0; b < need; ++b)
    if (w.block_table[static_cast<std::size_t>(b)] < 0 || w.block_table[static_cast<std::size_t>(b)] >= num_blocks)
      return error("CUDA step: block id " + std::to_string(w.block_table[static_cast<std::size_t>(b)]) +
                   " is outside the pool");
  for (auto id : w.tokens)
    if (id < 0 || id >= vocab) return error("CUDA step: token id " + std::to_string(id) + " is outside the vocabulary");
  return Ok{};
}

// step_greedy's sampling inputs for `rows` logit rows: temperature 0 (argmax) and zero uniforms.
inline Status init_greedy_sampling(DeviceBuffer& params, DeviceBuffer& uniforms, std::size_t rows) {
  std::vector<k::SamplingParams> greedy(rows);
  for (auto& g : greedy) g.temperature = 0.f;
  if (auto e = TANDEM_CUDA_STATUS(cudaMemcpy(params.get(), greedy.data(), rows * sizeof(k::SamplingParams), cudaMemcpyHostToDevice),
                          "sampling params");
      !e)
    return e;
  return TANDEM_CUDA_STATUS(cudaMemset(uniforms.get(), 0, rows * sizeof(double)), "uniforms");
}

// step_greedy by way of step_sample: every logit row of `work` greedy; each row's token, in order.
inline Result<std::vector<std::int32_t>> greedy_tokens_by_sampling(Model& m, std::span<const PagedWork> work) {
  std::size_t rows = 0;
  for (const PagedWork& w : work) rows += static_cast<std::size_t>(logit_rows(w));
  k::SamplingParams greedy;
  greedy.temperature = 0.f;
  auto got = m.step_sample(work, std::vector<k::SamplingParams>(rows, greedy), std::vector<double>(rows, 0.0));
  if (!got) return got.error();
  std::vector<std::int32_t> ids;
  ids.reserve(got->size());
  for (const auto& s : *got) ids.push_back(s.token);
  return ids;
}

// step_sample's start, before the step runs: the items' `work` must come with a sampling row and a
// uniform per logit row; a step of greedy rows alone puts back the loaded greedy rows (all
// `capacity` of them) if a sampled step replaced them, while the stream is idle. Returns whether
// every row is greedy (then nothing needs staging).
inline Result<bool> begin_step_sample(std::span<const PagedWork> work, std::span<const k::SamplingParams> params,
                                      std::span<const double> uniforms, DeviceBuffer& d_params, DeviceBuffer& d_uniforms,
                                      std::size_t capacity, bool& buffers_greedy) {
  std::size_t want = 0;
  for (const PagedWork& w : work) want += static_cast<std::size_t>(logit_rows(w));
  if (params.size() != want || uniforms.size() != want)
    return error("CUDA step_sample: " + std::to_string(want) + " logit rows, but " + std::to_string(params.size()) +
                 " sampling parameters and " + std::to_string(uniforms.size()) + " uniforms");
  const bool greedy = std::all_of(params.begin(), params.end(), [](const k::SamplingParams& p) { return p.temperature == 0.f; });
  if (greedy && !buffers_greedy) {
    if (auto e = init_greedy_sampling(d_params, d_uniforms, capacity); !e) return e.error();
    buffers_greedy = true;
  }
  return greedy;
}

// step_sample's inputs for one forward pass's `computed` logit rows: item row to[i] sits at computed
// row from[i] (or i when `from` is empty: a graph step's padding picked out), every other row is
// greedy. Uploaded on `stream` from host rows that `keep` holds until the step synchronises.
struct SamplingRows {
  std::vector<k::SamplingParams> params;
  std::vector<double> uniforms;
};
inline Status stage_sampling_rows(std::span<const k::SamplingParams> params, std::span<const double> uniforms, std::span<const int> from,
                                  std::span<const int> to, int computed, DeviceBuffer& d_params, DeviceBuffer& d_uniforms,
                                  cudaStream_t stream, std::deque<SamplingRows>& keep) {
  SamplingRows& rows = keep.emplace_back();
  k::SamplingParams greedy;
  greedy.temperature = 0.f;
  rows.params.assign(static_cast<std::size_t>(computed), greedy);
  rows.uniforms.assign(static_cast<std::size_t>(computed), 0.0);
  for (std::size_t i = 0; i < to.size(); ++i) {
    const std::size_t c = from.empty() ? i : static_cast<std::size_t>(from[i]);
    const std::size_t item = static_cast<std::size_t>(to[i]);
    if (c >= rows.params.size() || item >= params.size() || item >= uniforms.size()) return error("step_sample: a logit row out of range");
    rows.params[c] = params[item], rows.uniforms[c] = uniforms[item];
  }
  if (auto e = TANDEM_CUDA_STATUS(cudaMemcpyAsync(d_params.get(), rows.params.data(), rows.params.size() * sizeof(k::SamplingParams),
                                                  cudaMemcpyHostToDevice, stream),
                                  "sampling params");
      !e)
    return e;
  return TANDEM_CUDA_STATUS(
      cudaMemcpyAsync(d_uniforms.get(), rows.uniforms.data(), rows.uniforms.size() * sizeof(double), cudaMemcpyHostToDevice, stream),
      "uniforms");
}

// Each projection is either a bf16 buffer or, when the checkpoint stores it quantised (fp8 block-
// scaled, NVFP4: quant_plan.hpp), a QuantWeight (the bf16 buffer then stays empty).
struct Mlp {
  int width = 0;
  DeviceBuffer gate_up, down;  // [2 * width, hidden] (gate rows, then up rows), [hidden, width]
  QuantWeight gate_up_q, down_q;
};

// One layer's weights. w_in is the attention's fused input projection (its bias b_in), o its o_proj
// (o_bias, fp32, where it has one); q_a_norm .. kb_t are MLA's, q_norm / k_norm GQA's.
struct Layer {
  DeviceBuffer w_in, b_in, q_a_norm, q_b, kv_a_norm, kv_b, o, o_bias;  // o_bias in fp32
  DeviceBuffer kb_t;  // kv_b's key part transposed, [heads, kv_lora, nope] (decode's absorbed query)
  DeviceBuffer q_norm, k_norm;  // GQA's per-head RMSNorm of queries and keys (use_qk_norm)
  DeviceBuffer input_norm, post_norm;
  bool moe = false;
  Mlp dense;                                  // !moe
  DeviceBuffer router, correction_bias;       // fp32 [E, hidden], [E]
  DeviceBuffer experts_gate_up, experts_down; // [E, 2I, hidden], [E, hidden, I]
  QuantWeight experts_gate_up_q, experts_down_q;  // stacks of 2E and E
  Mlp shared;
  QuantWeight w_in_q, q_b_q, o_q;  // MLA's kv_b is always bf16 (the absorbed attention reads it per head)
};

inline int next_pow2(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

class GlmDecoderCuda : public CudaModel {
 public:
  // The subclass's constructor sets the attention's sizes (rope_ .. in_rows_ below).
  GlmDecoderCuda(ModelConfig config, comm::Communicator& comm, const CudaOptions& opt)
      : CudaModel(std::move(config), comm), d_(this->config().decoder()), opt_(opt) {
    const DecoderConfig& d = d_;
    H_ = d.hidden_size, V_ = d.vocab_size, heads_ = d.num_attention_heads;
    E_ = d.moe.n_routed_experts, K_ = d.moe.num_experts_per_tok, I_ = d.moe.moe_intermediate_size;
    // This rank's slices (shard.hpp, as the CPU path splits): heads, vocabulary rows, whole experts.
    // One rank with reduction groups computes every rank's slice of a group that size (reduce()).
    ranks_ = comm.size();
    tp_rank_ = comm.rank(), tp_size_ = comm.size();
    if (ranks_ == 1 && opt.reduction_groups > 1) tp_size_ = slices_ = opt.reduction_groups;
    all_heads_ = heads_;
    heads_ = split(all_heads_, tp_rank_, tp_size_).size();
    vocab_ = split(V_, tp_rank_, tp_size_);
    experts_ = split(E_, tp_rank_, tp_size_);
    max_len_ = opt.max_model_len > 0 ? opt.max_model_len : d.max_position_embeddings;
    kv_type_ = (opt.kv_cache_dtype == "fp8" || opt.kv_cache_dtype == "fp8_e4m3") ? k::DType::fp8_e4m3 : kBf16;
    t_cap_ = std::max(opt.max_num_batched_tokens, opt.max_num_seqs);
    s_cap_ = opt.max_num_seqs;
    const bool fixed = kv_type_ != k::DType::fp8_e4m3 || opt.kv_scale > 0.f;
    kv_scales_.assign(static_cast<std::size_t>(d.num_hidden_layers), kv_type_ == k::DType::fp8_e4m3 && fixed ? opt.kv_scale : 1.f);
    calibrate_ = !fixed;
    r_cap_ = std::max(opt.max_logit_rows, s_cap_);
  }
  ~GlmDecoderCuda() override {
    for (auto& [b, exec] : graphs_) cudaGraphExecDestroy(exec);
    if (stream_) cudaStreamDestroy(stream_);
    if (host_in_) cudaFreeHost(host_in_);
    if (host_logits_) cudaFreeHost(host_logits_);
    if (staged_) cudaEventDestroy(staged_);
  }

  Status load(const Checkpoint& ck);
  // TANDEM_INVARIANT_TOKENS / TANDEM_GROUP_PREFILL over the options, TANDEM_MOE_GROUPED,
  // TANDEM_QUANT_PREFILL, TANDEM_PREFILL_ATTN, TANDEM_ATTN_SPLIT(S) (cuda_glm4_moe_lite_load.cpp).
  Status apply_env_overrides();

  // (With reduction groups each slice keeps its own rows, as its rank would: the row is N times wider.)
  KvLayout kv_layout() const override { return {d_.num_hidden_layers, width_ * slices_}; }

  Status make_device_pool(std::int32_t num_blocks, int block_size) override;

  Result<std::vector<float>> step(std::span<const PagedWork> work) override;

  Result<std::vector<std::int32_t>> step_greedy(std::span<const PagedWork> work) override;
  Result<std::vector<k::Sampled>> step_sample(std::span<const PagedWork> work, std::span<const k::SamplingParams> params,
                                              std::span<const double> uniforms) override;

  Result<StepTrace> step_traced(std::span<const PagedWork> work) override;

  std::uint64_t weight_bytes() const override { return weight_bytes_; }
  std::string weight_formats() const override { return weight_formats_; }
  std::vector<std::string> quantised_tensors() const override { return quantised_tensors_; }
  DecodeBytes decode_bytes() const override { return decode_bytes_; }
  void set_enforce_eager(bool eager) override { opt_.enforce_eager = eager; }
  std::vector<float> kv_scales() const override { return kv_scales_; }  // (slice 0's with reduction groups)
  std::uint64_t kv_bytes_per_token() const override {  // (one pool per slice with reduction groups)
    return static_cast<std::uint64_t>(slices_) * static_cast<std::uint64_t>(d_.num_hidden_layers) * static_cast<std::uint64_t>(width_) *
           static_cast<std::uint64_t>(k::dtype_bytes(kv_type_));
  }
  void set_all_reduce(DeviceAllReduce* ar) override { all_reduce_ = ar; }
  void set_op_timer(OpTimer* timer) override { timer_ = timer; }

  Status set_capture(std::vector<int> layers) override;
  const void* captured() const override { return capture_layers_.empty() ? nullptr : captured_.get(); }
  const void* embedding_device() const override { return multi_rank() ? full_embed_.get() : embed_.get(); }
  const void* lm_head_device() const override {
    if (multi_rank()) return full_head_.empty() ? full_embed_.get() : full_head_.get();
    return head_.empty() ? embed_.get() : head_.get();
  }
  k::Stream stream() const override { return stream_; }

 protected:
  Result<std::vector<float>> hidden_states(std::span<const int32_t>, KvSequence&, HiddenCapture*) const override {
    return error("the CUDA model runs through step() on its device pool, not forward()");
  }
  const float* lm_head() const override { return nullptr; }

  // --- what each attention provides ------------------------------------------------------------
  // The architecture's checkpoint tensor names (one table per architecture, shared with the CPU
  // loaders).
  virtual const detail::TensorNames& names() const = 0;
  // The paged-attention layout of `layer`'s part of the pool (its scale among them).
  virtual k::PagedKvLayout attn_layout(int layer = 0) const = 0;
  // Why the attention's shape cannot run on the device (Ok when it can).
  virtual Status attention_shape_error() const = 0;
  // Layer l's attention weights (w_in .. and what the subclass adds) onto the device; bytes counted
  // through alloc_bf16.
  virtual Status load_attention(Uploader& up, int l, Layer& a) = 0;
  // After every weight is on the device (derived weights; the stream is idle); once per slice.
  virtual Status finish_load() { return {}; }
  // use_slice() made another slice current (tp_rank_ names it): the subclass's own slice ranges.
  virtual void slice_changed() {}
  // The attention's own activation buffers for t_cap_ tokens (fused_, q_ and attn_ are the base's).
  virtual Status allocate_attention() { return {}; }
  // attention(h_) of layer l for the step's T tokens into the fp32 delta_, the new cache rows into
  // the pool; (while measuring_, their amax into kv_amax_[l]; the trace's latent point: the rows).
  virtual Status attention(int l, const Layer& a, int T, int max_context) = 0;

  // The paged-attention layout's common part: the pool's type, block size and layer l's scale.
  k::PagedKvLayout pool_layout(int layer) const {
    k::PagedKvLayout l;
    l.dtype = kv_type_;
    l.block_size = block_size_ > 0 ? block_size_ : 16;
    l.k_scale = l.v_scale = kv_scales_[static_cast<std::size_t>(layer)];
    return l;
  }

  Status alloc_bf16(DeviceBuffer& b, std::size_t n, const std::string& what);

  // Layer l's MLP (its shared experts when `shared`): gate and up (width rows each) into one
  // [2 * width, hidden] buffer (or a stack of 2, quantised, when the checkpoint stores them so and
  // `quantised` allows it), and down.
  Status load_mlp(Uploader& up, int l, bool shared, int width, Mlp& m, bool quantised = true);

  // The plan of a projection of `parts`: uploaded into q when kept quantised (true), else nothing
  // is uploaded (false) and the caller uploads it in bf16. Counts its bytes and notes the decision.
  Result<bool> load_quant(const Checkpoint& ck, const std::vector<ProjectionPart>& parts, QuantWeight& q, bool allowed = true);
  void note_format(const std::string& what, WeightFormat f, const std::string& why_dense);
  // A MoE layer's routed experts kept quantised (with its shared experts: moe_decode_quant reads
  // both in one format); false when the layer is loaded in bf16.
  Result<bool> load_quant_experts(const Checkpoint& ck, int l, Layer& a);

  Status load_weights(const Checkpoint& ck);
  // The current slice's layers (fixed: the bytes every step reads, added to).
  Status load_layers(Uploader& up, std::uint64_t& fixed);

  Status allocate_activations();

  // --- one step ------------------------------------------------------------------------------

  std::int32_t* in_tokens() const { return inputs_.as<std::int32_t>(); }
  std::int32_t* in_pos() const { return in_tokens() + t_cap_; }
  std::int32_t* in_seq() const { return in_pos() + t_cap_; }
  std::int32_t* in_rows() const { return in_seq() + t_cap_; }
  // Token ids less this rank's first vocabulary row (tensor parallel: ids outside its rows embed
  // to zeros, and the ranks' rows are summed).
  std::int32_t* in_local_tokens() const { return in_rows() + r_cap_; }
  std::int32_t* in_tables() const { return in_local_tokens() + t_cap_; }

  // After each forward pass of a step: `to` names the step's logit row of each of the pass's rows
  // (which are the first ones of logits_, or those pick_ names). Enqueues the copies of the pass's
  // results (the stream is in order: the next pass overwrites logits_ after them).
  using Deliver = std::function<Status(std::span<const int> to)>;
  // Checks the items, splits them into forward passes by phase (step_passes.hpp: the decode-class
  // sequences on the batch-invariant kernels, each prefill-class one on the fast kernels), and runs
  // each (run_pass), delivering its logit rows; the captured rows end in the items' token order.
  // Returns how many logit rows the items asked for.
  Result<int> run(std::span<const PagedWork> work, const Deliver& deliver);
  // One pass: stages the inputs, enqueues the forward (replaying a graph for decode and
  // verification steps); its logit rows are the first ones of logits_ in the items' order, or
  // those pick_ names (a graph step of mixed block lengths, padded).
  Status run_pass(std::span<const PagedWork> work, bool invariant);
  // A pass's rows of a buffer of per-row results (rows of row_bytes) to the host rows `to`,
  // through pick_; stream-ordered (the caller synchronises).
  Status item_rows_to_host(void* dst, const void* src, std::size_t row_bytes, std::span<const int> to, const char* what);
  // The longest chunk a decode-class sequence has: CudaOptions::invariant_tokens, at least the
  // longest block a verification asks every row's logits of (max_logit_rows per sequence: 1 + k).
  int invariant_chunk() const { return std::max(opt_.invariant_tokens, r_cap_ / std::max(s_cap_, 1)); }

  // Captures the graph of a step of B sequences with `per` tokens each (1: decode; n: verifying
  // blocks of n), every token's logits.
  Status capture(int B, int per);

  // fp8 KV with calculated scales: the first step runs once to measure each layer's latent amax
  // (its rows written at scale 1), the scales are set from it, and the step then runs for real.
  Status calibrate(int T, int R, int max_context);

  // Waits for the stream: at TP > 1 through the all-reduce's wait (a lost peer fails the step
  // instead of hanging it, graph replays included).
  Status sync();
  // Sums `rows` rows of `width` entries of b (fp32, or bf16) over the ranks; nothing at one rank.
  Status all_reduce(DeviceBuffer& b, int rows, int width = 0, k::DType type = k::DType::f32);
  // Whether layers compute slices (heads, widths, experts of tp_rank_ of tp_size_): at TP > 1, and
  // at one rank with reduction groups.
  bool sharded() const { return tp_size_ > 1; }
  // Whether this process is one rank of several (its embedding and LM head are vocabulary slices).
  bool multi_rank() const { return ranks_ > 1; }

  // --- reduction groups (CudaOptions::reduction_groups) ---------------------------------------
  // A TP-N rank computes its slice of a layer's attention or FFN into delta_ (a partial sum) and the
  // all-reduce adds the ranks' partials. One rank with N groups holds every rank's slice (its own
  // weights, pool, LM-head rows: what that rank would load) and runs each through the same code, so
  // each partial is bit for bit the rank's, then adds them in rank order: for N = 2 that is the
  // all-reduce's one IEEE addition per entry, whichever transport. The replicated parts (norms, the
  // residual stream, the router, MLA's latent) are the ranks' own computation once.
  // part(layer) of every slice into delta_, summed: the ranks' all-reduce, or the slices' sum.
  template <class Part>
  Status reduce(int l, int T, Part part) {
    if (slices_ == 1) {
      if (auto e = part(layers_[static_cast<std::size_t>(l)]); !e) return e;
      return all_reduce(delta_, T);
    }
    FirstError err;
    for (int s = 0; s < slices_ && err.ok(); ++s) {
      use_slice(s);
      if (s > 0) std::swap(delta_, slice_delta_[static_cast<std::size_t>(s - 1)]);
      err(part(layers_[static_cast<std::size_t>(l)]));
      if (s > 0) std::swap(delta_, slice_delta_[static_cast<std::size_t>(s - 1)]);
    }
    use_slice(0);
    const std::size_t n = static_cast<std::size_t>(T) * static_cast<std::size_t>(H_);
    for (int s = 1; s < slices_ && err.ok(); ++s) err(k::add_f32(delta_.as<float>(), slice_delta_[static_cast<std::size_t>(s - 1)].as<float>(), n, stream_));
    return err.status;
  }
  // Makes slice s current: its layers_, head slice, pool_, vocab_ and experts_ (the others parked).
  void use_slice(int s);
  // fn() with each slice current in turn (loading, sizing), slice 0 current again after.
  template <class Fn>
  Status for_each_slice(Fn fn) {
    FirstError err;
    for (int s = 0; s < slices_ && err.ok(); ++s) use_slice(s), err(fn());
    use_slice(0);
    return err.status;
  }
  struct Parked {
    std::vector<Layer> layers;
    DeviceBuffer head, pool, kv_amax;
    std::vector<float> kv_scales;  // (a rank measures fp8 scales over its own cache rows)
  };
  int ranks_ = 1, slices_ = 1, slice_ = 0;  // slices_ > 1: reduction groups at one rank; slice_: current
  std::vector<Parked> parked_;               // per slice (the current one's moved into the members)
  std::vector<DeviceBuffer> slice_delta_;    // slices 1..: their partial of delta_
  DeviceBuffer slice_head_;                  // the current slice's LM-head rows (reduction groups)
  // The part of `width` this rank holds (MLP widths), checked against the kernels' alignment.
  Result<Range> width_slice(int width, const std::string& what) const;

  // A plain (unbatched, nn.Linear) product: gemv (or the older few-rows kernel) at decode sizes,
  // else cuBLASLt.
  Status gemm(const k::GemmArgs& g);

  // The same product over a weight that may be kept quantised (q.on()): up to kQuantDecodeTokens
  // rows dequantise in registers (quant_gemv.hpp); more dequantise into wscratch_ and take gemm().
  // g.w is ignored when q is on.
  Status qgemm(k::GemmArgs g, const QuantWeight& q);
  // quant_gemv_cuda over T rows, kGemvMaxRows at a time (v.rows: the first launch's).
  Status quant_gemv(k::QuantGemvArgs v, int T);
  // A prefill-sized grouped expert GEMM (moe_experts.hpp) over the bf16 stack w or, when q is on,
  // the quantised one: read as stored (the tiles decoded in shared memory), or with
  // TANDEM_QUANT_PREFILL=dequant dequantised whole into wscratch_ first, as before.
  // With silu (only where experts_fuse_silu(q)): w is gate_up (2 n rows) and y gets silu(gate) * up,
  // n outputs (grouped_gemm_silu_cuda). T: the step's tokens (the wgmma tile's choice).
  Status expert_gemm(const void* x, long ldx, const std::int32_t* gather, const DeviceBuffer& w, const QuantWeight& q, int n, int k,
                     void* y, long ldy, int T, bool silu = false);
  // Whether the experts' gate_up product and its SiLU-and-mul run as one launch: the wgmma form on
  // bf16 (or dequantised) experts, unless TANDEM_FUSED_SILU=0.
  bool experts_fuse_silu(const QuantWeight& q) const;
  // The wgmma form's tile for a step of T tokens (TANDEM_GROUPED_WGMMA_TILE / _STAGES, else by the
  // pairs an expert averages).
  k::WgmmaTile wgmma_tile(int T) const;
  // Whether expert_gemm reads the quantised stack q as stored (else it dequantises it into wscratch_,
  // which load() sizes accordingly): one stack (the experts' parts share a shape) and no
  // TANDEM_QUANT_PREFILL=dequant.
  bool experts_read_quantised(const QuantWeight& q) const { return !quant_prefill_dequant_ && q.b.m.count == 0; }

  // Whether the pass running now takes the decode-sized kernels, which are batch-invariant (a
  // token's result does not depend on the step's other tokens): the decode-class pass (run()).
  // (Not while measuring the fp8 scales: that reads the unfused glue's intermediate rows. A traced
  // step takes them, as the step it retraces did: a trace that took other kernels could route a
  // routing near-tie the other way than the step it is meant to explain.)
  bool few() const { return opt_.decode_kernels && invariant_pass_ && !measuring_; }
  // Tokens the decode-sized kernels' buffers hold (moe_decode's activations): a decode-class pass
  // has at most max_num_seqs chunks of invariant_chunk() tokens.
  int few_cap() const {
    const long most = static_cast<long>(s_cap_) * invariant_chunk();
    return std::max(k::kMoeDecodeTokens, static_cast<int>(std::min<long>(t_cap_, most)));
  }
  // The same for quantised projections (kQuantDecodeTokens).
  bool few_quant(int T) const { return opt_.decode_kernels && T <= kQuantDecodeTokens && !measuring_; }

  // The weight bytes an op over q reads: q's own when it is kept quantised, else bf16's.
  static double weight_read(const QuantWeight& q, double bf16_bytes) { return q.on() ? static_cast<double>(q.bytes()) : bf16_bytes; }

  // The sequences of an eager step, in the staged order (sequence s's block table is row s of
  // in_tables()): its first token among the step's, its tokens, and the position of the first.
  // run_pass sets it (empty for a graph step); the un-absorbed prefill reads it.
  struct StepSequence {
    int first = 0, tokens = 0, start = 0;
  };
  std::vector<StepSequence> step_sequences_;

  // The op timer's mark after an op (not while capturing a graph).
  void mark(const char* op, double bytes) const {
    if (timer_ && !capturing_) timer_->mark(op, bytes, stream_);
  }

  k::GemmArgs linear(const void* x, const DeviceBuffer& w, void* y, int rows, int in, int out) const {
    k::GemmArgs g;
    g.rows = rows, g.in = in, g.out = out;
    g.x = x, g.ldx = in, g.w = w.get(), g.ldw = in, g.y = y, g.ldy = out;
    return g;
  }

  // The whole forward of T tokens (R logit rows) on the stream; no host synchronisation.
  Status enqueue(int T, int R, int max_context);

  Status mlp(const Mlp& m, int T, void* out);

  // The residual stream x_ now holds the output of `layer`: copy it into its capture columns.
  Status capture_layer(int layer, int T);

  // moe(a, T, true) also does the post-attention residual add and norm (folded into the router's
  // launch); only when moe_decodes(a, T), the decode-sized path.
  Status moe(const Layer& a, int T, bool fold_norm = false);
  static constexpr int kRouterGemmRows = 128;
  Status router_logits(const Layer& a, int T);
  Status moe_decode_experts(const Layer& a, int T, const kernels::MoeDecodeArgs& dec, double chosen);
  k::MoeDecodeArgs moe_decode_args(const Layer& a, int T);
  // (The decode kernels index the layer's whole expert stack: a rank holding a slice of the experts
  // takes the grouped path, which leaves other ranks' experts out.)
  bool moe_decodes(const Layer& a, int T) {
    return few() && !sharded() && (a.experts_gate_up_q.on() ? moe_decodes_quant(a, T) : k::moe_decode_fits(moe_decode_args(a, T)));
  }
  // Quantised experts take the decode kernels up to kQuantDecodeTokens tokens, kMoeDecodeTokens a
  // launch (each reads its tokens' experts), rather than the grouped path, which dequantises every
  // expert of the layer.
  k::MoeDecodeQuant moe_decode_quant_args(const Layer& a) const {
    return {a.experts_gate_up_q.a.m, a.experts_down_q.a.m, a.shared.gate_up_q.a.m, a.shared.down_q.a.m, quant_decode_mma_};
  }
  bool moe_decodes_quant(const Layer& a, int T) {
    return a.experts_gate_up_q.on() && few_quant(T) && !sharded() && k::moe_decode_quant_fits(moe_decode_args(a, T), moe_decode_quant_args(a));
  }

  // step_traced's copies (cuda_glm4_moe_lite_trace.cpp): nothing unless a traced step runs.
  enum class TracePoint { latent, after_attention, after_ffn, routing };
  Status trace(TracePoint what, int layer, int T);
  std::vector<float> kv_scales_;  // per layer
  bool calibrate_ = false, measuring_ = false;
  DeviceBuffer kv_amax_;  // per layer, fp32, while measuring

  StepTrace* trace_ = nullptr;
  int trace_layer_ = 0;  // the layer whose FFN runs now (routing is traced inside moe())

  const DecoderConfig& d_;
  CudaOptions opt_;
  int H_ = 0, V_ = 0, heads_ = 0;  // heads_: this rank's attention heads (all_heads_ in the model)
  int tp_rank_ = 0, tp_size_ = 1, all_heads_ = 0;
  Range vocab_, experts_;  // this rank's vocabulary rows (embedding, LM head) and routed experts
  // Set by the subclass: rotary entries per head (inv_freq_'s), query and value width per head,
  // the cache row (width_ entries per token and layer), the fused input projection's rows (in_rows_,
  // whose first q_rows_ are the query's part and the next width_ the cache row's source).
  int rope_ = 0, qk_ = 0, vd_ = 0, width_ = 0, q_rows_ = 0, in_rows_ = 0;
  int E_ = 0, K_ = 0, I_ = 0, max_len_ = 0, t_cap_ = 0, s_cap_ = 0, r_cap_ = 0;
  k::DType kv_type_ = kBf16;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<k::GemmRunner> gemm_;
  DeviceAllReduce* all_reduce_ = nullptr;
  OpTimer* timer_ = nullptr;
  bool capturing_ = false;
  std::uint64_t weight_bytes_ = 0;
  DecodeBytes decode_bytes_;
  std::map<std::string, int> format_counts_;  // "fp8 (128x128 blocks)" -> projections, for weight_formats_
  std::string weight_formats_, dense_notes_;
  std::vector<std::string> quantised_tensors_;
  DeviceBuffer wscratch_;  // bf16, the largest quantised projection dequantised (steps of more tokens)
  // TANDEM_QUANT_PREFILL=dequant (apply_env_overrides): quantised experts of prefill-sized steps
  // dequantised into wscratch_ (sized for them then) before a bf16 grouped GEMM, the A/B reference
  // of the grouped GEMM that reads them quantised.
  bool quant_prefill_dequant_ = false;
  // TANDEM_PREFILL_ATTN (apply_env_overrides): how prefill chunks of more than kMlaDecodeMaxTokens
  // tokens attend: the un-absorbed (multi-head) form where the step fits it (mla_prefill.hpp; else
  // the flash kernel: the default), the flash prefill kernel, the MLA decode kernel in launches of
  // kMlaDecodeMaxTokens tokens, or the generic paged kernel (the A/B references).
  enum PrefillAttn : int { kPrefillFlash = 0, kPrefillMla = 1, kPrefillGeneric = 2, kPrefillMha = 3 };
  // Un-absorbed (falling back to flash where it does not serve a step) by default since its first
  // GPU run (H100, 2026-12-07, engine/bench/results/h100-s11-mha-2026-12-07.md: gpu_check and
  // cuda_model_check pass through it; 2 B model prefill 1x4096 1.66x and 1x32768 2.32x flash).
  int prefill_attn_ = kPrefillMha;
  // TANDEM_MHA_PASS_ROWS=N (apply_env_overrides): at most N context rows a pass of the un-absorbed
  // prefill, rounded down to a multiple of 64 (0: what its buffers hold; under 64: the flash
  // kernel takes the steps): a check's way to cut short contexts into spans.
  int mha_pass_rows_ = 0;
  // TANDEM_MHA_TILE_ROWS=auto|64|128 (apply_env_overrides): the un-absorbed prefill kernel's
  // queries a block (0: auto, its own choice; the same bits either way).
  int mha_tile_rows_ = 0;
  // TANDEM_MHA_KERNEL=auto|mma|wgmma|wgmma-tma (apply_env_overrides): the un-absorbed prefill's kernel.
  kernels::MlaMhaKernel mha_kernel_ = kernels::MlaMhaKernel::automatic;

  DeviceBuffer embed_, final_norm_, head_, inv_freq_;
  DeviceBuffer full_embed_, full_head_;  // CudaOptions::drafter_vocab: whole copies for a drafter
  std::vector<Layer> layers_;

  DeviceBuffer pool_;
  std::size_t layer_bytes_ = 0;
  std::int32_t num_blocks_ = 0;
  int block_size_ = 0, max_blocks_ = 0;

  DeviceBuffer x_, delta_, embed_rows_, h_, h32_, fused_, q_, attn_, mlp_gu_, mlp_act_, shared_out_;
  DeviceBuffer router_logits_, expert_, weight_, offsets_, sorted_, pair_pos_, moe_gu_, moe_act_, moe_out_;
  DeviceBuffer head_in_, logits_, sampled_, sample_params_, uniform_, keep_, attn_ws_, inputs_;
  // Whether sample_params_ / uniform_ hold greedy rows throughout (as loaded): step_sample uploads a
  // step's own rows only when some row samples, and puts the greedy rows back before the next
  // greedy step (stage_sampling_rows).
  bool sample_params_greedy_ = true;
  DeviceBuffer argmax_keys_, moe_decode_act_;
  // moe_decode's grouped form: its token lists (few_cap() tokens). Empty when TANDEM_MOE_GROUPED=0
  // (an A/B switch: per pair then, the same bits, only slower).
  DeviceBuffer moe_groups_;
  bool moe_grouped_ = true;  // TANDEM_MOE_GROUPED (apply_env_overrides)
  bool grouped_mma_ = true;  // TANDEM_GROUPED_MMA: prefill experts on the tensor cores (apply_env_overrides)
  // TANDEM_GROUPED_WGMMA (apply_env_overrides): bf16 prefill experts on the wgmma form where the
  // GPU has it (grouped_wgmma_ready; 1.15-1.2x the mma.sync form's step on an H100,
  // engine/bench/results/h100-s12-experts-2026-12-07.md); 0: the mma.sync form.
  bool grouped_wgmma_ = true;
  // TANDEM_GROUPED_WGMMA_TILE=auto|64|128 and TANDEM_GROUPED_WGMMA_STAGES=auto|3|4 (0: auto, the
  // choice of wgmma_tile), TANDEM_FUSED_SILU=0|1 (experts_fuse_silu).
  int wgmma_tile_pairs_ = 0, wgmma_stages_ = 0;
  bool fused_silu_ = true;
  // TANDEM_ATTN_SPLIT (apply_env_overrides): MLA decode attention split by each token's own
  // context (PagedKvLayout::context_splits); 0: the split of max-model-len's (split_keys) as before.
  bool attn_split_ = true;
  // TANDEM_QUANT_DECODE_MMA (apply_env_overrides): quantised decode experts on the tensor cores
  // (moe_decode_quant_mma.cu; fp32-rounding-level apart from the CUDA-core kernels), the default
  // since their first GPU run (H100, 2026-12-07): 47-layer fp8 decode 1.29x at batch 6 and 1.67x at
  // 16, 0.97x at batch 1. At every batch, not only past 1: the same bits a token alone or grouped,
  // which a verification needs (its rows must equal plain decode's). =0: the CUDA cores.
  bool quant_decode_mma_ = true;
  int attn_splits_ = 132;  // TANDEM_ATTN_SPLITS: context_splits' target (the splits of a long context)
  std::size_t in_ints_ = 0;
  std::int32_t* host_in_ = nullptr;
  // Pinned staging for step()'s logits (grown to the largest step's rows, up to kHostLogitsBytes):
  // a verification returns every row (48 x V floats at batch 6), and a copy into pageable memory
  // goes through the driver's bounce buffer at a fraction of the link's speed.
  static constexpr std::size_t kHostLogitsBytes = std::size_t{64} << 20;
  float* host_logits_ = nullptr;
  std::size_t host_logits_floats_ = 0;
  // host_logits_ holding at least n floats (false: over the cap or no pinned memory; use pageable).
  bool host_logits_for(std::size_t n);
  std::map<std::pair<int, int>, cudaGraphExec_t> graphs_;  // by (batch bucket, tokens per sequence)
  std::vector<int> pick_;  // the last pass's item rows among its graph's rows; empty: the first R
  bool invariant_pass_ = false;  // the pass running now is decode-class (few())
  cudaEvent_t staged_ = nullptr;  // after a pass's input copy: the next pass restages host_in_ after it
  std::vector<int> capture_layers_;  // set_capture's layers; captured_: bf16 [t_cap_, layers * H_]
  DeviceBuffer captured_, capture_tmp_;
};

}  // namespace tandem::model::cuda
