// PCRE2 in UTF + UCP mode: the pre-tokenizer patterns use \p{L}, \p{N} and lookahead such as
// `\s+(?!\S)`, which std::regex cannot express. JIT-compiled when the platform supports it.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/result.hpp"

namespace tandem::tokenizer {

struct Span {
  std::size_t begin;
  std::size_t end;
};

class Regex {
 public:
  // `literal` compiles the pattern as a plain string (tokenizer.json's {"String": ...} form).
  static Result<Regex> compile(std::string_view pattern, bool literal = false);

  // Non-empty, non-overlapping matches, left to right. `text` must be valid UTF-8.
  std::vector<Span> find_all(std::string_view text) const;
  // The same matches, handed over one by one (no vector for megabyte inputs).
  void for_each_match(std::string_view text, const std::function<void(Span)>& visit) const;

  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  ~Regex();

 private:
  struct Code;
  explicit Regex(std::unique_ptr<Code> code);
  std::unique_ptr<Code> code_;
};

}  // namespace tandem::tokenizer
