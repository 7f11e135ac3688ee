// SHA-256 of many files at once: directories expanded to their regular files (sorted, relative
// names, so model and drafter dirs compare across ranks), files hashed in parallel on a small
// pool (at most hardware_concurrency threads), digests cached by (path, size, mtime_ns, inode)
// in a JSON file so a re-run does not re-read unchanged multi-GiB shards.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/agent/error.hpp"
#include "tandem/agent/node_root.hpp"

namespace tandem::agent {

struct HashProgress {
  std::string path;  // host path of the file being read
  std::uint64_t file_done = 0;
  std::uint64_t file_total = 0;
  std::uint64_t chunk = 0;  // bytes read by this call's chunk (sum of chunks = bytes read)
};
// Called from worker threads after every 1 MiB chunk; must be thread-safe.
using ProgressFn = std::function<void(const HashProgress&)>;

struct HashOptions {
  std::string cache_file;  // real path of the JSON cache; empty: no cache
  unsigned max_threads = 0;  // 0: hardware_concurrency
  ProgressFn progress;
};

struct HashReport {
  std::map<std::string, std::string> digests;  // host path -> sha256 (files inside dirs included)
  std::map<std::string, std::map<std::string, std::string>> trees;  // dir -> relative name -> sha256
  std::uint64_t total_bytes = 0;
  std::uint64_t bytes_read = 0;  // 0 on a fully cached run
  std::size_t cache_hits = 0;
  std::size_t cache_misses = 0;
  nlohmann::json to_json() const;
};

Result<HashReport> hash_paths(const NodeRoot& root, const std::vector<std::string>& host_paths, const HashOptions& opts);

}  // namespace tandem::agent
