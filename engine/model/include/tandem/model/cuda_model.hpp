// The GLM decoders on CUDA (built when the CUDA back end is; tandem_model_cuda). Weights live on the
// device in bf16 (glm4_moe_lite and glm4_moe: MLP and expert projections a checkpoint stores in fp8
// with 128x128 block scales or ModelOpt NVFP4 stay so, and glm4_moe_lite's attention projections
// too: quant_plan.hpp, kernels/quant_gemv.hpp); dense projections run through cuBLASLt (fp32
// accumulation), the routed experts as one grouped GEMM per projection (decode-class sequences:
// the decode-sized kernels, gemv.hpp and moe_decode.hpp, instead: CudaOptions::invariant_tokens),
// attention through the paged-attention kernel over a device pool of bf16 or fp8_e4m3 rows (one
// scale per layer: fp8_kv_scale_from_amax below). Activations are bf16 where a GEMM reads them; the residual stream, the layers' outputs added to it and the MoE
// router's input are fp32. glm4_moe_lite's MLA runs absorbed: the pool caches the normalised latent
// and the rotated shared key (kv_lora + rope entries per token and layer), the query is projected
// into the latent space, and the values come out of the latent per head. glm4_moe's grouped-query
// attention caches its keys and values (a K pool and a V pool per layer, kv_heads x head_dim rows).
//
// Steps are batched: the engine's step in one forward pass per phase (decode-class sequences
// together, each prompt chunk apart: CudaOptions::invariant_tokens). Decode steps (one token
// per sequence) replay a CUDA graph captured per batch-size bucket unless enforce_eager is set.
//
// Tensor parallelism (glm4_moe_lite, glm4_moe, glm5_next): a rank loads only its
// slice (shard.hpp: heads, MLP widths, whole routed experts, vocabulary rows) and sums its partials
// (embedding rows, attention and FFN outputs, its logits columns) through the DeviceAllReduce the
// caller sets once the group is joined (CommAllReduce: NCCL, or host-staged for ranks on one GPU).
#pragma once
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tandem/kernels/dtype.hpp"
#include "tandem/model/model.hpp"

namespace tandem::model {

// The seam for TP > 1 on the GPU: an in-place sum of a device buffer over the ranks, enqueued on
// the model's stream (NCCL's ncclAllReduce fits it as it is).
class DeviceAllReduce {
 public:
  virtual ~DeviceAllReduce() = default;
  virtual Status all_reduce_sum(void* data, std::size_t count, kernels::DType type, kernels::Stream stream) = 0;
  // Whether all_reduce_sum may be captured in a CUDA graph (NCCL; not the host-staged transport,
  // which synchronises the stream).
  virtual bool capturable() const = 0;
  // Waits for the stream's work, collectives included, failing (not hanging) on a lost peer.
  virtual Status wait(kernels::Stream stream) = 0;
};

struct CudaOptions {
  std::string kv_cache_dtype = "auto";  // "fp8" / "fp8_e4m3": fp8 rows; anything else: bf16
  float kv_scale = 0.0f;                // fp8 stores x / kv_scale; 0: one scale per layer calculated from
                                        // the first step's latent rows, fixed afterwards (fp8_kv_scale_from_amax)
  int max_num_seqs = 256;               // sequences per step (sizes buffers and graph buckets)
  int max_num_batched_tokens = 2048;    // tokens per step
  int max_model_len = 0;                // 0: max_position_embeddings
  bool enforce_eager = false;           // true: no CUDA graphs
  bool decode_kernels = true;           // decode-class sequences (below) take the decode-sized kernels
                                        // (gemv.hpp, moe_decode.hpp, the fused MLA glue, the MLA decode
                                        // attention); false: cuBLASLt and the unfused glue for every step
                                        // in one pass, as before (benchmarks)
  int invariant_tokens = 16;            // glm4_moe_lite / glm4_moe: a sequence whose chunk in a step has at
                                        // most this many tokens (raised to max_logit_rows / max_num_seqs,
                                        // the 1 + k of a verification) is decode-class. The step runs its
                                        // decode-class sequences in one forward pass on the batch-invariant
                                        // kernels (a token's result does not depend on the step's other
                                        // tokens: a verified block's row equals decoding it alone, so greedy
                                        // output with a drafter equals plain greedy output), and each longer
                                        // chunk (a prompt's prefill) in a pass of its own on the fast
                                        // kernels (cuBLASLt, grouped experts, prefill attention). A prompt's
                                        // rows then depend on where the engine cut it into chunks (only
                                        // prompts longer than the token budget less the step's other rows
                                        // are cut, and a drafter's verification rows take more of it), not
                                        // on other sequences. Larger: more prompt chunks invariant, slower
                                        // prefill (the gemv reads the weights once per 8 rows)
  bool group_prefill = false;           // true: every prefill-class chunk of a step in one pass (fewer
                                        // weight reads for many short prompts; a prompt's rows then also
                                        // depend on which prompts share its step)
  int step_invariant_tokens = 2048;     // glm5_next (one pass per step): steps of up to this many tokens take
                                        // the gemv (batch-invariant), larger ones cuBLASLt
  int skinny_rows = 0;                  // dense GEMMs of at most this many rows go to the few-rows kernel
                                        // (skinny_gemm.hpp) instead of cuBLASLt; off: on the H200 it was
                                        // slower than cuBLASLt (engine/bench/results/h200-2026-12-03.md)
  int device = 0;
  bool drafter_vocab = false;           // a tensor-parallel rank that hosts a drafter (the head) keeps whole
                                        // copies of the embedding and LM head for it (embedding_device()),
                                        // beside its vocabulary slices
  int max_logit_rows = 0;               // logit rows one step may ask for; 0: max_num_seqs. A speculative
                                        // engine verifies 1 + k tokens per sequence: max_num_seqs * (1 + k)
                                        // (which also makes a block of 1 + k decode-class: invariant_tokens)
  int reduction_groups = 1;             // glm4_moe_lite / glm4_moe: one rank computes as a tensor-parallel
                                        // group of this many ranks does (cuda_decoder.hpp, reduce()): each rank's
                                        // slice of every layer with that rank's kernels and shapes, the
                                        // slices' partial sums added in rank order as the all-reduce adds
                                        // them, so its greedy output equals TP-N's bit for bit (N = 2; more
                                        // where the transport sums in rank order). At N ranks: 1 or N
};

// fp8_e4m3 KV rows store x / scale. A calculated scale (vLLM's --calculate-kv-scales: from the amax of
// the first forward's rows, per layer, then fixed) puts that amax at 200 of e4m3's 448, as vLLM's
// K_SCALE_CONSTANT does: 2.24x headroom for later tokens larger than the first step's, and small
// entries stay clear of e4m3's subnormal range (below 2^-6, where it keeps fewer than 3 mantissa
// bits). With the fixed scale of 1, the latents of small models fell there (0.46 relative logit
// error at one position of the fixtures). No amax (nothing measured, or all zeros): 1.
constexpr float kFp8KvAmaxTarget = 200.0f;
inline float fp8_kv_scale_from_amax(float amax) {
  return amax > 0.0f && std::isfinite(amax) ? amax / kFp8KvAmaxTarget : 1.0f;
}

// Device memory the KV pool may take: utilization * total minus what is in use now (weights and
// buffers of a model already loaded included), as vLLM's --gpu-memory-utilization means it.
Result<std::uint64_t> cuda_kv_budget(int device, double gpu_memory_utilization);

// Ok when this build has the CUDA model (always, where this header's library is built) and a
// device is visible; else an Error saying why not.
Status cuda_model_available();

// What a decode step must read from device memory, for the bandwidth floor of the benchmark.
struct DecodeBytes {
  std::uint64_t fixed = 0;       // read once per step whatever the batch: attention, dense and shared
                                 // MLPs, routers, norms, LM head
  std::uint64_t per_expert = 0;  // one routed expert (gate, up, down)
  int moe_layers = 0, experts = 0, top_k = 0;
  // Expected weight bytes of a step of `batch` tokens (each token's experts drawn uniformly).
  double weights(int batch) const {
    if (experts == 0) return static_cast<double>(fixed);
    const double distinct = experts * (1.0 - std::pow(1.0 - static_cast<double>(top_k) / experts, batch));
    return static_cast<double>(fixed) + static_cast<double>(moe_layers) * static_cast<double>(per_expert) * distinct;
  }
};

// Per-op device timing (tandem-bench-cuda --profile): the model calls mark() on its stream once its
// step's inputs are staged ("start") and after each op it enqueues eagerly, naming the op and the
// bytes it must move; a graph replay is one mark ("graph"), the token choice another ("sample").
class OpTimer {
 public:
  virtual ~OpTimer() = default;
  virtual void mark(const char* op, double bytes, kernels::Stream stream) = 0;
};

// What one eager step computed on its way, for localising a divergence from the CPU reference
// (cuda_model_check --trace compares it with the reference's HiddenCapture and cache rows).
// Per layer, tokens x width each, as fp32 (the device's bf16 values widened exactly):
struct StepTrace {
  int tokens = 0;
  std::vector<std::vector<float>> latent;           // the cache row written, [rmsnorm(c), rope(kr)],
                                                    // before any fp8 quantisation (tokens x row width)
  std::vector<std::vector<float>> after_attention;  // residual stream after the attention's add
  std::vector<std::vector<float>> after_ffn;        // residual stream after the FFN's add
  std::vector<std::vector<std::int32_t>> experts;   // routed experts chosen (tokens x top_k; empty
  std::vector<std::vector<float>> expert_weights;   // for dense layers) and their weights
  std::vector<float> logits;                        // as step() returns them
};

class CudaModel : public Model {
 public:
  // The pool: num_blocks of block_size tokens (one more block is kept as the padding sequences'
  // scratch). make_device_pool must come before step().
  Status make_device_pool(std::int32_t num_blocks, int block_size) override = 0;
  bool kv_on_device() const override { return true; }
  Result<std::vector<float>> step(std::span<const PagedWork> work) override = 0;
  // The same step, but only the greedy token of each item asking for logits (argmax on the device:
  // no vocabulary-sized copy).
  virtual Result<std::vector<std::int32_t>> step_greedy(std::span<const PagedWork> work) = 0;
  // Bytes of device memory the weights take; what a decode step must read.
  virtual std::uint64_t weight_bytes() const = 0;
  virtual DecodeBytes decode_bytes() const = 0;
  // How the weights are kept on the device, in words ("bf16", or how many projections stay fp8 /
  // NVFP4 as the checkpoint stores them and why any quantised one was dequantised); and the
  // checkpoint tensors kept quantised (every path computes with their dequantised values rounded to
  // bf16, as with the other weights; the routers are fp32).
  virtual std::string weight_formats() const { return "bf16"; }
  virtual std::vector<std::string> quantised_tensors() const { return {}; }
  // step() run eagerly with every layer's intermediate values copied out (slow: a debugging aid).
  virtual Result<StepTrace> step_traced(std::span<const PagedWork> work) = 0;
  // Decode steps replay CUDA graphs unless this is set (--enforce-eager); may change between steps.
  virtual void set_enforce_eager(bool eager) = 0;
  // The fp8 pool's scale per layer (all 1 for a bf16 pool; calculated ones once the first step ran).
  virtual std::vector<float> kv_scales() const = 0;
  // Bytes of one cached token over all layers (kv_layout at the pool's element size).
  virtual std::uint64_t kv_bytes_per_token() const = 0;
  // nullptr: no timing (the default; models without op marks ignore it).
  virtual void set_op_timer(OpTimer*) {}
  // For TP > 1 (see above); must outlive the model's steps.
  virtual void set_all_reduce(DeviceAllReduce* ar) = 0;

  // --- for a drafter on the same device (DFlash, engine/spec_decode/cuda) ---
  // From now on every step records the residual stream after each of `layers` (HF hidden_states[l + 1])
  // for each of its tokens, concatenated in the given order; empty: no capture.
  virtual Status set_capture(std::vector<int> layers) = 0;
  // The last step's capture on the device: bf16 [its tokens, layers * hidden_size], row t = the step's
  // t-th token in the items' order (padding rows of a graph step follow the real ones); null without.
  virtual const void* captured() const = 0;
  // The weights a drafter shares, bf16 on the device: embedding and LM head, [vocab, hidden] each
  // (a tensor-parallel rank: null unless CudaOptions::drafter_vocab).
  virtual const void* embedding_device() const = 0;
  virtual const void* lm_head_device() const = 0;
  // The stream steps run on (a drafter enqueues on it, so its work orders after the step's).
  virtual kernels::Stream stream() const = 0;

  // --- a test seam, for the checks of a model with recurrent states (glm5_next_cuda_check) ---
  // The recurrent state of state slot `slot` copied off the device (kv_layout().state_floats
  // floats: every KDA layer's, in layer order), after the steps enqueued so far; an error for a
  // model without states.
  virtual Result<std::vector<float>> recurrent_state(int slot) const {
    (void)slot;
    return error("this model keeps no recurrent state");
  }

 protected:
  CudaModel(ModelConfig config, comm::Communicator& comm) : Model(std::move(config), comm) {}
};

// Loads config.json and the safetensors weights of `dir` onto the device: glm4_moe_lite, glm4_moe, and
// glm5_next / glm5_next_text (first version: eager, fp32 DSA pool; see cuda_glm5_next.hpp).
Result<std::unique_ptr<CudaModel>> load_cuda_model(const std::filesystem::path& dir, const CudaOptions& options);
Result<std::unique_ptr<CudaModel>> load_cuda_model(const std::filesystem::path& dir, const CudaOptions& options,
                                                   comm::Communicator& comm);

}  // namespace tandem::model
