// tandemctl's manifest parser and validator on arbitrary text, through the public entry point
// (tandem::load_manifest_text). A manifest comes back only with no errors, and every error has
// a message that formats.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_check.hpp"
#include "tandem/manifest.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const tandem::LoadResult r = tandem::load_manifest_text(text, "fuzz.yaml");
  tandem::fuzz::check(r.manifest.has_value() == r.errors.empty(), "a manifest and errors, or neither");
  for (const auto& d : r.errors) tandem::fuzz::check(!d.message.empty(), "an error without a message");
  (void)tandem::format_diagnostics(r.errors);
  if (r.manifest) {
    // What the controller asks of every valid manifest before it plans a bind.
    (void)r.manifest->head();
    (void)r.manifest->start_order();
  }
  return 0;
}
