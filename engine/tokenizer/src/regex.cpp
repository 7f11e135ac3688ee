#include "regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>


namespace tandem::tokenizer {
namespace {

// HF tokenizers runs these patterns on Oniguruma, where \s and \S mean Unicode White_Space.
// PCRE2's UCP \s differs on a few code points (U+180E, U+FEFF...), so spell it as the property.
std::string white_space_as_property(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[i + 1];
      if (next == 's') {
        out += "\\p{White_Space}";
      } else if (next == 'S') {
        out += "\\P{White_Space}";
      } else {
        out += pattern.substr(i, 2);
      }
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

// Per-thread scratch: match data and a JIT stack big enough for long whitespace runs.
struct Scratch {
  pcre2_match_data* data = pcre2_match_data_create(16, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* context = [this] {
    pcre2_match_context* c = pcre2_match_context_create(nullptr);
    if (stack != nullptr) pcre2_jit_stack_assign(c, nullptr, stack);
    return c;
  }();
  ~Scratch() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

Regex::Regex(std::unique_ptr<Code> code) : code_(std::move(code)) {}
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;
Regex::~Regex() = default;

Result<Regex> Regex::compile(std::string_view pattern, bool literal) {
  const std::string source = literal ? std::string(pattern) : white_space_as_property(pattern);
  // PCRE2_LITERAL refuses PCRE2_UCP (which only changes how \d, \w, ... match, and a literal has none).
  const uint32_t options = literal ? (PCRE2_UTF | PCRE2_LITERAL) : (PCRE2_UTF | PCRE2_UCP);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  auto code = std::make_unique<Code>();
  code->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(), options,
                             &error_code, &error_offset, nullptr);
  if (code->code == nullptr) {
    PCRE2_UCHAR buffer[256];
    pcre2_get_error_message(error_code, buffer, sizeof buffer);
    return Error{"regex '" + std::string(pattern) + "' does not compile at offset " +
                 std::to_string(error_offset) + ": " + reinterpret_cast<const char*>(buffer)};
  }
  // JIT is an optimisation only: where it is unavailable the interpreter gives the same matches.
  (void)pcre2_jit_compile(code->code, PCRE2_JIT_COMPLETE);
  return Regex(std::move(code));
}

std::vector<Span> Regex::find_all(std::string_view text) const {
  std::vector<Span> spans;
  for_each_match(text, [&spans](Span s) { spans.push_back(s); });
  return spans;
}

void Regex::for_each_match(std::string_view text, const std::function<void(Span)>& visit) const {
  Scratch& s = scratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t pos = 0;
  while (pos < text.size()) {
    const int rc = pcre2_match(code_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, s.data, s.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    // rc == 0 means the ovector was too small for all groups; the whole match is still there.
    // Any other failure is a resource limit (JIT stack) on pathological input: leave the rest
    // unsplit rather than fail the request; BPE still encodes it, only with coarser pieces.
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
    const std::size_t begin = ov[0];
    const std::size_t end = ov[1];
    if (end > begin) {
      visit({begin, end});
      pos = end;
    } else {
      // An empty match splits nothing; step over one whole character and keep looking.
      pos = begin + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
}

}  // namespace tandem::tokenizer
