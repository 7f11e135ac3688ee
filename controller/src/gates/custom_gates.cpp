#include "custom_gates.hpp"

#include "tandem/url.hpp"
#include "tandem/utf8.hpp"

namespace tandem::gates {
namespace {

using nlohmann::json;

std::string clip(const std::string& s, std::size_t n = 200) { return utf8::clip(s, n); }

// The body with any invalid UTF-8 replaced (U+FFFD): it goes into the journal and the report as
// JSON text, which must be UTF-8, and a checked server may answer anything.
std::string valid_utf8(const std::string& s) {
  return json::parse(json(s).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>();
}

GateResult done(GateResult g, bool passed, std::string detail) {
  g.passed = passed;
  g.detail = std::move(detail);
  return g;
}

}  // namespace

GateResult custom_http_gate(const CustomGate& c, const httpc::Url& head) {
  GateResult g{"custom." + c.name, false, "", 0, json::object()};
  httpc::Url url = head;
  std::string target = c.url;
  if (!c.url.starts_with("/")) {  // a full URL: validated by the manifest reader
    auto parsed = parse_http_url(c.url);
    if (!parsed) return done(g, false, c.url + ": " + parsed.error().message);
    url = httpc::Url{parsed->host, parsed->port_or_default(), ""};
    target = parsed->target;
  }
  httpc::Options o;
  o.io_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(c.timeout);
  o.total_timeout = o.io_timeout;
  o.response_limit = 4 * 1024 * 1024;
  const std::string what = c.method + " " + url.str() + target;
  auto r = httpc::request(url, c.method, target, c.body, o);
  if (!r) return done(g, false, what + ": " + r.error().message);
  r->body = valid_utf8(r->body);
  g.evidence = {{"request", what}, {"status", r->status}, {"body", clip(r->body, 2000)}};
  if (static_cast<int>(r->status) != c.expect_status)
    return done(g, false, what + " answered " + std::to_string(r->status) + "; expected " + std::to_string(c.expect_status) +
                              " (body: " + clip(r->body, 120) + ")");
  if (!c.expect_body_contains.empty() && r->body.find(c.expect_body_contains) == std::string::npos)
    return done(g, false, what + " answered " + std::to_string(r->status) + " without '" + c.expect_body_contains +
                              "' in the body: " + clip(r->body, 120));
  if (c.expect_json_equals) {
    const json body = json::parse(r->body, nullptr, false);
    if (body.is_discarded()) return done(g, false, what + ": the body is not JSON, so " + c.expect_json_path + " cannot be read");
    const json want = json::parse(*c.expect_json_equals);
    const json::json_pointer ptr(c.expect_json_path);
    if (!body.contains(ptr)) return done(g, false, what + ": the reply has no " + c.expect_json_path);
    g.evidence["json_value"] = body.at(ptr);
    if (body.at(ptr) != want)
      return done(g, false, what + ": " + c.expect_json_path + " is " + clip(body.at(ptr).dump(), 120) + "; expected " + want.dump());
  }
  std::string ok = what + " answered " + std::to_string(r->status);
  if (!c.expect_body_contains.empty()) ok += " with '" + c.expect_body_contains + "'";
  if (c.expect_json_equals) ok += ", " + c.expect_json_path + " = " + *c.expect_json_equals;
  return done(g, true, ok);
}

GateResult judge_command_gate(const CustomGate& c, const Result<json>& outcomes) {
  GateResult g{"custom." + c.name, false, "", 0, json::object()};
  if (!outcomes) return done(g, false, "command gate on " + c.command.on + ": " + outcomes.error().message);
  g.evidence = *outcomes;
  if (!outcomes->is_object() || outcomes->empty()) return done(g, false, "command gate: no node runs it (on: " + c.command.on + ")");
  std::string passed;
  for (const auto& [node, o] : outcomes->items()) {
    const std::string err = o.value("error", "");
    const std::string out = o.value("output_tail", "");
    if (!err.empty()) return done(g, false, node + ": not run: " + err);
    if (o.value("timed_out", false))
      return done(g, false, node + ": timed out after " + format_duration(c.command.timeout) + "; output: " + clip(out, 120));
    const json code = o.value("exit_code", json());
    if (!code.is_number_integer() || code.get<int>() != c.expect_exit)
      return done(g, false, node + ": " + o.value("status", std::string("?")) + "; expected exit code " + std::to_string(c.expect_exit) +
                                "; output: " + clip(out, 120));
    if (!c.expect_output_contains.empty() && out.find(c.expect_output_contains) == std::string::npos)
      return done(g, false, node + ": exit " + std::to_string(code.get<int>()) + " but the output lacks '" + c.expect_output_contains +
                                "': " + clip(out, 120));
    passed += (passed.empty() ? "" : ", ") + node;
  }
  return done(g, true, "exit " + std::to_string(c.expect_exit) +
                           (c.expect_output_contains.empty() ? "" : " with '" + c.expect_output_contains + "'") + " on " + passed);
}

}  // namespace tandem::gates
