#include "plan.hpp"

#include "tandem/serve_args.hpp"
#include "tandem/units.hpp"
#include "tandem/url.hpp"

namespace tandem {
namespace {

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

std::string rank_label(const Manifest& m, const Node& n) {
  return n.name + " (rank " + std::to_string(node_rank(m, n)) + ", " + to_string(n.role) + ")";
}

class Builder {
 public:
  explicit Builder(const Manifest& m) : m_(m) {}

  Step& add(std::vector<Step>& list, std::string phase, std::string node, Action action, std::string summary) {
    Step s;
    s.phase = std::move(phase);
    s.node = std::move(node);
    s.action = action;
    s.summary = std::move(summary);
    list.push_back(std::move(s));
    list.back().index = static_cast<int>(list.size());
    return list.back();
  }
  Step& add(std::string phase, std::string node, Action action, std::string summary) {
    return add(plan_.steps, std::move(phase), std::move(node), action, std::move(summary));
  }
  // gate.<name>: `name` is what the gate runner calls the gate ("health", "custom.x").
  Step& add_gate(std::string name, std::string summary) {
    Step& s = add("gates", "controller", Action::gate, std::move(summary));
    s.gate = std::move(name);
    return s;
  }

  Plan build() {
    plan_.name = m_.name;
    plan_.file = m_.file;
    const auto order = m_.start_order();
    preflight(order);
    arm_deadman(order);
    for (const Node* n : order) stage(*n);
    for (const Node* n : order) outage(*n);
    for (const Node* n : order) hygiene(*n);
    compare_hashes();
    launch(order);
    serve_and_gates();
    finish(order);
    failure_path(order);
    return plan_;
  }

 private:
  void preflight(const std::vector<const Node*>& order) {
    for (const Node* n : order) {
      Step& s = add("preflight", n->name, Action::preflight,
                    "agent answers over mutual TLS at " + n->address + ":" + std::to_string(n->agent_port) +
                        " with certificate CN=" + n->name);
      s.details = {{"role", rank_label(m_, *n)},
                   {"checks", "disk free under cache dir, MemAvailable, GPUs, rendezvous port " +
                                  std::to_string(m_.engine.rendezvous.port) + " free, pinned files present"}};
      if (n->root != "/") s.details.emplace_back("root", n->root);
    }
    // After every node's preflight (the head must hold the manifest to list its files): the room
    // for the staged files and their backups is checked before the dead-men are armed.
    if (m_.stage)
      for (const Node* n : order) {
        if (n->role == Role::head && m_.stage->from == Stage::From::head) continue;
        Step& s = add("preflight", n->name, Action::stage_check,
                      "check room on " + n->name + " for the files to stage and the backups of those they replace "
                      "(lists the source and compares; changes nothing)");
        s.details = {{"backup budget", format_size(m_.stage->backup_budget) +
                                           " for backups the state dir alone holds (copies, and those kept by earlier stages)"}};
      }
  }

  // Every node arms its own dead-man: each one must put its own crontabs back and stop its own
  // rank even when the controller is gone, and then starts its share of the rollback lane.
  void arm_deadman(const std::vector<const Node*>& order) {
    for (const Node* n : order) {
      Step& s = add("arm", n->name, Action::deadman_arm,
                    "arm the dead-man: restore this node and start its rollback commands in " +
                        format_duration(m_.deadman.delay) + " unless disarmed");
      s.details = {{"backend", to_string(m_.deadman.backend)}, {"delay", format_duration(m_.deadman.delay)}};
      if (m_.deadman.backend == DeadmanBackend::systemd)
        s.details.emplace_back("timer", "transient systemd timer on " + n->name + " (survives a dead controller and agent)");
      else
        s.details.emplace_back("timer", "tandemd's own timer on " + n->name + " (fsynced deadline, survives an agent restart)");
      std::vector<std::string> lane;
      for (const Command& c : m_.rollback.commands)
        if (m_.selects(c, *n)) lane.push_back(shell_quote(c.run));
      s.details.emplace_back("fires", "tandemd restore (stop the rank, undo hygiene)" +
                                          (lane.empty() ? std::string() : ", then " + join(lane, "; ")));
      s.undo = "disarm the dead-man";
    }
  }

  // Before the outage: the old lane keeps serving while files stream (renames never disturb a
  // process that has the old file open), and the dead-man is already armed to put them back.
  void stage(const Node& n) {
    const bool pushed = m_.stage && m_.stage->from == Stage::From::controller;
    if (!m_.stage || (n.role == Role::head && !pushed)) return;
    const Node& h = m_.head();
    std::vector<std::string> what;
    for (const auto& p : m_.staged_paths()) what.push_back(p.path + (p.dir ? "/*" : ""));
    Step& s = add("stage", n.name, Action::stage_files,
                  pushed ? "make " + n.name + "'s engine files equal to the controller's: whole files pushed by tandemctl "
                           "over mutual TLS in the chunks the agent asks for, SHA-256 checked, renamed into place; equal "
                           "files skipped"
                         : "make " + n.name + "'s engine files equal to " + h.name + "'s: whole files pulled from its agent over "
                           "mutual TLS, SHA-256 checked, renamed into place; equal files skipped");
    s.details = {{"files", join(what)},
                 {"source", pushed ? std::string("this machine (tandemctl's --stage-root), read only at the paths named here")
                                   : h.name + "'s agent at " + h.fabric_address + ":" + std::to_string(h.agent_port) + " (the fabric)"},
                 {"parallel", std::to_string(m_.stage->parallel) + " files, chunks of " + format_size(m_.stage->chunk)},
                 {"rate", m_.stage->rate_limit ? format_size(*m_.stage->rate_limit) + "/s" : "the fabric's speed"},
                 {"backups", "replaced files kept under the agent's state dir (hard links; copies within " +
                                 format_size(m_.stage->backup_budget) + ")"},
                 {"extra files", m_.stage->prune ? "removed (with a backup)" : "listed, kept"}};
    s.undo = "put every replaced file back from its backup byte for byte; remove the files it created";
  }

  void outage(const Node& n) {
    const Hygiene& hy = m_.hygiene;
    if (!hy.cron_patterns.empty()) {
      Step& s = add("outage", n.name, Action::hygiene_cron,
                    "comment out cron entries" + std::string(hy.cron_include_systemd_timers ? " and stop systemd timers" : "") +
                        " matching: " + join(hy.cron_patterns));
      s.details = {{"scans", "/etc/crontab, /etc/cron.d/*, /var/spool/cron/crontabs/*" +
                                 std::string(hy.cron_include_systemd_timers ? ", systemd timers" : "")},
                   {"marker", "# tandem-disabled <operation id>"}};
      s.undo = "restore each edited file byte for byte; restart stopped timers";
    }
    for (const Command& c : hy.stop) {
      if (!m_.selects(c, n)) continue;
      Step& s = add("outage", n.name, Action::stop_command, "stop the old lane");
      s.argv = c.run;
      s.details = {{"timeout", format_duration(c.timeout)}};
    }
    Step& dark = add("outage", n.name, Action::stop_verify,
                     "verify port " + std::to_string(m_.engine.serve.port) + " is dark and GPU memory is free");
    dark.details = {{"wait up to", format_duration(hy.port_dark_timeout)}};
  }

  void hygiene(const Node& n) {
    const Hygiene& hy = m_.hygiene;
    if (!hy.shm_patterns.empty()) {
      Step& s = add("hygiene", n.name, Action::hygiene_shm, "remove /dev/shm files matching: " + join(hy.shm_patterns));
      s.details = {{"links", "never followed out of /dev/shm"}, {"reports", "files removed and bytes freed"}};
    }
    if (hy.drop_page_cache || hy.min_mem_available) {
      std::string what = hy.drop_page_cache ? "sync, drop the page cache, then check MemAvailable"
                                            : "check MemAvailable";
      Step& s = add("hygiene", n.name, Action::hygiene_page_cache, what);
      if (hy.min_mem_available)
        s.details.emplace_back("require", "MemAvailable >= " + format_size(*hy.min_mem_available));
    }
    Step& c = add("hygiene", n.name, Action::hygiene_cache_dir,
                  "cache dir " + m_.engine.cache_dir + " exists, is writable" +
                      (hy.cache_dir_user_owned ? " and is owned by " + m_.engine.run_user : ""));
    c.details = {{"creates", "the directory, owned by " + m_.engine.run_user + ", when missing"}};
    c.undo = "remove the directory only if this bind created it";
    Step& h = add("hygiene", n.name, Action::hygiene_sha256, "SHA-256 of the engine, pinned configs, model and drafter files");
    std::vector<std::string> what{m_.engine.binary};
    for (const auto& p : m_.engine.pins) what.push_back(p.path);
    what.push_back(m_.engine.model_dir + "/*");
    if (!m_.engine.drafter_dir.empty()) what.push_back(m_.engine.drafter_dir + "/*");
    h.details = {{"files", join(what)}};
  }

  void compare_hashes() {
    Step& s = add("verify", "controller", Action::hashes_compare,
                  "compare SHA-256 across all ranks and against the manifest's pins; any mismatch stops the bind "
                  "before launch and names the files");
    size_t pinned = 0;
    for (const auto& p : m_.engine.pins)
      if (!p.sha256.empty()) ++pinned;
    s.details = {{"pinned digests", std::to_string(pinned)}, {"ranks", std::to_string(m_.nodes.size())}};
  }

  void launch(const std::vector<const Node*>& order) {
    for (const Node* n : order) {
      const bool head = n->role == Role::head;
      Step& s = add("launch", n->name, Action::engine_start,
                    std::string("start ") + (head ? "the head rank" : "worker rank " + std::to_string(node_rank(m_, *n)) +
                                                                        " (headless) before the head") +
                        " as " + m_.engine.run_user);
      s.argv = serve_argv(m_, *n);
      for (const auto& [k, v] : serve_env(m_)) s.details.emplace_back("env " + k, v);
      s.undo = "stop the rank (TERM, then KILL after a grace period)";
      if (head) {
        Step& r = add("launch", n->name, Action::engine_rendezvous,
                      "all " + std::to_string(m_.nodes.size()) + " ranks meet at " + n->fabric_address + ":" +
                          std::to_string(m_.engine.rendezvous.port) + " within " +
                          format_duration(m_.engine.rendezvous.timeout) + "; if one rank fails, the others are stopped");
        r.details = {{"timeout", format_duration(m_.engine.rendezvous.timeout)}};
      } else {
        Step& w = add("launch", n->name, Action::engine_wait_ready,
                      "wait until the worker has loaded its slice and answers http://" + n->fabric_address + ":" +
                          std::to_string(m_.engine.serve.port) + "/health (bounded by " +
                          format_duration(m_.engine.rendezvous.timeout) + "); only then does the head start");
        w.details = {{"timeout", format_duration(m_.engine.rendezvous.timeout)}};
      }
    }
  }

  std::string endpoint() const {
    return http_base_url(m_.head().address, static_cast<std::uint16_t>(m_.engine.serve.port));
  }

  void serve_and_gates() {
    const Node& h = m_.head();
    Step& w = add("serve", h.name, Action::serve_wait, "wait for " + endpoint() + "/health to answer 200");
    w.details = {{"timeout", format_duration(m_.gates.serve_timeout)}};
    const Gates& g = m_.gates;
    auto gate = [&](bool on, const char* id, std::string what) {
      if (on) add_gate(id, std::move(what));
    };
    gate(g.health, "health", "GET /health answers 200");
    gate(g.models, "models", "GET /v1/models lists '" +
                                 (m_.engine.serve.served_model_name.empty() ? m_.engine.model_dir
                                                                            : m_.engine.serve.served_model_name) +
                                 "'");
    // spec_metrics with a prompt of its own first (gates.cpp run_gates says why), else last.
    auto spec_gate = [&] {
      std::string what = "speculative decoding metrics present in /metrics (drafted, accepted)";
      if (g.min_acceptance) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.2f", *g.min_acceptance);
        what += " with acceptance >= " + std::string(buf);
      }
      if (!g.spec_prompt.empty())
        what += ", over one greedy completion of gates.spec_metrics.prompt (" + std::to_string(g.spec_prompt_tokens) +
                " tokens), before the other requests";
      gate(true, "spec_metrics", what);
    };
    const bool spec_first = g.spec_metrics && !g.spec_prompt.empty();
    if (spec_first) spec_gate();
    gate(g.chat, "chat", "a chat completion answers (content or reasoning)");
    gate(g.tool_call, "tool_call", "a forced (named tool_choice) tool call comes back parsed in message.tool_calls");
    gate(g.json, "json", "a response_format json_object answer parses as JSON");
    if (g.long_retrieval_tokens)
      gate(true, "long_retrieval",
           g.long_retrieval_require_needle
               ? "retrieve a fact buried in a " + std::to_string(*g.long_retrieval_tokens) + "-token context"
               : "serve and answer a " + std::to_string(*g.long_retrieval_tokens) +
                     "-token prompt (the needle is not required)");
    if (g.spec_metrics && !spec_first) spec_gate();
    if (g.bench) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "short bench: concurrency %d, %d max tokens, >= %.1f tok/s, <= %d failures",
                    g.bench->concurrency, g.bench->max_tokens, g.bench->min_tok_s, g.bench->max_failures);
      gate(true, "bench", buf);
    }
    for (const CustomGate& c : g.custom) custom_gate(c);
  }

  // The operator's own checks, after the built-in ones: gate.custom.<name>.
  void custom_gate(const CustomGate& c) {
    if (c.kind == CustomGate::Kind::http) {
      const std::string url = c.url.starts_with("/") ? endpoint() + c.url : c.url;
      std::string what = c.method + " " + url + " answers " + std::to_string(c.expect_status);
      if (!c.expect_body_contains.empty()) what += " and contains '" + c.expect_body_contains + "'";
      if (c.expect_json_equals) what += " with " + c.expect_json_path + " = " + *c.expect_json_equals;
      Step& s = add_gate("custom." + c.name, what);
      s.details = {{"timeout", format_duration(c.timeout)}};
      if (!c.body.empty()) s.details.emplace_back("body", c.body);
      return;
    }
    std::string what = "on " + c.command.on + ": the agent runs it; exit " + std::to_string(c.expect_exit);
    if (!c.expect_output_contains.empty()) what += " and output containing '" + c.expect_output_contains + "'";
    Step& s = add_gate("custom." + c.name, what);
    s.argv = c.command.run;
    s.details = {{"runs on", c.command.on}, {"timeout", format_duration(c.timeout)}, {"output kept", "the last 8 KiB"}};
  }

  void finish(const std::vector<const Node*>& order) {
    for (const Node* n : order) add("finish", n->name, Action::deadman_disarm, "all gates passed: disarm the dead-man");
    add("finish", "controller", Action::report_write, "write the bind report (HTML with the timeline, Markdown and JSON)");
  }

  void failure_path(const std::vector<const Node*>& order) {
    auto& f = plan_.on_failure;
    add(f, "rollback", "all", Action::undo, "stop started ranks, then undo completed steps in reverse order");
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      for (const Command& c : m_.rollback.commands) {
        if (!m_.selects(c, **it)) continue;
        Step& s = add(f, "rollback", (*it)->name, Action::rollback_command, "start the rollback lane");
        s.argv = c.run;
        s.details = {{"timeout", format_duration(c.timeout)}};
      }
    }
    Step& v = add(f, "rollback", "controller", Action::rollback_verify,
                  "GET " + m_.rollback.verify.url + " answers 200" +
                      (m_.rollback.verify.expect_body_contains.empty()
                           ? std::string()
                           : " and contains '" + m_.rollback.verify.expect_body_contains + "'"));
    v.details = {{"timeout", format_duration(m_.rollback.verify.timeout)}};
  }

  const Manifest& m_;
  Plan plan_;
};

}  // namespace

Plan make_plan(const Manifest& m) { return Builder(m).build(); }

namespace {
void render_steps(std::string& out, const std::vector<Step>& steps) {
  std::string phase;
  for (const auto& s : steps) {
    if (s.phase != phase) {
      phase = s.phase;
      out += "\n[" + phase + "]\n";
    }
    char head[64];
    std::snprintf(head, sizeof head, "%3d. %-12s ", s.index, s.node.c_str());
    out += head + s.summary + "\n";
    const std::string pad(18, ' ');
    out += pad + "action: " + s.id() + "\n";
    for (const auto& [k, v] : s.details) out += pad + k + ": " + v + "\n";
    if (!s.argv.empty()) out += pad + "run: " + shell_quote(s.argv) + "\n";
    if (!s.undo.empty()) out += pad + "undo: " + s.undo + "\n";
  }
}

nlohmann::ordered_json steps_json(const std::vector<Step>& steps) {
  auto arr = nlohmann::ordered_json::array();
  for (const auto& s : steps) {
    nlohmann::ordered_json j{{"index", s.index}, {"phase", s.phase}, {"node", s.node},
                             {"action", s.id()}, {"summary", s.summary}};
    auto d = nlohmann::ordered_json::object();
    for (const auto& [k, v] : s.details) d[k] = v;
    j["details"] = d;
    j["argv"] = s.argv;
    j["undo"] = s.undo;
    arr.push_back(j);
  }
  return arr;
}
}  // namespace

std::string render_plan_text(const Plan& p) {
  std::string out = "Plan for bind '" + p.name + "' (" + p.file + "): " + std::to_string(p.steps.size()) +
                    " steps; workers start before the head.\n";
  render_steps(out, p.steps);
  out += "\nIf any step or gate fails, or the dead-man fires:\n";
  render_steps(out, p.on_failure);
  return out;
}

nlohmann::ordered_json plan_to_json(const Plan& p) {
  return nlohmann::ordered_json{{"name", p.name}, {"manifest", p.file}, {"steps", steps_json(p.steps)},
                                {"on_failure", steps_json(p.on_failure)}};
}

}  // namespace tandem
