// What the engine needs from a speculative drafter, and the DFlash drafter (block diffusion
// conditioned on target hidden states; notes and sources in engine/spec_decode/README.md).
//
// A drafter keeps per-token "context rows" in a KV store of its own layout. The engine gives that
// store the same block tables as the target's paged KV, so context rows are written, shared by the
// prefix cache, rolled back and recomputed after preemption exactly when the target's rows are:
// the drafter's context is in step with what was committed by construction.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tandem/model/config.hpp"
#include "tandem/model/kv_cache.hpp"
#include "tandem/model/result.hpp"

namespace tandem::spec {

using tandem::Result;
using tandem::Status;

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Target layers whose outputs the drafter reads (HiddenCapture::layers for every target forward).
  virtual const std::vector<int>& target_layers() const = 0;
  // Per-token context rows (sizes the drafter's paged pool).
  virtual model::KvLayout context_layout() const = 0;
  // Most tokens one proposal can hold (block size - 1 for DFlash).
  virtual int max_draft() const = 0;
  // Appends context rows for tokens at `positions` (ctx.length() == positions[0]) from their
  // captured target features: positions.size() rows of the capture's width.
  virtual Status add_context(std::span<const float> features, std::span<const int> positions,
                             model::KvSequence& ctx) const = 0;
  // Logits (n x vocab) for the n tokens after `anchor`, the last committed token, which sits at
  // position `pos` == ctx.length() and has no context row yet. May append scratch rows to ctx
  // (positions pos .. pos+n); the caller forgets them (they lie beyond the written length).
  virtual Result<std::vector<float>> propose(model::KvSequence& ctx, std::int32_t anchor, int pos, int n) const = 0;
};

// config.json of a DFlash drafter (z-lab's DFlashDraftModel: a Qwen3-style decoder stack).
struct DFlashConfig {
  int hidden_size = 0, num_hidden_layers = 0, num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0;
  int intermediate_size = 0, vocab_size = 0;
  double rms_norm_eps = 1e-6, rope_theta = 10000.0;
  int block_size = 16;                 // anchor + block_size - 1 proposals
  std::int32_t mask_token_id = -1;
  std::vector<int> target_layer_ids;
  double input_embedding_scale = 1.0;  // optional: scales the target embedding of the block
  double output_multiplier = 1.0;      // optional: scales draft logits
  double final_logit_softcapping = 0;  // optional: tanh soft cap of draft logits (0: off)
};

// Parses and checks a drafter config.json; `source` names it in errors. Features that would change
// the math and are not implemented (sliding-window layers, attention bias, rope scaling, DFlash2's
// convolutions and candidate selector) are refused by name.
Result<DFlashConfig> parse_dflash_config(const nlohmann::json& doc, const std::string& source);

// Reads <drafter_dir>/config.json and checks it against the target (hidden size, vocabulary, layers).
Result<DFlashConfig> read_dflash_config(const std::filesystem::path& drafter_dir, const model::ModelConfig& target);

// Loads <drafter_dir>/config.json + safetensors, and the target's embedding and LM head (DFlash
// drafters have none of their own) from the target checkpoint in `target_dir`.
Result<std::unique_ptr<Drafter>> load_dflash(const std::filesystem::path& drafter_dir,
                                             const std::filesystem::path& target_dir,
                                             const model::ModelConfig& target);

}  // namespace tandem::spec
