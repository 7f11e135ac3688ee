// Helpers for the engine tests: fixture models and golden runs, an engine with a given pool, and
// a collector that waits for requests to finish.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine.hpp"

namespace tandem::engine::runtime::test {

struct GoldenSequence {
  std::vector<std::int32_t> prompt, greedy;
};
std::vector<GoldenSequence> golden(const std::string& fixture);
std::unique_ptr<model::Model> load(const std::string& fixture);

// Bytes of KV (at 2 bytes per element, the default "auto" of a bf16 checkpoint) for n blocks.
std::uint64_t bytes_for_blocks(const model::Model& m, int blocks, int block_size, int bytes_per_elem = 2);

struct EngineUnderTest {
  std::unique_ptr<Engine> engine;
  std::vector<std::string> log;
};
EngineUnderTest start_engine(const std::string& fixture, EngineConfig cfg);

// Collects every request's events; wait() blocks until `n` requests have ended.
class Collector {
 public:
  std::function<void(const TokenEvent&)> sink();
  void wait(size_t n);
  struct Output {
    std::vector<std::int32_t> tokens;
    std::vector<float> logprobs;
    FinishReason finish = FinishReason::none;
    std::string error;
    int events_after_finish = 0;
  };
  std::map<RequestId, Output> outputs() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<RequestId, Output> out_;
  size_t ended_ = 0;
};

// A greedy request that does not stop at EOS (as the golden continuations were made).
GenerateRequest greedy(std::vector<std::int32_t> prompt, int max_tokens, std::function<void(const TokenEvent&)> sink);

}  // namespace tandem::engine::runtime::test
