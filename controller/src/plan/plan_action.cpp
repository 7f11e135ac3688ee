#include "plan_action.hpp"

#include <iterator>

namespace tandem {
namespace {

constexpr std::string_view kGatePrefix = "gate.";

// One home for the ids; exhaustive, so a new enumerator without an id does not compile cleanly
// (-Wswitch). Action::gate's id carries the gate's name, so it is built in action_id.
std::string_view fixed_id(Action a) {
  switch (a) {
    case Action::preflight: return "preflight";
    case Action::deadman_arm: return "deadman.arm";
    case Action::stage_check: return "stage.check";
    case Action::stage_files: return "stage.files";
    case Action::hygiene_cron: return "hygiene.cron";
    case Action::stop_command: return "stop.command";
    case Action::stop_verify: return "stop.verify";
    case Action::hygiene_shm: return "hygiene.shm";
    case Action::hygiene_page_cache: return "hygiene.page_cache";
    case Action::hygiene_cache_dir: return "hygiene.cache_dir";
    case Action::hygiene_sha256: return "hygiene.sha256";
    case Action::hashes_compare: return "hashes.compare";
    case Action::engine_start: return "engine.start";
    case Action::engine_rendezvous: return "engine.rendezvous";
    case Action::engine_wait_ready: return "engine.wait_ready";
    case Action::serve_wait: return "serve.wait";
    case Action::gate: return "gate";
    case Action::deadman_disarm: return "deadman.disarm";
    case Action::report_write: return "report.write";
    case Action::undo: return "undo";
    case Action::rollback_command: return "rollback.command";
    case Action::rollback_verify: return "rollback.verify";
  }
  return "?";  // not reached: every enumerator is listed above
}

constexpr Action kAll[] = {
    Action::preflight,        Action::deadman_arm,       Action::stage_check,     Action::stage_files,     Action::hygiene_cron,
    Action::stop_command,     Action::stop_verify,       Action::hygiene_shm,     Action::hygiene_page_cache,
    Action::hygiene_cache_dir, Action::hygiene_sha256,   Action::hashes_compare,  Action::engine_start,
    Action::engine_rendezvous, Action::engine_wait_ready, Action::serve_wait,     Action::gate,
    Action::deadman_disarm,   Action::report_write,      Action::undo,            Action::rollback_command,
    Action::rollback_verify,
};
static_assert(std::size(kAll) == static_cast<std::size_t>(Action::rollback_verify) + 1, "kAll lists every Action");

}  // namespace

std::string action_id(Action a, std::string_view gate) {
  if (a == Action::gate) return std::string(kGatePrefix) + std::string(gate);
  return std::string(fixed_id(a));
}

Result<ParsedAction> parse_action(std::string_view id) {
  if (id.starts_with(kGatePrefix) && id.size() > kGatePrefix.size())
    return ParsedAction{Action::gate, std::string(id.substr(kGatePrefix.size()))};
  for (Action a : kAll)
    if (a != Action::gate && fixed_id(a) == id) return ParsedAction{a, {}};
  std::string known;
  for (Action a : kAll) known += (known.empty() ? "" : ", ") + (a == Action::gate ? std::string("gate.<name>") : std::string(fixed_id(a)));
  return Error{"unknown plan action '" + std::string(id) + "' (this tandemctl knows: " + known + ")"};
}

}  // namespace tandem
