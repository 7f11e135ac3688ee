// Two real tandem-serve processes as a TP2 group on loopback (worker on 127.0.0.2 started first,
// headless; head on 127.0.0.1), exactly as two nodes would run them: the same answers as one rank;
// either rank killed ends the other within seconds with a clear error; a rendezvous that cannot
// complete ends at its timeout; ranks that loaded different things refuse each other.
#include <signal.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <thread>

#include "serve_harness.hpp"

using namespace tandem::serve_test;
namespace fs = std::filesystem;

namespace {

constexpr const char* kWorkerHost = "127.0.0.2";

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/tandem-tp-test-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path path;
};

bool healthy(const std::string& host, std::uint16_t port) {
  try {
    return request_at(host, port, "GET", "/health").status == 200;
  } catch (const std::exception&) {
    return false;
  }
}

// A rank process; killed at the end of the test if still running.
struct Rank {
  pid_t pid = -1;
  fs::path log;
  std::string text() const { return read_text(log); }
  ~Rank() {
    if (pid > 0 && wait_exit(pid, 0) == kStillRunning) {
      kill(pid, SIGKILL);
      wait_exit(pid, 5000);
    }
  }
  int wait(int ms) {
    const int rc = wait_exit(pid, ms);
    if (rc != kStillRunning) pid = -1;
    return rc;
  }
};

struct Pair {
  TempDir dir;
  fs::path model = dir.path / "model";
  std::uint16_t api = free_port(), master = free_port(), worker_health = free_port();
  Rank worker, head;

  Pair() { write_demo_model(model); }
  explicit Pair(fs::path model_dir) : model(std::move(model_dir)) {}

  std::vector<std::string> common(int rank, const std::string& timeout = "20s") const {
    return {model.string(), "--device", "cpu", "--tensor-parallel-size", "2", "--nnodes", "2", "--node-rank", std::to_string(rank),
            "--master-addr", "127.0.0.1", "--master-port", std::to_string(master), "--rendezvous-timeout", timeout,
            "--max-model-len", "4096", "--max-num-seqs", "4"};
  }
  void start_worker(std::vector<std::string> extra = {}) {
    auto args = common(1);
    for (auto& a : std::vector<std::string>{"--headless", "--host", kWorkerHost, "--port", std::to_string(worker_health)}) args.push_back(a);
    args.insert(args.end(), extra.begin(), extra.end());
    worker.log = dir.path / "worker.log";
    worker.pid = spawn_serve(args, worker.log);
  }
  void start_head(std::vector<std::string> extra = {}) {
    auto args = common(0);
    for (auto& a : std::vector<std::string>{"--host", "127.0.0.1", "--port", std::to_string(api), "--served-model-name", "tiny-glm"})
      args.push_back(a);
    args.insert(args.end(), extra.begin(), extra.end());
    head.log = dir.path / "head.log";
    head.pid = spawn_serve(args, head.log);
  }
  // Worker first, ready (its /health answers), then the head, serving; `extra` for both ranks.
  void start(const std::vector<std::string>& extra = {}) {
    start_worker(extra);
    wait_until([&] { return healthy(kWorkerHost, worker_health); }, worker, "the worker's /health");
    start_head(extra);
    wait_until([&] { return healthy("127.0.0.1", api); }, head, "the head's /health");
  }
  template <class F>
  void wait_until(F ready, Rank& r, const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!ready()) {
      REQUIRE_MESSAGE(wait_exit(r.pid, 0) == kStillRunning, what << ": the rank exited:\n" << r.text());
      REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline, what << " did not answer within 30 s:\n" << r.text());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
};

nlohmann::json greedy_chat(std::uint16_t port, const std::string& prompt, int max_tokens) {
  const Reply r = post_json(port, "/v1/chat/completions",
                            {{"model", "tiny-glm"},
                             {"messages", {{{"role", "user"}, {"content", prompt}}}},
                             {"temperature", 0},
                             {"max_tokens", max_tokens}});
  REQUIRE_MESSAGE(r.status == 200, r.body);
  return r.json();
}

std::string greedy_completion(std::uint16_t port, const std::string& prompt, int max_tokens) {
  const Reply r = post_json(port, "/v1/completions",
                            {{"model", "tiny-glm"}, {"prompt", prompt}, {"temperature", 0}, {"max_tokens", max_tokens}});
  REQUIRE_MESSAGE(r.status == 200, r.body);
  return r.json()["choices"][0]["text"].get<std::string>();
}

double metric(std::uint16_t port, const std::string& name) {
  const std::string text = request(port, "GET", "/metrics").body;
  const auto at = text.find("\n" + name + " ");
  REQUIRE_MESSAGE(at != std::string::npos, name << " not in /metrics");
  return std::stod(text.substr(at + name.size() + 2));
}

}  // namespace

TEST_CASE("TP2 with a DFlash drafter (the repository's trained pair) answers as one rank without one, and drafts are accepted") {
  const fs::path pair = fs::path(TANDEM_SOURCE_DIR) / "models" / "dflash-pair";
  Pair p(pair / "target");
  p.start({"--speculative-config",
           R"({"method":"dflash","model":")" + (pair / "drafter").string() + R"(","num_speculative_tokens":7})"});
  Server one({"--max-model-len", "512", "--max-num-seqs", "4", "--served-model-name", "tiny-glm"}, pair / "target");
  for (const std::string prompt : {"#include <stdio.h>\n#include <stdlib.h>\n\nint main(int argc, char **argv)\n{\n",
                                   "{\"name\": \"tandem\", \"version\": \"1.0.0\", \"description\": ",
                                   "The configuration file is read at start-up. "})
    CHECK(greedy_completion(p.api, prompt, 48) == greedy_completion(one.port(), prompt, 48));
  CHECK(metric(p.api, "tandem_spec_decode_draft_tokens_total") > 0);
  CHECK(metric(p.api, "tandem_spec_decode_accepted_tokens_total") > 0);  // a trained drafter is right sometimes
  CHECK(p.head.text().find("DFlash drafter") != std::string::npos);
}

TEST_CASE("TP2 over two processes answers exactly as one rank, and stops cleanly with its head") {
  Pair p;
  p.start();
  const auto health = request_at(kWorkerHost, p.worker_health, "GET", "/health").json();
  CHECK(health["role"] == "worker");
  CHECK(health["rank"] == 1);
  CHECK(health["phase"] == "serving");
  CHECK(request_at(kWorkerHost, p.worker_health, "GET", "/v1/models").status == 404);

  Server one({"--max-model-len", "512", "--max-num-seqs", "4", "--served-model-name", "tiny-glm"});  // same seeded demo weights, one rank
  for (const std::string prompt : {"Hello there", "Write a haiku about paged attention.", "{\"json\": [1, 2, 3]}"}) {
    const auto tp2 = greedy_chat(p.api, prompt, 24);
    const auto tp1 = greedy_chat(one.port(), prompt, 24);
    CHECK(tp2["choices"][0]["message"] == tp1["choices"][0]["message"]);
    CHECK(tp2["usage"] == tp1["usage"]);
  }
  // Concurrent requests exercise batching with the worker in step.
  std::vector<std::future<nlohmann::json>> many;
  for (int i = 0; i < 6; ++i) many.push_back(std::async(std::launch::async, [&, i] { return greedy_chat(p.api, "request " + std::to_string(i), 12); }));
  for (int i = 0; i < 6; ++i)
    CHECK(many[static_cast<size_t>(i)].get()["choices"][0]["message"] ==
          greedy_chat(one.port(), "request " + std::to_string(i), 12)["choices"][0]["message"]);

  CHECK(p.head.text().find("rendezvous: rank 1 joined") != std::string::npos);
  CHECK(p.worker.text().find("KV pool:") != std::string::npos);
  kill(p.head.pid, SIGTERM);
  CHECK(p.head.wait(10000) == 0);
  CHECK(p.worker.wait(10000) == 0);
  CHECK(p.worker.text().find("rank 0 is shutting down") != std::string::npos);
}

TEST_CASE("killing the worker mid-decode ends the head within seconds, with the reason") {
  Pair p;
  p.start();
  auto stream = std::async(std::launch::async, [&] {
    try {
      return post_json(p.api, "/v1/completions",
                       {{"model", "tiny-glm"}, {"prompt", "count"}, {"max_tokens", 4000}, {"ignore_eos", true}, {"stream", true}})
          .body;
    } catch (const std::exception& e) {
      return std::string("exception: ") + e.what();
    }
  });
  // 4000 tokens take the CPU ranks seconds; the worker dies well before the end.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(p.worker.pid, SIGKILL);
  p.worker.wait(5000);
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = p.head.wait(30000);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(rc == 1);
  CHECK(waited < 10.0);
  const std::string log = p.head.text();
  CHECK_MESSAGE(log.find("tensor-parallel group") != std::string::npos, log);
  CHECK(log.find("shutting down") != std::string::npos);
  const std::string body = stream.get();
  // The stream does not pretend to finish: it ends with the error as an event (then [DONE], as
  // vLLM does), or is cut when the head exits first; never with a finish_reason.
  const bool error_event = body.find("the engine stopped") != std::string::npos;
  const bool cut = body.find("[DONE]") == std::string::npos;
  CHECK_MESSAGE((error_event || cut), body.substr(body.size() > 600 ? body.size() - 600 : 0));
  CHECK(body.find("\"finish_reason\":\"length\"") == std::string::npos);
}

TEST_CASE("killing the head ends the worker within seconds, with the reason") {
  Pair p;
  p.start();
  greedy_chat(p.api, "warm up", 4);
  kill(p.head.pid, SIGKILL);
  p.head.wait(5000);
  CHECK(p.worker.wait(15000) == 1);
  CHECK_MESSAGE(p.worker.text().find("lost rank 0") != std::string::npos, p.worker.text());
}

TEST_CASE("a rendezvous that cannot complete ends at its timeout on either side") {
  SUBCASE("a worker whose head never comes") {
    Pair p;
    auto args = p.common(1, "1s");
    for (auto& a : std::vector<std::string>{"--headless", "--host", kWorkerHost, "--port", std::to_string(p.worker_health)}) args.push_back(a);
    p.worker.log = p.dir.path / "worker.log";
    p.worker.pid = spawn_serve(args, p.worker.log);
    CHECK(p.worker.wait(15000) == 1);
    CHECK_MESSAGE(p.worker.text().find("rendezvous timed out after 1 s") != std::string::npos, p.worker.text());
  }
  SUBCASE("a head whose worker never comes") {
    Pair p;
    auto args = p.common(0, "1s");
    for (auto& a : std::vector<std::string>{"--host", "127.0.0.1", "--port", std::to_string(p.api)}) args.push_back(a);
    p.head.log = p.dir.path / "head.log";
    p.head.pid = spawn_serve(args, p.head.log);
    CHECK(p.head.wait(15000) == 1);
    CHECK_MESSAGE(p.head.text().find("rank(s) 1 never joined") != std::string::npos, p.head.text());
  }
}

TEST_CASE("ranks started with different KV geometry refuse each other") {
  Pair p;
  p.start_worker({"--block-size", "32"});
  p.wait_until([&] { return healthy(kWorkerHost, p.worker_health); }, p.worker, "the worker's /health");
  p.start_head();
  CHECK(p.head.wait(15000) == 1);
  CHECK(p.worker.wait(15000) == 1);
  CHECK_MESSAGE(p.head.text().find("loaded something else") != std::string::npos, p.head.text());
  CHECK_MESSAGE(p.worker.text().find("refused") != std::string::npos, p.worker.text());
}
