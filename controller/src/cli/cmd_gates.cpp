// gates: put the manifest's gate questions to a live endpoint and say which pass.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "cli_common.hpp"
#include "commands.hpp"
#include "gates/gates.hpp"

namespace tandem::cli {
namespace {

struct GatesArgs {
  ManifestArg manifest;
  std::string url;
};

int run(const GatesArgs& a) {
  auto r = load(a.manifest);
  if (!r.manifest) return report_errors(r, a.manifest.output);
  const Manifest& m = *r.manifest;
  const std::string url = a.url.empty() ? gates::endpoint_url(m) : a.url;
  const bool text = a.manifest.output != "json";
  const bool tty = text && isatty(STDOUT_FILENO);
  if (text) std::cout << "Gates of '" << m.name << "' against " << url << "\n" << std::flush;

  gates::GateOptions opts;
  // On a terminal, say which gate is running (the long-context one can take minutes).
  if (tty) opts.on_start = [](const std::string& name) { std::cout << "  ....  " << name << "\r" << std::flush; };
  auto report = gates::run_gates(
      m, url,
      [&](const gates::GateResult& g) {
        if (!text) return;
        char secs[32];
        std::snprintf(secs, sizeof secs, "%7.2fs", g.seconds);
        std::cout << (tty ? "\33[2K" : "") << "  " << (g.skipped ? "SKIP" : g.passed ? "PASS" : "FAIL") << "  " << g.name
                  << std::string(g.name.size() < 15 ? 15 - g.name.size() : 1, ' ') << secs << "  " << g.detail << "\n"
                  << std::flush;
      },
      opts);
  if (!report) {
    std::cerr << "tandemctl gates: " << report.error().message << "\n";
    return kExitInvalid;
  }
  if (!text) {
    std::cout << report->to_json().dump(2) << "\n";
  } else {
    std::size_t failed = 0;
    for (const auto& g : report->gates) failed += g.passed || g.skipped ? 0 : 1;
    if (report->gates.empty()) std::cout << "No gate is turned on in this manifest; nothing proves the lane.\n";
    else if (failed == 0) std::cout << "All " << report->gates.size() << " gates passed.\n";
    else std::cout << failed << " of " << report->gates.size() << " gates failed.\n";
  }
  return report->passed() ? 0 : kExitFailed;
}

}  // namespace

void add_gates_commands(CLI::App& app) {
  auto args = std::make_shared<GatesArgs>();
  auto* cmd = app.add_subcommand("gates", "Run the manifest's gates against a live OpenAI-compatible endpoint");
  add_manifest_arg(cmd, args->manifest);
  cmd->add_option("--url", args->url,
                  "Endpoint to test (http://HOST:PORT). Default: the head node's address and engine.serve.port");
  cmd->footer(
      "Gates run in the order `tandemctl plan` lists them; each prints PASS or FAIL with what came back:\n"
      "  health          GET /health answers 200\n"
      "  models          GET /v1/models lists engine.serve.served_model_name\n"
      "  chat            a chat completion answers (content or reasoning)\n"
      "  tool_call       a forced (named tool_choice) call of get_weather arrives parsed in tool_calls\n"
      "  json            a response_format json_object answer parses as a JSON object\n"
      "  long_retrieval  a prompt of gates.long_retrieval.context_tokens with a needle in it is answered,\n"
      "                  and (require_needle: true) the answer quotes the needle\n"
      "  spec_metrics    /metrics has speculative-decoding counters, tokens were drafted, and acceptance\n"
      "                  reaches gates.spec_metrics.min_acceptance (over one greedy completion of\n"
      "                  gates.spec_metrics.prompt when the manifest gives one; that gate then runs\n"
      "                  right after models)\n"
      "  custom.NAME     gates.custom: an HTTP check (status, body substring, JSON value) runs here;\n"
      "                  a command gate runs on the nodes' agents, so only `tandemctl bind` runs it (SKIP here)\n"
      "Every gate runs even after one fails. Exit 0: all passed; 3: a gate failed; 1: bad manifest or URL.");
  cmd->callback([args] { std::exit(run(*args)); });
}

}  // namespace tandem::cli
