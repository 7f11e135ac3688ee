// Readers shared by the manifest's parse files: an argv command (hygiene.stop, rollback.commands
// and command gates read it alike) and the custom gates (manifest_gates.cpp).
#pragma once
#include <functional>

#include "tandem/manifest.hpp"
#include "yaml_reader.hpp"

namespace tandem {

// Reads {on, run, timeout} into `c`; `extra` reads the caller's own keys of the same map before
// unknown keys are reported. False when the node is not a map (already reported).
bool read_command(yaml::Context& ctx, const YAML::Node& yn, const std::string& path, Command& c,
                  const std::function<void(yaml::MapReader&)>& extra = {});

// gates.custom: a list of {name, http: {...}} or {name, command: {...}}.
void read_custom_gates(yaml::Context& ctx, yaml::MapReader& gates, std::vector<CustomGate>& out);

}  // namespace tandem
