#include "state_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace tandem::ctl {

Result<StateLock> StateLock::acquire(const std::string& state_dir, const std::string& verb) {
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (ec) return Error{state_dir + ": cannot create the state directory: " + ec.message()};
  const std::string path = state_dir + "/lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Error{path + ": " + std::strerror(errno)};
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[256] = {};
    ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK) return Error{path + ": cannot lock: " + std::strerror(err)};
    std::string holder = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "an unknown process";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    return Error{"another tandemctl is working on this cluster (" + holder + ", lock " + path +
                 "); wait for it to finish, or stop it (a killed controller's bind resumes with `tandemctl bind`)"};
  }
  const std::string me = "pid " + std::to_string(::getpid()) + ", tandemctl " + verb + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    const int err = errno;
    ::close(fd);
    return Error{path + ": cannot record the lock holder: " + std::strerror(err)};
  }
  return StateLock(fd);
}

StateLock::~StateLock() {
  if (fd_ < 0) return;
  // Leave the file (another process may already wait on it); just say nobody holds it.
  if (::ftruncate(fd_, 0) != 0) {
    // Nothing to do: the lock itself goes with close().
  }
  ::close(fd_);
}

}  // namespace tandem::ctl
