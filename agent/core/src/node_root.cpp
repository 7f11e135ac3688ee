#include "tandem/agent/node_root.hpp"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <sys/stat.h>

#include "tandem/agent/fs.hpp"

namespace tandem::agent {
namespace {

// realpath(3) of the deepest existing ancestor, with the missing tail appended. The tail has no
// ".." (rejected earlier) and does not exist, so it cannot contain a symlink.
Result<std::string> realpath_existing(const std::string& full) {
  std::string head = full;
  std::string tail;
  for (;;) {
    char buf[PATH_MAX];
    if (::realpath(head.c_str(), buf) != nullptr) {
      std::string r = buf;
      if (!tail.empty()) r = (r == "/" ? "" : r) + tail;
      return r;
    }
    if (errno != ENOENT && errno != ENOTDIR) return sys_error(full, "cannot resolve path");
    if (head == "/" || head.empty()) return sys_error(full, "cannot resolve path");
    // Exists but does not resolve: a dangling symlink. Its target could be anywhere; refuse.
    struct stat st {};
    if (::lstat(head.c_str(), &st) == 0) return plain_error(full, "refused: " + head + " is a dangling symlink");
    tail = "/" + base_name(head) + tail;
    head = parent_dir(head);
  }
}

}  // namespace

std::string normalize_host_path(const std::string& p) {
  if (p.empty() || p[0] != '/') return {};
  std::string out;
  size_t i = 0;
  while (i < p.size()) {
    while (i < p.size() && p[i] == '/') ++i;
    size_t j = p.find('/', i);
    if (j == std::string::npos) j = p.size();
    std::string part = p.substr(i, j - i);
    i = j;
    if (part.empty() || part == ".") continue;
    if (part == "..") return {};
    out += "/" + part;
  }
  return out.empty() ? "/" : out;
}

bool path_within(const std::string& path, const std::string& prefix) {
  if (prefix == "/") return !path.empty() && path[0] == '/';
  if (path.size() < prefix.size() || path.compare(0, prefix.size(), prefix) != 0) return false;
  return path.size() == prefix.size() || path[prefix.size()] == '/';
}

Result<NodeRoot> NodeRoot::open(const std::string& root, std::vector<std::string> allowed_prefixes) {
  char buf[PATH_MAX];
  if (::realpath(root.c_str(), buf) == nullptr) return sys_error(root, "node root does not resolve");
  std::string r = buf;
  if (r == "/") r.clear();
  std::vector<std::string> allowed;
  for (const auto& a : allowed_prefixes) {
    auto n = normalize_host_path(a);
    if (n.empty()) return plain_error(a, "allow-list entry must be an absolute path without '..'");
    allowed.push_back(n);
  }
  return NodeRoot(std::move(r), std::move(allowed));
}

std::vector<std::string> NodeRoot::manifest_allow_list(const Engine& engine, const std::string& state_dir,
                                                       const std::vector<StagedPath>& staged) {
  std::vector<std::string> a{"/etc/crontab",        "/etc/cron.d",          "/var/spool/cron/crontabs",
                             "/etc/systemd/system", "/lib/systemd/system",  "/dev/shm",
                             "/proc/meminfo",       "/proc/sys/vm/drop_caches", "/proc/net/tcp",
                             "/proc/net/tcp6"};
  for (const auto* p : {&engine.cache_dir, &engine.binary, &engine.model_dir, &engine.drafter_dir, &state_dir})
    if (!p->empty()) a.push_back(*p);
  for (const auto& pin : engine.pins) a.push_back(pin.path);
  // A staged file lands beside its target (stage_landing.hpp) and is restored the same way: those
  // names only, not the whole directory around the binary or a pin.
  std::vector<std::string> files{engine.binary};
  for (const auto& pin : engine.pins) files.push_back(pin.path);
  // stage.files: the source node reads the source path, the others write the target.
  for (const auto& s : staged) {
    if (s.dir) continue;
    a.push_back(s.path);
    if (!s.source.empty()) a.push_back(s.source);
    files.push_back(s.path);
  }
  for (const auto& f : files) {
    if (f.empty()) continue;
    const auto slash = f.find_last_of('/');
    const std::string dot = f.substr(0, slash + 1) + "." + f.substr(slash + 1);
    for (const char* suffix : {".tandem-partial", ".tandem-partial.json", ".tandem-restore"}) a.push_back(dot + suffix);
  }
  return a;
}

Result<std::string> NodeRoot::check_lexical(const std::string& host_path) const {
  if (host_path.empty() || host_path[0] != '/') return plain_error(host_path, "refused: host path must be absolute");
  auto n = normalize_host_path(host_path);
  if (n.empty()) return plain_error(host_path, "refused: '..' is not allowed in host paths");
  for (const auto& a : allowed_)
    if (path_within(n, a)) return n;
  return plain_error(host_path, "refused: path is outside the agent's allow-list");
}

// Allowed prefixes are compared by their real locations too: on merged-/usr systems
// /lib/systemd/system is really /usr/lib/systemd/system, and that must still match.
bool NodeRoot::inside_allowed_real(const std::string& real) const {
  for (const auto& a : allowed_) {
    auto ar = realpath_existing(root_ + (a == "/" ? "" : a));
    if (!ar) continue;
    if (!path_within(*ar, root_.empty() ? "/" : root_)) continue;  // an allowed prefix that itself escapes
    if (path_within(real, *ar)) return true;
  }
  return false;
}

Result<std::string> NodeRoot::real_under_root(const std::string& n) const {
  auto real = realpath_existing(root_ + n);
  if (!real) return real.error();
  if (!path_within(*real, root_.empty() ? "/" : root_))
    return plain_error(n, "refused: resolves to " + *real + ", outside the node root " + (root_.empty() ? "/" : root_));
  if (!inside_allowed_real(*real))
    return plain_error(n, "refused: resolves to " + *real + ", outside the agent's allow-list");
  return real;
}

Result<std::string> NodeRoot::resolve(const std::string& host_path) const {
  auto n = check_lexical(host_path);
  if (!n) return n.error();
  return real_under_root(*n);
}

Result<std::string> NodeRoot::resolve_ancestor(const std::string& host_path) const {
  auto n = normalize_host_path(host_path);
  if (n.empty()) return plain_error(host_path, "refused: host path must be absolute, without '..'");
  bool ancestor = false;
  for (const auto& a : allowed_) ancestor = ancestor || path_within(a, n);
  if (!ancestor) return resolve(host_path);
  auto real = realpath_existing(root_ + n);
  if (!real) return real.error();
  if (!path_within(*real, root_.empty() ? "/" : root_))
    return plain_error(host_path, "refused: resolves to " + *real + ", outside the node root");
  return real;
}

Result<std::string> NodeRoot::resolve_entry(const std::string& host_path) const {
  auto n = check_lexical(host_path);
  if (!n) return n.error();
  if (*n == "/") return resolve(host_path);
  auto dir = real_under_root(parent_dir(*n));
  if (!dir) {
    // The parent may lie above an allowed prefix (e.g. the entry is the prefix itself): then
    // only the root-escape check applies to it.
    auto real = realpath_existing(root_ + parent_dir(*n));
    if (!real) return real.error();
    if (!path_within(*real, root_.empty() ? "/" : root_))
      return plain_error(host_path, "refused: parent resolves outside the node root");
    return (*real == "/" ? "" : *real) + "/" + base_name(*n);
  }
  return (*dir == "/" ? "" : *dir) + "/" + base_name(*n);
}

}  // namespace tandem::agent
