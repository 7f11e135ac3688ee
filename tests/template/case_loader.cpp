#include "case_loader.hpp"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace tandem::tmpl::testing {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string case_dir() { return std::string(TANDEM_SOURCE_DIR) + "/tests/template/cases"; }
std::string templates_dir() { return std::string(TANDEM_SOURCE_DIR) + "/tests/template/templates"; }

const ojson& cases() {
  static const ojson all = ojson::parse(read_text(case_dir() + "/cases.json"))["cases"];
  return all;
}

const ojson& goldens() {
  static const ojson all = ojson::parse(read_text(case_dir() + "/goldens.json"))["goldens"];
  return all;
}

std::string template_source(const ojson& c) {
  if (c.contains("template")) return c["template"].get<std::string>();
  return read_text(templates_dir() + "/" + c["template_file"].get<std::string>());
}

ChatRequest chat_request(const ojson& c) {
  const ojson& chat = c["chat"];
  ChatRequest r;
  r.messages = chat["messages"];
  r.tools = chat["tools"];
  r.add_generation_prompt = chat["add_generation_prompt"].get<bool>();
  r.kwargs = chat["kwargs"];
  return r;
}

std::string render_case(const ojson& c, const ChatTemplate* given) {
  std::string name = c["name"].get<std::string>();
  if (c.contains("chat")) {
    Result<ChatTemplate> ct = given ? Result<ChatTemplate>(*given) : ChatTemplate::from_string(template_source(c), name);
    if (!ct) return "ERROR: " + ct.error().text();
    if (!given) ct.value().set_special_tokens(c["chat"]["special_tokens"]);
    auto out = ct.value().apply(chat_request(c));
    return out ? out.value() : "ERROR: " + out.error().text();
  }
  auto t = Template::parse(template_source(c), name);
  if (!t) return "ERROR: " + t.error().text();
  auto out = t.value().render(c["context"]);
  return out ? out.value() : "ERROR: " + out.error().text();
}

}  // namespace tandem::tmpl::testing
