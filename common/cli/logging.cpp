#include "logging.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>

namespace tandem::cli {

namespace {
constexpr std::array<const char*, 6> kLevels = {"trace", "debug", "info", "warn", "error", "off"};

// %* in a pattern: the message as the inside of a JSON string, so a quote, backslash or control
// character in a message (a path, a peer's error text) cannot break a --log-format json line.
class JsonMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    static constexpr char kHex[] = "0123456789abcdef";
    for (const char c : msg.payload) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        dest.push_back('\\');
        dest.push_back(c);
      } else if (u < 0x20) {
        const char esc[] = {'\\', 'u', '0', '0', kHex[u >> 4], kHex[u & 15]};
        dest.append(esc, esc + sizeof esc);
      } else {
        dest.push_back(c);
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JsonMessage>(); }
};
}  // namespace

void add_log_flags(CLI::App& app, LogOptions& o) {
  app.add_flag("-v,--verbose", o.verbose, "More log detail: -v debug, -vv trace");
  app.add_option("--log-level", o.level, "Log level: trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  app.add_option("--log-format", o.format, "Log lines as text for people or json (one object per line)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
}

void setup_logging(const std::string& program, const LogOptions& o) {
  const auto at = std::find(kLevels.begin(), kLevels.end(), o.level);
  long index = at == kLevels.end() ? 2 : at - kLevels.begin();
  if (o.level != "off") index = std::max(0L, index - o.verbose);
  // stderr, unsynchronised sink under spdlog's own logger mutex: output is for people and
  // journald, and never mixes with the JSON a command prints on stdout.
  auto logger = std::make_shared<spdlog::logger>(program, std::make_shared<spdlog::sinks::stderr_sink_mt>());
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  if (o.format == "json")
    formatter->add_flag<JsonMessage>('*').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","program":"%n","level":"%l","message":"%*"})");
  else
    formatter->set_pattern("%Y-%m-%dT%H:%M:%S.%e %n %l: %v");
  logger->set_formatter(std::move(formatter));
  logger->set_level(spdlog::level::from_str(kLevels[static_cast<std::size_t>(index)]));
  logger->flush_on(spdlog::level::trace);  // a crash loses no line; volume is start-up and errors
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace tandem::cli
