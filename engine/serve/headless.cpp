#include "headless.hpp"

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "http_options.hpp"
#include "http_server.hpp"
#include "load.hpp"
#include "rank_group.hpp"
#include "startup_phases.hpp"
#include "tandem/model/model.hpp"
#include "tandem/units.hpp"
#include "worker_rank.hpp"
#include "tandem/url.hpp"

namespace tandem::engine::serve {

// long-function: the headless startup and shutdown sequence (group, load, heartbeat, worker, signals), in order.
int run_headless(const ServeConfig& cfg, const sigset_t& signals, const std::function<void(const std::string&)>& log,
                 const NameSettings& name_settings) {
  StartupPhases phases;
  auto group = make_rank_group(cfg, cfg.model, log);
  if (!group) {
    log("error: " + group.error().message);
    return 1;
  }
  comm::TcpCommunicator& comm = *group.value();
  auto model = load_worker_model(cfg, comm);
  if (!model) {
    log("error: loading this rank's slice of " + cfg.model + ": " + model.error().message);
    return 1;
  }
  std::shared_ptr<model::DeviceAllReduce> device_all_reduce;  // outlives the model's steps (joined below)

  phases.mark("weights_loaded", cfg.device == "cuda" ? "this rank's slice onto the GPU" : "this rank's slice into host memory");
  std::atomic<const char*> phase{"waiting for rank 0"};
  const int rank = cfg.node_rank;
  const api::HttpServerOptions http = http_options(cfg, /*threads=*/1, log, name_settings);
  std::string error;
  auto server = api::HttpServer::start(
      http,
      [&phase, &phases, rank](const api::HttpRequest& req, std::shared_ptr<api::Responder> res) {
        if (req.path == "/health" && req.method == "GET") {
          res->send(200, "application/json",
                    nlohmann::json{{"status", "ok"}, {"role", "worker"}, {"rank", rank}, {"phase", phase.load()},
                                   {"startup", phases.to_json()}}
                        .dump());
          return;
        }
        res->send(404, "application/json",
                  nlohmann::json{{"error", {{"message", "a headless worker rank serves only GET /health; the API is on rank 0"},
                                            {"type", "not_found"}}}}
                      .dump());
      },
      error);
  if (!server) {
    log("error: the worker's health endpoint: " + error);
    return 1;
  }
  log("worker rank " + std::to_string(rank) + " of " + std::to_string(cfg.nnodes) + ": slice loaded; ready for rank 0 (health on " +
      http_base_url(cfg.host, server->port()) + "/health)");

  std::mutex mu;
  std::string failure;
  std::thread worker([&] {
    auto s = comm.rendezvous();
    if (s) {
      auto wired = wire_device_all_reduce(comm, *model.value(), log);
      if (wired) device_all_reduce = std::move(wired).value();
      else s = wired.error();
    }
    if (s) {
      phases.mark("ranks_met", "rank 0 and this rank met; serving");
      phase = "serving";
      runtime::WorkerOptions wo;
      // The head beats every second while idle; a third of the peer timeout of silence is plenty.
      if (auto d = tandem::parse_duration(cfg.peer_timeout))
        wo.head_silence = std::max(std::chrono::milliseconds(3000), std::chrono::duration_cast<std::chrono::milliseconds>(*d) / 3);
      wo.log = log;
      wo.own_kv_blocks = [&](int block_size) {
        ServeConfig own = cfg;
        own.block_size = block_size;  // rank 0's (the fingerprint makes them equal)
        return own_kv_blocks(own, *model.value(), log);
      };
      s = runtime::run_worker_rank(*model.value(), wo);
    }
    {
      std::lock_guard lk(mu);
      if (!s) failure = s.error().message;
    }
    kill(getpid(), SIGUSR1);
  });

  int sig = 0;
  sigwait(&signals, &sig);
  if (sig != SIGUSR1) {
    // The worker thread may sit in a collective for up to the peer timeout; a worker holds no
    // state worth saving, so it leaves at once (rank 0 sees the closed link and stops too).
    log(std::string("shutting down on ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT"));
    std::cerr.flush();
    std::_Exit(0);
  }
  worker.join();
  server->stop();
  std::lock_guard lk(mu);
  if (!failure.empty()) {
    log("error: " + failure);
    return 1;
  }
  return 0;
}

}  // namespace tandem::engine::serve
