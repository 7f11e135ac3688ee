#include "tandem/agent/fs.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace tandem::agent {
namespace {

// Closes a descriptor on every path out of a function.
}  // namespace

std::string parent_dir(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_name(const std::string& path) {
  auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

Result<std::string> read_file(const std::string& path) {
  OwnedFd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW)};
  if (f.fd < 0) return sys_error(path, "cannot open for reading");
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_error(path, "read failed");
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

Result<FileOwner> file_owner(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return sys_error(path, "cannot stat");
  return FileOwner{static_cast<mode_t>(st.st_mode & 07777), st.st_uid, st.st_gid};
}

Status write_all(int fd, std::string_view bytes, const std::string& path_for_errors) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_error(path_for_errors, "write failed");
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return Ok{};
}

Status fsync_dir(const std::string& dir) {
  OwnedFd d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (d.fd < 0) return sys_error(dir, "cannot open directory to fsync it");
  if (::fsync(d.fd) != 0) return sys_error(dir, "fsync of directory failed");
  return Ok{};
}

namespace {

std::string_view rewrite_padding(std::string_view bytes, std::size_t old_size, std::string& buf) {
  if (bytes.size() >= old_size) return {};
  // Blank lines after a terminated last line, spaces after an unterminated one: either way cron
  // reads the file a crash leaves exactly as it reads `bytes`.
  buf.assign(old_size - bytes.size(), !bytes.empty() && bytes.back() == '\n' ? '\n' : ' ');
  return buf;
}

}  // namespace

bool is_rewrite_leftover(std::string_view text, std::string_view bytes) {
  if (text.size() <= bytes.size() || text.substr(0, bytes.size()) != bytes) return false;
  std::string buf;
  return text.substr(bytes.size()) == rewrite_padding(bytes, text.size(), buf);
}

// The inode is kept, so every bind mount of the file stays attached: systemd's ReadWritePaths= on
// a single file (tandemd.service's /etc/crontab) is such a mount, and a rename over the file from
// outside the service (the dead-man's restore runs from PID 1) would detach it. Not atomic, so the
// order keeps each moment harmless: a shorter content is first written padded to the old length,
// fsynced, then cut; a kill in between leaves `bytes` plus blank lines (is_rewrite_leftover).
Status rewrite_in_place(const std::string& path, std::string_view bytes, const FileOwner& owner) {
  OwnedFd f{::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW)};
  if (f.fd < 0) return sys_error(path, "cannot open to rewrite in place");
  struct stat st{};
  if (::fstat(f.fd, &st) != 0) return sys_error(path, "cannot stat to rewrite in place");
  std::string pad_buf;
  const auto pad = rewrite_padding(bytes, static_cast<std::size_t>(st.st_size), pad_buf);
  if (auto w = write_all(f.fd, bytes, path); !w) return w.error();
  if (auto w = write_all(f.fd, pad, path); !w) return w.error();
  if (!pad.empty() && ::fsync(f.fd) != 0) return sys_error(path, "fsync failed");
  if (::ftruncate(f.fd, static_cast<off_t>(bytes.size())) != 0) return sys_error(path, "cannot truncate after rewriting");
  if (::fchown(f.fd, owner.uid, owner.gid) != 0 && owner.uid != ::geteuid())
    return sys_error(path, "cannot give the file its original owner");
  if (::fchmod(f.fd, owner.mode) != 0 || ::fsync(f.fd) != 0) return sys_error(path, "cannot set mode or fsync");
  return Ok{};
}

Status replace_file(const std::string& path, std::string_view bytes, const FileOwner& owner) {
  const std::string dir = parent_dir(path);
  const std::string tmp = dir + "/." + base_name(path) + ".tandem-tmp." + std::to_string(::getpid());
  ::unlink(tmp.c_str());  // a leftover from a crashed run of this same pid number
  {
    OwnedFd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600)};
    if (f.fd < 0 && errno == EROFS) return rewrite_in_place(path, bytes, owner);
    if (f.fd < 0) return sys_error(tmp, "cannot create temp file");
    auto w = write_all(f.fd, bytes, tmp);
    if (!w) {
      ::unlink(tmp.c_str());
      return w.error();
    }
    // Owner first, then mode: chown clears set-id bits, so the mode must come after it.
    if (::fchown(f.fd, owner.uid, owner.gid) != 0 && (owner.uid != ::geteuid())) {
      auto e = sys_error(tmp, "cannot give temp file the original owner");
      ::unlink(tmp.c_str());
      return e;
    }
    if (::fchmod(f.fd, owner.mode) != 0 || ::fsync(f.fd) != 0) {
      auto e = sys_error(tmp, "cannot set mode or fsync temp file");
      ::unlink(tmp.c_str());
      return e;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    if (err == EBUSY) return rewrite_in_place(path, bytes, owner);  // the file is a mount point
    return sys_error(path, "cannot rename temp file over", err);
  }
  return fsync_dir(dir);
}

Status create_file_synced(const std::string& path, std::string_view bytes, mode_t mode) {
  {
    OwnedFd f{::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode)};
    if (f.fd < 0) return sys_error(path, "cannot create file");
    auto w = write_all(f.fd, bytes, path);
    if (!w) return w.error();
    if (::fsync(f.fd) != 0) return sys_error(path, "fsync failed");
  }
  return fsync_dir(parent_dir(path));
}

}  // namespace tandem::agent
