// The harness loop: cells in order (concurrency level, then fixture), each `rounds` waves of
// simultaneous streaming requests, one thread per request (at most 64), timed on the client.
#include "bench.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <mutex>
#include <random>
#include <regex>
#include <thread>

#include "endpoint/http_client.hpp"
#include "tandem/url.hpp"
#include "tandem/utf8.hpp"

namespace tandem::bench {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::optional<double> percentile(std::vector<double> v, double p) {
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(rank));
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

int Report::requests() const {
  int n = 0;
  for (const auto& c : cells) n += c.requests;
  return n;
}

int Report::failed() const {
  int n = 0;
  for (const auto& c : cells) n += c.failed;
  return n;
}

prom::SpecCounters Report::fixture_spec(const std::string& fixture, bool* measured) const {
  prom::SpecCounters sum;
  bool any = false;
  for (const auto& c : cells) {
    if (c.fixture != fixture || !c.spec_measured || !c.spec.present) continue;
    if (!any) {
      sum = c.spec;
      any = true;
      continue;
    }
    sum.drafted += c.spec.drafted;
    sum.accepted += c.spec.accepted;
    if (sum.drafts && c.spec.drafts) *sum.drafts += *c.spec.drafts;
    else sum.drafts.reset();
  }
  if (measured) *measured = any;
  return sum;
}

namespace {

// "127.0.0.1:8000: reading the event stream: ... (after 12 events)" -> without the address and
// the count, so that one cause is counted as one reason.
std::string reason_of(const std::string& message, const httpc::Url& url) {
  std::string r = message;
  const std::string where = host_port(url.host, url.port) + ": ";  // as the client writes it
  if (r.rfind(where, 0) == 0) r = r.substr(where.size());
  static const std::regex count(R"( \(after \d+ events\)$| \(\d+ events read\)$)");
  return std::regex_replace(r, count, "");
}

std::string error_message(const std::string& body) {
  try {
    const json j = json::parse(body);
    if (j.contains("error") && j["error"].is_object() && j["error"].contains("message") && j["error"]["message"].is_string())
      return j["error"]["message"].get<std::string>();
    if (j.contains("message") && j["message"].is_string()) return j["message"].get<std::string>();
  } catch (const std::exception&) {
  }
  return utf8::clip(body, 200);
}

// Does this chunk carry generated text (content, reasoning or a tool-call fragment)?
bool carries_tokens(const json& delta) {
  for (const char* k : {"content", "reasoning_content", "reasoning"})
    if (delta.contains(k) && delta[k].is_string() && !delta[k].get<std::string>().empty()) return true;
  return delta.contains("tool_calls") && delta["tool_calls"].is_array() && !delta["tool_calls"].empty();
}

Sample one_request(const httpc::Url& url, const json& body, const Config& cfg, Progress* progress) {
  Sample s;
  httpc::Options o;
  o.io_timeout = cfg.timeout;
  o.total_timeout = std::max<std::chrono::milliseconds>(cfg.timeout * 4, std::chrono::minutes(30));
  const auto t0 = Clock::now();
  std::optional<Clock::time_point> first, last;
  int events = 0;
  int usage_tokens = -1;
  std::string stream_error;
  auto r = httpc::stream_sse(
      url, "/v1/chat/completions", body.dump(),
      [&](const std::string& data) {
        const auto now = Clock::now();
        json j;
        try {
          j = json::parse(data);
        } catch (const std::exception&) {
          stream_error = "an event that is not JSON";
          return false;
        }
        if (j.contains("error")) {
          const json& e = j["error"];
          stream_error = "error event: " + (e.is_object() && e.contains("message") && e["message"].is_string()
                                                ? e["message"].get<std::string>()
                                                : e.dump());
          return false;
        }
        if (j.contains("usage") && j["usage"].is_object() && j["usage"].contains("completion_tokens") &&
            j["usage"]["completion_tokens"].is_number_integer())
          usage_tokens = j["usage"]["completion_tokens"].get<int>();
        if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty() &&
            j["choices"][0].contains("delta") && carries_tokens(j["choices"][0]["delta"])) {
          if (last) s.itl_s.push_back(std::chrono::duration<double>(now - *last).count());
          if (!first) first = now;
          last = now;
          ++events;
          if (progress) progress->tokens.fetch_add(1);
        }
        return true;
      },
      o);
  if (!r) {
    s.failure = reason_of(r.error().message, url);
    return s;
  }
  if (r->status != 200) {
    s.failure = "HTTP " + std::to_string(r->status) + ": " + error_message(r->body);
    return s;
  }
  if (!stream_error.empty()) {
    s.failure = stream_error;
    return s;
  }
  if (!r->saw_done) {
    s.failure = "the stream ended without data: [DONE]";
    return s;
  }
  if (!first) {
    s.failure = "no token in the stream";
    return s;
  }
  s.ok = true;
  s.tokens_from_usage = usage_tokens >= 0;
  s.tokens = s.tokens_from_usage ? usage_tokens : events;
  s.ttft_s = std::chrono::duration<double>(*first - t0).count();
  const double decode = std::chrono::duration<double>(*last - *first).count();
  if (s.tokens > 1 && decode > 0) s.decode_tok_s = (s.tokens - 1) / decode;
  return s;
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string random_run_id() {
  std::random_device rd;
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", rd());
  return buf;
}

// The served model: the first id of /v1/models.
Result<std::string> first_model(const httpc::Url& url, const Config& cfg) {
  httpc::Options o;
  o.io_timeout = std::min<std::chrono::milliseconds>(cfg.timeout, std::chrono::seconds(30));
  auto r = httpc::get(url, "/v1/models", o);
  if (!r) return r.error().with_context("GET /v1/models (to find the model; or pass --model)");
  if (r->status != 200)
    return Error{"GET /v1/models answered HTTP " + std::to_string(r->status) + ": " + error_message(r->body)};
  try {
    const json j = json::parse(r->body);
    if (j.contains("data") && j["data"].is_array() && !j["data"].empty() && j["data"][0].contains("id") &&
        j["data"][0]["id"].is_string())
      return j["data"][0]["id"].get<std::string>();
  } catch (const std::exception&) {
  }
  return Error{"GET /v1/models lists no model; pass --model"};
}

std::optional<prom::SpecCounters> scrape(const httpc::Url& url) {
  httpc::Options o;
  o.io_timeout = std::chrono::seconds(10);
  auto r = httpc::get(url, "/metrics", o);
  if (!r || r->status != 200) return std::nullopt;
  return prom::spec_counters(r->body);
}

Cell summarise(int concurrency, const std::string& fixture, const std::vector<Sample>& samples, double wall_s) {
  Cell c;
  c.concurrency = concurrency;
  c.fixture = fixture;
  c.requests = static_cast<int>(samples.size());
  c.wall_s = wall_s;
  std::vector<double> decode, ttft, itl;
  for (const auto& s : samples) {
    if (!s.ok) {
      ++c.failed;
      ++c.failure_reasons[s.failure];
      continue;
    }
    c.tokens += s.tokens;
    if (s.decode_tok_s > 0) decode.push_back(s.decode_tok_s);
    ttft.push_back(s.ttft_s * 1000);
    for (double g : s.itl_s) itl.push_back(g * 1000);
  }
  c.decode_tok_s = {percentile(decode, 10), percentile(decode, 50), percentile(decode, 99)};
  c.ttft_ms = {percentile(ttft, 10), percentile(ttft, 50), percentile(ttft, 99)};
  c.itl_ms = {percentile(itl, 10), percentile(itl, 50), percentile(itl, 99)};
  if (c.tokens > 0 && wall_s > 0) c.aggregate_tok_s = static_cast<double>(c.tokens) / wall_s;
  return c;
}

}  // namespace

Result<Report> run(const Config& cfg, Progress* progress) {
  auto url = httpc::Url::parse(cfg.url);
  if (!url) return url.error();
  if (cfg.fixtures.empty()) return Error{"no fixture to run"};
  if (cfg.concurrency.empty()) return Error{"no concurrency level to run"};
  for (int c : cfg.concurrency)
    if (c < 1 || c > 64) return Error{"concurrency " + std::to_string(c) + " is outside 1 to 64"};
  if (cfg.rounds < 1) return Error{"rounds must be at least 1"};
  Report rep;
  rep.url = url->str();
  rep.settings = cfg;
  rep.started_at = utc_now();
  if (cfg.model.empty()) {
    auto m = first_model(*url, cfg);
    if (!m) return m.error();
    rep.model = *m;
  } else {
    rep.model = cfg.model;
  }
  if (progress) {
    int total = 0;
    for (int c : cfg.concurrency) total += c * cfg.rounds * static_cast<int>(cfg.fixtures.size());
    progress->total = total;
  }

  const std::string run_id = random_run_id();
  std::size_t serial = 0;  // every request of the run gets its own nonce
  for (int conc : cfg.concurrency) {
    for (const Fixture& fx : cfg.fixtures) {
      if (progress && progress->on_cell_start) progress->on_cell_start("c=" + std::to_string(conc) + " " + fx.name);
      const auto before = scrape(*url);
      std::vector<Sample> samples;
      double wall = 0;
      for (int round = 0; round < cfg.rounds; ++round) {
        std::vector<Sample> wave(static_cast<std::size_t>(conc));
        std::vector<json> bodies;
        for (int i = 0; i < conc; ++i) {
          const std::size_t n = serial++;
          char nonce[48];
          std::snprintf(nonce, sizeof nonce, "run %s request %zu", run_id.c_str(), n);
          json b{{"model", rep.model},
                 {"messages", unique_messages(fx, n, nonce)},
                 {"max_tokens", cfg.max_tokens},
                 {"temperature", cfg.temperature},
                 {"stream", true},
                 {"stream_options", {{"include_usage", true}}}};
          if (cfg.ignore_eos) b["ignore_eos"] = true;
          if (fx.tools.is_array()) {
            b["tools"] = fx.tools;
            b["tool_choice"] = "auto";
          }
          bodies.push_back(std::move(b));
        }
        const auto t0 = Clock::now();
        std::vector<std::thread> threads;
        for (int i = 0; i < conc; ++i)
          threads.emplace_back([&, i] {
            wave[static_cast<std::size_t>(i)] = one_request(*url, bodies[static_cast<std::size_t>(i)], cfg, progress);
            if (progress) {
              progress->done.fetch_add(1);
              if (!wave[static_cast<std::size_t>(i)].ok) progress->failed.fetch_add(1);
            }
          });
        for (auto& t : threads) t.join();
        wall += std::chrono::duration<double>(Clock::now() - t0).count();
        samples.insert(samples.end(), wave.begin(), wave.end());
      }
      Cell cell = summarise(conc, fx.name, samples, wall);
      const auto after = scrape(*url);
      if (before && after) {
        cell.spec_measured = true;
        cell.spec = after->minus(*before);
      }
      if (progress && progress->on_cell_done) progress->on_cell_done(cell);
      rep.cells.push_back(std::move(cell));
    }
  }
  return rep;
}

}  // namespace tandem::bench
