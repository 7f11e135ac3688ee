// What the engine keeps per request beyond the scheduler's view: the caller's parameters and
// callback, its own random generator (seeded once, so a seed always yields the same tokens), and
// how much of its KV the engine has seen written (to count prefix-cache hits).
#pragma once
#include <chrono>
#include <optional>
#include <random>
#include <unordered_set>
#include <vector>

#include "engine.hpp"

namespace tandem::engine::runtime {

struct Engine::RequestState {
  RequestId id = 0;
  GenerateRequest req;
  std::unordered_set<std::int32_t> stop;
  std::mt19937_64 rng;
  int kv_seen = 0;  // KV tokens written as of the last step; 0 after admission or preemption
  std::optional<spec::DraftLength> draft_len;  // with a drafter: this request's adaptive length
  std::int64_t drafted = 0, accepted = 0;      // its speculative counts so far
  std::chrono::steady_clock::time_point submitted;  // set by submit()
  std::optional<double> queued_seconds;             // submit to first schedule, once scheduled
  // The model's recurrent state for this sequence (KvLayout::state_floats floats; empty for
  // attention-only models): a fixed-size slot outside the paged pool, zeroed whenever the
  // sequence (re)starts from token 0 (admission, or recompute after preemption).
  std::vector<float> recurrent;
};

}  // namespace tandem::engine::runtime
