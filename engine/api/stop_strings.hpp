// OpenAI `stop` strings on streamed text. Text that could still be the start of a stop string is
// held back, so a client never sees the first half of a stop string that the next token completes.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace tandem::engine::api {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Text that is safe to pass on now. Once a stop string appears, the text before it is returned,
  // stopped() turns true and everything after (this call's and later calls') is dropped.
  std::string feed(std::string_view text);
  // End of output: the held-back text (it never became a stop string).
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace tandem::engine::api
