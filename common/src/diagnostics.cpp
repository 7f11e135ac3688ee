#include "tandem/diagnostics.hpp"

namespace tandem {

std::string Diagnostic::str() const {
  if (line <= 0) return file + ": " + message;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

std::string format_diagnostics(const Diagnostics& diags) {
  std::string out;
  for (const auto& d : diags) {
    out += d.str();
    out += '\n';
  }
  return out;
}

}  // namespace tandem
