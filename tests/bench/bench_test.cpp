// tandemctl bench's harness against tandem-serve on loopback (structure and accounting, never
// speed) and against a fake endpoint that drops connections and returns errors: every failure is
// counted under its reason, none is hidden.
#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <set>

#include "../gates/fake_endpoint.hpp"
#include "../serve/serve_harness.hpp"
#include "bench/bench.hpp"
#include "bench/bench_report.hpp"
#include "gates/gates.hpp"

using namespace tandem;
using nlohmann::json;

namespace {

json chunk(const std::string& content) {
  return {{"object", "chat.completion.chunk"}, {"choices", {{{"index", 0}, {"delta", {{"content", content}}}, {"finish_reason", nullptr}}}}};
}

json usage_chunk(int completion_tokens) {
  return {{"object", "chat.completion.chunk"}, {"choices", json::array()},
          {"usage", {{"prompt_tokens", 20}, {"completion_tokens", completion_tokens}, {"total_tokens", 20 + completion_tokens}}}};
}

fake::Reply good_stream(int tokens) {
  fake::Reply r;
  r.kind = fake::Reply::Kind::stream;
  r.gap = std::chrono::milliseconds(2);
  for (int i = 0; i < tokens; ++i) r.events.push_back(chunk("t" + std::to_string(i)).dump());
  r.events.push_back(usage_chunk(tokens).dump());
  return r;
}

bench::Config config(const std::string& url, std::vector<int> levels, std::vector<std::string> fixtures, int max_tokens) {
  bench::Config c;
  c.url = url;
  c.concurrency = std::move(levels);
  c.rounds = 1;
  c.max_tokens = max_tokens;
  auto f = bench::shipped_fixtures(fixtures);
  REQUIRE(f.ok());
  c.fixtures = *f;
  c.timeout = std::chrono::seconds(30);
  return c;
}

}  // namespace

TEST_CASE("percentiles interpolate between ranks; none of nothing") {
  CHECK_FALSE(bench::percentile({}, 50));
  CHECK(*bench::percentile({7}, 99) == 7);
  CHECK(*bench::percentile({1, 2, 3, 4}, 50) == doctest::Approx(2.5));
  CHECK(*bench::percentile({10, 0, 20, 30, 40}, 10) == doctest::Approx(4));
  CHECK(*bench::percentile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100}, 99) == doctest::Approx(91));
}

TEST_CASE("shipped fixtures: all five parse; unknown names are refused with the known list") {
  CHECK(bench::fixture_names() == std::vector<std::string>{"prose", "code", "json", "agent", "mixed"});
  auto all = bench::shipped_fixtures(bench::fixture_names());
  REQUIRE(all.ok());
  for (const auto& f : *all) {
    CHECK(f.messages.size() >= 8);
    CHECK_FALSE(f.description.empty());
  }
  CHECK((*all)[3].tools.is_array());
  CHECK(bench::shipped_fixtures({"prose", "poetry"}).error().message ==
        "no fixture 'poetry'; expected some of: prose, code, json, agent, mixed");
  CHECK(bench::parse_fixture(R"({"name": "x", "prompts": [{"messages": [{"role": "user"}]}]})", "x.json").error().message ==
        "x.json: prompts[0].messages: every message needs a string role and a string content");
}

TEST_CASE("every request is unique from its first characters, so no prefix cache can help") {
  std::mutex mu;
  std::vector<std::string> firsts;
  fake::Endpoint ep([&](const fake::Request& req) {
    if (req.target == "/v1/models") return fake::Reply::json({{"data", {{{"id", "m"}}}}});
    if (req.target != "/v1/chat/completions") return fake::Reply::error(404, "no");
    const json b = req.json();
    std::lock_guard<std::mutex> lock(mu);
    firsts.push_back(b["messages"][0]["content"].get<std::string>());
    CHECK(b["stream"] == true);
    CHECK(b["stream_options"]["include_usage"] == true);
    CHECK(b["ignore_eos"] == true);
    CHECK(b["max_tokens"] == 8);
    CHECK(b["model"] == "m");
    return good_stream(8);
  });
  auto cfg = config(ep.url(), {1, 3}, {"code", "agent"}, 8);
  cfg.rounds = 2;
  auto r = bench::run(cfg);
  REQUIRE(r.ok());
  REQUIRE(firsts.size() == 2 * (1 + 3) * 2);
  std::set<std::string> distinct, prefixes;
  for (const auto& f : firsts) {
    distinct.insert(f);
    prefixes.insert(f.substr(0, f.find(']') + 1));
    CHECK(f.rfind("[run ", 0) == 0);
  }
  CHECK(distinct.size() == firsts.size());
  CHECK(prefixes.size() == firsts.size());
  CHECK(r->failed() == 0);
}

TEST_CASE("a fake endpoint that drops connections and returns errors: each failure is counted with its reason") {
  std::atomic<int> chats{0};
  fake::Endpoint ep([&](const fake::Request& req) {
    if (req.target == "/v1/models") return fake::Reply::json({{"data", {{{"id", "tiny-glm"}}}}});
    if (req.target == "/metrics") {
      const int n = chats.load();
      return fake::Reply::text("tandem_spec_decode_draft_tokens_total " + std::to_string(10 * n) +
                               "\ntandem_spec_decode_accepted_tokens_total " + std::to_string(4 * n) + "\n");
    }
    const int i = chats.fetch_add(1);
    switch (i % 7) {
      case 0: return good_stream(12);
      case 1: return fake::Reply::error(500, "CUDA error: out of memory");
      case 2: return fake::Reply::close();
      case 3: {
        fake::Reply r = good_stream(12);
        r.drop_after = 3;  // the connection breaks mid-answer
        return r;
      }
      case 4: {
        fake::Reply r = good_stream(12);
        r.done = false;  // ends without [DONE]
        return r;
      }
      case 5: {
        fake::Reply r = good_stream(2);
        r.events.insert(r.events.begin() + 1, json{{"error", {{"message", "engine stopped"}}}}.dump());
        return r;
      }
      default: {
        fake::Reply r;
        r.kind = fake::Reply::Kind::stream;
        r.events.push_back(usage_chunk(0).dump());  // a stream with no token in it
        return r;
      }
    }
  });
  auto r = bench::run(config(ep.url(), {7}, {"mixed"}, 12));
  REQUIRE(r.ok());
  REQUIRE(r->cells.size() == 1);
  const auto& c = r->cells[0];
  CHECK(c.requests == 7);
  CHECK(c.failed == 6);
  CHECK(r->failed() == 6);
  const std::map<std::string, int> want{{"HTTP 500: CUDA error: out of memory", 1},
                                        {"waiting for the reply to POST /v1/chat/completions: the server closed the connection", 1},
                                        {"reading the event stream: the server closed the connection mid-reply", 1},
                                        {"the stream ended without data: [DONE]", 1},
                                        {"error event: engine stopped", 1},
                                        {"no token in the stream", 1}};
  CHECK(c.failure_reasons == want);
  CHECK(c.tokens == 12);  // only the successful request's tokens count
  CHECK(c.decode_tok_s.p50.has_value());
  // The metrics grew by 10 drafted / 4 accepted per chat request between the two scrapes.
  CHECK(c.spec_measured);
  CHECK(c.spec.drafted == 70);
  CHECK(*c.spec.acceptance() == doctest::Approx(0.4));
  // The table and the JSON both show the failures; nothing rounds them away.
  const std::string table = bench::render_table(*r);
  CHECK(table.find("Failures: 6 of 7 requests:") != std::string::npos);
  CHECK(table.find("     1 x HTTP 500: CUDA error: out of memory\n") != std::string::npos);
  const auto j = bench::to_json(*r);
  CHECK(j["totals"]["failed"] == 6);
  CHECK(j["cells"][0]["failure_reasons"].size() == 6);
}

TEST_CASE("an endpoint that cannot name its model stops the run before it starts") {
  fake::Endpoint ep([](const fake::Request&) { return fake::Reply::error(503, "loading"); });
  auto r = bench::run(config(ep.url(), {1}, {"prose"}, 4));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message == "GET /v1/models answered HTTP 503: loading");
}

TEST_CASE("a stalled stream fails on the silence timeout, with the reason") {
  fake::Endpoint ep([](const fake::Request& req) {
    if (req.target == "/v1/models") return fake::Reply::json({{"data", {{{"id", "m"}}}}});
    fake::Reply r = good_stream(3);
    r.gap = std::chrono::milliseconds(900);
    return r;
  });
  auto cfg = config(ep.url(), {1}, {"prose"}, 3);
  cfg.timeout = std::chrono::milliseconds(300);
  auto r = bench::run(cfg);
  REQUIRE(r.ok());
  CHECK(r->cells[0].failure_reasons ==
        std::map<std::string, int>{{"reading the event stream: timed out", 1}});
}

namespace {
serve_test::Server& demo_server() {
  static std::unique_ptr<serve_test::Server> s;
  if (!s)
    s = std::make_unique<serve_test::Server>(std::vector<std::string>{
        "--served-model-name", "tiny-glm", "--max-model-len", "4096", "--max-num-seqs", "4", "--enable-auto-tool-choice",
        "--tool-call-parser", "glm47"});
  return *s;
}
}  // namespace

TEST_CASE("against tandem-serve on loopback: every cell, every request, exact token accounting") {
  const std::string url = "http://127.0.0.1:" + std::to_string(demo_server().port());
  auto cfg = config(url, {1, 3}, {"prose", "agent"}, 16);
  bench::Progress progress;
  std::vector<std::string> started;
  progress.on_cell_start = [&](const std::string& l) { started.push_back(l); };
  auto r = bench::run(cfg, &progress);
  REQUIRE(r.ok());
  CHECK(r->model == "tiny-glm");
  CHECK(started == std::vector<std::string>{"c=1 prose", "c=1 agent", "c=3 prose", "c=3 agent"});
  CHECK(progress.total == 8);
  CHECK(progress.done == 8);
  REQUIRE(r->cells.size() == 4);
  for (const auto& c : r->cells) {
    INFO("c=" << c.concurrency << " " << c.fixture);
    for (const auto& [why, n] : c.failure_reasons) MESSAGE(n << " x " << why);
    CHECK(c.requests == c.concurrency);
    CHECK(c.failed == 0);
    CHECK(c.tokens == 16LL * c.concurrency);  // ignore_eos: every request decodes max_tokens
    CHECK(c.decode_tok_s.p50.has_value());
    CHECK(c.decode_tok_s.p10.has_value());
    CHECK(*c.decode_tok_s.p10 <= *c.decode_tok_s.p50);
    CHECK(c.aggregate_tok_s.has_value());
    CHECK(*c.ttft_ms.p50 <= *c.ttft_ms.p99);
    CHECK(*c.itl_ms.p50 <= *c.itl_ms.p99);
    // tandem-serve exports the counters; with no drafter nothing is drafted, so no acceptance.
    CHECK(c.spec_measured);
    CHECK(c.spec.present);
    CHECK(c.spec.drafted == 0);
    CHECK_FALSE(c.spec.acceptance());
  }

  SUBCASE("JSON round trip, comparison with ratios, table and chart") {
    const auto j = bench::to_json(*r);
    CHECK(j["settings"]["fixtures"] == json{"prose", "agent"});
    CHECK(j["cells"].size() == 4);
    CHECK(j["cells"][0]["spec"]["acceptance"].is_null());
    auto back = bench::from_json(json::parse(j.dump()), "run.json");
    REQUIRE(back.ok());
    REQUIRE(back->cells.size() == 4);
    CHECK(*back->cells[2].aggregate_tok_s == doctest::Approx(*r->cells[2].aggregate_tok_s));
    const auto cmp = bench::compare_json(*r, *back);
    REQUIRE(cmp["cells"].size() == 4);
    CHECK(cmp["cells"][1]["ratio"]["aggregate_tok_s"].get<double>() == doctest::Approx(1.0));
    CHECK(bench::render_compare(*r, *back).find("1.00x") != std::string::npos);
    CHECK(bench::from_json(json{{"cells", 1}}, "x.json").error().message.find("x.json: not a `tandemctl bench --output json` report") == 0);
    const std::string table = bench::render_table(*r);
    CHECK(table.find("Failures: none of 8 requests.") != std::string::npos);
    CHECK(table.find("none drafted") != std::string::npos);
    const std::string svg = bench::render_svg(*r);
    CHECK(svg.rfind("<svg ", 0) == 0);
    CHECK(svg.find("</svg>") != std::string::npos);
    std::size_t lines = 0;
    for (auto at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) ++lines;
    CHECK(lines == 4);  // two fixtures in each of the two panels
  }
}

TEST_CASE("the bench gate: passes on tandem-serve with a low floor, fails with the reason on a high one") {
  const std::string url = "http://127.0.0.1:" + std::to_string(demo_server().port());
  auto m = load_manifest_file(std::string(TANDEM_SOURCE_DIR) + "/manifests/local.yaml");
  REQUIRE(m.manifest);
  Manifest man = *m.manifest;
  Gates& g = man.gates;
  g.health = g.models = g.chat = g.tool_call = g.json = g.spec_metrics = false;
  g.long_retrieval_tokens.reset();
  g.bench = Gates::Bench{0.01, 0, 2, 8};
  auto r = gates::run_gates(man, url, nullptr);
  REQUIRE(r.ok());
  REQUIRE(r->gates.size() == 1);
  const auto& gate = r->gates[0];
  INFO(gate.detail);
  CHECK(gate.name == "bench");
  CHECK(gate.passed);
  CHECK(gate.evidence["totals"]["requests"] == 2 * 5);
  g.bench->min_tok_s = 1e6;
  r = gates::run_gates(man, url, nullptr);
  REQUIRE(r.ok());
  CHECK_FALSE(r->gates[0].passed);
  CHECK(r->gates[0].detail.find("below the manifest's minimum of 1000000.0 tok/s") != std::string::npos);
}

TEST_CASE("the bench gate counts failures against max_failures") {
  std::atomic<int> n{0};
  fake::Endpoint ep([&](const fake::Request& req) {
    if (req.target == "/v1/models") return fake::Reply::json({{"data", {{{"id", "tiny-glm"}}}}});
    if (req.target != "/v1/chat/completions") return fake::Reply::error(404, "no");
    return n.fetch_add(1) % 5 == 0 ? fake::Reply::error(429, "too many requests") : good_stream(8);
  });
  auto m = load_manifest_file(std::string(TANDEM_SOURCE_DIR) + "/manifests/local.yaml");
  REQUIRE(m.manifest);
  Manifest man = *m.manifest;
  Gates& g = man.gates;
  g.health = g.models = g.chat = g.tool_call = g.json = g.spec_metrics = false;
  g.long_retrieval_tokens.reset();
  g.bench = Gates::Bench{0, 0, 1, 8};
  auto r = gates::run_gates(man, ep.url(), nullptr);
  REQUIRE(r.ok());
  CHECK_FALSE(r->gates[0].passed);
  CHECK(r->gates[0].detail.find("1 of 5 requests failed (max 0): 1 x HTTP 429: too many requests") != std::string::npos);
  g.bench->max_failures = 1;
  r = gates::run_gates(man, ep.url(), nullptr);
  REQUIRE(r.ok());
  CHECK_MESSAGE(r->gates[0].passed, r->gates[0].detail);
  // With a speed floor, the fixture whose only request failed has no speed to show.
  g.bench->min_tok_s = 0.01;
  r = gates::run_gates(man, ep.url(), nullptr);
  REQUIRE(r.ok());
  CHECK_FALSE(r->gates[0].passed);
  CHECK(r->gates[0].detail.find("below the manifest's minimum of 0.01 tok/s: ") != std::string::npos);
  CHECK(r->gates[0].detail.find(" none") != std::string::npos);
}
