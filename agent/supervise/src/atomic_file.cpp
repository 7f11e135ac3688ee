#include "tandem/supervise/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

namespace tandem::supervise {
namespace {

std::string parent_dir(const std::string& path) {
  auto p = std::filesystem::path(path).parent_path();
  return p.empty() ? "." : p.string();
}

// The rename is only durable once the directory entry itself reaches the disk.
Status fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return sys_error("open directory " + dir);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return sys_error("fsync directory " + dir, err);
  return Ok{};
}

Status write_all(int fd, std::string_view data, const std::string& what) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_error("write " + what);
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return Ok{};
}

}  // namespace

Status write_file_atomic(const std::string& path, std::string_view content, mode_t mode) {
  // Same directory as the target so rename(2) cannot cross filesystems; pid in the name so two
  // agents (tests) sharing a directory cannot clobber each other's temp file.
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return sys_error("create " + tmp);
  Status st = write_all(fd, content, tmp);
  if (st.ok() && ::fchmod(fd, mode) != 0) st = sys_error("chmod " + tmp);
  if (st.ok() && ::fsync(fd) != 0) st = sys_error("fsync " + tmp);
  if (::close(fd) != 0 && st.ok()) st = sys_error("close " + tmp);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) st = sys_error("rename " + tmp + " to " + path);
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  return fsync_dir(parent_dir(path));
}

Result<std::optional<std::string>> read_file_if_exists(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<std::string>{};
    return sys_error("open " + path);
  }
  std::string out;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return sys_error("read " + path, err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return std::optional<std::string>{std::move(out)};
}

Status remove_file_durably(const std::string& path) {
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return Ok{};
    return sys_error("remove " + path);
  }
  return fsync_dir(parent_dir(path));
}

Status make_dirs(const std::string& path, mode_t mode) {
  std::error_code ec;
  std::filesystem::path p(path);
  std::filesystem::path acc;
  for (const auto& part : p) {
    acc /= part;
    if (std::filesystem::is_directory(acc, ec)) continue;
    if (::mkdir(acc.c_str(), mode) != 0 && errno != EEXIST) return sys_error("mkdir " + acc.string());
  }
  return Ok{};
}

}  // namespace tandem::supervise
