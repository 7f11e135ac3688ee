// tandem-serve: the bundled OpenAI-compatible inference server. Parses the vLLM-style command
// line, loads the model, tokenizer and chat template, starts the engine and the HTTP API, and
// serves until SIGTERM or SIGINT. `--write-demo-model DIR` writes the seeded demo model instead.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <csignal>
#include <iostream>
#include <mutex>

#include "cli/flag_names.hpp"
#include "cli/ignored_flags.hpp"
#include "cli/serve_flags.hpp"
#include "cli_conventions.hpp"
#include "demo_model.hpp"
#include "headless.hpp"
#include "http_options.hpp"
#include "http_server.hpp"
#include "load.hpp"
#include "logging.hpp"
#include "service.hpp"
#include "tandem/build_info.hpp"
#include "tandem/url.hpp"

namespace {

// The command line, once parsed: serve/ names settings by field (`kv_cache_memory`), and the
// operator reads them as the flags they typed (--kv-cache-memory).
const CLI::App* flags = nullptr;

// The engine's and the loader's lines, through the one logger: "error: ..." and "note: ..." are
// their level, the rest is information. spdlog's logger serialises the worker and HTTP threads.
void log_line(const std::string& text) {
  const std::string line = flags ? tandem::engine::name_flags(text, *flags) : text;
  const auto starts = [&](std::string_view p) { return line.compare(0, p.size(), p) == 0; };
  if (starts("error: ")) spdlog::error("{}", line.substr(7));
  else if (starts("note: ")) spdlog::warn("{}", line.substr(6));
  else spdlog::info("{}", line);
}

// What the HTTP replies say to change: serve/ names the setting (`chat_template`), the client's
// operator started tandem-serve with flags (--chat-template).
std::string name_settings(std::string_view message) {
  return flags ? tandem::engine::name_flags(message, *flags) : std::string(message);
}

// Why the engine gave up (a lost rank), for the main thread that wakes on SIGUSR1.
std::mutex fatal_mu;
std::string fatal_reason;

int serve(const tandem::engine::ServeConfig& cfg) {
  using namespace tandem::engine;
  // Signals are taken synchronously by this thread (sigwait); block them before any thread starts
  // so that the engine and HTTP threads inherit the mask and never receive them. SIGUSR1 is the
  // engine (or a worker rank's loop) saying it cannot go on.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  if (cfg.headless) return serve::run_headless(cfg, stop_signals, log_line, name_settings);

  auto loaded = serve::load(cfg, log_line, [](const std::string& why) {
    {
      std::lock_guard lk(fatal_mu);
      fatal_reason = why;
    }
    kill(getpid(), SIGUSR1);
  });
  if (!loaded) {
    log_line("error: " + loaded.error().message);
    return 1;
  }
  serve::Loaded& l = loaded.value();
  l.options.name_settings = name_settings;
  serve::OpenAiService service(*l.engine, *l.tokenizer, l.chat_template.get(), l.options);

  const api::HttpServerOptions http = serve::http_options(cfg, /*threads=*/4, log_line, name_settings);
  std::string error;
  auto server = api::HttpServer::start(
      http, [&service](const api::HttpRequest& req, std::shared_ptr<api::Responder> res) { service.handle(req, std::move(res)); },
      error);
  if (!server) {
    log_line("error: " + error);
    return 1;
  }
  l.startup->mark("ready", "the API listens");
  log_line("serving " + l.options.model_name + " on " + tandem::http_base_url(cfg.host, server->port()) +
           " (OpenAI API: /v1/chat/completions, /v1/completions, /v1/models, /tokenize, /detokenize, /version, /health, "
           "/metrics, /metrics/vllm)");

  int sig = 0;
  sigwait(&stop_signals, &sig);
  if (sig == SIGUSR1) {
    std::lock_guard lk(fatal_mu);
    log_line("error: " + fatal_reason + "; shutting down");
  } else {
    log_line(std::string("shutting down on ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT"));
  }
  service.set_serving(false);
  // Order matters: the HTTP threads stop first (no new work), then the engine ends the requests
  // still open (their answers go nowhere), then the server's sockets are released.
  server->stop();
  l.engine.reset();
  server.reset();
  return sig == SIGUSR1 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (auto rc = tandem::cli::handle_version(argc, argv, "tandem-serve", /*cuda=*/true)) return *rc;
  CLI::App app{
      "tandem-serve: OpenAI-compatible GLM inference server (paged KV, continuous batching, DFlash speculative "
      "decoding, tensor parallelism with one rank per process: TCP between CPU ranks; --device cuda puts each rank "
      "on a GPU, its partial sums through NCCL, or host-staged when ranks share a GPU).\n"
      "Two ranks: start the worker first (--nnodes 2 --node-rank 1 --headless --master-addr HEAD --master-port P), then "
      "the head (--nnodes 2 --node-rank 0 --master-addr HEAD --master-port P); both with --tensor-parallel-size 2.\n"
      "Takes the vLLM flags of a `vllm serve` recipe so an operator's recipe carries over.\n"
      "`tandem-serve --write-demo-model DIR` writes a tiny glm4_moe_lite model with seeded random weights (a GLM-style "
      "chat template with tool calls and <think>, a small byte-level BPE tokenizer); it loads and serves, but its "
      "text is gibberish: the weights are random, not trained.",
      "tandem-serve"};
  app.footer("Exit status: 0 a clean shutdown (SIGTERM or SIGINT) or done; 1 the model, tokenizer or server failed to "
             "start, or a rank was lost; 2 usage error (unknown flag, a bad value, flags that contradict each other).");
  tandem::cli::add_version_flag(app);
  tandem::cli::LogOptions log;
  tandem::cli::add_log_flags(app, log);
  tandem::engine::ServeConfig cfg;
  tandem::engine::add_serve_flags(app, cfg);
  bool print_config = false;
  app.add_flag("--print-config", print_config, "Print the parsed configuration as JSON and exit");
  std::string demo_dir;
  auto* demo = app.add_option("--write-demo-model", demo_dir,
                              "Write the seeded demo model (random weights: gibberish text) into DIR and exit");
  // The model directory is required to serve, not to write the demo model.
  app.get_option("model")->required(false);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tandem::cli::usage_exit(app, e, argc, argv);
  }
  tandem::cli::setup_logging("tandem-serve", log);
  flags = &app;
  if (*demo) {
    if (auto s = tandem::engine::serve::write_demo_model(demo_dir); !s) {
      spdlog::error("writing the demo model: {}", s.error().message);
      return 1;
    }
    std::cout << "wrote the demo model (seeded random weights) to " << demo_dir << "\n";
    return 0;
  }
  if (cfg.model.empty()) {
    std::cerr << "tandem-serve: the model directory is required (or --write-demo-model DIR)\n" << app.help();
    return tandem::cli::kExitUsage;
  }
  auto errors = tandem::engine::check_serve_config(cfg);
  for (const auto& e : errors) std::cerr << "tandem-serve: " << e << "\n";
  if (!errors.empty()) return tandem::cli::kExitUsage;
  if (print_config) {
    std::cout << cfg.to_json().dump(2) << "\n";
    return 0;
  }
  spdlog::info("{}", tandem::version_text("tandem-serve", /*cuda=*/true));
  for (const auto& note : tandem::engine::ignored_flag_notes(app, cfg)) spdlog::warn("{}", note);
  return serve(cfg);
}
