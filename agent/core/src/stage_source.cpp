#include "tandem/agent/stage_source.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "tandem/agent/fs.hpp"
#include "tandem/agent/hash_tree.hpp"

namespace tandem::agent {
namespace {

using nlohmann::json;

std::int64_t mtime_of(const struct stat& st) { return st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec; }

bool is_hex64(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace

json SourceFile::to_json() const {
  return {{"path", path}, {"size", size}, {"sha256", sha256}, {"mtime_ns", mtime_ns}, {"mode", mode}};
}

Result<SourceFile> SourceFile::from_json(const json& j) {
  SourceFile f;
  try {
    f.path = j.at("path").get<std::string>();
    f.size = j.at("size").get<std::uint64_t>();
    f.sha256 = j.at("sha256").get<std::string>();
    f.mtime_ns = j.at("mtime_ns").get<std::int64_t>();
    f.mode = j.at("mode").get<unsigned>() & 07777u;
  } catch (const json::exception& e) {
    return plain_error("", std::string("a staged file's description is malformed: ") + e.what());
  }
  if (normalize_host_path(f.path) != f.path) return plain_error(f.path, "refused: not a normalised absolute host path");
  if (!is_hex64(f.sha256)) return plain_error(f.path, "refused: the listed SHA-256 is not 64 lowercase hex digits");
  return f;
}

std::uint64_t SourceListing::total_bytes() const {
  std::uint64_t n = 0;
  for (const auto& e : entries)
    for (const auto& f : e.files) n += f.size;
  return n;
}

json SourceListing::to_json() const {
  json out = json::array();
  for (const auto& e : entries) {
    json files = json::array();
    for (const auto& f : e.files) files.push_back(f.to_json());
    out.push_back({{"path", e.path}, {"dir", e.dir}, {"files", files}});
  }
  return {{"entries", out}};
}

Result<SourceListing> SourceListing::from_json(const json& j) {
  SourceListing l;
  if (!j.is_object() || !j.contains("entries") || !j["entries"].is_array())
    return plain_error("", "the source's listing has no 'entries' list");
  for (const auto& je : j["entries"]) {
    SourceEntry e;
    if (!je.is_object() || !je.contains("path") || !je["path"].is_string() || !je.contains("files") ||
        !je["files"].is_array())
      return plain_error("", "a listing entry is not {path, dir, files}");
    e.path = je["path"].get<std::string>();
    e.dir = je.value("dir", false);
    if (normalize_host_path(e.path) != e.path) return plain_error(e.path, "refused: not a normalised absolute host path");
    for (const auto& jf : je["files"]) {
      auto f = SourceFile::from_json(jf);
      if (!f) return f.error();
      // A hostile or confused source must not steer a write outside the entry it lists.
      const bool inside = e.dir ? path_within(f->path, e.path) && f->path != e.path : f->path == e.path;
      if (!inside) return plain_error(f->path, "refused: listed under " + e.path + " but not inside it");
      e.files.push_back(std::move(*f));
    }
    l.entries.push_back(std::move(e));
  }
  return l;
}

LocalStageSource::LocalStageSource(NodeRoot root, std::vector<StagedPath> paths, std::vector<PinnedFile> pins,
                                   std::string cache_file, std::string where)
    : root_(std::move(root)),
      paths_(std::move(paths)),
      pins_(std::move(pins)),
      cache_file_(std::move(cache_file)),
      where_(std::move(where)) {}

std::string LocalStageSource::source_of(const std::string& target) const {
  for (const auto& p : paths_)
    if (!p.dir && p.path == target && !p.source.empty()) return p.source;
  return target;
}

bool LocalStageSource::serves(const std::string& host_path) const {
  const std::string n = normalize_host_path(host_path);
  if (n.empty() || n != host_path) return false;
  for (const auto& p : paths_)
    if (p.dir ? path_within(n, p.path) && n != p.path : n == p.path) return true;
  return false;
}

Result<SourceListing> LocalStageSource::list() {
  // What is read here: a stage.files entry's source path, else the staged path itself.
  std::vector<std::string> sources;
  for (const auto& p : paths_) sources.push_back(p.source.empty() ? p.path : p.source);
  auto report = hash_paths(root_, sources, HashOptions{cache_file_, 0, {}});
  if (!report) return report.error();
  SourceListing l;
  // Listed under the target's name: the worker only ever sees where the file goes.
  auto describe = [&](const std::string& host, const std::string& digest) -> Result<SourceFile> {
    const std::string from = source_of(host);
    auto real = root_.resolve(from);
    if (!real) return real.error();
    struct stat st {};
    if (::stat(real->c_str(), &st) != 0) return sys_error(from, "cannot stat on the source");
    return SourceFile{host, static_cast<std::uint64_t>(st.st_size), digest, mtime_of(st), st.st_mode & 07777u};
  };
  for (const auto& p : paths_) {
    SourceEntry e{p.path, p.dir, {}};
    if (p.dir) {
      auto tree = report->trees.find(p.path);
      if (tree != report->trees.end())
        for (const auto& [rel, digest] : tree->second) {
          auto f = describe(p.path + "/" + rel, digest);
          if (!f) return f.error();
          e.files.push_back(std::move(*f));
        }
    } else {
      const std::string from = p.source.empty() ? p.path : p.source;
      auto d = report->digests.find(from);
      if (d == report->digests.end()) return plain_error(from, "the source has no such file");
      if (!p.sha256.empty() && d->second != p.sha256)
        return plain_error(from, "the source's copy hashes to " + d->second + " but the manifest pins " + p.sha256 +
                                     (from == p.path ? "" : " (staged to " + p.path + ")") + "; refusing to stage it");
      auto f = describe(p.path, d->second);
      if (!f) return f.error();
      e.files.push_back(std::move(*f));
    }
    l.entries.push_back(std::move(e));
  }
  // A pinned file is served only with its pinned bytes: a wrong source must not spread.
  for (const auto& pin : pins_) {
    if (pin.sha256.empty()) continue;
    auto d = report->digests.find(normalize_host_path(pin.path));
    if (d != report->digests.end() && d->second != pin.sha256)
      return plain_error(pin.path, "the source's copy hashes to " + d->second + " but the manifest pins " + pin.sha256 +
                                       "; refusing to stage it");
  }
  return l;
}

Result<std::string> LocalStageSource::read(const SourceFile& f, std::uint64_t offset, std::uint64_t length) {
  if (!serves(f.path)) return plain_error(f.path, "refused: not a path the manifest's stage section names");
  if (length > kMaxStageRead) return plain_error(f.path, "refused: a read of more than 64 MiB");
  auto real = root_.resolve(source_of(f.path));
  if (!real) return real.error();
  OwnedFd fd{::open(real->c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) return sys_error(f.path, "cannot open on the source");
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) return sys_error(f.path, "cannot stat on the source");
  if (!S_ISREG(st.st_mode)) return plain_error(f.path, "refused: not a regular file on the source");
  if (static_cast<std::uint64_t>(st.st_size) != f.size || mtime_of(st) != f.mtime_ns)
    return plain_error(f.path, "changed on the source since it was listed (size " + std::to_string(f.size) + " -> " +
                                   std::to_string(st.st_size) + ", mtime changed: " +
                                   (mtime_of(st) != f.mtime_ns ? "yes" : "no") + "); refused");
  if (offset > f.size) return plain_error(f.path, "refused: offset past the end of the file");
  std::string out(static_cast<std::size_t>(std::min(length, f.size - offset)), '\0');
  std::size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::pread(fd.fd, out.data() + got, out.size() - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error(f.path, "read failed on the source");
    if (n == 0) return plain_error(f.path, "changed on the source: it ended early; refused");
    got += static_cast<std::size_t>(n);
  }
  return out;
}

}  // namespace tandem::agent
