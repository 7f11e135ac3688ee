#include "tandem/agent/shm_step.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace tandem::agent {
namespace {

constexpr const char* kShm = "/dev/shm";

bool matches_any(const std::string& name, const std::vector<std::string>& patterns) {
  for (const auto& p : patterns)
    if (::fnmatch(p.c_str(), name.c_str(), FNM_PERIOD) == 0) return true;
  return false;
}

struct DirFd {
  int fd = -1;
  ~DirFd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

// All names are looked at relative to one O_DIRECTORY|O_NOFOLLOW descriptor with
// AT_SYMLINK_NOFOLLOW, so nothing resolves through a link out of /dev/shm.
Result<json> ShmStep::scan(const NodeRoot& root) const {
  auto real = root.resolve(kShm);
  if (!real) return real.error();
  DirFd d{::open(real->c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (d.fd < 0) return sys_error(*real, "cannot open shared-memory directory");
  int dup = ::dup(d.fd);
  DIR* dir = dup >= 0 ? ::fdopendir(dup) : nullptr;
  if (!dir) return sys_error(*real, "cannot list shared-memory directory");
  std::vector<std::string> names;
  while (auto* e = ::readdir(dir)) {
    std::string n = e->d_name;
    if (n != "." && n != ".." && matches_any(n, patterns_)) names.push_back(n);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  json files = json::array(), skipped = json::array();
  std::uint64_t bytes = 0;
  for (const auto& n : names) {
    struct stat st {};
    if (::fstatat(d.fd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone meanwhile
    if (S_ISLNK(st.st_mode)) skipped.push_back({{"name", n}, {"why", "symlink: skipped, link and target left alone"}});
    else if (!S_ISREG(st.st_mode)) skipped.push_back({{"name", n}, {"why", "not a regular file"}});
    else {
      auto size = static_cast<std::uint64_t>(st.st_size);
      files.push_back({{"name", n}, {"bytes", size}, {"inode", st.st_ino}});
      bytes += size;
    }
  }
  return json{{"dir", kShm}, {"files", files}, {"count", files.size()}, {"bytes", bytes}, {"skipped", skipped},
              {"patterns", patterns_}};
}

Result<json> ShmStep::check(const StepContext& ctx) { return scan(ctx.root); }

Result<json> ShmStep::plan(const StepContext& ctx) { return scan(ctx.root); }

Result<json> ShmStep::apply(const StepContext& ctx, const json& intent) {
  auto real = ctx.root.resolve(kShm);
  if (!real) return real.error();
  DirFd d{::open(real->c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (d.fd < 0) return sys_error(*real, "cannot open shared-memory directory");
  json removed = json::array(), skipped = intent.at("skipped");
  std::uint64_t freed = 0;
  for (const auto& f : intent.at("files")) {
    const auto n = f.at("name").get<std::string>();
    // Re-check right before unlinking: the name must still be the same regular file.
    struct stat st {};
    if (::fstatat(d.fd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // already gone (resumed after a crash, or its owner cleaned up)
      return sys_error(std::string(kShm) + "/" + n, "cannot stat");
    }
    if (!S_ISREG(st.st_mode) || st.st_ino != f.at("inode").get<ino_t>()) {
      skipped.push_back({{"name", n}, {"why", "changed since plan; left alone"}});
      continue;
    }
    if (::unlinkat(d.fd, n.c_str(), 0) != 0 && errno != ENOENT) return sys_error(std::string(kShm) + "/" + n, "cannot remove");
    auto size = static_cast<std::uint64_t>(st.st_size);
    removed.push_back({{"name", n}, {"bytes", size}});
    freed += size;
  }
  return json{{"dir", kShm}, {"removed", removed}, {"count", removed.size()}, {"bytes_freed", freed}, {"skipped", skipped}};
}

Result<json> ShmStep::verify(const StepContext& ctx, const json&, const json&) {
  auto s = scan(ctx.root);
  if (!s) return s;
  json ev{{"remaining", (*s)["files"]}, {"count", (*s)["count"]}};
  if ((*s)["count"].get<std::size_t>() > 0) {
    Error e = plain_error(kShm, "matching shared-memory files remain (a process still running?)");
    set_evidence(e, ev);
    return e;
  }
  return ev;
}

Result<json> ShmStep::undo(const StepContext&, const json&) {
  return json{{"undone", false}, {"why", "removed shared-memory files were stale and cannot be recreated; nothing to put back"}};
}

}  // namespace tandem::agent
