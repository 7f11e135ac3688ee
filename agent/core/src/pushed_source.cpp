#include "tandem/agent/pushed_source.hpp"

namespace tandem::agent {

nlohmann::json PushWant::to_json() const {
  return {{"id", id}, {"file", file.to_json()}, {"offset", offset}, {"length", length}};
}

Result<SourceListing> PushedStageSource::list() {
  std::lock_guard lock(mu_);
  if (!listing_) return plain_error("", "the controller has not sent its listing (stage.from: controller): run the stage from tandemctl");
  return *listing_;
}

void PushedStageSource::set_listing(SourceListing l) {
  std::lock_guard lock(mu_);
  listing_ = std::move(l);
}

Result<std::string> PushedStageSource::read(const SourceFile& f, std::uint64_t offset, std::uint64_t length) {
  if (length > kMaxStageRead) return plain_error(f.path, "refused: a read of more than 64 MiB");
  if (offset > f.size) return plain_error(f.path, "refused: offset past the end of the file");
  std::unique_lock lock(mu_);
  const std::uint64_t id = next_id_++;
  slots_[id] = Slot{PushWant{id, f, offset, std::min(length, f.size - offset)}, false, {}, {}};
  queue_.push_back(id);
  cv_.notify_all();
  auto deadline = std::chrono::steady_clock::now() + timeouts_.untaken;
  bool was_taken = false;
  for (;;) {
    const Slot& s = slots_.at(id);
    if (s.bytes || s.failure) break;
    if (s.taken && !was_taken) {  // the controller has it: from now on the upload's own bound
      was_taken = true;
      deadline = std::chrono::steady_clock::now() + timeouts_.taken;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      slots_.erase(id);
      std::erase(queue_, id);
      const auto secs = std::chrono::duration_cast<std::chrono::seconds>(was_taken ? timeouts_.taken : timeouts_.untaken).count();
      Error e = plain_error(f.path, (was_taken ? "the controller took the chunk at offset " + std::to_string(offset) + " but never sent it"
                                            : "no controller asked for the chunk at offset " + std::to_string(offset)) +
                                     " within " + std::to_string(secs) +
                                     " s: the controller stopped pushing (killed, or the link to it cut); the chunks "
                                     "recorded so far stay beside the target for the next stage");
      e.code = kStageSourceGone;
      return e;
    }
    cv_.wait_until(lock, deadline);
  }
  Slot s = std::move(slots_.at(id));
  slots_.erase(id);
  if (s.failure) return plain_error(f.path, "the controller could not send it: " + *s.failure);
  return std::move(*s.bytes);
}

std::optional<PushWant> PushedStageSource::take(std::chrono::milliseconds wait) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, wait, [&] { return !queue_.empty(); })) return std::nullopt;
  const std::uint64_t id = queue_.front();
  queue_.pop_front();
  Slot& s = slots_.at(id);
  s.taken = true;
  cv_.notify_all();  // its reader moves to the upload's bound
  return s.want;
}

Status PushedStageSource::put(std::uint64_t id, std::string bytes) {
  std::lock_guard lock(mu_);
  auto it = slots_.find(id);
  if (it == slots_.end() || !it->second.taken || it->second.bytes || it->second.failure)
    return plain_error("", "no reader waits for pushed chunk " + std::to_string(id) + " (it timed out, or was sent already)");
  const PushWant& w = it->second.want;
  if (bytes.size() != w.length)
    return plain_error(w.file.path, "pushed chunk " + std::to_string(id) + " at offset " + std::to_string(w.offset) + " has " +
                                        std::to_string(bytes.size()) + " bytes; expected " + std::to_string(w.length));
  it->second.bytes = std::move(bytes);
  cv_.notify_all();
  return Ok{};
}

Status PushedStageSource::fail(std::uint64_t id, const std::string& why) {
  std::lock_guard lock(mu_);
  auto it = slots_.find(id);
  if (it == slots_.end() || it->second.bytes || it->second.failure)
    return plain_error("", "no reader waits for pushed chunk " + std::to_string(id));
  it->second.failure = why;
  cv_.notify_all();
  return Ok{};
}

}  // namespace tandem::agent
