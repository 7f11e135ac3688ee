#include "tool_call_glm47.hpp"

#include "tag_scanner.hpp"

namespace tandem::engine::parse {
namespace {
constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kKey = "<arg_key>";
constexpr std::string_view kKeyEnd = "</arg_key>";
constexpr std::string_view kVal = "<arg_value>";
constexpr std::string_view kValEnd = "</arg_value>";

std::string_view trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}
}  // namespace

ToolCallParserGlm47::ToolCallParserGlm47(nlohmann::json tools, std::function<std::string()> make_id)
    : tools_(std::move(tools)), make_id_(std::move(make_id)) {}

nlohmann::json ToolCallParserGlm47::typed_value(const std::string& tool, const std::string& key,
                                                const std::string& raw) const {
  // The tools are the client's: any part of a schema may be missing or of another type (value()
  // throws on those), and a tool without a usable schema types nothing.
  auto member = [](const nlohmann::json& j, const std::string& name) -> const nlohmann::json* {
    if (!j.is_object()) return nullptr;
    const auto it = j.find(name);
    return it == j.end() ? nullptr : &*it;
  };
  if (tools_.is_array()) {
    for (const auto& t : tools_) {
      const nlohmann::json* fn = member(t, "function") ? member(t, "function") : &t;
      const nlohmann::json* name = member(*fn, "name");
      if (!name || *name != tool) continue;
      const nlohmann::json* params = member(*fn, "parameters");
      const nlohmann::json* props = params ? member(*params, "properties") : nullptr;
      const nlohmann::json* prop = props ? member(*props, key) : nullptr;
      const nlohmann::json* type = prop ? member(*prop, "type") : nullptr;
      if (type && *type == "string") return raw;
    }
  }
  auto parsed = nlohmann::json::parse(raw, nullptr, false);
  if (parsed.is_discarded()) return raw;
  return parsed;
}

std::optional<ToolCall> ToolCallParserGlm47::parse_block(std::string_view body) const {
  const auto first_key = body.find(kKey);
  const std::string name(trim(body.substr(0, first_key)));
  if (name.empty() || name.find('<') != std::string::npos) return std::nullopt;
  nlohmann::ordered_json args = nlohmann::ordered_json::object();
  std::size_t at = first_key;
  while (at != std::string_view::npos) {
    const auto key_end = body.find(kKeyEnd, at);
    const auto val = body.find(kVal, key_end == std::string_view::npos ? at : key_end);
    const auto val_end = body.find(kValEnd, val == std::string_view::npos ? at : val);
    if (key_end == std::string_view::npos || val == std::string_view::npos || val_end == std::string_view::npos)
      return std::nullopt;
    if (!trim(body.substr(key_end + kKeyEnd.size(), val - key_end - kKeyEnd.size())).empty()) return std::nullopt;
    const std::string key(trim(body.substr(at + kKey.size(), key_end - at - kKey.size())));
    const std::string raw(body.substr(val + kVal.size(), val_end - val - kVal.size()));
    args[key] = typed_value(name, key, raw);
    const auto next = body.find(kKey, val_end);
    if (next == std::string_view::npos && !trim(body.substr(val_end + kValEnd.size())).empty()) return std::nullopt;
    at = next;
  }
  return ToolCall{make_id_(), name, args.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)};
}

ToolParse ToolCallParserGlm47::parse(std::string_view output) const {
  ToolParse out;
  std::size_t pos = 0;
  for (;;) {
    const auto open = output.find(kOpen, pos);
    if (open == std::string_view::npos) break;
    const auto close = output.find(kClose, open);
    if (close == std::string_view::npos) break;
    auto call = parse_block(output.substr(open + kOpen.size(), close - open - kOpen.size()));
    if (!call) break;  // malformed: leave the rest as content, as the model wrote it
    out.content += output.substr(pos, open - pos);
    out.calls.push_back(std::move(*call));
    pos = close + kClose.size();
  }
  out.content += output.substr(pos);
  if (!out.calls.empty()) out.content = std::string(trim(out.content));
  return out;
}

ToolParse ToolCallParserGlm47::feed(std::string_view delta) {
  ToolParse out;
  pending_ += delta;
  for (;;) {
    if (!in_block_) {
      const auto open = pending_.find(kOpen);
      if (open == std::string::npos) {
        const std::size_t hold = partial_tag_suffix(pending_, kOpen);
        out.content += pending_.substr(0, pending_.size() - hold);
        pending_.erase(0, pending_.size() - hold);
        return out;
      }
      out.content += pending_.substr(0, open);
      pending_.erase(0, open);  // keep "<tool_call>" so an unclosed block can be returned verbatim
      in_block_ = true;
    }
    const auto close = pending_.find(kClose);
    if (close == std::string::npos) return out;
    std::string_view block(pending_);
    auto call = parse_block(block.substr(kOpen.size(), close - kOpen.size()));
    if (call) out.calls.push_back(std::move(*call));
    else out.content += block.substr(0, close + kClose.size());
    pending_.erase(0, close + kClose.size());
    in_block_ = false;
  }
}

ToolParse ToolCallParserGlm47::finish() {
  ToolParse out;
  out.content = std::move(pending_);
  pending_.clear();
  in_block_ = false;
  return out;
}

}  // namespace tandem::engine::parse
