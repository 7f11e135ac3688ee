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
const char* to_string(DeadmanBackend b) { return b == DeadmanBackend::systemd ? "systemd" : "agent"; }

}  // namespace tandem
