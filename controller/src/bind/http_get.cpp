#include "http_get.hpp"

#include "endpoint/http_client.hpp"
#include "tandem/url.hpp"

namespace tandem::ctl {

Result<HttpAnswer> http_get(const std::string& url, std::chrono::milliseconds timeout) {
  // The project's one URL reader (tandem/url.hpp): a bracketed IPv6 host reaches the resolver
  // without its brackets, and a URL the manifest accepted is split the same way here.
  auto parsed = parse_http_url(url);
  if (!parsed) return parsed.error().with_context("'" + url + "'");
  if (parsed->scheme != "http") return Error{"'" + url + "': expected http://HOST:PORT/PATH (plain HTTP)"};
  // The one client bounds each step: resolving and connecting by `timeout`, then the request and
  // its answer by `timeout` again.
  httpc::Options o;
  o.connect_timeout = timeout;
  o.io_timeout = timeout;
  o.response_limit = 16 * 1024 * 1024;
  auto r = httpc::get(httpc::Url{parsed->host, parsed->port_or_default(), {}}, parsed->target, o);
  if (!r) return r.error();
  return HttpAnswer{r->status, std::move(r->body)};
}

}  // namespace tandem::ctl
