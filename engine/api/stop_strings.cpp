#include "stop_strings.hpp"

#include <algorithm>
#include <utility>

#include "tag_scanner.hpp"

namespace tandem::engine::api {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  // An empty stop string would match everywhere; the request parser refuses them, this is a guard.
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopMatcher::feed(std::string_view text) {
  if (stopped_) return {};
  if (stops_.empty()) return std::string(text);
  pending_ += text;
  std::size_t first = std::string::npos;
  for (const auto& s : stops_) first = std::min(first, pending_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }
  std::size_t hold = 0;
  for (const auto& s : stops_) hold = std::max(hold, parse::partial_tag_suffix(pending_, s));
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::finish() {
  if (stopped_) return {};
  return std::exchange(pending_, {});
}

}  // namespace tandem::engine::api
