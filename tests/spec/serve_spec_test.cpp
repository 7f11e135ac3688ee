// tandem-serve with --speculative-config on the demo model and a random DFlash drafter: the
// drafter is loaded, requests are drafted and verified, and /metrics and usage say so; a TP2 group
// (worker headless, drafter on the head) answers as one rank does.
#include <signal.h>

#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "../serve/serve_harness.hpp"
#include "drafter_fixture.hpp"

using namespace tandem::serve_test;
using nlohmann::json;

TEST_CASE("tandem-serve drafts with a DFlash drafter: counters, per-position acceptance and usage") {
  tandem::spec::test::DemoPair pair;  // the same seeded demo target as the server writes
  const json spec = {{"method", "dflash"}, {"model", pair.drafter.string()}, {"num_speculative_tokens", 5}};
  Server s({"--max-model-len", "256", "--max-num-seqs", "4", "--kv-cache-memory", "8MiB", "--speculative-config", spec.dump()});
  CHECK(s.log().find("DFlash drafter") != std::string::npos);

  auto r = post_json(s.port(), "/v1/completions", {{"prompt", "abc def"}, {"max_tokens", 12}, {"ignore_eos", true}, {"temperature", 0}});
  REQUIRE(r.status == 200);
  const json usage = r.json()["usage"];
  CHECK(usage["completion_tokens"] == 12);
  REQUIRE(usage.contains("speculative"));
  CHECK(usage["speculative"]["draft_tokens"].get<int>() > 0);
  CHECK(usage["speculative"]["accepted_tokens"].get<int>() >= 0);

  const std::string m = request(s.port(), "GET", "/metrics").body;
  const double drafts = metric(m, "tandem_spec_decode_drafts_total");
  const double drafted = metric(m, "tandem_spec_decode_draft_tokens_total");
  const double accepted = metric(m, "tandem_spec_decode_accepted_tokens_total");
  CHECK(drafts > 0);
  CHECK(drafted == usage["speculative"]["draft_tokens"].get<double>());
  CHECK(accepted == usage["speculative"]["accepted_tokens"].get<double>());
  CHECK(metric(m, "tandem_spec_decode_mean_acceptance_length") == doctest::Approx(1.0 + accepted / drafts));
  CHECK(metric(m, "tandem_spec_decode_drafted_per_position_total{position=\"0\"}") == drafts);
  CHECK(metric(m, "tandem_spec_decode_accepted_per_position_total{position=\"4\"}") >= 0);
  const double draft_s = metric(m, "tandem_spec_decode_draft_seconds_total"), context_s = metric(m, "tandem_spec_decode_context_seconds_total");
  CHECK(draft_s > 0);
  CHECK(context_s > 0);
  const double verify_s = metric(m, "tandem_spec_decode_verify_seconds_total");
  CHECK(verify_s > 0);
  CHECK(metric(m, "tandem_model_seconds_total") >= draft_s + context_s + verify_s);
}

TEST_CASE("a drafter that does not fit the target stops tandem-serve at start-up with the reason") {
  tandem::spec::test::DemoPair pair;
  auto cfg = json::parse(read_text(pair.drafter / "config.json"));
  cfg["hidden_size"] = 32;
  std::ofstream(pair.drafter / "config.json") << cfg.dump();
  write_demo_model(pair.dir.path() / "served");
  std::string out;
  const json spec = {{"method", "dflash"}, {"model", pair.drafter.string()}, {"num_speculative_tokens", 5}};
  const int rc = run_serve({(pair.dir.path() / "served").string(), "--device", "cpu", "--port", std::to_string(free_port()),
                            "--speculative-config", spec.dump()},
                           out);
  CHECK(rc != 0);
  CHECK(out.find("hidden_size 32 differs from the target's 64") != std::string::npos);
}

TEST_CASE("TP2 with DFlash (drafter on the head rank) answers exactly as one rank without it") {
  tandem::spec::test::DemoPair pair;
  const auto model = pair.dir.path() / "served";
  write_demo_model(model);
  const std::uint16_t api = free_port(), master = free_port(), health = free_port();
  auto common = [&](int rank) {
    return std::vector<std::string>{model.string(), "--device", "cpu", "--tensor-parallel-size", "2", "--nnodes", "2",
                                    "--node-rank", std::to_string(rank), "--master-addr", "127.0.0.1", "--master-port",
                                    std::to_string(master), "--rendezvous-timeout", "20s", "--max-model-len", "512",
                                    "--max-num-seqs", "4", "--kv-cache-memory", "8MiB"};
  };
  auto worker_args = common(1);
  for (const char* a : {"--headless", "--host", "127.0.0.2", "--port"}) worker_args.push_back(a);
  worker_args.push_back(std::to_string(health));
  const pid_t worker = spawn_serve(worker_args, pair.dir.path() / "worker.log");
  auto head_args = common(0);
  const json spec = {{"method", "dflash"}, {"model", pair.drafter.string()}, {"num_speculative_tokens", 6}};
  for (const std::string& a : std::vector<std::string>{"--host", "127.0.0.1", "--port", std::to_string(api), "--speculative-config", spec.dump()})
    head_args.push_back(a);
  const pid_t head = spawn_serve(head_args, pair.dir.path() / "head.log");
  auto up = [&] {
    try {
      return request(api, "GET", "/health").status == 200;
    } catch (const std::exception&) {
      return false;
    }
  };
  for (int i = 0; i < 600 && !up(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE_MESSAGE(up(), read_text(pair.dir.path() / "head.log") << read_text(pair.dir.path() / "worker.log"));

  Server one({"--max-model-len", "512", "--max-num-seqs", "4", "--kv-cache-memory", "8MiB"});
  for (const std::string prompt : {"Hello there", "{\"json\": [1, 2, 3]}", "def f(x):"}) {
    const json body = {{"prompt", prompt}, {"max_tokens", 16}, {"ignore_eos", true}, {"temperature", 0}};
    const Reply tp2 = post_json(api, "/v1/completions", body), tp1 = post_json(one.port(), "/v1/completions", body);
    REQUIRE(tp2.status == 200);
    CHECK(tp2.json()["choices"][0]["text"] == tp1.json()["choices"][0]["text"]);
  }
  // The first request drafts (a random drafter is then known to be worthless, and later requests
  // start from that), so the verify forwards with several logit rows ran on both ranks.
  CHECK(metric(request(api, "GET", "/metrics").body, "tandem_spec_decode_drafts_total") > 0);
  kill(head, SIGTERM);
  CHECK(wait_exit(head, 10000) == 0);
  CHECK(wait_exit(worker, 10000) == 0);
}
