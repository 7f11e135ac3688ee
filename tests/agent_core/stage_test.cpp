// The stage step between two sandboxed nodes on one machine: the head's files served by a
// LocalStageSource, pulled into the worker's root through the same interface the agents use over
// mutual TLS. Faults (a cut link, a file changed on the source, a full disk) are injected at the
// source interface or with a real small tmpfs.
#include <doctest/doctest.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <functional>

#include "sandbox.hpp"
#include "tandem/agent/sha256.hpp"
#include "tandem/agent/stage_landing.hpp"
#include "tandem/agent/stage_source.hpp"
#include "tandem/agent/stage_step.hpp"

using namespace tandem::agent;
using sandbox::Sandbox;
using nlohmann::json;

namespace {

const std::string kShard = "/models/target/model-00001-of-00001.safetensors";

std::vector<tandem::StagedPath> staged(const CoreOptions& o) {
  return {{o.engine.binary, false, "", ""}, {o.engine.pins[0].path, false, "", ""}, {o.engine.model_dir, true, "", ""},
          {o.engine.drafter_dir, true, "", ""}};
}

std::shared_ptr<LocalStageSource> local_source(const Sandbox& head) {
  auto o = sandbox::options(head);
  auto root = NodeRoot::open(head.root, NodeRoot::manifest_allow_list(o.engine, o.state_dir));
  REQUIRE(root.ok());
  return std::make_shared<LocalStageSource>(*root, staged(o), o.engine.pins, "", "head (test)");
}

// The source with faults: reads fail after `fail_after` of them (a cut link), and `before_read`
// runs before each read (to change the source under the transfer).
struct FaultySource : StageSource {
  std::shared_ptr<StageSource> inner;
  int fail_after = -1;
  int reads = 0;
  std::function<void(int)> before_read;
  explicit FaultySource(std::shared_ptr<StageSource> s) : inner(std::move(s)) {}
  std::string where() const override { return inner->where(); }
  tandem::Result<SourceListing> list() override { return inner->list(); }
  tandem::Result<std::string> read(const SourceFile& f, std::uint64_t offset, std::uint64_t length) override {
    if (fail_after >= 0 && reads >= fail_after) return plain_error(f.path, "connection reset (the test cut the link)");
    if (before_read) before_read(reads);
    ++reads;
    return inner->read(f, offset, length);
  }
};

CoreOptions worker_options(const Sandbox& worker, std::shared_ptr<StageSource> source, bool prune = false) {
  CoreOptions o = sandbox::options(worker);
  tandem::Stage st;
  st.items = {tandem::Stage::Item::binary, tandem::Stage::Item::pins, tandem::Stage::Item::model,
              tandem::Stage::Item::drafter};
  st.chunk = 1 << 20;
  st.parallel = 3;
  st.prune = prune;
  o.stage = st;
  o.staged_paths = staged(o);
  o.stage_source = std::move(source);
  return o;
}

// `path` as the source lists it (size, SHA-256, mtime).
SourceFile listed(StageSource& src, const std::string& path) {
  auto listing = src.list();
  REQUIRE(listing.ok());
  for (const auto& e : listing->entries)
    for (const auto& f : e.files)
      if (f.path == path) return f;
  FAIL("the source does not list " << path);
  return {};
}

ino_t inode(const Sandbox& sb, const std::string& host) {
  struct stat st {};
  ::lstat(sb.p(host).c_str(), &st);
  return st.st_ino;
}

void head_files(const Sandbox& head) {
  head.write("/opt/tandem/bin/tandem-serve", "new engine build", 0755);
  head.write("/opt/glm/chat-template.jinja", "{{ messages }}");
  head.write("/models/target/config.json", "{}");
  head.write(kShard, std::string(3 * (1 << 20) + 5, 'n'));
  head.write("/models/target/sub/tokenizer.json", "tok");
  head.write("/models/drafter/model.safetensors", "drafter");
}

}  // namespace

TEST_CASE("stage: copies what differs, skips what is equal, and undo puts the node back byte for byte") {
  Sandbox head, worker;
  head_files(head);
  worker.write("/opt/tandem/bin/tandem-serve", "old engine", 0700);
  worker.write("/models/target/config.json", "{}");
  worker.write(kShard, "old shard");
  worker.write("/models/target/extra.bin", "only here");
  const ino_t old_binary = inode(worker, "/opt/tandem/bin/tandem-serve");

  auto core = sandbox::open_core(worker_options(worker, local_source(head)));
  auto checked = core->check("stage");
  REQUIRE_MESSAGE(checked.ok(), checked.error().text());
  CHECK((*checked)["copy"].size() == 5);
  CHECK((*checked)["skipped"] == 1);
  CHECK_FALSE(worker.exists("/var/lib/tandemd/stage-backups"));  // check changes nothing

  auto a = core->apply("stage", "op-stage-1");
  REQUIRE_MESSAGE(a.ok(), a.error().text());
  const json& ev = (*a)["evidence"];
  CHECK(ev["copied"] == 5);
  CHECK(ev["skipped"] == 1);
  CHECK(ev["bytes"] == 16 + 14 + (3 * (1 << 20) + 5) + 3 + 7);
  CHECK(ev["extras"] == json::array({"/models/target/extra.bin"}));
  for (const char* f : {"/opt/tandem/bin/tandem-serve", "/opt/glm/chat-template.jinja", kShard.c_str(),
                        "/models/target/sub/tokenizer.json", "/models/drafter/model.safetensors"})
    CHECK_MESSAGE(worker.read(f) == head.read(f), f);
  CHECK(worker.mode("/opt/tandem/bin/tandem-serve") == 0755);
  CHECK(worker.read("/models/target/extra.bin") == "only here");  // listed, not pruned
  CHECK_FALSE(worker.exists("/opt/tandem/bin/.tandem-serve.tandem-partial"));
  CHECK_FALSE(worker.exists("/opt/tandem/bin/.tandem-serve.tandem-partial.json"));
  auto v = core->verify("op-stage-1");
  REQUIRE_MESSAGE(v.ok(), v.error().text());

  // A second stage finds everything equal and copies nothing.
  auto again = core->apply("stage", "op-stage-2");
  REQUIRE_MESSAGE(again.ok(), again.error().text());
  CHECK((*again)["evidence"]["copied"] == 0);
  CHECK((*again)["evidence"]["skipped"] == 6);

  // Undo as the dead-man runs it: a core opened without any source.
  auto restore_opts = worker_options(worker, nullptr);
  auto restore = sandbox::open_core(restore_opts);
  auto u = restore->undo_incomplete();
  REQUIRE_MESSAGE(u.ok(), u.error().text());
  CHECK(worker.read("/opt/tandem/bin/tandem-serve") == "old engine");
  CHECK(worker.mode("/opt/tandem/bin/tandem-serve") == 0700);
  CHECK(inode(worker, "/opt/tandem/bin/tandem-serve") == old_binary);  // the very same file, not a copy
  CHECK(worker.read(kShard) == "old shard");
  CHECK(worker.read("/models/target/config.json") == "{}");
  CHECK(worker.read("/models/target/extra.bin") == "only here");
  CHECK_FALSE(worker.exists("/opt/glm/chat-template.jinja"));
  CHECK_FALSE(worker.exists("/models/target/sub"));
  CHECK_FALSE(worker.exists("/models/drafter"));
  CHECK_FALSE(worker.exists("/var/lib/tandemd/stage-backups/op-stage-1"));
  // Undo twice is still the original (the journal answers).
  auto u2 = restore->undo("op-stage-1");
  REQUIRE(u2.ok());
  CHECK((*u2)["replayed"] == true);
}

TEST_CASE("stage: prune removes extra files, with a backup undo restores") {
  Sandbox head, worker;
  head_files(head);
  worker.write("/models/target/extra.bin", "only here", 0600);
  auto core = sandbox::open_core(worker_options(worker, local_source(head), true));
  auto a = core->apply("stage", "op-prune");
  REQUIRE_MESSAGE(a.ok(), a.error().text());
  CHECK((*a)["evidence"]["pruned"] == 1);
  CHECK_FALSE(worker.exists("/models/target/extra.bin"));
  auto u = core->undo("op-prune");
  REQUIRE_MESSAGE(u.ok(), u.error().text());
  CHECK(worker.read("/models/target/extra.bin") == "only here");
  CHECK(worker.mode("/models/target/extra.bin") == 0600);
}

TEST_CASE("stage: a cut link leaves the verified chunks; the next stage resumes from the last one") {
  Sandbox head, worker;
  head_files(head);
  head.write(kShard, std::string(5 * (1 << 20) + 3, 'r'));
  worker.write(kShard, "old shard");
  auto faulty = std::make_shared<FaultySource>(local_source(head));
  faulty->fail_after = 2;
  auto o = worker_options(worker, faulty);
  o.stage->parallel = 1;  // the shard first (largest), so the cut lands inside it
  auto core = sandbox::open_core(o);
  auto a = core->apply("stage", "op-cut");
  REQUIRE_FALSE(a.ok());
  CHECK(a.error().text().find("the test cut the link") != std::string::npos);
  CHECK(worker.read(kShard) == "old shard");  // the target is never half-written
  struct stat st {};
  REQUIRE(::stat(partial_path(worker.p(kShard)).c_str(), &st) == 0);
  CHECK(st.st_size == 2 << 20);

  // The next bind: a new op, the link back. Only what was not verified crosses again.
  auto next = sandbox::open_core(worker_options(worker, local_source(head)));
  auto b = next->apply("stage", "op-resume");
  REQUIRE_MESSAGE(b.ok(), b.error().text());
  CHECK((*b)["evidence"]["resumed_bytes"] == 2 << 20);
  CHECK(worker.read(kShard) == head.read(kShard));
  CHECK_FALSE(worker.exists(partial_path(kShard)));

  // Both ops undone, newest first: the original shard is back.
  auto u = next->undo_incomplete();
  REQUIRE_MESSAGE(u.ok(), u.error().text());
  CHECK(worker.read(kShard) == "old shard");
}

TEST_CASE("stage: a damaged partial never lands: the whole-file SHA-256 refuses it, the next try starts over") {
  Sandbox head, worker;
  head_files(head);
  auto src = local_source(head);
  const SourceFile shard = listed(*src, kShard);
  worker.write(kShard, "old shard");
  FaultySource cut(src);
  cut.fail_after = 2;
  LandOptions o;
  o.chunk = 1 << 20;
  REQUIRE_FALSE(land_file(cut, shard, worker.p(kShard), o).ok());
  CHECK(worker.read(sidecar_path(kShard)).find("\"length\":2097152") != std::string::npos);
  // Flip a byte inside the recorded prefix, as a failing disk would.
  {
    std::FILE* f = std::fopen(partial_path(worker.p(kShard)).c_str(), "r+b");
    REQUIRE(f);
    std::fseek(f, 100, SEEK_SET);
    std::fputc('X', f);
    std::fclose(f);
  }
  auto damaged = land_file(*src, shard, worker.p(kShard), o);
  REQUIRE_FALSE(damaged.ok());
  CHECK(damaged.error().text().find("or the partial copy was damaged") != std::string::npos);
  CHECK(worker.read(kShard) == "old shard");
  CHECK_FALSE(worker.exists(partial_path(kShard)));
  auto r = land_file(*src, shard, worker.p(kShard), o);
  REQUIRE_MESSAGE(r.ok(), r.error().text());
  CHECK(r->resumed == 0);
  CHECK(r->fetched == shard.size);
  CHECK(*sha256_file(worker.p(kShard)) == shard.sha256);
}

TEST_CASE("stage: a file changed on the source mid-transfer is refused and nothing lands") {
  Sandbox head, worker;
  head_files(head);
  worker.write(kShard, "old shard");
  SUBCASE("size or mtime changed: the next chunk is refused") {
    auto faulty = std::make_shared<FaultySource>(local_source(head));
    faulty->before_read = [&](int n) {
      if (n == 1) head.write(kShard, std::string(3 * (1 << 20) + 5, 'c'));
    };
    auto o = worker_options(worker, faulty);
    o.stage->parallel = 1;
    auto core = sandbox::open_core(o);
    auto a = core->apply("stage", "op-changed");
    REQUIRE_FALSE(a.ok());
    CHECK(a.error().text().find("changed on the source since it was listed") != std::string::npos);
  }
  SUBCASE("same size and mtime (edited in place, mtime put back): the SHA-256 check refuses it") {
    struct stat before {};
    REQUIRE(::stat(head.p(kShard).c_str(), &before) == 0);
    auto faulty = std::make_shared<FaultySource>(local_source(head));
    faulty->before_read = [&](int n) {
      if (n != 2) return;
      std::FILE* f = std::fopen(head.p(kShard).c_str(), "r+b");
      std::fseek(f, (2 << 20) + 7, SEEK_SET);
      std::fputc('Z', f);
      std::fclose(f);
      const struct timespec times[2] = {before.st_atim, before.st_mtim};
      ::utimensat(AT_FDCWD, head.p(kShard).c_str(), times, 0);
    };
    auto o = worker_options(worker, faulty);
    o.stage->parallel = 1;
    auto core = sandbox::open_core(o);
    auto a = core->apply("stage", "op-changed");
    REQUIRE_FALSE(a.ok());
    CHECK(a.error().text().find("it changed on the source during the transfer") != std::string::npos);
  }
  CHECK(worker.read(kShard) == "old shard");
  CHECK_FALSE(worker.exists("/models/target/.model-00001-of-00001.safetensors.tandem-partial"));
  CHECK_FALSE(worker.exists("/models/target/.model-00001-of-00001.safetensors.tandem-partial.json"));
}

TEST_CASE("stage: the source serves only the staged paths; a listing cannot steer writes elsewhere") {
  Sandbox head;
  head_files(head);
  head.write("/etc/shadow", "secret");
  auto src = local_source(head);
  CHECK(src->serves(kShard));
  CHECK(src->serves("/opt/tandem/bin/tandem-serve"));
  CHECK_FALSE(src->serves("/etc/shadow"));
  CHECK_FALSE(src->serves("/models/target"));  // a directory itself is not a file to read
  CHECK_FALSE(src->serves("/models/target/../../etc/shadow"));
  CHECK_FALSE(src->serves("/opt/tandem/bin/tandem-serve2"));
  auto r = src->read(SourceFile{"/etc/shadow", 6, std::string(64, '0'), 0, 0644}, 0, 6);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().text().find("refused: not a path the manifest's stage section names") != std::string::npos);

  json outside = {{"entries", json::array({{{"path", "/models/target"}, {"dir", true},
                                             {"files", json::array({SourceFile{"/etc/cron.d/evil", 1, std::string(64, 'a'), 0, 0644}.to_json()})}}})}};
  auto l = SourceListing::from_json(outside);
  REQUIRE_FALSE(l.ok());
  CHECK(l.error().text().find("listed under /models/target but not inside it") != std::string::npos);
  json dotdot = {{"entries", json::array({{{"path", "/models/target/../x"}, {"dir", true}, {"files", json::array()}}})}};
  CHECK_FALSE(SourceListing::from_json(dotdot).ok());
}

TEST_CASE("stage: a source that lists a path the manifest does not stage is refused before anything changes") {
  struct Rogue : StageSource {
    std::string where() const override { return "rogue"; }
    tandem::Result<SourceListing> list() override {
      SourceListing l;
      l.entries.push_back({"/etc/cron.d", true, {}});
      return l;
    }
    tandem::Result<std::string> read(const SourceFile&, std::uint64_t, std::uint64_t) override { return std::string(); }
  };
  Sandbox worker;
  auto core = sandbox::open_core(worker_options(worker, std::make_shared<Rogue>()));
  auto a = core->apply("stage", "op-rogue");
  REQUIRE_FALSE(a.ok());
  CHECK(a.error().text().find("refused: the source listed a path the manifest's stage section does not name") !=
        std::string::npos);
}

TEST_CASE("stage: disk full on the target is a clear error and nothing half-written is left") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: mounting a small tmpfs needs root");
    return;
  }
  Sandbox head, worker;
  head_files(head);
  head.write(kShard, std::string(2 << 20, 'f'));
  worker.write(kShard, "old shard");
  if (::mount("tandem-test", worker.p("/models/target").c_str(), "tmpfs", 0, "size=1m") != 0) {
    MESSAGE("skipped: cannot mount a tmpfs here: " << std::strerror(errno));
    return;
  }
  struct Unmount {
    std::string at;
    ~Unmount() { ::umount2(at.c_str(), MNT_DETACH); }
  } unmount{worker.p("/models/target")};
  worker.write(kShard, "old shard");  // on the tmpfs now

  // Planned: the free-space check refuses before any byte moves.
  auto core = sandbox::open_core(worker_options(worker, local_source(head)));
  auto a = core->apply("stage", "op-full");
  REQUIRE_FALSE(a.ok());
  CHECK(a.error().text().find("not enough space") != std::string::npos);
  CHECK(worker.read(kShard) == "old shard");

  // Space taken while the file streams (the check passed, then the disk filled): ENOSPC mid-file.
  auto src = local_source(head);
  const SourceFile shard = listed(*src, kShard);
  LandOptions o;
  o.chunk = 256 << 10;
  auto r = land_file(*src, shard, worker.p(kShard), o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().text().find("the file system holding it is full") != std::string::npos);
  CHECK(worker.read(kShard) == "old shard");
  CHECK_FALSE(worker.exists(partial_path(kShard)));
  CHECK_FALSE(worker.exists(sidecar_path(kShard)));
}

TEST_CASE("stage: backups of verified stages are released on request; the budget counts the kept ones") {
  Sandbox head, worker;
  head_files(head);
  worker.write(kShard, "old shard, the bytes only the backup holds once replaced");
  auto core = sandbox::open_core(worker_options(worker, local_source(head)));
  auto a = core->apply("stage", "op-first");
  REQUIRE_MESSAGE(a.ok(), a.error().text());
  REQUIRE(core->verify("op-first").ok());
  CHECK(worker.exists("/var/lib/tandemd/stage-backups/op-first"));

  // The head changes; a second stage must keep a backup of the first's shard too. The old shard
  // (held by the first backup alone now) counts against a budget smaller than it: refused at check.
  head.write(kShard, std::string(3 * (1 << 20) + 5, 'm'));
  auto tight_opts = worker_options(worker, local_source(head));
  tight_opts.stage->backup_budget = 16;
  auto tight = sandbox::open_core(tight_opts);
  auto refused = tight->check("stage");
  REQUIRE_FALSE(refused.ok());
  const std::string why = refused.error().text();
  CHECK_MESSAGE(why.find("kept by earlier stages") != std::string::npos, why);
  CHECK_MESSAGE(why.find("over stage.backup_budget 16 bytes") != std::string::npos, why);
  CHECK(tandem::agent::evidence(refused.error())["backup_kept_bytes"] == 56);

  // An unverified op keeps its backups (it may need undoing); "keep" keeps the named one.
  auto b = core->apply("stage", "op-second");
  REQUIRE_MESSAGE(b.ok(), b.error().text());
  const std::uint64_t second_backup = 3 * (1 << 20) + 5;  // the first stage's shard, replaced again
  auto fits_second_opts = worker_options(worker, local_source(head));
  fits_second_opts.stage->backup_budget = second_backup;
  auto fits_second = sandbox::open_core(fits_second_opts);
  auto both = fits_second->check("stage");
  REQUIRE_FALSE(both.ok());  // both ops' backups are kept: over the budget
  CHECK(tandem::agent::evidence(both.error())["backup_kept_bytes"] == 56 + second_backup);

  auto kept = core->release_stage({});
  REQUIRE_MESSAGE(kept.ok(), kept.error().text());
  CHECK((*kept)["released"].size() == 1);
  CHECK((*kept)["released"][0]["op_id"] == "op-first");
  CHECK((*kept)["freed_bytes"] == 56);
  CHECK((*kept)["kept"] == json::array({"op-second"}));
  CHECK_FALSE(worker.exists("/var/lib/tandemd/stage-backups/op-first"));
  CHECK(worker.exists("/var/lib/tandemd/stage-backups/op-second"));
  REQUIRE(core->verify("op-second").ok());
  auto keep_named = core->release_stage({"op-second"});
  REQUIRE(keep_named.ok());
  CHECK((*keep_named)["released"].empty());

  // With the first released, the same budget holds what is left.
  auto now = fits_second->check("stage");
  REQUIRE_MESSAGE(now.ok(), now.error().text());
  CHECK((*now)["backup_kept_bytes"] == second_backup);

  // A released op is passed by: undo_incomplete undoes only the second, back to the first's files.
  auto undo_first = core->undo("op-first");
  REQUIRE(undo_first.ok());
  CHECK((*undo_first)["evidence"]["released"] == true);
  CHECK((*undo_first)["evidence"]["restored"] == 0);
  auto u = core->undo_incomplete();
  REQUIRE_MESSAGE(u.ok(), u.error().text());
  CHECK((*u)["undone"].size() == 1);
  CHECK(worker.read(kShard) == std::string(3 * (1 << 20) + 5, 'n'));
}

TEST_CASE("stage: stage.files lands a source path under another name, only with its pinned SHA-256") {
  Sandbox head, worker;
  head_files(head);
  head.write("/opt/build/tandem-serve", "fresh build", 0755);
  const std::string target = "/usr/local/bin/tandem-serve";
  auto with_file = [&](const CoreOptions& o, const std::string& pin) {
    auto v = staged(o);
    v.push_back({target, false, pin, "/opt/build/tandem-serve"});
    return v;
  };
  auto source_for = [&](const std::string& pin) {
    auto o = sandbox::options(head);
    const auto paths = with_file(o, pin);
    auto root = NodeRoot::open(head.root, NodeRoot::manifest_allow_list(o.engine, o.state_dir, paths));
    REQUIRE(root.ok());
    return std::make_shared<LocalStageSource>(*root, paths, o.engine.pins, "", "head (test)");
  };
  auto worker_for = [&](const std::string& pin) {
    auto o = worker_options(worker, source_for(pin));
    o.staged_paths = with_file(o, pin);
    return o;
  };

  SUBCASE("pinned and matching: listed and landed under the target's name") {
    const std::string pin = tandem::sha256_hex("fresh build");
    auto src = source_for(pin);
    CHECK(src->serves(target));
    CHECK_FALSE(src->serves("/opt/build/tandem-serve"));  // asked for by its target name only
    const SourceFile f = listed(*src, target);
    CHECK(f.sha256 == pin);
    auto core = sandbox::open_core(worker_for(pin));
    auto a = core->apply("stage", "op-files");
    REQUIRE_MESSAGE(a.ok(), a.error().text());
    CHECK(worker.read(target) == "fresh build");
    CHECK(worker.mode(target) == 0755);
    CHECK_FALSE(worker.exists("/opt/build/tandem-serve"));
    REQUIRE(core->verify("op-files").ok());
    auto u = core->undo("op-files");
    REQUIRE_MESSAGE(u.ok(), u.error().text());
    CHECK_FALSE(worker.exists(target));
  }
  SUBCASE("the source's copy differs from the pin: nothing is listed, nothing lands") {
    const std::string pin(64, 'a');
    auto l = source_for(pin)->list();
    REQUIRE_FALSE(l.ok());
    CHECK(l.error().text().find("but the manifest pins " + pin + " (staged to " + target + ")") != std::string::npos);
    auto core = sandbox::open_core(worker_for(pin));
    auto a = core->apply("stage", "op-files-bad");
    REQUIRE_FALSE(a.ok());
    CHECK_FALSE(worker.exists(target));
  }
  SUBCASE("a source that lists other bytes than the pin is refused by the worker too") {
    const std::string pin(64, 'b');
    auto o = worker_options(worker, source_for(""));  // the source knows no pin
    o.staged_paths = with_file(o, pin);
    auto core = sandbox::open_core(o);
    auto c = core->check("stage");
    REQUIRE_FALSE(c.ok());
    CHECK(c.error().text().find("refused: the source lists it as") != std::string::npos);
  }
}
