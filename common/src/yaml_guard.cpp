#include "yaml_guard.hpp"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <sstream>
#include <vector>

#include "tandem/names.hpp"

namespace tandem::yaml {
namespace {

// Thrown from the event handler to end the parse at the first structural problem: nothing after
// a second document or past the depth limit is read (it is where the hostile part would be).
struct StopParse {};

struct Open {
  YAML::Mark mark;
  bool flow = false;
  char bracket = 0;      // '[' or '{' for flow collections
  bool counted = false;  // a level as the author wrote it (see StructureCheck::open)
};

Diagnostic at(const std::string& file, const YAML::Mark& m, std::string message) {
  return Diagnostic{file, m.line >= 0 ? m.line + 1 : 0, m.column >= 0 ? m.column + 1 : 0, std::move(message)};
}

std::string where(const YAML::Mark& m) {
  return "line " + std::to_string(m.line + 1) + " col " + std::to_string(m.column + 1);
}

// yaml-cpp's messages name the parser state; add what a person most likely did.
std::string tab_hint(const std::string& text, int line) {
  std::istringstream in(text);
  std::string l;
  for (int n = 1; n <= line && std::getline(in, l); ++n) {
    if (n < line - 1) continue;
    size_t indent = l.find_first_not_of(" \t");
    if (l.substr(0, indent).find('\t') != std::string::npos)
      return "; line " + std::to_string(n) + " is indented with a tab (YAML indentation must be spaces)";
  }
  return "";
}

class StructureCheck : public YAML::EventHandler {
 public:
  StructureCheck(const std::string& text, const std::string& file, Diagnostics& out)
      : text_(text), file_(file), out_(out), bom_(text.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0) {}

  void OnDocumentStart(const YAML::Mark& m) override {
    if (++documents_ == 1) return;
    out_.push_back(at(file_, m, "a second YAML document starts here; a manifest is exactly one document "
                                "(remove this '---' and what follows, or give the second bind its own file)"));
    throw StopParse{};
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark& m, const std::string& tag, YAML::anchor_t, const std::string&) override {
    check_tag(m, tag);
  }
  void OnSequenceStart(const YAML::Mark& m, const std::string& tag, YAML::anchor_t,
                       YAML::EmitterStyle::value style) override {
    open(m, tag, style, '[');
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& m, const std::string& tag, YAML::anchor_t, YAML::EmitterStyle::value style) override {
    open(m, tag, style, '{');
  }
  void OnMapEnd() override { close(); }

  // yaml-cpp reports an unclosed flow collection where it gave up (often the next line); the
  // bracket that is not closed is the innermost one of that kind still open.
  const Open* innermost_open_flow(char bracket) const {
    for (auto it = open_.rbegin(); it != open_.rend(); ++it)
      if (it->flow && it->counted) return it->bracket == bracket ? &*it : nullptr;
    return nullptr;
  }

 private:
  // The byte offset of a mark in text_ (yaml-cpp counts bytes after a byte order mark).
  size_t offset_of(const YAML::Mark& m) const {
    return m.pos >= 0 ? std::min(static_cast<size_t>(m.pos) + bom_, text_.size()) : text_.size();
  }

  // The first character of a node's content: its mark is at its properties (`&anchor !tag`), if any.
  char content_char(const YAML::Mark& m) const {
    size_t i = offset_of(m);
    while (i < text_.size() && (text_[i] == '&' || text_[i] == '!')) {
      i = std::min(text_.find_first_of(" \t\r\n", i), text_.size());
      while (i < text_.size() && (text_[i] == ' ' || text_[i] == '\t')) ++i;
    }
    return i < text_.size() ? text_[i] : '\0';
  }

  // Levels are counted as a person counts them: brackets and indented lists and maps. yaml-cpp
  // also opens a map around a key that is itself a collection (`[a]: b`, and every unclosed '['
  // it reads as a possible key); such a map starts at the key's bracket and is not counted. There
  // is at most one per counted level, and the backstop below bounds them regardless.
  void open(const YAML::Mark& m, const std::string& tag, YAML::EmitterStyle::value style, char bracket) {
    check_tag(m, tag);
    const bool flow = style == YAML::EmitterStyle::Flow;
    const char c = content_char(m);
    const bool implicit_map = bracket == '{' && (flow ? c != '{' : (c == '[' || c == '{'));
    open_.push_back(Open{m, flow, flow ? bracket : '\0', !implicit_map});
    if (!implicit_map) ++depth_;
    if (depth_ <= kMaxDepth && open_.size() <= 2 * static_cast<size_t>(kMaxDepth) + 2) return;
    std::string what = c == '[' || c == '{' ? std::string("this '") + c + "'" : bracket == '[' ? "this list" : "this map";
    out_.push_back(at(file_, m, "YAML nesting deeper than " + std::to_string(kMaxDepth) + " levels (" + what +
                                    " opens level " + std::to_string(depth_) + "); expected at most " +
                                    std::to_string(kMaxDepth)));
    throw StopParse{};
  }

  void close() {
    if (open_.back().counted) --depth_;
    open_.pop_back();
  }

  // yaml-cpp gives "?" to untagged plain nodes and "!" to quoted ones; anything else was written
  // as a tag. An explicit non-specific `! x` also reads "!", so the text at the node is looked at
  // too (a node's mark is at its first property).
  void check_tag(const YAML::Mark& m, const std::string& tag) {
    const size_t pos = offset_of(m);
    const bool bang_here = pos < text_.size() && text_[pos] == '!';
    if ((tag.empty() || tag == "?" || tag == "!") && !bang_here) return;
    std::string written = tag;
    if (bang_here) written = text_.substr(pos, std::min(text_.find_first_of(" \t\r\n,[]{}", pos), text_.size()) - pos);
    if (written.size() > 64) written = written.substr(0, 64) + "...";
    out_.push_back(at(file_, m, "the YAML tag '" + printable(written) +
                                    "' is not allowed; expected a plain value (a manifest takes no tags)"));
  }

  const std::string& text_;
  const std::string& file_;
  Diagnostics& out_;
  size_t bom_;  // 3 when the text starts with a UTF-8 byte order mark
  int documents_ = 0;
  int depth_ = 0;  // counted levels open
  std::vector<Open> open_;
};

Diagnostic syntax_error(const std::string& text, const std::string& file, const YAML::Exception& e,
                        const StructureCheck& check) {
  const bool map_flow = e.msg.find("map flow") != std::string::npos;
  const bool seq_flow = e.msg.find("sequence flow") != std::string::npos;
  if (map_flow || seq_flow) {
    const char open = map_flow ? '{' : '[', close = map_flow ? '}' : ']';
    if (const Open* o = check.innermost_open_flow(open)) {
      // Where the parser gave up helps only when it is past the bracket (at the end of the text
      // yaml-cpp may give line and column 0).
      const bool past = e.mark.line > o->mark.line || (e.mark.line == o->mark.line && e.mark.column > o->mark.column);
      const std::string gave_up = past ? " at " + where(e.mark) : "";
      return at(file, o->mark, std::string("YAML syntax error: this '") + open + "' is not closed by a matching '" +
                                   close + "' (" + e.msg + gave_up + ")");
    }
    return at(file, e.mark, "YAML syntax error: " + e.msg + "; a '" + open + "' is not closed by a matching '" + close + "'");
  }
  const int line = e.mark.line >= 0 ? e.mark.line + 1 : 0;
  return at(file, e.mark, "YAML syntax error: " + e.msg + tab_hint(text, line));
}

}  // namespace

Diagnostics check_structure(const std::string& text, const std::string& file) {
  Diagnostics out;
  std::istringstream in(text);
  YAML::Parser parser(in);
  StructureCheck check(text, file, out);
  try {
    while (parser.HandleNextDocument(check)) {
    }
  } catch (const StopParse&) {
    // reported by the handler
  } catch (const YAML::Exception& e) {
    out.push_back(syntax_error(text, file, e, check));
  }
  return out;
}

}  // namespace tandem::yaml
