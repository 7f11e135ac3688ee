#include "tandem/supervise/rank_state.hpp"

#include <nlohmann/json.hpp>

#include "tandem/supervise/atomic_file.hpp"

namespace tandem::supervise {

std::string rank_record_path(const std::string& state_dir) { return state_dir + "/rank.json"; }

Status save_rank_record(const std::string& state_dir, const RankRecord& r) {
  nlohmann::json j{{"pid", r.pid},
                   {"pgid", r.pgid},
                   {"start_ticks", r.start_ticks},
                   {"boot_id", r.boot_id},
                   {"started_at_ms", r.started_at_ms},
                   {"log_path", r.log_path},
                   {"ready_host", r.ready_host},
                   {"ready_port", r.ready_port},
                   {"argv", r.argv}};
  if (auto st = make_dirs(state_dir); !st) return st.error().with_context("save rank record");
  auto st = write_file_atomic(rank_record_path(state_dir), j.dump(2) + "\n");
  if (!st) return st.error().with_context("save rank record");
  return Ok{};
}

Result<std::optional<RankRecord>> load_rank_record(const std::string& state_dir) {
  const std::string path = rank_record_path(state_dir);
  auto text = read_file_if_exists(path);
  if (!text) return text.error().with_context("load rank record");
  if (!text.value()) return std::optional<RankRecord>{};
  try {
    auto j = nlohmann::json::parse(*text.value());
    RankRecord r;
    r.pid = j.at("pid").get<pid_t>();
    r.pgid = j.at("pgid").get<pid_t>();
    r.start_ticks = j.at("start_ticks").get<std::uint64_t>();
    r.boot_id = j.at("boot_id").get<std::string>();
    r.started_at_ms = j.value("started_at_ms", std::int64_t{0});
    r.log_path = j.value("log_path", std::string{});
    r.ready_host = j.value("ready_host", std::string{});
    r.ready_port = j.value("ready_port", 0);
    r.argv = j.value("argv", std::vector<std::string>{});
    return std::optional<RankRecord>{std::move(r)};
  } catch (const nlohmann::json::exception& e) {
    return Error{"load rank record: " + path + ": " + e.what()};
  }
}

Status clear_rank_record(const std::string& state_dir) { return remove_file_durably(rank_record_path(state_dir)); }

}  // namespace tandem::supervise
