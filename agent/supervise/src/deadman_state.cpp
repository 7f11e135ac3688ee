#include "tandem/supervise/deadman_state.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <nlohmann/json.hpp>

#include "tandem/supervise/atomic_file.hpp"
#include "tandem/supervise/proc_stat.hpp"

namespace tandem::supervise {

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::int64_t boottime_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::int64_t deadman_ms_left(const DeadmanState& s) {
  if (!s.boot_id.empty() && s.boot_id == boot_id()) return (s.deadline_boot_ns - boottime_ns()) / 1'000'000;
  return s.deadline_ms - now_unix_ms();
}

std::string deadman_state_path(const std::string& state_dir) { return state_dir + "/deadman.json"; }

namespace {

nlohmann::json to_json(const Command& c) {
  return {{"on", c.on}, {"run", c.run}, {"timeout_ms", c.timeout.count()}};
}

Command command_from_json(const nlohmann::json& j) {
  Command c;
  c.on = j.value("on", std::string("all"));
  c.run = j.at("run").get<std::vector<std::string>>();
  c.timeout = Duration(j.at("timeout_ms").get<std::int64_t>());
  return c;
}

nlohmann::json to_json(const CommandOutcome& o) {
  return {{"argv", o.argv},         {"status", o.status}, {"exit_code", o.exit_code},
          {"timed_out", o.timed_out}, {"output_tail", o.output_tail}, {"error", o.error},
          {"elapsed_ms", o.elapsed_ms}};
}

CommandOutcome outcome_from_json(const nlohmann::json& j) {
  CommandOutcome o;
  o.argv = j.value("argv", std::vector<std::string>{});
  o.status = j.value("status", std::string{});
  o.exit_code = j.value("exit_code", -1);
  o.timed_out = j.value("timed_out", false);
  o.output_tail = j.value("output_tail", std::string{});
  o.error = j.value("error", std::string{});
  o.elapsed_ms = j.value("elapsed_ms", std::int64_t{0});
  return o;
}

}  // namespace

Status save_deadman_state(const std::string& dir, const DeadmanState& s) {
  nlohmann::json rollback = nlohmann::json::array(), outcomes = nlohmann::json::array();
  for (auto& c : s.rollback) rollback.push_back(to_json(c));
  for (auto& o : s.outcomes) outcomes.push_back(to_json(o));
  nlohmann::json j{{"bind", s.bind},
                   {"backend", to_string(s.backend)},
                   {"armed", s.armed},
                   {"armed_at_ms", s.armed_at_ms},
                   {"deadline_ms", s.deadline_ms},
                   {"boot_id", s.boot_id},
                   {"deadline_boot_ns", s.deadline_boot_ns},
                   {"rollback", rollback},
                   {"timer_rearms", s.timer_rearms},
                   {"timer_rearmed_at_ms", s.timer_rearmed_at_ms},
                   {"disarmed_at_ms", s.disarmed_at_ms},
                   {"fired", s.fired},
                   {"fired_at_ms", s.fired_at_ms},
                   {"fired_by", s.fired_by},
                   {"fire_complete", s.fire_complete},
                   {"outcomes", outcomes}};
  if (auto st = make_dirs(dir, 0700); !st) return st.error().with_context("save dead-man state");
  // 0600: the rollback argv is what root will run at the deadline.
  if (auto st = write_file_atomic(deadman_state_path(dir), j.dump(2) + "\n", 0600); !st)
    return st.error().with_context("save dead-man state");
  return Ok{};
}

Result<std::optional<DeadmanState>> load_deadman_state(const std::string& dir) {
  const std::string path = deadman_state_path(dir);
  auto text = read_file_if_exists(path);
  if (!text) return text.error().with_context("load dead-man state");
  if (!text.value()) return std::optional<DeadmanState>{};
  try {
    auto j = nlohmann::json::parse(*text.value());
    DeadmanState s;
    s.bind = j.value("bind", std::string{});
    s.backend = j.value("backend", std::string("agent")) == "systemd" ? DeadmanBackend::systemd : DeadmanBackend::agent;
    s.armed = j.at("armed").get<bool>();
    s.armed_at_ms = j.value("armed_at_ms", std::int64_t{0});
    s.deadline_ms = j.at("deadline_ms").get<std::int64_t>();
    s.boot_id = j.value("boot_id", std::string{});
    s.deadline_boot_ns = j.value("deadline_boot_ns", std::int64_t{0});
    for (auto& c : j.at("rollback")) s.rollback.push_back(command_from_json(c));
    s.timer_rearms = j.value("timer_rearms", 0);
    s.timer_rearmed_at_ms = j.value("timer_rearmed_at_ms", std::int64_t{0});
    s.disarmed_at_ms = j.value("disarmed_at_ms", std::int64_t{0});
    s.fired = j.at("fired").get<bool>();
    s.fired_at_ms = j.value("fired_at_ms", std::int64_t{0});
    s.fired_by = j.value("fired_by", std::string{});
    s.fire_complete = j.value("fire_complete", false);
    for (auto& o : j.value("outcomes", nlohmann::json::array())) s.outcomes.push_back(outcome_from_json(o));
    return std::optional<DeadmanState>{std::move(s)};
  } catch (const nlohmann::json::exception& e) {
    return Error{"load dead-man state: " + path + ": " + e.what()};
  }
}

Result<StateLock> StateLock::acquire(const std::string& dir) {
  if (auto st = make_dirs(dir, 0700); !st) return st.error().with_context("lock dead-man state");
  const std::string path = dir + "/deadman.lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return sys_error("open " + path);
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    int err = errno;
    ::close(fd);
    return sys_error("flock " + path, err);
  }
  return StateLock(fd);
}

StateLock::~StateLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the (only) descriptor releases the flock
}

}  // namespace tandem::supervise
