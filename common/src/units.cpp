#include "tandem/units.hpp"

#include <array>
#include <cctype>
#include <cmath>
#include <limits>

namespace tandem {
namespace {

bool fail(ParseError* err, std::string what) {
  if (err) err->what = std::move(what);
  return false;
}

// Splits "12.5GiB" into number text "12.5" and unit "GiB"; rejects anything else.
bool split_number_unit(std::string_view text, std::string_view& number, std::string_view& unit) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  number = text.substr(0, i);
  unit = text.substr(i);
  return !number.empty();
}

std::optional<double> to_number(std::string_view s) {
  if (s.empty() || s.front() == '.' || s.back() == '.') return std::nullopt;
  double whole = 0, frac = 0, scale = 1;
  bool dot = false;
  for (char c : s) {
    if (c == '.') {
      if (dot) return std::nullopt;
      dot = true;
      continue;
    }
    int d = c - '0';
    if (!dot) {
      whole = whole * 10 + d;
    } else {
      scale /= 10;
      frac += d * scale;
    }
  }
  return whole + frac;
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

}  // namespace

std::optional<std::uint64_t> parse_size(std::string_view raw, ParseError* err) {
  const std::string text = trim(raw);
  if (text.empty()) return fail(err, "empty size"), std::nullopt;
  if (text.front() == '-') return fail(err, "a size cannot be negative"), std::nullopt;
  std::string_view number, unit;
  if (!split_number_unit(text, number, unit))
    return fail(err, "a size starts with a number"), std::nullopt;
  struct U {
    std::string_view name;
    double factor;
  };
  static constexpr std::array<U, 10> units{{{"", 1},
                                            {"B", 1},
                                            {"KB", 1e3},
                                            {"MB", 1e6},
                                            {"GB", 1e9},
                                            {"TB", 1e12},
                                            {"KiB", 1024.0},
                                            {"MiB", 1048576.0},
                                            {"GiB", 1073741824.0},
                                            {"TiB", 1099511627776.0}}};
  // Allow one space between number and unit ("115 GiB").
  if (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  const U* found = nullptr;
  for (const auto& u : units)
    if (u.name == unit) found = &u;
  if (!found)
    return fail(err, "unknown size unit '" + std::string(unit) + "'"), std::nullopt;
  auto value = to_number(number);
  if (!value) return fail(err, "malformed number '" + std::string(number) + "'"), std::nullopt;
  if (found->factor == 1 && number.find('.') != std::string_view::npos)
    return fail(err, "a byte count must be a whole number"), std::nullopt;
  double bytes = *value * found->factor;
  if (bytes >= 1.8e19) return fail(err, "size is too large"), std::nullopt;
  return static_cast<std::uint64_t>(std::floor(bytes));
}

std::optional<Duration> parse_duration(std::string_view raw, ParseError* err) {
  const std::string text = trim(raw);
  if (text.empty()) return fail(err, "empty duration"), std::nullopt;
  if (text.front() == '-') return fail(err, "a duration cannot be negative"), std::nullopt;
  std::string_view rest = text;
  double total_ms = 0;
  bool any = false;
  while (!rest.empty()) {
    std::string_view number, unit_and_more;
    if (!split_number_unit(rest, number, unit_and_more))
      return fail(err, "expected a number before '" + std::string(rest) + "'"), std::nullopt;
    size_t u = 0;
    while (u < unit_and_more.size() && std::isalpha(static_cast<unsigned char>(unit_and_more[u]))) ++u;
    std::string_view unit = unit_and_more.substr(0, u);
    double factor = 0;
    if (unit == "ms") factor = 1;
    else if (unit == "s") factor = 1e3;
    else if (unit == "m") factor = 60e3;
    else if (unit == "h") factor = 3600e3;
    else if (unit == "d") factor = 86400e3;
    else if (unit.empty())
      return fail(err, "missing unit after '" + std::string(number) + "' (use ms, s, m, h or d)"),
             std::nullopt;
    else
      return fail(err, "unknown duration unit '" + std::string(unit) + "' (use ms, s, m, h or d)"),
             std::nullopt;
    auto value = to_number(number);
    if (!value) return fail(err, "malformed number '" + std::string(number) + "'"), std::nullopt;
    total_ms += *value * factor;
    any = true;
    rest = unit_and_more.substr(u);
  }
  if (!any) return fail(err, "empty duration"), std::nullopt;
  if (total_ms > 1e15) return fail(err, "duration is too long"), std::nullopt;
  return Duration(static_cast<Duration::rep>(std::llround(total_ms)));
}

std::string format_size(std::uint64_t bytes) {
  static constexpr std::array<const char*, 5> names{"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  size_t i = 0;
  while (v >= 1024 && i + 1 < names.size()) {
    v /= 1024;
    ++i;
  }
  char buf[64];
  if (v == std::floor(v)) std::snprintf(buf, sizeof buf, "%.0f %s", v, names[i]);
  else std::snprintf(buf, sizeof buf, "%.2f %s", v, names[i]);
  return buf;
}

std::string format_duration(Duration d) {
  auto ms = d.count();
  if (ms % 1000 != 0 || ms == 0) {
    if (ms < 1000) return std::to_string(ms) + "ms";
  }
  auto s = ms / 1000;
  std::string out;
  if (s >= 86400 && s % 86400 == 0) return std::to_string(s / 86400) + "d";
  if (s >= 3600) {
    out += std::to_string(s / 3600) + "h";
    s %= 3600;
  }
  if (s >= 60) {
    out += std::to_string(s / 60) + "m";
    s %= 60;
  }
  if (s > 0 || out.empty()) out += std::to_string(s) + "s";
  if (ms % 1000) out += std::to_string(ms % 1000) + "ms";
  return out;
}

}  // namespace tandem
