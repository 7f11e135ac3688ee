// The gates that prove a new lane serves: each is one question put to the live OpenAI endpoint,
// run in the order `tandemctl plan` lists them (gate.health, gate.models, ...). `bind` runs them
// after serve.wait and rolls back when one fails; `tandemctl gates` runs them on demand.
#pragma once
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/manifest.hpp"
#include "tandem/result.hpp"

namespace tandem::gates {

struct GateResult {
  std::string name;    // as in the plan, without "gate.": health, models, chat, tool_call, ...
  bool passed = false;
  std::string detail;  // one line a person can act on: what was asked, what came back
  double seconds = 0;
  nlohmann::json evidence = nlohmann::json::object();  // what the server said, for the bind report
  bool skipped = false;  // not run here (a command gate without agents); neither passed nor failed
};

struct GateReport {
  std::string url;
  std::vector<GateResult> gates;
  bool passed() const;  // every gate that ran passed (and at least one ran)
  nlohmann::json to_json() const;
};

struct GateOptions {
  std::function<void(const std::string& name)> on_start;  // a gate is about to run (live display)
  // Longest silence allowed while waiting for an answer; generous, since a cold engine may
  // compile or page weights in on the first request.
  std::chrono::milliseconds request_timeout = std::chrono::minutes(5);
  // The long-context gate's prefill may take minutes at 100k tokens.
  std::chrono::milliseconds long_context_timeout = std::chrono::minutes(20);
  // Runs a command gate's argv through the agents of the nodes it names: {node: outcome}. Unset
  // (`tandemctl gates`, which speaks only HTTP): command gates are skipped, and say so.
  std::function<Result<nlohmann::json>(const CustomGate&)> run_command;
};

// http://<head address>:<serve.port>, where bind finds the head's API.
std::string endpoint_url(const Manifest& m);
// The name /v1/models must list: served_model_name, or the model path when it is not set.
std::string served_model(const Manifest& m);

// Runs every gate the manifest turns on, in plan order, reporting each as it ends. A failed gate
// does not stop the others (the report shows all of them). Errors only for a bad base_url.
Result<GateReport> run_gates(const Manifest& m, const std::string& base_url,
                             std::function<void(const GateResult&)> on_result, const GateOptions& options = {});

}  // namespace tandem::gates
