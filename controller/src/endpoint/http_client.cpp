// The serving port's base URL, and requests against it through the one HTTP client, TLS off.
#include "http_client.hpp"

#include "tandem/url.hpp"

namespace tandem::httpc {

// Split by the project's one URL reader (tandem/url.hpp); this adds only what a base URL of an
// OpenAI-compatible endpoint needs: plain HTTP, and the path kept as a prefix for every target.
Result<Url> Url::parse(const std::string& text) {
  auto parsed = parse_http_url(text);
  if (!parsed) return parsed.error().with_context("'" + text + "'");
  if (parsed->scheme == "https")
    return Error{"'" + text + "': https is not supported here; the serving port speaks plain HTTP (http://HOST:PORT)"};
  Url u;
  u.host = parsed->host;
  u.port = parsed->port_or_default();
  u.prefix = parsed->target;
  while (!u.prefix.empty() && u.prefix.back() == '/') u.prefix.pop_back();
  return u;
}

std::string Url::str() const { return http_base_url(host, port) + prefix; }

namespace {

Result<net::HttpClient> plain_client(const Options& o) {
  net::ClientOptions c;
  c.tls = false;
  c.connect_timeout = o.connect_timeout;
  c.io_timeout = o.io_timeout;
  c.response_limit = o.response_limit;
  return net::HttpClient::create(c);
}

// The request target under the URL's prefix; "/" when both are empty (a bare http://HOST:PORT).
std::string under_prefix(const Url& url, const std::string& target) {
  std::string t = url.prefix + target;
  return t.empty() ? "/" : t;
}

}  // namespace

Result<Reply> request(const Url& url, const std::string& method, const std::string& target, const std::string& body,
                      const Options& o) {
  auto client = plain_client(o);
  if (!client) return client.error();
  return client->request({url.host, url.port, {}}, method, under_prefix(url, target), body, o.io_timeout);
}

Result<StreamEnd> stream_sse(const Url& url, const std::string& target, const std::string& body,
                             const std::function<bool(const std::string&)>& on_event, const Options& o) {
  auto client = plain_client(o);
  if (!client) return client.error();
  return client->stream_sse({url.host, url.port, {}}, under_prefix(url, target), body, on_event, o.io_timeout,
                            o.total_timeout);
}

}  // namespace tandem::httpc
