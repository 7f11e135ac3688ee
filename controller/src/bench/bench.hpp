// tandemctl bench: the seed operators' C1-C6 harness against any OpenAI-compatible endpoint.
// For each concurrency level and fixture, `rounds` waves of `concurrency` simultaneous streaming
// chat requests, every prompt made unique (a nonce at its very start) so no prefix cache can help.
// Speculative acceptance comes from /metrics scraped before and after each (level, fixture) cell.
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_fixtures.hpp"
#include "endpoint/prometheus_text.hpp"
#include "tandem/result.hpp"

namespace tandem::bench {

struct Config {
  std::string url;
  std::string model;  // empty: the first id of GET /v1/models
  std::vector<int> concurrency{1, 2, 3, 4, 5, 6};
  int rounds = 2;
  int max_tokens = 400;
  bool ignore_eos = true;  // every request decodes max_tokens, so levels compare like with like
  double temperature = 0;
  std::vector<Fixture> fixtures;
  std::chrono::milliseconds timeout = std::chrono::minutes(5);  // longest silence within one request
};

// One request as measured from the client.
struct Sample {
  bool ok = false;
  std::string failure;          // why not ok (stable text, fit for counting by reason)
  int tokens = 0;               // completion tokens (usage when the server sends it, else token events)
  bool tokens_from_usage = false;
  double ttft_s = 0;            // request sent -> first token
  double decode_tok_s = 0;      // (tokens - 1) / (last token - first token); 0 with fewer than 2 tokens
  std::vector<double> itl_s;    // gaps between successive token-carrying events
};

struct Percentiles {
  std::optional<double> p10, p50, p99;
};

// One (concurrency, fixture) cell.
struct Cell {
  int concurrency = 0;
  std::string fixture;
  int requests = 0;
  int failed = 0;
  std::map<std::string, int> failure_reasons;
  long long tokens = 0;        // completion tokens of the successful requests
  double wall_s = 0;           // summed wall time of the waves
  Percentiles decode_tok_s;    // per request; p50 is the median, p10 the slow tail
  std::optional<double> aggregate_tok_s;  // tokens / wall_s
  Percentiles ttft_ms, itl_ms;
  prom::SpecCounters spec;     // the /metrics delta over this cell
  bool spec_measured = false;  // /metrics answered before and after
};

struct Report {
  std::string url, model, started_at;
  Config settings;             // fixtures by name only in JSON
  std::vector<Cell> cells;
  int requests() const;
  int failed() const;
  // Summed over the cells of one fixture.
  prom::SpecCounters fixture_spec(const std::string& fixture, bool* measured = nullptr) const;
};

// What a live display needs; updated by the worker threads as they go.
struct Progress {
  std::atomic<int> done{0}, failed{0}, total{0};
  std::atomic<long long> tokens{0};  // token events streamed so far (all requests)
  std::function<void(const std::string& cell_label)> on_cell_start;
  std::function<void(const Cell&)> on_cell_done;
};

// Runs the whole harness. Errors only when it cannot start (bad URL, no model to name); request
// failures are counted in the cells, never hidden.
Result<Report> run(const Config& config, Progress* progress = nullptr);

// Percentile with linear interpolation between the closest ranks (numpy's default); nullopt for none.
std::optional<double> percentile(std::vector<double> values, double p);

}  // namespace tandem::bench
