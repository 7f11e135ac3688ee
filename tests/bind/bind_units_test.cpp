// The controller's bookkeeping without a cluster: hash comparison, the journal (fsynced JSON
// lines, torn last line after a kill, folding a run back together), and the state lock.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "bind/bind_journal.hpp"
#include "bind/deadman_summary.hpp"
#include "bind/hash_compare.hpp"
#include "bind/progress_display.hpp"
#include "bind/state_lock.hpp"

using namespace tandem::ctl;
namespace fs = std::filesystem;

namespace {
struct TempDir {
  fs::path p = fs::temp_directory_path() / ("tandem-bind-units-" + std::to_string(::getpid()));
  TempDir() { fs::remove_all(p); }
  ~TempDir() { fs::remove_all(p); }
};
}  // namespace

TEST_CASE("hash comparison names differing and missing files, and pin failures, with every node's digest") {
  json a{{"files", {{"/bin/e", "aa"}}}, {"trees", {{"/m", {{"w.bin", "11"}, {"c.json", "22"}}}}}};
  json b{{"files", {{"/bin/e", "aa"}}}, {"trees", {{"/m", {{"w.bin", "19"}}}}}};
  auto c = compare_hashes({{"n0", a}, {"n1", b}});
  CHECK_FALSE(c.ok);
  REQUIRE(c.mismatches.size() == 2);
  CHECK(c.mismatches[0]["file"] == "/m/c.json");
  CHECK(c.mismatches[0]["reason"] == "missing on some ranks");
  CHECK(c.mismatches[0]["digests"]["n1"].is_null());
  CHECK(c.mismatches[1]["file"] == "/m/w.bin");
  CHECK(c.mismatches[1]["digests"] == json{{"n0", "11"}, {"n1", "19"}});
  CHECK(c.summary().find("2 files differ: /m/c.json (missing on some ranks: n0 22 n1 missing)") == 0);

  auto same = compare_hashes({{"n0", a}, {"n1", a}});
  CHECK(same.ok);
  CHECK(same.files_compared == 3);
  CHECK(same.summary() == "3 files identical on every rank");

  json pinned = a;
  pinned["pins"] = json::array({{{"path", "/bin/e"}, {"expected", "ff"}, {"actual", "aa"}, {"ok", false}}});
  auto p = compare_hashes({{"n0", pinned}});
  CHECK_FALSE(p.ok);
  CHECK(p.mismatches[0]["reason"] == "does not match the manifest's pin");
  CHECK(p.mismatches[0]["expected"] == "ff");
}

TEST_CASE("journal: records survive reopening, a torn last line is skipped, a run folds back together") {
  TempDir t;
  {
    auto j = BindJournal::open(t.p.string());
    REQUIRE(j);
    REQUIRE(j->append({{"event", "bind.begin"}, {"bind_id", "b1"}, {"manifest_sha256", "x"}}));
    REQUIRE(j->append({{"event", "step.begin"}, {"bind_id", "b1"}, {"index", 1}, {"op_id", "b1-1"}}));
    REQUIRE(j->append({{"event", "step.done"}, {"bind_id", "b1"}, {"index", 1}, {"evidence", {{"k", 1}}}}));
    REQUIRE(j->append({{"event", "step.begin"}, {"bind_id", "b1"}, {"index", 2}, {"op_id", "b1-2"}}));
  }
  std::ofstream(t.p / "journal.jsonl", std::ios::app) << "{\"event\":\"step.done\",\"bind";  // kill -9 mid-write
  auto j = BindJournal::open(t.p.string());
  REQUIRE(j);
  CHECK(j->records().size() == 4);
  auto run = last_run(*j);
  REQUIRE(run);
  CHECK(run->bind_id == "b1");
  CHECK(run->steps[1].done);
  CHECK(run->steps[1].evidence["k"] == 1);
  CHECK_FALSE(run->steps[2].done);
  CHECK(run->steps[2].op_id == "b1-2");
  CHECK_FALSE(run->finished());
  // The next append starts on a fresh line, so the torn one cannot swallow it.
  REQUIRE(j->append({{"event", "bind.end"}, {"bind_id", "b1"}, {"result", "bound"}}));
  auto again = BindJournal::open(t.p.string());
  REQUIRE(again);
  CHECK(last_run(*again)->result == "bound");

  std::ofstream(t.p / "journal.jsonl", std::ios::app) << "not json\n{\"event\":\"x\"}\n";
  auto bad = BindJournal::open(t.p.string());
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("journal.jsonl:6: not a journal record") != std::string::npos);
}

TEST_CASE("state lock: a second holder is refused with the first's pid and verb; released on destruction") {
  TempDir t;
  {
    auto first = StateLock::acquire(t.p.string(), "bind demo");
    REQUIRE(first);
    auto second = StateLock::acquire(t.p.string(), "rollback demo");
    REQUIRE_FALSE(second);
    CHECK(second.error().message.find("pid " + std::to_string(::getpid()) + ", tandemctl bind demo") != std::string::npos);
  }
  CHECK(StateLock::acquire(t.p.string(), "bind demo"));
}

TEST_CASE("progress: plain lines per event; the live footer redraws each node's current step and clears at the end") {
  for (auto mode : {Progress::Mode::plain, Progress::Mode::live}) {
    std::FILE* f = std::tmpfile();
    {
      Progress p(mode, f, {"rank1", "rank0"}, 3);
      p.begin(1, "rank1", "hygiene.cron", "comment out cron entries");
      std::this_thread::sleep_for(std::chrono::milliseconds(600));  // let the live ticker redraw
      p.done(1, "rank1", "hygiene.cron", "2 cron lines disabled", 12);
      p.failed(2, "rank0", "engine.start", "boom");
      p.finish();
    }
    std::rewind(f);
    std::string out;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
    std::fclose(f);
    CHECK(out.find("[ 1/3] rank1      hygiene.cron       ok (12 ms)  2 cron lines disabled") != std::string::npos);
    CHECK(out.find("[ 2/3] rank0      engine.start       FAILED: boom") != std::string::npos);
    if (mode == Progress::Mode::plain) {
      CHECK(out.find("\x1b[") == std::string::npos);  // no escape codes in logs
      CHECK(out.find("... comment out cron entries") != std::string::npos);
    } else {
      CHECK(out.find("hygiene.cron ... ") != std::string::npos);  // the footer's live row for rank1
      CHECK(out.find("\x1b[J") != std::string::npos);           // footer cleared before lines and at the end
    }
  }
}

TEST_CASE("bind dir: a bind name that is not a DNS label never becomes a path, whatever validation let through") {
  auto good = bind_dir("/var/lib/tandemctl", "glm53-flash-dflash2");
  REQUIRE(good);
  CHECK(good.value() == "/var/lib/tandemctl/glm53-flash-dflash2");
  for (const std::string& bad : std::vector<std::string>{"../../../../tmp/x", "a/b", "..", ".", "", ";$(id)", "a\nb", "Upper", "-a"}) {
    auto r = bind_dir("/var/lib/tandemctl", bad);
    INFO(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find("is not a DNS label") != std::string::npos);
    CHECK(r.error().message.find("refusing to use it as a directory under /var/lib/tandemctl") != std::string::npos);
    CHECK(r.error().message.find('\n') == std::string::npos);
  }
}

TEST_CASE("status says when the dead-man fired, by whom, and what each rollback command did") {
  const nlohmann::json fired = {
      {"armed", false}, {"fired", true}, {"fired_by", "systemd"}, {"fired_at_ms", 1796392931000LL},
      {"fire_complete", true},
      {"outcomes",
       {{{"argv", {"systemctl", "start", "old-lane.service"}}, {"status", "exit code 0"}, {"exit_code", 0},
         {"timed_out", false}, {"error", ""}},
        {{"argv", {"/usr/bin/tandemd", "restore"}}, {"status", "exit code 3"}, {"exit_code", 3},
         {"timed_out", false}, {"error", ""}}}}};
  CHECK(deadman_summary(fired) ==
        "; dead-man FIRED at 2026-12-04T14:02:11Z by systemd, 1/2 rollback commands ok\n"
        "    restored: systemctl start old-lane.service: ok\n"
        "    restored: /usr/bin/tandemd restore: FAILED (exit code 3)");

  nlohmann::json unfinished = fired;
  unfinished["fire_complete"] = false;
  unfinished["outcomes"] = nlohmann::json::array();
  CHECK(deadman_summary(unfinished) ==
        "; dead-man FIRED at 2026-12-04T14:02:11Z by systemd, 0/0 rollback commands ok"
        " (the fire did not finish: run `tandemctl rollback`)");

  CHECK(deadman_summary({{"armed", true}, {"seconds_left", 41}}) == "; dead-man armed, 41 s left");
  CHECK(deadman_summary({{"armed", false}}) == "; dead-man not armed");
  CHECK(deadman_summary(nullptr).empty());
  // A peer's odd JSON never throws: wrong types read as absent.
  CHECK(deadman_summary({{"fired", true}, {"fire_complete", true}, {"outcomes", {7}}}) ==
        "; dead-man FIRED at an unknown time, 0/1 rollback commands ok\n    restored: ?: FAILED (exit code -1)");
  CHECK(deadman_summary({{"fired", true}, {"fired_at_ms", "soon"}, {"outcomes", 7}}) ==
        "; dead-man FIRED at an unknown time, 0/0 rollback commands ok (the fire did not finish: run `tandemctl rollback`)");
}
