#include "tandem/agent/cache_dir_step.hpp"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "tandem/agent/fs.hpp"

namespace tandem::agent {
namespace {

struct User {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
};

Result<User> lookup_user(const std::string& name) {
  passwd pw{}, *found = nullptr;
  std::vector<char> buf(16384);
  int rc = name.empty() ? ::getpwuid_r(::geteuid(), &pw, buf.data(), buf.size(), &found)
                        : ::getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found);
  if (rc != 0) return sys_error("", "cannot look up user '" + name + "'", rc);
  if (!found) {
    if (name.empty()) return User{std::to_string(::geteuid()), ::geteuid(), ::getegid()};
    return plain_error("", "run user '" + name + "' does not exist on this node");
  }
  return User{pw.pw_name, pw.pw_uid, pw.pw_gid};
}

}  // namespace

Result<json> CacheDirStep::inspect(const NodeRoot& root) const {
  auto user = lookup_user(user_);
  if (!user) return user.error();
  auto real = root.resolve(path_);
  if (!real) return real.error();
  json ev{{"path", path_}, {"run_user", user->name}, {"run_uid", user->uid}, {"created", json::array()}};
  struct stat st {};
  if (::stat(real->c_str(), &st) != 0) {
    if (errno != ENOENT) return sys_error(path_, "cannot stat cache dir");
    ev["exists"] = false;
    ev["ok"] = false;
    return ev;
  }
  ev["exists"] = true;
  ev["owner_uid"] = st.st_uid;
  ev["mode"] = st.st_mode & 07777;
  if (!S_ISDIR(st.st_mode)) return plain_error(path_, "cache dir exists but is not a directory");
  const bool owned = st.st_uid == user->uid;
  ev["writable"] = owned && (st.st_mode & S_IWUSR) != 0;
  ev["ok"] = require_owned_ ? ev["writable"].get<bool>() : true;
  if (!require_owned_ || owned) {
    if (!ev["ok"].get<bool>()) {
      Error e = plain_error(path_, "cache dir is owned by the run user but not writable by it (mode " + std::to_string(st.st_mode & 07777) + ")");
      set_evidence(e, ev);
      return e;
    }
    return ev;
  }
  Error e = plain_error(path_, st.st_uid == 0 && user->uid != 0
                                   ? "cache dir is owned by root but the engine runs as '" + user->name +
                                         "': it would abort at launch; use a path owned by that user (not chowned for you)"
                                   : "cache dir is owned by uid " + std::to_string(st.st_uid) + ", not by the run user '" +
                                         user->name + "' (uid " + std::to_string(user->uid) + ")");
  set_evidence(e, ev);
  return e;
}

Result<json> CacheDirStep::check(const StepContext& ctx) { return inspect(ctx.root); }

Result<json> CacheDirStep::plan(const StepContext& ctx) {
  auto ev = inspect(ctx.root);
  if (!ev) return ev;
  json create = json::array();
  if (!(*ev)["exists"].get<bool>()) {
    // Walk up to the deepest existing ancestor; everything below it is ours to create.
    std::vector<std::string> missing;
    for (std::string p = normalize_host_path(path_); p != "/"; p = parent_dir(p)) {
      auto entry = ctx.root.resolve_ancestor(p);
      if (!entry) return entry.error();
      struct stat st {};
      if (::lstat(entry->c_str(), &st) == 0) {
        if (!S_ISDIR(st.st_mode)) return plain_error(p, "exists but is not a directory; cannot create the cache dir under it");
        break;
      }
      missing.insert(missing.begin(), p);
    }
    for (const auto& m : missing) create.push_back(m);
  }
  (*ev)["create"] = create;
  return ev;
}

Result<json> CacheDirStep::apply(const StepContext& ctx, const json& intent) {
  auto user = lookup_user(user_);
  if (!user) return user.error();
  json created = json::array();
  for (const auto& h : intent.at("create")) {
    const auto host = h.get<std::string>();
    auto real = ctx.root.resolve_ancestor(host);
    if (!real) return real.error();
    if (::mkdir(real->c_str(), 0755) != 0 && errno != EEXIST) return sys_error(host, "cannot create directory");
    if (::chown(real->c_str(), user->uid, user->gid) != 0) return sys_error(host, "cannot give directory to the run user");
    auto d = fsync_dir(parent_dir(*real));
    if (!d) return d.error();
    created.push_back(host);
  }
  auto ev = inspect(ctx.root);
  if (!ev) return ev;
  (*ev)["created"] = created;
  return ev;
}

Result<json> CacheDirStep::verify(const StepContext& ctx, const json&, const json&) { return inspect(ctx.root); }

Result<json> CacheDirStep::undo(const StepContext& ctx, const json& intent) {
  json removed = json::array(), kept = json::array();
  const auto& create = intent.at("create");
  for (auto it = create.rbegin(); it != create.rend(); ++it) {
    const auto host = it->get<std::string>();
    auto real = ctx.root.resolve_ancestor(host);
    if (!real) return real.error();
    if (::rmdir(real->c_str()) == 0) removed.push_back(host);
    else if (errno == ENOENT) continue;
    else kept.push_back({{"path", host}, {"why", std::string("not removed: ") + std::strerror(errno)}});
  }
  return json{{"removed", removed}, {"kept", kept}};
}

}  // namespace tandem::agent
