#pragma once
#include "tandem/manifest.hpp"
#include "yaml_reader.hpp"

namespace tandem {
// Checks that relate several fields (one head, unique names, TP size vs nodes, dead-man longer
// than the bind can take, ...). Fills derived fields (engine.drafter_dir from the spec config).
void validate_manifest(yaml::Context& ctx, Manifest& m);
}  // namespace tandem
