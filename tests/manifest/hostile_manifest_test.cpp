// Hostile manifests (issue 18): names that would be paths or unit syntax, URLs that do not parse,
// tags, a second document, nesting that would exhaust a recursive parser, control bytes, and
// files that are not files. Each is an error at its line and column; none blocks, crashes or
// reads without bound.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "tandem/manifest.hpp"
#include "tandem/names.hpp"

using namespace tandem;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// Line numbers in the expectations below refer to this text; keep it stable.
const std::string kBase = R"(apiVersion: tandem/v1
kind: Bind
metadata:
  name: t
nodes:
  - {name: a, address: 10.1.0.1, role: head}
  - {name: b, address: 10.1.0.2, role: worker}
engine:
  binary: /usr/bin/tandem-serve
  model_dir: /m
  run_user: svc
  cache_dir: /home/svc/.cache
  serve:
    port: 8000
    tensor_parallel_size: 2
    gpu_memory_utilization: 0.9
gates: {tool_call: false}
deadman: {delay: 2h}
rollback:
  commands: [{run: [/bin/true]}]
  verify:
    url: "http://10.1.0.1:8000/health"
)";

std::string with(const std::string& from, const std::string& to) {
  std::string s = kBase;
  auto at = s.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, "test bug: '" << from << "' not in the base manifest");
  s.replace(at, from.size(), to);
  return s;
}

// A YAML double-quoted scalar holding exactly `s`.
std::string yaml_quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += std::string("\\") + c;
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out + "\"";
}

std::string errors_of(const std::string& text) {
  auto r = load_manifest_text(text, "m.yaml");
  CHECK_FALSE(r.manifest.has_value());
  return format_diagnostics(r.errors);
}

const std::string kLabel = "; expected a lowercase DNS label (a-z, 0-9, '-'; at most 63 characters)\n";
const std::string kUrl = "; expected an http:// URL like http://10.0.0.1:8000/health\n";

struct TempDir {
  fs::path p = fs::temp_directory_path() / ("tandem-hostile-manifest-" + std::to_string(::getpid()));
  TempDir() {
    fs::remove_all(p);
    fs::create_directories(p);
  }
  ~TempDir() { fs::remove_all(p); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(p / name, std::ios::binary) << text;
    return (p / name).string();
  }
};

// The one error of a file that cannot be read: no line, the path as the file.
std::string file_error(const std::string& path) {
  auto r = load_manifest_file(path);
  CHECK_FALSE(r.manifest);
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].line == 0);
  return r.errors[0].str();
}

}  // namespace

TEST_CASE("the base manifest of these cases is valid") {
  auto r = load_manifest_text(kBase, "m.yaml");
  INFO(format_diagnostics(r.errors));
  REQUIRE(r.manifest);
  CHECK(r.manifest->name == "t");
}

TEST_CASE("every example manifest in manifests/ still validates") {
  int seen = 0;
  for (const auto& e : fs::directory_iterator(fs::path(TANDEM_SOURCE_DIR) / "manifests")) {
    if (e.path().extension() != ".yaml") continue;
    auto r = load_manifest_file(e.path().string());
    INFO(e.path().string() << "\n" << format_diagnostics(r.errors));
    CHECK(r.errors.empty());
    CHECK(r.manifest.has_value());
    ++seen;
  }
  CHECK(seen >= 2);
}

// ---- metadata.name ----------------------------------------------------------------------------

TEST_CASE("metadata.name must be a DNS label, like node names") {
  for (const std::string& bad : std::vector<std::string>{"../../../../tmp/x", "a/b", ";$(id)", "$(reboot)", "x.service", "tandem-deadman-x.timer",
                                 "..", ".", "-a", "a-", "Upper", "a_b", "a b", "foo@bar", std::string(64, 'a')}) {
    INFO(bad);
    CHECK(errors_of(with("name: t\n", "name: " + yaml_quoted(bad) + "\n")) ==
          "m.yaml:4:9: 'metadata.name' is '" + bad + "'" + kLabel);
  }
}

TEST_CASE("metadata.name with a newline or unit syntax: the message stays one line") {
  CHECK(errors_of(with("name: t\n", "name: \"x\\n[Service]\\nExecStart=/bin/sh\"\n")) ==
        "m.yaml:4:9: 'metadata.name' is 'x\\n[Service]\\nExecStart=/bin/sh'" + kLabel);
}

TEST_CASE("metadata.name empty, or given as nothing") {
  CHECK(errors_of(with("name: t\n", "name: \"\"\n")) == "m.yaml:4:9: 'metadata.name' is empty" + kLabel);
  CHECK(errors_of(with("name: t\n", "name:\n")) == "m.yaml:4:3: 'metadata.name' must be a string, got nothing\n");
}

TEST_CASE("good bind names, and the default when there is none") {
  for (const std::string& good : std::vector<std::string>{"a", "glm53-flash-dflash2", "0", std::string(63, 'z')}) {
    auto r = load_manifest_text(with("name: t\n", "name: " + good + "\n"), "m.yaml");
    INFO(good << "\n" << format_diagnostics(r.errors));
    REQUIRE(r.manifest);
    CHECK(r.manifest->name == good);
  }
  auto r = load_manifest_text(with("metadata:\n  name: t\n", ""), "m.yaml");
  REQUIRE(r.manifest);
  CHECK(r.manifest->name == "bind");  // what the agent's dead-man falls back to as well
}

TEST_CASE("node names with a newline are quoted escaped, on one line") {
  CHECK(errors_of(with("{name: a,", "{name: \"a\\nb\",")) == "m.yaml:6:12: 'nodes[0].name' is 'a\\nb'" + kLabel);
}

// ---- URLs -------------------------------------------------------------------------------------

TEST_CASE("rollback.verify.url: each malformed URL is refused with what is wrong") {
  const std::pair<std::string, std::string> cases[] = {
      {"http://[::1", "an unclosed '[' in the host (an IPv6 host is written like [::1])"},
      {"http://exa mple/ x", "a space at position 11 (a space in a URL is written %20)"},
      {"http://:99999999/", "no host"},
      {"http://", "no host"},
      {"http://x:99999999/", "port '99999999' is not 1 to 65535"},
      {"http://x:0/", "port '0' is not 1 to 65535"},
      {"http://[::g]:80/", "host '[::g]' is not a valid IPv6 address"},
      {"ftp://10.0.0.1/health", "scheme 'ftp' is not http or https"},
      {"10.0.0.1:8000/health", "not a URL (no scheme://)"},
      {"http://admin:pw@10.1.0.1/", "user information before '@' (credentials are not taken in these URLs)"},
      {"http://h/a\nGET /x", "a control character (0x0A) at position 11"},
      {"https://old-lane.example/health", "https is not supported (the check speaks plain HTTP, as serving ports do)"},
  };
  for (const auto& [url, why] : cases) {
    INFO(url);
    CHECK(errors_of(with("\"http://10.1.0.1:8000/health\"", yaml_quoted(url))) ==
          "m.yaml:22:10: 'rollback.verify.url' is '" + printable(url) + "': " + why + kUrl);
  }
}

TEST_CASE("rollback.verify.url: good URLs stay valid, IPv6 included") {
  for (const std::string good : {"http://[::1]:8000/health", "http://10.1.0.1:8000/health", "HTTP://old-lane.example/health",
                                 "http://localhost/v1/models?ready=1", "http://[2001:db8::7]/"}) {
    auto r = load_manifest_text(with("\"http://10.1.0.1:8000/health\"", yaml_quoted(good)), "m.yaml");
    INFO(good << "\n" << format_diagnostics(r.errors));
    REQUIRE(r.manifest);
    CHECK(r.manifest->rollback.verify.url == good);
  }
}

// ---- YAML tags --------------------------------------------------------------------------------

TEST_CASE("explicit YAML tags are refused where they are written") {
  CHECK(errors_of(with("run_user: svc", "run_user: !python/object:os.system 4")) ==
        "m.yaml:11:13: the YAML tag '!python/object:os.system' is not allowed; expected a plain value (a manifest takes "
        "no tags)\n");
  CHECK(errors_of(with("run_user: svc", "run_user: !!str 4")) ==
        "m.yaml:11:13: the YAML tag '!!str' is not allowed; expected a plain value (a manifest takes no tags)\n");
  CHECK(errors_of(with("run_user: svc", "run_user: ! svc")) ==
        "m.yaml:11:13: the YAML tag '!' is not allowed; expected a plain value (a manifest takes no tags)\n");
  // On a key, on a collection, and after an anchor: every tag is reported, in file order.
  std::string text = with("kind: Bind", "!!str kind: Bind");
  text.replace(text.find("  serve:\n"), 9, "  serve: !!map\n");
  text.replace(text.find("commands: ["), 11, "commands: &c !seq [");
  CHECK(errors_of(text) ==
        "m.yaml:2:1: the YAML tag '!!str' is not allowed; expected a plain value (a manifest takes no tags)\n"
        "m.yaml:13:10: the YAML tag '!!map' is not allowed; expected a plain value (a manifest takes no tags)\n"
        "m.yaml:20:13: the YAML tag '!seq' is not allowed; expected a plain value (a manifest takes no tags)\n");
}

TEST_CASE("a byte order mark does not shift where tags are looked for") {
  CHECK(load_manifest_text("\xEF\xBB\xBF" + kBase, "m.yaml").manifest.has_value());
  CHECK(errors_of("\xEF\xBB\xBF" + with("run_user: svc", "run_user: ! svc")) ==
        "m.yaml:11:13: the YAML tag '!' is not allowed; expected a plain value (a manifest takes no tags)\n");
}

TEST_CASE("anchors and aliases without tags are still plain YAML") {
  auto r = load_manifest_text(with("run_user: svc", "run_user: &u svc\n  cache_dir_owner_note: *u"), "m.yaml");
  CHECK(format_diagnostics(r.errors).find("unknown key 'cache_dir_owner_note'") != std::string::npos);
  CHECK(format_diagnostics(r.errors).find("tag") == std::string::npos);
}

// ---- one document -----------------------------------------------------------------------------

TEST_CASE("a second YAML document is an error at the line where it starts") {
  const std::string second = "m.yaml:23:1: a second YAML document starts here; a manifest is exactly one document "
                             "(remove this '---' and what follows, or give the second bind its own file)\n";
  CHECK(errors_of(kBase + "---\napiVersion: tandem/v1\nkind: Bind\n") == second);
  CHECK(errors_of(kBase + "--- # nothing after it\n") == second);
  // Whatever the later document holds is not read at all, a syntax error or a deep nest included.
  CHECK(errors_of(kBase + "---\n" + std::string(100000, '[')) == second);
  CHECK(errors_of(kBase + "...\nrollback: {}\n") ==
        "m.yaml:24:1: a second YAML document starts here; a manifest is exactly one document "
        "(remove this '---' and what follows, or give the second bind its own file)\n");
}

TEST_CASE("one document with an explicit start or end marker is fine") {
  CHECK(load_manifest_text("---\n" + kBase, "m.yaml").manifest.has_value());
  CHECK(load_manifest_text(kBase + "...\n", "m.yaml").manifest.has_value());
  CHECK(load_manifest_text("---\n" + kBase + "...\n# trailing comment\n", "m.yaml").manifest.has_value());
}

// ---- nesting ----------------------------------------------------------------------------------

TEST_CASE("100,000 nested '[' are refused at the bracket that goes too deep, quickly and without a crash") {
  const auto start = Clock::now();
  CHECK(errors_of(std::string(100000, '[')) ==
        "m.yaml:1:65: YAML nesting deeper than 64 levels (this '[' opens level 65); expected at most 64\n");
  CHECK(errors_of(std::string(100000, '{')) ==
        "m.yaml:1:65: YAML nesting deeper than 64 levels (this '{' opens level 65); expected at most 64\n");
  CHECK(Clock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("deep nesting inside the manifest is reported at its own line and column") {
  // Levels: the top map, engine, serve, then the list: its 62nd '[' opens level 65.
  const std::string line = "    default_chat_template_kwargs: " + std::string(100000, '[');
  CHECK(errors_of(with("    port: 8000\n", "    port: 8000\n" + line + "\n")) ==
        "m.yaml:15:" + std::to_string(line.find('[') + 62) +
            ": YAML nesting deeper than 64 levels (this '[' opens level 65); expected at most 64\n");
}

TEST_CASE("anchors and tags in front of brackets do not hide a level") {
  std::string anchored;
  for (int i = 0; i < 100; ++i) anchored += "&a" + std::to_string(i) + " {k: ";
  CHECK(errors_of(anchored).find("m.yaml:1:") == 0);
  CHECK(errors_of(anchored).find("YAML nesting deeper than 64 levels (this '{' opens level 65)") != std::string::npos);
}

TEST_CASE("deep block nesting counts too: lists of lists and maps of maps") {
  std::string dashes;
  for (int i = 0; i < 100000; ++i) dashes += "- ";
  CHECK(errors_of(dashes + "x\n") ==
        "m.yaml:1:129: YAML nesting deeper than 64 levels (this list opens level 65); expected at most 64\n");
  std::string maps;
  for (int i = 0; i < 70; ++i) maps += std::string(static_cast<size_t>(i), ' ') + "k:\n";
  CHECK(errors_of(maps) ==
        "m.yaml:65:65: YAML nesting deeper than 64 levels (this map opens level 65); expected at most 64\n");
}

TEST_CASE("an unclosed bracket is reported where it opens, with where the parser gave up") {
  CHECK(errors_of(with("  serve:\n    port: 8000\n", "  serve: {port: 8000,\n")) ==
        "m.yaml:13:10: YAML syntax error: this '{' is not closed by a matching '}' (end of map flow not found at line "
        "15 col 27)\n");
  CHECK(errors_of(std::string(50, '[') + "1" + std::string(49, ']')) ==
        "m.yaml:1:1: YAML syntax error: this '[' is not closed by a matching ']' (end of sequence flow not found)\n");
}

TEST_CASE("a billion-laughs alias tree in chat-template kwargs is refused, not expanded") {
  std::string kw = "    default_chat_template_kwargs:\n      l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 9; ++i) {
    std::string prev = "*l" + std::to_string(i - 1);
    kw += "      l" + std::to_string(i) + ": &l" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) kw += (k ? ", " : "") + prev;
    kw += "]\n";
  }
  const auto start = Clock::now();
  CHECK(errors_of(with("    port: 8000\n", "    port: 8000\n" + kw)) ==
        "m.yaml:16:7: 'engine.serve.default_chat_template_kwargs' is nested too deeply or too large (or refers to "
        "itself through an alias) or holds text that is not UTF-8; expected a small map like {enable_thinking: false}\n");
  CHECK(Clock::now() - start < std::chrono::seconds(5));
}

// ---- bytes ------------------------------------------------------------------------------------

TEST_CASE("a NUL byte is an error at its line and column, in one message") {
  CHECK(errors_of(with("run_user: svc", std::string("run_user: s\0vc", 14))) ==
        "m.yaml:11:14: the manifest contains a NUL byte; expected text\n");
  CHECK(errors_of(std::string("\0", 1)) == "m.yaml:1:1: the manifest contains a NUL byte; expected text\n");
}

TEST_CASE("other control characters are errors too (an ESC could rewrite the operator's terminal)") {
  CHECK(errors_of(with("run_user: svc", "run_user: s\x1b[2Jvc")) ==
        "m.yaml:11:14: the manifest contains the control character 0x1B; expected text (printable characters, tabs "
        "and line breaks)\n");
  CHECK(load_manifest_text(with("run_user: svc", "run_user: svc\r"), "m.yaml").manifest.has_value());  // CRLF is text
}

// ---- files that are not manifests -------------------------------------------------------------

TEST_CASE("a FIFO is refused at once, not waited on") {
  TempDir t;
  const std::string fifo = (t.p / "pipe.yaml").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto pending = std::async(std::launch::async, [&] { return load_manifest_file(fifo); });
  if (pending.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    // Unblock the reader so the test ends (and fails) instead of hanging.
    int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
    FAIL("load_manifest_file blocked on a FIFO");
  }
  auto r = pending.get();
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].str() == fifo + ": the manifest is a FIFO (named pipe), not a regular file; expected a YAML file");
}

TEST_CASE("a directory is not a regular file (not 'the manifest is empty')") {
  TempDir t;
  CHECK(file_error(t.p.string()) == t.p.string() + ": the manifest is a directory, not a regular file; expected a YAML file");
}

TEST_CASE("/dev/zero is refused before anything is read") {
  const auto start = Clock::now();
  CHECK(file_error("/dev/zero") == "/dev/zero: the manifest is a character device, not a regular file; expected a YAML file");
  CHECK(Clock::now() - start < std::chrono::seconds(1));
}

TEST_CASE("a file over 1 MiB is refused by its size; one of exactly 1 MiB is read") {
  TempDir t;
  std::string big = kBase + "#" + std::string(kMaxManifestBytes - kBase.size() - 2, 'x') + "\n";
  REQUIRE(big.size() == kMaxManifestBytes);
  auto at_cap = load_manifest_file(t.write("cap.yaml", big));
  INFO(format_diagnostics(at_cap.errors));
  CHECK(at_cap.manifest.has_value());
  const std::string over = t.write("over.yaml", big + "\n");
  CHECK(file_error(over) == over + ": the manifest is 1048577 bytes; expected at most 1048576 bytes (1 MiB)");
}

TEST_CASE("text over 1 MiB that does not come from a file (the agent's copy) is refused too") {
  auto r = load_manifest_text(kBase + "#" + std::string(kMaxManifestBytes, 'x'), "m.yaml");
  CHECK_FALSE(r.manifest);
  CHECK(format_diagnostics(r.errors) == "m.yaml: the manifest is " + std::to_string(kBase.size() + 1 + kMaxManifestBytes) +
                                            " bytes; expected at most 1048576 bytes (1 MiB)\n");
}

TEST_CASE("a NUL byte in a file is reported at its line and column") {
  TempDir t;
  const std::string path = t.write("nul.yaml", with("run_user: svc", std::string("run_user: s\0vc", 14)));
  auto r = load_manifest_file(path);
  CHECK_FALSE(r.manifest);
  CHECK(format_diagnostics(r.errors) == path + ":11:14: the manifest contains a NUL byte; expected text\n");
}

TEST_CASE("the bytes read are handed back, so the controller forwards exactly what was validated") {
  TempDir t;
  auto r = load_manifest_file(t.write("m.yaml", kBase));
  REQUIRE(r.manifest);
  CHECK(r.text == kBase);
}
