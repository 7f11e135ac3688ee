// Constrained chat requests: tool_choice named (the arguments of that tool, under its parameters
// schema), tool_choice required (any one tool as {"name", "arguments"}), response_format
// json_object / json_schema. The grammar comes from engine/structured; the engine enforces it
// token by token through GenerateRequest.constraint.
#include "json_constraint.hpp"
#include "schema_wellformed.hpp"
#include "service.hpp"

namespace tandem::engine::serve {

namespace {
api::ApiError bad(std::string param, std::string message) { return api::bad_request(std::move(param), std::move(message)); }
nlohmann::json parameters_of(const nlohmann::ordered_json& tool) {
  const auto& f = tool["function"];
  return f.contains("parameters") ? nlohmann::json::parse(f["parameters"].dump()) : nlohmann::json(nullptr);
}
}  // namespace

std::optional<api::ApiError> OpenAiService::check_tool_schemas(const api::ChatRequest& r) const {
  if (!r.tools.is_array()) return std::nullopt;
  for (std::size_t i = 0; i < r.tools.size(); ++i) {
    const std::string param = "tools[" + std::to_string(i) + "].function.parameters";
    const nlohmann::json parameters = parameters_of(r.tools[i]);
    if (parameters.is_null()) continue;  // no parameters: an object with any properties
    if (!parameters.is_object()) return bad(param, param + ": a tool's parameters must be an object schema");
    if (auto problem = structured::schema_problem(parameters)) return bad(param, param + *problem);
  }
  return std::nullopt;
}

Result<std::shared_ptr<const structured::TokenVocabulary>> OpenAiService::vocabulary() {
  std::lock_guard lk(vocab_mu_);
  if (!vocab_) vocab_ = structured::TokenVocabulary::build(tokenizer_);
  return *vocab_;
}

std::optional<api::ApiError> OpenAiService::constrain(const api::ChatRequest& r, runtime::GenerateRequest& g,
                                                      api::StructuredOutput& out) {
  Result<std::shared_ptr<const structured::Grammar>> grammar = Error{""};
  if (r.tool_choice == "named") {
    std::string names;
    std::size_t at = r.tools.size();
    for (std::size_t i = 0; i < r.tools.size(); ++i) {
      const std::string name = r.tools[i]["function"]["name"].get<std::string>();
      names += (names.empty() ? "" : ", ") + name;
      if (name == r.tool_choice_name && at == r.tools.size()) at = i;
    }
    if (at == r.tools.size())
      return bad("tool_choice", "'tool_choice' names the function '" + r.tool_choice_name + "', which is not in 'tools' (" +
                                    names + ")");
    const std::string param = "tools[" + std::to_string(at) + "].function.parameters";
    grammar = structured::arguments_grammar(parameters_of(r.tools[at]));
    if (!grammar) return bad(param, param + grammar.error().message);
    out.kind = api::StructuredKind::tool_named;
    out.tool_name = r.tool_choice_name;
  } else if (r.tool_choice == "required") {
    std::vector<structured::ToolSchema> tools;
    for (std::size_t i = 0; i < r.tools.size(); ++i) {
      const std::string param = "tools[" + std::to_string(i) + "].function.parameters";
      auto one = structured::arguments_grammar(parameters_of(r.tools[i]));  // checked alone, to name it
      if (!one) return bad(param, param + one.error().message);
      tools.push_back({r.tools[i]["function"]["name"].get<std::string>(), parameters_of(r.tools[i])});
    }
    grammar = structured::tool_call_grammar(tools);
    if (!grammar) return bad("tools", "'tools': " + grammar.error().message);
    out.kind = api::StructuredKind::tool_any;
  } else if (r.response_format == "json_object") {
    grammar = structured::json_object_grammar();
    out.kind = api::StructuredKind::json;
  } else if (r.response_format == "json_schema") {
    grammar = structured::schema_grammar(r.response_schema);
    if (!grammar)
      return bad("response_format.json_schema.schema", "response_format.json_schema.schema" + grammar.error().message);
    out.kind = api::StructuredKind::json;
  } else {
    return std::nullopt;  // free text
  }

  auto vocab = vocabulary();
  if (!vocab) return bad(r.tool_choice == "auto" || r.tool_choice == "none" ? "response_format" : "tool_choice",
                         "structured output is not available with this tokenizer: " + vocab.error().message);
  const structured::JsonMachine start(*grammar);
  if (g.max_tokens < start.min_close()) {
    const std::string shortest = start.shortest_completion();
    return bad("max_tokens", "max_tokens is " + std::to_string(g.max_tokens) +
                                 ", too small for any answer this request allows: the shortest is " + shortest + " (" +
                                 std::to_string(shortest.size()) +
                                 " bytes), and a constrained answer keeps one token per byte in reserve to be sure it "
                                 "closes. Ask for at least " + std::to_string(shortest.size()) + " tokens.");
  }
  std::vector<std::int32_t> stop_ids = g.stop_token_ids;
  if (!g.ignore_eos)
    for (int id : engine_.model().config().decoder().eos_token_ids) stop_ids.push_back(id);
  g.constraint = std::make_shared<structured::JsonConstraint>(*grammar, *vocab, std::move(stop_ids), g.max_tokens);
  return std::nullopt;
}

}  // namespace tandem::engine::serve
