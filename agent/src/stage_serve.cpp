// The daemon's stage side: the core with a source for step "stage", the source routes the head
// serves to the other nodes' agents, and the live progress the controller polls.
#include "daemon.hpp"
#include "remote_stage_source.hpp"
#include "restore.hpp"

namespace tandem::agentd {

using nlohmann::json;

Result<std::unique_ptr<agent::AgentCore>> Daemon::core_for(const std::string& step) {
  if (step != "stage" || !manifest_->stage) return open_core(*manifest_, opts_);
  if (manifest_->stage->from == Stage::From::controller) return open_core(*manifest_, opts_, pushed_, stage_progress_);
  auto source = RemoteStageSource::create(*manifest_, opts_.node, net::PkiLayout{opts_.pki_dir});
  if (!source) return source.error();
  return open_core(*manifest_, opts_, *source, stage_progress_);
}

std::variant<std::shared_ptr<const Manifest>, Outcome> Daemon::source_manifest(const std::string& client_cn) const {
  std::shared_ptr<const Manifest> m;
  {
    std::lock_guard lock(snapshot_mu_);
    m = snapshot_;
  }
  if (!m) return Outcome::fail(409, "no manifest yet: the controller sends it at preflight");
  if (!m->stage) return Outcome::fail(404, "the manifest '" + m->name + "' has no stage section; nothing is served");
  if (m->stage->from == Stage::From::controller)
    return Outcome::fail(409, "the manifest '" + m->name + "' stages from the controller (stage.from: controller); no agent serves its files");
  if (m->head().name != opts_.node)
    return Outcome::fail(409, "node '" + opts_.node + "' is not the stage source (the head, '" + m->head().name + "', is)");
  bool known = client_cn == "controller";
  for (const auto& n : m->nodes) known = known || (n.name == client_cn && n.name != opts_.node);
  if (!known) return Outcome::fail(403, "client '" + client_cn + "' is not another node of bind '" + m->name + "'");
  return m;
}

std::shared_ptr<agent::LocalStageSource> Daemon::local_source(const Manifest& m) const {
  auto root = agent::NodeRoot::open(opts_.root, agent::NodeRoot::manifest_allow_list(m.engine, opts_.state_dir_host, m.staged_paths()));
  if (!root) return nullptr;
  return std::make_shared<agent::LocalStageSource>(std::move(*root), m.staged_paths(), m.engine.pins,
                                                   opts_.state_dir + "/sha256-cache.json", "head " + opts_.node);
}

Outcome Daemon::stage_source_list(const std::string& client_cn) {
  auto m = source_manifest(client_cn);
  if (auto* refused = std::get_if<Outcome>(&m)) return *refused;
  auto src = local_source(*std::get<0>(m));
  if (!src) return Outcome::fail(500, "cannot open root " + opts_.root);
  auto l = src->list();
  if (!l) return Outcome::fail(422, l.error().text(), agent::evidence(l.error()));
  return Outcome::ok(l->to_json());
}

Outcome Daemon::stage_source_chunk(const std::string& client_cn, const agent::SourceFile& f, std::uint64_t offset,
                                   std::uint64_t length, std::string& bytes) {
  auto m = source_manifest(client_cn);
  if (auto* refused = std::get_if<Outcome>(&m)) return *refused;
  auto src = local_source(*std::get<0>(m));
  if (!src) return Outcome::fail(500, "cannot open root " + opts_.root);
  if (!src->serves(f.path)) return Outcome::fail(403, f.path + ": refused: not a path the manifest's stage section names");
  auto r = src->read(f, offset, length);
  if (!r) return Outcome::fail(r.error().message.find("changed on the source") != std::string::npos ? 409 : 422,
                               r.error().text());
  bytes = std::move(*r);
  return Outcome::ok(json::object());
}

Outcome Daemon::stage_progress() const { return Outcome::ok(stage_progress_->to_json()); }

Outcome Daemon::stage_push_listing(const json& listing) {
  std::shared_ptr<const Manifest> m;
  {
    std::lock_guard lock(snapshot_mu_);
    m = snapshot_;
  }
  if (!m) return Outcome::fail(409, "no manifest yet: the controller sends it at preflight");
  if (!m->stage || m->stage->from != Stage::From::controller)
    return Outcome::fail(409, "the manifest '" + m->name + "' does not stage from the controller (stage.from); refusing a pushed listing");
  auto l = agent::SourceListing::from_json(listing);
  if (!l) return Outcome::fail(400, "the pushed listing: " + l.error().text());
  pushed_->set_listing(std::move(*l));
  return Outcome::ok({{"accepted", true}});
}

Outcome Daemon::stage_push_take(std::chrono::milliseconds wait) {
  auto w = pushed_->take(wait);
  return Outcome::ok({{"want", w ? w->to_json() : json(nullptr)}});
}

Outcome Daemon::stage_push_chunk(std::uint64_t id, std::string bytes) {
  if (auto p = pushed_->put(id, std::move(bytes)); !p) return Outcome::fail(409, p.error().text());
  return Outcome::ok({{"accepted", true}});
}

Outcome Daemon::stage_push_fail(std::uint64_t id, const std::string& why) {
  if (auto p = pushed_->fail(id, why); !p) return Outcome::fail(409, p.error().text());
  return Outcome::ok({{"accepted", true}});
}

}  // namespace tandem::agentd
