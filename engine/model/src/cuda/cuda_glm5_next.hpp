// glm5_next_text (and the text stack of glm5_next) on CUDA: the model class, shared by its loading
// (cuda_glm5_next_load.cpp) and its step (cuda_glm5_next_step.cpp). The math is the CPU
// reference's (glm5_next.cpp and its parts); the new kernels are in tandem/kernels/glm5_next.hpp.
//
// First version, correct before fast:
//   - weights: matrices in bf16, or as the checkpoint stores them where it is fp8 block-scaled or
//     NVFP4 (Glm5Weight; kv_b, the embedding and the LM head bf16 always; quant_gemv for
//     decode-sized steps on the product's fp32 or bf16 input, dequantised into bf16 past them;
//     the routed experts grouped by expert, grouped_gemm_(quant_)f32_cuda); norms, gates, the router and the
//     hyper-connections' mixers in fp32;
//   - activations fp32 (the hc_mult streams, the recurrent state); each dense product (Glm5Product)
//     runs the decode-sized gemv up to step_invariant_tokens rows, into fp32, on its fp32 input or on
//     that input rounded to bf16 (above: the plain fp32 kernel linear_f32_cuda, or cuBLASLt):
//     rounding every product's input moved the fixture's logits 2.6e-2, so the ones the fixtures'
//     bars need stay fp32 (kGlm5Fp32Default: all but the output projections kda_o, dsa_o,
//     mlp_down and shared_down; TANDEM_GLM5_FP32_PRODUCTS overrides it, for measuring); past
//     gemv's rows an fp32 product runs on the tensor cores too, as two bf16 products of its input
//     split in two bf16 parts (to_bf16_split, cuBLASLt summing the second into the first), within
//     fp32-like error (TANDEM_GLM5_FP32_KERNEL=cuda_cores: the fp32 kernel linear_f32_cuda instead);
//     the routed experts run grouped by expert (moe_sort_cuda, then grouped_gemm_f32_cuda or its
//     quantised form: each chosen expert's weight rows read once a step for all its pairs, each
//     pair's sums those of a pair alone, so batch-invariant; on quantised experts the same bits as
//     per pair), or with TANDEM_GLM5_EXPERTS=pairs per (token, expert) pair as before
//     (quant_pairs_f32_cuda / linear_f32_cuda);
//   - the DSA pool, one per DSA layer, holds fp32 rows by default (kv_cache_dtype auto / float32:
//     what the fixtures' bars need), bf16 with bfloat16, fp8_e4m3 with fp8 / fp8_e4m3 (x / scale,
//     the scale CudaOptions::kv_scale, or calculated per layer by the first step as the GLM
//     decoder does: that step runs eagerly and each DSA layer measures its rows' amax before
//     writing them at amax / kFp8KvAmaxTarget, on the device, so later layers of the same step
//     already read them at that scale; with a scale of 1 the fixtures' small latents fell into
//     e4m3's subnormals, 0.45 of the largest logit off);
//   - the recurrent state of KDA layers lives on the device, max_num_seqs slots of the CPU layout
//     (kda_state_floats per KDA layer); PagedWork::state_slot names the slot, a start of 0 resets it;
//   - speculative decoding (DFlash on the device): the residual stream a drafter reads after a
//     layer is the mean of the hc_mult streams (as on the CPU path), rounded to bf16 into the
//     capture buffer; a verification asks every row's logits (up to max_logit_rows); keep_states /
//     restore_states copy slots' recurrent states to and from a second buffer on the device;
//   - the recurrence walks each sequence's tokens one by one in one kernel per layer, unless a
//     sequence of the step brings at least kda_chunk_min_ tokens (TANDEM_KDA_CHUNK_MIN, default 16):
//     then every sequence of the step runs the chunked form (kda_chunk_cuda), kda_chunk_ tokens
//     at a time (TANDEM_KDA_CHUNK, 1..64, default 64; 0: always token by token); the indexer
//     scores every visible pool per query (quadratic ranks for its top-k);
//   - decode steps (one token per sequence, each with logits) replay a CUDA graph captured per
//     batch bucket (the next power of two) at its first use, as the GLM decoder does; padding
//     sequences own no tokens of the recurrence (no state slot is read or written) and one token
//     each whose DSA rows go to a scratch block past the pool's. At TP > 1 only over a transport
//     whose collectives can be captured (NCCL); a host-staged one stays eager.
// Tensor parallel (shard.hpp, the split the GLM-4 decoders use): a rank loads only its slice --
//   KDA    whole linear-attention heads: their rows of q/k/v, f_b, g_b, b, their conv channels,
//          a_log and dt_bias, o's matching input columns, and only their part of the recurrent
//          state (f_a, g_a and o_norm, shared by all heads, are replicated);
//   DSA    whole MLA heads: their rows of q_b and kv_b, o's matching columns; q_a, kv_a and their
//          norms are replicated, so every rank caches the whole latent row; the indexer is
//          replicated whole (its top-k reads every index head's score, and every rank must select
//          the same keys: the inputs are identical after each all-reduce);
//   FFN    MLP and shared-expert width (gate/up rows, down columns), whole routed experts (the
//          router replicated: every rank routes alike; another rank's pairs give zero rows);
//   vocab  embedding and LM-head rows.
// The hyper-connections, norms and the streams are replicated. The partial sums meet in one place,
// reduce(): the embedding rows, each sublayer's output before the streams take it, and the logits
// columns (each rank writes its own into zeroed rows, so that sum is exact).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "glm5_next_parts.hpp"
#include "glm5_next_products.hpp"
#include "tensor_names.hpp"
#include "tandem/model/cuda/cuda_decoder.hpp"  // FirstError, kBf16 (shared helpers)
#include "tandem/model/cuda/device_buffer.hpp"
#include "tandem/model/cuda/quant_weight.hpp"
#include "tandem/kernels/glm5_next.hpp"
#include "tandem/model/cuda_model.hpp"

namespace tandem::model::cuda {

using detail::Glm5Product;

struct Glm5Hc {
  DeviceBuffer fn, base, scale;  // fp32
};

// A dense product's weight: bf16 [out, in] in `dense`, or kept quantised (fp8 block-scaled or
// NVFP4, as the checkpoint stores it: quant_plan.hpp) as consecutive runs of output rows, one stack
// of same-shaped checkpoint tensors each (KDA's [q; k; v], [f_a; g_a], [b]); a part the
// checkpoint keeps in bf16 (the indexer's k-pool gate) is a bf16 run among them.
struct Glm5QuantRun {
  QuantWeight q;       // on: quantised
  DeviceBuffer dense;  // else bf16 [rows, in] (a part the checkpoint keeps unquantised)
  int first = 0, rows = 0;  // output rows [first, first + rows)
};
struct Glm5Weight {
  DeviceBuffer dense;
  std::vector<Glm5QuantRun> runs;  // empty: dense
  bool quantised() const { return !runs.empty(); }
  std::uint64_t bytes() const {  // on the device: what a product over it reads
    std::uint64_t n = dense.bytes();
    for (const Glm5QuantRun& r : runs) n += r.q.bytes() + r.dense.bytes();
    return n;
  }
};

struct Glm5Mlp {
  int width = 0;
  Glm5Weight gate_up, down;  // [2 * width, hidden], [hidden, width]
};

struct Glm5Layer {
  DeviceBuffer input_norm, post_norm;  // fp32
  Glm5Hc attn_hc, ffn_hc;
  bool linear = false;
  // KDA: w_in = [q; k; v; f_a; g_a; b] rows; f_b, g_b [qk, head_dim]; o [hidden, qk] (bf16);
  // conv, a_log, dt_bias, o_norm fp32.
  Glm5Weight w_in, f_b, g_b, o;
  DeviceBuffer conv, a_log, dt_bias, o_norm;
  long state_at = 0;
  // DSA: w_in = [q_a; kv_a; wk; kpool_gate; weights_proj] (indexer parts on an indexer layer only),
  // q_all = [q_b; wq_b], kv_b, o (bf16); norms and kpool_ape fp32.
  bool indexer = false;
  int slot = 0;
  Glm5Weight q_all;
  DeviceBuffer kv_b, q_a_norm, kv_a_norm, k_norm, k_norm_bias, kpool_ape;  // kv_b bf16 always (read per head)
  // FFN
  bool moe = false;
  Glm5Mlp dense, shared;
  DeviceBuffer router, correction_bias, experts_gate_up, experts_down;
  QuantWeight experts_gate_up_q, experts_down_q;  // stacks of 2E (gate, up per expert) and E, or empty (bf16)
};

class Glm5NextCuda final : public CudaModel {
 public:
  Glm5NextCuda(ModelConfig config, comm::Communicator& comm, const CudaOptions& opt);
  ~Glm5NextCuda() override {
    for (auto& [b, exec] : graphs_) cudaGraphExecDestroy(exec);
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status load(const Checkpoint& ck);

  KvLayout kv_layout() const override { return {n_dsa_, width_, state_floats_}; }
  Status make_device_pool(std::int32_t num_blocks, int block_size) override;
  Result<std::vector<float>> step(std::span<const PagedWork> work) override;
  Result<std::vector<std::int32_t>> step_greedy(std::span<const PagedWork> work) override;
  Result<std::vector<k::Sampled>> step_sample(std::span<const PagedWork> work, std::span<const k::SamplingParams> params,
                                              std::span<const double> uniforms) override;
  std::uint64_t weight_bytes() const override { return weight_bytes_; }
  DecodeBytes decode_bytes() const override { return decode_bytes_; }
  void set_enforce_eager(bool eager) override { opt_.enforce_eager = eager; }
  void set_op_timer(OpTimer* timer) override { timer_ = timer; }
  // The trace's rows are glm4_moe_lite's (one residual stream, an MLA latent row per layer); the
  // hyper-connection streams and KDA layers have no place in it yet.
  Result<StepTrace> step_traced(std::span<const PagedWork>) override {
    return error("step_traced is not implemented for " + config().model_type + " on CUDA yet");
  }
  std::vector<float> kv_scales() const override { return kv_scales_; }
  std::uint64_t kv_bytes_per_token() const override {
    return static_cast<std::uint64_t>(n_dsa_) * static_cast<std::uint64_t>(width_) *
           static_cast<std::uint64_t>(kernels::dtype_bytes(kv_type_));
  }
  void set_all_reduce(DeviceAllReduce* ar) override { all_reduce_ = ar; }
  Status set_capture(std::vector<int> layers) override;
  const void* captured() const override { return capture_layers_.empty() ? nullptr : captured_.get(); }
  // A tensor-parallel rank: the whole copies kept for a drafter (CudaOptions::drafter_vocab), or null.
  const void* embedding_device() const override { return sharded() ? full_embed_.get() : embed_.get(); }
  const void* lm_head_device() const override { return sharded() ? full_head_.get() : head_.get(); }
  kernels::Stream stream() const override { return stream_; }
  bool restores_states() const override { return state_floats_ > 0; }
  Status keep_states(std::span<const int> slots) override { return copy_states(slots, true); }
  Status restore_states(std::span<const int> slots) override { return copy_states(slots, false); }
  bool snapshots_states() const override { return state_floats_ > 0; }
  Status make_state_snapshots(int count) override;

  Result<std::vector<float>> recurrent_state(int slot) const override;
  std::vector<std::string> quantised_tensors() const override { return quantised_tensors_; }
  std::string weight_formats() const override { return weight_formats_; }

 protected:
  Result<std::vector<float>> hidden_states(std::span<const int32_t>, KvSequence&, HiddenCapture*) const override {
    return error("the CUDA model runs through step() on its device pool, not forward()");
  }
  const float* lm_head() const override { return nullptr; }

 private:
  Status alloc_bf16(DeviceBuffer& b, std::size_t n, const std::string& what);
  Status alloc_f32(Uploader& up, DeviceBuffer& b, const std::string& name, const std::vector<int64_t>& shape);
  // Layer l's MLP, or its shared experts when `shared`.
  Status load_mlp(Uploader& up, int l, bool shared, int full_width, Glm5Mlp& m);
  Status load_kda(Uploader& up, int l, Glm5Layer& L);
  Status load_dsa(Uploader& up, int l, Glm5Layer& L);
  Status load_experts(Uploader& up, const Checkpoint& ck, int l, Glm5Layer& L);
  Status load_layer(Uploader& up, const Checkpoint& ck, int l, Glm5Layer& L);
  // Keeps `parts` (the checkpoint tensors of one product, in output order) quantised in W when the
  // checkpoint stores them so (quant_plan.hpp; not on a tensor-parallel rank, whose slices are
  // bf16); false: the caller uploads them in bf16.
  Result<bool> load_quant(const Checkpoint& ck, const std::vector<ProjectionPart>& parts, Glm5Weight& W);
  Result<bool> load_quant_experts(const Checkpoint& ck, int l, Glm5Layer& L);
  void note_format(const std::string& what, WeightFormat f, const std::string& why_dense);
  Status finish_formats();
  Status allocate_activations();
  Status init_activations(std::size_t T, std::size_t S, std::size_t P);

  std::int32_t* in_tokens() const { return inputs_.as<std::int32_t>(); }
  std::int32_t* in_pos() const { return in_tokens() + t_cap_; }
  std::int32_t* in_seq() const { return in_pos() + t_cap_; }
  std::int32_t* in_begin() const { return in_seq() + t_cap_; }      // [s_cap + 1]
  std::int32_t* in_slot() const { return in_begin() + s_cap_ + 1; }  // [s_cap]
  std::int32_t* in_reset() const { return in_slot() + s_cap_; }      // [s_cap]
  std::int32_t* in_rows() const { return in_reset() + s_cap_; }      // [r_cap]
  std::int32_t* in_tables() const { return in_rows() + r_cap_; }     // [s_cap * max_blocks]
  std::int32_t* in_local() const { return in_tables() + static_cast<long>(s_cap_) * max_blocks_; }  // [t_cap]: ids in this rank's vocab rows

  Result<int> run(std::span<const PagedWork> work);
  // The forward of T tokens of S sequences (R logit rows) on the stream; no host synchronisation,
  // no allocation (a graph captures it).
  Status enqueue(int T, int S, int R);
  // Captures the graph of a decode step of B sequences (B tokens, every row's logits).
  Status capture(int B);
  void drop_graphs();
  Status sublayer(const Glm5Hc& hc, const DeviceBuffer& norm, int T, int which, const Glm5Layer& L, int S);
  Status kda(const Glm5Layer& L, int T, int S);
  // The KDA kernels' shape at this rank's heads (kda_heads_); its state is kda_state_floats of it.
  kernels::KdaShape kda_shape() const {
    kernels::KdaShape s = detail::kda_shape(c_);
    s.heads = lh_;
    s.state_in_registers = kda_registers_;
    return s;
  }
  Status dsa(const Glm5Layer& L, int T);
  Status ffn(const Glm5Layer& L, int T);
  Status experts(const Glm5Layer& L, int T);
  Status mlp(const Glm5Mlp& m, int T, float* out, bool shared = false);
  Status embed(int T);
  Status lm_head_rows(int R);
  // The one place partial sums meet (tensor parallel): an in-place sum over the ranks of `rows`
  // rows of `width` entries of b; nothing at one rank.
  Status reduce(void* b, int rows, int width, kernels::DType type);
  bool sharded() const { return tp_size_ > 1; }
  Status capture_layer(int layer, int T);
  Status copy_states(std::span<const int> slots, bool keep);
  Status allocate_kept_states();  // Ok or why not; once
  // Prefix caching: copies the kept states that `work` names into their slots (load, before the
  // step) or the slots into them (after it), on the model's stream.
  Status copy_snapshots(std::span<const PagedWork> work, bool load);
  // The per-op profile (tandem-bench-cuda --profile): an eager step's ops, each with the bytes it
  // must move; nothing while a graph is captured.
  void mark(const char* op, double bytes) const {
    if (timer_ && !capturing_) timer_->mark(op, bytes, stream_);
  }
  // Expected bytes of the routed experts' gate_up (or down) weights a step of T tokens reads: the
  // distinct experts of uniform routing (DecodeBytes::weights' estimate).
  double expert_read(int T, bool gate_up) const;

  // y = x W^T: fp32 x and y, bf16 W [out, in]; in fp32 (split_fp32_: hi W^T + lo W^T of x split
  // into xb_ and xlo_) or on x rounded to bf16 as product p is (fp32_). xb: x already rounded (rows
  // of ldxb), or null to round it here into xb_.
  Status lin(Glm5Product p, const float* x, long ldx, int rows, int in, const void* w, int out, float* y, long ldy,
             const void* xb = nullptr, long ldxb = 0);
  // The same over W: dense, or each quantised run into its output columns of y (decode-sized
  // steps through quant_gemv on fp32 or bf16 inputs as product p takes them; larger ones, or
  // inputs quant_gemv does not take, through the run dequantised into wscratch_ and lin()).
  Status lin(Glm5Product p, const float* x, long ldx, int rows, int in, const Glm5Weight& W, int out, float* y, long ldy,
             const void* xb = nullptr, long ldxb = 0);
  bool fp32(Glm5Product p) const { return (fp32_ >> static_cast<unsigned>(p)) & 1u; }
  kernels::DsaPool pool_of(int slot) const;

  const Glm5NextConfig& c_;
  CudaOptions opt_;
  // The checkpoint's tensor names: glm5_next's table, under "model.language_model." when the
  // checkpoint is the multimodal wrapper's (set by load).
  detail::TensorNames names_ = detail::TensorNames::glm5_next();
  int H_ = 0, V_ = 0, hc_ = 0, heads_ = 0, nope_ = 0, rope_ = 0, qk_ = 0, vd_ = 0, lora_q_ = 0, lora_kv_ = 0, width_ = 0;
  kernels::DType kv_type_ = kernels::DType::f32;  // the DSA pool's elements (kv_cache_dtype)
  float kv_scale_ = 1.f;                          // an fp8 pool's fixed scale (CudaOptions::kv_scale), or 1
  // Per DSA layer: the scales on the device (what the kernels read), their host copy (kv_scales()),
  // and the amax the calibrating step measures. calibrate_: the next step calculates the scales.
  DeviceBuffer kv_scale_dev_, kv_amax_;
  std::vector<float> kv_scales_;
  bool calibrate_ = false, measuring_ = false;
  int lh_ = 0, lhd_ = 0, lqk_ = 0, kda_in_ = 0, ih_ = 0, id_ = 0, dsa_in_ = 0, q_all_ = 0;
  int E_ = 0, K_ = 0, I_ = 0, max_len_ = 0, t_cap_ = 0, s_cap_ = 0, r_cap_ = 0, max_sel_ = 0, max_pools_ = 0;
  int n_dsa_ = 0;
  long state_floats_ = 0;  // this rank's: its KDA heads' part of each KDA layer's state
  // Tensor parallel: this rank's DSA heads (heads_ of all_heads_), KDA heads (lh_ of all_lh_),
  // vocabulary rows and routed experts.
  int tp_rank_ = 0, tp_size_ = 1, all_heads_ = 0, all_lh_ = 0;
  Range dsa_heads_, kda_heads_, vocab_, experts_;
  DeviceAllReduce* all_reduce_ = nullptr;
  float swiglu_limit_ = 0;
  unsigned fp32_ = 0;  // the products kept in fp32, a bit per Glm5Product
  std::string fp32_error_;  // a bad TANDEM_GLM5_FP32_PRODUCTS or TANDEM_KDA_CHUNK(_MIN) (load() refuses it)
  int kda_chunk_ = 64, kda_chunk_min_ = 16;  // the chunked recurrence (see the top of this file)
  bool split_fp32_ = true;  // fp32 products past gemv's rows as two bf16 products (TANDEM_GLM5_FP32_KERNEL)
  // The routed experts grouped by expert (the default since the grouped kernels' first GPU run,
  // H100, 2026-12-07: 5.2 B fp8 decode 1.17x at batch 16, prefill 1x128 1.35x) or per pair
  // (TANDEM_GLM5_EXPERTS=pairs).
  bool grouped_experts_ = true;
  bool kda_registers_ = true;  // TANDEM_KDA_REGISTERS=0: kda_recurrent_cuda's shared-memory kernel, as before
  bool kda_chunked_ = false;                 // this step's choice (run())
  cudaStream_t stream_ = nullptr;
  OpTimer* timer_ = nullptr;
  bool capturing_ = false;
  std::unique_ptr<k::GemmRunner> gemm_;  // bf16 products of more than step_invariant_tokens rows
  std::map<int, cudaGraphExec_t> graphs_;  // decode steps, by batch bucket
  std::uint64_t weight_bytes_ = 0;
  DecodeBytes decode_bytes_;
  std::vector<std::string> quantised_tensors_;
  std::map<std::string, int> format_counts_;  // products by format (weight_formats())
  std::string weight_formats_, dense_notes_;
  DeviceBuffer wscratch_;  // bf16: the largest quantised run, dequantised (steps past quant_gemv's)

  DeviceBuffer embed_, final_norm_, head_;   // this rank's vocabulary rows
  DeviceBuffer full_embed_, full_head_;       // whole, for a drafter on a tensor-parallel rank
  DeviceBuffer embed_rows_, iota_;            // tensor parallel: the summed embedding rows (bf16), 0..t_cap-1
  std::vector<Glm5Layer> layers_;

  DeviceBuffer pool_, state_, kept_state_;  // kept_state_: keep_states' copies, allocated on first use
  DeviceBuffer snapshots_;                   // make_state_snapshots' kept states for prefix caching
  int n_snapshots_ = 0;
  std::vector<int> capture_layers_;          // set_capture's layers; captured_: bf16 [t_cap_, layers * H_]
  DeviceBuffer captured_;
  std::size_t layer_rows_ = 0;  // rows of one layer's pool
  std::int32_t num_blocks_ = 0;
  int block_size_ = 0, max_blocks_ = 0;

  DeviceBuffer streams_, x_, post_, comb_, h_, y_;  // all fp32
  DeviceBuffer hc_scratch_;                        // hc_collapse_cuda's partial sums
  DeviceBuffer hb_, xb_;  // bf16: h_ rounded (every sublayer's norm writes both); a product's input rounded
  DeviceBuffer xlo_;      // bf16: what xb_ leaves of an fp32 product's input (split_fp32_)
  DeviceBuffer kproj_, graw_, gate_, kout_, kchunk_;  // kchunk_: kda_chunk_cuda's scratch
  DeviceBuffer dproj_, qr_, qall_, iw_, qlat_, olat_, attn_, scores_, chosen_, sel_, sel_n_;
  DeviceBuffer mlp_gu_, mlp_act_, shared_out_, router_logits_, expert_, weight_, pair_token_, moe_gu_, moe_act_, moe_out_;
  DeviceBuffer offsets_, sorted_token_, pair_pos_;  // the grouped experts' sort (moe_sort_cuda)
  DeviceBuffer mean_, logits_, sampled_, sample_params_, uniform_, keep_, inputs_;
  // Whether sample_params_ / uniform_ hold greedy rows throughout (as loaded): step_sample uploads a
  // step's own rows only when some row samples, and puts the greedy rows back before the next
  // greedy step (stage_sampling_rows).
  bool sample_params_greedy_ = true;
  std::size_t in_ints_ = 0;
  std::vector<std::int32_t> host_in_;
};

}  // namespace tandem::model::cuda
