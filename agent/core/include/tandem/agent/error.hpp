// Agent steps fail with the project's Error (tandem/result.hpp): `where` is the host or real path
// involved, the message says what went wrong with the errno text, and `evidence` holds what the
// step saw before failing (a step that fails still says what it saw, e.g. both MemAvailable numbers).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "tandem/result.hpp"

namespace tandem::agent {

// Error from the current errno (or err): where = file, message = "what: errno text".
Error sys_error(std::string file, std::string what);
Error sys_error(std::string file, std::string what, int err);
Error plain_error(std::string file, std::string what);

// The step's observations travel as JSON text in Error::evidence; these read and write them.
void set_evidence(Error& e, const nlohmann::json& evidence);
nlohmann::json evidence(const Error& e);  // null when none

// {"file", "what", "message", "errno", "errno_text", "evidence", "cause"}: the journal and the HTTP
// answers carry this; error_from_json reads it back (a replayed failure says the same thing).
nlohmann::json to_json(const Error& e);
Error error_from_json(const nlohmann::json& j);

}  // namespace tandem::agent
