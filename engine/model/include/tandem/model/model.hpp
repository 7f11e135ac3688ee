// The model API of the CPU reference path: load a Hugging Face directory, run token ids at given
// positions against a sequence's KV store (a private KvCache or a view of the paged pool), get
// logits for the rows asked for. Prefill (many tokens)
// and decode (one token) are the same call, so they give the same logits.
//
// Tensor parallelism: a model loaded with a communicator of N ranks holds its rank's slice of the
// weights (shard.hpp) and every forward is a collective: all ranks call it with the same tokens,
// positions and block tables, and all get the full logits.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "tandem/comm/communicator.hpp"
#include "tandem/kernels/sampling_types.hpp"
#include "tandem/model/config.hpp"
#include "tandem/model/kv_cache.hpp"
#include "tandem/model/result.hpp"
#include "tandem/model/shard.hpp"

namespace tandem::model {

// One sequence's share of a batched step over a device-resident paged pool: its new tokens sit at
// positions start, start + 1, ...; its block table covers them; `logits`: the last one's are wanted;
// `all_logits`: every token's are (a speculative verification of a drafted block), in token order.
// Rows written for tokens that are later rejected need no undo: they lie beyond the sequence's
// written length, are never attended to by committed tokens, and are overwritten by the next step.
struct PagedWork {
  std::span<const int32_t> tokens;
  int start = 0;
  std::span<const int32_t> block_table;
  bool logits = false;
  // Models with a recurrent state per sequence (glm5_next) on a device pool: which of the model's
  // max_num_seqs state slots this sequence reads and advances (-1: none); a start of 0 resets it.
  int state_slot = -1;
  bool all_logits = false;  // after state_slot: aggregate initialisers that stop at logits keep working
  // Prefix caching of the recurrent state (make_state_snapshots): copy kept state `state_load` into
  // the slot before the step (the sequence resumes at `start` > 0 from a prefix's state), and the
  // slot into kept state `state_save` after it (the state at start + tokens). -1: none.
  int state_load = -1;
  int state_save = -1;
};

// Residual-stream rows of chosen layers, captured during a forward for a speculative drafter
// (DFlash reads the output of target layers `layers`, concatenated in that order).
struct HiddenCapture {
  std::vector<int> layers;      // layer indices, each in [0, num_hidden_layers)
  std::vector<float> rows;      // filled by forward: tokens x (layers.size() * hidden_size)
  // Also the residual stream between each captured layer's attention and its FFN, in the same
  // shape as rows (filled where the decoder supports it; cuda_model_check's --trace compares
  // the CUDA model's against it to name the first op that diverges).
  bool after_attention = false;
  std::vector<float> attention_rows;
};

class Model {
 public:
  virtual ~Model() = default;
  const ModelConfig& config() const { return config_; }
  int vocab_size() const { return config_.decoder().vocab_size; }
  comm::Communicator& comm() const { return *comm_; }
  // The vocabulary rows this rank's embedding and LM head hold.
  Range vocab_range() const { return split(vocab_size(), comm_->rank(), comm_->size()); }

  // What this rank caches per token per layer (sizes KvCache and PagedKvPool).
  virtual KvLayout kv_layout() const = 0;
  // An empty contiguous cache shaped for this model.
  KvCache new_cache() const {
    const KvLayout l = kv_layout();
    return KvCache(l.n_layers, l.row_width, l.state_floats);
  }

  // Appends tokens[i] at positions[i] to `cache` (tokens attend to every cached token at a
  // position <= their own) and returns the logits of the rows listed in `logit_rows` (indices into
  // tokens), row after row: logit_rows.size() x vocab_size floats.
  // With `capture`, also records the hidden state after each of capture->layers for every token.
  Result<std::vector<float>> forward(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                                     KvSequence& cache, std::span<const int> logit_rows,
                                     HiddenCapture* capture = nullptr) const;

  // A model whose KV cache lives on its device (the CUDA back end, cuda_model.hpp) runs the engine's
  // steps through these instead of forward(): the engine sizes the pool, the model makes it on its
  // device, then each scheduler step is one batched call. The CPU reference answers false / errors.
  virtual bool kv_on_device() const { return false; }
  virtual Status make_device_pool(std::int32_t num_blocks, int block_size) {
    (void)num_blocks, (void)block_size;
    return error("this model keeps its KV cache on the host");
  }
  // Logits ([items asking x vocab], in order) of one batched step.
  virtual Result<std::vector<float>> step(std::span<const PagedWork> work) {
    (void)work;
    return error("this model runs forward() against a host KV store");
  }
  // The same step, but of each row step() returns only what an unconstrained request keeps: the
  // token sampling draws from it and its raw logprob, row i by params[i] with uniforms[i]
  // (kernels::sample_with_uniform; temperature 0: the greedy token, argmax_cpu's pick, its uniform
  // unused). A device model samples where the logits are and reads back 8 bytes a row instead of
  // the vocabulary (on the host it cost an H100 engine 0.04 ms a greedy row at a vocabulary of
  // 4096, and it grows with the vocabulary); its draw for temperature > 0 follows the same
  // distribution, but may pick another token for the same uniform (sampling_cuda.hpp). This
  // default samples on the host from step().
  virtual Result<std::vector<kernels::Sampled>> step_sample(std::span<const PagedWork> work,
                                                            std::span<const kernels::SamplingParams> params,
                                                            std::span<const double> uniforms);
  // Speculative rollback of a device model's recurrent states (kv_layout().state_floats > 0): a
  // verification folds every drafted token into a sequence's state, and the state cannot forget.
  // keep_states copies the states of `slots` aside (after the steps enqueued so far); restore_states
  // puts them back, so that a step over the accepted tokens alone can advance them again. One kept
  // copy per slot: a second keep_states of a slot replaces the first.
  virtual bool restores_states() const { return false; }
  virtual Status keep_states(std::span<const int> slots) {
    (void)slots;
    return error("this model cannot keep its recurrent states aside");
  }
  virtual Status restore_states(std::span<const int> slots) {
    (void)slots;
    return error("this model cannot restore its recurrent states");
  }
  // Prefix caching of a device model's recurrent states: `count` kept states on the device, which
  // PagedWork::state_load / state_save name (the engine's kv::StateSnapshots decides which). Called
  // once, after make_device_pool.
  virtual bool snapshots_states() const { return false; }
  virtual Status make_state_snapshots(int count) {
    (void)count;
    return error("this model cannot keep copies of its recurrent states");
  }

 protected:
  Model(ModelConfig config, comm::Communicator& comm) : config_(std::move(config)), comm_(&comm) {}
  // Final hidden states (after the last norm) of the new tokens, [tokens x hidden]; the cache has
  // already made room for them. Fails only when the tensor-parallel group does.
  virtual Result<std::vector<float>> hidden_states(std::span<const int32_t> tokens, KvSequence& cache,
                                                   HiddenCapture* capture) const = 0;
  // This rank's rows of the LM head: vocab_range().size() x hidden.
  virtual const float* lm_head() const = 0;

 private:
  ModelConfig config_;
  comm::Communicator* comm_;
};

// Reads config.json (+ generation_config.json) and the safetensors weights of `dir`: all of them,
// or the slice of rank comm.rank() of comm.size() (the communicator must outlive the model).
Result<std::unique_ptr<Model>> load_model(const std::filesystem::path& dir);
Result<std::unique_ptr<Model>> load_model(const std::filesystem::path& dir, comm::Communicator& comm);

// Greedy decoding with the cache: prefill the prompt, then feed back the argmax token until
// max_new_tokens are produced (EOS does not stop it; callers that want that check the ids).
Result<std::vector<int32_t>> greedy_generate(const Model& model, std::span<const int32_t> prompt, int max_new_tokens);

}  // namespace tandem::model
