// A plain-HTTP client for OpenAI-compatible endpoints (tandem-serve, vLLM, SGLang): one blocking
// call per request on a private io_context, every step bounded by a deadline, and a streaming
// reader that hands Server-Sent Events to the caller as they arrive (gates and bench time them).
// Plain HTTP only: the serving port is not the agent's mTLS API.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

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

struct Reply {
  unsigned status = 0;
  std::string body;
};

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

// What a streaming request ended with. When the status is not 200, or the reply was not an event
// stream, `body` holds the whole reply (an error document) and no event was delivered.
struct StreamEnd {
  unsigned status = 0;
  std::string body;
  bool saw_done = false;    // the stream ended with "data: [DONE]"
  bool stopped = false;     // on_event asked to stop early
  std::size_t events = 0;   // data events delivered (without [DONE])
};

// POST body to target and read the reply as Server-Sent Events. on_event gets each event's data
// (the lines after "data: ", joined by '\n') as soon as it is parsed, "[DONE]" excluded; return
// false to stop reading. A connection that breaks mid-stream is an error value that says how many
// events came first.
// Splits a byte stream into SSE events ("data:" lines joined by '\n'; comments and other fields
// skipped; LF or CRLF line ends). Exposed so the framing can be tested without a socket.
class SseDecoder {
 public:
  // Feeds bytes; calls on_data for each complete event with data. Returns false if on_data did.
  bool feed(const std::string& bytes, const std::function<bool(const std::string&)>& on_data);
  // At end of stream: an event whose blank line never came is still delivered.
  bool finish(const std::function<bool(const std::string&)>& on_data);

 private:
  bool line(std::string l, const std::function<bool(const std::string&)>& on_data);
  std::string pending_;  // bytes of an incomplete line
  std::string data_;     // data of the event being read
  bool has_data_ = false;
};

Result<StreamEnd> stream_sse(const Url& url, const std::string& target, const std::string& body,
                             const std::function<bool(const std::string& data)>& on_event,
                             const Options& options = {});

}  // namespace tandem::httpc
