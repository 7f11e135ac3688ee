// tandem-serve with --speculative-config on the demo model and a random DFlash drafter: the
// drafter is loaded, requests are drafted and verified, and /metrics and usage say so.
#include <doctest/doctest.h>

#include <fstream>

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
