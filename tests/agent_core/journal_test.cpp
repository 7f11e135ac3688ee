#include <doctest/doctest.h>

#include "sandbox.hpp"
#include "tandem/agent/journal.hpp"

using namespace tandem::agent;
using sandbox::Sandbox;

TEST_CASE("journal: records survive reopening, in order, queryable by op") {
  Sandbox sb;
  sb.mkdir("/state");
  const auto dir = sb.p("/state");
  {
    auto j = Journal::open(dir);
    REQUIRE(j.ok());
    CHECK((*j)->append("op-1", "cron", Phase::intent, {{"k", 1}}).ok());
    CHECK((*j)->append("op-1", "cron", Phase::applied, {{"lines", 2}}).ok());
    CHECK((*j)->append("op-2", "shm", Phase::intent, nullptr).ok());
    CHECK((*j)->append("op-2", "shm", Phase::undone, nullptr).ok());
    CHECK((*j)->append("op-3", "cache_dir", Phase::intent, nullptr).ok());
  }
  auto j = Journal::open(dir);
  REQUIRE(j.ok());
  auto& journal = **j;
  REQUIRE(journal.records().size() == 5);
  CHECK(journal.records()[0].seq == 1);
  CHECK(journal.records()[4].seq == 5);
  CHECK(journal.records_for("op-1").size() == 2);
  REQUIRE(journal.last("op-1", Phase::applied));
  CHECK(journal.last("op-1", Phase::applied)->data["lines"] == 2);
  CHECK(journal.ops_to_undo() == std::vector<std::string>{"op-1", "op-3"});
  auto next = journal.append("op-4", "sha", Phase::intent, nullptr);
  REQUIRE(next.ok());
  CHECK(next->seq == 6);
  CHECK_FALSE(journal.append("bad id/../x", "sha", Phase::intent, nullptr).ok());
  CHECK(journal.warnings().empty());
}

TEST_CASE("journal: a torn last line is dropped with a warning, everything before is kept") {
  Sandbox sb;
  sb.mkdir("/state");
  const auto dir = sb.p("/state");
  {
    auto j = Journal::open(dir);
    REQUIRE(j.ok());
    REQUIRE((*j)->append("op-1", "cron", Phase::intent, {{"a", 1}}).ok());
    REQUIRE((*j)->append("op-1", "cron", Phase::applied, {{"a", 2}}).ok());
  }
  const std::string good = sb.read("/state/journal.jsonl");
  sb.write("/state/journal.jsonl", good + R"({"seq":3,"time":"2026-12-02T00:00:00.000Z","op_id":"op-1","st)", 0600);
  {
    auto j = Journal::open(dir);
    REQUIRE(j.ok());
    CHECK((*j)->records().size() == 2);
    REQUIRE((*j)->warnings().size() == 1);
    CHECK((*j)->warnings()[0].find("torn") != std::string::npos);
    CHECK(sb.read("/state/journal.jsonl") == good);  // cut off, so the next append starts clean
    REQUIRE((*j)->append("op-1", "cron", Phase::verified, nullptr).ok());
  }
  auto j = Journal::open(dir);
  REQUIRE(j.ok());
  CHECK((*j)->records().size() == 3);
  CHECK((*j)->records()[2].phase == Phase::verified);
  CHECK((*j)->warnings().empty());
}

TEST_CASE("journal: a corrupt line before the end is an error, not silently skipped") {
  Sandbox sb;
  sb.mkdir("/state");
  {
    auto j = Journal::open(sb.p("/state"));
    REQUIRE(j.ok());
    REQUIRE((*j)->append("op-1", "cron", Phase::intent, nullptr).ok());
  }
  auto text = sb.read("/state/journal.jsonl");
  sb.write("/state/journal.jsonl", "garbage\n" + text, 0600);
  auto j = Journal::open(sb.p("/state"));
  REQUIRE_FALSE(j.ok());
  CHECK(j.error().text().find("line 1 is corrupt") != std::string::npos);
}

// Found by fuzz/journal_fuzz.cpp (fuzz/corpus/journal/crash-seq-float): get<uint64_t>() of a
// float or negative number is a cast, undefined past the range, so such a "seq" or blob "size"
// was read as some number instead of refusing the line.
TEST_CASE("journal: a seq or blob size that is not a whole byte count is corrupt, not cast") {
  for (const std::string seq : {"8.9e86", "-1", "2.5"}) {
    CAPTURE(seq);
    Sandbox sb;
    sb.mkdir("/state");
    const std::string good = R"({"seq":2,"time":"t","op_id":"op-1","step":"cron","phase":"applied","data":null})";
    sb.write("/state/journal.jsonl",
             R"({"seq":)" + seq + R"(,"time":"t","op_id":"op-1","step":"cron","phase":"intent","data":null})" "\n" + good + "\n",
             0600);
    auto j = Journal::open(sb.p("/state"));
    REQUIRE_FALSE(j.ok());
    CHECK(j.error().text().find("line 1 is corrupt") != std::string::npos);
  }
  for (const char* size : {"-1", "1e300", "\"12\""}) {
    CAPTURE(size);
    auto ref = BlobRef::from_json(nlohmann::json::parse(std::string(R"({"file":"blobs/a.1.bak","sha256":"00","size":)") + size + "}"));
    REQUIRE_FALSE(ref.ok());
    CHECK(ref.error().text().find("malformed") != std::string::npos);
  }
}

TEST_CASE("journal: blobs are checked against their recorded SHA-256") {
  Sandbox sb;
  sb.mkdir("/state");
  auto j = Journal::open(sb.p("/state"));
  REQUIRE(j.ok());
  auto ref = (*j)->save_blob("op-1", "abc");
  REQUIRE(ref.ok());
  CHECK(ref->sha256 == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  auto ref2 = (*j)->save_blob("op-1", "other");
  REQUIRE(ref2.ok());
  CHECK(ref2->file != ref->file);
  auto back = (*j)->load_blob(*ref);
  REQUIRE(back.ok());
  CHECK(*back == "abc");
  sb.write("/state/" + ref->file, "abd", 0600);
  auto bad = (*j)->load_blob(*ref);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().text().find("does not match the journal") != std::string::npos);
}
