// response_format json_schema: the JSON-schema grammar compiler, then the byte machine that the
// token mask is built on. The input is SCHEMA_JSON, a NUL byte, then bytes a model might write.
// The machine must accept only what it says it accepts: a value it calls finished parses as
// JSON, and its shortest completion really completes what was fed so far.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.hpp"
#include "grammar.hpp"
#include "json_machine.hpp"

using tandem::engine::structured::JsonMachine;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto nul = input.find('\0');
  const auto schema = nlohmann::json::parse(input.substr(0, nul), nullptr, false);
  if (schema.is_discarded()) return 0;
  auto grammar = tandem::engine::structured::schema_grammar(schema);
  if (!grammar) return 0;
  if (nul == std::string_view::npos) return 0;
  const std::string_view output = input.substr(nul + 1);

  JsonMachine m(grammar.value());
  std::string fed;
  for (char c : output) {
    const auto b = static_cast<unsigned char>(c);
    const int before = m.min_close();
    const auto mark = m.checkpoint();
    if (!m.feed(b)) {
      tandem::fuzz::check(m.min_close() == before, "a refused byte changed the state");
      continue;
    }
    // The token mask tries bytes and rolls back; a rolled-back byte must leave no trace.
    m.rollback(mark);
    tandem::fuzz::check(m.min_close() == before, "rollback did not restore the state");
    tandem::fuzz::check(m.feed(b), "a byte accepted once is refused after a rollback");
    m.commit();
    fed += c;
  }
  if (m.accepting()) {
    // The whole text is one JSON value (trailing whitespace allowed).
    tandem::fuzz::check(!nlohmann::json::parse(fed, nullptr, false).is_discarded(), "accepted text is not JSON");
  }
  JsonMachine done(m);
  const std::string rest = done.shortest_completion();
  tandem::fuzz::check(static_cast<int>(rest.size()) == m.min_close(), "shortest completion is not min_close bytes");
  tandem::fuzz::check(done.feed(rest), "the shortest completion is refused");
  tandem::fuzz::check(done.accepting(), "the shortest completion does not complete the value");
  const std::string whole = fed + rest;
  tandem::fuzz::check(!nlohmann::json::parse(whole, nullptr, false).is_discarded(), "a completed value is not JSON");
  return 0;
}
