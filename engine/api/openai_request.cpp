#include "openai_request.hpp"

#include <algorithm>
#include <limits>

#include "tandem/utf8.hpp"

namespace tandem::engine::api {
namespace {

using nlohmann::json;

ApiError bad(std::string param, std::string message) { return bad_request(std::move(param), std::move(message)); }

// A string field read without nlohmann's value(), which throws when the field holds another type.
std::string string_field(const json& obj, const char* key) {
  if (!obj.is_object()) return {};
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string{};
}

// Untrusted text echoed in an error, bounded so a megabyte-long key does not come back whole. The
// cut backs up to a character boundary: half a UTF-8 sequence would make the answer invalid JSON.
std::string bounded(const std::string& text) {
  return utf8::clip(text, 64);
}
std::string quoted(const std::string& text) { return "'" + bounded(text) + "'"; }

// The fields each endpoint reads. Anything else is refused by name (as vLLM does) rather than
// silently ignored, so a client learns at once that a setting it relies on has no effect here.
constexpr const char* kSamplingFields[] = {
    "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "n", "stop",
    "ignore_eos", "stream", "stream_options", "prefix_cache",
    // OpenAI / vLLM fields that are accepted only at their neutral value (unsupported_fields).
    "logprobs", "top_logprobs", "logit_bias", "frequency_penalty", "presence_penalty", "repetition_penalty",
    "skip_special_tokens", "parallel_tool_calls", "best_of", "suffix",
    // Caller metadata, which by definition does not change the answer.
    "user", "metadata", "store"};
constexpr const char* kChatFields[] = {"model", "messages", "tools", "tool_choice", "response_format",
                                       "chat_template_kwargs", "add_generation_prompt"};
constexpr const char* kCompletionFields[] = {"model", "prompt", "echo"};

template <std::size_t N>
bool listed(const std::string& key, const char* const (&names)[N]) {
  for (const char* n : names)
    if (key == n) return true;
  return false;
}

template <std::size_t N>
std::optional<ApiError> check_known_fields(const json& b, const char* const (&endpoint)[N], const char* where) {
  for (const auto& [key, value] : b.items()) {
    if (listed(key, endpoint) || listed(key, kSamplingFields)) continue;
    std::string accepted;
    for (const char* n : endpoint) accepted += std::string(accepted.empty() ? "" : ", ") + n;
    for (const char* n : kSamplingFields) accepted += std::string(", ") + n;
    return bad(bounded(key), "unknown parameter " + quoted(key) + " for " + where + "; this server accepts " + accepted);
  }
  return std::nullopt;
}

// Fields this server does not implement: accepted at the value that means "off", refused by name
// otherwise, so nobody gets an answer that silently ignored what they asked for.
std::optional<ApiError> unsupported_fields(const json& b, bool chat) {
  auto given = [&](const char* key) { return b.contains(key) && !b[key].is_null(); };
  auto number_is = [&](const char* key, double neutral, const char* meaning) -> std::optional<ApiError> {
    if (!given(key)) return std::nullopt;
    if (!b[key].is_number()) return bad(key, std::string("'") + key + "' must be a number");
    if (b[key].get<double>() == neutral) return std::nullopt;
    return bad(key, std::string("'") + key + "' is " + b[key].dump() + ", but " + meaning +
                        " is not supported by this server; leave it out or set it to " + json(neutral).dump());
  };
  if (given("logprobs")) {
    const json& lp = b["logprobs"];
    // chat: a boolean; completions: the legacy count of alternatives (0 = none).
    const bool off = chat ? (lp.is_boolean() && !lp.get<bool>()) : (lp.is_number_integer() && lp.get<long long>() == 0);
    if (chat && !lp.is_boolean()) return bad("logprobs", "'logprobs' must be true or false");
    if (!chat && !lp.is_number_integer()) return bad("logprobs", "'logprobs' must be an integer");
    if (!off)
      return bad("logprobs", "'logprobs' is not supported by this server (token log-probabilities are not returned); "
                             "leave it out or set it to " + std::string(chat ? "false" : "0"));
  }
  if (given("top_logprobs")) {
    if (!b["top_logprobs"].is_number_integer()) return bad("top_logprobs", "'top_logprobs' must be an integer");
    if (b["top_logprobs"].get<long long>() != 0)
      return bad("top_logprobs", "'top_logprobs' is not supported by this server (no log-probabilities are returned); "
                                 "leave it out or set it to 0");
  }
  if (given("logit_bias")) {
    const json& lb = b["logit_bias"];
    if (!lb.is_object()) return bad("logit_bias", "'logit_bias' must be an object of token id -> bias");
    for (const auto& [token, bias] : lb.items()) {
      const bool id = !token.empty() && token.size() <= 10 &&
                      std::all_of(token.begin(), token.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (!id) return bad("logit_bias", "'logit_bias' key " + quoted(token) + " is not a token id");
      if (!bias.is_number() || bias.get<double>() < -100.0 || bias.get<double>() > 100.0)
        return bad("logit_bias", "'logit_bias' for token " + token + " must be a number from -100 to 100");
    }
    if (!lb.empty()) return bad("logit_bias", "'logit_bias' is not supported by this server; leave it out or empty");
  }
  if (auto e = number_is("frequency_penalty", 0.0, "a frequency penalty")) return e;
  if (auto e = number_is("presence_penalty", 0.0, "a presence penalty")) return e;
  if (auto e = number_is("repetition_penalty", 1.0, "a repetition penalty")) return e;
  if (chat && b.contains("best_of")) return bad("best_of", "unknown parameter 'best_of' for chat completions");
  if (chat && b.contains("suffix")) return bad("suffix", "unknown parameter 'suffix' for chat completions");
  if (!chat && b.contains("parallel_tool_calls"))
    return bad("parallel_tool_calls", "unknown parameter 'parallel_tool_calls' for completions (no tools there)");
  if (given("best_of") && b["best_of"] != 1) return bad("best_of", "only best_of = 1 is supported");
  if (given("suffix")) return bad("suffix", "'suffix' (insertion) is not supported by this server");
  if (given("skip_special_tokens")) {
    if (!b["skip_special_tokens"].is_boolean()) return bad("skip_special_tokens", "must be true or false");
    if (!b["skip_special_tokens"].get<bool>())
      return bad("skip_special_tokens", "'skip_special_tokens' false is not supported: special tokens are always skipped");
  }
  if (given("parallel_tool_calls")) {
    if (!b["parallel_tool_calls"].is_boolean()) return bad("parallel_tool_calls", "must be true or false");
    if (!b["parallel_tool_calls"].get<bool>())
      return bad("parallel_tool_calls", "'parallel_tool_calls' false is not supported: the model may call several "
                                        "tools in one turn");
  }
  if (given("user") && !b["user"].is_string()) return bad("user", "'user' must be a string");
  if (given("metadata") && !b["metadata"].is_object()) return bad("metadata", "'metadata' must be an object");
  if (given("store") && !b["store"].is_boolean()) return bad("store", "'store' must be true or false");
  return std::nullopt;
}

// Reads the sampling fields shared by both endpoints; returns an error for the first bad one.
std::optional<ApiError> read_sampling(const json& b, Sampling& s, bool chat) {
  auto number = [&](const char* key, double lo, double hi, double& out) -> std::optional<ApiError> {
    if (!b.contains(key) || b[key].is_null()) return std::nullopt;
    if (!b[key].is_number()) return bad(key, std::string("'") + key + "' must be a number");
    const double v = b[key].get<double>();
    if (v < lo || v > hi)
      return bad(key, std::string("'") + key + "' is " + b[key].dump() + "; expected " + json(lo).dump() + " to " +
                          json(hi).dump());
    out = v;
    return std::nullopt;
  };
  auto integer = [&](const char* key, long long lo, long long hi, auto& out) -> std::optional<ApiError> {
    if (!b.contains(key) || b[key].is_null()) return std::nullopt;
    if (!b[key].is_number_integer()) return bad(key, std::string("'") + key + "' must be an integer");
    // An unsigned value beyond long long would wrap to a negative one in get<long long>().
    const bool huge = b[key].is_number_unsigned() && b[key].get<unsigned long long>() > static_cast<unsigned long long>(hi);
    const long long v = huge ? hi + 1 : b[key].get<long long>();
    if (huge)
      return bad(key, std::string("'") + key + "' is " + b[key].dump() + "; expected " + std::to_string(lo) + " to " +
                          std::to_string(hi));
    if (v < lo || v > hi)
      return bad(key, std::string("'") + key + "' is " + std::to_string(v) + "; expected " + std::to_string(lo) +
                          " to " + std::to_string(hi));
    out = static_cast<std::remove_reference_t<decltype(out)>>(v);
    return std::nullopt;
  };
  auto boolean = [&](const char* key, bool& out) -> std::optional<ApiError> {
    if (!b.contains(key) || b[key].is_null()) return std::nullopt;
    if (!b[key].is_boolean()) return bad(key, std::string("'") + key + "' must be true or false");
    out = b[key].get<bool>();
    return std::nullopt;
  };
  if (auto e = integer("max_tokens", 1, 1 << 30, s.max_tokens)) return e;
  if (auto e = integer("max_completion_tokens", 1, 1 << 30, s.max_tokens)) return e;
  if (auto e = number("temperature", 0.0, 2.0, s.temperature)) return e;
  if (auto e = number("top_p", 0.0, 1.0, s.top_p)) return e;
  if (b.contains("top_p") && s.top_p == 0.0) return bad("top_p", "'top_p' must be more than 0");
  if (auto e = integer("top_k", -1, 1 << 30, s.top_k)) return e;
  if (s.top_k == 0) return bad("top_k", "'top_k' is 0; use -1 to turn it off, or at least 1");
  if (auto e = number("min_p", 0.0, 1.0, s.min_p)) return e;
  if (b.contains("seed") && !b["seed"].is_null()) {
    if (!b["seed"].is_number_integer()) return bad("seed", "'seed' must be an integer");
    s.seed = b["seed"].is_number_unsigned() ? b["seed"].get<std::uint64_t>()
                                            : static_cast<std::uint64_t>(b["seed"].get<long long>());
  }
  if (b.contains("n") && !b["n"].is_null() && b["n"] != 1) return bad("n", "only n = 1 is supported");
  if (b.contains("stop") && !b["stop"].is_null()) {
    const json& st = b["stop"];
    if (st.is_string()) {
      s.stop.push_back(st.get<std::string>());
    } else if (st.is_array() && st.size() <= 16) {
      for (const auto& x : st) {
        if (!x.is_string() || x.get<std::string>().empty()) return bad("stop", "'stop' entries must be non-empty strings");
        s.stop.push_back(x.get<std::string>());
      }
    } else {
      return bad("stop", "'stop' must be a string or a list of at most 16 strings");
    }
  }
  if (auto e = boolean("ignore_eos", s.ignore_eos)) return e;
  if (auto e = boolean("stream", s.stream)) return e;
  if (auto e = unsupported_fields(b, chat)) return e;
  if (auto e = boolean("prefix_cache", s.prefix_cache)) return e;
  if (b.contains("stream_options") && !b["stream_options"].is_null()) {
    const json& so = b["stream_options"];
    if (!so.is_object()) return bad("stream_options", "'stream_options' must be an object");
    if (so.contains("include_usage")) {
      if (!so["include_usage"].is_boolean()) return bad("stream_options.include_usage", "must be true or false");
      s.include_usage = so["include_usage"].get<bool>();
    }
  }
  return std::nullopt;
}

std::optional<ApiError> read_model(const json& b, std::string& model) {
  if (!b.contains("model") || b["model"].is_null()) return std::nullopt;  // the served model
  if (!b["model"].is_string()) return bad("model", "'model' must be a string");
  model = b["model"].get<std::string>();
  return std::nullopt;
}

std::optional<ApiError> check_message(const json& m, size_t i) {
  const std::string at = "messages[" + std::to_string(i) + "]";
  if (!m.is_object()) return bad(at, "'" + at + "' must be an object with a role");
  if (!m.contains("role") || !m["role"].is_string()) return bad(at + ".role", "'" + at + ".role' is missing");
  const std::string role = m["role"].get<std::string>();
  if (role != "system" && role != "developer" && role != "user" && role != "assistant" && role != "tool")
    return bad(at + ".role", "'" + at + ".role' is '" + role + "'; expected system, developer, user, assistant or tool");
  if (role == "tool" && !m.contains("tool_call_id"))
    return bad(at + ".tool_call_id", "'" + at + "' is a tool result without 'tool_call_id'");
  const bool has_calls = m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty();
  if (!m.contains("content") || m["content"].is_null()) {
    if (role == "assistant" && has_calls) return std::nullopt;
    return bad(at + ".content", "'" + at + ".content' is missing");
  }
  const json& c = m["content"];
  if (c.is_string()) return std::nullopt;
  if (!c.is_array()) return bad(at + ".content", "'" + at + ".content' must be a string or a list of parts");
  for (const auto& part : c) {
    if (!part.is_object() || string_field(part, "type") != "text" || !part.contains("text") || !part["text"].is_string())
      return bad(at + ".content", "'" + at + ".content' parts must be {\"type\": \"text\", \"text\": ...}; images are not supported");
  }
  return std::nullopt;
}

}  // namespace

ApiError bad_request(std::string param, std::string message) {
  ApiError e;
  e.param = std::move(param);
  e.message = std::move(message);
  return e;
}

std::string ApiError::body() const {
  // The message may quote the request; invalid UTF-8 in it must not turn an answer into a throw.
  return to_json().dump(-1, ' ', false, json::error_handler_t::replace);
}

json ApiError::to_json() const {
  return {{"error", {{"message", message}, {"type", type}, {"param", param.empty() ? json(nullptr) : json(param)},
                     {"code", status}}}};
}

Parsed<ChatRequest> parse_chat_request(const json& b) {
  ChatRequest r;
  if (!b.is_object()) return bad("", "the request body must be a JSON object");
  if (auto e = check_known_fields(b, kChatFields, "chat completions")) return *e;
  if (auto e = read_model(b, r.model)) return *e;
  if (!b.contains("messages") || !b["messages"].is_array() || b["messages"].empty())
    return bad("messages", "'messages' must be a non-empty list");
  for (size_t i = 0; i < b["messages"].size(); ++i)
    if (auto e = check_message(b["messages"][i], i)) return *e;
  // Multimodal-style content parts are flattened to text for the template.
  r.messages = nlohmann::ordered_json::parse(b["messages"].dump());
  for (auto& m : r.messages) {
    if (m.contains("content") && m["content"].is_array()) {
      std::string text;
      for (const auto& part : m["content"]) text += part["text"].get<std::string>();
      m["content"] = text;
    }
  }
  if (b.contains("tools") && !b["tools"].is_null()) {
    if (!b["tools"].is_array()) return bad("tools", "'tools' must be a list");
    for (size_t i = 0; i < b["tools"].size(); ++i) {
      const json& t = b["tools"][i];
      const std::string at = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || string_field(t, "type") != "function" || !t.contains("function") ||
          !t["function"].is_object() || !t["function"].contains("name") || !t["function"]["name"].is_string())
        return bad(at, "'" + at + "' must be {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": ...}}");
    }
    r.tools = nlohmann::ordered_json::parse(b["tools"].dump());
  }
  if (b.contains("tool_choice") && !b["tool_choice"].is_null()) {
    const json& tc = b["tool_choice"];
    if (tc.is_string()) {
      r.tool_choice = tc.get<std::string>();
      if (r.tool_choice != "auto" && r.tool_choice != "none" && r.tool_choice != "required")
        return bad("tool_choice", "'tool_choice' is '" + r.tool_choice + "'; expected auto, none, required or a named function");
    } else if (tc.is_object() && tc.contains("function") && tc["function"].contains("name") &&
               tc["function"]["name"].is_string()) {
      r.tool_choice = "named";
      r.tool_choice_name = tc["function"]["name"].get<std::string>();
    } else {
      return bad("tool_choice", "'tool_choice' must be auto, none, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    if (r.tool_choice != "none" && r.tool_choice != "auto" && r.tools.is_null())
      return bad("tool_choice", "'tool_choice' asks for a tool but 'tools' is empty");
  }
  if (b.contains("response_format") && !b["response_format"].is_null()) {
    const json& rf = b["response_format"];
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
      return bad("response_format", "'response_format' must be {\"type\": \"text\" | \"json_object\" | \"json_schema\"}");
    r.response_format = rf["type"].get<std::string>();
    if (r.response_format != "text" && r.response_format != "json_object" && r.response_format != "json_schema")
      return bad("response_format.type", "'response_format.type' is '" + r.response_format + "'; expected text, json_object or json_schema");
    if (r.response_format == "json_schema") {
      if (!rf.contains("json_schema") || !rf["json_schema"].is_object() || !rf["json_schema"].contains("schema") ||
          !(rf["json_schema"]["schema"].is_object() || rf["json_schema"]["schema"].is_boolean()))
        return bad("response_format.json_schema.schema",
                   "response_format json_schema needs {\"json_schema\": {\"name\": ..., \"schema\": {...}}}");
      r.response_schema = rf["json_schema"]["schema"];
    }
  }
  if (b.contains("chat_template_kwargs") && !b["chat_template_kwargs"].is_null()) {
    if (!b["chat_template_kwargs"].is_object()) return bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    r.chat_template_kwargs = nlohmann::ordered_json::parse(b["chat_template_kwargs"].dump());
  }
  if (b.contains("add_generation_prompt")) {
    if (!b["add_generation_prompt"].is_boolean()) return bad("add_generation_prompt", "must be true or false");
    r.add_generation_prompt = b["add_generation_prompt"].get<bool>();
  }
  if (auto e = read_sampling(b, r.sampling, /*chat=*/true)) return *e;
  return r;
}

Parsed<CompletionRequest> parse_completion_request(const json& b) {
  CompletionRequest r;
  if (!b.is_object()) return bad("", "the request body must be a JSON object");
  if (auto e = check_known_fields(b, kCompletionFields, "completions")) return *e;
  if (auto e = read_model(b, r.model)) return *e;
  if (!b.contains("prompt")) return bad("prompt", "'prompt' is missing");
  const json& p = b["prompt"];
  if (p.is_string()) {
    r.prompt = p.get<std::string>();
  } else if (p.is_array() && !p.empty() && std::all_of(p.begin(), p.end(), [](const json& x) { return x.is_number_integer(); })) {
    std::vector<std::int32_t> ids;
    for (const auto& x : p) {
      const long long v = x.get<long long>();
      if (v < 0 || v > std::numeric_limits<std::int32_t>::max()) return bad("prompt", "'prompt' token ids must be non-negative");
      ids.push_back(static_cast<std::int32_t>(v));
    }
    r.prompt = std::move(ids);
  } else {
    return bad("prompt", "'prompt' must be a string or a non-empty list of token ids (one prompt per request)");
  }
  if (b.contains("echo")) {
    if (!b["echo"].is_boolean()) return bad("echo", "'echo' must be true or false");
    r.echo = b["echo"].get<bool>();
  }
  if (auto e = read_sampling(b, r.sampling, /*chat=*/false)) return *e;
  return r;
}

}  // namespace tandem::engine::api
