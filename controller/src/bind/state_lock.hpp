// One tandemctl at a time may change the cluster: `bind`, `rollback` and `disarm` hold an flock on
// <state dir>/lock, which names the holder's pid and verb. The kernel drops the lock when the
// holder dies (even by kill -9), so a dead controller never blocks the next one.
#pragma once
#include <string>

#include "tandem/result.hpp"

namespace tandem::ctl {

class StateLock {
 public:
  // Refuses (does not wait) when another live process holds the lock, naming its pid and verb.
  static Result<StateLock> acquire(const std::string& state_dir, const std::string& verb);
  ~StateLock();
  StateLock(StateLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  StateLock& operator=(StateLock&&) = delete;
  StateLock(const StateLock&) = delete;

 private:
  explicit StateLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace tandem::ctl
