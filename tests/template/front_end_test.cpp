// The chat-template front end: where templates come from and what they are rendered with.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tandem/template/chat_template.hpp"

using namespace tandem::tmpl;
namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

fs::path temp_dir(const std::string& tag) {
  fs::path p = fs::temp_directory_path() / ("tandem-template-" + tag + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

ChatRequest request(bool tools) {
  ChatRequest r;
  r.messages = ojson::parse(R"([{"role": "user", "content": "hi"}])");
  if (tools) r.tools = ojson::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  return r;
}

}  // namespace

TEST_CASE("named templates: default, and tool_use when tools are given") {
  auto config = ojson::parse(R"({
    "bos_token": {"content": "<s>", "lstrip": false},
    "eos_token": "</s>",
    "unk_token": null,
    "chat_template": [
      {"name": "default", "template": "D{{ bos_token }}{{ messages[0].content }}{{ eos_token }}{{ unk_token is defined }}"},
      {"name": "tool_use", "template": "T{{ tools | length }}{{ tools[0].function.name }}"}
    ]})");
  auto ct = ChatTemplate::from_tokenizer_config(config, "tokenizer_config.json");
  REQUIRE(ct.ok());
  CHECK(ct.value().names() == std::vector<std::string>{"default", "tool_use"});
  CHECK(ct.value().apply(request(false)).value() == "D<s>hi</s>False");
  CHECK(ct.value().apply(request(true)).value() == "T1f");
}

TEST_CASE("context as transformers passes it: tools none, kwargs override special tokens") {
  auto ct = ChatTemplate::from_string(
      "{{ tools is none }} {{ tools is defined }} {{ documents is none }} {{ add_generation_prompt }} "
      "{{ eos_token }} {{ enable_thinking }} {{ messages[0].tool_calls[0].function.arguments.city }}",
      "inline");
  REQUIRE(ct.ok());
  ct.value().set_special_tokens(ojson{{"eos_token", "<eos>"}});
  ChatRequest r;
  r.messages = ojson::parse(R"([{"role": "assistant", "tool_calls": [{"type": "function",
      "function": {"name": "w", "arguments": "{\"city\": \"Oslo\"}"}}]}])");
  r.add_generation_prompt = true;
  r.kwargs = ojson{{"enable_thinking", false}, {"eos_token", "<override>"}};
  auto out = ct.value().apply(r);
  REQUIRE_MESSAGE(out.ok(), (out.ok() ? "" : out.error().text()));
  CHECK(out.value() == "True True True True <override> False Oslo");
  r.parse_tool_arguments = false;
  auto raw = ct.value().apply(r);
  REQUIRE(raw.ok());
  CHECK(raw.value() == "True True True True <override> False ");  // a str has no .city: prints empty
}

TEST_CASE("model directory: chat_template.jinja wins over tokenizer_config.json") {
  fs::path dir = temp_dir("modeldir");
  write(dir / "tokenizer_config.json", R"({"eos_token": "<e>", "chat_template": "from-config"})");
  auto a = ChatTemplate::from_model_dir(dir);
  REQUIRE(a.ok());
  CHECK(a.value().apply(request(false)).value() == "from-config");
  write(dir / "chat_template.jinja", "from-file{{ eos_token }}");
  auto b = ChatTemplate::from_model_dir(dir);
  REQUIRE(b.ok());
  CHECK(b.value().apply(request(false)).value() == "from-file<e>");
  auto c = ChatTemplate::from_file(dir / "chat_template.jinja");
  REQUIRE(c.ok());
  CHECK(c.value().apply(request(false)).value() == "from-file");
  fs::remove_all(dir);
}

TEST_CASE("front-end errors are values") {
  auto missing = ChatTemplate::from_file("/nonexistent/tpl.jinja");
  REQUIRE_FALSE(missing.ok());
  CHECK(kind_of(missing.error()) == ErrorKind::io);
  auto none = ChatTemplate::from_tokenizer_config(ojson{{"eos_token", "x"}}, "cfg");
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().text() == "cfg: no \"chat_template\" in tokenizer config");
  auto bad = ChatTemplate::from_tokenizer_config(ojson{{"chat_template", "{% if %}"}}, "cfg");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().text() == "cfg#chat_template:1:7: expected an expression, got '%}'");
  auto no_default = ChatTemplate::from_tokenizer_config(
      ojson::parse(R"({"chat_template": [{"name": "tool_use", "template": "x"}]})"), "cfg");
  REQUIRE(no_default.ok());
  CHECK_FALSE(no_default.value().apply(request(false)).ok());
  CHECK(no_default.value().apply(request(true)).value() == "x");
}
