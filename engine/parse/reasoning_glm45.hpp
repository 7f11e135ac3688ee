// --reasoning-parser glm45: text inside <think> ... </think> is reasoning, the rest is content.
// Whole-output rule (as vLLM's glm45 parser behaves): without a closing </think> there is no
// reasoning and the output comes back as content. Streaming: text after <think> streams as
// reasoning until </think>; tags split across chunks are recognised.
#pragma once
#include <string>
#include <string_view>

namespace tandem::engine::parse {

struct ReasoningSplit {
  std::string reasoning;
  std::string content;
};

ReasoningSplit split_reasoning_glm45(std::string_view output);

class ReasoningStreamGlm45 {
 public:
  // Feed the next decoded text; returns what can be emitted now.
  ReasoningSplit feed(std::string_view delta);
  // End of output: whatever was held back.
  ReasoningSplit finish();

 private:
  enum class State { before, thinking, after };
  State state_ = State::before;
  std::string pending_;  // held back: may be the start of a tag
  void emit(std::string_view text, ReasoningSplit& out) const;
};

}  // namespace tandem::engine::parse
