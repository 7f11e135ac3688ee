#include "tandem/agent/sha_step.hpp"

namespace tandem::agent {

std::vector<std::string> ShaStep::engine_targets(const Engine& e) {
  std::vector<std::string> t;
  if (!e.binary.empty()) t.push_back(e.binary);
  for (const auto& p : e.pins) t.push_back(p.path);
  if (!e.model_dir.empty()) t.push_back(e.model_dir);
  if (!e.drafter_dir.empty()) t.push_back(e.drafter_dir);
  return t;
}

Result<json> ShaStep::hash_and_compare(const NodeRoot& root) const {
  auto report = hash_paths(root, targets_, HashOptions{cache_file_, 0, progress_});
  if (!report) return report.error();
  json ev = report->to_json();
  json pins = json::array();
  std::size_t mismatches = 0;
  for (const auto& p : pins_) {
    auto it = report->digests.find(normalize_host_path(p.path));
    std::string actual = it == report->digests.end() ? "" : it->second;
    bool ok = p.sha256.empty() || p.sha256 == actual;
    if (!ok) ++mismatches;
    pins.push_back({{"path", p.path}, {"expected", p.sha256}, {"actual", actual}, {"ok", ok}});
  }
  ev["pins"] = pins;
  ev["mismatches"] = mismatches;
  if (mismatches > 0) {
    Error e = plain_error("", std::to_string(mismatches) + " pinned file(s) do not match the manifest's SHA-256");
    set_evidence(e, ev);
    return e;
  }
  return ev;
}

Result<json> ShaStep::check(const StepContext& ctx) { return hash_and_compare(ctx.root); }

Result<json> ShaStep::plan(const StepContext&) { return json{{"targets", targets_}}; }

Result<json> ShaStep::apply(const StepContext& ctx, const json&) { return hash_and_compare(ctx.root); }

// Verify: the files still hash as they did at apply (nobody swapped a shard in between).
Result<json> ShaStep::verify(const StepContext& ctx, const json&, const json& applied) {
  auto now = hash_and_compare(ctx.root);
  if (!now) return now;
  json changed = json::array();
  for (const auto& [path, digest] : applied.at("files").items())
    if (!(*now)["files"].contains(path) || (*now)["files"][path] != digest) changed.push_back(path);
  json ev{{"changed_since_apply", changed}, {"files", (*now)["files"].size()}, {"cache", (*now)["cache"]}};
  if (!changed.empty()) {
    Error e = plain_error("", std::to_string(changed.size()) + " file(s) changed since they were hashed");
    set_evidence(e, ev);
    return e;
  }
  return ev;
}

Result<json> ShaStep::undo(const StepContext&, const json&) { return json{{"undone", false}, {"why", "hashing changes nothing"}}; }

}  // namespace tandem::agent
