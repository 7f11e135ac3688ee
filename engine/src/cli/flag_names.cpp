#include "cli/flag_names.hpp"

#include <algorithm>

namespace tandem::engine {

namespace {

bool is_setting_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; }

}  // namespace

std::string name_flags(std::string_view message, const CLI::App& app) {
  std::string out;
  out.reserve(message.size());
  std::size_t at = 0;
  while (at < message.size()) {
    const auto open = message.find('`', at);
    const auto close = open == std::string_view::npos ? open : message.find('`', open + 1);
    if (close == std::string_view::npos) break;
    const std::string_view name = message.substr(open + 1, close - open - 1);
    out.append(message.substr(at, open - at));
    std::string flag = "--" + std::string(name);
    std::replace(flag.begin(), flag.end(), '_', '-');
    const bool setting = !name.empty() && std::all_of(name.begin(), name.end(), is_setting_char);
    if (setting && app.get_option_no_throw(flag) != nullptr) {
      out += flag;
    } else {
      out.append(message.substr(open, close - open + 1));
    }
    at = close + 1;
  }
  out.append(message.substr(at));
  return out;
}

}  // namespace tandem::engine
