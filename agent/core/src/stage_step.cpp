#include "tandem/agent/stage_step.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "tandem/agent/hash_tree.hpp"
#include "tandem/agent/sha256.hpp"
#include "tandem/agent/stage_landing.hpp"

namespace tandem::agent {
namespace {

std::int64_t mtime_of(const struct stat& st) { return st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec; }

// Regular files below a real directory, as host paths under `host_dir` (our own partials excluded).
void list_files(const std::string& real_dir, const std::string& host_dir, std::vector<std::string>& out) {
  DIR* d = ::opendir(real_dir.c_str());
  if (!d) return;
  std::vector<std::string> names;
  while (auto* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    struct stat st {};
    if (::lstat((real_dir + "/" + n).c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) list_files(real_dir + "/" + n, host_dir + "/" + n, out);
    else if (!is_stage_temp_name(n)) out.push_back(host_dir + "/" + n);
  }
}

// The deepest existing directory at or above `real` (for statvfs and st_dev of a path to be made).
std::string existing_ancestor(std::string real) {
  struct stat st {};
  while (!real.empty() && ::stat(real.c_str(), &st) != 0) real = parent_dir(real);
  return real.empty() ? "/" : real;
}

Status copy_file(const std::string& from, const std::string& to, Sha256* hash) {
  OwnedFd in{::open(from.c_str(), O_RDONLY | O_CLOEXEC)}, out;
  if (in.fd < 0) return sys_error(from, "cannot open to copy");
  out.fd = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (out.fd < 0) return sys_error(to, "cannot create the copy");
  std::vector<char> buf(kHashChunk);
  for (;;) {
    ssize_t n = ::read(in.fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error(from, "read failed while copying");
    if (n == 0) break;
    if (hash) hash->update(buf.data(), static_cast<std::size_t>(n));
    if (auto w = write_all(out.fd, std::string_view(buf.data(), static_cast<std::size_t>(n)), to); !w) return w;
  }
  if (::fsync(out.fd) != 0) return sys_error(to, "fsync failed");
  return Ok{};
}

// Keeps the file at `real` under `backup_real` before it is replaced or pruned: a hard link when
// the state dir shares its file system (free, and the very same bytes), else a copy.
Result<json> make_backup(const std::string& real, const std::string& backup_real, const std::string& backup_rel) {
  struct stat st {};
  if (::lstat(real.c_str(), &st) != 0) return sys_error(real, "cannot stat to back up");
  json b{{"file", backup_rel}, {"size", st.st_size}, {"mtime_ns", mtime_of(st)}, {"mode", st.st_mode & 07777u},
         {"uid", st.st_uid}, {"gid", st.st_gid}};
  ::unlink(backup_real.c_str());  // a leftover of a plan that crashed before its intent
  if (::link(real.c_str(), backup_real.c_str()) == 0) {
    b["how"] = "link";
    b["ino"] = st.st_ino;
  } else if (errno == EXDEV || errno == EPERM || errno == EMLINK) {
    Sha256 h;
    if (auto c = copy_file(real, backup_real, &h); !c) return c.error();
    b["how"] = "copy";
    b["sha256"] = h.hex_final();
  } else {
    return sys_error(backup_real, "cannot keep a backup of " + real);
  }
  return b;
}

// Puts the backup described by `b` back at `real`, byte for byte, through a temp file and rename.
Status restore_backup(const std::string& state_dir, const json& b, const std::string& real) {
  const std::string from = state_dir + "/" + b.at("file").get<std::string>();
  const bool link = b.value("how", "") == "link";
  struct stat st {};
  if (::lstat(from.c_str(), &st) != 0) {
    // Gone: an earlier run of this undo restored it and then removed the backups.
    struct stat now {};
    if (::lstat(real.c_str(), &now) == 0) {
      if (link && now.st_ino == b.value("ino", 0ull)) return Ok{};
      if (!link) {
        auto d = sha256_file(real);
        if (d && *d == b.value("sha256", "")) return Ok{};
      }
    }
    return plain_error(from, "the backup of " + real + " is missing and the file is not the original; cannot restore");
  }
  bool same = false;
  if (link) {
    same = st.st_ino == b.value("ino", 0ull) && mtime_of(st) == b.value("mtime_ns", 0LL);
  } else {
    auto d = sha256_file(from);
    same = d && *d == b.value("sha256", "");
  }
  if (!same)
    return plain_error(from, "the backup of " + real + " changed since it was taken; refusing to restore it");
  const std::string tmp = parent_dir(real) + "/." + base_name(real) + ".tandem-restore";
  ::unlink(tmp.c_str());
  if (link) {
    if (::link(from.c_str(), tmp.c_str()) != 0) return sys_error(tmp, "cannot link the backup back");
  } else if (auto c = copy_file(from, tmp, nullptr); !c) {
    ::unlink(tmp.c_str());
    return c;
  }
  const auto uid = b.value("uid", 0u), gid = b.value("gid", 0u);
  if (::lchown(tmp.c_str(), uid, gid) != 0 && uid != ::geteuid()) return sys_error(tmp, "cannot give the restored file its owner");
  if (::chmod(tmp.c_str(), b.value("mode", 0644u)) != 0) return sys_error(tmp, "cannot give the restored file its mode");
  if (::rename(tmp.c_str(), real.c_str()) != 0) return sys_error(real, "cannot rename the restored file into place");
  return fsync_dir(parent_dir(real));
}

std::string bytes_text(std::uint64_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%llu bytes (%.2f GiB)", static_cast<unsigned long long>(n), static_cast<double>(n) / (1ull << 30));
  return buf;
}

// Bytes under stage-backups/ that nothing else holds (copies, and links whose original was since
// replaced), other than op `skip`'s own: what earlier stages keep in the state dir.
std::uint64_t kept_backup_bytes(const std::string& state_dir, const std::string& skip) {
  std::uint64_t n = 0;
  const std::string top = state_dir + "/stage-backups";
  DIR* d = ::opendir(top.c_str());
  if (!d) return 0;
  std::vector<std::string> ops;
  while (auto* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != ".." && name != skip) ops.push_back(name);
  }
  ::closedir(d);
  for (const auto& op : ops) {
    std::vector<std::string> files;
    list_files(top + "/" + op, top + "/" + op, files);
    for (const auto& f : files) {
      struct stat st {};
      if (::lstat(f.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1) n += static_cast<std::uint64_t>(st.st_size);
    }
  }
  return n;
}

Status make_dirs_under(const NodeRoot& root, const std::vector<std::string>& host_dirs) {
  for (const auto& d : host_dirs) {
    auto real = root.resolve_ancestor(d);
    if (!real) return real.error();
    if (::mkdir(real->c_str(), 0755) != 0 && errno != EEXIST) return sys_error(*real, "cannot create directory");
  }
  return Ok{};
}

// The source must list exactly the staged paths: anything else would write where the manifest
// did not say.
Status check_listing(const SourceListing& listing, const std::vector<StagedPath>& paths) {
  for (const auto& e : listing.entries) {
    bool named = false;
    for (const auto& p : paths) named = named || (p.path == e.path && p.dir == e.dir);
    if (!named) return plain_error(e.path, "refused: the source listed a path the manifest's stage section does not name");
    // A pinned file is taken only with its pinned bytes, whatever the source claims to serve.
    for (const auto& p : paths)
      if (!p.dir && p.path == e.path && !p.sha256.empty())
        for (const auto& f : e.files)
          if (f.sha256 != p.sha256)
            return plain_error(f.path, "refused: the source lists it as " + f.sha256 + " but the manifest pins " + p.sha256);
  }
  return Ok{};
}

// What differs between the source and this node: files to copy, files here the source lacks.
struct StageDiff {
  json copy = json::array(), extras = json::array();
  std::uint64_t skipped = 0, skipped_bytes = 0;
};

json copy_entry(const SourceFile& f, const struct stat* st) {
  return {{"path", f.path}, {"size", f.size}, {"sha256", f.sha256}, {"mtime_ns", f.mtime_ns}, {"mode", f.mode},
          {"uid", st ? st->st_uid : ::geteuid()}, {"gid", st ? st->st_gid : ::getegid()},
          {"exists", st != nullptr}};
}

// Compares by size first; files of the same size are hashed (through the hash cache).
Result<StageDiff> diff_with_source(const NodeRoot& root, const SourceListing& listing, const std::string& cache_file) {
  StageDiff diff;
  std::vector<std::pair<SourceFile, std::string>> same_size;  // (file, real) to hash
  for (const auto& e : listing.entries) {
    std::set<std::string> listed;
    for (const auto& f : e.files) {
      listed.insert(f.path);
      auto real = root.resolve(f.path);
      if (!real) return real.error();
      struct stat st {};
      if (::lstat(real->c_str(), &st) != 0) {
        if (errno != ENOENT) return sys_error(*real, "cannot stat the target");
        diff.copy.push_back(copy_entry(f, nullptr));
      } else if (!S_ISREG(st.st_mode)) {
        return plain_error(f.path, "is not a regular file here; refusing to replace it with a staged file");
      } else if (static_cast<std::uint64_t>(st.st_size) != f.size) {
        diff.copy.push_back(copy_entry(f, &st));
      } else {
        same_size.emplace_back(f, *real);
      }
    }
    if (e.dir) {
      auto real = root.resolve(e.path);
      if (!real) return real.error();
      std::vector<std::string> here;
      list_files(*real, e.path, here);
      for (const auto& h : here)
        if (!listed.count(h)) diff.extras.push_back(h);
    }
  }
  if (!same_size.empty()) {
    std::vector<std::string> hosts;
    for (const auto& [f, real] : same_size) hosts.push_back(f.path);
    auto report = hash_paths(root, hosts, HashOptions{cache_file, 0, {}});
    if (!report) return report.error();
    for (const auto& [f, real] : same_size) {
      auto d = report->digests.find(f.path);
      if (d != report->digests.end() && d->second == f.sha256) {
        ++diff.skipped;
        diff.skipped_bytes += f.size;
        continue;
      }
      struct stat st {};
      if (::lstat(real.c_str(), &st) != 0) return sys_error(real, "cannot stat the target");
      diff.copy.push_back(copy_entry(f, &st));
    }
  }
  return diff;
}

// Directories this op must make for the files it adds (the binary's, a model dir's, their
// parents), shallow first; undo removes them again when empty.
Result<json> dirs_to_create(const NodeRoot& root, const json& copy) {
  json dirs = json::array();
  std::set<std::string> dir_seen;
  for (const auto& c : copy)
    for (std::string d = parent_dir(c["path"].get<std::string>()); d != "/"; d = parent_dir(d)) {
      auto rd = root.resolve_ancestor(d);
      struct stat dst {};
      if (!rd) return rd.error();
      if (::stat(rd->c_str(), &dst) == 0) break;
      if (dir_seen.insert(d).second) dirs.push_back(d);
    }
  std::sort(dirs.begin(), dirs.end(), [](const json& a, const json& b) { return a.get<std::string>().size() < b.get<std::string>().size(); });
  return dirs;
}

// Bytes each file system must have free, keyed by device: (a path on it, bytes needed).
struct SpaceNeed {
  std::map<dev_t, std::pair<std::string, std::uint64_t>> need;
  std::uint64_t backup_copy_bytes = 0;
};

// Room: every differing file needs its full size on its file system while the old one is kept.
Result<SpaceNeed> space_needed(const NodeRoot& root, const StageDiff& diff, bool prune, const std::string& state_dir) {
  SpaceNeed s;
  struct stat state_st {};
  if (::stat(state_dir.c_str(), &state_st) != 0) return sys_error(state_dir, "cannot stat the state dir");
  for (const auto& c : diff.copy) {
    auto real = root.resolve(c["path"].get<std::string>());
    if (!real) return real.error();
    const std::string anc = existing_ancestor(parent_dir(*real));
    struct stat st {};
    if (::stat(anc.c_str(), &st) != 0) return sys_error(anc, "cannot stat");
    auto& n = s.need[st.st_dev];
    n.first = anc;
    n.second += c["size"].get<std::uint64_t>();
    if (c["exists"].get<bool>() && st.st_dev != state_st.st_dev) s.backup_copy_bytes += c["size"].get<std::uint64_t>();
  }
  if (prune)
    for (const auto& x : diff.extras) {
      auto real = root.resolve(x.get<std::string>());
      struct stat st {};
      if (real && ::lstat(real->c_str(), &st) == 0 && st.st_dev != state_st.st_dev) s.backup_copy_bytes += static_cast<std::uint64_t>(st.st_size);
    }
  if (s.backup_copy_bytes > 0) s.need[state_st.st_dev].second += s.backup_copy_bytes, s.need[state_st.st_dev].first = state_dir;
  return s;
}

// The free space of each file system against its need (evidence "space"); the first shortfall
// goes to `short_of_space`.
Result<json> check_free_space(const SpaceNeed& s, std::optional<Error>& short_of_space) {
  json space = json::array();
  for (const auto& [dev, n] : s.need) {
    struct statvfs vs {};
    if (::statvfs(n.first.c_str(), &vs) != 0) return sys_error(n.first, "cannot read free space");
    const std::uint64_t free_bytes = static_cast<std::uint64_t>(vs.f_bavail) * vs.f_frsize;
    space.push_back({{"path", n.first}, {"needed", n.second}, {"free", free_bytes}});
    if (n.second > free_bytes && !short_of_space)
      short_of_space = plain_error(n.first, "not enough space on the file system holding it: staging needs " +
                                                bytes_text(n.second) + " (the new files while the replaced ones are kept), " +
                                                bytes_text(free_bytes) + " are available; nothing was changed");
  }
  return space;
}

// Keeps every file to be replaced (and, with `prune`, every extra) under stage-backups/<op_id>,
// recording each backup in `ev` ("copy"[i].backup, "prune").
Status keep_backups(const NodeRoot& root, const std::string& state_dir, const std::string& op_id, bool prune,
                    const json& extras, json& ev) {
  const std::string rel_dir = "stage-backups/" + op_id;
  const std::string backup_dir = state_dir + "/" + rel_dir;
  if (::mkdir((state_dir + "/stage-backups").c_str(), 0700) != 0 && errno != EEXIST) return sys_error(state_dir, "cannot create stage-backups");
  if (::mkdir(backup_dir.c_str(), 0700) != 0 && errno != EEXIST) return sys_error(backup_dir, "cannot create");
  std::size_t k = 0;
  for (auto& c : ev["copy"]) {
    c["backup"] = nullptr;
    if (!c["exists"].get<bool>()) continue;
    auto real = root.resolve(c["path"].get<std::string>());
    if (!real) return real.error();
    const std::string name = std::to_string(k++);
    auto b = make_backup(*real, backup_dir + "/" + name, rel_dir + "/" + name);
    if (!b) return b.error();
    c["backup"] = *b;
  }
  json pruned = json::array();
  if (prune)
    for (const auto& x : extras) {
      auto real = root.resolve(x.get<std::string>());
      if (!real) return real.error();
      const std::string name = std::to_string(k++);
      auto b = make_backup(*real, backup_dir + "/" + name, rel_dir + "/" + name);
      if (!b) return b.error();
      pruned.push_back({{"path", x}, {"backup", *b}});
    }
  ev["prune"] = pruned;
  return fsync_dir(backup_dir);
}

// One file for apply to land.
struct Job {
  SourceFile f;
  std::string real;
  FileOwner owner;
};

// The files of the intent, largest first, and those already landed (resume after a crash).
struct LandPlan {
  std::vector<Job> jobs;
  std::set<std::string> done_already;
};

Result<LandPlan> plan_landing(const NodeRoot& root, const json& intent, const std::string& cache_file) {
  LandPlan plan;
  std::vector<std::string> landed_before;  // this op's files already in place (resume after a crash)
  for (const auto& c : intent.at("copy")) {
    auto f = SourceFile::from_json(c);
    if (!f) return f.error();
    auto real = root.resolve(f->path);
    if (!real) return real.error();
    struct stat st {}, pst {};
    if (::lstat(real->c_str(), &st) == 0 && static_cast<std::uint64_t>(st.st_size) == f->size &&
        ::lstat(partial_path(*real).c_str(), &pst) != 0)
      landed_before.push_back(f->path);
    plan.jobs.push_back({*f, *real, FileOwner{static_cast<mode_t>(f->mode), c.value("uid", 0u), c.value("gid", 0u)}});
  }
  if (!landed_before.empty()) {
    auto report = hash_paths(root, landed_before, HashOptions{cache_file, 0, {}});
    if (report)
      for (const auto& j : plan.jobs)
        if (auto d = report->digests.find(j.f.path); d != report->digests.end() && d->second == j.f.sha256)
          plan.done_already.insert(j.f.path);
  }
  // Largest first, so the long files start early and the small ones fill in around them.
  std::sort(plan.jobs.begin(), plan.jobs.end(), [](const Job& a, const Job& b) { return a.f.size > b.f.size; });
  return plan;
}

void start_progress(StageProgress& progress, const std::vector<Job>& jobs) {
  progress.total_bytes = 0;
  for (const auto& j : jobs) progress.total_bytes += j.f.size;
  progress.files_total = jobs.size();
  progress.done_bytes = 0;
  progress.files_done = 0;
  progress.running = true;
}

// Lands the plan's files, stage.parallel at a time; the first error stops the others.
std::optional<Error> land_all(StageSource& source, const Stage& cfg, const LandPlan& plan, StageProgress& progress,
                              std::atomic<std::uint64_t>& fetched, std::atomic<std::uint64_t>& resumed) {
  const auto& jobs = plan.jobs;
  RateLimiter limiter(cfg.rate_limit.value_or(0));
  std::atomic<std::size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::optional<Error> first_error;
  auto worker = [&] {
    for (std::size_t i = next++; i < jobs.size() && !stop; i = next++) {
      const Job& j = jobs[i];
      if (plan.done_already.count(j.f.path)) {
        progress.done_bytes += j.f.size;
        progress.files_done++;
        continue;
      }
      LandOptions o;
      o.chunk = cfg.chunk;
      o.owner = j.owner;
      o.limiter = &limiter;
      o.on_bytes = [&](std::uint64_t n) { progress.done_bytes += n; };
      auto r = land_file(source, j.f, j.real, o);
      if (!r) {
        std::lock_guard lock(mu);
        if (!first_error) first_error = r.error();
        stop = true;
        return;
      }
      fetched += r->fetched;
      resumed += r->resumed;
      progress.files_done++;
    }
  };
  const unsigned n_threads = static_cast<unsigned>(std::min<std::size_t>(static_cast<std::size_t>(cfg.parallel), std::max<std::size_t>(jobs.size(), 1)));
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < n_threads; ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  return first_error;
}

// Removes the extras the intent names (stage.prune); their backups were kept by plan.
Result<std::size_t> prune_extras(const NodeRoot& root, const json& intent) {
  std::size_t pruned = 0;
  for (const auto& p : intent.value("prune", json::array())) {
    auto real = root.resolve(p.at("path").get<std::string>());
    if (!real) return real.error();
    if (::unlink(real->c_str()) == 0) ++pruned;
    else if (errno != ENOENT) return sys_error(*real, "cannot remove an extra file (stage.prune)");
  }
  return pruned;
}

}  // namespace

json StageProgress::to_json() const {
  return {{"running", running.load()},         {"total_bytes", total_bytes.load()}, {"done_bytes", done_bytes.load()},
          {"files_total", files_total.load()}, {"files_done", files_done.load()}};
}

Result<json> StageStep::compare(const StepContext& ctx, bool make_backups) const {
  if (!source_) return plain_error("", "this agent has no stage source (only undo is possible here)");
  auto listing = source_->list();
  if (!listing) {
    Error e = listing.error();
    e.message = "listing the source " + source_->where() + ": " + e.message;
    return e;
  }
  if (auto c = check_listing(*listing, paths_); !c) return c.error();
  const NodeRoot& root = ctx.root;
  auto diff = diff_with_source(root, *listing, cache_file_);
  if (!diff) return diff.error();
  auto dirs = dirs_to_create(root, diff->copy);
  if (!dirs) return dirs.error();
  const std::string state_dir = ctx.journal.dir();
  auto need = space_needed(root, *diff, cfg_.prune, state_dir);
  if (!need) return need.error();
  const std::uint64_t backup_copy_bytes = need->backup_copy_bytes;
  const std::uint64_t kept_bytes = kept_backup_bytes(state_dir, ctx.op_id);
  std::optional<Error> short_of_space;
  auto space = check_free_space(*need, short_of_space);
  if (!space) return space.error();
  std::uint64_t bytes = 0;
  for (const auto& c : diff->copy) bytes += c["size"].get<std::uint64_t>();
  json ev{{"source", source_->where()},   {"files", listing->entries.empty() ? 0 : diff->copy.size() + diff->skipped},
          {"copy", diff->copy},          {"bytes", bytes},
          {"skipped", diff->skipped},    {"skipped_bytes", diff->skipped_bytes},
          {"extras", diff->extras},      {"prune", cfg_.prune},
          {"dirs_created", *dirs},       {"space", *space},
          {"backup_copy_bytes", backup_copy_bytes}, {"backup_kept_bytes", kept_bytes},
          {"backup_budget", cfg_.backup_budget}};
  // The budget bounds what the state dir alone holds: backups kept by earlier stages (until a later
  // bind or `tandemctl stage --release-backups` frees them) plus the copies this one makes.
  if (kept_bytes + backup_copy_bytes > cfg_.backup_budget && !short_of_space)
    short_of_space = plain_error(state_dir + "/stage-backups",
                                 "backups need " + bytes_text(kept_bytes + backup_copy_bytes) + " (" + bytes_text(kept_bytes) +
                                     " kept by earlier stages, " + bytes_text(backup_copy_bytes) +
                                     " of copies for this one: the state dir is on another file system than the "
                                     "targets), over stage.backup_budget " + bytes_text(cfg_.backup_budget) +
                                     "; `tandemctl stage --release-backups` frees the earlier ones; nothing was changed");
  if (short_of_space) {
    set_evidence(*short_of_space, ev);
    return *short_of_space;
  }
  if (!make_backups) return ev;
  if (auto k = keep_backups(root, state_dir, ctx.op_id, cfg_.prune, diff->extras, ev); !k) return k.error();
  return ev;
}

Result<json> release_stage_backups(const std::string& state_dir, const std::string& op_id) {
  if (!valid_op_id(op_id)) return plain_error(state_dir, "invalid op id '" + op_id + "'");
  const std::string dir = state_dir + "/stage-backups/" + op_id;
  std::vector<std::string> files;
  list_files(dir, dir, files);
  std::uint64_t freed = 0;
  for (const auto& f : files) {
    struct stat st {};
    if (::lstat(f.c_str(), &st) == 0 && st.st_nlink == 1) freed += static_cast<std::uint64_t>(st.st_size);
    if (::unlink(f.c_str()) != 0 && errno != ENOENT) return sys_error(f, "cannot remove a stage backup");
  }
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) return sys_error(dir, "cannot remove the stage backup directory");
  return json{{"files", files.size()}, {"freed_bytes", freed}};
}

Result<json> StageStep::check(const StepContext& ctx) { return compare(ctx, false); }

Result<json> StageStep::plan(const StepContext& ctx) { return compare(ctx, true); }

Result<json> StageStep::apply(const StepContext& ctx, const json& intent) {
  if (!source_) return plain_error("", "this agent has no stage source (only undo is possible here)");
  const auto t0 = std::chrono::steady_clock::now();
  const NodeRoot& root = ctx.root;
  if (auto d = make_dirs_under(root, intent.value("dirs_created", std::vector<std::string>{})); !d) return d.error();
  auto plan = plan_landing(root, intent, cache_file_);
  if (!plan) return plan.error();
  const auto& jobs = plan->jobs;
  auto progress = progress_ ? progress_ : std::make_shared<StageProgress>();
  start_progress(*progress, jobs);
  std::atomic<std::uint64_t> fetched{0}, resumed{0};
  std::optional<Error> first_error = land_all(*source_, cfg_, *plan, *progress, fetched, resumed);
  progress->running = false;
  if (first_error) {
    set_evidence(*first_error, {{"files_done", progress->files_done.load()}, {"files_total", jobs.size()},
                                {"bytes_fetched", fetched.load()}});
    return *first_error;
  }
  auto pruned = prune_extras(root, intent);
  if (!pruned) return pruned.error();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return json{{"source", intent.value("source", "")},
              {"files", intent.value("files", 0)},
              {"copied", jobs.size() - plan->done_already.size()},
              {"skipped", intent.value("skipped", 0)},
              {"bytes", fetched.load()},
              {"resumed_bytes", resumed.load()},
              {"seconds", secs},
              {"mb_per_s", secs > 0 ? static_cast<double>(fetched.load()) / 1e6 / secs : 0.0},
              {"extras", intent.value("extras", json::array())},
              {"pruned", *pruned}};
}

Result<json> StageStep::verify(const StepContext& ctx, const json& intent, const json&) {
  std::vector<std::string> paths;
  for (const auto& c : intent.at("copy")) paths.push_back(c.at("path").get<std::string>());
  json changed = json::array();
  if (!paths.empty()) {
    auto report = hash_paths(ctx.root, paths, HashOptions{cache_file_, 0, {}});
    if (!report) return report.error();
    for (const auto& c : intent.at("copy")) {
      auto d = report->digests.find(c.at("path").get<std::string>());
      if (d == report->digests.end() || d->second != c.at("sha256").get<std::string>()) changed.push_back(c.at("path"));
    }
  }
  json ev{{"files", paths.size()}, {"changed", changed}};
  if (!changed.empty()) {
    Error e = plain_error("", std::to_string(changed.size()) + " staged file(s) do not hash as the source listed them");
    set_evidence(e, ev);
    return e;
  }
  return ev;
}

Result<json> StageStep::undo(const StepContext& ctx, const json& intent) {
  const NodeRoot& root = ctx.root;
  const std::string state_dir = ctx.journal.dir();
  std::size_t restored = 0, removed = 0;
  const json copy = intent.value("copy", json::array());
  for (auto it = copy.rbegin(); it != copy.rend(); ++it) {
    const json& c = *it;
    auto real = root.resolve(c.at("path").get<std::string>());
    if (!real) return real.error();
    // A verified partial stays beside the target (hashing ignores it): the next stage resumes it.
    if (c.contains("backup") && c["backup"].is_object()) {
      if (auto r = restore_backup(state_dir, c["backup"], *real); !r) return r.error();
      ++restored;
    } else {
      struct stat st {};
      if (::lstat(real->c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
        if (::unlink(real->c_str()) != 0) return sys_error(*real, "cannot remove a file this stage created");
        ++removed;
      }
    }
  }
  for (const auto& p : intent.value("prune", json::array())) {
    if (!p.is_object()) continue;
    auto real = root.resolve(p.at("path").get<std::string>());
    if (!real) return real.error();
    if (auto r = restore_backup(state_dir, p.at("backup"), *real); !r) return r.error();
    ++restored;
  }
  json left = json::array();
  const json dirs = intent.value("dirs_created", json::array());
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    auto real = root.resolve_ancestor(it->get<std::string>());
    if (real && ::rmdir(real->c_str()) != 0 && errno != ENOENT) left.push_back(*it);
  }
  // The backups are back in place (or were never made); their links and copies can go.
  const std::string backup_dir = state_dir + "/stage-backups/" + ctx.op_id;
  std::vector<std::string> files;
  list_files(backup_dir, backup_dir, files);
  for (const auto& f : files) ::unlink(f.c_str());
  ::rmdir(backup_dir.c_str());
  return json{{"restored", restored}, {"removed", removed}, {"dirs_left", left}};
}

}  // namespace tandem::agent
