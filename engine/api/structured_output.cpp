#include "structured_output.hpp"

#include <optional>

namespace tandem::engine::api {

using oj = nlohmann::ordered_json;

namespace {

constexpr std::string_view kPrefix = "{\"name\":";         // engine/structured's tool-call union
constexpr std::string_view kMiddle = ",\"arguments\":";

struct UnionHead {
  std::string name;
  std::size_t args_start = 0;
};

// The name of a {"name":"...","arguments": text once both are there.
std::optional<UnionHead> union_head(std::string_view text) {
  if (text.substr(0, kPrefix.size()) != kPrefix || text.size() <= kPrefix.size() || text[kPrefix.size()] != '"')
    return std::nullopt;
  std::size_t i = kPrefix.size() + 1;
  for (; i < text.size(); ++i) {
    if (text[i] == '\\') ++i;
    else if (text[i] == '"') break;
  }
  if (i >= text.size()) return std::nullopt;
  const std::string_view literal = text.substr(kPrefix.size(), i + 1 - kPrefix.size());
  if (text.substr(i + 1, kMiddle.size()) != kMiddle) return std::nullopt;
  try {
    return UnionHead{nlohmann::json::parse(literal).get<std::string>(), i + 1 + kMiddle.size()};
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

bool parses(std::string_view text) { return nlohmann::json::accept(text); }

oj call_header(const std::string& id, const std::string& name, const std::string& arguments) {
  return {{"tool_calls", oj::array({{{"index", 0},
                                     {"id", id},
                                     {"type", "function"},
                                     {"function", {{"name", name}, {"arguments", arguments}}}}})}};
}
oj call_arguments(const std::string& piece) {
  return {{"tool_calls", oj::array({{{"index", 0}, {"function", {{"arguments", piece}}}}})}};
}

}  // namespace

std::string structured_finish_reason(std::string_view text, const StructuredOutput& out, const std::string& engine_reason) {
  if (out.kind == StructuredKind::tool_named && parses(text)) return "tool_calls";
  if (out.kind == StructuredKind::tool_any && parses(text) && union_head(text)) return "tool_calls";
  return engine_reason;
}

ChatMessage assemble_structured(std::string_view text, const StructuredOutput& out, const std::string& call_id) {
  ChatMessage m;
  if (out.kind == StructuredKind::tool_named && parses(text)) {
    m.calls.push_back({call_id, out.tool_name, std::string(text)});
  } else if (out.kind == StructuredKind::tool_any && parses(text)) {
    if (auto head = union_head(text)) {
      // The arguments exactly as generated: between the wrapper's middle and its closing brace.
      m.calls.push_back({call_id, head->name, std::string(text.substr(head->args_start, text.size() - 1 - head->args_start))});
    } else {
      m.content = std::string(text);
    }
  } else {
    m.content = std::string(text);  // json, or a document that did not complete (a stop string cut it)
  }
  return m;
}

StructuredStream::StructuredStream(StructuredOutput out, std::string call_id)
    : out_(std::move(out)), call_id_(std::move(call_id)) {}

std::vector<oj> StructuredStream::arguments_up_to(std::size_t end) {
  std::vector<oj> deltas;
  if (end <= sent_) return deltas;
  std::string piece = text_.substr(sent_, end - sent_);
  sent_ = end;
  if (!header_sent_) {
    header_sent_ = true;
    deltas.push_back(call_header(call_id_, out_.tool_name, piece));
  } else {
    deltas.push_back(call_arguments(piece));
  }
  return deltas;
}

std::vector<oj> StructuredStream::feed(std::string_view text) {
  text_ += text;
  switch (out_.kind) {
    case StructuredKind::tool_named:
      return arguments_up_to(text_.size());
    case StructuredKind::tool_any: {
      if (args_start_ == 0) {
        auto head = union_head(text_);
        if (!head) return {};
        out_.tool_name = head->name;
        args_start_ = sent_ = head->args_start;
      }
      // A '}' at the end may be the wrapper's own: it waits for what follows (or for finish).
      return arguments_up_to(text_.size() - (text_.back() == '}' ? 1 : 0));
    }
    default: {
      std::vector<oj> deltas;
      if (!text.empty()) deltas.push_back({{"content", std::string(text)}});
      sent_ = text_.size();
      return deltas;
    }
  }
}

std::vector<oj> StructuredStream::finish() {
  switch (out_.kind) {
    case StructuredKind::tool_named:
      return arguments_up_to(text_.size());
    case StructuredKind::tool_any:
      if (args_start_ > 0 && parses(text_)) {
        auto d = arguments_up_to(text_.size() - 1);
        if (!header_sent_) d.push_back(call_header(call_id_, out_.tool_name, ""));
        return d;
      }
      if (sent_ < text_.size() && args_start_ == 0) {  // never became a call: what there is, as content
        std::vector<oj> d{{{"content", text_.substr(sent_)}}};
        sent_ = text_.size();
        return d;
      }
      return arguments_up_to(text_.size());
    default:
      return {};
  }
}

}  // namespace tandem::engine::api
