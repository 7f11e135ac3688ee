// The /metrics families of tandem-serve. Request outcomes are counted as requests end; engine
// numbers (tokens, queue, KV blocks, preemptions, prefix-cache hits) are copied from
// Engine::metrics() at each scrape, so they are exact rather than sampled.
#pragma once
#include <string>

#include "engine.hpp"
#include "metrics.hpp"

namespace tandem::engine::serve {

class ServeMetrics {
 public:
  ServeMetrics();
  // outcome: stop | length | tool_calls | abort | error (engine failure) | rejected (4xx).
  void request_done(const std::string& outcome);
  std::string render(const runtime::EngineMetrics& m);

 private:
  api::Metrics m_;
};

}  // namespace tandem::engine::serve
