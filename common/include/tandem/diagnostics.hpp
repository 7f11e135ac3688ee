// Errors are values: every problem found in user input becomes a Diagnostic with its place.
#pragma once
#include <string>
#include <vector>

namespace tandem {

struct Diagnostic {
  std::string file;
  int line = 0;    // 1-based; 0 when the problem has no place in the file
  int column = 0;  // 1-based
  std::string message;

  // "file:line:col: message", the form editors and compilers use.
  std::string str() const;
};

using Diagnostics = std::vector<Diagnostic>;

std::string format_diagnostics(const Diagnostics& diags);

}  // namespace tandem
