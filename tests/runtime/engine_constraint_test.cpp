// GenerateRequest.constraint: the engine masks the logits with it before sampling, advances it
// with each sampled token, and ends the request (finish reason stop) once it is finished.
#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include "engine_harness.hpp"

using namespace tandem::engine::runtime;
using namespace tandem::engine::runtime::test;

namespace {

// Allows only the ids in `allowed`, and is finished after `length` tokens.
class AllowList : public TokenConstraint {
 public:
  AllowList(std::set<std::int32_t> allowed, int length) : allowed_(std::move(allowed)), length_(length) {}
  void mask(std::span<float> logits) override {
    ++masks;
    for (std::size_t i = 0; i < logits.size(); ++i)
      if (!allowed_.count(static_cast<std::int32_t>(i))) logits[i] = -INFINITY;
  }
  void advance(std::int32_t token) override { seen.push_back(token); }
  bool finished() const override { return static_cast<int>(seen.size()) >= length_; }

  int masks = 0;
  std::vector<std::int32_t> seen;

 private:
  std::set<std::int32_t> allowed_;
  int length_;
};

}  // namespace

TEST_CASE("a constraint decides the tokens and ends the request when it is finished") {
  EngineConfig cfg;
  cfg.max_model_len = 64;
  cfg.max_num_seqs = 4;
  cfg.kv_cache_memory = std::uint64_t{1} << 20;
  auto t = start_engine("glm4_moe_lite", cfg);
  const auto g = golden("glm4_moe_lite");
  Collector c;

  // Sampled at temperature 1 from only {3, 7}: every token is one of them; 5 tokens, then stop,
  // long before max_tokens.
  auto constraint = std::make_shared<AllowList>(std::set<std::int32_t>{3, 7}, 5);
  GenerateRequest r = greedy(g[0].prompt, 40, c.sink());
  r.sampling.temperature = 1.0f;
  r.seed = 5;
  r.constraint = constraint;
  auto id = t.engine->submit(std::move(r));
  REQUIRE(id.ok());
  // Without a constraint, the same prompt's greedy tokens are the golden ones (a control).
  auto free_id = t.engine->submit(greedy(g[0].prompt, 5, c.sink()));
  REQUIRE(free_id.ok());
  c.wait(2);
  const auto out = c.outputs();
  const auto& o = out.at(id.value());
  CHECK(o.finish == FinishReason::stop);
  CHECK(o.tokens.size() == 5);
  for (auto tok : o.tokens) CHECK((tok == 3 || tok == 7));
  CHECK(constraint->seen == o.tokens);
  CHECK(constraint->masks == 5);
  const auto& f = out.at(free_id.value());
  CHECK(std::vector<std::int32_t>(g[0].greedy.begin(), g[0].greedy.begin() + 5) == f.tokens);
}
