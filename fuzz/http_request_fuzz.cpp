// tandem-serve's HTTP request parsing: Beast's parser configured as the server configures it,
// fed the input the way a socket delivers it (in pieces: the first byte picks their size), and
// each complete request turned into the HttpRequest a handler gets. Keep-alive requests that
// follow in the same bytes are parsed too, as the session does.
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>

#include "fuzz_check.hpp"
#include "http_request.hpp"

namespace beast = boost::beast;
namespace http = beast::http;
using namespace tandem::engine::api;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t piece = 1 + data[0];
  std::string_view wire(reinterpret_cast<const char*>(data) + 1, size - 1);
  const HttpServerOptions server;  // the limits tandem-serve runs with unless told otherwise

  beast::flat_buffer buffer;
  for (int request = 0; request < 16; ++request) {
    RequestParser parser;
    configure_request_parser(parser, server);
    beast::error_code ec;
    while (!parser.is_done()) {
      if (buffer.size() == 0 || ec == http::error::need_more) {
        if (wire.empty()) {
          if (!parser.got_some()) return 0;  // the client closed between requests: Beast's end_of_stream
          parser.put_eof(ec);
          break;
        }
        const std::size_t n = std::min(piece, wire.size());
        auto dst = buffer.prepare(n);
        std::memcpy(dst.data(), wire.data(), n);
        buffer.commit(n);
        wire.remove_prefix(n);
      }
      ec = {};
      const std::size_t used = parser.put(buffer.data(), ec);
      buffer.consume(used);
      if (ec && ec != http::error::need_more) break;
    }
    if (!parser.is_done() || (ec && ec != http::error::need_more)) return 0;  // the server answers 400 or 413
    const bool keep_alive = parser.get().keep_alive();
    const HttpRequest req = to_http_request(parser.release());
    tandem::fuzz::check(!req.method.empty() && !req.target.empty(), "a request without a method or target");
    for (const auto& [name, value] : req.headers)
      tandem::fuzz::check(std::none_of(name.begin(), name.end(), [](unsigned char c) { return std::isupper(c); }),
                          "a header name the routes would not find (not lower-cased)");
    if (!keep_alive) return 0;
  }
  return 0;
}
