// Stage between two real tandemd agents on 127.0.0.1 / 127.0.0.2 (mutual TLS, agent to agent):
// the happy path through `tandemctl stage` and `bind`, then the faults of issue 27: kill -9 of
// either agent or of the controller mid-file, a file changed on the head mid-transfer, and a
// client that is not a node of the manifest. Files are small; stage.rate_limit makes "mid-file"
// last long enough to land a fault in.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>
#include <cstdio>
#include <random>
#include <thread>

#include "bind_cluster.hpp"
#include "tandem/net/http_client.hpp"
#include "tandem/net/pki.hpp"

using namespace bindtest;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

const char* kBlob = "models/tiny/blob.bin";
const char* kPartial = "models/tiny/.blob.bin.tandem-partial";

std::string random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(g());
  return s;
}

std::uint64_t size_of(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
}

// Waits until the worker's partial copy of the blob holds at least `bytes`.
void wait_partial(const Cluster& c, std::uint64_t bytes) {
  for (int i = 0; i < 400 && size_of(c.root(1) / kPartial) < bytes; ++i) std::this_thread::sleep_for(25ms);
  REQUIRE_MESSAGE(size_of(c.root(1) / kPartial) >= bytes, "the transfer never got " << bytes << " bytes in");
}

int wait_exit(pid_t pid) {
  int st = 0;
  for (int i = 0; i < 1200; ++i) {
    if (::waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    std::this_thread::sleep_for(50ms);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &st, 0);
  FAIL("tandemctl did not finish within 60 s");
  return -1;
}

// The stage step's apply evidence from `tandemctl stage -o json` output.
json stage_evidence(const std::string& out) {
  const auto brace = out.find("{\n");
  REQUIRE_MESSAGE(brace != std::string::npos, out);
  json j = json::parse(out.substr(brace));
  for (const auto& s : j["steps"])
    if (s["action"] == "stage.files") return s["evidence"]["apply"];
  FAIL("no stage.files step in " << out);
  return {};
}

ClusterOptions staged_cluster(const std::string& extra = "") {
  ClusterOptions o;
  o.nodes = 2;
  o.stage = "stage: {items: [model], chunk: 64KiB" + extra + "}\n";
  return o;
}

}  // namespace

TEST_CASE("stage: tandemctl stage makes the worker equal over mTLS, skips what is equal, rollback restores it") {
  Cluster c(staged_cluster());
  write(c.root(0) / kBlob, random_bytes(300000, 1));
  const std::string worker_blob = random_bytes(300000, 2);  // same size: only SHA-256 tells them apart
  write(c.root(1) / kBlob, worker_blob);
  write(c.root(1) / "models/tiny/stale.txt", "only on the worker");
  fs::remove(c.root(1) / "models/tiny/config.json");
  const std::string head_config = slurp(c.root(0) / "models/tiny/config.json");

  std::string out;
  {  // plan takes no --state-dir / --pki-dir, which Cluster::ctl adds
    std::FILE* p = ::popen((std::string(TANDEMCTL_BIN) + " plan " + c.manifest_path()).c_str(), "r");
    REQUIRE(p);
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    REQUIRE(::pclose(p) == 0);
  }
  CHECK(out.find("[stage]") != std::string::npos);
  CHECK(out.find("action: stage.files") != std::string::npos);
  CHECK(out.find("action: stage.check") != std::string::npos);
  CHECK(out.find("action: stage.check") < out.find("action: deadman.arm"));
  CHECK(out.find("[stage]") < out.find("[outage]"));

  int rc = c.ctl({"stage", c.manifest_path(), "-o", "json"}, out, true);
  INFO(out << slurp(c.dir / "ctl.err"));
  REQUIRE(rc == 0);
  json ev = stage_evidence(out);
  CHECK(ev["copied"] == 2);
  CHECK(ev["extras"] == json::array({"/models/tiny/stale.txt"}));
  CHECK(slurp(c.root(1) / kBlob) == slurp(c.root(0) / kBlob));
  CHECK(slurp(c.root(1) / "models/tiny/config.json") == head_config);
  CHECK(slurp(c.root(1) / "models/tiny/stale.txt") == "only on the worker");

  rc = c.ctl({"stage", c.manifest_path(), "-o", "json"}, out, true);
  REQUIRE(rc == 0);
  CHECK(stage_evidence(out)["copied"] == 0);

  // The rollback undoes what the agents' journals hold: the worker's blob back, config gone again.
  c.start_old_lane();
  rc = c.ctl({"rollback", c.manifest_path()}, out);
  INFO(out);
  CHECK(rc == 0);
  CHECK(slurp(c.root(1) / kBlob) == worker_blob);
  CHECK_FALSE(fs::exists(c.root(1) / "models/tiny/config.json"));
  CHECK(slurp(c.root(1) / "models/tiny/stale.txt") == "only on the worker");
}

TEST_CASE("stage: a bind with a stage section copies before the outage and binds TP2 on equal files") {
  Cluster c(staged_cluster());
  write(c.root(0) / kBlob, random_bytes(200000, 3));
  write(c.root(1) / kBlob, "the worker's older blob");
  c.start_old_lane();
  std::string out;
  const int rc = c.ctl({"bind", c.manifest_path()}, out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("stage.files") != std::string::npos);
  CHECK(slurp(c.root(1) / kBlob) == slurp(c.root(0) / kBlob));
  CHECK(c.ranks(0).size() == 1);
  CHECK(c.ranks(1).size() == 1);
  REQUIRE(c.ctl({"rollback", c.manifest_path()}, out) == 0);
  CHECK(slurp(c.root(1) / kBlob) == "the worker's older blob");
}

TEST_CASE("stage: kill -9 of the worker's agent mid-file; the stage resumes from the last verified chunk") {
  Cluster c(staged_cluster(", rate_limit: 1MiB"));
  write(c.root(0) / kBlob, random_bytes(3 << 20, 4));
  const pid_t ctl = c.ctl_background({"stage", c.manifest_path(), "-o", "json"}, c.dir / "stage.log");
  wait_partial(c, 512 << 10);
  c.restart_agent(1);  // kill -9, then up again as systemd's Restart= would
  const int rc = wait_exit(ctl);
  std::string out = slurp(c.dir / "stage.log");
  INFO(out);
  if (rc != 0) {  // the controller gave up before the agent was back: the next stage resumes
    REQUIRE(c.ctl({"stage", c.manifest_path(), "-o", "json"}, out, true) == 0);
  }
  const json ev = stage_evidence(out);
  CHECK(ev["resumed_bytes"].get<std::uint64_t>() >= 512u << 10);
  CHECK(ev["bytes"].get<std::uint64_t>() < 3u << 20);  // the verified chunks did not cross again
  CHECK(slurp(c.root(1) / kBlob) == slurp(c.root(0) / kBlob));
  CHECK_FALSE(fs::exists(c.root(1) / kPartial));
}

TEST_CASE("stage: kill -9 of the head's agent mid-file, left down: the stage fails naming it; the next resumes") {
  Cluster c(staged_cluster(", rate_limit: 1MiB"));
  write(c.root(0) / kBlob, random_bytes(3 << 20, 5));
  const pid_t ctl = c.ctl_background({"stage", c.manifest_path()}, c.dir / "stage.log");
  wait_partial(c, 512 << 10);
  c.kill_agent(0);
  CHECK(wait_exit(ctl) == 3);
  const std::string failed = slurp(c.dir / "stage.log");
  CHECK_MESSAGE(failed.find("head rank0 (127.0.0.1:") != std::string::npos, failed);
  const std::uint64_t kept = size_of(c.root(1) / kPartial);
  CHECK(kept >= 512u << 10);
  CHECK(slurp(c.root(1) / kBlob) != slurp(c.root(0) / kBlob));  // nothing half-written in place

  c.restart_agent(0);
  std::string out;
  const int rc = c.ctl({"stage", c.manifest_path(), "-o", "json"}, out, true);
  INFO(out << slurp(c.dir / "ctl.err"));
  REQUIRE(rc == 0);
  CHECK(stage_evidence(out)["resumed_bytes"].get<std::uint64_t>() >= (kept / (64 << 10)) * (64 << 10));
  CHECK(slurp(c.root(1) / kBlob) == slurp(c.root(0) / kBlob));
}

TEST_CASE("stage: kill -9 of the controller mid-file; the agent lands the file, the next stage finds it equal") {
  Cluster c(staged_cluster(", rate_limit: 2MiB"));
  write(c.root(0) / kBlob, random_bytes(2 << 20, 6));
  const pid_t ctl = c.ctl_background({"stage", c.manifest_path()}, c.dir / "stage.log");
  wait_partial(c, 256 << 10);
  ::kill(ctl, SIGKILL);
  ::waitpid(ctl, nullptr, 0);
  std::string out;
  const int rc = c.ctl({"stage", c.manifest_path(), "-o", "json"}, out, true);
  INFO(out << slurp(c.dir / "ctl.err"));
  REQUIRE(rc == 0);
  CHECK(stage_evidence(out)["copied"] == 0);
  CHECK(slurp(c.root(1) / kBlob) == slurp(c.root(0) / kBlob));
}

TEST_CASE("stage: a file changed on the head mid-transfer is refused by name; nothing lands") {
  Cluster c(staged_cluster(", rate_limit: 1MiB"));
  write(c.root(0) / kBlob, random_bytes(2 << 20, 7));
  write(c.root(1) / kBlob, "old");
  const pid_t ctl = c.ctl_background({"stage", c.manifest_path()}, c.dir / "stage.log");
  wait_partial(c, 256 << 10);
  write(c.root(0) / kBlob, random_bytes(2 << 20, 8));  // an operator rebuilt it meanwhile
  CHECK(wait_exit(ctl) == 3);
  const std::string log = slurp(c.dir / "stage.log");
  CHECK_MESSAGE(log.find("/models/tiny/blob.bin: changed on the source") != std::string::npos, log);
  CHECK(slurp(c.root(1) / kBlob) == "old");
  CHECK_FALSE(fs::exists(c.root(1) / kPartial));
}

TEST_CASE("stage: the head serves its files only to nodes of the manifest, and only the staged paths") {
  Cluster c(staged_cluster());
  std::string out;
  REQUIRE(c.ctl({"stage", c.manifest_path()}, out) == 0);  // the head has the manifest now
  tandem::net::PkiLayout pki{c.pki};
  auto ca = tandem::net::read_credential(pki.ca_cert(), pki.ca_key());
  REQUIRE(ca.ok());
  auto intruder = tandem::net::issue_certificate(*ca, {.common_name = "intruder", .client_auth = true});
  REQUIRE(intruder.ok());
  REQUIRE(tandem::net::write_credential(*intruder, c.dir / "intruder.pem", c.dir / "intruder.key",
                                        tandem::net::Overwrite::yes).ok());
  auto client_as = [&](const fs::path& cert, const fs::path& key) {
    tandem::net::ClientOptions o;
    o.ca_file = pki.ca_cert();
    o.cert_file = cert;
    o.key_file = key;
    auto cl = tandem::net::HttpsClient::create(o);
    REQUIRE(cl.ok());
    return std::move(*cl);
  };
  const tandem::net::Endpoint head{"127.0.0.1", c.agent_ports[0], "rank0"};
  auto stranger = client_as(c.dir / "intruder.pem", c.dir / "intruder.key");
  auto r = stranger.get(head, "/v1/stage/source/list");
  REQUIRE(r.ok());
  CHECK(r->status == 403);
  CHECK(r->body.find("'intruder' is not another node of bind 'bindtest'") != std::string::npos);

  auto worker = client_as(pki.node_cert("rank1"), pki.node_key("rank1"));
  r = worker.get(head, "/v1/stage/source/chunk?path=%2Fetc%2Fcrontab&offset=0&length=10&size=10&mtime_ns=0");
  REQUIRE(r.ok());
  CHECK(r->status == 403);
  CHECK(r->body.find("refused: not a path the manifest's stage section names") != std::string::npos);
  r = worker.get(head, "/v1/journal");  // not a peer route: the controller's only
  REQUIRE(r.ok());
  CHECK(r->status == 403);
  r = worker.get(head, "/v1/stage/source/list");
  REQUIRE(r.ok());
  CHECK(r->status == 200);
}

// The same faults with the stage phase of `tandemctl bind` (the bind fault matrix's stage rows):
// the dead-men are armed by then, and a failed bind rolls the staged files back byte for byte.
TEST_CASE("stage: bind: kill -9 of the worker's agent mid-file, restarted; the bind binds on equal files") {
  Cluster c(staged_cluster(", rate_limit: 1MiB"));
  write(c.root(0) / kBlob, random_bytes(3 << 20, 11));
  write(c.root(1) / kBlob, "the worker's older blob");
  c.start_old_lane();
  const pid_t ctl = c.ctl_background({"bind", c.manifest_path(), "--yes"}, c.dir / "bind.log");
  wait_partial(c, 512 << 10);
  c.restart_agent(1);
  int rc = wait_exit(ctl);
  std::string out = slurp(c.dir / "bind.log");
  INFO(out);
  if (rc != 0) {  // the bind gave up and rolled back: the next one resumes the kept chunks
    CHECK(slurp(c.root(1) / kBlob) == "the worker's older blob");
    rc = c.ctl({"bind", c.manifest_path(), "--yes"}, out);
  }
  REQUIRE(rc == 0);
  CHECK(slurp(c.root(1) / kBlob) == slurp(c.root(0) / kBlob));
  CHECK(c.ranks(1).size() == 1);
  REQUIRE(c.ctl({"rollback", c.manifest_path()}, out) == 0);
  CHECK(slurp(c.root(1) / kBlob) == "the worker's older blob");
}

TEST_CASE("stage: bind: kill -9 of the head's agent mid-file, left down; the bind fails naming it, nothing lands") {
  Cluster c(staged_cluster(", rate_limit: 1MiB"));
  write(c.root(0) / kBlob, random_bytes(3 << 20, 12));
  write(c.root(1) / kBlob, "the worker's older blob");
  c.start_old_lane();
  const pid_t ctl = c.ctl_background({"bind", c.manifest_path(), "--yes"}, c.dir / "bind.log");
  wait_partial(c, 512 << 10);
  c.kill_agent(0);
  CHECK(wait_exit(ctl) == 3);
  const std::string failed = slurp(c.dir / "bind.log");
  CHECK_MESSAGE(failed.find("head rank0 (127.0.0.1:") != std::string::npos, failed);
  CHECK(slurp(c.root(1) / kBlob) == "the worker's older blob");  // never half-written in place

  c.restart_agent(0);
  std::string out;
  REQUIRE(c.ctl({"rollback", c.manifest_path()}, out) == 0);
  INFO(out);
  CHECK(slurp(c.root(1) / kBlob) == "the worker's older blob");
  REQUIRE(c.ctl({"bind", c.manifest_path(), "--yes"}, out) == 0);  // the rollback brought the old lane back
  CHECK(slurp(c.root(1) / kBlob) == slurp(c.root(0) / kBlob));
}

TEST_CASE("stage: bind: kill -9 of the controller mid-file; the next bind resumes and binds, rollback restores") {
  Cluster c(staged_cluster(", rate_limit: 2MiB"));
  write(c.root(0) / kBlob, random_bytes(2 << 20, 13));
  write(c.root(1) / kBlob, "the worker's older blob");
  c.start_old_lane();
  const pid_t ctl = c.ctl_background({"bind", c.manifest_path(), "--yes"}, c.dir / "bind.log");
  wait_partial(c, 256 << 10);
  ::kill(ctl, SIGKILL);
  ::waitpid(ctl, nullptr, 0);
  std::string out;
  const int rc = c.ctl({"bind", c.manifest_path(), "--yes"}, out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("resuming bind") != std::string::npos);
  CHECK(slurp(c.root(1) / kBlob) == slurp(c.root(0) / kBlob));
  REQUIRE(c.ctl({"rollback", c.manifest_path()}, out) == 0);
  CHECK(slurp(c.root(1) / kBlob) == "the worker's older blob");
}

TEST_CASE("stage: backups stay through a bind that needs them and go with --release-backups") {
  Cluster c(staged_cluster());
  write(c.root(0) / kBlob, random_bytes(200000, 14));
  const std::string worker_blob = random_bytes(150000, 15);
  write(c.root(1) / kBlob, worker_blob);
  std::string out;
  REQUIRE(c.ctl({"stage", c.manifest_path()}, out) == 0);
  c.start_old_lane();
  REQUIRE(c.ctl({"bind", c.manifest_path(), "--yes"}, out) == 0);  // finds the files equal
  INFO(out);
  // The bind's disarm freed no backup the `tandemctl stage` run keeps: --release-backups finds it.
  REQUIRE(c.ctl({"stage", c.manifest_path(), "--release-backups", "-o", "json"}, out, true) == 0);
  const json rel = json::parse(out.substr(out.find('{')));
  CHECK(rel["result"] == "released");
  for (const auto& n : rel["nodes"]) {
    if (n["node"] != "rank1") continue;
    // The stage run's op and the bind's (which copied nothing); every one now.
    REQUIRE(n["evidence"]["released"].size() == 2);
    CHECK(n["evidence"]["released"][0]["op_id"].get<std::string>().starts_with("stage-"));
    CHECK(n["evidence"]["released"][0]["freed_bytes"] == worker_blob.size());  // the replaced blob, its backup's alone
    CHECK(n["evidence"]["freed_bytes"] == worker_blob.size());
  }
  REQUIRE(c.ctl({"stage", c.manifest_path(), "--release-backups", "-o", "json"}, out, true) == 0);
  CHECK(json::parse(out.substr(out.find('{')))["nodes"][0]["evidence"]["released"].empty());
  // Rolling the bind back leaves the released stages' files: they are kept for good.
  REQUIRE(c.ctl({"rollback", c.manifest_path()}, out) == 0);
  INFO(out);
  CHECK(slurp(c.root(1) / kBlob) == slurp(c.root(0) / kBlob));
}

TEST_CASE("stage: bind: the backups' room is checked at preflight; the refusal names node, path and bytes") {
  Cluster c(staged_cluster(", backup_budget: 1000"));
  write(c.root(0) / kBlob, random_bytes(200000, 16));
  write(c.root(1) / kBlob, random_bytes(150000, 17));
  std::string out;
  REQUIRE(c.ctl({"stage", c.manifest_path()}, out) == 0);  // keeps a 150000-byte backup
  write(c.root(0) / kBlob, random_bytes(200000, 18));
  const std::string staged = slurp(c.root(1) / kBlob);
  c.start_old_lane();
  CHECK(c.ctl({"bind", c.manifest_path(), "--yes"}, out) == 3);
  INFO(out);
  CHECK(out.find("stage.check") != std::string::npos);
  CHECK(out.find("rank1 (127.0.0.2:") != std::string::npos);
  CHECK(out.find("/stage-backups: backups need 150000 bytes") != std::string::npos);
  CHECK(out.find("over stage.backup_budget 1000 bytes") != std::string::npos);
  CHECK(out.find("nothing was changed on any node") != std::string::npos);
  CHECK(out.find("deadman.arm        ok") == std::string::npos);
  CHECK(slurp(c.root(1) / kBlob) == staged);
  // Freed, the same bind goes through.
  REQUIRE(c.ctl({"stage", c.manifest_path(), "--release-backups"}, out) == 0);
  REQUIRE(c.ctl({"bind", c.manifest_path(), "--yes"}, out) == 0);
  CHECK(slurp(c.root(1) / kBlob) == slurp(c.root(0) / kBlob));
}

// stage.from: controller: tandemctl pushes from its own machine (--stage-root) to every node, the
// head too, in the chunks each agent asks for. The same faults: kill -9 of the controller or of an
// agent mid-file, and the next run resumes from the last recorded chunk.
namespace {

// The controller's copy of the model (the head's, plus `blob`), under <dir>/ctl-root.
std::string controller_root(const Cluster& c, const std::string& blob) {
  const fs::path r = c.dir / "ctl-root";
  fs::create_directories(r / "models");
  fs::copy(c.root(0) / "models/tiny", r / "models/tiny", fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  write(r / kBlob, blob);
  return r.string();
}

}  // namespace

TEST_CASE("stage: from controller: kill -9 of the controller mid-push; the next stage resumes, every node gets the bytes") {
  Cluster c(staged_cluster(", from: controller, rate_limit: 1MiB"));
  const std::string blob = random_bytes(3 << 20, 21);
  const std::string root = controller_root(c, blob);
  write(c.root(0) / kBlob, "the head's older blob");
  write(c.root(1) / kBlob, "the worker's older blob");
  const pid_t ctl = c.ctl_background({"stage", c.manifest_path(), "--stage-root", root}, c.dir / "stage.log");
  wait_partial(c, 512 << 10);  // the worker first: workers before the head
  ::kill(ctl, SIGKILL);
  ::waitpid(ctl, nullptr, 0);
  const std::uint64_t kept = size_of(c.root(1) / kPartial);
  CHECK(slurp(c.root(1) / kBlob) == "the worker's older blob");  // nothing half-written in place

  // The worker's agent gives up on the chunk nobody pushes within its bound; meanwhile the new
  // stage's preflight waits for it, then resumes from the recorded chunks.
  std::string out;
  const int rc = c.ctl({"stage", c.manifest_path(), "-o", "json", "--stage-root", root}, out, true);
  INFO(out << slurp(c.dir / "ctl.err") << slurp(c.dir / "stage.log"));
  REQUIRE(rc == 0);
  const json ev = stage_evidence(out);
  CHECK(ev["resumed_bytes"].get<std::uint64_t>() >= kept - kept % (64 << 10));
  CHECK(ev["bytes"].get<std::uint64_t>() < 3u << 20);  // the recorded chunks did not cross again
  CHECK(slurp(c.root(1) / kBlob) == blob);
  CHECK(slurp(c.root(0) / kBlob) == blob);  // the head is staged too
  CHECK_FALSE(fs::exists(c.root(1) / kPartial));

  c.start_old_lane();
  REQUIRE(c.ctl({"rollback", c.manifest_path()}, out) == 0);
  CHECK(slurp(c.root(1) / kBlob) == "the worker's older blob");
  CHECK(slurp(c.root(0) / kBlob) == "the head's older blob");
}

TEST_CASE("stage: from controller: kill -9 of the worker's agent mid-push, restarted; the stage resumes the chunks") {
  Cluster c(staged_cluster(", from: controller, rate_limit: 1MiB"));
  const std::string blob = random_bytes(3 << 20, 22);
  const std::string root = controller_root(c, blob);
  const pid_t ctl = c.ctl_background({"stage", c.manifest_path(), "-o", "json", "--stage-root", root}, c.dir / "stage.log");
  wait_partial(c, 512 << 10);
  c.restart_agent(1);
  const int rc = wait_exit(ctl);
  std::string out = slurp(c.dir / "stage.log");
  INFO(out);
  if (rc != 0) {  // the controller gave up before the agent was back: the next stage resumes
    REQUIRE(c.ctl({"stage", c.manifest_path(), "-o", "json", "--stage-root", root}, out, true) == 0);
  }
  const json ev = stage_evidence(out);
  CHECK(ev["resumed_bytes"].get<std::uint64_t>() >= 512u << 10);
  CHECK(slurp(c.root(1) / kBlob) == blob);
  CHECK(slurp(c.root(0) / kBlob) == blob);
  CHECK_FALSE(fs::exists(c.root(1) / kPartial));
}

TEST_CASE("stage: bind from controller: kill -9 of the controller mid-push; the resumed bind binds on the pushed bytes") {
  Cluster c(staged_cluster(", from: controller, rate_limit: 2MiB"));
  const std::string blob = random_bytes(2 << 20, 23);
  const std::string root = controller_root(c, blob);
  write(c.root(1) / kBlob, "the worker's older blob");
  c.start_old_lane();
  const pid_t ctl = c.ctl_background({"bind", c.manifest_path(), "--yes", "--stage-root", root}, c.dir / "bind.log");
  wait_partial(c, 256 << 10);
  ::kill(ctl, SIGKILL);
  ::waitpid(ctl, nullptr, 0);
  std::string out;
  const int rc = c.ctl({"bind", c.manifest_path(), "--yes", "--stage-root", root}, out);
  INFO(out << slurp(c.dir / "bind.log"));
  REQUIRE(rc == 0);
  CHECK(out.find("resuming bind") != std::string::npos);
  CHECK(slurp(c.root(1) / kBlob) == blob);
  CHECK(slurp(c.root(0) / kBlob) == blob);
  CHECK(c.ranks(1).size() == 1);
  REQUIRE(c.ctl({"rollback", c.manifest_path()}, out) == 0);
  CHECK(slurp(c.root(1) / kBlob) == "the worker's older blob");
}
