// Bench fixtures: families of prompts (prose, code, json, agent, mixed) shipped in
// controller/bench/fixtures/*.json and compiled into tandemctl, so every install benchmarks the
// same way. A fixture file is {name, description, tools?, prompts: [{messages: [...]}, ...]}.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/result.hpp"

namespace tandem::bench {

struct Fixture {
  std::string name;
  std::string description;
  nlohmann::json tools;                  // null, or the OpenAI tools list sent with every prompt
  std::vector<nlohmann::json> messages;  // one messages list per prompt
};

// The shipped fixtures, in their canonical order.
std::vector<std::string> fixture_names();

// Checks the shape and says where it is wrong ("code.json: prompts[3].messages: ...").
Result<Fixture> parse_fixture(const std::string& text, const std::string& source);

// Shipped fixtures by name; an unknown name is an error that lists the known ones.
Result<std::vector<Fixture>> shipped_fixtures(const std::vector<std::string>& names);

// The request's messages with a nonce put at the very start of the first message, so that two
// requests share no prefix past the chat template's fixed opening.
nlohmann::json unique_messages(const Fixture& f, std::size_t prompt_index, const std::string& nonce);

}  // namespace tandem::bench
