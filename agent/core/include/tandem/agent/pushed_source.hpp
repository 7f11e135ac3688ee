// `stage.from: controller`: the controller's machine holds the files. Its certificate is a client's
// only, so no agent can pull from it; it pushes instead, and this is how the landing code (the very
// same land_file as for a pull from the head: partial beside the target, sidecar, fsync, SHA-256,
// rename, resume from the last recorded chunk) still reads it as a StageSource:
// - the controller sends its listing first (PUT /v1/stage/push/listing) and list() answers it;
// - read() posts a "want" (file, offset, length) and waits for the controller to take it
//   (POST /v1/stage/push/take, a short long-poll) and upload exactly those bytes
//   (PUT /v1/stage/push/chunk?id=N); a want nobody takes, or that is taken and never filled, fails
//   the read after a bound: the controller was killed or the link to it cut, and the partial keeps
//   every chunk recorded so far for the next stage.
// So the agent always says which bytes it needs next (a resumed file asks for its first missing
// chunk), and the controller never decides where anything lands.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "tandem/agent/stage_source.hpp"

namespace tandem::agent {

struct PushWant {
  std::uint64_t id = 0;
  SourceFile file;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;  // exactly min(length asked, size - offset) bytes are expected
  nlohmann::json to_json() const;
};

class PushedStageSource : public StageSource {
 public:
  struct Timeouts {
    std::chrono::milliseconds untaken{10000};  // a want no controller takes (its pushers always ask)
    std::chrono::milliseconds taken{20000};    // a taken want whose bytes never come (64 MiB at 30 Mbit/s)
  };
  PushedStageSource() = default;
  explicit PushedStageSource(Timeouts t) : timeouts_(t) {}

  std::string where() const override { return "the controller (stage.from: controller)"; }
  Result<SourceListing> list() override;
  Result<std::string> read(const SourceFile& f, std::uint64_t offset, std::uint64_t length) override;

  // The controller's side (agent/src/routes.cpp).
  void set_listing(SourceListing l);
  // The oldest want nobody has taken, waiting up to `wait` for one; nullopt when none came.
  std::optional<PushWant> take(std::chrono::milliseconds wait);
  // The bytes of want `id`; refused (with why) when no reader waits for it or the length is wrong.
  Status put(std::uint64_t id, std::string bytes);
  // The controller could not read want `id` (its file changed, say): the reader fails with `why`.
  Status fail(std::uint64_t id, const std::string& why);

 private:
  struct Slot {
    PushWant want;
    bool taken = false;
    std::optional<std::string> bytes;
    std::optional<std::string> failure;
  };
  Timeouts timeouts_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<SourceListing> listing_;
  std::uint64_t next_id_ = 1;
  std::map<std::uint64_t, Slot> slots_;  // wants a reader waits on
  std::deque<std::uint64_t> queue_;      // ids not yet taken, oldest first
};

}  // namespace tandem::agent
