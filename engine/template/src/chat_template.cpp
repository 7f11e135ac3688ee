#include "tandem/template/chat_template.hpp"

#include <fstream>
#include <sstream>

namespace tandem::tmpl {
namespace {

Error io_error(const std::string& where, std::string message) {
  return template_error(ErrorKind::io, where, std::move(message), 0, 0);
}

bool read_file(const std::filesystem::path& p, std::string& out) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return !in.bad();
}

// tokenizer_config.json writes special tokens as strings or as AddedToken objects {"content": ...}.
nlohmann::ordered_json special_tokens_of(const nlohmann::ordered_json& config) {
  nlohmann::ordered_json tokens = nlohmann::ordered_json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    auto it = config.find(key);
    if (it == config.end()) continue;
    if (it->is_string()) tokens[key] = *it;
    else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) tokens[key] = (*it)["content"];
  }
  auto extra = config.find("additional_special_tokens");
  if (extra != config.end() && extra->is_array()) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto& t : *extra) {
      if (t.is_string()) list.push_back(t);
      else if (t.is_object() && t.contains("content")) list.push_back(t["content"]);
    }
    tokens["additional_special_tokens"] = list;
  }
  return tokens;
}

// vLLM parses string arguments of assistant tool calls into objects before rendering.
void parse_arguments(nlohmann::ordered_json& messages) {
  if (!messages.is_array()) return;
  for (auto& m : messages) {
    if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    for (auto& call : m["tool_calls"]) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
      auto& fn = call["function"];
      if (!fn.contains("arguments") || !fn["arguments"].is_string()) continue;
      auto parsed = nlohmann::ordered_json::parse(fn["arguments"].get<std::string>(), nullptr, false);
      if (!parsed.is_discarded()) fn["arguments"] = std::move(parsed);
    }
  }
}

}  // namespace

Result<ChatTemplate> ChatTemplate::from_string(std::string_view source, std::string name, Options options) {
  auto t = Template::parse(source, std::move(name), options);
  if (!t) return t.error();
  ChatTemplate ct;
  ct.templates_.emplace_back("default", std::move(t.value()));
  return ct;
}

Result<ChatTemplate> ChatTemplate::from_file(const std::filesystem::path& file, Options options) {
  std::string text;
  if (!read_file(file, text)) return io_error(file.string(), "cannot read chat template file");
  return from_string(text, file.string(), options);
}

Result<ChatTemplate> ChatTemplate::from_tokenizer_config(const nlohmann::ordered_json& config, std::string origin,
                                                         Options options) {
  if (!config.is_object()) return io_error(origin, "tokenizer config is not a JSON object");
  ChatTemplate ct;
  ct.special_tokens_ = special_tokens_of(config);
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return io_error(origin, "no \"chat_template\" in tokenizer config");
  if (it->is_string()) {
    auto t = Template::parse(it->get<std::string>(), origin + "#chat_template", options);
    if (!t) return t.error();
    ct.templates_.emplace_back("default", std::move(t.value()));
    return ct;
  }
  if (!it->is_array()) return io_error(origin, "\"chat_template\" must be a string or a list of {name, template}");
  for (const auto& entry : *it) {
    if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
        !entry["name"].is_string() || !entry["template"].is_string())
      return io_error(origin, "each \"chat_template\" entry needs string \"name\" and \"template\"");
    std::string name = entry["name"].get<std::string>();
    auto t = Template::parse(entry["template"].get<std::string>(), origin + "#chat_template[" + name + "]", options);
    if (!t) return t.error();
    ct.templates_.emplace_back(std::move(name), std::move(t.value()));
  }
  return ct;
}

Result<ChatTemplate> ChatTemplate::from_model_dir(const std::filesystem::path& dir, Options options) {
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  const auto config_path = dir / "tokenizer_config.json";
  std::string text;
  bool have_config = read_file(config_path, text);
  if (have_config) {
    config = nlohmann::ordered_json::parse(text, nullptr, false);
    if (config.is_discarded()) return io_error(config_path.string(), "not valid JSON");
  }
  const auto jinja_path = dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja_path)) {
    auto ct = from_file(jinja_path, options);
    if (ct) ct.value().special_tokens_ = special_tokens_of(config);
    return ct;
  }
  if (!have_config) return io_error(dir.string(), "no chat_template.jinja or tokenizer_config.json in model directory");
  return from_tokenizer_config(config, config_path.string(), options);
}

std::vector<std::string> ChatTemplate::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : templates_) out.push_back(name);
  return out;
}

Result<std::string> ChatTemplate::apply(const ChatRequest& request) const {
  bool has_tools = request.tools.is_array() && !request.tools.empty();
  const Template* chosen = nullptr;
  for (const auto& [name, t] : templates_) {
    if (name == "tool_use" && has_tools) {
      chosen = &t;
      break;
    }
    if (name == "default" && !chosen) chosen = &t;
  }
  if (!chosen) return io_error("chat_template", "no \"default\" chat template among the named templates");
  nlohmann::ordered_json context = special_tokens_;
  if (!context.is_object()) context = nlohmann::ordered_json::object();
  if (request.kwargs.is_object())
    for (auto it = request.kwargs.begin(); it != request.kwargs.end(); ++it) context[it.key()] = it.value();
  nlohmann::ordered_json messages = request.messages;
  if (request.parse_tool_arguments) parse_arguments(messages);
  context["messages"] = std::move(messages);
  context["tools"] = request.tools;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = request.add_generation_prompt;
  return chosen->render(context);
}

}  // namespace tandem::tmpl
