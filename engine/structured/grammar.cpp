#include "grammar.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace tandem::engine::structured {

namespace {

using nlohmann::json;

constexpr int kMaxSchemaDepth = 24;  // the byte machine nests at most 32 frames
constexpr std::size_t kMaxProperties = 64;

const std::set<std::string>& supported_keywords() {
  static const std::set<std::string> s = {"type", "properties", "required", "additionalProperties", "items", "enum", "const"};
  return s;
}
const std::set<std::string>& annotations() {
  static const std::set<std::string> s = {"title",    "description", "default",  "examples",  "$schema",
                                          "$id",      "$comment",    "deprecated", "readOnly", "writeOnly"};
  return s;
}

Error fail(const std::string& where, const std::string& what) { return Error{where + ": " + what}; }

// Which JSON type bits a value has (an integral number is both integer and number).
std::uint8_t type_of(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return kNull;
    case json::value_t::boolean: return kBoolean;
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return kInteger | kNumber;
    case json::value_t::number_float: {
      const double d = v.get<double>();
      return static_cast<std::uint8_t>(kNumber | (d == static_cast<double>(static_cast<long long>(d)) ? kInteger : 0));
    }
    case json::value_t::string: return kString;
    case json::value_t::array: return kArray;
    case json::value_t::object: return kObject;
    default: return 0;
  }
}

class Compiler {
 public:
  Compiler() {
    Node any;  // node 0: any JSON value, undeclared properties and items are any values too
    any.min_bytes = 1;  // "0"
    g.nodes.push_back(any);
  }

  Result<int> compile(const json& s, const std::string& where, int depth, bool object_default) {
    if (depth > kMaxSchemaDepth)
      return fail(where, "the schema nests deeper than " + std::to_string(kMaxSchemaDepth) + " levels");
    if (s.is_boolean()) {
      if (s.get<bool>()) return 0;
      return fail(where, "the schema false allows no value");
    }
    if (!s.is_object()) return fail(where, "a schema must be an object or a boolean, got " + s.dump());
    std::vector<std::string> unsupported;
    for (const auto& [k, v] : s.items())
      if (!supported_keywords().count(k) && !annotations().count(k)) unsupported.push_back(k);
    if (!unsupported.empty()) {
      std::string list;
      for (const auto& k : unsupported) list += (list.empty() ? "" : ", ") + k;
      return fail(where, "unsupported JSON Schema keyword(s) " + list +
                             " (supported: type, properties, required, additionalProperties, items, enum, const)");
    }

    Node n;
    if (s.contains("type")) {
      auto t = read_types(s["type"], where);
      if (!t) return t.error();
      n.types = *t;
    } else if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
      n.types = kObject;
    } else if (s.contains("items")) {
      n.types = kArray;
    } else if (object_default) {
      n.types = kObject;
    }

    if (s.contains("enum") || s.contains("const")) return literal_node(s, n.types, s.contains("type"), where);

    if (n.types & kObject) {
      if (auto e = object_part(s, n, where, depth)) return *e;
    }
    if (n.types & kArray) {
      if (s.contains("items")) {
        if (s["items"].is_array())
          return fail(where + "/items", "a list of item schemas (tuple form) is not supported; give one schema");
        auto items = compile(s["items"], where + "/items", depth + 1, false);
        if (!items) return items.error();
        n.items = *items;
      }
    }
    n.min_bytes = min_bytes(n);
    g.nodes.push_back(std::move(n));
    return static_cast<int>(g.nodes.size() - 1);
  }

  int min_bytes(const Node& n) const {
    int best = 1 << 29;
    if (n.types & (kInteger | kNumber)) best = std::min(best, 1);
    if (n.types & kString) best = std::min(best, 2);
    if (n.types & kArray) best = std::min(best, 2);
    if (n.types & (kNull | kBoolean)) best = std::min(best, 4);
    if (n.types & kObject) {
      int obj = 2, count = 0;
      for (std::size_t i = 0; i < n.names.size(); ++i)
        if (n.required >> i & 1) {
          obj += n.entry_bytes[i] + (count++ ? 1 : 0);
        }
      best = std::min(best, obj);
    }
    return best;
  }

  Grammar g;

 private:
  Result<std::uint8_t> read_types(const json& t, const std::string& where) {
    static const std::map<std::string, std::uint8_t> names = {{"null", kNull},       {"boolean", kBoolean},
                                                              {"integer", kInteger}, {"number", kNumber},
                                                              {"string", kString},   {"array", kArray},
                                                              {"object", kObject}};
    std::vector<json> list = t.is_array() ? std::vector<json>(t.begin(), t.end()) : std::vector<json>{t};
    if (list.empty()) return fail(where + "/type", "an empty list of types allows no value");
    std::uint8_t bits = 0;
    for (const auto& x : list) {
      auto it = x.is_string() ? names.find(x.get<std::string>()) : names.end();
      if (it == names.end())
        return fail(where + "/type", "unknown type " + x.dump() +
                                         "; expected object, array, string, number, integer, boolean or null");
      bits |= it->second;
    }
    return bits;
  }

  Result<int> literal_node(const json& s, std::uint8_t types, bool typed, const std::string& where) {
    std::vector<json> values;
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) return fail(where + "/enum", "'enum' must be a non-empty list");
      values.assign(s["enum"].begin(), s["enum"].end());
    }
    if (s.contains("const")) {
      if (s.contains("enum") && std::find(values.begin(), values.end(), s["const"]) == values.end())
        return fail(where, "'const' " + s["const"].dump() + " is not one of 'enum'");
      values = {s["const"]};
    }
    Node n;
    for (const auto& v : values)
      if (!typed || (type_of(v) & types)) n.literals.push_back(v.dump());
    if (n.literals.empty()) return fail(where, "no value of 'enum'/'const' has the schema's 'type'");
    std::sort(n.literals.begin(), n.literals.end());
    n.literals.erase(std::unique(n.literals.begin(), n.literals.end()), n.literals.end());
    n.min_bytes = 1 << 29;
    for (const auto& l : n.literals) n.min_bytes = std::min(n.min_bytes, static_cast<int>(l.size()));
    g.nodes.push_back(std::move(n));
    return static_cast<int>(g.nodes.size() - 1);
  }

  std::optional<Error> object_part(const json& s, Node& n, const std::string& where, int depth) {
    std::map<std::string, int> props;  // sorted as the machine compares: bytewise, unsigned
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) return fail(where + "/properties", "'properties' must be an object");
      if (s["properties"].size() > kMaxProperties)
        return fail(where + "/properties", "more than " + std::to_string(kMaxProperties) + " properties");
      for (const auto& [name, sub] : s["properties"].items()) {
        const std::string at = where + "/properties/" + name;
        if (name.empty()) return fail(at, "an empty property name is not supported");
        for (char ch : name)
          if (const auto c = static_cast<unsigned char>(ch); c < 0x20 || c == '"' || c == '\\')
            return fail(at, "property names with quotes, backslashes or control characters are not supported");
        auto node = compile(sub, at, depth + 1, false);
        if (!node) return node.error();
        props[name] = *node;
      }
    }
    for (const auto& [name, node] : props) {
      n.names.push_back(name);
      n.props.push_back(node);
      n.entry_bytes.push_back(2 + static_cast<int>(name.size()) + 1 + g.nodes[static_cast<std::size_t>(node)].min_bytes);
    }
    if (s.contains("required")) {
      if (!s["required"].is_array()) return fail(where + "/required", "'required' must be a list of property names");
      for (const auto& r : s["required"]) {
        auto it = r.is_string() ? std::find(n.names.begin(), n.names.end(), r.get<std::string>()) : n.names.end();
        if (it == n.names.end())
          return fail(where + "/required", "required " + r.dump() + " is not one of 'properties'");
        n.required |= std::uint64_t{1} << (it - n.names.begin());
      }
    }
    if (s.contains("additionalProperties")) {
      const json& a = s["additionalProperties"];
      if (a.is_boolean()) {
        n.additional = a.get<bool>() ? 0 : kNoAdditional;
      } else {
        auto node = compile(a, where + "/additionalProperties", depth + 1, false);
        if (!node) return node.error();
        n.additional = *node;
      }
    }
    return std::nullopt;
  }
};

}  // namespace

std::shared_ptr<const Grammar> json_object_grammar() {
  Compiler c;
  Node root;
  root.types = kObject;
  root.min_bytes = 2;
  c.g.nodes.push_back(root);
  c.g.root = static_cast<int>(c.g.nodes.size() - 1);
  return std::make_shared<const Grammar>(std::move(c.g));
}

Result<std::shared_ptr<const Grammar>> schema_grammar(const json& schema) {
  Compiler c;
  auto root = c.compile(schema, "#", 0, false);
  if (!root) return root.error();
  c.g.root = *root;
  return std::make_shared<const Grammar>(std::move(c.g));
}

namespace {
Result<int> compile_arguments(Compiler& c, const json& parameters, const std::string& where) {
  if (parameters.is_null()) {
    Node n;
    n.types = kObject;
    n.min_bytes = 2;
    c.g.nodes.push_back(n);
    return static_cast<int>(c.g.nodes.size() - 1);
  }
  auto root = c.compile(parameters, where, 0, true);
  if (!root) return root.error();
  Node& n = c.g.nodes[static_cast<std::size_t>(*root)];
  if (*root == 0 || !n.literals.empty() || !(n.types & kObject))
    return fail(where, "a tool's parameters must be an object schema");
  n.types = kObject;  // the arguments are an object, whatever else the schema would allow
  n.min_bytes = c.min_bytes(n);
  return *root;
}
}  // namespace

Result<std::shared_ptr<const Grammar>> arguments_grammar(const json& parameters) {
  Compiler c;
  auto root = compile_arguments(c, parameters, "#");
  if (!root) return root.error();
  c.g.root = *root;
  return std::make_shared<const Grammar>(std::move(c.g));
}

Result<std::shared_ptr<const Grammar>> tool_call_grammar(const std::vector<ToolSchema>& tools) {
  if (tools.empty()) return Error{"no tools to choose from"};
  Compiler c;
  std::vector<std::pair<std::string, int>> entries;
  for (const auto& t : tools) {
    auto args = compile_arguments(c, t.parameters, t.name);
    if (!args) return args.error();
    entries.emplace_back(json(t.name).dump(), *args);
  }
  std::sort(entries.begin(), entries.end());
  Node u;
  u.tool_union = true;
  u.types = kObject;
  int best = 1 << 29;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (i > 0 && entries[i].first == entries[i - 1].first) return Error{"two tools are named " + entries[i].first};
    u.literals.push_back(entries[i].first);
    u.union_args.push_back(entries[i].second);
    best = std::min(best, static_cast<int>(entries[i].first.size() + std::string(kUnionMiddle).size()) +
                              c.g.nodes[static_cast<std::size_t>(entries[i].second)].min_bytes);
  }
  u.min_bytes = static_cast<int>(std::string(kUnionPrefix).size()) + best + 1;
  c.g.nodes.push_back(std::move(u));
  c.g.root = static_cast<int>(c.g.nodes.size() - 1);
  return std::make_shared<const Grammar>(std::move(c.g));
}

}  // namespace tandem::engine::structured
