#include "bench_fixtures.hpp"

#include <utility>

namespace tandem::bench {

const std::vector<std::pair<const char*, const char*>>& shipped_fixture_texts();  // generated

using nlohmann::json;

std::vector<std::string> fixture_names() {
  std::vector<std::string> out;
  for (const auto& [name, text] : shipped_fixture_texts()) out.emplace_back(name);
  return out;
}

Result<Fixture> parse_fixture(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    return Error{source + ": not JSON: " + e.what()};
  }
  auto bad = [&](const std::string& where, const std::string& what) { return Error{source + ": " + where + ": " + what}; };
  if (!j.is_object()) return bad("top level", "expected an object {name, description, prompts}");
  Fixture f;
  if (!j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty())
    return bad("name", "expected a non-empty string");
  f.name = j["name"].get<std::string>();
  if (j.contains("description") && j["description"].is_string()) f.description = j["description"].get<std::string>();
  if (j.contains("tools")) {
    if (!j["tools"].is_array() || j["tools"].empty()) return bad("tools", "expected a non-empty list of OpenAI tools");
    f.tools = j["tools"];
  }
  if (!j.contains("prompts") || !j["prompts"].is_array() || j["prompts"].empty())
    return bad("prompts", "expected a non-empty list of {messages: [...]}");
  for (std::size_t i = 0; i < j["prompts"].size(); ++i) {
    const json& p = j["prompts"][i];
    const std::string at = "prompts[" + std::to_string(i) + "].messages";
    if (!p.is_object() || !p.contains("messages") || !p["messages"].is_array() || p["messages"].empty())
      return bad(at, "expected a non-empty list of messages");
    for (const auto& m : p["messages"])
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
          !m["content"].is_string())
        return bad(at, "every message needs a string role and a string content");
    f.messages.push_back(p["messages"]);
  }
  return f;
}

Result<std::vector<Fixture>> shipped_fixtures(const std::vector<std::string>& names) {
  std::vector<Fixture> out;
  for (const auto& want : names) {
    bool found = false;
    for (const auto& [name, text] : shipped_fixture_texts()) {
      if (want != name) continue;
      auto f = parse_fixture(text, want + ".json");
      if (!f) return f.error();
      out.push_back(std::move(*f));
      found = true;
    }
    if (!found) {
      std::string known;
      for (const auto& n : fixture_names()) known += (known.empty() ? "" : ", ") + n;
      return Error{"no fixture '" + want + "'; expected some of: " + known};
    }
  }
  return out;
}

json unique_messages(const Fixture& f, std::size_t prompt_index, const std::string& nonce) {
  json msgs = f.messages[prompt_index % f.messages.size()];
  msgs[0]["content"] = "[" + nonce + "] " + msgs[0]["content"].get<std::string>();
  return msgs;
}

}  // namespace tandem::bench
