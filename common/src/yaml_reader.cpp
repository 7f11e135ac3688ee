#include "yaml_reader.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "tandem/names.hpp"
#include "tandem/url.hpp"

namespace tandem::yaml {
namespace {

std::string q(const std::string& s) { return "'" + s + "'"; }

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += items[i];
  }
  return out;
}

bool parse_int(const std::string& s, long long& out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  out = v;
  return true;
}

bool parse_double(const std::string& s, double& out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v)) return false;
  out = v;
  return true;
}

}  // namespace

void Context::error(const YAML::Node& at, const std::string& message) { error(mark_of(at), message); }

// Messages quote values from the file; a newline or NUL in one must not split or cut the line.
void Context::error(Mark at, const std::string& message) {
  out_.push_back(Diagnostic{file_, at.line, at.column, printable(message)});
}

Mark Context::mark_of(const YAML::Node& n) const {
  if (!n.IsDefined()) return {};
  auto m = n.Mark();
  if (m.line < 0) return {};
  return Mark{m.line + 1, m.column + 1};
}

const char* kind_name(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "nothing";
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a list";
  return "a scalar";
}

MapReader::MapReader(Context& ctx, const YAML::Node& node, std::string path, Mark parent)
    : ctx_(ctx), node_(node), path_(std::move(path)), mark_(ctx.mark_of(node)) {
  // A bare `key:` has no text of its own (yaml-cpp marks the next token): report at the key.
  if (mark_.line == 0 || (node.IsNull() && parent.line)) mark_ = parent;
  // A missing key is reported at the key that opened this map ("serve:"), else at the map itself.
  missing_at_ = parent.line ? parent : mark_;
  if (!node.IsMap()) {
    ctx_.error(mark_, (path_.empty() ? std::string("the manifest") : q(path_)) +
                          " must be a map of keys, got " + kind_name(node));
    if (!path_.empty()) ctx_.failed(path_);
    return;
  }
  ok_ = true;
  for (auto it = node.begin(); it != node.end(); ++it) {
    Mark km = ctx_.mark_of(it->first);
    if (!it->first.IsScalar()) {
      ctx_.error(km, "keys must be plain names in " + (path_.empty() ? "the manifest" : q(path_)));
      continue;
    }
    std::string key = it->first.Scalar();
    if (values_.count(key)) {
      ctx_.error(km, "duplicate key " + q(key) + " (first given at line " +
                         std::to_string(key_marks_[key].line) + ")");
      continue;
    }
    values_[key] = it->second;
    key_marks_[key] = km;
    order_.push_back(key);
  }
}

std::string MapReader::child_path(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

bool MapReader::has(const std::string& key) const {
  declared_.insert(key);
  return values_.count(key) != 0;
}

YAML::Node MapReader::value(const std::string& key) const {
  declared_.insert(key);
  auto it = values_.find(key);
  if (it == values_.end()) return YAML::Node(YAML::NodeType::Undefined);
  ctx_.marks[child_path(key)] = key_mark(key);
  return it->second;
}

Mark MapReader::key_mark(const std::string& key) const {
  auto it = key_marks_.find(key);
  return it == key_marks_.end() ? mark_ : it->second;
}

bool MapReader::fail(const std::string& key) {
  ctx_.failed(child_path(key));
  return false;
}

bool MapReader::text(const std::string& key, std::string& out) {
  YAML::Node n = value(key);
  if (n.IsNull()) {
    ctx_.error(key_mark(key), q(child_path(key)) + " must be a string, got nothing");
    return fail(key);
  }
  return as_string(ctx_, n, child_path(key), out) || fail(key);
}

void MapReader::require(const std::string& key) {
  declared_.insert(key);
  if (ok_ && !has(key)) ctx_.error(missing_at_, "missing required key " + q(child_path(key)));
}

bool MapReader::str(const std::string& key, std::string& out, bool required) {
  if (required) require(key);
  if (!ok_ || !has(key)) return true;
  return text(key, out);
}

bool MapReader::one_of(const std::string& key, std::string& out,
                       const std::vector<std::string>& allowed, bool required) {
  std::string v;
  if (required) require(key);
  if (!ok_ || !has(key)) return true;
  if (!text(key, v)) return false;
  if (std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
    ctx_.error(value(key), q(child_path(key)) + " is " + q(v) + "; expected one of: " + join(allowed));
    return fail(key);
  }
  out = v;
  return true;
}

bool MapReader::integer(const std::string& key, int& out, long long lo, long long hi, bool required) {
  if (required) require(key);
  if (!ok_ || !has(key)) return true;
  YAML::Node n = value(key);
  long long v = 0;
  if (!n.IsScalar() || !parse_int(n.Scalar(), v)) {
    ctx_.error(n.IsNull() ? Mark(key_mark(key)) : ctx_.mark_of(n),
               q(child_path(key)) + " must be an integer, got " +
                   (n.IsScalar() ? q(n.Scalar()) : std::string(kind_name(n))));
    return fail(key);
  }
  if (v < lo || v > hi) {
    ctx_.error(n, q(child_path(key)) + " is " + std::to_string(v) + "; expected " + std::to_string(lo) +
                      " to " + std::to_string(hi));
    return fail(key);
  }
  out = static_cast<int>(v);
  return true;
}

bool MapReader::number(const std::string& key, double& out, double lo, double hi, bool lo_open) {
  if (!ok_ || !has(key)) return true;
  YAML::Node n = value(key);
  double v = 0;
  if (!n.IsScalar() || !parse_double(n.Scalar(), v)) {
    ctx_.error(n.IsNull() ? Mark(key_mark(key)) : ctx_.mark_of(n),
               q(child_path(key)) + " must be a number, got " +
                   (n.IsScalar() ? q(n.Scalar()) : std::string(kind_name(n))));
    return fail(key);
  }
  if ((lo_open ? v <= lo : v < lo) || v > hi) {
    char range[96];
    std::snprintf(range, sizeof range, "%s%g and at most %g", lo_open ? "more than " : "at least ", lo, hi);
    ctx_.error(n, q(child_path(key)) + " is " + n.Scalar() + "; expected " + range);
    return fail(key);
  }
  out = v;
  return true;
}

bool MapReader::boolean(const std::string& key, bool& out) {
  if (!ok_ || !has(key)) return true;
  YAML::Node n = value(key);
  if (n.IsScalar() && (n.Scalar() == "true" || n.Scalar() == "false")) {
    out = n.Scalar() == "true";
    return true;
  }
  ctx_.error(n.IsNull() ? Mark(key_mark(key)) : ctx_.mark_of(n),
             q(child_path(key)) + " must be true or false, got " +
                 (n.IsScalar() ? q(n.Scalar()) : std::string(kind_name(n))));
  return fail(key);
}

bool MapReader::size(const std::string& key, std::optional<std::uint64_t>& out, bool required) {
  if (required) require(key);
  if (!ok_ || !has(key)) return true;
  std::string raw;
  YAML::Node n = value(key);
  if (!text(key, raw)) return false;
  ParseError err;
  auto v = parse_size(raw, &err);
  if (!v) {
    ctx_.error(n, q(child_path(key)) + " is " + q(raw) + ": " + err.what +
                      "; expected a size like 115GiB, 500MB or 3221225472");
    return fail(key);
  }
  out = v;
  return true;
}

bool MapReader::duration(const std::string& key, Duration& out, bool positive) {
  if (!ok_ || !has(key)) return true;
  std::string raw;
  YAML::Node n = value(key);
  if (!text(key, raw)) return false;
  ParseError err;
  auto v = parse_duration(raw, &err);
  if (!v) {
    ctx_.error(n, q(child_path(key)) + " is " + q(raw) + ": " + err.what +
                      "; expected a duration like 90s, 70m or 1h30m");
    return fail(key);
  }
  if (positive && v->count() <= 0) {
    ctx_.error(n, q(child_path(key)) + " must be longer than zero");
    return fail(key);
  }
  out = *v;
  return true;
}

bool MapReader::abs_path(const std::string& key, std::string& out, bool required) {
  if (required) require(key);
  if (!ok_ || !has(key)) return true;
  std::string s;
  if (!text(key, s)) return false;
  return as_abs_path(ctx_, value(key), child_path(key), out) || fail(key);
}

bool MapReader::url(const std::string& key, std::string& out, bool required) {
  if (required) require(key);
  if (!ok_ || !has(key)) return true;
  std::string s;
  if (!text(key, s)) return false;
  auto parsed = parse_http_url(s);
  if (!parsed) {
    ctx_.error(value(key), q(child_path(key)) + " is " + q(s) + ": " + parsed.error().message +
                               "; expected an http:// URL like http://10.0.0.1:8000/health");
    return fail(key);
  }
  // The checks that read these URLs speak plain HTTP, as a serving port does (vLLM's, ours): an
  // https URL would validate here and fail only at rollback time, in the middle of an outage.
  if (parsed.value().scheme != "http") {
    ctx_.error(value(key), q(child_path(key)) + " is " + q(s) +
                               ": https is not supported (the check speaks plain HTTP, as serving ports do)"
                               "; expected an http:// URL like http://10.0.0.1:8000/health");
    return fail(key);
  }
  out = s;
  return true;
}

bool MapReader::str_list(const std::string& key, std::vector<std::string>& out, bool non_empty) {
  if (!ok_ || !has(key)) return true;
  YAML::Node n = value(key);
  if (!n.IsSequence()) {
    ctx_.error(n.IsNull() ? Mark(key_mark(key)) : ctx_.mark_of(n),
               q(child_path(key)) + " must be a list of strings, got " + kind_name(n));
    return fail(key);
  }
  std::vector<std::string> items;
  bool good = true;
  for (size_t i = 0; i < n.size(); ++i) {
    std::string s;
    std::string what = child_path(key) + "[" + std::to_string(i) + "]";
    if (!as_string(ctx_, n[i], what, s)) {
      good = false;
      continue;
    }
    if (s.empty()) {
      ctx_.error(n[i], q(what) + " is empty; expected a non-empty string");
      good = false;
      continue;
    }
    items.push_back(s);
  }
  if (good && non_empty && items.empty()) {
    ctx_.error(n, q(child_path(key)) + " is empty; expected at least one entry");
    return fail(key);
  }
  if (!good) return fail(key);
  out = std::move(items);
  return true;
}

void MapReader::finish() {
  if (!ok_) return;
  std::vector<std::string> allowed(declared_.begin(), declared_.end());
  for (const auto& key : order_) {
    if (declared_.count(key)) continue;
    std::string msg = "unknown key " + q(key) + " in " + (path_.empty() ? "the manifest" : q(path_));
    // A near miss (a few edits, more for long keys) or a truncation of an allowed key.
    std::string best;
    size_t best_d = std::max<size_t>(2, key.size() / 4) + 1;
    for (const auto& a : allowed) {
      size_t d = edit_distance(key, a);
      if (key.size() >= 4 && a.size() > key.size() && a.compare(0, key.size(), key) == 0) d = std::min<size_t>(d, 1);
      if (d < best_d) {
        best_d = d;
        best = a;
      }
    }
    if (!best.empty()) msg += "; did you mean " + q(best) + "?";
    msg += " (expected one of: " + join(allowed) + ")";
    ctx_.error(key_marks_[key], msg);
  }
}

bool as_string(Context& ctx, const YAML::Node& n, const std::string& what, std::string& out) {
  if (!n.IsScalar()) {
    ctx.error(n, q(what) + " must be a string, got " + kind_name(n));
    return false;
  }
  out = n.Scalar();
  return true;
}

bool as_abs_path(Context& ctx, const YAML::Node& n, const std::string& what, std::string& out) {
  std::string s;
  if (!as_string(ctx, n, what, s)) return false;
  if (s.empty() || s.front() != '/') {
    ctx.error(n, q(what) + " is " + q(s) + "; expected an absolute path (starting with /)");
    return false;
  }
  if (s.find('\0') != std::string::npos || s.find("/../") != std::string::npos ||
      (s.size() >= 3 && s.compare(s.size() - 3, 3, "/..") == 0)) {
    ctx.error(n, q(what) + " is " + q(s) + "; '..' is not allowed in paths");
    return false;
  }
  out = s;
  return true;
}

namespace {
constexpr int kMaxJsonDepth = 32;
// Aliases let a few lines name a tree of billions of nodes (`b: [*a, *a, ...]` nine times over);
// a chat-template kwargs map is a handful of values.
constexpr int kMaxJsonNodes = 10000;

nlohmann::json to_json(const YAML::Node& n, int depth, int& budget, bool& too_deep) {
  if (depth > kMaxJsonDepth || --budget < 0) {
    too_deep = true;
    return nullptr;
  }
  if (n.IsMap()) {
    nlohmann::json j = nlohmann::json::object();
    for (auto it = n.begin(); it != n.end() && !too_deep; ++it)
      j[it->first.Scalar()] = to_json(it->second, depth + 1, budget, too_deep);
    return j;
  }
  if (n.IsSequence()) {
    nlohmann::json j = nlohmann::json::array();
    for (auto it = n.begin(); it != n.end() && !too_deep; ++it) j.push_back(to_json(*it, depth + 1, budget, too_deep));
    return j;
  }
  if (!n.IsScalar()) return nullptr;
  const std::string& s = n.Scalar();
  if (n.Tag() != "!") {  // plain (unquoted) scalars may be literals
    if (s == "true") return true;
    if (s == "false") return false;
    if (s == "null" || s == "~") return nullptr;
    long long i = 0;
    if (parse_int(s, i)) return i;
    double d = 0;
    if (parse_double(s, d)) return d;
  }
  return s;
}
}  // namespace

std::optional<std::string> to_json_text(const YAML::Node& n) {
  bool too_deep = false;
  int budget = kMaxJsonNodes;
  nlohmann::json j = to_json(n, 0, budget, too_deep);
  if (too_deep) return std::nullopt;
  try {
    return j.dump();
  } catch (const nlohmann::json::type_error&) {  // 316: a string that is not UTF-8 (YAML does not check)
    return std::nullopt;
  }
}

}  // namespace tandem::yaml
