// One hygiene step: check (read-only), plan (gather undo data, write backups), apply (change the
// node as the plan says), verify, undo. AgentCore journals each phase; a step never writes the
// journal itself except through Journal::save_blob for backups, which must precede the intent.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "tandem/agent/error.hpp"
#include "tandem/agent/journal.hpp"
#include "tandem/agent/node_root.hpp"

namespace tandem::agent {

using nlohmann::json;

struct StepContext {
  const NodeRoot& root;
  Journal& journal;
  std::string op_id;  // empty for check
};

class Step {
 public:
  virtual ~Step() = default;
  virtual std::string name() const = 0;
  // What the node looks like and what apply would do; changes nothing.
  virtual Result<json> check(const StepContext& ctx) = 0;
  // Everything undo will need, decided before any change; journaled as the "intent" record.
  virtual Result<json> plan(const StepContext& ctx) = 0;
  // Carry out `intent`. Must be safe to run again with the same intent (resume after a crash).
  virtual Result<json> apply(const StepContext& ctx, const json& intent) = 0;
  virtual Result<json> verify(const StepContext& ctx, const json& intent, const json& applied) = 0;
  // Put back what `intent` changed; safe to run again. Steps that cannot be undone (removed shm
  // files, a dropped page cache) say so in the evidence instead of failing.
  virtual Result<json> undo(const StepContext& ctx, const json& intent) = 0;
};

}  // namespace tandem::agent
