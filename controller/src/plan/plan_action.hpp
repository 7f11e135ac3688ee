// What a plan step does, as an enum: bind dispatches on it with an exhaustive switch, so an action
// the planner can emit but bind cannot run is a compile error, not a runtime "unknown action".
// The saved plan and the journal keep the stable string ids ("hygiene.shm", "gate.health"), which
// parse_action reads back.
#pragma once
#include <string>
#include <string_view>

#include "tandem/result.hpp"

namespace tandem {

enum class Action {
  preflight,           // preflight: the agent answers over mutual TLS
  deadman_arm,         // deadman.arm
  stage_check,         // stage.check: room on a worker for the files to stage and their backups
  stage_files,         // stage.files
  hygiene_cron,        // hygiene.cron: pause the node's cron jobs
  stop_command,        // stop.command: stop the old lane
  stop_verify,         // stop.verify: the old lane's port is dark
  hygiene_shm,         // hygiene.shm
  hygiene_page_cache,  // hygiene.page_cache
  hygiene_cache_dir,   // hygiene.cache_dir
  hygiene_sha256,      // hygiene.sha256: digests of what the rank will run
  hashes_compare,      // hashes.compare: every rank has the same bytes
  engine_start,        // engine.start
  engine_rendezvous,   // engine.rendezvous
  engine_wait_ready,   // engine.wait_ready
  serve_wait,          // serve.wait: the head's /health answers
  gate,                // gate.<name>: one gate, built in ("gate.health") or custom ("gate.custom.nvsmi")
  deadman_disarm,      // deadman.disarm
  report_write,        // report.write
  undo,                // undo: rollback's reverse walk over completed steps
  rollback_command,    // rollback.command: start the rollback lane
  rollback_verify,     // rollback.verify
};

// The stable id of an action; for Action::gate, "gate." + the gate's name.
std::string action_id(Action a, std::string_view gate = {});

struct ParsedAction {
  Action action = Action::preflight;
  std::string gate;  // Action::gate only: "health", "custom.nvsmi"
};

// "hygiene.shm" -> {hygiene_shm}, "gate.custom.x" -> {gate, "custom.x"}. An id this tandemctl does
// not know is an error that names it and lists the known ones.
Result<ParsedAction> parse_action(std::string_view id);

}  // namespace tandem
