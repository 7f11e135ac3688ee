// A real server on 127.0.0.1 and the real client, with certificates made by our own PKI code.
#include <doctest/doctest.h>

#include <thread>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <mutex>

#include "raw_socket.hpp"
#include "tandem/net/http_client.hpp"
#include "tandem/net/https_server.hpp"
#include "tandem/net/pki.hpp"
#include "temp_dir.hpp"

using namespace tandem::net;
using tandem::Result;
using tandem::test::RawSocket;
using tandem::test::TempDir;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

struct Files {
  fs::path cert, key;
};

// One cluster PKI per test binary: key generation is the slow part and the tests only read it.
struct Cluster {
  TempDir tmp;
  PkiLayout pki;
  Credential ca;

  Cluster() {
    auto made = init_cluster_pki(tmp.path() / "pki", "controller",
                                 {{"node-a", {"127.0.0.1"}}, {"node-b", {"127.0.0.1"}}});
    REQUIRE_MESSAGE(made.ok(), made.error().message);
    pki = *made;
    auto read = read_credential(pki.ca_cert(), pki.ca_key());
    REQUIRE(read.ok());
    ca = *read;
  }

  Files leaf(const std::string& file, const Credential& issuer, const LeafSpec& spec) const {
    auto cred = issue_certificate(issuer, spec);
    REQUIRE_MESSAGE(cred.ok(), cred.error().message);
    Files f{tmp.path() / (file + ".pem"), tmp.path() / (file + ".key")};
    REQUIRE(write_credential(*cred, f.cert, f.key, Overwrite::yes).ok());
    return f;
  }
};

Cluster& cluster() {
  static Cluster c;
  return c;
}

// What the handlers touch, so tests can prove a refused request never reached them.
struct State {
  std::atomic<int> calls{0};
  std::mutex mu;
  int value = 0;
};

Router make_router(State& state) {
  Router r;
  r.on("GET", "/v1/whoami", [&state](const Request& req) {
    ++state.calls;
    return Response{200, {{"cn", req.client_cn}}};
  });
  r.on("POST", "/v1/value", [&state](const Request& req) {
    ++state.calls;
    auto body = req.json();
    if (!body) return Response::bad_request(body.error());
    std::lock_guard lock(state.mu);
    state.value = body->value("value", 0);
    return Response{200, {{"value", state.value}}};
  });
  r.on("POST", "/v1/size", [&state](const Request& req) {
    ++state.calls;
    return Response{200, {{"size", req.body.size()}}};
  });
  r.on("GET", "/v1/boom", [](const Request&) -> Response {
    throw std::runtime_error("secret internal detail");
  });
  return r;
}

ServerOptions server_options(const std::string& node = "node-a") {
  const auto& pki = cluster().pki;
  ServerOptions o;
  o.ca_file = pki.ca_cert();
  o.cert_file = pki.node_cert(node);
  o.key_file = pki.node_key(node);
  o.io_timeout = 5s;
  return o;
}

ClientOptions client_options(const Files& f) {
  ClientOptions o;
  o.ca_file = cluster().pki.ca_cert();
  o.cert_file = f.cert;
  o.key_file = f.key;
  o.connect_timeout = 2s;
  o.handshake_timeout = 5s;
  o.io_timeout = 10s;
  return o;
}

Files controller_files() { return {cluster().pki.controller_cert(), cluster().pki.controller_key()}; }

struct Harness {
  State state;
  std::unique_ptr<HttpsServer> server;

  explicit Harness(ServerOptions options = server_options()) {
    auto started = HttpsServer::start(std::move(options), make_router(state));
    REQUIRE_MESSAGE(started.ok(), started.error().message);
    server = std::move(*started);
  }
  ~Harness() { server->stop(); }

  Endpoint endpoint(const std::string& node = "node-a") const {
    return {"127.0.0.1", server->port(), node};
  }
  Result<ClientResponse> call(const ClientOptions& o, const std::string& method,
                              const std::string& target, const std::string& body = {},
                              const std::string& node = "node-a") const {
    auto client = HttpsClient::create(o);
    REQUIRE_MESSAGE(client.ok(), client.error().message);
    return client->request(endpoint(node), method, target, body);
  }
};

nlohmann::json body_of(const ClientResponse& r) { return nlohmann::json::parse(r.body); }

}  // namespace

TEST_CASE("mtls: a good request is served and the handler sees the client's CN") {
  Harness h;
  CHECK(h.server->port() != 0);
  auto res = h.call(client_options(controller_files()), "GET", "/v1/whoami");
  REQUIRE_MESSAGE(res.ok(), res.error().message);
  CHECK(res->status == 200);
  CHECK(body_of(*res)["cn"] == "controller");

  res = h.call(client_options(controller_files()), "POST", "/v1/value", R"({"value": 7})");
  REQUIRE(res.ok());
  CHECK(res->status == 200);
  CHECK(h.state.value == 7);
  CHECK(h.state.calls == 2);
}

TEST_CASE("mtls: a client without a certificate is refused") {
  Harness h;
  auto res = h.call(client_options({}), "GET", "/v1/whoami");
  REQUIRE_FALSE(res.ok());
  CHECK(has(res.error().message, "127.0.0.1:" + std::to_string(h.server->port())));
  CHECK(has(res.error().message, "the server refused this client"));
  CHECK(has(res.error().message, "certificate required"));
  CHECK(h.state.calls == 0);
}

TEST_CASE("mtls: a client certificate from another CA is refused") {
  Harness h;
  auto other_ca = make_ca({.common_name = "some other CA"});
  REQUIRE(other_ca.ok());
  const auto f = cluster().leaf("foreign", *other_ca,
                                {.common_name = "controller", .client_auth = true});
  auto res = h.call(client_options(f), "GET", "/v1/whoami");
  REQUIRE_FALSE(res.ok());
  CHECK(has(res.error().message, "the server refused this client"));
  CHECK(has(res.error().message, "unknown ca"));
  CHECK(h.state.calls == 0);
}

TEST_CASE("mtls: expired and not-yet-valid client certificates are refused") {
  Harness h;
  const auto expired = cluster().leaf(
      "expired", cluster().ca,
      {.common_name = "controller", .client_auth = true, .validity = {-48h, -24h}});
  auto res = h.call(client_options(expired), "GET", "/v1/whoami");
  REQUIRE_FALSE(res.ok());
  CHECK(has(res.error().message, "certificate expired"));

  const auto future = cluster().leaf(
      "future", cluster().ca,
      {.common_name = "controller", .client_auth = true, .validity = {24h, 48h}});
  res = h.call(client_options(future), "GET", "/v1/whoami");
  REQUIRE_FALSE(res.ok());
  CHECK(has(res.error().message, "bad certificate"));
  CHECK(h.state.calls == 0);
}

TEST_CASE("mtls: a node certificate is refused outside the peer prefix and served under it") {
  // Node certificates carry clientAuth so a worker's agent can pull staged files from the head's;
  // the server still serves them only the routes under ServerOptions::peer_prefix.
  ServerOptions o = server_options();
  o.allowed_client_cns = {"controller"};
  o.peer_prefix = "/v1/peer/";
  State state;
  Router r = make_router(state);
  r.on("GET", "/v1/peer/whoami", [&state](const Request& req) {
    ++state.calls;
    return Response{200, {{"cn", req.client_cn}}};
  });
  auto started = HttpsServer::start(std::move(o), std::move(r));
  REQUIRE_MESSAGE(started.ok(), started.error().message);
  auto client = HttpsClient::create(client_options({cluster().pki.node_cert("node-b"), cluster().pki.node_key("node-b")}));
  REQUIRE(client.ok());
  const Endpoint ep{"127.0.0.1", (*started)->port(), "node-a"};
  auto refused = client->get(ep, "/v1/whoami");
  REQUIRE_MESSAGE(refused.ok(), refused.error().message);
  CHECK(refused->status == 403);
  CHECK(has(refused->body, "client 'node-b' is not allowed here"));
  CHECK(state.calls == 0);
  auto served = client->get(ep, "/v1/peer/whoami");
  REQUIRE_MESSAGE(served.ok(), served.error().message);
  CHECK(served->status == 200);
  CHECK(has(served->body, "node-b"));
  CHECK(state.calls == 1);
}

TEST_CASE("mtls: the client refuses a server whose CN is not the expected node") {
  Harness h(server_options("node-b"));
  auto res = h.call(client_options(controller_files()), "GET", "/v1/whoami", {}, "node-a");
  REQUIRE_FALSE(res.ok());
  CHECK(res.error().message == "127.0.0.1:" + std::to_string(h.server->port()) +
                                   ": server certificate is for 'node-b', expected node 'node-a'");
  CHECK(h.state.calls == 0);
}

TEST_CASE("mtls: the client refuses a server signed by a CA it does not trust") {
  Harness h;
  auto other_ca = make_ca({.common_name = "some other CA"});
  REQUIRE(other_ca.ok());
  TempDir tmp;
  REQUIRE(write_file_atomic(tmp.path() / "other.pem", other_ca->cert_pem, 0644, Overwrite::no).ok());
  ClientOptions o = client_options(controller_files());
  o.ca_file = tmp.path() / "other.pem";
  auto res = h.call(o, "GET", "/v1/whoami");
  REQUIRE_FALSE(res.ok());
  CHECK(res.error().message == "127.0.0.1:" + std::to_string(h.server->port()) +
                                   ": TLS handshake failed: certificate verify failed "
                                   "(unable to get local issuer certificate)");
  CHECK(h.state.calls == 0);
}

TEST_CASE("mtls: a client certificate (clientAuth only) cannot act as a server") {
  ServerOptions o = server_options();
  o.cert_file = cluster().pki.controller_cert();
  o.key_file = cluster().pki.controller_key();
  Harness h(o);
  auto res = h.call(client_options(controller_files()), "GET", "/v1/whoami", {}, "controller");
  REQUIRE_FALSE(res.ok());
  CHECK(has(res.error().message,
            "TLS handshake failed: certificate verify failed (unsuitable certificate purpose)"));
}

TEST_CASE("mtls: a CN outside the allow-list gets 403 and the handler never runs") {
  ServerOptions o = server_options();
  o.allowed_client_cns = {"controller"};
  Harness h(o);
  const auto intruder =
      cluster().leaf("intruder", cluster().ca, {.common_name = "intruder", .client_auth = true});
  auto res = h.call(client_options(intruder), "GET", "/v1/whoami");
  REQUIRE_MESSAGE(res.ok(), res.error().message);
  CHECK(res->status == 403);
  CHECK(body_of(*res)["error"] == "client 'intruder' is not allowed here");
  CHECK(h.state.calls == 0);
  res = h.call(client_options(controller_files()), "GET", "/v1/whoami");
  REQUIRE(res.ok());
  CHECK(res->status == 200);
}

TEST_CASE("mtls: a plaintext HTTP request to the TLS port gets no HTTP answer") {
  Harness h;
  RawSocket s(h.server->port());
  REQUIRE(s.connected());
  s.send_all("GET /v1/whoami HTTP/1.1\r\nHost: node-a\r\n\r\n");
  bool closed = false;
  const std::string reply = s.read_until_close(5, closed);
  CHECK(closed);
  CHECK_FALSE(has(reply, "HTTP/"));
  CHECK_FALSE(has(reply, "controller"));
  CHECK(h.state.calls == 0);
}

TEST_CASE("mtls: a silent client is dropped after the handshake timeout") {
  ServerOptions o = server_options();
  o.io_timeout = 300ms;
  Harness h(o);
  RawSocket s(h.server->port());
  REQUIRE(s.connected());
  const auto start = std::chrono::steady_clock::now();
  bool closed = false;
  (void)s.read_until_close(5, closed);
  CHECK(closed);
  CHECK(std::chrono::steady_clock::now() - start < 3s);
}

TEST_CASE("mtls: a body over the limit gets 413 and the handler never runs") {
  SUBCASE("the default 1 MiB limit") {
    Harness h;
    auto res = h.call(client_options(controller_files()), "POST", "/v1/size",
                      std::string(1024 * 1024 + 1, 'x'));
    REQUIRE_MESSAGE(res.ok(), res.error().message);
    CHECK(res->status == 413);
    CHECK(body_of(*res)["error"] == "request body exceeds the limit of 1048576 bytes");
    CHECK(h.state.calls == 0);
    res = h.call(client_options(controller_files()), "POST", "/v1/size",
                 std::string(1024 * 1024, 'x'));
    REQUIRE(res.ok());
    CHECK(res->status == 200);
    CHECK(body_of(*res)["size"] == 1024 * 1024);
  }
  SUBCASE("a configured limit") {
    ServerOptions o = server_options();
    o.body_limit = 100;
    Harness h(o);
    auto res = h.call(client_options(controller_files()), "POST", "/v1/size", std::string(101, 'x'));
    REQUIRE(res.ok());
    CHECK(res->status == 413);
    CHECK(h.state.calls == 0);
    res = h.call(client_options(controller_files()), "POST", "/v1/size", std::string(100, 'x'));
    REQUIRE(res.ok());
    CHECK(res->status == 200);
  }
  SUBCASE("a larger limit for one prefix only (an agent's pushed stage chunks)") {
    ServerOptions o = server_options();
    o.body_limit = 100;
    o.large_body_prefix = "/v1/size";
    o.large_body_limit = 1000;
    Harness h(o);
    auto res = h.call(client_options(controller_files()), "POST", "/v1/size", std::string(1000, 'x'));
    REQUIRE(res.ok());
    CHECK(res->status == 200);
    CHECK(body_of(*res)["size"] == 1000);
    res = h.call(client_options(controller_files()), "POST", "/v1/size", std::string(1001, 'x'));
    REQUIRE(res.ok());
    CHECK(res->status == 413);
    CHECK(body_of(*res)["error"] == "request body exceeds the limit of 1000 bytes");
    res = h.call(client_options(controller_files()), "POST", "/v1/value", std::string(101, 'x'));
    REQUIRE(res.ok());
    CHECK(res->status == 413);
    CHECK(body_of(*res)["error"] == "request body exceeds the limit of 100 bytes");
    CHECK(h.state.calls == 1);
  }
}

TEST_CASE("mtls: bad JSON gets 400 naming the position, and the state is unchanged") {
  Harness h;
  REQUIRE(h.call(client_options(controller_files()), "POST", "/v1/value", R"({"value": 3})")->status ==
          200);
  auto res = h.call(client_options(controller_files()), "POST", "/v1/value", R"({"value": 5,)");
  REQUIRE(res.ok());
  CHECK(res->status == 400);
  const std::string err = body_of(*res)["error"];
  CHECK(has(err, "malformed JSON body"));
  CHECK(has(err, "line 1, column 13"));
  CHECK(h.state.value == 3);
}

TEST_CASE("mtls: unknown path 404, wrong method 405, a throwing handler 500 without details") {
  Harness h;
  const auto o = client_options(controller_files());
  auto res = h.call(o, "GET", "/v1/nothing-here");
  REQUIRE(res.ok());
  CHECK(res->status == 404);
  CHECK(body_of(*res)["error"] == "no such endpoint: /v1/nothing-here");
  res = h.call(o, "DELETE", "/v1/whoami");
  REQUIRE(res.ok());
  CHECK(res->status == 405);
  res = h.call(o, "GET", "/v1/boom");
  REQUIRE(res.ok());
  CHECK(res->status == 500);
  CHECK_FALSE(has(res->body, "secret"));
}

TEST_CASE("mtls: after stop() the port no longer answers") {
  Harness h;
  const Endpoint ep = h.endpoint();
  h.server->stop();
  h.server->stop();  // idempotent
  auto client = HttpsClient::create(client_options(controller_files()));
  REQUIRE(client.ok());
  auto res = client->get(ep, "/v1/whoami");
  REQUIRE_FALSE(res.ok());
  CHECK(has(res.error().message, "connecting failed"));
}

TEST_CASE("server and client report bad certificate paths as errors, not crashes") {
  ServerOptions o = server_options();
  o.key_file = "/nonexistent/node.key";
  auto s = HttpsServer::start(o, Router{});
  REQUIRE_FALSE(s.ok());
  CHECK(has(s.error().message, "HTTPS server: /nonexistent/node.key: loading the private key"));
  ClientOptions c = client_options(controller_files());
  c.ca_file = "/nonexistent/ca.pem";
  auto cl = HttpsClient::create(c);
  REQUIRE_FALSE(cl.ok());
  CHECK(has(cl.error().message, "/nonexistent/ca.pem"));
}

TEST_CASE("mtls: a kept connection carries several requests and survives the server closing it while idle") {
  ServerOptions so = server_options();
  so.io_timeout = 1s;  // the server drops a connection idle this long
  Harness h(so);
  auto client = HttpsClient::create(client_options(controller_files()));
  REQUIRE(client.ok());
  KeptConnection kept(*client, h.endpoint());
  for (int i = 1; i <= 3; ++i) {
    auto r = kept.request("POST", "/v1/value", nlohmann::json{{"value", i}}.dump(), 5s);
    REQUIRE_MESSAGE(r.ok(), r.error().message);
    CHECK(body_of(*r)["value"] == i);
  }
  std::this_thread::sleep_for(1500ms);  // the server has closed it by now
  auto r = kept.request("GET", "/v1/whoami", {}, 5s);
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  CHECK(body_of(*r)["cn"] == "controller");
  CHECK(h.state.calls == 4);
}
