#include "reasoning_glm45.hpp"

#include "tag_scanner.hpp"

namespace tandem::engine::parse {
namespace {
constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";
}  // namespace

ReasoningSplit split_reasoning_glm45(std::string_view output) {
  const auto close = output.find(kClose);
  if (close == std::string_view::npos) return {"", std::string(output)};
  std::string_view reasoning = output.substr(0, close);
  if (const auto open = reasoning.find(kOpen); open != std::string_view::npos) reasoning = reasoning.substr(open + kOpen.size());
  return {std::string(reasoning), std::string(output.substr(close + kClose.size()))};
}

void ReasoningStreamGlm45::emit(std::string_view text, ReasoningSplit& out) const {
  (state_ == State::thinking ? out.reasoning : out.content) += text;
}

ReasoningSplit ReasoningStreamGlm45::feed(std::string_view delta) {
  ReasoningSplit out;
  pending_ += delta;
  for (;;) {
    const std::string_view tag = state_ == State::before ? kOpen : state_ == State::thinking ? kClose : std::string_view{};
    if (tag.empty()) {  // after </think>: everything is content
      emit(pending_, out);
      pending_.clear();
      return out;
    }
    const auto at = pending_.find(tag);
    if (at == std::string::npos) {
      const std::size_t hold = partial_tag_suffix(pending_, tag);
      emit(std::string_view(pending_).substr(0, pending_.size() - hold), out);
      pending_.erase(0, pending_.size() - hold);
      return out;
    }
    emit(std::string_view(pending_).substr(0, at), out);
    pending_.erase(0, at + tag.size());
    state_ = state_ == State::before ? State::thinking : State::after;
  }
}

ReasoningSplit ReasoningStreamGlm45::finish() {
  ReasoningSplit out;
  emit(pending_, out);
  pending_.clear();
  return out;
}

}  // namespace tandem::engine::parse
