// What a constrained answer may be: a JSON value restricted by a JSON Schema subset, compiled
// into a tree of nodes that the byte machine (json_machine.hpp) walks.
//
// Supported keywords: type (one or a list of object, array, string, number, integer, boolean,
// null), properties, required, additionalProperties (false, true or a schema), items (one schema),
// enum, const, and the annotations title, description, default, examples, $schema, $id, $comment,
// deprecated, readOnly, writeOnly (ignored). Anything else is refused by name, so a client never
// gets an answer that silently ignores part of its schema.
#pragma once
#include <nlohmann/json.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tandem/result.hpp"

namespace tandem::engine::structured {

enum TypeBit : std::uint8_t {
  kNull = 1,
  kBoolean = 2,
  kInteger = 4,  // a number without fraction or exponent
  kNumber = 8,
  kString = 16,
  kArray = 32,
  kObject = 64,
};
constexpr std::uint8_t kAnyType = 127;
constexpr int kNoAdditional = -1;  // additionalProperties: false

struct Node {
  std::uint8_t types = kAnyType;
  // enum / const: the canonical JSON text of each allowed value, sorted and unique. When set, the
  // value must be one of these texts exactly (types then play no part).
  std::vector<std::string> literals;
  // object: declared property names (sorted, raw UTF-8), the node of each, which are required.
  std::vector<std::string> names;
  std::vector<int> props;
  std::uint64_t required = 0;  // bit i: names[i]
  int additional = 0;          // node of undeclared properties' values, or kNoAdditional
  int items = 0;               // array: node of every item
  // The tool-call union ("tool_choice": "required"): {"name":<one of literals>,"arguments":<args[i]>}.
  bool tool_union = false;
  std::vector<int> union_args;  // parallel to literals

  // Derived at compile time: bytes of the shortest value this node allows, and per declared
  // property the bytes of its shortest entry `"name":value`.
  int min_bytes = 0;
  std::vector<int> entry_bytes;
};

struct Grammar {
  std::vector<Node> nodes;  // node 0 accepts any JSON value
  int root = 0;
};

// Any JSON value, as response_format {"type": "json_object"} wants it: a top-level object.
std::shared_ptr<const Grammar> json_object_grammar();

// response_format json_schema. The error names the unsupported keywords and where they are
// ("#/properties/age: unsupported JSON Schema keyword(s) minimum, maximum").
Result<std::shared_ptr<const Grammar>> schema_grammar(const nlohmann::json& schema);

// A tool's arguments (tool_choice named): `parameters` (an object schema; absent or null means an
// object with any properties).
Result<std::shared_ptr<const Grammar>> arguments_grammar(const nlohmann::json& parameters);

struct ToolSchema {
  std::string name;
  nlohmann::json parameters;
};
// tool_choice "required": any one of `tools` as {"name": NAME, "arguments": ARGS}.
Result<std::shared_ptr<const Grammar>> tool_call_grammar(const std::vector<ToolSchema>& tools);

// The fixed text around a tool-call union's name and arguments.
inline constexpr const char* kUnionPrefix = "{\"name\":";
inline constexpr const char* kUnionMiddle = ",\"arguments\":";

}  // namespace tandem::engine::structured
