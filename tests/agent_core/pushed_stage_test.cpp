// stage.from: controller at the agent core: the worker's stage reads a PushedStageSource, and a
// "controller" here is a set of threads that take its wants and answer them from the head's files
// (LocalStageSource), as tandemctl's pushers do over mutual TLS. The landing is the pull's own, so
// these check what the push adds: wants answered exactly, a controller that stops mid-file (the op
// stays open and its same op id resumes from the last recorded chunk), a refused want, a wrong
// length, and a listing that must come first.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <atomic>
#include <thread>

#include "sandbox.hpp"
#include "tandem/agent/pushed_source.hpp"
#include "tandem/agent/stage_landing.hpp"
#include "tandem/agent/stage_step.hpp"

using namespace tandem::agent;
using sandbox::Sandbox;
using namespace std::chrono_literals;

namespace {

const std::string kShard = "/models/target/model-00001-of-00001.safetensors";

std::vector<tandem::StagedPath> staged(const CoreOptions& o) {
  return {{o.engine.binary, false, "", ""}, {o.engine.model_dir, true, "", ""}};
}

std::shared_ptr<LocalStageSource> head_source(const Sandbox& head) {
  auto o = sandbox::options(head);
  auto root = NodeRoot::open(head.root, NodeRoot::manifest_allow_list(o.engine, o.state_dir));
  REQUIRE(root.ok());
  return std::make_shared<LocalStageSource>(*root, staged(o), o.engine.pins, "", "controller (test)");
}

// The controller's pushers: `threads` threads answering wants until destroyed, or until
// `max_chunks` chunks were sent (then they stop answering: a killed controller).
struct Controller {
  PushedStageSource& pushed;
  std::shared_ptr<LocalStageSource> src;
  int max_chunks;
  std::atomic<bool> stop{false};
  std::atomic<int> sent{0};
  std::vector<std::thread> threads;
  Controller(PushedStageSource& p, std::shared_ptr<LocalStageSource> s, int threads_n = 2, int max = 1 << 30)
      : pushed(p), src(std::move(s)), max_chunks(max) {
    for (int i = 0; i < threads_n; ++i)
      threads.emplace_back([this] {
        while (!stop) {
          if (sent >= max_chunks) {
            std::this_thread::sleep_for(5ms);
            continue;
          }
          auto w = pushed.take(20ms);
          if (!w) continue;
          if (sent++ >= max_chunks) continue;  // taken, never sent: killed between take and upload
          auto bytes = src->read(w->file, w->offset, w->length);
          if (!bytes) (void)pushed.fail(w->id, bytes.error().text());
          else REQUIRE(pushed.put(w->id, std::move(*bytes)).ok());
        }
      });
  }
  ~Controller() {
    stop = true;
    for (auto& t : threads) t.join();
  }
};

CoreOptions worker_options(const Sandbox& worker, std::shared_ptr<StageSource> source) {
  CoreOptions o = sandbox::options(worker);
  tandem::Stage st;
  st.from = tandem::Stage::From::controller;
  st.items = {tandem::Stage::Item::binary, tandem::Stage::Item::model};
  st.chunk = 1 << 20;
  st.parallel = 2;
  o.stage = st;
  o.staged_paths = staged(o);
  o.stage_source = std::move(source);
  return o;
}

void head_files(const Sandbox& head) {
  head.write("/opt/tandem/bin/tandem-serve", "new engine build", 0755);
  head.write("/models/target/config.json", "{}");
  head.write(kShard, std::string(4 * (1 << 20) + 7, 'p'));
}

}  // namespace

TEST_CASE("pushed stage: the controller answers the agent's wants; files land whole and undo puts them back") {
  Sandbox head, worker;
  head_files(head);
  worker.write(kShard, "old shard");
  auto pushed = std::make_shared<PushedStageSource>();
  auto core = sandbox::open_core(worker_options(worker, pushed));
  auto before = core->check("stage");
  REQUIRE_FALSE(before.ok());  // nothing to compare with until the controller sent its listing
  CHECK(before.error().text().find("has not sent its listing") != std::string::npos);

  auto listing = head_source(head)->list();
  REQUIRE(listing.ok());
  pushed->set_listing(*listing);
  Controller ctl(*pushed, head_source(head));
  auto a = core->apply("stage", "op-push");
  REQUIRE_MESSAGE(a.ok(), a.error().text());
  CHECK((*a)["evidence"]["copied"] == 3);
  CHECK(worker.read(kShard) == head.read(kShard));
  CHECK(worker.read("/opt/tandem/bin/tandem-serve") == "new engine build");
  CHECK(ctl.sent >= 6);  // 5 chunks of the shard, and the small files
  REQUIRE(core->verify("op-push").ok());
  REQUIRE(core->undo("op-push").ok());
  CHECK(worker.read(kShard) == "old shard");
  CHECK_FALSE(worker.exists("/opt/tandem/bin/tandem-serve"));
}

TEST_CASE("pushed stage: a controller killed mid-file leaves the op open; the same op id resumes the last chunk") {
  Sandbox head, worker;
  head_files(head);
  worker.write(kShard, "old shard");
  auto pushed = std::make_shared<PushedStageSource>(PushedStageSource::Timeouts{300ms, 300ms});
  pushed->set_listing(*head_source(head)->list());
  auto o = worker_options(worker, pushed);
  o.stage->parallel = 1;  // the shard first (largest), so the kill lands inside it
  auto core = sandbox::open_core(o);
  {
    Controller ctl(*pushed, head_source(head), 2, 2);  // two chunks, then a third taken and never sent
    auto a = core->apply("stage", "op-kill");
    REQUIRE_FALSE(a.ok());
    CHECK(a.error().code == kStageSourceGone);
    CHECK(a.error().text().find("stopped pushing") != std::string::npos);
  }
  CHECK(worker.read(kShard) == "old shard");  // nothing half-written in place
  struct stat st {};
  REQUIRE(::stat(partial_path(worker.p(kShard)).c_str(), &st) == 0);
  CHECK(st.st_size == 2 << 20);
  CHECK_FALSE(core->journal().last("op-kill", Phase::failed));  // open, as after a crash

  Controller again(*pushed, head_source(head));
  auto b = core->apply("stage", "op-kill");  // a resumed bind sends the same op id
  REQUIRE_MESSAGE(b.ok(), b.error().text());
  CHECK((*b)["evidence"]["resumed_bytes"] == 2 << 20);
  CHECK(worker.read(kShard) == head.read(kShard));
  CHECK_FALSE(worker.exists(partial_path(kShard)));
  REQUIRE(core->undo("op-kill").ok());
  CHECK(worker.read(kShard) == "old shard");
}

TEST_CASE("pushed stage: nobody pushing fails the read in its bound; a refused want and a wrong length are errors") {
  PushedStageSource src(PushedStageSource::Timeouts{100ms, 100ms});
  SourceFile f{"/models/target/a.bin", 10, std::string(64, 'a'), 1, 0644};
  auto r = src.read(f, 0, 10);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().text().find("no controller asked for the chunk at offset 0") != std::string::npos);
  CHECK_FALSE(src.take(0ms));  // the timed-out want is gone

  std::thread reader([&] {
    auto got = src.read(f, 4, 100);  // the length is cut to the file's end: 6 bytes
    REQUIRE_FALSE(got.ok());
    CHECK(got.error().text().find("could not send it: a.bin changed on the source") != std::string::npos);
  });
  auto w = src.take(2s);
  REQUIRE(w);
  CHECK(w->offset == 4);
  CHECK(w->length == 6);
  CHECK_FALSE(src.put(w->id, "12345").ok());  // 5 bytes for a want of 6
  CHECK_FALSE(src.put(w->id + 1, "123456").ok());  // no such want
  REQUIRE(src.fail(w->id, "a.bin changed on the source").ok());
  reader.join();
}
