// Reading the bind report page back in tests: the timeline's bars (one per step that started), by
// step index, with what each says about its step. The page writes its attributes in one order
// (bind_timeline_svg.cpp), and Chromium's --dump-dom keeps it.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

namespace reporttest {

inline std::map<int, nlohmann::json> timeline_bars(const std::string& html) {
  static const std::regex bar(
      R"re(<rect class="bar [a-z-]+" data-node="([^"]*)" data-index="(\d+)" data-action="([^"]*)" data-status="([^"]*)"(?: data-undone="true")? data-start-ms="(\d+)" data-end-ms="(\d+)")re");
  std::map<int, nlohmann::json> bars;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), bar); it != std::sregex_iterator(); ++it)
    bars[std::stoi((*it)[2])] = {{"node", (*it)[1]}, {"action", (*it)[3]}, {"status", (*it)[4]},
                                 {"start", std::stoll((*it)[5])}, {"end", std::stoll((*it)[6])}};
  return bars;
}

// Every step of the JSON report that started has exactly one bar, with its node, action, status
// and times; no bar is left over. Returns the first difference, or "".
inline std::string timeline_matches(const std::string& html, const nlohmann::json& report) {
  auto bars = timeline_bars(html);
  std::size_t started = 0;
  for (const auto& s : report["steps"]) {
    if (!s.contains("started_ms")) continue;
    ++started;
    const int i = s["index"];
    auto it = bars.find(i);
    if (it == bars.end()) return "no bar for step " + std::to_string(i);
    const nlohmann::json& b = it->second;
    if (b["node"] != s["node"] || b["action"] != s["action"] || b["status"] != s["status"] || b["start"] != s["started_ms"] ||
        b["end"] != s.value("ended_ms", b["end"].get<long long>()))
      return "bar " + b.dump() + " differs from step " + s.dump();
  }
  if (bars.size() != started) return std::to_string(bars.size()) + " bars for " + std::to_string(started) + " started steps";
  return "";
}

}  // namespace reporttest
