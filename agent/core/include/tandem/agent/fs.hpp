// Small, careful file primitives: whole-file reads, crash-safe replacement (temp + fsync + rename
// + directory fsync), so that a kill -9 leaves either the old or the new bytes, never a mix.
#pragma once
#include <sys/types.h>
#include <unistd.h>

#include <string>
#include <string_view>

#include "tandem/agent/error.hpp"

namespace tandem::agent {

// A descriptor closed when it goes out of scope (every early return of a file routine).
struct OwnedFd {
  int fd = -1;
  OwnedFd() = default;
  explicit OwnedFd(int f) : fd(f) {}
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  ~OwnedFd() {
    if (fd >= 0) ::close(fd);
  }
};

struct FileOwner {
  mode_t mode = 0644;  // permission bits only (07777)
  uid_t uid = 0;
  gid_t gid = 0;
};

// Whole file; refuses to follow a symlink in the last component (callers pass resolved paths).
Result<std::string> read_file(const std::string& path);
Result<FileOwner> file_owner(const std::string& path);

// Replace `path` with `bytes`, keeping `owner` (mode, uid, gid). Temp file in the same directory
// (dot-prefixed, so cron ignores it), fsync, rename over, fsync the directory.
Status replace_file(const std::string& path, std::string_view bytes, const FileOwner& owner);

// Overwrite `path` with `bytes` keeping its inode (bind mounts of the file stay attached), then
// `owner`. Not atomic: a kill mid-way leaves `bytes` plus blank lines when the content shrank
// (see is_rewrite_leftover), or a torn file on power loss. Cron files are written this way.
Status rewrite_in_place(const std::string& path, std::string_view bytes, const FileOwner& owner);

// True when `text` is what an interrupted rewrite_in_place(path, bytes) leaves: `bytes` and its padding.
bool is_rewrite_leftover(std::string_view text, std::string_view bytes);

// Create a new file (fails if it exists) and fsync it and its directory.
Status create_file_synced(const std::string& path, std::string_view bytes, mode_t mode);

Status write_all(int fd, std::string_view bytes, const std::string& path_for_errors);
Status fsync_dir(const std::string& dir);

std::string parent_dir(const std::string& path);  // "/a/b" -> "/a", "/a" -> "/"
std::string base_name(const std::string& path);   // "/a/b" -> "b"

}  // namespace tandem::agent
