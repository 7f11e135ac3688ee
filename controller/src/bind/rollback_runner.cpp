#include "rollback_runner.hpp"

#include <functional>
#include <set>
#include <thread>

#include "bind_steps.hpp"
#include "fault_pause.hpp"
#include "http_get.hpp"

namespace tandem::ctl {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class Tasks {
 public:
  Tasks(BindContext& ctx, RollbackResult& res) : ctx_(ctx), res_(res) {}

  // Runs `fn` under `key` unless the journal says it is done; false if it failed.
  bool run(const std::string& key, const std::string& node, const std::string& label, const std::string& op,
           const std::function<StepOutcome()>& fn) {
    auto it = ctx_.run.rollback.find(key);
    if (it != ctx_.run.rollback.end() && it->second.done) {
      ctx_.progress.skipped(0, node, label, "");
      return true;
    }
    if (!journal({{"event", "rollback.task.begin"}, {"key", key}, {"node", node}, {"op_id", op}})) return false;
    ctx_.progress.begin(0, node, label, key);
    const std::string nth = std::to_string(++begun_);
    fault_pause(ctx_.bind_dir, "rollback-before:" + nth);
    const auto t0 = Clock::now();
    StepOutcome o = fn();
    fault_pause(ctx_.bind_dir, "rollback-after:" + nth);
    const long long ms = std::chrono::duration_cast<Millis>(Clock::now() - t0).count();
    if (o.ok) {
      journal({{"event", "rollback.task.done"}, {"key", key}, {"evidence", o.evidence}, {"note", o.note}});
      ctx_.progress.done(0, node, label, o.note, ms);
      return true;
    }
    journal({{"event", "rollback.task.failed"}, {"key", key}, {"error", o.error}, {"evidence", o.evidence}});
    ctx_.progress.failed(0, node, label, o.error);
    res_.ok = false;
    res_.problems.push_back(label + " on " + node + ": " + o.error);
    return false;
  }

 private:
  bool journal(json rec) {
    auto st = ctx_.record(std::move(rec));
    if (!st) {
      res_.ok = false;
      res_.problems.push_back(st.error().message);
    }
    return st.ok();
  }
  BindContext& ctx_;
  RollbackResult& res_;
  int begun_ = 0;  // tasks begun by this controller (fault tests pause at the n-th)
};

bool began(const BindContext& ctx, const Step& s) { return ctx.run.steps.count(s.index) > 0; }

// An undo for an op the agent never recorded (or never got to change anything) is no failure.
bool nothing_to_undo(const AgentReply& r) {
  return !r.ok && r.status == 422 &&
         (r.error.find("unknown op id") != std::string::npos || r.error.find("never reached intent") != std::string::npos);
}

StepOutcome undo_op(const AgentClient& a, const std::string& op) {
  AgentReply r = a.op_undo(op, 5min);
  if (nothing_to_undo(r)) return StepOutcome::success({{"op_id", op}, {"undone", false}}, "nothing was changed");
  if (!r.ok) return StepOutcome::failure(r.error, r.evidence);
  return StepOutcome::success(r.body, r.replayed() ? "already undone" : "undone");
}

// The verify URL answers as the old lane should; otherwise `why` says what it did instead.
bool old_lane_answers(const RollbackVerify& v, Millis timeout, std::string& why) {
  auto r = http_get(v.url, timeout);
  if (r && r->status == 200 && (v.expect_body_contains.empty() || r->body.find(v.expect_body_contains) != std::string::npos))
    return true;
  why = !r ? r.error().message : r->status != 200 ? "HTTP " + std::to_string(r->status) : "200 without '" + v.expect_body_contains + "'";
  return false;
}

StepOutcome verify_old_lane(const Manifest& m) {
  const RollbackVerify& v = m.rollback.verify;
  const auto start = Clock::now();
  std::string last;
  while (true) {
    if (old_lane_answers(v, 10s, last))
      return StepOutcome::success({{"url", v.url}, {"waited_ms", std::chrono::duration_cast<Millis>(Clock::now() - start).count()}},
                                  v.url + " answers 200");
    if (Clock::now() - start >= v.timeout)
      return StepOutcome::failure("the old lane did not come back: " + v.url + " (" + last + ") within " + format_duration(v.timeout));
    std::this_thread::sleep_for(500ms);
  }
}

// One rollback, its numbered parts in the order run_rollback calls them.
class Rollback {
 public:
  Rollback(BindContext& ctx, RollbackSource source, RollbackResult& res)
      : ctx_(ctx), source_(source), from_agents_(source == RollbackSource::agents), tasks_(ctx, res) {
    const auto order = ctx.m.start_order();
    reverse_.assign(order.rbegin(), order.rend());  // head first
  }

  // Which nodes answer; --local works around the ones that do not.
  void find_reachable() {
    for (const Node* n : reverse_) {
      AgentReply h = ctx_.agent(n->name).health(5s);
      if (h.ok) reachable_.insert(n->name);
      else if (source_ == RollbackSource::local)
        ctx_.progress.line("skipping " + n->name + ": unreachable (" + h.error + "); its dead-man, if armed, restores it");
    }
    // Disabled cron alone leaves the old lane serving; only a begun stop step may have taken it down.
    outage_began_ = stop_began_ = from_agents_;
    for (const auto& s : ctx_.plan.steps) {
      if (s.phase == "outage" && began(ctx_, s)) outage_began_ = true;
      if (is_stop(s.action) && began(ctx_, s)) stop_began_ = true;
    }
  }

  // 1. Stop the ranks, head first: one rank failing stops the others, leaving no orphan.
  void stop_ranks() {
    for (const Node* n : reverse_) {
      if (!usable(n->name) || !(from_agents_ || began_on(n->name, Action::engine_start))) continue;
      const AgentClient& a = ctx_.agent(n->name);
      ranks_stopped_ &= tasks_.run("stop-rank:" + n->name, n->name, "engine.stop", "", [&] {
        AgentReply r = a.engine_stop(10s);
        if (!r.ok) return StepOutcome::failure(r.error);
        return StepOutcome::success(r.body, "rank " + field(r.body, "engine").value("phase", std::string("?")));
      });
    }
  }

  // 2. Undo the changes in reverse: this run's steps (unless from the agents alone), then the
  // agents' journals (unless --local).
  void undo_changes() {
    if (!from_agents_) undo_begun_steps();
    if (source_ == RollbackSource::local) return;
    // The agents' journals: everything not yet undone (after a bind failure, the safety net).
    for (const Node* n : reverse_) {
      if (!from_agents_ && !outage_began_) continue;
      const AgentClient& a = ctx_.agent(n->name);
      tasks_.run("undo-journal:" + n->name, n->name, "undo (agent journal)", "", [&] {
        AgentReply r = a.undo_incomplete(10min);
        if (!r.ok) return StepOutcome::failure(r.error, r.evidence);
        const json ev = field(r.body, "evidence").empty() ? r.body : field(r.body, "evidence");
        return StepOutcome::success(r.body, std::to_string(ev.value("undone", json::array()).size()) + " ops undone");
      });
    }
  }

  // 3. The rollback lane, on the nodes it names, only once the old lane was actually stopped.
  // With the new ranks stopped, whatever answers at the verify URL is the old lane: still up
  // (`tandemctl rollback` of a bind that never reached its stop step, a stop command that did not
  // take) or back already (a dead-man that fired). It is never started a second time: a second copy
  // of a GPU server can take the memory the first one needs before it finds its port taken.
  void start_lane() {
    std::string why_not;
    if (!stop_began_) {
      ctx_.progress.line("the old lane was never stopped (the bind failed before any stop step): not starting it again");
      return;
    }
    if (ranks_stopped_ && old_lane_answers(ctx_.m.rollback.verify, 3s, why_not)) {
      ctx_.progress.line("the old lane already answers at " + ctx_.m.rollback.verify.url + ": not starting it again");
      return;
    }
    for (const Node* n : reverse_) {
      bool has = false;
      for (const auto& c : ctx_.m.rollback.commands) has = has || ctx_.m.selects(c, *n);
      if (!has || !usable(n->name)) continue;
      const AgentClient& a = ctx_.agent(n->name);
      const std::string op = ctx_.op_for(n->name, "rollback");
      tasks_.run("rollback.command:" + n->name, n->name, action_id(Action::rollback_command), op, [&] {
        AgentReply r = a.rollback_start(op, rollback_timeout(ctx_.m));
        if (!r.ok) return StepOutcome::failure(r.error, r.evidence);
        return StepOutcome::success(r.body, "started by " + r.body.value("ran_by", std::string("tandemd")));
      });
    }
  }

  // 4. Verify, 5. disarm (only now: an armed dead-man retries a rollback that did not verify).
  void verify_and_disarm() {
    const bool verified = tasks_.run("rollback.verify", "controller", action_id(Action::rollback_verify), "",
                                     [&] { return verify_old_lane(ctx_.m); });
    for (const Node* n : reverse_) {
      if (!usable(n->name) || !(from_agents_ || began_on(n->name, Action::deadman_arm))) continue;
      if (!verified) {
        ctx_.progress.line("the dead-man on " + n->name + " stays armed: it retries the rollback at its deadline");
        continue;
      }
      const AgentClient& a = ctx_.agent(n->name);
      const std::string op = ctx_.op_for(n->name, "disarm");
      tasks_.run("disarm:" + n->name, n->name, action_id(Action::deadman_disarm), op, [&] {
        AgentReply r = a.deadman_disarm(op);
        if (!r.ok && r.status == 409 && r.error.find("fired") != std::string::npos)
          return StepOutcome::success({{"fired", true}}, "the dead-man had already fired");
        if (!r.ok && r.status == 409 && r.error.find("nothing armed") != std::string::npos)
          return StepOutcome::success({{"armed", false}}, "nothing was armed");
        if (!r.ok) return StepOutcome::failure(r.error);
        return StepOutcome::success(r.body, "disarmed");
      });
    }
  }

  // --local: the nodes it could not reach are the rollback's failure, named.
  void report_unreachable(RollbackResult& res) const {
    if (source_ != RollbackSource::local) return;
    for (const Node* n : reverse_)
      if (!reachable_.count(n->name)) {
        res.ok = false;
        res.problems.push_back(n->name + " was unreachable: nothing was undone there by this controller");
      }
  }

 private:
  bool usable(const std::string& node) const { return source_ != RollbackSource::local || reachable_.count(node); }
  bool began_on(const std::string& node, Action action) const {
    for (const auto& s : ctx_.plan.steps)
      if (s.node == node && s.action == action && began(ctx_, s)) return true;
    return false;
  }

  // This run's begun steps, newest first; a node's stop steps share one op, undone once.
  void undo_begun_steps() {
    std::set<std::string> stop_undone;
    for (auto it = ctx_.plan.steps.rbegin(); it != ctx_.plan.steps.rend(); ++it) {
      const Step& s = *it;
      if (!began(ctx_, s) || !usable(s.node)) continue;
      std::string op;
      if (!agent_step_name(s.action).empty()) op = ctx_.op_for_step(s.index);
      else if (is_stop(s.action) && stop_undone.insert(s.node).second) op = ctx_.op_for(s.node, "stop");
      if (op.empty()) continue;
      const AgentClient& a = ctx_.agent(s.node);
      tasks_.run("undo:" + op, s.node, "undo " + (is_stop(s.action) ? std::string("stop") : agent_step_name(s.action)), op,
                 [&] { return undo_op(a, op); });
    }
  }

  BindContext& ctx_;
  const RollbackSource source_;
  const bool from_agents_;
  Tasks tasks_;
  std::vector<const Node*> reverse_;
  std::set<std::string> reachable_;
  bool outage_began_ = false, stop_began_ = false, ranks_stopped_ = true;
};

}  // namespace

RollbackResult run_rollback(BindContext& ctx, RollbackSource source) {
  RollbackResult res;
  Rollback r(ctx, source, res);
  r.find_reachable();
  r.stop_ranks();
  r.undo_changes();
  r.start_lane();
  r.verify_and_disarm();
  r.report_unreachable(res);
  return res;
}

}  // namespace tandem::ctl
