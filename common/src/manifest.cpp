#include "tandem/manifest.hpp"

namespace tandem {

const Node& Manifest::head() const {
  for (const auto& n : nodes)
    if (n.role == Role::head) return n;
  return nodes.front();  // unreachable for a validated manifest
}

std::vector<const Node*> Manifest::workers() const {
  std::vector<const Node*> out;
  for (const auto& n : nodes)
    if (n.role == Role::worker) out.push_back(&n);
  return out;
}

std::vector<const Node*> Manifest::start_order() const {
  auto order = workers();
  order.push_back(&head());
  return order;
}

bool Manifest::selects(const Command& c, const Node& n) const {
  if (c.on == "all") return true;
  if (c.on == "head") return n.role == Role::head;
  if (c.on == "worker") return n.role == Role::worker;
  return c.on == n.name;
}

const char* to_string(Role r) { return r == Role::head ? "head" : "worker"; }
const char* to_string(Stage::Item i) {
  switch (i) {
    case Stage::Item::binary: return "binary";
    case Stage::Item::pins: return "pins";
    case Stage::Item::model: return "model";
    case Stage::Item::drafter: return "drafter";
  }
  return "?";
}

std::vector<StagedPath> Manifest::staged_paths() const {
  std::vector<StagedPath> out;
  if (!stage) return out;
  for (Stage::Item i : stage->items) {
    if (i == Stage::Item::binary && !engine.binary.empty()) out.push_back({engine.binary, false, "", ""});
    if (i == Stage::Item::pins)
      for (const auto& p : engine.pins) out.push_back({p.path, false, p.sha256, ""});
    if (i == Stage::Item::model && !engine.model_dir.empty()) out.push_back({engine.model_dir, true, "", ""});
    if (i == Stage::Item::drafter && !engine.drafter_dir.empty()) out.push_back({engine.drafter_dir, true, "", ""});
  }
  for (const auto& f : stage->files) out.push_back({f.target, false, f.sha256, f.source == f.target ? "" : f.source});
  // A pin inside the model dir (config.json) travels with the dir; staging it twice would race.
  std::vector<StagedPath> kept;
  for (const auto& p : out) {
    bool inside = false;
    for (const auto& d : out)
      if (d.dir && &d != &p && (p.path == d.path || p.path.starts_with(d.path + "/"))) inside = !p.dir || p.path != d.path;
    if (!inside) kept.push_back(p);
  }
  return kept;
}

const char* to_string(DeadmanBackend b) { return b == DeadmanBackend::systemd ? "systemd" : "agent"; }

}  // namespace tandem
