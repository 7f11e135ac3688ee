// Beast's request parser as tandem-serve's server sets it up, and the HttpRequest a handler gets
// from the parsed message. Kept apart from the socket code so that the bytes-to-request path can
// be driven without a connection (fuzz/http_request_fuzz.cpp, tests/api).
#pragma once
#include <cstddef>
#include <utility>  // before Beast: Boost 1.74's Asio uses std::exchange without including it

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "http_server.hpp"

namespace tandem::engine::api {

using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;
using RequestMessage = RequestParser::value_type;

// The limits the server reads every request with (header and body sizes of `options`).
void configure_request_parser(RequestParser& parser, const HttpServerOptions& options);

// Method, target split into path and query, headers with lower-cased names, and the body.
HttpRequest to_http_request(RequestMessage&& msg);

}  // namespace tandem::engine::api
