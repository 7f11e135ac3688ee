// A strict reader over yaml-cpp nodes: every read is typed, every key is accounted for, and
// every problem becomes a Diagnostic at the line and column of the offending key or value.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tandem/diagnostics.hpp"
#include "tandem/manifest.hpp"
#include "tandem/units.hpp"

namespace tandem::yaml {

class Context {
 public:
  Context(std::string file, Diagnostics& out) : file_(std::move(file)), out_(out) {}
  void error(const YAML::Node& at, const std::string& message);
  void error(Mark at, const std::string& message);
  Mark mark_of(const YAML::Node& n) const;
  const std::string& file() const { return file_; }
  // Marks of every key read, by dotted path ("engine.serve.port"), for cross-field checks.
  std::map<std::string, Mark> marks;
  // Paths whose value was given but could not be read (already reported). Their marks are
  // dropped, so cross-field checks do not pile a second, misleading error on a default value.
  std::set<std::string> bad;
  void failed(const std::string& path) {
    marks.erase(path);
    bad.insert(path);
  }

 private:
  std::string file_;
  Diagnostics& out_;
};

const char* kind_name(const YAML::Node& n);

// Reads one YAML mapping. Keys must be declared by reading them; finish() reports the rest.
class MapReader {
 public:
  // `path` is the dotted location ("engine.serve"); `parent` marks a missing map.
  MapReader(Context& ctx, const YAML::Node& node, std::string path, Mark parent = {});
  bool ok() const { return ok_; }
  bool has(const std::string& key) const;
  YAML::Node value(const std::string& key) const;
  Mark key_mark(const std::string& key) const;
  Mark mark() const { return mark_; }
  std::string child_path(const std::string& key) const;
  void require(const std::string& key);  // error if absent

  // Each returns false (and reports) on a type or range error, true if absent or read.
  bool str(const std::string& key, std::string& out, bool required = false);
  bool one_of(const std::string& key, std::string& out, const std::vector<std::string>& allowed,
              bool required = false);
  bool integer(const std::string& key, int& out, long long lo, long long hi, bool required = false);
  bool number(const std::string& key, double& out, double lo, double hi, bool lo_open = false);
  bool boolean(const std::string& key, bool& out);
  bool size(const std::string& key, std::optional<std::uint64_t>& out, bool required = false);
  bool duration(const std::string& key, Duration& out, bool positive = true);
  bool abs_path(const std::string& key, std::string& out, bool required = false);
  // An http:// or https:// URL that tandem/url.hpp's parse_http_url accepts (the same reader the
  // HTTP clients use).
  bool url(const std::string& key, std::string& out, bool required = false);
  bool str_list(const std::string& key, std::vector<std::string>& out, bool non_empty = false);
  bool port(const std::string& key, int& out, bool required = false) {
    return integer(key, out, 1, 65535, required);
  }

  // Report keys that were never read, with the allowed set and a spelling hint.
  void finish();

 private:
  bool fail(const std::string& key);                      // marks `key` as unreadable; false
  bool text(const std::string& key, std::string& out);  // a scalar; a bare `key:` is reported at the key
  Context& ctx_;
  YAML::Node node_;
  std::string path_;
  Mark mark_;
  bool ok_ = false;
  std::map<std::string, YAML::Node> values_;
  std::map<std::string, Mark> key_marks_;
  std::vector<std::string> order_;
  mutable std::set<std::string> declared_;  // every key this reader asked about
  Mark missing_at_;                          // where a missing key is reported
};

// Scalar helpers that report at the node itself.
bool as_string(Context& ctx, const YAML::Node& n, const std::string& what, std::string& out);
bool as_abs_path(Context& ctx, const YAML::Node& n, const std::string& what, std::string& out);

// Converts a YAML value (map/seq/scalar) to compact JSON text; scalars that read as
// true/false/null/numbers become JSON literals, everything else a JSON string.
// nullopt when nested deeper than 32 levels (an alias cycle like `&a {x: *a}` never ends) or
// when it expands to more than 10,000 values (aliases of aliases), or when a string in it is not
// valid UTF-8 (JSON text must be).
std::optional<std::string> to_json_text(const YAML::Node& n);

}  // namespace tandem::yaml
