// Host paths ("/etc/cron.d/x", "/dev/shm") resolved under a root prefix, so several agents can
// run sandboxed on one machine, and confined to an allow-list so a manifest cannot point the
// agent at /etc/shadow. Every path the steps touch goes through resolve().
#pragma once
#include <string>
#include <vector>

#include "tandem/agent/error.hpp"
#include "tandem/manifest.hpp"

namespace tandem::agent {

class NodeRoot {
 public:
  // `root` must exist; it is canonicalised (realpath) once here.
  static Result<NodeRoot> open(const std::string& root, std::vector<std::string> allowed_prefixes);

  // The allow-list a manifest implies: cron and systemd unit locations, /dev/shm, the /proc files
  // the steps read or write, the cache dir, engine binary, pins, model and drafter dirs, state dir.
  // `staged`: the stage section's files (Manifest::staged_paths), whose targets and sources are
  // outside the engine's own paths when stage.files names them.
  static std::vector<std::string> manifest_allow_list(const Engine& engine, const std::string& state_dir,
                                                      const std::vector<StagedPath>& staged = {});

  // Real path of a host path. Refused: relative paths, any ".." component, paths outside the
  // allow-list, and paths whose real location (symlinks followed) leaves the root or the allowed
  // prefix. Paths that do not exist yet resolve through their deepest existing ancestor.
  Result<std::string> resolve(const std::string& host_path) const;

  // Like resolve, but the last component is not followed: for lstat/unlink of a directory entry
  // (a symlink in /dev/shm is looked at as a link, never through).
  Result<std::string> resolve_entry(const std::string& host_path) const;

  // For mkdir of the missing parents of an allowed path (the cache dir's parents): also accepts
  // an ANCESTOR of an allowed prefix, still only inside the root. Not for reads or writes.
  Result<std::string> resolve_ancestor(const std::string& host_path) const;

  const std::string& root() const { return root_; }  // canonical, no trailing slash ("" for "/")
  bool is_host_root() const { return root_.empty(); }
  const std::vector<std::string>& allowed() const { return allowed_; }

 private:
  NodeRoot(std::string root, std::vector<std::string> allowed) : root_(std::move(root)), allowed_(std::move(allowed)) {}
  Result<std::string> check_lexical(const std::string& host_path) const;
  Result<std::string> real_under_root(const std::string& host_path) const;
  bool inside_allowed_real(const std::string& real) const;

  std::string root_;
  std::vector<std::string> allowed_;  // lexically normalised host paths
};

// "/a//b/./c/" -> "/a/b/c"; empty optional-like "" when a ".." appears or the path is relative.
std::string normalize_host_path(const std::string& p);
// Is `path` equal to `prefix` or below it (component-wise, so /etc/cron.dx is not under /etc/cron.d)?
bool path_within(const std::string& path, const std::string& prefix);

}  // namespace tandem::agent
