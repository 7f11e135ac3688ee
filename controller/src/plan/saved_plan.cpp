#include "saved_plan.hpp"

#include <map>

namespace tandem {
namespace {

using oj = nlohmann::ordered_json;

oj node_identities(const Manifest& m) {
  oj out = oj::array();
  for (const auto& n : m.nodes)
    out.push_back({{"name", n.name}, {"address", n.address}, {"fabric_address", n.fabric_address}, {"role", to_string(n.role)},
                   {"agent_port", n.agent_port}, {"root", n.root}});
  return out;
}

oj pin_list(const Manifest& m) {
  oj out = oj::array();
  for (const auto& p : m.engine.pins) out.push_back({{"path", p.path}, {"sha256", p.sha256}});
  return out;
}

std::string text_of(const oj& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// by key field -> object, for lists whose order does not matter to the reader.
std::map<std::string, oj> keyed(const oj& list, const char* key) {
  std::map<std::string, oj> out;
  if (list.is_array())
    for (const auto& e : list)
      if (e.is_object() && e.contains(key)) out[text_of(e[key])] = e;
  return out;
}

void diff_keyed(const oj& before, const oj& now, const char* key, const std::string& what, std::vector<std::string>& out) {
  const auto a = keyed(before, key), b = keyed(now, key);
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    if (it == b.end()) {
      out.push_back(what + " " + k + ": removed from the manifest");
      continue;
    }
    for (const auto& [field, value] : v.items())
      if (!it->second.contains(field) || it->second[field] != value)
        out.push_back(what + " " + k + ": " + field + " was " + text_of(value) + ", is now " +
                      (it->second.contains(field) ? text_of(it->second[field]) : std::string("absent")));
  }
  for (const auto& [k, v] : b)
    if (!a.count(k)) out.push_back(what + " " + k + ": added to the manifest");
}

void diff_steps(const oj& before, const oj& now, const std::string& list, std::vector<std::string>& out) {
  const oj a = before.value(list, oj::array()), b = now.value(list, oj::array());
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) {
      out.push_back((list == "steps" ? "step " : "rollback step ") + std::to_string(i + 1) + ": was '" +
                    a[i].value("action", std::string()) + " on " + a[i].value("node", std::string()) + "', is now '" +
                    b[i].value("action", std::string()) + " on " + b[i].value("node", std::string()) + "'" +
                    (a[i].value("action", "") == b[i].value("action", "") ? " with other details" : ""));
      return;  // the first difference says enough; the rest follow from it
    }
  if (a.size() != b.size())
    out.push_back(list + ": " + std::to_string(a.size()) + " saved, " + std::to_string(b.size()) + " now");
}

}  // namespace

oj saved_plan_json(const Manifest& m, const std::string& manifest_path, const std::string& sha256, const Plan& p,
                   const std::string& made_utc) {
  const oj plan = plan_to_json(p);
  return {{"tandem_saved_plan", kSavedPlanFormat},
          {"made", made_utc},
          {"manifest", {{"path", manifest_path}, {"sha256", sha256}, {"name", m.name}}},
          {"nodes", node_identities(m)},
          {"pins", pin_list(m)},
          {"steps", plan["steps"]},
          {"on_failure", plan["on_failure"]}};
}

bool is_saved_plan(const std::string& text) {
  const auto j = oj::parse(text, nullptr, false);
  return j.is_object() && j.contains("tandem_saved_plan");
}

Result<SavedPlan> parse_saved_plan(const std::string& text, const std::string& file) {
  const auto j = oj::parse(text, nullptr, false);
  if (!j.is_object()) return Error{file + ": not a saved plan (expected the JSON object `tandemctl plan --out` writes)"};
  const oj version = j.value("tandem_saved_plan", oj());
  if (!version.is_number_integer() || version.get<int>() != kSavedPlanFormat)
    return Error{file + ": tandem_saved_plan is " + version.dump() + "; this tandemctl reads format " +
                 std::to_string(kSavedPlanFormat) + " (make the plan again with this tandemctl)"};
  SavedPlan s;
  s.file = file;
  const oj& m = j.contains("manifest") ? j["manifest"] : oj();
  if (!m.is_object() || !m.contains("path") || !m["path"].is_string() || !m.contains("sha256") || !m["sha256"].is_string())
    return Error{file + ": 'manifest' must be an object with 'path' and 'sha256' strings"};
  s.manifest_path = m["path"].get<std::string>();
  s.manifest_sha256 = m["sha256"].get<std::string>();
  if (s.manifest_path.empty() || s.manifest_path.front() != '/')
    return Error{file + ": manifest.path '" + s.manifest_path + "' is not an absolute path"};
  for (const char* k : {"nodes", "pins", "steps", "on_failure"})
    if (!j.contains(k) || !j[k].is_array()) return Error{file + ": '" + std::string(k) + "' must be a list"};
  for (const char* list : {"steps", "on_failure"})
    for (size_t i = 0; i < j[list].size(); ++i) {
      const oj& step = j[list][i];
      const std::string where = file + ": " + list + "[" + std::to_string(i) + "]";
      if (!step.is_object() || !step.contains("action") || !step["action"].is_string())
        return Error{where + ": expected an object with an 'action' string"};
      if (auto a = parse_action(step["action"].get<std::string>()); !a) return a.error().with_context(where);
    }
  s.nodes = j["nodes"];
  s.pins = j["pins"];
  s.steps = {{"steps", j["steps"]}, {"on_failure", j["on_failure"]}};
  return s;
}

std::vector<std::string> saved_plan_changes(const SavedPlan& saved, const Manifest& now, const std::string& sha256,
                                            const Plan& now_plan) {
  std::vector<std::string> out;
  diff_keyed(saved.nodes, node_identities(now), "name", "node", out);
  diff_keyed(saved.pins, pin_list(now), "path", "pin", out);
  const oj plan = plan_to_json(now_plan);
  diff_steps(saved.steps, plan, "steps", out);
  diff_steps(saved.steps, plan, "on_failure", out);
  // Any other edit (a gate, a timeout, a flag) shows in the digest even when no step reads it.
  if (sha256 != saved.manifest_sha256)
    out.insert(out.begin(), "manifest " + saved.manifest_path + ": sha256 was " + saved.manifest_sha256.substr(0, 12) + ", is now " +
                                sha256.substr(0, 12));
  return out;
}

}  // namespace tandem
