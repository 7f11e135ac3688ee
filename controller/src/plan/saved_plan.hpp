// A plan saved by `tandemctl plan M.yaml --out plan.json` and run later by `tandemctl bind
// plan.json`. What the operator reviewed must be what runs: the file records the manifest's path
// and SHA-256, each node's identity (name, addresses, role, agent port, root), the pinned
// digests and the steps; bind refuses it when any of them changed since, and says which.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "plan.hpp"
#include "tandem/result.hpp"

namespace tandem {

inline constexpr int kSavedPlanFormat = 1;

struct SavedPlan {
  std::string file;             // where it was read from, for messages
  std::string manifest_path;    // absolute, as it was when the plan was made
  std::string manifest_sha256;  // of the manifest's bytes
  nlohmann::ordered_json nodes;  // [{name, address, fabric_address, role, agent_port, root}]
  nlohmann::ordered_json pins;   // [{path, sha256}]
  nlohmann::ordered_json steps;  // plan_to_json's steps and on_failure, as reviewed
};

// The file's JSON. `manifest_path` should be absolute; `sha256` is of the manifest's text.
nlohmann::ordered_json saved_plan_json(const Manifest& m, const std::string& manifest_path, const std::string& sha256,
                                       const Plan& p, const std::string& made_utc);

// Does `text` claim to be a saved plan (a JSON object with "tandem_saved_plan")? Then it is read
// as one, and every problem with it is reported as such rather than as a YAML error.
bool is_saved_plan(const std::string& text);
// Parses and checks every field (file: what is wrong, what was expected).
Result<SavedPlan> parse_saved_plan(const std::string& text, const std::string& file);

// What changed between the saved plan and the manifest as it is now (its text's digest `sha256`
// and the plan made from it now), one line each: "manifest ...", "node n1: address ...",
// "pin /p: ...", "step 7: ..."; empty when the plan still holds.
std::vector<std::string> saved_plan_changes(const SavedPlan& saved, const Manifest& now, const std::string& sha256,
                                            const Plan& now_plan);

}  // namespace tandem
