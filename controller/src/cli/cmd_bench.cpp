// bench: the C1-C6 harness against any OpenAI-compatible endpoint, with a live line on a
// terminal, a table (or JSON) at the end, an optional SVG chart and a comparison with a saved run.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include "bench/bench.hpp"
#include "bench/bench_report.hpp"
#include "cli_common.hpp"
#include "commands.hpp"
#include "tandem/units.hpp"

namespace tandem::cli {
namespace {

struct BenchArgs {
  std::string url;
  std::string concurrency = "1-6";
  int rounds = 2;
  int max_tokens = 400;
  std::string fixtures = "prose,code,json,agent,mixed";
  std::string model;
  bool ignore_eos = true;
  double temperature = 0;
  std::string timeout = "5m";
  std::string output = "text";
  std::string svg;
  std::string save;
  std::string compare;
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, sep);)
    if (!part.empty()) out.push_back(part);
  return out;
}

// "1-6", "1,2,4" or "1-3,8": levels in the order given, without repeats.
Result<std::vector<int>> parse_levels(const std::string& text) {
  std::vector<int> out;
  auto number = [&](const std::string& s) -> Result<int> {
    if (s.empty() || s.size() > 2 || s.find_first_not_of("0123456789") != std::string::npos || std::stoi(s) < 1 ||
        std::stoi(s) > 64)
      return Error{"--concurrency '" + text + "': '" + s + "' is not a level from 1 to 64"};
    return std::stoi(s);
  };
  for (const auto& part : split(text, ',')) {
    const auto dash = part.find('-');
    auto lo = number(part.substr(0, dash));
    if (!lo) return lo.error();
    int hi = *lo;
    if (dash != std::string::npos) {
      auto h = number(part.substr(dash + 1));
      if (!h) return h.error();
      if (*h < *lo) return Error{"--concurrency '" + text + "': range '" + part + "' runs backwards"};
      hi = *h;
    }
    for (int c = *lo; c <= hi; ++c)
      if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  if (out.empty()) return Error{"--concurrency '" + text + "' names no level; expected e.g. 1-6 or 1,2,4"};
  return out;
}

Status write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return Error{path + ": cannot write: " + std::strerror(errno)};
  return {};
}

// A status line redrawn twice a second on a terminal: cell, requests done, failures, tok/s now.
class LiveLine {
 public:
  explicit LiveLine(bench::Progress& p) : p_(p), thread_([this] { loop(); }) {}
  ~LiveLine() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    std::cerr << "\r\33[2K" << std::flush;
  }
  void cell(const std::string& label) {
    std::lock_guard<std::mutex> lock(mu_);
    label_ = label;
  }

 private:
  void loop() {
    long long last_tokens = 0;
    auto last = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(500), [this] { return stop_; })) {
      const auto now = std::chrono::steady_clock::now();
      const long long tokens = p_.tokens.load();
      const double dt = std::chrono::duration<double>(now - last).count();
      const double rate = dt > 0 ? static_cast<double>(tokens - last_tokens) / dt : 0;
      last_tokens = tokens;
      last = now;
      char buf[200];
      std::snprintf(buf, sizeof buf, "\r\33[2K[%s] %d/%d requests, %d failed, %lld chunks streamed, %.1f chunks/s now",
                    label_.c_str(), p_.done.load(), p_.total.load(), p_.failed.load(), tokens, rate);
      std::cerr << buf << std::flush;
    }
  }

  bench::Progress& p_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::string label_;
  std::thread thread_;
};

int run(const BenchArgs& a) {
  auto fail = [](const std::string& why) {
    std::cerr << "tandemctl bench: " << why << "\n";
    return kExitInvalid;
  };
  bench::Config cfg;
  cfg.url = a.url;
  cfg.model = a.model;
  cfg.rounds = a.rounds;
  cfg.max_tokens = a.max_tokens;
  cfg.ignore_eos = a.ignore_eos;
  cfg.temperature = a.temperature;
  auto levels = parse_levels(a.concurrency);
  if (!levels) return fail(levels.error().message);
  cfg.concurrency = *levels;
  auto fixtures = bench::shipped_fixtures(split(a.fixtures, ','));
  if (!fixtures) return fail("--fixtures: " + fixtures.error().message);
  cfg.fixtures = std::move(*fixtures);
  ParseError perr;
  auto timeout = parse_duration(a.timeout, &perr);
  if (!timeout) return fail("--timeout '" + a.timeout + "': " + perr.what);
  cfg.timeout = *timeout;
  std::optional<bench::Report> other;
  if (!a.compare.empty()) {
    std::ifstream in(a.compare);
    if (!in) return fail(a.compare + ": cannot open: " + std::strerror(errno));
    nlohmann::json j;
    try {
      in >> j;
    } catch (const std::exception& e) {
      return fail(a.compare + ": not JSON: " + e.what());
    }
    auto r = bench::from_json(j, a.compare);
    if (!r) return fail(r.error().message);
    other = std::move(*r);
  }

  const bool text = a.output != "json";
  bench::Progress progress;
  std::unique_ptr<LiveLine> live;
  if (isatty(STDERR_FILENO)) {
    live = std::make_unique<LiveLine>(progress);
    progress.on_cell_start = [&](const std::string& label) { live->cell(label); };
  } else {
    // Not a terminal: one plain line per finished cell, on stderr so stdout stays the result.
    progress.on_cell_done = [](const bench::Cell& c) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "bench: c=%d %s: %d/%d ok, %.1f tok/s aggregate\n", c.concurrency, c.fixture.c_str(),
                    c.requests - c.failed, c.requests, c.aggregate_tok_s.value_or(0));
      std::cerr << buf << std::flush;
    };
  }
  auto report = bench::run(cfg, &progress);
  live.reset();
  if (!report) return fail(report.error().message);

  auto doc = bench::to_json(*report);
  if (other) doc["compare"] = bench::compare_json(*report, *other);
  if (!a.save.empty())
    if (Status s = write_file(a.save, doc.dump(2) + "\n"); !s) return fail(s.error().message);
  if (!a.svg.empty())
    if (Status s = write_file(a.svg, bench::render_svg(*report)); !s) return fail(s.error().message);
  if (text) {
    std::cout << bench::render_table(*report);
    if (other) std::cout << bench::render_compare(*report, *other);
    if (!a.save.empty()) std::cout << "\nReport: " << a.save << "\n";
    if (!a.svg.empty()) std::cout << "Chart: " << a.svg << "\n";
  } else {
    std::cout << doc.dump(2) << "\n";
  }
  return report->failed() == 0 ? 0 : kExitFailed;
}

}  // namespace

void add_bench_commands(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand("bench", "Measure an OpenAI-compatible endpoint the way the seed's operators did (C1-C6)");
  cmd->add_option("url", a->url, "Endpoint, http://HOST:PORT (tandem-serve, vLLM, SGLang, ...)")->required();
  cmd->add_option("--concurrency", a->concurrency, "Concurrency levels: a range and/or a list, e.g. 1-6 or 1,2,4")
      ->capture_default_str();
  cmd->add_option("--rounds", a->rounds, "Waves per level and fixture")->check(CLI::Range(1, 100))->capture_default_str();
  cmd->add_option("--max-tokens", a->max_tokens, "Tokens to generate per request")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--fixtures", a->fixtures, "Prompt families, comma-separated (shipped in controller/bench/fixtures)")
      ->capture_default_str();
  cmd->add_option("--model", a->model, "Model name to request (default: the first id of /v1/models)");
  cmd->add_flag("--ignore-eos,!--no-ignore-eos", a->ignore_eos,
                "Decode max_tokens every time (default), or let the model stop early");
  cmd->add_option("--temperature", a->temperature, "Sampling temperature")->check(CLI::Range(0.0, 2.0))->capture_default_str();
  cmd->add_option("--timeout", a->timeout, "Longest silence within one request before it counts as failed")
      ->capture_default_str();
  add_output_option(cmd, a->output);
  cmd->add_option("--svg", a->svg, "Write the chart (tok/s against concurrency, one line per fixture) to this file");
  cmd->add_option("--save", a->save, "Also write the JSON report to this file (for a later --compare)");
  cmd->add_option("--compare", a->compare, "A saved JSON report (--save or -o json) to put beside this run, with ratios");
  cmd->footer(
      "For each concurrency level c and fixture: `rounds` waves of c simultaneous streaming chat requests.\n"
      "Every prompt starts with its own nonce, so no prefix cache can help. Measured on the client:\n"
      "  decode tok/s    per request, (completion tokens - 1) / (last token - first token): median and p10\n"
      "  aggregate tok/s completion tokens of the cell / wall time of its waves\n"
      "  TTFT            request sent -> first token, p50 and p99\n"
      "  ITL             gap between successive streamed chunks, p50 and p99\n"
      "  spec acceptance accepted / drafted draft tokens, from /metrics before and after each cell\n"
      "                  (tandem-serve's or vLLM's counter names; mean acceptance length when the\n"
      "                  engine counts verify steps)\n"
      "Failures are counted per cell with their reason (HTTP status and message, connection dropped,\n"
      "stream cut before [DONE], no token). Exit 0: no request failed; 3: some did; 1: bad arguments or\n"
      "the endpoint could not be asked for its model.\n"
      "Example: tandemctl bench http://127.0.0.1:8888 --concurrency 1-6 --save run.json --svg run.svg");
  cmd->callback([a] { std::exit(run(*a)); });
}

}  // namespace tandem::cli
