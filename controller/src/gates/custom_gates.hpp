// The manifest's own gates (gates.custom): an HTTP request whose reply is judged by status, a
// substring and a JSON value; or an argv that the agents of the named nodes run as declared,
// judged by exit code and output. run_gates runs them after the built-in gates.
#pragma once
#include <nlohmann/json.hpp>

#include "gates.hpp"
#include "endpoint/http_client.hpp"

namespace tandem::gates {

// `head`: the lane's endpoint (a gate url that is a path is sent there).
GateResult custom_http_gate(const CustomGate& c, const httpc::Url& head);

// Judges a command gate from each node's outcome ({node: {exit_code, timed_out, output_tail,
// error, ...}}, as the agent's POST /v1/gates/run answers) or from why it could not run.
GateResult judge_command_gate(const CustomGate& c, const Result<nlohmann::json>& outcomes);

}  // namespace tandem::gates
