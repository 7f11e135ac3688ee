// serve/ names a setting by its field in backquotes; tandem-serve's command line shows the flag the
// operator typed instead. Beside the serve round trip: both read tandem-serve's own flag table.
#include <doctest/doctest.h>

#include <CLI/CLI.hpp>

#include "cli/flag_names.hpp"
#include "cli/serve_flags.hpp"

using tandem::engine::name_flags;

TEST_CASE("a backquoted setting becomes tandem-serve's flag; anything else stays as written") {
  CLI::App app{"tandem-serve"};
  tandem::engine::ServeConfig cfg;
  tandem::engine::add_serve_flags(app, cfg);
  CHECK(name_flags("`max_model_len` 9 exceeds 8", app) == "--max-model-len 9 exceeds 8");
  CHECK(name_flags("lower `max_num_seqs` or raise `kv_cache_memory`", app) ==
        "lower --max-num-seqs or raise --kv-cache-memory");
  CHECK(name_flags("`device` cuda: no; run `device` cpu", app) == "--device cuda: no; run --device cpu");
  // Not a flag of tandem-serve: the field's name is the best the message has.
  CHECK(name_flags("`max_num_batched_tokens` must be at least 1", app) == "`max_num_batched_tokens` must be at least 1");
  // Not a setting's spelling at all (a quoted template, a flag already), and an unclosed quote.
  CHECK(name_flags("use `{{ x }}` or `--device`", app) == "use `{{ x }}` or `--device`");
  CHECK(name_flags("a ` alone `device", app) == "a ` alone `device");
  CHECK(name_flags("", app).empty());
}

TEST_CASE("every setting the HTTP replies and start-up lines name is one of tandem-serve's flags") {
  // The fields api/http_server.cpp, serve/chat_route.cpp, serve/tokenize_route.cpp and the
  // runtime's pool sizing name: a renamed flag would leave the operator reading a field name.
  CLI::App app{"tandem-serve"};
  tandem::engine::ServeConfig cfg;
  tandem::engine::add_serve_flags(app, cfg);
  for (const char* field : {"chat_template", "enable_auto_tool_choice", "tool_call_parser", "max_connections",
                            "max_connections_per_client", "max_request_body", "max_model_len", "max_num_seqs",
                            "kv_cache_memory", "kv_cache_dtype", "gpu_memory_utilization"}) {
    INFO(field);
    std::string flag = std::string("--") + field;
    for (char& c : flag) c = c == '_' ? '-' : c;
    CHECK(name_flags(std::string("(`") + field + "`)", app) == "(" + flag + ")");
  }
}
