#include "hash_compare.hpp"

#include <set>

namespace tandem::ctl {
namespace {

// Every file a node hashed, as one flat map: path -> digest (tree files as dir/rel).
std::map<std::string, std::string> flatten(const json& ev) {
  std::map<std::string, std::string> out;
  if (ev.contains("files") && ev["files"].is_object())
    for (const auto& [path, sha] : ev["files"].items())
      if (sha.is_string()) out[path] = sha.get<std::string>();
  if (ev.contains("trees") && ev["trees"].is_object())
    for (const auto& [dir, files] : ev["trees"].items())
      if (files.is_object())
        for (const auto& [rel, sha] : files.items())
          if (sha.is_string()) out[dir + "/" + rel] = sha.get<std::string>();
  return out;
}

std::string short_sha(const json& v) { return v.is_string() ? v.get<std::string>().substr(0, 12) : "missing"; }

}  // namespace

HashComparison compare_hashes(const std::map<std::string, json>& evidence_by_node) {
  HashComparison r;
  std::map<std::string, std::map<std::string, std::string>> by_node;
  std::set<std::string> all;
  for (const auto& [node, ev] : evidence_by_node) {
    by_node[node] = flatten(ev);
    for (const auto& [path, sha] : by_node[node]) all.insert(path);
  }
  std::map<std::string, json> bad;  // file -> mismatch
  for (const auto& path : all) {
    json digests = json::object();
    std::set<std::string> distinct;
    bool missing = false;
    for (const auto& [node, files] : by_node) {
      auto it = files.find(path);
      if (it == files.end()) {
        digests[node] = nullptr;
        missing = true;
      } else {
        digests[node] = it->second;
        distinct.insert(it->second);
      }
    }
    r.table[path] = digests;
    ++r.files_compared;
    if (missing || distinct.size() > 1)
      bad[path] = {{"file", path}, {"reason", missing ? "missing on some ranks" : "differs across ranks"}, {"digests", digests}};
  }
  // Pins: the agent already compared each pinned file with the manifest's digest.
  for (const auto& [node, ev] : evidence_by_node) {
    if (!ev.contains("pins") || !ev["pins"].is_array()) continue;
    for (const auto& p : ev["pins"]) {
      if (p.value("ok", true)) continue;
      const std::string path = p.value("path", "");
      json& m = bad[path];
      if (m.is_null()) m = {{"file", path}, {"reason", ""}, {"digests", json::object()}};
      m["digests"][node] = p.contains("actual") ? p["actual"] : json(nullptr);
      m["expected"] = p.value("expected", "");
      m["reason"] = "does not match the manifest's pin";
    }
  }
  for (auto& [path, m] : bad) r.mismatches.push_back(m);
  r.ok = r.mismatches.empty();
  return r;
}

std::string HashComparison::summary() const {
  if (ok) return std::to_string(files_compared) + " files identical on every rank";
  std::string s = std::to_string(mismatches.size()) + (mismatches.size() == 1 ? " file differs: " : " files differ: ");
  size_t shown = 0;
  for (const auto& m : mismatches) {
    if (shown == 5) {
      s += ", and " + std::to_string(mismatches.size() - shown) + " more (see the report)";
      break;
    }
    s += (shown++ ? "; " : "") + m["file"].get<std::string>() + " (" + m["reason"].get<std::string>() + ":";
    for (const auto& [node, sha] : m["digests"].items()) s += " " + node + " " + short_sha(sha);
    if (m.contains("expected")) s += ", pinned " + m["expected"].get<std::string>().substr(0, 12);
    s += ")";
  }
  return s;
}

json HashComparison::to_json() const {
  return {{"ok", ok}, {"files_compared", files_compared}, {"mismatches", mismatches}, {"table", table}};
}

}  // namespace tandem::ctl
