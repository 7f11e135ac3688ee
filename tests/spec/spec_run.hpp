// Runs prompts through an engine at once and keeps what the speculative tests compare: each
// request's output and its last (drafted, accepted) counts.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "../runtime/engine_harness.hpp"
#include "engine.hpp"

namespace tandem::spec::test {

struct SpecRun {
  std::map<engine::runtime::RequestId, engine::runtime::test::Collector::Output> out;
  std::vector<engine::runtime::RequestId> ids;  // in the prompts' order
  std::map<engine::runtime::RequestId, std::pair<std::int64_t, std::int64_t>> spec;  // drafted, accepted (last event)

  std::vector<std::vector<std::int32_t>> tokens() const {
    std::vector<std::vector<std::int32_t>> t;
    for (auto id : ids) t.push_back(out.at(id).tokens);
    return t;
  }
  std::pair<std::int64_t, std::int64_t> spec_of(size_t i) const { return spec.at(ids[i]); }
};

// Every prompt submitted at once (ignore_eos, `max_tokens` each, seeds seed, seed + 1, ...), then
// waits for all of them.
inline SpecRun run_requests(engine::runtime::Engine& e, const std::vector<std::vector<std::int32_t>>& prompts, int max_tokens,
                            float temperature = 0.f, std::uint64_t seed = 1) {
  using namespace engine::runtime;
  engine::runtime::test::Collector c;
  SpecRun r;
  auto counts = std::make_shared<std::map<RequestId, std::pair<std::int64_t, std::int64_t>>>();
  auto mu = std::make_shared<std::mutex>();
  auto sink = c.sink();
  for (const auto& p : prompts) {
    GenerateRequest g;
    g.prompt = p;
    g.max_tokens = max_tokens;
    g.ignore_eos = true;
    g.sampling.temperature = temperature;
    g.seed = seed++;
    g.on_event = [sink, counts, mu](const TokenEvent& ev) {
      {
        std::lock_guard lk(*mu);
        (*counts)[ev.id] = {ev.drafted, ev.accepted};
      }
      sink(ev);
    };
    auto id = e.submit(std::move(g));
    REQUIRE(id.ok());
    r.ids.push_back(id.value());
  }
  c.wait(prompts.size());
  r.out = c.outputs();
  std::lock_guard lk(*mu);
  r.spec = *counts;
  return r;
}

}  // namespace tandem::spec::test
