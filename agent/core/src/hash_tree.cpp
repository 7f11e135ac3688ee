#include "tandem/agent/hash_tree.hpp"

#include <dirent.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "tandem/agent/fs.hpp"
#include "tandem/agent/sha256.hpp"
#include "tandem/agent/stage_landing.hpp"

namespace tandem::agent {
namespace {

struct FileJob {
  std::string host;  // host path, the key in the report
  std::string real;
  std::string tree;  // the directory it came from ("" for a file named directly)
  std::string rel;   // name relative to `tree`
  struct stat st {};
  std::string digest;
  std::optional<Error> error;
};

std::int64_t mtime_ns(const struct stat& st) { return st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec; }

// Regular files under a directory, recursively, by host path. Symlinks are followed only through
// NodeRoot (so they stay inside the root and allow-list) and only to files, never into dirs.
Status expand_dir(const NodeRoot& root, const std::string& tree, const std::string& host_dir, std::vector<FileJob>& out) {
  auto real = root.resolve(host_dir);
  if (!real) return real.error();
  DIR* d = ::opendir(real->c_str());
  if (!d) return sys_error(host_dir, "cannot list directory");
  std::vector<std::string> names;
  while (auto* e = ::readdir(d)) {
    std::string n = e->d_name;
    // A stage's own temporary files (stage_landing.hpp) are not part of the tree: a cut transfer
    // leaves its verified partial beside the target for the next stage to resume.
    if (n != "." && n != ".." && !is_stage_temp_name(n)) names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    const std::string host = host_dir + "/" + n;
    struct stat lst {};
    if (::lstat((*real + "/" + n).c_str(), &lst) != 0) continue;
    if (S_ISDIR(lst.st_mode)) {
      auto s = expand_dir(root, tree, host, out);
      if (!s) return s;
      continue;
    }
    auto file_real = root.resolve(host);
    if (!file_real) return file_real.error();
    FileJob j;
    j.host = host;
    j.real = *file_real;
    j.tree = tree;
    j.rel = host.substr(tree.size() + 1);
    if (::stat(j.real.c_str(), &j.st) != 0) return sys_error(host, "cannot stat");
    if (S_ISREG(j.st.st_mode)) out.push_back(std::move(j));
  }
  return Ok{};
}

nlohmann::json load_cache(const std::string& file) {
  if (file.empty()) return nlohmann::json::object();
  auto text = read_file(file);
  if (!text) return nlohmann::json::object();
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("version", 0) != 1 || !j.contains("entries")) {
    spdlog::warn("{}: hash cache unreadable; starting empty", file);
    return nlohmann::json::object();
  }
  return j["entries"];
}

bool cache_hit(const nlohmann::json& entries, FileJob& j) {
  auto it = entries.find(j.real);
  if (it == entries.end()) return false;
  const auto& e = *it;
  if (e.value("size", std::uint64_t{0}) != static_cast<std::uint64_t>(j.st.st_size) || e.value("mtime_ns", std::int64_t{0}) != mtime_ns(j.st) ||
      e.value("inode", std::uint64_t{0}) != j.st.st_ino)
    return false;
  j.digest = e.value("sha256", "");
  return j.digest.size() == 64;
}

}  // namespace

nlohmann::json HashReport::to_json() const {
  return {{"files", digests}, {"trees", trees}, {"total_bytes", total_bytes}, {"bytes_read", bytes_read},
          {"cache", {{"hits", cache_hits}, {"misses", cache_misses}}}};
}

Result<HashReport> hash_paths(const NodeRoot& root, const std::vector<std::string>& host_paths, const HashOptions& opts) {
  std::vector<FileJob> jobs;
  for (const auto& p : host_paths) {
    auto real = root.resolve(p);
    if (!real) return real.error();
    struct stat st {};
    if (::stat(real->c_str(), &st) != 0) return sys_error(p, "cannot stat file to hash");
    if (S_ISDIR(st.st_mode)) {
      auto s = expand_dir(root, normalize_host_path(p), normalize_host_path(p), jobs);
      if (!s) return s.error();
    } else if (S_ISREG(st.st_mode)) {
      FileJob j;
      j.host = normalize_host_path(p);
      j.real = *real;
      j.st = st;
      jobs.push_back(std::move(j));
    } else {
      return plain_error(p, "not a regular file or directory; refusing to hash");
    }
  }
  nlohmann::json entries = load_cache(opts.cache_file);
  HashReport report;
  std::vector<std::size_t> to_hash;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    report.total_bytes += static_cast<std::uint64_t>(jobs[i].st.st_size);
    if (cache_hit(entries, jobs[i])) ++report.cache_hits;
    else to_hash.push_back(i);
  }
  report.cache_misses = to_hash.size();
  // Largest first: one SHA-256 cannot be split across threads, so the longest file must start at
  // once; the small ones fill the other threads around it (the tree takes max(largest, total/n)).
  std::stable_sort(to_hash.begin(), to_hash.end(),
                   [&](std::size_t a, std::size_t b) { return jobs[a].st.st_size > jobs[b].st.st_size; });
  std::atomic<std::size_t> next{0};
  std::atomic<std::uint64_t> read_total{0};
  auto worker = [&] {
    for (std::size_t k; (k = next.fetch_add(1)) < to_hash.size();) {
      FileJob& j = jobs[to_hash[k]];
      const auto total = static_cast<std::uint64_t>(j.st.st_size);
      auto d = sha256_file(j.real, [&](std::uint64_t done, std::uint64_t chunk) {
        read_total += chunk;
        if (opts.progress) opts.progress(HashProgress{j.host, done, total, chunk});
      });
      if (d) j.digest = *d;
      else j.error = d.error();
    }
  };
  unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  unsigned n = std::min<unsigned>(opts.max_threads ? std::min(opts.max_threads, hw) : hw, static_cast<unsigned>(to_hash.size()));
  std::vector<std::thread> pool;
  for (unsigned i = 1; i < n; ++i) pool.emplace_back(worker);
  if (n > 0) worker();  // this thread works too
  for (auto& t : pool) t.join();
  report.bytes_read = read_total.load();

  nlohmann::json errors = nlohmann::json::array();
  for (auto& j : jobs) {
    if (j.error) {
      errors.push_back(to_json(*j.error));
      continue;
    }
    report.digests[j.host] = j.digest;
    if (!j.tree.empty()) report.trees[j.tree][j.rel] = j.digest;
    entries[j.real] = {{"size", j.st.st_size}, {"mtime_ns", mtime_ns(j.st)}, {"inode", j.st.st_ino}, {"sha256", j.digest}};
  }
  if (!opts.cache_file.empty() && report.cache_misses > 0) {
    nlohmann::json doc{{"version", 1}, {"entries", entries}};
    auto w = replace_file(opts.cache_file, doc.dump(1), FileOwner{0600, ::geteuid(), ::getegid()});
    if (!w) spdlog::warn("{}", w.error().text());  // a lost cache costs time, not correctness
  }
  if (!errors.empty()) {
    Error e = plain_error("", std::to_string(errors.size()) + " file(s) could not be hashed");
    set_evidence(e, {{"errors", errors}});
    return e;
  }
  return report;
}

}  // namespace tandem::agent
