// Plan step "stage.files": the node's agent pulls the staged files from the head's agent, or
// (stage.from: controller) tandemctl pushes the chunks the agent asks for (one long apply, then
// verify). Meanwhile its progress endpoint is polled so the operator sees bytes,
// rate and ETA on the node's row of the progress display.
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "bind_steps.hpp"
#include "tandem/units.hpp"

namespace tandem::ctl {
namespace {

using namespace std::chrono_literals;

std::string rate_text(double bytes_per_s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f MB/s", bytes_per_s / 1e6);
  return buf;
}

}  // namespace

std::string stage_progress_text(const json& p, double seconds) {
  const auto done = p.value("done_bytes", 0ull), total = p.value("total_bytes", 0ull);
  std::string t = format_size(done) + " of " + format_size(total) + ", files " + std::to_string(p.value("files_done", 0ull)) +
                  "/" + std::to_string(p.value("files_total", 0ull));
  if (seconds > 0.5 && done > 0) {
    const double rate = static_cast<double>(done) / seconds;
    t += ", " + rate_text(rate);
    if (total > done)
      t += ", ETA " + format_duration(std::chrono::seconds(static_cast<long long>(static_cast<double>(total - done) / rate) + 1));
  }
  return t;
}

StepOutcome run_stage_check(BindContext& ctx, const Step& s) {
  if (ctx.stage_push)
    if (auto bad = ctx.stage_push->send_listing(ctx.agent(s.node))) return StepOutcome::failure(*bad);
  AgentReply r = ctx.agent(s.node).step_check("stage", stage_timeout());
  // r.error names the node and its address; the agent's part, the path and both byte counts.
  if (!r.ok) return StepOutcome::failure("room to stage: " + r.error, r.evidence);
  const json& ev = r.body;
  std::string note = std::to_string(ev.value("copy", json::array()).size()) + " files to copy (" +
                     format_size(ev.value("bytes", 0ull)) + "), " + std::to_string(ev.value("skipped", 0)) + " equal";
  for (const auto& sp : ev.value("space", json::array()))
    note += "; " + sp.value("path", "") + " needs " + format_size(sp.value("needed", 0ull)) + " of " +
            format_size(sp.value("free", 0ull)) + " free";
  note += "; backups " + format_size(ev.value("backup_kept_bytes", 0ull) + ev.value("backup_copy_bytes", 0ull)) + " of " +
          format_size(ev.value("backup_budget", 0ull));
  return StepOutcome::success(ev, note);
}

StepOutcome run_stage(BindContext& ctx, const Step& s) {
  const std::string op = ctx.op_for_step(s.index);
  const AgentClient& a = ctx.agent(s.node);
  // stage.from: controller: the listing again (the agent may have restarted since its check), and
  // pushers that serve the chunks this node's agent asks for while its apply runs.
  std::optional<StagePush::Pushers> pushers;
  if (ctx.stage_push) {
    if (auto bad = ctx.stage_push->send_listing(a)) return StepOutcome::failure(*bad);
    pushers.emplace(*ctx.stage_push, a, ctx.m.stage->parallel);
  }
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  // A plain log gets a line every 10 s; a terminal's footer is redrawn every second.
  const auto every = ctx.progress.mode() == Progress::Mode::live ? 1s : 10s;
  std::thread watcher([&] {
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_lock lock(mu);
    while (!cv.wait_for(lock, every, [&] { return finished; })) {
      lock.unlock();
      AgentReply p = a.stage_progress();
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (p.ok && p.body.value("running", false)) ctx.progress.note(s.node, "staging: " + stage_progress_text(p.body, secs));
      lock.lock();
    }
  });
  StepOutcome o = apply_and_verify(ctx, s.node, "stage", op, stage_timeout());
  {
    std::lock_guard lock(mu);
    finished = true;
  }
  cv.notify_all();
  watcher.join();
  pushers.reset();
  if (!o.ok) return o;
  const json ev = field(o.evidence, "apply");
  char rate[48];
  std::snprintf(rate, sizeof rate, "%.0f MB/s", ev.value("mb_per_s", 0.0));
  o.note = std::to_string(ev.value("copied", 0)) + " files copied (" + format_size(ev.value("bytes", 0ull)) + " at " + rate +
           (ev.value("resumed_bytes", 0ull) ? ", " + format_size(ev.value("resumed_bytes", 0ull)) + " resumed" : "") +
           "), " + std::to_string(ev.value("skipped", 0)) + " already equal" +
           (ev.value("extras", json::array()).empty() ? "" : ", " + std::to_string(ev["extras"].size()) + " extra files listed") +
           (o.note.empty() ? "" : " " + o.note);
  return o;
}

}  // namespace tandem::ctl
