// Each gate asks the live endpoint one question and judges the answer. Details quote what came
// back (status, the server's error message, the first characters of the answer), so a failed
// bind report says why without a log search.
#include "gates.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "bench/bench.hpp"
#include "bench/bench_report.hpp"
#include "custom_gates.hpp"
#include "haystack.hpp"
#include "endpoint/http_client.hpp"
#include "endpoint/prometheus_text.hpp"
#include "tandem/url.hpp"
#include "tandem/utf8.hpp"

namespace tandem::gates {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

bool GateReport::passed() const {
  return std::any_of(gates.begin(), gates.end(), [](const GateResult& g) { return !g.skipped; }) &&
         std::all_of(gates.begin(), gates.end(), [](const GateResult& g) { return g.passed || g.skipped; });
}

json GateReport::to_json() const {
  json list = json::array();
  for (const auto& g : gates)
    list.push_back({{"name", g.name}, {"passed", g.passed}, {"skipped", g.skipped}, {"detail", g.detail}, {"seconds", g.seconds},
                    {"evidence", g.evidence}});
  return {{"url", url}, {"passed", passed()}, {"gates", list}};
}

std::string endpoint_url(const Manifest& m) {
  return http_base_url(m.head().address, static_cast<std::uint16_t>(m.engine.serve.port));
}

std::string served_model(const Manifest& m) {
  return m.engine.serve.served_model_name.empty() ? m.engine.model_dir : m.engine.serve.served_model_name;
}

namespace {

// At most n characters, for details and evidence (answers can be long).
// Cut on a character boundary: the evidence is dumped as JSON, which must stay valid UTF-8.
// A reply quoted in a gate's detail: 160 bytes say what went wrong without flooding the report.
std::string clip(const std::string& s, std::size_t n = 160) { return utf8::clip(s, n); }

std::string in_quotes(const std::string& s) { return "\"" + clip(s, 80) + "\""; }

// "HTTP 400: 'tool_choice' ... (param tool_choice)" from an OpenAI error document, else the raw body.
std::string http_failure(const httpc::Reply& r) {
  std::string why;
  try {
    const json j = json::parse(r.body);
    if (j.contains("error") && j["error"].is_object() && j["error"].contains("message"))
      why = j["error"]["message"].get<std::string>();
    else if (j.contains("message") && j["message"].is_string())
      why = j["message"].get<std::string>();
  } catch (const std::exception&) {
  }
  if (why.empty()) why = r.body.empty() ? "(empty body)" : clip(r.body);
  return "HTTP " + std::to_string(r.status) + ": " + why;
}

// The parts of a chat completion the gates judge.
struct Answer {
  json raw;
  std::string content;
  std::string reasoning;
  std::string finish_reason;
  json tool_calls = json::array();
  json usage = json::object();
};

// POST /v1/chat/completions (not streamed). Errors: no reply, a non-200 reply, or a reply that is
// not a chat completion; each says which.
Result<Answer> chat(const httpc::Url& url, const json& body, std::chrono::milliseconds timeout) {
  httpc::Options o;
  o.io_timeout = timeout;
  auto r = httpc::post_json(url, "/v1/chat/completions", body.dump(), o);
  if (!r) return r.error();
  if (r->status != 200) return Error{http_failure(*r)};
  Answer a;
  try {
    a.raw = json::parse(r->body);
  } catch (const std::exception& e) {
    return Error{"HTTP 200 but the body is not JSON (" + std::string(e.what()) + "): " + clip(r->body)};
  }
  if (!a.raw.contains("choices") || !a.raw["choices"].is_array() || a.raw["choices"].empty() ||
      !a.raw["choices"][0].contains("message") || !a.raw["choices"][0]["message"].is_object())
    return Error{"HTTP 200 but no choices[0].message in the reply: " + clip(r->body)};
  const json& ch = a.raw["choices"][0];
  const json& msg = ch["message"];
  if (msg.contains("content") && msg["content"].is_string()) a.content = msg["content"].get<std::string>();
  // vLLM and tandem-serve name it reasoning_content; newer servers also say reasoning.
  for (const char* k : {"reasoning_content", "reasoning"})
    if (a.reasoning.empty() && msg.contains(k) && msg[k].is_string()) a.reasoning = msg[k].get<std::string>();
  if (ch.contains("finish_reason") && ch["finish_reason"].is_string()) a.finish_reason = ch["finish_reason"].get<std::string>();
  if (msg.contains("tool_calls") && msg["tool_calls"].is_array()) a.tool_calls = msg["tool_calls"];
  if (a.raw.contains("usage") && a.raw["usage"].is_object()) a.usage = a.raw["usage"];
  return a;
}

json answer_evidence(const Answer& a) {
  return {{"finish_reason", a.finish_reason}, {"content", clip(a.content, 400)}, {"reasoning", clip(a.reasoning, 400)},
          {"tool_calls", a.tool_calls}, {"usage", a.usage}};
}

int usage_int(const Answer& a, const char* key) {
  return a.usage.contains(key) && a.usage[key].is_number_integer() ? a.usage[key].get<int>() : -1;
}

json user_messages(const std::string& system, const std::string& user) {
  json msgs = json::array();
  if (!system.empty()) msgs.push_back({{"role", "system"}, {"content", system}});
  msgs.push_back({{"role", "user"}, {"content", user}});
  return msgs;
}

class Runner {
 public:
  Runner(const Manifest& m, httpc::Url url, const GateOptions& o) : m_(m), url_(std::move(url)), o_(o) {}

  GateResult health() {
    GateResult g{"health", false, "", 0, json::object()};
    httpc::Options o;
    o.io_timeout = std::chrono::seconds(30);
    auto r = httpc::get(url_, "/health", o);
    if (!r) return fail(g, "GET /health: " + r.error().message);
    g.evidence = {{"status", r->status}, {"body", clip(r->body)}};
    if (r->status != 200) return fail(g, "GET /health answered " + http_failure(*r) + "; expected 200");
    return pass(g, "GET /health answered 200");
  }

  GateResult models() {
    GateResult g{"models", false, "", 0, json::object()};
    const std::string want = served_model(m_);
    httpc::Options o;
    o.io_timeout = std::chrono::seconds(30);
    auto r = httpc::get(url_, "/v1/models", o);
    if (!r) return fail(g, "GET /v1/models: " + r.error().message);
    if (r->status != 200) return fail(g, "GET /v1/models answered " + http_failure(*r));
    std::vector<std::string> ids;
    try {
      const json j = json::parse(r->body);
      if (!j.contains("data") || !j["data"].is_array())
        return fail(g, "GET /v1/models: no 'data' list in the reply: " + clip(r->body));
      for (const auto& d : j["data"])
        if (d.is_object() && d.contains("id") && d["id"].is_string()) ids.push_back(d["id"].get<std::string>());
    } catch (const std::exception& e) {
      return fail(g, "GET /v1/models: the reply is not JSON (" + std::string(e.what()) + ")");
    }
    g.evidence = {{"models", ids}, {"expected", want}};
    if (std::find(ids.begin(), ids.end(), want) == ids.end()) {
      std::string listed;
      for (const auto& id : ids) listed += (listed.empty() ? "" : ", ") + in_quotes(id);
      return fail(g, "GET /v1/models lists " + (listed.empty() ? std::string("no model") : listed) + "; expected " +
                         in_quotes(want) + " (engine.serve.served_model_name)");
    }
    return pass(g, "GET /v1/models lists " + in_quotes(want));
  }

  GateResult chat_gate() {
    GateResult g{"chat", false, "", 0, json::object()};
    const json body{{"model", served_model(m_)},
                    {"messages", user_messages("You are a helpful assistant.",
                                               "What is the capital of France? Answer in one word.")},
                    {"max_tokens", 64},
                    {"temperature", 0}};
    auto a = chat(url_, body, o_.request_timeout);
    if (!a) return fail(g, "chat completion: " + a.error().message);
    g.evidence = answer_evidence(*a);
    if (a->content.empty() && a->reasoning.empty())
      return fail(g, "chat completion came back empty (no content, no reasoning; finish_reason " +
                         in_quotes(a->finish_reason) + ", " + std::to_string(usage_int(*a, "completion_tokens")) +
                         " completion tokens)");
    if (!a->content.empty()) return pass(g, "answered " + in_quotes(a->content) + " (finish_reason " + a->finish_reason + ")");
    return pass(g, "answered with reasoning only " + in_quotes(a->reasoning) + " (finish_reason " + a->finish_reason + ")");
  }

  GateResult tool_call() {
    GateResult g{"tool_call", false, "", 0, json::object()};
    const json tool{{"type", "function"},
                    {"function",
                     {{"name", "get_weather"},
                      {"description", "Get the current weather for a city"},
                      {"parameters",
                       {{"type", "object"},
                        {"properties", {{"city", {{"type", "string"}, {"description", "The city, e.g. Paris"}}}}},
                        {"required", {"city"}}}}}}};
    // A named tool_choice forces the call, so the gate tests parsing, not the model's judgement.
    const json body{{"model", served_model(m_)},
                    {"messages", user_messages("", "What is the weather in Paris right now? Use the get_weather tool.")},
                    {"tools", json::array({tool})},
                    {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}},
                    {"max_tokens", 128},
                    {"temperature", 0}};
    auto a = chat(url_, body, o_.request_timeout);
    if (!a) return fail(g, "chat completion with tool_choice get_weather: " + a.error().message);
    g.evidence = answer_evidence(*a);
    if (a->tool_calls.empty())
      return fail(g, "no tool_calls in the reply (content " + in_quotes(a->content) + ", finish_reason " +
                         in_quotes(a->finish_reason) + "); expected a call of get_weather");
    const json& call = a->tool_calls[0];
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
      return fail(g, "tool_calls[0] has no 'function': " + clip(call.dump()));
    const json& fn = call["function"];
    const std::string name = fn.contains("name") && fn["name"].is_string() ? fn["name"].get<std::string>() : "";
    if (name != "get_weather") return fail(g, "tool_calls[0] calls " + in_quotes(name) + "; expected \"get_weather\"");
    if (!fn.contains("arguments") || !fn["arguments"].is_string())
      return fail(g, "tool_calls[0].function.arguments is not a string (OpenAI sends the arguments as JSON text)");
    const std::string args_text = fn["arguments"].get<std::string>();
    json args;
    try {
      args = json::parse(args_text);
    } catch (const std::exception&) {
      return fail(g, "tool_calls[0].function.arguments does not parse as JSON: " + in_quotes(args_text));
    }
    if (!args.is_object()) return fail(g, "tool_calls[0].function.arguments is not a JSON object: " + in_quotes(args_text));
    if (!args.contains("city") || !args["city"].is_string())
      return fail(g, "get_weather was called without its required string argument 'city': " + in_quotes(args_text));
    return pass(g, "get_weather called with " + clip(args_text, 80));
  }

  GateResult json_gate() {
    GateResult g{"json", false, "", 0, json::object()};
    const json body{{"model", served_model(m_)},
                    {"messages", user_messages("Answer with a JSON object only.",
                                               "Give a JSON object with the keys \"name\" (a string) and \"age\" (a "
                                               "number) for Ada, who is 36.")},
                    {"response_format", {{"type", "json_object"}}},
                    {"max_tokens", 256},
                    {"temperature", 0}};
    auto a = chat(url_, body, o_.request_timeout);
    if (!a) return fail(g, "chat completion with response_format json_object: " + a.error().message);
    g.evidence = answer_evidence(*a);
    if (a->content.empty())
      return fail(g, "no content to parse (finish_reason " + in_quotes(a->finish_reason) +
                         (a->reasoning.empty() ? std::string() : ", reasoning only: " + in_quotes(a->reasoning)) + ")");
    json parsed;
    try {
      parsed = json::parse(a->content);
    } catch (const std::exception& e) {
      std::string why = "the content does not parse as JSON (" + std::string(e.what()) + "): " + in_quotes(a->content);
      if (a->finish_reason == "length") why += "; it was cut off at max_tokens (256) before the JSON closed";
      return fail(g, why);
    }
    if (!parsed.is_object()) return fail(g, "the content parses but is not a JSON object: " + in_quotes(a->content));
    g.evidence["parsed"] = parsed;
    return pass(g, "parsed a JSON object with " + std::to_string(parsed.size()) + " keys");
  }

  GateResult long_retrieval() {
    GateResult g{"long_retrieval", false, "", 0, json::object()};
    const int target = *m_.gates.long_retrieval_tokens;
    const bool need = m_.gates.long_retrieval_require_needle;
    const Needle needle = make_needle();
    // The server's tokenizer is the only one that counts: measure the filler with two short probes
    // (the fixed part, then a few sentences more) and size the prompt from them. The probe stays
    // within the target even for a byte-level tokenizer (a token per character, ~80 per sentence).
    auto probe = [&](int sentences) -> Result<int> {
      json body = long_body(sentences, needle);
      body["max_tokens"] = 1;
      auto a = chat(url_, body, o_.long_context_timeout);
      if (!a) return a.error();
      const int p = usage_int(*a, "prompt_tokens");
      if (p <= 0) return Error{"the reply has no usage.prompt_tokens, so the prompt length cannot be measured"};
      return p;
    };
    auto base = probe(0);
    if (!base) return fail(g, "measuring the prompt (no filler): " + base.error().message);
    const int probe_sentences = std::clamp(target / 160, 2, 200);
    auto more = probe(probe_sentences);
    if (!more)
      return fail(g, "measuring the prompt (" + std::to_string(probe_sentences) + " sentences): " + more.error().message);
    const double per_sentence = static_cast<double>(*more - *base) / probe_sentences;
    if (per_sentence <= 0) return fail(g, "filler sentences measured as " + std::to_string(per_sentence) + " tokens each");
    // Aim under the target: sentences differ in length, and the prompt must still fit.
    int sentences = std::max(0, static_cast<int>(std::floor((target * 0.96 - *base) / per_sentence)));
    // A few probe sentences say little about thousands; where a probe at the planned size is cheap,
    // measure it and rescale (the filler's sentences are the same for the same count).
    if (target <= 32768 && sentences > 2 * probe_sentences) {
      auto planned = probe(sentences);
      if (!planned)
        return fail(g, "measuring the prompt (" + std::to_string(sentences) + " sentences): " + planned.error().message);
      if (*planned > *base)
        sentences = static_cast<int>(std::floor(sentences * (target * 0.97 - *base) / (*planned - *base)));
    }

    auto a = chat(url_, long_body(sentences, needle), o_.long_context_timeout);
    if (!a) return fail(g, std::to_string(target) + "-token prompt: " + a.error().message);
    const int got = usage_int(*a, "prompt_tokens");
    const bool in_content = a->content.find(needle.code) != std::string::npos;
    const bool in_reasoning = a->reasoning.find(needle.code) != std::string::npos;
    g.evidence = answer_evidence(*a);
    g.evidence["needle"] = needle.code;
    g.evidence["require_needle"] = need;
    g.evidence["context_tokens"] = target;
    g.evidence["prompt_tokens"] = got;
    g.evidence["needle_found"] = in_content || in_reasoning;
    if (got < target * 0.9)
      return fail(g, "the prompt came out at " + std::to_string(got) + " tokens; expected about " +
                         std::to_string(target) + " (measured " + std::to_string(per_sentence) + " tokens per sentence)");
    const std::string length = std::to_string(got) + "-token prompt";
    if (!need) {
      if (a->finish_reason != "stop" && a->finish_reason != "length")
        return fail(g, length + " served but finish_reason is " + in_quotes(a->finish_reason) + "; expected stop or length");
      return pass(g, length + " served and answered (" + in_quotes(a->content.empty() ? a->reasoning : a->content) +
                         "); the needle is not required by this manifest");
    }
    if (in_content) return pass(g, length + ": the answer contains the needle " + needle.code);
    if (in_reasoning) return pass(g, length + ": the reasoning contains the needle " + needle.code + " (content " + in_quotes(a->content) + ")");
    return fail(g, length + ": the answer " + in_quotes(a->content.empty() ? a->reasoning : a->content) +
                       " does not contain the needle " + needle.code);
  }

  // The speculative counters of /metrics (present or not), or why they could not be read.
  Result<prom::SpecCounters> scrape_spec() {
    httpc::Options o;
    o.io_timeout = std::chrono::seconds(30);
    auto r = httpc::get(url_, "/metrics", o);
    if (!r) return Error{"GET /metrics: " + r.error().message};
    if (r->status != 200) return Error{"GET /metrics answered " + http_failure(*r)};
    return prom::spec_counters(r->body);
  }

  GateResult spec_metrics() {
    GateResult g{"spec_metrics", false, "", 0, json::object()};
    auto first = scrape_spec();
    if (!first) return fail(g, first.error().message);
    prom::SpecCounters c = *first;
    g.evidence = c.to_json();
    if (!c.present)
      return fail(g, "/metrics has no speculative-decoding counters (looked for tandem_spec_decode_draft_tokens_total and "
                     "tandem_spec_decode_accepted_tokens_total, or vLLM's spec_decode_num_draft_tokens_total and "
                     "spec_decode_num_accepted_tokens_total)");
    std::string scope;
    if (!m_.gates.spec_prompt.empty()) {
      // One greedy completion of the manifest's prompt; the counters' change is that request's.
      const json body{{"model", served_model(m_)},
                      {"prompt", m_.gates.spec_prompt},
                      {"max_tokens", m_.gates.spec_prompt_tokens},
                      {"temperature", 0}};
      httpc::Options o;
      o.io_timeout = o_.request_timeout;
      auto r = httpc::post_json(url_, "/v1/completions", body.dump(), o);
      if (!r) return fail(g, "completion of gates.spec_metrics.prompt: " + r.error().message);
      if (r->status != 200) return fail(g, "completion of gates.spec_metrics.prompt: " + http_failure(*r));
      std::string text;
      try {
        text = json::parse(r->body).at("choices").at(0).at("text").get<std::string>();
      } catch (const std::exception&) {
        return fail(g, "completion of gates.spec_metrics.prompt: HTTP 200 but no choices[0].text: " + clip(r->body));
      }
      auto after = scrape_spec();
      if (!after) return fail(g, after.error().message);
      // The evidence is the prompt's (the counters' change), beside what they read before it.
      const json before = c.to_json();
      c = after->minus(c);
      g.evidence = c.to_json();
      g.evidence["before"] = before;
      g.evidence["completion"] = clip(text, 400);
      scope = "gates.spec_metrics.prompt (" + std::to_string(m_.gates.spec_prompt_tokens) + " tokens): ";
    }
    // The earlier gates (or the gate's prompt) generated tokens; a drafter that proposed none of
    // them is not running.
    if (c.drafted <= 0)
      return fail(g, scope + "speculative counters are present but no token was drafted (drafted " +
                         std::to_string(static_cast<long long>(c.drafted)) + ", accepted " +
                         std::to_string(static_cast<long long>(c.accepted)) + "): the drafter is not running");
    char buf[160];
    std::snprintf(buf, sizeof buf, "drafted %.0f, accepted %.0f, acceptance %.3f", c.drafted, c.accepted, *c.acceptance());
    std::string what = scope + buf;
    if (auto len = c.mean_acceptance_length()) {
      std::snprintf(buf, sizeof buf, ", mean acceptance length %.2f", *len);
      what += buf;
    }
    if (m_.gates.min_acceptance && *c.acceptance() < *m_.gates.min_acceptance) {
      std::snprintf(buf, sizeof buf, "; expected acceptance >= %.3f", *m_.gates.min_acceptance);
      return fail(g, what + buf);
    }
    return pass(g, what);
  }

  // A short `tandemctl bench`: the manifest's concurrency, one round of every shipped fixture.
  GateResult bench_gate() {
    GateResult g{"bench", false, "", 0, json::object()};
    const Gates::Bench& want = *m_.gates.bench;
    bench::Config cfg;
    cfg.url = url_.str();
    cfg.model = served_model(m_);
    cfg.concurrency = {want.concurrency};
    cfg.rounds = 1;
    cfg.max_tokens = want.max_tokens;
    cfg.timeout = o_.request_timeout;
    auto fixtures = bench::shipped_fixtures(bench::fixture_names());
    if (!fixtures) return fail(g, fixtures.error().message);
    cfg.fixtures = std::move(*fixtures);
    auto r = bench::run(cfg);
    if (!r) return fail(g, "bench: " + r.error().message);
    g.evidence = json::parse(bench::to_json(*r).dump());
    char buf[64];
    std::string speeds, slow;
    for (const auto& c : r->cells) {
      std::snprintf(buf, sizeof buf, "%.1f", c.decode_tok_s.p50.value_or(0));
      const std::string v = c.decode_tok_s.p50 ? buf : "none";
      speeds += (speeds.empty() ? "" : ", ") + c.fixture + " " + v;
      // A fixture with no successful request cannot show a speed; with a floor set, that fails it.
      if (want.min_tok_s > 0 && (!c.decode_tok_s.p50 || *c.decode_tok_s.p50 < want.min_tok_s)) slow += (slow.empty() ? "" : ", ") + c.fixture + " " + v;
    }
    if (want.min_tok_s >= 1 || want.min_tok_s == 0) std::snprintf(buf, sizeof buf, "%.1f", want.min_tok_s);
    else std::snprintf(buf, sizeof buf, "%.2g", want.min_tok_s);  // a test floor such as 0.01
    const std::string floor = buf;
    const std::string counts = std::to_string(r->failed()) + " of " + std::to_string(r->requests()) + " requests failed (max " +
                               std::to_string(want.max_failures) + ")";
    std::string why;
    if (r->failed() > want.max_failures) {
      std::map<std::string, int> reasons;
      for (const auto& c : r->cells)
        for (const auto& [k, n] : c.failure_reasons) reasons[k] += n;
      std::string list;
      for (const auto& [k, n] : reasons) list += (list.empty() ? "" : "; ") + std::to_string(n) + " x " + k;
      why = counts + ": " + list;
    }
    if (!slow.empty())
      why += (why.empty() ? "" : "; ") + std::string("median decode tok/s below the manifest's minimum of ") + floor +
             " tok/s: " + slow;
    if (!why.empty()) return fail(g, "c=" + std::to_string(want.concurrency) + ": " + why);
    return pass(g, "c=" + std::to_string(want.concurrency) + ", median decode tok/s " + speeds + " (min " + floor + "); " + counts);
  }

 private:
  json long_body(int sentences, const Needle& needle) const {
    const std::string text = "Read the following notes carefully.\n\n" + haystack(sentences, 0.5, needle) + "\n\n" + needle.question;
    return {{"model", served_model(m_)}, {"messages", user_messages("", text)}, {"max_tokens", 64}, {"temperature", 0}};
  }

  static GateResult pass(GateResult g, std::string detail) {
    g.passed = true;
    g.detail = std::move(detail);
    return g;
  }
  static GateResult fail(GateResult g, std::string detail) {
    g.passed = false;
    g.detail = std::move(detail);
    return g;
  }

  const Manifest& m_;
  httpc::Url url_;
  const GateOptions& o_;
};

}  // namespace

Result<GateReport> run_gates(const Manifest& m, const std::string& base_url,
                             std::function<void(const GateResult&)> on_result, const GateOptions& options) {
  auto url = httpc::Url::parse(base_url);
  if (!url) return url.error();
  Runner run(m, *url, options);
  GateReport report;
  report.url = url->str();
  const Gates& g = m.gates;
  // Plan order (controller/src/plan/plan.cpp serve_and_gates).
  std::vector<std::pair<std::string, std::function<GateResult()>>> to_run;
  if (g.health) to_run.emplace_back("health", [&] { return run.health(); });
  if (g.models) to_run.emplace_back("models", [&] { return run.models(); });
  // With a prompt of its own the speculative gate comes before any other request: the engine's
  // draft-length estimates are shared by its requests (spec/draft_length.hpp), so after the chat
  // gates' text, which a code-trained drafter rarely predicts, it would not draft for the prompt.
  const bool spec_first = g.spec_metrics && !g.spec_prompt.empty();
  if (spec_first) to_run.emplace_back("spec_metrics", [&] { return run.spec_metrics(); });
  if (g.chat) to_run.emplace_back("chat", [&] { return run.chat_gate(); });
  if (g.tool_call) to_run.emplace_back("tool_call", [&] { return run.tool_call(); });
  if (g.json) to_run.emplace_back("json", [&] { return run.json_gate(); });
  if (g.long_retrieval_tokens) to_run.emplace_back("long_retrieval", [&] { return run.long_retrieval(); });
  if (g.spec_metrics && !spec_first) to_run.emplace_back("spec_metrics", [&] { return run.spec_metrics(); });
  if (g.bench) to_run.emplace_back("bench", [&] { return run.bench_gate(); });
  for (const CustomGate& c : g.custom)
    to_run.emplace_back("custom." + c.name, [&c, &url, &options]() -> GateResult {
      if (c.kind == CustomGate::Kind::http) return custom_http_gate(c, *url);
      if (!options.run_command) {
        GateResult skip{"custom." + c.name, false, "skipped: a command gate runs on the nodes' agents (tandemctl bind runs it)", 0,
                        json::object(), true};
        return skip;
      }
      return judge_command_gate(c, options.run_command(c));
    });
  for (auto& [name, fn] : to_run) {
    if (options.on_start) options.on_start(name);
    const auto t0 = Clock::now();
    GateResult r = fn();
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (on_result) on_result(r);
    report.gates.push_back(std::move(r));
  }
  return report;
}

}  // namespace tandem::gates
