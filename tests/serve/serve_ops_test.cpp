// What an operator's tooling reads from a live tandem-serve: /metrics through promtool, the
// per-request histograms (tandem_ and vllm: names), /version, /tokenize and /detokenize, and the
// start-up notes for vLLM flags that change nothing.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "serve_harness.hpp"

using namespace tandem::serve_test;
using nlohmann::json;

namespace {

Server& shared() {
  static std::unique_ptr<Server> s;
  if (!s)
    s = std::make_unique<Server>(std::vector<std::string>{"--served-model-name", "tiny-glm", "--max-model-len", "512",
                                                          "--kv-cache-memory", "8MiB", "--moe-backend", "marlin",
                                                          "--trust-remote-code"});
  return *s;
}

std::string scrape(const std::string& path) {
  const Reply r = request(shared().port(), "GET", path);
  REQUIRE(r.status == 200);
  return r.body;
}

// `promtool check metrics` on `text`: its exit status, and what it printed. -1: no promtool.
int promtool(const std::string& text, std::string& output) {
  const std::string tool = TANDEM_PROMTOOL;
  if (tool.empty() || !std::filesystem::exists(tool)) return -1;
  const auto file = shared().dir() / "scrape.prom";
  std::ofstream(file, std::ios::binary) << text;
  FILE* p = ::popen((tool + " check metrics < '" + file.string() + "' 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) output.append(buf, n);
  const int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

// Every `name_bucket{...le="X"}` value in order, for one series (labels before le, as rendered).
std::vector<double> buckets(const std::string& text, const std::string& prefix) {
  std::vector<double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) out.push_back(std::stod(line.substr(line.rfind(' ') + 1)));
  return out;
}

}  // namespace

TEST_CASE("GET /metrics passes promtool check metrics, after traffic too") {
  auto r = post_json(shared().port(), "/v1/completions", {{"prompt", "abc"}, {"max_tokens", 3}});
  REQUIRE(r.status == 200);
  std::string out;
  const int rc = promtool(scrape("/metrics"), out);
  if (rc == -1) {
    MESSAGE("promtool not found (Debian package prometheus; deploy/setup.sh installs it): lint not checked");
    return;
  }
  CHECK_MESSAGE(rc == 0, out);
  CHECK(out.empty());
}

TEST_CASE("GET /metrics/vllm fails promtool only on the ':' that vLLM's own names have") {
  std::string out;
  const int rc = promtool(scrape("/metrics/vllm"), out);
  if (rc == -1) {
    MESSAGE("promtool not found (Debian package prometheus): lint not checked");
    return;
  }
  std::istringstream in(out);
  int lines = 0;
  for (std::string line; std::getline(in, line); ++lines)
    CHECK_MESSAGE(line.find("metric names should not contain ':'") != std::string::npos, line);
  CHECK(lines > 0);  // the vllm: families are there
}

TEST_CASE("one request moves each per-request histogram, under both names") {
  const std::string vllm_labels = "{engine=\"0\",model_name=\"tiny-glm\"}";
  const std::string t0 = scrape("/metrics"), v0 = scrape("/metrics/vllm");
  auto r = post_json(shared().port(), "/v1/completions",
                     {{"prompt", "count me"}, {"max_tokens", 6}, {"ignore_eos", true}, {"temperature", 0}});
  REQUIRE(r.status == 200);
  const int prompt_tokens = r.json()["usage"]["prompt_tokens"].get<int>();
  const std::string t1 = scrape("/metrics"), v1 = scrape("/metrics/vllm");

  for (const char* h : {"time_to_first_token_seconds", "e2e_request_latency_seconds", "request_queue_time_seconds",
                        "request_prompt_tokens", "request_generation_tokens"}) {
    CAPTURE(h);
    const std::string t = std::string("tandem_") + h, v = std::string("vllm:") + h;
    CHECK(metric(t1, t + "_count") == metric(t0, t + "_count") + 1);
    CHECK(metric(v1, v + "_count" + vllm_labels) == metric(v0, v + "_count" + vllm_labels) + 1);
    // Buckets are cumulative and end at +Inf == _count.
    const auto b = buckets(t1, t + "_bucket{");
    REQUIRE(b.size() > 1);
    for (std::size_t i = 1; i < b.size(); ++i) CHECK(b[i] >= b[i - 1]);
    CHECK(b.back() == metric(t1, t + "_count"));
    CHECK(metric(t1, t + "_bucket{le=\"+Inf\"}") == metric(t1, t + "_count"));
  }
  CHECK(metric(t1, "tandem_time_to_first_token_seconds_sum") > metric(t0, "tandem_time_to_first_token_seconds_sum"));
  CHECK(metric(t1, "tandem_e2e_request_latency_seconds_sum") > metric(t0, "tandem_e2e_request_latency_seconds_sum"));
  CHECK(metric(t1, "tandem_request_prompt_tokens_sum") == metric(t0, "tandem_request_prompt_tokens_sum") + prompt_tokens);
  CHECK(metric(t1, "tandem_request_generation_tokens_sum") == metric(t0, "tandem_request_generation_tokens_sum") + 6);
  // Six tokens from six engine steps (no drafter): five intervals between them.
  CHECK(metric(t1, "tandem_inter_token_latency_seconds_count") == metric(t0, "tandem_inter_token_latency_seconds_count") + 5);
  for (const char* v : {"vllm:inter_token_latency_seconds_count", "vllm:time_per_output_token_seconds_count"})
    CHECK(metric(v1, v + vllm_labels) == metric(v0, v + vllm_labels) + 5);
  // vLLM's bucket bounds, written as its Python client writes them.
  CHECK(metric(t1, "tandem_time_to_first_token_seconds_bucket{le=\"2560.0\"}") >= 1);
  CHECK(metric(v1, "vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"7680.0\",model_name=\"tiny-glm\"}") >= 1);
  CHECK(metric(v1, "vllm:request_success_total{engine=\"0\",finished_reason=\"length\",model_name=\"tiny-glm\"}") >= 1);
  CHECK(metric(v1, "vllm:num_requests_running" + vllm_labels) == 0);
  CHECK(metric(v1, "vllm:kv_cache_usage_perc" + vllm_labels) >= 0);
  CHECK(metric(v1, "vllm:gpu_cache_usage_perc" + vllm_labels) == metric(v1, "vllm:kv_cache_usage_perc" + vllm_labels));
  CHECK(metric(t1, "tandem_kv_blocks_capacity") > 0);
}

TEST_CASE("GET /version answers like vLLM's, with the commit") {
  const Reply r = request(shared().port(), "GET", "/version");
  REQUIRE(r.status == 200);
  const json j = r.json();
  CHECK(j["version"].is_string());
  CHECK(!j["version"].get<std::string>().empty());
  CHECK(j["commit"].is_string());
}

TEST_CASE("POST /tokenize: a prompt, a chat, and what /detokenize makes of the ids") {
  const auto port = shared().port();
  auto r = post_json(port, "/tokenize", {{"prompt", "hello world"}});
  REQUIRE(r.status == 200);
  const json t = r.json();
  CHECK(t["max_model_len"] == 512);
  REQUIRE(t["tokens"].is_array());
  CHECK(t["count"] == t["tokens"].size());
  CHECK(t["token_strs"].is_null());
  // The same count a completion is charged for.
  auto c = post_json(port, "/v1/completions", {{"prompt", "hello world"}, {"max_tokens", 1}});
  REQUIRE(c.status == 200);
  CHECK(c.json()["usage"]["prompt_tokens"] == t["count"]);

  // Special tokens stay in the text (as vLLM's detokenize keeps them): the prompt's prefix here.
  auto d = post_json(port, "/detokenize", {{"tokens", t["tokens"]}});
  REQUIRE(d.status == 200);
  const std::string text = d.json()["prompt"].get<std::string>();
  CHECK(text.size() > std::string("hello world").size());
  CHECK(text.substr(text.size() - 11) == "hello world");
  auto plain = post_json(port, "/tokenize", {{"prompt", "hello world"}, {"add_special_tokens", false}});
  REQUIRE(plain.status == 200);
  CHECK(plain.json()["count"] < t["count"]);
  auto back = post_json(port, "/detokenize", {{"tokens", plain.json()["tokens"]}});
  REQUIRE(back.status == 200);
  CHECK(back.json()["prompt"] == "hello world");

  auto strs = post_json(port, "/tokenize", {{"prompt", "hello"}, {"return_token_strs", true}});
  REQUIRE(strs.status == 200);
  CHECK(strs.json()["token_strs"].size() == strs.json()["tokens"].size());

  // A chat is tokenized through the chat template, as a chat completion would be.
  const json messages = {{{"role", "user"}, {"content", "Hello there"}}};
  auto chat = post_json(port, "/tokenize", {{"messages", messages}});
  REQUIRE(chat.status == 200);
  auto cc = post_json(port, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 1}});
  REQUIRE(cc.status == 200);
  CHECK(cc.json()["usage"]["prompt_tokens"] == chat.json()["count"]);
}

TEST_CASE("/tokenize and /detokenize refuse bad input with OpenAI-shaped 400s") {
  const auto port = shared().port();
  const auto refused = [&](const char* path, const json& body, const char* param, const char* words) {
    CAPTURE(body.dump());
    const Reply r = post_json(port, path, body);
    CHECK(r.status == 400);
    const json e = r.json()["error"];
    CHECK(e["type"] == "invalid_request_error");
    CHECK(e["param"] == param);
    CHECK(e["message"].get<std::string>().find(words) != std::string::npos);
  };
  refused("/tokenize", json::object(), "prompt", "exactly one of");
  refused("/tokenize", {{"prompt", 5}}, "prompt", "must be a string");
  refused("/tokenize", {{"prompt", "x"}, {"add_special_tokens", "yes"}}, "add_special_tokens", "true or false");
  refused("/tokenize", {{"prompt", "x"}, {"max_tokens", 3}}, "max_tokens", "unknown parameter");
  refused("/tokenize", {{"messages", json::array()}}, "messages", "non-empty list");
  refused("/detokenize", {{"tokens", {1, 999999}}}, "tokens", "outside the vocabulary");
  refused("/detokenize", {{"tokens", {-1}}}, "tokens", "outside the vocabulary");
  refused("/detokenize", {{"tokens", {1, "two"}}}, "tokens", "expected an integer");
  refused("/detokenize", {{"tokens", "1 2"}}, "tokens", "list of token ids");
  CHECK(post_json(port, "/tokenize", {{"prompt", "x"}, {"model", "other"}}).status == 404);
  CHECK(request(port, "GET", "/tokenize").status == 405);
}

TEST_CASE("start-up names the vLLM flags it accepts and ignores") {
  const std::string log = shared().log();
  CHECK(log.find("--moe-backend marlin is accepted for vLLM compatibility and ignored") != std::string::npos);
  CHECK(log.find("--trust-remote-code is accepted for vLLM compatibility and ignored") != std::string::npos);
  CHECK(log.find("tandem-serve " ) != std::string::npos);
  CHECK(log.find("(commit ") != std::string::npos);
}
