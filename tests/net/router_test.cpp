#include <doctest/doctest.h>

#include <stdexcept>

#include "tandem/net/router.hpp"

using namespace tandem::net;

namespace {

Request make(std::string method, std::string path, std::string body = {}) {
  Request r;
  r.method = std::move(method);
  r.path = path;
  r.target = std::move(path);
  r.body = std::move(body);
  return r;
}

std::string said(const Response& r) { return r.body.value("error", std::string{}); }

}  // namespace

TEST_CASE("router: exact beats prefix, the longest prefix wins, path_tail is the rest") {
  Router router;
  router.on("GET", "/v1/files", [](const Request&) { return Response{200, {{"r", "exact"}}}; })
      .on_prefix("GET", "/v1/", [](const Request& r) {
        return Response{200, {{"r", "short"}, {"tail", r.path_tail}}};
      })
      .on_prefix("GET", "/v1/files/", [](const Request& r) {
        return Response{200, {{"r", "long"}, {"tail", r.path_tail}}};
      });
  auto req = make("GET", "/v1/files");
  CHECK(router.dispatch(req).body["r"] == "exact");
  req = make("GET", "/v1/files/models/a.gguf");
  auto res = router.dispatch(req);
  CHECK(res.body["r"] == "long");
  CHECK(res.body["tail"] == "models/a.gguf");
  req = make("GET", "/v1/status");
  CHECK(router.dispatch(req).body["tail"] == "status");
}

TEST_CASE("router: 404 for unknown paths, 405 with Allow for the wrong method") {
  Router router;
  router.on("GET", "/x", [](const Request&) { return Response{}; })
      .on("PUT", "/x", [](const Request&) { return Response{}; });
  auto req = make("GET", "/nope");
  auto res = router.dispatch(req);
  CHECK(res.status == 404);
  CHECK(said(res) == "no such endpoint: /nope");
  req = make("DELETE", "/x");
  res = router.dispatch(req);
  CHECK(res.status == 405);
  CHECK(said(res) == "DELETE is not allowed on /x (allowed: GET, PUT)");
  REQUIRE(res.headers.size() == 1);
  CHECK(res.headers[0] == std::pair<std::string, std::string>{"Allow", "GET, PUT"});
}

TEST_CASE("router: a throwing handler is a 500 that does not leak the exception") {
  Router router;
  router.on("GET", "/boom", [](const Request&) -> Response {
    throw std::runtime_error("password=hunter2 in /etc/secret");
  });
  auto req = make("GET", "/boom");
  auto res = router.dispatch(req);
  CHECK(res.status == 500);
  CHECK(res.body.dump().find("hunter2") == std::string::npos);
  CHECK(said(res) == "internal error");
}

TEST_CASE("router: on_json answers malformed bodies 400 with the position, handler not run") {
  int runs = 0;
  Router router;
  router.on_json("POST", "/j", [&](const Request&, const nlohmann::json& j) {
    ++runs;
    return Response{200, {{"got", j}}};
  });
  auto req = make("POST", "/j", R"({"a": 1,})");
  auto res = router.dispatch(req);
  CHECK(res.status == 400);
  CHECK(said(res).find("malformed JSON body (byte 9)") == 0);
  CHECK(said(res).find("line 1, column 9") != std::string::npos);
  req = make("POST", "/j", "");
  CHECK(said(router.dispatch(req)) == "request body is empty; expected JSON");
  CHECK(runs == 0);
  req = make("POST", "/j", R"({"a": 1})");
  res = router.dispatch(req);
  CHECK(res.status == 200);
  CHECK(res.body["got"]["a"] == 1);
  CHECK(runs == 1);
}

TEST_CASE("request: query parameters are percent-decoded") {
  Request r;
  r.query = "lines=200&path=%2Fdev%2Fshm%2Ftorch_1&flag&name=a+b";
  CHECK(r.query_param("lines") == "200");
  CHECK(r.query_param("path") == "/dev/shm/torch_1");
  CHECK(r.query_param("flag") == "");
  CHECK(r.query_param("name") == "a b");
  CHECK_FALSE(r.query_param("absent").has_value());
}

TEST_CASE("request: a percent-encoded value comes back from query_param as it was") {
  const std::string path = "/models/a b+c/ü%20.safetensors";
  CHECK(percent_encode(path) == "%2Fmodels%2Fa%20b%2Bc%2F%C3%BC%2520.safetensors");
  Request r;
  r.query = "path=" + percent_encode(path) + "&offset=0";
  CHECK(r.query_param("path") == path);
}
