#include <doctest/doctest.h>
#include <sys/stat.h>

#include <atomic>
#include <mutex>

#include "sandbox.hpp"
#include "tandem/agent/hash_tree.hpp"
#include "tandem/agent/sha256.hpp"
#include "tandem/agent/sha_step.hpp"

using namespace tandem::agent;
using sandbox::Sandbox;

namespace {
const std::string kAbc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
const std::string kEmpty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

void make_engine_files(const Sandbox& sb) {
  sb.write("/opt/tandem/bin/tandem-serve", "abc", 0755);
  sb.write("/opt/glm/chat-template.jinja", "");
  sb.write("/models/target/config.json", "{}");
  sb.write("/models/target/model-00001-of-00002.safetensors", std::string(3 * 1024 * 1024 + 5, 'w'));
  sb.write("/models/target/model-00002-of-00002.safetensors", "abc");
  sb.write("/models/target/sub/tokenizer.json", "");
  sb.write("/models/drafter/model.safetensors", "abc");
}
}  // namespace

TEST_CASE("sha256: known digests") {
  CHECK(sha256_hex("abc") == kAbc);
  CHECK(sha256_hex("") == kEmpty);
  Sandbox sb;
  sb.write("/f", "abc");
  sb.write("/e", "");
  CHECK(*sha256_file(sb.p("/f")) == kAbc);
  CHECK(*sha256_file(sb.p("/e")) == kEmpty);
}

TEST_CASE("sha step: dirs expand to sorted relative names; second run is served from the cache") {
  Sandbox sb;
  make_engine_files(sb);
  auto core = sandbox::open_core(sandbox::options(sb));
  auto* step = dynamic_cast<ShaStep*>(core->step("sha"));
  REQUIRE(step);
  std::atomic<std::uint64_t> read{0};
  std::atomic<int> calls_big{0};
  step->set_progress([&](const HashProgress& p) {
    read += p.chunk;
    if (p.file_total > kHashChunk) ++calls_big;
  });

  auto a = core->apply("sha", "op-sha-1");
  REQUIRE_MESSAGE(a.ok(), a.error().text());
  const auto& ev = (*a)["evidence"];
  CHECK(ev["files"]["/opt/tandem/bin/tandem-serve"] == kAbc);
  CHECK(ev["files"]["/opt/glm/chat-template.jinja"] == kEmpty);
  CHECK(ev["files"]["/models/target/model-00002-of-00002.safetensors"] == kAbc);
  CHECK(ev["trees"]["/models/target"].size() == 4);
  CHECK(ev["trees"]["/models/target"]["sub/tokenizer.json"] == kEmpty);
  CHECK(ev["trees"]["/models/drafter"]["model.safetensors"] == kAbc);
  const std::uint64_t total = 3 + 0 + 2 + (3 * 1024 * 1024 + 5) + 3 + 0 + 3;
  CHECK(ev["total_bytes"] == total);
  CHECK(read.load() == total);
  CHECK(ev["bytes_read"] == total);
  CHECK(calls_big.load() == 4);  // 3 MiB + 5 bytes: four chunks of progress
  CHECK(ev["cache"]["misses"] == 7);

  read = 0;
  auto b = core->apply("sha", "op-sha-2");
  REQUIRE(b.ok());
  CHECK(read.load() == 0);  // nothing re-read
  CHECK((*b)["evidence"]["cache"]["hits"] == 7);
  CHECK((*b)["evidence"]["files"] == ev["files"]);

  // A changed file (new size and mtime) is read again; the rest stay cached.
  sb.write("/models/drafter/model.safetensors", "abcd");
  read = 0;
  auto c = core->check("sha");
  REQUIRE(c.ok());
  CHECK(read.load() == 4);
  CHECK((*c)["cache"]["misses"] == 1);
  auto v = core->verify("op-sha-2");
  REQUIRE_FALSE(v.ok());
  CHECK(evidence(v.error())["changed_since_apply"] == json::array({"/models/drafter/model.safetensors"}));
}

TEST_CASE("sha step: a pin that does not match fails with both digests") {
  Sandbox sb;
  make_engine_files(sb);
  auto opts = sandbox::options(sb);
  opts.engine.pins[0].sha256 = kAbc;  // the file is empty
  auto core = sandbox::open_core(opts);
  auto a = core->apply("sha", "op-pin");
  REQUIRE_FALSE(a.ok());
  CHECK(evidence(a.error())["mismatches"] == 1);
  CHECK(evidence(a.error())["pins"][0]["expected"] == kAbc);
  CHECK(evidence(a.error())["pins"][0]["actual"] == kEmpty);
}

TEST_CASE("hash tree: a symlink in a model dir that escapes the root is refused") {
  Sandbox sb;
  make_engine_files(sb);
  ::symlink("/etc/passwd", sb.p("/models/target/evil.safetensors").c_str());
  auto core = sandbox::open_core(sandbox::options(sb));
  auto a = core->check("sha");
  REQUIRE_FALSE(a.ok());
  CHECK(a.error().text().find("outside the node root") != std::string::npos);
}
