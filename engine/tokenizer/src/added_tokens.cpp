#include "added_tokens.hpp"

#include <algorithm>

#include <unicode/uchar.h>

#include "tandem/utf8.hpp"

namespace tandem::tokenizer {
namespace {

// Code point ending just before `pos` (text is valid UTF-8 here), or nothing at the start.
bool previous_char(std::string_view text, std::size_t pos, char32_t& cp) {
  if (pos == 0) return false;
  std::size_t start = pos - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  const auto st = utf8::step(text, start);
  cp = st.code_point;
  return st.kind == utf8::StepKind::Valid;
}

bool next_char(std::string_view text, std::size_t pos, char32_t& cp, std::size_t& len) {
  if (pos >= text.size()) return false;
  const auto st = utf8::step(text, pos);
  cp = st.code_point;
  len = st.length;
  return st.kind == utf8::StepKind::Valid;
}

bool is_space(char32_t cp) { return u_isUWhiteSpace(static_cast<UChar32>(cp)) != 0; }
bool is_word(char32_t cp) { return cp == U'_' || u_isalnum(static_cast<UChar32>(cp)) != 0; }

}  // namespace

AddedTokenMatcher::AddedTokenMatcher() : trie_(1) { std::fill(std::begin(trie_[0].child), std::end(trie_[0].child), -1); }

void AddedTokenMatcher::add(std::string pattern, const AddedToken& token) {
  if (pattern.empty()) return;
  std::size_t node = 0;
  for (const char c : pattern) {
    const auto b = static_cast<unsigned char>(c);
    if (trie_[node].child[b] < 0) {
      trie_[node].child[b] = static_cast<int32_t>(trie_.size());
      trie_.emplace_back();
      std::fill(std::begin(trie_.back().child), std::end(trie_.back().child), -1);
    }
    node = static_cast<std::size_t>(trie_[node].child[b]);
  }
  trie_[node].entry = static_cast<int32_t>(entries_.size());
  entries_.push_back({std::move(pattern), token});
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Segment>& out) const {
  std::size_t plain_start = 0;  // start of the text not yet emitted
  std::size_t pos = 0;
  while (pos < text.size()) {
    // Longest entry starting at pos.
    int32_t found = -1;
    std::size_t found_end = 0;
    std::size_t node = 0;
    for (std::size_t i = pos; i < text.size(); ++i) {
      const int32_t child = trie_[node].child[static_cast<unsigned char>(text[i])];
      if (child < 0) break;
      node = static_cast<std::size_t>(child);
      if (trie_[node].entry >= 0) {
        found = trie_[node].entry;
        found_end = i + 1;
      }
    }
    if (found < 0) {
      ++pos;
      continue;
    }
    const AddedToken& tok = entries_[static_cast<std::size_t>(found)].token;
    char32_t cp = 0;
    std::size_t len = 0;
    if (tok.single_word && ((previous_char(text, pos, cp) && is_word(cp)) || (next_char(text, found_end, cp, len) && is_word(cp)))) {
      ++pos;
      continue;
    }
    std::size_t begin = pos;
    std::size_t end = found_end;
    if (tok.lstrip) {
      while (begin > plain_start && previous_char(text, begin, cp) && is_space(cp)) {
        do --begin; while (begin > plain_start && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80);
      }
    }
    if (tok.rstrip) {
      while (next_char(text, end, cp, len) && is_space(cp)) end += len;
    }
    if (begin > plain_start) out.push_back({text.substr(plain_start, begin - plain_start), -1});
    out.push_back({text.substr(pos, found_end - pos), tok.id});
    plain_start = end;
    pos = end;
  }
  if (plain_start < text.size()) out.push_back({text.substr(plain_start), -1});
}

}  // namespace tandem::tokenizer
