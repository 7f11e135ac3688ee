// --reasoning-parser glm45 on model output: the whole-output split, and the streaming parser fed
// the same bytes in pieces the input chooses. Streaming must not depend on where the pieces
// break (tags split across deltas included), so every split is checked against one piece.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.hpp"
#include "reasoning_glm45.hpp"

using tandem::engine::parse::ReasoningSplit;
using tandem::engine::parse::ReasoningStreamGlm45;

namespace {

ReasoningSplit stream(const std::vector<std::string>& pieces) {
  ReasoningStreamGlm45 s;
  ReasoningSplit all;
  auto add = [&all](const ReasoningSplit& d) {
    all.reasoning += d.reasoning;
    all.content += d.content;
  };
  for (const auto& p : pieces) add(s.feed(p));
  add(s.finish());
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  std::vector<std::string> pieces;
  std::string whole;
  while (in.remaining_bytes() > 0) {
    pieces.push_back(in.ConsumeRandomLengthString(64));
    whole += pieces.back();
  }
  const ReasoningSplit once = tandem::engine::parse::split_reasoning_glm45(whole);
  tandem::fuzz::check(once.reasoning.size() + once.content.size() <= whole.size(), "the split made up bytes");

  const ReasoningSplit one = stream({whole});
  const ReasoningSplit split = stream(pieces);
  tandem::fuzz::check(one.reasoning == split.reasoning && one.content == split.content,
                      "streaming depends on where the deltas break");
  return 0;
}
