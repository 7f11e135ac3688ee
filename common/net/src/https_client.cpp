// The Beast side of HttpsClient. Each step runs asynchronously on a private io_context so that
// tcp_stream's deadlines bound it, and the caller still sees one blocking call.
#include "tandem/net/https_client.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "tandem/net/blocking_step.hpp"
#include "tls_context.hpp"

namespace tandem::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

struct HttpsClient::Impl {
  ClientOptions options;
  ssl::context ssl{ssl::context::tls_client};
};

namespace {

http::request<http::string_body> make_request(const Endpoint& ep, const std::string& method,
                                              const std::string& target, const std::string& body) {
  http::request<http::string_body> req;
  const http::verb verb = http::string_to_verb(method);
  if (verb == http::verb::unknown) req.method_string(method);
  else req.method(verb);
  req.target(target);
  req.version(11);
  req.set(http::field::host, ep.node_name.empty() ? ep.host : ep.node_name);
  req.set(http::field::user_agent, "tandemctl");
  if (!body.empty()) req.set(http::field::content_type, "application/json");
  req.keep_alive(false);
  req.body() = body;
  req.prepare_payload();
  return req;
}

}  // namespace

HttpsClient::HttpsClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpsClient::~HttpsClient() = default;
HttpsClient::HttpsClient(HttpsClient&&) noexcept = default;
HttpsClient& HttpsClient::operator=(HttpsClient&&) noexcept = default;

Result<HttpsClient> HttpsClient::create(const ClientOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (Status s = configure_mtls(impl->ssl.native_handle(), TlsRole::client, options.ca_file,
                                options.cert_file, options.key_file);
      !s)
    return s.error().with_context("HTTPS client");
  return HttpsClient(std::move(impl));
}

Result<ClientResponse> HttpsClient::request(const Endpoint& ep, const std::string& method,
                                            const std::string& target,
                                            const std::string& body) const {
  return request(ep, method, target, body, impl_->options.io_timeout);
}

Result<ClientResponse> HttpsClient::request(const Endpoint& ep, const std::string& method,
                                            const std::string& target, const std::string& body,
                                            std::chrono::milliseconds io_timeout) const {
  const ClientOptions& o = impl_->options;
  const std::string where = ep.host + ":" + std::to_string(ep.port);
  asio::io_context ioc;
  beast::ssl_stream<beast::tcp_stream> stream(ioc, impl_->ssl);
  auto& tcp_layer = beast::get_lowest_layer(stream);
  auto fail = [&](const std::string& step, beast::error_code ec) {
    const std::string why = describe_tls_error(ec, stream.native_handle());
    // Under TLS 1.3 the server judges our certificate after our side of the handshake is done,
    // so its refusal arrives as an alert on a later read; say what it means rather than where.
    if (why.starts_with("peer sent TLS alert"))
      return Error{where + ": the server refused this client: " + why};
    return Error{where + ": " + step + " failed: " + why};
  };

  // SNI lets a node that serves several names pick the right certificate.
  // SSL_set_tlsext_host_name without its C cast; OpenSSL copies the name.
  if (!ep.node_name.empty() &&
      SSL_ctrl(stream.native_handle(), SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
               const_cast<char*>(ep.node_name.c_str())) != 1)
    return Error{where + ": cannot set SNI '" + ep.node_name + "'"};

  if (auto f = resolve_and_connect(ioc, tcp_layer, ep.host, ep.port, o.connect_timeout)) return fail(f.step, f.ec);

  tcp_layer.expires_after(o.handshake_timeout);
  beast::error_code ec = run_step(ioc, [&](auto done) { stream.async_handshake(ssl::stream_base::client, done); });
  if (ec) return fail("TLS handshake", ec);

  // The CA proves the certificate is ours; the CN proves it is the node we meant to reach.
  const std::string cn = peer_common_name(stream.native_handle());
  if (cn != ep.node_name)
    return Error{where + ": server certificate is for '" + cn + "', expected node '" +
                 ep.node_name + "'"};

  auto req = make_request(ep, method, target, body);
  tcp_layer.expires_after(io_timeout);
  ec = run_step(ioc, [&](auto done) { http::async_write(stream, req, done); });
  if (ec) return fail("sending the request", ec);

  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(o.response_limit);
  // The header first, so a large body (a staged file's chunk) is read into one allocation of its
  // announced length instead of a string grown and copied as it arrives.
  ec = run_step(ioc, [&](auto done) { http::async_read_header(stream, buffer, parser, done); });
  if (!ec) {
    if (auto n = parser.content_length(); n && *n <= o.response_limit) parser.get().body().reserve(static_cast<std::size_t>(*n));
    ec = run_step(ioc, [&](auto done) { http::async_read(stream, buffer, parser, done); });
  }
  if (ec) return fail("reading the response", ec);

  // A polite close; the answer is already in hand, so its outcome does not matter.
  tcp_layer.expires_after(std::min<std::chrono::milliseconds>(io_timeout, std::chrono::seconds(2)));
  run_step(ioc, [&](auto done) { stream.async_shutdown(done); });

  auto res = parser.release();
  std::string type(res[http::field::content_type]);
  return ClientResponse{res.result_int(), std::move(res.body()), std::move(type)};
}

}  // namespace tandem::net
