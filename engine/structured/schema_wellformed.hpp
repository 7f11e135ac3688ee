// Is this a well-formed JSON Schema? Looser than the grammar compiler, which refuses whatever it
// cannot enforce: a tool under tool_choice "auto" is never enforced, so its schema may use any
// keyword, but a wrong one ("type": "nonsense", "properties": 3) is the client's mistake and is
// named at once instead of surfacing when the model calls the tool.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace tandem::engine::structured {

// The first malformed part, as "#/properties/x/type: unknown type \"nonsense\" ...", or nothing.
std::optional<std::string> schema_problem(const nlohmann::json& schema);

}  // namespace tandem::engine::structured
