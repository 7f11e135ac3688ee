#pragma once
namespace tandem {
// manifests/local.yaml, compiled in at build time: the default bind when no manifest is given.
const char* embedded_local_manifest();
}  // namespace tandem
