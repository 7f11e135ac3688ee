// The controller's view of an OpenAI-compatible endpoint (tandem-serve, vLLM, SGLang): a base URL
// with an optional path prefix, and plain-HTTP requests and Server-Sent Event streams against it
// (gates and bench time them). The requests go through the project's one HTTP client
// (common/net/include/tandem/net/http_client.hpp) with TLS off: the serving port is not the
// agent's mTLS API.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "tandem/net/http_client.hpp"
#include "tandem/result.hpp"

namespace tandem::httpc {

// http://host:port[/prefix]; the prefix (e.g. a proxy's "/lane-a") is put before every target.
struct Url {
  std::string host;
  std::uint16_t port = 80;
  std::string prefix;  // no trailing '/'; empty for the root

  // "http://10.0.0.1:8888" -> {10.0.0.1, 8888, ""}. https:// and anything without a host are errors.
  static Result<Url> parse(const std::string& text);
  std::string str() const;  // the canonical form, for messages and reports
};

struct Options {
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(5);
  // Whole request and reply for plain requests; for streams, the longest silence allowed between
  // two reads (a long prefill before the first token is silence too).
  std::chrono::milliseconds io_timeout = std::chrono::seconds(120);
  std::chrono::milliseconds total_timeout = std::chrono::minutes(30);  // streams: the whole answer
  std::size_t response_limit = 64 * 1024 * 1024;
};

using Reply = net::ClientResponse;  // {status, body}

// One request, one connection. A non-2xx status is still a reply; an error value means no HTTP
// answer came back, and says where and at which step ("127.0.0.1:8888: connecting: Connection refused").
Result<Reply> request(const Url& url, const std::string& method, const std::string& target,
                      const std::string& body = {}, const Options& options = {});
inline Result<Reply> get(const Url& url, const std::string& target, const Options& options = {}) {
  return request(url, "GET", target, {}, options);
}
inline Result<Reply> post_json(const Url& url, const std::string& target, const std::string& body,
                               const Options& options = {}) {
  return request(url, "POST", target, body, options);
}

using StreamEnd = net::StreamEnd;
using SseDecoder = net::SseDecoder;

// POST body to target and read the reply as Server-Sent Events. on_event gets each event's data
// (the lines after "data: ", joined by '\n') as soon as it is parsed, "[DONE]" excluded; return
// false to stop reading. A connection that breaks mid-stream is an error value that says how many
// events came first.
Result<StreamEnd> stream_sse(const Url& url, const std::string& target, const std::string& body,
                             const std::function<bool(const std::string& data)>& on_event,
                             const Options& options = {});

}  // namespace tandem::httpc
