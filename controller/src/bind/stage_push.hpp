// stage.from: controller, tandemctl's side (the agent's is agent/core's pushed_source.hpp). This
// machine's copies of the staged paths, under --stage-root, are listed once per run (SHA-256 through
// a hash cache in the controller's state dir) and sent to each node before its check and its
// apply. While a node's stage applies, pusher threads serve the chunks its agent asks for: each
// want names a file, an offset and a length; the file must be one the manifest stages (nothing
// else is ever opened here) and must still have the size and mtime it was listed with, else the
// want is failed with the reason and the node's stage stops on it.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agent_client.hpp"
#include "tandem/agent/stage_source.hpp"

namespace tandem::ctl {

class StagePush {
 public:
  // nullptr (no error) when the manifest does not stage from the controller.
  static Result<std::shared_ptr<StagePush>> open(const Manifest& m, const std::string& stage_root,
                                                 const std::string& cache_file);
  // This machine's listing, hashed on first use and kept for the run.
  Result<json> listing();
  // Sends it to the node: the message names the node when it fails.
  std::optional<std::string> send_listing(const AgentClient& a);

  // Serves one node's wants on `threads` threads from construction until destruction.
  class Pushers {
   public:
    Pushers(StagePush& push, const AgentClient& a, int threads);
    ~Pushers();
    Pushers(const Pushers&) = delete;
    Pushers& operator=(const Pushers&) = delete;

   private:
    void serve(StagePush& push, const AgentClient& a);
    std::atomic<bool> stop_{false};
    std::vector<std::thread> threads_;
  };

 private:
  explicit StagePush(std::unique_ptr<agent::LocalStageSource> src) : src_(std::move(src)) {}
  std::unique_ptr<agent::LocalStageSource> src_;
  std::mutex mu_;
  std::optional<json> listing_;
};

}  // namespace tandem::ctl
