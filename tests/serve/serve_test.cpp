// tandem-serve end to end: the built binary on the demo model, driven over real HTTP.
#include <doctest/doctest.h>

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
#include <boost/asio.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "serve_harness.hpp"

using namespace tandem::serve_test;
using nlohmann::json;

namespace {

// One server for the cases that only talk to it (start-up is the slow part). No reasoning parser:
// with it, streamed and whole answers may legitimately split random text differently.
Server& shared() {
  static std::unique_ptr<Server> s;
  if (!s)
    s = std::make_unique<Server>(std::vector<std::string>{"--served-model-name", "tiny-glm", "--max-model-len", "512",
                                                          "--max-num-seqs", "4", "--kv-cache-memory", "8MiB",
                                                          "--enable-auto-tool-choice", "--tool-call-parser", "glm47"});
  return *s;
}

json chat_body(int max_tokens, bool stream) {
  return {{"model", "tiny-glm"},
          {"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hello there"}}}},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"stream", stream}};
}

// Streamed chat text, checking the SSE framing: role first, one finish_reason, [DONE] last.
struct Streamed {
  std::string content;
  std::string finish_reason;
  json usage;
};
Streamed read_stream(const Reply& r) {
  REQUIRE(r.status == 200);
  auto events = sse_events(r.body);
  REQUIRE(events.size() >= 3);
  CHECK(events.back() == "[DONE]");
  Streamed s;
  const json first = json::parse(events.front());
  CHECK(first["object"] == "chat.completion.chunk");
  CHECK(first["choices"][0]["delta"]["role"] == "assistant");
  for (std::size_t i = 1; i + 1 < events.size(); ++i) {
    const json c = json::parse(events[i]);
    if (c.contains("usage") && c["choices"].empty()) {
      s.usage = c["usage"];
      continue;
    }
    const auto& ch = c["choices"][0];
    if (ch["delta"].contains("content")) s.content += ch["delta"]["content"].get<std::string>();
    if (!ch["finish_reason"].is_null()) {
      CHECK(s.finish_reason.empty());
      s.finish_reason = ch["finish_reason"].get<std::string>();
    }
  }
  return s;
}

std::string metrics_text() { return request(shared().port(), "GET", "/metrics").body; }

}  // namespace

TEST_CASE("health and models") {
  auto h = request(shared().port(), "GET", "/health");
  CHECK(h.status == 200);
  // Where start-up time went, in the order it went there (the bind report charts it).
  const auto startup = h.json()["startup"];
  std::vector<std::string> order;
  for (const auto& p : startup["phases"]) order.push_back(p["phase"].get<std::string>());
  CHECK(order == std::vector<std::string>{"weights_loaded", "drafter_loaded", "kv_pool_sized", "graphs_captured", "ready"});
  for (const auto& p : startup["phases"]) {
    if (p["phase"] == "graphs_captured" || p["phase"] == "drafter_loaded") {
      CHECK(p["status"] == "n/a");
      CHECK_FALSE(p["detail"].get<std::string>().empty());
    } else {
      CHECK(p["status"] == "done");
      CHECK(p["ms"].get<long long>() >= 0);
      CHECK(p["at_ms"].get<long long>() >= startup["started_at_ms"].get<long long>());
    }
  }
  CHECK(startup["total_ms"].get<long long>() >= 0);
  auto m = request(shared().port(), "GET", "/v1/models");
  REQUIRE(m.status == 200);
  CHECK(m.json()["data"][0]["id"] == "tiny-glm");
  CHECK(m.json()["data"][0]["max_model_len"] == 512);
}

TEST_CASE("chat: non-streaming and streaming give the same greedy text; usage adds up") {
  auto r = post_json(shared().port(), "/v1/chat/completions", chat_body(24, false));
  REQUIRE_MESSAGE(r.status == 200, r.body);
  const json j = r.json();
  CHECK(j["object"] == "chat.completion");
  CHECK(j["model"] == "tiny-glm");
  const auto& msg = j["choices"][0]["message"];
  CHECK(msg["role"] == "assistant");
  const std::string text = msg["content"].get<std::string>();
  const std::string finish = j["choices"][0]["finish_reason"].get<std::string>();
  CHECK((finish == "stop" || finish == "length"));
  const auto& u = j["usage"];
  CHECK(u["prompt_tokens"].get<int>() > 5);
  CHECK(u["completion_tokens"].get<int>() >= 1);
  CHECK(u["completion_tokens"].get<int>() <= 24);
  CHECK(u["total_tokens"] == u["prompt_tokens"].get<int>() + u["completion_tokens"].get<int>());

  json sb = chat_body(24, true);
  sb["stream_options"] = {{"include_usage", true}};
  auto s = read_stream(post_json(shared().port(), "/v1/chat/completions", sb));
  CHECK(s.content == text);
  CHECK(s.finish_reason == finish);
  CHECK(s.usage == u);
}

TEST_CASE("chat: a stop string cuts the text there, finish_reason stop") {
  auto base = post_json(shared().port(), "/v1/chat/completions", chat_body(24, false)).json();
  const std::string text = base["choices"][0]["message"]["content"].get<std::string>();
  // An ASCII character from the middle of the greedy text is a stop string that must hit.
  std::size_t at = std::string::npos;
  for (std::size_t i = 2; i < text.size(); ++i)
    if (static_cast<unsigned char>(text[i]) < 0x80 && text[i] != ' ') {
      at = i;
      break;
    }
  if (at == std::string::npos) return;  // nothing usable in this text; covered by tests/api
  const std::string stop(1, text[at]);
  json b = chat_body(24, false);
  b["stop"] = {stop};
  auto r = post_json(shared().port(), "/v1/chat/completions", b).json();
  CHECK(r["choices"][0]["message"]["content"] == text.substr(0, text.find(stop)));
  CHECK(r["choices"][0]["finish_reason"] == "stop");
  b["stream"] = true;
  auto s = read_stream(post_json(shared().port(), "/v1/chat/completions", b));
  CHECK(s.content == text.substr(0, text.find(stop)));
  CHECK(s.finish_reason == "stop");
}

TEST_CASE("completions: string prompt, token ids, echo, streaming") {
  const int port = shared().port();
  auto r = post_json(static_cast<std::uint16_t>(port), "/v1/completions",
                     {{"prompt", "Once upon"}, {"max_tokens", 8}, {"temperature", 0}, {"echo", true}, {"ignore_eos", true}});
  REQUIRE_MESSAGE(r.status == 200, r.body);
  const json j = r.json();
  CHECK(j["object"] == "text_completion");
  const std::string text = j["choices"][0]["text"].get<std::string>();
  CHECK(text.rfind("Once upon", 0) == 0);
  CHECK(j["usage"]["completion_tokens"] == 8);
  CHECK(j["choices"][0]["finish_reason"] == "length");

  auto ids = post_json(static_cast<std::uint16_t>(port), "/v1/completions", {{"prompt", {10, 20, 30}}, {"max_tokens", 3}, {"ignore_eos", true}});
  REQUIRE_MESSAGE(ids.status == 200, ids.body);
  CHECK(ids.json()["usage"]["prompt_tokens"] == 3);

  auto s = post_json(static_cast<std::uint16_t>(port), "/v1/completions",
                     {{"prompt", "Once upon"}, {"max_tokens", 8}, {"temperature", 0}, {"echo", true}, {"ignore_eos", true}, {"stream", true}});
  REQUIRE(s.status == 200);
  auto events = sse_events(s.body);
  REQUIRE(events.size() >= 2);
  CHECK(events.back() == "[DONE]");
  std::string streamed;
  for (std::size_t i = 0; i + 1 < events.size(); ++i) streamed += json::parse(events[i])["choices"][0]["text"].get<std::string>();
  CHECK(streamed == text);
}

TEST_CASE("errors in OpenAI's shape") {
  const auto port = shared().port();
  auto bad_json = request(port, "POST", "/v1/chat/completions", "{not json");
  CHECK(bad_json.status == 400);
  CHECK(bad_json.json()["error"]["type"] == "invalid_request_error");

  json hot = chat_body(4, false);
  hot["temperature"] = 5;
  auto t = post_json(port, "/v1/chat/completions", hot);
  CHECK(t.status == 400);
  CHECK(t.json()["error"]["param"] == "temperature");

  std::string long_text;
  for (int i = 0; i < 700; ++i) long_text += "word ";
  json big = chat_body(4, false);
  big["messages"] = {{{"role", "user"}, {"content", long_text}}};
  auto o = post_json(port, "/v1/chat/completions", big);
  CHECK(o.status == 400);
  CHECK(o.json()["error"]["message"].get<std::string>().find("maximum context length is 512") != std::string::npos);
  auto o2 = post_json(port, "/v1/completions", {{"prompt", long_text}, {"stream", true}});
  CHECK(o2.status == 400);

  json other = chat_body(4, false);
  other["model"] = "gpt-4";
  auto nf = post_json(port, "/v1/chat/completions", other);
  CHECK(nf.status == 404);
  CHECK(nf.json()["error"]["param"] == "model");

  CHECK(request(port, "GET", "/v1/chat/completions").status == 405);
  CHECK(request(port, "POST", "/v1/embeddings", "{}").status == 404);
  auto no_msgs = post_json(port, "/v1/chat/completions", {{"messages", json::array()}});
  CHECK(no_msgs.status == 400);
  CHECK(no_msgs.json()["error"]["param"] == "messages");
  // Still serving after all of that.
  CHECK(request(port, "GET", "/health").status == 200);
}

TEST_CASE("metrics: counters move, gauges settle, speculative counters declared") {
  const std::string before = metrics_text();
  auto r = post_json(shared().port(), "/v1/completions", {{"prompt", "abc"}, {"max_tokens", 5}, {"ignore_eos", true}});
  REQUIRE(r.status == 200);
  const std::string after = metrics_text();
  CHECK(metric(after, "tandem_generation_tokens_total") >= metric(before, "tandem_generation_tokens_total") + 5);
  CHECK(metric(after, "tandem_prompt_tokens_total") > metric(before, "tandem_prompt_tokens_total"));
  CHECK(metric(after, "tandem_requests_total{outcome=\"length\"}") == metric(before, "tandem_requests_total{outcome=\"length\"}") + 1);
  CHECK(metric(after, "tandem_requests_running") == 0);
  CHECK(metric(after, "tandem_kv_blocks_capacity") > 0);
  CHECK(metric(after, "tandem_kv_usage_ratio") >= 0);
  CHECK(metric(after, "tandem_preemptions_total") >= 0);
  CHECK(metric(after, "tandem_prefix_cache_hit_tokens_total") >= 0);
  CHECK(metric(after, "tandem_spec_decode_draft_tokens_total") == 0);
  CHECK(metric(after, "tandem_spec_decode_accepted_tokens_total") == 0);
  CHECK(metric(after, "tandem_requests_total{outcome=\"rejected\"}") >= 0);
}

TEST_CASE("a client that disconnects mid-stream cancels its request and frees its blocks") {
  namespace asio = boost::asio;
  const auto port = shared().port();
  const double aborts = metric(metrics_text(), "tandem_requests_total{outcome=\"abort\"}");
  {
    asio::io_context io;
    asio::ip::tcp::socket sock(io);
    sock.connect({asio::ip::make_address("127.0.0.1"), port});
    const std::string body = json{{"prompt", "tell me everything"}, {"max_tokens", 480}, {"ignore_eos", true},
                                  {"stream", true}, {"prefix_cache", false}}.dump();
    const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body;
    asio::write(sock, asio::buffer(req));
    std::string got;
    char buf[4096];
    while (got.find("\"text\"") == std::string::npos) got.append(buf, sock.read_some(asio::buffer(buf)));
    CHECK(metric(metrics_text(), "tandem_requests_running") == 1);
    sock.close();
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::string m;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    m = metrics_text();
  } while (metric(m, "tandem_requests_running") != 0 && std::chrono::steady_clock::now() < deadline);
  CHECK(metric(m, "tandem_requests_running") == 0);
  CHECK(metric(m, "tandem_kv_blocks_used") == 0);
  CHECK(metric(m, "tandem_requests_total{outcome=\"abort\"}") == aborts + 1);
}

TEST_CASE("32 concurrent streams on --max-num-seqs 4 all complete") {
  const auto port = shared().port();
  std::atomic<int> complete{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 32; ++i) {
    clients.emplace_back([&, i] {
      json b = {{"messages", {{{"role", "user"}, {"content", "request " + std::to_string(i)}}}},
                {"max_tokens", 12},
                {"temperature", 0.8},
                {"seed", i},
                {"stream", true}};
      auto r = post_json(port, "/v1/chat/completions", b);
      if (r.status != 200) return;
      auto events = sse_events(r.body);
      if (events.empty() || events.back() != "[DONE]") return;
      const json last = json::parse(events[events.size() - 2]);
      if (!last["choices"][0]["finish_reason"].is_null()) ++complete;
    });
  }
  for (auto& t : clients) t.join();
  CHECK(complete == 32);
  CHECK(metric(metrics_text(), "tandem_requests_running") == 0);
  CHECK(metric(metrics_text(), "tandem_requests_waiting") == 0);
}

TEST_CASE("start-up: the KV pool line, enable_thinking and clean SIGTERM shutdown") {
  Server s({"--max-model-len", "256", "--kv-cache-memory", "2MiB", "--reasoning-parser", "glm45",
            "--default-chat-template-kwargs", R"({"enable_thinking": false})"});
  CHECK(s.log().find("KV pool: ") != std::string::npos);
  CHECK(s.log().find("requests at max-model-len 256") != std::string::npos);
  // With thinking off the template closes an empty <think></think> for the model: one more
  // prompt token... exactly what the request's own kwarg undoes.
  json b = chat_body(1, false);
  b.erase("model");
  auto off = post_json(s.port(), "/v1/chat/completions", b).json();
  b["chat_template_kwargs"] = {{"enable_thinking", true}};
  auto on = post_json(s.port(), "/v1/chat/completions", b).json();
  CHECK(off["usage"]["prompt_tokens"].get<int>() > on["usage"]["prompt_tokens"].get<int>());
  CHECK(s.stop() == 0);
  CHECK(s.log().find("shutting down on SIGTERM") != std::string::npos);
}

TEST_CASE("refusals at start: CUDA, tensor parallelism, a missing model; the demo model writer") {
  std::string out;
  CHECK(run_serve({"/nonexistent", "--device", "cuda"}, out) == 1);
  // Without nvcc at build time it says so; with the CUDA model built it tries the GPU and says why not.
  CHECK((out.find("built without the CUDA back end") != std::string::npos || out.find("onto the GPU") != std::string::npos));
  CHECK(run_serve({"/nonexistent", "--device", "cpu", "--tensor-parallel-size", "2"}, out) == 1);
  CHECK(out.find("this build runs one rank per process") != std::string::npos);
  CHECK(run_serve({"/nonexistent/model", "--device", "cpu"}, out) == 1);
  CHECK(out.find("loading the model from /nonexistent/model") != std::string::npos);
  CHECK(run_serve({"--help"}, out) == 0);
  CHECK(out.find("gibberish") != std::string::npos);
}

TEST_CASE("hostile requests are 4xx in OpenAI's shape and never take the server down") {
  const auto port = shared().port();
  auto expect_400 = [&](const std::string& target, const std::string& body, const std::string& needle) {
    CAPTURE(body.substr(0, 80));
    const Reply r = request(port, "POST", target, body);
    CHECK(r.status == 400);
    const json e = json::parse(r.body, nullptr, false);
    REQUIRE(e.is_object());
    CHECK(e["error"]["type"] == "invalid_request_error");
    CHECK(e["error"]["message"].get<std::string>().find(needle) != std::string::npos);
  };
  const std::string chat_path = "/v1/chat/completions";
  // Invalid UTF-8: named with its byte and its offset in the body.
  expect_400(chat_path, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\xff\"}]}", "byte 0xFF at offset 41");
  expect_400("/v1/completions", "{\"prompt\":\"\xc3\x28\"}", "not valid UTF-8");
  // Numbers no double holds.
  expect_400(chat_path, R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":1e999})", "out of range");
  expect_400(chat_path, R"({"messages":[{"role":"user","content":"hi"}],"temperature":1e400})", "out of range");
  // Deep nesting, in a field nothing else checks.
  expect_400(chat_path, R"({"messages":[{"role":"user","content":"hi","name":)" + std::string(100000, '[') + "}]}",
             "nests deeper than 128");
  // Unknown parameters and unimplemented ones are named.
  expect_400(chat_path, R"({"messages":[{"role":"user","content":"hi"}],"max_tokns":4})", "unknown parameter 'max_tokns'");
  expect_400(chat_path, R"({"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":5})", "not supported");
  expect_400(chat_path, R"({"messages":[{"role":"user","content":"hi"}],"logit_bias":{"abc":1}})", "not a token id");
  // A tool schema that is not JSON Schema, under tool_choice auto.
  expect_400(chat_path,
             R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f",)"
             R"("parameters":{"type":"object","properties":{"x":{"type":"nonsense"}}}}}]})",
             "unknown type \"nonsense\"");
  // A path with invalid UTF-8 is refused (its echo in the error is made valid), not a crash.
  const Reply nf = request(port, "GET", "/v1/\xff\xfe");
  CHECK(nf.status >= 400);
  CHECK(nf.status < 500);
  CHECK(json::parse(nf.body, nullptr, false).is_object());
  // 300 random byte strings, as bodies of both endpoints.
  std::uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < 300; ++i) {
    std::string body = R"({"messages":[{"role":"user","content":")";
    const int n = 1 + static_cast<int>(x % 40);
    for (int k = 0; k < n; ++k) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      body += static_cast<char>(x & 0xff);
    }
    const Reply r = request(port, "POST", i % 2 ? chat_path : "/v1/completions", body);
    CHECK(r.status >= 400);
    CHECK(r.status < 500);
  }
  // A tool schema the grammar cannot enforce is still fine under auto (it is never enforced).
  const Reply fine = request(port, "POST", chat_path,
                             R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"tools":[{"type":"function",)"
                             R"("function":{"name":"f","parameters":{"type":"object","properties":{"n":{"type":"integer",)"
                             R"("minimum":1}}}}}]})");
  CHECK(fine.status == 200);
  CHECK(request(port, "GET", "/health").status == 200);
}
