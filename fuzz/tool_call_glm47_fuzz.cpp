// --tool-call-parser glm47 on model output, with the request's tools (which type each argument)
// taken from the input too: the first line is the tools JSON, the rest is what the model wrote.
// Whole-output parsing runs, and the streaming parser is fed the output in pieces the input
// chooses; streaming must give the same calls and content wherever the pieces break.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_check.hpp"
#include "tool_call_glm47.hpp"

using tandem::engine::parse::ToolCallParserGlm47;
using tandem::engine::parse::ToolParse;

namespace {

std::function<std::string()> counter() {
  auto n = std::make_shared<int>(0);
  return [n] { return "call_" + std::to_string((*n)++); };
}

ToolParse stream(const nlohmann::json& tools, const std::vector<std::string>& pieces) {
  ToolCallParserGlm47 p(tools, counter());
  ToolParse all;
  auto add = [&all](ToolParse d) {
    all.content += d.content;
    for (auto& c : d.calls) all.calls.push_back(std::move(c));
  };
  for (const auto& piece : pieces) add(p.feed(piece));
  add(p.finish());
  return all;
}

bool same(const ToolParse& a, const ToolParse& b) {
  if (a.content != b.content || a.calls.size() != b.calls.size()) return false;
  for (std::size_t i = 0; i < a.calls.size(); ++i)
    if (a.calls[i].id != b.calls[i].id || a.calls[i].name != b.calls[i].name || a.calls[i].arguments != b.calls[i].arguments)
      return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const std::string tools_text = in.ConsumeRandomLengthString(4096);
  nlohmann::json tools = nlohmann::json::parse(tools_text, nullptr, false);
  if (tools.is_discarded()) tools = nullptr;  // the server passes null when a request has no tools

  std::vector<std::string> pieces;
  std::string whole;
  while (in.remaining_bytes() > 0) {
    pieces.push_back(in.ConsumeRandomLengthString(64));
    whole += pieces.back();
  }
  ToolCallParserGlm47 once(tools, counter());
  const ToolParse parsed = once.parse(whole);
  for (const auto& c : parsed.calls) {
    const auto args = nlohmann::json::parse(c.arguments, nullptr, false);
    tandem::fuzz::check(args.is_object(), "a call's arguments are not a JSON object");
  }
  tandem::fuzz::check(same(stream(tools, {whole}), stream(tools, pieces)),
                      "streaming depends on where the deltas break");
  return 0;
}
