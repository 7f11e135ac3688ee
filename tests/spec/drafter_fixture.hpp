// Test fixtures for speculative decoding: the seeded demo target, a seeded random DFlash drafter in
// z-lab's HF layout for it, and an "oracle" drafter that proposes a known continuation.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/model/model.hpp"
#include "tandem/spec/drafter.hpp"

namespace tandem::spec::test {

// A fresh directory under the temp dir, removed with this object.
class TempDir {
 public:
  explicit TempDir(const std::string& tag);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// The demo target (tandem-serve --write-demo-model) in dir/target, a random drafter for it in
// dir/drafter: 2 layers, block_size 8, reading target layers {0, 1}, mask token = last id.
struct DemoPair {
  TempDir dir{"dflash_pair"};
  std::filesystem::path target, drafter;
  nlohmann::json drafter_config;
  DemoPair();
};

// Writes config.json + model.safetensors of a random DFlash drafter whose shapes fit `target`.
void write_random_drafter(const std::filesystem::path& dir, const model::ModelConfig& target, std::vector<int> layers,
                          int block_size, unsigned seed);

// Proposes the continuation each sequence is known to take (from greedy decoding), except that the
// draft at position `wrong_at` (0 = first draft) of each proposal is replaced by another token.
// Sequences are told apart by the target feature of their first token, which it records as its
// context row (so prompts must start with different tokens).
class OracleDrafter final : public Drafter {
 public:
  struct Sequence {
    std::vector<std::int32_t> tokens;  // prompt + continuation
    int wrong_at = -1;
  };
  OracleDrafter(const model::Model& target, std::vector<Sequence> seqs, int max_draft);
  const std::vector<int>& target_layers() const override { return layers_; }
  model::KvLayout context_layout() const override { return {1, 1}; }
  int max_draft() const override { return max_; }
  Status add_context(std::span<const float> features, std::span<const int> positions, model::KvSequence& ctx) const override;
  Result<std::vector<float>> propose(model::KvSequence& ctx, std::int32_t anchor, int pos, int n) const override;

 private:
  std::vector<int> layers_{0};
  int hidden_, vocab_, max_;
  std::vector<Sequence> seqs_;
  std::vector<float> tags_;  // layer-0 feature[0] of each sequence's first token
};

}  // namespace tandem::spec::test
