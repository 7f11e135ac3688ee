#include "stage_push.hpp"

#include <thread>

#include "tandem/agent/pushed_source.hpp"

namespace tandem::ctl {
namespace {

using namespace std::chrono_literals;

// The agent waits this long for a want before answering "none": short, so a pusher between wants
// does not hold one of the agent's request threads for long.
constexpr auto kTakeWait = 250ms;

}  // namespace

Result<std::shared_ptr<StagePush>> StagePush::open(const Manifest& m, const std::string& stage_root,
                                                   const std::string& cache_file) {
  if (!m.stage || m.stage->from != Stage::From::controller) return std::shared_ptr<StagePush>();
  // Only what the manifest stages is readable here: the allow-list is exactly those paths.
  std::vector<std::string> allowed;
  for (const auto& p : m.staged_paths()) allowed.push_back(p.source.empty() ? p.path : p.source);
  auto root = agent::NodeRoot::open(stage_root, allowed);
  if (!root) return Error{"--stage-root " + stage_root + ": " + root.error().text()};
  return std::shared_ptr<StagePush>(new StagePush(std::make_unique<agent::LocalStageSource>(
      std::move(*root), m.staged_paths(), m.engine.pins, cache_file, "the controller (--stage-root " + stage_root + ")")));
}

Result<json> StagePush::listing() {
  std::lock_guard lock(mu_);
  if (!listing_) {
    auto l = src_->list();
    if (!l) return Error{"listing this machine's staged files (stage.from: controller): " + l.error().text()};
    listing_ = l->to_json();
  }
  return *listing_;
}

std::optional<std::string> StagePush::send_listing(const AgentClient& a) {
  auto l = listing();
  if (!l) return l.error().message;
  AgentReply r = a.stage_push_listing(*l);
  if (!r.ok) return "sending the controller's listing: " + r.error;
  return std::nullopt;
}

StagePush::Pushers::Pushers(StagePush& push, const AgentClient& a, int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this, &push, &a] { serve(push, a); });
}

StagePush::Pushers::~Pushers() {
  stop_ = true;
  for (auto& t : threads_) t.join();
}

void StagePush::Pushers::serve(StagePush& push, const AgentClient& a) {
  auto conn = a.keep_connection();
  const json take_body{{"wait_ms", std::chrono::duration_cast<std::chrono::milliseconds>(kTakeWait).count()}};
  while (!stop_) {
    auto r = conn->request("POST", "/v1/stage/push/take", take_body.dump(), 10s);
    if (!r || r->status != 200) {
      // The agent is down or restarting (its apply then fails on its own bound): keep asking.
      std::this_thread::sleep_for(200ms);
      continue;
    }
    const json body = json::parse(r->body, nullptr, false);
    if (body.is_discarded() || !body.contains("want") || !body["want"].is_object()) continue;
    const json& w = body["want"];
    const auto id = w.value("id", std::uint64_t{0});
    auto f = agent::SourceFile::from_json(w.value("file", json::object()));
    Result<std::string> bytes = f ? push.src_->read(*f, w.value("offset", std::uint64_t{0}), w.value("length", std::uint64_t{0}))
                                  : Result<std::string>(f.error());
    if (!bytes) {
      (void)conn->request("POST", "/v1/stage/push/fail", json{{"id", id}, {"error", bytes.error().text()}}.dump(), 10s);
      continue;
    }
    // A link that flaps mid-upload gets the same bytes again (the agent takes a want's bytes
    // once and refuses a second copy); a lasting cut leaves the want to the agent's bound.
    for (int attempt = 1; attempt <= 3 && !stop_; ++attempt) {
      auto put = conn->request("PUT", "/v1/stage/push/chunk?id=" + std::to_string(id), *bytes, 60s);
      if (put) break;  // an answer, even a refusal (the want timed out): the agent has decided
      std::this_thread::sleep_for(attempt * 200ms);
    }
  }
}

}  // namespace tandem::ctl
