#include "engine_harness.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <fstream>

#include <nlohmann/json.hpp>

namespace tandem::engine::runtime::test {

namespace {
std::string fixture_dir(const std::string& fixture) { return std::string(TANDEM_SOURCE_DIR) + "/tests/model/fixtures/" + fixture; }
}  // namespace

std::vector<GoldenSequence> golden(const std::string& fixture) {
  std::ifstream in(fixture_dir(fixture) + "/golden.json");
  const auto doc = nlohmann::json::parse(in);
  std::vector<GoldenSequence> out;
  for (const auto& s : doc["sequences"])
    out.push_back({s["input_ids"].get<std::vector<std::int32_t>>(), s["greedy"].get<std::vector<std::int32_t>>()});
  return out;
}

std::unique_ptr<model::Model> load(const std::string& fixture) {
  auto m = model::load_model(fixture_dir(fixture));
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.error().message));
  return std::move(m).value();
}

std::uint64_t bytes_for_blocks(const model::Model& m, int blocks, int block_size, int bytes_per_elem) {
  const auto l = m.kv_layout();
  return static_cast<std::uint64_t>(l.n_layers) * static_cast<std::uint64_t>(l.row_width) *
         static_cast<std::uint64_t>(bytes_per_elem) * static_cast<std::uint64_t>(block_size) *
         static_cast<std::uint64_t>(blocks);
}

EngineUnderTest start_engine(const std::string& fixture, EngineConfig cfg) {
  EngineUnderTest t;
  auto lines = std::make_shared<std::vector<std::string>>();
  cfg.log = [lines](const std::string& l) { lines->push_back(l); };
  auto e = Engine::start(load(fixture), cfg);
  REQUIRE_MESSAGE(e.ok(), (e.ok() ? "" : e.error().message));
  t.engine = std::move(e).value();
  t.log = *lines;
  return t;
}

std::function<void(const TokenEvent&)> Collector::sink() {
  return [this](const TokenEvent& e) {
    std::lock_guard lk(mu_);
    Output& o = out_[e.id];
    if (o.finish != FinishReason::none) {
      ++o.events_after_finish;
      return;
    }
    if (e.token) {
      o.tokens.push_back(*e.token);
      o.logprobs.push_back(e.logprob);
    }
    if (e.finish != FinishReason::none) {
      o.finish = e.finish;
      o.error = e.error;
      ++ended_;
      cv_.notify_all();
    }
  };
}

void Collector::wait(size_t n) {
  std::unique_lock lk(mu_);
  const bool done = cv_.wait_for(lk, std::chrono::minutes(5), [&] { return ended_ >= n; });
  REQUIRE_MESSAGE(done, "requests did not finish: " << ended_ << " of " << n);
}

std::map<RequestId, Collector::Output> Collector::outputs() const {
  std::lock_guard lk(mu_);
  return out_;
}

GenerateRequest greedy(std::vector<std::int32_t> prompt, int max_tokens, std::function<void(const TokenEvent&)> sink) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.ignore_eos = true;
  r.max_tokens = max_tokens;
  r.on_event = std::move(sink);
  return r;
}

}  // namespace tandem::engine::runtime::test
