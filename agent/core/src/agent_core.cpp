#include "tandem/agent/agent_core.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

#include "tandem/agent/cache_dir_step.hpp"
#include "tandem/agent/cron_step.hpp"
#include "tandem/agent/page_cache_step.hpp"
#include "tandem/agent/sha_step.hpp"
#include "tandem/agent/shm_step.hpp"
#include "tandem/agent/stage_source.hpp"
#include "tandem/agent/stop_step.hpp"

namespace tandem::agent {
namespace {

json wrap(const Record& r, bool replayed) {
  return {{"op_id", r.op_id}, {"step", r.step}, {"phase", to_string(r.phase)}, {"replayed", replayed}, {"evidence", r.data}};
}

// A failure as journaled: which phase it happened in plus the error (with its evidence).
Error recorded_failure(const Record& r) {
  const auto& e = r.data.at("error");
  Error out = error_from_json(e);
  out.message = "op " + r.op_id + " already failed during " + r.data.value("during", "?") + " (use undo, then a new op id): " + out.message;
  return out;
}

Status make_dirs(const std::string& real, mode_t mode) {
  struct stat st {};
  if (::stat(real.c_str(), &st) == 0) return S_ISDIR(st.st_mode) ? Status(Ok{}) : plain_error(real, "exists and is not a directory");
  auto slash = real.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    auto p = make_dirs(real.substr(0, slash), 0755);
    if (!p) return p;
  }
  if (::mkdir(real.c_str(), mode) != 0 && errno != EEXIST) return sys_error(real, "cannot create directory");
  return Ok{};
}

}  // namespace

Result<std::unique_ptr<AgentCore>> AgentCore::open(const CoreOptions& o) {
  auto root = NodeRoot::open(o.root, NodeRoot::manifest_allow_list(o.engine, o.state_dir, o.staged_paths));
  if (!root) return root.error();
  auto state = root->resolve(o.state_dir);
  if (!state) return state.error();
  auto made = make_dirs(*state, 0700);
  if (!made) return made.error();
  auto journal = Journal::open(*state);
  if (!journal) return journal.error();
  std::unique_ptr<AgentCore> core(new AgentCore(std::move(*root), std::move(*journal)));
  const auto& h = o.hygiene;
  core->steps_["cron"] = std::make_unique<CronStep>(h.cron_patterns, h.cron_include_systemd_timers);
  core->steps_["stop"] = std::make_unique<StopStep>(o.stop_commands.value_or(h.stop), o.engine.serve.port, h.port_dark_timeout);
  core->steps_["shm"] = std::make_unique<ShmStep>(h.shm_patterns);
  core->steps_["page_cache"] = std::make_unique<PageCacheStep>(h.drop_page_cache, h.min_mem_available);
  core->steps_["cache_dir"] = std::make_unique<CacheDirStep>(o.engine.cache_dir, o.engine.run_user, h.cache_dir_user_owned);
  core->steps_["sha"] = std::make_unique<ShaStep>(ShaStep::engine_targets(o.engine), o.engine.pins, *state + "/sha256-cache.json");
  if (o.stage)
    core->steps_["stage"] = std::make_unique<StageStep>(*o.stage, o.staged_paths, *state + "/sha256-cache.json",
                                                        o.stage_source, o.stage_progress);
  return core;
}

Step* AgentCore::step(const std::string& name) {
  auto it = steps_.find(name);
  return it == steps_.end() ? nullptr : it->second.get();
}

Result<std::string> AgentCore::step_of(const std::string& op_id) const {
  for (const auto& r : journal_->records())
    if (r.op_id == op_id) return r.step;
  return plain_error(journal_->path(), "unknown op id '" + op_id + "'");
}

Result<json> AgentCore::fail(const std::string& op_id, const std::string& step_name, const char* during, Error e) {
  auto rec = journal_->append(op_id, step_name, Phase::failed, {{"during", during}, {"error", to_json(e)}});
  if (!rec) return rec.error();
  return e;
}

Result<json> AgentCore::check(const std::string& name) {
  Step* s = step(name);
  if (!s) return plain_error("", "unknown step '" + name + "'");
  return s->check(ctx(""));
}

Result<json> AgentCore::apply(const std::string& name, const std::string& op_id) {
  Step* s = step(name);
  if (!s) return plain_error("", "unknown step '" + name + "'");
  if (!valid_op_id(op_id)) return plain_error("", "invalid op id '" + op_id + "'");
  auto used_for = step_of(op_id);
  if (used_for && *used_for != name) return plain_error("", "op id '" + op_id + "' was used for step '" + *used_for + "'");
  // Idempotency: an op id that already got this far answers from the journal.
  if (auto done = journal_->last(op_id, Phase::applied)) return wrap(*done, true);
  if (auto failed = journal_->last(op_id, Phase::failed)) return recorded_failure(*failed);
  auto intent = journal_->last(op_id, Phase::intent);
  if (!intent) {  // fresh op; an existing intent without "applied" means resume after a crash
    auto planned = s->plan(ctx(op_id));
    if (!planned) return fail(op_id, name, "plan", planned.error());
    auto rec = journal_->append(op_id, name, Phase::intent, *planned);
    if (!rec) return rec.error();
    intent = *rec;
  }
  auto applied = s->apply(ctx(op_id), intent->data);
  // A stage whose pushing controller vanished stays open (intent, no outcome) as after a crash:
  // the resumed bind's same op id carries on from the recorded chunks; undo handles it as incomplete.
  if (!applied && applied.error().code == kStageSourceGone) return applied.error();
  if (!applied) return fail(op_id, name, "apply", applied.error());
  auto rec = journal_->append(op_id, name, Phase::applied, *applied);
  if (!rec) return rec.error();
  return wrap(*rec, false);
}

Result<json> AgentCore::verify(const std::string& op_id) {
  auto name = step_of(op_id);
  if (!name) return name.error();
  if (auto done = journal_->last(op_id, Phase::verified)) return wrap(*done, true);
  auto intent = journal_->last(op_id, Phase::intent);
  auto applied = journal_->last(op_id, Phase::applied);
  if (!intent || !applied) return plain_error("", "op '" + op_id + "' was not applied; nothing to verify");
  auto v = step(*name)->verify(ctx(op_id), intent->data, applied->data);
  if (!v) return fail(op_id, *name, "verify", v.error());
  auto rec = journal_->append(op_id, *name, Phase::verified, *v);
  if (!rec) return rec.error();
  return wrap(*rec, false);
}

Result<json> AgentCore::undo(const std::string& op_id) {
  auto name = step_of(op_id);
  if (!name) return name.error();
  // Released: its files were kept for good and there is nothing to put back; a rollback that
  // names it learns so and goes on with the rest.
  if (auto rel = journal_->last(op_id, Phase::released)) {
    json ev{{"released", true}, {"restored", 0},
            {"note", "released at " + rel->time + ": its backups were freed, its files kept for good"}};
    return json{{"op_id", op_id}, {"step", *name}, {"phase", "released"}, {"replayed", true}, {"evidence", ev}};
  }
  if (auto done = journal_->last(op_id, Phase::undone)) return wrap(*done, true);
  auto intent = journal_->last(op_id, Phase::intent);
  if (!intent) return plain_error("", "op '" + op_id + "' never reached intent; nothing was changed");
  auto u = step(*name)->undo(ctx(op_id), intent->data);
  if (!u) return fail(op_id, *name, "undo", u.error());
  auto rec = journal_->append(op_id, *name, Phase::undone, *u);
  if (!rec) return rec.error();
  return wrap(*rec, false);
}

Result<json> AgentCore::release_stage(const std::vector<std::string>& keep, const std::vector<std::string>& keep_prefixes) {
  json released = json::array(), kept = json::array();
  std::uint64_t freed = 0;
  for (const auto& op : journal_->ops_to_undo()) {
    auto name = step_of(op);
    if (!name || *name != "stage") continue;
    const bool by_prefix = std::any_of(keep_prefixes.begin(), keep_prefixes.end(), [&](const std::string& p) { return op.starts_with(p); });
    if (by_prefix || std::find(keep.begin(), keep.end(), op) != keep.end() || !journal_->last(op, Phase::verified)) {
      kept.push_back(op);
      continue;
    }
    auto r = release_stage_backups(journal_->dir(), op);
    if (!r) return r.error();
    auto rec = journal_->append(op, "stage", Phase::released, *r);
    if (!rec) return rec.error();
    freed += (*r)["freed_bytes"].get<std::uint64_t>();
    json one = *r;
    one["op_id"] = op;
    released.push_back(one);
  }
  return json{{"released", released}, {"freed_bytes", freed}, {"kept", kept}};
}

Result<json> AgentCore::undo_incomplete() {
  auto ops = journal_->ops_to_undo();
  json undone = json::array(), errors = json::array();
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
    auto r = undo(*it);
    if (r) undone.push_back(*r);
    else errors.push_back(to_json(r.error()));
  }
  json ev{{"undone", undone}, {"errors", errors}};
  if (!errors.empty()) {
    Error e = plain_error(journal_->path(), std::to_string(errors.size()) + " op(s) could not be undone");
    set_evidence(e, ev);
    return e;
  }
  return ev;
}

}  // namespace tandem::agent
