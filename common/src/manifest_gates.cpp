// gates.custom: the operator's own checks. Every key is typed and positioned like the rest of the
// manifest; names are checked for uniqueness in manifest_validate.cpp with the node names.
#include <nlohmann/json.hpp>

#include "manifest_readers.hpp"

namespace tandem {
namespace {

using yaml::Context;
using yaml::MapReader;

bool gate_name_ok(const std::string& s) {
  if (s.empty() || s.size() > 63) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_')) return false;
  return true;
}

void read_http(Context& ctx, MapReader& entry, CustomGate& g) {
  MapReader h(ctx, entry.value("http"), entry.child_path("http"), entry.key_mark("http"));
  if (!h.ok()) return;
  h.one_of("method", g.method, {"GET", "POST", "PUT", "HEAD"});
  h.require("url");
  if (h.has("url")) {
    // A path is on the head's serve port (the lane being proven); anything else is a full URL.
    if (h.value("url").IsScalar() && h.value("url").Scalar().starts_with("/")) h.str("url", g.url);
    else h.url("url", g.url);
  }
  h.str("body", g.body);
  h.integer("expect_status", g.expect_status, 100, 599);
  h.str("expect_body_contains", g.expect_body_contains);
  if (h.has("expect_json")) {
    MapReader j(ctx, h.value("expect_json"), h.child_path("expect_json"), h.key_mark("expect_json"));
    if (j.ok()) {
      j.require("path");
      if (j.str("path", g.expect_json_path) && j.has("path")) {
        try {
          (void)nlohmann::json::json_pointer(g.expect_json_path);
        } catch (const nlohmann::json::exception&) {
          ctx.error(j.value("path"), "'" + j.child_path("path") + "' is '" + g.expect_json_path +
                                         "', not a JSON Pointer; expected one like /choices/0/message/content");
        }
      }
      j.require("equals");
      if (j.has("equals")) {
        auto text = yaml::to_json_text(j.value("equals"));
        if (!text) ctx.error(j.value("equals"), "'" + j.child_path("equals") + "' cannot be read as a JSON value");
        else g.expect_json_equals = *text;
      }
      j.finish();
    }
  }
  h.duration("timeout", g.timeout);
  h.finish();
}

void read_command_gate(Context& ctx, MapReader& entry, CustomGate& g) {
  g.command.timeout = g.timeout;
  read_command(ctx, entry.value("command"), entry.child_path("command"), g.command, [&g](MapReader& c) {
    c.integer("expect_exit", g.expect_exit, 0, 255);
    c.str("expect_output_contains", g.expect_output_contains);
  });
  g.timeout = g.command.timeout;
}

}  // namespace

void read_custom_gates(Context& ctx, MapReader& gates, std::vector<CustomGate>& out) {
  if (!gates.has("custom")) return;
  YAML::Node list = gates.value("custom");
  if (!list.IsSequence()) {
    ctx.error(list.IsNull() ? gates.key_mark("custom") : ctx.mark_of(list),
              "'gates.custom' must be a list of gates ({name, http: {...}} or {name, command: {...}}), got " +
                  std::string(yaml::kind_name(list)));
    return;
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = "gates.custom[" + std::to_string(i) + "]";
    MapReader e(ctx, list[i], path, ctx.mark_of(list[i]));
    if (!e.ok()) continue;
    CustomGate g;
    g.mark = e.mark();
    e.require("name");
    if (e.str("name", g.name) && e.has("name") && !gate_name_ok(g.name))
      ctx.error(e.value("name"), "'" + e.child_path("name") + "' is '" + g.name +
                                     "'; expected 1 to 63 of a-z, 0-9, '-' and '_' (it becomes the step gate.custom.<name>)");
    const bool http = e.has("http"), command = e.has("command");
    if (http == command)
      ctx.error(e.mark(), "'" + path + "' must have exactly one of 'http' (a request to check) or 'command' (an argv an agent "
                                        "runs), " + (http ? "got both" : "got neither"));
    else if (http) {
      g.kind = CustomGate::Kind::http;
      read_http(ctx, e, g);
    } else {
      g.kind = CustomGate::Kind::command;
      read_command_gate(ctx, e, g);
    }
    e.finish();
    out.push_back(std::move(g));
  }
}

}  // namespace tandem
