// Jinja chat templates: parse the template, then render it as a chat request does. The input is
// TEMPLATE, optionally followed by a NUL byte and the request's "messages" JSON (what a client
// controls); without one, a fixed conversation with a tool call and a tool result is rendered.
// Render limits are lowered so that a loop the input writes ends in a clean error, not a timeout.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.hpp"
#include "tandem/template/chat_template.hpp"

namespace {

const nlohmann::ordered_json& fixed_messages() {
  static const auto m = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": "", "reasoning_content": "Use the tool.",
     "tool_calls": [{"id": "call_0", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\", \"days\": 2}"}}]},
    {"role": "tool", "tool_call_id": "call_0", "content": "{\"temp\": -3}"},
    {"role": "user", "content": [{"type": "text", "text": "Thanks"}]}])");
  return m;
}

const nlohmann::ordered_json& tools() {
  static const auto t = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "description": "Forecast", "parameters": {"type": "object", "properties": {"city": {"type": "string"},
    "days": {"type": "integer"}}, "required": ["city"]}}}])");
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto nul = input.find('\0');
  const std::string_view source = input.substr(0, nul);

  tandem::tmpl::Options options;
  options.fixed_time = 1'700'000'000;
  options.max_output_bytes = 1 << 20;
  options.max_iterations = 100'000;
  auto ct = tandem::tmpl::ChatTemplate::from_string(source, "fuzz.jinja", options);
  if (!ct) {
    (void)ct.error().text();
    return 0;
  }
  ct.value().set_special_tokens({{"bos_token", "<s>"}, {"eos_token", "</s>"}});

  tandem::tmpl::ChatRequest req;
  req.messages = fixed_messages();
  if (nul != std::string_view::npos) {
    auto m = nlohmann::ordered_json::parse(input.substr(nul + 1), nullptr, false);
    if (m.is_discarded()) return 0;
    req.messages = std::move(m);
  }
  req.tools = tools();
  req.add_generation_prompt = true;
  req.kwargs = {{"enable_thinking", false}};
  auto out = ct.value().apply(req);
  if (out) tandem::fuzz::check(out.value().size() <= options.max_output_bytes, "rendered past max_output_bytes");
  else (void)out.error().text();
  return 0;
}
