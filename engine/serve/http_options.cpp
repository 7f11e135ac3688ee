#include "http_options.hpp"

#include "tandem/units.hpp"

namespace tandem::engine::serve {

api::HttpServerOptions http_options(const ServeConfig& cfg, unsigned threads,
                                    std::function<void(const std::string&)> log, NameSettings name_settings) {
  api::HttpServerOptions o;
  o.address = cfg.host;
  o.port = static_cast<std::uint16_t>(cfg.port);
  o.threads = threads;
  // The fallbacks are never taken after check_serve_config; they keep the defaults if it was skipped.
  o.header_timeout = parse_duration(cfg.http_header_timeout).value_or(o.header_timeout);
  o.idle_timeout = parse_duration(cfg.http_idle_timeout).value_or(o.idle_timeout);
  o.body_timeout = parse_duration(cfg.http_body_timeout).value_or(o.body_timeout);
  o.body_limit = static_cast<std::size_t>(parse_size(cfg.max_request_body).value_or(o.body_limit));
  o.max_connections = static_cast<unsigned>(cfg.max_connections);
  o.max_connections_per_client = static_cast<unsigned>(cfg.max_connections_per_client);
  o.log = std::move(log);
  o.name_settings = std::move(name_settings);
  return o;
}

}  // namespace tandem::engine::serve
