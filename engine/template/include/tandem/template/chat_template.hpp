// Chat-template front end: find a model's chat template and render a conversation with it the
// way transformers' apply_chat_template does (messages, tools, add_generation_prompt, special
// tokens such as bos_token/eos_token, and extra kwargs such as enable_thinking).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/template/jinja.hpp"

namespace tandem::tmpl {

struct ChatRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools = nullptr;  // null (templates see `tools` as none) or an array
  bool add_generation_prompt = false;
  // Extra template variables (enable_thinking, --default-chat-template-kwargs, ...); they override
  // special tokens of the same name, as in transformers.
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  // As vLLM does for chat completions: a tool call's `function.arguments` given as a JSON string is
  // parsed into an object before rendering (templates iterate arguments.items()). Strings that do
  // not parse stay strings.
  bool parse_tool_arguments = true;
};

class ChatTemplate {
 public:
  // --chat-template FILE: the whole file is the template.
  static Result<ChatTemplate> from_file(const std::filesystem::path& file, Options options = {});
  // A Hugging Face model directory: chat_template.jinja if present (transformers prefers it), else
  // tokenizer_config.json "chat_template". Special tokens come from tokenizer_config.json.
  static Result<ChatTemplate> from_model_dir(const std::filesystem::path& dir, Options options = {});
  // tokenizer_config.json contents: "chat_template" is a string or a list of {name, template}.
  static Result<ChatTemplate> from_tokenizer_config(const nlohmann::ordered_json& config,
                                                    std::string origin, Options options = {});
  static Result<ChatTemplate> from_string(std::string_view source, std::string name, Options options = {});

  // bos_token, eos_token, ... as a JSON object of strings; replaces what a config provided.
  void set_special_tokens(nlohmann::ordered_json tokens) { special_tokens_ = std::move(tokens); }
  const nlohmann::ordered_json& special_tokens() const { return special_tokens_; }

  // Renders with "default", or "tool_use" when tools are given and such a template exists.
  Result<std::string> apply(const ChatRequest& request) const;

  // Names of the templates held ("default" for a single template).
  std::vector<std::string> names() const;

 private:
  std::vector<std::pair<std::string, Template>> templates_;
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
};

}  // namespace tandem::tmpl
