// Where staged files come from. The head's agent serves its own copies (LocalStageSource, behind
// GET /v1/stage/source/*); another node reads them through the same interface over mutual TLS
// (agent/src/remote_stage_source.cpp). The listing carries each file's size, SHA-256 and mtime,
// and every read names the size and mtime it expects, so a file that changes on the source after
// it was listed is refused at the next chunk instead of landing torn.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/agent/error.hpp"
#include "tandem/agent/node_root.hpp"
#include "tandem/manifest.hpp"

namespace tandem::agent {

struct SourceFile {
  std::string path;  // host path on the target (the source reads it at its stage.files source path)
  std::uint64_t size = 0;
  std::string sha256;
  std::int64_t mtime_ns = 0;
  unsigned mode = 0644;  // permission bits the landed copy gets
  nlohmann::json to_json() const;
  static Result<SourceFile> from_json(const nlohmann::json& j);
};

struct SourceEntry {
  std::string path;  // a staged path (tandem::StagedPath::path)
  bool dir = false;
  std::vector<SourceFile> files;  // a file entry has exactly one, with path == entry path
};

struct SourceListing {
  std::vector<SourceEntry> entries;
  std::uint64_t total_bytes() const;
  nlohmann::json to_json() const;
  // Every path checked: absolute, no "..", inside the entry it is listed under.
  static Result<SourceListing> from_json(const nlohmann::json& j);
};

class StageSource {
 public:
  virtual ~StageSource() = default;
  virtual std::string where() const = 0;  // for messages: "head rank0 (127.0.0.1:17443)"
  virtual Result<SourceListing> list() = 0;
  // Bytes [offset, offset + length) of `f` (fewer only at its end). Refused when the file's size
  // or mtime is no longer the listed one: it changed on the source.
  virtual Result<std::string> read(const SourceFile& f, std::uint64_t offset, std::uint64_t length) = 0;
};

// Error::code of a read whose source went away mid-stage without an answer (a controller that
// stopped pushing: pushed_source.hpp). The stage op is then left open, as after a crash, rather
// than recorded as failed: the same op id (a resumed bind) carries on from its partials.
inline constexpr int kStageSourceGone = 2701;

// The largest read one request may ask for (the manifest's stage.chunk is at most this).
inline constexpr std::uint64_t kMaxStageRead = 64ull << 20;

// This node's own files, for exactly the staged paths: a path not named by the stage section (or
// not inside a named directory) is refused before anything is opened.
class LocalStageSource : public StageSource {
 public:
  // `pins`: a pinned digest the source's copy must have, or nothing is served from the listing.
  LocalStageSource(NodeRoot root, std::vector<StagedPath> paths, std::vector<PinnedFile> pins, std::string cache_file,
                   std::string where);
  std::string where() const override { return where_; }
  Result<SourceListing> list() override;
  Result<std::string> read(const SourceFile& f, std::uint64_t offset, std::uint64_t length) override;
  // Is `host_path` a staged file, or a file inside a staged directory?
  bool serves(const std::string& host_path) const;
  // Where the file listed as `target` is read here (stage.files may name another path).
  std::string source_of(const std::string& target) const;

 private:
  NodeRoot root_;
  std::vector<StagedPath> paths_;
  std::vector<PinnedFile> pins_;
  std::string cache_file_;
  std::string where_;
};

}  // namespace tandem::agent
